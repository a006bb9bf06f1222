package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/topology"
)

// binaries are the programs the harness runs.
type binaries struct {
	troop          string
	base           string // troop built from --base, or ""
	redisServer    string
	nutcracker     string
	redisBenchmark string // "" when not installed and the anchor is skipped
	redisCli       string // "" when the bulk load is skipped
}

// findBinaries looks the programs up on PATH. TROOP_REDIS_SERVER overrides
// redis-server, as in the node tests.
func findBinaries(cfg config) (binaries, error) {
	var b binaries
	var missing []string
	b.redisServer = os.Getenv("TROOP_REDIS_SERVER")
	if b.redisServer == "" {
		var err error
		if b.redisServer, err = exec.LookPath("redis-server"); err != nil {
			missing = append(missing, "redis-server (Debian: apt-get install redis-server)")
		}
	}
	var err error
	if b.nutcracker, err = exec.LookPath("nutcracker"); err != nil {
		missing = append(missing, "nutcracker (Debian: apt-get install nutcracker)")
	}
	if cfg.Anchor || cfg.Commands > 0 || cfg.Memory {
		if b.redisBenchmark, err = exec.LookPath("redis-benchmark"); err != nil {
			missing = append(missing, "redis-benchmark (Debian: apt-get install redis-tools), or run with --anchor=false --commands 0 --memory=false")
		}
	}
	if cfg.Bulk > 0 || (cfg.Memory && cfg.MemoryKeys > 0) {
		if b.redisCli, err = exec.LookPath("redis-cli"); err != nil {
			missing = append(missing, "redis-cli (Debian: apt-get install redis-tools), or run with --bulk 0 --memory-keys 0")
		}
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("not found on PATH: %s", strings.Join(missing, ", "))
	}
	return b, nil
}

// moduleRoot is the directory of the troop module this harness belongs to.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("cannot find the troop module to build (go env GOMOD: %q, %v); run from the repository or pass --troop", gomod, err)
	}
	return filepath.Dir(gomod), nil
}

// buildTroop builds ./cmd/troop of the module in root.
func buildTroop(ctx context.Context, root, dir string) (string, error) {
	path := filepath.Join(dir, "troop")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/troop")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/troop: %v\n%s", err, out)
	}
	return path, nil
}

// exportRev writes the tree of git revision rev of the repository in root
// into dir (git archive), so that a benchmark can build a commit while the
// working tree holds other work. It returns dir and the full commit hash.
func exportRev(ctx context.Context, root, rev, dir string) (string, string, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", rev+"^{commit}").Output()
	if err != nil {
		return "", "", fmt.Errorf("--rev %s: not a commit of %s: %v", rev, root, err)
	}
	hash := strings.TrimSpace(string(out))
	cmd := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", hash)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", "", err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	xerr := untar(stdout, dir)
	if xerr != nil {
		io.Copy(io.Discard, stdout) // let git finish writing
	}
	if err := errors.Join(xerr, cmd.Wait()); err != nil {
		return "", "", fmt.Errorf("git archive %s: %v %s", hash, err, stderr.String())
	}
	return dir, hash, nil
}

// untar extracts the directories and regular files of a tar stream into dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("archive entry %q leaves the directory", h.Name)
		}
		path := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if err := errors.Join(err, f.Close()); err != nil {
				return err
			}
		}
	}
}

// gitRevision describes the tree in root: the commit, "+dirty" when files
// differ from it. It is the fallback when the binary carries no VCS stamp
// (GOFLAGS=-buildvcs=false).
func gitRevision(ctx context.Context, root string) string {
	head, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(head))
	if st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "+dirty"
	}
	return rev
}

