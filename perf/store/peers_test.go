package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/lab"
)

// peersConfig is a smoke-size run of the peers experiment alone.
func peersConfig(t *testing.T) config {
	t.Helper()
	if testing.Short() {
		t.Skip("starts redis-servers, nutcracker, troop nodes and Dynomite; skipped with -short")
	}
	if _, err := lab.FindDynomite(""); err != nil {
		t.Skip(err)
	}
	cfg := defaultConfig()
	cfg.Quick = true
	cfg.applyQuick(nil)
	cfg.Proxy, cfg.Cluster, cfg.TLS, cfg.Repair, cfg.Memory, cfg.Latency, cfg.Anchor, cfg.Consensus = false, false, false, false, false, false, false, false
	cfg.Bulk, cfg.Commands, cfg.MembershipKeys = 0, 0, 0
	cfg.Conns, cfg.Keys = 8, 500
	cfg.Warmup, cfg.Duration = seconds(100*time.Millisecond), seconds(500*time.Millisecond)
	cfg.Out = filepath.Join(t.TempDir(), "perf-store.json")
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestPeers runs the peers experiment briefly against real Dynomite and
// checks behaviour only: every target of the table served every request
// correctly at each depth, each ran at half load, and the table and its
// checks are printed.
func TestPeers(t *testing.T) {
	cfg := peersConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	res := readResult(t, cfg.Out)
	targets := []string{"direct", "nutcracker", "troop-node", "troop_dc_one", "dynomite_dc_one", "troop_dc_quorum", "dynomite_dc_quorum"}
	if want := len(targets) * len(cfg.Pipelines); len(res.Rounds) != want {
		t.Errorf("%d windows, want %d", len(res.Rounds), want)
	}
	for _, r := range res.Rounds {
		if r.Experiment != "peers" || r.Error != "" || r.Ops <= 0 || r.ErrorReplies != 0 || r.BadReplies != 0 || r.Gets == 0 || r.Sets == 0 {
			t.Errorf("%s %s P=%d: %+v (%s)", r.Experiment, r.Target, r.Pipeline, r.counts, r.Error)
		}
		if r.Target != "direct" && r.ProxyUsPerOp <= 0 {
			t.Errorf("%s P=%d: proxy CPU per op not measured", r.Target, r.Pipeline)
		}
	}
	if p := res.Peers; p == nil || len(p.Runs) != len(targets) || len(p.Rates) != len(peerPairs) {
		t.Fatalf("half-load runs: %+v", p)
	}
	for _, run := range res.Peers.Runs {
		for _, r := range run.Rows {
			if r.Count == 0 || r.Errors != 0 || r.Fails != 0 {
				t.Errorf("half load, %s %s: %d requests, %d errors, %d fails", run.Target, r.Task, r.Count, r.Errors, r.Fails)
			}
		}
	}
	// Four throughput targets (two levels, two depths) and three p99s.
	n := 0
	for _, c := range res.Checks {
		if strings.HasPrefix(c.Name, "peers: ") {
			n++
		}
	}
	if n != 7 {
		t.Errorf("%d peer checks, want 7: %+v", n, res.Checks)
	}
	for _, s := range []string{"Peers: troop beside Dynomite", "DC_QUORUM, three racks vs Dynomite", "Response time at half load", "direct redis-server"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the printed report lacks %q:\n%s", s, out.String())
		}
	}
}

// TestPeersInterrupt interrupts the peers experiment once its first
// window has been printed: the run stops, and the JSON file keeps what it
// measured, with its configuration and seed.
func TestPeersInterrupt(t *testing.T) {
	cfg := peersConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w := &cancelOn{marker: "peers   P=1   round 1", cancel: cancel}
	err := run(ctx, cfg, w)
	if !errors.Is(err, context.Canceled) && (err == nil || !strings.Contains(err.Error(), context.Canceled.Error())) {
		t.Fatalf("run: %v, want it cancelled\n%s", err, w.String())
	}
	res := readResult(t, cfg.Out)
	if len(res.Rounds) == 0 || res.Error == "" || res.Config.Seed != cfg.Seed {
		t.Errorf("after the interrupt: %d windows kept, error %q, seed %d", len(res.Rounds), res.Error, res.Config.Seed)
	}
}

// cancelOn is the run's output; it cancels the run once marker is written.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	cancel func()
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if strings.Contains(c.buf.String(), c.marker) {
		c.cancel()
	}
	return len(p), nil
}

func (c *cancelOn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func readResult(t *testing.T, path string) result {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res result
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	return res
}
