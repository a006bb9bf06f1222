package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/node/decide"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// Commands on several keys of one owner at DC_QUORUM run as transactions
// over the keys' registers (transact.go). The tests of two deciders make
// the first two nodes each mark the other down, so each takes its own
// replica for the deciding one of every key: a command run on "the
// deciding replica" then runs on two, and only consensus orders them.

// twoTaggedDeciders is twoDeciders with hash tags: {m}src and {m}dst share
// an owner.
func twoTaggedDeciders(t *testing.T) *testCluster {
	t.Helper()
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) {
		c.HashTag, c.Heartbeat, c.ReadRepair, c.AntiEntropyInterval = "{}", time.Hour, false, 0
	}})
	tc.splitDeciders("{m}src")
	return tc
}

// atOnce runs f(i) for each client at once and returns their replies.
func atOnce(cs []*client, args func(i int) []string) []resp.Value {
	out := make([]resp.Value, len(cs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			v, err := c.try(args(i)...)
			if err != nil {
				v = resp.Value{Type: resp.Error, Str: []byte(err.Error())}
			}
			out[i] = v
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// retried runs a command that has to succeed, again while it fails
// without effect or with an unknown outcome (two deciders duel), at most
// 5 times: it must be idempotent.
func retried(t *testing.T, c *client, args ...string) {
	t.Helper()
	for range 5 {
		v := c.do(args...)
		if !v.IsError() {
			return
		}
		if !unknownOutcome(v) && !strings.Contains(string(v.Str), "not applied") {
			t.Fatalf("%v: %s", args, v)
		}
	}
	t.Fatalf("%v failed 5 times", args)
}

// unknownOutcome says whether a reply is an error of unknown outcome.
func unknownOutcome(v resp.Value) bool {
	return v.IsError() && strings.Contains(string(v.Str), "outcome unknown")
}

func TestSmoveRaceThroughTwoDeciders(t *testing.T) {
	tc := twoTaggedDeciders(t)
	cs := []*client{tc.client(0, "DC_QUORUM"), tc.client(1, "DC_QUORUM")}
	setup := tc.client(2, "DC_QUORUM") // sees every node: its writes reach all three replicas
	moved := 0
	for r := range 6 {
		m := "m" + strconv.Itoa(r)
		retried(t, setup, "SADD", "{m}src", m)
		got := atOnce(cs, func(int) []string { return []string{"SMOVE", "{m}src", "{m}dst", m} })
		ones, unknown := 0, 0
		for i, v := range got {
			switch {
			case v.Type == resp.Integer && v.Int == 1:
				ones++
			case v.Type == resp.Integer && v.Int == 0:
			case unknownOutcome(v):
				unknown++
			default:
				t.Fatalf("round %d: SMOVE through node %d = %s", r, i, v)
			}
		}
		if ones > 1 {
			t.Errorf("round %d: both SMOVEs of %s answered 1", r, m)
		}
		moved += ones
		if ones+unknown == 0 {
			t.Errorf("round %d: no SMOVE of %s answered 1", r, m)
		}
		src, dst := cs[0].must("SISMEMBER", "{m}src", m), cs[1].must("SISMEMBER", "{m}dst", m)
		if ones == 1 && (src != "0" || dst != "1") {
			t.Errorf("round %d: after the SMOVE of %s, SISMEMBER src = %s, dst = %s", r, m, src, dst)
		}
	}
	if moved == 0 {
		t.Error("no SMOVE answered 1: the rounds checked nothing")
	}
}

func TestMsetnxRaceThroughTwoDeciders(t *testing.T) {
	tc := twoTaggedDeciders(t)
	cs := []*client{tc.client(0, "DC_QUORUM"), tc.client(1, "DC_QUORUM")}
	wins := 0
	for r := range 6 {
		a, b := "{x}a"+strconv.Itoa(r), "{x}b"+strconv.Itoa(r)
		got := atOnce(cs, func(i int) []string { return []string{"MSETNX", a, "v" + strconv.Itoa(i), b, "v" + strconv.Itoa(i)} })
		winner := -1
		for i, v := range got {
			switch {
			case v.Type == resp.Integer && v.Int == 1:
				if winner >= 0 {
					t.Errorf("round %d: both MSETNXs answered 1", r)
				}
				winner = i
			case v.Type == resp.Integer && v.Int == 0, unknownOutcome(v):
			default:
				t.Fatalf("round %d: MSETNX through node %d = %s", r, i, v)
			}
		}
		va, vb := cs[1].must("GET", a), cs[0].must("GET", b)
		if va != vb {
			t.Errorf("round %d: after the MSETNXs, %s = %q and %s = %q", r, a, va, b, vb)
		}
		if winner >= 0 {
			wins++
			if want := "v" + strconv.Itoa(winner); va != want {
				t.Errorf("round %d: node %d's MSETNX won, yet %s = %q", r, winner, a, va)
			}
		}
	}
	if wins == 0 {
		t.Error("no MSETNX answered 1: the rounds checked nothing")
	}
}

func TestLmoveConservesElementsThroughEveryNode(t *testing.T) {
	tc := twoTaggedDeciders(t)
	const elements, movesPerClient = 12, 15
	setup := tc.client(2, "DC_QUORUM")
	var want []string
	for i := range elements {
		want = append(want, "e"+strconv.Itoa(i))
	}
	setup.must(append([]string{"RPUSH", "{l}a"}, want...)...)
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := 0
	for i := range tc.nodes {
		c := tc.client(i, "DC_QUORUM")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range movesPerClient {
				src, dst := "{l}a", "{l}b"
				if (i+j)%2 == 1 {
					src, dst = dst, src
				}
				ends := []string{"LEFT", "RIGHT"}
				v, err := c.try("LMOVE", src, dst, ends[rand.N(2)], ends[rand.N(2)])
				if err != nil {
					return
				}
				if !v.IsError() {
					mu.Lock()
					answered++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	// Let every node see every other, and repair the replicas the marks
	// kept from some accepts.
	for i, other := range []int{1, 0} {
		tc.nodes[i].node.memberByAddr(tc.nodes[other].cfg.DynListen).health.Down.Store(false)
	}
	a := lrange(setup, "{l}a")
	b := lrange(setup, "{l}b")
	got := append(slices.Clone(a), b...)
	sort.Strings(got)
	sort.Strings(want)
	t.Logf("%d of %d LMOVEs answered; {l}a = %v, {l}b = %v", answered, len(tc.nodes)*movesPerClient, a, b)
	if !slices.Equal(got, want) {
		t.Fatalf("the lists hold %v between them, want each of %v once", got, want)
	}
	if answered == 0 {
		t.Fatal("no LMOVE answered: the test checked nothing")
	}
	for _, tn := range tc.nodes {
		if _, err := tn.node.AntiEntropy(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, func() string {
		for i, tn := range tc.nodes {
			r := dial(t, tn.redis.Addr)
			ra, rb := lrange(r, "{l}a"), lrange(r, "{l}b")
			if !slices.Equal(ra, a) || !slices.Equal(rb, b) {
				if _, err := tn.node.AntiEntropy(context.Background()); err != nil {
					return err.Error()
				}
				return fmt.Sprintf("replica %d holds {l}a = %v, {l}b = %v; a quorum read answered %v and %v", i, ra, rb, a, b)
			}
		}
		return ""
	})
}

func TestWatchExecOfTwoKeysThroughTwoDeciders(t *testing.T) {
	tc := twoTaggedDeciders(t)
	cs := []*client{tc.client(0, "DC_QUORUM"), tc.client(1, "DC_QUORUM")}
	commits := 0
	for r := range casRounds {
		a, b := "{w}a"+strconv.Itoa(r), "{w}b"+strconv.Itoa(r)
		for _, c := range cs {
			c.must("WATCH", a, b)
			if got := c.must("GET", a); got != "(nil)" {
				t.Fatalf("GET of the fresh key %s = %q", a, got)
			}
		}
		var committed []int
		for i, c := range cs {
			c.must("MULTI")
			c.must("SET", a, "c"+strconv.Itoa(i))
			c.must("SET", b, "c"+strconv.Itoa(i))
			switch v := c.do("EXEC"); {
			case v.Type == resp.Array && v.IsNull:
			case v.Type == resp.Array && len(v.Elems) == 2:
				committed = append(committed, i)
			case unknownOutcome(v):
			default:
				t.Fatalf("round %d: EXEC through node %d = %s", r, i, v)
			}
		}
		commits += len(committed)
		va, vb := cs[0].must("GET", a), cs[1].must("GET", b)
		switch {
		case len(committed) > 1:
			t.Errorf("round %d: both EXECs of two keys committed", r)
		case va != vb:
			t.Errorf("round %d: %s = %q, %s = %q", r, a, va, b, vb)
		case len(committed) == 1 && va != "c"+strconv.Itoa(committed[0]):
			t.Errorf("round %d: node %d's EXEC committed, yet %s = %q", r, committed[0], a, va)
		}
	}
	if commits == 0 {
		t.Error("no EXEC committed: the rounds checked nothing")
	}
}

// plantTransaction leaves on every replica what a coordinator that
// crashed mid-transaction leaves: keys locked by record, each holding its
// value before, and, when commit, the record committed with do's values
// after, as decide.Command makes them; nothing is unlocked.
func plantTransaction(t *testing.T, tc *testCluster, keys []string, record string, do decide.Compound, commit bool) {
	t.Helper()
	// The test's writes before were answered once two of three replicas
	// had them: wait for the third, as the planted locks hold the values
	// read here.
	var replicas []*client
	for _, tn := range tc.nodes {
		replicas = append(replicas, dial(t, tn.redis.Addr))
	}
	eventually(t, 10*time.Second, func() string {
		for _, k := range keys {
			var dumps []string
			for _, r := range replicas {
				dumps = append(dumps, r.do("DUMP", k).String())
			}
			if dumps[0] != dumps[1] || dumps[1] != dumps[2] {
				return fmt.Sprintf("the replicas hold %s apart: %q", k, dumps)
			}
		}
		return ""
	})
	first := replicas[0]
	regs := map[string][]byte{}
	for _, k := range keys {
		d := first.do("DUMP", k)
		regs[k] = packValue(d.Str, first.do("PEXPIRETIME", k).Int)
	}
	ballot := tc.ballotAbove(keys...)
	c, err := decide.NewCommand(keys, record, do)
	if err != nil {
		t.Fatal(err)
	}
	accepts := map[string][]byte{}
	ops := c.Start()
	for len(ops) > 0 {
		op := ops[0]
		ops = ops[1:]
		if op.Key == record {
			if commit {
				accepts[record] = makeSlot(nil, op.Change(nil))
			}
			break
		}
		accepts[op.Key] = op.Change(regs[op.Key])
		next, _ := c.Step(op, decide.Decided)
		ops = append(ops, next...)
	}
	for _, tn := range tc.nodes {
		peer := dialPeer(t, tn)
		for k, v := range accepts {
			dump, expireAt := unpackValue(v)
			_, lock := splitSlot(v)
			if got := peer.do("ACCEPT", k, ballot, ballot, string(dump), strconv.FormatInt(expireAt, 10), string(lock)); len(got.Elems) != 3 || got.Elems[0].Int != 1 {
				t.Fatalf("ACCEPT of %s on %s = %s, want it accepted", k, tn.cfg.Name, got)
			}
		}
	}
}

// locksLeft counts the replicas that hold key locked.
func locksLeft(t *testing.T, tc *testCluster, key string) int {
	t.Helper()
	n := 0
	for _, tn := range tc.nodes {
		if dial(t, tn.redis.Addr).must("EXISTS", LockPrefix+key) == "1" {
			n++
		}
	}
	return n
}

// A coordinator that crashed after locking SMOVE's two keys, before its
// commit, leaves them locked by a record that is absent. The next command
// on them waits for that transaction, then ends it: aborted, so the keys
// keep their values before, and the command runs.
func TestAbandonedLockIsWaitedForThenAborted(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) { c.HashTag = "{}" }})
	c := tc.client(1, "DC_QUORUM")
	c.must("SADD", "{a}src", "m")
	record := recordPrefix + "{a}crashed"
	plantTransaction(t, tc, []string{"{a}src", "{a}dst"}, record, func(v [][]byte) [][]byte { return [][]byte{nil, v[0]} }, false)
	if n := locksLeft(t, tc, "{a}src"); n != len(tc.nodes) {
		t.Fatalf("%d replicas hold {a}src locked, want all", n)
	}
	start := time.Now()
	if got := c.must("SMOVE", "{a}src", "{a}dst", "m"); got != "1" {
		t.Fatalf("SMOVE after the abandoned transaction = %s, want 1: it was aborted, and m is still in src", got)
	}
	t.Logf("the SMOVE that met the abandoned locks took %v", time.Since(start))
	if got := c.do("SMEMBERS", "{a}dst"); len(got.Elems) != 1 || string(got.Elems[0].Str) != "m" {
		t.Errorf("SMEMBERS {a}dst = %s, want [m]", got)
	}
	aborted := 0
	for _, tn := range tc.nodes {
		if dial(t, tn.redis.Addr).must("GET", LockPrefix+record) == "a" {
			aborted++
		}
	}
	if aborted < 2 {
		t.Errorf("%d replicas hold the abandoned record aborted, want a quorum", aborted)
	}
	for _, k := range []string{"{a}src", "{a}dst"} {
		if n := locksLeft(t, tc, k); n > 1 {
			t.Errorf("%d replicas still hold %s locked", n, k)
		}
	}
}

// A transaction whose record is committed, but whose keys are still
// locked (its coordinator crashed before writing them), holds its values
// after in the record only: every replica holds the values before. A
// replica refuses to read a locked key, and the quorum read that meets
// the refusal reads by consensus, as a command of one key that decides
// the transaction's end and writes it: the read answers the value after.
func TestLockedReadIsDecidedByTheDecider(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) { c.HashTag = "{}" }})
	c := tc.client(1, "DC_QUORUM")
	c.must("SET", "{r}a", "before")
	c.must("SET", "{r}b", "other")
	scratch := dial(t, tc.nodes[2].redis.Addr)
	scratch.must("SET", "test:after", "after")
	after := packValue(scratch.do("DUMP", "test:after").Str, 0)
	scratch.must("DEL", "test:after")
	afterData, _ := splitSlot(after)
	plantTransaction(t, tc, []string{"{r}a", "{r}b"}, recordPrefix+"{r}crashed", func(v [][]byte) [][]byte { return [][]byte{afterData, v[1]} }, true)
	if got := dial(t, tc.nodes[0].redis.Addr).must("GET", "{r}a"); got != "before" {
		t.Fatalf("rack1's replica holds {r}a = %q before the read, want the value before the transaction", got)
	}
	if got := c.must("GET", "{r}a"); got != "after" {
		t.Fatalf("GET {r}a at DC_QUORUM = %q, want the committed transaction's %q", got, "after")
	}
	if got := tc.client(2, "DC_QUORUM").must("GET", "{r}b"); got != "other" {
		t.Errorf("GET {r}b = %q, want %q", got, "other")
	}
	if n := locksLeft(t, tc, "{r}a"); n > 1 {
		t.Errorf("%d replicas still hold {r}a locked after the read", n)
	}
}

// A whole-value write of a locked key is refused by the replicas that hold
// the lock, and runs again by consensus, ending the abandoned transaction
// that holds it.
func TestWholeValueWriteOfALockedKeyGoesByConsensus(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) { c.HashTag = "{}" }})
	c := tc.client(0, "DC_QUORUM")
	c.must("SET", "{s}a", "before")
	plantTransaction(t, tc, []string{"{s}a", "{s}b"}, recordPrefix+"{s}crashed", func(v [][]byte) [][]byte { return [][]byte{v[1], v[0]} }, false)
	if got := c.must("SET", "{s}a", "set"); got != "OK" {
		t.Fatalf("SET of a locked key = %s", got)
	}
	if got := tc.client(2, "DC_QUORUM").must("GET", "{s}a"); got != "set" {
		t.Fatalf("GET after the SET = %q", got)
	}
	if got := c.must("GET", "{s}b"); got != "(nil)" {
		t.Fatalf("GET {s}b = %q: the aborted transaction's value after leaked", got)
	}
}

