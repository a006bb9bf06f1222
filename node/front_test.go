package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
	"github.com/troop-lab/troop/topology"
)

// keysOnDifferentOwners finds two keys owned by different nodes of a rack
// with two nodes, and two owned by the same one.
func keysByOwner(n *Node) (differ [2]string, same [2]string) {
	owner := func(k string) int { return n.view().localRacks[0].ring.Owner(ring.Hash([]byte(k))) }
	first := "key0"
	for i := 1; ; i++ {
		k := fmt.Sprintf("key%d", i)
		if owner(k) != owner(first) && differ[1] == "" {
			differ = [2]string{first, k}
		}
		if owner(k) == owner(first) && same[1] == "" {
			same = [2]string{first, k}
		}
		if differ[1] != "" && same[1] != "" {
			return differ, same
		}
	}
}

func TestMultiKeyCommands(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2, perRack: 2})
	c := tc.client(0, "DC_QUORUM")
	differ, same := keysByOwner(tc.nodes[0].node)
	a, b := differ[0], differ[1]
	if got := c.must("MSET", a, "1", b, "2"); got != "OK" {
		t.Fatalf("MSET = %q", got)
	}
	v := c.do("MGET", a, b, "missing")
	if v.IsError() || len(v.Elems) != 3 || string(v.Elems[0].Str) != "1" || string(v.Elems[1].Str) != "2" || !v.Elems[2].IsNull {
		t.Fatalf("MGET = %s", v)
	}
	if got := c.must("EXISTS", a, b, "missing"); got != "2" {
		t.Fatalf("EXISTS = %s", got)
	}
	// Keys on different owners: a command troop cannot split is refused.
	c.must("SADD", a+"s", "x")
	v = c.do("SUNION", a, b)
	if !v.IsError() || !contains(string(v.Str), "belong to different nodes") {
		t.Fatalf("SUNION across owners: %s", v)
	}
	// Keys on the same owner: it runs.
	c.must("SADD", same[0]+"-never", "x") // unrelated key, keeps the set below honest
	c.must("DEL", same[0], same[1])
	c.must("SADD", same[0], "x", "y")
	c.must("SADD", same[1], "y", "z")
	if v := c.do("SUNION", same[0], same[1]); v.IsError() || len(v.Elems) != 3 {
		t.Fatalf("SUNION on one owner: %s", v)
	}
	if got := c.must("DEL", a, b, "missing"); got != "2" {
		t.Fatalf("DEL = %s", got)
	}
	if got := c.must("MGET", a); got != "" {
		// MGET answers an array; must() renders arrays as ""
		t.Fatalf("MGET after DEL rendered %q", got)
	}
	v = c.do("MSET", a, "1", b)
	if !v.IsError() || !contains(string(v.Str), "wrong number of arguments") {
		t.Fatalf("MSET with a missing value: %s", v)
	}
}

func TestCommandSupport(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1})
	c := tc.client(0, "")
	for _, tt := range []struct {
		args []string
		want string // prefix of the error, or "" for success
	}{
		{[]string{"PING"}, ""},
		{[]string{"ECHO", "hi"}, ""},
		{[]string{"SELECT", "0"}, ""},
		{[]string{"SELECT", "1"}, "ERR DB index is out of range"},
		{[]string{"INFO"}, ""},
		{[]string{"COMMAND", "COUNT"}, ""},
		{[]string{"EXEC"}, "ERR EXEC without MULTI"},
		{[]string{"WAIT", "0", "0"}, "ERR troop: 'WAIT' is not supported"},
		{[]string{"BLPOP", "l", "0.01"}, ""},
		{[]string{"BLPOP", "l", "forever"}, "ERR timeout is not a float or out of range"},
		{[]string{"FLUSHALL"}, "ERR troop: 'FLUSHALL' is disabled"},
		{[]string{"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}, "ERR troop: CONFIG SET 'maxmemory-policy' is not passed on"},
		{[]string{"NOSUCH", "a"}, "ERR unknown command 'NOSUCH'"},
		{[]string{"GET"}, "ERR wrong number of arguments for 'get'"},
		{[]string{"GET", "__troop:v:x"}, "ERR troop: keys starting with"},
		{[]string{"TROOP", "CONSISTENCY", "QUORUM"}, "ERR troop: unknown consistency level"},
		{[]string{"DYNO_CONFIG:CONN_CONSISTENCY", "DC_QUORUM"}, ""},
		{[]string{"HSET", "h", "f", "v"}, ""},
		{[]string{"HGET", "h", "f"}, ""},
		{[]string{"GET", "h"}, "WRONGTYPE"},
		{[]string{"ZADD", "z", "1", "a"}, ""},
		{[]string{"EXPIRE", "z", "100"}, ""},
		{[]string{"TTL", "z"}, ""},
	} {
		v := c.do(tt.args...)
		switch {
		case tt.want == "" && v.IsError():
			t.Errorf("%v: %s", tt.args, v.Str)
		case tt.want != "" && (!v.IsError() || !strings.HasPrefix(string(v.Str), tt.want)):
			t.Errorf("%v: got %s, want an error starting %q", tt.args, v, tt.want)
		}
	}
	if got := c.must("TROOP", "CONSISTENCY"); got != "" { // an array
		t.Errorf("TROOP CONSISTENCY rendered %q", got)
	}
	v := c.do("TROOP", "CONSISTENCY")
	if len(v.Elems) != 2 || string(v.Elems[0].Str) != "DC_QUORUM" {
		t.Errorf("after DYNO_CONFIG:CONN_CONSISTENCY DC_QUORUM, TROOP CONSISTENCY = %s", v)
	}
}

// Malformed input gets an error and a closed connection; the node keeps
// serving everyone else.
func TestBadInputClosesOnlyThatConnection(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1, maxRequestBytes: 1 << 20})
	good := tc.client(0, "")
	for _, bad := range []string{
		"*1\r\n:5\r\n",
		"*2\r\n$3\r\nGET\r\n$-5\r\n",
		"*1\r\n$99999999\r\n",
		"GET \"unterminated\r\n",
		"*abc\r\n",
	} {
		c, err := net.Dial("tcp", tc.nodes[0].cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte(bad))
		reply, _ := io.ReadAll(c) // the node closes the connection after its error
		c.Close()
		if !strings.HasPrefix(string(reply), "-ERR Protocol error") {
			t.Errorf("%q: reply %q, want a protocol error", bad, reply)
		}
		if got := good.must("PING"); got != "PONG" {
			t.Fatalf("after %q, another client got %q", bad, got)
		}
	}
	if got := tc.nodes[0].node.Info().ProtocolErrors; got != 5 {
		t.Errorf("protocol errors counted: %d, want 5", got)
	}
}

