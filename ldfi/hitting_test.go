package ldfi

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var enumerators = map[string]Enumerator{"mmcs": MMCS{}, "sat": SAT{}}

// bruteForce lists every minimal hitting set of up to maxSize of n points
// that is not a superset of an excluded set, by trying every subset.
func bruteForce(n int, clauses, exclude [][]int, maxSize int) []string {
	if len(clauses) == 0 {
		return nil
	}
	var out []string
	for mask := 1; mask < 1<<n; mask++ {
		var set []int
		for p := 0; p < n; p++ {
			if mask&(1<<p) != 0 {
				set = append(set, p)
			}
		}
		if len(set) > maxSize || !hitsAll(clauses, set) || supersetOfAny(set, exclude) {
			continue
		}
		minimal := true
		for i := range set {
			if hitsAll(clauses, slices.Delete(slices.Clone(set), i, i+1)) {
				minimal = false
			}
		}
		if minimal {
			out = append(out, fmt.Sprint(set))
		}
	}
	slices.Sort(out)
	return out
}

func supersetOfAny(set []int, sets [][]int) bool {
	for _, x := range sets {
		if len(x) > 0 && subset(x, set) {
			return true
		}
	}
	return false
}

func subset(small, big []int) bool {
	for _, p := range small {
		if !slices.Contains(big, p) {
			return false
		}
	}
	return true
}

func randomSets(rng *rand.Rand, n, count, maxLen int) [][]int {
	out := make([][]int, count)
	for i := range out {
		k := 1 + rng.IntN(min(maxLen, n))
		set := map[int]bool{}
		for len(set) < k {
			set[rng.IntN(n)] = true
		}
		for p := range set {
			out[i] = append(out[i], p)
		}
		slices.Sort(out[i])
	}
	return out
}

// TestEnumerateMatchesBruteForce compares both enumerators with brute force
// on seeded random formulas: the same sets, each once, smallest first.
func TestEnumerateMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		n := 1 + rng.IntN(9)
		clauses := randomSets(rng, n, rng.IntN(7), n)
		exclude := randomSets(rng, n, rng.IntN(3), 3)
		maxSize := 1 + rng.IntN(4)
		want := bruteForce(n, clauses, exclude, maxSize)
		for name, e := range enumerators {
			var got []string
			last := 0
			for set := range e.Enumerate(clauses, exclude, maxSize) {
				if len(set) < last {
					t.Fatalf("%s: trial %d: %v after a set of size %d: not smallest first", name, trial, set, last)
				}
				last = len(set)
				got = append(got, fmt.Sprint(set))
			}
			slices.Sort(got)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("%s: trial %d: clauses %v exclude %v k=%d:\n got %v\nwant %v", name, trial, clauses, exclude, maxSize, got, want)
			}
		}
	}
}

// TestEnumerateStops checks that an enumerator stops when asked to.
func TestEnumerateStops(t *testing.T) {
	clauses := [][]int{{0, 1, 2, 3}}
	for name, e := range enumerators {
		n := 0
		for range e.Enumerate(clauses, nil, 1) {
			n++
			break
		}
		if n != 1 {
			t.Errorf("%s: %d sets after break", name, n)
		}
	}
}
