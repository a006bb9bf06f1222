package node

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/internal/ctxtime"
	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/resp"
)

// Two of redis-server's refusals, given by the node in Redis's manner
// (docs/store.md#maxmemory-and-busy-scripts):
//
//   - maxmemory. CONFIG SET maxmemory reaches every node of the cluster, as
//     notify-keyspace-events does (peer request SETTINGS), and is kept by the
//     node, never passed to its redis-server. The node that coordinates a
//     command refuses it with Redis's OOM error when the command may use
//     memory (Redis's denyoom commands, any command queued in MULTI, EXEC of
//     such, a script whose shebang asks to write) and its own redis-server's
//     used_memory is over the limit. A replica never refuses a write it is
//     sent for memory, as a Redis replica ignores its maxmemory
//     (replica-ignore-maxmemory): the replicas of a key never part over it.
//   - A redis-server busy with a script past lua-time-limit (which CONFIG
//     SET passes on to every redis-server) answers BUSY to everybody but the
//     connection that runs the script. The node watches its redis-server on
//     a connection of its own (side) while a request to it is unanswered,
//     and while the redis-server answers BUSY there and a request of the
//     node's is still unanswered (the script's among them), the node gives
//     its clients Redis's BUSY for every command Redis refuses then.
//     SCRIPT KILL and FUNCTION KILL reach every node's redis-server over that
//     connection, which no script holds.

// oomError is Redis's refusal of a command that may use memory over maxmemory.
const oomError = "OOM command not allowed when used memory > 'maxmemory'."

// noReplicasError is Redis's refusal of a write with fewer good replicas
// than min-replicas-to-write.
const noReplicasError = "NOREPLICAS Not enough good replicas to write."

// serverLimits is a node's maxmemory, and what it knows of its
// redis-server's memory and scripts.
type serverLimits struct {
	maxmemory   atomic.Int64 // bytes; 0, the default, is no limit
	minReplicas atomic.Int64 // min-replicas-to-write; 0, the default, is none
	used        atomic.Int64 // the redis-server's used_memory, as last read
	// busy is redis-server's BUSY error while it answers BUSY on side, nil
	// otherwise; stuck are the oldest requests unanswered on the request
	// path's connections (Link.Oldest) when it did, the script's among them.
	busy  atomic.Pointer[[]byte]
	stuck atomic.Pointer[[]uint64]
	side  *link.Link // to the node's redis-server, for the watch, SCRIPT KILL and FUNCTION KILL
}

// denyOOM are the commands Redis flags denyoom (redis-server 7.0's COMMAND):
// refused when used memory is over maxmemory.
var denyOOM = map[string]bool{
	"APPEND": true, "BITFIELD": true, "BITOP": true, "BLMOVE": true, "BRPOPLPUSH": true, "COPY": true,
	"DECR": true, "DECRBY": true, "GEOADD": true, "GEORADIUS": true, "GEORADIUSBYMEMBER": true,
	"GEOSEARCHSTORE": true, "GETSET": true, "HINCRBY": true, "HINCRBYFLOAT": true, "HMSET": true,
	"HSET": true, "HSETNX": true, "INCR": true, "INCRBY": true, "INCRBYFLOAT": true, "LINSERT": true,
	"LMOVE": true, "LPUSH": true, "LPUSHX": true, "LSET": true, "MSET": true, "MSETNX": true,
	"PFADD": true, "PFMERGE": true, "PSETEX": true, "RESTORE": true, "RPOPLPUSH": true, "RPUSH": true,
	"RPUSHX": true, "SADD": true, "SDIFFSTORE": true, "SET": true, "SETBIT": true, "SETEX": true,
	"SETNX": true, "SETRANGE": true, "SINTERSTORE": true, "SORT": true, "SUNIONSTORE": true, "XADD": true,
	"XSETID": true, "ZADD": true, "ZDIFFSTORE": true, "ZINCRBY": true, "ZINTERSTORE": true,
	"ZRANGESTORE": true, "ZUNIONSTORE": true,
	"FUNCTION LOAD": true, "FUNCTION RESTORE": true, "XGROUP CREATE": true, "XGROUP CREATECONSUMER": true,
}

// allowBusy are the commands Redis serves while a script is busy (its
// allow_busy flag).
var allowBusy = map[string]bool{
	"AUTH": true, "DISCARD": true, "HELLO": true, "MULTI": true, "QUIT": true, "RESET": true,
	"SHUTDOWN": true, "UNWATCH": true, "WATCH": true,
	"SCRIPT KILL": true, "FUNCTION KILL": true, "FUNCTION STATS": true,
}

