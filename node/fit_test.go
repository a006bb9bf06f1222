package node

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/resp"
)

// The names of a 1 x 3 x 1 test cluster's nodes and their points.
const (
	n1, n2, n3 = "dc1-rack1-1", "dc1-rack2-1", "dc1-rack3-1"
)

func redisP(node string) string    { return node + "/redis" }
func callP(from, to string) string { return from + "->" + to }

// lineageOf asks TROOP LINEAGE on c.
func lineageOf(t *testing.T, c *client) Lineage {
	t.Helper()
	v := c.do("TROOP", "LINEAGE")
	if v.IsError() || v.IsNull {
		t.Fatalf("TROOP LINEAGE: %s (null %v)", v.Str, v.IsNull)
	}
	var l Lineage
	if err := json.Unmarshal(v.Str, &l); err != nil {
		t.Fatalf("TROOP LINEAGE %s: %v", v.Str, err)
	}
	return l
}

func sameSet(t *testing.T, what string, got, want []string) {
	t.Helper()
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// TROOP FIT and TROOP LINEAGE: the syntax, bad input changing nothing.
func TestTroopFitCommand(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	c := tc.client(0, "DC_QUORUM")

	if v := c.do("TROOP", "LINEAGE"); !v.IsNull {
		t.Errorf("TROOP LINEAGE before any traced request = %s, want nil", v)
	}
	c.must("SET", "k", "v") // not traced: no scope, lineage off
	if v := c.do("TROOP", "LINEAGE"); !v.IsNull {
		t.Errorf("TROOP LINEAGE after an untraced request = %s, want nil", v)
	}
	if got := c.must("TROOP", "FIT"); got != "" {
		t.Errorf("TROOP FIT with no scope = %q", got)
	}
	c.must("TROOP", "FIT", callP(n1, n2)+"=error,"+redisP(n3)+"=delay:50ms")
	if got, want := c.must("TROOP", "FIT"), callP(n1, n2)+"=error,"+redisP(n3)+"=delay:50ms"; got != want {
		t.Errorf("TROOP FIT = %q, want %q", got, want)
	}
	for _, bad := range []struct{ scope, want string }{
		{"dc1-rack1-1", "want POINT=ACTION"},
		{"nopoint=error", "want SERVICE/POINT or CALLER->CALLEE"},
		{redisP(n1) + "=explode", `unknown action "explode"`},
		{redisP(n1) + "=delay:soon", "delay wants a positive duration"},
		{redisP(n1) + "=error," + redisP(n1) + "=timeout", "appears twice"},
	} {
		v := c.do("TROOP", "FIT", bad.scope)
		if !v.IsError() || !contains(string(v.Str), bad.want) {
			t.Errorf("TROOP FIT %s = %s, want an error saying %q", bad.scope, v, bad.want)
		}
	}
	if got, want := c.must("TROOP", "FIT"), callP(n1, n2)+"=error,"+redisP(n3)+"=delay:50ms"; got != want {
		t.Errorf("after bad scopes TROOP FIT = %q, want it unchanged, %q", got, want)
	}
	for _, args := range [][]string{{"TROOP", "FIT", "a", "b"}, {"TROOP", "LINEAGE", "MAYBE"}, {"TROOP", "NOTHING"}, {"TROOP"}} {
		if v := c.do(args...); !v.IsError() {
			t.Errorf("%v = %s, want an error", args, v)
		}
	}
	c.must("TROOP", "FIT", "RESET")
	if got := c.must("TROOP", "FIT"); got != "" {
		t.Errorf("TROOP FIT after RESET = %q", got)
	}
	c.must("GET", "k")
	c.must("TROOP", "LINEAGE", "ON")
	c.must("GET", "k")
	if l := lineageOf(t, c); l.Command != "GET" || l.Level != "DC_QUORUM" || !l.OK || l.Scope != "" {
		t.Errorf("lineage with TROOP LINEAGE ON = %+v", l)
	}
	c.must("TROOP", "LINEAGE", "OFF")
	c.must("SET", "k", "w")
	if l := lineageOf(t, c); l.Command != "GET" {
		t.Errorf("after TROOP LINEAGE OFF, the last traced request is %s, want the GET", l.Command)
	}
	// Other connections are not affected by this one's scope.
	other := tc.client(0, "DC_QUORUM")
	if v := other.do("TROOP", "LINEAGE"); !v.IsNull {
		t.Errorf("TROOP LINEAGE on a fresh connection = %s", v)
	}
}

// A hold keeps a call from leaving until the client changes its scope or
// hangs up: a quorum write is acknowledged without the held replica, which
// gets the write only then (and not as a hint: nothing failed). The held
// call is to the third rack, which the write's version query does not ask
// (it asks its own rack and the next).
func TestFitHold(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	held := func(key string) string {
		if got := dial(t, tc.nodes[2].redis.Addr).must("GET", key); got != "(nil)" {
			return fmt.Sprintf("%s's redis-server has %s = %q while its write is held", n3, key, got)
		}
		return ""
	}
	for _, let := range []string{"RESET", "another scope", "hang up"} {
		t.Run(let, func(t *testing.T) {
			c := tc.client(0, "DC_QUORUM")
			key := "held:" + let
			c.must("TROOP", "FIT", callP(n1, n3)+"=hold")
			c.must("SET", key, "v")
			if got := tc.client(1, "DC_QUORUM").must("GET", key); got != "v" {
				t.Fatalf("a quorum read through %s = %q, want the write", n2, got)
			}
			if msg := held(key); msg != "" {
				t.Fatal(msg)
			}
			switch let {
			case "RESET":
				c.must("TROOP", "FIT", "RESET")
			case "another scope":
				c.must("TROOP", "FIT", redisP(n2)+"=delay:1ms")
			default:
				c.c.Close()
			}
			eventually(t, 10*time.Second, func() string {
				if held(key) == "" {
					return fmt.Sprintf("%s never got the write after the hold was let go", n3)
				}
				return ""
			})
		})
	}
	if pending, _, _ := tc.nodes[0].node.hintTotals(); pending != 0 {
		t.Errorf("%d hints pending: a held call is no failure", pending)
	}
}

// The lineage of reads and writes at each level, and faults injected at
// this node's points and, propagated, at a peer's.
func TestInjectionAndLineage(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, timeout: time.Second})
	c := tc.client(0, "")
	c.must("TROOP", "CONSISTENCY", "DC_SAFE_QUORUM")
	c.must("SET", "k", "v1") // on all three replicas

	type step struct {
		name, level, scope string
		cmd                []string
		fails              bool     // the reply is an error
		errorHas           string   // and says this
		reached, used      []string // nil: not checked
		slower             time.Duration
	}
	local, to2, red2, to3, red3 := redisP(n1), callP(n1, n2), redisP(n2), callP(n1, n3), redisP(n3)
	steps := []step{
		{name: "quorum read, healthy", level: "DC_QUORUM", cmd: []string{"GET", "k"},
			reached: []string{local, to2, red2}, used: []string{local, to2, red2}},
		{name: "quorum read, local datastore fails", level: "DC_QUORUM", scope: local + "=error", cmd: []string{"GET", "k"},
			reached: []string{local, to2, red2, to3, red3}, used: []string{to2, red2, to3, red3}},
		{name: "quorum read, link to rack2 fails", level: "DC_QUORUM", scope: to2 + "=error", cmd: []string{"GET", "k"},
			reached: []string{local, to2, to3, red3}, used: []string{local, to3, red3}},
		{name: "quorum read, rack2's datastore fails there", level: "DC_QUORUM", scope: red2 + "=error", cmd: []string{"GET", "k"},
			reached: []string{local, to2, red2, to3, red3}, used: []string{local, to3, red3}},
		{name: "quorum read, two replicas fail", level: "DC_QUORUM", scope: local + "=error," + red3 + "=error," + to2 + "=error", cmd: []string{"GET", "k"},
			fails: true, errorHas: "fit: error injected at " + local},
		{name: "one read, healthy", level: "DC_ONE", cmd: []string{"GET", "k"},
			reached: []string{local}, used: []string{local}},
		{name: "one read fails over twice", level: "DC_ONE", scope: local + "=error," + red2 + "=error", cmd: []string{"GET", "k"},
			reached: []string{local, to2, red2, to3, red3}, used: []string{to3, red3}},
		{name: "one read, every replica fails", level: "DC_ONE", scope: local + "=error," + red2 + "=error," + to3 + "=error", cmd: []string{"GET", "k"},
			fails: true, errorHas: "no replica answered"},
		{name: "one write, local fails: failover", level: "DC_ONE", scope: local + "=error," + to2 + "=error", cmd: []string{"SET", "k", "v2"},
			used: []string{to3, red3}},
		{name: "quorum read, delayed peer", level: "DC_QUORUM", scope: red2 + "=delay:300ms", cmd: []string{"GET", "k"},
			used: []string{local, to2, red2}, slower: 300 * time.Millisecond},
		{name: "quorum read, peer link times out", level: "DC_QUORUM", scope: to2 + "=timeout", cmd: []string{"GET", "k"},
			used: []string{local, to3, red3}, slower: time.Second},
		{name: "quorum read, rack2's datastore times out there", level: "DC_QUORUM", scope: red2 + "=timeout", cmd: []string{"GET", "k"},
			reached: []string{local, to2, red2, to3, red3}, used: []string{local, to3, red3}, slower: time.Second},
		{name: "quorum write, rack3 fails", level: "DC_QUORUM", scope: red3 + "=error", cmd: []string{"SET", "k", "v3"},
			used: []string{local, to2, red2}},
		{name: "safe quorum write, rack2 link fails", level: "DC_SAFE_QUORUM", scope: to2 + "=error", cmd: []string{"SET", "k", "v4"},
			used: []string{local, to3, red3}},
	}
	for _, s := range steps {
		c.must("TROOP", "CONSISTENCY", s.level)
		if s.scope == "" {
			c.must("TROOP", "FIT", "RESET")
			c.must("TROOP", "LINEAGE", "ON")
		} else {
			c.must("TROOP", "FIT", s.scope)
		}
		start := time.Now()
		v := c.do(s.cmd...)
		took := time.Since(start)
		if v.IsError() != s.fails || (s.fails && !contains(string(v.Str), s.errorHas)) {
			t.Errorf("%s: %v = %s", s.name, s.cmd, v)
			continue
		}
		if took < s.slower {
			t.Errorf("%s: answered in %v, before the injected %v", s.name, took, s.slower)
		}
		l := lineageOf(t, c)
		scope, _ := fit.ParseScope(s.scope)
		if l.OK == s.fails || l.Scope != scope.String() {
			t.Errorf("%s: lineage %+v", s.name, l)
		}
		if s.reached != nil {
			sameSet(t, s.name+": reached", l.Reached, s.reached)
		}
		if s.used != nil {
			sameSet(t, s.name+": used", l.Used, s.used)
		}
		if s.fails && len(l.Used) != 0 {
			t.Errorf("%s: a failed request used %v", s.name, l.Used)
		}
	}
	c.must("TROOP", "FIT", "RESET")
	c.must("TROOP", "LINEAGE", "OFF")

	// A DC_QUORUM write's lineage names the two replicas that answered its
	// version query (this node's first) and the two whose acknowledgements
	// made the quorum, whichever answered first: two or three replicas.
	c.must("TROOP", "CONSISTENCY", "DC_QUORUM")
	c.must("TROOP", "FIT", "")
	c.must("SET", "k", "v5")
	l := lineageOf(t, c)
	replicasUsed := 0
	for _, p := range l.Used {
		if strings.HasSuffix(p, "/redis") {
			replicasUsed++
		}
	}
	if replicasUsed < 2 || !slices.Contains(l.Used, local) {
		t.Errorf("DC_QUORUM write used %v, want this node's replica and at least one other", l.Used)
	}
	// MGET is split: one trace gathers every key's replicas.
	c.must("TROOP", "CONSISTENCY", "DC_ONE")
	c.must("MGET", "k", "other")
	if l := lineageOf(t, c); l.Command != "MGET" || !slices.Equal(l.Used, []string{local}) {
		t.Errorf("MGET lineage %+v", l)
	}

	// A quorum write whose version query outlives the node's timeout (its
	// first peer never answers) is not stamped late: it is not applied.
	c.must("TROOP", "CONSISTENCY", "DC_QUORUM")
	c.must("TROOP", "FIT", to2+"=timeout")
	if v := c.do("SET", "k", "late"); !v.IsError() || !contains(string(v.Str), "was not applied: its version query took more than the node's timeout") {
		t.Errorf("SET past the timeout = %s", v)
	}
	c.must("TROOP", "FIT", "RESET")
	c.must("TROOP", "CONSISTENCY", "DC_SAFE_QUORUM")
	if got := c.must("GET", "k"); got != "v5" {
		t.Errorf("GET after the write that was not applied = %q, want v5", got)
	}
}

