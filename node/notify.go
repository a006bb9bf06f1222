package node

import (
	"bytes"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/resp"
)

// Keyspace notifications, made by the node in Redis's manner: CONFIG SET
// notify-keyspace-events reaches every node of the cluster (peer request
// SETTINGS, limits.go), and the node that coordinates a write publishes the events
// Redis would publish for it, once, through the datacenter's pub/sub
// (pubsub.go), never for troop's own keys. The events redis-server makes
// of its dataset rather than of a command (expired, evicted, new) come
// from the redis-server of one replica of the key in the datacenter,
// which its node relays (notifyrelay.go). docs/store.md#keyspace-notifications.

// The event classes, with Redis's bits and letters (notify.c).
const (
	notifyKeyspace = 1 << 0  // K
	notifyKeyevent = 1 << 1  // E
	notifyGeneric  = 1 << 2  // g
	notifyString   = 1 << 3  // $
	notifyList     = 1 << 4  // l
	notifySet      = 1 << 5  // s
	notifyHash     = 1 << 6  // h
	notifyZset     = 1 << 7  // z
	notifyExpired  = 1 << 8  // x
	notifyEvicted  = 1 << 9  // e
	notifyStream   = 1 << 10 // t
	notifyKeyMiss  = 1 << 11 // m
	notifyModule   = 1 << 13 // d
	notifyNew      = 1 << 14 // n
	notifyAll      = notifyGeneric | notifyString | notifyList | notifySet | notifyHash | notifyZset | notifyExpired | notifyEvicted | notifyStream | notifyModule
)

// notifyLetters are the flag letters in the order Redis writes them back
// (keyspaceEventsFlagsToString), A standing for all the classes of
// notifyAll.
var notifyLetters = []struct {
	letter byte
	bits   uint32
}{
	{'g', notifyGeneric}, {'$', notifyString}, {'l', notifyList}, {'s', notifySet}, {'h', notifyHash},
	{'z', notifyZset}, {'x', notifyExpired}, {'e', notifyEvicted}, {'t', notifyStream}, {'d', notifyModule},
	{'n', notifyNew}, {'K', notifyKeyspace}, {'E', notifyKeyevent}, {'m', notifyKeyMiss},
}

// parseNotifyFlags reads notify-keyspace-events' flags as Redis does; ok
// is false for a letter Redis does not know.
func parseNotifyFlags(s string) (flags uint32, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == 'A' {
			flags |= notifyAll
			continue
		}
		found := false
		for _, l := range notifyLetters {
			if l.letter == s[i] {
				flags |= l.bits
				found = true
				break
			}
		}
		if !found {
			return 0, false
		}
	}
	return flags, true
}

// formatNotifyFlags writes flags as CONFIG GET answers them in Redis: the
// classes (A when all), then K, E and m. Redis 7.0 drops n after A (it is
// not one of A's classes); here it stays, so that what CONFIG GET answers
// sets the same flags again.
func formatNotifyFlags(flags uint32) string {
	var out []byte
	all := flags&notifyAll == notifyAll
	if all {
		out = append(out, 'A')
	}
	for _, l := range notifyLetters {
		if flags&l.bits != 0 && !(all && l.bits&notifyAll != 0) {
			out = append(out, l.letter)
		}
	}
	return string(out)
}

// badNotifyFlags is Redis's answer to CONFIG SET of flags it does not know.
const badNotifyFlags = "ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'."

// notifier is a node's keyspace notification setting.
type notifier struct {
	flags atomic.Uint32 // Redis's bits; 0, the default, is off
	// wake tells the relay of redis-server's own events (notifyrelay.go)
	// that the flags changed.
	wake chan struct{}
}

// keyEvent is one event of a command: Redis publishes it on
// __keyspace@0__:<key> (message event) and __keyevent@0__:<event>
// (message key), as the flags allow.
type keyEvent struct {
	class uint32
	event string
	key   []byte
}

// publishEvents publishes evs through the datacenter's pub/sub, as
// Redis's notifyKeyspaceEvent does, for the classes flags has.
func (n *Node) publishEvents(flags uint32, evs []keyEvent) {
	for _, e := range evs {
		if flags&e.class == 0 || bytes.HasPrefix(e.key, []byte(reservedPrefix)) {
			continue
		}
		if flags&notifyKeyspace != 0 {
			n.publish(false, append([]byte("__keyspace@0__:"), e.key...), []byte(e.event), nil, func([]byte) {})
		}
		if flags&notifyKeyevent != 0 {
			n.publish(false, []byte("__keyevent@0__:"+e.event), e.key, nil, func([]byte) {})
		}
	}
}

