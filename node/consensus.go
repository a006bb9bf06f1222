package node

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/node/decide"
	"github.com/troop-lab/troop/node/hlc"
	"github.com/troop-lab/troop/resp"
)

// A write that changes a value in place (INCR, SET NX, RPUSH, APPEND ...)
// at a quorum level is decided by consensus per key (node/decide, CASPaxos)
// so that its reply and effect are as if one redis-server ran every
// command on the key one at a time. Each replica's redis-server is an
// acceptor: the value under its own key, the accepted ballot in the
// version key, the promise in PromisePrefix+key, changed together by
// prepareScript and acceptScript. A ballot is written as a version (its
// counter where a version has its clock, its proposer where a version has
// its node), so versions and ballots are one order: hints, read repair,
// anti-entropy, the version cache and quorum reads, which keep the highest
// version, keep the highest accepted ballot. The coordinator runs the
// command on the value the prepares found in a scratch key of its own
// redis-server (changeScript) and has the replicas accept the result, as
// a DUMP, so every replica holds the same bytes, list order included.
//
// A transaction, a script or a stream write whose keys are all one key is
// one change of it too (blockChange): its commands run on the value in the
// scratch key as one MULTI block, which runs what a script cannot (EVAL,
// FCALL, blocking pops), a transaction's WATCH tokens first checked
// against the token of the value the change is given, at the ballot it
// was accepted at (decide.Proposer.Base).
//
// Whole-value writes (SET, DEL ...) stay version writes, fenced by the
// promise: docs/store.md gives the argument.

// PromisePrefix names the key that holds a key's promise: the highest
// ballot its replica promised, below which it accepts nothing, whole-value
// writes included.
const PromisePrefix = "__troop:p:"

// scratchKey is where the coordinator's redis-server runs a command on a
// value, inside one script, which leaves it empty.
const scratchKey = "__troop:scratch"

// promisedError is what a replica answers to a write below the key's
// promise.
const promisedError = promisedCode + " troop: a change of this key at a newer ballot was promised on this replica; this write was not applied here"

// outrun ends the error of a change that left the value as it was and
// met another coordinator's newer value at every try.
const outrun = "other coordinators changed the key at every try"

// promisedCode starts promisedError, which is how repair tells it
// (promised).
const promisedCode = "PROMISED"

// luaPrelude starts the scripts that check a promise.
var luaPrelude = "local PROMISE = '" + PromisePrefix + "'\nlocal PROMISED = '" + promisedError + "'\n" +
	"local LOCK = '" + LockPrefix + "'\nlocal LOCKED = '" + lockedError + "'\n"

// prepareScript promises ARGV[1] unless the key's promise or version is at
// or above it, and answers {1 or 0, the promise after, the version, the
// DUMP of the value ("" for none), its PEXPIRETIME}, and the key's lock
// (LockPrefix+key) after them when it has one. KEYS are the key, its
// version key and its promise key; ARGV[2] is the tombstone grace (ms),
// the life of a promise of a key that holds nothing. The lock comes in
// the same call: a command of one key pays nothing for it.
var prepareScript = `
local b = ARGV[1]
local p = redis.call('GET', KEYS[3]) or ''
local v = redis.call('GET', KEYS[2]) or ''
local top = p
if v > top then top = v end
if b <= top then return {0, top, v, '', -2} end
local lock = redis.call('GET', '` + LockPrefix + `' .. KEYS[1]) or ''
local vt = redis.call('PTTL', KEYS[2])
if vt == -2 then vt = tonumber(ARGV[2]) end
if vt > 0 and lock == '' then redis.call('SET', KEYS[3], b, 'PX', vt) else redis.call('SET', KEYS[3], b) end
local out = {1, b, v, redis.call('DUMP', KEYS[1]) or '', redis.call('PEXPIRETIME', KEYS[1])}
if lock ~= '' then out[6] = lock end
return out
`

// acceptScript accepts ARGV[3] (a DUMP, "" for none) expiring at ARGV[4]
// (Unix ms, as PEXPIRETIME; 0: never) with the lock ARGV[6] ("" for none,
// absent in an older peer's request) at ballot ARGV[1] unless the key's
// promise or version is above it, and promises ARGV[2] (the proposer's
// next ballot) as it does. It answers {1 or 0, the promise after, the
// version after}. KEYS as prepareScript's; ARGV[5] is the tombstone grace
// (ms): the version and promise of a key that holds nothing, or holds a
// value with an expiry, outlive it by it. A locked key's version, promise
// and lock never expire: the lock must outlive the value it fences.
var acceptScript = `
local b = ARGV[1]
local p = redis.call('GET', KEYS[3]) or ''
local v = redis.call('GET', KEYS[2]) or ''
if b < p or b < v then
  local top = p
  if v > top then top = v end
  return {0, top, v}
end
local np = b
if ARGV[2] > np then np = ARGV[2] end
local grace = tonumber(ARGV[5])
local lock = ARGV[6] or ''
local lk = '` + LockPrefix + `' .. KEYS[1]
if ARGV[3] ~= '' then redis.call('RESTORE', KEYS[1], ARGV[4], ARGV[3], 'REPLACE', 'ABSTTL') end
local ttl = redis.call('PTTL', KEYS[1])
if ARGV[3] == '' or ttl == -2 then
  redis.call('DEL', KEYS[1])
  ttl = grace
elseif ttl > 0 then
  ttl = ttl + grace
end
if lock ~= '' then
  redis.call('SET', lk, lock)
  ttl = -1
else
  redis.call('DEL', lk)
end
if ttl > 0 and ttl <= 9007199254740991 then
  redis.call('SET', KEYS[2], b, 'PX', ttl)
  redis.call('SET', KEYS[3], np, 'PX', ttl)
else
  redis.call('SET', KEYS[2], b)
  redis.call('SET', KEYS[3], np)
end
return {1, np, b}
`