// A pipelined TROOP LINEAGE answers for the request before it, once that
// has its answer, even when the answer comes late.
func TestLineagePipelined(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	c := tc.client(0, "DC_QUORUM")
	c.must("TROOP", "FIT", redisP(n2)+"=delay:200ms")
	var req []byte
	req = resp.AppendCommandStrings(req, "SET", "p", "1")
	req = resp.AppendCommandStrings(req, "TROOP", "LINEAGE")
	req = resp.AppendCommandStrings(req, "GET", "p")
	req = resp.AppendCommandStrings(req, "TROOP", "LINEAGE")
	if _, err := c.c.Write(req); err != nil {
		t.Fatal(err)
	}
	var replies []resp.Value
	for range 4 {
		v, err := c.rd.ReadValue()
		if err != nil {
			t.Fatal(err)
		}
		replies = append(replies, v)
	}
	for i, want := range []string{"SET", "GET"} {
		var l Lineage
		if err := json.Unmarshal(replies[2*i+1].Str, &l); err != nil || l.Command != want || !l.OK || len(l.Used) == 0 {
			t.Errorf("pipelined TROOP LINEAGE after %s = %s (%v)", want, replies[2*i+1], err)
		}
	}
}

// A FIT peer request with a bad scope is refused, and nothing runs.
func TestPeerFitRefusesBadScope(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	p := dial(t, tc.nodes[1].cfg.DynListen)
	if v := p.do("HELLO", "2", "tester", "dc1", "rack1", "127.0.0.1:1", "127.0.0.1:2"); v.IsError() {
		t.Fatal(v)
	}
	for _, args := range [][]string{
		{"FIT", "garbage", "LOCAL", "GET", "k"},
		{"FIT", redisP(n2) + "=error"},
		{"FIT", redisP(n2) + "=error", "FIT", redisP(n2) + "=error", "LOCAL", "GET", "k"},
		{"FIT", redisP(n2) + "=error", "PING", "x"},
	} {
		if v := p.do(args...); !v.IsError() || !contains(string(v.Str), "troop peer protocol: FIT") {
			t.Errorf("%v = %s, want a FIT protocol error", args, v)
		}
	}
	if v := p.do("FIT", redisP(n2)+"=error", "LOCAL", "GET", "k"); !v.IsError() || !contains(string(v.Str), "UNREACHABLE fit: error injected at "+redisP(n2)) {
		t.Errorf("FIT on the peer's own datastore = %s, want UNREACHABLE", v)
	}
	if v := p.do("LOCAL", "GET", "k"); v.IsError() {
		t.Errorf("a LOCAL after FIT requests failed: %s", v)
	}
}

