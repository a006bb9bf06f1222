package node

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestMaxmemory: CONFIG SET maxmemory through one node reaches every node;
// each coordinator then refuses what may use memory with Redis's OOM error
// (a denyoom command, MULTI's queueing, EXEC of a write, a script whose
// shebang lets it write), serves reads and deletes, and the replicas keep
// taking the writes they are sent; CONFIG SET maxmemory 0 lifts it.
func TestMaxmemory(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	a, b := tc.client(0, ""), tc.client(1, "")
	a.must("SET", "k", "v")
	if got := a.do("CONFIG", "SET", "maxmemory", "bla"); !got.IsError() || !strings.Contains(string(got.Str), "argument must be a memory value") {
		t.Fatalf("CONFIG SET maxmemory bla = %s, want Redis's refusal", got)
	}
	a.must("MULTI")
	a.must("GET", "k")
	if got := a.must("CONFIG", "SET", "maxmemory", "1"); got != "QUEUED" {
		t.Fatalf("CONFIG SET in MULTI = %s", got)
	}
	if got := a.do("EXEC"); len(got.Elems) != 2 || string(got.Elems[1].Str) != "OK" {
		t.Fatalf("EXEC of a read and CONFIG SET maxmemory 1 = %s", got)
	}
	if v := b.do("CONFIG", "GET", "maxmemory"); len(v.Elems) != 2 || string(v.Elems[1].Str) != "1" {
		t.Fatalf("CONFIG GET maxmemory through another node = %s, want 1", v)
	}
	for _, c := range []*client{a, b} {
		if got := c.do("SET", "k", "w"); !got.IsError() || string(got.Str) != oomError {
			t.Fatalf("SET over maxmemory = %s, want %q", got, oomError)
		}
	}
	if got := a.must("GET", "k"); got != "v" {
		t.Fatalf("GET over maxmemory = %s, want v", got)
	}
	if got := a.do("EVAL", "#!lua\nreturn 1", "0"); !got.IsError() || !strings.HasPrefix(string(got.Str), "OOM ") {
		t.Fatalf("EVAL with a shebang over maxmemory = %s, want OOM", got)
	}
	if got := a.must("EVAL", "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])", "1", "k"); got != "v" {
		t.Fatalf("EVAL no-writes over maxmemory = %s, want v", got)
	}
	// MULTI: a command queued over the limit is refused, and EXEC aborts.
	a.must("MULTI")
	if got := a.do("GET", "k"); !got.IsError() || !strings.HasPrefix(string(got.Str), "OOM ") {
		t.Fatalf("GET queued over maxmemory = %s, want OOM", got)
	}
	if got := a.do("EXEC"); !got.IsError() || !strings.HasPrefix(string(got.Str), "EXECABORT") {
		t.Fatalf("EXEC after a refusal = %s, want EXECABORT", got)
	}
	// A write queued before the limit: EXEC is refused, and ends the MULTI.
	b.must("CONFIG", "SET", "maxmemory", "0")
	a.must("MULTI")
	a.must("SET", "k", "x")
	b.must("CONFIG", "SET", "maxmemory", "1kb")
	if got := a.do("EXEC"); !got.IsError() || string(got.Str) != "EXECABORT Transaction discarded because of: "+oomError {
		t.Fatalf("EXEC of a write over maxmemory = %s", got)
	}
	if got := a.must("PING"); got != "PONG" {
		t.Fatalf("PING after the aborted EXEC = %s", got)
	}
	// DEL frees memory: served, on every replica.
	if got := a.must("DEL", "k"); got != "1" {
		t.Fatalf("DEL over maxmemory = %s, want 1", got)
	}
	b.must("CONFIG", "SET", "maxmemory", "0")
	a.must("SET", "k", "z")
	tc.redisesHold("k", "z", 5*time.Second)
}

