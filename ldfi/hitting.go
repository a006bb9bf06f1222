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
//
// Clauses are bitsets both ways (clauseBits): each clause's classes, to pick
// the clause to branch on, and each class's clauses, so that adding a class
// updates the uncovered clauses and each member's critical ones with a few
// word operations. A search keeps its formula in that form as clauses
// arrive (minimalClauses), so a step enumerates without rebuilding it.
type MMCS struct{}

// Enumerate implements Enumerator.
func (MMCS) Enumerate(clauses, exclude [][]int, maxSize int) iter.Seq[[]int] {
	return func(yield func([]int) bool) {
		if len(clauses) == 0 {
			return
		}
		banned, larger := splitExclude(exclude)
		classes, classClauses := compress(clauses, banned)
		if classClauses == nil {
			return // a clause only excluded points could hit
		}
		ex := newExcluder(larger)
		var cb clauseBits
		for range classes {
			cb.addClass()
		}
		for _, c := range classClauses {
			var row []uint64
			for _, k := range c {
				row = setBit(row, k)
			}
			cb.insert(row)
		}
		all := make([]uint64, len(cb.occ)/64+1)
		for k := range classes {
			all = setBit(all, k)
		}
		for cs := range (MMCS{}).enumerateRows(&cb, all, maxSize) {
			if !expand(cs, classes, func(set []int) bool { return ex.excludes(set) || yield(set) }) {
				return
			}
		}
	}
}

// A rowEnumerator enumerates the minimal hitting sets of clauses kept as
// bitsets: the search keeps its clauses so, and MMCS works on them directly.
type rowEnumerator interface {
	enumerateRows(cb *clauseBits, classes []uint64, maxSize int) iter.Seq[[]int]
}

// enumerateRows enumerates with e the minimal hitting sets of up to maxSize
// classes of the clauses of cb, using only the given classes.
func enumerateRows(e Enumerator, cb *clauseBits, classes []uint64, maxSize int) iter.Seq[[]int] {
	if r, ok := e.(rowEnumerator); ok {
		return r.enumerateRows(cb, classes, maxSize)
	}
	var clauses [][]int
	for i, r := range cb.rows {
		if !hasBit(cb.live, i) {
			continue
		}
		var c []int
		for j, w := range r {
			if j < len(classes) {
				for w &= classes[j]; w != 0; w &= w - 1 {
					c = append(c, j*64+bits.TrailingZeros64(w))
				}
			}
		}
		if len(c) == 0 {
			return func(func([]int) bool) {} // nothing can hit this clause
		}
		clauses = append(clauses, c)
	}
	return e.Enumerate(clauses, nil, maxSize)
}

func (MMCS) enumerateRows(cb *clauseBits, classes []uint64, maxSize int) iter.Seq[[]int] {
	return func(yield func([]int) bool) {
		m := newMMCS(cb, classes, maxSize)
		for s := 1; s <= maxSize; s++ {
			m.size = s
			if !m.search(yield) {
				return
			}
		}
	}
}

// clauseBits keeps clauses over classes as bitsets both ways: per clause
// slot, its classes (rows), and per class, the slots of the clauses it is in
// (occ). A dropped clause's slot is nil, not live, and reused. Every row has
// as many words as the classes need, every occ as many as the slots need,
// so the search's word loops need no bounds of their own.
type clauseBits struct {
	rows [][]uint64
	occ  [][]uint64
	live []uint64
	free []int
}

// addClass adds a class in no clause and returns it.
func (cb *clauseBits) addClass() int {
	k := len(cb.occ)
	if k%64 == 0 {
		for i, r := range cb.rows {
			if r != nil { // a dropped clause's slot stays nil, free
				cb.rows[i] = append(r, 0)
			}
		}
	}
	cb.occ = append(cb.occ, make([]uint64, len(cb.live)))
	return k
}

// copyClass puts class to in every clause that has class from.
func (cb *clauseBits) copyClass(from, to int) {
	copy(cb.occ[to], cb.occ[from])
	for j, w := range cb.occ[from] {
		for ; w != 0; w &= w - 1 {
			i := j*64 + bits.TrailingZeros64(w)
			cb.rows[i][to/64] |= 1 << (to % 64)
		}
	}
}

