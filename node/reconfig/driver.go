// Package reconfig drives online membership changes (docs/store.md,
// Membership changes): it takes the steps the pure core (node/membership)
// computes, saves each in the node's data directory before the node
// routes by it, sends them to every member, has the old owners stream the
// ranges that move and the touched nodes drop what they no longer own,
// and serves the admin API's /cluster/{op} and the peer request
// MEMBERSHIP. What it needs of the node it runs in (routing by a step,
// streaming a range, asking a peer) is the Node interface; mirroring
// writes of moving keys, on the request path, stays in the node.
package reconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/internal/ctxtime"
	"github.com/troop-lab/troop/node/membership"
	"github.com/troop-lab/troop/resp"
)

// Node is what the driver needs of the node it runs in.
type Node interface {
	// Self is this node's address in the membership.
	Self() string
	// SetSelf makes addr this node's address in the membership: the one
	// its peers know it by.
	SetSelf(addr string)
	// State is the step the node routes by.
	State() membership.State
	// Route has the node route by step s, in which its address is self,
	// once keep (which saves s) succeeded; when either fails, the node
	// routes as before.
	Route(s membership.State, self string, keep func() error) error
	// Stream copies the keys of range r that this node's datastore holds
	// to the member at addr, and answers how many it copied.
	Stream(ctx context.Context, r membership.Range, addr string) (int64, error)
	// Cleanup drops the keys this node does not own in the step it routes
	// by, and answers how many it dropped.
	Cleanup(ctx context.Context) (int64, error)
	// Ask sends the peer request MEMBERSHIP args... to member m and
	// answers its reply, a RESP frame; long (STREAM, CLEANUP, the new
	// member's steps) on a connection of long timeout. It gives up when
	// ctx ends.
	Ask(ctx context.Context, m membership.Member, long bool, args ...[]byte) ([]byte, error)
}

// Config is what the driver needs of the node's config.
type Config struct {
	Dir        string        // the data directory, where the step is saved (membership.json)
	Datacenter string        // the node's, the default of an added node
	Timeout    time.Duration // the node's request timeout
	Log        *slog.Logger
}

// Driver serialises the steps a node takes and the changes it drives.
type Driver struct {
	node Node
	cfg  Config

	mu      sync.Mutex // one step taken at a time
	driving sync.Mutex // one change driven at a time

	// AfterStream, for tests, runs between the streaming and the switch.
	AfterStream func()
	// BeforeStep, for tests, runs before this node takes step s.
	BeforeStep func(s membership.State)
}

// New makes the driver of node.
func New(node Node, cfg Config) *Driver { return &Driver{node: node, cfg: cfg} }

// Report is what a membership request answers: the step the cluster is
// at, the ranges the change moves, and the members that did not take a
// step (a resume brings them in).
type Report struct {
	State  membership.State  `json:"state"`
	Moves  []membership.Move `json:"moves,omitempty"`
	Missed []string          `json:"missed,omitempty"`
	Error  string            `json:"error,omitempty"`
}

// errRefused marks a change the membership core refused.
type errRefused struct{ error }

// newMemberPatience is how long the member a change adds is given to take
// a step (see broadcast).
const newMemberPatience = 30 * time.Second

// conflictingStep starts the refusal of a step that differs from the one
// a node holds at the same epoch: a driver stops at it.
const conflictingStep = "conflicting membership step"

