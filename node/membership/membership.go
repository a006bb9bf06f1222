// Package membership is the pure core of online membership changes: who
// the members of a cluster are (a peer address, a datacenter, a rack and
// tokens each), the one change under way as numbered epochs in three
// phases, the token ranges a change moves with their old and new owners,
// and the default token of a new node. It does no I/O; the node persists a
// State, sends its steps to the members and streams the ranges.
//
// A change goes through three phases, each step one epoch higher:
//
//	streaming  requests are routed by the old members; the old owners
//	           stream the ranges they give up to the new owners, and
//	           writes to a moving key are mirrored to its other owner
//	switched   requests are routed by the new members; writes are still
//	           mirrored, so that a cancel loses nothing
//	stable     the change is done (or cancelled): one set of members
package membership

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Member is one node of the cluster; its peer address is its identity.
type Member struct {
	Addr   string   `json:"addr"`
	DC     string   `json:"dc"`
	Rack   string   `json:"rack"`
	Tokens []uint32 `json:"tokens"`
}

// Phase is where a change stands.
type Phase string

const (
	Stable    Phase = "stable"
	Streaming Phase = "streaming" // routed by the old members
	Switched  Phase = "switched"  // routed by the new members
)

// Kind names a change.
type Kind string

const (
	Add     Kind = "add"
	Remove  Kind = "remove"
	Replace Kind = "replace"
)

// Change is the change under way: what it does, to whom.
type Change struct {
	Kind Kind   `json:"kind"`
	Node string `json:"node,omitempty"` // the node added (add, replace)
	Gone string `json:"gone,omitempty"` // the node removed (remove, replace)
}

// State is a cluster's membership at one epoch. When stable, Old and New
// are the same members and Change is nil.
type State struct {
	Epoch  uint64   `json:"epoch"`
	Phase  Phase    `json:"phase"`
	Change *Change  `json:"change,omitempty"`
	Old    []Member `json:"old"`
	New    []Member `json:"new"`
}

// Initial is the stable state of members at epoch 0.
func Initial(members []Member) State {
	m := clone(members)
	sortMembers(m)
	return State{Phase: Stable, Old: m, New: clone(m)}
}

// UnderWay reports whether a change is under way.
func (s State) UnderWay() bool { return s.Phase != Stable }

// Routing returns the members requests are routed by: the old ones while
// streaming, else the new ones.
func (s State) Routing() []Member {
	if s.Phase == Streaming {
		return s.Old
	}
	return s.New
}

// Other returns, during a change, the members requests are not routed by
// (the new ones while streaming, the old ones after the switch); nil when
// stable.
func (s State) Other() []Member {
	switch s.Phase {
	case Streaming:
		return s.New
	case Switched:
		return s.Old
	}
	return nil
}

// Find returns the member with address addr in ms.
func Find(ms []Member, addr string) (Member, bool) {
	for _, m := range ms {
		if m.Addr == addr {
			return m, true
		}
	}
	return Member{}, false
}

// Add starts adding m to its rack: a new state at the next epoch,
// streaming. A rack with no members is a new rack, of which m is the first
// node; its datacenter must have members.
func (s State) Add(m Member) (State, error) {
	if err := s.startable(); err != nil {
		return s, err
	}
	if err := s.checkNew(m, ""); err != nil {
		return s, err
	}
	next := append(clone(s.New), m)
	return s.start(Change{Kind: Add, Node: m.Addr}, next), nil
}

// Remove starts removing the member at addr; its ranges go to the other
// members of its rack.
func (s State) Remove(addr string) (State, error) {
	if err := s.startable(); err != nil {
		return s, err
	}
	gone, ok := Find(s.New, addr)
	if !ok {
		return s, fmt.Errorf("%s is not a member of the cluster", addr)
	}
	if len(rackMembers(s.New, gone.DC, gone.Rack)) == 1 {
		return s, fmt.Errorf("%s is the last node of rack %s/%s: removing it would leave the rack without an owner for any key (replace it instead)", addr, gone.DC, gone.Rack)
	}
	var next []Member
	for _, m := range s.New {
		if m.Addr != addr {
			next = append(next, cloneMember(m))
		}
	}
	return s.start(Change{Kind: Remove, Gone: addr}, next), nil
}

// Replace starts replacing the member at old by m, which takes its place
// in its rack: its tokens unless m names its own.
func (s State) Replace(old string, m Member) (State, error) {
	if err := s.startable(); err != nil {
		return s, err
	}
	gone, ok := Find(s.New, old)
	if !ok {
		return s, fmt.Errorf("%s is not a member of the cluster", old)
	}
	if m.DC == "" && m.Rack == "" {
		m.DC, m.Rack = gone.DC, gone.Rack
	}
	if m.DC != gone.DC || m.Rack != gone.Rack {
		return s, fmt.Errorf("a replacement takes the place of %s in rack %s/%s, but %s is for rack %s/%s", old, gone.DC, gone.Rack, m.Addr, m.DC, m.Rack)
	}
	if len(m.Tokens) == 0 {
		m.Tokens = slices.Clone(gone.Tokens)
	}
	if err := s.checkNew(m, old); err != nil {
		return s, err
	}
	var next []Member
	for _, x := range s.New {
		if x.Addr != old {
			next = append(next, cloneMember(x))
		}
	}
	next = append(next, m)
	return s.start(Change{Kind: Replace, Node: m.Addr, Gone: old}, next), nil
}

