package node

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// BLPOP waits for a push through any node, and of many clients blocked on
// one list through every node, each element goes to exactly one; every
// replica ends with the same (empty) list.
func TestBlockingPops(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})

	// A timeout with nothing to pop: the null array, after the timeout.
	c := tc.client(0, "DC_QUORUM")
	start := time.Now()
	if v := c.do("BLPOP", "bl:none", "0.2"); !v.IsNull || v.Type != resp.Array {
		t.Errorf("BLPOP that timed out: %s, want a null array", v)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("BLPOP with a 0.2 s timeout answered after %v", d)
	}
	for _, bad := range [][]string{{"BLPOP", "k", "-1"}, {"BLPOP", "k", "soon"}} {
		if v := c.do(bad...); !v.IsError() || !strings.Contains(string(v.Str), "timeout is") {
			t.Errorf("%v: %s", bad, v)
		}
	}

	// Clients blocked through every node, elements pushed through every
	// node: each element popped once.
	const clients, elements = 6, 60
	var (
		mu  sync.Mutex
		got []string
		wg  sync.WaitGroup
	)
	cls := make([]*client, clients) // all connected first: each gives up after 2 s with nothing
	for i := range cls {
		cls[i] = tc.client(i%3, "DC_QUORUM")
	}
	for _, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				v, err := cl.try("BLPOP", "bl:other", "bl:queue", "2")
				if err != nil || v.IsError() {
					mu.Lock()
					got = append(got, fmt.Sprintf("error: %v %s", err, v))
					mu.Unlock()
					return
				}
				if v.IsNull {
					return // the queue stayed empty for 2 s: done
				}
				if len(v.Elems) != 2 || string(v.Elems[0].Str) != "bl:queue" {
					mu.Lock()
					got = append(got, fmt.Sprintf("error: reply %s", v))
					mu.Unlock()
					return
				}
				mu.Lock()
				got = append(got, string(v.Elems[1].Str))
				mu.Unlock()
			}
		}()
	}
	eventually(t, 10*time.Second, func() string { // blocked first, every one of them
		n := int64(0)
		for _, tn := range tc.nodes {
			n += tn.node.stats.blocked.Load()
		}
		if n != clients {
			return fmt.Sprintf("%d clients blocked, want %d before the pushes", n, clients)
		}
		return ""
	})
	if n := c.must("INFO"); !strings.Contains(n, "blocked_clients:") {
		t.Errorf("INFO without blocked_clients:\n%s", n)
	}
	for i := 0; i < elements; i++ {
		tc.client(i%3, "DC_QUORUM").must("RPUSH", "bl:queue", fmt.Sprintf("e%02d", i))
	}
	wg.Wait()
	sort.Strings(got)
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("%s popped twice", got[i])
		}
	}
	if len(got) != elements || strings.HasPrefix(got[0], "error") {
		t.Fatalf("%d elements popped of %d: %v", len(got), elements, got)
	}
	// A quorum sees the list empty. (A replica may still hold an element
	// whose push reached it after the pop that took it: pushes and pops
	// through different nodes are not ordered on every replica; repair
	// settles it. store.md, Pops.)
	if n := c.must("LLEN", "bl:queue"); n != "0" {
		t.Errorf("LLEN at DC_QUORUM after every element was popped: %s", n)
	}

	// The other blocking pops, each waking for a push through another node.
	for _, tc2 := range []struct {
		block []string
		push  []string
		want  string
	}{
		{[]string{"BRPOP", "bl:r", "5"}, []string{"RPUSH", "bl:r", "a", "b"}, `["bl:r" "b"]`},
		{[]string{"BZPOPMIN", "bl:z", "5"}, []string{"ZADD", "bl:z", "2", "two", "1", "one"}, `["bl:z" "one" "1"]`},
		{[]string{"BZPOPMAX", "bl:z2", "5"}, []string{"ZADD", "bl:z2", "3", "three", "1", "one"}, `["bl:z2" "three" "3"]`},
		{[]string{"BLMOVE", "{bl}src", "{bl}dst", "LEFT", "RIGHT", "5"}, []string{"RPUSH", "{bl}src", "x"}, `"x"`},
		{[]string{"BRPOPLPUSH", "{bl}src", "{bl}dst", "5"}, []string{"RPUSH", "{bl}src", "y"}, `"y"`},
		{[]string{"BLMPOP", "5", "2", "{bl}m1", "{bl}m2", "LEFT", "COUNT", "2"}, []string{"RPUSH", "{bl}m2", "p", "q", "r"}, `["{bl}m2" ["p" "q"]]`},
		{[]string{"BZMPOP", "5", "1", "bl:zm", "MIN"}, []string{"ZADD", "bl:zm", "5", "five"}, `["bl:zm" [["five" "5"]]]`},
	} {
		blocked := tc.client(1, "DC_QUORUM")
		reply := make(chan resp.Value, 1)
		go func() {
			v, err := blocked.try(tc2.block...)
			if err != nil {
				v = resp.Value{Type: resp.Error, Str: []byte(err.Error())}
			}
			reply <- v
		}()
		eventually(t, 10*time.Second, func() string { // blocked before the push
			if n := tc.nodes[1].node.stats.blocked.Load(); n != 1 {
				return fmt.Sprintf("%v: %d clients blocked, want 1", tc2.block, n)
			}
			return ""
		})
		tc.client(2, "DC_QUORUM").must(tc2.push...)
		select {
		case v := <-reply:
			if v.String() != tc2.want {
				t.Errorf("%v after %v: %s, want %s", tc2.block, tc2.push, v, tc2.want)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%v: no answer 5 s after %v", tc2.block, tc2.push)
		}
	}

	// A wrong type is answered at once.
	c.must("SET", "bl:string", "x")
	if v := c.do("BLPOP", "bl:string", "0"); !v.IsError() || !strings.HasPrefix(string(v.Str), "WRONGTYPE") {
		t.Errorf("BLPOP of a string: %s", v)
	}
}

