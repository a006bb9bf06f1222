package node

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/node/decide"
	"github.com/troop-lab/troop/node/hlc"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// Clients through every node of three racks, at DC_QUORUM, with no pause:
// INCR hands out each number once, SET NX has at most one winner a round,
// and every replica holds RPUSH's elements in one order, the order LRANGE
// answers through every node. Coordinators duelling over one key may
// fail a command (its error says whether it may have been applied); the
// test counts those, and needs most commands through.
func TestConsensusIncrLockAndListThroughEveryNode(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	const clients, ops = 3, 40
	run := func(do func(c *client, id, op int) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for id := 0; id < clients; id++ {
			c := tc.client(id, "DC_QUORUM")
			wg.Add(1)
			go func() {
				defer wg.Done()
				for op := 0; op < ops; op++ {
					if err := do(c, id, op); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	failed := map[string]int{}
	ok := func(what string, v interface {
		IsError() bool
	}) bool {
		if v.IsError() {
			mu.Lock()
			failed[what]++
			mu.Unlock()
			return false
		}
		return true
	}
	seen := map[int64]int{}
	run(func(c *client, id, op int) error {
		v, err := c.try("INCR", "ids")
		if err != nil {
			return err
		}
		if ok("INCR", v) {
			mu.Lock()
			seen[v.Int]++
			mu.Unlock()
		}
		return nil
	})
	for i, times := range seen {
		if times != 1 {
			t.Errorf("INCR handed out %d %d times", i, times)
		}
	}

	winners := make([]int, ops)
	run(func(c *client, id, op int) error {
		v, err := c.try("SET", "lock:"+strconv.Itoa(op), strconv.Itoa(id), "NX")
		if err != nil {
			return err
		}
		if ok("SET NX", v) && string(v.Str) == "OK" {
			mu.Lock()
			winners[op]++
			mu.Unlock()
		}
		return nil
	})
	for op, w := range winners {
		if w > 1 {
			t.Errorf("lock:%d: %d winners, want at most 1", op, w)
		}
	}

	run(func(c *client, id, op int) error {
		v, err := c.try("RPUSH", "list", fmt.Sprintf("%d-%d", id, op))
		if err != nil {
			return err
		}
		ok("RPUSH", v)
		return nil
	})
	// A pushed element may still be on its way to one replica: wait until
	// every replica holds as many as the first one's quorum read.
	want := strings.Join(listOf(t, tc.client(0, "DC_QUORUM")), ",")
	for i, tn := range tc.nodes {
		r := dial(t, tn.redis.Addr)
		eventually(t, 10*time.Second, func() string {
			if direct := strings.Join(listOf(t, r), ","); direct != want {
				return fmt.Sprintf("%s's redis-server holds %.80q..., a quorum read %.80q...", tn.cfg.Name, direct, want)
			}
			return ""
		})
		if through := strings.Join(listOf(t, tc.client(i, "DC_QUORUM")), ","); through != want {
			t.Errorf("LRANGE through %s: %.80q..., want %.80q...", tn.cfg.Name, through, want)
		}
	}
	elems := strings.Split(want, ",")
	n := len(elems)
	slices.Sort(elems)
	if len(slices.Compact(elems)) != n {
		t.Errorf("the list holds an element twice: %v", want)
	}
	total := 0
	for _, f := range failed {
		total += f
	}
	t.Logf("commands that failed, of %d each: %v", clients*ops, failed)
	if total > clients*ops {
		t.Errorf("%d of %d commands failed: %v", total, 3*clients*ops, failed)
	}
}

func listOf(t *testing.T, c *client) []string {
	t.Helper()
	v := c.do("LRANGE", "list", "0", "-1")
	if v.IsError() {
		t.Fatalf("LRANGE: %s", v.Str)
	}
	var out []string
	for _, e := range v.Elems {
		out = append(out, string(e.Str))
	}
	return out
}

// A whole-value write below a key's promise is refused on that replica,
// and a version query answers the promise: a SET after an INCR is stamped
// above the INCR's promise of its next ballot, and succeeds.
func TestConsensusPromiseFencesWholeValueWrites(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	c := tc.client(0, "DC_QUORUM")
	c.must("INCR", "k")
	r := dial(t, tc.nodes[1].redis.Addr)
	promise := r.must("GET", PromisePrefix+"k")
	version := r.must("GET", VersionPrefix+"k")
	if promise <= version {
		t.Fatalf("promise %s, version %s: want the next ballot promised above the accepted one", promise, version)
	}
	peer := dialPeer(t, tc.nodes[1])
	below := version[:len(version)-4] + "0001" // the accepted ballot's counter, a lower node: below the promise
	if v := peer.do("WRITE", below, "SET", "k", "old"); !v.IsError() || !strings.HasPrefix(string(v.Str), "PROMISED") {
		t.Errorf("a whole-value write below the promise answered %q, want PROMISED", v.Str)
	}
	if got := r.must("GET", "k"); got != "1" {
		t.Errorf("after the refused write the replica holds %q", got)
	}
	c.must("SET", "k", "10")
	if got := c.must("INCR", "k"); got != "11" {
		t.Errorf("INCR after SET = %s, want 11", got)
	}
	tc.redisesHold("k", "11", 5*time.Second)
}

// A change promised on every replica and abandoned after some accepted it
// (abandonChange) leaves a quorum read that finds the replicas differing unable
// to write the newest value back below the promise. Such a read goes
// through consensus, which finishes or supersedes the abandoned change: it
// answers, and every node answers the same after it.
func TestConsensusReadSettlesAnAbandonedChange(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	abandonChange(t, tc, "k")
	// The first node asks its own replica, which holds the older value.
	got := tc.client(0, "DC_QUORUM").must("GET", "k")
	if got != "old" && got != "new" {
		t.Fatalf("GET through the first node = %q", got)
	}
	for i := range tc.nodes {
		if again := tc.client(i, "DC_QUORUM").must("GET", "k"); again != got {
			t.Errorf("GET through node %d = %q after %q", i, again, got)
		}
	}
}

// Pops through every node at DC_QUORUM are decided by consensus: clients
// popping one queue through three nodes each get each element at most
// once, every element pushed comes out unless a pop's outcome is unknown,
// and LPOP with a count of an empty key answers a null array, as Redis.
func TestConsensusPopsDeliverOnce(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	const elements, clients = 90, 3
	c := tc.client(0, "DC_QUORUM")
	for i := 0; i < elements; i++ {
		c.must("RPUSH", "queue", strconv.Itoa(i))
	}
	var mu sync.Mutex
	got := map[string]int{}
	unknown := 0
	var wg sync.WaitGroup
	for id := 0; id < clients; id++ {
		cl := tc.client(id, "DC_QUORUM")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range elements {
				v, err := cl.try("LPOP", "queue")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				switch {
				case v.IsError():
					unknown++
				case !v.IsNull:
					got[string(v.Str)]++
				}
				mu.Unlock()
				if v.IsNull {
					return
				}
			}
		}()
	}
	wg.Wait()
	for e, times := range got {
		if times != 1 {
			t.Errorf("element %s delivered %d times", e, times)
		}
	}
	if len(got)+unknown < elements {
		t.Errorf("%d elements delivered and %d pops of unknown outcome, of %d pushed", len(got), unknown, elements)
	}
	if v := c.do("LPOP", "queue", "2"); v.Type != resp.Array || !v.IsNull {
		t.Errorf("LPOP with a count of an empty key = %+v, want a null array", v)
	}
	// SPOP draws once, on the coordinator: every replica loses that member.
	c.must("SADD", "set", "a", "b", "c")
	popped := c.must("SPOP", "set")
	for _, tn := range tc.nodes {
		r := dial(t, tn.redis.Addr)
		eventually(t, 10*time.Second, func() string {
			if n := r.must("SCARD", "set"); n != "2" || r.must("SISMEMBER", "set", popped) != "0" {
				return fmt.Sprintf("%s's redis-server: %s members, %s among them", tn.cfg.Name, n, popped)
			}
			return ""
		})
	}
}

// abandonChange makes key's replicas differ as a change promised and then
// given up leaves them: the first replica keeps value old, the others hold
// new at a newer version, and every replica has promised a ballot above
// both, so that each copy of new onto the first is refused PROMISED.
func abandonChange(t *testing.T, tc *testCluster, key string) {
	t.Helper()
	tc.client(0, "DC_QUORUM").must("SET", key, "old")
	first := dial(t, tc.nodes[0].redis.Addr)
	at, ok := hlc.Decode([]byte(first.must("GET", VersionPrefix+key)))
	if !ok {
		t.Fatal("the key's version does not decode")
	}
	for i, n := range tc.nodes {
		r := dial(t, n.redis.Addr)
		if i > 0 {
			r.must("SET", key, "new")
			r.must("SET", VersionPrefix+key, string(hlc.Encode(at+1000, 7)))
		}
		r.must("SET", PromisePrefix+key, string(hlc.Encode(at+2000, 7)))
	}
}

// Anti-entropy that meets a promise settles the key by a read by
// consensus: every replica ends up with the value, not only those that
// held it.
func TestAntiEntropySettlesAnAbandonedChange(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) {
		c.ReadRepair, c.AntiEntropyInterval = false, 0 // the pass below is the one that meets the promise
	}})
	abandonChange(t, tc, "k")
	rep, err := tc.nodes[0].node.AntiEntropy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differing != 1 || rep.Repaired != 1 || rep.Failed != 0 {
		t.Errorf("anti-entropy pass: %+v, want one key differing and repaired", rep)
	}
	tc.redisesHold("k", "new", 10*time.Second)
}

