package node

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/node/repair"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
)

// token is a key's place on the ring: the hash of its hash_tag part, or of
// the whole key.
func (n *Node) token(key []byte) uint32 { return ring.Hash(ring.Tag(key, n.cfg.HashTag)) }

// replicas returns, for a key, its owner in each rack of the local
// datacenter, the coordinator's own rack first, in the current view.
func (n *Node) replicas(key []byte) []*member { return n.view().replicas(n.token(key)) }

// sameReplicas reports whether all keys have the same owner in every local
// rack, so that one command can carry them all.
func (n *Node) sameReplicas(keys [][]byte) bool {
	v := n.view()
	first := v.replicas(n.token(keys[0]))
	for _, k := range keys[1:] {
		for i, m := range v.replicas(n.token(k)) {
			if m != first[i] {
				return false
			}
		}
	}
	return true
}

// replyFunc receives the reply to send to the client.
type replyFunc func(reply []byte)

// read runs a read at level: DC_ONE asks the local rack's replica and fails
// over to the other racks in order when it is unreachable; the quorum levels
// ask a quorum of local replicas for the value and its version (readQuorum).
func (n *Node) read(tr *trace, level consistency.Level, keys [][]byte, args [][]byte, b *batch, done replyFunc) {
	reps := n.replicas(keys[0])
	if !reps[0].self {
		n.stats.forwarded.Add(1)
	}
	if level == consistency.DCOne {
		n.readOne(tr, reps, 0, args, b, nil, done)
		return
	}
	q := &readQuorum{keys: keys, args: args}
	q.run(n, tr, level, reps, b, done)
}

// run starts the quorum read q of reps.
func (q *readQuorum) run(n *Node, tr *trace, level consistency.Level, reps []*member, b *batch, done replyFunc) {
	q.begin(n, tr, level, q.args[0], reps, done)
	q.answers = inlineOr(q.answersBuf[:], len(reps))
	q.order = askOrder(q.orderBuf[:0], reps)
	q.mu.Lock()
	ask := q.toAskLocked()
	q.mu.Unlock()
	q.ask(ask, b)
}

// askOrder appends to order the replicas in the order a quorum read asks
// them: this node first, then the peers it is connected to, then the rest,
// racks by name.
func askOrder(order []int, reps []*member) []int {
	for _, pass := range []func(*member) bool{
		func(m *member) bool { return m.self },
		func(m *member) bool { return !m.self && !m.isDown() && m.link.Connected() },
		func(m *member) bool { return !m.self && !m.isDown() && !m.link.Connected() },
		func(m *member) bool { return m.isDown() },
	} {
		for i, m := range reps {
			if pass(m) {
				order = append(order, i)
			}
		}
	}
	return order
}

// readOne tries replica i and, if it cannot be reached, the next one.
func (n *Node) readOne(tr *trace, reps []*member, i int, args [][]byte, b *batch, reasons []string, done replyFunc) {
	m := reps[i]
	next := func(raw []byte, err error) {
		if err == nil {
			n.useReplica(tr, m)
			done(raw)
			return
		}
		n.countFailure(err)
		reasons := append(reasons, replicaName(m)+": "+err.Error()) // a copy: the closure changes no variable it shares, so none moves to the heap
		if i+1 < len(reps) {
			n.stats.readFailovers.Add(1)
			n.readOne(tr, reps, i+1, args, nil, reasons, done) // from a link goroutine: no batch
			return
		}
		done(resp.AppendError(nil, fmt.Sprintf("ERR troop: DC_ONE read failed: no replica answered (%s)", strings.Join(reasons, "; "))))
	}
	if m.self {
		n.toStoreCommand(b, tr, n.storeFor(args[1]), args, next)
		return
	}
	if m.isDown() {
		next(nil, errMarkedDown(m))
		return
	}
	n.toPeer(b, tr, m, appendPeerRequest(nil, "LOCAL", nil, args), fromPeer(next))
}

