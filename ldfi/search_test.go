package ldfi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/fit"
)

// fakeClock is a clock that moves only when the search sleeps.
type fakeClock struct {
	now    time.Time
	slept  []time.Duration
	ticked time.Duration // added on every Now, so experiments take time
}

func (c *fakeClock) Now() time.Time { c.now = c.now.Add(c.ticked); return c.now }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

// appBoot is the worked example of Netflix's LDFI post: the API calls Ratings
// (optional), Playlist (with the fallback PF) and B; A (the API itself) and
// B are critical.
type appBoot struct{ probes int }

// The seed's points as valid point names: the entry A, and A's calls.
const (
	pA, pR, pP, pPF, pB = "client->A", "A->R", "A->P", "A->PF", "A->B"
)

func (a *appBoot) Probe(_ context.Context, scope fit.Scope) (Probe, error) {
	a.probes++
	failed := func(p string) bool { _, ok := scope.Lookup(p); return ok }
	l := Lineage{Known: true, Reached: []string{pA, pR, pP, pB}}
	if failed(pA) {
		return Probe{OK: false, Detail: "API down", Lineage: l}, nil
	}
	l.Used = append(l.Used, pA)
	if !failed(pR) {
		l.Used = append(l.Used, pR)
	}
	if !failed(pP) {
		l.Used = append(l.Used, pP)
	} else {
		l.Reached = append(l.Reached, pPF)
		if failed(pPF) {
			return Probe{OK: false, Detail: "no playlist", Lineage: l}, nil
		}
		l.Used = append(l.Used, pPF)
	}
	if failed(pB) {
		return Probe{OK: false, Detail: "B down", Lineage: l}, nil
	}
	l.Used = append(l.Used, pB)
	return Probe{OK: true, Lineage: l}, nil
}

func failureSets(r *Report) []string {
	var out []string
	for _, f := range r.Failures {
		out = append(out, "{"+strings.Join(f.Points, ",")+"}")
	}
	slices.Sort(out)
	return out
}

func TestSeedWorkedExample(t *testing.T) {
	for _, name := range []string{"mmcs", "sat"} {
		for seed := uint64(1); seed <= 5; seed++ {
			cfg := DefaultConfig()
			cfg.Seed, cfg.Enumerator = seed, enumerators[name]
			r, err := Search(context.Background(), cfg, &appBoot{}, &fakeClock{})
			if err != nil {
				t.Fatal(err)
			}
			if got := failureSets(r); fmt.Sprint(got) != "[{A->B} {A->P,A->PF} {client->A}]" {
				t.Fatalf("%s seed %d: failure sets %v, want {A} {B} {P,PF}", name, seed, got)
			}
			// Singletons first: A, R, P, B, then pairs. ({P,R} may be
			// tried too: when P fails before R, the alternate execution
			// still uses R, so {P,R} hits every clause known then.)
			var sizes []int
			var singles []string
			pfFound := false
			for _, e := range r.Experiments {
				sizes = append(sizes, len(e.Hypothesis))
				if len(e.Hypothesis) == 1 {
					singles = append(singles, e.Hypothesis[0])
				}
				if slices.Equal(e.Hypothesis, []string{pP}) {
					if e.Outcome != Survived || e.NewClauses != 1 {
						t.Errorf("%s seed %d: failing P: %+v, want it survived through a new execution", name, seed, e)
					}
				}
			}
			for _, c := range r.Formula.Clauses() {
				if slices.Contains(c.Points, pPF) {
					pfFound = true
				}
			}
			slices.Sort(singles)
			if !slices.IsSorted(sizes) || fmt.Sprint(singles) != "[A->B A->P A->R client->A]" || len(sizes) > 6 {
				t.Errorf("%s seed %d: hypothesis sizes %v, singletons %v: want A, B, P, R first, then at most two pairs", name, seed, sizes, singles)
			}
			if !pfFound {
				t.Errorf("%s seed %d: PF never entered the formula: %+v", name, seed, r.Formula.Clauses())
			}
			if !r.Coverage.Complete || !strings.Contains(r.Coverage.Statement, fmt.Sprintf("%d hypotheses tested", len(sizes))) {
				t.Errorf("%s seed %d: coverage %+v", name, seed, r.Coverage)
			}
		}
	}
}

func TestSameSeedSameSearch(t *testing.T) {
	run := func(seed uint64) string {
		cfg := DefaultConfig()
		cfg.Seed = seed
		r, err := Search(context.Background(), cfg, &appBoot{}, &fakeClock{})
		if err != nil {
			t.Fatal(err)
		}
		var hs []string
		for _, e := range r.Experiments {
			hs = append(hs, strings.Join(e.Hypothesis, "+"))
		}
		return strings.Join(hs, " ")
	}
	if a, b := run(7), run(7); a != b {
		t.Errorf("seed 7 gave %s then %s", a, b)
	}
	orders := map[string]bool{}
	for seed := uint64(1); seed <= 20; seed++ {
		orders[run(seed)] = true
	}
	if len(orders) < 2 {
		t.Errorf("20 seeds gave one order of hypotheses: the seed does not choose")
	}
}

