package node

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/node/hlc"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// A write at DC_QUORUM through one node reads back through every node, at
// every level, and lands on every replica's redis-server as a plain value.
func TestQuorumWriteReadsBackEverywhere(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	w := tc.client(0, "DC_QUORUM")
	for i := 0; i < 20; i++ {
		if got := w.must("SET", fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)); got != "OK" {
			t.Fatalf("SET: %q", got)
		}
	}
	for n := range tc.nodes {
		for _, level := range []string{"DC_QUORUM", "DC_SAFE_QUORUM", "DC_ONE"} {
			c := tc.client(n, level)
			for i := 0; i < 20; i++ {
				key, want := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)
				eventually(t, 2*time.Second, func() string {
					if got := c.must("GET", key); got != want {
						return fmt.Sprintf("node %d %s GET %s = %q, want %q", n, level, key, got, want)
					}
					return ""
				})
			}
		}
	}
	tc.redisesHold("k7", "v7", 2*time.Second) // every replica holds the plain value
}

// One redis-server down: DC_QUORUM still reads and writes; DC_ONE through the
// node whose replica is down fails over to another rack, as documented.
// Two down: DC_QUORUM fails with a clear error within the timeout.
func TestQuorumSurvivesOneFailureNotTwo(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, timeout: time.Second})
	c := tc.client(0, "DC_QUORUM")
	c.must("SET", "before", "1")

	tc.nodes[1].redis.Kill()
	c.must("SET", "after-one", "2")
	if got := c.must("GET", "before"); got != "1" {
		t.Fatalf("GET before = %q", got)
	}
	if got := c.must("GET", "after-one"); got != "2" {
		t.Fatalf("GET after-one = %q", got)
	}
	// A replica whose redis-server is down is unreachable, not an error
	// answer, so DC_SAFE_QUORUM goes on with the other two.
	if got := tc.client(0, "DC_SAFE_QUORUM").must("SET", "safe", "1"); got != "OK" {
		t.Fatalf("DC_SAFE_QUORUM SET with one replica down = %q", got)
	}
	one := tc.client(1, "DC_ONE") // rack2's node, whose redis is down
	if got := one.must("GET", "after-one"); got != "2" {
		t.Fatalf("DC_ONE failover read = %q", got)
	}
	if got := one.must("SET", "one-failover", "3"); got != "OK" {
		t.Fatalf("DC_ONE failover write = %q", got)
	}

	tc.nodes[2].redis.Kill()
	start := time.Now()
	v := c.do("SET", "after-two", "4")
	// Whether the write's version query fails (nothing was written) or its
	// writes do (the outcome is unknown), the error says which.
	if msg := string(v.Str); !v.IsError() || !(contains(msg, "DC_QUORUM write (SET) failed and was not applied: ") && contains(msg, " of 3 replicas answered its version query, 2 needed")) &&
		!(contains(msg, "DC_QUORUM write (SET) failed, outcome unknown: ") && contains(msg, " of 3 replicas acknowledged, 2 needed; it may have been applied")) {
		t.Fatalf("SET with two replicas down: %s", v)
	}
	v = c.do("GET", "before")
	if !v.IsError() || !contains(string(v.Str), "DC_QUORUM read (GET) failed") {
		t.Fatalf("GET with two replicas down: %s", v)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("failing took %v, more than the timeout allows", took)
	}
}

// A paused redis-server (SIGSTOP) answers nothing: requests to it time out
// within the configured timeout, and DC_QUORUM goes on without it.
func TestPausedReplicaTimesOut(t *testing.T) {
	const timeout = 2 * time.Second // wide, so that a loaded machine does not blur the two cases
	tc := startCluster(t, clusterOpts{racks: 3, timeout: timeout})
	c := tc.client(0, "DC_SAFE_QUORUM")
	c.must("SET", "k", "v")
	p := tc.nodes[2].redis.Cmd.Process
	p.Signal(syscall.SIGSTOP)
	defer p.Signal(syscall.SIGCONT)
	q := tc.client(0, "DC_QUORUM")
	start := time.Now()
	if got := q.must("SET", "k", "v2"); got != "OK" {
		t.Fatalf("DC_QUORUM SET with a paused replica = %q", got)
	}
	if took := time.Since(start); took > timeout/2 {
		t.Errorf("DC_QUORUM waited %v for the paused replica", took)
	}
	// SAFE waits for every reachable replica, so it sees the timeout.
	start = time.Now()
	v := c.do("SET", "k", "v3")
	if v.IsError() {
		t.Fatalf("DC_SAFE_QUORUM SET: %s (a timeout is not an error answer)", v.Str)
	}
	if took := time.Since(start); took < timeout/2 || took > 2*timeout {
		t.Errorf("DC_SAFE_QUORUM took %v, want about the timeout (%v)", took, timeout)
	}
	// The coordinator counts the timeout when its link to the peer times out
	// first, the peer when its own link to the paused redis-server does.
	eventually(t, 3*time.Second, func() string {
		total := int64(0)
		for _, tn := range tc.nodes {
			total += tn.node.Info().Timeouts
		}
		if total == 0 {
			return "no timeout counted in any node's /info"
		}
		return ""
	})
}

