package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	troopclient "github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/topology"
)

// lockedBuffer collects the nodes' log lines from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// errText is a reply's error text, or "" for a reply that is not an error.
func errText(c *client, args ...string) string {
	c.t.Helper()
	v := c.do(args...)
	if !v.IsError() {
		return ""
	}
	return string(v.Str)
}

// A cluster whose nodes want passwords, over redis-servers that want one
// too: clients get Redis's own replies (compared with a redis-server's,
// configured alike), users get what their access allows, failures are
// counted and limited, and no password reaches the log.
func TestAuth(t *testing.T) {
	const (
		clientPass = "s3cret-client"
		readerPass = "s3cret-reader"
		writerPass = "s3cret-writer"
		redisPass  = "s3cret-redis"
	)
	writerHash := sha256.Sum256([]byte(writerPass))
	logs := &lockedBuffer{}
	tc := startCluster(t, clusterOpts{racks: 2, read: consistency.DCQuorum, write: consistency.DCQuorum,
		redisArgs: []string{"--requirepass", redisPass}, logTo: logs,
		configure: func(c *topology.Config) {
			c.RequirePass, c.RedisPassword = clientPass, redisPass
			c.Users = []topology.User{
				{Name: "reader", Access: topology.AccessReadOnly, Password: readerPass},
				{Name: "writer", Access: topology.AccessFull, Password: "#" + hex.EncodeToString(writerHash[:])},
			}
		}})

	// The same conversation with a redis-server configured alike.
	same := testredis.StartArgs(t, "--requirepass", clientPass)
	admin := dial(t, same.Addr)
	admin.must("AUTH", clientPass)
	admin.must("ACL", "SETUSER", "reader", "on", ">"+readerPass, "~*", "+@all", "-@write", "-@dangerous")
	node, plain := dial(t, tc.nodes[0].cfg.Listen), dial(t, same.Addr)
	for _, cmd := range [][]string{
		{"GET", "k"},
		{"PING"},
		{"HELLO", "3"},
		{"AUTH", "wrong"},
		{"AUTH", "nobody", clientPass},
		{"HELLO", "3", "AUTH", "default", "wrong"},
		{"AUTH", "a", "b", "c"},
		{"AUTH", clientPass},
		{"AUTH", "reader", readerPass},
		{"SET", "k", "v"},
		{"FLUSHALL"},
	} {
		got, want := errText(node, cmd...), errText(plain, cmd...)
		if got != want {
			t.Errorf("%q: troop answers %q, redis-server %q", cmd, got, want)
		}
	}

	// A full-access client writes through every node's AUTH to its redis-server.
	w := dial(t, tc.nodes[1].cfg.Listen)
	if v := w.do("HELLO", "2", "AUTH", "writer", writerPass); v.IsError() {
		t.Fatalf("HELLO 2 AUTH writer: %s", v.Str)
	}
	w.must("SET", "k", "v1")
	for _, tn := range tc.nodes {
		r := dial(t, tn.redis.Addr)
		r.must("AUTH", redisPass)
		eventually(t, 5*time.Second, func() string { // DC_QUORUM answered once two of three had it
			if got := r.must("GET", "k"); got != "v1" {
				return fmt.Sprintf("%s's redis-server holds k = %q, want v1", tn.cfg.Name, got)
			}
			return ""
		})
	}

	// troop's own client authenticates every connection it makes.
	var nodes []troopclient.Node
	for _, tn := range tc.nodes {
		nodes = append(nodes, troopclient.Node{Name: tn.cfg.Name, DC: tn.cfg.Datacenter, Rack: tn.cfg.Rack, Tokens: tn.cfg.Tokens, Addr: tn.cfg.Listen})
	}
	for _, d := range []troopclient.Dial{{User: "writer", Password: writerPass}, {Password: clientPass}, {Password: "wrong"}} {
		cl, err := troopclient.NewCluster(nodes, troopclient.Options{Dial: d, WriteLevel: "DC_QUORUM"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = cl.Do(ctx, []byte("SET"), []byte("ck"), []byte("cv"))
		cancel()
		cl.Close()
		if wrong := d.Password == "wrong"; (err != nil) != wrong || wrong && !strings.Contains(err.Error(), "AUTH refused: WRONGPASS") {
			t.Errorf("client as %q: SET: %v", d.User, err)
		}
	}

	// go-redis authenticates with HELLO 3 AUTH, as it does with redis-server.
	rdb := redis.NewClient(&redis.Options{Addr: tc.nodes[1].cfg.Listen, Username: "reader", Password: readerPass})
	defer rdb.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if got, err := rdb.Get(rctx, "ck").Result(); err != nil || got != "cv" {
		t.Errorf("go-redis as reader: GET ck = %q, %v", got, err)
	}
	if err := rdb.Set(rctx, "ck", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("go-redis as reader: SET = %v, want NOPERM", err)
	}

	// A read-only user reads, and may not write, pop, flush or configure,
	// in a transaction neither.
	r := dial(t, tc.nodes[0].cfg.Listen)
	r.must("AUTH", "reader", readerPass)
	if got := r.must("GET", "k"); got != "v1" {
		t.Errorf("reader GET k = %q", got)
	}
	r.must("MGET", "k", "x")
	for _, cmd := range [][]string{{"SET", "k", "v2"}, {"DEL", "k"}, {"LPOP", "l"}, {"CONFIG", "SET", "x", "y"}} {
		want := "NOPERM this user has no permissions to run the '" + strings.ToLower(cmd[0])
		if got := errText(r, cmd...); !strings.HasPrefix(got, want) {
			t.Errorf("reader %q = %q, want %q...", cmd, got, want)
		}
	}
	r.must("MULTI")
	r.must("GET", "k")
	errText(r, "SET", "k", "v3")
	if got := errText(r, "EXEC"); !strings.HasPrefix(got, "EXECABORT") {
		t.Errorf("reader EXEC after a refused SET = %q, want EXECABORT", got)
	}
	if got := w.must("GET", "k"); got != "v1" {
		t.Errorf("k = %q after the reader's refused writes", got)
	}

	// Failed attempts from one address are limited: past the burst even
	// the right password is refused unchecked, for a while. (On the node
	// that has seen no failure yet.)
	bad := dial(t, tc.nodes[1].cfg.Listen)
	for i := 0; i < authFailureBurst; i++ {
		if got := errText(bad, "AUTH", "guess"); got != wrongPassReply {
			t.Fatalf("failed AUTH %d = %q", i+1, got)
		}
	}
	if got := errText(bad, "AUTH", clientPass); !strings.Contains(got, "too many failed AUTH attempts from 127.0.0.1") {
		t.Errorf("AUTH past the limit = %q, want a refusal", got)
	}
	if info := tc.nodes[1].node.Info(); info.AuthFailures != authFailureBurst || info.AuthRateLimited != 1 {
		t.Errorf("/info counts auth_failures %d, auth_rate_limited %d; want %d and 1", info.AuthFailures, info.AuthRateLimited, authFailureBurst)
	}
	if info := tc.nodes[0].node.Info(); info.ACLDenied < 5 {
		t.Errorf("/info counts acl_denied %d, want 5 or more", info.ACLDenied)
	}
	eventually(t, 3*authFailureRefill, func() string {
		if got := errText(bad, "AUTH", clientPass); got != "" {
			return "AUTH still refused: " + got
		}
		return ""
	})

	out := logs.String()
	if !strings.Contains(out, "reached the limit") {
		t.Errorf("the log does not report the limited address:\n%s", out)
	}
	for _, p := range []string{clientPass, readerPass, writerPass, redisPass, "guess", hex.EncodeToString(writerHash[:])} {
		if strings.Contains(out, p) {
			t.Errorf("the log holds the password %q", p)
		}
	}
}

// A node whose redis-server wants a password it was not given says so:
// requests fail with redis-server's reason, without the password.
func TestAuthToRedisRefused(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1, redisArgs: []string{"--requirepass", "right"},
		configure: func(c *topology.Config) { c.RedisPassword = "wrong" }})
	c := tc.client(0, "")
	got := errText(c, "SET", "k", "v")
	if !strings.Contains(got, "WRONGPASS") || strings.Contains(got, "wrong ") {
		t.Errorf("SET through a node refused by its redis-server = %q, want redis-server's WRONGPASS", got)
	}
}

