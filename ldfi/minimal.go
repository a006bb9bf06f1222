package ldfi

// minimalClauses keeps the clauses of a growing formula that contain no
// other clause: a set hits every clause exactly when it hits these, so the
// hypotheses are the minimal hitting sets of far fewer clauses (an
// execution that did without an optional call is a subset of the one that
// made it). Each clause is also kept as a bitset of its points, for the
// subset tests.
type minimalClauses struct {
	sets [][]int
	bits [][]uint64
}

// add adds clause (sorted) and reports whether it is minimal: no kept clause
// is inside it. Kept clauses that contain it are dropped.
func (m *minimalClauses) add(clause []int) bool {
	b := bitsetOf(clause)
	for _, o := range m.bits {
		if subsetBits(o, b) {
			return false
		}
	}
	kept := 0
	for i, o := range m.bits {
		if !subsetBits(b, o) {
			m.sets[kept], m.bits[kept] = m.sets[i], o
			kept++
		}
	}
	m.sets, m.bits = append(m.sets[:kept], clause), append(m.bits[:kept], b)
	return true
}

func bitsetOf(set []int) []uint64 {
	var b []uint64
	for _, p := range set {
		for len(b) <= p/64 {
			b = append(b, 0)
		}
		b[p/64] |= 1 << (p % 64)
	}
	return b
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