// fullName is a command's name, with its subcommand for the commands
// that have them in these tables.
func fullName(c *command, args [][]byte) string {
	if len(args) > 1 && (c.name == "FUNCTION" || c.name == "SCRIPT" || c.name == "XGROUP") {
		return c.name + " " + strings.ToUpper(string(args[1]))
	}
	return c.name
}

// usesMemory says whether Redis would refuse args for memory: a denyoom
// command, or EVAL of a script whose shebang lets it write and does not
// say allow-oom.
func usesMemory(c *command, args [][]byte) bool {
	if denyOOM[fullName(c, args)] {
		return true
	}
	flags, ok := shebangFlags(c, args)
	return ok && !flags["no-writes"] && !flags["allow-oom"]
}

// shebangFlags are the flags of EVAL's script, and whether it has a
// shebang (#!lua flags=no-writes,allow-oom) to give them.
func shebangFlags(c *command, args [][]byte) (map[string]bool, bool) {
	if c.name != "EVAL" || len(args) < 2 || !bytes.HasPrefix(args[1], []byte("#!")) {
		return nil, false
	}
	line, _, _ := bytes.Cut(args[1], []byte("\n"))
	flags := map[string]bool{}
	for _, f := range strings.Fields(string(line))[1:] {
		if v, ok := strings.CutPrefix(f, "flags="); ok {
			for _, fl := range strings.Split(v, ",") {
				flags[fl] = true
			}
		}
	}
	return flags, true
}

// outOfMemory says whether this node's redis-server uses more than maxmemory.
func (n *Node) outOfMemory() bool {
	limit := n.server.maxmemory.Load()
	return limit > 0 && n.server.used.Load() > limit
}

// busyReply is redis-server's BUSY while it runs a script past
// lua-time-limit, nil otherwise: while the side connection hears BUSY and a
// request that was unanswered when it did still is. A script that ended
// has answered its request, so its client's next command is not refused
// on what the watch heard last.
func (n *Node) busyReply() []byte {
	r, stuck := n.server.busy.Load(), n.server.stuck.Load()
	if r == nil || stuck == nil {
		return nil
	}
	for i, l := range n.store {
		if s := (*stuck)[i]; s != 0 && l.Oldest() == s {
			return *r
		}
	}
	return nil
}

// oldestWaiting are the oldest requests unanswered on the request path's
// connections to this node's redis-server (Link.Oldest), and whether there
// is one.
func (n *Node) oldestWaiting() ([]uint64, bool) {
	out := make([]uint64, len(n.store))
	some := false
	for i, l := range n.store {
		out[i] = l.Oldest()
		some = some || out[i] != 0
	}
	return out, some
}

// refusal is Redis's refusal of args before it runs, for memory, too few
// replicas or a busy script: OOM, NOREPLICAS or BUSY, nil when it may run.
// Inside MULTI, Redis refuses every command but EXEC, DISCARD, QUIT and
// RESET when over maxmemory, as queueing uses memory; EXEC only when it
// holds a command that may. NOREPLICAS here is that of a write queued in
// MULTI, and of EXEC of one; outside MULTI a command's comes once its keys
// are known (handleClient, scriptRefusal).
func (n *Node) refusal(c *command, args [][]byte, sess *session) []byte {
	if c == nil {
		return nil
	}
	if n.outOfMemory() {
		deny := usesMemory(c, args)
		switch {
		case c.name == "EXEC":
			deny = false
			if sess.tx != nil {
				for _, q := range sess.tx.order {
					if qc := lookup(q[0]); qc != nil && usesMemory(qc, q) {
						deny = true
						break
					}
				}
			}
		case sess.tx != nil && c.name != "DISCARD" && c.name != "QUIT" && c.name != "RESET":
			deny = true
		}
		if deny {
			return resp.AppendError(nil, oomError)
		}
	}
	if n.server.minReplicas.Load() > 0 && sess.tx != nil {
		keys, write, _ := txCommand(c, args)
		if c.name == "EXEC" {
			keys, write = sess.tx.writeKeys, sess.tx.writes
		}
		if write && len(keys) > 0 && n.tooFewReplicas(keys[0]) {
			return resp.AppendError(nil, noReplicasError)
		}
	}
	if n.server.busy.Load() != nil && !allowBusy[fullName(c, args)] {
		return n.busyReply()
	}
	return nil
}

