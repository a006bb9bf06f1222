package suite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos/labchaos"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/topology"
)

// nemesisLab starts a three-rack lab in address mode whose nodes run with
// the planted bug ("" for none), as troop run starts its own.
func nemesisLab(t *testing.T, bug string) *cluster {
	t.Helper()
	spec := lab.Spec{Dir: t.TempDir(), Netns: true, ServeSocket: true}
	if bug != "" {
		spec.NodeCommand = plantBug(t, bug)
	}
	l := testlab.Start(t, spec)
	nodes, err := client.FromLab(spec.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{nodes: nodes, lab: l, labDir: spec.Dir, terminator: labchaos.NewWith(labchaos.FromLab(l))}
}

// runNemesis runs the quick run's nemesis phase on c, and judges it.
func runNemesis(t *testing.T, c *cluster) (*NemesisPhase, Verdict) {
	t.Helper()
	cfg := QuickConfig()
	cfg.Troop, cfg.Out, cfg.Seed = testlab.Troop(t), t.TempDir(), 3
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

// The nemesis on the store: every fault kind ran, each was undone and the
// cluster healed, and every DC_QUORUM history held.
func TestNemesisHoldsOnTheStore(t *testing.T) {
	ph, v := runNemesis(t, nemesisLab(t, ""))
	if !ph.Network || len(ph.Rounds) != 8 {
		t.Fatalf("network %v, %d rounds: want the four kinds at two levels on a lab in address mode", ph.Network, len(ph.Rounds))
	}
	for _, r := range ph.Rounds {
		if r.Error != "" || r.Healed < r.End {
			t.Errorf("%s: error %q, healed at %.1f s before its end at %.1f s", r.Fault, r.Error, r.Healed, r.End)
		}
	}
	if len(v.Broke) > 0 {
		t.Errorf("the nemesis broke the store: %v", v.Broke)
	}
	if len(v.Held) < 4 { // one per kind at DC_QUORUM
		t.Errorf("only %d findings held: %v", len(v.Held), v.Held)
	}
}

// The nemesis finds each planted anomaly.
func TestNemesisFindsPlantedBugs(t *testing.T) {
	for _, bug := range []string{topology.BugNoVersionQuery, topology.BugNoReadWriteBack} {
		t.Run(bug, func(t *testing.T) {
			_, v := runNemesis(t, nemesisLab(t, bug))
			found := false
			for _, b := range v.Broke {
				found = found || strings.Contains(b, "DC_QUORUM")
			}
			if !found {
				t.Errorf("the nemesis did not find %s", bug)
			}
		})
	}
}
