package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/freeport"
	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
	"github.com/troop-lab/troop/topology"
)

// The tests in this package run real redis-server processes and in-process
// nodes on loopback. Each process is stopped by PID when its test ends.

func freePort(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

var (
	startRedis = testredis.Start
	waitPing   = testredis.WaitPing
)

// testNode is one position of a test cluster.
type testNode struct {
	t      testing.TB
	cfg    *topology.Config
	redis  *testredis.Server
	log    *slog.Logger
	node   *Node
	cancel context.CancelFunc
	done   chan struct{}
}

// testCluster is dcs x racks x perRack nodes, each over its own redis-server.
type testCluster struct {
	t     testing.TB
	nodes []*testNode // in dc, rack, node order
}

type clusterOpts struct {
	dcs, racks, perRack int
	timeout             time.Duration
	read, write         consistency.Level
	maxInflightPerConn  int
	maxRequestBytes     int
	configure           func(*topology.Config) // last word on each node's config
	redisArgs           []string               // more arguments for each redis-server (--requirepass ...)
	logTo               io.Writer              // where the nodes log at debug level; nil: nowhere (stderr at warn with -v)
}

func startCluster(t testing.TB, o clusterOpts) *testCluster {
	t.Helper()
	if o.dcs == 0 {
		o.dcs = 1
	}
	if o.perRack == 0 {
		o.perRack = 1
	}
	if o.timeout == 0 {
		o.timeout = 2 * time.Second
	}
	tc := &testCluster{t: t}
	tokens := ring.EvenTokens(o.perRack)
	for d := 1; d <= o.dcs; d++ {
		for r := 1; r <= o.racks; r++ {
			for i := 0; i < o.perRack; i++ {
				c := topology.Default()
				c.Datacenter, c.Rack = fmt.Sprintf("dc%d", d), fmt.Sprintf("rack%d", r)
				c.Name = fmt.Sprintf("%s-%s-%d", c.Datacenter, c.Rack, i+1)
				c.Listen, c.DynListen, c.StatsListen = freePort(t), freePort(t), freePort(t)
				c.Tokens = []uint32{tokens[i]}
				c.Timeout = o.timeout
				c.ReadConsistency, c.WriteConsistency = o.read, o.write
				if o.maxInflightPerConn > 0 {
					c.MaxInflightPerConn = o.maxInflightPerConn
				}
				if o.maxRequestBytes > 0 {
					c.MaxRequestBytes = o.maxRequestBytes
				}
				c.DataDir = t.TempDir()
				if o.configure != nil {
					o.configure(c)
				}
				tn := &testNode{t: t, cfg: c, redis: testredis.StartArgs(t, o.redisArgs...)}
				c.Servers = []topology.Server{{Addr: tn.redis.Addr, Weight: 1}}
				tc.nodes = append(tc.nodes, tn)
			}
		}
	}
	for _, tn := range tc.nodes {
		for _, other := range tc.nodes {
			if other != tn {
				tn.cfg.Seeds = append(tn.cfg.Seeds, topology.Seed{Addr: other.cfg.DynListen, Rack: other.cfg.Rack, DC: other.cfg.Datacenter, Tokens: other.cfg.Tokens})
			}
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.logTo != nil {
		log = slog.New(slog.NewTextHandler(o.logTo, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	for _, tn := range tc.nodes {
		tn.log = log
		tn.start()
		t.Cleanup(tn.stop)
	}
	for _, tn := range tc.nodes {
		if !tn.cfg.TLSClient {
			waitPing(t, tn.cfg.Listen)
			continue
		}
		eventually(t, 10*time.Second, func() string { // a TLS listener: up once it accepts
			c, err := net.DialTimeout("tcp", tn.cfg.Listen, time.Second)
			if err != nil {
				return err.Error()
			}
			c.Close()
			return ""
		})
	}
	// Wait for the peer links, so tests start from a connected cluster.
	eventually(t, 10*time.Second, func() string {
		for _, tn := range tc.nodes {
			for _, m := range tn.node.view().all {
				if m.link != nil && !m.link.Connected() {
					return fmt.Sprintf("%s is not connected to peer %s", tn.cfg.Name, m.peerAddr)
				}
			}
		}
		return ""
	})
	return tc
}

// start runs the node of this position (again, after stop: the same
// config, ports and data directory, as a restarted process would).
func (tn *testNode) start() {
	n, err := New(tn.cfg, tn.log)
	if err != nil {
		tn.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tn.node, tn.cancel, tn.done = n, cancel, make(chan struct{})
	done := tn.done
	go func() {
		defer close(done)
		if err := n.Serve(ctx); err != nil {
			tn.t.Errorf("node %s: %v", tn.cfg.Name, err)
		}
	}()
}

// stop stops the node; stopping a stopped node does nothing.
func (tn *testNode) stop() {
	tn.cancel()
	<-tn.done
}

// client is a minimal RESP client for tests: one connection, one request at
// a time.
type client struct {
	t  testing.TB
	c  net.Conn
	rd *resp.Reader
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, rd: resp.NewReader(c, resp.DefaultLimits)}
}

func (c *client) do(args ...string) resp.Value {
	c.t.Helper()
	v, err := c.try(args...)
	if err != nil {
		c.t.Fatalf("%v: %v", args, err)
	}
	return v
}

// try is do for goroutines other than the test's: it returns the error.
func (c *client) try(args ...string) (resp.Value, error) {
	c.c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := c.c.Write(resp.AppendCommandStrings(nil, args...)); err != nil {
		return resp.Value{}, err
	}
	return c.rd.ReadValue()
}

// must runs a command that has to succeed and returns its reply as text.
func (c *client) must(args ...string) string {
	c.t.Helper()
	v := c.do(args...)
	if v.IsError() {
		c.t.Fatalf("%v: %s", args, v.Str)
	}
	if v.Type == resp.Integer {
		return strconv.FormatInt(v.Int, 10)
	}
	if v.IsNull {
		return "(nil)"
	}
	return string(v.Str)
}

// dialPeer connects to tn's peer port as a peer would, to send it peer
// requests (WRITE, READ ...) directly.
func dialPeer(t testing.TB, tn *testNode) *client {
	t.Helper()
	peer := dial(t, tn.cfg.DynListen)
	peer.must("HELLO", "2", "test", "dc1", "rack9", "", "")
	return peer
}

func (tc *testCluster) client(i int, level string) *client {
	c := dial(tc.t, tc.nodes[i].cfg.Listen)
	if level != "" {
		c.must("TROOP", "CONSISTENCY", level)
	}
	return c
}

// eventually retries f until it returns "" or the deadline passes.
// redisesHold waits until every node's redis-server holds key = want.
func (tc *testCluster) redisesHold(key, want string, within time.Duration) {
	tc.t.Helper()
	for _, tn := range tc.nodes {
		r := dial(tc.t, tn.redis.Addr)
		eventually(tc.t, within, func() string {
			if got := r.must("GET", key); got != want {
				return fmt.Sprintf("%s's redis-server: GET %s = %q, want %q", tn.cfg.Name, key, got, want)
			}
			return ""
		})
	}
}

func eventually(t testing.TB, within time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
