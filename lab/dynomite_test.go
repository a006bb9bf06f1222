package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needDynomite is Dynomite's binary; the test skips, saying what is
// missing and where to put it, when there is none.
func needDynomite(t *testing.T) string {
	t.Helper()
	bin, err := FindDynomite("")
	if err != nil {
		t.Skip(err)
	}
	return bin
}

// A Dynomite position's config is Dynomite's own: the keys troop shares
// with it, no troop_ key, peer links in the clear; Dynomite's binary
// accepts it (--test-conf).
func TestDynomiteConfig(t *testing.T) {
	nodes := Layout(Shape{1, 2, 1}, t.TempDir())
	if err := assignPorts(nodes); err != nil {
		t.Fatal(err)
	}
	cfg := string(DynomiteConfig(nodes[0], nodes, "DC_QUORUM", "DC_QUORUM"))
	troop := string(NodeConfig(nodes[0], nodes, "DC_QUORUM", "DC_QUORUM", ""))
	if strings.Contains(cfg, "troop_") || !strings.HasSuffix(cfg, "  dyn_seed_provider: simple_provider\n  secure_server_option: none\n") ||
		!strings.HasPrefix(troop, strings.TrimSuffix(cfg, "  dyn_seed_provider: simple_provider\n  secure_server_option: none\n")) {
		t.Errorf("Dynomite's config:\n%s\ntroop's:\n%s", cfg, troop)
	}
	bin := needDynomite(t)
	os.MkdirAll(nodes[0].Dir, 0o755)
	if err := os.WriteFile(nodes[0].Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "--test-conf", "--conf-file", nodes[0].Config).CombinedOutput(); err != nil {
		t.Errorf("dynomite --test-conf: %v\n%s", err, out)
	}
}

// FindDynomite takes $TROOP_DYNOMITE, then PATH, then the cache
// scripts/dynomite builds into; with none it says in one sentence what is
// missing and where to put it.
func TestFindDynomite(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("TROOP_DYNOMITE", "")
	if _, err := FindDynomite(""); err == nil || !strings.Contains(err.Error(), "TROOP_DYNOMITE") || !strings.Contains(err.Error(), "../shared/peers") || strings.Count(err.Error(), ". ") > 0 {
		t.Errorf("no Dynomite anywhere: %v, want one sentence naming TROOP_DYNOMITE and ../shared/peers", err)
	}
	built := filepath.Join(cache, "troop", "dynomite-abc1234", "dynomite")
	os.MkdirAll(filepath.Dir(built), 0o755)
	os.WriteFile(built, []byte("#!/bin/sh\n"), 0o755)
	if got, err := FindDynomite(""); err != nil || got != built {
		t.Errorf("built into the cache: %q, %v", got, err)
	}
	t.Setenv("TROOP_DYNOMITE", filepath.Join(cache, "absent"))
	if _, err := FindDynomite(""); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("TROOP_DYNOMITE naming nothing: %v", err)
	}
}

// A Dynomite lab runs Dynomite's binary over the lab's redis-servers under
// the supervisor: its nodes connect (WaitMeshed), a write through one rack
// is on a quorum of racks at the reply and on every rack soon after, its
// levels are the lab's, and a node killed is replaced. A lab of TLS or a
// new node is refused in a sentence.
func TestDynomiteLab(t *testing.T) {
	bin := needDynomite(t)
	const replaceAfter = 300 * time.Millisecond
	l, r := startLab(t, Spec{Dir: t.TempDir(), Engine: EngineDynomite, Dynomite: bin, Troop: bin, ReplaceAfter: replaceAfter,
		ReadConsistency: "dc_quorum", WriteConsistency: "DC_QUORUM"})
	nodes := l.Nodes()
	if err := WaitMeshed(t.Context(), nodes, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := l.Status(); st.Engine != EngineDynomite || st.Dynomite != bin || nodes[0].Engine != EngineDynomite {
		t.Errorf("status: engine %q %q, node engine %q", st.Engine, st.Dynomite, nodes[0].Engine)
	}
	if reply, err := command(t.Context(), nodes[0].Listen, "SET", "k", "v"); err != nil || reply != "+OK" {
		t.Fatalf("SET through %s: %q, %v", nodes[0].Name, reply, err)
	}
	// DC_QUORUM answers once a quorum of racks holds the write; the last
	// rack's copy may land a moment after the reply.
	holding := func() (n int) {
		for _, node := range nodes {
			if reply, err := command(t.Context(), node.Redis, "EXISTS", "k"); err == nil && reply == ":1" {
				n++
			}
		}
		return n
	}
	if n := holding(); n < len(nodes)/2+1 {
		t.Errorf("at the reply %d of %d racks' redis-servers hold k, want a quorum", n, len(nodes))
	}
	waitFor(t, 10*time.Second, "every rack's redis-server holds k", func() bool { return holding() == len(nodes) })
	cfg, _ := os.ReadFile(nodes[1].Config)
	if !strings.Contains(string(cfg), "read_consistency: DC_QUORUM\n") || strings.Contains(string(cfg), "troop_") {
		t.Errorf("%s's config:\n%s", nodes[1].Name, cfg)
	}

	pid, err := l.Kill(nodes[1].Name, NodeProc)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, replaceAfter+10*time.Second, "Dynomite replaced", func() bool {
		now := l.Status().Nodes[1]
		if now.NodePID != 0 && now.NodePID != pid {
			r.add(now.NodePID, now.NodeP.StartTicks)
		}
		return now.NodePID != 0 && now.NodePID != pid && pingOK(nodes[1].Listen)
	})
	if !strings.Contains(cmdline(l.Status().Nodes[1].NodePID), nodes[1].Config) {
		t.Errorf("the replacement runs %q", cmdline(l.Status().Nodes[1].NodePID))
	}

	if _, err := l.AddNode(t.Context(), "dc1", "rack1", 7); err == nil || !strings.Contains(err.Error(), "Dynomite lab takes no new node") {
		t.Errorf("AddNode: %v", err)
	}
	if _, err := Start(t.Context(), Spec{Dir: t.TempDir(), Engine: EngineDynomite, Dynomite: bin, Troop: bin, TLS: true}); err == nil || !strings.Contains(err.Error(), "--tls") {
		t.Errorf("a Dynomite lab with TLS: %v", err)
	}
	if _, err := ParseEngine("redis"); err == nil || !strings.Contains(err.Error(), `"redis"`) {
		t.Errorf("ParseEngine(redis): %v", err)
	}
}
