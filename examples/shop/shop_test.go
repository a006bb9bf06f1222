package shop

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/fit"
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

// TestFaultTypesPerPoint: with several fault types, each point is tried
// with each that applies to it (a status and a reset at HTTP calls, not
// inside a service), and every failure set names how its points failed.
func TestFaultTypesPerPoint(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	target, err := httptarget.New(httptarget.Config{URL: s.EntryURL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := ldfi.DefaultConfig()
	cfg.MaxFaults, cfg.Probes, cfg.Target = 2, 2, target.Spec()
	cfg.Faults = []fit.Fault{{Kind: fit.Error}, {Kind: fit.Status, Status: 503}, {Kind: fit.Reset}}
	r, err := ldfi.Search(context.Background(), cfg, target, ldfi.WallClock{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.Failures {
		got = append(got, "{"+strings.Join(f.Faults, ",")+"}")
	}
	slices.Sort(got)
	var want []string
	for _, set := range s.Expected() {
		// Each point of the set with each fault that applies there.
		combos := [][]string{{}}
		for _, p := range set {
			actions := []string{"error"}
			if !strings.Contains(p, "/") {
				actions = append(actions, "reset", "status:503")
			}
			var next [][]string
			for _, c := range combos {
				for _, a := range actions {
					next = append(next, append(slices.Clone(c), p+"="+a))
				}
			}
			combos = next
		}
		for _, c := range combos {
			slices.Sort(c)
			want = append(want, "{"+strings.Join(c, ",")+"}")
		}
	}
	slices.Sort(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("failure sets\n got %v\nwant %v", got, want)
	}
	var text strings.Builder
	r.WriteText(&text)
	if !strings.Contains(text.String(), "(error, status:503, reset)") || !strings.Contains(text.String(), s.Point("catalog")+"=status:503}") {
		t.Errorf("the report does not name the fault types:\n%s", text.String())
	}
}