// moveScript moves a string from KEYS[1] to KEYS[2], answering 1, or
// answers 0 when KEYS[1] holds none.
const moveScript = "local v = redis.call('GET', KEYS[1]) if not v then return 0 end redis.call('DEL', KEYS[1]) redis.call('SET', KEYS[2], v) return 1"

// A script and a RENAME of two keys of one owner through two deciders:
// of two that race to move one value, one moves it.
func TestScriptAndRenameOfTwoKeysThroughTwoDeciders(t *testing.T) {
	tc := twoTaggedDeciders(t)
	cs := []*client{tc.client(0, "DC_QUORUM"), tc.client(1, "DC_QUORUM")}
	setup := tc.client(2, "DC_QUORUM") // sees every node: its writes reach all three replicas
	for r := range 4 {
		src, dst := "{e}src"+strconv.Itoa(r), "{e}dst"+strconv.Itoa(r)
		retried(t, setup, "SET", src, "v")
		got := atOnce(cs, func(int) []string { return []string{"EVAL", moveScript, "2", src, dst} })
		moved := 0
		for i, v := range got {
			switch {
			case v.Type == resp.Integer && v.Int == 1:
				moved++
			case v.Type == resp.Integer && v.Int == 0, unknownOutcome(v):
			default:
				t.Fatalf("round %d: EVAL through node %d = %s", r, i, v)
			}
		}
		if moved > 1 {
			t.Errorf("round %d: both scripts moved the value", r)
		}
		retried(t, setup, "SET", src, "w")
		got = atOnce(cs, func(int) []string { return []string{"RENAMENX", src, dst + "n"} })
		renamed := 0
		for i, v := range got {
			switch {
			case v.Type == resp.Integer && v.Int == 1:
				renamed++
			case v.IsError() && strings.Contains(string(v.Str), "no such key"), unknownOutcome(v):
			default:
				t.Fatalf("round %d: RENAMENX through node %d = %s", r, i, v)
			}
		}
		if renamed > 1 {
			t.Errorf("round %d: both RENAMENXs renamed %s", r, src)
		}
	}
}

