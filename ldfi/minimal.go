package ldfi

// minimalClauses keeps the clauses of a growing formula that contain no
// other clause, over classes of interchangeable points. A set hits every
// clause exactly when it hits these (an execution that did without an
// optional call is a subset of the one that made it), and points that are in
// exactly the same clauses are interchangeable: a lineage formula has
// thousands of clauses of hundreds of points each, over a few dozen classes.
//
// The classes are refined as clauses arrive (the points of a class that are
// in the new clause move to a class of their own), so each clause is a union
// of classes, kept as a bitset of them, and a hypothesis step never goes
// over the clauses' points. A clause dropped as no longer minimal does not
// merge classes back; the enumerator merges what is interchangeable among
// the clauses it is given.
type minimalClauses struct {
	classOf []int   // per point: its class, -1 while no clause has it
	members [][]int // per class: its points, sorted
	bits    clauseBits
}

// add adds clause (sorted, without duplicates) and reports whether it is
// minimal: no kept clause is inside it. Kept clauses that contain it are
// dropped.
func (m *minimalClauses) add(clause []int) bool {
	var (
		byClass = map[int][]int{} // the clause's points in each class
		order   []int             // the classes in the order first met
		unseen  []int             // points in no class yet
	)
	for _, p := range clause {
		for len(m.classOf) <= p {
			m.classOf = append(m.classOf, -1)
		}
		k := m.classOf[p]
		if k < 0 {
			unseen = append(unseen, p)
			continue
		}
		if _, ok := byClass[k]; !ok {
			order = append(order, k)
		}
		byClass[k] = append(byClass[k], p)
	}
	var whole []uint64 // classes entirely in the clause
	for _, k := range order {
		if len(byClass[k]) == len(m.members[k]) {
			whole = setBit(whole, k)
		}
	}
	for _, r := range m.bits.rows {
		if r != nil && subsetBits(r, whole) {
			return false
		}
	}

	var row []uint64
	for _, k := range order {
		in := byClass[k]
		if len(in) == len(m.members[k]) {
			row = setBit(row, k)
			continue
		}
		// Split k: every kept clause had all of k, so it has both halves.
		split := m.newClass(in)
		m.members[k] = without(m.members[k], in)
		m.bits.copyClass(k, split)
		row = setBit(row, split)
	}
	if len(unseen) > 0 {
		row = setBit(row, m.newClass(unseen))
	}
	for i, r := range m.bits.rows {
		if r != nil && subsetBits(row, r) {
			m.bits.remove(i)
		}
	}
	m.bits.insert(row)
	return true
}

// classes returns the points of each class but the banned ones, and the
// classes that still have a point.
func (m *minimalClauses) classes(banned []bool) (points [][]int, alive []uint64) {
	points = make([][]int, len(m.members))
	for k, members := range m.members {
		for _, p := range members {
			if p >= len(banned) || !banned[p] {
				points[k] = append(points[k], p)
			}
		}
		if len(points[k]) > 0 {
			alive = setBit(alive, k)
		}
	}
	return points, alive
}

// newClass makes a class of points (sorted) and returns it.
func (m *minimalClauses) newClass(points []int) int {
	k := len(m.members)
	for _, p := range points {
		m.classOf[p] = k
	}
	m.members = append(m.members, points)
	m.bits.addClass()
	return k
}

// without returns the points of set (sorted) not in drop (sorted, a subset).
func without(set, drop []int) []int {
	out := make([]int, 0, len(set)-len(drop))
	i := 0
	for _, p := range set {
		if i < len(drop) && drop[i] == p {
			i++
			continue
		}
		out = append(out, p)
	}
	return out
}

func setBit(b []uint64, i int) []uint64 {
	for len(b) <= i/64 {
		b = append(b, 0)
	}
	b[i/64] |= 1 << (i % 64)
	return b
}

func hasBit(b []uint64, i int) bool {
	return i/64 < len(b) && b[i/64]&(1<<(i%64)) != 0
}

// subsetBits reports whether every bit of a is set in b.
func subsetBits(a, b []uint64) bool {
	for i, w := range a {
		var o uint64
		if i < len(b) {
			o = b[i]
		}
		if w&^o != 0 {
			return false
		}
	}
	return true
}
