package node

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// Transactions (MULTI ... EXEC) run as one Lua script on every replica, so
// each replica applies all of a transaction or none of it, with nothing of
// another client's in between, as redis-server runs MULTI/EXEC. That needs
// every key of the transaction on the same replicas (hash tags arrange it);
// otherwise EXEC refuses the whole transaction and nothing in it runs. The
// commands are queued in the node until EXEC, as Redis queues them, and a
// command the node refuses while queueing (unknown, wrong arity, not
// allowed) aborts the transaction at EXEC, as in Redis.
//
// WATCH reads a token of each watched key (its version and a digest of its
// value) from the replica that decides the transaction; EXEC runs there only
// if the tokens are unchanged, and then on the other replicas unconditionally.
//
// At a quorum level, a transaction of one key is one change of it by
// consensus instead (consensusTx, execByConsensus).

// txn is a connection's transaction between MULTI and EXEC or DISCARD.
type txn struct {
	cmds      [][][]byte       // what the replicas run
	nodeCmds  map[int][][]byte // what the node answers itself (INFO, TIME ...), by position in EXEC's reply
	count     int              // commands queued
	order     [][][]byte       // every command queued, in order
	keys      [][]byte         // every key the commands name
	writeKeys [][]byte         // the keys they may change, whose versions EXEC moves
	writes    bool
	bytes     int
	dirty     bool // a command was refused while queueing: EXEC aborts
	// What the node runs by asking the cluster (clusterInTx), by position.
	clusterCmds map[int][][]byte
}

// unknownToken is the token of a watched key whose read by consensus ended
// with its outcome unknown: no value's token (those are empty, or a
// version, ':' and a digest), so the transaction aborts.
const unknownToken = "?"

// maxWatchedKeys bounds the keys one connection watches at once.
const maxWatchedKeys = 4096

// watch is one WATCH: its keys and, once read, their tokens.
type watch struct {
	keys   [][]byte
	ready  chan struct{} // closed when tokens or err is set
	tokens [][]byte
	err    string
}

// txScript runs a transaction: KEYS are the watched keys, then the keys the
// commands may change; ARGV the version, the tombstone grace in ms, the
// number of watched keys, their tokens, then each command as its word count
// and words. It answers false (nil) when a watched key changed, else every
// command's reply in order; a command's error is its reply and does not stop
// the others, as in EXEC. Changed keys get the version, unless they hold a
// newer one, with the same expiry bookkeeping as the write script.
//
// Blocking pops do not block inside a transaction, in Redis: they pop, or
// answer nil at once. redis-server refuses them in a script, so the queue
// holds their non-blocking form, and BLPOP and its kin (whose reply names
// the key) run as the first pop of ARGV[from..to] that finds something.
const txScript = `
local bpops = {BLPOP = 'LPOP', BRPOP = 'RPOP', BZPOPMIN = 'ZPOPMIN', BZPOPMAX = 'ZPOPMAX'}
local function bpop(pop, from, to)
  for j = from, to do
    local r = redis.pcall(pop, ARGV[j])
    if type(r) == 'table' and r.err then return r end
    if type(r) == 'table' and #r > 0 then return {ARGV[j], r[1], r[2]} end
    if type(r) == 'string' then return {ARGV[j], r} end
  end
  return false
end
` + tokenFunction + `
local v, grace, w = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 1, w do
  if token(KEYS[i]) ~= ARGV[3 + i] then return false end
end
local out = {}
local i = 4 + w
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local pop = bpops[string.upper(ARGV[i + 1])]
  if pop then out[#out + 1] = bpop(pop, i + 2, i + n - 1)
  else out[#out + 1] = redis.pcall(unpack(ARGV, i + 1, i + n)) end
  i = i + n + 1
end
local first = w + 1
` + versionKeys + `
return out
`

// watchScript answers the token of each key of KEYS, as txScript computes it.
const watchScript = tokenFunction + `
local out = {}
for i = 1, #KEYS do out[i] = token(KEYS[i]) end
return out
`

// tokenFunction is the Lua function of a watched key's token: its version
// and a digest of its value; empty for a missing key, whatever version its
// tombstone holds (a FLUSHALL removes tombstones too, and a key missing
// before and after it was not touched, in Redis's terms).
const tokenFunction = `
local function token(key)
  local d = redis.call('DUMP', key)
  if not d then return '' end
  return (redis.call('GET', '` + VersionPrefix + `' .. key) or '') .. ':' .. redis.sha1hex(d)
end
`

var (
	txSHA    = scriptSHA(txScript)
	watchSHA = scriptSHA(watchScript)
)

