package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/node/membership"
	"github.com/troop-lab/troop/resp"
)

// Membership changes (docs/store.md, Membership changes): the steps a
// change goes through reach every member as MEMBERSHIP peer requests; each
// member saves a step in troop_data_dir/membership.json before it routes
// by it, so a restarted node starts from the last step it took.

// membershipFile is where a node keeps the last membership step it took.
const membershipFile = "membership.json"

// changeDriver serialises the steps this node takes and the changes it
// drives.
type changeDriver struct {
	mu      sync.Mutex // one step taken at a time
	driving sync.Mutex // one change driven at a time

	afterStream func() // tests: runs between the streaming and the switch
}

// savedMembership is what membership.json holds: the step, and this
// node's address in it (the one its peers dial).
type savedMembership struct {
	Self string `json:"self"`
	membership.State
}

// loadMembership reads the step saved in dir; nil when there is none.
func loadMembership(dir string) (*savedMembership, error) {
	raw, err := os.ReadFile(filepath.Join(dir, membershipFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	var s savedMembership
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("membership: %s: %w", filepath.Join(dir, membershipFile), err)
	}
	return &s, nil
}

// saveMembership writes s to dir, through a temporary file and a rename,
// synced, so a crash leaves the old step or the new one.
func saveMembership(dir string, s savedMembership) error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, membershipFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, membershipFile))
}

// applyWrite applies a write on this node's replica (writeLocal) for a
// request routed by view v. While a change is under way, a write to a key
// whose owner in this rack changes, and of which this node is one owner,
// is copied once applied to the key's other owner (mirrored: from
// whichever owner it landed on to the other, which is old to new before
// the switch and both ways after it, so that a cancel loses nothing), with
// the repair copy that never replaces a newer version; the write answers
// only when the copy is in, else this replica fails it as unreachable (the
// outcome unknown: it is applied here). Copies travel as HANDOFF, which
// the receiver does not mirror again. With no change under way this is
// writeLocal and one nil check.
func (n *Node) applyWrite(b *batch, tr *trace, v *view, version []byte, cmd *command, keys, args [][]byte, done func([]byte, error)) {
	n.writeLocal(b, tr, version, cmd, keys, args, n.mirrorAfter(v, version, keys, done))
}

// mirrorAfter wraps the done of a local write of keys, routed by v, so
// that the write answers once it is mirrored (applyWrite); it returns done
// itself when there is nothing to mirror.
func (n *Node) mirrorAfter(v *view, version []byte, keys [][]byte, done func([]byte, error)) func([]byte, error) {
	if v.other == nil || n.noMirror || len(version) == 0 {
		return done
	}
	var mkeys [][]byte
	var targets []*member
	for _, k := range keys {
		if t := v.mirrorTarget(n.token(k)); t != nil {
			mkeys = append(mkeys, append([]byte(nil), k...))
			targets = append(targets, t)
		}
	}
	if len(mkeys) == 0 {
		return done
	}
	return func(raw []byte, err error) {
		if err != nil || len(raw) == 0 || raw[0] == '-' {
			done(raw, err)
			return
		}
		n.mirror(mkeys, targets, func(merr error) {
			if merr != nil {
				// The replica did not take the write as a whole: to the
				// coordinator it is a replica that could not be reached,
				// with the outcome unknown, not one that refused it.
				n.stats.mirrorFailures.Add(1)
				done(nil, fmt.Errorf("the write was applied here, but a membership change is under way and its copy to the key's other owner failed: %v", merr))
				return
			}
			done(raw, nil)
		})
	}
}

// mirrorTarget returns the other owner, in this node's rack, of a token
// whose owner a change under way moves, when this node is one of its two
// owners; else nil.
func (v *view) mirrorTarget(t uint32) *member {
	if v.other == nil {
		return nil
	}
	mine := v.members[v.localRacks[0].ring.Owner(t)]
	theirs := v.other.members[v.other.localRacks[0].ring.Owner(t)]
	switch {
	case mine == theirs:
		return nil
	case mine.self:
		return theirs
	case theirs.self:
		return mine
	}
	return nil
}