// changeScript runs a command (ARGV[3:], its key the scratch key KEYS[1])
// on a value (ARGV[1], a DUMP or "" for none, expiring at ARGV[2], Unix ms,
// 0 for never) and answers {the command's reply, the DUMP after ("" for
// none), the PEXPIRETIME after}. It leaves the scratch key empty. Expiries
// travel as absolute times: a relative one far off (PEXPIREAT of a
// distant time) would overflow when RESTORE adds the time to it.
const changeScript = `
redis.call('DEL', KEYS[1])
if ARGV[1] ~= '' then redis.call('RESTORE', KEYS[1], ARGV[2], ARGV[1], 'ABSTTL') end
local r = redis.pcall(unpack(ARGV, 3))
local d = redis.call('DUMP', KEYS[1]) or ''
local t = redis.call('PEXPIRETIME', KEYS[1])
redis.call('DEL', KEYS[1])
return {r, d, t}
`

var (
	prepareSHA = scriptSHA(prepareScript)
	acceptSHA  = scriptSHA(acceptScript)
	changeSHA  = scriptSHA(changeScript)
)

func appendPromiseKey(dst, key []byte) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(PromisePrefix)+len(key)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, PromisePrefix...)
	dst = append(dst, key...)
	return append(dst, '\r', '\n')
}

// consensusWrite reports whether a write at level goes through consensus:
// a versioned write of one key (its first argument) that changes its
// value in place, a pop included, at a quorum level.
func (n *Node) consensusWrite(level consistency.Level, cmd *command, keys, args [][]byte) bool {
	return n.byConsensusAt(level) && len(keys) == 1 && cmd.keys == nil &&
		(cmd.kind == kindWrite && !cmd.isLWW(args) || cmd.kind == kindDrawn)
}

// byConsensusAt reports whether changes of one key at level are decided by
// consensus: at a quorum level, with versions (ballots are versions), and
// not in a build with consensus planted away.
func (n *Node) byConsensusAt(level consistency.Level) bool {
	return level != consistency.DCOne && n.cfg.Versions && !(planted && n.noConsensus)
}

// ballotVersion writes a ballot as a version.
func ballotVersion(b decide.Ballot) []byte { return hlc.Encode(b.Counter, uint16(b.Proposer)) }

// versionBallot reads a version as a ballot; none ("") is the zero ballot.
func versionBallot(v []byte) (decide.Ballot, bool) {
	if len(v) == 0 {
		return decide.Ballot{}, true
	}
	raw, ok := hlc.Raw(v)
	if !ok {
		return decide.Ballot{}, false
	}
	return decide.Ballot{Counter: binary.BigEndian.Uint64(raw[:8]), Proposer: uint64(binary.BigEndian.Uint16(raw[8:]))}, true
}

// proposerID is the proposer of this node's ballots: its clock's node id
// with the top bit flipped, so that no ballot of this node equals a
// version its clock issues.
func (n *Node) proposerID() uint64 { return uint64(n.clock.Node() ^ 0x8000) }

// keyProposers holds this node's proposer of each key it decides, so a
// key's commands through this node take one round trip each. A key's
// changes run one at a time (decide.Proposer runs one change at a time).
type keyProposers struct {
	mu sync.Mutex
	m  map[string]*keyProposer
}

type keyProposer struct {
	turn  chan struct{} // holds one token: the change in progress has it
	users int           // changes waiting or running, under keyProposers.mu
	p     *decide.Proposer
	reps  []*member // the replicas p was made for
}

// maxIdleProposers bounds the proposers kept for keys nobody changes now;
// a key whose proposer was dropped takes two round trips once.
const maxIdleProposers = 10000

func (ps *keyProposers) acquire(key string) *keyProposer {
	ps.mu.Lock()
	if ps.m == nil {
		ps.m = map[string]*keyProposer{}
	}
	kp := ps.m[key]
	if kp == nil {
		if len(ps.m) >= maxIdleProposers {
			for k, o := range ps.m {
				if o.users == 0 {
					delete(ps.m, k)
				}
			}
		}
		kp = &keyProposer{turn: make(chan struct{}, 1)}
		ps.m[key] = kp
	}
	kp.users++
	ps.mu.Unlock()
	kp.turn <- struct{}{}
	return kp
}

func (ps *keyProposers) release(kp *keyProposer) {
	<-kp.turn
	ps.mu.Lock()
	kp.users--
	ps.mu.Unlock()
}

// maxConsensusTries bounds the rounds of one change, and consensusBackoff
// the random wait before each retry, which breaks most duels between
// coordinators.
const (
	maxConsensusTries = 6
	consensusBackoff  = 20 * time.Millisecond
)

