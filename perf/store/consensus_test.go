package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/troop-lab/troop/resp"
)

// TestConsensusCommands checks what each command of the consensus
// experiment sends: one whole RESP command per reply it expects.
func TestConsensusCommands(t *testing.T) {
	want := map[string][]string{"set": {"SET"}, "get": {"GET"}, "incr": {"INCR"}, "lpush": {"LPUSH"},
		"set_nx": {"SET"}, "watch_cas": {"WATCH", "GET", "MULTI", "SET", "EXEC"}}
	for _, c := range consensusCommands {
		buf := c.append(c.append(nil, 7), 8) // two in a row, as a pipeline sends them
		var names []string
		for len(buf) > 0 {
			cmd, n, _, err := resp.ParseCommand(buf, resp.DefaultLimits)
			if err != nil || n == 0 {
				t.Fatalf("%s: %v in %q", c.name, err, buf)
			}
			names = append(names, string(cmd.Args[0]))
			if c.name == "set_nx" && (len(cmd.Args) != 4 || string(cmd.Args[3]) != "NX") {
				t.Errorf("set_nx sends %q", cmd.Args)
			}
			buf = buf[n:]
		}
		if len(names) != 2*c.replies || len(names) != 2*len(want[c.name]) || names[0] != want[c.name][0] {
			t.Errorf("%s sends %v, want twice %v", c.name, names, want[c.name])
		}
	}
}

// TestConsensus runs the consensus experiment at smoke size against a real
// three-rack cluster and checks behaviour only: every command served
// requests with right replies, and the checks name each command. It never
// checks speed.
func TestConsensus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-servers and troop nodes; skipped with -short")
	}
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("TROOP_REDIS_SERVER") == "" {
		t.Fatal("redis-server not found on PATH: install it (Debian: apt-get install redis-server)")
	}
	cfg := defaultConfig()
	cfg.Quick = true
	cfg.applyQuick(nil)
	cfg.Conns, cfg.Keys = 8, 500
	cfg.Warmup, cfg.Duration = seconds(100*time.Millisecond), seconds(500*time.Millisecond)
	cfg.Anchor, cfg.Proxy, cfg.Cluster, cfg.Peers, cfg.TLS, cfg.Repair = false, false, false, false, false, false
	cfg.Bulk, cfg.Commands, cfg.Memory, cfg.Latency, cfg.MembershipKeys = 0, 0, false, false, 0
	cfg.Out = filepath.Join(t.TempDir(), "perf-store.json")
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	data, err := os.ReadFile(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	var res result
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, p := range cfg.Pipelines {
		for _, c := range consensusCommands {
			want[c.name+"/"+strconv.Itoa(p)] = true
		}
	}
	for _, r := range res.Rounds {
		delete(want, r.Target+"/"+strconv.Itoa(r.Pipeline))
		if r.Experiment != "consensus" || r.Error != "" || r.Ops <= 0 || r.ErrorReplies != 0 || r.BadReplies != 0 {
			t.Errorf("%s %s P=%d: %+v, error %q, first error reply %q", r.Experiment, r.Target, r.Pipeline, r.counts, r.Error, r.FirstErrorReply)
		}
	}
	for k := range want {
		t.Errorf("no round for %s", k)
	}
	checks := map[string]bool{}
	for _, c := range res.Checks {
		checks[c.Name] = true
	}
	for _, p := range cfg.Pipelines {
		for _, c := range consensusCommands[2:] {
			if name := "consensus: " + c.name + " >= 0.5 x SET throughput at DC_QUORUM, P=" + strconv.Itoa(p); !checks[name] {
				t.Errorf("no check %q in %v", name, checks)
			}
		}
	}
}