// mirror copies each key to its target and calls done once all are in,
// with the first failure.
func (n *Node) mirror(keys [][]byte, targets []*member, done func(error)) {
	var mu sync.Mutex
	left := len(keys)
	var first error
	for i, k := range keys {
		t := targets[i]
		n.repair.copyKeyAs("HANDOFF", k, n.self, []*member{t}, nil, func(_ int, err error) {
			mu.Lock()
			if err != nil && first == nil {
				first = fmt.Errorf("%s: %v", t.peerAddr, err)
			}
			left--
			last := left == 0
			mu.Unlock()
			if last {
				done(first)
			}
		})
	}
}

// takeStep saves s and routes by it, when it is newer than the step this
// node holds; an older or equal one changes nothing. self, when given, is
// this node's address in s (the one the driver dialled).
func (n *Node) takeStep(s membership.State, self string) error {
	n.changes.mu.Lock()
	defer n.changes.mu.Unlock()
	cur := n.view()
	if s.Epoch == cur.state.Epoch && s.Epoch > 0 && !sameStep(s, cur.state) {
		return fmt.Errorf("%s: this node holds another step %d (%s, %s): two changes were started at once; cancel to settle on one", conflictingStep, s.Epoch, changeText(cur.state.Change), cur.state.Phase)
	}
	if !s.Newer(cur.state) {
		return nil
	}
	old := n.me()
	if self == "" {
		self = old
	}
	n.selfAddr.Store(&self)
	v, err := n.buildView(s)
	if err != nil {
		n.selfAddr.Store(&old)
		return fmt.Errorf("membership step %d: %w", s.Epoch, err)
	}
	if err := saveMembership(n.dataDir, savedMembership{Self: self, State: s}); err != nil {
		n.selfAddr.Store(&old)
		return fmt.Errorf("membership step %d: saving it: %w", s.Epoch, err)
	}
	n.cur.Store(v)
	n.log.Info("membership step taken", "epoch", s.Epoch, "phase", string(s.Phase), "change", changeText(s.Change), "routed_by", len(v.members))
	return nil
}

// conflictingStep starts the refusal of a step that differs from the one
// a node holds at the same epoch: a driver stops at it.
const conflictingStep = "conflicting membership step"

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

// deleteIfScript deletes a key and its version when the version is still
// the one given: cleanup never drops a write that arrived after its scan.
const deleteIfScript = `
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
`

// streamRange copies every key of this node's redis-server whose token is
// in r to the member at addr, with its version (HANDOFF: the repair copy,
// which never replaces a newer version), a bounded number of copies in
// flight, at most troop_handoff_keys_per_sec a second: unbounded, the
// stream took the clients' share of redis-server and the CPU
// (docs/performance.md). It returns how many keys it copied.
func (n *Node) streamRange(ctx context.Context, r membership.Range, addr string) (int64, error) {
	to := n.memberByAddr(addr)
	if to == nil {
		return 0, fmt.Errorf("%s is not a member this node knows", addr)
	}
	const inflight = 64
	slots := make(chan struct{}, inflight)
	limiter := newRateLimiter(n.cfg.HandoffKeysPerSec)
	var (
		mu     sync.Mutex
		first  error
		copied int64
		wg     sync.WaitGroup
	)
	err := n.scanLocal(ctx, segment{lo: r.Lo, hi: r.Hi}, 0, nil, func(key, _, _ []byte, _ int) {
		if limiter.wait(ctx) != nil {
			return // the scan ends with the context's error
		}
		key = append([]byte(nil), key...)
		slots <- struct{}{}
		wg.Add(1)
		n.repair.copyKeyAs("HANDOFF", key, n.self, []*member{to}, nil, func(_ int, err error) {
			mu.Lock()
			if err != nil && first == nil {
				first = fmt.Errorf("copying %q: %v", printableArg(key), err)
			}
			if err == nil {
				copied++
			}
			mu.Unlock()
			<-slots
			wg.Done()
		})
	})
	wg.Wait()
	n.stats.handoffKeys.Add(copied)
	if err == nil {
		err = first
	}
	return copied, err
}