// txCommand checks a command for a transaction and returns its keys, and
// whether it writes; bad is the error that refuses it.
func txCommand(c *command, args [][]byte) (keys [][]byte, write bool, bad string) {
	if c == nil {
		return nil, false, string(unknownCommand(args))
	}
	if !c.arityOK(len(args)) {
		return nil, false, fmt.Sprintf("-ERR wrong number of arguments for '%s' command\r\n", strings.ToLower(c.name))
	}
	switch {
	case notInMulti[c.name]:
		return nil, false, "-ERR Command not allowed inside a transaction\r\n" // Redis's own refusal
	case c.kind == kindLocal:
		if c.name == "PING" || c.name == "ECHO" || answeredInTx(c, args) || clusterInTx(c, args) { // redis-server answers them as well
			return nil, false, ""
		}
		return nil, false, fmt.Sprintf("-ERR troop: '%s' cannot run inside a transaction: it changes the connection, and troop runs a transaction apart from it\r\n", c.name)
	case c.kind == kindUnsupported:
		return nil, false, fmt.Sprintf("-ERR troop: '%s' is not supported: %s\r\n", c.name, c.why)
	case c.kind == kindCopied && !copiedInTx[c.name]:
		return nil, false, fmt.Sprintf("-ERR troop: '%s' cannot run inside a transaction: its effect depends on the time of the replica that runs it\r\n", c.name)
	case c.kind == kindScript:
		return nil, false, fmt.Sprintf("-ERR troop: '%s' cannot run inside a transaction: troop runs a transaction as a script, and a script cannot run another\r\n", c.name)
	case c.name == "UNWATCH": // queued, and answered OK at EXEC, as in Redis
		return nil, false, ""
	case c.kind == kindTransaction:
		return nil, false, fmt.Sprintf("-ERR troop: '%s' cannot run inside a transaction\r\n", c.name)
	}
	keys = args[1:2]
	if c.keys != nil {
		var why string
		if keys, why = c.keys(args); why != "" {
			return nil, false, "-ERR " + why + "\r\n"
		}
	}
	for _, k := range keys {
		if strings.HasPrefix(string(k), reservedPrefix) {
			return nil, false, fmt.Sprintf("-ERR troop: keys starting with %q are reserved for troop\r\n", reservedPrefix)
		}
	}
	write = c.writesFor(args)
	return keys, write, ""
}

// copiedInTx are the stream writes a transaction runs on every replica:
// they do the same on each, once XADD's ID is the deciding replica's
// (followTx).
// XREADGROUP delivers the same entries on each; only the delivery times
// its pending entries record are each replica's own.
var copiedInTx = map[string]bool{"XADD": true, "XDEL": true, "XTRIM": true, "XACK": true, "XGROUP": true, "XSETID": true, "XREADGROUP": true}

// withoutBlock is XREAD or XREADGROUP args without BLOCK ms.
func withoutBlock(args [][]byte) [][]byte {
	for i := 1; i+1 < len(args); i++ {
		switch strings.ToUpper(string(args[i])) {
		case "STREAMS":
			return args
		case "BLOCK":
			return append(append([][]byte{}, args[:i]...), args[i+2:]...)
		}
	}
	return args
}

// notInMulti are the commands redis-server refuses between MULTI and EXEC
// (the no-multi flag of its command table), which then aborts the EXEC.
var notInMulti = map[string]bool{"SAVE": true, "SHUTDOWN": true, "SYNC": true, "PSYNC": true}

// answeredInTx says whether the node answers a command of its own inside a
// transaction, at EXEC, in its place in the reply: those it answers at once
// and without changing the session's replicas.
func answeredInTx(c *command, args [][]byte) bool {
	switch c.name {
	case "TIME", "SELECT", "COMMAND", "UNWATCH":
		return true
	case "INFO":
		return !wantsKeyspace(args[1:])
	case "CLIENT":
		if len(args) < 2 {
			return false
		}
		switch strings.ToUpper(string(args[1])) {
		case "GETNAME", "ID", "LIST", "INFO", "UNBLOCK":
			return true
		}
	}
	return false
}

// clusterInTx says whether a command the node answers by asking the
// cluster runs inside a transaction: those that leave the connection as
// it is. They run at EXEC in their place (execInParts).
func clusterInTx(c *command, args [][]byte) bool {
	if c == nil || c.kind != kindLocal {
		return false
	}
	switch c.name {
	case "CONFIG", "FLUSHALL", "FLUSHDB", "FUNCTION", "SCRIPT", "DBSIZE", "KEYS", "SCAN", "RANDOMKEY", "PUBLISH", "SPUBLISH", "PUBSUB":
		return true
	case "INFO":
		return wantsKeyspace(args[1:])
	}
	return false
}

