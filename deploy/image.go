// Package deploy builds troop's container image with no registry: a static
// troop, this host's redis-server and bash with the libraries they load,
// and an entrypoint that runs a node and its redis-server together. They are
// assembled into a root file system and imported into a Docker Engine, as
// `docker import` does. deploy/compose and deploy/k8s run the image
// (docs/deploy.md).
package deploy

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/moby/moby/client"

	"github.com/troop-lab/troop/internal/rootfs"
)

//go:embed entrypoint.sh
var entrypoint []byte

// Paths in the image.
const (
	TroopPath      = "/usr/bin/troop"
	EntrypointPath = "/usr/bin/troop-entrypoint"
	ConfigDir      = "/etc/troop" // where a node's config is mounted
	DataDir        = "/data"      // redis-server's files; troop_data_dir goes under it
)

// Changes are the image's settings, in the form `docker import --change`
// takes: the entrypoint gets `troop node`'s flags as its arguments.
var Changes = []string{
	`ENTRYPOINT ["` + EntrypointPath + `"]`,
	`CMD ["--config", "` + ConfigDir + `/node.yml"]`,
	"ENV PATH=/usr/bin:/bin",
	"WORKDIR " + DataDir,
	"EXPOSE 8101 8102 22222",
}

// Rootfs assembles the image's files: troopBin (which must be static), this
// host's redis-server and bash with their loader and libraries, and the
// entrypoint script.
func Rootfs(troopBin string) (*rootfs.FS, error) {
	if err := rootfs.CheckStatic(troopBin); err != nil {
		return nil, err
	}
	fs := rootfs.New()
	if err := fs.AddProgram(TroopPath, troopBin); err != nil {
		return nil, err
	}
	for _, prog := range []string{"redis-server", "bash"} {
		if err := fs.AddProgram("/usr/bin/"+prog, prog); err != nil {
			return nil, fmt.Errorf("the image needs %s from this host: %w", prog, err)
		}
	}
	fs.AddFile(EntrypointPath, entrypoint, 0o755)
	fs.AddDir(ConfigDir, 0o755)
	fs.AddDir(DataDir, 0o755)
	fs.AddDir("/tmp", 0o1777)
	return fs, nil
}

// Import loads fs into the engine as the image ref, with Changes and a
// LABEL for each of labels, and returns the image's ID.
func Import(ctx context.Context, api *client.Client, fs *rootfs.FS, ref string, labels map[string]string) (string, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(fs.WriteTar(pw)) }()
	defer pr.Close()
	changes := append([]string(nil), Changes...)
	for k, v := range labels {
		changes = append(changes, fmt.Sprintf("LABEL %s=%q", k, v))
	}
	res, err := api.ImageImport(ctx, client.ImageImportSource{Source: pr, SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: changes, Message: "troop image: static troop, redis-server, bash"})
	if err != nil {
		return "", fmt.Errorf("import image %s: %w", ref, err)
	}
	defer res.Close()
	// The engine reports progress and errors as a stream of JSON messages;
	// the last status is the new image's ID.
	dec := json.NewDecoder(res)
	var id string
	for {
		var msg struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", fmt.Errorf("import image %s: %w", ref, err)
		}
		if msg.Error != "" {
			return "", fmt.Errorf("import image %s: %s", ref, msg.Error)
		}
		if strings.HasPrefix(msg.Status, "sha256:") {
			id = msg.Status
		}
	}
	if id == "" {
		return "", fmt.Errorf("import image %s: the engine named no image", ref)
	}
	return id, nil
}
