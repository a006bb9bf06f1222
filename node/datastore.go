package node

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/troop-lab/troop/node/hlc"
	"github.com/troop-lab/troop/resp"
)

// Values live in redis-server as plain values under their own keys, so a
// plain Redis client sees plain data. Each key's version lives beside it
// under VersionPrefix+key. A deleted key leaves its version behind for the
// tombstone grace period, and a key with an expiry keeps its version for
// the grace period past it, so that neither an older write arriving late
// nor repair from a replica that missed the delete or the expiry can bring
// the value back: a version without a value is a tombstone.
const VersionPrefix = "__troop:v:"

// writeScript applies a write with its version, atomically. KEYS alternate
// key, version key; ARGV is the version, "lww" when the write is
// last-writer-wins, "report" when the answer is to be {reply, the key's
// version after it, the key's PTTL} (for the version cache; one key), else
// ""; the tombstone grace in ms, "persist" when the command leaves its key
// without expiry (so PTTL need not be asked), then the command. A
// last-writer-wins write older than the key's version is not run: the
// script answers the status STALE, which the node turns into the command's
// own reply (writeLocal). A last-writer-wins write at or below the key's
// promise (consensus.go) is refused with the PROMISED error: a change
// decided by consensus may be built on a value without it; and so is one
// of a locked key (LOCKED, register.go): the transaction that holds it
// would write its own value over it.
var writeScript = luaPrelude + `
local v = ARGV[1]
local lww = ARGV[2] == 'lww'
if lww then
  if redis.call('EXISTS', LOCK .. KEYS[1]) == 1 then return redis.error_reply(LOCKED) end
  local p = redis.call('GET', PROMISE .. KEYS[1])
  if p and p >= v then return redis.error_reply(PROMISED) end
  local cur = redis.call('GET', KEYS[2])
  if cur and cur >= v then return redis.status_reply('STALE') end
end
local r = redis.pcall(unpack(ARGV, 5))
if type(r) == 'table' and r.err then return r end
local nv, ttl
for i = 1, #KEYS, 2 do
  local vk = KEYS[i+1]
  nv = v
  if not lww then
    local cur = redis.call('GET', vk)
    if cur and cur > v then nv = cur end
  end
  ttl = -1
  if ARGV[4] ~= 'persist' then ttl = redis.call('PTTL', KEYS[i]) end
  if ttl == -2 then
    redis.call('SET', vk, nv, 'PX', ARGV[3])
  elseif ttl == -1 or ttl + tonumber(ARGV[3]) > 9007199254740991 then
    -- an expiry too far to add the grace to exactly (Lua numbers are
    -- doubles): the version outlives the key anyway
    redis.call('SET', vk, nv)
  else
    redis.call('SET', vk, nv, 'PX', ttl + tonumber(ARGV[3]))
  end
end
if ARGV[2] == 'report' then return {r, nv, ttl} end
return r
`

// readScript runs a read and returns {version, reply}; the version is the
// newest of the keys' versions, "" when none has one. KEYS are the keys'
// version keys. A read of a locked key is refused (LOCKED, register.go):
// its value may be older than a transaction already decided.
var readScript = luaPrelude + `
for i = 1, #KEYS do
  if redis.call('EXISTS', LOCK .. string.sub(KEYS[i], ` + strconv.Itoa(len(VersionPrefix)+1) + `)) == 1 then return redis.error_reply(LOCKED) end
end
local r = redis.pcall(unpack(ARGV))
local v = ''
for i = 1, #KEYS do
  local x = redis.call('GET', KEYS[i])
  if x and x > v then v = x end
end
return {v, r}
`

// fetchScript reads what repair copies from a replica: {version (or ""),
// DUMP of the value (or "" for none), PTTL of the value, PTTL of the
// version}, atomically. KEYS are the key and its version key. A locked
// key is not copied (LOCKED): its register is the lock with the value.
var fetchScript = luaPrelude + `
if redis.call('EXISTS', LOCK .. KEYS[1]) == 1 then return redis.error_reply(LOCKED) end
return {redis.call('GET', KEYS[2]) or '', redis.call('DUMP', KEYS[1]) or '',
  redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2])}
`