// cleanup drops the keys of this node's redis-server that it does not own
// in its rack in the view it routes by (all of them on a removed node),
// each only if its version is still the one scanned. It returns how many
// it dropped.
func (n *Node) cleanup(ctx context.Context) (int64, error) {
	v := n.view()
	if v.other != nil {
		return 0, errors.New("a membership change is under way: keys are dropped only once it is done")
	}
	store, _ := n.aeLinks()
	own := v.localRacks[0].ring
	var dropped int64
	var failed error
	err := n.scanLocal(ctx, segment{}, 0, nil, func(key, version, _ []byte, _ int) {
		if failed != nil || v.members[own.Owner(n.token(key))] == n.self {
			return
		}
		args := append(scriptArgs("EVAL", deleteIfScript, [][]byte{key, append([]byte(VersionPrefix), key...)}), version)
		raw, err := doSync(store, resp.AppendCommand(nil, args...))
		if err == nil && string(raw) == ":1\r\n" {
			dropped++ // the version cache keeps its bound: an upper bound still
		} else if err != nil {
			failed = err
		}
	})
	if err == nil {
		err = failed
	}
	return dropped, err
}

// memberByAddr returns the member at a peer address among every member of
// the current view, either side of a change; nil when there is none.
func (n *Node) memberByAddr(addr string) *member {
	for _, m := range n.view().all {
		if m.peerAddr == addr {
			return m
		}
	}
	return nil
}

// serveMembership answers a peer's MEMBERSHIP request, off the
// connection's reader (streaming and cleanup scan the keyspace):
//
//	MEMBERSHIP STATE              -> the step this node holds, JSON
//	MEMBERSHIP STEP json addr     -> +OK once saved and routed by; addr
//	                                 is this node's address in the step
//	MEMBERSHIP STREAM lo hi addr  -> :keys copied to addr
//	MEMBERSHIP CLEANUP            -> :keys dropped
func (n *Node) serveMembership(args [][]byte, s *slot) {
	bad := func(why string) { s.complete(resp.AppendError(nil, "ERR troop peer protocol: MEMBERSHIP: "+why)) }
	if len(args) < 2 {
		bad("want STATE, STEP, STREAM or CLEANUP")
		return
	}
	op := strings.ToUpper(string(args[1]))
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx := context.Background()
		switch {
		case op == "STATE" && len(args) == 2:
			raw, _ := json.Marshal(n.view().state)
			s.complete(resp.AppendBulk(nil, raw))
		case op == "STEP" && (len(args) == 3 || len(args) == 4):
			var st membership.State
			if err := json.Unmarshal(args[2], &st); err != nil {
				bad("bad step: " + err.Error())
				return
			}
			self := "" // the address the driver dialled: this node's in st
			if len(args) == 4 {
				self = string(args[3])
			}
			if err := n.takeStep(st, self); err != nil {
				s.complete(resp.AppendError(nil, "ERR troop: "+err.Error()))
				return
			}
			s.complete(resp.AppendSimple(nil, "OK"))
		case op == "STREAM" && len(args) == 5:
			lo, err1 := strconv.ParseUint(string(args[2]), 10, 32)
			hi, err2 := strconv.ParseUint(string(args[3]), 10, 32)
			if err1 != nil || err2 != nil {
				bad("bad range")
				return
			}
			c, err := n.streamRange(ctx, membership.Range{Lo: uint32(lo), Hi: uint32(hi)}, string(args[4]))
			if err != nil {
				s.complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: streaming (%d, %d] to %s: %v (%d keys copied)", lo, hi, args[4], err, c)))
				return
			}
			s.complete(resp.AppendInt(nil, c))
		case op == "CLEANUP" && len(args) == 2:
			c, err := n.cleanup(ctx)
			if err != nil {
				s.complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: cleanup: %v (%d keys dropped)", err, c)))
				return
			}
			s.complete(resp.AppendInt(nil, c))
		default:
			bad(fmt.Sprintf("unknown request %q or wrong number of arguments", op))
		}
	}()
}