// parseMemory reads a memory value as Redis's memtoull does: a count of
// bytes with an optional unit, k, kb, m, mb, g or gb (k is 1000, kb 1024).
func parseMemory(s string) (int64, bool) {
	low := strings.ToLower(s)
	mul := int64(1)
	for _, u := range []struct {
		suffix string
		mul    int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3}, {"b", 1}} {
		if strings.HasSuffix(low, u.suffix) {
			low, mul = strings.TrimSuffix(low, u.suffix), u.mul
			break
		}
	}
	v, err := strconv.ParseUint(low, 10, 63)
	if err != nil || (mul > 1 && v > uint64(1<<62)/uint64(mul)) {
		return 0, false
	}
	return int64(v) * mul, true
}

// nodeSettings are the CONFIG SET parameters the node keeps itself, on
// every node of the cluster: check says why a value is refused, in
// Redis's words ("" when good); set applies a good one on this node.
var nodeSettings = map[string]struct {
	check func(value string) string
	set   func(n *Node, b *batch, value []byte, done func([]byte, error))
	get   func(n *Node) string
}{
	"notify-keyspace-events": {
		check: func(v string) string {
			if _, ok := parseNotifyFlags(v); !ok {
				return badNotifyFlags
			}
			return ""
		},
		set: (*Node).setNotify,
		get: func(n *Node) string { return formatNotifyFlags(n.notify.flags.Load()) },
	},
	"maxmemory": {
		check: func(v string) string {
			if _, ok := parseMemory(v); !ok {
				return "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value"
			}
			return ""
		},
		set: (*Node).setMaxmemory,
		get: func(n *Node) string { return strconv.FormatInt(n.server.maxmemory.Load(), 10) },
	},
	"min-replicas-to-write": {
		check: func(v string) string {
			i, err := strconv.ParseInt(v, 10, 64)
			switch {
			case err != nil:
				return "ERR CONFIG SET failed (possibly related to argument 'min-replicas-to-write') - argument couldn't be parsed into an integer"
			case i < 0 || i > 1<<31-1:
				return "ERR CONFIG SET failed (possibly related to argument 'min-replicas-to-write') - argument must be between 0 and 2147483647 inclusive"
			}
			return ""
		},
		set: func(n *Node, _ *batch, value []byte, done func([]byte, error)) {
			i, _ := strconv.ParseInt(string(value), 10, 32)
			n.server.minReplicas.Store(i)
			done(resp.AppendSimple(nil, "OK"), nil)
		},
		get: func(n *Node) string { return strconv.FormatInt(n.server.minReplicas.Load(), 10) },
	},
}

// tooFewReplicas says whether a write of key would have fewer good
// replicas than min-replicas-to-write: Redis counts the replicas of the
// master that took it, troop the key's replicas in the datacenter that
// the failure detector holds up, less one (the one that plays Redis's
// master).
func (n *Node) tooFewReplicas(key []byte) bool {
	want := n.server.minReplicas.Load()
	if want == 0 {
		return false
	}
	up := int64(0)
	for _, m := range n.replicas(key) {
		if m.self || !m.isDown() {
			up++
		}
	}
	return up-1 < want
}

// setMaxmemory is CONFIG SET maxmemory on this node: the limit, once the
// redis-server's used memory is read, so that the next command is judged
// against it.
func (n *Node) setMaxmemory(b *batch, value []byte, done func([]byte, error)) {
	limit, _ := parseMemory(string(value))
	if limit == 0 {
		n.server.maxmemory.Store(0)
		done(resp.AppendSimple(nil, "OK"), nil)
		return
	}
	n.server.side.Do(resp.AppendCommandStrings(nil, "INFO", "memory"), func(raw []byte, err error) {
		if err == nil {
			n.learnUsedMemory(raw)
		}
		n.server.maxmemory.Store(limit)
		done(resp.AppendSimple(nil, "OK"), nil)
	})
}

// learnUsedMemory takes used_memory out of redis-server's INFO memory.
func (n *Node) learnUsedMemory(raw []byte) {
	v, err := resp.Parse(raw)
	if err != nil || v.Type != resp.BulkString {
		return
	}
	for _, line := range strings.Split(string(v.Str), "\r\n") {
		if s, ok := strings.CutPrefix(line, "used_memory:"); ok {
			if used, err := strconv.ParseInt(s, 10, 64); err == nil {
				n.server.used.Store(used)
			}
			return
		}
	}
}