// write runs a write at level on every local replica, and forwards it to
// each remote datacenter, which applies it asynchronously. At the quorum
// levels a whole-value write first asks a quorum for the key's version
// (versionQuery), so that it is stamped newer than every write
// acknowledged before it began, and holds its key in the connection's gate
// meanwhile; any other write takes the next version of this node's clock.
func (n *Node) write(tr *trace, level consistency.Level, cmd *command, keys [][]byte, args [][]byte, g *keyGate, h *hold, b *batch, done replyFunc) {
	v := n.view()
	reps := v.replicas(n.token(keys[0]))
	if !reps[0].self {
		n.stats.forwarded.Add(1)
	}
	if planted && n.localWritesOnly {
		// The planted bug: this rack's replica alone, acknowledged at any
		// level, and nothing for the other racks and datacenters.
		reps = reps[:1]
	}
	if !n.cfg.Versions { // troop_versions: false writes unversioned
		n.writeAt(tr, v, level, cmd, keys, args, reps, []byte{}, nil, h, b, done)
		return
	}
	if n.consensusWrite(level, cmd, keys, args) {
		n.consensus(tr, level, cmd, keys, args, g, h, done)
		return
	}
	if len(keys) > 1 && n.transactCommand(tr, level, keys, args, g, h, done) {
		return
	}
	if level == consistency.DCOne || !cmd.isLWW(args) || planted && n.noVersionQuery {
		n.writeAt(tr, v, level, cmd, keys, args, reps, n.clock.Next(), nil, h, b, done)
		return
	}
	h.add(1) // the query: the write may go out after the handling is done
	ungate := g.hold(keys[0])
	release := func() { ungate(); h.done() }
	deadline := time.Now().Add(n.cfg.Timeout)
	if s := n.stamper(reps); s >= 0 {
		n.stampedWrite(tr, v, level, cmd, keys, args, reps, s, deadline, release, h, b, done)
		return
	}
	n.queryThenWrite(tr, v, level, cmd, keys, args, reps, deadline, release, h, b, done)
}

// queryThenWrite is a quorum write of a whole value the long way: the
// version query, then the write above the newest version it found, if
// that came before deadline.
func (n *Node) queryThenWrite(tr *trace, v *view, level consistency.Level, cmd *command, keys, args [][]byte, reps []*member, deadline time.Time, release func(), h *hold, b *batch, done replyFunc) {
	q := &versionQuery{key: keys[0], release: release, deadline: deadline}
	q.begin(n, tr, level, args[0], reps, done)
	q.order = askOrder(q.orderBuf[:0], reps)
	q.write = func(newest []byte, b *batch) {
		n.clock.Observe(newest)
		n.writeAt(tr, v, level, cmd, keys, args, reps, n.clock.Next(), nil, h, b, done)
	}
	q.mu.Lock()
	ask := q.next(consistency.Quorum(len(reps)), 0)
	q.mu.Unlock()
	q.ask(ask, b)
}

// writeAt runs a write with version on the replicas reps but the one that
// stamped it, if any, whose reply counts as that replica's answer.
// Each replica's answer, and each remote datacenter's, ends a part of the
// hold h.
func (n *Node) writeAt(tr *trace, v *view, level consistency.Level, cmd *command, keys [][]byte, args [][]byte, reps []*member, version []byte, st *stamped, h *hold, b *batch, done replyFunc) {
	w := n.newWriteQuorum(tr, level, args[0], reps, done)
	if len(keys) == 1 && cmd.isLWW(args) && n.byConsensusAt(level) {
		w.locked = lockedWrite{cmd: cmd, key: keys[0], args: args, view: v, hold: h}
	}
	h.add(len(reps))
	var remote []byte
	for i, m := range reps {
		i := i
		answer := func(raw []byte, err error) { w.answer(i, raw, err); h.done() }
		if st != nil && st.replica == i {
			if st.err != nil { // it may not hold the write: a hint brings it
				n.hint(m, appendPeerRequest(nil, "WRITE", version, args))
			}
			answer(st.reply, st.err)
			continue
		}
		if m.self {
			n.applyWrite(b, tr, v, version, cmd, keys, args, answer)
			continue
		}
		if remote == nil {
			remote = appendPeerRequest(nil, "WRITE", version, args)
		}
		n.sendWrite(b, tr, m, remote, answer)
	}
	if !(planted && n.localWritesOnly) {
		n.forwardToRemoteDCs(tr, v, keys[0], version, args, h, b)
	}
}