// repairScript installs a copy fetched from another replica unless this
// one holds a newer version: ARGV are the version, the DUMP ("" writes a
// tombstone: the value is deleted, the version kept), the value's PTTL and
// the version's PTTL as fetched. At the same version it replaces the value
// only when it differs (a replica changed behind troop's back). It answers
// 1 when it changed something, else 0; below the key's promise it is
// refused, as an accept below it would be (consensus.go), and so is a copy
// into a locked key (LOCKED): repair then reads by consensus.
var repairScript = luaPrelude + `
if redis.call('EXISTS', LOCK .. KEYS[1]) == 1 then return redis.error_reply(LOCKED) end
local v = ARGV[1]
local p = redis.call('GET', PROMISE .. KEYS[1])
if p and p > v then return redis.error_reply(PROMISED) end
local cur = redis.call('GET', KEYS[2])
if cur and cur > v then return 0 end
local dump = ARGV[2]
if cur == v then
  local mine = redis.call('DUMP', KEYS[1]) or ''
  if mine == dump then return 0 end
end
if dump == '' then
  redis.call('DEL', KEYS[1])
else
  local ttl = tonumber(ARGV[3])
  if ttl < 0 then ttl = 0 end
  redis.call('RESTORE', KEYS[1], ttl, dump, 'REPLACE')
end
local vttl = tonumber(ARGV[4])
if vttl > 0 then
  redis.call('SET', KEYS[2], v, 'PX', vttl)
else
  redis.call('SET', KEYS[2], v)
end
return 1
`

var (
	writeSHA  = scriptSHA(writeScript)
	readSHA   = scriptSHA(readScript)
	fetchSHA  = scriptSHA(fetchScript)
	repairSHA = scriptSHA(repairScript)
	digestSHA = scriptSHA(digestScript)
)