// transaction handles MULTI, EXEC, DISCARD, WATCH and UNWATCH.
func (n *Node) transaction(c *command, args [][]byte, sess *session, b *batch, s *slot) {
	switch c.name {
	case "MULTI":
		if sess.tx != nil {
			s.complete(resp.AppendError(nil, "ERR MULTI calls can not be nested"))
			return
		}
		sess.tx = &txn{}
		sess.publish()
		s.complete(resp.AppendSimple(nil, "OK"))
	case "DISCARD":
		if sess.tx == nil {
			s.complete(resp.AppendError(nil, "ERR DISCARD without MULTI"))
			return
		}
		sess.tx, sess.watches = nil, nil
		sess.publish()
		s.complete(resp.AppendSimple(nil, "OK"))
	case "UNWATCH":
		sess.watches = nil
		s.complete(resp.AppendSimple(nil, "OK"))
	case "WATCH":
		if sess.tx != nil {
			s.complete(resp.AppendError(nil, "ERR WATCH inside MULTI is not allowed"))
			return
		}
		n.watch(args[1:], sess, b, s)
	case "EXEC":
		tx, watches := sess.tx, sess.watches
		if tx == nil {
			s.complete(resp.AppendError(nil, "ERR EXEC without MULTI"))
			return
		}
		sess.tx, sess.watches = nil, nil
		sess.publish()
		n.exec(tx, watches, sess, b, s)
	}
}

// queue adds a command to the connection's transaction and answers QUEUED,
// or its error, which aborts the transaction at EXEC.
func (n *Node) queue(c *command, args [][]byte, sess *session) []byte {
	tx := sess.tx
	if c != nil && (c.name == "XREAD" || c.name == "XREADGROUP") {
		args = withoutBlock(args) // Redis does not block inside MULTI either
	}
	keys, write, bad := txCommand(c, args)
	if bad == "" && tx.bytes+resp.CommandSize(args) > n.cfg.MaxRequestBytes {
		bad = fmt.Sprintf("-ERR troop: the transaction would be larger than troop_max_request_bytes (%d)\r\n", n.cfg.MaxRequestBytes)
	}
	if bad != "" {
		tx.dirty = true
		return []byte(bad)
	}
	if spec, ok := blockingSpecs[c.name]; ok {
		if _, bad := parseBlockingTimeout(args[spec.timeoutIndex(args)]); bad != "" {
			tx.dirty = true
			return resp.AppendError(nil, bad)
		}
		if !spec.perKey { // the script runs BLPOP and its kin itself
			args = spec.nonBlocking(args, nil)
		}
	}
	tx.add(c, args, keys, write)
	sess.publish()
	return resp.AppendSimple(nil, "QUEUED")
}

// add queues a command that txCommand allowed, with its keys.
func (tx *txn) add(c *command, args, keys [][]byte, write bool) {
	switch {
	case clusterInTx(c, args):
		if tx.clusterCmds == nil {
			tx.clusterCmds = map[int][][]byte{}
		}
		tx.clusterCmds[tx.count] = args
	case (c.kind == kindLocal || c.kind == kindTransaction) && answeredInTx(c, args):
		if tx.nodeCmds == nil {
			tx.nodeCmds = map[int][][]byte{}
		}
		tx.nodeCmds[tx.count] = args
	default:
		tx.cmds = append(tx.cmds, args)
	}
	tx.count++
	tx.order = append(tx.order, args)
	tx.bytes += resp.CommandSize(args)
	tx.keys = append(tx.keys, keys...)
	if write {
		tx.writes = true
		tx.writeKeys = append(tx.writeKeys, keys...)
	}
}

// txPart is a part of a transaction that holds cluster commands: a run of
// the other commands, or one cluster command.
type txPart struct {
	tx      *txn
	cluster [][]byte
}

// parts splits a transaction at its cluster commands. A transaction
// whose watches must be checked before a cluster command starts with an
// empty run, which checks them.
func (tx *txn) parts(watched bool) []txPart {
	var out []txPart
	var run *txn
	if watched {
		run = &txn{}
		out = append(out, txPart{tx: run})
	}
	for i, args := range tx.order {
		if _, ok := tx.clusterCmds[i]; ok {
			out = append(out, txPart{cluster: args})
			run = nil
			continue
		}
		if run == nil {
			run = &txn{}
			out = append(out, txPart{tx: run})
		}
		c := lookup(args[0])
		keys, write, _ := txCommand(c, args)
		run.add(c, args, keys, write)
	}
	return out
}