// Advance moves a change to its next phase: streaming to switched, switched
// to stable (the new members only).
func (s State) Advance() (State, error) {
	switch s.Phase {
	case Streaming:
		n := s.copyState()
		n.Epoch++
		n.Phase = Switched
		return n, nil
	case Switched:
		n := s.copyState()
		n.Epoch++
		n.Phase = Stable
		n.Change = nil
		n.Old = clone(n.New)
		return n, nil
	}
	return s, errors.New("no membership change is under way")
}

// Cancel rolls a change back, from either phase: stable again with the
// old members.
func (s State) Cancel() (State, error) {
	if !s.UnderWay() {
		return s, errors.New("no membership change is under way: nothing to cancel")
	}
	n := s.copyState()
	n.Epoch++
	n.Phase = Stable
	n.Change = nil
	n.New = clone(n.Old)
	return n, nil
}

// Newer reports whether s is a later step than o.
func (s State) Newer(o State) bool { return s.Epoch > o.Epoch }

func (s State) startable() error {
	if s.UnderWay() {
		return fmt.Errorf("a membership change is under way (%s, %s at epoch %d): resume or cancel it first", describe(s.Change), s.Phase, s.Epoch)
	}
	return nil
}

func describe(c *Change) string {
	switch {
	case c == nil:
		return "none"
	case c.Kind == Add:
		return "add " + c.Node
	case c.Kind == Remove:
		return "remove " + c.Gone
	}
	return "replace " + c.Gone + " by " + c.Node
}

// checkNew refuses a member that cannot join beside s.New (leaving aside
// the member at except, which it replaces).
func (s State) checkNew(m Member, except string) error {
	if m.Addr == "" || m.DC == "" || m.Rack == "" {
		return errors.New("a new member needs an address, a datacenter and a rack")
	}
	if _, ok := Find(s.New, m.Addr); ok {
		return fmt.Errorf("%s is already a member of the cluster", m.Addr)
	}
	if !slices.ContainsFunc(s.New, func(x Member) bool { return x.DC == m.DC }) {
		return fmt.Errorf("datacenter %s has no members: adding a datacenter is not supported; add racks to existing datacenters", m.DC)
	}
	rack := rackMembers(s.New, m.DC, m.Rack) // none: m is the first node of a new rack
	if len(m.Tokens) == 0 {
		return fmt.Errorf("%s has no tokens", m.Addr)
	}
	seen := map[uint32]bool{}
	for _, t := range m.Tokens {
		if seen[t] {
			return fmt.Errorf("%s names token %d twice", m.Addr, t)
		}
		seen[t] = true
	}
	for _, x := range rack {
		if x.Addr == except {
			continue
		}
		for _, t := range x.Tokens {
			if seen[t] {
				return fmt.Errorf("token %d is already %s's in rack %s/%s", t, x.Addr, m.DC, m.Rack)
			}
		}
	}
	return nil
}

func (s State) start(c Change, next []Member) State {
	sortMembers(next)
	return State{Epoch: s.Epoch + 1, Phase: Streaming, Change: &c, Old: clone(s.New), New: next}
}

func (s State) copyState() State {
	n := s
	n.Old, n.New = clone(s.Old), clone(s.New)
	if s.Change != nil {
		c := *s.Change
		n.Change = &c
	}
	return n
}

func rackMembers(ms []Member, dc, rack string) []Member {
	var out []Member
	for _, m := range ms {
		if m.DC == dc && m.Rack == rack {
			out = append(out, m)
		}
	}
	return out
}

func cloneMember(m Member) Member {
	m.Tokens = slices.Clone(m.Tokens)
	return m
}

func clone(ms []Member) []Member {
	if ms == nil {
		return nil
	}
	out := make([]Member, len(ms))
	for i, m := range ms {
		out[i] = cloneMember(m)
	}
	return out
}

func sortMembers(ms []Member) {
	sort.Slice(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if a.DC != b.DC {
			return a.DC < b.DC
		}
		if a.Rack != b.Rack {
			return a.Rack < b.Rack
		}
		return a.Addr < b.Addr
	})
}

// Range is the tokens (Lo, Hi], wrapping past the largest token as the
// ring does; Lo == Hi is the whole ring.
type Range struct {
	Lo uint32 `json:"lo"`
	Hi uint32 `json:"hi"`
}

// Contains reports whether token t is in r.
func (r Range) Contains(t uint32) bool {
	if r.Lo == r.Hi {
		return true
	}
	return t-r.Lo-1 < r.Hi-r.Lo // unsigned arithmetic wraps like the ring
}

// Move is a range of one rack whose owner a change changes.
type Move struct {
	DC    string `json:"dc"`
	Rack  string `json:"rack"`
	Range Range  `json:"range"`
	From  string `json:"from"` // the old owner; "" in a rack the change adds
	To    string `json:"to"`   // the new owner
}