func TestBudgets(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxExperiments = 3
	r, err := Search(context.Background(), cfg, &appBoot{}, &fakeClock{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Experiments) != 3 || r.Coverage.Complete || !strings.Contains(r.Coverage.Statement, "NOT complete") {
		t.Errorf("max 3 experiments: %d run, coverage %+v", len(r.Experiments), r.Coverage)
	}

	// Member pain: two experiments per minute; each takes time on the clock.
	cfg = DefaultConfig()
	cfg.PerPeriod, cfg.Period = 2, time.Minute
	clock := &fakeClock{ticked: time.Second}
	r, err = Search(context.Background(), cfg, &appBoot{}, clock)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Experiments); n < 5 || len(clock.slept) != (n-1)/2 {
		t.Fatalf("%d experiments at 2 per minute: slept %v", n, clock.slept)
	}
	for i := 2; i < len(r.Experiments); i += 2 {
		if d := r.Experiments[i].Start.Sub(r.Experiments[i-2].Start); d < time.Minute {
			t.Errorf("experiments %d and %d %v apart, within one period", i-1, i+1, d)
		}
	}
}

type failing struct{}

func (failing) Probe(context.Context, fit.Scope) (Probe, error) {
	return Probe{OK: false, Detail: "HTTP 500", Lineage: Lineage{Known: true}}, nil
}

func TestBaselineFails(t *testing.T) {
	_, err := Search(context.Background(), DefaultConfig(), failing{}, &fakeClock{})
	if !errors.Is(err, ErrBaselineFails) {
		t.Errorf("err %v, want ErrBaselineFails", err)
	}
}

// TestUnreachedIgnored: requests that never reach an injected point do not
// count, so a flaky class cannot fake a failure set through them.
func TestUnreachedIgnored(t *testing.T) {
	var f Formula
	f.Add([]string{"a/x"}, 0)
	target := probeFunc(func(scope fit.Scope) Probe {
		return Probe{OK: false, Lineage: Lineage{Known: true, Reached: []string{"a/y"}}}
	})
	cfg := DefaultConfig()
	e, err := experiment(context.Background(), cfg, target, &f, newAtoms(cfg.Faults), &fakeClock{}, 1, []string{"a/x"})
	if err != nil || e.Outcome != Unreached || e.Reached != 0 {
		t.Errorf("experiment %+v, %v: want unreached", e, err)
	}
}

type probeFunc func(fit.Scope) Probe

func (p probeFunc) Probe(_ context.Context, s fit.Scope) (Probe, error) { return p(s), nil }

func TestJudge(t *testing.T) {
	for _, c := range []struct {
		reached, failed int
		want            string
	}{{0, 0, Unreached}, {10, 8, Failed}, {10, 7, Inconclusive}, {4, 3, Inconclusive}, {10, 0, Survived}, {1, 1, Failed}} {
		if got := judge(c.reached, c.failed, 0.75); got != c.want {
			t.Errorf("judge(%d, %d) = %s, want %s", c.reached, c.failed, got, c.want)
		}
	}
}

// TestUnnameablePoint: a lineage that reports a point no scope can name
// (here a callee named by its host and port) stops the search at once,
// naming the point, instead of testing hypotheses that can never be
// injected.
func TestUnnameablePoint(t *testing.T) {
	target := probeFunc(func(scope fit.Scope) Probe {
		return Probe{OK: true, Lineage: Lineage{Known: true, Reached: []string{"api->127.0.0.1:8080"}, Used: []string{"api->127.0.0.1:8080"}}}
	})
	r, err := Search(context.Background(), DefaultConfig(), target, &fakeClock{})
	if err == nil || !strings.Contains(err.Error(), `"api->127.0.0.1:8080"`) || (r != nil && len(r.Failures) > 0) {
		t.Errorf("err %v, report %+v: want an error naming the point", err, r)
	}
}

// TestCompareRandom: random injection at the search's budget, against the
// same target, finds only true failure sets (shrunk to minimal ones), and
// says which of them the search found too.
func TestCompareRandom(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Probes = 1
	r, err := Search(context.Background(), cfg, &appBoot{}, &fakeClock{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := CompareRandom(context.Background(), r.Config, &appBoot{}, &fakeClock{}, r)
	if err != nil {
		t.Fatal(err)
	}
	if c.Budget != len(r.Experiments) || c.Experiments > c.Budget || c.Experiments == 0 {
		t.Errorf("budget %d, experiments %d, search %d", c.Budget, c.Experiments, len(r.Experiments))
	}
	true3 := map[string]bool{pA + "=error": true, pB + "=error": true, pP + "=error," + pPF + "=error": true}
	for _, s := range c.Found {
		if !true3[strings.Join(s, ",")] {
			t.Errorf("random injection found %v, no true minimal failure set", s)
		}
	}
	if c.AlsoLDFI != len(c.Found) || len(c.NotLDFI) != 0 {
		t.Errorf("%+v: every set random found is one the search found", c)
	}
	var b strings.Builder
	c.WriteText(&b, len(r.Failures))
	if !strings.Contains(b.String(), fmt.Sprintf("same budget (%d experiments", c.Experiments)) {
		t.Errorf("text: %s", b.String())
	}
}
