package node

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// Redis's blocking pops (BLPOP and the rest) wait until a list or sorted
// set has something to pop. A replica cannot wait for them: the pop must
// happen on every replica, and a redis-server blocked on one key holds its
// connection. So the node waits: it looks at the keys on its own rack's
// replica, and when one holds something it runs the non-blocking pop
// (LPOP, LMOVE, ZPOPMIN ...) as any write, at the connection's write
// level; when the pop finds nothing after all (another client took it),
// it goes on waiting. It looks again after 1 ms, then twice as long each
// time up to blockingPollMax, and at once after a write through this node
// to one of the keys. That write's reply waits, up to blockingTurnMax,
// until the waits it woke have looked again (a turn): Redis serves its
// blocked clients before the pusher's reply goes out, so a client that
// pushes and then reads sees what they took. The wait ends at the command's timeout (0: never),
// or when the connection closes. Inside MULTI the commands do not block,
// as in Redis: every replica runs them as they are.

// blockingPollMax bounds the time between two looks at the keys: what an
// element pushed through another node may wait before a client blocked on
// this one gets it.
const blockingPollMax = 20 * time.Millisecond

// blockingTurnMax bounds what a write's reply waits for the blocked
// clients it woke: one that cannot reach its replica does not hold it.
const blockingTurnMax = time.Second

// A blockingSpec says how to wait for one blocking command.
type blockingSpec struct {
	pop   string // the non-blocking command that does the work
	probe string // the read that says whether a key has something: LLEN or ZCARD
	// timeoutAt is the index of the timeout in the arguments; -1: the last.
	timeoutAt int
	// perKey: the first of the keys that holds something is popped alone
	// (BLPOP), else the command's keys are popped together (BLMPOP).
	perKey bool
}

var blockingSpecs = map[string]blockingSpec{
	"BLPOP":      {pop: "LPOP", probe: "LLEN", timeoutAt: -1, perKey: true},
	"BRPOP":      {pop: "RPOP", probe: "LLEN", timeoutAt: -1, perKey: true},
	"BZPOPMIN":   {pop: "ZPOPMIN", probe: "ZCARD", timeoutAt: -1, perKey: true},
	"BZPOPMAX":   {pop: "ZPOPMAX", probe: "ZCARD", timeoutAt: -1, perKey: true},
	"BLMOVE":     {pop: "LMOVE", probe: "LLEN", timeoutAt: 5},
	"BRPOPLPUSH": {pop: "RPOPLPUSH", probe: "LLEN", timeoutAt: 3},
	"BLMPOP":     {pop: "LMPOP", probe: "LLEN", timeoutAt: 1},
	"BZMPOP":     {pop: "ZMPOP", probe: "ZCARD", timeoutAt: 1},
}

// badOptions is Redis's error for the options of a blocking command that
// Redis refuses before it blocks (a wrong direction, a count), or "": the
// node waits before it runs the pop that would refuse them.
func (s blockingSpec) badOptions(args [][]byte, keys int) string {
	var where [][]byte
	var ends []string
	switch s.pop {
	case "LMOVE": // BLMOVE src dst LEFT|RIGHT LEFT|RIGHT timeout
		where, ends = args[3:5], []string{"LEFT", "RIGHT"}
	case "LMPOP", "ZMPOP": // timeout numkeys key... LEFT|RIGHT|MIN|MAX [COUNT n]
		rest := args[3+keys:]
		if len(rest) == 0 {
			return "ERR syntax error"
		}
		where, ends = rest[:1], []string{"LEFT", "RIGHT"}
		if s.pop == "ZMPOP" {
			ends = []string{"MIN", "MAX"}
		}
		switch {
		case len(rest) == 1:
		case len(rest) == 3 && strings.EqualFold(string(rest[1]), "COUNT"):
			if n, err := strconv.ParseInt(string(rest[2]), 10, 64); err != nil || n <= 0 {
				return "ERR count should be greater than 0"
			}
		default:
			return "ERR syntax error"
		}
	}
	for _, w := range where {
		if !slices.ContainsFunc(ends, func(e string) bool { return strings.EqualFold(e, string(w)) }) {
			return "ERR syntax error"
		}
	}
	return ""
}

// timeoutIndex is the index of the timeout in args.
func (s blockingSpec) timeoutIndex(args [][]byte) int {
	if s.timeoutAt < 0 {
		return len(args) - 1
	}
	return s.timeoutAt
}