// versionQuery is the first phase of a quorum write of a whole value, as in
// the ABD register algorithm: it asks a quorum of replicas which version of
// the key they hold. Every write acknowledged before this one began is held
// by a quorum, and any two quorums share a replica, so a version above all
// the answers is newer than every such write: the replicas that hold a
// newer one hold a write concurrent with this one, and may keep it. Without
// this phase a coordinator's clock alone would stamp the write, and two
// coordinators writing within one millisecond could order a later write
// before an earlier one, which the replicas would then keep.
//
// A write is stamped within the node's timeout of its start, or not at
// all. A query still undecided then (its first replica partitioned away,
// say) is not applied: stamped later, it would outrank writes acknowledged
// meanwhile, among them the retry of a client that gave up on it.
type versionQuery struct {
	replicated
	asker
	key      []byte
	newest   []byte // the newest version answered so far
	deadline time.Time
	write    func(newest []byte, b *batch)
	release  func() // of the key in the connection's gate and of the query's part of the hold, once the write is queued or failed
}

func (q *versionQuery) ask(replicas []int, b *batch) {
	for _, i := range replicas {
		i := i
		m := q.replicas[i]
		switch {
		case m.self:
			q.n.localVersion(b, q.tr, q.key, func(version []byte, err error, b *batch) { q.answer(i, version, err, b) })
		case m.isDown():
			q.answer(i, nil, errMarkedDown(m), b)
		default:
			q.n.toPeer(b, q.tr, m, appendPeerRequest(nil, "VERSION", nil, [][]byte{q.key}), fromPeer(func(raw []byte, err error) {
				version, err := parseVersionReply(raw, err)
				q.answer(i, version, err, nil)
			}))
		}
	}
}

// answer takes replica i's version; b is the connection's batch when the
// answer came at once (from the version cache), else nil.
func (q *versionQuery) answer(i int, version []byte, err error, b *batch) {
	q.mu.Lock()
	q.inflight--
	if err == nil {
		q.tally.OK++
		if bytes.Compare(version, q.newest) > 0 {
			q.newest = version
		}
		q.n.useReplica(q.tr, q.replicas[i])
	} else {
		q.tally.Unreachable++
		q.reasons[i] = err.Error()
		q.n.countFailure(err)
	}
	if q.decided {
		q.mu.Unlock()
		return
	}
	if time.Now().After(q.deadline) {
		q.decided = true
		q.n.stats.quorumFailures.Add(1)
		out := resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) failed and was not applied: its version query took more than the node's timeout (%v): %d of %d replicas answered (%s)",
			q.level, q.name, q.n.cfg.Timeout, q.tally.OK, q.tally.Replicas, explain(q.replicas, q.reasons)))
		q.mu.Unlock()
		q.release()
		q.done(out)
		return
	}
	switch consistency.DecideRead(consistency.DCQuorum, q.tally) {
	case consistency.Succeed:
		q.decided = true
		q.mu.Unlock()
		q.write(q.newest, b)
		q.release()
	case consistency.Fail:
		q.decided = true
		q.n.stats.quorumFailures.Add(1)
		out := resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) failed and was not applied: %d of %d replicas answered its version query, %d needed (%s)",
			q.level, q.name, q.tally.OK, q.tally.Replicas, consistency.Quorum(q.tally.Replicas), explain(q.replicas, q.reasons)))
		q.mu.Unlock()
		q.release()
		q.done(out)
	default:
		more := q.next(consistency.Quorum(q.tally.Replicas), q.tally.OK)
		q.mu.Unlock()
		q.ask(more, nil) // from a link goroutine: no batch
	}
}

// asker hands out the replicas a quorum request asks, in order, as it
// needs them: a healthy cluster asks Q replicas, not all of them.
type asker struct {
	order    []int // replicas in the order to ask them
	orderBuf [inlineReplicas]int
	asked    int // how many of order have been asked
	inflight int
}

// next returns the replicas to ask so that the answers in hand (have) and
// those in flight reach need, and counts them as asked.
func (a *asker) next(need, have int) []int {
	var out []int
	for a.inflight+have < need && a.asked < len(a.order) {
		out = append(out, a.order[a.asked])
		a.asked++
		a.inflight++
	}
	return out
}

// forwardToRemoteDCs sends a write to the key's owner in one rack of each
// remote datacenter, which applies it and fans it out in its datacenter.
func (n *Node) forwardToRemoteDCs(tr *trace, v *view, key, version []byte, args [][]byte, h *hold, b *batch) {
	if len(v.remoteDCs) == 0 {
		return
	}
	token := n.token(key)
	req := appendPeerRequest(nil, "FWD", version, args)
	h.add(len(v.remoteDCs))
	for _, dc := range v.remoteDCs {
		n.sendWrite(b, tr, v.members[dc.ring.Owner(token)], req, func(raw []byte, err error) { n.asyncDone(raw, err); h.done() })
	}
}