// Read repair that meets a promise settles the key likewise.
func TestReadRepairSettlesAnAbandonedChange(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	abandonChange(t, tc, "k")
	c := tc.client(1, "DC_QUORUM") // its quorum may answer without the first replica
	stale := dial(t, tc.nodes[0].redis.Addr)
	eventually(t, 10*time.Second, func() string {
		if got := c.must("GET", "k"); got != "new" {
			return fmt.Sprintf("DC_QUORUM GET = %q, want new", got)
		}
		if got := stale.must("GET", "k"); got != "new" {
			return fmt.Sprintf("the first replica still holds %q", got)
		}
		return ""
	})
	tc.redisesHold("k", "new", 10*time.Second)
}

// twoDeciders starts three racks whose first two nodes each mark the
// other down, while the third reaches both, as an asymmetric partition
// leaves them: each takes its own replica for every key's deciding one,
// and sends the other nothing. Heartbeats are rare, so that no sign of
// life clears the marks; read repair and anti-entropy are off, so that
// only the coordinators' own writes carry values between replicas. bug
// is the planted bug, if any.
func twoDeciders(t *testing.T, bug string) *testCluster {
	t.Helper()
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) {
		c.PlantedBug, c.Heartbeat, c.ReadRepair, c.AntiEntropyInterval = bug, time.Hour, false, 0
	}})
	tc.splitDeciders("k")
	return tc
}

