package node

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// TestScripts runs EVAL, EVALSHA, SCRIPT, FUNCTION and FCALL through the
// nodes of a 3-rack cluster of two nodes per rack, at DC_QUORUM: a script
// runs on the deciding replica of its keys, and every replica then holds
// what it left there, even when it drew at random.
func TestScripts(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, perRack: 2, configure: func(c *topology.Config) { c.HashTag = "{}"; c.AllowFlush = true }})
	a, b, other := tagged(tc.nodes[0].node)
	c0, c1 := tc.client(0, "DC_QUORUM"), tc.client(3, "DC_QUORUM")

	// replicasHold checks every replica of key comes to hold the same
	// members (or value), and returns them. A change at DC_QUORUM is
	// answered once a quorum took it: the last replica may take it a
	// moment later.
	replicasHold := func(t *testing.T, key string, read ...string) string {
		t.Helper()
		var replicas []*client
		for _, tn := range tc.nodes {
			if tn.node.replicas([]byte(key))[0].self {
				replicas = append(replicas, dial(t, tn.redis.Addr))
			}
		}
		var seen []string
		eventually(t, 10*time.Second, func() string {
			seen = seen[:0]
			for _, r := range replicas {
				v := r.do(append(read, key)...)
				got := string(v.Str)
				if v.Elems != nil {
					vs := values(v)
					sort.Strings(vs)
					got = fmt.Sprint(vs)
				}
				seen = append(seen, got)
			}
			if len(seen) != 3 || seen[0] != seen[1] || seen[1] != seen[2] {
				return fmt.Sprintf("the replicas of %s hold %q, want the same on all 3", key, seen)
			}
			return ""
		})
		return seen[0]
	}

	t.Run("a script's effect reaches every replica", func(t *testing.T) {
		got := c0.do("EVAL", "redis.call('INCRBY', KEYS[1], ARGV[1]); redis.call('SADD', KEYS[2], ARGV[2]); return redis.call('GET', KEYS[1])", "2", a, b, "5", "m")
		if string(got.Str) != "5" {
			t.Fatalf("EVAL = %s", got)
		}
		if v := replicasHold(t, a, "GET"); v != "5" {
			t.Fatalf("replicas hold %s = %s", a, v)
		}
		replicasHold(t, b, "SMEMBERS")
	})

	t.Run("a script that draws at random leaves the same on every replica", func(t *testing.T) {
		c0.must("SADD", b, "a", "b", "c", "d", "e", "f", "g", "h")
		got := c1.do("EVAL", "return redis.call('SPOP', KEYS[1], 3)", "1", b)
		if len(got.Elems) != 3 {
			t.Fatalf("EVAL of SPOP 3 = %s", got)
		}
		if held := replicasHold(t, b, "SMEMBERS"); len(strings.Fields(held)) != 6 { // m and 5 of the 8
			t.Fatalf("after the script the replicas hold %s", held)
		}
	})

	t.Run("SCRIPT LOAD through one node, EVALSHA through any", func(t *testing.T) {
		sha := c0.must("SCRIPT", "LOAD", "return redis.call('INCR', KEYS[1])")
		for i := range tc.nodes {
			c := tc.client(i, "DC_QUORUM")
			if got := c.do("EVALSHA", sha, "1", a); got.IsError() {
				t.Fatalf("EVALSHA through %s: %s", tc.nodes[i].cfg.Name, got.Str)
			}
		}
		if v := replicasHold(t, a, "GET"); v != "11" {
			t.Fatalf("after 6 EVALSHA of INCR, the replicas hold %s", v)
		}
		if got := c1.do("SCRIPT", "EXISTS", sha, "0000000000000000000000000000000000000000"); len(got.Elems) != 2 || got.Elems[0].Int != 1 || got.Elems[1].Int != 0 {
			t.Fatalf("SCRIPT EXISTS = %s", got)
		}
		c1.must("SCRIPT", "FLUSH")
		if got := c0.do("EVALSHA", sha, "1", a); !got.IsError() || !strings.HasPrefix(string(got.Str), "NOSCRIPT") {
			t.Fatalf("EVALSHA after SCRIPT FLUSH = %s, want NOSCRIPT", got)
		}
		// troop's own scripts stay: a transaction with WATCH runs them.
		got := c0.pipeline([]string{"WATCH", a}, []string{"MULTI"}, []string{"INCR", a}, []string{"EXEC"})
		if exec := got[3]; len(exec.Elems) != 1 || exec.Elems[0].Int != 12 {
			t.Fatalf("WATCH and EXEC after SCRIPT FLUSH = %s, %s", got[0], exec)
		}
	})

	t.Run("FUNCTION LOAD through one node, FCALL through another", func(t *testing.T) {
		lib := "#!lua name=trooptest\nredis.register_function('setget', function(keys, args) redis.call('SET', keys[1], args[1]); return redis.call('GET', keys[1]) end)"
		if got := c0.must("FUNCTION", "LOAD", "REPLACE", lib); got != "trooptest" {
			t.Fatalf("FUNCTION LOAD = %s", got)
		}
		if got := c1.must("FCALL", "setget", "1", a, "fv"); got != "fv" {
			t.Fatalf("FCALL = %s", got)
		}
		replicasHold(t, a, "GET")
	})

	t.Run("what cannot be routed is refused", func(t *testing.T) {
		if got := c0.do("EVAL", "return 1", "2", a, other); !got.IsError() || !strings.Contains(string(got.Str), "belong to different nodes") {
			t.Fatalf("EVAL on keys of two owners = %s", got)
		}
		if got := c0.do("EVAL", "return 1", "0"); got.Int != 1 {
			t.Fatalf("EVAL with no keys = %s", got)
		}
		if got := c0.do("EVAL", "return redis.call('SET', 'nowhere', 1)", "0"); !got.IsError() || !strings.Contains(string(got.Str), "Write commands are not allowed from read-only scripts") {
			t.Fatalf("EVAL that writes with no keys = %s, want redis-server's refusal of a write in a read-only script", got)
		}
		if got := c0.do("EVAL_RO", "return 7", "0"); got.Int != 7 {
			t.Fatalf("EVAL_RO with no keys = %s", got)
		}
		if got := c0.do("EVAL_RO", "return redis.call('GET', KEYS[1])", "1", a); string(got.Str) != "fv" {
			t.Fatalf("EVAL_RO = %s", got)
		}
		if got := c0.do("EVAL_RO", "return redis.call('SET', KEYS[1], 'x')", "1", a); !got.IsError() {
			t.Fatalf("a write in EVAL_RO = %s", got)
		}
		got := c0.pipeline([]string{"MULTI"}, []string{"EVAL", "return 1", "1", a}, []string{"EXEC"})
		if !got[1].IsError() || !strings.HasPrefix(string(got[2].Str), "EXECABORT") {
			t.Fatalf("EVAL inside MULTI: %s, EXEC %s", got[1], got[2])
		}
	})
}

