package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/troop-lab/troop/node/hlc"
	"github.com/troop-lab/troop/node/repair"
	"github.com/troop-lab/troop/topology"
)

// versionOn reads a key's version straight from a redis-server.
func versionOn(r *client, key string) string { return r.must("GET", VersionPrefix+key) }

// awaitWrite waits until the replica behind r holds a version of key other
// than before, and returns it. A quorum write returns once two replicas have
// it: a test that changes a replica behind troop's back waits for its copy
// first, or the copy lands after the change.
func awaitWrite(t *testing.T, r *client, key, before string) string {
	t.Helper()
	var now string
	eventually(t, 3*time.Second, func() string {
		if now = versionOn(r, key); now == before {
			return fmt.Sprintf("the replica did not get the write of %s", key)
		}
		return ""
	})
	return now
}

// A quorum read over replicas that disagree returns the right value, and
// read repair writes it back to the stale replica: one changed behind
// troop's back at the same version (the majority decides), one that lost
// the key, one with an older version, and one that missed a delete.
func TestReadRepair(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	c := tc.client(0, "DC_QUORUM")
	for _, k := range []string{"same", "lost", "older", "deleted"} {
		c.must("SET", k, "good-"+k)
	}
	mine := dial(t, tc.nodes[0].redis.Addr) // the coordinator's own replica: always read
	for _, k := range []string{"same", "lost", "older", "deleted"} {
		awaitWrite(t, mine, k, "(nil)")
	}
	oldVersion := versionOn(mine, "older")
	c.must("SET", "older", "newer")
	awaitWrite(t, mine, "older", oldVersion)
	oldDeleted := versionOn(mine, "deleted")
	c.must("DEL", "deleted")
	awaitWrite(t, mine, "deleted", oldDeleted)

	mine.must("SET", "same", "corrupt")                 // same version, other bytes
	mine.must("DEL", "lost", VersionPrefix+"lost")      // the key is gone
	mine.must("SET", "older", "good-older")             // an older write ...
	mine.must("SET", VersionPrefix+"older", oldVersion) // ... with its version
	mine.must("SET", "deleted", "good-deleted")         // a delete it missed
	mine.must("SET", VersionPrefix+"deleted", oldDeleted)

	for k, want := range map[string]string{"same": "good-same", "lost": "good-lost", "older": "newer", "deleted": "(nil)"} {
		if got := c.must("GET", k); got != want {
			t.Errorf("DC_QUORUM GET %s = %q, want %q", k, got, want)
		}
	}
	other := dial(t, tc.nodes[1].redis.Addr)
	eventually(t, 5*time.Second, func() string {
		for k, want := range map[string]string{"same": "good-same", "lost": "good-lost", "older": "newer", "deleted": "(nil)"} {
			if got := mine.must("GET", k); got != want {
				return fmt.Sprintf("the stale replica still has %s = %q, want %q", k, got, want)
			}
			if mv, ov := versionOn(mine, k), versionOn(other, k); mv != ov {
				return fmt.Sprintf("%s: version %s on the repaired replica, %s on another", k, mv, ov)
			}
		}
		return ""
	})
	if got := tc.nodes[0].node.Info().ReadRepairs; got < 4 {
		t.Errorf("read_repairs = %d, want at least 4", got)
	}
}

// repairVia runs an anti-entropy pass through a node's admin API.
func repairVia(t *testing.T, tn *testNode) repair.Report {
	t.Helper()
	res, err := http.Post("http://"+tn.cfg.StatsListen+"/repair", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var rep repair.Report
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&rep) != nil {
		t.Fatalf("POST /repair: %s", res.Status)
	}
	return rep
}

