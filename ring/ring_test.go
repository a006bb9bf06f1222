package ring

import (
	"math/rand/v2"
	"testing"
)

// Reference values from a C implementation of Dynomite's murmur hash
// (MurmurHash2 with seed 0xdeadbeef*len, as in Dynomite's hashkit), compiled
// with gcc on little-endian x86_64.
var hashVectors = []struct {
	key  string
	want uint32
}{
	{"", 0},
	{"a", 1262581116},
	{"ab", 3820310011},
	{"abc", 2064434216},
	{"abcd", 4016735919},
	{"foo", 3303027599},
	{"key:1", 3691594071},
	{"user:1000", 2384768711},
	{"troop", 2260182710},
	{"hello world", 1578702139},
	{"\xff\xfe\x80", 2749433693},
	{"0123456789abcdef0123", 3831009809},
}

func TestHashMatchesDynomite(t *testing.T) {
	for _, v := range hashVectors {
		if got := Hash([]byte(v.key)); got != v.want {
			t.Errorf("Hash(%q) = %d, want %d", v.key, got, v.want)
		}
	}
}

func TestOwner(t *testing.T) {
	r, err := New([]Entry{{Token: 3000, Owner: 2}, {Token: 1000, Owner: 0}, {Token: 2000, Owner: 1}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		token uint32
		want  int
	}{
		{0, 0}, {999, 0}, {1000, 0}, {1001, 1}, {2000, 1}, {2001, 2}, {3000, 2},
		{3001, 0}, {^uint32(0), 0}, // past the last token the ring wraps
	}
	for _, c := range cases {
		if got := r.Owner(c.token); got != c.want {
			t.Errorf("Owner(%d) = %d, want %d", c.token, got, c.want)
		}
	}
}

// Placement of real keys on a 3-node rack with evenly spaced tokens, from the
// hash vectors above: token 0 owns (2863311530, 2^32) by wrapping and 0.
func TestKeyPlacement(t *testing.T) {
	toks := EvenTokens(3) // 0, 1431655765, 2863311530
	r, _ := New([]Entry{{toks[0], 0}, {toks[1], 1}, {toks[2], 2}})
	want := map[string]int{"a": 1, "abc": 2, "abcd": 0, "foo": 0, "user:1000": 2, "hello world": 2, "": 0}
	for k, owner := range want {
		if got := r.Owner(Hash([]byte(k))); got != owner {
			t.Errorf("key %q (hash %d) on node %d, want %d", k, Hash([]byte(k)), got, owner)
		}
	}
}

// Property: the owner is the entry with the smallest token >= t, or the
// smallest token overall; checked against a linear scan.
func TestOwnerMatchesLinearScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.IntN(12)
		seen := map[uint32]bool{}
		var entries []Entry
		for len(entries) < n {
			tok := rng.Uint32()
			if !seen[tok] {
				seen[tok] = true
				entries = append(entries, Entry{Token: tok, Owner: len(entries)})
			}
		}
		r, err := New(entries)
		if err != nil {
			t.Fatal(err)
		}
		for q := 0; q < 100; q++ {
			tok := rng.Uint32()
			best, lowest := -1, 0
			for i, e := range entries {
				if e.Token >= tok && (best < 0 || e.Token < entries[best].Token) {
					best = i
				}
				if e.Token < entries[lowest].Token {
					lowest = i
				}
			}
			if best < 0 {
				best = lowest
			}
			if got := r.Owner(tok); got != entries[best].Owner {
				t.Fatalf("Owner(%d) = %d, want %d", tok, got, entries[best].Owner)
			}
		}
	}
}

func TestNewRejectsDuplicateTokens(t *testing.T) {
	if _, err := New([]Entry{{5, 0}, {5, 1}}); err == nil {
		t.Error("want an error for a token claimed by two owners")
	}
	if _, err := New(nil); err == nil {
		t.Error("want an error for an empty ring")
	}
}

func TestEvenTokens(t *testing.T) {
	got := EvenTokens(4)
	want := []uint32{0, 1 << 30, 2 << 30, 3 << 30}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("EvenTokens(4)[%d] = %d, want %d", i, got[i], want[i])
		}
	}
}

func BenchmarkHash(b *testing.B) {
	key := []byte("key:000000000123")
	for b.Loop() {
		Hash(key)
	}
}

// Dynomite's hash_tag: the part between the first tag[0] and the next tag[1]
// places the key; with either absent, or nothing between them, the whole key.
func TestTag(t *testing.T) {
	for _, tt := range []struct {
		key, tag, want string
	}{
		{"{user1}:a", "{}", "user1"},
		{"x:{user1}:b", "{}", "user1"},
		{"{user1}", "{}", "user1"},
		{"{a}{b}", "{}", "a"},
		{"{a{b}c", "{}", "a{b"},      // the first start, the next end after it
		{"}a{b}", "{}", "b"},         // an end before the start is not the end
		{"{}user1", "{}", "{}user1"}, // empty tag: the whole key
		{"{}{a}", "{}", "{}{a}"},     // the first start decides, and it is empty
		{"user1", "{}", "user1"},     // no start
		{"{user1", "{}", "{user1"},   // no end
		{"user1}", "{}", "user1}"},
		{"", "{}", ""},
		{"$ab$cd", "$$", "ab"}, // the same character for both ends
		{"$$", "$$", "$$"},
		{"{user1}:a", "", "{user1}:a"}, // no hash_tag
		{"{user1}:a", "{", "{user1}:a"},
	} {
		if got := string(Tag([]byte(tt.key), tt.tag)); got != tt.want {
			t.Errorf("Tag(%q, %q) = %q, want %q", tt.key, tt.tag, got, tt.want)
		}
	}
	if Hash(Tag([]byte("{u}:a"), "{}")) != Hash(Tag([]byte("{u}:b"), "{}")) {
		t.Error("keys with one tag hash apart")
	}
}