// sendWrite sends a write request (WRITE or FWD) to peer m. A peer marked
// down is not sent anything: the write fails for it at once. Either way, a
// write m did not get becomes a hint, delivered when m is up again.
func (n *Node) sendWrite(b *batch, tr *trace, m *member, req []byte, done func([]byte, error)) {
	if m.isDown() {
		n.hint(m, req)
		done(nil, errMarkedDown(m))
		return
	}
	n.toPeer(b, tr, m, req, fromPeer(func(raw []byte, err error) {
		if err != nil {
			n.hint(m, req)
		}
		done(raw, err)
	}))
}

// asyncDone accounts for the outcome of a write nobody waits for.
func (n *Node) asyncDone(raw []byte, err error) {
	if err != nil || (len(raw) > 0 && raw[0] == '-') {
		n.stats.asyncFailures.Add(1)
	}
	if err != nil {
		n.countFailure(err)
	}
}

func (n *Node) countFailure(err error) {
	if link.IsTimeout(err) {
		n.stats.timeouts.Add(1)
	}
}

// storeFor picks the datastore connection for a key; a key always uses the
// same one, so one client's writes to it stay in order, and keys of one
// hash tag share it, so a transaction on them goes on one connection.
func (n *Node) storeFor(key []byte) *link.Link {
	if len(n.store) == 1 {
		return n.store[0]
	}
	return n.store[n.token(key)%uint32(len(n.store))]
}

// appendPeerRequest encodes a request to a peer: OP [version] command...
func appendPeerRequest(dst []byte, op string, version []byte, args [][]byte) []byte {
	dst = slices.Grow(dst, resp.CommandSize(args)+resp.BulkSize(len(op))+resp.BulkSize(len(version)))
	n := 1 + len(args)
	if version != nil {
		n++
	}
	dst = resp.AppendArrayHeader(dst, n)
	dst = resp.AppendBulkString(dst, op)
	if version != nil {
		dst = resp.AppendBulk(dst, version)
	}
	for _, a := range args {
		dst = resp.AppendBulk(dst, a)
	}
	return dst
}

func replicaName(m *member) string { return m.dc + "/" + m.rack }

// replicated is what reads and writes sent to several replicas share: who was
// asked, what they answered so far, and whether the client has its reply.
type replicated struct {
	n        *Node
	tr       *trace // nil unless the request is traced
	level    consistency.Level
	name     []byte // the command, for error messages
	replicas []*member
	done     replyFunc

	mu         sync.Mutex
	tally      consistency.Tally
	reasons    []string // by replica: why it did not answer, or its error
	reasonsBuf [inlineReplicas]string
	decided    bool
}

// inlineReplicas is how many replicas a request's quorum state keeps in
// arrays of its own rather than allocating: three racks, the usual shape.
const inlineReplicas = 3

// begin readies r where it lies: its slices may point into r itself.
func (r *replicated) begin(n *Node, tr *trace, level consistency.Level, name []byte, reps []*member, done replyFunc) {
	r.n, r.tr, r.level, r.name, r.replicas, r.done = n, tr, level, name, reps, done
	r.tally = consistency.Tally{Replicas: len(reps)}
	r.reasons = inlineOr(r.reasonsBuf[:], len(reps))
}

// inlineOr returns buf's first n elements, or a new slice when buf is too short.
func inlineOr[T any](buf []T, n int) []T {
	if n <= len(buf) {
		return buf[:n:n]
	}
	return make([]T, n)
}

// writeQuorum gathers the replicas' answers to one write.
type writeQuorum struct {
	replicated
	replies    [][]byte // by replica
	repliesBuf [inlineReplicas][]byte
	locked     lockedWrite // a whole-value write that replicas may refuse as locked (transact.go)
}

func (n *Node) newWriteQuorum(tr *trace, level consistency.Level, name []byte, reps []*member, done replyFunc) *writeQuorum {
	w := &writeQuorum{}
	w.begin(n, tr, level, name, reps, done)
	w.replies = inlineOr(w.repliesBuf[:], len(reps))
	return w
}