// Past the per-connection bound on requests in flight, the node stops
// reading that connection until replies drain: every request is served, in
// order, and none is refused. Other connections are served meanwhile.
func TestBackpressureSlowsAConnection(t *testing.T) {
	// A timeout far past the pause: the requests wait for redis-server,
	// however slowly a busy machine gets the test through it.
	tc := startCluster(t, clusterOpts{racks: 1, maxInflightPerConn: 4, timeout: time.Minute})
	p := tc.nodes[0].redis.Cmd.Process
	c := dial(t, tc.nodes[0].cfg.Listen)
	p.Signal(syscall.SIGSTOP) // requests pile up in flight
	defer p.Signal(syscall.SIGCONT)
	var req []byte
	for i := 0; i < 10; i++ {
		req = resp.AppendCommandStrings(req, "SET", fmt.Sprintf("k%d", i), "v")
	}
	c.c.Write(req)
	eventually(t, time.Minute, func() string {
		if got := tc.nodes[0].node.inflight.Load(); got != 4 {
			return fmt.Sprintf("%d requests in flight while redis-server is stopped, want the connection's bound, 4", got)
		}
		return ""
	})
	time.Sleep(100 * time.Millisecond) // time to read past the bound, which it must not
	if got := tc.nodes[0].node.inflight.Load(); got != 4 {
		t.Errorf("%d requests in flight while redis-server is stopped, want the connection's bound, 4", got)
	}
	// The connection waiting for its requests stops no other: enough
	// connections that some share its event loop are answered meanwhile.
	pingOthers(t, tc.nodes[0].cfg.Listen, "beside one waiting for its requests")
	p.Signal(syscall.SIGCONT)
	for i := 0; i < 10; i++ {
		c.c.SetDeadline(time.Now().Add(5 * time.Second))
		v, err := c.rd.ReadValue()
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if v.IsError() || string(v.Str) != "OK" {
			t.Errorf("reply %d: %s, want OK", i, v)
		}
	}
	if got := tc.nodes[0].node.Info().Busy; got != 0 {
		t.Errorf("%d BUSY replies, want none", got)
	}
}

// Past the node's bound on requests in flight, across its connections, a
// request is refused with -BUSY at once; the connection goes on.
func TestBusyWhenTheNodeIsOverloaded(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1, maxInflightPerConn: 4, timeout: 3 * time.Second,
		configure: func(c *topology.Config) { c.MaxInflight = 4 }})
	p := tc.nodes[0].redis.Cmd.Process
	first, second := dial(t, tc.nodes[0].cfg.Listen), dial(t, tc.nodes[0].cfg.Listen)
	p.Signal(syscall.SIGSTOP)
	defer p.Signal(syscall.SIGCONT)
	var req []byte
	for i := 0; i < 4; i++ {
		req = resp.AppendCommandStrings(req, "GET", fmt.Sprintf("k%d", i))
	}
	first.c.Write(req)
	eventually(t, 2*time.Second, func() string {
		if got := tc.nodes[0].node.inflight.Load(); got != 4 {
			return fmt.Sprintf("%d in flight, want 4", got)
		}
		return ""
	})
	if v := second.do("GET", "x"); !v.IsError() || !strings.HasPrefix(string(v.Str), "BUSY") {
		t.Errorf("GET on a full node: %s, want BUSY", v)
	}
	p.Signal(syscall.SIGCONT)
	for i := 0; i < 4; i++ {
		first.c.SetDeadline(time.Now().Add(5 * time.Second))
		if v, err := first.rd.ReadValue(); err != nil || v.IsError() {
			t.Fatalf("reply %d: %v %s", i, err, v)
		}
	}
	if got := second.must("GET", "x"); got != "(nil)" {
		t.Errorf("GET after the overload: %q", got)
	}
	// The refusal counts as Redis counts a call refused before it ran.
	if info := second.must("INFO", "errorstats"); !strings.Contains(info, "errorstat_BUSY:count=1\r\n") {
		t.Errorf("INFO errorstats after one BUSY:\n%s", info)
	}
	if info := second.must("INFO", "commandstats"); !regexp.MustCompile(`\r\ncmdstat_get:calls=\d+,usec=0,usec_per_call=0\.00,rejected_calls=1,failed_calls=0\r\n`).MatchString(info) {
		t.Errorf("INFO commandstats has no GET rejected:\n%s", info)
	}
}