func scriptSHA(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// troopScripts are the scripts troop runs with EVALSHA.
var troopScripts = []string{writeScript, readScript, fetchScript, repairScript, digestScript, txScript, watchScript, scriptEffects, prepareScript, acceptScript, changeScript}

// appendLoadScripts encodes SCRIPT LOAD of each of troopScripts.
func appendLoadScripts(dst []byte) []byte {
	for _, s := range troopScripts {
		dst = resp.AppendCommandStrings(dst, "SCRIPT", "LOAD", s)
	}
	return dst
}

// loadScripts runs on every new connection to redis-server, which may have
// restarted empty since the last one.
func loadScripts(conn net.Conn, rd *resp.Reader) error {
	if _, err := conn.Write(appendLoadScripts(nil)); err != nil {
		return err
	}
	for _, s := range troopScripts {
		want := scriptSHA(s)
		v, err := rd.ReadValue()
		if err != nil {
			return err
		}
		if v.IsError() || string(v.Str) != want {
			return fmt.Errorf("loading scripts: redis answered %s", v)
		}
	}
	return nil
}

// writeLocal applies a write of args, touching keys, to this node's
// redis-server and passes on its reply: unversioned, the plain command
// (troop_versions: false); a plain SET the version cache vouches for, an
// MSET of the value and its version; a write that changes a value in place
// the cache vouches for, a MULTI of it and its version; any other write,
// the write script.
func (n *Node) writeLocal(b *batch, tr *trace, version []byte, cmd *command, keys, args [][]byte, done func([]byte, error)) {
	l := n.storeFor(keys[0])
	if len(version) == 0 {
		n.toStoreCommand(b, tr, l, args, done)
		return
	}
	lww := cmd.isLWW(args)
	effect := mayExpire
	if tr == nil && len(keys) == 1 { // a traced write passes the datastore's injection point, in toStore
		effect = cmd.expiryEffect(args)
	}
	t := n.versions.record(keys[0], version, effect)
	for _, k := range keys[1:] {
		n.versions.record(k, version, mayExpire)
	}
	if t.fast {
		var err error
		if effect == clearsExpiry {
			err = l.TrySendAppend(1, func(dst []byte) []byte { return appendVersionedSet(dst, args[1], args[2], version) }, done)
		} else {
			err = l.TrySendAppend(4, func(dst []byte) []byte { return appendVersionedInPlace(dst, version, args) }, execReply(done))
		}
		t.queued()
		if err != nil {
			done(nil, err)
			return
		}
		n.stats.scriptlessWrites.Add(1)
		b.add(l)
		return
	}
	grace := n.cfg.TombstoneGrace.Milliseconds()
	if effect == keepsExpiry {
		n.toStoreAppend(b, tr, l, func(dst []byte) []byte { return appendWrite(dst, version, keys, "report", grace, args) }, reportedWrite(t, done))
		return
	}
	lwwArg := ""
	if lww {
		lwwArg = "lww"
	}
	req := func(dst []byte) []byte { return appendWrite(dst, version, keys, lwwArg, grace, args) }
	if !lww {
		if nilIsArray(cmd, args) { // Lua turned redis-server's null array into false, a null bulk
			inner := done
			done = func(raw []byte, err error) {
				if err == nil && isNullBulk(raw) {
					raw = []byte("*-1\r\n")
				}
				inner(raw, err)
			}
		}
		n.toStoreAppend(b, tr, l, req, done)
		return
	}
	stale := cmd.staleReplyFor()
	n.toStoreAppend(b, tr, l, req, func(raw []byte, err error) {
		if err == nil && string(raw) == "+STALE\r\n" {
			raw = []byte(stale)
		} else if effect == clearsExpiry && err == nil && string(raw) == "+OK\r\n" {
			t.learned(version, true)
		}
		done(raw, err)
	})
}

// nilIsArray says whether redis-server answers a null array, not a null
// bulk string, when the command finds nothing: the pops with a count.
func nilIsArray(cmd *command, args [][]byte) bool {
	switch cmd.name {
	case "LPOP", "RPOP":
		return len(args) > 2
	case "LMPOP", "ZMPOP":
		return true
	}
	return false
}

// appendVersionedSet encodes `MSET key value versionkey version`: a plain
// SET and its version in one command, without the write script.
func appendVersionedSet(dst, key, value, version []byte) []byte {
	dst = slices.Grow(dst, 16+resp.BulkSize(len(key))+resp.BulkSize(len(value))+resp.BulkSize(len(VersionPrefix)+len(key))+resp.BulkSize(len(version)))
	dst = resp.AppendArrayHeader(dst, 5)
	dst = resp.AppendBulkString(dst, "MSET")
	dst = resp.AppendBulk(dst, key)
	dst = resp.AppendBulk(dst, value)
	dst = appendVersionKey(dst, key)
	return resp.AppendBulk(dst, version)
}

// appendVersionedInPlace encodes `MULTI; cmd; SET versionkey version;
// EXEC`: a write that changes a value in place and its version, without
// the write script.
func appendVersionedInPlace(dst, version []byte, args [][]byte) []byte {
	dst = resp.AppendCommandStrings(dst, "MULTI")
	dst = resp.AppendCommand(dst, args...)
	dst = resp.AppendArrayHeader(dst, 3)
	dst = resp.AppendBulkString(dst, "SET")
	dst = appendVersionKey(dst, args[1])
	dst = resp.AppendBulk(dst, version)
	return resp.AppendCommandStrings(dst, "EXEC")
}

// execReply passes on the command's own reply from EXEC's answer to
// appendVersionedInPlace; an error (the transaction aborted) as it is.
func execReply(done func([]byte, error)) func([]byte, error) {
	return func(raw []byte, err error) {
		if frames, ok := versionedFrames(raw, err, 2, done); ok {
			done(frames[0], nil)
		}
	}
}

// reportedWrite passes on the command's own reply from the write script's
// report ({reply, version, PTTL}), and teaches the version cache the
// version and whether the key has an expiry.
func reportedWrite(t cacheTicket, done func([]byte, error)) func([]byte, error) {
	return func(raw []byte, err error) {
		frames, ok := versionedFrames(raw, err, 3, done)
		if !ok {
			return
		}
		version, verr := resp.Parse(frames[1])
		ttl, terr := resp.Parse(frames[2])
		if verr != nil || terr != nil {
			done(nil, unexpectedAnswer(raw))
			return
		}
		t.learned(version.Str, ttl.Type == resp.Integer && ttl.Int == -1)
		done(frames[0], nil)
	}
}

// versionedFrames takes apart redis-server's array answer of n frames to
// a versioned write; a failed request or an error answer goes to done as
// it is, and so does anything else, as an error (ok false both ways).
func versionedFrames(raw []byte, err error, n int, done func([]byte, error)) (frames [][]byte, ok bool) {
	if err != nil || len(raw) == 0 || raw[0] == '-' {
		done(raw, err)
		return nil, false
	}
	frames, err = resp.Elements(raw)
	if err != nil || len(frames) != n {
		done(nil, unexpectedAnswer(raw))
		return nil, false
	}
	return frames, true
}

func unexpectedAnswer(raw []byte) error {
	return fmt.Errorf("redis-server answered %q to a versioned write", resp.Printable(raw))
}

// appendWrite encodes a versioned write of args, touching keys, for the
// local redis-server's write script; mode is its "lww", "report" or "".
func appendWrite(dst []byte, version []byte, keys [][]byte, mode string, graceMS int64, args [][]byte) []byte {
	ttlHint := ""
	if len(args) == 3 && isCommand(args[0], "SET") { // a plain SET clears any expiry
		ttlHint = "persist"
	}
	// The seven arguments before the command are no longer than the
	// script's SHA, but the version.
	size := resp.CommandSize(args) + 7*resp.BulkSize(len(writeSHA)) + len(version)
	for _, k := range keys {
		size += resp.BulkSize(len(k)) + resp.BulkSize(len(VersionPrefix)+len(k))
	}
	dst = slices.Grow(dst, size)
	dst = resp.AppendArrayHeader(dst, 3+2*len(keys)+4+len(args))
	dst = resp.AppendBulkString(dst, "EVALSHA")
	dst = resp.AppendBulkString(dst, writeSHA)
	dst = resp.AppendBulkInt(dst, int64(2*len(keys)))
	for _, k := range keys {
		dst = resp.AppendBulk(dst, k)
		dst = appendVersionKey(dst, k)
	}
	dst = resp.AppendBulk(dst, version)
	dst = resp.AppendBulkString(dst, mode)
	dst = resp.AppendBulkInt(dst, max(graceMS, 1))
	dst = resp.AppendBulkString(dst, ttlHint)
	for _, a := range args {
		dst = resp.AppendBulk(dst, a)
	}
	return dst
}

// scriptArgs is the command (EVAL or EVALSHA) that runs script, its text
// or its SHA, on keys and nothing else.
func scriptArgs(cmd, script string, keys [][]byte) [][]byte {
	return append([][]byte{[]byte(cmd), []byte(script), []byte(strconv.Itoa(len(keys)))}, keys...)
}

// appendRead encodes a read of args that also returns the keys' version.
func appendRead(dst []byte, keys [][]byte, args [][]byte) []byte {
	dst = resp.AppendArrayHeader(dst, 3+len(keys)+len(args))
	dst = resp.AppendBulkString(dst, "EVALSHA")
	dst = resp.AppendBulkString(dst, readSHA)
	dst = resp.AppendBulkString(dst, strconv.Itoa(len(keys)))
	for _, k := range keys {
		dst = appendVersionKey(dst, k)
	}
	for _, a := range args {
		dst = resp.AppendBulk(dst, a)
	}
	return dst
}

func appendVersionKey(dst, key []byte) []byte { return appendPrefixedKey(dst, VersionPrefix, key) }

// appendPrefixedKey appends prefix+key as a bulk string.
func appendPrefixedKey(dst []byte, prefix string, key []byte) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(prefix)+len(key)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, prefix...)
	dst = append(dst, key...)
	return append(dst, '\r', '\n')
}

