package node

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// Scripts (EVAL, EVALSHA, FCALL) are routed by their keys, as Dynomite and
// Envoy route them: all of a script's keys must share their replicas (a
// hash tag arranges it). A script is a read-modify-write, so it runs where
// the store's other read-modify-writes run, on the deciding replica
// (drawn.go, transaction.go), and the other replicas then take its effect.
//
// The effect replicated is the resulting value of each of the script's
// keys, not the script: a Redis 7 script may draw at random (SPOP,
// SRANDMEMBER), read the clock (TIME) or see a replica's other state, and
// then two replicas running it would diverge. The deciding replica runs
//
//	MULTI; EVAL ...; EVALSHA <effects> keys version; EXEC
//
// in one request, so nothing comes between the script and the read of its
// keys' values (DUMP and PTTL), which also gives each key the write's
// version. The other replicas then RESTORE each key (or DEL it, when the
// script left it missing), as one transaction with the same version. A
// script that writes a key it did not declare writes it on the deciding
// replica only, as Redis Cluster refuses such a script; declare every key.
//
// At a quorum level, a script or a stream write of one key is one change
// of it by consensus instead (consensusScript).

// scriptEffects answers {dump or false, pttl} for each key of KEYS, and
// gives each the version ARGV[1] as txScript does.
const scriptEffects = `
local v, grace, first = ARGV[1], tonumber(ARGV[2]), 1
local out = {}
for i = 1, #KEYS do
  local d = redis.call('DUMP', KEYS[i])
  local ttl = redis.call('PTTL', KEYS[i])
  out[i] = {d or false, ttl}
end
` + versionKeys + `
return out
`

// versionKeys gives each key of KEYS, from the index first on (v, grace
// and first are locals of the script it ends), the version v unless it holds a newer one, with the
// tombstone grace for a missing key and the key's expiry plus the grace
// for an expiring one.
const versionKeys = `
if v ~= '' then
  for k = first, #KEYS do
    local vk = '` + VersionPrefix + `' .. KEYS[k]
    local nv = v
    local cur = redis.call('GET', vk)
    if cur and cur > v then nv = cur end
    local ttl = redis.call('PTTL', KEYS[k])
    if ttl == -2 then
      redis.call('SET', vk, nv, 'PX', grace)
    elseif ttl == -1 or ttl + grace > 9007199254740991 then
      redis.call('SET', vk, nv)
    else
      redis.call('SET', vk, nv, 'PX', ttl + grace)
    end
  end
end
`

var scriptEffectsSHA = scriptSHA(scriptEffects)

// scriptKeys are the keys of EVAL, EVALSHA, FCALL and their _RO forms:
// numkeys, then that many keys. None is allowed; a negative or too large
// numkeys is redis-server's to refuse, in its words.
func scriptKeys(a [][]byte) ([][]byte, string) {
	n, err := strconv.Atoi(string(a[2]))
	switch {
	case err != nil:
		return nil, "value is not an integer or out of range"
	case n < 0:
		return nil, "Number of keys can't be negative"
	case 3+n > len(a):
		return nil, "Number of keys can't be greater than number of args"
	}
	return a[3 : 3+n], ""
}

// script runs EVAL, EVALSHA or FCALL (and their read-only forms) on the
// replicas of its keys. A script with no keys cannot be routed: it runs
// read-only (as EVAL_RO ...) on this node's redis-server, which refuses
// any write it tries.
func (n *Node) script(tr *trace, level consistency.Level, c *command, keys, args [][]byte, g *keyGate, h *hold, b *batch, done replyFunc) {
	c, args, done, refused := n.scriptRefusal(c, keys, args, done) // NOREPLICAS or OOM, as Redis refuses it (limits.go)
	if refused != nil {
		done(refused)
		return
	}
	if len(keys) == 0 { // read-only, on this node's redis-server: a write it tried would reach no other replica
		ro := append([][]byte{[]byte(strings.TrimSuffix(c.name, "_RO") + "_RO")}, args[1:]...)
		n.toStoreCommand(b, nil, n.store[0], ro, func(raw []byte, err error) { done(storeReply(raw, err, n.cfg.Name)) })
		return
	}
	if !n.sameReplicas(keys) {
		done(resp.AppendError(nil, fmt.Sprintf("ERR troop: the keys of '%s' belong to different nodes, and a script runs on the replicas of its keys: give them one hash tag", c.name)))
		return
	}
	if !c.writes() { // a read-only script: the own rack's replica, or the next
		reps := n.replicas(keys[0])
		n.onNode(b, reps[0], args, func(raw []byte, err error) { done(storeReply(raw, err, replicaName(reps[0]))) })
		return
	}
	n.decided(tr, level, c, keys, args, g, h, b, done)
}