// One connection pipelines far past its bound on requests in flight, as
// redis-cli --pipe does: every request gets its reply, none an error, and
// the pipeline never stalls (a stall would cost the node's timeout). The
// bound is lowered so that the pipeline is hundreds of times deeper than
// it however slow the machine; a read that waits 30 s is a stall.
func TestDeepPipeline(t *testing.T) {
	const bound, n = 64, 20_000
	tc := startCluster(t, clusterOpts{racks: 3, timeout: 2 * time.Second, maxInflightPerConn: bound})
	c := dial(t, tc.nodes[0].cfg.Listen)
	go func() {
		var buf []byte
		for i := 0; i < n; i++ {
			buf = resp.AppendCommandStrings(buf, "SET", fmt.Sprintf("pipe:%d", i), "v")
			if len(buf) > 64<<10 || i == n-1 {
				if _, err := c.c.Write(buf); err != nil {
					return // the reader reports it
				}
				buf = buf[:0]
			}
		}
	}()
	start := time.Now()
	errs := 0
	for i := 0; i < n; i++ {
		c.c.SetReadDeadline(time.Now().Add(30 * time.Second))
		v, err := c.rd.ReadValue()
		if err != nil {
			t.Fatalf("after %d replies in %v: %v", i, time.Since(start), err)
		}
		if v.IsError() || string(v.Str) != "OK" {
			if errs++; errs <= 3 {
				t.Errorf("reply %d: %s", i, v)
			}
		}
	}
	t.Logf("%d SETs on one connection through a node of 3 racks: %v, %d errors", n, time.Since(start), errs)
	if errs > 0 {
		t.Errorf("%d of %d replies were errors", errs, n)
	}
	if got := tc.nodes[0].node.Info().Busy; got != 0 {
		t.Errorf("%d BUSY replies, want none", got)
	}
	if got := tc.nodes[0].node.Info().Timeouts; got != 0 {
		t.Errorf("%d timeouts: the pipeline stalled", got)
	}
}