// splitDeciders has the first two nodes each mark the other down, and
// checks that each then takes its own replica for key's deciding one.
func (tc *testCluster) splitDeciders(key string) {
	tc.t.Helper()
	for i, other := range []int{1, 0} {
		n := tc.nodes[i].node
		n.memberByAddr(tc.nodes[other].cfg.DynListen).health.Down.Store(true)
		if d, _ := n.decider(n.replicas([]byte(key))); !d.self {
			tc.t.Fatalf("%s's deciding replica is %s, want its own", tc.nodes[i].cfg.Name, replicaName(d))
		}
	}
}

// ballotAbove is a ballot of a proposer of the test's own (one no node
// has), above every promise and version of keys on every replica: what a
// coordinator the nodes do not know would prepare at.
func (tc *testCluster) ballotAbove(keys ...string) string {
	tc.t.Helper()
	var top uint64
	for _, tn := range tc.nodes {
		r := dial(tc.t, tn.redis.Addr)
		for _, k := range keys {
			for _, vk := range []string{PromisePrefix + k, VersionPrefix + k} {
				if b, ok := versionBallot([]byte(r.must("GET", vk))); ok {
					top = max(top, b.Counter)
				}
			}
		}
	}
	return string(ballotVersion(decide.Ballot{Counter: top + 1000, Proposer: 0x8000 | 0x77}))
}