// Replicas that disagree make DC_SAFE_QUORUM fail, while DC_QUORUM returns
// the newest value among the first quorum of answers.
func TestSafeQuorumRefusesDisagreement(t *testing.T) {
	// Read repair would settle the disagreement this test sets up.
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) { c.ReadRepair = false }})
	c := tc.client(0, "DC_QUORUM")
	c.must("SET", "k", "agreed")
	// Behind the store's back: every replica gets a different value and a
	// different version.
	for i, tn := range tc.nodes {
		r := dial(t, tn.redis.Addr)
		r.must("SET", "k", fmt.Sprintf("v%d", i))
		r.must("SET", VersionPrefix+"k", string(hlc.Encode(uint64(1+i)<<60, 1)))
	}
	safe := tc.client(0, "DC_SAFE_QUORUM")
	v := safe.do("GET", "k")
	if !v.IsError() || !contains(string(v.Str), "replicas disagree") {
		t.Fatalf("DC_SAFE_QUORUM GET over disagreeing replicas: %s", v)
	}
	got := c.must("GET", "k")
	if got != "v1" && got != "v2" { // the newest of whichever two answered first
		t.Fatalf("DC_QUORUM GET = %q, want v1 or v2", got)
	}
	// Two replicas agreeing is enough for DC_SAFE_QUORUM.
	r := dial(t, tc.nodes[2].redis.Addr)
	r.must("SET", "k", "v1")
	r.must("SET", VersionPrefix+"k", string(hlc.Encode(uint64(2)<<60, 1)))
	if got := safe.must("GET", "k"); got != "v1" {
		t.Fatalf("DC_SAFE_QUORUM GET with two agreeing = %q", got)
	}
}

// An older write never replaces a newer value on a replica (last writer wins
// by version), and a delete leaves a tombstone an older write cannot undo.
func TestVersionsOrderWrites(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1})
	tn := tc.nodes[0]
	r := dial(t, tn.redis.Addr)
	peer := dialPeer(t, tn)
	newer, older := string(hlc.Encode(2<<20, 1)), string(hlc.Encode(1<<20, 1))
	peer.must("WRITE", newer, "SET", "k", "new")
	if got := peer.must("WRITE", older, "SET", "k", "old"); got != "OK" {
		t.Fatalf("stale write answered %q", got)
	}
	if got := r.must("GET", "k"); got != "new" {
		t.Fatalf("after a stale write, k = %q", got)
	}
	peer.must("WRITE", string(hlc.Encode(3<<20, 1)), "DEL", "k")
	peer.must("WRITE", newer, "SET", "k", "resurrected")
	if got := r.must("EXISTS", "k"); got != "0" {
		t.Fatal("an older write brought a deleted key back")
	}
	if ttl := r.must("PTTL", VersionPrefix+"k"); ttl == "-1" || ttl == "-2" {
		t.Fatalf("tombstone has PTTL %s, want the grace period", ttl)
	}
}

