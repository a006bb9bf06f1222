package node

import (
	"testing"
	"time"

	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// A change by consensus that leaves the value as it is (a SET NX of a key
// that exists, a read by consensus, a WATCH, an EXEC whose watched key
// moved) changes nothing if one of its tries is chosen later: when
// another coordinator's value comes first, it runs again on that value and
// answers, where a change of the value must answer "outcome unknown".
// Here the SET NX's accept reaches rack1's replica alone, another proposer
// chooses a new value on rack2 and rack3, and the SET NX's next try finds
// it. An RQ worker's HMGET, read by consensus, met the same in a
// fresh-clone run beside two CPU hogs, and the worker stopped.
func TestUnchangedValueTriesAgainAfterAnotherDecides(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) {
		c.ReadRepair, c.AntiEntropyInterval = false, 0 // only the test's commands move values
	}})
	replica := func(i int) *client { return dial(t, tc.nodes[i].redis.Addr) }
	w := tc.client(0, "DC_QUORUM")
	w.must("INCR", "k") // decided by rack1's node, whose next change goes out as an accept alone
	tc.redisesHold("k", "1", 10*time.Second)
	first := replica(0)
	before := first.must("GET", VersionPrefix+"k")

	c := tc.client(0, "DC_QUORUM")
	c.must("TROOP", "FIT", callP(n1, n2)+"=hold,"+callP(n1, n3)+"=hold")
	c.c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.c.Write(resp.AppendCommandStrings(nil, "SET", "k", "mine", "NX")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() string {
		if got := first.must("GET", VersionPrefix+"k"); got == before {
			return "rack1's replica has not accepted the SET NX's try"
		}
		return ""
	})

	// Another proposer chooses 2 on rack2 and rack3, at a ballot above
	// the SET NX's.
	ballot := tc.ballotAbove("k")
	scratch := replica(2)
	scratch.must("SET", "test:two", "2")
	two := scratch.must("DUMP", "test:two")
	scratch.must("DEL", "test:two")
	for _, i := range []int{1, 2} {
		peer := dialPeer(t, tc.nodes[i])
		if v := peer.do("PREPARE", "k", ballot); len(v.Elems) != 5 || v.Elems[0].Int != 1 {
			t.Fatalf("PREPARE on %s = %s, want a promise", tc.nodes[i].cfg.Name, v)
		}
		if v := peer.do("ACCEPT", "k", ballot, ballot, two, "0"); len(v.Elems) != 3 || v.Elems[0].Int != 1 {
			t.Fatalf("ACCEPT on %s = %s, want it accepted", tc.nodes[i].cfg.Name, v)
		}
	}

	// Let the held accepts go (a new scope lets go of held calls): rack2
	// and rack3 refuse them.
	if _, err := c.c.Write(resp.AppendCommandStrings(nil, "TROOP", "FIT", "RESET")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.rd.ReadValue(); err != nil || !v.IsNull {
		t.Fatalf("SET NX of a key that exists = %s %v, want nil", v, err)
	}
	if v, err := c.rd.ReadValue(); err != nil || string(v.Str) != "OK" {
		t.Fatalf("TROOP FIT RESET = %s %v", v, err)
	}
	if got := tc.client(2, "DC_QUORUM").must("GET", "k"); got != "2" {
		t.Fatalf("GET through rack3 = %q, want the other proposer's 2", got)
	}
}