// casRound has a client through each of the first two nodes WATCH a
// fresh key and GET it (nothing), then each in turn MULTI, SET key to its
// name, EXEC. It returns which EXECs committed, and how many answered that
// their outcome is unknown; an EXEC that did not commit answers a null
// array.
func casRound(t *testing.T, cs []*client, key string) (committed []int, unknown int) {
	t.Helper()
	for _, c := range cs {
		c.must("WATCH", key)
		if got := c.must("GET", key); got != "(nil)" {
			t.Fatalf("GET of the fresh key %s = %q", key, got)
		}
	}
	for i, c := range cs {
		c.must("MULTI")
		c.must("SET", key, "c"+strconv.Itoa(i))
		switch v := c.do("EXEC"); {
		case v.Type == resp.Array && v.IsNull:
		case v.Type == resp.Array && len(v.Elems) == 1 && string(v.Elems[0].Str) == "OK":
			committed = append(committed, i)
		case v.IsError() && strings.Contains(string(v.Str), "outcome unknown"):
			unknown++
		default:
			t.Fatalf("EXEC of %s through client %d = %s", key, i, v)
		}
	}
	return committed, unknown
}

// casRounds is how many rounds of WATCH, GET, MULTI, SET, EXEC the tests
// of two deciders run.
const casRounds = 5

// incrScript is an INCR written as a script.
const incrScript = "return redis.call('INCR', KEYS[1])"

// evalIncrs runs incrScript on key through each of the first two nodes in
// turn, n times each, and returns how often each number was answered,
// and how many answered that their outcome is unknown: a coordinator
// whose one-round-trip accept met the other's promise, which its own
// replica had not seen, cannot tell whether its try will be adopted.
func evalIncrs(t *testing.T, cs []*client, key string, n int) (got map[int64]int, unknown int) {
	t.Helper()
	got = map[int64]int{}
	for range n {
		for _, c := range cs {
			v := c.do("EVAL", incrScript, "1", key)
			switch {
			case v.IsError() && strings.Contains(string(v.Str), "outcome unknown"):
				unknown++
			case v.IsError():
				t.Fatalf("EVAL INCR of %s: %s", key, v.Str)
			default:
				got[v.Int]++
			}
		}
	}
	return got, unknown
}