// Anti-entropy repairs keys nobody reads, propagates deletes and expiries,
// and never brings a deleted or expired key back; a second pass finds
// nothing left.
func TestAntiEntropy(t *testing.T) {
	// Background passes off: they would repair keys before the pass
	// whose report the test counts.
	tc := startCluster(t, clusterOpts{racks: 3, configure: func(c *topology.Config) { c.AntiEntropyInterval = 0 }})
	c := tc.client(0, "DC_QUORUM")
	const keys = 300
	for i := 0; i < keys; i++ {
		c.must("SET", fmt.Sprintf("ae%d", i), fmt.Sprintf("v%d", i))
	}
	victim := dial(t, tc.nodes[2].redis.Addr) // a replica nobody reads from here
	others := []*client{dial(t, tc.nodes[0].redis.Addr), dial(t, tc.nodes[1].redis.Addr)}
	// applied waits until every replica has the write (DC_QUORUM answers
	// once two of three have it), and returns the victim's version.
	applied := func(k, before string) string {
		t.Helper()
		for _, r := range others {
			awaitWrite(t, r, k, before)
		}
		return awaitWrite(t, victim, k, before)
	}
	for i := 0; i < keys; i++ {
		applied(fmt.Sprintf("ae%d", i), "(nil)")
	}
	// 10 keys lost, 10 changed behind troop's back, 10 older.
	for i := 0; i < 10; i++ {
		victim.must("DEL", fmt.Sprintf("ae%d", i), VersionPrefix+fmt.Sprintf("ae%d", i))
		victim.must("SET", fmt.Sprintf("ae%d", 10+i), "corrupt")
		k := fmt.Sprintf("ae%d", 20+i)
		victim.must("SET", k, "old")
		victim.must("SET", VersionPrefix+k, string(hlc.Encode(1<<20, 1)))
	}
	// Deletes and an expiry the victim missed: it holds the old values with
	// their old versions.
	for i := 0; i < 5; i++ {
		k := fmt.Sprintf("gone%d", i)
		c.must("SET", k, "alive")
		v := applied(k, "(nil)")
		c.must("DEL", k)
		applied(k, v)
		victim.must("SET", k, "alive")
		victim.must("SET", VersionPrefix+k, v)
	}
	c.must("SET", "expiring", "soon")
	v := applied("expiring", "(nil)")
	c.must("SET", "expiring", "soon", "PX", "200")
	applied("expiring", v) // a new version, or none once expired
	victim.must("SET", "expiring", "soon")
	victim.must("SET", VersionPrefix+"expiring", v)
	for i, r := range others { // it expires on the other two
		eventually(t, 10*time.Second, func() string {
			if r.must("EXISTS", "expiring") != "0" {
				return tc.nodes[i].cfg.Name + "'s redis-server still holds the key set to expire"
			}
			return ""
		})
	}

	rep := repairVia(t, tc.nodes[0])
	t.Logf("pass: %+v", rep)
	if rep.KeysCompared < keys || rep.Differing != 36 || rep.Repaired != 36 || rep.Failed != 0 || rep.Bytes == 0 {
		t.Errorf("report %+v: want keys_compared >= %d, differing = repaired = 36, no failures, bytes counted", rep, keys)
	}
	for _, tn := range tc.nodes {
		r := dial(t, tn.redis.Addr)
		for i := 0; i < keys; i++ {
			if got := r.must("GET", fmt.Sprintf("ae%d", i)); got != fmt.Sprintf("v%d", i) {
				t.Fatalf("%s: ae%d = %q after repair", tn.cfg.Name, i, got)
			}
		}
		for i := 0; i < 5; i++ {
			k := fmt.Sprintf("gone%d", i)
			if got := r.must("EXISTS", k); got != "0" {
				t.Fatalf("%s: deleted key %s is back", tn.cfg.Name, k)
			}
			if versionOn(r, k) == "(nil)" {
				t.Fatalf("%s: deleted key %s has no tombstone", tn.cfg.Name, k)
			}
		}
		if got := r.must("EXISTS", "expiring"); got != "0" {
			t.Fatalf("%s: the expired key is back", tn.cfg.Name)
		}
	}
	if got := c.must("GET", "gone0"); got != "(nil)" {
		t.Fatalf("GET of a deleted key after repair = %q", got)
	}
	if again := repairVia(t, tc.nodes[0]); again.Differing != 0 || again.LeavesDiffer != 0 {
		t.Errorf("a second pass still finds differences: %+v", again)
	}
}

// With default settings, replicas left differing converge by themselves
// within 10 s, with no read and no repair command: background anti-entropy
// copies the value the majority holds (one replica changed behind troop's
// back at the same version, the content differs).
func TestReplicasConvergeByDefault(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3})
	tc.client(0, "DC_QUORUM").must("SET", "k", "good")
	tc.redisesHold("k", "good", 10*time.Second)
	dial(t, tc.nodes[2].redis.Addr).must("SET", "k", "corrupt")
	tc.redisesHold("k", "good", 10*time.Second)
}