// A plain SET goes to redis-server as an MSET of value and version once
// the node knows the key's version there, and that way too an older write
// never wins: not over a version redis held before the node saw the key,
// and not after a write that went the fast way.
func TestScriptlessWrites(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1})
	tn := tc.nodes[0]
	r := dial(t, tn.redis.Addr)
	peer := dialPeer(t, tn)
	v := func(n uint64) string { return string(hlc.Encode(n<<20, 1)) }
	fast := func() int64 { return tn.node.stats.scriptlessWrites.Load() }
	expect := func(key, want string) {
		t.Helper()
		if got := r.must("GET", key); got != want {
			t.Fatalf("redis holds %s = %q, want %q", key, got, want)
		}
	}

	r.must("SET", "k", "from-before")
	r.must("SET", VersionPrefix+"k", v(5)) // as if written before this node started
	if got := peer.must("WRITE", v(4), "SET", "k", "old"); got != "OK" {
		t.Fatalf("stale write answered %q", got)
	}
	expect("k", "from-before")
	peer.must("WRITE", v(6), "SET", "k", "six") // the script runs it, and the node learns version 6
	before := fast()
	peer.must("WRITE", v(7), "SET", "k", "seven")
	if fast() != before+1 {
		t.Fatalf("a newer SET of a known key ran the script (scriptless writes %d -> %d)", before, fast())
	}
	expect("k", "seven")
	expect(VersionPrefix+"k", v(7))
	if got := peer.must("WRITE", v(6), "SET", "k", "late"); got != "OK" {
		t.Fatalf("stale write answered %q", got)
	}
	expect("k", "seven")
	r.must("PEXPIRE", "k", "100000")
	r.must("PEXPIRE", VersionPrefix+"k", "100000")
	peer.must("WRITE", v(8), "SET", "k", "eight")
	expect("k", "eight")
	for _, key := range []string{"k", VersionPrefix + "k"} {
		if ttl := r.must("PTTL", key); ttl != "-1" {
			t.Fatalf("after a plain SET, %s has PTTL %s, want none", key, ttl)
		}
	}
	if fast() != before+2 {
		t.Fatalf("scriptless writes %d, want %d", fast(), before+2)
	}
	if got := peer.must("WRITE", v(2), "DEL", "k"); got != "0" {
		t.Fatalf("stale delete answered %q, want 0", got)
	}
	expect("k", "eight")

	// Through a client: the first SET of a key teaches its version, the
	// second skips the script.
	c := tc.client(0, "DC_QUORUM")
	c.must("SET", "x", "1")
	before = fast()
	c.must("SET", "x", "2")
	if fast() != before+1 {
		t.Fatalf("a client's second SET ran the script (scriptless writes %d -> %d)", before, fast())
	}
	if got := c.must("GET", "x"); got != "2" {
		t.Fatalf("GET x = %q, want 2", got)
	}

	// troop_version_cache_keys: 0 runs the script for every write.
	off := startCluster(t, clusterOpts{racks: 1, configure: func(c *topology.Config) { c.VersionCacheKeys = 0 }})
	oc := off.client(0, "DC_QUORUM")
	oc.must("SET", "x", "1")
	oc.must("SET", "x", "2")
	if n := off.nodes[0].node.stats.scriptlessWrites.Load(); n != 0 {
		t.Fatalf("with troop_version_cache_keys: 0, %d writes skipped the script", n)
	}
}

