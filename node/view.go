package node

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/troop-lab/troop/node/membership"
	"github.com/troop-lab/troop/node/reconfig"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
	"github.com/troop-lab/troop/topology"
)

// A view is what a node routes requests by: the members of one
// membership step and their rings. The node holds it in an atomic pointer
// and swaps it whole at each step of a membership change (membership.go);
// a request keeps the view it began with. Members are made once per peer
// address and kept (memberFor), so a view costs no connections.
type view struct {
	state      membership.State
	members    []*member  // the members requests are routed by; ring owners index it
	tokens     [][]uint32 // by member
	localRacks []rackRing // own rack first (when ownRack), then by name
	ownRack    bool       // this node's rack is in the view: not so for a rack a change adds, until the switch
	remoteDCs  []rackRing // one rack per remote datacenter

	// other, during a change, is the view of the members requests are not
	// routed by (the new ones while streaming, the old ones after the
	// switch), for mirroring writes to a moving key's other owner; nil
	// when no change is under way.
	other *view

	// newRack, while a change adds a rack of the local datacenter and
	// routes by the old members, is that rack's ring in other: a write to
	// this node's replica is mirrored to its owner there.
	newRack *rackRing

	// bounds are every token of the local racks' rings, in order, and
	// owners[i] the replicas of the tokens after bounds[i-1] up to
	// bounds[i]: no rack's owner changes within that span, so replicas
	// looks the tuple up rather than making one per request.
	bounds []uint32
	owners [][]*member

	// all is every member of either side, this node included: the peers
	// heartbeats, hints and /info cover.
	all []*member

	// refuse, when set, is what this node answers clients: it is joining
	// and no change names it yet, or it was removed.
	refuse []byte
}

// view returns the view requests are routed by now.
func (n *Node) view() *view { return n.cur.Load() }

// replicas returns, for a token, its owner in each rack of the local
// datacenter, the coordinator's own rack first. The slice is the view's:
// callers must not change it.
func (v *view) replicas(h uint32) []*member {
	i, _ := slices.BinarySearch(v.bounds, h)
	if i == len(v.bounds) {
		i = 0 // past the last token: the ring wraps to the first
	}
	return v.owners[i]
}

// indexReplicas fills bounds and owners from the local racks' rings.
func (v *view) indexReplicas() {
	for _, r := range v.localRacks {
		for _, e := range r.ring.Entries() {
			v.bounds = append(v.bounds, e.Token)
		}
	}
	slices.Sort(v.bounds)
	v.bounds = slices.Compact(v.bounds)
	v.owners = make([][]*member, len(v.bounds))
	for i, t := range v.bounds {
		v.owners[i] = make([]*member, len(v.localRacks))
		for j, r := range v.localRacks {
			v.owners[i][j] = v.members[r.ring.Owner(t)]
		}
	}
}

// tokensOf returns m's tokens in v (nil when v does not route to m).
func (v *view) tokensOf(m *member) []uint32 {
	for i, x := range v.members {
		if x == m {
			return v.tokens[i]
		}
	}
	return nil
}

// peers returns every peer of v, of either side of a change.
func (v *view) peers() []*member {
	out := make([]*member, 0, len(v.all))
	for _, m := range v.all {
		if !m.self {
			out = append(out, m)
		}
	}
	return out
}

// Errors a node answers clients when it is not a member.
var (
	errJoining = resp.AppendError(nil, "TRYAGAIN troop: this node is joining the cluster and serves no requests until a membership change names it")
	errRemoved = resp.AppendError(nil, "ERR troop: this node was removed from the cluster")
)

// initialState is where a node starts: the membership it saved last, or
// else its config (this node, as its dyn_listen, and its seeds; only the
// seeds with troop_join, the node then waits for a change that names it).
func initialState(c *topology.Config, saved *reconfig.Saved) membership.State {
	if saved != nil {
		return saved.State
	}
	var ms []membership.Member
	if !c.Join {
		ms = append(ms, membership.Member{Addr: c.DynListen, DC: c.Datacenter, Rack: c.Rack, Tokens: c.Tokens})
	}
	for _, s := range c.Seeds {
		ms = append(ms, membership.Member{Addr: s.Addr, DC: s.DC, Rack: s.Rack, Tokens: s.Tokens})
	}
	return membership.Initial(ms)
}

