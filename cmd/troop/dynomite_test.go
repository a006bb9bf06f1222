package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// The checker, checked on a real bug: troop run --cluster on three racks of
// Dynomite at DC_QUORUM reads the level from Dynomite's admin API, and the
// register workload's history, which is not linearizable there (Dynomite
// orders concurrent writes through different nodes differently on
// different replicas, and a quorum read takes whichever two agree), breaks
// the verdict with a counterexample. The same run on troop's nodes at
// DC_QUORUM holds. Dynomite shows its counterexample within tens of
// milliseconds of the workload (docs/run.md gives the figures), well inside
// the workload's seconds.
func TestRunHoldsDynomiteToItsLevel(t *testing.T) {
	dyn := testlab.Start(t, lab.Spec{Engine: lab.EngineDynomite, Dynomite: testlab.Dynomite(t),
		ReadConsistency: "DC_QUORUM", WriteConsistency: "DC_QUORUM", ReplaceAfter: time.Minute})
	cfg := shortRun(t)
	cfg.Cluster, cfg.LDFIMaxFaults = dyn.Nodes()[0].StatsListen, 1
	cfg.Register.Duration = 5 * time.Second
	rep := runExisting(t, cfg)
	if s := rep.Store; s.Name != "Dynomite" || s.Version == "" || s.Levels != "DC_QUORUM" || !strings.HasPrefix(s.LevelsFrom, "its admin API at ") {
		t.Errorf("store: %+v", s)
	}
	if len(rep.Consistency) != 1 || rep.Consistency[0].Level != "DC_QUORUM" {
		t.Fatalf("consistency: %+v", rep.Consistency)
	}
	v := rep.Consistency[0].Verdict
	if rep.Verdict.OK || v.Result != "Illegal" || v.Counterexample == nil || len(v.Counterexample.Ops) == 0 ||
		!slices.ContainsFunc(rep.Verdict.Broke, func(b string) bool {
			return strings.HasPrefix(b, "consistency at DC_QUORUM: not linearizable") && strings.Contains(b, v.Counterexample.Key)
		}) {
		t.Fatalf("Dynomite at DC_QUORUM: result %s, broke %q", v.Result, rep.Verdict.Broke)
	}
	t.Logf("Dynomite's counterexample: %d operations on %s, the last returned %s into the workload of %d operations",
		len(v.Counterexample.Ops), v.Counterexample.Key, lastReturn(v.Counterexample.Ops), v.Ops)
	if !skipped(rep, "lineage-driven fault injection") {
		t.Errorf("LDFI on Dynomite: skipped %q", rep.Skipped)
	}

	troop := startLab(t)
	cfg = shortRun(t)
	cfg.Cluster, cfg.Levels = troop.Nodes()[0].StatsListen, []string{"DC_QUORUM"}
	cfg.Register.Duration = 5 * time.Second
	rep = runExisting(t, cfg)
	if !rep.Verdict.OK || len(rep.Consistency) != 1 || !rep.Consistency[0].Verdict.Linearizable() || rep.Store.Name != "troop" {
		t.Errorf("troop at DC_QUORUM: store %+v, consistency %+v, broke %q", rep.Store, rep.Consistency, rep.Verdict.Broke)
	}
}

// lastReturn is when the last of ops returned, into its workload.
func lastReturn(ops []check.Op) time.Duration {
	var last int64
	for _, o := range ops {
		last = max(last, o.Return)
	}
	return time.Duration(last).Round(time.Millisecond)
}