// A write that changes a value in place (INCR, LPUSH, ...) goes to
// redis-server as MULTI of the command and its version once the node knows
// the key's version there and that it has no expiry; with an expiry, or
// after a command that may have set one, it takes the script, which gives
// the version the key's expiry plus the grace. Replies are the command's
// own, errors included.
func TestScriptlessInPlaceWrites(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1})
	tn := tc.nodes[0]
	r := dial(t, tn.redis.Addr)
	c := tc.client(0, "DC_ONE") // at the quorum levels in-place writes are decided by consensus (consensus.go)
	fast := func() int64 { return tn.node.stats.scriptlessWrites.Load() }
	step := func(want int64, args ...string) string {
		t.Helper()
		before := fast()
		got := c.must(args...)
		if n := fast() - before; n != want {
			t.Fatalf("%v: %d writes skipped the script, want %d", args, n, want)
		}
		return got
	}

	step(0, "INCR", "n") // the script reports the version and that n has no expiry
	if got := step(1, "INCR", "n"); got != "2" {
		t.Fatalf("INCR answered %s, want 2", got)
	}
	if v, ttl := r.must("GET", VersionPrefix+"n"), r.must("PTTL", VersionPrefix+"n"); !isVersion(v) || ttl != "-1" {
		t.Fatalf("redis holds version %q with PTTL %s, want a version and no expiry", v, ttl)
	}
	step(0, "EXPIRE", "n", "100")
	step(0, "INCR", "n")
	step(0, "INCR", "n") // still an expiry: the script again
	if ttl, _ := strconv.Atoi(r.must("PTTL", VersionPrefix+"n")); ttl < 100_000 {
		t.Fatalf("the version of a key with an expiry has PTTL %d, want its expiry plus the grace", ttl)
	}
	step(0, "PERSIST", "n")
	step(0, "INCR", "n") // the script finds no expiry
	if got := step(1, "INCRBY", "n", "10"); got != "15" {
		t.Fatalf("INCRBY answered %s, want 15", got)
	}

	for _, w := range []struct {
		first, second []string
		want          string
	}{
		{[]string{"LPUSH", "l", "a"}, []string{"LPUSH", "l", "b"}, "2"},
		{[]string{"HSET", "h", "f", "v"}, []string{"HSET", "h", "g", "v"}, "1"},
		{[]string{"SADD", "s", "a"}, []string{"SADD", "s", "a"}, "0"},
		{[]string{"ZADD", "z", "1", "a"}, []string{"ZADD", "z", "2", "b"}, "1"},
	} {
		step(0, w.first...)
		if got := step(1, w.second...); got != w.want {
			t.Fatalf("%v answered %s, want %s", w.second, got, w.want)
		}
	}
	if got := r.must("LLEN", "l"); got != "2" {
		t.Fatalf("LLEN l = %s, want 2", got)
	}
	step(0, "ZADD", "z", "XX", "5", "a") // may leave a key absent: the script

	step(0, "SET", "str", "abc")
	step(1, "SET", "str", "abd")
	before := fast()
	if v := c.do("INCR", "str"); !v.IsError() || !strings.Contains(string(v.Str), "not an integer") {
		t.Fatalf("INCR of a string answered %v, want redis-server's error", v)
	}
	if fast() != before+1 {
		t.Fatal("INCR of a string known to have no expiry took the script")
	}
	if got := r.must("GET", "str"); got != "abd" {
		t.Fatalf("str = %q after a failed INCR", got)
	}
}

func isVersion(v string) bool { _, ok := hlc.Decode([]byte(v)); return ok }