func TestAdminAPI(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	c := tc.client(0, "")
	c.must("SET", "a", "1")
	c.must("GET", "a")
	admin := "http://" + tc.nodes[0].cfg.StatsListen
	do := func(method, path string, into any) string {
		t.Helper()
		code, body := adminCall(t, method, admin+path, "")
		if code != 200 {
			t.Fatalf("%s %s: %d %s", method, path, code, body)
		}
		if into != nil {
			if err := json.Unmarshal([]byte(body), into); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
		return body
	}
	get := func(path string, into any) string { t.Helper(); return do("GET", path, into) }
	post := func(path string) { t.Helper(); do("POST", path, nil) }
	var info Info
	get("/info", &info)
	if info.Requests["write"]["DC_ONE"].Count != 1 || info.Requests["read"]["DC_ONE"].Count != 1 || info.Commands["GET"] != 1 {
		t.Errorf("/info counters: %+v", info.Requests)
	}
	if _, ok := info.Requests["read"]["DC_ONE"].Latency["p99.9"]; !ok {
		t.Error("/info has no p99.9")
	}
	metrics := get("/metrics", nil)
	for _, want := range []string{`troop_requests_total{dc="dc1",level="DC_ONE",node="dc1-rack1-1",op="write",rack="rack1"} 1`, "troop_request_duration_seconds_bucket", "troop_datastore_up"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var nodes []ClusterNode
	get("/cluster_describe", &nodes)
	if len(nodes) != 3 || nodes[1].Listen != tc.nodes[1].cfg.Listen || !nodes[0].Self {
		t.Errorf("/cluster_describe: %+v", nodes)
	}
	post("/set_consistency/read/dc_safe_quorum")
	var levels map[string]string
	get("/get_consistency", &levels)
	if levels["read"] != "DC_SAFE_QUORUM" || levels["write"] != "DC_ONE" {
		t.Errorf("/get_consistency after set: %v", levels)
	}
	if code, _ := adminCall(t, "POST", admin+"/set_consistency/read/ALL", ""); code != 400 {
		t.Errorf("bad level: status %d", code)
	}
	post("/state/writes_only")
	if v := c.do("GET", "a"); !v.IsError() || !contains(string(v.Str), "writes_only") {
		t.Errorf("GET in writes_only: %s", v)
	}
	c.must("SET", "a", "2")
	post("/state/standby")
	if v := c.do("SET", "a", "3"); !v.IsError() || !contains(string(v.Str), "standby") {
		t.Errorf("SET in standby: %s", v)
	}
	post("/state/normal")
	if got := c.must("GET", "a"); got != "2" {
		t.Errorf("GET after normal = %q", got)
	}
}

// adminCall sends one admin request, with the bearer token when not "",
// and answers its status and body.
func adminCall(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// The admin API changes state by POST or PUT only, with the configured
// token; reads are open unless protected; pprof is off unless enabled; a
// wrong token is counted and, repeated, refused unchecked.
func TestAdminAPISecured(t *testing.T) {
	const token = "t0ken-for-admin"
	tc := startCluster(t, clusterOpts{racks: 2, configure: func(c *topology.Config) {
		c.AdminToken = token
		if c.Rack == "rack2" {
			c.AdminProtectReads, c.Pprof = true, true
		}
	}})
	open, closed := "http://"+tc.nodes[0].cfg.StatsListen, "http://"+tc.nodes[1].cfg.StatsListen
	for _, tt := range []struct {
		method, url, token string
		code               int
		body               string
	}{
		{"GET", open + "/state/standby", token, 405, "GET /state/standby: method not allowed: /state/standby answers POST or PUT only"},
		{"GET", open + "/set_consistency/read/DC_QUORUM", token, 405, "GET /set_consistency/read/DC_QUORUM: method not allowed"},
		{"DELETE", open + "/repair", token, 405, "DELETE /repair: method not allowed"},
		{"POST", open + "/state/standby", "", 401, "POST /state/standby needs the admin token (troop_admin_token)"},
		{"POST", open + "/state/standby", "wrong", 401, "needs the admin token"},
		{"POST", open + "/state/standby", token, 200, `"standby"`},
		{"PUT", open + "/state/normal", token, 200, `"normal"`},
		{"GET", open + "/state", "", 200, `"normal"`},
		{"GET", open + "/cluster_describe", "", 200, `"dc1-rack1-1"`},
		{"GET", open + "/debug/pprof/", token, 404, ""},
		{"POST", open + "/info", token, 405, "POST /info: method not allowed: /info answers GET or HEAD only"},
		{"GET", closed + "/info", "", 401, "GET /info needs the admin token"},
		{"GET", closed + "/info", token, 200, `"dc1-rack2-1"`},
		{"GET", closed + "/ping", "", 200, "pong"},
		{"GET", closed + "/debug/pprof/", token, 200, "goroutine"},
		{"GET", closed + "/debug/pprof/", "", 401, ""},
		{"GET", closed + "/debug/pprof/trace?seconds=0.1", token, 200, "trace"},
		{"GET", closed + "/debug/pprof/trace?seconds=0.1", "", 401, ""},
	} {
		code, body := adminCall(t, tt.method, tt.url, tt.token)
		if code != tt.code || !strings.Contains(body, tt.body) {
			t.Errorf("%s %s (token %q): %d %q, want %d %q", tt.method, tt.url, tt.token, code, body, tt.code, tt.body)
		}
	}
	if got := tc.nodes[0].node.Info().AdminAuthFailures; got != 2 {
		t.Errorf("admin_auth_failures = %d, want 2", got)
	}
	// Past a burst of wrong tokens, even the right one waits.
	for i := 0; i < authFailureBurst; i++ {
		adminCall(t, "GET", closed+"/info", "guess")
	}
	if code, body := adminCall(t, "GET", closed+"/info", token); code != 429 || !strings.Contains(body, "too many requests with a wrong token from 127.0.0.1") {
		t.Errorf("after %d wrong tokens: %d %q, want 429", authFailureBurst, code, body)
	}
}

// go-redis works unchanged, pipelines included.
func TestGoRedisClient(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: tc.nodes[0].cfg.Listen})
	defer rdb.Close()
	if err := rdb.Set(ctx, "gr", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pipe := rdb.Pipeline()
	for i := 0; i < 100; i++ {
		pipe.Set(ctx, fmt.Sprintf("p%d", i), i, time.Minute)
		pipe.Get(ctx, fmt.Sprintf("p%d", i))
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if got := cmds[2*i+1].(*redis.StringCmd).Val(); got != fmt.Sprint(i) {
			t.Fatalf("pipelined GET p%d = %q", i, got)
		}
	}
	if err := rdb.HSet(ctx, "h", "a", "1", "b", "2").Err(); err != nil {
		t.Fatal(err)
	}
	if m := rdb.HGetAll(ctx, "h").Val(); m["b"] != "2" {
		t.Fatalf("HGETALL = %v", m)
	}
	if err := rdb.Get(ctx, "nothing").Err(); err != redis.Nil {
		t.Fatalf("GET missing: %v", err)
	}
	if vals := rdb.MGet(ctx, "gr", "p1").Val(); len(vals) != 2 || vals[0] != "1" {
		t.Fatalf("MGET = %v", vals)
	}
}

// Every command of the table, with any number of arbitrary arguments, gets
// exactly one reply and leaves the node serving: no panic, no hang.
func TestEveryCommandWithArbitraryArguments(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2, perRack: 2})
	c := tc.client(0, "DC_QUORUM")
	words := []string{"", "0", "-1", "1", "2", "k", "key:1", "__troop:v:k", "NX", "GET", "EX", "99999999999999999999", "\x00\xff", "WITHSCORES", "LIMIT"}
	rnd := rand.New(rand.NewPCG(7, 7))
	for name := range commandTable {
		if name == "QUIT" {
			continue
		}
		for nargs := 0; nargs <= 5; nargs++ {
			args := []string{name}
			for i := 0; i < nargs; i++ {
				w := words[rnd.IntN(len(words))]
				if commandTable[name].kind == kindBlocking && (w == "0" || w == "1" || w == "2") {
					w = "0.01" // a timeout, if it lands there: a blocking pop may wait that long
				}
				args = append(args, w)
			}
			if subscribedOnly[name] && name != "PING" && name != "RESET" {
				// A subscription answers a frame per channel, and the
				// connection then takes only (un)subscriptions: one of its own.
				d := tc.client(0, "")
				d.do(args...)
				d.c.Close()
				continue
			}
			c.do(args...) // any reply will do; a panic or a hang fails the test
			if name == "MULTI" {
				c.do("DISCARD") // or the rest of the sweep would be queued in it
			}
		}
	}
	c.do("DISCARD") // the sweep may have left a MULTI open
	if got := c.must("PING"); got != "PONG" {
		t.Fatalf("after the sweep: %q", got)
	}
}

