package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
	"github.com/troop-lab/troop/topology"
)

// pipeline sends every command at once and reads as many replies.
func (c *client) pipeline(cmds ...[]string) []resp.Value {
	c.t.Helper()
	var req []byte
	for _, cmd := range cmds {
		req = resp.AppendCommandStrings(req, cmd...)
	}
	if _, err := c.c.Write(req); err != nil {
		c.t.Fatal(err)
	}
	out := make([]resp.Value, len(cmds))
	for i := range cmds {
		v, err := c.rd.ReadValue()
		if err != nil {
			c.t.Fatalf("reply %d of %v: %v", i, cmds, err)
		}
		out[i] = v
	}
	return out
}

// tagged returns two keys of one hash tag, and a key of another tag that
// lands on another node of the rack.
func tagged(n *Node) (a, b, other string) {
	owner := func(k string) int { return n.view().localRacks[0].ring.Owner(ring.Hash(ring.Tag([]byte(k), "{}"))) }
	a, b = "{u1}:a", "{u1}:b"
	for i := 0; ; i++ {
		if other = fmt.Sprintf("{o%d}:x", i); owner(other) != owner(a) {
			return a, b, other
		}
	}
}

func TestTransactions(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, perRack: 2, configure: func(c *topology.Config) { c.HashTag = "{}" }})
	a, b, other := tagged(tc.nodes[0].node)
	c := tc.client(0, "DC_QUORUM")

	t.Run("runs on every replica", func(t *testing.T) {
		got := c.pipeline([]string{"MULTI"}, []string{"SET", a, "1"}, []string{"INCR", a}, []string{"LPUSH", b, "x"},
			[]string{"GET", a}, []string{"GET", "{u1}:missing"}, []string{"EXEC"})
		for i, want := range []string{"OK", "QUEUED", "QUEUED", "QUEUED", "QUEUED", "QUEUED"} {
			if string(got[i].Str) != want {
				t.Fatalf("reply %d: %s, want %s", i, got[i], want)
			}
		}
		exec := got[6]
		if exec.IsError() || len(exec.Elems) != 5 || string(exec.Elems[0].Str) != "OK" || exec.Elems[1].Int != 2 ||
			exec.Elems[2].Int != 1 || string(exec.Elems[3].Str) != "2" || !exec.Elems[4].IsNull {
			t.Fatalf("EXEC = %s", exec)
		}
		tc.redisesHoldOnOwners(a, "2")
	})

	t.Run("an error inside is its reply, the rest runs", func(t *testing.T) {
		got := c.pipeline([]string{"MULTI"}, []string{"LPUSH", a, "x"}, []string{"SET", b, "v"}, []string{"EXEC"})
		exec := got[3]
		if len(exec.Elems) != 2 || !strings.HasPrefix(string(exec.Elems[0].Str), "WRONGTYPE") || string(exec.Elems[1].Str) != "OK" {
			t.Fatalf("EXEC = %s", exec)
		}
	})

	t.Run("a bad command aborts it all", func(t *testing.T) {
		c.must("SET", a, "before")
		got := c.pipeline([]string{"MULTI"}, []string{"SET", a, "after"}, []string{"NOSUCH"}, []string{"GET"}, []string{"EXEC"})
		if !got[2].IsError() || !got[3].IsError() {
			t.Fatalf("bad commands queued: %s, %s", got[2], got[3])
		}
		if !strings.HasPrefix(string(got[4].Str), "EXECABORT Transaction discarded because of previous errors") {
			t.Fatalf("EXEC = %s", got[4])
		}
		if v := c.must("GET", a); v != "before" {
			t.Fatalf("after an aborted transaction, GET = %q", v)
		}
	})

	t.Run("keys on different nodes: refused, nothing runs", func(t *testing.T) {
		c.must("SET", a, "before")
		got := c.pipeline([]string{"MULTI"}, []string{"SET", a, "after"}, []string{"SET", other, "after"}, []string{"EXEC"})
		if string(got[1].Str) != "QUEUED" || string(got[2].Str) != "QUEUED" {
			t.Fatalf("queueing: %s %s", got[1], got[2])
		}
		if !got[3].IsError() || !strings.HasPrefix(string(got[3].Str), "EXECABORT troop: the keys of this transaction belong to different nodes") {
			t.Fatalf("EXEC = %s", got[3])
		}
		if v := c.must("GET", a); v != "before" {
			t.Fatalf("GET %s = %q: part of a refused transaction ran", a, v)
		}
		if v := c.must("EXISTS", other); v != "0" {
			t.Fatalf("EXISTS %s = %s: part of a refused transaction ran", other, v)
		}
	})

	t.Run("the node's own commands inside", func(t *testing.T) {
		c.must("SET", a, "1")
		got := c.pipeline([]string{"MULTI"}, []string{"INCR", a}, []string{"INFO", "server"}, []string{"CLIENT", "GETNAME"},
			[]string{"PING"}, []string{"INCR", a}, []string{"EXEC"})
		exec := got[6]
		if exec.IsError() || len(exec.Elems) != 5 || exec.Elems[0].Int != 2 || !contains(string(exec.Elems[1].Str), "troop_node:") ||
			!exec.Elems[2].IsNull || string(exec.Elems[3].Str) != "PONG" || exec.Elems[4].Int != 3 {
			t.Fatalf("EXEC = %s", exec)
		}
		c.must("SET", a, "before")
	})

	t.Run("DISCARD and errors of Redis", func(t *testing.T) {
		got := c.pipeline([]string{"MULTI"}, []string{"SET", a, "discarded"}, []string{"MULTI"}, []string{"DISCARD"},
			[]string{"EXEC"}, []string{"DISCARD"}, []string{"GET", a})
		want := []string{"OK", "QUEUED", "ERR MULTI calls can not be nested", "OK", "ERR EXEC without MULTI", "ERR DISCARD without MULTI", "before"}
		for i, w := range want {
			if string(got[i].Str) != w {
				t.Errorf("reply %d: %s, want %s", i, got[i], w)
			}
		}
	})

	t.Run("WATCH", func(t *testing.T) {
		c.must("SET", a, "1")
		c.must("WATCH", a, b)
		c.must("MULTI")
		c.must("INCR", a)
		if v := c.do("EXEC"); len(v.Elems) != 1 || v.Elems[0].Int != 2 {
			t.Fatalf("EXEC with nothing changed = %s", v)
		}
		c.must("WATCH", a)
		c2 := tc.client(1, "DC_QUORUM")
		c2.must("SET", a, "changed")
		c.must("MULTI")
		c.must("SET", a, "mine")
		if v := c.do("EXEC"); !v.IsNull || v.IsError() {
			t.Fatalf("EXEC after a watched key changed = %s, want nil", v)
		}
		if v := c.must("GET", a); v != "changed" {
			t.Fatalf("GET = %q", v)
		}
		// EXEC forgets the watch.
		c.must("MULTI")
		c.must("SET", a, "mine")
		if v := c.do("EXEC"); len(v.Elems) != 1 {
			t.Fatalf("EXEC after the last one = %s", v)
		}
		if v := c.do("WATCH", a, other); !v.IsError() {
			t.Fatalf("WATCH across nodes = %s", v)
		}
		many := []string{"WATCH"}
		for i := 0; i <= maxWatchedKeys; i++ {
			many = append(many, a)
		}
		if v := c.do(many...); !v.IsError() || !contains(string(v.Str), "at most") {
			t.Fatalf("WATCH of %d keys = %s", len(many)-1, v)
		}
		c.must("UNWATCH")
	})
}