// configSetNodes sets the node's own parameters of pairs (name, value,
// known good) on every node of the cluster, as onEveryNode runs other
// CONFIG SETs: each node applies them (peer request SETTINGS).
func (n *Node) configSetNodes(pairs [][]byte, b *batch, complete func([]byte)) {
	members := n.view().members
	req := appendPeerRequest(nil, "SETTINGS", nil, pairs)
	run := func(m *member, done func([]byte, error)) {
		switch {
		case m.self:
			n.applySettings(b, pairs, done)
		case m.isDown():
			done(nil, errMarkedDown(m))
		default:
			n.toPeer(b, nil, m, req, fromPeer(done))
		}
	}
	var names []string
	for i := 0; i < len(pairs); i += 2 {
		names = append(names, string(pairs[i]))
	}
	n.onNodesWith(b, members, run, func(resp.Value) {}, func(failures []string) {
		if len(failures) > 0 {
			complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: CONFIG SET %s reached %d of %d nodes; it was not applied on: %s",
				strings.Join(names, " "), len(members)-len(failures), len(members), strings.Join(failures, "; "))))
			return
		}
		complete(resp.AppendSimple(nil, "OK"))
	})
}

// applySettings sets the node's own parameters of pairs on this node, one
// after the other; done has OK, or the first refusal.
func (n *Node) applySettings(b *batch, pairs [][]byte, done func([]byte, error)) {
	if len(pairs) < 2 {
		done(resp.AppendSimple(nil, "OK"), nil)
		return
	}
	s, ok := nodeSettings[strings.ToLower(string(pairs[0]))]
	if !ok {
		done(resp.AppendError(nil, "ERR troop peer protocol: SETTINGS of an unknown parameter "+resp.Printable(pairs[0])), nil)
		return
	}
	if bad := s.check(string(pairs[1])); bad != "" {
		done(resp.AppendError(nil, bad), nil)
		return
	}
	s.set(n, b, pairs[1], func(raw []byte, err error) {
		if err != nil || len(raw) == 0 || raw[0] == '-' {
			done(raw, err)
			return
		}
		n.applySettings(nil, pairs[2:], done)
	})
}

// withNodeSettings puts this node's own parameters into redis-server's
// answer to CONFIG GET, where redis-server has its own.
func (n *Node) withNodeSettings(raw []byte) []byte {
	v, err := resp.Parse(raw)
	if err != nil || v.Type != resp.Array {
		return raw
	}
	changed := false
	for i := 0; i+1 < len(v.Elems); i += 2 {
		if s, ok := nodeSettings[string(v.Elems[i].Str)]; ok {
			v.Elems[i+1] = resp.Value{Type: resp.BulkString, Str: []byte(s.get(n))}
			changed = true
		}
	}
	if !changed {
		return raw
	}
	return resp.AppendValue(nil, v)
}

// busyProbes bounds the PINGs of one round of the watch: while the
// redis-server answers BUSY, the watch asks again at once, so that it hears
// within milliseconds when the script ends.
const busyProbes = 100

// watchServer runs until ctx ends: every 50 ms, while a request to the
// redis-server is unanswered, it PINGs it over the side connection (a
// script past lua-time-limit makes it answer BUSY), and while maxmemory is
// set it reads its used memory.
func (n *Node) watchServer(ctx context.Context) {
	side := n.server.side
	ping := resp.AppendCommandStrings(nil, "PING")
	info := resp.AppendCommandStrings(nil, "INFO", "memory")
	ctxtime.Every(ctx, 50*time.Millisecond, func() {
		if n.server.maxmemory.Load() > 0 {
			if raw, err := doSync(ctx, side, info); err == nil {
				n.learnUsedMemory(raw)
			}
		}
		for range busyProbes {
			if _, waiting := n.oldestWaiting(); !waiting && n.server.busy.Load() == nil {
				return
			}
			raw, err := doSync(ctx, side, ping)
			if err != nil || !bytes.HasPrefix(raw, []byte("-BUSY")) {
				n.server.busy.Store(nil)
				return
			}
			stuck, _ := n.oldestWaiting()
			n.server.stuck.Store(&stuck)
			n.server.busy.Store(&raw)
		}
	})
}