// consensus runs a write of one key through consensus among its local
// replicas (consensusWrite) and answers its reply: byConsensus, with the
// command's change.
func (n *Node) consensus(tr *trace, level consistency.Level, cmd *command, keys, args [][]byte, g *keyGate, h *hold, done replyFunc) {
	n.byConsensus(tr, level, keys[0], args[0], n.commandChange(tr, cmd, keys[0], args), decideRequest(level, args), g, h, done)
}

// decideRequest makes the peer request DECIDE level args... for the key's
// deciding replica.
func decideRequest(level consistency.Level, args [][]byte) func() []byte {
	return func() []byte { return appendPeerRequest(nil, "DECIDE", []byte(level.String()), args) }
}

// changeFunc is what a change by consensus does to a key's value, cur
// (packed, nil for none), which the replicas that hold it accepted at
// ballot base, and which goes out for acceptance at ballot at: it answers
// the client's reply and the value after, or why this node's redis-server
// could not run it.
type changeFunc func(cur []byte, base, at decide.Ballot) (reply, next []byte, err error)

// byConsensus runs a change of key, named name in its errors, through
// consensus among its local replicas, and answers its reply. It holds the
// key in the connection's gate until it is decided, so a client's next
// command on the key comes after it.
//
// The key's deciding replica (decider: the first rack's replica this node
// does not mark down) proposes, so that coordinators do not duel over a
// key and its changes take one round trip: this node sends it decideReq's
// request (DECIDE, DECIDETX), unless it is that replica, or the request
// could not be sent (an injected fault), when it proposes itself. Safety
// does not depend on this rule: two coordinators that disagree on who is
// down both propose, and consensus orders them.
func (n *Node) byConsensus(tr *trace, level consistency.Level, key, name []byte, change changeFunc, decideReq func() []byte, g *keyGate, h *hold, done replyFunc) {
	v := n.view()
	reps := v.replicas(n.token(key))
	if !reps[0].self {
		n.stats.forwarded.Add(1)
	}
	h.add(1)
	ungate := g.hold(key)
	finish := func(reply []byte) { ungate(); done(reply); h.done() }
	d, _ := n.decider(reps)
	if d.self || d.isDown() {
		n.decideHere(tr, v, level, name, key, change, reps, h, finish)
		return
	}
	n.toPeer(nil, tr, d, decideReq(), fromPeer(func(raw []byte, err error) {
		var injected *fit.InjectedError
		switch {
		case errors.As(err, &injected): // never sent: nothing of it can be applied
			n.decideHere(tr, v, level, name, key, change, reps, h, finish)
		case err != nil:
			n.countFailure(err)
			n.stats.quorumFailures.Add(1)
			finish(resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) failed, outcome unknown: %s, which decides it, did not answer (%v); it may have been applied, once", level, name, replicaName(d), err)))
		default:
			finish(raw)
		}
	}))
}

// serveDecide runs a peer's DECIDE level cmd args...: the command (a write
// of one key, or a script or stream write of one key), as the key's
// deciding replica, whatever this node's own view of who decides.
func (n *Node) serveDecide(tr *trace, args [][]byte, s *slot) {
	level, err := consistency.ParseLevel(string(args[1]))
	c, keys, bad := peerCommand(args[2:])
	var change changeFunc
	if bad == "" && err == nil {
		change = n.decidedChange(tr, level, c, keys, args[2:])
	}
	if bad == "" && change == nil {
		bad = "ERR troop peer protocol: DECIDE carries a quorum level and a write of one key decided by consensus"
	}
	if bad != "" {
		s.complete(resp.AppendError(nil, bad))
		return
	}
	v := n.view()
	n.decideHere(tr, v, level, args[2], keys[0], change, v.replicas(n.token(keys[0])), nil, s.complete)
}

// decidedChange is the change of a command decided by consensus at level:
// a write of one key (consensusWrite) as changeScript runs it, a script or
// a stream write of one key (consensusScript) in a MULTI block; nil for
// any other.
func (n *Node) decidedChange(tr *trace, level consistency.Level, c *command, keys, args [][]byte) changeFunc {
	if n.consensusWrite(level, c, keys, args) {
		return n.commandChange(tr, c, keys[0], args)
	}
	if scratch, ok := n.consensusScript(level, c, keys, args); ok {
		return n.blockChange(keys[0], [][][]byte{scratch}, false, nil)
	}
	if c.name == "WATCH" && len(keys) == 1 && n.consensusWatch(level, keys) {
		return watchChange
	}
	return nil
}

// consensusWatch reports whether a WATCH of keys at level reads their
// tokens by consensus, each key's apart: at a quorum level, with versions.
// Read from the deciding replica alone, the token could be that of a change in flight
// there, which a quorum read after the WATCH does not see yet: the client
// would compute its write from the older value, and EXEC, finding the
// token it watched once the change is decided, would commit over it. Read
// by consensus, the token is of a quorum's value, at the ballot the read
// accepted it at: every quorum read after it sees that value or a newer
// one, and a newer one fails EXEC's check.
func (n *Node) consensusWatch(level consistency.Level, keys [][]byte) bool {
	return n.byConsensusAt(level) && len(keys) >= 1
}

