package ldfi

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// lineageFormula builds a formula shaped like the ones a search holds: n
// points used by the fault-free execution, of which a tenth optional (each
// gives an execution without it) and a tenth with a fallback (each gives an
// execution with the fallback instead), and the critical points excluded as
// failure sets found.
func lineageFormula(n int, seed uint64) (clauses, exclude [][]int) {
	rng := rand.New(rand.NewPCG(seed, 0))
	base := make([]int, n)
	for i := range base {
		base[i] = i
	}
	clauses = append(clauses, base)
	next := n
	for p := 0; p < n; p++ {
		switch rng.IntN(10) {
		case 0: // optional
			clauses = append(clauses, without(base, []int{p}))
		case 1: // fallback
			c := append(without(base, []int{p}), next)
			next++
			clauses = append(clauses, c)
		default:
			exclude = append(exclude, []int{p})
		}
	}
	return clauses, exclude
}

// BenchmarkEnumerate enumerates every minimal hitting set of up to 2 and 3
// points of lineage-shaped formulas with both enumerators.
//
//	go test -run XXX -bench Enumerate -benchtime 3x ./ldfi
func BenchmarkEnumerate(b *testing.B) {
	for _, n := range []int{20, 100, 500} {
		clauses, exclude := lineageFormula(n, 1)
		for _, k := range []int{2, 3} {
			for _, name := range []string{"mmcs", "sat"} {
				e := enumerators[name]
				b.Run(fmt.Sprintf("points=%d/k=%d/%s", n, k, name), func(b *testing.B) {
					sets := 0
					for range b.N {
						sets = 0
						for range e.Enumerate(clauses, exclude, k) {
							sets++
						}
					}
					b.ReportMetric(float64(sets), "sets")
				})
			}
		}
	}
}

// BenchmarkFirst measures what a search step needs: the first hypotheses of
// the smallest size.
func BenchmarkFirst(b *testing.B) {
	for _, n := range []int{100, 1000} {
		clauses, exclude := lineageFormula(n, 1)
		for _, name := range []string{"mmcs", "sat"} {
			e := enumerators[name]
			b.Run(fmt.Sprintf("points=%d/%s", n, name), func(b *testing.B) {
				for range b.N {
					got := 0
					for range e.Enumerate(clauses, exclude, 3) {
						if got++; got == 16 {
							break
						}
					}
				}
			})
		}
	}
}