// nonBlocking is the pop a blocking command runs, its arguments as the
// non-blocking command takes them: key for BLPOP's perKey kin, else the
// command without its timeout.
func (s blockingSpec) nonBlocking(args [][]byte, key []byte) [][]byte {
	if s.perKey {
		return [][]byte{[]byte(s.pop), key}
	}
	at := s.timeoutIndex(args)
	out := [][]byte{[]byte(s.pop)}
	for i, a := range args[1:] {
		if i+1 != at {
			out = append(out, a)
		}
	}
	return out
}

// parseBlockingTimeout reads a timeout as Redis does: seconds, a float, 0
// for none.
func parseBlockingTimeout(a []byte) (time.Duration, string) {
	f, err := strconv.ParseFloat(string(a), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f > math.MaxInt64/float64(time.Second) {
		return 0, "ERR timeout is not a float or out of range"
	}
	if f < 0 {
		return 0, "ERR timeout is negative"
	}
	return time.Duration(f * float64(time.Second)), ""
}

// blocking runs one blocking command outside MULTI.
func (n *Node) blocking(tr *trace, level consistency.Level, c *command, keys, args [][]byte, sess *session, h *hold, done replyFunc) {
	if c.name == "XREAD" || c.name == "XREADGROUP" {
		n.blockingStreams(tr, level, c, keys, args, sess, h, done)
		return
	}
	spec := blockingSpecs[c.name]
	timeout, bad := parseBlockingTimeout(args[spec.timeoutIndex(args)])
	if bad == "" {
		bad = spec.badOptions(args, len(keys))
	}
	if bad != "" {
		done(resp.AppendError(nil, bad))
		return
	}
	if !spec.perKey && !n.sameReplicas(keys) {
		done(resp.AppendError(nil, fmt.Sprintf("ERR troop: the keys of '%s' belong to different nodes, and troop does not split it", c.name)))
		return
	}
	probes := keys
	if c.name == "BLMOVE" || c.name == "BRPOPLPUSH" {
		probes = keys[:1] // the source; the destination is only written
	}
	w := &blockedWait{n: n, tr: tr, level: level, spec: spec, probes: probes, keys: keys, args: args, sess: sess,
		h: h, done: done, wake: make(chan struct{}, 1), interval: time.Millisecond}
	if timeout > 0 {
		w.deadline = time.Now().Add(timeout)
	}
	h.add(1) // the wait: the connection's token stays taken until the reply
	n.stats.blocked.Add(1)
	sess.client.blockStarted()
	n.blockers.add(w)
	w.look()
}

// blockedWait is one client's wait.
type blockedWait struct {
	n        *Node
	tr       *trace
	level    consistency.Level
	spec     blockingSpec
	probes   [][]byte // the keys looked at, in order
	keys     [][]byte // the keys the pop takes: one of probes (perKey), or all of them
	args     [][]byte
	sess     *session
	h        *hold
	done     replyFunc
	deadline time.Time // zero: none
	interval time.Duration
	stream   *streamWait   // a blocking stream read's; nil for a pop
	looked   bool          // a look ended with nothing to pop: the client blocks
	wake     chan struct{} // a write through this node touched one of the keys
	// turns are the writes waiting for this wait to look again (guarded
	// by the blockers' lock); looking, those the look under way answers.
	turns, looking []*sync.WaitGroup
}

// look asks the own rack's replica whether the keys, from the i-th on,
// hold something, and pops from the first that does and on which no client
// has waited longer through this node (Redis serves blocked clients first
// come, first served); with none, it waits.
func (w *blockedWait) look() {
	w.n.blockers.startLook(w)
	if w.stream != nil {
		w.lookStreams()
		return
	}
	w.lookFrom(0)
}

func (w *blockedWait) lookFrom(i int) {
	if i == len(w.probes) {
		w.wait()
		return
	}
	key := w.probes[i]
	w.n.read(nil, consistency.DCOne, [][]byte{key}, [][]byte{[]byte(w.spec.probe), key}, nil, func(reply []byte) {
		v, err := resp.Parse(reply)
		if err != nil || v.IsError() {
			if w.looked && v.IsError() && strings.HasPrefix(string(v.Str), "WRONGTYPE") {
				// A key that became another type while the client waited:
				// Redis only wakes its clients for a list (or sorted set).
				w.lookFrom(i + 1)
				return
			}
			w.finish(reply) // WRONGTYPE at the start, say: Redis answers it at once too
			return
		}
		if v.Int == 0 || !w.n.blockers.first(key, w) {
			w.lookFrom(i + 1) // empty, or a client blocked on it before this one goes first, as in Redis
			return
		}
		w.pop(key)
	})
}

// pop runs the non-blocking pop; nothing popped after all, it waits again.
func (w *blockedWait) pop(key []byte) {
	args := w.spec.nonBlocking(w.args, key)
	c := lookup(args[0])
	keys := w.keys
	if w.spec.perKey {
		keys = [][]byte{key}
	}
	w.n.drawn(w.tr, w.level, c, keys, args, w.h, nil, func(reply []byte) {
		v, err := resp.Parse(reply)
		switch {
		case err != nil || v.IsError():
			w.finish(reply)
		case v.IsNull || (v.Type == resp.Array && len(v.Elems) == 0):
			w.interval = time.Millisecond // taken by another: look again soon
			w.wait()
		case len(w.probes) < len(w.keys) && !bytes.Equal(w.keys[0], w.keys[1]): // a move: who waits on its destination goes first
			w.n.blockers.wake(w.keys[len(w.probes):]).after(func() { w.finish(reply) })
		case w.spec.perKey: // [key, what the pop gave]
			out := resp.AppendArrayHeader(nil, 1+max(1, len(v.Elems)))
			out = resp.AppendBulk(out, key)
			if v.Type == resp.Array {
				for _, e := range v.Elems {
					out = resp.AppendValue(out, e)
				}
			} else {
				out = resp.AppendValue(out, v)
			}
			w.finish(out)
		default:
			w.finish(reply)
		}
	})
}

// wait looks again after the interval, at a wake-up, or not at all once
// the deadline passed or the connection closed.
func (w *blockedWait) wait() {
	w.looked = true
	w.n.blockers.endLook(w)
	d := w.interval
	w.interval = min(2*w.interval, blockingPollMax)
	if !w.deadline.IsZero() {
		left := time.Until(w.deadline)
		if left <= 0 {
			w.finish(resp.AppendNullArray(nil))
			return
		}
		d = min(d, left)
	}
	t := time.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C:
		case <-w.wake:
			w.interval = time.Millisecond
		case <-w.sess.closed:
			w.finish(nil)
			return
		case reply := <-w.sess.client.unblocked():
			w.finish(reply)
			return
		}
		w.look()
	}()
}