// watchChange is the change of a WATCH read by consensus: the value as it
// is, and, as the reply, its token once accepted at the change's ballot.
func watchChange(cur []byte, _, at decide.Ballot) ([]byte, []byte, error) {
	return resp.AppendBulk(nil, valueToken(cur, at)), cur, nil
}

// decideHere runs the change with this node as the proposer, on a
// goroutine of its own, which may wait for the key's proposer.
func (n *Node) decideHere(tr *trace, v *view, level consistency.Level, name, key []byte, change changeFunc, reps []*member, h *hold, finish replyFunc) {
	h.add(1)
	go func() {
		defer h.done()
		reply, decided := n.decide(tr, level, name, key, change, reps)
		if decided != nil {
			n.forwardDecided(tr, v, key, decided, h)
		}
		finish(reply)
	}()
}

// consensusRead runs a read of one key through consensus among reps, as a
// change that leaves the value as it is: its accept makes the value it
// read that of a quorum, at a ballot above every promise it met.
func (n *Node) consensusRead(tr *trace, level consistency.Level, key []byte, args [][]byte, reps []*member, done replyFunc) {
	c, _, bad := peerCommand(args)
	if bad != "" {
		done(resp.AppendError(nil, bad))
		return
	}
	n.decideHere(tr, n.view(), level, args[0], key, n.commandChange(tr, c, key, args), reps, nil, done)
}

// decidedValue is a change as decided: its ballot and value.
type decidedValue struct {
	ballot []byte
	value  []byte
}

// decide runs a change of key, named name in its errors, through rounds
// of consensus among reps: it answers the client's reply and, when
// decided, the decided value. A change that finds the key locked by a
// transaction on several keys leaves it as it is, and the command then
// runs as a command of one key that waits for that transaction or ends it
// (decideLocked): a command that meets no lock pays nothing for locks.
func (n *Node) decide(tr *trace, level consistency.Level, name, key []byte, run changeFunc, reps []*member) ([]byte, *decidedValue) {
	var reply, lock []byte
	var changeErr error
	o := n.propose(tr, key, reps, func(p *decide.Proposer) decide.Change {
		return func(cur []byte) []byte {
			if _, l := splitSlot(cur); len(l) > 0 {
				lock, changeErr, reply = l, nil, nil
				return cur
			}
			r, next, err := run(cur, p.Base(), p.Ballot())
			lock = nil
			if err != nil {
				changeErr, reply = err, nil
				return cur
			}
			changeErr, reply = nil, r
			return next
		}
	}, func() bool { return changeErr != nil })
	if changeErr != nil {
		// This node's redis-server could not run the command: what went
		// out for acceptance was the value as it was, without it.
		n.stats.quorumFailures.Add(1)
		return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) failed and was not applied: this node's redis-server could not run it (%v)", level, name, changeErr)), nil
	}
	if o.st == decide.Decided && lock != nil {
		return n.decideLocked(tr, level, name, key, run, reps)
	}
	return n.outcomeReply(level, name, len(reps), o, reply)
}

// outcomeReply is the client's reply to a change that ended as o, whose
// reply, decided, is reply.
func (n *Node) outcomeReply(level consistency.Level, name []byte, replicas int, o proposal, reply []byte) ([]byte, *decidedValue) {
	switch o.st {
	case decide.Decided:
		n.stats.consensusWrites.Add(1)
		return reply, o.decided
	case decide.Unknown:
		n.stats.quorumFailures.Add(1)
		if !o.changed {
			return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s command (%s) failed, not applied: %s", level, name, outrun)), nil
		}
		return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) failed, outcome unknown: another coordinator changed the key while this one's try may have been accepted; it may have been applied, once", level, name)), nil
	}
	n.stats.quorumFailures.Add(1)
	outcome := "not applied"
	if o.mayHaveApplied {
		outcome = "outcome unknown; it may have been applied, once"
	}
	return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) failed, %s: no quorum of %d of %d replicas took it within %d tries (%s)",
		level, name, outcome, consistency.Quorum(replicas), replicas, maxConsensusTries, strings.Join(o.reasons, "; "))), nil
}

// proposal is how a change by consensus ended: its status, whether a
// refused one may have been applied, whether a try of it changed the
// value, why replicas did not take it, and, when decided, the decided
// value.
type proposal struct {
	st             decide.Status
	mayHaveApplied bool
	changed        bool
	reasons        []string
	decided        *decidedValue
}