// startRedis starts a redis-server that keeps nothing on disk, so that
// neither snapshots nor the append-only file take CPU during a window.
func startRedis(ctx context.Context, ps *procSet, bin, name string) (*proc, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	host, port, _ := net.SplitHostPort(addr)
	p, err := ps.start(name, bin, "--port", port, "--bind", host, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", ps.dir, "--logfile", "")
	if err != nil {
		return nil, "", err
	}
	return p, addr, waitPing(ctx, addr, p)
}

// startNutcracker starts twemproxy in front of one redis-server, configured
// like the troop node: one server connection, connected at start.
func startNutcracker(ctx context.Context, ps *procSet, bin, redisAddr string) (*proc, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	stats, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	conf := fmt.Sprintf(`store:
  listen: %s
  hash: fnv1a_64
  distribution: ketama
  redis: true
  preconnect: true
  server_connections: 1
  auto_eject_hosts: false
  servers:
    - %s:1
`, addr, redisAddr)
	confPath := filepath.Join(ps.dir, "nutcracker.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	_, statsPort, _ := net.SplitHostPort(stats)
	p, err := ps.start("nutcracker", bin, "-c", confPath, "-s", statsPort, "-a", "127.0.0.1",
		"-o", filepath.Join(ps.dir, "nutcracker.out"), "-p", filepath.Join(ps.dir, "nutcracker.pid"))
	if err != nil {
		return nil, "", err
	}
	return p, addr, waitPing(ctx, addr, p)
}

// nodeConfig is a troop node config for name in rack of dc1, in front of
// redisAddr, with fresh loopback ports. Tokens are [0]: with one node per
// rack that is the evenly spaced ring.
func nodeConfig(name, rack, redisAddr string, pprof bool) (*topology.Config, error) {
	c := topology.Default()
	c.Name, c.Datacenter, c.Rack = name, "dc1", rack
	for _, a := range []*string{&c.Listen, &c.DynListen, &c.StatsListen} {
		var err error
		if *a, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	c.Servers = []topology.Server{{Addr: redisAddr, Weight: 1}}
	c.Tokens = []uint32{0}
	c.ReadConsistency, c.WriteConsistency = consistency.DCOne, consistency.DCOne
	// Only when --pprof profiles the nodes: a --base build may be older
	// than the key.
	c.Pprof = pprof
	return c, nil
}

// adminPing asks a node's admin API for /ping.
func adminPing(addr string) error {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get("http://" + addr + "/ping")
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /ping: %s", res.Status)
	}
	return nil
}

// linkSeeds makes every node of a cluster list all the others in dyn_seeds.
func linkSeeds(cfgs []*topology.Config) {
	for _, c := range cfgs {
		for _, o := range cfgs {
			if o != c {
				c.Seeds = append(c.Seeds, topology.Seed{Addr: o.DynListen, Rack: o.Rack, DC: o.Datacenter, Tokens: o.Tokens})
			}
		}
	}
}

// startNode writes c with topology's Marshal, as any config generator
// would, and runs `troop node --config` on it.
func startNode(ctx context.Context, ps *procSet, bin string, c *topology.Config) (*proc, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("node config %s: %v", c.Name, err)
	}
	path := filepath.Join(ps.dir, c.Name+".yml")
	if err := os.WriteFile(path, c.Marshal(), 0o644); err != nil {
		return nil, err
	}
	p, err := ps.start(c.Name, bin, "node", "--config", path, "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	if c.TLSClient { // its client listener speaks TLS: the admin API says when it is up
		return p, waitUp(ctx, c.StatsListen, "GET /ping", adminPing, p)
	}
	return p, waitPing(ctx, c.Listen, p)
}

// waitPeers waits until every node has completed the peer handshake with
// every other, as its /cluster_describe shows (a peer's client address is
// known only after the handshake). Nodes started one after the other find
// their later peers refusing at first, and a node then backs off before it
// dials again; loading the cluster before that would measure the backoff.
func waitPeers(ctx context.Context, nodes []*proc, admin []string) error {
	deadline := time.Now().Add(15 * time.Second)
	for i, addr := range admin {
		for {
			missing, err := peersMissing(ctx, addr)
			if err == nil && missing == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s has not reached all its peers within 15s (%d missing, %v)\n%s", nodes[i].name, missing, err, nodes[i].logTail())
			}
			if err := sleep(ctx, 50*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

func peersMissing(ctx context.Context, admin string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+admin+"/cluster_describe", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var members []struct {
		Listen string `json:"listen"`
		Up     bool   `json:"up"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&members); err != nil {
		return 0, err
	}
	missing := 0
	for _, m := range members {
		if m.Listen == "" || !m.Up {
			missing++
		}
	}
	return missing, nil
}