// finish gives the reply (none when the connection closed) and ends the wait.
func (w *blockedWait) finish(reply []byte) {
	w.n.blockers.remove(w)
	w.n.stats.blocked.Add(-1)
	w.sess.client.blockEnded()
	if reply != nil {
		w.done(reply)
	} else {
		w.done(resp.AppendNullArray(nil)) // nobody reads it
	}
	w.h.done()
}

// blockers are the waits in progress, by the keys they look at, in the
// order they began, so that a write through this node to one of their
// keys wakes them at once, and the longest waiting pops first.
type blockers struct {
	mu    sync.Mutex
	count atomic.Int64 // read without the lock on every write: zero costs nothing
	byKey map[string][]*blockedWait
}

func (b *blockers) add(w *blockedWait) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byKey == nil {
		b.byKey = map[string][]*blockedWait{}
	}
	for _, k := range w.probes {
		b.byKey[string(k)] = append(b.byKey[string(k)], w)
	}
	b.count.Add(1)
}

// first says whether w is the longest waiting of the waits on key.
func (b *blockers) first(key []byte, w *blockedWait) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ws := b.byKey[string(key)]
	return len(ws) > 0 && ws[0] == w
}

// remove ends w's wait, and wakes the waits next in line on its keys: the
// writes that waited for w wait for them too, since what w left may be
// theirs.
func (b *blockers) remove(w *blockedWait) {
	b.mu.Lock()
	turns := append(w.looking, w.turns...)
	w.looking, w.turns = nil, nil
	defer func() {
		for _, t := range turns {
			t.Done()
		}
	}()
	defer b.mu.Unlock()
	defer b.wakeLocked(w.probes, turns)
	for _, k := range w.probes {
		ws := b.byKey[string(k)]
		for i, x := range ws {
			if x == w {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(b.byKey, string(k))
		} else {
			b.byKey[string(k)] = ws
		}
	}
	b.count.Add(-1)
}

// A turn is the waits one write woke.
type turn struct{ wg *sync.WaitGroup }

// after calls f once every wait of the turn has looked again, or after
// blockingTurnMax.
func (t turn) after(f func()) {
	if t.wg == nil {
		f()
		return
	}
	looked := make(chan struct{})
	go func() { t.wg.Wait(); close(looked) }()
	go func() {
		timer := time.NewTimer(blockingTurnMax)
		defer timer.Stop()
		select {
		case <-looked:
		case <-timer.C:
		}
		f()
	}()
}

// wake tells the waits on any of keys to look again now, and returns
// their turn.
func (b *blockers) wake(keys [][]byte) turn {
	if b.count.Load() == 0 {
		return turn{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := turn{wg: &sync.WaitGroup{}}
	b.wakeLocked(keys, []*sync.WaitGroup{t.wg})
	return t
}

// wakeLocked wakes the waits on keys, each once, and makes each of turns
// wait for them.
func (b *blockers) wakeLocked(keys [][]byte, turns []*sync.WaitGroup) {
	woken := map[*blockedWait]bool{}
	for _, k := range keys {
		for _, w := range b.byKey[string(k)] {
			if woken[w] {
				continue
			}
			woken[w] = true
			for _, t := range turns {
				t.Add(1)
				w.turns = append(w.turns, t)
			}
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// startLook gives the turns w was woken for to the look it begins: only a
// look that began after a write can answer for it.
func (b *blockers) startLook(w *blockedWait) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w.looking, w.turns = append(w.looking, w.turns...), nil
}

// endLook ends w's look: the turns it answered for go on.
func (b *blockers) endLook(w *blockedWait) {
	b.mu.Lock()
	looked := w.looking
	w.looking = nil
	b.mu.Unlock()
	for _, t := range looked {
		t.Done()
	}
}

// Blocking stream reads, XREAD and XREADGROUP with BLOCK ms, wait the same
// way: the node looks at the streams on its own rack's replica, and when one
// has entries past what the client asked for, it runs the read without BLOCK
// as any (XREAD at the connection's read level; XREADGROUP as the stream
// write it is, so every replica delivers the same entries), and waits again
// when that finds nothing after all. XREAD's $ is the stream's last ID when
// the wait begins, as in Redis. XREADGROUP blocks only when every ID is >,
// as in Redis; while it waits, a key deleted or no longer a stream ends it
// with Redis's UNBLOCKED error, and a group destroyed with NOGROUP.

// streamWait is what a blocking stream read waits for: XREADGROUP's group,
// or nil for XREAD.
type streamWait struct{ group []byte }

// blockingStreams runs XREAD or XREADGROUP with BLOCK outside MULTI.
func (n *Node) blockingStreams(tr *trace, level consistency.Level, c *command, keys, args [][]byte, sess *session, h *hold, done replyFunc) {
	ms, bad := streamBlockTimeout(args)
	if bad != "" {
		done(resp.AppendError(nil, bad))
		return
	}
	if !n.sameReplicas(keys) {
		done(resp.AppendError(nil, fmt.Sprintf("ERR troop: the keys of '%s' belong to different nodes, and troop does not split it", c.name)))
		return
	}
	plain := withoutBlock(args) // a copy: resolveLast changes its IDs
	ids := plain[len(plain)-len(keys):]
	w := &blockedWait{n: n, tr: tr, level: level, probes: keys, keys: keys, args: plain, sess: sess,
		h: h, done: done, wake: make(chan struct{}, 1), interval: time.Millisecond, stream: &streamWait{}}
	if c.name == "XREADGROUP" {
		for _, id := range ids {
			if string(id) != ">" { // history: Redis answers at once
				n.decided(tr, level, c, keys, plain, &keyGate{}, h, nil, done) // its client waits, and sends nothing meanwhile
				return
			}
		}
		w.stream.group = plain[2] // XREADGROUP GROUP group consumer ...
	}
	if ms > 0 {
		w.deadline = time.Now().Add(time.Duration(ms) * time.Millisecond)
	}
	h.add(1) // the wait: the connection's token stays taken until the reply
	w.resolveLast(0, func() {
		n.stats.blocked.Add(1)
		sess.client.blockStarted()
		n.blockers.add(w)
		w.look()
	})
}

// streamBlockTimeout is BLOCK's milliseconds, or Redis's error for them.
func streamBlockTimeout(args [][]byte) (int64, string) {
	for i := 1; i+1 < len(args); i++ {
		if strings.EqualFold(string(args[i]), "BLOCK") {
			ms, err := strconv.ParseInt(string(args[i+1]), 10, 64)
			if err != nil {
				return 0, "ERR timeout is not an integer or out of range"
			}
			if ms < 0 {
				return 0, "ERR timeout is negative"
			}
			return ms, ""
		}
	}
	return 0, ""
}

// blockingStreamRead says whether args are XREAD or XREADGROUP with BLOCK.
func blockingStreamRead(c *command, args [][]byte) bool {
	if c.name != "XREAD" && c.name != "XREADGROUP" {
		return false
	}
	return len(withoutBlock(args)) != len(args)
}

// resolveLast replaces XREAD's $ IDs, from the i-th key on, with the
// stream's last ID on the own rack's replica (0-0 for no stream), then
// calls next; a key that is not a stream ends the wait with WRONGTYPE.
func (w *blockedWait) resolveLast(i int, next func()) {
	ids := w.args[len(w.args)-len(w.keys):]
	for i < len(w.keys) && (w.stream.group != nil || string(ids[i]) != "$") {
		i++
	}
	if i == len(w.keys) {
		next()
		return
	}
	key := w.keys[i]
	w.n.read(nil, consistency.DCOne, [][]byte{key}, [][]byte{[]byte("XINFO"), []byte("STREAM"), key}, nil, func(reply []byte) {
		v, err := resp.Parse(reply)
		last := "0-0"
		switch {
		case err == nil && v.IsError() && strings.HasPrefix(string(v.Str), "WRONGTYPE"):
			w.done(reply) // Redis answers it at once, before blocking
			w.h.done()
			return
		case err == nil && !v.IsError():
			if id := mapField(v, "last-generated-id"); id != nil {
				last = string(id)
			}
		}
		w.args[len(w.args)-len(w.keys)+i] = []byte(last)
		w.resolveLast(i+1, next)
	})
}

// mapField is the value of field in a map reply (a flat array in RESP2).
func mapField(v resp.Value, field string) []byte {
	for i := 0; i+1 < len(v.Elems); i += 2 {
		if string(v.Elems[i].Str) == field {
			return v.Elems[i+1].Str
		}
	}
	return nil
}

// lookStreams looks whether the streams have entries for the client: on
// the first look, XREADGROUP runs at once (Redis serves a group read that
// has entries without blocking, and answers its errors).
func (w *blockedWait) lookStreams() {
	if w.stream.group != nil && !w.looked {
		w.readStreams()
		return
	}
	if w.stream.group == nil {
		w.n.read(nil, consistency.DCOne, w.keys, w.args, nil, func(reply []byte) {
			v, err := resp.Parse(reply)
			switch {
			case err == nil && v.IsError() && w.looked && strings.HasPrefix(string(v.Str), "WRONGTYPE"):
				w.wait() // no longer a stream: Redis wakes its readers only for a stream
			case err != nil || v.IsError():
				w.finish(reply)
			case v.IsNull || (v.Type == resp.Array && len(v.Elems) == 0):
				w.wait()
			default:
				w.readStreams()
			}
		})
		return
	}
	w.groupHasNews(0)
}

// groupHasNews looks, from the i-th key on, for a stream with entries past
// the group's last delivered, and runs the read at the first.
func (w *blockedWait) groupHasNews(i int) {
	if i == len(w.keys) {
		w.wait()
		return
	}
	key := w.keys[i]
	w.n.read(nil, consistency.DCOne, [][]byte{key}, [][]byte{[]byte("XINFO"), []byte("GROUPS"), key}, nil, func(reply []byte) {
		v, err := resp.Parse(reply)
		if err != nil || v.IsError() {
			if err == nil && (strings.HasPrefix(string(v.Str), "WRONGTYPE") || strings.Contains(string(v.Str), "no such key")) {
				w.finish(resp.AppendError(nil, "UNBLOCKED the stream key no longer exists"))
				return
			}
			w.finish(reply)
			return
		}
		var last []byte
		for _, g := range v.Elems {
			if bytes.Equal(mapField(g, "name"), w.stream.group) {
				last = mapField(g, "last-delivered-id")
			}
		}
		if last == nil {
			w.finish(resp.AppendError(nil, "NOGROUP the consumer group this client was blocked on no longer exists"))
			return
		}
		probe := [][]byte{[]byte("XREAD"), []byte("COUNT"), []byte("1"), []byte("STREAMS"), key, last}
		w.n.read(nil, consistency.DCOne, [][]byte{key}, probe, nil, func(reply []byte) {
			v, err := resp.Parse(reply)
			if err != nil || v.IsError() || v.IsNull || len(v.Elems) == 0 {
				w.groupHasNews(i + 1)
				return
			}
			w.readStreams()
		})
	})
}

// readStreams runs the read without BLOCK; nothing read, it waits.
func (w *blockedWait) readStreams() {
	answer := func(reply []byte) {
		v, err := resp.Parse(reply)
		if err == nil && !v.IsError() && (v.IsNull || (v.Type == resp.Array && len(v.Elems) == 0)) {
			w.wait()
			return
		}
		w.finish(reply)
	}
	if w.stream.group == nil {
		w.n.read(w.tr, w.level, w.keys, w.args, nil, answer)
		return
	}
	w.n.decided(w.tr, w.level, lookup(w.args[0]), w.keys, w.args, &keyGate{}, w.h, nil, answer) // its client waits, and sends nothing meanwhile
}
