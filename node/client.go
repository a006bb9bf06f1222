package node

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
)

// serveClient serves one client connection on the RESP front.
func (n *Node) serveClient(c net.Conn) {
	n.stats.connections.Add(1)
	n.stats.connsAccepted.Add(1)
	sess := &session{readLevel: -1, writeLevel: -1, closed: make(chan struct{})}
	sess.remote, _, _ = net.SplitHostPort(c.RemoteAddr().String())
	sess.client = n.clients.add(c.RemoteAddr().String(), c.LocalAddr().String(), time.Now())
	if tc, plain := c.(*net.TCPConn); plain {
		closed := func() { n.stats.connections.Add(-1); n.clientGone(sess.client) }
		if err := n.pickLoop().serve(tc, sess, n.handleClient, n.cfg.MaxInflightPerConn, closed); err != nil {
			n.log.Debug("client connection", "err", err)
		}
		return // the loop counts the connection out when it closes
	}
	defer n.stats.connections.Add(-1)
	defer n.clientGone(sess.client)
	n.serveConn(c, n.cfg.MaxInflightPerConn, sess, n.handleClient)
}

// clientGone forgets a closed client connection and its subscriptions.
func (n *Node) clientGone(c *clientConn) {
	n.clients.remove(c)
	n.pubsub.drop(c)
}

// levelFor is the session's level when it set one, else the node's.
func (n *Node) levelFor(sess *session, write bool) consistency.Level {
	l := sess.readLevel
	if write {
		l = sess.writeLevel
	}
	if l < 0 {
		return n.level(write)
	}
	return l
}

