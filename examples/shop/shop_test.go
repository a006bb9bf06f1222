package shop

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/ldfi"
	"github.com/troop-lab/troop/ldfi/httptarget"
)

func keys(sets [][]string) []string {
	var out []string
	for _, s := range sets {
		out = append(out, "{"+strings.Join(slices.Sorted(slices.Values(s)), ",")+"}")
	}
	slices.Sort(out)
	return out
}

// TestFirstTimeUser searches the shop, instrumented as docs/fit.md says
// and no more: the default callee names, the entry service's own failure,
// a fallback nobody marked. The search finds every true failure set and no
// other, and every one replays.
func TestFirstTimeUser(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	target, err := httptarget.New(httptarget.Config{URL: s.EntryURL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, k := range []int{2, 3} {
		cfg := ldfi.DefaultConfig()
		cfg.MaxFaults, cfg.Probes, cfg.Target = k, 3, target.Spec()
		r, err := ldfi.Search(ctx, cfg, target, ldfi.WallClock{})
		if err != nil {
			t.Fatal(err)
		}
		var found [][]string
		for _, f := range r.Failures {
			found = append(found, f.Points)
			rep, err := ldfi.RunScenario(ctx, f.Scenario, target, ldfi.WallClock{})
			if err != nil || !rep.Reproduced {
				t.Errorf("k=%d: scenario %s: %+v, %v", k, f.Scenario.Scope, rep, err)
			}
		}
		if got, want := keys(found), keys(s.Expected()); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("k=%d: failure sets\n got %v\nwant %v", k, got, want)
		}
		if !r.Coverage.Complete {
			t.Errorf("k=%d: %s", k, r.Coverage.Statement)
		}
	}
}