// TakeStep saves s and routes by it, when it is newer than the step this
// node holds; an older or equal one changes nothing. self, when given, is
// this node's address in s (the one the driver dialled).
func (d *Driver) TakeStep(s membership.State, self string) error {
	if h := d.BeforeStep; h != nil {
		h(s)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur := d.node.State()
	if s.Epoch == cur.Epoch && s.Epoch > 0 && !sameStep(s, cur) {
		return fmt.Errorf("%s: this node holds another step %d (%s, %s): two changes were started at once; cancel to settle on one", conflictingStep, s.Epoch, changeText(cur.Change), cur.Phase)
	}
	if !s.Newer(cur) {
		return nil
	}
	if self == "" {
		self = d.node.Self()
	}
	err := d.node.Route(s, self, func() error {
		if err := save(d.cfg.Dir, Saved{Self: self, State: s}); err != nil {
			return fmt.Errorf("saving it: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("membership step %d: %w", s.Epoch, err)
	}
	d.cfg.Log.Info("membership step taken", "epoch", s.Epoch, "phase", string(s.Phase), "change", changeText(s.Change), "routed_by", len(s.Routing()))
	return nil
}

// sameStep reports whether a and b are the same step.
func sameStep(a, b membership.State) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func changeText(c *membership.Change) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%s %s%s", c.Kind, c.Gone, c.Node)
}

// start begins the change that change makes of the newest step and
// drives it to its end.
func (d *Driver) start(ctx context.Context, change func(membership.State) (membership.State, error)) (Report, error) {
	if !d.driving.TryLock() {
		return Report{State: d.node.State()}, errRefused{errors.New("this node is driving a membership change already")}
	}
	defer d.driving.Unlock()
	cur, _ := d.gather(ctx)
	next, err := change(cur)
	if err != nil {
		return Report{State: cur}, errRefused{err}
	}
	return d.drive(ctx, cur, next)
}

// resume gathers the newest step any member holds and drives its change
// to its end; with cancel, it rolls it back.
func (d *Driver) resume(ctx context.Context, cancel bool) (Report, error) {
	if !d.driving.TryLock() {
		return Report{State: d.node.State()}, errRefused{errors.New("this node is driving a membership change already")}
	}
	defer d.driving.Unlock()
	cur, _ := d.gather(ctx)
	next := cur
	if cancel {
		var err error
		if next, err = cur.Cancel(); err != nil {
			return Report{State: cur}, errRefused{err}
		}
	} else if !cur.UnderWay() {
		return Report{State: cur}, errRefused{errors.New("no membership change is under way: nothing to resume")}
	}
	return d.drive(ctx, cur, next)
}

// members returns every member of s, either side of a change, but the one
// at self.
func members(s membership.State, self string) []membership.Member {
	seen := map[string]bool{self: true}
	var out []membership.Member
	for _, ms := range [][]membership.Member{s.Old, s.New} {
		for _, m := range ms {
			if !seen[m.Addr] {
				seen[m.Addr] = true
				out = append(out, m)
			}
		}
	}
	return out
}

// poll asks every member this node knows, all at once, for the step it
// holds: the steps of those that answered, by address, and those that
// did not.
func (d *Driver) poll(ctx context.Context, own membership.State) (map[string]membership.State, []string) {
	ms := members(own, d.node.Self())
	got := make([]*membership.State, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw, err := d.node.Ask(ctx, m, false, []byte("STATE"))
			v, perr := resp.Parse(raw)
			var s membership.State
			if err == nil && perr == nil && !v.IsError() && json.Unmarshal(v.Str, &s) == nil {
				got[i] = &s
			}
		}()
	}
	wg.Wait()
	states := map[string]membership.State{}
	var missed []string
	for i, m := range ms {
		if got[i] == nil {
			missed = append(missed, m.Addr)
			continue
		}
		states[m.Addr] = *got[i]
	}
	return states, missed
}

// gather asks every member this node knows for the step it holds and
// returns the newest, and the members that did not answer. A node the
// steps do not know by its dyn_listen (0.0.0.0:8101, say) learns from its
// peers' steps the address they know it by, and names itself so in its
// own.
func (d *Driver) gather(ctx context.Context) (membership.State, []string) {
	own := d.node.State()
	states, missed := d.poll(ctx, own)
	newest := own
	addrs := make([]string, 0, len(states))
	for a, s := range states {
		addrs = append(addrs, a)
		if s.Newer(newest) {
			newest = s
		}
	}
	sort.Strings(addrs)
	me := d.node.Self()
	if mine, ok := membership.Find(own.Routing(), me); ok {
		for _, a := range addrs {
			s := states[a]
			if _, known := membership.Find(s.Routing(), me); known {
				break
			}
			if name := s.Known(mine.DC, mine.Rack, mine.Tokens); name != "" {
				d.cfg.Log.Info("this node's address in the membership is the one its peers know", "dyn_listen", me, "known_as", name)
				own = own.Rename(me, name)
				if !newest.Newer(own) {
					newest = own
				}
				d.node.SetSelf(name)
				break
			}
		}
	}
	return newest, missed
}

// CatchUp takes the newest step any member holds, when it is newer than
// this node's: a member that was down or out of reach while the cluster
// took steps routes by the current one. A node that is not a member of
// the step it holds (one that joins and no change named yet, or one
// removed) learns nothing this way: the driver of a change that names it
// sends it its steps.
func (d *Driver) CatchUp(ctx context.Context) {
	own, me := d.node.State(), d.node.Self()
	mine, ok := membership.Find(append(append([]membership.Member(nil), own.Old...), own.New...), me)
	if !ok {
		return
	}
	states, _ := d.poll(ctx, own)
	newest := own
	for _, s := range states {
		if s.Newer(newest) {
			newest = s
		}
	}
	if !newest.Newer(own) {
		return
	}
	self := me
	if _, named := membership.Find(append(append([]membership.Member(nil), newest.Old...), newest.New...), me); !named && unspecified(me) {
		// A dyn_listen of 0.0.0.0:8101 is known to the peers by the
		// address their seeds give; any other address not in the step
		// is a node the step removed (a replacement has its tokens).
		if name := newest.Known(mine.DC, mine.Rack, mine.Tokens); name != "" {
			self = name
		}
	}
	if err := d.TakeStep(newest, self); err != nil {
		d.cfg.Log.Warn("this node could not catch up with the membership step its peers hold", "epoch", newest.Epoch, "err", err)
		return
	}
	d.cfg.Log.Info("caught up with the membership step its peers hold", "from_epoch", own.Epoch, "epoch", newest.Epoch, "phase", string(newest.Phase))
}

// unspecified reports whether addr's host is 0.0.0.0 or ::, an address
// a node listens on but its peers cannot dial.
func unspecified(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsUnspecified()
}

// Run catches up every period until ctx ends (CatchUp): a member that
// missed steps while its peers could not reach it learns them within a
// period of being reachable again.
func (d *Driver) Run(ctx context.Context, every time.Duration) {
	ctxtime.Every(ctx, every, func() { d.CatchUp(ctx) })
}

// drive takes a change from step s (from, the step before it, names the
// members that must hear of it too) to its end: each step to every member,
// the ranges streamed before the switch, and the keys the touched nodes no
// longer own dropped at the end.
func (d *Driver) drive(ctx context.Context, from, s membership.State) (Report, error) {
	audience := map[string]membership.Member{}
	for _, ms := range [][]membership.Member{from.Old, from.New, s.Old, s.New} {
		for _, m := range ms {
			audience[m.Addr] = m
		}
	}
	touched := map[string]bool{}
	for _, st := range []membership.State{from, s} {
		for _, mv := range st.Moves() {
			touched[mv.From], touched[mv.To] = true, true
		}
	}
	rep := Report{State: s, Moves: s.Moves()}
	seen := map[string]bool{}
	for {
		missed, err := d.broadcast(ctx, s, audience)
		rep.State = s
		for _, m := range missed {
			if !seen[m] {
				seen[m] = true
				rep.Missed = append(rep.Missed, m)
			}
		}
		if err != nil {
			return rep, err
		}
		// A request keeps the view it began with: after each step, wait
		// out the node's timeout, so that every write routed by the step
		// before has landed before the next action relies on this one
		// (the stream on mirroring being on, the end of mirroring on the
		// switch, the cleanup on the end).
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(d.cfg.Timeout):
		}
		switch s.Phase {
		case membership.Streaming:
			if err := d.streamMoves(ctx, s); err != nil {
				return rep, fmt.Errorf("streaming: %w (the change stays under way: resume or cancel it)", err)
			}
			if h := d.AfterStream; h != nil {
				h()
			}
			s, _ = s.Advance()
		case membership.Switched:
			s, _ = s.Advance()
		default:
			d.cleanupTouched(ctx, s, touched, audience, &rep)
			return rep, nil
		}
	}
}

// broadcast sends step s to every member of audience. The member the
// change adds takes it first, and must: when it cannot (it died during
// its handoff, say) nobody else takes the step, and the cluster goes on
// serving as before it. Then this node, then the others; those that do
// not answer are listed, and a resume brings them in.
func (d *Driver) broadcast(ctx context.Context, s membership.State, audience map[string]membership.Member) ([]string, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var added string
	if s.Change != nil {
		added = s.Change.Node
	}
	me := d.node.Self()
	addrs := make([]string, 0, len(audience))
	for a := range audience {
		if a != added && a != me {
			addrs = append(addrs, a)
		}
	}
	sort.Strings(addrs)
	send := func(ctx context.Context, a string, long bool) error {
		reply, err := d.node.Ask(ctx, audience[a], long, []byte("STEP"), raw, []byte(a))
		if err == nil && string(reply) != "+OK\r\n" {
			err = errors.New(strings.TrimSpace(strings.TrimPrefix(string(reply), "-")))
		}
		return err
	}
	if added != "" && added != me {
		// The new member has just started, and takes the step by saving it
		// and routing by it: on a machine starved of CPU that can outlast a
		// request's timeout, and then the whole change would fail. So its
		// step goes on the connection of long timeout, for at most
		// newMemberPatience; a member that is not there fails at once.
		within, cancel := context.WithTimeout(ctx, max(newMemberPatience, d.cfg.Timeout))
		err := send(within, added, true)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("the new member %s did not take step %d (%s), so no member did: %v", added, s.Epoch, s.Phase, err)
		}
	}
	if err := d.TakeStep(s, ""); err != nil {
		return nil, err
	}
	var missed []string
	for _, a := range addrs {
		if err := send(ctx, a, false); err != nil {
			if strings.Contains(err.Error(), conflictingStep) {
				return missed, fmt.Errorf("%s refused step %d: %v", a, s.Epoch, err)
			}
			d.cfg.Log.Warn("a member did not take a membership step", "member", a, "epoch", s.Epoch, "err", err)
			missed = append(missed, a)
		}
	}
	return missed, nil
}