// propose runs the change that mk makes for this node's proposer of key
// through rounds of consensus among reps, until it is decided, unknown, or
// refused within maxConsensusTries and the node's timeout; stop, when it
// says so after a round, gives up at once (the change could not run).
//
// Until a try of the change goes out with a value other than the one it
// was given, every try is the key's value as it was (a read, a WATCH, an
// EXEC whose watched key moved, a SET NX of a key that exists, a key
// found locked ...): one that may still be chosen changes nothing, so
// when another coordinator's value comes first the change starts afresh
// on it, and stopping applied nothing.
func (n *Node) propose(tr *trace, key []byte, reps []*member, mk func(*decide.Proposer) decide.Change, stop func() bool) proposal {
	kp := n.proposers.acquire(string(key))
	defer n.proposers.release(kp)
	if kp.p == nil || !sameMembers(kp.reps, reps) {
		kp.p, kp.reps = decide.NewProposer(n.proposerID(), len(reps)), reps
	}
	p := kp.p
	// A whole-value write this node's replica was sent since the last
	// change outranks the ballot the replicas promised: the accept at it
	// would be refused, and could not tell it was never taken (the change
	// would end unknown). Prepare instead.
	if bound, ok := n.versions.bound(key); ok {
		if b, _ := versionBallot(bound); (decide.Ballot{Counter: p.Counter(), Proposer: n.proposerID()}).Less(b) {
			p.Forget()
		}
	}
	// Ballots start above every version this node's clock issued or saw,
	// so that a whole-value write's version does not keep refusing them.
	p.Observe(n.clock.Counter())
	replies := make(chan acceptorReply, 2*len(reps)*(maxConsensusTries+2))
	deadline := time.Now().Add(n.cfg.Timeout)
	made, changed := mk(p), false
	change := func(cur []byte) []byte {
		next := made(cur)
		changed = changed || !bytes.Equal(next, cur)
		return next
	}
	req := p.Propose(change)
	var reasons []string
	var st decide.Status
	sent := 0
	for try := 1; ; try++ {
		st, reasons = n.round(tr, key, reps, p, req, replies, &sent, deadline)
		if stop != nil && stop() {
			p.GiveUp()
			return proposal{st: decide.Refused, reasons: reasons}
		}
		again := st == decide.Refused || st == decide.Unknown && !changed
		if !again || try >= maxConsensusTries || time.Now().After(deadline) {
			break
		}
		n.clock.Observe(ballotVersion(decide.Ballot{Counter: p.Counter()}))
		time.Sleep(rand.N(consensusBackoff)) // a random backoff, not a synchronisation
		// A ballot from the clock, not one past the promise that refused
		// it: a proposer that decides a change each millisecond raises
		// its promise by one each time, and would stay ahead.
		p.Observe(n.clock.Counter())
		if st == decide.Unknown {
			req = p.Propose(change) // another coordinator's value came first: run on it
		} else {
			req = p.Retry()
		}
	}
	n.clock.Observe(ballotVersion(p.Ballot()))
	o := proposal{st: st, mayHaveApplied: p.MayHaveApplied() && changed, changed: changed, reasons: reasons}
	if st == decide.Decided {
		if _, expireAt := unpackValue(p.Value()); expireAt > 0 {
			p.Forget() // the value changes by itself: the next change reads it afresh
		}
		o.decided = &decidedValue{ballot: ballotVersion(p.Ballot()), value: p.Value()}
	}
	return o
}

func sameMembers(a, b []*member) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// acceptorReply is replica i's answer to the request numbered sent, or
// why it has none.
type acceptorReply struct {
	i, sent int
	reply   decide.Reply
	err     error
}

// round sends req to every replica and steps the proposer on their
// answers, and on the next requests it returns, until the change is no
// longer waiting: decided, refused (a quorum refused, or cannot answer,
// or the deadline passed) or unknown. It returns why replicas did not
// answer. sent numbers the requests of the change.
func (n *Node) round(tr *trace, key []byte, reps []*member, p *decide.Proposer, req decide.Request, replies chan acceptorReply, sent *int, deadline time.Time) (decide.Status, []string) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var reasons []string
	for req != nil {
		failed, heard := 0, 0 // answers to this request: failures, and all
		reasons = reasons[:0]
		*sent++
		n.sendAcceptors(tr, key, reps, req, *sent, replies)
		req = nil
		for req == nil {
			select {
			case r := <-replies:
				if r.sent == *sent {
					heard++
				}
				if r.err != nil {
					if r.sent == *sent {
						failed++
						reasons = append(reasons, replicaName(reps[r.i])+": "+r.err.Error())
						if failed > len(reps)-consistency.Quorum(len(reps)) {
							p.GiveUp()
							return decide.Refused, reasons
						}
					}
				} else {
					next, st := p.Step(r.i, r.reply)
					if next != nil {
						req = next
						continue
					}
					if st != decide.Waiting {
						return st, reasons
					}
				}
				if heard == len(reps) {
					// Every replica answered, and refusals and failures
					// together leave no quorum: waiting would only wait
					// for the timeout.
					p.GiveUp()
					return decide.Refused, append(reasons, "the others refused it: a newer ballot was promised there")
				}
			case <-timer.C:
				p.GiveUp()
				return decide.Refused, append(reasons, "no quorum answered within the node's timeout")
			}
		}
	}
	return decide.Waiting, reasons
}

// sendAcceptors sends a prepare or an accept, numbered sent, to every
// replica, each answer to replies (which never blocks: it has room for
// every answer of a change).
func (n *Node) sendAcceptors(tr *trace, key []byte, reps []*member, req decide.Request, sent int, replies chan acceptorReply) {
	var peerReq []byte
	for i, m := range reps {
		i := i
		answer := func(raw []byte, err error) {
			r := acceptorReply{i: i, sent: sent}
			if err == nil {
				r.reply, err = parseAcceptorReply(req, raw)
			}
			if err != nil {
				r.reply, r.err = nil, err
				n.countFailure(err)
			}
			select {
			case replies <- r:
			default:
			}
		}
		switch {
		case m.self:
			n.localAcceptor(nil, tr, key, req, answer)
		case m.isDown():
			answer(nil, errMarkedDown(m))
		default:
			if peerReq == nil {
				peerReq = appendAcceptorRequest(nil, key, req)
			}
			n.toPeer(nil, tr, m, peerReq, fromPeer(answer))
		}
	}
}

