package ldfi

import (
	"iter"
	"slices"

	"github.com/crillab/gophersat/solver"
)

// SAT enumerates minimal hitting sets with the gophersat SAT solver: point p
// is variable p+1, every clause is a propositional clause, every excluded
// set a clause "not all of these", and for each size s a cardinality
// constraint "at most s points". Each model is shrunk to a minimal hitting
// set, which is yielded and then blocked with its supersets (they are not
// minimal). Once size s is unsatisfiable every minimal set of size s has been
// found, so sets come out smallest first.
type SAT struct{}

// Enumerate implements Enumerator.
func (SAT) Enumerate(clauses, exclude [][]int, maxSize int) iter.Seq[[]int] {
	return func(yield func([]int) bool) {
		if len(clauses) == 0 {
			return
		}
		n := 0
		for _, c := range clauses {
			for _, p := range c {
				n = max(n, p+1)
			}
		}
		var blocks [][]int // found sets and excluded sets, as "not all of these"
		for _, x := range exclude {
			if len(x) > 0 && slices.Max(x) < n {
				blocks = append(blocks, x)
			}
		}
		vars := make([]int, n)
		for i := range vars {
			vars[i] = i + 1
		}
		for s := 1; s <= maxSize; s++ {
			constrs := make([]solver.PBConstr, 0, len(clauses)+len(blocks)+1)
			for _, c := range clauses {
				constrs = append(constrs, solver.PropClause(lits(c, 1)...))
			}
			for _, b := range blocks {
				constrs = append(constrs, solver.PropClause(lits(b, -1)...))
			}
			constrs = append(constrs, solver.AtMost(slices.Clone(vars), s))
			sv := solver.New(solver.ParsePBConstrs(constrs))
			for sv.Solve() == solver.Sat {
				var set []int
				for v, on := range sv.Model() {
					if on && v < n {
						set = append(set, v)
					}
				}
				set = shrink(clauses, set)
				blocks = append(blocks, set)
				if !yield(slices.Clone(set)) {
					return
				}
				sv.AppendClause(solver.PropClause(lits(set, -1)...).Clause())
			}
		}
	}
}

// lits turns points into literals of the given sign.
func lits(points []int, sign int) []int {
	out := make([]int, len(points))
	for i, p := range points {
		out[i] = sign * (p + 1)
	}
	return out
}

// shrink drops points from a hitting set while it still hits every clause,
// leaving a minimal one.
func shrink(clauses [][]int, set []int) []int {
	for i := 0; i < len(set); {
		without := slices.Delete(slices.Clone(set), i, i+1)
		if hitsAll(clauses, without) {
			set = without
		} else {
			i++
		}
	}
	return set
}

// hitsAll reports whether set (sorted) shares a point with every clause.
func hitsAll(clauses [][]int, set []int) bool {
	for _, c := range clauses {
		if !hits(c, set) {
			return false
		}
	}
	return true
}

// hits reports whether set meets clause (both sorted); hypotheses are far
// shorter than clauses, so it looks the set's points up in the clause.
func hits(clause, set []int) bool {
	for _, p := range set {
		if _, ok := slices.BinarySearch(clause, p); ok {
			return true
		}
	}
	return false
}
