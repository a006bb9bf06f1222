package ldfi

import (
	"encoding/binary"
	"iter"
	"math/bits"
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
//
// The search runs over classes of points rather than points: points that
// are in exactly the same clauses (a call and everything below it, in a
// lineage formula) are interchangeable, a minimal set holds at most one of
// them, and each set of classes found stands for every choice of one point
// per class. Lineage formulas have thousands of clauses over few classes.
// Points excluded alone are dropped from the clauses first; larger excluded
// sets are filtered out as the sets are expanded.
type MMCS struct{}

// Enumerate implements Enumerator.
func (MMCS) Enumerate(clauses, exclude [][]int, maxSize int) iter.Seq[[]int] {
	return func(yield func([]int) bool) {
		if len(clauses) == 0 {
			return
		}
		banned := map[int]bool{}
		var larger [][]int
		for _, x := range exclude {
			switch len(x) {
			case 0:
			case 1:
				banned[x[0]] = true
			default:
				larger = append(larger, x)
			}
		}
		classes, classClauses := compress(clauses, banned)
		if classClauses == nil {
			return // a clause only excluded points could hit
		}
		ex := newExcluder(larger)
		m := newMMCS(classClauses)
		emit := func(cs []int) bool {
			return expand(cs, classes, func(set []int) bool { return ex.excludes(set) || yield(set) })
		}
		for s := 1; s <= maxSize; s++ {
			m.size = s
			if !m.search(emit) {
				return
			}
		}
	}
}

// compress groups the points of clauses (but the banned ones) into classes of
// points in exactly the same clauses, and returns the classes (each sorted)
// and the distinct clauses as sorted sets of classes; nil clauses when a
// clause has no point left.
func compress(clauses [][]int, banned map[int]bool) (classes [][]int, out [][]int) {
	n := 0
	for _, c := range clauses {
		for _, p := range c {
			n = max(n, p+1)
		}
	}
	occ := make([][]int32, n)
	for i, c := range clauses {
		for j, p := range c {
			if !banned[p] && (j == 0 || c[j-1] != p) {
				occ[p] = append(occ[p], int32(i))
			}
		}
	}
	classOf := make([]int, n)
	byHash := map[uint64][]int{} // hash of occurrences to classes
	for p := range n {
		classOf[p] = -1
		if len(occ[p]) == 0 {
			continue
		}
		h := uint64(14695981039346656037)
		for _, i := range occ[p] {
			h = (h ^ uint64(i)) * 1099511628211
		}
		for _, c := range byHash[h] {
			if slices.Equal(occ[classes[c][0]], occ[p]) {
				classOf[p] = c
				classes[c] = append(classes[c], p)
				break
			}
		}
		if classOf[p] < 0 {
			classOf[p] = len(classes)
			byHash[h] = append(byHash[h], len(classes))
			classes = append(classes, []int{p})
		}
	}
	seen := map[string]bool{}
	mark := make([]int, len(classes)) // the clause (+1) that last listed each class
	for i, c := range clauses {
		var cc []int
		for _, p := range c {
			if k := classOf[p]; k >= 0 && mark[k] != i+1 {
				mark[k] = i + 1
				cc = append(cc, k)
			}
		}
		if len(cc) == 0 {
			return classes, nil
		}
		slices.Sort(cc)
		if k := setKey(cc); !seen[k] {
			seen[k] = true
			out = append(out, cc)
		}
	}
	return classes, out
}

// expand yields every set of one point per class of cs, sorted; false when
// yield asked to stop.
func expand(cs []int, classes [][]int, yield func([]int) bool) bool {
	set := make([]int, len(cs))
	var rec func(i int) bool
	rec = func(i int) bool {
		if i == len(cs) {
			out := slices.Clone(set)
			slices.Sort(out)
			return yield(out)
		}
		for _, p := range classes[cs[i]] {
			set[i] = p
			if !rec(i + 1) {
				return false
			}
		}
		return true
	}
	return rec(0)
}

// An excluder tells whether a set contains one of the excluded sets.
type excluder struct {
	sets [][]int
	keys map[string]bool
}

func newExcluder(sets [][]int) *excluder {
	e := &excluder{sets: sets, keys: map[string]bool{}}
	for _, x := range sets {
		e.keys[setKey(slices.Sorted(slices.Values(x)))] = true
	}
	return e
}

// excludes reports whether set (sorted) contains an excluded set: by looking
// its subsets up when they are fewer than the excluded sets (a search
// excludes thousands of sets, its hypotheses have a few points).
func (e *excluder) excludes(set []int) bool {
	if len(e.sets) == 0 {
		return false
	}
	if len(set) > 20 || 1<<len(set) > len(e.sets) {
		return supersetOfExcluded(set, e.sets)
	}
	sub := make([]int, 0, len(set))
	for mask := 3; mask < 1<<len(set); mask++ {
		if mask&(mask-1) == 0 {
			continue // single points were dropped before the search
		}
		sub = sub[:0]
		for i, p := range set {
			if mask&(1<<i) != 0 {
				sub = append(sub, p)
			}
		}
		if e.keys[setKey(sub)] {
			return true
		}
	}
	return false
}

// setKey is a map key of a sorted set.
func setKey(set []int) string {
	b := make([]byte, 0, 2*len(set))
	for _, p := range set {
		b = binary.AppendUvarint(b, uint64(p))
	}
	return string(b)
}

// mmcs is the search over classes, each clause a bitset of its classes: a
// lineage formula has few classes and many clauses, so a node of the search
// costs a pass over the clauses with a few word operations each.
type mmcs struct {
	clauses [][]uint64
	words   int
	cand    []uint64 // classes the search may still add
	setBits []uint64
	set     []int
	crit    []uint64 // scratch: classes that are the sole hitter of a clause
	size    int      // size of the sets of this round
}

func newMMCS(clauses [][]int) *mmcs {
	n := 0
	for _, c := range clauses {
		for _, p := range c {
			n = max(n, p+1)
		}
	}
	w := (n + 63) / 64
	m := &mmcs{words: w, cand: make([]uint64, w), setBits: make([]uint64, w), crit: make([]uint64, w)}
	for _, c := range clauses {
		b := make([]uint64, w)
		for _, p := range c {
			b[p/64] |= 1 << (p % 64)
			m.cand[p/64] |= 1 << (p % 64)
		}
		m.clauses = append(m.clauses, b)
	}
	return m
}

func (m *mmcs) search(yield func([]int) bool) bool {
	all := slices.Clone(m.cand)
	ok := m.iter(yield)
	copy(m.cand, all)
	return ok
}

// iter extends the current set; it returns false when yield asked to stop.
func (m *mmcs) iter(yield func([]int) bool) bool {
	// The uncovered clause with the fewest candidates is the one to branch on.
	best, bestN := -1, 0
	for i, c := range m.clauses {
		if meets(c, m.setBits) {
			continue
		}
		k := 0
		for j, w := range c {
			k += bits.OnesCount64(w & m.cand[j])
		}
		if best < 0 || k < bestN {
			best, bestN = i, k
			if k == 0 {
				return true // no candidate can cover it
			}
		}
	}
	if best < 0 {
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
	var branch []int
	for j, w := range m.clauses[best] {
		w &= m.cand[j]
		m.cand[j] &^= w
		for ; w != 0; w &= w - 1 {
			branch = append(branch, j*64+bits.TrailingZeros64(w))
		}
	}
	for _, p := range branch {
		m.set = append(m.set, p)
		m.setBits[p/64] |= 1 << (p % 64)
		if m.minimal() && !m.iter(yield) {
			return false // the caller stopped: the state is dropped
		}
		m.set = m.set[:len(m.set)-1]
		m.setBits[p/64] &^= 1 << (p % 64)
		m.cand[p/64] |= 1 << (p % 64)
	}
	return true
}

// minimal reports whether every class of the current set is the sole hitter
// of some clause: otherwise the set, and all it could grow into, is not a
// minimal hitting set.
func (m *mmcs) minimal() bool {
	clear(m.crit)
	for _, c := range m.clauses {
		sole, hit := -1, 0
		for j, w := range c {
			if x := w & m.setBits[j]; x != 0 {
				hit += bits.OnesCount64(x)
				sole = j*64 + bits.TrailingZeros64(x)
			}
		}
		if hit == 1 {
			m.crit[sole/64] |= 1 << (sole % 64)
		}
	}
	for j, w := range m.setBits {
		if w&^m.crit[j] != 0 {
			return false
		}
	}
	return true
}

// meets reports whether the bitsets a and b share a bit.
func meets(a, b []uint64) bool {
	for j, w := range a {
		if w&b[j] != 0 {
			return true
		}
	}
	return false
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
