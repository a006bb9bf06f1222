package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/topology"
)

// TestStreams runs stream commands through the nodes of a 3-rack cluster
// at DC_QUORUM: every replica holds the same entries with the same IDs,
// in and out of MULTI, and a consumer group delivers an entry once,
// through whichever node its consumers use.
func TestStreams(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) { c.HashTag = "{}" }})
	c0, c1, c2 := tc.client(0, "DC_QUORUM"), tc.client(1, "DC_QUORUM"), tc.client(2, "DC_QUORUM")
	// A change at DC_QUORUM is answered once a quorum took it: the last
	// replica may take it a moment later.
	replicasHold := func(key string) string {
		t.Helper()
		var replicas []*client
		for _, tn := range tc.nodes {
			replicas = append(replicas, dial(t, tn.redis.Addr))
		}
		var seen []string
		eventually(t, 10*time.Second, func() string {
			seen = seen[:0]
			for _, r := range replicas {
				var ids []string
				for _, e := range r.do("XRANGE", key, "-", "+").Elems {
					ids = append(ids, string(e.Elems[0].Str))
				}
				seen = append(seen, strings.Join(ids, " "))
			}
			if seen[0] != seen[1] || seen[1] != seen[2] {
				return fmt.Sprintf("the replicas of %s hold the entries %q, want the same on all", key, seen)
			}
			return ""
		})
		return seen[0]
	}

	id1 := c0.must("XADD", "{s}:log", "*", "job", "1")
	id2 := c1.must("XADD", "{s}:log", "MAXLEN", "~", "100", "*", "job", "2")
	got := c2.pipeline([]string{"MULTI"}, []string{"XADD", "{s}:log", "*", "job", "3"}, []string{"EXEC"})
	if len(got[2].Elems) != 1 {
		t.Fatalf("EXEC of XADD = %s", got[2])
	}
	id3 := string(got[2].Elems[0].Str)
	if held := replicasHold("{s}:log"); held != strings.Join([]string{id1, id2, id3}, " ") {
		t.Fatalf("the replicas hold %q, want the IDs the nodes answered: %s %s %s", held, id1, id2, id3)
	}
	if got := c1.do("XLEN", "{s}:log"); got.Int != 3 {
		t.Fatalf("XLEN = %s", got)
	}

	c0.must("XGROUP", "CREATE", "{s}:log", "workers", "0")
	delivered := map[string]int{}
	for round := 0; round < 3; round++ {
		for i, c := range []*client{c1, c2} {
			v := c.do("XREADGROUP", "GROUP", "workers", fmt.Sprintf("w%d", i), "COUNT", "1", "STREAMS", "{s}:log", ">")
			if v.IsError() {
				t.Fatalf("XREADGROUP: %s", v.Str)
			}
			for _, s := range v.Elems {
				for _, e := range s.Elems[1].Elems {
					delivered[string(e.Elems[0].Str)]++
					if got := c.do("XACK", "{s}:log", "workers", string(e.Elems[0].Str)); got.Int != 1 {
						t.Fatalf("XACK = %s", got)
					}
				}
			}
		}
	}
	if len(delivered) != 3 || delivered[id1] != 1 || delivered[id2] != 1 || delivered[id3] != 1 {
		t.Fatalf("the group delivered %v, want each of the 3 entries once", delivered)
	}
	if got := c0.do("XPENDING", "{s}:log", "workers"); got.Elems[0].Int != 0 {
		t.Fatalf("XPENDING after every XACK = %s", got)
	}
	if got := c0.do("XGROUP", "HELP", "xxx"); !got.IsError() || !strings.Contains(string(got.Str), "wrong number of arguments for 'xgroup|help' command") {
		t.Errorf("XGROUP HELP xxx = %s, want Redis's arity error", got)
	}
	// Inside MULTI it does not block, as in Redis.
	got = c0.pipeline([]string{"MULTI"}, []string{"XREAD", "BLOCK", "0", "STREAMS", "{s}:log", "$"}, []string{"EXEC"})
	if exec := got[2]; exec.IsError() || len(exec.Elems) != 1 || !exec.Elems[0].IsNull {
		t.Fatalf("XREAD BLOCK inside MULTI: EXEC = %s, want [nil]", exec)
	}
}
