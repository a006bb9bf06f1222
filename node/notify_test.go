package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/resp"
)

// The flags read and written back as Redis 7.0 does (its own unit
// pubsub checks the same four).
func TestNotifyFlags(t *testing.T) {
	for _, tc := range []struct{ in, out string }{
		{"", ""}, {"gKE", "gKE"}, {"$lshzxeKE", "$lshzxeKE"}, {"KA", "AK"}, {"EA", "AE"},
		{"Ex", "xE"}, {"KEA", "AKE"}, {"AmnK", "AnKm"}, {"Ag$lshzxeKEtmdn", "AnKEm"}, {"tdg", "gtd"}, {"Agggg", "A"},
	} {
		flags, ok := parseNotifyFlags(tc.in)
		if !ok {
			t.Errorf("%q refused", tc.in)
			continue
		}
		if got := formatNotifyFlags(flags); got != tc.out {
			t.Errorf("%q written back as %q, want %q", tc.in, got, tc.out)
		}
	}
	for _, bad := range []string{"a", "KEX", "K E", "ü", "A\x00"} {
		if _, ok := parseNotifyFlags(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Whatever the input, what is written back reads as the same flags, and
// writes back the same (the canonical form is a fixed point).
func FuzzNotifyFlags(f *testing.F) {
	for _, s := range []string{"", "KEA", "gKE", "$lshzxeKE", "AmnK", "Ag$lshzxeKEtmdn", "xyz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		flags, ok := parseNotifyFlags(s)
		if !ok {
			return
		}
		out := formatNotifyFlags(flags)
		again, ok := parseNotifyFlags(out)
		if !ok || again != flags {
			t.Fatalf("%q: %b written %q, which reads %b (ok %v)", s, flags, out, again, ok)
		}
		if formatNotifyFlags(again) != out {
			t.Fatalf("%q: the canonical form %q is not a fixed point", s, out)
		}
	})
}

// The events of commands, by reply, in Redis's names and order.
func TestCommandEvents(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	ok, null := resp.Value{Type: resp.SimpleString, Str: []byte("OK")}, resp.Value{Type: resp.BulkString, IsNull: true}
	num := func(n int64) resp.Value { return resp.Value{Type: resp.Integer, Int: n} }
	bulk := func(s string) resp.Value { return resp.Value{Type: resp.BulkString, Str: []byte(s)} }
	arr := func(e ...resp.Value) resp.Value { return resp.Value{Type: resp.Array, Elems: e} }
	for _, tc := range []struct {
		cmd   string
		reply resp.Value
		want  string
	}{
		{"SET k v", ok, "$ set k"},
		{"SET k v EX 10", ok, "$ set k; g expire k"},
		{"SET k v NX", null, ""},
		{"SET k v NX GET", bulk("old"), ""},
		{"SET k v XX GET", bulk("old"), "$ set k"},
		{"SET k v KEEPTTL", ok, "$ set k"},
		{"SETEX k 10 v", ok, "$ set k; g expire k"},
		{"SETNX k v", num(0), ""},
		{"MSETNX a 1 b 2", num(1), "$ set a; $ set b"},
		{"INCR n", num(1), "$ incrby n"},
		{"DECRBY n 2", num(-1), "$ incrby n"},
		{"INCRBYFLOAT n 1.5", bulk("1.5"), "$ incrbyfloat n"},
		{"GETDEL k", null, ""},
		{"GETDEL k", bulk("v"), "g del k"},
		{"GETEX k EX 5", bulk("v"), "g expire k"},
		{"GETEX k EXAT 1", bulk("v"), "g del k"},
		{"DEL k", num(1), "g del k"},
		{"DEL k", num(0), ""},
		{"DEL {t}a {t}b", num(2), "g del {t}a; g del {t}b"},
		{"DEL {t}a {t}b", num(1), ""},
		{"MSET {t}a 1 {t}b 2", ok, "$ set {t}a; $ set {t}b"},
		{"EXPIRE k 10", num(1), "g expire k"},
		{"EXPIRE k -1", num(1), "g del k"},
		{"PEXPIREAT k 1700000001000", num(1), "g expire k"},
		{"EXPIREAT k 1699999999", num(1), "g del k"},
		{"EXPIRE k 10", num(0), ""},
		{"PERSIST k", num(1), "g persist k"},
		{"RENAME {t}a {t}b", ok, "g rename_from {t}a; g rename_to {t}b"},
		{"RENAMENX {t}a {t}b", num(0), ""},
		{"RENAME {t}a {t}a", ok, ""},
		{"BITOP AND {t}d {t}a {t}b", num(3), "$ set {t}d"},
		{"SORT {t}l ALPHA STORE {t}d", num(2), "l sortstore {t}d"},
		{"SORT {t}l ALPHA STORE {t}d", num(0), ""},
		{"SMOVE {t}a {t}b m", num(1), ""},
		{"COPY {t}a {t}b", num(1), "g copy_to {t}b"},
		{"LPUSH l a b", num(2), "l lpush l"},
		{"RPUSHX l a", num(0), ""},
		{"RPUSHX l a", num(3), "l rpush l"},
		{"RPOP l", bulk("a"), "l rpop l"},
		{"LPOP l", null, ""},
		{"BLPOP x l 0", arr(bulk("l"), bulk("a")), "l lpop l"},
		{"LMOVE {t}a {t}b LEFT RIGHT", bulk("x"), "l rpush {t}b; l lpop {t}a"},
		{"RPOPLPUSH {t}a {t}b", bulk("x"), "l lpush {t}b; l rpop {t}a"},
		{"LMPOP 2 {t}a {t}b RIGHT", arr(bulk("{t}b"), arr(bulk("x"))), "l rpop {t}b"},
		{"BZMPOP 0 1 z MIN", arr(bulk("z"), arr()), "z zpopmin z"},
		{"SADD s a", num(0), ""},
		{"SADD s a", num(1), "s sadd s"},
		{"SREM s x", num(0), ""},
		{"SPOP s", bulk("a"), "s spop s"},
		{"ZADD z 1 a", num(1), "z zadd z"},
		{"ZADD z INCR 1 a", bulk("2"), "z zincr z"},
		{"ZINCRBY z 1 a", bulk("2"), "z zincr z"},
		{"ZREM z a", num(1), "z zrem z"},
		{"BZPOPMAX z 0", arr(bulk("z"), bulk("a"), bulk("1")), "z zpopmax z"},
		{"HSET h f v", num(1), "h hset h"},
		{"HMSET h f v", ok, "h hset h"},
		{"HSETNX h f v", num(0), ""},
		{"HINCRBY h f 1", num(1), "h hincrby h"},
		{"HDEL h f", num(1), "h hdel h"},
		{"XADD s * f v", bulk("1-0"), "t xadd s"},
		{"XADD s NOMKSTREAM * f v", null, ""},
		{"XGROUP CREATE s g $ MKSTREAM", ok, "t xgroup-create s"},
		{"XGROUP CREATECONSUMER s g c", num(1), "t xgroup-createconsumer s"},
		{"XGROUP CREATECONSUMER s g c", num(0), ""},
		{"XGROUP DESTROY s g", num(1), "t xgroup-destroy s"},
		{"PFADD p a", num(0), ""},
		{"PFADD p a", num(1), "$ pfadd p"},
		{"EVAL x 1 k", null, ""},
	} {
		var got []string
		for _, e := range commandEvents(bytesArgs(strings.Fields(tc.cmd)), tc.reply, now) {
			got = append(got, fmt.Sprintf("%s %s %s", formatNotifyFlags(e.class), e.event, e.key))
		}
		if strings.Join(got, "; ") != tc.want {
			t.Errorf("%s -> %s: events %q, want %q", tc.cmd, tc.reply, strings.Join(got, "; "), tc.want)
		}
	}
}

func bytesArgs(words []string) [][]byte {
	out := make([][]byte, len(words))
	for i, w := range words {
		out[i] = []byte(w)
	}
	return out
}

// A subscriber on one node of a 3-rack cluster gets exactly one event per
// write made through another node (each key has a replica on every
// node), in Redis's names and order, none for troop's own keys (versions,
// tombstones), and none while notify-keyspace-events is empty. Expired
// events come from one replica alone, though every replica's
// redis-server expires the key.
func TestKeyspaceNotificationsAcrossNodes(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	writer, setter, sub := tc.client(0, ""), tc.client(2, ""), tc.client(1, "")
	sub.c.Write(resp.AppendCommandStrings(nil, "PSUBSCRIBE", "__key*@0__:*", "marker*"))
	read := func() resp.Value {
		t.Helper()
		sub.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		v, err := sub.rd.ReadValue()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for range 2 {
		if v := read(); string(v.Elems[0].Str) != "psubscribe" {
			t.Fatalf("PSUBSCRIBE answered %s", v)
		}
	}
	// until reads the messages up to the markers published, after the
	// writes, through each of the nodes named: a node's messages to
	// another go in order on one link, so an event sent before a marker
	// arrives before it.
	until := func(through ...int) []string {
		t.Helper()
		for _, i := range through {
			tc.client(i, "").must("PUBLISH", fmt.Sprintf("marker%d", i), "end")
		}
		var got []string
		for seen := 0; seen < len(through); {
			v := read()
			if len(v.Elems) != 4 {
				t.Fatalf("the subscriber got %s", v)
			}
			channel, msg := string(v.Elems[2].Str), string(v.Elems[3].Str)
			if strings.HasPrefix(channel, "marker") {
				seen++
				continue
			}
			if strings.Contains(channel+msg, reservedPrefix) {
				t.Errorf("an event of troop's own key: %s %s", channel, msg)
			}
			got = append(got, channel+" "+msg)
		}
		return got
	}
	expect := func(got []string, want ...string) {
		t.Helper()
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}

	writer.must("SET", "foo", "bar")
	writer.must("LPUSH", "l", "a")
	expect(until(0)) // off by default

	if got := setter.must("CONFIG", "SET", "notify-keyspace-events", "KEA"); got != "OK" {
		t.Fatalf("CONFIG SET notify-keyspace-events = %s", got)
	}
	if v := writer.do("CONFIG", "GET", "notify-keyspace-events"); len(v.Elems) != 2 || string(v.Elems[1].Str) != "AKE" {
		t.Fatalf("CONFIG GET notify-keyspace-events through another node = %s, want AKE", v)
	}
	if v := writer.do("CONFIG", "SET", "notify-keyspace-events", "Kq"); !v.IsError() || string(v.Str) != badNotifyFlags {
		t.Fatalf("CONFIG SET of a flag Redis does not know = %s", v)
	}
	writer.must("SET", "foo", "baz", "EX", "100")
	writer.must("SADD", "s", "a")
	writer.must("SADD", "s", "a") // nothing added: no event
	writer.must("RPOP", "l")
	writer.must("MSET", "{t}a", "1", "{t}b", "2")
	writer.must("DEL", "{t}a", "{t}b", "none")
	writer.must("INCR", "n")
	writer.must("MULTI")
	writer.must("HSET", "{t}h", "f", "v")
	writer.must("SREM", "{t}s", "none")
	writer.must("RENAME", "{t}h", "{t}g")
	if v := writer.do("EXEC"); len(v.Elems) != 3 {
		t.Fatalf("EXEC = %s", v)
	}
	expect(until(0),
		"__keyspace@0__:foo set", "__keyevent@0__:set foo",
		"__keyspace@0__:foo expire", "__keyevent@0__:expire foo",
		"__keyspace@0__:s sadd", "__keyevent@0__:sadd s",
		"__keyspace@0__:l rpop", "__keyevent@0__:rpop l",
		"__keyspace@0__:{t}a set", "__keyevent@0__:set {t}a",
		"__keyspace@0__:{t}b set", "__keyevent@0__:set {t}b",
		"__keyspace@0__:{t}a del", "__keyevent@0__:del {t}a",
		"__keyspace@0__:{t}b del", "__keyevent@0__:del {t}b",
		"__keyspace@0__:n incrby", "__keyevent@0__:incrby n",
		"__keyspace@0__:{t}h hset", "__keyevent@0__:hset {t}h",
		"__keyspace@0__:{t}h rename_from", "__keyevent@0__:rename_from {t}h",
		"__keyspace@0__:{t}g rename_to", "__keyevent@0__:rename_to {t}g",
	)

	// Expired: every replica's redis-server expires the key (each is
	// asked for it, which expires it there if it had not yet); only one
	// node relays it. Then each node's redis-server publishes an expired
	// event of a key that node relays: its relay reads it after any event before, so once the three
	// arrived, every relayed event has.
	// The writer's DC_ONE answers once one replica has a write: the key
	// goes on every replica first, without a TTL, so that a replica
	// without it has expired it, and has not yet to receive it.
	setter.must("CONFIG", "SET", "notify-keyspace-events", "Ex")
	writer.must("SET", "gone", "1")
	tc.redisesHold("gone", "1", 10*time.Second)
	writer.must("PEXPIRE", "gone", "50")
	for _, tn := range tc.nodes {
		r := dial(t, tn.redis.Addr)
		eventually(t, 10*time.Second, func() string {
			if r.do("EXISTS", "gone").Int != 0 {
				return "gone has not expired on " + tn.redis.Addr
			}
			return ""
		})
	}
	marks := map[string]bool{}
	for i, tn := range tc.nodes {
		mark := ""
		for j := 0; mark == "" && j < 10000; j++ {
			if k := fmt.Sprintf("mark%d-%d", i, j); tn.node.relaysFor([]byte(k)) {
				mark = k
			}
		}
		dial(t, tn.redis.Addr).must("PUBLISH", "__keyevent@0__:expired", mark)
		marks["__keyevent@0__:expired "+mark] = true
	}
	var got []string
	for seen := 0; seen < len(marks); {
		v := read()
		if e := string(v.Elems[2].Str) + " " + string(v.Elems[3].Str); marks[e] {
			seen++
		} else {
			got = append(got, e)
		}
	}
	expect(got, "__keyevent@0__:expired gone")

	setter.must("CONFIG", "SET", "notify-keyspace-events", "")
	writer.must("SET", "foo", "again")
	expect(until(0, 1, 2))
}
