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

// TestDroppedSlotPastClassWord: clauses dropped as no longer minimal leave
// their slots free; when the classes then need another word, a free slot
// must stay free (nil), not become a clause of no class, which every new
// clause would contain (so none would be kept any more: the search would
// take a set that survived for one still hitting every clause, and skip its
// supersets).
func TestDroppedSlotPastClassWord(t *testing.T) {
	var m minimalClauses
	for _, c := range [][]int{{0, 1, 2}, {0, 1, 3}, {0, 1, 4}} {
		m.add(c)
	}
	for p := 100; len(m.members) < 64; p++ {
		if !m.add([]int{p}) {
			t.Fatalf("{%d} is minimal", p)
		}
	}
	if !m.add([]int{0, 1}) { // drops the three clauses above: two slots stay free
		t.Fatal("{0,1} is minimal")
	}
	if !m.add([]int{500}) { // the 65th class: another word
		t.Fatal("{500} is minimal")
	}
	if !m.add([]int{600, 601}) {
		t.Fatal("{600,601} is minimal, but was taken for a superset of a dropped clause")
	}
}