// A client that goes away while blocked stops the wait: nothing is left
// waiting on the node.
func TestBlockedClientGone(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1})
	c := tc.client(0, "")
	c.c.Write(resp.AppendCommandStrings(nil, "BLPOP", "gone", "0"))
	eventually(t, 2*time.Second, func() string {
		if n := tc.nodes[0].node.stats.blocked.Load(); n != 1 {
			return fmt.Sprintf("%d clients blocked, want 1", n)
		}
		return ""
	})
	c.c.Close()
	eventually(t, 2*time.Second, func() string {
		if n := tc.nodes[0].node.stats.blocked.Load(); n != 0 {
			return fmt.Sprintf("%d clients still blocked after their connection closed", n)
		}
		return ""
	})
	if got := tc.client(0, "").must("RPUSH", "gone", "a"); got != "1" {
		t.Errorf("RPUSH after the blocked client left: %s (the element was taken)", got)
	}
}

// Clients blocked through one node are served before the write that woke
// them answers, as Redis serves them: a chain of blocking moves has run to
// its end when the push that started it returns, and of two clients
// blocked on one list, a push of two elements serves both.
func TestBlockedServedBeforeTheWriteAnswers(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	block := func(args ...string) chan resp.Value {
		c := tc.client(0, "DC_QUORUM")
		out := make(chan resp.Value, 1)
		go func() { out <- c.do(args...) }()
		return out
	}
	blockedBy := func(n int64) {
		eventually(t, 5*time.Second, func() string {
			if got := tc.nodes[0].node.stats.blocked.Load(); got != n {
				return fmt.Sprintf("%d clients blocked, want %d", got, n)
			}
			return ""
		})
	}
	first := block("BLMOVE", "turn:a", "turn:b", "LEFT", "RIGHT", "5")
	blockedBy(1)
	second := block("BRPOPLPUSH", "turn:b", "turn:c", "5")
	blockedBy(2)
	c := tc.client(0, "DC_QUORUM")
	c.must("RPUSH", "turn:a", "x")
	if got := c.do("LRANGE", "turn:c", "0", "-1"); len(got.Elems) != 1 || string(got.Elems[0].Str) != "x" {
		t.Errorf("right after the push that woke two chained moves, turn:c holds %s, want [x]", got)
	}
	for _, ch := range []chan resp.Value{first, second} {
		if v := <-ch; string(v.Str) != "x" {
			t.Errorf("a blocking move answered %s, want x", v)
		}
	}

	one := block("BLPOP", "turn:q", "5")
	blockedBy(1)
	two := block("BLPOP", "turn:q", "5")
	blockedBy(2)
	c.must("RPUSH", "turn:q", "1", "2")
	if got := c.must("LLEN", "turn:q"); got != "0" {
		t.Errorf("right after a push of two to two blocked clients, the list holds %s elements, want 0", got)
	}
	for i, ch := range []chan resp.Value{one, two} {
		if v := <-ch; len(v.Elems) != 2 || string(v.Elems[1].Str) != fmt.Sprint(i+1) {
			t.Errorf("blocked client %d got %s, want [turn:q %d]", i+1, v, i+1)
		}
	}
}