// readLocal reads args from this node's redis-server together with the
// version of keys. A GET of one key asks `MGET key versionkey lockkey`, a
// plain command that costs redis a third of the read script; when that
// cannot tell (no value but a version: a tombstone, or a key of another
// type), it asks the script. A locked key is not read (lockedError).
func (n *Node) readLocal(tr *trace, keys, args [][]byte, b *batch, done func(version, reply []byte, err error)) {
	l := n.storeFor(keys[0])
	script := func(raw []byte, err error) {
		if err != nil {
			done(nil, nil, err)
			return
		}
		done(splitVersioned(raw))
	}
	if len(args) != 2 || !isCommand(args[0], "GET") {
		n.toStore(b, tr, l, appendRead(nil, keys, args), script)
		return
	}
	key := args[1]
	req := make([]byte, 0, 40+3*len(key)+len(VersionPrefix)+len(LockPrefix))
	req = resp.AppendArrayHeader(req, 4)
	req = resp.AppendBulkString(req, "MGET")
	req = resp.AppendBulk(req, key)
	req = appendVersionKey(req, key)
	req = appendPrefixedKey(req, LockPrefix, key)
	n.toStore(b, tr, l, req, func(raw []byte, err error) {
		if err != nil {
			done(nil, nil, err)
			return
		}
		// The value's frame is GET's reply as it is, with no copy.
		frames, perr := resp.Elements(raw)
		if perr == nil && len(frames) == 3 && !isNullBulk(frames[2]) {
			done(nil, nil, errLocked)
			return
		}
		if perr == nil && len(frames) == 3 && !(isNullBulk(frames[0]) && !isNullBulk(frames[1])) {
			if version, err := resp.Parse(frames[1]); err == nil {
				if version.Str == nil {
					version.Str = []byte{}
				}
				done(version.Str, frames[0], nil)
				return
			}
		}
		l.Do(appendRead(nil, keys, args), script)
	})
}

