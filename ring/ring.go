// Package ring places keys on a token ring the way Dynomite does: a key's
// token is its 32-bit murmur hash, and within a rack the key belongs to the
// first node whose token is >= the key's token, wrapping to the smallest.
package ring

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
)

// Tag returns the part of key that places it, under Dynomite's hash_tag
// (two characters, such as "{}"; "" for none): the bytes between the first
// occurrence of tag[0] and the next tag[1] after it. When either is missing,
// or nothing lies between them, the whole key places it, as in Dynomite, so
// "{user1}:a" and "{user1}:b" share a token while "{}x" and "x{" are hashed
// whole.
func Tag(key []byte, tag string) []byte {
	if len(tag) != 2 {
		return key
	}
	start := bytes.IndexByte(key, tag[0])
	if start < 0 {
		return key
	}
	end := bytes.IndexByte(key[start+1:], tag[1])
	if end <= 0 {
		return key
	}
	return key[start+1 : start+1+end]
}

// Hash is Dynomite's default key hash ("murmur", a MurmurHash2 variant whose
// seed depends on the key's length), so troop places keys exactly where
// Dynomite would.
func Hash(key []byte) uint32 {
	const m = 0x5bd1e995
	n := uint32(len(key))
	h := (0xdeadbeef * n) ^ n
	for len(key) >= 4 {
		k := binary.LittleEndian.Uint32(key)
		k *= m
		k ^= k >> 24
		k *= m
		h *= m
		h ^= k
		key = key[4:]
	}
	switch len(key) {
	case 3:
		h ^= uint32(key[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(key[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(key[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// Entry is one token on a ring and the node that owns it.
type Entry struct {
	Token uint32
	Owner int
}

// Ring is one rack's continuum: its tokens, sorted.
type Ring struct {
	entries []Entry
}

// New builds a ring. Two owners may not claim the same token.
func New(entries []Entry) (*Ring, error) {
	if len(entries) == 0 {
		return nil, fmt.Errorf("ring: no tokens")
	}
	sorted := append([]Entry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Token < sorted[j].Token })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Token == sorted[i-1].Token && sorted[i].Owner != sorted[i-1].Owner {
			return nil, fmt.Errorf("ring: token %d is claimed twice", sorted[i].Token)
		}
	}
	return &Ring{entries: sorted}, nil
}

// Owner returns the owner of token t: the first entry whose token is >= t,
// or the first entry when t is past the largest token.
func (r *Ring) Owner(t uint32) int {
	i := sort.Search(len(r.entries), func(i int) bool { return r.entries[i].Token >= t })
	if i == len(r.entries) {
		i = 0
	}
	return r.entries[i].Owner
}

// Entries returns the ring's tokens in order.
func (r *Ring) Entries() []Entry { return append([]Entry(nil), r.entries...) }

// EvenTokens returns n tokens spaced evenly over the 32-bit ring, starting at
// 0: token i is floor(i * 2^32 / n).
func EvenTokens(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(uint64(i) << 32 / uint64(n))
	}
	return out
}
