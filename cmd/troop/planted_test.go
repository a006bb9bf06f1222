//go:build planted

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/suite"
)

// The store as it was before its quorum writes asked a quorum for versions
// (the planted bug no-version-query: a write through a node whose clock is
// behind could be stamped below one acknowledged before it, and lost)
// fails the suite: its consistency phase's probes make that history happen
// on every run, the report says so at the top and shows a counterexample.
func TestRunFindsPlantedBug(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	troop := testlab.Troop(t)
	cfg := suite.QuickConfig()
	cfg.Troop, cfg.Version = troop, "test"
	cfg.LDFIMaxFaults = 0 // the planted bug is the other checks' to find
	cfg.Baseline, cfg.Fault, cfg.KillAt = 2*time.Second, 5*time.Second, 2*time.Second
	// One register client, through one node, cannot meet the bug (it
	// needs writes through two coordinators): what finds it is the
	// probes, on every run. The random workload's own finding of it is a
	// matter of luck (TestContendedRegistersSearch).
	cfg.Register.Duration, cfg.Register.Clients, cfg.Nemesis.Faults = 2*time.Second, 1, nil
	cfg.NodeCommand = func(n lab.Node) []string {
		conf, err := os.ReadFile(n.Config)
		if err != nil {
			t.Error(err)
		}
		planted := filepath.Join(n.Dir, "planted.yml")
		conf = append(conf, "  troop_planted_bug: no-version-query\n"...)
		if err := os.WriteFile(planted, conf, 0o644); err != nil {
			t.Error(err)
		}
		return []string{troop, "node", "--config", planted}
	}
	var stdout strings.Builder
	rep, err := runSuite(ctx, cfg, out, &stdout)
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	t.Log("\n" + stdout.String())
	if rep.Verdict.OK || len(rep.Verdict.Broke) == 0 {
		t.Fatalf("the verdict missed the planted bug: %+v", rep.Verdict)
	}
	caught := false
	for _, b := range rep.Verdict.Broke {
		caught = caught || strings.HasPrefix(b, "consistency at DC_QUORUM: not linearizable") && strings.Contains(b, ":probe:stamped-below")
	}
	if !caught {
		t.Errorf("the linearizability check did not break: %v", rep.Verdict.Broke)
	}
	html, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "Something broke") || !strings.Contains(string(html), "Counterexample at DC_QUORUM") {
		t.Error("the report does not say what broke, with a counterexample")
	}
}