// watch reads the watched keys' tokens from the replica that will decide
// the transaction, or, at a quorum level, each by consensus
// (consensusWatch), and answers OK once they are in.
func (n *Node) watch(keys [][]byte, sess *session, b *batch, s *slot) {
	for _, k := range keys {
		if strings.HasPrefix(string(k), reservedPrefix) {
			s.complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: keys starting with %q are reserved for troop", reservedPrefix)))
			return
		}
	}
	if !n.sameReplicas(keys) {
		s.complete(resp.AppendError(nil, "ERR troop: the keys of 'WATCH' belong to different nodes, and a transaction can only run on keys that share their replicas"))
		return
	}
	watched := 0
	for _, w := range sess.watches {
		watched += len(w.keys)
	}
	if watched+len(keys) > maxWatchedKeys { // a session's memory stays bounded
		s.complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: a connection may watch at most %d keys until EXEC, DISCARD or UNWATCH", maxWatchedKeys)))
		return
	}
	w := &watch{keys: keys, ready: make(chan struct{})}
	sess.watches = append(sess.watches, w)
	settle := func(from string) {
		close(w.ready)
		if w.err != "" {
			s.complete(resp.AppendError(nil, "ERR troop: WATCH could not read the keys from "+from+": "+w.err))
			return
		}
		s.complete(resp.AppendSimple(nil, "OK"))
	}
	if level := n.levelFor(sess, true); n.consensusWatch(level, keys) {
		// Each key's token is read by consensus, all at once.
		tokens, errs := make([][]byte, len(keys)), make([]string, len(keys))
		var mu sync.Mutex
		left := len(keys)
		for i, k := range keys {
			args := [][]byte{[]byte("WATCH"), k}
			n.byConsensus(nil, level, k, args[0], watchChange, decideRequest(level, args), &sess.gate, nil, func(reply []byte) {
				mu.Lock()
				switch v, err := resp.Parse(reply); {
				case err == nil && v.Type == resp.BulkString:
					tokens[i] = v.Str
				case err == nil && v.IsError() && (bytes.Contains(v.Str, []byte("outcome unknown")) || bytes.HasSuffix(v.Str, []byte(outrun))):
					// Other coordinators' changes kept coming between, or
					// the deciding replica did not answer: the key may have
					// changed since any token this could read. EXEC will
					// abort, as after a change of a watched key.
					tokens[i] = []byte(unknownToken)
				default:
					errs[i] = strings.TrimSpace(strings.TrimPrefix(string(reply), "-"))
				}
				left--
				last := left == 0
				mu.Unlock()
				if !last {
					return
				}
				w.tokens = tokens
				for _, e := range errs {
					if e != "" {
						w.err = e
						break
					}
				}
				settle("a quorum of their replicas")
			})
		}
		return
	}
	m, _ := n.decider(n.replicas(keys[0]))
	eval := scriptArgs("EVALSHA", watchSHA, keys)
	got := func(raw []byte, err error) {
		v, perr := resp.Parse(raw)
		switch {
		case err != nil:
			w.err = replicaName(m) + ": " + err.Error()
		case perr != nil || v.IsError() || len(v.Elems) != len(keys):
			w.err = replicaName(m) + ": " + cleanScriptError(raw)
		default:
			for _, e := range v.Elems {
				w.tokens = append(w.tokens, e.Str)
			}
		}
		settle("the replica that decides a transaction on them")
	}
	if m.self {
		n.toStoreCommand(b, nil, n.storeFor(keys[0]), eval, got)
		return
	}
	n.toPeer(b, nil, m, appendPeerRequest(nil, "LOCAL", nil, eval), fromPeer(got))
}

// decider is the replica a transaction runs on first, and the only one
// that checks WATCHed keys: the one in the first rack by name that is not
// marked down. Every coordinator picks the same one, so transactions on a
// key are decided in one place, whichever node the clients use.
func (n *Node) decider(reps []*member) (*member, int) {
	best := -1
	for i, m := range reps {
		if !m.isDown() && (best < 0 || m.rack < reps[best].rack) {
			best = i
		}
	}
	if best < 0 {
		best = 0 // all down: it fails as unreachable
	}
	return reps[best], best
}

// exec runs a transaction: on the deciding replica first, with the WATCH
// check, and once that ran it, on the other replicas; the answer is the
// deciding replica's, given when the write level is met.
func (n *Node) exec(tx *txn, watches []*watch, sess *session, b *batch, s *slot) {
	if tx.dirty {
		s.complete(resp.AppendError(nil, "EXECABORT Transaction discarded because of previous errors."))
		return
	}
	var wkeys, tokens [][]byte
	for _, w := range watches {
		select {
		case <-w.ready:
		default:
			b.beforeWait() // the read of its tokens may be in the batch
			<-w.ready
		}
		if w.err != "" {
			s.complete(resp.AppendError(nil, "EXECABORT troop: WATCH failed, so the transaction was discarded and nothing in it ran ("+w.err+")"))
			return
		}
		wkeys = append(wkeys, w.keys...)
		tokens = append(tokens, w.tokens...)
	}
	all := append(append([][]byte{}, tx.keys...), wkeys...)
	if len(all) == 0 {
		all = [][]byte{{}} // PING and ECHO only: any replicas will do
	}
	if !n.sameReplicas(all) {
		s.complete(resp.AppendError(nil, "EXECABORT troop: the keys of this transaction belong to different nodes, so it cannot run as one; nothing in it ran (keys of one hash tag share their nodes)"))
		return
	}
	if reply := n.refuseInState(tx.writes); reply != nil {
		s.complete(append([]byte("-EXECABORT"), reply[len("-ERR"):]...))
		return
	}
	sess.gate.await(all, b)
	level := n.levelFor(sess, tx.writes)
	s.measure(n.stats, tx.writes, level, b.started())
	done := s.done
	if s.replies != nil { // the errors in EXEC's reply count as the commands' own, as in Redis
		inner, order := done, tx.order
		done = func(reply []byte) { s.replies.execErrors(order, reply); inner(reply) }
	}
	if flags := n.notify.flags.Load(); flags != 0 && tx.writes {
		inner, order := done, tx.order
		done = func(reply []byte) { n.notifyExec(flags, order, reply); inner(reply) }
	}
	if tx.writes && n.blockers.count.Load() > 0 { // as after a write: the clients blocked on its keys go first
		inner := done
		done = func(reply []byte) { n.blockers.wake(tx.writeKeys).after(func() { inner(reply) }) }
	}
	if len(tx.clusterCmds) > 0 {
		n.execInParts(tx, wkeys, tokens, all[0], sess, b, level, done)
		return
	}
	if key, scratch, ok := n.consensusTx(level, tx.cmds, wkeys); ok {
		n.execByConsensus(tx, key, scratch, wkeys, tokens, sess, level, done)
		return
	}
	if n.execTransact(tx, wkeys, tokens, sess, level, done) {
		return
	}
	n.execReplicated(tx, wkeys, tokens, all[0], sess, b, level, done)
}