func (w *writeQuorum) answer(i int, raw []byte, err error) {
	w.mu.Lock()
	outcome := consistency.OK
	switch {
	case err != nil:
		outcome = consistency.Unreachable
		w.tally.Unreachable++
		w.reasons[i] = err.Error()
		w.n.countFailure(err)
	case len(raw) > 0 && raw[0] == '-':
		outcome = consistency.Failed
		w.tally.Failed++
		w.reasons[i] = strings.TrimSpace(string(raw[1:]))
	default:
		w.tally.OK++
	}
	w.replies[i] = raw
	if i == 0 {
		w.tally.Local = outcome
	}
	if w.decided {
		w.mu.Unlock()
		if outcome != consistency.OK {
			w.n.stats.asyncFailures.Add(1)
		}
		return
	}
	var reply []byte
	switch consistency.DecideWrite(w.level, w.tally) {
	case consistency.Succeed:
		reply = w.replies[0]
		if w.tally.Local != consistency.OK {
			for j, r := range w.replies {
				if r != nil && r[0] != '-' {
					reply = w.replies[j]
					break
				}
			}
		}
		if w.tr != nil {
			for j, r := range w.replies {
				if r != nil && r[0] != '-' {
					w.n.useReplica(w.tr, w.replicas[j])
				}
			}
		}
	case consistency.Fail:
		if w.locked.cmd != nil && w.refusedAsLocked() {
			w.decided = true
			w.mu.Unlock()
			w.locked.byConsensus(w)
			return
		}
		reply = w.failure()
		w.n.stats.quorumFailures.Add(1)
	default:
		w.mu.Unlock()
		return
	}
	w.decided = true
	w.mu.Unlock()
	w.done(reply)
}

// failure explains a failed write. When every replica that answered gave the
// same error (WRONGTYPE, say), that error is the answer, as Redis would give.
func (w *writeQuorum) failure() []byte {
	if w.tally.Local == consistency.Failed && w.level == consistency.DCOne {
		return w.replies[0]
	}
	if w.tally.OK == 0 && w.tally.Failed > 0 {
		var same []byte
		for _, r := range w.replies {
			if r == nil || r[0] != '-' {
				continue
			}
			if same != nil && !bytes.Equal(same, r) {
				same = nil
				break
			}
			same = r
		}
		if same != nil && w.tally.Unreachable == 0 {
			return same
		}
	}
	q := consistency.Quorum(w.tally.Replicas)
	outcome := "outcome unknown"
	if w.tally.OK == 0 && w.tally.Unreachable == 0 {
		outcome = "not applied" // every replica refused it
	}
	msg := fmt.Sprintf("ERR troop: %s write (%s) failed, %s: %d of %d replicas acknowledged, %s",
		w.level, w.name, outcome, w.tally.OK, w.tally.Replicas, w.needs(q))
	if outcome != "not applied" {
		msg += "; it may have been applied, and hinted handoff or repair may still apply it"
	}
	return resp.AppendError(nil, msg+" ("+explain(w.replicas, w.reasons)+")")
}

func (w *writeQuorum) needs(q int) string {
	switch w.level {
	case consistency.DCOne:
		return "1 needed"
	case consistency.DCSafeQuorum:
		return fmt.Sprintf("%d needed and no errors", q)
	}
	return fmt.Sprintf("%d needed", q)
}

func explain(reps []*member, reasons []string) string {
	var parts []string
	for i, r := range reasons {
		if r != "" {
			parts = append(parts, replicaName(reps[i])+": "+r)
		}
	}
	if len(parts) == 0 {
		return "no answers"
	}
	return strings.Join(parts, "; ")
}

// readQuorum gathers the replicas' answers to one quorum read. It asks only
// as many replicas as it still needs (Q at first), and one more for each that
// fails to answer or, at DC_SAFE_QUORUM, disagrees: a healthy cluster reads Q
// replicas, not all of them.
type readQuorum struct {
	replicated
	keys, args [][]byte
	asker
	answers    []*consistency.Reply // by replica, nil until answered
	answersBuf [inlineReplicas]*consistency.Reply
	extra      int // replicas asked beyond the quorum, to settle a conflict
	tries      int // reads of the request before this one (writeBack)
}

// maxReadTries bounds how many times a quorum read starts over because the
// replica its answer was to be written back from had moved on.
const maxReadTries = 3