// With two coordinators each deciding on its own replica, a transaction
// of one key and a script of one key are still decided by consensus:
// of two compare-and-sets on one value, exactly one commits, every round,
// and an INCR in a script hands out each number once. (Before, each
// ran on its own coordinator's replica: both committed, and both handed
// out 1, 2, ...; TestConsensusTxAndScriptPlantedAway shows it.) Inside
// the transaction a blocking pop does not block, and a reply that names
// the key names it, not the scratch key the coordinator ran it in.
func TestConsensusTxAndScriptUnderTwoDeciders(t *testing.T) {
	tc := twoDeciders(t, "")
	cs := []*client{tc.client(0, "DC_QUORUM"), tc.client(1, "DC_QUORUM")}
	commits, unknowns := 0, 0
	for r := range casRounds {
		key := "cas:" + strconv.Itoa(r)
		committed, unknown := casRound(t, cs, key)
		commits, unknowns = commits+len(committed), unknowns+unknown
		final := cs[0].must("GET", key)
		switch {
		case len(committed) > 1:
			t.Errorf("round %d: both EXECs committed on one value", r)
		case len(committed) == 1 && final != "c"+strconv.Itoa(committed[0]):
			t.Errorf("round %d: client %d's EXEC committed, yet %s = %q", r, committed[0], key, final)
		case len(committed) == 0 && unknown == 0 && final != "(nil)":
			t.Errorf("round %d: no EXEC committed, yet %s = %q", r, key, final)
		}
	}
	t.Logf("WATCH CAS: %d rounds, %d EXECs committed, %d of unknown outcome", casRounds, commits, unknowns)
	if commits == 0 {
		t.Errorf("no EXEC of %d committed: the rounds checked nothing", 2*casRounds)
	}
	got, unknown := evalIncrs(t, cs, "ids", 10)
	for i, times := range got {
		if times != 1 {
			t.Errorf("EVAL INCR answered %d %d times", i, times)
		}
	}
	t.Logf("EVAL INCR: %d numbers handed out, %d of unknown outcome", len(got), unknown)
	if len(got) < 10 {
		t.Errorf("EVAL INCR: %d of 20 through, %d of unknown outcome; want half at least", len(got), unknown)
	}
	c := cs[1]
	c.must("MULTI")
	c.must("RPUSH", "q", "a")
	c.must("BLPOP", "q", "0")
	c.must("BLPOP", "q", "0")
	if v := c.do("EXEC"); v.String() != `[(integer) 1 ["q" "a"] (nil)]` {
		t.Errorf("MULTI RPUSH BLPOP BLPOP EXEC = %s", v)
	}
	if v := c.do("EVAL", "redis.call('SET', KEYS[1], 'v') return KEYS[1]", "1", "named"); string(v.Str) != "named" {
		t.Errorf("a script's KEYS[1] = %s, want the key's name", v)
	}
	if got := cs[0].must("GET", "named"); got != "v" {
		t.Errorf("GET of the script's key through the other node = %q", got)
	}
}

