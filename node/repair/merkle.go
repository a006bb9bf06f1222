package repair

import "hash/fnv"

// A merkleTree summarises the keys of one token segment on one replica, for
// anti-entropy (docs/repair.md). Keys fall into 2^depth leaves by their
// token; a leaf's hash combines the hashes of its entries (key, version,
// digest of the value) with XOR, so entries may be added in any order, as a
// SCAN returns them; each inner node hashes its two children. Two replicas
// that hold the same entries have the same tree; comparing from the root
// down finds the leaves that differ while exchanging few hashes.
//
// It is pure: building and comparing do no I/O.
type merkleTree struct {
	depth  int
	levels [][]uint64 // levels[0] is the root, levels[depth] the leaves
	keys   int        // entries added
	sealed bool
}

const maxMerkleDepth = 20

func newMerkleTree(depth int) *merkleTree {
	depth = min(max(depth, 0), maxMerkleDepth)
	t := &merkleTree{depth: depth, levels: make([][]uint64, depth+1)}
	for l := range t.levels {
		t.levels[l] = make([]uint64, 1<<l)
	}
	return t
}

// entryHash hashes one entry.
func entryHash(key, version, digest []byte) uint64 {
	h := fnv.New64a()
	h.Write(key)
	h.Write([]byte{0})
	h.Write(version)
	h.Write([]byte{0})
	h.Write(digest)
	return mix64(h.Sum64())
}

// mix64 is splitmix64's finaliser: it spreads FNV's bits, so that XOR of
// many entry hashes does not cancel in a pattern.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// add puts an entry in a leaf; it must come before seal.
func (t *merkleTree) add(leaf int, h uint64) {
	t.levels[t.depth][leaf] ^= h
	t.keys++
}

// seal computes the inner nodes from the leaves. An inner node over two
// empty subtrees is 0, so empty ranges compare as equal cheaply.
func (t *merkleTree) seal() {
	for l := t.depth - 1; l >= 0; l-- {
		below := t.levels[l+1]
		for i := range t.levels[l] {
			a, b := below[2*i], below[2*i+1]
			if a == 0 && b == 0 {
				t.levels[l][i] = 0
			} else {
				t.levels[l][i] = mix64(a*0x9e3779b97f4a7c15 ^ mix64(b+uint64(l)))
			}
		}
	}
	t.sealed = true
}

func (t *merkleTree) root() uint64 { return t.levels[0][0] }

// nodes returns the hashes of the given nodes of a level.
func (t *merkleTree) nodes(level int, idx []int) []uint64 {
	out := make([]uint64, len(idx))
	for i, j := range idx {
		out[i] = t.levels[level][j]
	}
	return out
}

// diffLeaves compares t with another replica's tree of the same depth,
// whose node hashes remote returns level by level, descending only into
// nodes that differ. It returns the leaves that differ, in order.
func (t *merkleTree) diffLeaves(remote func(level int, idx []int) ([]uint64, error)) ([]int, error) {
	frontier := []int{0}
	for l := 0; l <= t.depth; l++ {
		if l > 0 {
			next := make([]int, 0, 2*len(frontier))
			for _, i := range frontier {
				next = append(next, 2*i, 2*i+1)
			}
			frontier = next
		}
		theirs, err := remote(l, frontier)
		if err != nil {
			return nil, err
		}
		differ := frontier[:0:0]
		for i, j := range frontier {
			if theirs[i] != t.levels[l][j] {
				differ = append(differ, j)
			}
		}
		frontier = differ
		if len(frontier) == 0 {
			return nil, nil
		}
	}
	return frontier, nil
}

// A segment is a range of tokens (lo, hi] that has one owner in every rack
// of the local datacenter; lo == hi is the whole ring.
type segment struct {
	lo, hi uint32
}

func (s segment) span() uint64 {
	if s.lo == s.hi {
		return 1 << 32
	}
	return uint64(s.hi - s.lo)
}

// leafOf returns the leaf of a tree of depth d over s that token falls in,
// and false when the token is outside s.
func (s segment) leafOf(token uint32, depth int) (int, bool) {
	off := uint64(token - s.lo - 1) // wraps like the ring
	if off >= s.span() {
		return 0, false
	}
	return int(off << depth / s.span()), true
}

// segments cuts the ring at every token of every local rack and returns
// the pieces whose owner in rack 0 is owner, with their owners in every
// rack, so that each piece has exactly one replica per rack.
func segmentsOf(tokens []uint32, ownerIn func(rack int, token uint32) int, racks, owner int) ([]segment, [][]int) {
	if len(tokens) == 0 {
		return nil, nil
	}
	var segs []segment
	var owners [][]int
	for i, hi := range tokens {
		lo := tokens[(i+len(tokens)-1)%len(tokens)]
		if ownerIn(0, hi) != owner {
			continue
		}
		byRack := make([]int, racks)
		for r := range byRack {
			byRack[r] = ownerIn(r, hi)
		}
		segs = append(segs, segment{lo: lo, hi: hi})
		owners = append(owners, byRack)
	}
	return segs, owners
}