// notifying wraps a write's done: once the write answered, the events
// Redis would publish for it are published, before the client has the
// reply, as Redis publishes them while it runs the command (args are the
// request's own copy, resp.ParseCommand's).
func (n *Node) notifying(flags uint32, args [][]byte, done replyFunc) replyFunc {
	return func(reply []byte) {
		if v, err := resp.Parse(reply); err == nil && !v.IsError() {
			n.publishEvents(flags, commandEvents(args, v, time.Now()))
		}
		done(reply)
	}
}

// notifySplit publishes the events of a command split per key (DEL,
// UNLINK, MSET), key by key in the command's order, from each key's part.
func (n *Node) notifySplit(c *command, keys, args [][]byte, results [][]byte) {
	if !c.writes() {
		return
	}
	flags := n.notify.flags.Load()
	if flags == 0 {
		return
	}
	for i, k := range keys {
		part := [][]byte{args[0], k}
		if c.name == "MSET" {
			part = [][]byte{[]byte("SET"), k, args[2+2*i]}
		}
		if v, err := resp.Parse(results[i]); err == nil && !v.IsError() {
			n.publishEvents(flags, commandEvents(part, v, time.Now()))
		}
	}
}

// notifyExec publishes the events of a transaction's commands (order, as
// queued) from EXEC's reply, command by command, as Redis publishes them
// while it runs EXEC.
func (n *Node) notifyExec(flags uint32, order [][][]byte, reply []byte) {
	v, err := resp.Parse(reply)
	if err != nil || v.Type != resp.Array {
		return // aborted: nothing ran
	}
	now := time.Now()
	for i, e := range v.Elems {
		if i < len(order) && !e.IsError() {
			n.publishEvents(flags, commandEvents(order[i], e, now))
		}
	}
}