// decided runs a command (a script, a stream write) on the deciding
// replica of its keys, which share their replicas, with a read of the
// values it leaves in them, and has the other replicas take those values,
// with one version (see the top of this file). One of one key at a quorum
// level is decided by consensus instead (consensusScript), holding the
// key in g until it is.
func (n *Node) decided(tr *trace, level consistency.Level, c *command, keys, args [][]byte, g *keyGate, h *hold, b *batch, done replyFunc) {
	if scratch, ok := n.consensusScript(level, c, keys, args); ok {
		n.byConsensus(tr, level, keys[0], args[0], n.blockChange(keys[0], [][][]byte{scratch}, false, nil), decideRequest(level, args), g, h, done)
		return
	}
	if c.writes() && n.transactCommand(tr, level, keys, args, g, h, done) {
		return
	}
	v := n.view()
	reps := v.replicas(n.token(keys[0]))
	if !reps[0].self {
		n.stats.forwarded.Add(1)
	}
	d, di := n.decider(reps)
	version := []byte{}
	if n.cfg.Versions {
		version = n.clock.Next()
	}
	h.add(1)
	decided := func(raw []byte, err error) {
		defer h.done()
		if err != nil {
			n.countFailure(err)
			n.stats.quorumFailures.Add(1)
			done(resp.AppendError(nil, fmt.Sprintf("ERR troop: %s failed, outcome unknown: the replica that decides it, %s, did not answer, and no other replica got it (%v)", c.name, replicaName(d), err)))
			return
		}
		raw, consumerEvents := consumerOutcome(args, keys, raw)
		reply, follow, bad := scriptOutcome(keys, raw)
		if bad == "" && len(consumerEvents) > 0 {
			n.publishEvents(n.notify.flags.Load(), consumerEvents)
		}
		if bad != "" || len(reps) == 1 || follow == nil {
			if bad != "" {
				reply = resp.AppendError(nil, "ERR troop: "+c.name+": "+bad)
			}
			done(reply)
			return
		}
		w := n.newWriteQuorum(tr, level, args[0], reps, func(r []byte) {
			if len(r) == 0 || r[0] != '-' {
				r = reply // the script's answer, not the followers'
			}
			done(r)
		})
		n.follow(tr, v, reps, di, version, follow, n.token(keys[0]), w, h)
		w.answer(di, []byte("+OK\r\n"), nil)
	}
	if d.self {
		n.localScript(b, version, keys, args, decided)
		return
	}
	if d.isDown() {
		decided(nil, errMarkedDown(d))
		return
	}
	n.toPeer(b, tr, d, appendPeerRequest(nil, "SCRIPT", version, args), fromPeer(decided))
}

// consensusScript reports whether a script that writes (EVAL, EVALSHA,
// FCALL), a stream write, or a write whose several key places all name one
// key (LMOVE l l, SMOVE s s m, SUNIONSTORE k k ...) is decided by consensus
// at level, as a read-modify-write of its one key is (consensusWrite): at
// a quorum level, with versions, when all its keys are one and the node
// can run it on that key in the scratch key (scratchArgs), which it
// returns.
func (n *Node) consensusScript(level consistency.Level, c *command, keys, args [][]byte) ([][]byte, bool) {
	if !n.byConsensusAt(level) || len(keys) == 0 || !c.writes() {
		return nil, false
	}
	ofOneKey := len(keys) > 1 && c.kind != kindSplit && len(distinctKeys(keys)) == 1
	if c.kind != kindScript && c.kind != kindCopied && !ofOneKey {
		return nil, false
	}
	return scratchArgs(args, keys, keys[0])
}

// storeReply is a replica's reply, or an error saying it could not answer.
func storeReply(raw []byte, err error, who string) []byte {
	if err != nil {
		return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s could not answer: %v", who, err))
	}
	return raw
}

