package repair

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// Two replicas' trees of random entries, one of them with some entries
// changed or missing: the trees are equal exactly when no entry differs,
// whatever order the entries were added in, and diffLeaves finds exactly
// the leaves of the entries that differ.
func TestMerkleDiffLeaves(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	seg := segment{lo: rng.Uint32(), hi: rng.Uint32()}
	for trial := range 200 {
		depth := rng.IntN(8)
		type ent struct {
			token uint32
			key   string
		}
		var ents []ent
		for i := range rng.IntN(300) {
			tok := seg.lo + 1 + uint32(rng.Uint64N(seg.span())) // in the segment
			ents = append(ents, ent{tok, fmt.Sprint("k", i)})
		}
		want := map[int]bool{}
		a, b := newMerkleTree(depth), newMerkleTree(depth)
		for _, e := range ents {
			leaf, _ := seg.leafOf(e.token, depth)
			a.add(leaf, entryHash([]byte(e.key), []byte("v1"), []byte("d")))
		}
		for _, i := range rng.Perm(len(ents)) { // another SCAN order
			e := ents[i]
			leaf, _ := seg.leafOf(e.token, depth)
			switch rng.IntN(20) {
			case 0: // missing on b
				want[leaf] = true
			case 1: // a newer version on b
				want[leaf] = true
				b.add(leaf, entryHash([]byte(e.key), []byte("v2"), []byte("d")))
			default:
				b.add(leaf, entryHash([]byte(e.key), []byte("v1"), []byte("d")))
			}
		}
		a.seal()
		b.seal()
		asked := 0
		got, err := a.diffLeaves(func(level int, idx []int) ([]uint64, error) {
			asked += len(idx)
			return b.nodes(level, idx), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var wantLeaves []int
		for l := range want {
			wantLeaves = append(wantLeaves, l)
		}
		slices.Sort(wantLeaves)
		if !slices.Equal(got, wantLeaves) {
			t.Fatalf("trial %d (depth %d, %d entries): leaves %v differ, want %v", trial, depth, len(ents), got, wantLeaves)
		}
		if (a.root() == b.root()) != (len(want) == 0) {
			t.Fatalf("trial %d: roots equal %v with %d leaves differing", trial, a.root() == b.root(), len(want))
		}
		if len(want) == 0 && asked != 1 {
			t.Fatalf("trial %d: equal trees took %d hashes to compare, want the root's alone", trial, asked)
		}
	}
}

// A segment's leaves cover its tokens in order and nothing outside it;
// lo == hi is the whole ring.
func TestSegmentLeafOf(t *testing.T) {
	for _, tt := range []struct {
		seg   segment
		token uint32
		depth int
		leaf  int
		in    bool
	}{
		{segment{10, 20}, 10, 1, 0, false}, // lo is the previous segment's
		{segment{10, 20}, 11, 1, 0, true},
		{segment{10, 20}, 16, 1, 1, true},
		{segment{10, 20}, 20, 1, 1, true},
		{segment{10, 20}, 21, 1, 0, false},
		{segment{1 << 31, 10}, 5, 2, 3, true}, // wraps past 0
		{segment{7, 7}, 7, 1, 1, true},        // the whole ring
		{segment{0, 0}, 1 << 31, 1, 0, true},
	} {
		leaf, in := tt.seg.leafOf(tt.token, tt.depth)
		if leaf != tt.leaf || in != tt.in {
			t.Errorf("%+v.leafOf(%d, %d) = %d, %v; want %d, %v", tt.seg, tt.token, tt.depth, leaf, in, tt.leaf, tt.in)
		}
	}
}