func (n *Node) handleClient(cmd resp.Command, s *slot, sess *session, b *batch) {
	args := cmd.Args
	c := lookup(args[0])
	s.replies, s.cmd = &n.stats.replies, noCommand
	if sess.replyMode != replyOn || c != nil && c.name == "CLIENT" {
		s.quiet, sess.replyMode = sess.replyMode.next(c, args, sess.tx != nil)
	}
	if reply := n.authorize(c, args, sess); reply != nil {
		if sess.tx != nil {
			sess.tx.dirty = true // EXEC then aborts, as in Redis
		}
		n.reject(c, s, reply)
		return
	}
	if sess.proto == 3 {
		s.conv = func(reply []byte) []byte { return resp3Reply(c, args, reply) }
	}
	if reply := n.refusal(c, args, sess); reply != nil { // OOM, NOREPLICAS or BUSY, as Redis refuses it (limits.go)
		switch {
		case c.name == "EXEC" && sess.tx != nil: // the transaction ends, as Redis's execCommandAbort ends it
			sess.tx, sess.watches = nil, nil
			sess.publish()
			reply = append([]byte("-EXECABORT Transaction discarded because of: "), reply[1:]...)
		case sess.tx != nil:
			sess.tx.dirty = true
		}
		n.reject(c, s, reply)
		return
	}
	if sess.client != nil && c != nil {
		sess.client.lastCmd.Store(c)
		sess.client.lastAt.Store(b.started().UnixNano())
	}
	if sess.tx != nil && (c == nil || c.kind != kindTransaction || c.name == "UNWATCH") && (c == nil || c.name != "QUIT") {
		reply := n.queue(c, args, sess)
		if reply[0] == '-' { // refused at MULTI, as Redis rejects it
			n.reject(c, s, reply)
			return
		}
		n.stats.commands[c.id].Add(1)
		s.complete(reply)
		return
	}
	if c == nil {
		s.complete(unknownCommand(args))
		return
	}
	if sess.subscriptions > 0 && sess.proto != 3 && !subscribedOnly[c.name] {
		n.reject(c, s, resp.AppendError(nil, fmt.Sprintf("ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context", strings.ToLower(c.name))))
		return
	}
	if !c.arityOK(len(args)) {
		n.reject(c, s, resp.AppendError(nil, fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(c.name))))
		return
	}
	n.stats.commands[c.id].Add(1)
	s.cmd = c.id
	switch c.kind {
	case kindLocal:
		n.runLocal(c, args, sess, b, s.complete)
		return
	case kindUnsupported:
		s.complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: '%s' is not supported: %s", c.name, c.why)))
		return
	case kindTransaction:
		n.transaction(c, args, sess, b, s)
		return
	}
	write := c.writesFor(args)
	if reply := n.refuseInState(write); reply != nil {
		s.complete(reply)
		return
	}
	keys := args[1:2]
	if c.keys != nil {
		var bad string
		if keys, bad = c.keys(args); bad != "" {
			if bad == badNumkeys {
				n.toStoreCommand(b, nil, n.store[0], args, func(raw []byte, err error) {
					if err != nil || len(raw) == 0 || raw[0] != '-' {
						raw = resp.AppendError(nil, "ERR "+bad) // it ran after all, or redis-server is down
					}
					s.complete(raw)
				})
				return
			}
			s.complete(resp.AppendError(nil, "ERR "+bad))
			return
		}
	}
	for _, k := range keys {
		if bytes.HasPrefix(k, []byte(reservedPrefix)) {
			s.complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: keys starting with %q are reserved for troop", reservedPrefix)))
			return
		}
	}
	if write && len(keys) > 0 && c.kind != kindScript && n.tooFewReplicas(keys[0]) { // scripts: scriptRefusal
		n.reject(c, s, resp.AppendError(nil, noReplicasError))
		return
	}
	if write && len(keys) > 0 {
		n.versions.prefetch(keys[0]) // the write's version is recorded for it once the write is routed
	}
	sess.gate.await(keys, b)
	level := n.levelFor(sess, write)
	var tr *trace
	if sess.fit != nil {
		tr = n.traceFor(sess, c.name, level)
	}
	var h *hold
	if write {
		h = s.hold()
		defer h.done()
	}
	s.measure(n.stats, write, level, b.started())
	done := traced(tr, s.done)
	if write && c.kind != kindSplit { // a split command's parts are notified by split
		if flags := n.notify.flags.Load(); flags != 0 {
			done = n.notifying(flags, args, done)
		}
	}
	if write && n.blockers.count.Load() > 0 { // a pop blocked on one of the keys looks again before this answers
		inner := done
		done = func(reply []byte) { n.blockers.wake(keys).after(func() { inner(reply) }) }
	}
	if bad := n.sortPatternsShare(c, args); bad != "" {
		done(resp.AppendError(nil, bad))
		return
	}
	switch c.kindFor(args) {
	case kindRead:
		n.read(tr, level, keys, args, b, done)
	case kindWrite:
		n.write(tr, level, c, keys, args, &sess.gate, h, b, done)
	case kindMultiRead, kindMultiWrite:
		if !n.sameReplicas(keys) {
			done(resp.AppendError(nil, fmt.Sprintf("ERR troop: the keys of '%s' belong to different nodes, and troop does not split it", c.name)))
			return
		}
		if write {
			n.write(tr, level, c, keys, args, &sess.gate, h, b, done)
		} else {
			n.read(tr, level, keys, args, b, done)
		}
	case kindSplit:
		n.split(tr, c, level, keys, args, &sess.gate, h, b, done)
	case kindDrawn:
		n.pop(tr, level, c, keys, args, &sess.gate, h, b, done)
	case kindBlocking:
		n.blocking(tr, level, c, keys, args, sess, h, done)
	case kindScript:
		n.script(tr, level, c, keys, args, &sess.gate, h, b, done)
	case kindCopied:
		if !n.sameReplicas(keys) {
			done(resp.AppendError(nil, fmt.Sprintf("ERR troop: the keys of '%s' belong to different nodes, and troop does not split it", c.name)))
			return
		}
		n.decided(tr, level, c, keys, args, &sess.gate, h, b, done)
	}
}

// reject answers a call refused before it ran: Redis counts it as the
// command's rejected call, not as a call that failed.
func (n *Node) reject(c *command, s *slot, reply []byte) {
	if c != nil {
		n.stats.replies.reject(c.id, reply)
		s.replies = nil // counted
	}
	s.complete(reply)
}

// sortPatternsShare checks that the keys SORT's BY and GET patterns name
// have the sorted key's replicas: a pattern whose * is inside the hash
// tag could name keys anywhere, and is refused, as is one whose keys
// live elsewhere. Redis Cluster has the same rule.
func (n *Node) sortPatternsShare(c *command, args [][]byte) string {
	if c.name != "SORT" && c.name != "SORT_RO" {
		return ""
	}
	_, patterns := sortKeys(args)
	for _, p := range patterns {
		if key, _, _ := bytes.Cut(p, []byte("->")); bytes.IndexByte(ring.Tag(key, n.cfg.HashTag), '*') >= 0 || !n.sameReplicas([][]byte{args[1], key}) {
			return fmt.Sprintf("ERR troop: the keys of %s's pattern '%s' may belong to other nodes than '%s': give the pattern the key's hash tag outside its *", c.name, resp.Printable(p), resp.Printable(args[1]))
		}
	}
	return ""
}