// The peer port takes arbitrary requests without harm too.
func TestPeerPortWithArbitraryRequests(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2})
	first := dial(t, tc.nodes[0].cfg.DynListen)
	if v := first.do("GET", "k"); !v.IsError() || !contains(string(v.Str), "HELLO first") {
		t.Fatalf("request before HELLO: %s", v)
	}
	p := dial(t, tc.nodes[0].cfg.DynListen)
	p.must("HELLO", "2", "fuzz", "dc1", "rack9", "", "")
	words := []string{"", "GET", "SET", "DEL", "MGET", "HSET", "k", "v", "1", "01a201f9e332000034ad", "zz", "PING", "MULTI"}
	rnd := rand.New(rand.NewPCG(8, 8))
	for i := 0; i < 500; i++ {
		args := []string{[]string{"LOCAL", "READ", "WRITE", "FWD", "PING", "HELLO", "NOPE"}[rnd.IntN(7)]}
		for n := rnd.IntN(6); n > 0; n-- {
			args = append(args, words[rnd.IntN(len(words))])
		}
		p.do(args...)
	}
	if got := tc.client(0, "DC_QUORUM").must("SET", "after", "fuzz"); got != "OK" {
		t.Fatalf("after the sweep: %q", got)
	}
}

// With hash_tag "{}", the part of a key between the braces places it: keys
// of one tag land on one owner, so multi-key commands on them run, however
// their whole keys would hash.
func TestHashTag(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2, perRack: 2, configure: func(c *topology.Config) { c.HashTag = "{}" }})
	n := tc.nodes[0].node
	owner := func(k string) int { return n.view().localRacks[0].ring.Owner(ring.Hash([]byte(k))) }
	// Two keys of one tag whose whole keys have different owners.
	var a, b string
	for i := 0; a == ""; i++ {
		x, y := fmt.Sprintf("{user%d}:a", i), fmt.Sprintf("{user%d}:b", i)
		if owner(x) != owner(y) {
			a, b = x, y
		}
	}
	c := tc.client(0, "DC_QUORUM")
	c.must("SADD", a, "x", "y")
	c.must("SADD", b, "y", "z")
	if v := c.do("SUNION", a, b); v.IsError() || len(v.Elems) != 3 {
		t.Fatalf("SUNION %s %s: %s", a, b, v)
	}
	if got := c.must("SINTERSTORE", a+"-both", a, b); got == "(nil)" {
		t.Fatalf("SINTERSTORE: %s", got)
	}
	// Both live where the tag places them: on its owner in each rack, and
	// on no other node.
	tag := ring.Tag([]byte(a), "{}")
	for _, tn := range tc.nodes {
		r := dial(t, tn.redis.Addr)
		want := "0"
		if tn.node.view().members[tn.node.view().localRacks[0].ring.Owner(ring.Hash(tag))].self {
			want = "1"
		}
		for _, k := range []string{a, b} { // the last rack's copy may land after the reply
			eventually(t, 5*time.Second, func() string {
				if got := r.must("EXISTS", k); got != want {
					return fmt.Sprintf("%s's redis-server: EXISTS %s = %s, want %s", tn.cfg.Name, k, got, want)
				}
				return ""
			})
		}
	}
	// Keys of different tags on different owners are still refused.
	var d string
	for i := 0; d == ""; i++ {
		if x := fmt.Sprintf("{other%d}:a", i); owner(string(ring.Tag([]byte(x), "{}"))) != owner(string(tag)) {
			d = x
		}
	}
	if v := c.do("SUNION", a, d); !v.IsError() || !contains(string(v.Str), "belong to different nodes") {
		t.Fatalf("SUNION across tags on different owners: %s", v)
	}
}

// Commands a Redis user reaches for early: what they answer through a node
// is what redis-server answers, and no error shows troop's own scripts.
func TestRedisCompatibility(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	c := tc.client(0, "DC_QUORUM")
	if got := c.must("CLIENT", "GETNAME"); got != "(nil)" {
		t.Errorf("CLIENT GETNAME before SETNAME = %q", got)
	}
	c.must("CLIENT", "SETNAME", "worker-1")
	if got := c.must("CLIENT", "GETNAME"); got != "worker-1" {
		t.Errorf("CLIENT GETNAME after SETNAME = %q", got)
	}
	if v := c.do("CLIENT", "SETNAME", "has space"); !v.IsError() {
		t.Errorf("CLIENT SETNAME with a space = %s", v)
	}
	if got := dial(t, tc.nodes[0].cfg.Listen).must("CLIENT", "GETNAME"); got != "(nil)" {
		t.Errorf("another connection's CLIENT GETNAME = %q", got)
	}

	// An expiry too far away for the version's bookkeeping to add the
	// tombstone grace to: redis-server's answer, and nothing of the script.
	c.must("SET", "far", "v")
	v := c.do("PEXPIREAT", "far", "9223372036854770000")
	if v.IsError() || v.Int != 1 {
		t.Errorf("PEXPIREAT far 9223372036854770000 = %s, want 1", v)
	}
	for _, cmd := range [][]string{{"PEXPIREAT", "far", "99999999999999999999"}, {"EXPIRE", "far", "x"}, {"INCR", "far"}} {
		v := c.do(cmd...)
		if !v.IsError() || hidesScript([]byte("-"+string(v.Str))) || contains(string(v.Str), "script") {
			t.Errorf("%v = %s, want redis-server's error without script details", cmd, v)
		}
	}

	// Commands of Redis 7.
	c.must("SADD", "s1", "a", "b", "c")
	c.must("SADD", "s2", "b", "c", "d")
	same := "s2"
	if !tc.nodes[0].node.sameReplicas([][]byte{[]byte("s1"), []byte(same)}) {
		t.Skip("the test's keys landed on different nodes") // one node per rack: never
	}
	if got := c.must("SINTERCARD", "2", "s1", "s2"); got != "2" {
		t.Errorf("SINTERCARD = %s", got)
	}
	if got := c.must("SINTERCARD", "2", "s1", "s2", "LIMIT", "1"); got != "1" {
		t.Errorf("SINTERCARD LIMIT 1 = %s", got)
	}
	c.must("RPUSH", "l2", "x", "y")
	if v := c.do("LMPOP", "2", "l1", "l2", "LEFT"); v.IsError() || len(v.Elems) != 2 || string(v.Elems[0].Str) != "l2" {
		t.Errorf("LMPOP = %s", v)
	}
	if v := c.do("BITFIELD", "bf", "INCRBY", "u8", "0", "5"); v.IsError() || len(v.Elems) != 1 || v.Elems[0].Int != 5 {
		t.Errorf("BITFIELD = %s", v)
	}
}