// memberFor returns the member object of a peer address, made on first
// use with its link, failure detector and hint file, and kept.
func (n *Node) memberFor(addr, dc, rack string) (*member, error) {
	if addr == n.me() {
		return n.self, nil
	}
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	if m, ok := n.peers[addr]; ok {
		if m.dc != dc || m.rack != rack {
			return nil, fmt.Errorf("%s is a member in %s/%s already, not in %s/%s", addr, m.dc, m.rack, dc, rack)
		}
		return m, nil
	}
	m := &member{dc: dc, rack: rack, peerAddr: addr}
	m.link = n.peerLink("peer", m, n.cfg.Timeout)
	m.link.PollWith(n.pickLoop())
	n.initHealth(m, time.Now())
	if err := n.openHint(m); err != nil {
		m.link.Close()
		return nil, err
	}
	n.peers[addr] = m
	return m, nil
}

// buildView builds the view of a membership state.
func (n *Node) buildView(s membership.State) (*view, error) {
	v, err := n.routingView(s.Routing())
	if err != nil {
		return nil, err
	}
	v.state = s
	if other := s.Other(); other != nil {
		if v.other, err = n.routingView(other); err != nil {
			return nil, err
		}
		for i, r := range v.other.localRacks {
			if !slices.ContainsFunc(v.localRacks, func(x rackRing) bool { return x.name == r.name }) {
				v.newRack = &v.other.localRacks[i]
			}
		}
	}
	seen := map[*member]bool{n.self: true}
	v.all = []*member{n.self}
	for _, w := range []*view{v, v.other} {
		if w == nil {
			continue
		}
		for _, m := range w.members {
			if !seen[m] {
				seen[m] = true
				v.all = append(v.all, m)
			}
		}
	}
	_, inRouting := membership.Find(s.Routing(), n.me())
	_, inOther := membership.Find(s.Other(), n.me())
	switch {
	case inRouting:
	case inOther && v.ownRack: // added to a rack: routed by the old members meanwhile
	case inOther: // the first node of a rack the change adds: its rack is not routed to yet
		v.refuse = errJoining
	case n.cfg.Join && s.Epoch == 0: // the config's state: no change named it yet
		v.refuse = errJoining
	default:
		v.refuse = errRemoved
	}
	return v, nil
}

// routingView places the members ms on rings: one per rack of the local
// datacenter, and one per remote datacenter (its rack with our rack's
// name if it has one, else its first rack by name), which receives our
// writes and fans them out inside its datacenter.
func (n *Node) routingView(ms []membership.Member) (*view, error) {
	c := n.cfg
	v := &view{}
	racks := map[[2]string][]ring.Entry{}
	for _, mm := range ms {
		m, err := n.memberFor(mm.Addr, mm.DC, mm.Rack)
		if err != nil {
			return nil, err
		}
		key := [2]string{mm.DC, mm.Rack}
		for _, t := range mm.Tokens {
			racks[key] = append(racks[key], ring.Entry{Token: t, Owner: len(v.members)})
		}
		v.members = append(v.members, m)
		v.tokens = append(v.tokens, mm.Tokens)
	}
	var keys [][2]string
	for k := range racks {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	chosen := map[string]int{} // remote dc -> index in v.remoteDCs
	for _, k := range keys {
		r, err := ring.New(racks[k])
		if err != nil {
			return nil, fmt.Errorf("rack %s/%s: %v", k[0], k[1], err)
		}
		rr := rackRing{dc: k[0], name: k[1], ring: r}
		switch {
		case k[0] == c.Datacenter && k[1] == c.Rack:
			v.localRacks = append([]rackRing{rr}, v.localRacks...)
		case k[0] == c.Datacenter:
			v.localRacks = append(v.localRacks, rr)
		default:
			if i, ok := chosen[k[0]]; !ok {
				chosen[k[0]] = len(v.remoteDCs)
				v.remoteDCs = append(v.remoteDCs, rr)
			} else if k[1] == c.Rack {
				v.remoteDCs[i] = rr
			}
		}
	}
	v.ownRack = len(v.localRacks) > 0 && v.localRacks[0].name == c.Rack
	if len(v.localRacks) == 0 {
		return nil, errors.New("node: no rack of this node's datacenter has tokens")
	}
	v.indexReplicas()
	return v, nil
}

// me is this node's address as the cluster's membership names it: its
// dyn_listen until a membership step told it otherwise (a dyn_listen of
// 0.0.0.0:8101 is known to its peers by the address their seeds give).
func (n *Node) me() string { return *n.selfAddr.Load() }
