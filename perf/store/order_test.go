package main

import (
	"slices"
	"testing"
)

// Over 2 x groups rounds, each group goes first twice and stays together,
// and no target always has the same one before it.
func TestRoundOrder(t *testing.T) {
	for _, tc := range []struct {
		targets []string
		size    int
	}{
		{[]string{"direct", "nutcracker", "node", "base"}, 1},
		{[]string{"direct", "nutcracker", "node"}, 1},
		{[]string{"dc_one", "dc_quorum", "base_dc_one", "base_dc_quorum"}, 2},
	} {
		groups := len(tc.targets) / tc.size
		first := map[string]int{}
		before := map[string]map[string]bool{}
		for n := 1; n <= 2*groups; n++ {
			order := roundOrder(tc.targets, n, tc.size)
			if got, want := slices.Sorted(slices.Values(order)), slices.Sorted(slices.Values(tc.targets)); !slices.Equal(got, want) {
				t.Fatalf("round %d: %v is not an order of %v", n, order, tc.targets)
			}
			for g := 0; g < groups; g++ {
				i := slices.Index(tc.targets, order[g*tc.size])
				if i%tc.size != 0 || !slices.Equal(order[g*tc.size:(g+1)*tc.size], tc.targets[i:i+tc.size]) {
					t.Fatalf("round %d: %v splits a group of %d", n, order, tc.size)
				}
			}
			first[order[0]]++
			for i := 1; i < len(order); i++ {
				if before[order[i]] == nil {
					before[order[i]] = map[string]bool{}
				}
				before[order[i]][order[i-1]] = true
			}
		}
		for g := 0; g < groups; g++ {
			if k := first[tc.targets[g*tc.size]]; k != 2 {
				t.Errorf("%v: %s went first %d times in %d rounds, want 2", tc.targets, tc.targets[g*tc.size], k, 2*groups)
			}
		}
		for _, target := range tc.targets {
			if len(before[target]) == 1 && tc.size == 1 {
				t.Errorf("%v: %s always came right after the same target", tc.targets, target)
			}
		}
	}
}