// A WATCH at a quorum level reads its key's token by consensus, so what
// it watches is a quorum's value: every read after it sees that value or
// a newer one, and EXEC commits only on a value its client could have
// read. Read from the deciding replica alone, the token could be of a
// change in flight there, which a quorum read after the WATCH misses: the
// client computes its write from the older value, the change is decided,
// and EXEC, finding the token it watched, commits over it, losing that
// update. The test makes that happen: an INCR of k from 1 to 2 through
// rack1's node (the deciding one) is accepted by its own replica while
// its calls to the other two are held; a client through rack2's node
// WATCHes k and GETs it, the GET's quorum being the other two replicas
// (rack2's node holds rack1's down while it runs); then the hold is let
// go, the INCR is decided, and the client commits its GET's value plus
// one. A WATCH by consensus waits for the INCR instead, since rack1's node
// proposes the key's changes one at a time: the hold is let go once the
// GET has answered or the WATCH waits there, whichever comes.
func TestWatchReadsAQuorumsValue(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) {
		c.ReadRepair, c.AntiEntropyInterval = false, 0 // only the test's commands move values
	}})
	w := tc.client(0, "DC_QUORUM")
	w.must("SET", "k", "0")
	w.must("INCR", "k") // decided by rack1's node, whose next change goes out as an accept alone
	tc.redisesHold("k", "1", 10*time.Second)
	w.must("TROOP", "FIT", callP(n1, n2)+"=hold,"+callP(n1, n3)+"=hold")
	incr := make(chan struct{})
	go func() { w.try("INCR", "k"); close(incr) }() // its answer is lost with its connection, below
	first := dial(t, tc.nodes[0].redis.Addr)
	eventually(t, time.Minute, func() string {
		if got := first.must("GET", "k"); got != "2" {
			return fmt.Sprintf("rack1's replica holds k = %q, want the INCR's 2", got)
		}
		return ""
	})

	c := tc.client(1, "DC_QUORUM")
	down := &tc.nodes[1].node.memberByAddr(tc.nodes[0].cfg.DynListen).health.Down
	type answer struct {
		v   resp.Value
		err error
	}
	read := make(chan answer, 1)
	go func() {
		if v, err := c.try("WATCH", "k"); err != nil || v.IsError() {
			read <- answer{v, err}
			return
		}
		down.Store(true)
		defer down.Store(false)
		v, err := c.try("GET", "k")
		read <- answer{v, err}
	}()
	proposers := &tc.nodes[0].node.proposers
	var got *answer
	eventually(t, time.Minute, func() string {
		select {
		case a := <-read:
			got = &a
			return ""
		default:
		}
		proposers.mu.Lock()
		defer proposers.mu.Unlock()
		if kp := proposers.m["k"]; kp != nil && kp.users > 1 {
			return "" // the WATCH waits for the INCR
		}
		return "neither has the GET answered nor does the WATCH wait for the INCR"
	})
	w.c.Close() // lets go of the held calls
	<-incr
	eventually(t, time.Minute, func() string {
		if got := dial(t, tc.nodes[1].redis.Addr).must("GET", "k"); got != "2" {
			return fmt.Sprintf("rack2's replica holds k = %q once the hold is let go, want the INCR's 2", got)
		}
		return ""
	})
	if got == nil {
		a := <-read
		got = &a
	}
	if got.err != nil || got.v.IsError() {
		t.Fatalf("WATCH, GET k: %s %v", got.v.Str, got.err)
	}
	n, _ := strconv.Atoi(string(got.v.Str))
	c.must("MULTI")
	c.must("SET", "k", strconv.Itoa(n+1))
	exec := c.do("EXEC")
	t.Logf("GET after WATCH = %s; EXEC = %s", got.v.Str, exec)
	if n != 2 && exec.Type == resp.Array && !exec.IsNull {
		t.Errorf("EXEC committed %d, computed from the GET's %d, over the INCR to 2 decided after the GET: an update lost", n+1, n)
	}
}