// commandEvents are the events Redis publishes for the write args that
// answered reply (not an error), in Redis's order; now decides whether an
// expiry is already past, which Redis turns into a deletion. A command
// whose events depend on what it found, and whose reply does not say, is
// left out (docs/store.md#keyspace-notifications lists them).
func commandEvents(args [][]byte, reply resp.Value, now time.Time) []keyEvent {
	name := strings.ToUpper(string(args[0]))
	ev := func(class uint32, event string, key []byte) []keyEvent {
		return []keyEvent{{class, event, key}}
	}
	one := func(class uint32, event string) []keyEvent { return ev(class, event, args[1]) }
	positive := reply.Type == resp.Integer && reply.Int > 0
	present := !reply.IsNull
	switch name {
	case "SET":
		return setEvents(args, reply, now)
	case "SETNX", "MSETNX":
		if !positive {
			return nil
		}
		var out []keyEvent
		for i := 1; i < len(args); i += 2 {
			out = append(out, keyEvent{notifyString, "set", args[i]})
		}
		return out
	case "SETEX", "PSETEX":
		return append(one(notifyString, "set"), keyEvent{notifyGeneric, "expire", args[1]})
	case "GETSET":
		return one(notifyString, "set")
	case "GETDEL":
		if present {
			return one(notifyGeneric, "del")
		}
	case "GETEX":
		if present {
			return getexEvents(args, now)
		}
	case "INCR", "DECR", "INCRBY", "DECRBY":
		return one(notifyString, "incrby")
	case "INCRBYFLOAT":
		return one(notifyString, "incrbyfloat")
	case "APPEND":
		return one(notifyString, "append")
	case "SETRANGE":
		if len(args) > 3 && len(args[3]) > 0 {
			return one(notifyString, "setrange")
		}
	case "SETBIT":
		return one(notifyString, "setbit")
	case "PFADD":
		if positive {
			return one(notifyString, "pfadd")
		}
	case "BITOP": // the destination, set when the result is not empty
		if positive && len(args) > 2 {
			return ev(notifyString, "set", args[2])
		}
	case "SORT":
		for i := 2; i+1 < len(args); i++ {
			if strings.EqualFold(string(args[i]), "STORE") && positive {
				return ev(notifyList, "sortstore", args[i+1])
			}
		}
	case "PFMERGE":
		return one(notifyString, "pfadd")
	case "DEL", "UNLINK": // of several keys (in a transaction), known when it removed all or none
		if positive && reply.Int == int64(len(args)-1) {
			var out []keyEvent
			for _, k := range args[1:] {
				out = append(out, keyEvent{notifyGeneric, "del", k})
			}
			return out
		}
	case "MSET":
		var out []keyEvent
		for i := 1; i < len(args); i += 2 {
			out = append(out, keyEvent{notifyString, "set", args[i]})
		}
		return out
	case "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT":
		if positive {
			if expiryPast(name, args[2], now) {
				return one(notifyGeneric, "del")
			}
			return one(notifyGeneric, "expire")
		}
	case "PERSIST":
		if positive {
			return one(notifyGeneric, "persist")
		}
	case "RENAME", "RENAMENX": // a key renamed to itself is left as it is, without events
		if (name == "RENAME" || positive) && !bytes.Equal(args[1], args[2]) {
			return []keyEvent{{notifyGeneric, "rename_from", args[1]}, {notifyGeneric, "rename_to", args[2]}}
		}
	case "COPY":
		if positive {
			return ev(notifyGeneric, "copy_to", args[2])
		}
	case "RESTORE":
		return one(notifyGeneric, "restore")
	case "LPUSH", "RPUSH":
		return one(notifyList, strings.ToLower(name))
	case "LPUSHX", "RPUSHX":
		if positive {
			return one(notifyList, strings.ToLower(name[:5]))
		}
	case "LINSERT":
		if positive {
			return one(notifyList, "linsert")
		}
	case "LSET":
		return one(notifyList, "lset")
	case "LREM":
		if positive {
			return one(notifyList, "lrem")
		}
	case "LTRIM":
		return one(notifyList, "ltrim")
	case "LPOP", "RPOP":
		if present {
			return one(notifyList, strings.ToLower(name))
		}
	case "BLPOP", "BRPOP":
		if present && len(reply.Elems) == 2 {
			return ev(notifyList, strings.ToLower(name[1:]), reply.Elems[0].Str)
		}
	case "RPOPLPUSH", "BRPOPLPUSH":
		if present {
			return []keyEvent{{notifyList, "lpush", args[2]}, {notifyList, "rpop", args[1]}}
		}
	case "LMOVE", "BLMOVE":
		if present {
			from, to := strings.ToLower(string(args[3])), strings.ToLower(string(args[4]))
			return []keyEvent{{notifyList, to[:1] + "push", args[2]}, {notifyList, from[:1] + "pop", args[1]}}
		}
	case "LMPOP", "BLMPOP", "ZMPOP", "BZMPOP":
		return mpopEvents(name, args, reply)
	case "SADD":
		if positive {
			return one(notifySet, "sadd")
		}
	case "SREM":
		if positive {
			return one(notifySet, "srem")
		}
	case "SPOP":
		if present && (reply.Type != resp.Array || len(reply.Elems) > 0) {
			return one(notifySet, "spop")
		}
	case "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE":
		if positive {
			return one(notifySet, strings.ToLower(name))
		}
	case "ZADD": // INCR answers the new score, nil when NX or XX kept it from adding
		if positive || reply.Type == resp.BulkString && !reply.IsNull {
			if zaddIncr(args) {
				return one(notifyZset, "zincr")
			}
			return one(notifyZset, "zadd")
		}
	case "ZINCRBY":
		return one(notifyZset, "zincr")
	case "ZREM", "ZREMRANGEBYRANK", "ZREMRANGEBYSCORE", "ZREMRANGEBYLEX":
		if positive {
			return one(notifyZset, strings.ToLower(name))
		}
	case "ZPOPMIN", "ZPOPMAX":
		if len(reply.Elems) > 0 {
			return one(notifyZset, strings.ToLower(name))
		}
	case "BZPOPMIN", "BZPOPMAX":
		if present && len(reply.Elems) == 3 {
			return ev(notifyZset, strings.ToLower(name[1:]), reply.Elems[0].Str)
		}
	case "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE", "ZRANGESTORE":
		if positive {
			return one(notifyZset, strings.ToLower(name))
		}
	case "HSET", "HMSET":
		return one(notifyHash, "hset")
	case "HSETNX":
		if positive {
			return one(notifyHash, "hset")
		}
	case "HINCRBY", "HINCRBYFLOAT":
		return one(notifyHash, strings.ToLower(name))
	case "HDEL":
		if positive {
			return one(notifyHash, "hdel")
		}
	case "XADD":
		if present {
			return one(notifyStream, "xadd")
		}
	case "XDEL", "XTRIM":
		if positive {
			return one(notifyStream, strings.ToLower(name))
		}
	case "XSETID":
		return one(notifyStream, "xsetid")
	case "XGROUP":
		return xgroupEvents(args, reply)
	}
	return nil
}

