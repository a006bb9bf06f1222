package node

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/troop-lab/troop/resp"
)

// kind says how the coordinator routes a command.
type kind int

const (
	kindRead        kind = iota // one key, read
	kindWrite                   // one key, write
	kindMultiRead               // several keys that must share an owner, read
	kindMultiWrite              // several keys that must share an owner, write
	kindSplit                   // several keys, split per key and merged (MGET, MSET, DEL, EXISTS ...)
	kindLocal                   // answered by the node itself (PING, INFO, TROOP ...)
	kindTransaction             // MULTI, EXEC, DISCARD, WATCH, UNWATCH (transaction.go)
	kindDrawn                   // a pop: the deciding replica takes, the others remove what it took (SPOP, LPOP, LMOVE ..., drawn.go)
	kindBlocking                // a pop that waits for something to pop (BLPOP ..., blocking.go)
	kindScript                  // EVAL, FCALL ...: run by the deciding replica, its keys' values copied to the others (scripts.go)
	kindCopied                  // a stream write: run as kindScript is (XADD, XREADGROUP ...)
	kindUnsupported
)

// A command is one entry of the command table.
type command struct {
	id    int
	name  string // upper case
	kind  kind
	arity int // as in Redis: n means exactly n words, -n at least n

	// keys returns the command's keys (multi-key kinds only; single-key
	// commands have their key at args[1]). An error string means the
	// arguments do not name their keys properly.
	keys func(args [][]byte) ([][]byte, string)

	// lww marks writes that replace the whole value: a replica ignores one
	// that is older than what it holds, and answers staleReply instead.
	lww        bool
	staleReply string // a RESP frame: "+OK\r\n" or an integer

	why string // kindUnsupported: the reason
}

var commandTable = map[string]*command{}

// badNumkeys is the keys function's answer to a command whose numkeys does
// not name its keys: redis-server refuses such a command whatever it holds,
// so the node lets it say why, in its own words.
const badNumkeys = "numkeys should be greater than 0 and match the keys given"