// Inside MULTI the blocking pops do not block, as in Redis: each pops what
// is there, on every replica, or answers nil at once; a bad timeout aborts
// the transaction.
func TestBlockingPopsInsideMulti(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) { c.HashTag = "{}" }})
	c := tc.client(0, "DC_QUORUM")
	c.must("RPUSH", "{m}src", "a", "b", "c")
	c.must("ZADD", "{m}z", "1", "one")
	c.must("MULTI")
	for _, cmd := range [][]string{
		{"BLPOP", "{m}none", "{m}src", "0"},
		{"brpop", "{m}none", "5"}, // in any case
		{"BRPOPLPUSH", "{m}src", "{m}dst", "0"},
		{"BLMOVE", "{m}src", "{m}dst", "LEFT", "LEFT", "0"},
		{"BZPOPMIN", "{m}z", "0"},
		{"BLMPOP", "0", "1", "{m}none", "LEFT"},
	} {
		if got := c.must(cmd...); got != "QUEUED" {
			t.Fatalf("%v inside MULTI: %s", cmd, got)
		}
	}
	got := c.do("EXEC")
	want := `[["{m}src" "a"] (nil) "c" "b" ["{m}z" "one" "1"] (nil)]`
	if s := got.String(); s != want {
		t.Errorf("EXEC: %s, want %s", s, want)
	}
	for _, tn := range tc.nodes { // EXEC answered once two of three had it: the third may lag
		r := dial(t, tn.redis.Addr)
		eventually(t, 5*time.Second, func() string {
			if got := r.do("LRANGE", "{m}dst", "0", "-1").String(); got != `["b" "c"]` {
				return fmt.Sprintf("%s's redis-server: {m}dst %s, want [b c]", tn.cfg.Name, got)
			}
			return ""
		})
	}
	c.must("MULTI")
	if v := c.do("BLPOP", "{m}src", "-1"); !v.IsError() {
		t.Errorf("BLPOP with a negative timeout inside MULTI: %s", v)
	}
	if v := c.do("EXEC"); !v.IsError() || !strings.HasPrefix(string(v.Str), "EXECABORT") {
		t.Errorf("EXEC after a bad timeout: %s", v)
	}
}

// As Redis: options a blocking pop would refuse are refused before it
// blocks, and a key that becomes another type while a client waits on it
// leaves the client waiting.
func TestBlockingPopsAsRedisDoes(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) { c.HashTag = "{}" }})
	c := tc.client(0, "DC_QUORUM")
	for _, bad := range [][]string{
		{"BZMPOP", "1", "1", "{r}z", "bad_where"},
		{"BLMPOP", "1", "1", "{r}l", "LEFT", "COUNT", "0"},
		{"BLMPOP", "1", "1", "{r}l", "LEFT", "COUNT"},
		{"BLMOVE", "{r}a", "{r}b", "UP", "LEFT", "1"},
	} {
		if v := c.do(bad...); !v.IsError() || !strings.HasPrefix(string(v.Str), "ERR") {
			t.Errorf("%v: %s, want an error at once", bad, v)
		}
	}
	got := make(chan resp.Value, 1)
	blocked := tc.client(0, "DC_QUORUM")
	go func() { got <- blocked.do("BLPOP", "{r}k", "5") }()
	eventually(t, 5*time.Second, func() string {
		if n := tc.nodes[0].node.stats.blocked.Load(); n != 1 {
			return fmt.Sprintf("%d clients blocked, want 1", n)
		}
		return ""
	})
	// A write through the same node answers once the clients blocked on
	// its keys have looked again: after this one, the pop has looked at
	// the key once, found nothing and waits (a pop whose first look finds
	// a string answers WRONGTYPE at once).
	c.must("DEL", "{r}k")
	c.must("MULTI")
	c.must("LPUSH", "{r}k", "a")
	c.must("DEL", "{r}k")
	c.must("SET", "{r}k", "string")
	c.do("EXEC") // answers once the pop has looked at the key, a string now
	if n := tc.nodes[0].node.stats.blocked.Load(); n != 1 {
		t.Errorf("%d clients blocked after the key became a string, want the pop still waiting", n)
	}
	c.must("DEL", "{r}k")
	c.must("LPUSH", "{r}k", "b")
	if v := <-got; v.String() != `["{r}k" "b"]` {
		t.Errorf("BLPOP on a key that was a string for a while: %s, want [{r}k b]", v)
	}
}