// execInParts runs a transaction that holds cluster commands (FLUSHALL,
// CONFIG SET, KEYS ...): each run of the other commands as one
// transaction, the first with the WATCH check, and each cluster command
// in its place, in order; EXEC answers every reply in order. The
// connection's later requests on the transaction's keys wait for it all.
// Unlike redis-server's, such a transaction is atomic part by part only:
// other clients' commands may run between its parts.
func (n *Node) execInParts(tx *txn, wkeys, tokens [][]byte, route []byte, sess *session, b *batch, level consistency.Level, done replyFunc) {
	parts := tx.parts(len(wkeys) > 0)
	var releases []func()
	for _, k := range tx.keys {
		releases = append(releases, sess.gate.hold(k))
	}
	finish := func(reply []byte) {
		for _, r := range releases {
			r()
		}
		done(reply)
	}
	proto := sess.proto // the callbacks run on other goroutines
	replies := resp.AppendArrayHeader(nil, tx.count)
	var run func(i int, b *batch)
	run = func(i int, b *batch) {
		if i == len(parts) {
			finish(replies)
			return
		}
		if args := parts[i].cluster; args != nil {
			c := lookup(args[0])
			n.runLocal(c, args, sess, b, func(reply []byte) {
				if proto == 3 {
					reply = resp3Reply(c, args, reply)
				}
				replies = append(replies, reply...)
				run(i+1, nil)
			})
			return
		}
		var wk, tk [][]byte
		if i == 0 {
			wk, tk = wkeys, tokens
		}
		n.execReplicated(parts[i].tx, wk, tk, route, sess, b, level, func(reply []byte) {
			v, err := resp.Parse(reply)
			switch {
			case err == nil && v.Type == resp.Array && v.IsNull: // a watched key changed: nothing ran
				finish(reply)
				return
			case err != nil || v.Type != resp.Array:
				msg := strings.TrimSpace(strings.TrimPrefix(string(reply), "-"))
				finish(resp.AppendError(nil, fmt.Sprintf("ERR troop: part %d of %d of the transaction failed (the parts before it ran): %s", i+1, len(parts), msg)))
				return
			}
			for _, e := range v.Elems {
				replies = resp.AppendValue(replies, e)
			}
			run(i+1, nil)
		})
	}
	run(0, b)
}

// execReplicated runs a transaction of keyed commands (and the node's
// answers) on the replicas of route: on the deciding replica first, with
// the WATCH check, then on the others.
func (n *Node) execReplicated(tx *txn, wkeys, tokens [][]byte, route []byte, sess *session, b *batch, level consistency.Level, done replyFunc) {
	routing := n.view()
	reps := routing.replicas(n.token(route))
	if !reps[0].self {
		n.stats.forwarded.Add(1)
	}
	var version []byte
	if n.cfg.Versions && len(tx.writeKeys) > 0 {
		version = n.clock.Next()
	} else {
		version = []byte{}
	}
	proto := sess.proto // the callback runs on another goroutine
	first, fi := n.decider(reps)
	n.runTx(b, first, version, wkeys, tokens, tx.cmds, func(raw []byte, err error) {
		switch {
		case err != nil:
			done(resp.AppendError(nil, fmt.Sprintf("ERR troop: transaction failed on the replica that decides it, outcome unknown: it may have run there, and no other replica got it (%s: %s)", replicaName(first), err)))
			return
		case len(raw) > 0 && raw[0] == '-':
			done(resp.AppendError(nil, "EXECABORT troop: the transaction could not run, and nothing in it ran: "+cleanScriptError(raw)))
			return
		case string(raw) == "$-1\r\n": // a watched key changed
			done(resp.AppendArrayHeader(nil, -1))
			return
		}
		decided := n.withNodeReplies(raw, tx, sess)
		if proto == 3 {
			decided = resp3EachReply(decided, tx.order)
		}
		answer := func(reply []byte) { // the deciding replica's, once the level is met
			if len(reply) > 0 && reply[0] != '-' {
				reply = decided
			}
			done(reply)
		}
		w := n.newWriteQuorum(nil, level, []byte("EXEC"), reps, answer)
		w.answer(fi, raw, nil)
		follow := followTx(tx.cmds, raw)
		remote := appendTxRequest(nil, "TX", version, nil, nil, follow)
		for i, m := range reps {
			if i == fi {
				continue
			}
			i := i
			if m.self {
				n.runTx(nil, m, version, nil, nil, follow, func(raw []byte, err error) { w.answer(i, raw, err) })
				continue
			}
			n.sendWrite(nil, nil, m, remote, fromPeer(func(raw []byte, err error) { w.answer(i, raw, err) }))
		}
		if len(routing.remoteDCs) > 0 && tx.writes {
			fwd := appendTxRequest(nil, "TXFWD", version, nil, nil, follow)
			h := n.token(route)
			for _, dc := range routing.remoteDCs {
				n.sendWrite(nil, nil, routing.members[dc.ring.Owner(h)], fwd, n.asyncDone)
			}
		}
	})
}

