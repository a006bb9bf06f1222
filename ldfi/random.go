package ldfi

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
)

// RandomInjection is random fault injection, the baseline ldfi is measured
// against: each experiment fails a random set of 1 to k atoms (at most one
// per point); a set that fails the request is shrunk to a minimal one, one
// more experiment per atom tried. found is told each minimal set found (it
// may come again) and the experiments so far, and stops the run by
// returning false. It returns the experiments run, at most budget.
func RandomInjection(rng *rand.Rand, atoms []string, k, budget int, fails func(set []string) (bool, error), found func(set []string, n int) bool) (int, error) {
	n := 0
	try := func(set []string) (bool, error) {
		n++
		return fails(set)
	}
	for n < budget && len(atoms) > 0 {
		size := 1 + rng.IntN(k)
		var set []string
		seen := map[string]bool{}
		for tries := 0; len(set) < size && tries < 4*size; tries++ {
			a := atoms[rng.IntN(len(atoms))]
			p, _, _ := strings.Cut(a, "=")
			if !seen[p] {
				seen[p] = true
				set = append(set, a)
			}
		}
		slices.Sort(set)
		failed, err := try(set)
		if err != nil {
			return n, err
		}
		if !failed {
			continue
		}
		for i := 0; i < len(set) && len(set) > 1 && n < budget; {
			without := slices.Delete(slices.Clone(set), i, i+1)
			f, err := try(without)
			if err != nil {
				return n, err
			}
			if f {
				set = without
			} else {
				i++
			}
		}
		if !found(set, n) {
			break
		}
	}
	return n, nil
}

// A RandomComparison is random fault injection run against the same target
// with the same budget as a search (`troop ldfi run --compare-random`).
type RandomComparison struct {
	Budget      int        `json:"budget"` // experiments: as many as the search ran
	Experiments int        `json:"experiments"`
	Found       [][]string `json:"found"`     // minimal failure sets random injection found, as faults
	AlsoLDFI    int        `json:"also_ldfi"` // of those, how many the search found too
	NotLDFI     [][]string `json:"not_ldfi"`  // found by random injection only
	Seed        uint64     `json:"seed"`
	Note        string     `json:"note,omitempty"` // e.g. a superset of a set the search found
}

// CompareRandom runs random fault injection against t with the budget of
// report r's search (its experiments), over the points (atoms) r's formula
// saw, each experiment cfg.Probes requests judged as the search judges, and
// compares what it finds with r's failure sets.
func CompareRandom(ctx context.Context, cfg Config, t Target, clock Clock, r *Report) (*RandomComparison, error) {
	at := newAtoms(cfg.Faults)
	c := &RandomComparison{Budget: len(r.Experiments), Seed: cfg.Seed}
	ldfiSets := map[string]bool{}
	for _, f := range r.Failures {
		ldfiSets[strings.Join(f.Faults, ",")] = true
	}
	seen := map[string]bool{}
	var f Formula
	fails := func(set []string) (bool, error) {
		e, err := experimentScope(ctx, cfg, t, &f, at, clock, 0, at.scope(set))
		return e.Outcome == Failed, err
	}
	n, err := RandomInjection(rand.New(rand.NewPCG(cfg.Seed, 0xfa11)), r.Formula.Points, cfg.MaxFaults, c.Budget, fails, func(set []string, _ int) bool {
		names := faultNames(at.scope(set))
		key := strings.Join(names, ",")
		if !seen[key] {
			seen[key] = true
			c.Found = append(c.Found, names)
			if ldfiSets[key] {
				c.AlsoLDFI++
			} else {
				c.NotLDFI = append(c.NotLDFI, names)
			}
		}
		return ctx.Err() == nil
	})
	c.Experiments = n
	return c, err
}

// WriteText writes the comparison.
func (c *RandomComparison) WriteText(w io.Writer, ldfiSets int) {
	fmt.Fprintf(w, "\nrandom fault injection, same budget (%d experiments, seed %d): %d failure set(s) found, %d of them found by ldfi too; ldfi found %d\n",
		c.Experiments, c.Seed, len(c.Found), c.AlsoLDFI, ldfiSets)
	for _, s := range c.NotLDFI {
		fmt.Fprintf(w, "  found by random injection only: {%s}\n", strings.Join(s, ", "))
	}
}