// ChangeReport is what a membership request answers: the step the cluster
// is at, the ranges the change moves, and the members that did not take
// a step (a resume brings them in).
type ChangeReport struct {
	State  membership.State  `json:"state"`
	Moves  []membership.Move `json:"moves,omitempty"`
	Missed []string          `json:"missed,omitempty"`
	Error  string            `json:"error,omitempty"`
}

// errChangeRefused marks a change the membership core refused.
type errChangeRefused struct{ error }

// startChange begins the change that change makes of the newest step and drives
// it to its end.
func (n *Node) startChange(ctx context.Context, change func(membership.State) (membership.State, error)) (ChangeReport, error) {
	if !n.changes.driving.TryLock() {
		return ChangeReport{State: n.view().state}, errChangeRefused{errors.New("this node is driving a membership change already")}
	}
	defer n.changes.driving.Unlock()
	cur, _ := n.gather(ctx)
	next, err := change(cur)
	if err != nil {
		return ChangeReport{State: cur}, errChangeRefused{err}
	}
	return n.drive(ctx, cur, next)
}

// Resume gathers the newest step any member holds and drives its change
// to its end; Cancel rolls it back.
func (n *Node) resumeChange(ctx context.Context, cancel bool) (ChangeReport, error) {
	if !n.changes.driving.TryLock() {
		return ChangeReport{State: n.view().state}, errChangeRefused{errors.New("this node is driving a membership change already")}
	}
	defer n.changes.driving.Unlock()
	cur, _ := n.gather(ctx)
	next := cur
	if cancel {
		var err error
		if next, err = cur.Cancel(); err != nil {
			return ChangeReport{State: cur}, errChangeRefused{err}
		}
	} else if !cur.UnderWay() {
		return ChangeReport{State: cur}, errChangeRefused{errors.New("no membership change is under way: nothing to resume")}
	}
	return n.drive(ctx, cur, next)
}

// gather asks every member this node knows for the step it holds and
// returns the newest, and the members that did not answer. A node the
// steps do not know by its dyn_listen (0.0.0.0:8101, say) learns from its
// peers' steps the address they know it by, and names itself so in its
// own.
func (n *Node) gather(ctx context.Context) (membership.State, []string) {
	own := n.view().state
	newest := own
	var missed []string
	var states []membership.State
	for _, m := range n.view().peers() {
		raw, err := doSync(m.link, resp.AppendCommandStrings(nil, "MEMBERSHIP", "STATE"))
		v, perr := resp.Parse(raw)
		var s membership.State
		if err != nil || perr != nil || v.IsError() || json.Unmarshal(v.Str, &s) != nil {
			missed = append(missed, m.peerAddr)
			continue
		}
		states = append(states, s)
		if s.Newer(newest) {
			newest = s
		}
	}
	if mine, ok := membership.Find(own.Routing(), n.me()); ok {
		for _, s := range states {
			if _, known := membership.Find(s.Routing(), n.me()); known {
				break
			}
			if name := s.Known(mine.DC, mine.Rack, mine.Tokens); name != "" {
				n.log.Info("this node's address in the membership is the one its peers know", "dyn_listen", n.me(), "known_as", name)
				own = own.Rename(n.me(), name)
				if !newest.Newer(own) {
					newest = own
				}
				n.selfAddr.Store(&name)
				break
			}
		}
	}
	return newest, missed
}

// drive takes a change from step s (from, the step before it, names the
// members that must hear of it too) to its end: each step to every member,
// the ranges streamed before the switch, and the keys the touched nodes no
// longer own dropped at the end.
func (n *Node) drive(ctx context.Context, from, s membership.State) (ChangeReport, error) {
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
	rep := ChangeReport{State: s, Moves: s.Moves()}
	seen := map[string]bool{}
	for {
		missed, err := n.broadcast(s, audience)
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
		case <-time.After(n.cfg.Timeout):
		}
		switch s.Phase {
		case membership.Streaming:
			if err := n.streamMoves(ctx, s); err != nil {
				return rep, fmt.Errorf("streaming: %w (the change stays under way: resume or cancel it)", err)
			}
			if h := n.changes.afterStream; h != nil {
				h()
			}
			s, _ = s.Advance()
		case membership.Switched:
			s, _ = s.Advance()
		default:
			n.cleanupTouched(ctx, s, touched, audience, &rep)
			return rep, nil
		}
	}
}