// scopeFor hands a peer exactly the faults at its own points.
func TestScopeFor(t *testing.T) {
	scope, err := fit.ParseScope("a/redis=error,a->b=timeout,ab/redis=error,b/redis=delay:1s,b->a=error")
	if err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]string{"a": "a->b=timeout,a/redis=error", "b": "b->a=error,b/redis=delay:1s", "c": "", "ab": "ab/redis=error"} {
		if got := scopeFor(scope, node); got != want {
			t.Errorf("scopeFor(%s) = %q, want %q", node, got, want)
		}
	}
	req := appendPeerRequest(nil, "READ", nil, [][]byte{[]byte("GET"), []byte("k")})
	v, err := resp.Parse(wrapFit(req, "a/redis=error"))
	if err != nil || fmt.Sprint(v) != fmt.Sprint(resp.Value{Type: resp.Array, Elems: []resp.Value{
		{Type: resp.BulkString, Str: []byte("FIT")}, {Type: resp.BulkString, Str: []byte("a/redis=error")},
		{Type: resp.BulkString, Str: []byte("READ")}, {Type: resp.BulkString, Str: []byte("GET")}, {Type: resp.BulkString, Str: []byte("k")}}}) {
		t.Errorf("wrapFit = %v, %v", v, err)
	}
}