// localVersion answers a version query (ABD's first phase) for key from
// this node's replica: the version cache's bound when it is known and the
// request is not traced (a traced request passes the datastore's injection
// point), else the newer of the version key and the promise key as
// redis-server holds them: a write stamped above a promise is not refused
// by it (the cache's bound covers promises too, consensus.go). done gets b when
// it runs at once, nil when it runs on a reply.
func (n *Node) localVersion(b *batch, tr *trace, key []byte, done func(version []byte, err error, b *batch)) {
	if tr == nil {
		if v, ok := n.versions.known(key); ok {
			done(v, nil, b)
			return
		}
	}
	req := resp.AppendArrayHeader(nil, 3)
	req = resp.AppendBulkString(req, "MGET")
	req = appendVersionKey(req, key)
	req = appendPromiseKey(req, key)
	n.toStore(b, tr, n.storeFor(key), req, func(raw []byte, err error) {
		var version, promise []byte
		frames, perr := resp.Elements(raw)
		if err == nil && (perr != nil || len(frames) != 2) {
			err = unexpectedAnswer(raw)
		}
		if err == nil {
			version, err = parseVersionReply(frames[0], nil)
		}
		if err == nil {
			promise, err = parseVersionReply(frames[1], nil)
		}
		if bytes.Compare(promise, version) > 0 {
			version = promise
		}
		done(version, err, nil)
	})
}

// parseVersionReply reads the answer to a version query: a version, or
// nothing (an empty version) for a key that has none.
func parseVersionReply(raw []byte, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	v, err := resp.Parse(raw)
	switch {
	case err != nil:
		return nil, err
	case v.IsError():
		return nil, fmt.Errorf("version query: %s", v.Str)
	case v.IsNull || len(v.Str) == 0:
		return []byte{}, nil
	}
	if _, ok := hlc.Decode(v.Str); !ok {
		return nil, fmt.Errorf("version query: %q is not a version", resp.Printable(v.Str))
	}
	return v.Str, nil
}

func isCommand(name []byte, want string) bool {
	return len(name) == len(want) && strings.EqualFold(string(name), want)
}

// splitVersioned takes apart the {version, reply} array the read script
// returns (and a peer's READ), the reply as the frame a plain command would
// give, with no copy.
func splitVersioned(raw []byte) (version, reply []byte, err error) {
	if len(raw) > 0 && (raw[0] == '-' || raw[0] == '!') { // the datastore could not run the read at all
		v, err := resp.Parse(raw)
		if err != nil {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("redis: %s", v.Str)
	}
	frames, err := resp.Elements(raw)
	if err == nil && len(frames) != 2 {
		err = fmt.Errorf("versioned read: unexpected reply %q", raw)
	}
	if err != nil {
		return nil, nil, err
	}
	v, err := resp.Parse(frames[0])
	if err != nil {
		return nil, nil, err
	}
	return v.Str, frames[1], nil
}

func isNullBulk(frame []byte) bool { return string(frame) == "$-1\r\n" }