// streamMoves has the old owner of each moving range stream it to the
// new owner; when the old owner cannot, every node of the other racks of
// its datacenter streams the keys of the range it holds. A range of a
// rack the change adds has no old owner: the nodes of one other rack
// stream it, the first by name whose nodes all can.
func (d *Driver) streamMoves(ctx context.Context, s membership.State) error {
	for _, mv := range s.Moves() {
		args := []string{"STREAM", strconv.FormatUint(uint64(mv.Range.Lo), 10), strconv.FormatUint(uint64(mv.Range.Hi), 10), mv.To}
		if mv.From == "" {
			if err := d.streamFromOneRack(ctx, s, mv, args); err != nil {
				return err
			}
			continue
		}
		from, _ := membership.Find(s.Old, mv.From)
		err := d.askLong(ctx, from, args...)
		if err == nil {
			continue
		}
		d.cfg.Log.Warn("the old owner could not stream its range: the other racks stream it", "from", mv.From, "to", mv.To, "lo", mv.Range.Lo, "hi", mv.Range.Hi, "err", err)
		for _, m := range s.Old {
			if m.DC != mv.DC || m.Rack == mv.Rack {
				continue
			}
			if err2 := d.askLong(ctx, m, args...); err2 != nil {
				return fmt.Errorf("range (%d, %d] to %s: %s could not stream it (%v), nor %s (%v)", mv.Range.Lo, mv.Range.Hi, mv.To, mv.From, err, m.Addr, err2)
			}
		}
	}
	return nil
}

