package node

import (
	"syscall"
	"testing"
	"time"
)

// A quorum write through a node whose rack holds the key is stamped by
// the next replica; it falls back to the version query when that replica
// refuses (its clock is past the write's deadline), and still succeeds
// when that replica stamped it but its redis-server did not answer.
func TestStampedWrites(t *testing.T) {
	const timeout = time.Second
	tc := startCluster(t, clusterOpts{racks: 3, timeout: timeout})
	c := tc.client(0, "DC_QUORUM")
	stamped := func() int64 { return tc.nodes[0].node.Info().StampedWrites }

	// Stamped: every replica ends with the value, at one version.
	c.must("SET", "k", "1")
	if stamped() != 1 {
		t.Fatalf("stamped writes = %d after one quorum SET, want 1", stamped())
	}
	tc.redisesHold("k", "1", 2*time.Second)
	if got := tc.client(1, "DC_SAFE_QUORUM").must("GET", "k"); got != "1" {
		t.Fatalf("DC_SAFE_QUORUM GET = %q: the replicas disagree", got)
	}

	// Refused: the stamper (rack2, the first other rack) reads its clock
	// ahead of every deadline, so the write takes the long way, and still
	// ends newer than the last.
	tc.nodes[1].node.clock.SetSkew(time.Hour, 0)
	c.must("SET", "k", "2")
	if stamped() != 1 {
		t.Errorf("a write the stamper refused counted as stamped")
	}
	tc.redisesHold("k", "2", 2*time.Second)
	tc.nodes[1].node.clock.SetSkew(0, 0)

	// Stamped but not applied there: rack2's redis-server is paused, so
	// the stamper's own write times out; the write still reaches the
	// other two replicas, and rack2 gets it from a hint once its
	// redis-server is back.
	c.must("SET", "k", "3") // rack2's version cache knows k again: it stamps without asking its redis-server
	p := tc.nodes[1].redis.Cmd.Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := c.try("SET", "k", "4")
	took := time.Since(start)
	p.Signal(syscall.SIGCONT)
	if err != nil || got.IsError() {
		t.Fatalf("SET with the stamper's redis-server paused: %v %s", err, got.Str)
	}
	if took > 2*timeout {
		t.Errorf("SET took %v, more than twice the node's timeout", took)
	}
	if got := tc.client(2, "DC_QUORUM").must("GET", "k"); got != "4" {
		t.Fatalf("DC_QUORUM GET after = %q, want 4", got)
	}
	tc.redisesHold("k", "4", 10*time.Second)
}