// TestScriptDeepReply: a script's reply nests as deep as Lua's stack lets
// it (a table that holds itself, about 8,000 levels), and reaches the
// client whole through the node, from its own redis-server (no keys) and
// from another node's (a key it does not hold, written by the script so
// that it runs on the deciding replica); the connections to the
// redis-servers stay up.
func TestScriptDeepReply(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1, perRack: 2, configure: func(c *topology.Config) { c.HashTag = "{}" }})
	_, _, other := tagged(tc.nodes[0].node)
	c := tc.client(0, "")
	deep := func(v resp.Value) int {
		d := 0
		for v.Type == resp.Array && len(v.Elems) == 1 {
			v, d = v.Elems[0], d+1
		}
		return d
	}
	for _, run := range [][]string{
		{"EVAL", "local a = {}; local b = {a}; a[1] = b; return a", "0"},
		{"EVAL", "redis.call('set', KEYS[1], 1); local a = {}; local b = {a}; a[1] = b; return a", "1", other},
	} {
		v := c.do(run...)
		if d := deep(v); d < 1000 {
			t.Fatalf("%v: a reply %d deep, %s", run[1], d, v.String()[:min(200, len(v.String()))])
		}
		if got := c.must("PING"); got != "PONG" {
			t.Fatalf("PING after a deep reply = %s", got)
		}
	}
	if got := c.must("GET", other); got != "1" {
		t.Fatalf("GET %s = %s after the script set it", other, got)
	}
}