// toAskLocked returns the replicas to ask now, and counts them as asked.
func (q *readQuorum) toAskLocked() []int {
	if q.decided {
		return nil
	}
	have := q.tally.OK
	if q.level == consistency.DCSafeQuorum {
		have = q.tally.Agreeing
	}
	return q.next(consistency.Quorum(q.tally.Replicas)+q.extra, have)
}

func (q *readQuorum) ask(replicas []int, b *batch) {
	var remote []byte
	for _, i := range replicas {
		i := i
		m := q.replicas[i]
		if m.self {
			q.n.readLocal(q.tr, q.keys, q.args, b, func(version, reply []byte, err error) { q.answer(i, version, reply, err) })
			continue
		}
		if m.isDown() {
			q.answer(i, nil, nil, errMarkedDown(m))
			continue
		}
		if remote == nil {
			remote = appendPeerRequest(nil, "READ", nil, q.args)
		}
		q.n.toPeer(b, q.tr, m, remote, fromPeer(func(raw []byte, err error) {
			if err != nil {
				q.answer(i, nil, nil, err)
				return
			}
			version, reply, err := splitVersioned(raw)
			q.answer(i, version, reply, err)
		}))
	}
}

func (q *readQuorum) answer(i int, version, reply []byte, err error) {
	q.mu.Lock()
	q.inflight--
	if isLocked(err) {
		// A transaction on several keys holds the key: its value here may
		// be older than the transaction, which may be decided already. A
		// read by consensus waits for it or ends it.
		first := !q.decided
		q.decided = true
		q.mu.Unlock()
		if first {
			q.readLocked()
		}
		return
	}
	if err == nil {
		q.answers[i] = &consistency.Reply{Version: version, Raw: reply}
		q.tally.OK++
		q.n.clock.Observe(version)
	} else {
		q.tally.Unreachable++
		q.reasons[i] = err.Error()
		q.n.countFailure(err)
	}
	if q.decided {
		q.mu.Unlock()
		return
	}
	var answered []consistency.Reply
	var idx []int // the replica of each answer
	for i, a := range q.answers {
		if a != nil {
			answered = append(answered, *a)
			idx = append(idx, i)
		}
	}
	size, agreeing := consistency.LargestAgreement(answered)
	q.tally.Agreeing = size
	decision := consistency.DecideRead(q.level, q.tally)
	if err != nil && planted && q.n.noReadFailover {
		decision = consistency.Fail // the planted bug: no other replica is asked
	}
	var out []byte // the client's reply
	switch decision {
	case consistency.Succeed:
		if q.level == consistency.DCSafeQuorum {
			out = answered[agreeing].Raw
			q.useAgreeing(answered, idx, agreeing)
			break
		}
		source, _, conflict := consistency.Resolve(q.comparable(answered))
		if conflict && q.asked < len(q.order) {
			// Answers of the newest version differ: a replica was changed
			// behind troop's back. Ask one more, and let the majority say.
			q.extra++
			more := q.toAskLocked()
			q.mu.Unlock()
			q.ask(more, nil)
			return
		}
		out = answered[source].Raw
		q.useAgreeing(answered, idx, -1)
		if targets, need := q.writeBackTargets(answered, idx, source); need > 0 {
			q.decided = true
			q.mu.Unlock()
			q.writeBack(answered[source].Version, q.replicas[idx[source]], targets, need, out)
			return
		}
	case consistency.Fail:
		q.n.stats.quorumFailures.Add(1)
		need := consistency.Quorum(q.tally.Replicas)
		what := fmt.Sprintf("%d of %d replicas answered, %d needed", q.tally.OK, q.tally.Replicas, need)
		if q.level == consistency.DCSafeQuorum && q.tally.OK >= need {
			what = fmt.Sprintf("replicas disagree: at most %d of %d agree, %d needed", size, q.tally.Replicas, need)
		}
		out = resp.AppendError(nil, fmt.Sprintf("ERR troop: %s read (%s) failed: %s (%s)", q.level, q.name, what, explain(q.replicas, q.reasons)))
	default:
		more := q.toAskLocked()
		q.mu.Unlock()
		q.ask(more, nil) // from a link goroutine: no batch
		return
	}
	q.decided = true
	q.mu.Unlock()
	q.done(out)
	if len(q.keys) == 1 {
		q.n.repair.ReadRepair(q.keys[0], q.replicas, q.comparable(answered), idx)
	}
}