// broadcast sends step s to every member of audience. The member the
// change adds takes it first, and must: when it cannot (it died during
// its handoff, say) nobody else takes the step, and the cluster goes on
// serving as before it. Then this node, then the others; those that do
// not answer are listed, and a resume brings them in.
func (n *Node) broadcast(s membership.State, audience map[string]membership.Member) ([]string, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var added string
	if s.Change != nil {
		added = s.Change.Node
	}
	addrs := make([]string, 0, len(audience))
	for a := range audience {
		if a != added && a != n.me() {
			addrs = append(addrs, a)
		}
	}
	sort.Strings(addrs)
	send := func(a string) error {
		mm := audience[a]
		m, err := n.memberFor(mm.Addr, mm.DC, mm.Rack)
		if err != nil {
			return err
		}
		reply, err := doSync(m.link, resp.AppendCommand(nil, []byte("MEMBERSHIP"), []byte("STEP"), raw, []byte(a)))
		if err == nil && string(reply) != "+OK\r\n" {
			err = errors.New(strings.TrimSpace(strings.TrimPrefix(string(reply), "-")))
		}
		return err
	}
	if added != "" && added != n.me() {
		if err := send(added); err != nil {
			return nil, fmt.Errorf("the new member %s did not take step %d (%s), so no member did: %v", added, s.Epoch, s.Phase, err)
		}
	}
	if err := n.takeStep(s, ""); err != nil {
		return nil, err
	}
	var missed []string
	for _, a := range addrs {
		if err := send(a); err != nil {
			if strings.Contains(err.Error(), conflictingStep) {
				return missed, fmt.Errorf("%s refused step %d: %v", a, s.Epoch, err)
			}
			n.log.Warn("a member did not take a membership step", "member", a, "epoch", s.Epoch, "err", err)
			missed = append(missed, a)
		}
	}
	return missed, nil
}

// streamMoves has the old owner of each moving range stream it to the
// new owner; when the old owner cannot, every node of the other racks of
// its datacenter streams the keys of the range it holds.
func (n *Node) streamMoves(ctx context.Context, s membership.State) error {
	for _, mv := range s.Moves() {
		args := []string{"STREAM", strconv.FormatUint(uint64(mv.Range.Lo), 10), strconv.FormatUint(uint64(mv.Range.Hi), 10), mv.To}
		from, _ := membership.Find(s.Old, mv.From)
		err := n.askLong(ctx, from, args...)
		if err == nil {
			continue
		}
		n.log.Warn("the old owner could not stream its range: the other racks stream it", "from", mv.From, "to", mv.To, "lo", mv.Range.Lo, "hi", mv.Range.Hi, "err", err)
		for _, m := range s.Old {
			if m.DC != mv.DC || m.Rack == mv.Rack {
				continue
			}
			if err2 := n.askLong(ctx, m, args...); err2 != nil {
				return fmt.Errorf("range (%d, %d] to %s: %s could not stream it (%v), nor %s (%v)", mv.Range.Lo, mv.Range.Hi, mv.To, mv.From, err, m.Addr, err2)
			}
		}
	}
	return nil
}