// TestBusyScript: a script past lua-time-limit (which CONFIG SET passes on)
// makes the node answer Redis's BUSY to its other clients, refuse what
// they queue in MULTI, and abort their EXEC; SCRIPT KILL through another
// node kills it, and the node serves again.
func TestBusyScript(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, timeout: 5 * time.Second})
	a, other, killer := tc.client(0, ""), tc.client(0, ""), tc.client(1, "")
	a.must("CONFIG", "SET", "lua-time-limit", "10")
	if v := killer.do("CONFIG", "GET", "lua-time-limit"); len(v.Elems) != 2 || string(v.Elems[1].Str) != "10" {
		t.Fatalf("CONFIG GET lua-time-limit through another node = %s, want 10", v)
	}
	other.must("SET", "xx", "1")
	other.must("MULTI")
	other.must("INCR", "xx")
	script := make(chan error, 1)
	go func() {
		v, err := a.try("EVAL", "while true do end", "0")
		if err == nil && !strings.Contains(string(v.Str), "killed by user") {
			err = fmt.Errorf("the script answered %s, want its kill", v)
		}
		script <- err
	}()
	busy := dial(t, tc.nodes[0].cfg.Listen)
	eventually(t, 10*time.Second, func() string {
		if v := busy.do("PING"); !v.IsError() || !strings.HasPrefix(string(v.Str), "BUSY") {
			return "PING while a script runs = " + v.String()
		}
		return ""
	})
	if got := other.do("EXEC"); !got.IsError() || !strings.HasPrefix(string(got.Str), "EXECABORT Transaction discarded because of: BUSY") {
		t.Fatalf("EXEC while a script is busy = %s", got)
	}
	if got := killer.do("SCRIPT", "KILL"); got.IsError() {
		t.Fatalf("SCRIPT KILL through another node = %s", got)
	}
	if err := <-script; err != nil {
		t.Fatal(err)
	}
	if got := busy.must("PING"); got != "PONG" {
		t.Fatalf("PING after SCRIPT KILL = %s", got)
	}
	if got := other.must("GET", "xx"); got != "1" {
		t.Fatalf("xx = %s: the aborted transaction ran", got)
	}
	if got := killer.do("SCRIPT", "KILL"); !got.IsError() || !strings.HasPrefix(string(got.Str), "NOTBUSY") {
		t.Fatalf("SCRIPT KILL with no script = %s, want NOTBUSY", got)
	}
	a.must("CONFIG", "SET", "lua-time-limit", "5000")
}

// TestMinReplicasToWrite: CONFIG SET min-replicas-to-write through one node
// reaches every node; a write, a script that writes and EXEC of a write
// are then refused with Redis's NOREPLICAS while fewer of the key's other
// replicas than that are up, and reads are served.
func TestMinReplicasToWrite(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	a, b := tc.client(0, ""), tc.client(1, "")
	a.must("SET", "x", "v")
	if got := a.do("CONFIG", "SET", "min-replicas-to-write", "-1"); !got.IsError() || !strings.Contains(string(got.Str), "argument must be between") {
		t.Fatalf("CONFIG SET min-replicas-to-write -1 = %s", got)
	}
	b.must("CONFIG", "SET", "min-replicas-to-write", "2")
	if v := a.do("CONFIG", "GET", "min-replicas-to-write"); len(v.Elems) != 2 || string(v.Elems[1].Str) != "2" {
		t.Fatalf("CONFIG GET min-replicas-to-write = %s, want 2", v)
	}
	a.must("SET", "x", "w") // two other replicas up
	queued := tc.client(0, "")
	queued.must("MULTI")
	queued.must("SET", "x", "q") // queued while both other replicas are up
	tc.nodes[2].stop()
	eventually(t, 15*time.Second, func() string {
		if got := a.do("SET", "probe", "z"); !got.IsError() || string(got.Str) != noReplicasError {
			return "SET with one other replica up = " + got.String()
		}
		return ""
	})
	if got := queued.do("EXEC"); !got.IsError() || string(got.Str) != "EXECABORT Transaction discarded because of: "+noReplicasError {
		t.Fatalf("EXEC of a write queued before = %s", got)
	}
	if got := a.must("GET", "x"); got != "w" {
		t.Fatalf("GET = %s, want w", got)
	}
	if got := a.must("EVAL", "return redis.call('get', KEYS[1])", "1", "x"); got != "w" {
		t.Fatalf("a script that reads = %s, want w", got)
	}
	for _, script := range []string{"return redis.call('set', KEYS[1], 1)", "#!lua\nreturn redis.call('get', KEYS[1])"} {
		if got := a.do("EVAL", script, "1", "x"); !got.IsError() || !strings.HasPrefix(string(got.Str), "NOREPLICAS") {
			t.Fatalf("EVAL %q = %s, want NOREPLICAS", script, got)
		}
	}
	a.must("MULTI")
	if got := a.must("GET", "x"); got != "QUEUED" {
		t.Fatalf("GET in MULTI = %s, want QUEUED", got)
	}
	if got := a.do("SET", "x", "y"); !got.IsError() || string(got.Str) != noReplicasError {
		t.Fatalf("SET queued in MULTI = %s, want NOREPLICAS", got)
	}
	if got := a.do("EXEC"); !got.IsError() || !strings.HasPrefix(string(got.Str), "EXECABORT") {
		t.Fatalf("EXEC after a refused write = %s, want EXECABORT", got)
	}
	tc.nodes[2].start() // up again: two other replicas
	eventually(t, 15*time.Second, func() string {
		if got := a.do("SET", "x", "z"); got.IsError() {
			return "SET with both other replicas up again = " + got.String()
		}
		return ""
	})
	b.must("CONFIG", "SET", "min-replicas-to-write", "0")
}
