package dockerchaos

// The harness of the tests against the real Docker Engine: TestMain builds
// a static troop binary and two tiny images from scratch, with nothing
// pulled from a registry; every container and image it creates carries the
// run's label and is removed when its test (or the run) ends.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/troop-lab/troop/internal/rootfs"
)

// runLabel is on every container and image the tests create; its value is
// the run's random ID, so that a test only ever touches its own.
const runLabel = "dev.troop.chaos-test"

var (
	runID      string
	api        *client.Client
	engineErr  error  // set when no engine answers: the tests skip
	troopBin   string // the static troop binary, for what runs on the host (a delay's queue)
	troopImage string // FROM scratch: the static troop binary and a node config
	shellImage string // troopImage plus this host's /bin/sh and sleep with their libraries, or "" (shellErr)
	shellErr   error
)

// nodeConfig makes troop node serve in front of a redis-server that is
// never there (port 1 on loopback): it stays up, answers on its ports and
// logs that its datastore does not answer.
const nodeConfig = `troop:
  listen: 0.0.0.0:8102
  dyn_listen: 0.0.0.0:8101
  stats_listen: 0.0.0.0:22222
  tokens: '0'
  servers:
  - 127.0.0.1:1:1
`

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var b [6]byte
	rand.Read(b[:])
	runID = hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // go build on a busy machine
	defer cancel()
	var err error
	api, err = client.New(client.FromEnv)
	if err == nil {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = api.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
		pcancel()
	}
	if err != nil {
		engineErr = err
		return m.Run()
	}
	defer api.Close()

	dir, err := os.MkdirTemp("", "dockerchaos-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := buildImages(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "dockerchaos tests:", err)
		removeImages()
		return 1
	}
	defer removeImages()
	return m.Run()
}

func buildImages(ctx context.Context, dir string) error {
	bin := filepath.Join(dir, "troop")
	// The flags that change what is compiled are make test's own
	// (CGO_ENABLED=0, no -trimpath), so this build reuses its packages and
	// only links; -ldflags acts at the link alone.
	build := exec.CommandContext(ctx, "go", "build", "-ldflags=-s -w", "-o", bin, "github.com/troop-lab/troop/cmd/troop")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build a static troop: %w\n%s", err, out)
	}
	if err := rootfs.CheckStatic(bin); err != nil {
		return err
	}
	troopBin = bin
	troop, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	troopImage = "troop-chaos-test:" + runID
	err = buildImage(ctx, troopImage, map[string][]byte{
		"Dockerfile": []byte("FROM scratch\nCOPY troop node.yml /\nENTRYPOINT [\"/troop\"]\nCMD [\"node\", \"--config\", \"/node.yml\"]\n"),
		"troop":      troop,
		"node.yml":   []byte(nodeConfig),
	})
	if err != nil {
		return err
	}
	shell := rootfs.New()
	for _, prog := range []string{"/bin/sh", "sleep"} {
		if err := shell.AddProgram("/bin/"+filepath.Base(prog), prog); err != nil {
			shellErr = err
			return nil
		}
	}
	files := map[string][]byte{}
	shell.Files(func(p string, data []byte) { files["rootfs"+p] = data })
	files["Dockerfile"] = []byte("FROM " + troopImage + "\nCOPY rootfs/ /\n")
	shellImage = "troop-chaos-test-sh:" + runID
	if err := buildImage(ctx, shellImage, files); err != nil {
		shellImage = ""
		return err
	}
	return nil
}

// buildImage builds tag from a build context of files with the engine's
// image build API, labelled with the run.
func buildImage(ctx context.Context, tag string, files map[string][]byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range files {
		hdr := &tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	res, err := api.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		Labels:      map[string]string{runLabel: runID},
	})
	if err != nil {
		return fmt.Errorf("build image %s: %w", tag, err)
	}
	defer res.Body.Close()
	// The build reports its errors inside the stream of JSON messages.
	dec := json.NewDecoder(res.Body)
	var log strings.Builder
	for {
		var msg struct {
			Stream string `json:"stream"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("build image %s: %w", tag, err)
		}
		log.WriteString(msg.Stream)
		if msg.Error != "" {
			return fmt.Errorf("build image %s: %s\n%s", tag, msg.Error, log.String())
		}
	}
}

func removeImages() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, img := range []string{shellImage, troopImage} {
		if img == "" {
			continue
		}
		if _, err := api.ImageRemove(ctx, img, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil {
			fmt.Fprintf(os.Stderr, "dockerchaos tests: remove image %s: %v\n", img, err)
		}
	}
}

// needEngine skips the test, saying so plainly, when no engine answers.
func needEngine(t *testing.T) {
	t.Helper()
	if engineErr != nil {
		t.Skipf("skipped: no Docker Engine answers (DOCKER_HOST=%q): %v", os.Getenv("DOCKER_HOST"), engineErr)
	}
}

// spec is a container the test wants.
type spec struct {
	image   string            // default troopImage
	labels  map[string]string // besides the run's label
	restart container.RestartPolicyMode
	health  bool // a healthcheck every second
	stopped bool // created, not started
}

// run creates (and starts) a container and removes it when the test ends,
// whatever its outcome.
func run(t *testing.T, s spec) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	labels := map[string]string{runLabel: runID}
	for k, v := range s.labels {
		labels[k] = v
	}
	cfg := &container.Config{Image: troopImage, Labels: labels, StopTimeout: new(2)}
	if s.image != "" {
		cfg.Image = s.image
	}
	if s.health {
		cfg.Healthcheck = &container.HealthConfig{
			// The check runs the node's own config check: the image has no
			// other program to probe with.
			Test:     []string{"CMD", "/troop", "node", "--test-conf", "--config", "/node.yml"},
			Interval: time.Second,
			Timeout:  10 * time.Second,
			Retries:  3,
		}
	}
	hc := &container.HostConfig{
		RestartPolicy: container.RestartPolicy{Name: s.restart},
		Resources:     container.Resources{NanoCPUs: 500_000_000}, // half a CPU, whatever a burn does
	}
	res, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc})
	if err != nil {
		t.Fatalf("create container: %v", err)
	}
	id := res.ID
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove container %.12s: %v", id, err)
		}
	})
	if !s.stopped {
		if _, err := api.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
			t.Fatalf("start container %.12s: %v", id, err)
		}
	}
	return id
}

func inspect(t *testing.T, id string) container.InspectResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect %.12s: %v", id, err)
	}
	return res.Container
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitWhole(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		waitFor(t, 30*time.Second, "container "+id[:12]+" not running and healthy", func() bool {
			return whole(inspect(t, id)) == ""
		})
	}
}