// askLong runs a long MEMBERSHIP request (STREAM, CLEANUP) on member m:
// on this node directly, on a peer over a connection of long timeout.
func (n *Node) askLong(ctx context.Context, m membership.Member, args ...string) error {
	if m.Addr == n.me() {
		var err error
		switch args[0] {
		case "STREAM":
			lo, _ := strconv.ParseUint(args[1], 10, 32)
			hi, _ := strconv.ParseUint(args[2], 10, 32)
			_, err = n.streamRange(ctx, membership.Range{Lo: uint32(lo), Hi: uint32(hi)}, args[3])
		case "CLEANUP":
			_, err = n.cleanup(ctx)
		}
		return err
	}
	peer, err := n.memberFor(m.Addr, m.DC, m.Rack)
	if err != nil {
		return err
	}
	raw, err := doSync(n.aeLink(peer), resp.AppendCommandStrings(nil, append([]string{"MEMBERSHIP"}, args...)...))
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
func (n *Node) cleanupTouched(ctx context.Context, s membership.State, touched map[string]bool, audience map[string]membership.Member, rep *ChangeReport) {
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
		if err := n.askLong(ctx, m, "CLEANUP"); err != nil {
			n.log.Warn("a member could not drop the keys it no longer owns", "member", a, "err", err)
			rep.Missed = append(rep.Missed, a+" (cleanup: "+err.Error()+")")
		}
	}
}

// clusterChange serves POST /cluster/{add,remove,replace,cancel,resume}:
// it drives the change to its end and answers a ChangeReport, 409 when
// the change is refused, 500 when it stopped part way (resume or cancel
// it then).
func (n *Node) clusterChange(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tokens, err := parseTokens(q.Get("tokens"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var rep ChangeReport
	op := r.PathValue("op")
	switch op {
	case "add":
		m := membership.Member{Addr: q.Get("addr"), DC: q.Get("dc"), Rack: q.Get("rack"), Tokens: tokens}
		if m.DC == "" {
			m.DC = n.cfg.Datacenter
		}
		if m.Addr == "" || m.Rack == "" {
			http.Error(w, "want addr=PEER_ADDRESS and rack=RACK (dc= and tokens= are optional: this node's datacenter, and the middle of the rack's widest range)", http.StatusBadRequest)
			return
		}
		rep, err = n.startChange(r.Context(), func(s membership.State) (membership.State, error) {
			if len(m.Tokens) == 0 {
				if t, err := membership.SplitToken(s.New, m.DC, m.Rack); err == nil {
					m.Tokens = []uint32{t}
				} // else the core refuses the add, and says why
			}
			return s.Add(m)
		})
	case "remove":
		if q.Get("addr") == "" {
			http.Error(w, "want addr=PEER_ADDRESS of the node to remove", http.StatusBadRequest)
			return
		}
		rep, err = n.startChange(r.Context(), func(s membership.State) (membership.State, error) { return s.Remove(q.Get("addr")) })
	case "replace":
		if q.Get("old") == "" || q.Get("addr") == "" {
			http.Error(w, "want old=PEER_ADDRESS of the node to replace and addr=PEER_ADDRESS of its replacement (tokens= is optional: the old node's)", http.StatusBadRequest)
			return
		}
		rep, err = n.startChange(r.Context(), func(s membership.State) (membership.State, error) {
			return s.Replace(q.Get("old"), membership.Member{Addr: q.Get("addr"), Tokens: tokens})
		})
	case "cancel", "resume":
		rep, err = n.resumeChange(r.Context(), op == "cancel")
	default:
		http.Error(w, fmt.Sprintf("unknown membership change %q: want add, remove, replace, cancel or resume", op), http.StatusNotFound)
		return
	}
	status := http.StatusOK
	if err != nil {
		rep.Error = err.Error()
		status = http.StatusInternalServerError
		var refused errChangeRefused
		if errors.As(err, &refused) {
			status = http.StatusConflict
		}
		n.log.Warn("membership change failed", "op", op, "err", err, "remote", r.RemoteAddr)
	} else {
		n.log.Info("membership change done", "op", op, "epoch", rep.State.Epoch, "remote", r.RemoteAddr)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(rep)
}

// parseTokens reads a comma-separated list of tokens; "" is none.
func parseTokens(s string) ([]uint32, error) {
	if s == "" {
		return nil, nil
	}
	var out []uint32
	for _, f := range strings.Split(s, ",") {
		t, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("tokens=%s: %q is not a token (0 to 4294967295)", s, f)
		}
		out = append(out, uint32(t))
	}
	return out, nil
}