// After HELLO 3 a node's replies are, byte for byte, what redis-server
// gives a RESP3 client, for commands whose replies RESP3 changes.
func TestRESP3MatchesRedis(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1})
	plain := startRedis(t)
	raw := func(addr string) func(args ...string) string {
		c := dial(t, addr)
		return func(args ...string) string {
			c.c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.c.Write(resp.AppendCommandStrings(nil, args...)); err != nil {
				t.Fatal(err)
			}
			frame, err := c.rd.ReadRaw(nil)
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			return string(frame)
		}
	}
	node, redis := raw(tc.nodes[0].cfg.Listen), raw(plain.Addr)
	if got := node("HELLO", "3"); !strings.HasPrefix(got, "%7\r\n$6\r\nserver\r\n$5\r\ntroop\r\n") || !contains(got, "$5\r\nproto\r\n:3\r\n") {
		t.Fatalf("HELLO 3 = %q", got)
	}
	redis("HELLO", "3")
	for _, cmd := range [][]string{
		{"SET", "s", "v"}, {"HSET", "h", "a", "1"}, {"SADD", "set", "x"}, {"ZADD", "z", "1.5", "a", "2", "b", "3", "c"}, {"RPUSH", "l", "a", "b"},
		{"GET", "s"}, {"GET", "missing"}, {"MGET", "s", "missing"}, {"HGETALL", "h"}, {"HGETALL", "missing"}, {"HGET", "h", "nope"},
		{"SMEMBERS", "set"}, {"SINTER", "set"}, {"ZSCORE", "z", "a"}, {"ZSCORE", "z", "nope"}, {"ZMSCORE", "z", "a", "nope"},
		{"ZRANGE", "z", "0", "-1", "WITHSCORES"}, {"ZRANGE", "z", "0", "-1"}, {"ZINCRBY", "z", "1", "b"}, {"ZADD", "z", "INCR", "1", "a"},
		{"ZPOPMIN", "z"}, {"ZPOPMAX", "z", "2"}, {"ZADD", "z", "1", "x", "2", "y"}, {"ZMPOP", "1", "z", "MIN", "COUNT", "2"}, {"ZMPOP", "1", "none", "MIN"}, {"LRANGE", "l", "0", "-1"}, {"LPOP", "missing"}, {"EXISTS", "s"}, {"PING"},
		{"SADD", "one", "only"}, {"SPOP", "one", "5"}, {"SPOP", "missing", "2"}, {"SPOP", "missing"},
	} {
		if got, want := node(cmd...), redis(cmd...); got != want {
			t.Errorf("%v: node %q, redis-server %q", cmd, got, want)
		}
	}
	// Inside a transaction, each reply as its command's (the keys share a
	// node: one rack of one node).
	for _, cmd := range [][]string{{"MULTI"}, {"HGETALL", "h"}, {"ZSCORE", "z", "c"}, {"GET", "missing"}, {"SMEMBERS", "set"}} {
		node(cmd...)
		redis(cmd...)
	}
	if got, want := node("EXEC"), redis("EXEC"); got != want {
		t.Errorf("EXEC: node %q, redis-server %q", got, want)
	}
	if got := node("HELLO", "4"); !strings.HasPrefix(got, "-NOPROTO") {
		t.Errorf("HELLO 4 = %q", got)
	}
	if got := node("HELLO", "2"); !strings.HasPrefix(got, "*14\r\n") {
		t.Errorf("HELLO 2 = %q", got)
	}
	if got := node("GET", "missing"); got != "$-1\r\n" {
		t.Errorf("GET missing after HELLO 2 = %q", got)
	}
}

// DBSIZE and INFO keyspace count the cluster's keys, as one redis-server
// holding them all would: not troop's version keys or tombstones, and
// not each key once per rack.
func TestKeyspace(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2, perRack: 2})
	c := tc.client(0, "DC_QUORUM")
	if got := c.must("DBSIZE"); got != "0" {
		t.Fatalf("DBSIZE of an empty cluster = %s", got)
	}
	for i := 0; i < 50; i++ {
		c.must("SET", fmt.Sprintf("k%d", i), "v")
	}
	for i := 0; i < 5; i++ {
		c.must("SETEX", fmt.Sprintf("e%d", i), "100", "v")
	}
	c.must("DEL", "k0", "k1", "k2") // leaves tombstones
	for i, tn := range tc.nodes {
		other := dial(t, tn.cfg.Listen)
		if got := other.must("DBSIZE"); got != "52" {
			t.Errorf("DBSIZE through node %d = %s, want 52", i, got)
		}
	}
	info := c.must("INFO", "keyspace")
	if !strings.HasPrefix(info, "# Keyspace\r\n") || !contains(info, "db0:keys=52,expires=5,") || contains(info, "# Server") {
		t.Errorf("INFO keyspace = %q", info)
	}
	if all := c.must("INFO", "all"); !contains(all, "# Server") || !contains(all, "db0:keys=52") {
		t.Errorf("INFO all = %q", all)
	}
	if plain := c.must("INFO"); contains(plain, "# Keyspace") {
		t.Errorf("plain INFO scans the keyspace: %q", plain)
	}
	// A node of the rack down: an error naming it, not a short count.
	tc.nodes[1].stop()
	if v := c.do("DBSIZE"); !v.IsError() || !contains(string(v.Str), "every node of rack") {
		t.Errorf("DBSIZE with a node of the rack down = %s", v)
	}
}

