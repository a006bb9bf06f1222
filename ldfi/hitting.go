package ldfi

import (
	"iter"
	"slices"
)

// An Enumerator lists the minimal hitting sets of a family of clauses: the
// smallest sets of points that contain at least one point of every clause.
// Points are small non-negative integers (indices into a Formula's points).
//
// Enumerate yields every minimal hitting set with at most maxSize points that
// is not a superset of a set in exclude, smallest first; each yielded slice is
// sorted and owned by the caller. An empty family of clauses has no hitting
// set worth trying (the empty set), so it yields nothing.
type Enumerator interface {
	Enumerate(clauses, exclude [][]int, maxSize int) iter.Seq[[]int]
}

// MMCS is a minimal-hitting-set enumerator after Murakami and Uno's MMCS
// (minimal hitting sets by candidate elements and critical clauses), with a
// bound on the size of the sets: for each size s from 1 up, a depth-first
// search adds one point of an uncovered clause at a time, keeps only points
// that are each the sole hitter of some clause (so every set found is
// minimal), and never explores a point twice in one subtree (so no set is
// found twice).
type MMCS struct{}

// Enumerate implements Enumerator.
func (MMCS) Enumerate(clauses, exclude [][]int, maxSize int) iter.Seq[[]int] {
	return func(yield func([]int) bool) {
		if len(clauses) == 0 {
			return
		}
		// A point in every clause hits them all alone: it is a minimal
		// set of size 1 and in no larger one. Dropping these points from
		// the clauses for the larger sizes leaves the points that differ
		// between executions, usually few.
		common := intersection(clauses)
		for _, p := range common {
			if !supersetOfExcluded([]int{p}, exclude) && !yield([]int{p}) {
				return
			}
		}
		if maxSize < 2 {
			return
		}
		reduced := make([][]int, len(clauses))
		for i, c := range clauses {
			reduced[i] = slices.DeleteFunc(slices.Clone(c), func(p int) bool {
				_, in := slices.BinarySearch(common, p)
				return in
			})
			if len(reduced[i]) == 0 {
				return // that clause is hit by common points only
			}
		}
		m := newMMCS(reduced, exclude)
		for s := 2; s <= maxSize; s++ {
			m.size = s
			if !m.search(yield) {
				return
			}
		}
	}
}

type mmcs struct {
	clauses    [][]int
	occ        [][]int // clause indices containing each point
	excl       [][]int // exclude sets containing each point (indices)
	exclLen    []int
	exclHit    []int // points of each exclude set in the current set
	hitCount   []int // points of the current set in each clause
	hitSum     []int // sum of those points: the sole hitter when hitCount is 1
	crit       []int // clauses each point is the sole hitter of
	inCand     []bool
	uncovered  int
	set        []int
	size       int // size of the sets of this round
	candBuffer [][]int
}

func newMMCS(clauses, exclude [][]int) *mmcs {
	n := 0
	for _, c := range clauses {
		for _, p := range c {
			n = max(n, p+1)
		}
	}
	m := &mmcs{
		clauses:  clauses,
		occ:      make([][]int, n),
		excl:     make([][]int, n),
		hitCount: make([]int, len(clauses)),
		hitSum:   make([]int, len(clauses)),
		crit:     make([]int, n),
		inCand:   make([]bool, n),
	}
	for i, c := range clauses {
		for _, p := range c {
			m.occ[p] = append(m.occ[p], i)
		}
	}
	for _, x := range exclude {
		inRange := true
		for _, p := range x {
			if p >= n {
				inRange = false // a point in no clause: no hitting set contains it
			}
		}
		if !inRange || len(x) == 0 {
			continue
		}
		for _, p := range x {
			m.excl[p] = append(m.excl[p], len(m.exclLen))
		}
		m.exclLen = append(m.exclLen, len(x))
	}
	m.exclHit = make([]int, len(m.exclLen))
	return m
}

func (m *mmcs) search(yield func([]int) bool) bool {
	for i := range m.inCand {
		m.inCand[i] = len(m.occ[i]) > 0
	}
	m.uncovered = len(m.clauses)
	return m.iter(yield)
}

// iter extends the current set; it returns false when yield asked to stop.
func (m *mmcs) iter(yield func([]int) bool) bool {
	if m.uncovered == 0 {
		if len(m.set) == m.size {
			out := slices.Clone(m.set)
			slices.Sort(out)
			return yield(out)
		}
		return true
	}
	if len(m.set) == m.size {
		return true
	}
	// The uncovered clause with the fewest candidates is the one to branch on.
	best, bestN := -1, 0
	for i, c := range m.clauses {
		if m.hitCount[i] != 0 {
			continue
		}
		k := 0
		for _, p := range c {
			if m.inCand[p] {
				k++
			}
		}
		if best < 0 || k < bestN {
			best, bestN = i, k
			if k == 0 {
				return true // no candidate can cover it
			}
		}
	}
	branch := m.buffer(len(m.set))
	for _, p := range m.clauses[best] {
		if m.inCand[p] {
			branch = append(branch, p)
			m.inCand[p] = false
		}
	}
	m.candBuffer[len(m.set)] = branch
	for _, p := range branch {
		if m.add(p) && !m.iter(yield) {
			return false // the caller stopped: the state is dropped
		}
		m.remove(p)
		m.inCand[p] = true
	}
	return true
}

func (m *mmcs) buffer(depth int) []int {
	for len(m.candBuffer) <= depth {
		m.candBuffer = append(m.candBuffer, nil)
	}
	return m.candBuffer[depth][:0]
}

// add puts p in the current set and reports whether the set is still worth
// extending: every point the sole hitter of some clause, and no excluded set
// contained in it.
func (m *mmcs) add(p int) bool {
	m.set = append(m.set, p)
	for _, c := range m.occ[p] {
		switch m.hitCount[c] {
		case 0:
			m.uncovered--
			m.crit[p]++
		case 1:
			m.crit[m.hitSum[c]]--
		}
		m.hitCount[c]++
		m.hitSum[c] += p
	}
	viable := true
	for _, x := range m.excl[p] {
		m.exclHit[x]++
		if m.exclHit[x] == m.exclLen[x] {
			viable = false
		}
	}
	if !viable {
		return false
	}
	for _, q := range m.set {
		if m.crit[q] == 0 {
			return false
		}
	}
	return true
}

func (m *mmcs) remove(p int) {
	m.set = m.set[:len(m.set)-1]
	for _, c := range m.occ[p] {
		m.hitCount[c]--
		m.hitSum[c] -= p
		switch m.hitCount[c] {
		case 0:
			m.uncovered++
			m.crit[p]--
		case 1:
			m.crit[m.hitSum[c]]++
		}
	}
	for _, x := range m.excl[p] {
		m.exclHit[x]--
	}
}

// intersection is the sorted set of points in every clause.
func intersection(clauses [][]int) []int {
	n := 0
	for _, c := range clauses {
		for _, p := range c {
			n = max(n, p+1)
		}
	}
	count, last := make([]int, n), make([]int, n)
	for i, c := range clauses {
		for _, p := range c {
			if last[p] != i+1 { // a point repeated in a clause counts once
				last[p] = i + 1
				count[p]++
			}
		}
	}
	var out []int
	for p, k := range count {
		if k == len(clauses) {
			out = append(out, p)
		}
	}
	return out
}

// supersetOfExcluded reports whether set (sorted) contains a set of exclude.
func supersetOfExcluded(set []int, exclude [][]int) bool {
	for _, x := range exclude {
		if len(x) == 0 {
			continue
		}
		all := true
		for _, p := range x {
			if _, ok := slices.BinarySearch(set, p); !ok {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}