// readLocked reads by consensus, once a replica refused the read of a
// locked key: as a change of its one key that leaves it as it is, or as a
// transaction of its keys that leaves them as they are.
func (q *readQuorum) readLocked() {
	if len(q.keys) == 1 {
		q.n.consensusRead(q.tr, q.level, q.keys[0], q.args, q.replicas, q.done)
		return
	}
	if !q.n.transactCommand(q.tr, q.level, q.keys, q.args, &keyGate{}, nil, q.done) {
		q.n.stats.quorumFailures.Add(1)
		q.done(resp.AppendError(nil, fmt.Sprintf("ERR troop: %s read (%s) failed: a key of it is locked by a transaction on several keys under way, and troop cannot read these keys by consensus", q.level, q.name)))
	}
}

// writeBackTargets says whether a DC_QUORUM read of one key must write
// its answer, answered[source], back before giving it (ABD's read write
// phase): when fewer than a quorum of the replicas hold it, a later read
// could ask only replicas that do not, and return an older value than this
// one did. It returns the replicas that do not hold it, and how many of
// them must; need is 0 when none must. A value troop never versioned has
// nothing to order it by, and is not written back.
func (q *readQuorum) writeBackTargets(answered []consistency.Reply, idx []int, source int) (targets []*member, need int) {
	if q.level != consistency.DCQuorum || len(q.keys) != 1 || len(answered[source].Version) == 0 || planted && q.n.noReadWriteBack {
		return nil, 0
	}
	comparable := q.comparable(answered)
	need = consistency.Quorum(q.tally.Replicas) - consistency.Holders(comparable, source)
	if need <= 0 {
		return nil, 0
	}
	holds := make([]bool, len(q.replicas))
	for k := range answered {
		holds[idx[k]] = comparable[k].Same(comparable[source])
	}
	for i, m := range q.replicas {
		if !holds[i] {
			targets = append(targets, m)
		}
	}
	return targets, need
}

// writeBack copies the version a quorum read is about to answer, out, from
// the replica src that holds it to the targets, and answers once need of
// them hold it; if they cannot, the read fails.
func (q *readQuorum) writeBack(version []byte, src *member, targets []*member, need int, out []byte) {
	q.n.stats.readWriteBacks.Add(1)
	q.n.repair.WriteBack(q.keys[0], src, version, targets, need, func(err error) {
		if promised(err) {
			// A change by consensus was promised above the newest version,
			// and was not decided (or not yet everywhere): the value may
			// not be written back below its promise, since that change may
			// still be decided, built on another value. A read by
			// consensus finishes it or supersedes it, and answers.
			q.n.consensusRead(q.tr, q.level, q.keys[0], q.args, q.replicas, q.done)
			return
		}
		if errors.Is(err, repair.ErrMovedOn) && q.tries+1 < maxReadTries {
			// The value read is gone from src, and a newer one written
			// back in its place would not make it a quorum's: read anew.
			again := &readQuorum{keys: q.keys, args: q.args, tries: q.tries + 1}
			again.run(q.n, q.tr, q.level, q.n.replicas(q.keys[0]), nil, q.done)
			return
		}
		if err != nil {
			q.n.stats.quorumFailures.Add(1)
			out = resp.AppendError(nil, fmt.Sprintf("ERR troop: %s read (%s) failed: replicas disagree, and the newest value could not be written back to a quorum before answering (%s)",
				q.level, q.name, err))
		}
		q.done(out)
	})
}

// useAgreeing records in the lineage the replicas whose answers made the
// reply: those that agree with answered[agreeing], or all (agreeing < 0).
func (q *readQuorum) useAgreeing(answered []consistency.Reply, idx []int, agreeing int) {
	if q.tr == nil {
		return
	}
	for k, a := range answered {
		if agreeing < 0 || a.Same(answered[agreeing]) {
			q.n.useReplica(q.tr, q.replicas[idx[k]])
		}
	}
}

// comparable returns the answers as Resolve should compare them. Only a
// GET's reply is the value itself; the replies of other reads may differ
// between replicas that hold the same value (PTTL counts down, SRANDMEMBER
// draws), so for them only the versions count.
func (q *readQuorum) comparable(answered []consistency.Reply) []consistency.Reply {
	if isCommand(q.args[0], "GET") {
		return answered
	}
	out := make([]consistency.Reply, len(answered))
	for i, a := range answered {
		out[i] = consistency.Reply{Version: a.Version}
	}
	return out
}
