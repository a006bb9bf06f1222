package lab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLI drives the real troop binary: lab up with real troop nodes, env,
// kill, stop, start, status and down. It builds troop with `go build`.
func TestCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the troop binary")
	}
	needRedis(t)
	bin, err := BuildTroop(t.Context(), t.TempDir())
	if err != nil {
		t.Skipf("troop does not build yet: %v", err)
	}
	if out, err := exec.Command(bin, "node", "--help").CombinedOutput(); err != nil {
		t.Skipf("troop node is not there yet: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "lab")
	r := newReaper(t)
	t.Cleanup(func() { exec.Command(bin, "lab", "down", "--dir", dir).Run() })

	troop := func(env []string, args ...string) (string, error) {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := troop(nil, args...)
		if err != nil {
			t.Fatalf("troop %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	status := func() *Status {
		t.Helper()
		var st Status
		if err := json.Unmarshal([]byte(must("lab", "status", "--dir", dir, "--json")), &st); err != nil {
			t.Fatal(err)
		}
		r.addStatus(&st)
		return &st
	}

	// redis-server missing: one clear sentence, nothing started.
	out, err := troop([]string{"TROOP_REDIS_SERVER=", "PATH=" + t.TempDir()}, "lab", "up", "--dir", dir)
	if err == nil || !strings.Contains(out, "redis-server not found on PATH: install it (Debian: apt-get install redis-server)") {
		t.Errorf("up without redis-server: %v\n%s", err, out)
	}

	out = must("lab", "up", "--dir", dir, "--replace-after", "1s", "--read-consistency", "dc_quorum", "--log-format", "json")
	st := status()
	// The nodes run troop-node, the node alone, which BuildTroop put next
	// to troop.
	for _, n := range st.Nodes {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", n.NodePID)); err != nil || exe != filepath.Join(filepath.Dir(bin), "troop-node") {
			t.Errorf("%s runs %q (%v), want troop-node next to %s", n.Name, exe, err, bin)
		}
	}
	for _, log := range []string{SupervisorLog(dir), st.Nodes[0].NodeLog()} {
		b, _ := os.ReadFile(log)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for _, line := range lines {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil {
				t.Errorf("%s, asked for JSON, has the line %q", log, line)
			}
		}
	}
	if !strings.Contains(out, "dc1-rack3-1") || len(st.Nodes) != 3 || st.ReadConsistency != "DC_QUORUM" {
		t.Fatalf("up:\n%s", out)
	}
	if cfg, _ := os.ReadFile(st.Nodes[0].Config); !strings.Contains(string(cfg), "read_consistency: DC_QUORUM") {
		t.Errorf("node.yml:\n%s", cfg)
	}
	if out := must("lab", "up", "--dir", dir); !strings.Contains(out, "already running") {
		t.Errorf("second up: %s", out)
	}

	env := must("lab", "env", "--dir", dir)
	for _, n := range st.Nodes {
		if !strings.Contains(env, n.Listen) || !pingOK(n.Listen) || !pingOK(n.Redis) {
			t.Errorf("%s: in env %v, answers %v", n.Name, strings.Contains(env, n.Listen), pingOK(n.Listen))
		}
	}

	name, old := st.Nodes[1].Name, st.Nodes[1].RedisPID
	must("lab", "kill", name, "--redis", "--dir", dir)
	waitFor(t, 3*time.Second, "redis replaced", func() bool {
		n := status().Nodes[1]
		return n.RedisPID != 0 && n.RedisPID != old && n.RedisP.State == Running
	})
	must("lab", "stop", name, "--dir", dir) // returns once the node is down
	time.Sleep(1500 * time.Millisecond)     // a negative window: past the 1 s replacement delay it stays down
	if n := status().Nodes[1]; n.NodeP.State != Stopped || pingOK(n.Listen) {
		t.Fatalf("after stop: %+v", n.NodeP)
	}
	must("lab", "start", name, "--dir", dir)
	if !pingOK(st.Nodes[1].Listen) {
		t.Fatal("node does not answer after start")
	}

	last := status()
	pids := append(allPIDs(last), last.SupervisorPID)
	must("lab", "down", "--dir", dir)
	if left := aliveOf(pids); len(left) > 0 {
		t.Errorf("alive after down: %q", left)
	}
	if out := must("lab", "down", "--dir", dir); !strings.Contains(out, "not running") {
		t.Errorf("second down: %s", out)
	}
	if out, err := troop(nil, "lab", "kill", name, "--dir", dir); err == nil || !strings.Contains(out, "no lab running") {
		t.Errorf("kill after down: %v %s", err, out)
	}
}