// setEvents are SET's: set, then expire when it sets one. SET ... GET
// answers the old value whether it set or not: with NX it set when there
// was none, with XX when there was one.
func setEvents(args [][]byte, reply resp.Value, now time.Time) []keyEvent {
	var get, nx, xx, expire bool
	for _, a := range args[3:] {
		switch strings.ToUpper(string(a)) {
		case "GET":
			get = true
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "EX", "PX", "EXAT", "PXAT":
			expire = true
		}
	}
	switch {
	case get && nx && !reply.IsNull, get && xx && reply.IsNull, !get && reply.IsNull:
		return nil
	}
	out := []keyEvent{{notifyString, "set", args[1]}}
	if expire {
		out = append(out, keyEvent{notifyGeneric, "expire", args[1]})
	}
	return out
}

// getexEvents are GETEX's on a key that exists: a deletion for an expiry
// already past, else expire. PERSIST's event depends on whether the key
// had an expiry, which the reply does not say: left out.
func getexEvents(args [][]byte, now time.Time) []keyEvent {
	if len(args) < 4 {
		return nil
	}
	opt := strings.ToUpper(string(args[2]))
	relative := map[string]string{"EX": "EXPIRE", "PX": "PEXPIRE", "EXAT": "EXPIREAT", "PXAT": "PEXPIREAT"}[opt]
	if relative == "" {
		return nil
	}
	if expiryPast(relative, args[3], now) {
		return []keyEvent{{notifyGeneric, "del", args[1]}}
	}
	return []keyEvent{{notifyGeneric, "expire", args[1]}}
}

// expiryPast says whether the expiry that the command name (EXPIRE,
// PEXPIRE, EXPIREAT, PEXPIREAT) gives with arg is at or before now, when
// Redis deletes the key instead.
func expiryPast(name string, arg []byte, now time.Time) bool {
	v, err := strconv.ParseInt(string(arg), 10, 64)
	if err != nil {
		return false
	}
	switch name {
	case "EXPIRE", "PEXPIRE":
		return v <= 0
	case "EXPIREAT":
		return v <= now.Unix()
	}
	return v <= now.UnixMilli()
}

// zaddIncr says whether ZADD has INCR among its options.
func zaddIncr(args [][]byte) bool {
	for _, a := range args[2:] {
		if strings.EqualFold(string(a), "INCR") {
			return true
		}
	}
	return false
}

// mpopEvents are LMPOP's, ZMPOP's and their blocking forms': the reply
// names the key popped, the arguments the end.
func mpopEvents(name string, args [][]byte, reply resp.Value) []keyEvent {
	if reply.IsNull || len(reply.Elems) != 2 {
		return nil
	}
	first := 1
	if name[0] == 'B' {
		first = 2 // the timeout
	}
	numkeys, err := strconv.Atoi(string(args[first]))
	if err != nil || first+1+numkeys >= len(args) {
		return nil
	}
	end := strings.ToLower(string(args[first+1+numkeys]))
	if strings.HasSuffix(name, "LMPOP") {
		return []keyEvent{{notifyList, end[:1] + "pop", reply.Elems[0].Str}}
	}
	return []keyEvent{{notifyZset, "zpop" + end, reply.Elems[0].Str}}
}