// streamFromOneRack has every node of one rack of mv's datacenter (the
// old members are sorted by rack) stream the range of mv it holds: the
// first rack whose nodes all could.
func (d *Driver) streamFromOneRack(ctx context.Context, s membership.State, mv membership.Move, args []string) error {
	var errs []string
	for i := 0; i < len(s.Old); {
		rack := s.Old[i]
		j := i
		var failed error
		for ; j < len(s.Old) && s.Old[j].DC == rack.DC && s.Old[j].Rack == rack.Rack; j++ {
			if rack.DC == mv.DC && failed == nil {
				if err := d.askLong(ctx, s.Old[j], args...); err != nil {
					failed = fmt.Errorf("%s: %v", s.Old[j].Addr, err)
				}
			}
		}
		i = j
		if rack.DC != mv.DC {
			continue
		}
		if failed == nil {
			return nil
		}
		d.cfg.Log.Warn("a rack could not stream a range to the rack the change adds: the next one streams it", "rack", rack.Rack, "to", mv.To, "err", failed)
		errs = append(errs, fmt.Sprintf("rack %s (%v)", rack.Rack, failed))
	}
	return fmt.Errorf("range (%d, %d] to %s of the new rack %s/%s: no rack could stream it: %s", mv.Range.Lo, mv.Range.Hi, mv.To, mv.DC, mv.Rack, strings.Join(errs, "; "))
}

// askLong runs a long MEMBERSHIP request (STREAM, CLEANUP) on member m:
// on this node directly, on a peer over a connection of long timeout.
func (d *Driver) askLong(ctx context.Context, m membership.Member, args ...string) error {
	if m.Addr == d.node.Self() {
		var err error
		switch args[0] {
		case "STREAM":
			lo, _ := strconv.ParseUint(args[1], 10, 32)
			hi, _ := strconv.ParseUint(args[2], 10, 32)
			_, err = d.node.Stream(ctx, membership.Range{Lo: uint32(lo), Hi: uint32(hi)}, args[3])
		case "CLEANUP":
			_, err = d.node.Cleanup(ctx)
		}
		return err
	}
	bargs := make([][]byte, len(args))
	for i, a := range args {
		bargs[i] = []byte(a)
	}
	raw, err := d.node.Ask(ctx, m, true, bargs...)
	if err != nil {
		return err
	}
	if len(raw) > 0 && raw[0] == '-' {
		return errors.New(strings.TrimSpace(string(raw[1:])))
	}
	return nil
}

// cleanupTouched has the nodes a change touched drop the keys they no
// longer own.
func (d *Driver) cleanupTouched(ctx context.Context, s membership.State, touched map[string]bool, audience map[string]membership.Member, rep *Report) {
	addrs := make([]string, 0, len(touched))
	for a := range touched {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	for _, a := range addrs {
		m, ok := audience[a]
		if !ok {
			continue
		}
		if err := d.askLong(ctx, m, "CLEANUP"); err != nil {
			d.cfg.Log.Warn("a member could not drop the keys it no longer owns", "member", a, "err", err)
			rep.Missed = append(rep.Missed, a+" (cleanup: "+err.Error()+")")
		}
	}
}
