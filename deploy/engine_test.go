package deploy

// The harness of the tests against the real Docker Engine: the images are
// built as make image builds them, each once per test run, and clusters of
// their containers run on networks of their own. Every container, network
// and image the tests create carries the run's label and is removed when its
// test (or the run) ends, whatever the outcome; where no engine answers,
// the tests that need one skip and say so.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"

	"github.com/troop-lab/troop/internal/rootfs"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/topology"
)

const runLabel = "dev.troop.deploy-test"

// networkLabel names, on each container, the network of its cluster: a
// chaos group selects one cluster's containers by it.
const networkLabel = "dev.troop.deploy-test.network"

var (
	api       *client.Client
	engineErr error // no engine answers: the tests that need one skip
	runID     = func() string { var b [6]byte; rand.Read(b[:]); return hex.EncodeToString(b[:]) }()

	binsOnce sync.Once
	binsErr  error
	troopDir string // holds troopBin and troop-node, static, for the images and for the tests to run too
	troopBin string

	nodeImage  = testImageOf{name: "troop-node", path: "troop-node", build: NodeImage}
	troopImage = testImageOf{name: "troop", path: "troop", build: TroopImage}
)

// testImageOf is one of the images, built for this run once a test asked
// for it.
type testImageOf struct {
	name, path string // its name, and its binary's in troopDir
	build      func(bin string) (*Image, error)

	once sync.Once
	tag  string
	err  error
}

func TestMain(m *testing.M) {
	var err error
	api, err = client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = api.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
	}
	engineErr = err
	code := m.Run()
	for _, img := range []*testImageOf{&nodeImage, &troopImage} {
		if img.tag == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := api.ImageRemove(ctx, img.tag, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			fmt.Fprintf(os.Stderr, "deploy tests: remove image %s: %v\n", img.tag, err)
			code = 1
		}
		cancel()
	}
	if api != nil {
		api.Close()
	}
	if troopDir != "" {
		os.RemoveAll(troopDir)
	}
	os.Exit(code)
}

// testImage is the node image, which runs a node and its redis-server.
func testImage(t *testing.T) string { return nodeImage.get(t) }

// testTroopImage is the troop image, which runs troop's verbs.
func testTroopImage(t *testing.T) string { return troopImage.get(t) }

// get builds the static binaries and imports the image, as make image
// does, once per test process; TestMain removes it. A test calling it skips
// when no Docker Engine answers.
func (img *testImageOf) get(t *testing.T) string {
	t.Helper()
	if engineErr != nil {
		t.Skipf("skipped: no Docker Engine answers (DOCKER_HOST=%q): %v", os.Getenv("DOCKER_HOST"), engineErr)
	}
	img.once.Do(func() {
		if img.err = bins(); img.err == nil {
			img.err = img.importImage()
		}
	})
	if img.err != nil {
		t.Fatal(img.err)
	}
	return img.tag
}

// testTroop is the troop binary, for the tests that run troop on this host.
func testTroop(t *testing.T) string {
	t.Helper()
	if err := bins(); err != nil {
		t.Fatal(err)
	}
	return troopBin
}

// bins builds the binaries once per test process (buildBins).
func bins() error {
	binsOnce.Do(func() { binsErr = buildBins() })
	return binsErr
}

// buildBins builds troop and troop-node, static and stripped as make image
// builds them, into troopDir.
func buildBins() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // go build on a busy machine
	defer cancel()
	dir, err := os.MkdirTemp("", "deploy-test")
	if err != nil {
		return err
	}
	troopDir = dir // TestMain removes it
	// CGO_ENABLED=0 as in make test, so that this build reuses its packages
	// and only links.
	build := exec.CommandContext(ctx, "go", "build", "-ldflags=-s -w", "-o", dir+string(filepath.Separator),
		"github.com/troop-lab/troop/cmd/troop", "github.com/troop-lab/troop/cmd/troop-node")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build a static troop and troop-node: %w\n%s", err, out)
	}
	troopBin = filepath.Join(dir, "troop")
	return nil
}

