package membership

import (
	"math/rand"
	"strings"
	"testing"
)

func three() State {
	return Initial([]Member{
		{Addr: "a1", DC: "dc1", Rack: "rack1", Tokens: []uint32{0}},
		{Addr: "a2", DC: "dc1", Rack: "rack2", Tokens: []uint32{0}},
		{Addr: "a3", DC: "dc1", Rack: "rack3", Tokens: []uint32{0}},
	})
}

func TestRefusals(t *testing.T) {
	s := three()
	under, err := s.Add(Member{Addr: "n1", DC: "dc1", Rack: "rack1", Tokens: []uint32{1 << 31}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		try  func() error
		want string
	}{
		{"second change", func() error { _, err := under.Remove("a2"); return err }, "a membership change is under way (add n1, streaming at epoch 1): resume or cancel it first"},
		{"last of a rack", func() error { _, err := s.Remove("a1"); return err }, "a1 is the last node of rack dc1/rack1"},
		{"not a member", func() error { _, err := s.Remove("zz"); return err }, "zz is not a member of the cluster"},
		{"member twice", func() error {
			_, err := s.Add(Member{Addr: "a2", DC: "dc1", Rack: "rack1", Tokens: []uint32{5}})
			return err
		}, "a2 is already a member of the cluster"},
		{"token taken", func() error {
			_, err := s.Add(Member{Addr: "n1", DC: "dc1", Rack: "rack1", Tokens: []uint32{0}})
			return err
		}, "token 0 is already a1's in rack dc1/rack1"},
		{"new datacenter", func() error {
			_, err := s.Add(Member{Addr: "n1", DC: "dc9", Rack: "rack1", Tokens: []uint32{0}})
			return err
		}, "datacenter dc9 has no members: adding a datacenter is not supported"},
		{"no tokens", func() error { _, err := s.Add(Member{Addr: "n1", DC: "dc1", Rack: "rack1"}); return err }, "n1 has no tokens"},
		{"replace across racks", func() error {
			_, err := s.Replace("a1", Member{Addr: "n1", DC: "dc1", Rack: "rack2"})
			return err
		}, "takes the place of a1 in rack dc1/rack1"},
		{"advance when stable", func() error { _, err := s.Advance(); return err }, "no membership change is under way"},
		{"cancel when stable", func() error { _, err := s.Cancel(); return err }, "nothing to cancel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.try()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestAddPhasesAndMoves(t *testing.T) {
	s := three()
	tok, err := SplitToken(s.New, "dc1", "rack1")
	if err != nil || tok != 1<<31 {
		t.Fatalf("SplitToken = %d, %v; want 2^31", tok, err)
	}
	st, err := s.Add(Member{Addr: "n1", DC: "dc1", Rack: "rack1", Tokens: []uint32{tok}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != 1 || st.Phase != Streaming || len(st.Routing()) != 3 || len(st.Other()) != 4 {
		t.Fatalf("after Add: %+v", st)
	}
	moves := st.Moves()
	want := Move{DC: "dc1", Rack: "rack1", Range: Range{Lo: 0, Hi: 1 << 31}, From: "a1", To: "n1"}
	if len(moves) != 1 || moves[0] != want {
		t.Fatalf("moves = %+v, want %+v", moves, want)
	}
	if !want.Range.Contains(1<<31) || want.Range.Contains(0) || !want.Range.Contains(1) || want.Range.Contains(1<<31+1) {
		t.Fatal("Contains is wrong at the edges")
	}
	sw, _ := st.Advance()
	if sw.Phase != Switched || len(sw.Routing()) != 4 || len(sw.Other()) != 3 {
		t.Fatalf("after the switch: %+v", sw)
	}
	done, _ := sw.Advance()
	if done.Phase != Stable || done.Change != nil || done.Epoch != 3 || len(done.Old) != 4 || done.Other() != nil {
		t.Fatalf("done: %+v", done)
	}
	back, _ := sw.Cancel()
	if back.Phase != Stable || len(back.Routing()) != 3 || back.Epoch != 3 {
		t.Fatalf("cancel after the switch: %+v", back)
	}
	// Removing it again moves the range back.
	rm, err := done.Remove("n1")
	if err != nil {
		t.Fatal(err)
	}
	m := rm.Moves()
	if len(m) != 1 || m[0].From != "n1" || m[0].To != "a1" || m[0].Range != (Range{Lo: 0, Hi: 1 << 31}) {
		t.Fatalf("remove moves %+v", m)
	}
	// A replacement takes the tokens and every range of the node it replaces.
	rp, err := s.Replace("a2", Member{Addr: "b2"})
	if err != nil {
		t.Fatal(err)
	}
	m = rp.Moves()
	if len(m) != 1 || m[0].From != "a2" || m[0].To != "b2" || m[0].Range.Lo != m[0].Range.Hi {
		t.Fatalf("replace moves %+v", m)
	}
}

// ownersPerRack checks that every token of the ring has exactly one owner
// in every rack: the rack's tokens are distinct across its members, and
// each member is in one rack.
func ownersPerRack(t *testing.T, ms []Member) {
	t.Helper()
	seen := map[[2]string]map[uint32]string{}
	addrs := map[string]bool{}
	for _, m := range ms {
		if addrs[m.Addr] {
			t.Fatalf("%s is a member twice", m.Addr)
		}
		addrs[m.Addr] = true
		k := [2]string{m.DC, m.Rack}
		if seen[k] == nil {
			seen[k] = map[uint32]string{}
		}
		for _, tok := range m.Tokens {
			if o, ok := seen[k][tok]; ok {
				t.Fatalf("token %d of rack %v is both %s's and %s's", tok, k, o, m.Addr)
			}
			seen[k][tok] = m.Addr
		}
	}
}

// Random sequences of changes, advanced or cancelled at random, keep
// every token owned by exactly one member per rack, never empty a rack,
// and move exactly the tokens whose owner changes.
func TestRandomChangesKeepOneOwnerPerRack(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for run := 0; run < 200; run++ {
		s := three()
		next := 0
		for step := 0; step < 30; step++ {
			var err error
			var n State
			if s.UnderWay() {
				if rng.Intn(4) == 0 {
					n, err = s.Cancel()
				} else {
					n, err = s.Advance()
				}
			} else {
				racks := []string{"rack1", "rack2", "rack3", "rack4"} // rack4 is added whole
				rack := racks[rng.Intn(4)]
				next++
				addr := "n" + string(rune('a'+next%26)) + string(rune('a'+next/26))
				switch rng.Intn(3) {
				case 0:
					tok, terr := SplitToken(s.New, "dc1", rack)
					if terr != nil {
						t.Fatal(terr)
					}
					if rng.Intn(2) == 0 {
						tok = rng.Uint32()
					}
					n, err = s.Add(Member{Addr: addr, DC: "dc1", Rack: rack, Tokens: []uint32{tok}})
				case 1:
					n, err = s.Remove(s.New[rng.Intn(len(s.New))].Addr)
				case 2:
					n, err = s.Replace(s.New[rng.Intn(len(s.New))].Addr, Member{Addr: addr})
				}
			}
			if err != nil {
				continue // a refusal leaves s as it was
			}
			if n.Epoch != s.Epoch+1 {
				t.Fatalf("epoch %d after %d", n.Epoch, s.Epoch)
			}
			s = n
			ownersPerRack(t, s.Old)
			ownersPerRack(t, s.New)
			for _, rack := range []string{"rack1", "rack2", "rack3"} {
				if len(rackMembers(s.New, "dc1", rack)) == 0 {
					t.Fatalf("rack %s is empty: %+v", rack, s)
				}
			}
			moves := s.Moves()
			probes := []uint32{0, 1<<32 - 1}
			for _, m := range append(append([]Member(nil), s.Old...), s.New...) {
				for _, tok := range m.Tokens {
					probes = append(probes, tok, tok+1, tok-1) // the edges of every range
				}
			}
			for i := 0; i < 50; i++ {
				probes = append(probes, rng.Uint32())
			}
			for _, tok := range probes {
				for _, rack := range []string{"rack1", "rack2", "rack3", "rack4"} {
					from, to := Owner(s.Old, "dc1", rack, tok), Owner(s.New, "dc1", rack, tok)
					covered := 0
					for _, m := range moves {
						if m.Rack == rack && m.Range.Contains(tok) {
							covered++
							if m.From != from || m.To != to {
								t.Fatalf("token %d in %s: move says %s->%s, owners %s->%s", tok, rack, m.From, m.To, from, to)
							}
						}
					}
					if (from != to) != (covered == 1) || covered > 1 {
						t.Fatalf("token %d in %s: owners %s->%s, covered by %d moves %+v", tok, rack, from, to, covered, moves)
					}
				}
			}
		}
	}
}

// A node added to a rack that has none is a new rack: it takes the whole
// ring, from no old owner, and a cancel leaves the racks as they were.
func TestAddRack(t *testing.T) {
	s := three()
	tok, err := SplitToken(s.New, "dc1", "rack4")
	if err != nil || tok != 0 {
		t.Fatalf("SplitToken of a new rack = %d, %v; want 0", tok, err)
	}
	n, err := s.Add(Member{Addr: "n1", DC: "dc1", Rack: "rack4", Tokens: []uint32{tok}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Move{{DC: "dc1", Rack: "rack4", Range: Range{Lo: 0, Hi: 0}, From: "", To: "n1"}}
	if got := n.Moves(); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("moves %+v, want %+v", got, want)
	}
	if len(n.Routing()) != 3 || len(n.Other()) != 4 {
		t.Fatalf("streaming routes by %d members beside %d, want 3 beside 4", len(n.Routing()), len(n.Other()))
	}
	if c, _ := n.Cancel(); len(c.New) != 3 || c.UnderWay() {
		t.Fatalf("cancel: %+v", c)
	}
	sw, _ := n.Advance()
	done, _ := sw.Advance()
	if len(sw.Routing()) != 4 || len(done.New) != 4 || done.UnderWay() {
		t.Fatalf("switched routes by %d, done holds %d", len(sw.Routing()), len(done.New))
	}
}

// A node whose config names it 0.0.0.0:8101 takes the name its peers give.
func TestRenameAndKnown(t *testing.T) {
	s := Initial([]Member{
		{Addr: "0.0.0.0:8101", DC: "dc1", Rack: "rack1", Tokens: []uint32{0}},
		{Addr: "node2:8101", DC: "dc1", Rack: "rack2", Tokens: []uint32{0}},
	})
	peer := Initial([]Member{
		{Addr: "node1:8101", DC: "dc1", Rack: "rack1", Tokens: []uint32{0}},
		{Addr: "0.0.0.0:8101", DC: "dc1", Rack: "rack2", Tokens: []uint32{0}},
	})
	name := peer.Known("dc1", "rack1", []uint32{0})
	if name != "node1:8101" {
		t.Fatalf("Known = %q", name)
	}
	r := s.Rename("0.0.0.0:8101", name)
	if _, ok := Find(r.New, "node1:8101"); !ok || len(r.Old) != 2 {
		t.Fatalf("Rename: %+v", r)
	}
	if _, ok := Find(s.New, "0.0.0.0:8101"); !ok {
		t.Fatal("Rename changed the state it was called on")
	}
}