// Owner returns the owner of token t in rack dc/rack among ms: the member
// with the first token >= t, wrapping to the smallest; "" when the rack has
// no tokens.
func Owner(ms []Member, dc, rack string, t uint32) string {
	best, bestTok, first, firstTok := "", uint32(0), "", uint32(0)
	found, any := false, false
	for _, m := range ms {
		if m.DC != dc || m.Rack != rack {
			continue
		}
		for _, tok := range m.Tokens {
			if !any || tok < firstTok {
				first, firstTok, any = m.Addr, tok, true
			}
			if tok >= t && (!found || tok < bestTok) {
				best, bestTok, found = m.Addr, tok, true
			}
		}
	}
	if found {
		return best
	}
	return first
}

// Moves returns the ranges a change moves, rack by rack, in token order:
// for each, its owner among the old members and among the new ones.
// Adjacent ranges with the same owners are merged.
func (s State) Moves() []Move { return Moves(s.Old, s.New) }

// Moves returns the ranges whose owner in their rack differs between the
// members old and new.
func Moves(old, new []Member) []Move {
	type rk struct{ dc, rack string }
	racks := map[rk][]uint32{}
	for _, ms := range [][]Member{old, new} {
		for _, m := range ms {
			racks[rk{m.DC, m.Rack}] = append(racks[rk{m.DC, m.Rack}], m.Tokens...)
		}
	}
	keys := make([]rk, 0, len(racks))
	for k := range racks {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].dc != keys[j].dc {
			return keys[i].dc < keys[j].dc
		}
		return keys[i].rack < keys[j].rack
	})
	var out []Move
	for _, k := range keys {
		toks := racks[k]
		slices.Sort(toks)
		toks = slices.Compact(toks)
		var moves []Move
		for i, hi := range toks {
			lo := toks[(i+len(toks)-1)%len(toks)]
			from, to := Owner(old, k.dc, k.rack, hi), Owner(new, k.dc, k.rack, hi)
			if from == to {
				continue
			}
			r := Range{Lo: lo, Hi: hi}
			if len(toks) == 1 {
				r = Range{Lo: hi, Hi: hi}
			}
			if n := len(moves); n > 0 && moves[n-1].Range.Hi == lo && moves[n-1].From == from && moves[n-1].To == to {
				moves[n-1].Range.Hi = hi
				continue
			}
			moves = append(moves, Move{DC: k.dc, Rack: k.rack, Range: r, From: from, To: to})
		}
		// The last range may continue into the first, across the wrap.
		if n := len(moves); n > 1 && moves[n-1].Range.Hi == moves[0].Range.Lo && moves[n-1].From == moves[0].From && moves[n-1].To == moves[0].To && moves[0].Range.Lo != moves[0].Range.Hi {
			moves[0].Range.Lo = moves[n-1].Range.Lo
			moves = moves[:n-1]
		}
		out = append(out, moves...)
	}
	return out
}

// SplitToken returns the middle of the widest range of rack dc/rack among
// ms: the default token of a node added to it; 0 when the rack has no
// members (the first node of a new rack owns the whole ring).
func SplitToken(ms []Member, dc, rack string) (uint32, error) {
	var toks []uint32
	for _, m := range rackMembers(ms, dc, rack) {
		toks = append(toks, m.Tokens...)
	}
	if len(toks) == 0 {
		return 0, nil
	}
	slices.Sort(toks)
	toks = slices.Compact(toks)
	var bestLo uint32
	var bestSpan uint64
	for i, hi := range toks {
		lo := toks[(i+len(toks)-1)%len(toks)]
		span := uint64(hi - lo)
		if len(toks) == 1 {
			span = 1 << 32
		}
		if span > bestSpan {
			bestLo, bestSpan = lo, span
		}
	}
	if bestSpan < 2 {
		return 0, fmt.Errorf("rack %s/%s has no range wide enough to split", dc, rack)
	}
	return bestLo + uint32(bestSpan/2), nil
}

// Rename returns s with the member at old known as new: a node whose
// config names it by a local address (dyn_listen 0.0.0.0:8101) takes the
// address its peers know it by.
func (s State) Rename(old, new string) State {
	n := s.copyState()
	for _, ms := range [][]Member{n.Old, n.New} {
		for i := range ms {
			if ms[i].Addr == old {
				ms[i].Addr = new
			}
		}
	}
	sortMembers(n.Old)
	sortMembers(n.New)
	return n
}

// Known returns the address by which s names the member of rack dc/rack
// holding exactly tokens; "" when none does.
func (s State) Known(dc, rack string, tokens []uint32) string {
	for _, m := range append(append([]Member(nil), s.Old...), s.New...) {
		if m.DC == dc && m.Rack == rack && slices.Equal(sortedCopy(m.Tokens), sortedCopy(tokens)) {
			return m.Addr
		}
	}
	return ""
}

func sortedCopy(t []uint32) []uint32 {
	c := slices.Clone(t)
	slices.Sort(c)
	return c
}