// localScript runs a script on this node's redis-server with its effects
// read in the same transaction (see the top of this file); done gets
// EXEC's reply.
func (n *Node) localScript(b *batch, version []byte, keys, args [][]byte, done func([]byte, error)) {
	if len(version) > 0 {
		for _, k := range keys {
			n.versions.record(k, version, mayExpire)
		}
	}
	grace := strconv.FormatInt(n.cfg.TombstoneGrace.Milliseconds(), 10)
	var probes [][][]byte // the consumer a stream command may make or delete, looked at before and after (notify.go)
	if flags := n.notify.flags.Load(); flags&notifyStream != 0 && flags&(notifyKeyspace|notifyKeyevent) != 0 {
		probes = consumerProbes(args, keys)
	}
	appendReq := func(dst []byte) []byte {
		dst = resp.AppendCommandStrings(dst, "MULTI")
		dst = appendProbes(dst, probes)
		dst = resp.AppendCommand(dst, args...)
		dst = resp.AppendArrayHeader(dst, 5+len(keys))
		dst = resp.AppendBulkString(dst, "EVALSHA")
		dst = resp.AppendBulkString(dst, scriptEffectsSHA)
		dst = resp.AppendBulkString(dst, strconv.Itoa(len(keys)))
		for _, k := range keys {
			dst = resp.AppendBulk(dst, k)
		}
		dst = resp.AppendBulk(dst, version)
		dst = resp.AppendBulkString(dst, grace)
		dst = appendProbes(dst, probes)
		return resp.AppendCommandStrings(dst, "EXEC")
	}
	l := n.storeFor(keys[0])
	if err := l.TrySendAppend(4+2*len(probes), appendReq, n.mirrorAfter(n.view(), version, keys, done)); err != nil {
		done(nil, err)
		return
	}
	b.add(l)
}

// scriptOutcome reads EXEC's reply to the deciding replica's run: the
// script's reply for the client, and what the other replicas run to hold
// what it left in its keys (nil when the script did not run: NOSCRIPT, or
// a numkeys redis-server refused).
func scriptOutcome(keys [][]byte, raw []byte) (reply []byte, follow [][][]byte, bad string) {
	v, err := resp.Parse(raw)
	if err != nil || v.Type != resp.Array || len(v.Elems) != 2 {
		if err == nil && v.IsError() {
			return nil, nil, cleanScriptError(raw)
		}
		return nil, nil, fmt.Sprintf("unexpected answer from redis-server: %.200q", raw)
	}
	reply = resp.AppendValue(nil, v.Elems[0])
	if r := v.Elems[0]; r.IsError() && (bytes.HasPrefix(r.Str, []byte("NOSCRIPT")) || bytes.Contains(r.Str, []byte("Number of keys"))) {
		return reply, nil, ""
	}
	effects := v.Elems[1]
	if effects.IsError() || len(effects.Elems) != len(keys) {
		return nil, nil, "reading the script's keys failed: " + string(effects.Str)
	}
	for i, e := range effects.Elems {
		if len(e.Elems) != 2 || e.Elems[0].IsNull {
			follow = append(follow, [][]byte{[]byte("DEL"), keys[i]})
			continue
		}
		ttl := max(e.Elems[1].Int, 0) // -1: no expiry, which RESTORE spells 0
		follow = append(follow, [][]byte{[]byte("RESTORE"), keys[i], []byte(strconv.FormatInt(ttl, 10)), e.Elems[0].Str, []byte("REPLACE")})
	}
	return reply, follow, ""
}

