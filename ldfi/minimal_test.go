package ldfi

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMinimalClausesMatchBruteForce adds random clauses one by one and checks,
// after each, that the kept clauses are exactly the minimal ones, and that
// the classes are interchangeable points: in exactly the same minimal
// clauses.
func TestMinimalClausesMatchBruteForce(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 2 + rng.IntN(14)
		var m minimalClauses
		var all [][]int
		for i, c := range randomSets(rng, n, 1+rng.IntN(12), 1+rng.IntN(n)) {
			all = append(all, c)
			m.add(c)

			var want []string
			var minimal [][]int
			for _, c := range all {
				if !slices.ContainsFunc(all, func(o []int) bool { return len(o) < len(c) && subset(o, c) }) {
					minimal = append(minimal, c)
					if k := fmt.Sprint(c); !slices.Contains(want, k) {
						want = append(want, k)
					}
				}
			}
			var got []string
			for _, r := range m.bits.rows {
				if r == nil {
					continue
				}
				var points []int
				for k, members := range m.members {
					if hasBit(r, k) {
						points = append(points, members...)
					}
				}
				got = append(got, fmt.Sprint(slices.Sorted(slices.Values(points))))
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d, after clause %d: kept %v, want %v", seed, i, got, want)
			}
			for k, members := range m.members {
				for _, p := range members[1:] {
					for _, c := range minimal {
						if slices.Contains(c, p) != slices.Contains(c, members[0]) {
							t.Fatalf("seed %d: class %d holds %d and %d, which clause %v tells apart", seed, k, members[0], p, c)
						}
					}
				}
			}
		}
	}
}