// consensusTx reports whether a transaction of cmds watching wkeys is
// decided by consensus at level, as one change of its one key, as a
// read-modify-write of one key is (consensusWrite): at a quorum level,
// with versions, when every key it watches or names is one, none of its
// commands asks the cluster, and the node can run each command on that
// key in the scratch key (scratchArgs). It returns the key and the
// commands as they run there.
func (n *Node) consensusTx(level consistency.Level, cmds [][][]byte, wkeys [][]byte) (key []byte, scratch [][][]byte, ok bool) {
	if !n.byConsensusAt(level) {
		return nil, nil, false
	}
	found := false
	for _, k := range wkeys {
		if found && !bytes.Equal(k, key) {
			return nil, nil, false
		}
		key, found = k, true
	}
	for _, c := range cmds {
		cmd := lookup(c[0])
		keys, _, bad := txCommand(cmd, c)
		if bad != "" || clusterInTx(cmd, c) { // a peer's DECIDETX is checked as the coordinator's queue was
			return nil, nil, false
		}
		if !found && len(keys) > 0 {
			key, found = keys[0], true
		}
		sc, ok := scratchArgs(c, keys, key)
		if !ok {
			return nil, nil, false
		}
		scratch = append(scratch, sc)
	}
	return key, scratch, found
}

// execByConsensus runs a transaction of one key (consensusTx) as one
// change of it by consensus: its WATCH check against the value the change
// is given, then its commands, as they run in the scratch key, in one
// MULTI block (blockChange). The key's deciding replica proposes
// (DECIDETX), as for a write of one key. The node's own answers go in
// after, in their places.
func (n *Node) execByConsensus(tx *txn, key []byte, scratch [][][]byte, wkeys, tokens [][]byte, sess *session, level consistency.Level, done replyFunc) {
	decideReq := func() []byte { return appendTxRequest(nil, "DECIDETX", []byte(level.String()), wkeys, tokens, tx.cmds) }
	n.byConsensus(nil, level, key, []byte("EXEC"), n.blockChange(key, scratch, true, tokens), decideReq, &sess.gate, nil, n.execReply(tx, sess, done))
}

// execReply answers EXEC of tx, run by consensus, to done: its commands'
// replies with the node's own answers in their places, in the session's
// protocol; an error, or nil when a watched key changed, as it is.
func (n *Node) execReply(tx *txn, sess *session, done replyFunc) replyFunc {
	proto := sess.proto // the reply comes on another goroutine
	return func(reply []byte) {
		if v, err := resp.Parse(reply); err != nil || v.Type != resp.Array || v.IsNull {
			done(reply) // an error, or a watched key changed: nothing ran
			return
		}
		reply = n.withNodeReplies(reply, tx, sess)
		if proto == 3 {
			reply = resp3EachReply(reply, tx.order)
		}
		done(reply)
	}
}

// serveDecideTx runs a peer's DECIDETX level W (key token)*W C
// (wordcount words...)*C: a transaction of one key, as the key's deciding
// replica, whatever this node's own view of who decides.
func (n *Node) serveDecideTx(args [][]byte, s *slot) {
	word, wkeys, tokens, cmds, bad := parseTxRequest(args[1:])
	level, err := consistency.ParseLevel(string(word))
	var key []byte
	var scratch [][][]byte
	ok := false
	if bad == "" && err == nil {
		key, scratch, ok = n.consensusTx(level, cmds, wkeys)
	}
	if bad == "" && !ok {
		bad = "ERR troop peer protocol: DECIDETX carries a quorum level and a transaction of one key decided by consensus"
	}
	if bad != "" {
		s.complete(resp.AppendError(nil, bad))
		return
	}
	v := n.view()
	n.decideHere(nil, v, level, []byte("EXEC"), key, n.blockChange(key, scratch, true, tokens), v.replicas(n.token(key)), nil, s.complete)
}