// redisesHoldOnOwners checks that key's replicas hold want in their
// redis-servers.
func (tc *testCluster) redisesHoldOnOwners(key, want string) {
	tc.t.Helper()
	for _, tn := range tc.nodes {
		if !tn.node.replicas([]byte(key))[0].self {
			continue
		}
		r := dial(tc.t, tn.redis.Addr)
		eventually(tc.t, 2*time.Second, func() string {
			if got := r.must("GET", key); got != want {
				return fmt.Sprintf("%s's redis-server: GET %s = %q, want %q", tn.cfg.Name, key, got, want)
			}
			return ""
		})
	}
}

func TestCleanScriptError(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"-ERR value is not an integer or out of range script: 58429e7d81114c3166ab00d143c9f1a40861cee8, on @user_script:23.\r\n",
			"ERR value is not an integer or out of range"},
		{"-ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 6b1bf486c81ceb7edf3c093f4c48a6b8f8b4e0d3, on @user_script:1.\r\n",
			"ERR Script attempted to access nonexistent global variable 'x'"},
		{"-ERR Error running script (call to f_6b1bf486c81ceb7edf3c093f4c48a6b8f8b4e0d3): @user_script:12: WRONGTYPE Operation against a key\r\n",
			"ERR WRONGTYPE Operation against a key"},
		{"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
			"WRONGTYPE Operation against a key holding the wrong kind of value"},
	} {
		if got := cleanScriptError([]byte(tt.in)); got != tt.want {
			t.Errorf("cleanScriptError(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzParseTxRequest checks that a peer's transaction request, however
// broken, is parsed or refused with an error, never a panic, and that what
// it accepts encodes back to the same words.
func FuzzParseTxRequest(f *testing.F) {
	f.Add([]byte(appendTxRequest(nil, "TX", []byte("0000018f0000000000a1"), [][]byte{[]byte("k")}, [][]byte{[]byte("v:d")},
		[][][]byte{{[]byte("SET"), []byte("k"), []byte("1")}, {[]byte("PING")}})))
	f.Add([]byte("*4\r\n$2\r\nTX\r\n$0\r\n\r\n$1\r\n0\r\n$1\r\n0\r\n"))
	f.Add([]byte("*5\r\n$2\r\nTX\r\n$0\r\n\r\n$1\r\n9\r\n$1\r\n1\r\n$2\r\n-1\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := resp.Parse(data)
		if err != nil || len(v.Elems) < 1 {
			return
		}
		words := make([][]byte, len(v.Elems))
		for i, e := range v.Elems {
			words[i] = e.Str
		}
		version, wkeys, tokens, cmds, bad := parseTxRequest(words[1:])
		if bad != "" {
			if !strings.HasPrefix(bad, "ERR troop peer protocol: bad transaction: ") {
				t.Fatalf("error %q does not say what it refuses", bad)
			}
			return
		}
		back := appendTxRequest(nil, "TX", version, wkeys, tokens, cmds)
		w, err := resp.Parse(back)
		if err != nil || len(w.Elems) != len(words) {
			t.Fatalf("%q parsed, but encodes back to %q", data, back)
		}
	})
}