// appendAcceptorRequest encodes `PREPARE key ballot` or `ACCEPT key ballot
// next dump expireat lock` for a peer.
func appendAcceptorRequest(dst, key []byte, req decide.Request) []byte {
	switch m := req.(type) {
	case decide.Prepare:
		return resp.AppendCommand(dst, []byte("PREPARE"), key, ballotVersion(m.Ballot))
	case decide.Accept:
		dump, expireAt := unpackValue(m.Value)
		_, lock := splitSlot(m.Value)
		return resp.AppendCommand(dst, []byte("ACCEPT"), key, ballotVersion(m.Ballot), ballotVersion(m.Next), dump, strconv.AppendInt(nil, expireAt, 10), lock)
	}
	panic(fmt.Sprintf("troop: unknown acceptor request %T", req))
}

// localAcceptor runs a prepare or an accept on this node's redis-server.
// The version cache's bound is raised to the ballot promised first, so
// that no whole-value write below the promise skips the write script.
func (n *Node) localAcceptor(b *batch, tr *trace, key []byte, req decide.Request, done func([]byte, error)) {
	grace := strconv.AppendInt(nil, max(n.cfg.TombstoneGrace.Milliseconds(), 1), 10)
	var args [][]byte
	switch m := req.(type) {
	case decide.Prepare:
		ballot := ballotVersion(m.Ballot)
		n.versions.record(key, ballot, mayExpire)
		args = [][]byte{[]byte("EVALSHA"), []byte(prepareSHA), []byte("3"), key, nil, nil, ballot, grace}
	case decide.Accept:
		ballot, next := ballotVersion(m.Ballot), ballotVersion(m.Next)
		n.versions.record(key, []byte(max(string(ballot), string(next))), mayExpire)
		dump, expireAt := unpackValue(m.Value)
		_, lock := splitSlot(m.Value)
		args = [][]byte{[]byte("EVALSHA"), []byte(acceptSHA), []byte("3"), key, nil, nil, ballot, next, dump, strconv.AppendInt(nil, expireAt, 10), grace, lock}
	}
	args[4] = append([]byte(VersionPrefix), key...)
	args[5] = append([]byte(PromisePrefix), key...)
	n.toStore(b, tr, n.storeFor(key), resp.AppendCommand(nil, args...), done)
}

// parseAcceptorReply reads an acceptor script's answer (prepareScript's,
// acceptScript's) to req as decide's reply.
func parseAcceptorReply(req decide.Request, raw []byte) (decide.Reply, error) {
	v, err := resp.Parse(raw)
	if err != nil {
		return nil, err
	}
	if v.IsError() {
		return nil, fmt.Errorf("%s", v.Str)
	}
	bad := fmt.Errorf("troop: unexpected acceptor answer %q", resp.Printable(raw))
	if len(v.Elems) < 3 {
		return nil, bad
	}
	promised, ok1 := versionBallot(v.Elems[1].Str)
	accepted, ok2 := versionBallot(v.Elems[2].Str)
	if !ok1 || !ok2 {
		return nil, bad
	}
	ok := v.Elems[0].Int == 1
	switch m := req.(type) {
	case decide.Prepare:
		if len(v.Elems) != 5 && len(v.Elems) != 6 {
			return nil, bad
		}
		r := decide.Promise{Ballot: m.Ballot, OK: ok, Promised: promised, Accepted: accepted}
		if ok {
			r.Value = packValue(v.Elems[3].Str, v.Elems[4].Int)
			if len(v.Elems) == 6 && len(v.Elems[5].Str) > 0 {
				lock := v.Elems[5].Str
				data, _ := splitSlot(r.Value)
				r.Value = makeSlot(data, lock)
			}
		}
		return r, nil
	case decide.Accept:
		return decide.Accepted{Ballot: m.Ballot, OK: ok, Promised: promised, Accepted: accepted}, nil
	}
	return nil, bad
}

// serveAcceptor serves a peer's PREPARE key ballot or ACCEPT key ballot
// next dump expireat [lock].
func (n *Node) serveAcceptor(tr *trace, op string, args [][]byte, b *batch, done func([]byte, error)) {
	var req decide.Request
	ballot, ok := versionBallot(args[2])
	switch {
	case !ok || len(args[2]) == 0:
	case op == "PREPARE" && len(args) == 3:
		req = decide.Prepare{Ballot: ballot}
	case op == "ACCEPT" && (len(args) == 6 || len(args) == 7):
		next, ok := versionBallot(args[3])
		expireAt, err := strconv.ParseInt(string(args[5]), 10, 64)
		if ok && err == nil && expireAt >= 0 {
			req = decide.Accept{Ballot: ballot, Next: next, Value: packValue(args[4], expireAt)}
			if len(args) == 7 && len(args[6]) > 0 {
				data, _ := splitSlot(packValue(args[4], expireAt))
				req = decide.Accept{Ballot: ballot, Next: next, Value: makeSlot(data, args[6])}
			}
		}
	}
	if req == nil {
		done(resp.AppendError(nil, "ERR troop peer protocol: bad "+op+" arguments"), nil)
		return
	}
	n.clock.Observe(args[2])
	n.localAcceptor(b, tr, args[1], req, done)
}