// SCAN walks the nodes of the rack one after the other with a cursor that
// carries which node it is at; KEYS asks them all. Both leave troop's own
// keys out.
func TestScanAndKeys(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2, perRack: 2})
	c := tc.client(0, "DC_QUORUM")
	want := map[string]bool{}
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("key:%d", i)
		c.must("SET", k, "v")
		want[k] = true
	}
	c.must("SET", "other", "v")
	seen := map[string]bool{}
	cursor := "0"
	for i := 0; i < 1000; i++ { // bounded: a loop here is a bug
		v := c.do("SCAN", cursor, "MATCH", "key:*", "COUNT", "5")
		if v.IsError() || len(v.Elems) != 2 {
			t.Fatalf("SCAN %s = %s", cursor, v)
		}
		for _, k := range v.Elems[1].Elems {
			seen[string(k.Str)] = true
		}
		if cursor = string(v.Elems[0].Str); cursor == "0" {
			break
		}
	}
	if cursor != "0" {
		t.Fatal("SCAN did not end")
	}
	if len(seen) != len(want) {
		t.Errorf("SCAN saw %d keys, want %d: %v", len(seen), len(want), seen)
	}
	for k := range seen {
		if !want[k] {
			t.Errorf("SCAN answered %q", k)
		}
	}
	if v := c.do("KEYS", "*"); v.IsError() || len(v.Elems) != 31 {
		t.Errorf("KEYS * answered %d keys, want 31: %s", len(v.Elems), v)
	}
	for _, bad := range []string{"abc", "-1", "1023", "99999999999999999999999"} {
		if v := c.do("SCAN", bad); !v.IsError() || !contains(string(v.Str), "invalid cursor") {
			t.Errorf("SCAN %s = %s, want an invalid cursor error", bad, v)
		}
	}
	if v := c.do("SCAN", "0", "COUNT", "x"); !v.IsError() {
		t.Errorf("SCAN 0 COUNT x = %s", v)
	}
}

// With troop_allow_flush, FLUSHALL empties every node of the cluster;
// CONFIG SET passes encoding parameters on to every node, and CONFIG GET
// reads this node's redis-server.
func TestFlushAndConfig(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2, dcs: 2, configure: func(c *topology.Config) { c.AllowFlush = true }})
	c := tc.client(0, "DC_QUORUM")
	for i := 0; i < 20; i++ {
		c.must("SET", fmt.Sprintf("k%d", i), "v")
	}
	tc.redisesHold("k1", "v", 5*time.Second) // the remote datacenter too
	if got := c.must("FLUSHALL"); got != "OK" {
		t.Fatalf("FLUSHALL = %q", got)
	}
	for _, tn := range tc.nodes {
		if got := dial(t, tn.redis.Addr).must("DBSIZE"); got != "0" {
			t.Errorf("%s's redis-server holds %s keys after FLUSHALL", tn.cfg.Name, got)
		}
	}
	if v := c.do("FLUSHDB", "NOW"); !v.IsError() {
		t.Errorf("FLUSHDB NOW = %s", v)
	}
	if got := c.must("CONFIG", "SET", "set-max-intset-entries", "77"); got != "OK" {
		t.Fatalf("CONFIG SET = %q", got)
	}
	for _, tn := range tc.nodes {
		v := dial(t, tn.redis.Addr).do("CONFIG", "GET", "set-max-intset-entries")
		if len(v.Elems) != 2 || string(v.Elems[1].Str) != "77" {
			t.Errorf("%s's redis-server: CONFIG GET set-max-intset-entries = %s", tn.cfg.Name, v)
		}
	}
	if v := c.do("CONFIG", "GET", "set-max-intset-entries"); len(v.Elems) != 2 || string(v.Elems[1].Str) != "77" {
		t.Errorf("CONFIG GET through the node = %s", v)
	}
	tc.nodes[3].stop()
	v := c.do("FLUSHALL")
	if !v.IsError() || !contains(string(v.Str), "reached 3 of 4 nodes") || !contains(string(v.Str), tc.nodes[3].cfg.Name) {
		t.Errorf("FLUSHALL with a node down = %s", v)
	}
}

// A pop with a count on a missing key answers a null array, as in Redis,
// although the write script (Lua) turns it into false.
func TestNullArrays(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1})
	c := dial(t, tc.nodes[0].cfg.Listen)
	for _, cmd := range [][]string{{"LPOP", "none", "2"}, {"RPOP", "none", "2"}, {"LMPOP", "1", "none", "LEFT"}, {"ZMPOP", "1", "none", "MIN"}} {
		c.c.Write(resp.AppendCommandStrings(nil, cmd...))
		raw, err := c.rd.ReadRaw(nil)
		if err != nil || string(raw) != "*-1\r\n" {
			t.Errorf("%v = %q, %v; want a null array", cmd, raw, err)
		}
	}
	c.c.Write(resp.AppendCommandStrings(nil, "LPOP", "none"))
	if raw, _ := c.rd.ReadRaw(nil); string(raw) != "$-1\r\n" {
		t.Errorf("LPOP none = %q, want a null bulk string", raw)
	}
}

