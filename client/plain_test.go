package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/freeport"
	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/link"
)

// 10,000 pipelined commands to a real redis-server come back in order:
// INCR on one key counts 1, 2, 3 ... in the order the callbacks run, and
// SET/GET pairs spread over several connections read their own writes.
func TestPlainPipeline(t *testing.T) {
	srv := testredis.Start(t)
	p, err := NewPlain([]string{srv.Addr}, PlainOptions{ConnsPerAddr: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	const n = 10000
	wg.Add(n)
	for i := range n {
		p.Send(cmd("INCR", "counter"), func(raw []byte, err error) {
			mu.Lock()
			if err != nil {
				got = append(got, err.Error())
			} else {
				got = append(got, string(raw))
			}
			mu.Unlock()
			wg.Done()
		})
		if i%500 == 499 {
			p.Flush()
		}
	}
	p.Flush()
	wg.Wait()
	for i, g := range got {
		if want := ":" + strconv.Itoa(i+1) + "\r\n"; g != want {
			t.Fatalf("reply %d: %q, want %q", i, g, want)
		}
	}

	cmds := setGet("plain", 5000)
	checkSetGet(t, cmds, pipeline(t, p, cmds, 1000))

	// Callers on several goroutines share the client, each with its own
	// pipeline: every one reads its own writes.
	var callers sync.WaitGroup
	for g := range 8 {
		callers.Add(1)
		go func() {
			defer callers.Done()
			cmds := setGet(fmt.Sprintf("caller%d", g), 500)
			checkSetGet(t, cmds, pipeline(t, p, cmds, 50))
		}()
	}
	callers.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := p.Do(ctx, cmd("LPUSH", "plain:0", "x")...) // a string key: WRONGTYPE
	var re *ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(re.Msg, "WRONGTYPE") || !strings.HasPrefix(string(raw), "-WRONGTYPE") {
		t.Errorf("LPUSH on a string: %q, %v; want a WRONGTYPE ReplyError", raw, err)
	}
}

// Round-robin mode uses every connection.
func TestPlainRoundRobin(t *testing.T) {
	srv := testredis.Start(t)
	p, err := NewPlain([]string{srv.Addr}, PlainOptions{ConnsPerAddr: 4, RoundRobin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cmds := make([][][]byte, 400)
	for i := range cmds {
		cmds[i] = cmd("PING")
	}
	for i, r := range pipeline(t, p, cmds, 100) {
		if r.err != nil || string(r.raw) != "+PONG\r\n" {
			t.Fatalf("PING %d: %q, %v", i, r.raw, r.err)
		}
	}
	for i, c := range p.conns {
		if c.l.Stats().Connects != 1 {
			t.Errorf("connection %d: %d connects, want 1", i, c.l.Stats().Connects)
		}
	}
}

// A cluster client works against any RESP server that owns the whole ring;
// its consistency handshake against a plain redis-server fails, and says
// that TROOP was refused at that address.
func TestClusterHandshakeRefused(t *testing.T) {
	srv := testredis.Start(t)
	nodes := []Node{{Name: "solo", DC: "dc1", Rack: "rack1", Tokens: []uint32{0}, Addr: srv.Addr}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	c, err := NewCluster(nodes, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if raw, err := c.Do(ctx, cmd("SET", "k", "v")...); err != nil || string(raw) != "+OK\r\n" {
		t.Fatalf("SET: %q, %v", raw, err)
	}

	withLevels, err := NewCluster(nodes, Options{ReadLevel: "DC_QUORUM"})
	if err != nil {
		t.Fatal(err)
	}
	defer withLevels.Close()
	_, err = withLevels.Do(ctx, cmd("GET", "k")...)
	if err == nil || !strings.Contains(err.Error(), "solo (dc1/rack1) "+srv.Addr) || !strings.Contains(err.Error(), "TROOP CONSISTENCY refused: ERR unknown command") {
		t.Errorf("handshake against redis-server: %v", err)
	}
}

// An address where nothing listens fails at once; one that accepts but
// never answers fails within the timeout. Both errors name the address.
func TestUnreachable(t *testing.T) {
	refused, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	silent := silentServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A timeout no refused connection takes to fail, even on a busy
	// machine: failing before it is failing at once.
	const timeout = 2 * time.Second

	check := func(what, addr string, do func() error, within time.Duration, want ...string) {
		t.Helper()
		start := time.Now()
		err := do()
		took := time.Since(start)
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		t.Logf("%s: %v after %v", what, err, took.Round(time.Millisecond))
		for _, w := range append(want, addr) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", what, err, w)
			}
		}
		if took > within {
			t.Errorf("%s: failed after %v, want within %v", what, took, within)
		}
	}
	for _, addr := range []string{refused, silent} {
		p, err := NewPlain([]string{addr}, PlainOptions{Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		c, err := NewCluster([]Node{{Name: "lonely", DC: "dc1", Rack: "rack1", Tokens: []uint32{0}, Addr: addr}},
			Options{Timeout: timeout, WriteLevel: "DC_ONE"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		within, want := timeout-time.Millisecond, "unreachable"
		if addr == silent {
			within, want = 3*timeout, ""
		}
		check("plain to "+addr, addr, func() error {
			_, err := p.Do(ctx, cmd("GET", "k")...)
			if addr == refused && !errors.Is(err, link.ErrDown) {
				t.Errorf("refused: %v is not link.ErrDown", err)
			}
			return err
		}, within, want)
		check("cluster to "+addr, addr, func() error { _, err := c.Do(ctx, cmd("GET", "k")...); return err }, within, want, "lonely (dc1/rack1)")
	}
}

// silentServer accepts connections and never answers.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

// After Close, commands fail with ErrClosed.
func TestClosed(t *testing.T) {
	p, err := NewPlain([]string{"127.0.0.1:1"}, PlainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := p.Do(context.Background(), cmd("PING")...); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// A node that has not reached a peer yet does not know its address: the
// error says which one is missing.
func TestFromClusterDescribeMissingAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode([]map[string]any{
			{"name": "dc1-rack1-1", "datacenter": "dc1", "rack": "rack1", "tokens": []uint32{0}, "listen": "0.0.0.0:7000", "up": true},
			{"name": "", "datacenter": "dc1", "rack": "rack2", "tokens": []uint32{0}, "listen": "", "up": false},
		})
	}))
	defer srv.Close()
	admin := strings.TrimPrefix(srv.URL, "http://")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := FromClusterDescribe(ctx, admin)
	if err == nil || !strings.Contains(err.Error(), "dc1/rack2 with tokens [0]") || !strings.Contains(err.Error(), admin) {
		t.Errorf("got %v, want an error naming the rack2 node and %s", err, admin)
	}
	if got := reachable("0.0.0.0:7000", "10.1.2.3"); got != "10.1.2.3:7000" {
		t.Errorf("reachable: %s", got)
	}
	_, err = FromClusterDescribe(context.Background(), pickPort(t))
	if err == nil || !strings.Contains(err.Error(), "cluster_describe at") {
		t.Errorf("nothing listening: %v", err)
	}
}

func pickPort(t *testing.T) string {
	a, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestCommandKey(t *testing.T) {
	for _, tc := range []struct {
		args string
		key  string // "" for none
	}{
		{"GET k", "k"},
		{"get k", "k"},
		{"MGET a b c", "a"},
		{"PING", ""},
		{"PING hello", ""},
		{"TROOP CONSISTENCY", ""},
		{"dyno_config:conn_consistency DC_ONE", ""},
		{"BITOP AND dest a b", "dest"},
		{"EVAL script 1 k arg", "k"},
		{"EVAL script 0 arg", ""},
		{"GET", ""},
		{"A_VERY_LONG_COMMAND_NAME_PAST_32_BYTES k", "k"},
	} {
		key, ok := commandKey(cmd(strings.Fields(tc.args)...))
		if ok != (tc.key != "") || string(key) != tc.key {
			t.Errorf("%s: key %q, %v; want %q", tc.args, key, ok, tc.key)
		}
	}
	args := cmd("SET", "key", "value")
	if n := testing.AllocsPerRun(100, func() { commandKey(args) }); n != 0 {
		t.Errorf("commandKey allocates %v times", n)
	}
}