// A move of a list onto itself (LMOVE l l LEFT RIGHT) names one key twice:
// it is a change of that key by consensus, so the moves through two
// deciders rotate the list once each, in one order, on every replica.
func TestLmoveOntoItselfThroughTwoDeciders(t *testing.T) {
	tc := twoTaggedDeciders(t)
	cs := []*client{tc.client(0, "DC_QUORUM"), tc.client(1, "DC_QUORUM")}
	setup := tc.client(2, "DC_QUORUM") // sees every node: its writes reach all three replicas
	start := []string{"e0", "e1", "e2", "e3", "e4", "e5"}
	setup.must(append([]string{"RPUSH", "{l}r"}, start...)...)
	answered, unknown := 0, 0
	for range 10 {
		for _, v := range atOnce(cs, func(int) []string { return []string{"LMOVE", "{l}r", "{l}r", "LEFT", "RIGHT"} }) {
			switch {
			case !v.IsError():
				answered++
			case unknownOutcome(v):
				unknown++
			case !strings.Contains(string(v.Str), "not applied"):
				t.Fatalf("LMOVE {l}r {l}r: %s", v)
			}
		}
	}
	for i, other := range []int{1, 0} { // let every node see every other again
		tc.nodes[i].node.memberByAddr(tc.nodes[other].cfg.DynListen).health.Down.Store(false)
	}
	got := lrange(setup, "{l}r")
	rotated := func(k int) []string { k %= len(start); return append(slices.Clone(start[k:]), start[:k]...) }
	ok := false
	for k := answered; k <= answered+unknown; k++ {
		ok = ok || slices.Equal(got, rotated(k))
	}
	t.Logf("%d LMOVEs answered, %d of unknown outcome: {l}r = %v", answered, unknown, got)
	if !ok {
		t.Fatalf("{l}r = %v after %d to %d rotations of %v", got, answered, answered+unknown, start)
	}
	if answered == 0 {
		t.Fatal("no LMOVE answered: the test checked nothing")
	}
	// Every replica comes to hold it, those the marks kept from some
	// accepts by repair.
	eventually(t, 30*time.Second, func() string {
		for i, tn := range tc.nodes {
			if r := lrange(dial(t, tn.redis.Addr), "{l}r"); !slices.Equal(r, got) {
				if _, err := tn.node.AntiEntropy(context.Background()); err != nil {
					return err.Error()
				}
				return fmt.Sprintf("replica %d holds %v, a quorum read answered %v", i, r, got)
			}
		}
		return ""
	})
}
