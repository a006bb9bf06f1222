package deploy

// The image against the real Docker Engine: the test builds it as make image
// does, runs the services of compose/docker-compose.yml on a network of its
// own (each container named on it by its service, with the compose file's
// command, hostname, config files and healthcheck), and runs the lab's
// quorum checks through the containers. Every container, network and image
// it creates carries the run's label and is removed when the test ends,
// whatever its outcome.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/troop-lab/troop/internal/rootfs"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/topology"
)

const runLabel = "dev.troop.deploy-test"

// composeFile is what the test reads of the Compose file.
type composeFile struct {
	Services map[string]struct {
		Hostname    string   `yaml:"hostname"`
		Command     []string `yaml:"command"`
		Volumes     []string `yaml:"volumes"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

// service is one started container of the cluster.
type service struct {
	name, id string
	node     lab.Node // Listen and StatsListen at the container's address
}

func engine(t *testing.T) *client.Client {
	t.Helper()
	api, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = api.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
	}
	if err != nil {
		t.Skipf("skipped: no Docker Engine answers (DOCKER_HOST=%q): %v", os.Getenv("DOCKER_HOST"), err)
	}
	t.Cleanup(func() { api.Close() })
	return api
}

// buildImage builds a static troop and imports the image, as make image does.
func buildImage(t *testing.T, api *client.Client, runID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // go build on a busy machine
	defer cancel()
	bin := filepath.Join(t.TempDir(), "troop")
	// CGO_ENABLED=0 as in make test, so that this build reuses its packages
	// and only links.
	build := exec.CommandContext(ctx, "go", "build", "-ldflags=-s -w", "-o", bin, "github.com/troop-lab/troop/cmd/troop")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build a static troop: %v\n%s", err, out)
	}
	fs, err := Rootfs(bin)
	if err != nil {
		t.Fatal(err)
	}
	tag := "troop-deploy-test:" + runID
	id, err := Import(ctx, api, fs, tag, map[string]string{runLabel: runID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := api.ImageRemove(ctx, id, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove image %s: %v", tag, err)
		}
	})
	t.Logf("image %s: %.1f MB of files", tag, float64(fs.Size())/1e6)
	return tag
}

// startCompose runs the Compose file's services from image on a new
// network, and returns them sorted by name once each answers PING.
func startCompose(t *testing.T, api *client.Client, runID, image, composePath string) []service {
	t.Helper()
	data, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(data, &cf); err != nil {
		t.Fatalf("%s: %v", composePath, err)
	}
	if len(cf.Services) != 3 {
		t.Fatalf("%s: %d services, want 3 (one per rack)", composePath, len(cf.Services))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	labels := map[string]string{runLabel: runID}
	netName := "troop-deploy-test-" + runID
	nw, err := api.NetworkCreate(ctx, netName, client.NetworkCreateOptions{Driver: "bridge", Labels: labels})
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	t.Cleanup(func() { // registered first, so it runs after the containers are gone
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := api.NetworkRemove(ctx, nw.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("remove network %s: %v", netName, err)
		}
	})

	var out []service
	for name, s := range cf.Services {
		// Compose reads $$ as a literal $.
		health := make([]string, len(s.Healthcheck.Test))
		for i, a := range s.Healthcheck.Test {
			health[i] = strings.ReplaceAll(a, "$$", "$")
		}
		cfg := &container.Config{
			Image: image, Hostname: s.Hostname, Cmd: s.Command, Labels: labels, StopTimeout: new(2),
			Healthcheck: &container.HealthConfig{Test: health, Interval: 500 * time.Millisecond, Timeout: 3 * time.Second, Retries: 3},
		}
		res, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name: netName + "-" + name, Config: cfg, HostConfig: &container.HostConfig{},
			NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netName: {Aliases: []string{name}}}},
		})
		if err != nil {
			t.Fatalf("create container for %s: %v", name, err)
		}
		id := res.ID
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
				t.Errorf("remove container %s: %v", name, err)
			}
		})
		cfgFile := copyBindMounts(t, api, ctx, id, filepath.Dir(composePath), s.Volumes, s.Command)
		if _, err := api.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		c, err := api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := c.Container.NetworkSettings.Networks[netName].IPAddress.String()
		out = append(out, service{name: name, id: id, node: lab.Node{
			Name:        cfgFile.Name,
			Listen:      net.JoinHostPort(ip, port(t, cfgFile.Listen)),
			StatsListen: net.JoinHostPort(ip, port(t, cfgFile.StatsListen)),
		}})
	}
	slices.SortFunc(out, func(a, b service) int { return strings.Compare(a.name, b.name) })
	for _, s := range out {
		waitFor(t, 20*time.Second, s.name+" answers PING", func() bool { return lab.Ping(ctx, s.node.Listen) == nil })
	}
	nodes := make([]lab.Node, len(out))
	for i, s := range out {
		nodes[i] = s.node
	}
	if err := lab.WaitMeshed(ctx, nodes, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, s := range out {
		waitFor(t, 20*time.Second, s.name+" healthy by the compose file's healthcheck", func() bool {
			c, err := api.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
			return err == nil && c.Container.State.Health != nil && c.Container.State.Health.Status == container.Healthy
		})
	}
	return out
}

// copyBindMounts copies the host side of each bind mount ("./dir:/path",
// relative to the Compose file) into the container, which works with an
// engine on another machine too, and returns the node config the command's
// --config names, parsed.
func copyBindMounts(t *testing.T, api *client.Client, ctx context.Context, id, dir string, volumes, command []string) *topology.Config {
	t.Helper()
	fs := rootfs.New()
	host := map[string]string{} // container path -> host path
	for _, v := range volumes {
		parts := strings.Split(v, ":")
		if !strings.HasPrefix(parts[0], ".") {
			continue // a named volume: the container's own files stand in
		}
		src := filepath.Join(dir, parts[0])
		entries, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			fs.AddFile(parts[1]+"/"+e.Name(), data, 0o644)
			host[parts[1]+"/"+e.Name()] = filepath.Join(src, e.Name())
		}
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(fs.WriteTar(pw)) }()
	if _, err := api.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: pr}); err != nil {
		t.Fatalf("copy config files: %v", err)
	}
	i := slices.Index(command, "--config")
	if i < 0 || i+1 == len(command) || host[command[i+1]] == "" {
		t.Fatalf("command %q: want --config naming a file of a bind mount", command)
	}
	cfg, err := topology.Load(host[command[i+1]])
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: not yet: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// at returns a client of the node at addr whose connections use level.
func at(t *testing.T, addr, level string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, MaxRetries: -1, ReadTimeout: 10 * time.Second,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.Do(ctx, "TROOP", "CONSISTENCY", level).Err()
		},
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// The image runs the Compose file's 3-rack cluster: a write at DC_QUORUM
// through one container reads back through every container at every
// level; with one container killed, DC_QUORUM still writes and reads
// through the other two.
func TestComposeClusterServesQuorum(t *testing.T) {
	api := engine(t)
	var b [6]byte
	rand.Read(b[:])
	runID := hex.EncodeToString(b[:])
	image := buildImage(t, api, runID)
	svcs := startCompose(t, api, runID, image, "compose/docker-compose.yml")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := at(t, svcs[0].node.Listen, "DC_QUORUM")
	for i := 0; i < 20; i++ {
		if err := w.Set(ctx, "k"+strconv.Itoa(i), "v"+strconv.Itoa(i), 0).Err(); err != nil {
			t.Fatalf("SET k%d through %s: %v", i, svcs[0].name, err)
		}
	}
	for _, s := range svcs {
		for _, level := range []string{"DC_QUORUM", "DC_SAFE_QUORUM", "DC_ONE"} {
			c := at(t, s.node.Listen, level)
			for i := 0; i < 20; i++ {
				key, want := "k"+strconv.Itoa(i), "v"+strconv.Itoa(i)
				// DC_ONE may read the one replica a quorum write had not reached yet.
				waitFor(t, 2*time.Second, fmt.Sprintf("%s %s GET %s = %s", s.name, level, key, want), func() bool {
					got, err := c.Get(ctx, key).Result()
					return err == nil && got == want
				})
			}
		}
	}

	victim := svcs[2]
	if _, err := api.ContainerKill(ctx, victim.id, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		t.Fatalf("kill %s: %v", victim.name, err)
	}
	for i, s := range svcs[:2] {
		c, other := at(t, s.node.Listen, "DC_QUORUM"), at(t, svcs[1-i].node.Listen, "DC_QUORUM")
		key := "after-kill-" + s.name
		if err := c.Set(ctx, key, s.name, 0).Err(); err != nil {
			t.Fatalf("DC_QUORUM SET through %s with %s killed: %v", s.name, victim.name, err)
		}
		if got, err := other.Get(ctx, key).Result(); err != nil || got != s.name {
			t.Fatalf("DC_QUORUM GET %s through %s with %s killed = %q, %v; want %q", key, svcs[1-i].name, victim.name, got, err, s.name)
		}
		if got, err := c.Get(ctx, "k7").Result(); err != nil || got != "v7" {
			t.Fatalf("DC_QUORUM GET k7 through %s with %s killed = %q, %v", s.name, victim.name, got, err)
		}
	}
}
