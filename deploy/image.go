// Package deploy builds troop's two container images with no registry. The
// node image, troop-node, is what a store node runs: the static troop-node
// (the node alone), this host's redis-server and bash with the libraries
// they load, and an entrypoint that runs a node and its redis-server
// together. The troop image carries the whole static troop and bash, for
// the verbs that drive a cluster from inside it (troop bench's shards).
// Each is assembled into a root file system and imported into a Docker
// Engine, as `docker import` does. deploy/compose and deploy/k8s run them
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

// Paths in the images.
const (
	TroopNodePath  = "/usr/bin/troop-node" // in the node image
	TroopPath      = "/usr/bin/troop"      // in the troop image
	EntrypointPath = "/usr/bin/troop-entrypoint"
	ConfigDir      = "/etc/troop" // where a node's config is mounted
	DataDir        = "/data"      // redis-server's files; troop_data_dir goes under it
)

// An Image is a root file system and its settings, in the form `docker
// import --change` takes.
type Image struct {
	FS      *rootfs.FS
	Changes []string
	Message string // the import's commit message
}

// NodeImage assembles the node image: troopNode (which must be static), this
// host's redis-server and bash with their loader and libraries, and the
// entrypoint script, which gets troop-node's flags as its arguments.
func NodeImage(troopNode string) (*Image, error) {
	fs, err := staticWithBash(TroopNodePath, troopNode, "redis-server")
	if err != nil {
		return nil, err
	}
	fs.AddFile(EntrypointPath, entrypoint, 0o755)
	fs.AddDir(ConfigDir, 0o755)
	fs.AddDir(DataDir, 0o755)
	return &Image{FS: fs, Message: "troop-node image: static troop-node, redis-server, bash", Changes: []string{
		`ENTRYPOINT ["` + EntrypointPath + `"]`,
		`CMD ["--config", "` + ConfigDir + `/node.yml"]`,
		"ENV PATH=/usr/bin:/bin",
		"WORKDIR " + DataDir,
		"EXPOSE 8101 8102 22222",
	}}, nil
}

// TroopImage assembles the troop image: troop (which must be static) as its
// entrypoint, and this host's bash, which the bench's shard scripts run in.
func TroopImage(troop string) (*Image, error) {
	fs, err := staticWithBash(TroopPath, troop)
	if err != nil {
		return nil, err
	}
	return &Image{FS: fs, Message: "troop image: static troop, bash", Changes: []string{
		`ENTRYPOINT ["` + TroopPath + `"]`,
		"ENV PATH=/usr/bin:/bin",
	}}, nil
}

// staticWithBash is a root file system with the static binary bin at path,
// and bash and progs from this host with their loader and libraries.
func staticWithBash(path, bin string, progs ...string) (*rootfs.FS, error) {
	if err := rootfs.CheckStatic(bin); err != nil {
		return nil, err
	}
	fs := rootfs.New()
	if err := fs.AddProgram(path, bin); err != nil {
		return nil, err
	}
	for _, prog := range append(progs, "bash") {
		if err := fs.AddProgram("/usr/bin/"+prog, prog); err != nil {
			return nil, fmt.Errorf("the image needs %s from this host: %w", prog, err)
		}
	}
	fs.AddDir("/tmp", 0o1777)
	return fs, nil
}

// Import loads img into the engine as the image ref, with its changes and
// a LABEL for each of labels, and returns the image's ID.
func Import(ctx context.Context, api *client.Client, img *Image, ref string, labels map[string]string) (string, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(img.FS.WriteTar(pw)) }()
	defer pr.Close()
	changes := append([]string(nil), img.Changes...)
	for k, v := range labels {
		changes = append(changes, fmt.Sprintf("LABEL %s=%q", k, v))
	}
	res, err := api.ImageImport(ctx, client.ImageImportSource{Source: pr, SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: changes, Message: img.Message})
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