// insert adds the clause of the classes of row.
func (cb *clauseBits) insert(row []uint64) {
	full := make([]uint64, (len(cb.occ)+63)/64)
	copy(full, row)
	var i int
	if n := len(cb.free); n > 0 {
		i, cb.free = cb.free[n-1], cb.free[:n-1]
		cb.rows[i] = full
	} else {
		i = len(cb.rows)
		cb.rows = append(cb.rows, full)
		if i/64 == len(cb.live) {
			cb.live = append(cb.live, 0)
			for k, o := range cb.occ {
				cb.occ[k] = append(o, 0)
			}
		}
	}
	cb.live[i/64] |= 1 << (i % 64)
	for j, w := range full {
		for ; w != 0; w &= w - 1 {
			k := j*64 + bits.TrailingZeros64(w)
			cb.occ[k][i/64] |= 1 << (i % 64)
		}
	}
}

// remove drops the clause in slot i.
func (cb *clauseBits) remove(i int) {
	for j, w := range cb.rows[i] {
		for ; w != 0; w &= w - 1 {
			k := j*64 + bits.TrailingZeros64(w)
			cb.occ[k][i/64] &^= 1 << (i % 64)
		}
	}
	cb.rows[i] = nil
	cb.live[i/64] &^= 1 << (i % 64)
	cb.free = append(cb.free, i)
}

// splitExclude splits excluded sets into single points, as a table by point,
// and larger sets.
func splitExclude(exclude [][]int) (banned []bool, larger [][]int) {
	for _, x := range exclude {
		switch len(x) {
		case 0:
		case 1:
			for len(banned) <= x[0] {
				banned = append(banned, false)
			}
			banned[x[0]] = true
		default:
			larger = append(larger, x)
		}
	}
	return banned, larger
}

