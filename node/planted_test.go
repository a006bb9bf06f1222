//go:build planted

package node

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/troop-lab/troop/topology"
)

// The planted bugs do what docs/config.md says.
func TestPlantedBugs(t *testing.T) {
	t.Run(topology.BugNoReadFailover, func(t *testing.T) {
		tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) { c.PlantedBug = topology.BugNoReadFailover }})
		c := tc.client(0, "DC_SAFE_QUORUM")
		c.must("SET", "k", "v")
		c.must("TROOP", "CONSISTENCY", "DC_QUORUM")
		if got := c.must("GET", "k"); got != "v" {
			t.Fatalf("healthy GET = %q", got)
		}
		c.must("TROOP", "FIT", redisP(n2)+"=error")
		if v := c.do("GET", "k"); !v.IsError() || !contains(string(v.Str), "of 3 replicas answered, 2 needed") {
			t.Errorf("GET at DC_QUORUM with one replica failing = %s, want the planted failure", v)
		}
		if l := lineageOf(t, c); slices.Contains(l.Reached, callP(n1, n3)) {
			t.Errorf("the third replica was asked: %v", l.Reached)
		}
		// Writes and DC_ONE reads still fail over.
		c.must("TROOP", "FIT", "RESET")
		c.must("SET", "k", "w")
		c.must("TROOP", "CONSISTENCY", "DC_ONE")
		c.must("TROOP", "FIT", redisP(n1)+"=error")
		if got := c.must("GET", "k"); got != "w" {
			t.Errorf("DC_ONE GET failing over = %q", got)
		}
	})
	t.Run(topology.BugLocalWritesOnly, func(t *testing.T) {
		// Background anti-entropy off: a pass (every 3 s from the nodes'
		// start) would copy the write to the other two, whenever a busy
		// machine gets the test to its reads.
		tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) {
			c.PlantedBug, c.AntiEntropyInterval = topology.BugLocalWritesOnly, 0
		}})
		c := tc.client(0, "DC_SAFE_QUORUM")
		c.must("TROOP", "LINEAGE", "ON")
		c.must("SET", "k", "v") // acknowledged at the strictest level
		if l := lineageOf(t, c); !slices.Equal(l.Reached, []string{redisP(n1)}) || !slices.Equal(l.Used, []string{redisP(n1)}) {
			t.Errorf("write lineage %+v, want its own datastore only", l)
		}
		// A window for a replication that should not be: it can only make
		// the test pass on a machine too slow to show one.
		time.Sleep(300 * time.Millisecond)
		for i, tn := range tc.nodes {
			r := dial(t, tn.redis.Addr)
			want := "(nil)"
			if i == 0 {
				want = "v"
			}
			if got := r.must("GET", "k"); got != want {
				t.Errorf("%s's redis-server has k = %q, want %q", tn.cfg.Name, got, want)
			}
		}
		other := tc.client(1, "DC_ONE")
		if got := other.must("GET", "k"); got != "(nil)" {
			t.Errorf("a DC_ONE read through rack2 = %q, want the write missing", got)
		}
	})
}

// The mutation check: with mirroring off (the planted bug
// no-handoff-mirror) writes that land on the old owner after its range
// was streamed never reach the new owner, and the checker says so.
func TestMembershipCheckCatchesNoHandoffMirror(t *testing.T) {
	problems := membershipUnderLoad(t, topology.BugNoHandoffMirror)
	if len(problems) == 0 {
		t.Fatal("the checker found nothing wrong with mirroring off: it cannot catch lost handoff writes")
	}
	t.Logf("the checker caught %d problems, e.g. %s", len(problems), problems[0])
}

// With consensus planted away, a transaction or a script of one key runs
// on each coordinator's own deciding replica, as before consensus: of two
// compare-and-sets on one value, both commit, every round, and an INCR
// in a script hands out each number twice. TestConsensusTxAndScriptUnderTwoDeciders
// passes only because consensus orders them.
func TestConsensusTxAndScriptPlantedAway(t *testing.T) {
	tc := twoDeciders(t, topology.BugNoConsensus)
	cs := []*client{tc.client(0, "DC_QUORUM"), tc.client(1, "DC_QUORUM")}
	for r := range casRounds {
		if committed, _ := casRound(t, cs, "cas:"+strconv.Itoa(r)); len(committed) != 2 {
			t.Errorf("round %d: %d EXECs committed, want both, on one value", r, len(committed))
		}
	}
	got, unknown := evalIncrs(t, cs, "ids", 10)
	if len(got) != 10 || unknown != 0 {
		t.Errorf("EVAL INCR: %d numbers, %d of unknown outcome; want 1 to 10, each twice", len(got), unknown)
	}
	for i, times := range got {
		if times != 2 {
			t.Errorf("EVAL INCR answered %d %d times, want twice", i, times)
		}
	}
}