// scriptCommand answers SCRIPT: LOAD loads the script into every node's
// redis-server, so that EVALSHA runs through any node (the deciding
// replica of its keys has it); EXISTS asks this node's; FLUSH empties
// every node's, troop's own scripts loaded again in the same transaction.
func (n *Node) scriptCommand(args [][]byte, b *batch, complete func([]byte)) {
	switch sub := strings.ToUpper(string(args[1])); {
	case sub == "LOAD" && len(args) == 3:
		sha := scriptSHA(string(args[2]))
		n.onEveryNode("SCRIPT LOAD", args, b, func(reply []byte) {
			if len(reply) > 0 && reply[0] == '-' {
				complete(reply)
				return
			}
			complete(resp.AppendBulkString(nil, sha))
		})
	case sub == "KILL" && len(args) == 2:
		n.killScript("SCRIPT", b, complete)
	case sub == "EXISTS" && len(args) >= 3:
		n.onNode(b, n.self, args, func(raw []byte, err error) { complete(storeReply(raw, err, n.cfg.Name)) })
	case sub == "FLUSH" && len(args) <= 3:
		if len(args) == 3 && !strings.EqualFold(string(args[2]), "SYNC") && !strings.EqualFold(string(args[2]), "ASYNC") {
			complete(resp.AppendError(nil, "ERR SCRIPT FLUSH only support SYNC|ASYNC option"))
			return
		}
		members := n.view().members
		n.onNodesWith(b, members, func(m *member, done func([]byte, error)) {
			switch {
			case m.self:
				n.flushScriptsLocal(b, done)
			case m.isDown():
				done(nil, errMarkedDown(m))
			default:
				n.toPeer(b, nil, m, resp.AppendCommandStrings(nil, "SCRIPTFLUSH"), fromPeer(done))
			}
		}, func(resp.Value) {}, func(failures []string) {
			if len(failures) > 0 {
				complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: SCRIPT FLUSH reached %d of %d nodes; it was not applied on: %s", len(members)-len(failures), len(members), strings.Join(failures, "; "))))
				return
			}
			complete(resp.AppendSimple(nil, "OK"))
		})
	default:
		complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: 'SCRIPT %s' is not supported: SCRIPT LOAD, EXISTS, FLUSH and KILL are", strings.ToUpper(resp.Printable(args[1])))))
	}
}

// flushScriptsLocal empties this node's redis-server of scripts and loads
// troop's own again, in one transaction: troop's requests never find them
// missing.
func (n *Node) flushScriptsLocal(b *batch, done func([]byte, error)) {
	appendReq := func(dst []byte) []byte {
		dst = resp.AppendCommandStrings(dst, "MULTI")
		dst = resp.AppendCommandStrings(dst, "SCRIPT", "FLUSH")
		return resp.AppendCommandStrings(appendLoadScripts(dst), "EXEC")
	}
	l := n.store[0]
	if err := l.TrySendAppend(3+len(troopScripts), appendReq, func(raw []byte, err error) {
		if err == nil && (len(raw) == 0 || raw[0] != '*') {
			err = fmt.Errorf("SCRIPT FLUSH: redis-server answered %.200q", raw)
		}
		done(resp.AppendSimple(nil, "OK"), err)
	}); err != nil {
		done(nil, err)
		return
	}
	b.add(l)
}

// functionCommand answers FUNCTION: LOAD, DELETE and RESTORE change every
// node's redis-server (the answer is this node's), FLUSH empties every
// node's (flush, with troop_allow_flush), LIST, DUMP and STATS read this
// node's. FCALL then runs a function as EVAL runs a script.
func (n *Node) functionCommand(args [][]byte, b *batch, complete func([]byte)) {
	switch strings.ToUpper(string(args[1])) {
	case "FLUSH":
		n.flush(args[1:], b, complete)
	case "LIST", "DUMP":
		n.onNode(b, n.self, args, func(raw []byte, err error) { complete(storeReply(raw, err, n.cfg.Name)) })
	case "STATS": // over the side connection, as a script that runs holds its request path's (limits.go)
		n.server.side.Do(resp.AppendCommand(nil, args...), func(raw []byte, err error) { complete(storeReply(raw, err, n.cfg.Name)) })
	case "KILL":
		if len(args) != 2 {
			complete(resp.AppendError(nil, "ERR wrong number of arguments for 'function|kill' command"))
			return
		}
		n.killScript("FUNCTION", b, complete)
	case "LOAD", "DELETE", "RESTORE":
		members := n.view().members
		var mu sync.Mutex
		var mine []byte // this node's answer: the library's name, or OK
		n.onNodesWith(b, members, func(m *member, done func([]byte, error)) {
			n.onNode(b, m, args, func(raw []byte, err error) {
				if m.self && err == nil {
					mu.Lock()
					mine = raw
					mu.Unlock()
				}
				done(raw, err)
			})
		}, func(resp.Value) {}, func(failures []string) {
			if len(failures) > 0 {
				complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: FUNCTION %s reached %d of %d nodes: %s", strings.ToUpper(string(args[1])), len(members)-len(failures), len(members), strings.Join(failures, "; "))))
				return
			}
			mu.Lock()
			defer mu.Unlock()
			complete(mine)
		})
	default:
		complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: 'FUNCTION %s' is not supported: FUNCTION LOAD, DELETE, RESTORE, FLUSH, KILL, LIST, DUMP and STATS are", strings.ToUpper(resp.Printable(args[1])))))
	}
}
