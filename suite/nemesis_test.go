package suite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/bench"
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
	cfg := QuickConfig()
	cfg.Seed = 3
	cfg.Troop, cfg.Out = testlab.Troop(t), t.TempDir()
	cfg.Nemesis.Faults = faults
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
		// Cancel once the fault is in place: a second after its lease is
		// stored (it is stored before the fault begins).
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if files, _ := filepath.Glob(filepath.Join(leases, "*.json")); len(files) == 1 {
				break
			}
		}
		time.Sleep(time.Second)
		placed = time.Now()
		cancel()
	}()
	start := time.Now()
	_, err := c.nemesis(ctx, cfg, func(format string, args ...any) { t.Logf(format, args...) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("nemesis: %v, want the interrupt", err)
	}
	if files, _ := filepath.Glob(filepath.Join(leases, "*.json")); len(files) != 0 {
		t.Errorf("leases left after the interrupt: %v", files)
	}
	// The fault is undone at once, and the workloads it held up end.
	if took := time.Since(placed); placed.IsZero() || took > 15*time.Second {
		t.Errorf("the nemesis returned %v after the interrupt (started %v before it)", took, placed.Sub(start))
	}
}