// xgroupEvents are XGROUP's; DELCONSUMER's event depends on whether the
// consumer was there, which its reply does not say: left out.
func xgroupEvents(args [][]byte, reply resp.Value) []keyEvent {
	if len(args) < 3 {
		return nil
	}
	ev := func(event string) []keyEvent { return []keyEvent{{notifyStream, event, args[2]}} }
	switch strings.ToUpper(string(args[1])) {
	case "CREATE":
		return ev("xgroup-create")
	case "SETID":
		return ev("xgroup-setid")
	case "DESTROY":
		if reply.Int > 0 {
			return ev("xgroup-destroy")
		}
	case "CREATECONSUMER":
		if reply.Int > 0 {
			return ev("xgroup-createconsumer")
		}
	}
	return nil
}

// setNotify is CONFIG SET notify-keyspace-events on this node: the flags,
// and its redis-server's own, which make the events relayed
// (notifyrelay.go). done has OK, or why not.
func (n *Node) setNotify(b *batch, value []byte, done func([]byte, error)) {
	flags, ok := parseNotifyFlags(string(value))
	if !ok {
		done(resp.AppendError(nil, badNotifyFlags), nil)
		return
	}
	n.notify.flags.Store(flags)
	select {
	case n.notify.wake <- struct{}{}:
	default: // the relay has a wake-up pending already
	}
	args := [][]byte{[]byte("CONFIG"), []byte("SET"), []byte("notify-keyspace-events"), []byte(serverNotifyFlags(flags))}
	n.toStoreCommand(b, nil, n.store[0], args, done)
}

// consumerTarget names the consumer that a stream command may make
// (XREADGROUP, in each stream it reads; XCLAIM, XAUTOCLAIM) or delete
// (XGROUP DELCONSUMER), with its group and streams. Redis notifies
// either only when it happened, which the reply does not say.
func consumerTarget(args, keys [][]byte) (group, consumer []byte, streams [][]byte) {
	switch name := strings.ToUpper(string(args[0])); {
	case name == "XREADGROUP" && len(args) > 3:
		return args[2], args[3], keys
	case (name == "XCLAIM" || name == "XAUTOCLAIM") && len(args) > 3:
		return args[2], args[3], args[1:2]
	case name == "XGROUP" && len(args) == 5 && strings.EqualFold(string(args[1]), "DELCONSUMER"):
		return args[3], args[4], args[2:3]
	}
	return nil, nil, nil
}

// consumerProbes are the reads of the consumers of consumerTarget's
// group in each stream, which the deciding replica runs before and after
// the command, in its transaction (localScript).
func consumerProbes(args, keys [][]byte) [][][]byte {
	group, _, streams := consumerTarget(args, keys)
	var out [][][]byte
	for _, k := range streams {
		out = append(out, [][]byte{[]byte("XINFO"), []byte("CONSUMERS"), k, group})
	}
	return out
}

func appendProbes(dst []byte, probes [][][]byte) []byte {
	for _, p := range probes {
		dst = resp.AppendCommand(dst, p...)
	}
	return dst
}

// consumerOutcome takes the probes' answers out of the deciding
// replica's transaction reply, when it ran them, and turns them into the
// events of the consumers made or deleted, stream by stream.
func consumerOutcome(args, keys [][]byte, raw []byte) ([]byte, []keyEvent) {
	_, consumer, streams := consumerTarget(args, keys)
	p := len(streams)
	if p == 0 {
		return raw, nil
	}
	v, err := resp.Parse(raw)
	if err != nil || v.Type != resp.Array || len(v.Elems) != 2+2*p {
		return raw, nil
	}
	var evs []keyEvent
	for i, k := range streams {
		before, after := hasConsumer(v.Elems[i], consumer), hasConsumer(v.Elems[p+2+i], consumer)
		switch {
		case !before && after:
			evs = append(evs, keyEvent{notifyStream, "xgroup-createconsumer", k})
		case before && !after:
			evs = append(evs, keyEvent{notifyStream, "xgroup-delconsumer", k})
		}
	}
	out := resp.AppendArrayHeader(nil, 2)
	out = resp.AppendValue(out, v.Elems[p])
	return resp.AppendValue(out, v.Elems[p+1]), evs
}

// hasConsumer says whether XINFO CONSUMERS' answer v lists consumer.
func hasConsumer(v resp.Value, consumer []byte) bool {
	for _, c := range v.Elems {
		for i := 0; i+1 < len(c.Elems); i += 2 {
			if string(c.Elems[i].Str) == "name" && bytes.Equal(c.Elems[i+1].Str, consumer) {
				return true
			}
		}
	}
	return false
}