// followTx is what the other replicas run of a transaction the deciding
// replica ran and answered raw: the same commands, but each SPOP as the
// SREM of the members it drew there (as Redis replicates SPOP), so that
// every replica loses the same members; an SPOP that drew none is left out.
func followTx(cmds [][][]byte, raw []byte) [][][]byte {
	v, err := resp.Parse(raw)
	if err != nil || v.Type != resp.Array || len(v.Elems) != len(cmds) {
		return cmds
	}
	var out [][][]byte
	for i, c := range cmds {
		if v.Elems[i].IsError() { // it took nothing
			continue
		}
		switch {
		case bytes.EqualFold(c[0], []byte("SPOP")):
			out = append(out, followOps("SPOP", c, resp.AppendValue(nil, v.Elems[i]))...)
		case bytes.EqualFold(c[0], []byte("XADD")) && !v.Elems[i].IsNull:
			out = append(out, withStreamID(c, v.Elems[i].Str))
		default:
			out = append(out, c)
		}
	}
	return out
}

// withStreamID is XADD args with the ID the deciding replica gave the
// entry in place of the one asked for (*, or ms-*).
func withStreamID(args [][]byte, id []byte) [][]byte {
	out := append([][]byte{}, args...)
	for i := 2; i < len(out); i++ {
		switch strings.ToUpper(string(out[i])) {
		case "NOMKSTREAM":
		case "MAXLEN", "MINID":
			i++
			if i < len(out) && (string(out[i]) == "=" || string(out[i]) == "~") {
				i++
			}
			if i+1 < len(out) && strings.EqualFold(string(out[i+1]), "LIMIT") {
				i += 2
			}
		default:
			out[i] = id
			return out
		}
	}
	return out
}

// withNodeReplies puts the node's own answers to a transaction's commands
// (answeredInTx) into the replicas' reply, each in its place.
func (n *Node) withNodeReplies(raw []byte, tx *txn, sess *session) []byte {
	if len(tx.nodeCmds) == 0 {
		return raw
	}
	v, err := resp.Parse(raw)
	if err != nil || v.Type != resp.Array {
		return raw
	}
	out := resp.AppendArrayHeader(nil, tx.count)
	next := 0
	for i := 0; i < tx.count; i++ {
		if args, ok := tx.nodeCmds[i]; ok {
			out = append(out, n.local(lookup(args[0]), args, sess)...)
			continue
		}
		if next < len(v.Elems) {
			out = resp.AppendValue(out, v.Elems[next])
			next++
		}
	}
	return out
}

// resp3EachReply maps each reply in EXEC's array as RESP3 maps the reply
// of the command that made it (an HGETALL inside a transaction is a map).
func resp3EachReply(raw []byte, cmds [][][]byte) []byte {
	v, err := resp.Parse(raw)
	if err != nil || v.Type != resp.Array || len(v.Elems) != len(cmds) {
		return raw
	}
	out := resp.AppendArrayHeader(nil, len(cmds))
	for i, e := range v.Elems {
		out = append(out, resp3Reply(lookup(cmds[i][0]), cmds[i], resp.AppendValue(nil, e))...)
	}
	return out
}

// runTx runs a transaction on replica m: its own redis-server or a peer.
func (n *Node) runTx(b *batch, m *member, version []byte, wkeys, tokens [][]byte, cmds [][][]byte, done func([]byte, error)) {
	if m.self {
		n.localTx(b, version, wkeys, tokens, cmds, done)
		return
	}
	if m.isDown() {
		done(nil, errMarkedDown(m))
		return
	}
	n.toPeer(b, nil, m, appendTxRequest(nil, "TX", version, wkeys, tokens, cmds), fromPeer(done))
}

// localTx runs a transaction on this node's redis-server.
func (n *Node) localTx(b *batch, version []byte, wkeys, tokens [][]byte, cmds [][][]byte, done func([]byte, error)) {
	var keys, writeKeys [][]byte
	for _, c := range cmds {
		k, write, _ := txCommand(lookup(c[0]), c)
		keys = append(keys, k...)
		if write {
			writeKeys = append(writeKeys, k...)
		}
	}
	route := []byte{}
	if len(keys) > 0 {
		route = keys[0]
	} else if len(wkeys) > 0 {
		route = wkeys[0]
	}
	if len(version) > 0 {
		for _, k := range writeKeys {
			n.versions.record(k, version, mayExpire)
		}
	}
	req := resp.AppendArrayHeader(nil, 3+len(wkeys)+len(writeKeys)+3+len(tokens)+len(cmds)+countWords(cmds))
	req = resp.AppendBulkString(req, "EVALSHA")
	req = resp.AppendBulkString(req, txSHA)
	req = resp.AppendBulkString(req, strconv.Itoa(len(wkeys)+len(writeKeys)))
	for _, k := range wkeys {
		req = resp.AppendBulk(req, k)
	}
	for _, k := range writeKeys {
		req = resp.AppendBulk(req, k)
	}
	req = resp.AppendBulk(req, version)
	req = resp.AppendBulkString(req, strconv.FormatInt(n.cfg.TombstoneGrace.Milliseconds(), 10))
	req = resp.AppendBulkString(req, strconv.Itoa(len(tokens)))
	for _, t := range tokens {
		req = resp.AppendBulk(req, t)
	}
	for _, c := range cmds {
		req = resp.AppendBulkString(req, strconv.Itoa(len(c)))
		for _, a := range c {
			req = resp.AppendBulk(req, a)
		}
	}
	n.toStore(b, nil, n.storeFor(route), req, n.mirrorAfter(n.view(), version, writeKeys, done))
}