// Concurrent SETs of the same keys through every node, most of them sent as
// MSET without the script, never lower a replica's version, and leave the
// three replicas identical, value and version: a fast write let through
// without being newer than what its replica holds would do either.
func TestConcurrentWritesConverge(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	const writers, perWriter, keys = 6, 300, 10
	// Meanwhile each replica's versions may only rise: a write applied over
	// a newer one would lower one.
	stop := make(chan struct{})
	var watchers sync.WaitGroup
	lowered := make(chan string, 3)
	for _, tn := range tc.nodes {
		r := dial(t, tn.redis.Addr)
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			seen := map[string]string{}
			for {
				select {
				case <-stop:
					return
				default:
				}
				for k := 0; k < keys; k++ {
					vk := VersionPrefix + fmt.Sprint("key", k)
					v, err := r.try("GET", vk)
					if err != nil {
						return
					}
					if string(v.Str) < seen[vk] {
						lowered <- fmt.Sprintf("%s on %s went from %s to %s", vk, tn.redis.Addr, seen[vk], v.Str)
						return
					}
					seen[vk] = string(v.Str)
				}
			}
		}()
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		c := tc.client(w%3, "DC_QUORUM")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				v, err := c.try("SET", fmt.Sprint("key", i%keys), fmt.Sprintf("w%d-%d", w, i))
				if err == nil && v.IsError() {
					err = fmt.Errorf("SET: %s", v.Str)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	watchers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	close(lowered)
	for msg := range lowered {
		t.Fatal("a replica's version went down: ", msg)
	}
	var fast int64
	for _, tn := range tc.nodes {
		fast += tn.node.stats.scriptlessWrites.Load()
	}
	if fast < writers*perWriter {
		t.Fatalf("only %d of %d replica writes went without the script: the test checks too little", fast, 3*writers*perWriter)
	}
	redises := make([]*client, 3)
	for i, tn := range tc.nodes {
		redises[i] = dial(t, tn.redis.Addr)
	}
	held := func(r *client, key string) string { // value and version
		return r.must("GET", key) + " at " + r.must("GET", VersionPrefix+key)
	}
	// The last writes reach their third replica after their reply.
	eventually(t, 3*time.Second, func() string {
		for k := 0; k < keys; k++ {
			key := fmt.Sprint("key", k)
			want := held(redises[0], key)
			for i := 1; i < 3; i++ {
				if got := held(redises[i], key); got != want {
					return fmt.Sprintf("%s: replica 1 holds %s, replica %d holds %s", key, want, i+1, got)
				}
			}
		}
		return ""
	})
}

// A write in one datacenter appears in the other.
func TestTwoDatacenters(t *testing.T) {
	tc := startCluster(t, clusterOpts{dcs: 2, racks: 2})
	tc.client(0, "DC_QUORUM").must("SET", "cross", "dc")
	for i := 2; i < 4; i++ { // dc2's nodes
		c := tc.client(i, "DC_ONE")
		eventually(t, 3*time.Second, func() string {
			if got := c.must("GET", "cross"); got != "dc" {
				return fmt.Sprintf("dc2 node %d GET cross = %q", i, got)
			}
			return ""
		})
		r := dial(t, tc.nodes[i].redis.Addr)
		eventually(t, 3*time.Second, func() string {
			if got := r.must("GET", "cross"); got != "dc" {
				return fmt.Sprintf("dc2 redis %d GET cross = %q", i, got)
			}
			return ""
		})
	}
	// Reads stay in their datacenter: dc2 answers at DC_QUORUM on its own.
	if got := tc.client(2, "DC_QUORUM").must("GET", "cross"); got != "dc" {
		t.Fatalf("dc2 DC_QUORUM GET = %q", got)
	}
}

// With troop_versions: false a write reaches every replica as the plain
// command, in both datacenters, and leaves no version behind; a node with
// versions on refuses a peer's write without one.
func TestUnversionedWrites(t *testing.T) {
	tc := startCluster(t, clusterOpts{dcs: 2, racks: 2, configure: func(c *topology.Config) {
		c.Versions, c.HintedHandoff, c.ReadRepair, c.AntiEntropyInterval = false, false, false, 0
	}})
	tc.client(0, "DC_QUORUM").must("SET", "plain", "v")
	tc.redisesHold("plain", "v", 3*time.Second)
	for _, tn := range tc.nodes {
		if n := dial(t, tn.redis.Addr).must("EXISTS", VersionPrefix+"plain"); n != "0" {
			t.Errorf("%s holds a version for an unversioned write", tn.cfg.Name)
		}
	}

	versioned := startCluster(t, clusterOpts{racks: 1})
	peer := dialPeer(t, versioned.nodes[0])
	if v := peer.do("WRITE", "", "SET", "k", "v"); !v.IsError() || !contains(string(v.Str), "bad version") {
		t.Fatalf("a versioned node took a write without a version: %s", v)
	}
}

// A connection's requests on one key run in the order it sent them, as in
// Redis, although a DC_QUORUM write queues its writes only once its version
// query is answered: in one pipeline, a GET after a SET reads it, a later
// SET of the key wins, and an MSET that names a key twice keeps the last.
func TestPipelineKeepsOrderOnAKey(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	c := tc.client(1, "DC_QUORUM") // not the first node: its version queries cross the network
	var req []byte
	for i := range 20 {
		v := strconv.Itoa(i)
		req = resp.AppendCommandStrings(req, "SET", "k", v)
		req = resp.AppendCommandStrings(req, "GET", "k")
		req = resp.AppendCommandStrings(req, "MSET", "m", v+"a", "other", v, "m", v+"b")
		req = resp.AppendCommandStrings(req, "GET", "m")
	}
	if _, err := c.c.Write(req); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		v := strconv.Itoa(i)
		for _, want := range []string{"OK", v, "OK", v + "b"} {
			got, err := c.rd.ReadValue()
			if err != nil {
				t.Fatal(err)
			}
			if got.IsError() || string(got.Str) != want {
				t.Fatalf("round %d: got %s, want %q", i, got, want)
			}
		}
	}
	if got := tc.client(2, "DC_QUORUM").must("GET", "k"); got != "19" {
		t.Errorf("GET k through another node = %q, want the last write, 19", got)
	}
}