// The limiter lets a burst of failures through, then one per refill, and
// forgets an address once its bucket is full again.
func TestFailureLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newFailureLimiter(3, time.Second, 2)
	for i := 0; i < 3; i++ {
		if w := l.wait("a", now); w != 0 {
			t.Fatalf("attempt %d waits %v", i+1, w)
		}
		if limited := l.fail("a", now); limited != (i == 2) {
			t.Fatalf("failure %d: limited %v", i+1, limited)
		}
	}
	if w := l.wait("a", now); w != time.Second {
		t.Errorf("after the burst: wait %v, want 1s", w)
	}
	if w := l.wait("b", now); w != 0 {
		t.Errorf("another address waits %v", w)
	}
	now = now.Add(1500 * time.Millisecond)
	if w := l.wait("a", now); w != 0 {
		t.Errorf("after a refill: wait %v", w)
	}
	l.fail("b", now)
	l.fail("c", now) // three addresses, room for two: the fullest (b) goes
	if _, ok := l.hosts["b"]; ok || len(l.hosts) != 2 {
		t.Errorf("hosts kept: %v", l.hosts)
	}
	now = now.Add(10 * time.Second)
	l.wait("a", now)
	if _, ok := l.hosts["a"]; ok {
		t.Error("a full bucket is still remembered")
	}
}