func countWords(cmds [][][]byte) int {
	total := 0
	for _, c := range cmds {
		total += len(c)
	}
	return total
}

// appendTxRequest encodes a transaction for a peer:
// OP version W (key token)*W C (wordcount words...)*C.
func appendTxRequest(dst []byte, op string, version []byte, wkeys, tokens [][]byte, cmds [][][]byte) []byte {
	dst = resp.AppendArrayHeader(dst, 4+2*len(wkeys)+len(cmds)+countWords(cmds))
	dst = resp.AppendBulkString(dst, op)
	dst = resp.AppendBulk(dst, version)
	dst = resp.AppendBulkString(dst, strconv.Itoa(len(wkeys)))
	for i := range wkeys {
		dst = resp.AppendBulk(dst, wkeys[i])
		dst = resp.AppendBulk(dst, tokens[i])
	}
	dst = resp.AppendBulkString(dst, strconv.Itoa(len(cmds)))
	for _, c := range cmds {
		dst = resp.AppendBulkString(dst, strconv.Itoa(len(c)))
		for _, a := range c {
			dst = resp.AppendBulk(dst, a)
		}
	}
	return dst
}

// parseTxRequest decodes appendTxRequest's words after OP, checking every
// command as the coordinator did.
func parseTxRequest(args [][]byte) (version []byte, wkeys, tokens [][]byte, cmds [][][]byte, bad string) {
	const prefix = "ERR troop peer protocol: bad transaction: "
	next := func() (int, bool) {
		if len(args) == 0 {
			return 0, false
		}
		v, err := strconv.Atoi(string(args[0]))
		args = args[1:]
		return v, err == nil && v >= 0 && v <= len(args)
	}
	if len(args) < 3 {
		return nil, nil, nil, nil, prefix + "too short"
	}
	version, args = args[0], args[1:]
	w, ok := next()
	if !ok || 2*w > len(args) {
		return nil, nil, nil, nil, prefix + "bad watch count"
	}
	for i := 0; i < w; i++ {
		wkeys, tokens = append(wkeys, args[0]), append(tokens, args[1])
		args = args[2:]
	}
	c, ok := next()
	if !ok {
		return nil, nil, nil, nil, prefix + "bad command count"
	}
	for i := 0; i < c; i++ {
		words, ok := next()
		if !ok || words == 0 {
			return nil, nil, nil, nil, prefix + "bad command length"
		}
		cmd := args[:words:words]
		args = args[words:]
		if _, _, why := txCommand(lookup(cmd[0]), cmd); why != "" {
			return nil, nil, nil, nil, prefix + strings.TrimSpace(strings.TrimPrefix(why, "-"))
		}
		cmds = append(cmds, cmd)
	}
	if len(args) != 0 {
		return nil, nil, nil, nil, prefix + "trailing words"
	}
	return version, wkeys, tokens, cmds, ""
}

// cleanScriptError returns the message of an error reply from a script
// without what only troop's own code should see: the script's hash and
// its line numbers.
func cleanScriptError(raw []byte) string {
	msg := strings.TrimSpace(strings.TrimPrefix(string(raw), "-"))
	for _, re := range scriptDetails {
		msg = re.ReplaceAllString(msg, "")
	}
	return strings.TrimSpace(msg)
}

// scriptDetails are the parts of redis-server's script errors that name
// the script (Redis 6 and 7 spell them differently).
var scriptDetails = []*regexp.Regexp{
	regexp.MustCompile(` ?script: [0-9a-f]{40}, on @user_script:\d+\.?`),
	regexp.MustCompile(`Error running script \(call to f_[0-9a-f]{40}\): `),
	regexp.MustCompile(`@?user_script:\d+: ?`),
	regexp.MustCompile(`f_[0-9a-f]{40}`),
	regexp.MustCompile(`\b[0-9a-f]{40}\b`),
}

// hidesScript says whether an error reply gives away a script's details.
func hidesScript(reply []byte) bool {
	return len(reply) > 0 && reply[0] == '-' && (bytes.Contains(reply, []byte("user_script")) || bytes.Contains(reply, []byte(" script: ")))
}
