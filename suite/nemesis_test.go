package suite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/labchaos"
	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// nemesisLab starts a three-rack lab in address mode whose nodes run with
// the planted bug ("" for none), as troop run starts its own.
func nemesisLab(t *testing.T, bug string) *cluster {
	t.Helper()
	return nemesisLabWith(t, plantedLine(bug))
}

// nemesisLabWith is nemesisLab with the config lines given added to each
// node's.
func nemesisLabWith(t *testing.T, lines string) *cluster {
	t.Helper()
	spec := lab.Spec{Dir: t.TempDir(), Netns: true, ServeSocket: true}
	if lines != "" {
		spec.NodeCommand = configured(t, lines)
	}
	l := testlab.Start(t, spec)
	nodes, err := LabNodes(spec.Dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := labCluster(nodes, l, spec.Dir, labchaos.NewWith(labchaos.FromLab(l)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runNemesis runs the quick run's nemesis phase on c, with the faults
// given, and judges it.
func runNemesis(t *testing.T, c *cluster, faults ...string) (*NemesisPhase, Verdict) {
	t.Helper()
	return runNemesisWith(t, c, func(*Config) {}, faults...)
}

// runNemesisWith is runNemesis with the quick run's config changed by set.
func runNemesisWith(t *testing.T, c *cluster, set func(*Config), faults ...string) (*NemesisPhase, Verdict) {
	t.Helper()
	cfg := QuickConfig()
	cfg.Seed = 3
	cfg.Troop, cfg.Out = testlab.Troop(t), t.TempDir()
	cfg.Nemesis.Faults = faults
	set(&cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ph, err := c.nemesis(ctx, cfg, func(format string, args ...any) { t.Logf(format, args...) })
	if err != nil {
		t.Fatal(err)
	}
	var v Verdict
	judgeNemesis(ph,
		func(f string, a ...any) { v.Held = append(v.Held, fmt.Sprintf(f, a...)) },
		func(f string, a ...any) { v.Broke = append(v.Broke, fmt.Sprintf(f, a...)) },
		func(f string, a ...any) { v.Notes = append(v.Notes, fmt.Sprintf(f, a...)) })
	for _, lines := range [][]string{v.Broke, v.Held, v.Notes} {
		for _, l := range lines {
			t.Log(l)
		}
	}
	return ph, v
}

// The nemesis's verdict breaks on a round whose register history is not
// linearizable, or lost a write, at a quorum level, and only notes it at
// DC_ONE. (Whether a round's random workload meets a planted anomaly is
// luck: TestContendedRegistersSearch searches, and the probes find each one
// by construction, TestProbesFindPlantedBugs.)
func TestJudgeNemesis(t *testing.T) {
	illegal := check.Verdict{Result: "Illegal", Ops: 10, Counterexample: &check.Counterexample{Key: "k"}}
	lost := bench.AuditResult{Keys: 5, Lost: 1}
	for _, tc := range []struct {
		level     string
		registers check.Verdict
		audit     bench.AuditResult
		broke     string
		note      string
	}{
		{"DC_QUORUM", illegal, bench.AuditResult{Keys: 5}, "not linearizable (counterexample of", ""},
		{"DC_SAFE_QUORUM", check.Verdict{Result: "Ok", Ops: 10}, lost, "1 acknowledged writes lost", ""},
		{"DC_ONE", illegal, lost, "", "(the level allows it)"},
		{"DC_QUORUM", check.Verdict{Result: "Ok", Ops: 10}, bench.AuditResult{Keys: 5}, "", ""},
	} {
		var v Verdict
		judgeNemesis(&NemesisPhase{Rounds: []NemesisRound{{Fault: "clock-skew -2s", Node: "n1", Level: tc.level, Registers: tc.registers, Audit: tc.audit}}},
			func(f string, a ...any) { v.Held = append(v.Held, fmt.Sprintf(f, a...)) },
			func(f string, a ...any) { v.Broke = append(v.Broke, fmt.Sprintf(f, a...)) },
			func(f string, a ...any) { v.Notes = append(v.Notes, fmt.Sprintf(f, a...)) })
		broke, notes := strings.Join(v.Broke, "\n"), strings.Join(v.Notes, "\n")
		if tc.broke == "" && broke != "" || !strings.Contains(broke, tc.broke) {
			t.Errorf("%s, %s: broke %q, want %q", tc.level, tc.registers.Result, broke, tc.broke)
		}
		if !strings.Contains(notes, tc.note) {
			t.Errorf("%s, %s: notes %q, want %q", tc.level, tc.registers.Result, notes, tc.note)
		}
		if tc.broke == "" && tc.note == "" && len(v.Held) != 1 {
			t.Errorf("%s: held %q, want the round held", tc.level, v.Held)
		}
	}
}

// A nemesis round's coordination findings are judged as the consistency
// phase's are, named by the round: an anomaly at a quorum level breaks the
// verdict with its first anomaly, at DC_ONE it is a note.
func TestJudgeNemesisCoordination(t *testing.T) {
	ok := check.Verdict{Result: "Ok", Ops: 10}
	stale := check.CheckCAS([]check.Command{
		{Client: 0, Key: "c", Name: check.CAS, Number: 0, Acquired: true, Call: 0, Return: 10},
		{Client: 1, Key: "c", Name: check.CAS, Number: 0, Acquired: true, Call: 20, Return: 30},
	})
	good := check.CheckCounter([]check.Command{{Key: "n", Name: check.IncrBy, Delta: 2, Number: 2, Call: 0, Return: 10}})
	if stale.OK() {
		t.Fatalf("the planted WATCH history passed its checker: %+v", stale)
	}
	for _, tc := range []struct {
		level    string
		findings []check.Finding
		broke    string
		note     string
		held     int
	}{
		{"DC_QUORUM", []check.Finding{stale, good}, "nemesis, partition bridge 4s of n1, DC_QUORUM: coordination at DC_QUORUM, WATCH compare-and-set: 1 ", "", 2},
		{"DC_ONE", []check.Finding{stale, good}, "", "nemesis, partition bridge 4s of n1, DC_ONE: coordination at DC_ONE, WATCH compare-and-set: 1 ", 2},
		{"DC_QUORUM", []check.Finding{good, {Checker: "lock"}}, "", "lock: no operation ran", 2},
		{"DC_QUORUM", nil, "", "", 1},
	} {
		var v Verdict
		judgeNemesis(&NemesisPhase{Rounds: []NemesisRound{{Fault: "partition bridge 4s", Node: "n1", Level: tc.level, Registers: ok, Audit: bench.AuditResult{Keys: 5}, Coordination: tc.findings}}},
			func(f string, a ...any) { v.Held = append(v.Held, fmt.Sprintf(f, a...)) },
			func(f string, a ...any) { v.Broke = append(v.Broke, fmt.Sprintf(f, a...)) },
			func(f string, a ...any) { v.Notes = append(v.Notes, fmt.Sprintf(f, a...)) })
		broke, notes := strings.Join(v.Broke, "\n"), strings.Join(v.Notes, "\n")
		if tc.broke == "" && broke != "" || !strings.HasPrefix(broke, tc.broke) || !strings.Contains(notes, tc.note) || tc.note == "" && notes != "" || len(v.Held) != tc.held {
			t.Errorf("%s %v: broke %q, notes %q, held %q; want broke %q, note %q, %d held", tc.level, tc.findings, broke, notes, v.Held, tc.broke, tc.note, tc.held)
		}
		if tc.broke != "" && !strings.Contains(broke, "; first: ") {
			t.Errorf("%s: broke %q, want its first anomaly", tc.level, broke)
		}
	}
}

// nemesisMatrix are the conditions the coordination workloads hold under
// at DC_QUORUM: no fault, a symmetric partition (a node isolated), an
// asymmetric one (two nodes cut from each other, the third reaching both),
// 20% loss, delay, a clock skew, and kill -9 of the deciding node.
var nemesisMatrix = []string{"none", "partition:isolate", "partition:bridge", "loss", "delay", "clock-skew", "kill-decider"}

// minCoordinationOps is how many operations of known outcome each
// coordination workload must have run in a round of the matrix for its
// check to count: a few seconds of clients with no think time make
// hundreds (those through a killed node fail fast, of unknown outcome).
const minCoordinationOps = 20

// runMatrix runs the nemesis on c over faults at DC_QUORUM with the seven
// coordination workloads in every round, in short rounds, and checks that
// every fault was put in place, aimed where it should be, and undone, and
// that every workload ran at least minCoordinationOps operations. It
// returns the phase and its verdict.
func runMatrix(t *testing.T, c *cluster, faults ...string) (*NemesisPhase, Verdict) {
	t.Helper()
	racks, why := ProbeNodes(c.nodes)
	if racks == nil {
		t.Fatal(why)
	}
	var out string
	ph, v := runNemesisWith(t, c, func(cfg *Config) {
		cfg.Coordination, cfg.Nemesis.Levels = true, []string{"DC_QUORUM"}
		cfg.Nemesis.Fault = 3 * time.Second
		out = cfg.Out
	}, faults...)
	if len(ph.Rounds) != len(faults) {
		t.Fatalf("%d rounds, want one of each of %q", len(ph.Rounds), faults)
	}
	for i, r := range ph.Rounds {
		kind, mode, _ := strings.Cut(faults[i], ":")
		switch {
		case !strings.HasPrefix(r.Fault, kind) || !strings.Contains(r.Fault, mode):
			t.Errorf("round %d: %s, want %s", i, r.Fault, faults[i])
		case r.Error != "":
			t.Errorf("%s: not put in place: %s", r.Fault, r.Error)
		case kind == nemesisNone && r.Node != "":
			t.Errorf("%s: aimed at %s", r.Fault, r.Node)
		case kind != nemesisNone && (r.Node == "" || r.Healed < r.End || r.End <= r.Start):
			t.Errorf("%s of %q: from %.1f s to %.1f s, healed at %.1f s; want a node, and the heal after the end", r.Fault, r.Node, r.Start, r.End, r.Healed)
		case kind == nemesisKillDecider && r.Node != racks[0].Name:
			t.Errorf("%s: killed %s, want the first rack's node %s, which decides every key", r.Fault, r.Node, racks[0].Name)
		case mode == string(chaos.Bridge) && r.Node == racks[0].Name:
			t.Errorf("%s: the bridge is the deciding node %s: no node is cut from it", r.Fault, r.Node)
		}
		if r.Differ > 0 {
			t.Errorf("%s: the replicas of %d keys differ after the heal: %q", r.Fault, r.Differ, r.Samples)
		}
		var names []string
		for _, f := range r.Coordination {
			names = append(names, f.Checker)
			if f.Ops-f.Unknown < minCoordinationOps {
				t.Errorf("%s: %s ran %d operations of known outcome (of %d), want at least %d", r.Fault, f.Checker, f.Ops-f.Unknown, f.Ops, minCoordinationOps)
			}
			t.Logf("%s: %s: %d operations, %d of unknown outcome, %d anomalies", r.Fault, f.Checker, f.Ops, f.Unknown, f.Anomalies)
			if !f.OK() {
				t.Logf("%s under %s:\n%s", f.Checker, r.Fault, f.Problem())
			}
		}
		var want []string
		for _, cc := range coordinationChecks {
			want = append(want, cc.name)
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s: coordination checks %q, want all seven %q", r.Fault, names, want)
		}
	}
	// Undone: no lease is left, each one reverted by the run or its
	// watchdog.
	if files, err := filepath.Glob(filepath.Join(out, "nemesis", "leases", "*.json")); err != nil || len(files) != 0 {
		t.Errorf("leases left after the nemesis: %v %v", files, err)
	}
	return ph, v
}

// The seven coordination workloads hold at DC_QUORUM on a netns lab under
// each condition of nemesisMatrix: each round runs them all, with clients
// through every node and no think time, beside the register and write
// workloads; every fault is put in place and undone, every workload runs
// its minimum of operations, and no check finds anything wrong.
// (TestNemesisMatrixCatchesNoConsensus, in the planted build, shows that
// the same run finds a store that does not decide these commands by
// consensus.)
func TestNemesisFaultMatrix(t *testing.T) {
	c := nemesisLab(t, "")
	_, v := runMatrix(t, c, nemesisMatrix...)
	for _, l := range v.Broke {
		t.Errorf("broke: %s", l)
	}
	judged := 0
	for _, l := range slices.Concat(v.Held, v.Broke) {
		if strings.Contains(l, "coordination at DC_QUORUM") {
			judged++
		}
	}
	if want := len(nemesisMatrix) * len(coordinationChecks); judged != want {
		t.Errorf("%d coordination checks judged, want %d", judged, want)
	}
}

// A lab on loopback cannot have a network fault come between its nodes:
// the nemesis runs the clock faults alone, and says why.
func TestNemesisOnLoopbackRunsClockFaultsOnly(t *testing.T) {
	spec := lab.Spec{Dir: t.TempDir(), ServeSocket: true}
	l := testlab.Start(t, spec)
	nodes, err := LabNodes(spec.Dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := labCluster(nodes, l, spec.Dir, labchaos.NewWith(labchaos.FromLab(l)))
	if err != nil {
		t.Fatal(err)
	}
	ph, v := runNemesis(t, c, "partition", "loss", "delay", "clock-skew")
	if ph.Network || len(ph.Rounds) != 1 || !strings.HasPrefix(ph.Rounds[0].Fault, "clock-skew") {
		t.Errorf("on loopback: network %v, rounds %+v; want the clock-skew round alone", ph.Network, ph.Rounds)
	}
	noted := false
	for _, n := range v.Notes {
		noted = noted || strings.Contains(n, "only the clock faults ran")
	}
	if !noted || len(v.Broke) > 0 {
		t.Errorf("notes %q, broke %q; want the note that only the clock faults ran, and nothing broken", v.Notes, v.Broke)
	}
}

// holdsAPeerDown says whether a node of c's lab holds one of its peers
// down.
func holdsAPeerDown(ctx context.Context, c *cluster) bool {
	nodes := c.lab.Status().Nodes
	for _, from := range nodes {
		for _, peer := range nodes {
			if from.Name != peer.Name {
				if state, err := labchaos.PeerState(ctx, from.Node, peer.Node); err == nil && state == "down" {
					return true
				}
			}
		}
	}
	return false
}

// Interrupted while its fault holds, the nemesis undoes the fault at once,
// not at its lease's end: no lease is left when it returns.
func TestNemesisInterruptUndoesFault(t *testing.T) {
	c := nemesisLab(t, "")
	cfg := QuickConfig()
	cfg.Troop, cfg.Out, cfg.Seed = testlab.Troop(t), t.TempDir(), 3
	cfg.Nemesis.Faults, cfg.Nemesis.Fault = []string{"partition"}, 5*time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leases := filepath.Join(cfg.Out, "nemesis", "leases")
	var placed time.Time
	go func() {
		// Cancel once the fault is in place: its lease is stored (before
		// the fault begins), and a node holds a peer down.
		defer cancel()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if files, _ := filepath.Glob(filepath.Join(leases, "*.json")); len(files) == 1 && holdsAPeerDown(ctx, c) {
				placed = time.Now()
				return
			}
		}
	}()
	start := time.Now()
	_, err := c.nemesis(ctx, cfg, func(format string, args ...any) { t.Logf(format, args...) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("nemesis: %v, want the interrupt", err)
	}
	if files, _ := filepath.Glob(filepath.Join(leases, "*.json")); len(files) != 0 {
		t.Errorf("leases left after the interrupt: %v", files)
	}
	if placed.IsZero() {
		t.Fatal("the fault was not in place a minute into the nemesis: no lease, or no node held a peer down")
	}
	// The fault is undone at once, and the workloads it held up end.
	if took := time.Since(placed); took > 15*time.Second {
		t.Errorf("the nemesis returned %v after the interrupt (started %v before it)", took, placed.Sub(start))
	}
}