// compress groups the points of clauses (but the banned ones) into classes of
// points in exactly the same clauses, and returns the classes (each sorted)
// and the distinct clauses as sorted sets of classes; nil clauses when a
// clause has no point left. The classes come from refining one partition
// clause by clause: the points of a class that are in the clause move to a
// class of their own.
func compress(clauses [][]int, banned []bool) (classes [][]int, out [][]int) {
	n := 0
	for _, c := range clauses {
		for _, p := range c {
			n = max(n, p+1)
		}
	}
	classOf := make([]int32, n) // 0: in no clause (yet)
	splitAt := []int32{0}       // per class: the clause (+1) that last split it
	splitTo := []int32{0}       // per class: where its points in that clause went
	for i, c := range clauses {
		for j, p := range c {
			if p < len(banned) && banned[p] || j > 0 && c[j-1] == p {
				continue
			}
			k := classOf[p]
			if splitAt[k] != int32(i+1) {
				splitAt[k], splitTo[k] = int32(i+1), int32(len(splitAt))
				splitAt, splitTo = append(splitAt, 0), append(splitTo, 0)
			}
			classOf[p] = splitTo[k]
		}
	}
	index := make([]int, len(splitAt)) // refined class to its index (+1) in classes
	for p, k := range classOf {
		if k == 0 {
			continue
		}
		if index[k] == 0 {
			classes = append(classes, nil)
			index[k] = len(classes)
		}
		classes[index[k]-1] = append(classes[index[k]-1], p)
	}
	seen := map[string]bool{}
	mark := make([]int, len(classes)) // the clause (+1) that last listed each class
	for i, c := range clauses {
		var cc []int
		for _, p := range c {
			if k := classOf[p]; k != 0 && mark[index[k]-1] != i+1 {
				mark[index[k]-1] = i + 1
				cc = append(cc, index[k]-1)
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
	var buf [64]byte
	for mask := 3; mask < 1<<len(set); mask++ {
		if mask&(mask-1) == 0 {
			continue // single points were dropped before the search
		}
		key := buf[:0]
		for i, p := range set {
			if mask&(1<<i) != 0 {
				key = binary.AppendUvarint(key, uint64(p))
			}
		}
		if e.keys[string(key)] { // a lookup by bytes, without a copy
			return true
		}
	}
	return false
}

// setKey is a map key of a sorted set, as excludes builds them.
func setKey(set []int) string {
	b := make([]byte, 0, 2*len(set))
	for _, p := range set {
		b = binary.AppendUvarint(b, uint64(p))
	}
	return string(b)
}

// mmcs is the search over classes. Each class keeps the bitset of the
// clauses it is in, so adding a class updates the uncovered clauses and each
// member's critical clauses (those only it hits) with a few word operations
// per member, however many clauses there are: a lineage formula has
// thousands of clauses over few classes. Each clause keeps the bitset of its
// classes, to pick the clause to branch on.
type mmcs struct {
	rows  [][]uint64   // per clause slot: its classes
	occ   [][]uint64   // per class: its clauses' slots
	cand  []uint64     // classes the search may still add
	set   []int        // the current set of classes
	uncov [][]uint64   // per set size: the clauses the set does not hit
	crit  [][][]uint64 // per set size, per member: the clauses only it hits
	size  int          // size of the sets of this round
}

// newMMCS prepares a search of the clauses of cb over the given classes.
func newMMCS(cb *clauseBits, classes []uint64, maxSize int) *mmcs {
	cw := len(cb.live)
	m := &mmcs{rows: cb.rows, occ: cb.occ, cand: make([]uint64, (len(cb.occ)+63)/64)}
	copy(m.cand, classes)
	m.uncov = make([][]uint64, maxSize+1)
	m.crit = make([][][]uint64, maxSize+1)
	for d := range m.uncov {
		m.uncov[d] = make([]uint64, cw)
		m.crit[d] = make([][]uint64, d)
		for i := range m.crit[d] {
			m.crit[d][i] = make([]uint64, cw)
		}
	}
	copy(m.uncov[0], cb.live)
	return m
}

func (m *mmcs) search(yield func([]int) bool) bool {
	all := slices.Clone(m.cand)
	m.set = m.set[:0]
	ok := m.iter(yield)
	copy(m.cand, all)
	return ok
}

// iter extends the current set; it returns false when yield asked to stop.
func (m *mmcs) iter(yield func([]int) bool) bool {
	d := len(m.set)
	uncov := m.uncov[d]
	if !slices.ContainsFunc(uncov, func(w uint64) bool { return w != 0 }) {
		if d < m.size {
			return true
		}
		return yield(slices.Sorted(slices.Values(m.set)))
	}
	if d == m.size {
		return true
	}
	// The uncovered clause with the fewest candidates is the one to branch on.
	best, bestN := -1, 0
	for j, w := range uncov {
		for ; w != 0; w &= w - 1 {
			i := j*64 + bits.TrailingZeros64(w)
			k := 0
			for x, r := range m.rows[i] {
				k += bits.OnesCount64(r & m.cand[x])
			}
			if k == 0 {
				return true // no candidate can cover it
			}
			if best < 0 || k < bestN {
				best, bestN = i, k
			}
		}
	}
	var branch []int
	for j, w := range m.rows[best] {
		w &= m.cand[j]
		m.cand[j] &^= w
		for ; w != 0; w &= w - 1 {
			branch = append(branch, j*64+bits.TrailingZeros64(w))
		}
	}
	if d+1 == m.size {
		// The last point: only a complete, minimal set is of use, and which
		// it is needs no state kept for deeper levels.
		for _, p := range branch {
			if m.completes(p) && !yield(slices.Sorted(slices.Values(append(m.set, p)))) {
				return false
			}
			m.cand[p/64] |= 1 << (p % 64)
		}
		return true
	}
	for _, p := range branch {
		if m.add(p) {
			m.set = append(m.set, p)
			if !m.iter(yield) {
				return false // the caller stopped: the state is dropped
			}
			m.set = m.set[:d]
		}
		m.cand[p/64] |= 1 << (p % 64)
	}
	return true
}

// completes reports whether the current set plus class p hits every clause
// and is minimal: every member is still the sole hitter of some clause.
func (m *mmcs) completes(p int) bool {
	d, occ := len(m.set), m.occ[p]
	for j, u := range m.uncov[d] {
		if u&^occ[j] != 0 {
			return false
		}
	}
	for _, crit := range m.crit[d] {
		if !outside(crit, occ) {
			return false
		}
	}
	return true
}

// outside reports whether a has a bit that b has not.
func outside(a, b []uint64) bool {
	for j, w := range a {
		if w&^b[j] != 0 {
			return true
		}
	}
	return false
}

// add computes the uncovered and critical clauses of the current set plus
// class p, and reports whether every member would still be the sole hitter
// of some clause: otherwise that set, and all it could grow into, is not a
// minimal hitting set. (p itself hits the uncovered clause it was taken
// from, so it is critical there.)
func (m *mmcs) add(p int) bool {
	d := len(m.set)
	occ, cur, next := m.occ[p], m.uncov[d], m.uncov[d+1]
	crit := m.crit[d+1]
	for j, u := range cur {
		next[j] = u &^ occ[j]
		crit[d][j] = u & occ[j]
	}
	for i, prev := range m.crit[d] {
		hit := false
		for j, c := range prev {
			crit[i][j] = c &^ occ[j]
			hit = hit || crit[i][j] != 0
		}
		if !hit {
			return false
		}
	}
	return true
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