// A command whose numkeys does not name its keys gets redis-server's own
// error, as a Redis client expects it.
func TestBadNumkeysIsRedisError(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1})
	c := tc.client(0, "")
	plain := dial(t, startRedis(t).Addr)
	for _, cmd := range [][]string{{"SINTERCARD", "0", "a"}, {"ZUNION", "3", "a"}, {"ZINTERSTORE", "d", "x", "a"}, {"LMPOP", "-1", "a", "LEFT"}} {
		got, want := c.do(cmd...), plain.do(cmd...)
		if !got.IsError() || string(got.Str) != string(want.Str) {
			t.Errorf("%v: node %s, redis-server %s", cmd, got, want)
		}
	}
}

// Requests split anywhere across reads, a client that half-closes after its
// requests, and many connections that come and go: every request gets its
// reply, in order, and the node keeps no connection (nor descriptor) of
// those that left.
func TestClientConnections(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1})
	addr := tc.nodes[0].cfg.Listen
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	noConns := func() string {
		if n := tc.nodes[0].node.Info().Connections; n != 0 {
			return fmt.Sprintf("%d client connections", n)
		}
		return ""
	}
	eventually(t, 5*time.Second, noConns) // the harness's own have closed
	// The node is in this process: its connection to watch its
	// redis-server for busy scripts, dialled the first time a request
	// waits, is one of its own, not a client's.
	if _, err := doSync(t.Context(), tc.nodes[0].node.server.side, resp.AppendCommandStrings(nil, "PING")); err != nil {
		t.Fatal(err)
	}
	baseFDs := fds()

	// A byte at a time, with the inline and the array form mixed.
	c := dial(t, addr)
	req := append(resp.AppendCommandStrings(nil, "SET", "split", strings.Repeat("v", 3000)), "GET split\r\nPING\r\n"...)
	for i := range req {
		c.c.Write(req[i : i+1])
		if i%500 == 0 {
			time.Sleep(time.Millisecond) // so that reads end mid-request
		}
	}
	c.c.SetDeadline(time.Now().Add(5 * time.Second))
	for _, want := range []string{"OK", strings.Repeat("v", 3000), "PONG"} {
		if v, err := c.rd.ReadValue(); err != nil || string(v.Str) != want {
			t.Fatalf("got %v %.20s, want %.20s", err, v.Str, want)
		}
	}
	c.c.Close()

	// Half-closed after 1,000 requests: all their replies, then the end.
	hc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	req = req[:0]
	for i := range 1000 {
		req = resp.AppendCommandStrings(req, "INCR", "halfclosed")
		if i == 999 {
			req = resp.AppendCommandStrings(req, "GET", "halfclosed")
		}
	}
	hc.Write(req)
	hc.(*net.TCPConn).CloseWrite()
	hc.SetDeadline(time.Now().Add(10 * time.Second))
	rd := resp.NewReader(hc, resp.DefaultLimits)
	for i := 1; i <= 1000; i++ {
		if v, err := rd.ReadValue(); err != nil || v.Int != int64(i) {
			t.Fatalf("INCR %d: %v %s", i, err, v)
		}
	}
	if v, err := rd.ReadValue(); err != nil || string(v.Str) != "1000" {
		t.Fatalf("GET after the INCRs: %v %s", err, v)
	}
	if _, err := rd.ReadValue(); err != io.EOF {
		t.Fatalf("after the last reply: %v, want the node to close", err)
	}
	hc.Close()

	// Connections that come and go, some mid-request.
	for i := range 200 {
		cc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 3 {
		case 0:
			cc.Write(resp.AppendCommandStrings(nil, "SET", fmt.Sprintf("churn:%d", i), "v"))
		case 1:
			cc.Write([]byte("*2\r\n$3\r\nGET\r\n$5\r\nchu"))
		}
		cc.Close()
	}
	eventually(t, 5*time.Second, func() string {
		if n := fds(); n > baseFDs {
			return fmt.Sprintf("%d descriptors open, want at most %d as before", n, baseFDs)
		}
		return noConns()
	})
}

// A redis-server that stops reading fills the node's socket to it; the
// writes that no longer fit must not stop the node's event loops, which
// serve every other connection.
func TestPausedServerStopsNoLoop(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1, timeout: 10 * time.Second})
	p := tc.nodes[0].redis.Cmd.Process
	p.Signal(syscall.SIGSTOP)
	defer p.Signal(syscall.SIGCONT)
	value := strings.Repeat("v", 64<<10)
	var req []byte
	for i := range 100 { // 6.4 MB: more than loopback's socket buffers hold
		req = resp.AppendCommandStrings(req, "SET", fmt.Sprintf("big:%d", i), value)
	}
	for range runtime.GOMAXPROCS(0) { // one such connection on each loop, round robin
		c := dial(t, tc.nodes[0].cfg.Listen)
		go c.c.Write(req)
	}
	time.Sleep(500 * time.Millisecond)
	pingOthers(t, tc.nodes[0].cfg.Listen, "while redis-server is paused")
}

// pingOthers has new connections to addr, enough that some share each
// event loop, PING within 2 s each.
func pingOthers(t *testing.T, addr, while string) {
	t.Helper()
	for i := range 2 * runtime.GOMAXPROCS(0) {
		other := dial(t, addr)
		other.c.SetDeadline(time.Now().Add(2 * time.Second))
		other.c.Write(resp.AppendCommandStrings(nil, "PING"))
		if v, err := other.rd.ReadValue(); err != nil || string(v.Str) != "PONG" {
			t.Fatalf("connection %d, %s: %v %s", i, while, err, v)
		}
	}
}