// killScript is SCRIPT KILL (what "SCRIPT") or FUNCTION KILL ("FUNCTION"):
// it reaches every node's redis-server, over its side connection, and
// answers OK when one killed its script; else UNKILLABLE when one could
// not; else redis-server's NOTBUSY (or the nodes it could not reach).
func (n *Node) killScript(what string, b *batch, complete func([]byte)) {
	members := n.view().members
	var mu sync.Mutex
	var killed, other []byte
	var failures []string
	remaining := len(members)
	for _, m := range members {
		got := func(raw []byte, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				failures = append(failures, m.name()+": "+err.Error())
			case bytes.HasPrefix(raw, []byte("+OK")):
				killed = raw
			case bytes.HasPrefix(raw, []byte("-UNKILLABLE")) || other == nil:
				other = raw
			}
			if remaining--; remaining > 0 {
				return
			}
			switch {
			case killed != nil:
				complete(killed)
			case other != nil && (len(failures) == 0 || bytes.HasPrefix(other, []byte("-UNKILLABLE"))):
				complete(other)
			default:
				complete(resp.AppendError(nil, fmt.Sprintf("ERR troop: %s KILL reached %d of %d nodes, none of which runs a script: %s",
					what, len(members)-len(failures), len(members), strings.Join(failures, "; "))))
			}
		}
		switch {
		case m.self:
			n.killLocal(what, got)
		case m.isDown():
			got(nil, errMarkedDown(m))
		default:
			n.toPeer(b, nil, m, appendPeerRequest(nil, "KILL", nil, [][]byte{[]byte(what)}), fromPeer(got))
		}
	}
}

// killLocal sends SCRIPT KILL or FUNCTION KILL to this node's redis-server
// over the side connection: the request path's connection that carries the
// script waits for it.
func (n *Node) killLocal(what string, done func([]byte, error)) {
	n.server.side.Do(resp.AppendCommandStrings(nil, what, "KILL"), done)
}

// readOnlyOverMemory turns a script that may write (EVAL, EVALSHA, FCALL)
// into its read-only form (EVAL_RO ...), and its refusals of writes into
// Redis's OOM error, for a node over maxmemory: Redis then refuses the
// script's commands that may use memory. The node cannot tell those apart
// inside redis-server's Lua, so it refuses every write of the script,
// DEL and EXPIRE too, which Redis would run; and redis.pcall sees the
// read-only refusal, not OOM. A shebang script that may write, and does
// not say allow-oom, was refused before (usesMemory); one that says
// allow-oom runs as it is.
func readOnlyOverMemory(c *command, args [][]byte, done replyFunc) (*command, [][]byte, replyFunc) {
	return readOnlyRefusing(c, args, oomError, done)
}

// scriptRefusal is the node's refusal of a script that may write, before
// it runs, for too few good replicas (NOREPLICAS) or memory (OOM), as
// Redis refuses a script whose shebang does not say no-writes; nil when it
// runs, as its read-only form when its writes are refused
// (readOnlyRefusing).
func (n *Node) scriptRefusal(c *command, keys, args [][]byte, done replyFunc) (*command, [][]byte, replyFunc, []byte) {
	if !c.writes() {
		return c, args, done, nil
	}
	if len(keys) > 0 && n.tooFewReplicas(keys[0]) {
		if flags, ok := shebangFlags(c, args); ok && !flags["no-writes"] {
			return c, args, done, resp.AppendError(nil, noReplicasError)
		}
		c, args, done = readOnlyRefusing(c, args, noReplicasError, done)
	}
	if c.writes() && n.outOfMemory() { // its writes are refused, as Redis refuses them over maxmemory
		c, args, done = readOnlyOverMemory(c, args, done)
	}
	return c, args, done, nil
}

// readOnlyRefusing is readOnlyOverMemory with refusal for Redis's error.
func readOnlyRefusing(c *command, args [][]byte, refusal string, done replyFunc) (*command, [][]byte, replyFunc) {
	if c.name == "EVAL" && len(args) > 1 && bytes.HasPrefix(args[1], []byte("#!")) {
		return c, args, done
	}
	ro := lookup([]byte(c.name + "_RO"))
	if ro == nil {
		return c, args, done
	}
	args = append([][]byte{[]byte(ro.name)}, args[1:]...)
	return ro, args, func(reply []byte) {
		for _, ro := range []string{"-ERR Write commands are not allowed from read-only scripts.", "-ERR Can not execute a script with write flag using *_ro command."} {
			if rest, ok := bytes.CutPrefix(reply, []byte(ro)); ok {
				reply = append([]byte("-"+refusal), rest...)
				break
			}
		}
		done(reply)
	}
}