// XREAD and XREADGROUP with BLOCK wait for an entry added through another
// node; a group's entry goes to one of the consumers blocked on it through
// different nodes; a timeout answers nil, and a group destroyed while a
// client waits answers NOGROUP.
func TestBlockingStreams(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) { c.HashTag = "{}" }})
	c0, c1, c2 := tc.client(0, "DC_QUORUM"), tc.client(1, "DC_QUORUM"), tc.client(2, "DC_QUORUM")
	blocked := func(c *client, want int) {
		t.Helper()
		eventually(t, 10*time.Second, func() string {
			if info := c.must("INFO", "clients"); !strings.Contains(info, fmt.Sprintf("blocked_clients:%d\r", want)) {
				return fmt.Sprintf("waiting for %d blocked clients:\n%s", want, info)
			}
			return ""
		})
	}
	later := func(c *client, args ...string) <-chan resp.Value {
		out := make(chan resp.Value, 1)
		go func() {
			v, err := c.try(args...)
			if err != nil {
				v = resp.Value{Type: resp.Error, Str: []byte(err.Error())}
			}
			out <- v
		}()
		return out
	}

	start := time.Now()
	if v := c0.do("XREAD", "BLOCK", "100", "STREAMS", "{s}:none", "$"); !v.IsNull {
		t.Errorf("XREAD BLOCK 100 with nothing to read: %s, want nil", v)
	} else if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("XREAD BLOCK 100 answered after %v", d)
	}
	if v := c0.do("XREAD", "BLOCK", "-1", "STREAMS", "{s}:none", "$"); !v.IsError() || !strings.Contains(string(v.Str), "timeout is negative") {
		t.Errorf("XREAD BLOCK -1: %s", v)
	}

	c1.must("XADD", "{s}:b", "*", "old", "1")
	read := later(tc.client(0, "DC_QUORUM"), "XREAD", "BLOCK", "0", "STREAMS", "{s}:b", "$")
	blocked(c0, 1)
	id := c1.must("XADD", "{s}:b", "*", "new", "2")
	if v := <-read; len(v.Elems) != 1 || string(v.Elems[0].Elems[1].Elems[0].Elems[0].Str) != id {
		t.Errorf("XREAD BLOCK 0 ... $: %s, want the entry %s added through another node", v, id)
	}

	c0.must("XGROUP", "CREATE", "{s}:b", "g", "$")
	reads := []<-chan resp.Value{
		later(tc.client(0, "DC_QUORUM"), "XREADGROUP", "GROUP", "g", "a", "COUNT", "1", "BLOCK", "5000", "STREAMS", "{s}:b", ">"),
		later(tc.client(2, "DC_QUORUM"), "XREADGROUP", "GROUP", "g", "b", "COUNT", "1", "BLOCK", "5000", "STREAMS", "{s}:b", ">"),
	}
	blocked(c0, 1)
	blocked(c2, 1)
	id = c1.must("XADD", "{s}:b", "*", "job", "3")
	var got []string
	for _, r := range reads {
		v := <-r
		if v.IsError() {
			t.Fatalf("XREADGROUP BLOCK: %s", v.Str)
		}
		if !v.IsNull {
			got = append(got, string(v.Elems[0].Elems[1].Elems[0].Elems[0].Str))
		}
	}
	if len(got) != 1 || got[0] != id {
		t.Errorf("two consumers blocked through two nodes got %v, want the entry %s once", got, id)
	}

	read = later(tc.client(2, "DC_QUORUM"), "XREADGROUP", "GROUP", "g", "a", "BLOCK", "0", "STREAMS", "{s}:b", ">")
	blocked(c2, 1)
	c1.must("XGROUP", "DESTROY", "{s}:b", "g")
	if v := <-read; !v.IsError() || !strings.HasPrefix(string(v.Str), "NOGROUP") {
		t.Errorf("XREADGROUP BLOCK 0 when its group is destroyed: %s, want NOGROUP", v)
	}
}