// runLocal answers a command the node handles itself, through complete.
func (n *Node) runLocal(c *command, args [][]byte, sess *session, b *batch, complete func([]byte)) {
	switch c.name {
	case "TROOP":
		n.troopCommand(args, sess, complete)
	case "SCAN":
		n.scanCommand(args, b, complete)
	case "KEYS":
		n.keysCommand(args, b, complete)
	case "FLUSHALL", "FLUSHDB":
		n.flush(args, b, complete)
	case "FUNCTION":
		n.functionCommand(args, b, complete)
	case "SCRIPT":
		n.scriptCommand(args, b, complete)
	case "CONFIG":
		n.configCommand(args, b, complete)
	case "DBSIZE":
		n.keyspace(true, "", complete)
	case "RANDOMKEY":
		n.randomKey(b, complete)
	case "PUBLISH", "SPUBLISH":
		n.publish(c.name == "SPUBLISH", args[1], args[2], b, complete)
	case "PUBSUB":
		n.pubsubCommand(args, b, complete)
	case "INFO":
		n.info(args[1:], b, complete)
	default:
		complete(n.local(c, args, sess))
	}
}

// reservedPrefix covers the version keys troop keeps beside values.
const reservedPrefix = "__troop:"

func unknownCommand(args [][]byte) []byte {
	var rest []string
	for _, a := range args[1:] {
		rest = append(rest, "'"+resp.Printable(a)+"'")
	}
	return resp.AppendError(nil, fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s", resp.Printable(args[0]), strings.Join(rest, " ")))
}

func (n *Node) refuseInState(write bool) []byte {
	if r := n.view().refuse; r != nil { // joining, or removed
		return r
	}
	switch n.state.Load() {
	case stateStandby:
		return resp.AppendError(nil, "ERR troop: node is in standby and serves no requests")
	case stateWritesOnly:
		if !write {
			return resp.AppendError(nil, "ERR troop: node is in writes_only state and serves no reads")
		}
	}
	return nil
}

// split runs a multi-key command as one single-key command per key, each
// routed to its own replicas at the same level, and merges the replies. If
// any key fails, the whole command answers an error naming it: no silent
// partial results.
func (n *Node) split(tr *trace, c *command, level consistency.Level, keys [][]byte, args [][]byte, g *keyGate, h *hold, b *batch, done replyFunc) {
	results := make([][]byte, len(keys))
	var mu sync.Mutex
	remaining := len(keys)
	finish := func(i int) replyFunc {
		return func(reply []byte) {
			mu.Lock()
			results[i] = reply
			remaining--
			last := remaining == 0
			mu.Unlock()
			if last {
				n.notifySplit(c, keys, args, results)
				done(mergeSplit(c, keys, results))
			}
		}
	}
	set := commandTable["SET"]
	for i, k := range keys {
		if i > 0 {
			g.await(keys[i:i+1], b) // the same key twice: the later part goes after
		}
		switch c.name {
		case "MGET":
			n.read(tr, level, keys[i:i+1], [][]byte{[]byte("GET"), k}, b, finish(i))
		case "EXISTS", "TOUCH":
			n.read(tr, level, keys[i:i+1], [][]byte{args[0], k}, b, finish(i))
		case "MSET":
			n.write(tr, level, set, keys[i:i+1], [][]byte{[]byte("SET"), k, args[2+2*i]}, g, h, b, finish(i))
		default: // DEL, UNLINK
			n.write(tr, level, c, keys[i:i+1], [][]byte{args[0], k}, g, h, b, finish(i))
		}
	}
}

func mergeSplit(c *command, keys, results [][]byte) []byte {
	for i, r := range results {
		if len(r) == 0 || r[0] != '-' {
			continue
		}
		if c.name == "MGET" && bytes.HasPrefix(r, []byte("-WRONGTYPE")) {
			results[i] = resp.AppendNullBulk(nil) // MGET answers nil for non-strings
			continue
		}
		return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s failed on key '%s': %s", c.name, resp.Printable(keys[i]), strings.TrimSpace(string(r[1:]))))
	}
	switch c.name {
	case "MGET":
		out := resp.AppendArrayHeader(nil, len(results))
		for _, r := range results {
			out = append(out, r...)
		}
		return out
	case "MSET":
		return resp.AppendSimple(nil, "OK")
	}
	var sum int64
	for _, r := range results {
		v, err := resp.Parse(r)
		if err == nil {
			sum += v.Int
		}
	}
	return resp.AppendInt(nil, sum)
}

// local answers the commands the node handles itself.
func (n *Node) local(c *command, args [][]byte, sess *session) []byte {
	switch c.name {
	case "PING":
		if len(args) > 2 {
			return resp.AppendError(nil, "ERR wrong number of arguments for 'ping' command")
		}
		if sess.subscriptions > 0 && sess.proto != 3 { // as Redis answers a subscriber
			msg := []byte{}
			if len(args) == 2 {
				msg = args[1]
			}
			return appendPush(nil, 2, -1, []byte("pong"), msg)
		}
		if len(args) == 2 {
			return resp.AppendBulk(nil, args[1])
		}
		return resp.AppendSimple(nil, "PONG")
	case "ECHO":
		return resp.AppendBulk(nil, args[1])
	case "SUBSCRIBE", "UNSUBSCRIBE":
		return n.subscribe(subChannel, c.name == "UNSUBSCRIBE", args[1:], sess)
	case "PSUBSCRIBE", "PUNSUBSCRIBE":
		return n.subscribe(subPattern, c.name == "PUNSUBSCRIBE", args[1:], sess)
	case "SSUBSCRIBE", "SUNSUBSCRIBE":
		return n.subscribe(subShard, c.name == "SUNSUBSCRIBE", args[1:], sess)
	case "QUIT":
		sess.quit = true
		return resp.AppendSimple(nil, "OK")
	case "UNWATCH": // inside a transaction: the watches ended at EXEC
		return resp.AppendSimple(nil, "OK")
	case "SELECT": // database 0 only: the others of each redis-server are not replicated
		db, err := strconv.Atoi(string(args[1]))
		switch {
		case err != nil:
			return resp.AppendError(nil, "ERR value is not an integer or out of range")
		case db != 0:
			return resp.AppendError(nil, "ERR DB index is out of range (troop serves database 0 only)")
		}
		return resp.AppendSimple(nil, "OK")
	case "TIME":
		now := time.Now()
		out := resp.AppendArrayHeader(nil, 2)
		out = resp.AppendBulkString(out, strconv.FormatInt(now.Unix(), 10))
		return resp.AppendBulkString(out, strconv.Itoa(now.Nanosecond()/1000))
	case "AUTH":
		return n.authCommand(args, sess)
	case "INFO": // inside MULTI: without the redis-server's figures
		return resp.AppendBulkString(nil, n.infoText(args[1:], ""))
	case "HELLO":
		return n.hello(args, sess)
	case "CLIENT":
		if reply, ok := n.clientAdmin(args, sess); ok {
			return reply
		}
		return clientCommand(args, sess)
	case "COMMAND":
		return commandCommand(args)
	case "DYNO_CONFIG:CONN_CONSISTENCY":
		l, err := consistency.ParseLevel(string(args[1]))
		if err != nil {
			return resp.AppendError(nil, "ERR troop: "+err.Error())
		}
		sess.readLevel, sess.writeLevel = l, l
		return resp.AppendSimple(nil, "OK")
	}
	return resp.AppendError(nil, "ERR troop: unhandled command "+c.name)
}

func clientCommand(args [][]byte, sess *session) []byte {
	if len(args) < 2 {
		return resp.AppendError(nil, "ERR wrong number of arguments for 'client' command")
	}
	switch strings.ToUpper(string(args[1])) {
	case "SETNAME":
		if len(args) != 3 {
			return resp.AppendError(nil, "ERR wrong number of arguments for 'client|setname' command")
		}
		for _, c := range args[2] {
			if c <= ' ' || c > '~' { // as Redis: no spaces, newlines or special characters
				return resp.AppendError(nil, "ERR Client names cannot contain spaces, newlines or special characters.")
			}
		}
		sess.name = string(args[2])
		sess.publish()
		return resp.AppendSimple(nil, "OK")
	case "SETINFO", "NO-EVICT", "NO-TOUCH":
		return resp.AppendSimple(nil, "OK")
	case "REPLY": // handleClient keeps the mode (replyMode.next); the replies of OFF and SKIP are dropped
		if len(args) != 3 {
			return resp.AppendError(nil, "ERR wrong number of arguments for 'client|reply' command")
		}
		if _, ok := replyModes[strings.ToUpper(string(args[2]))]; ok {
			return resp.AppendSimple(nil, "OK")
		}
		return resp.AppendError(nil, "ERR syntax error")
	case "GETNAME":
		if sess.name == "" {
			return resp.AppendNullBulk(nil)
		}
		return resp.AppendBulkString(nil, sess.name)
	case "ID":
		return resp.AppendInt(nil, sess.client.number())
	}
	return resp.AppendError(nil, fmt.Sprintf("ERR troop: 'CLIENT %s' is not supported", strings.ToUpper(resp.Printable(args[1]))))
}

// commandCommand answers enough of COMMAND for redis-cli and client
// libraries: the table with arities, COUNT, INFO, and no DOCS.
func commandCommand(args [][]byte) []byte {
	sub := ""
	if len(args) > 1 {
		sub = strings.ToUpper(string(args[1]))
	}
	entry := func(out []byte, c *command) []byte {
		first, last := 1, 1
		switch c.kind {
		case kindLocal, kindUnsupported, kindScript, kindCopied:
			first, last = 0, 0
		case kindMultiRead, kindMultiWrite, kindSplit:
			last = -1
		}
		flag := "readonly"
		if c.writes() {
			flag = "write"
		}
		out = resp.AppendArrayHeader(out, 6)
		out = resp.AppendBulkString(out, strings.ToLower(c.name))
		out = resp.AppendInt(out, int64(c.arity))
		out = resp.AppendArrayHeader(out, 1)
		out = resp.AppendSimple(out, flag)
		out = resp.AppendInt(out, int64(first))
		out = resp.AppendInt(out, int64(last))
		return resp.AppendInt(out, 1)
	}
	switch sub {
	case "":
		var cmds []*command
		for _, c := range commandTable {
			if c.kind != kindUnsupported {
				cmds = append(cmds, c)
			}
		}
		out := resp.AppendArrayHeader(nil, len(cmds))
		for _, c := range cmds {
			out = entry(out, c)
		}
		return out
	case "COUNT":
		return resp.AppendInt(nil, int64(len(commandTable)))
	case "DOCS":
		return resp.AppendArrayHeader(nil, 0)
	case "INFO":
		out := resp.AppendArrayHeader(nil, len(args)-2)
		for _, name := range args[2:] {
			if c := lookup(name); c != nil && c.kind != kindUnsupported {
				out = entry(out, c)
			} else {
				out = resp.AppendArrayHeader(out, -1)
			}
		}
		return out
	}
	return resp.AppendError(nil, fmt.Sprintf("ERR troop: 'COMMAND %s' is not supported", resp.Printable(args[1])))
}

// troopCommand is troop's own command, answered through complete: TROOP
// CONSISTENCY (below), TROOP FIT and TROOP LINEAGE (fit.go).
func (n *Node) troopCommand(args [][]byte, sess *session, complete func([]byte)) {
	sub := ""
	if len(args) >= 2 {
		sub = strings.ToUpper(string(args[1]))
	}
	switch sub {
	case "CONSISTENCY":
		complete(n.troopConsistency(args, sess))
	case "FIT":
		complete(troopFit(args, sess))
	case "LINEAGE":
		troopLineage(args, sess, complete)
	default:
		complete(resp.AppendError(nil, "ERR troop: usage: TROOP CONSISTENCY [READ|WRITE] [DC_ONE|DC_QUORUM|DC_SAFE_QUORUM|RESET], TROOP FIT [SCOPE|RESET], TROOP LINEAGE [ON|OFF]"))
	}
}

// troopConsistency is TROOP CONSISTENCY:
//
//	TROOP CONSISTENCY                  -> [read level, write level] of this connection
//	TROOP CONSISTENCY level            -> set both for this connection
//	TROOP CONSISTENCY READ|WRITE level -> set one
//	TROOP CONSISTENCY RESET            -> follow the node's levels again
func (n *Node) troopConsistency(args [][]byte, sess *session) []byte {
	switch len(args) {
	case 2:
		out := resp.AppendArrayHeader(nil, 2)
		out = resp.AppendBulkString(out, n.levelFor(sess, false).String())
		return resp.AppendBulkString(out, n.levelFor(sess, true).String())
	case 3:
		if strings.EqualFold(string(args[2]), "RESET") {
			sess.readLevel, sess.writeLevel = -1, -1
			return resp.AppendSimple(nil, "OK")
		}
		l, err := consistency.ParseLevel(string(args[2]))
		if err != nil {
			return resp.AppendError(nil, "ERR troop: "+err.Error())
		}
		sess.readLevel, sess.writeLevel = l, l
		return resp.AppendSimple(nil, "OK")
	case 4:
		l, err := consistency.ParseLevel(string(args[3]))
		if err != nil {
			return resp.AppendError(nil, "ERR troop: "+err.Error())
		}
		switch strings.ToUpper(string(args[2])) {
		case "READ":
			sess.readLevel = l
		case "WRITE":
			sess.writeLevel = l
		default:
			return resp.AppendError(nil, fmt.Sprintf("ERR troop: want READ or WRITE, got '%s'", resp.Printable(args[2])))
		}
		return resp.AppendSimple(nil, "OK")
	}
	return resp.AppendError(nil, "ERR wrong number of arguments for 'troop consistency' command")
}