func init() {
	id := 0
	add := func(k kind, arity int, names ...string) {
		for _, n := range names {
			commandTable[n] = &command{id: id, name: n, kind: k, arity: arity}
			id++
		}
	}
	// Strings.
	add(kindRead, 2, "GET", "STRLEN", "TYPE", "TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME", "DUMP")
	add(kindRead, 4, "GETRANGE", "SUBSTR")
	add(kindRead, 3, "GETBIT")
	add(kindRead, -2, "BITCOUNT")
	add(kindRead, -3, "BITPOS")
	add(kindRead, -2, "BITFIELD_RO")
	add(kindRead, 3, "OBJECT")  // OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT key
	add(kindRead, -3, "MEMORY") // MEMORY USAGE key [SAMPLES n]: this replica's
	add(kindWrite, -2, "BITFIELD")
	add(kindWrite, -3, "SET")
	add(kindWrite, 3, "SETNX", "GETSET", "APPEND", "INCRBY", "DECRBY", "INCRBYFLOAT")
	add(kindWrite, 4, "SETEX", "PSETEX", "SETRANGE", "SETBIT")
	add(kindWrite, -4, "RESTORE")
	add(kindWrite, 2, "GETDEL", "INCR", "DECR", "PERSIST")
	add(kindWrite, -2, "GETEX")
	// Expiry.
	add(kindWrite, -3, "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT")
	// Hashes.
	add(kindRead, 3, "HGET", "HEXISTS", "HSTRLEN")
	add(kindRead, 2, "HGETALL", "HKEYS", "HVALS", "HLEN")
	add(kindRead, -3, "HMGET", "HSCAN")
	add(kindRead, -2, "HRANDFIELD")
	add(kindWrite, -4, "HSET", "HMSET")
	add(kindWrite, 4, "HSETNX", "HINCRBY", "HINCRBYFLOAT")
	add(kindWrite, -3, "HDEL")
	// Lists.
	add(kindRead, 4, "LRANGE")
	add(kindRead, 2, "LLEN")
	add(kindRead, 3, "LINDEX")
	add(kindRead, -3, "LPOS")
	add(kindWrite, -3, "LPUSH", "RPUSH", "LPUSHX", "RPUSHX")
	add(kindWrite, 4, "LSET", "LREM", "LTRIM")
	add(kindWrite, 5, "LINSERT")
	// Sets.
	add(kindRead, 2, "SMEMBERS", "SCARD")
	add(kindRead, 3, "SISMEMBER")
	add(kindRead, -3, "SMISMEMBER", "SSCAN")
	add(kindRead, -2, "SRANDMEMBER")
	add(kindDrawn, -2, "SPOP", "LPOP", "RPOP", "ZPOPMIN", "ZPOPMAX")
	add(kindDrawn, 3, "RPOPLPUSH")
	add(kindDrawn, 5, "LMOVE")
	add(kindDrawn, -4, "LMPOP", "ZMPOP")
	add(kindBlocking, -3, "BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX")
	add(kindBlocking, 6, "BLMOVE")
	add(kindBlocking, 4, "BRPOPLPUSH")
	add(kindBlocking, -5, "BLMPOP", "BZMPOP")
	add(kindWrite, -3, "SADD", "SREM")
	// Sorted sets.
	add(kindRead, -4, "ZRANGE", "ZRANGEBYSCORE", "ZREVRANGE", "ZREVRANGEBYSCORE", "ZRANGEBYLEX", "ZREVRANGEBYLEX")
	add(kindRead, 3, "ZSCORE")
	add(kindRead, -3, "ZMSCORE", "ZRANK", "ZREVRANK", "ZSCAN")
	add(kindRead, 2, "ZCARD")
	add(kindRead, 4, "ZCOUNT", "ZLEXCOUNT")
	add(kindRead, -2, "ZRANDMEMBER")
	add(kindWrite, -4, "ZADD")
	add(kindWrite, -3, "ZREM")
	add(kindWrite, 4, "ZINCRBY", "ZREMRANGEBYRANK", "ZREMRANGEBYSCORE", "ZREMRANGEBYLEX")
	// HyperLogLog.
	add(kindWrite, -2, "PFADD")
	// Multi-key commands whose keys must share an owner.
	add(kindMultiRead, -2, "SUNION", "SINTER", "SDIFF", "PFCOUNT")
	add(kindMultiRead, -3, "LCS")
	add(kindMultiRead, -3, "ZUNION", "ZINTER", "ZDIFF", "SINTERCARD", "ZINTERCARD")
	add(kindMultiWrite, 3, "RENAME", "RENAMENX")
	add(kindMultiWrite, 4, "SMOVE")
	add(kindMultiWrite, -3, "SUNIONSTORE", "SINTERSTORE", "SDIFFSTORE", "COPY")
	add(kindMultiWrite, -4, "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE")
	add(kindMultiWrite, -5, "ZRANGESTORE")
	add(kindMultiWrite, -2, "PFMERGE")
	add(kindMultiWrite, -3, "MSETNX")
	add(kindMultiWrite, -4, "BITOP")
	add(kindMultiWrite, -2, "SORT") // a read without STORE (kindFor)
	add(kindMultiRead, -2, "SORT_RO")
	// Split across owners and merged.
	add(kindSplit, -2, "MGET", "DEL", "UNLINK", "EXISTS", "TOUCH")
	add(kindSplit, -3, "MSET")
	// Answered by the node.
	add(kindLocal, -1, "PING", "COMMAND", "INFO", "HELLO", "CLIENT", "TROOP", "FLUSHALL", "FLUSHDB")
	add(kindLocal, -2, "CONFIG", "FUNCTION", "SCRIPT")
	add(kindScript, -3, "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO")
	add(kindLocal, 2, "ECHO", "SELECT", "DYNO_CONFIG:CONN_CONSISTENCY")
	add(kindLocal, 1, "QUIT", "TIME", "DBSIZE", "RANDOMKEY")
	add(kindLocal, -2, "AUTH", "SCAN", "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "PUBSUB")
	add(kindLocal, -1, "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE")
	add(kindLocal, 3, "PUBLISH", "SPUBLISH")
	add(kindLocal, 2, "KEYS")
	add(kindTransaction, 1, "MULTI", "EXEC", "DISCARD", "UNWATCH")
	add(kindTransaction, -2, "WATCH")

	unsupported := func(why string, names ...string) {
		for _, n := range names {
			commandTable[n] = &command{id: id, name: n, kind: kindUnsupported, arity: -1, why: why}
			id++
		}
	}
	unsupported("it would have to reach every node", "SWAPDB", "WAIT")
	unsupported("administrative commands go to each redis-server directly", "MONITOR", "DEBUG", "SHUTDOWN", "SAVE", "BGSAVE", "BGREWRITEAOF", "LASTSAVE", "REPLICAOF", "SLAVEOF", "SYNC", "PSYNC", "MIGRATE", "MOVE", "SLOWLOG", "LATENCY", "ACL", "MODULE", "FAILOVER", "RESET")
	// Streams.
	add(kindRead, -4, "XRANGE", "XREVRANGE")
	add(kindRead, 2, "XLEN")
	add(kindRead, -3, "XPENDING", "XINFO") // XINFO STREAM|GROUPS|CONSUMERS key: keys below
	add(kindMultiRead, -4, "XREAD")
	add(kindCopied, -5, "XADD")
	add(kindCopied, -3, "XDEL", "XSETID")
	add(kindCopied, -4, "XTRIM", "XACK")
	add(kindCopied, -2, "XGROUP") // XGROUP CREATE|DESTROY|... key: keys below
	add(kindCopied, -6, "XCLAIM", "XAUTOCLAIM")
	add(kindCopied, -7, "XREADGROUP")
	unsupported("geo commands are not supported yet", "GEOADD", "GEOPOS", "GEODIST", "GEOHASH", "GEORADIUS", "GEORADIUSBYMEMBER", "GEOSEARCH", "GEOSEARCHSTORE", "GEORADIUS_RO", "GEORADIUSBYMEMBER_RO")

	// Keys of multi-key commands.
	all := func(from int) func([][]byte) ([][]byte, string) {
		return func(a [][]byte) ([][]byte, string) { return a[from:], "" }
	}
	pair := func(a [][]byte) ([][]byte, string) { return a[1:3], "" }
	numkeys := func(at int, dest bool) func([][]byte) ([][]byte, string) {
		return func(a [][]byte) ([][]byte, string) {
			n, err := strconv.Atoi(string(a[at]))
			if err != nil || n < 1 || at+1+n > len(a) {
				return nil, badNumkeys
			}
			keys := a[at+1 : at+1+n]
			if dest {
				keys = append([][]byte{a[1]}, keys...)
			}
			return keys, ""
		}
	}
	for _, n := range []string{"SUNION", "SINTER", "SDIFF", "PFCOUNT", "SUNIONSTORE", "SINTERSTORE", "SDIFFSTORE", "PFMERGE", "DEL", "UNLINK", "EXISTS", "TOUCH", "MGET"} {
		commandTable[n].keys = all(1)
	}
	for _, n := range []string{"RENAME", "RENAMENX", "RPOPLPUSH", "SMOVE", "LMOVE", "COPY", "ZRANGESTORE", "LCS"} {
		commandTable[n].keys = pair
	}
	for _, n := range []string{"ZUNION", "ZINTER", "ZDIFF", "SINTERCARD", "ZINTERCARD", "LMPOP", "ZMPOP"} {
		commandTable[n].keys = numkeys(1, false)
	}
	for _, n := range []string{"ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"} {
		commandTable[n].keys = numkeys(2, true)
	}
	for _, n := range []string{"BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX"} {
		commandTable[n].keys = func(a [][]byte) ([][]byte, string) { return a[1 : len(a)-1], "" } // the timeout last
	}
	commandTable["BLMOVE"].keys, commandTable["BRPOPLPUSH"].keys = pair, pair
	commandTable["BLMPOP"].keys, commandTable["BZMPOP"].keys = numkeys(2, false), numkeys(2, false)
	commandTable["BITOP"].keys = all(2)
	commandTable["XREAD"].keys, commandTable["XREADGROUP"].keys = streamsKeys, streamsKeys
	for _, n := range []string{"XINFO", "XGROUP"} {
		commandTable[n].keys = func(a [][]byte) ([][]byte, string) {
			if strings.EqualFold(string(a[1]), "HELP") && len(a) > 2 { // Redis's arity error, not a key
				return nil, "wrong number of arguments for '" + strings.ToLower(string(a[0])) + "|help' command"
			}
			if len(a) < 3 {
				return nil, "troop: " + strings.ToUpper(string(a[0])) + " " + strings.ToUpper(resp.Printable(a[1])) + " names no key"
			}
			return a[2:3], ""
		}
	}
	for _, n := range []string{"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"} {
		commandTable[n].keys = scriptKeys
	}
	commandTable["SORT"].keys = func(a [][]byte) ([][]byte, string) { keys, _ := sortKeys(a); return keys, "" }
	commandTable["SORT_RO"].keys = commandTable["SORT"].keys
	commandTable["MEMORY"].keys = func(a [][]byte) ([][]byte, string) {
		if strings.EqualFold(string(a[1]), "USAGE") {
			return a[2:3], ""
		}
		return nil, "troop: MEMORY " + strings.ToUpper(resp.Printable(a[1])) + " is not supported (MEMORY USAGE key is)"
	}
	commandTable["OBJECT"].keys = func(a [][]byte) ([][]byte, string) {
		switch strings.ToUpper(string(a[1])) {
		case "ENCODING", "FREQ", "IDLETIME", "REFCOUNT":
			return a[2:3], ""
		}
		return nil, "troop: OBJECT " + strings.ToUpper(resp.Printable(a[1])) + " is not supported (ENCODING, FREQ, IDLETIME and REFCOUNT are)"
	}
	commandTable["MSETNX"].keys = func(a [][]byte) ([][]byte, string) { return commandTable["MSET"].keys(a) }
	commandTable["MSET"].keys = func(a [][]byte) ([][]byte, string) {
		if len(a)%2 == 0 {
			return nil, "wrong number of arguments for '" + strings.ToLower(string(a[0])) + "' command"
		}
		keys := make([][]byte, 0, len(a)/2)
		for i := 1; i < len(a); i += 2 {
			keys = append(keys, a[i])
		}
		return keys, ""
	}
	// Whole-value writes are last-writer-wins by version.
	for _, n := range []string{"SETEX", "PSETEX"} {
		commandTable[n].lww, commandTable[n].staleReply = true, "+OK\r\n"
	}
	// A delete is a whole-value write too: an older delete must not remove a
	// newer value (the version it leaves behind is a tombstone).
	for _, n := range []string{"DEL", "UNLINK"} {
		commandTable[n].lww, commandTable[n].staleReply = true, ":0\r\n"
	}
}

// lookup finds a command by its name in any case, without allocating for
// the common upper- and lower-case spellings.
func lookup(name []byte) *command {
	if c, ok := commandTable[string(name)]; ok {
		return c
	}
	return commandTable[strings.ToUpper(string(name))]
}

// streamsKeys are the keys of XREAD and XREADGROUP: after STREAMS, the
// first half of what follows (the IDs are the other).
func streamsKeys(a [][]byte) ([][]byte, string) {
	for i := 1; i < len(a); i++ {
		switch strings.ToUpper(string(a[i])) {
		case "STREAMS":
			rest := a[i+1:]
			if len(rest) == 0 || len(rest)%2 != 0 {
				return nil, "Unbalanced '" + strings.ToLower(string(a[0])) + "' list of streams: for each stream key an ID or '$' must be specified."
			}
			return rest[:len(rest)/2], ""
		}
	}
	return nil, "syntax error"
}

// sortKeys are SORT's keys, the sorted key and the STORE destination, and
// the keys its BY and GET patterns name (nosort and GET # name none). A
// malformed SORT is redis-server's to refuse.
func sortKeys(args [][]byte) (keys, patterns [][]byte) {
	keys = args[1:2]
	for i := 2; i < len(args); i++ {
		word := strings.ToUpper(string(args[i]))
		if i+1 == len(args) {
			break
		}
		switch word {
		case "LIMIT":
			i += 2
		case "BY":
			if bytes.IndexByte(args[i+1], '*') >= 0 {
				patterns = append(patterns, args[i+1])
			}
			i++
		case "GET":
			if string(args[i+1]) != "#" {
				patterns = append(patterns, args[i+1])
			}
			i++
		case "STORE":
			keys = append(keys[:1:1], args[i+1])
			i++
		}
	}
	return keys, patterns
}

// kindFor is the kind of this call of c: SORT without STORE only reads.
func (c *command) kindFor(args [][]byte) kind {
	if blockingStreamRead(c, args) {
		return kindBlocking // blocking.go
	}
	if c.name == "SORT" {
		if keys, _ := sortKeys(args); len(keys) == 1 {
			return kindMultiRead
		}
	}
	return c.kind
}

// writesFor is writes of this call of c (kindFor).
func (c *command) writesFor(args [][]byte) bool {
	return c.writes() && c.kindFor(args) != kindMultiRead
}

// writes says whether the command changes data: the node refuses it in
// writes-only and standby states accordingly, and holds its connection's
// token until every replica answered.
func (c *command) writes() bool {
	switch c.kind {
	case kindWrite, kindMultiWrite, kindDrawn, kindBlocking:
		return true
	case kindSplit:
		return c.lww || c.name == "MSET"
	case kindScript:
		return !strings.HasSuffix(c.name, "_RO")
	case kindCopied:
		return true
	}
	return false
}

// arityOK applies Redis's arity rule.
func (c *command) arityOK(n int) bool {
	if c.arity >= 0 {
		return n == c.arity
	}
	return n >= -c.arity
}

// isLWW says whether this particular call replaces the whole value. SET is,
// unless a condition (NX, XX), GET or KEEPTTL makes its effect depend on what
// the replica holds.
func (c *command) isLWW(args [][]byte) bool {
	if c.name != "SET" {
		return c.lww
	}
	for _, a := range args[3:] {
		switch {
		case bytes.EqualFold(a, []byte("NX")), bytes.EqualFold(a, []byte("XX")),
			bytes.EqualFold(a, []byte("GET")), bytes.EqualFold(a, []byte("KEEPTTL")):
			return false
		}
	}
	return true
}

// expiryEffect says what a write of args does to its key's expiry, for the
// version cache: a plain SET clears it; a write that changes a value in
// place and always leaves the key existing keeps it (one that may leave
// the key absent, such as LPUSHX, or ZADD XX, takes the script, which
// gives the version of an absent key the tombstone grace).
func (c *command) expiryEffect(args [][]byte) expiryEffect {
	switch c.name {
	case "SET":
		if len(args) == 3 {
			return clearsExpiry
		}
	case "INCR", "DECR", "INCRBY", "DECRBY", "INCRBYFLOAT", "APPEND", "SETBIT",
		"LPUSH", "RPUSH", "HSET", "HMSET", "HSETNX", "HINCRBY", "HINCRBYFLOAT", "SADD", "ZINCRBY", "PFADD":
		return keepsExpiry
	case "ZADD":
		for _, a := range args[2:] {
			if bytes.EqualFold(a, []byte("XX")) {
				return mayExpire
			}
		}
		return keepsExpiry
	}
	return mayExpire
}

// staleReplyFor is what a replica answers for a last-writer-wins write it
// ignores as older than what it holds: what the command answers when it runs.
func (c *command) staleReplyFor() string {
	if c.name == "SET" {
		return "+OK\r\n"
	}
	return c.staleReply
}

// commandCount is the number of table entries, for per-command counters.
func commandCount() int { return len(commandTable) }