// A quorum read answers a value only once a quorum holds that very value:
// a copy of a newer one written back in its place does not make it
// chosen. The test makes the read meet an RPUSH that one replica accepted
// and that is then superseded, by construction: an RPUSH x through rack1's
// node (which decides the key, and sends its next change as an accept
// alone) is accepted by its own replica while its calls to the other two
// are held; an LRANGE through rack1's node reads that replica's [a x] and
// has its call to rack2 held; then another proposer (the test, speaking
// the peer protocol) prepares a higher ballot on rack2's and rack3's
// replicas, which hold [a], and has rack1's and rack3's accept [a y]:
// chosen, without x. Let go, rack2 answers [a], older than [a x], so the
// read writes its newest answer back from rack1's replica, which by then
// holds [a y]. Written back in its place, [a y] satisfied the write-back
// and the read answered [a x], which no later read holds.
func TestQuorumReadAnswersNoUndecidedTry(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) {
		c.ReadRepair, c.AntiEntropyInterval = false, 0 // only the test's commands move values
	}})
	replica := func(i int) *client { return dial(t, tc.nodes[i].redis.Addr) }
	w := tc.client(0, "DC_QUORUM")
	w.must("RPUSH", "list", "a") // decided by rack1's node, whose next change goes out as an accept alone
	for i := range tc.nodes {
		eventually(t, 10*time.Second, func() string {
			if got := replica(i).must("LLEN", "list"); got != "1" {
				return fmt.Sprintf("%s's replica holds %s elements, want [a]", tc.nodes[i].cfg.Name, got)
			}
			return ""
		})
	}
	w.must("TROOP", "FIT", callP(n1, n2)+"=hold,"+callP(n1, n3)+"=hold")
	pushed := make(chan struct{})
	go func() { w.try("RPUSH", "list", "x"); close(pushed) }() // its answer is lost with its connection, below
	first := replica(0)
	eventually(t, 10*time.Second, func() string {
		if got := first.must("LINDEX", "list", "1"); got != "x" {
			return fmt.Sprintf("rack1's replica holds list[1] = %q, want the RPUSH's x, accepted there alone", got)
		}
		return ""
	})

	// The read, its call to rack2 held: once rack1's replica ran its
	// LRANGE, it has [a x] from there and waits for rack2.
	r := tc.client(0, "DC_QUORUM")
	r.must("TROOP", "FIT", callP(n1, n2)+"=hold")
	ranBefore := lrangeCalls(t, first)
	r.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := r.c.Write(resp.AppendCommandStrings(nil, "LRANGE", "list", "0", "-1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() string {
		if lrangeCalls(t, first) == ranBefore {
			return "the read has not read rack1's replica"
		}
		return ""
	})

	// Another proposer chooses [a y] over [a]: promised by rack2 and
	// rack3, accepted by rack1 and rack3.
	ballot := tc.ballotAbove("list")
	for _, i := range []int{1, 2} {
		v := dialPeer(t, tc.nodes[i]).do("PREPARE", "list", ballot)
		if len(v.Elems) != 5 || v.Elems[0].Int != 1 {
			t.Fatalf("PREPARE on %s = %s, want a promise", tc.nodes[i].cfg.Name, v)
		}
	}
	scratch := replica(2)
	scratch.must("RPUSH", "test:ay", "a", "y")
	ay := scratch.must("DUMP", "test:ay")
	scratch.must("DEL", "test:ay")
	for _, i := range []int{0, 2} {
		v := dialPeer(t, tc.nodes[i]).do("ACCEPT", "list", ballot, ballot, ay, "0")
		if len(v.Elems) != 3 || v.Elems[0].Int != 1 {
			t.Fatalf("ACCEPT on %s = %s, want it accepted", tc.nodes[i].cfg.Name, v)
		}
	}

	// Let the read's call to rack2 go (a new scope lets go of the held
	// calls), and read its answer.
	if _, err := r.c.Write(resp.AppendCommandStrings(nil, "TROOP", "FIT", "RESET")); err != nil {
		t.Fatal(err)
	}
	read, err := r.rd.ReadValue()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := r.rd.ReadValue(); err != nil || string(ok.Str) != "OK" {
		t.Fatalf("TROOP FIT RESET = %s %v", ok, err)
	}
	w.c.Close() // lets go of the RPUSH's held calls: rack2 and rack3 refuse them, and x is never chosen
	<-pushed
	later := tc.client(2, "DC_QUORUM").do("LRANGE", "list", "0", "-1")
	t.Logf("LRANGE while the RPUSH of x was undecided: %s; a later LRANGE: %s", read, later)
	if read.IsError() || later.IsError() {
		t.Fatalf("LRANGE = %s, then %s", read, later)
	}
	if !slices.Equal(values(later), []string{"a", "y"}) {
		t.Errorf("a later LRANGE = %s, want [a y], chosen over [a]", later)
	}
	if got := values(read); len(got) > len(values(later)) || !slices.Equal(got, values(later)[:len(got)]) {
		t.Errorf("LRANGE answered %s, which no later read extends (a later LRANGE: %s): it answered an RPUSH that was never decided", read, later)
	}
}

// lrangeCalls is how many LRANGEs redis-server ran, its scripts' included.
func lrangeCalls(t *testing.T, r *client) string {
	t.Helper()
	for _, line := range strings.Split(r.must("INFO", "commandstats"), "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_lrange:"); ok {
			calls, _, _ := strings.Cut(rest, ",")
			return calls
		}
	}
	return "calls=0"
}
