package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/troop-lab/troop/ldfi"
)

// TestMinimalFailureSetsMatchBruteForce checks the structural computation
// against trying every set of up to 3 points on small graphs.
func TestMinimalFailureSetsMatchBruteForce(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		p := DefaultParams(18, seed)
		p.Optional, p.Fallback = 0.3, 0.3 // small graphs need many to have bugs
		g := Generate(p)
		var brute [][]string
		pts := g.Points()
		try := func(set []string) {
			failed := map[string]bool{}
			for _, x := range set {
				failed[x] = true
			}
			if ok, _ := g.Request(failed); !ok {
				brute = append(brute, slices.Clone(set))
			}
		}
		for i := range pts {
			try([]string{pts[i]})
			for j := i + 1; j < len(pts); j++ {
				try([]string{pts[i], pts[j]})
				for k := j + 1; k < len(pts); k++ {
					try([]string{pts[i], pts[j], pts[k]})
				}
			}
		}
		want := fmt.Sprint(minimize(brute, 3))
		if got := fmt.Sprint(g.MinimalFailureSets(3)); got != want {
			t.Fatalf("seed %d: structural %s\nbrute force %s", seed, got, want)
		}
	}
}

// TestLDFIFindsEveryPlantedSet: on generated graphs ldfi finds every minimal
// failure set of up to 3 points and nothing else.
func TestLDFIFindsEveryPlantedSet(t *testing.T) {
	for _, strategy := range []string{ldfi.StrategyLineage, ldfi.StrategyCompose} {
		for _, n := range []int{20, 100} {
			for seed := uint64(1); seed <= 3; seed++ {
				r, err := Run(context.Background(), DefaultParams(n, seed), 3, strategy, ldfi.MMCS{}, 1000)
				if err != nil {
					t.Fatal(err)
				}
				if r.LDFIFound != r.Planted || r.LDFIExtra != 0 || !r.LDFIComplete {
					t.Errorf("%s, %d points, seed %d: found %d of %d, %d extra, complete %v", strategy, n, seed, r.LDFIFound, r.Planted, r.LDFIExtra, r.LDFIComplete)
				}
			}
		}
	}
}

func TestGenerateIsSeeded(t *testing.T) {
	a, b := Generate(DefaultParams(100, 4)), Generate(DefaultParams(100, 4))
	if strings.Join(a.Points(), " ") != strings.Join(b.Points(), " ") || fmt.Sprint(a.MinimalFailureSets(3)) != fmt.Sprint(b.MinimalFailureSets(3)) {
		t.Error("the same seed gave two graphs")
	}
	if c := Generate(DefaultParams(100, 5)); fmt.Sprint(a.MinimalFailureSets(3)) == fmt.Sprint(c.MinimalFailureSets(3)) {
		t.Error("seeds 4 and 5 gave the same failure sets")
	}
}

// TestAppBootProfile: on App Boot-shaped graphs (about 100 services, 300
// points, most calls optional or with a fallback, planted sets of up to 3
// points) the compose search finds every planted set and nothing else, and
// completes in at most twice as many experiments as there are services.
func TestAppBootProfile(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		r, err := Run(context.Background(), AppBootParams(seed), 3, ldfi.StrategyCompose, ldfi.MMCS{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.LDFIFound != r.Planted || r.LDFIExtra != 0 || !r.LDFIComplete || r.LDFIExperiments > 2*r.Services {
			t.Errorf("seed %d: found %d of %d, %d extra, complete %v, %d experiments for %d services", seed, r.LDFIFound, r.Planted, r.LDFIExtra, r.LDFIComplete, r.LDFIExperiments, r.Services)
		}
	}
}