// commandChange is the change of one command of one key (consensusWrite),
// as changeScript runs it.
func (n *Node) commandChange(tr *trace, cmd *command, key []byte, args [][]byte) changeFunc {
	return func(cur []byte, _, _ decide.Ballot) ([]byte, []byte, error) {
		dump, expireAt := unpackValue(cur)
		raw, err := n.runChange(tr, key, dump, expireAt, args)
		if err != nil {
			return nil, nil, err
		}
		frames, err := resp.Elements(raw)
		if err != nil || len(frames) != 3 {
			return nil, nil, unexpectedAnswer(raw)
		}
		d, _ := resp.Parse(frames[1])
		t, _ := resp.Parse(frames[2])
		reply := frames[0]
		if nilIsArray(cmd, args) && isNullBulk(reply) { // Lua turned redis-server's null array into false, a null bulk
			reply = []byte("*-1\r\n")
		}
		return reply, packValue(d.Str, t.Int), nil
	}
}

// blockChange is the change of commands on one key, key, each with key in
// the scratch key's place (scratchArgs), run as one MULTI block (runBlock):
// a script's or a stream write's (one command, whose reply it answers),
// or, exec, a transaction's with its WATCH tokens (perhaps none),
// answered as EXEC: a null array, the value left as it is, when a watched
// token is not that of the current value, else every command's reply.
func (n *Node) blockChange(key []byte, cmds [][][]byte, exec bool, tokens [][]byte) changeFunc {
	return func(cur []byte, base, _ decide.Ballot) ([]byte, []byte, error) {
		if exec {
			now := valueToken(cur, base)
			for _, t := range tokens {
				if !bytes.Equal(t, now) {
					return resp.AppendNullArray(nil), cur, nil
				}
			}
		}
		replies, next, err := n.runBlock(key, cur, cmds)
		if err != nil {
			return nil, nil, err
		}
		return blockReply(replies, exec), next, nil
	}
}

// blockReply is the client's reply to a MULTI block's commands: the one
// command's (a script's, a stream write's, a command's), or, exec, EXEC's
// with every command's.
func blockReply(replies []resp.Value, exec bool) []byte {
	if !exec {
		return resp.AppendValue(nil, replies[0])
	}
	out := resp.AppendArrayHeader(nil, len(replies))
	for _, r := range replies {
		out = resp.AppendValue(out, r)
	}
	return out
}

// scratchArgs is args with each of its keys (keys, as txCommand or
// peerCommand found them in args) in the scratch key's place, when all
// are key. It is not ok when one is another key, or one a keys function
// copied out of args (SORT's STORE), whose place it cannot tell, or when
// the command names other keys besides (SORT's patterns).
func scratchArgs(args, keys [][]byte, key []byte) ([][]byte, bool) {
	if c := lookup(args[0]); c != nil && (c.name == "SORT" || c.name == "SORT_RO") {
		if _, patterns := sortKeys(args); len(patterns) > 0 {
			return nil, false
		}
	}
	out := slices.Clone(args)
	for j := range keys {
		at := -1
		for i := range args {
			if &args[i] == &keys[j] { // the keys functions slice args: a key's place is where it lies
				at = i
			}
		}
		if at < 0 || !bytes.Equal(keys[j], key) {
			return nil, false
		}
		out[at] = []byte(scratchKey)
	}
	return out, true
}

// valueToken is the WATCH token (tokenFunction's) that a replica holding
// the value cur (packed, nil for none) at version base computes: the
// version, then the SHA1 of the DUMP; empty for none. A replica that holds
// a value without a version, which prepareScript answers as the zero
// ballot, has an empty version.
func valueToken(cur []byte, base decide.Ballot) []byte {
	dump, _ := unpackValue(cur)
	if dump == nil {
		return []byte{}
	}
	var out []byte
	if base != (decide.Ballot{}) {
		out = ballotVersion(base)
	}
	sum := sha1.Sum(dump)
	return hex.AppendEncode(append(out, ':'), sum[:])
}