func (img *testImageOf) importImage() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	built, err := img.build(filepath.Join(troopDir, img.path))
	if err != nil {
		return err
	}
	tag := "troop-deploy-test-" + img.name + ":" + runID
	if _, err := Import(ctx, api, built, tag, map[string]string{runLabel: runID}); err != nil {
		return err
	}
	img.tag = tag
	return nil
}

// service is one started container of a cluster.
type service struct {
	name, id string
	node     lab.Node // Listen and StatsListen at the container's address
	health   bool     // it has a healthcheck
}

var networks atomic.Int32 // the networks this run created, for their names

// member is one container of a cluster the test starts.
type member struct {
	name       string   // its name on the network
	hostname   string   // "" for Docker's default
	domainname string   // with hostname, its full name in the container's /etc/hosts
	cmd, env   []string // the entrypoint's arguments, and environment
	files      *rootfs.FS
	cfg        *topology.Config // the node config its command names
	health     []string         // a healthcheck command, or none
	restart    container.RestartPolicyMode
}

// startCluster runs the members from image on a new network, and returns
// them sorted by name once each answers PING, the nodes are connected to
// one another, and each with a healthcheck is healthy.
func startCluster(t *testing.T, image string, members []member) []service {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	labels := map[string]string{runLabel: runID}
	netName := "troop-deploy-test-" + runID + "-" + strconv.Itoa(int(networks.Add(1)))
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
	for _, m := range members {
		cfg := &container.Config{Image: image, Hostname: m.hostname, Domainname: m.domainname, Cmd: m.cmd, Env: m.env,
			Labels: map[string]string{runLabel: runID, networkLabel: netName}, StopTimeout: new(2)}
		if m.health != nil {
			cfg.Healthcheck = &container.HealthConfig{Test: m.health, Interval: 500 * time.Millisecond, Timeout: 3 * time.Second, Retries: 3}
		}
		res, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name: netName + "-" + strings.ReplaceAll(m.name, ".", "-"), Config: cfg, HostConfig: &container.HostConfig{RestartPolicy: container.RestartPolicy{Name: m.restart}},
			NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netName: {Aliases: []string{m.name}}}},
		})
		if err != nil {
			t.Fatalf("create container for %s: %v", m.name, err)
		}
		id := res.ID
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
				t.Errorf("remove container %s: %v", m.name, err)
			}
		})
		// Copied rather than bind-mounted, which works with an engine on
		// another machine too.
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(m.files.WriteTar(pw)) }()
		if _, err := api.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: pr}); err != nil {
			t.Fatalf("copy the config files of %s: %v", m.name, err)
		}
		out = append(out, service{name: m.name, id: id, health: m.health != nil, node: lab.Node{Name: m.cfg.Name}})
	}
	// Started together, as Compose and a StatefulSet with parallel pod
	// management start them: on a busy engine each start takes seconds.
	var wg sync.WaitGroup
	errs := make([]error, len(out))
	for i := range out {
		wg.Go(func() {
			if _, err := api.ContainerStart(ctx, out[i].id, client.ContainerStartOptions{}); err != nil {
				errs[i] = fmt.Errorf("start %s: %w", out[i].name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, m := range members {
		c, err := api.ContainerInspect(ctx, out[i].id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := c.Container.NetworkSettings.Networks[netName].IPAddress.String()
		out[i].node.Listen = net.JoinHostPort(ip, portOf(m.cfg.Listen))
		out[i].node.StatsListen = net.JoinHostPort(ip, portOf(m.cfg.StatsListen))
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
		if s.health {
			waitFor(t, 20*time.Second, s.name+" healthy by its healthcheck", func() bool {
				c, err := api.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
				return err == nil && c.Container.State.Health != nil && c.Container.State.Health.Status == container.Healthy
			})
		}
	}
	return out
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

// checkQuorum runs the lab's quorum checks on a 3-rack cluster of
// containers: a write at DC_QUORUM through one node reads back through
// every node at every level; with the third container killed, DC_QUORUM
// still writes and reads through the other two.
func checkQuorum(t *testing.T, svcs []service) {
	t.Helper()
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
