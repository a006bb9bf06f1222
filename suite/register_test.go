package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/lab"
)

func TestMain(m *testing.M) { testlab.Main(m) }

// startLab starts a lab of one datacenter of racks racks, one node each,
// whose nodes run with the planted bug ("" for none), and returns its nodes.
func startLab(t *testing.T, racks int, bug string) []client.Node {
	t.Helper()
	return startLabWith(t, racks, plantedLine(bug))
}

// startLabWith starts the lab of startLab, with the config lines given
// added to each node's own.
func startLabWith(t *testing.T, racks int, lines string) []client.Node {
	t.Helper()
	dir := t.TempDir()
	spec := lab.Spec{Dir: dir, Shape: lab.Shape{DCs: 1, Racks: racks, NodesPerRack: 1}}
	if lines != "" {
		spec.NodeCommand = configured(t, lines)
	}
	testlab.Start(t, spec)
	nodes, err := LabNodes(dir)
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// plantedLine is the config line that plants bug ("" for none).
func plantedLine(bug string) string {
	if bug == "" {
		return ""
	}
	return "  troop_planted_bug: " + bug + "\n"
}

// plantBug is a lab's node command that runs each node with the planted
// bug.
func plantBug(t *testing.T, bug string) func(n lab.Node) []string {
	return configured(t, plantedLine(bug))
}

// configured is a lab's node command that runs each node with the config
// lines given added to its own.
func configured(t *testing.T, lines string) func(n lab.Node) []string {
	troop := testlab.Troop(t)
	return func(n lab.Node) []string {
		conf, err := os.ReadFile(n.Config)
		if err != nil {
			t.Error(err)
		}
		path := filepath.Join(n.Dir, "configured.yml")
		if err := os.WriteFile(path, append(conf, lines...), 0o644); err != nil {
			t.Error(err)
		}
		return []string{troop, "node", "--config", path}
	}
}

func runRegisters(t *testing.T, nodes []client.Node, cfg RegisterConfig) check.Verdict {
	t.Helper()
	hist, err := RunRegisters(context.Background(), nodes, cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := check.CheckRegisters(hist, time.Minute)
	t.Logf("%s: %d operations (%d reads, %d writes, %d of unknown outcome): %s, %d stale reads",
		cfg.Prefix, v.Ops, v.Reads, v.Writes, v.Failed, v.Result, v.StaleReads)
	return v
}

// holds fails the test unless v is linearizable with no stale read, and
// had enough operations to have met writes colliding within a millisecond.
// The contended workloads it judges stop at a count of operations
// (enoughOps per client), with a time bound only for a store that stops
// answering: 10 s gave a busy machine's run too few operations to judge.
func holds(t *testing.T, v check.Verdict) {
	t.Helper()
	if p := v.Problem(); p != "" {
		t.Errorf("not linearizable at DC_QUORUM: %s", p)
	}
	if v.Writes < 1000 || v.Reads < 1000 {
		t.Errorf("only %d reads and %d writes", v.Reads, v.Writes)
	}
}

// The minimal case, the smallest workload that met lost writes on the
// store before its writes asked a quorum for versions: one client per
// node of three, one key, reads and writes at DC_QUORUM with no pause, 20 s
// (tens of thousands of operations, far past holds' count). A key takes
// 1,000 operations, then the clients move on to a fresh one, as troop
// run's workload does: porcupine judges each key's history alone, and one
// history of 123,520 operations took it minutes on a busy machine.
func TestMinimalRegistersLinearizable(t *testing.T) {
	nodes := startLab(t, 3, "")
	holds(t, runRegisters(t, nodes, RegisterConfig{Keys: 1, Clients: 3, OpsPerKey: 1000, Duration: 20 * time.Second,
		Level: "DC_QUORUM", Writes: 0.5, Timeout: time.Second, Seed: 1, Prefix: "minimal"}))
}

// enoughOps is the operations per client of clients that make about 1,200
// reads and 1,200 writes in all, holds' 1,000 of each with a margin many
// standard deviations wide (a client writes with probability one half).
func enoughOps(clients int) int { return 2400 / clients }

// contended is the register workload of troop run (six clients, delays
// between nodes, one clock ahead) on one key, for d.
func contended(d time.Duration, round int) RegisterConfig {
	cfg := DefaultRegisterConfig()
	cfg.Duration = d
	cfg.Seed, cfg.Prefix = uint64(round), fmt.Sprintf("contended:%d", round)
	return cfg
}

// troop run's register workload on three and on five racks: linearizable.
func TestContendedRegistersLinearizable(t *testing.T) {
	for _, racks := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d racks", racks), func(t *testing.T) {
			nodes := startLab(t, racks, "")
			cfg := contended(2*time.Minute, 1)
			cfg.Ops = enoughOps(cfg.Clients)
			holds(t, runRegisters(t, nodes, cfg))
		})
	}
}

// A write the run's end cuts off was sent, and may have been applied: the
// history keeps it as a write of unknown outcome, for other clients may
// have read it. Against a redis-server that stops answering, the one
// write in flight at the end is in the history, failed.
func TestCutOffWriteIsKept(t *testing.T) {
	srv := testredis.Start(t)
	p := srv.Cmd.Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer p.Signal(syscall.SIGCONT)
	hist, err := RunRegisters(context.Background(), []client.Node{{Name: "redis", DC: "dc1", Addr: srv.Addr}},
		RegisterConfig{Keys: 1, Clients: 1, Duration: 300 * time.Millisecond, Writes: 1, Timeout: 5 * time.Second, Prefix: "cut"})
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || !hist[0].Write || !hist[0].Failed {
		t.Fatalf("history %v, want the one write, of unknown outcome", hist)
	}
}

// A write's error leaves it out of the history only when the write did
// nothing; one of unknown outcome that quotes a replica's refusal ("this
// write was not applied here") while another replica took it stays in,
// else a read of its value would count as a read of a value never written.
func TestNotAppliedWrites(t *testing.T) {
	const promised = "PROMISED troop: a change of this key at a newer ballot was promised on this replica; this write was not applied here"
	for _, tc := range []struct {
		err  string
		want bool
	}{
		{"ERR troop: DC_QUORUM write (SET) failed and was not applied: 1 of 3 replicas answered its version query, 2 needed (dc1/rack2: unreachable; dc1/rack3: unreachable)", true},
		{"ERR troop: DC_QUORUM write (SET) failed, not applied: 0 of 3 replicas acknowledged, 2 needed (dc1/rack1: STALE; dc1/rack2: STALE; dc1/rack3: STALE)", true},
		{promised, true}, // every replica refused it alike: their refusal is the answer
		{"ERR troop: DC_QUORUM write (SET) failed, outcome unknown: 1 of 3 replicas acknowledged, 2 needed; it may have been applied, and hinted handoff or repair may still apply it (dc1/rack2: " + promised + "; dc1/rack3: " + promised + ")", false},
		{"ERR troop: DC_QUORUM write (SET) failed, outcome unknown: dc1/rack2, which was to stamp it, did not answer (i/o timeout); it may have been applied, and repair may still spread it", false},
	} {
		if got := notApplied(errors.New(tc.err)); got != tc.want {
			t.Errorf("notApplied(%q) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
