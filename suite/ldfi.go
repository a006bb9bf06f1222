package suite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/troop-lab/troop/ldfi"
	"github.com/troop-lab/troop/ldfi/storetarget"
)

// ldfiClasses are the request classes the LDFI phase searches.
var ldfiClasses = []string{"GET at DC_QUORUM", "SET at DC_QUORUM"}

// ldfiPhase runs lineage-driven fault injection on each class through the
// lab's first node, writes each search's report and scenario files under
// DIR/ldfi/<class>, and sums them up for the report. Scenarios name the
// node by lab directory and name, so `troop lab up --dir` over the same
// directory and `troop ldfi replay FILE` reproduce them later.
func (c *cluster) ldfiPhase(ctx context.Context, cfg Config, progress func(string, ...any)) (*LDFIPhase, error) {
	out := &LDFIPhase{}
	labDir, err := filepath.Abs(c.labDir)
	if err != nil {
		return nil, err
	}
	for _, class := range ldfiClasses {
		tc := storetarget.Config{Lab: labDir, Node: c.nodes[0].Name}
		if c.kind == kindTroop { // no lab: the node by its client address
			tc = storetarget.Config{Addr: c.nodes[0].Addr}
		}
		if err := storetarget.ParseClass(class, &tc); err != nil {
			return nil, err
		}
		t, err := storetarget.New(tc)
		if err != nil {
			return nil, err
		}
		sc := ldfi.DefaultConfig()
		sc.Target, sc.Seed, sc.MaxFaults = t.Spec(), cfg.Seed, cfg.LDFIMaxFaults
		progress("lineage-driven fault injection: %s, up to %d faults", class, sc.MaxFaults)
		rep, err := ldfi.Search(ctx, sc, t, ldfi.WallClock{})
		t.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", class, err)
		}
		dir := filepath.Join(cfg.Out, "ldfi", strings.ToLower(strings.ReplaceAll(class, " ", "-")))
		if err := rep.WriteFiles(dir); err != nil {
			return nil, err
		}
		lc := LDFIClass{Name: class, Experiments: len(rep.Experiments), Coverage: rep.Coverage.Statement, Dir: dir}
		for i, f := range rep.Failures {
			lc.FailureSets = append(lc.FailureSets, f.Points)
			lc.Replay = append(lc.Replay, "troop ldfi replay "+filepath.Join(dir, ldfi.ScenarioFile(i)))
		}
		out.Classes = append(out.Classes, lc)
	}
	return out, nil
}