// runBlock runs commands (their key the scratch key) on a value (cur,
// packed, nil for none) in the scratch key of this node's redis-server,
// as one MULTI block (DEL, RESTORE, the commands, DUMP, PEXPIRETIME, DEL),
// waiting for the answer: each command's reply, the scratch key's name in
// it given back as key's, and the value after, packed. Unlike
// changeScript it runs what a script cannot: a script, and a blocking pop,
// which redis-server runs without blocking inside MULTI.
func (n *Node) runBlock(key, cur []byte, cmds [][][]byte) ([]resp.Value, []byte, error) {
	dump, expireAt := unpackValue(cur)
	sent := 6 + len(cmds) // MULTI, DEL, the commands, DUMP, PEXPIRETIME, DEL, EXEC
	if dump != nil {
		sent++
	}
	appendReq := func(dst []byte) []byte {
		dst = resp.AppendCommandStrings(dst, "MULTI")
		dst = resp.AppendCommandStrings(dst, "DEL", scratchKey)
		if dump != nil {
			dst = resp.AppendCommand(dst, []byte("RESTORE"), []byte(scratchKey), strconv.AppendInt(nil, expireAt, 10), dump, []byte("ABSTTL"))
		}
		for _, c := range cmds {
			dst = resp.AppendCommand(dst, c...)
		}
		dst = resp.AppendCommandStrings(dst, "DUMP", scratchKey)
		dst = resp.AppendCommandStrings(dst, "PEXPIRETIME", scratchKey)
		dst = resp.AppendCommandStrings(dst, "DEL", scratchKey)
		return resp.AppendCommandStrings(dst, "EXEC")
	}
	v, err := n.storeBlock(key, sent, appendReq)
	if err != nil {
		return nil, nil, err
	}
	first := 1 // after DEL, and RESTORE
	if dump != nil {
		first = 2
	}
	if first == 2 && v.Elems[1].IsError() {
		return nil, nil, fmt.Errorf("the value could not be restored: %s", v.Elems[1].Str)
	}
	replies := v.Elems[first : first+len(cmds)]
	for i := range replies {
		nameKey(&replies[i], key)
	}
	after := v.Elems[first+len(cmds):]
	return replies, packValue(after[0].Str, after[1].Int), nil
}

// storeBlock sends a MULTI block of sent commands, which appendReq
// writes, to the redis-server of key's node, and answers EXEC's replies:
// an error for an error reply, or for one that is not an array of a reply
// to each command queued (all but MULTI and EXEC).
func (n *Node) storeBlock(key []byte, sent int, appendReq func([]byte) []byte) (resp.Value, error) {
	l := n.storeFor(key)
	raw, err := await(func(done func([]byte, error)) error {
		if err := l.TrySendAppend(sent, appendReq, done); err != nil {
			return err
		}
		l.FlushSoon()
		return nil
	})
	if err != nil {
		return resp.Value{}, err
	}
	v, err := resp.Parse(raw)
	if err == nil && v.IsError() {
		return resp.Value{}, fmt.Errorf("%s", v.Str)
	}
	if err != nil || v.Type != resp.Array || len(v.Elems) != sent-2 {
		return resp.Value{}, unexpectedAnswer(raw)
	}
	return v, nil
}

// nameKey gives key's name back to the scratch key wherever a reply names
// it (BLPOP's [key, element], XREADGROUP's streams, a script's KEYS[1]).
// A value that spells the scratch key's name is given key's too.
func nameKey(v *resp.Value, key []byte) {
	if v.Type == resp.BulkString && string(v.Str) == scratchKey {
		v.Str = key
	}
	for i := range v.Elems {
		nameKey(&v.Elems[i], key)
	}
}

// runChange runs the command args on a value (dump, "" for none, expiring
// at expireAt) in the scratch key of this node's redis-server, waiting for
// the answer: changeScript's {reply, dump, expiry}.
func (n *Node) runChange(tr *trace, key, dump []byte, expireAt int64, args [][]byte) ([]byte, error) {
	call := make([][]byte, 0, 6+len(args))
	call = append(call, []byte("EVALSHA"), []byte(changeSHA), []byte("1"), []byte(scratchKey), dump, strconv.AppendInt(nil, expireAt, 10), args[0], []byte(scratchKey))
	call = append(call, args[2:]...)
	raw, err := await(func(done func([]byte, error)) error {
		n.toStore(nil, tr, n.storeFor(key), resp.AppendCommand(nil, call...), done)
		return nil
	})
	if err == nil && len(raw) > 0 && raw[0] == '-' {
		err = fmt.Errorf("%s", bytes.TrimSpace(raw[1:]))
	}
	return raw, err
}

// await sends a request with send, which hands done to the link or
// answers why it could not send, and waits for the answer: a copy of the
// reply, since the link reuses its buffer once done returns.
func await(send func(done func([]byte, error)) error) ([]byte, error) {
	type answer struct {
		raw []byte
		err error
	}
	ch := make(chan answer, 1)
	if err := send(func(raw []byte, err error) { ch <- answer{append([]byte(nil), raw...), err} }); err != nil {
		return nil, err
	}
	a := <-ch
	return a.raw, a.err
}

// forwardDecided sends a decided value to each remote datacenter, which
// installs it at its ballot as a whole-value write (RESTORE, or DEL for
// none) and fans it out in its datacenter, asynchronously.
func (n *Node) forwardDecided(tr *trace, v *view, key []byte, d *decidedValue, h *hold) {
	if len(v.remoteDCs) == 0 {
		return
	}
	args := [][]byte{[]byte("DEL"), key}
	if dump, expireAt := unpackValue(d.value); dump != nil {
		args = [][]byte{[]byte("RESTORE"), key, strconv.AppendInt(nil, expireAt, 10), dump, []byte("REPLACE"), []byte("ABSTTL")}
	}
	n.forwardToRemoteDCs(tr, v, key, d.ballot, args, h, nil)
}
