package node

import (
	"testing"

	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/topology"
)

// benchLevel sends cmd at level over one connection, in pipelines of 16,
// to an in-process 3-rack cluster. Allocations per op count the whole
// process, nodes included, so they compare two builds of the node exactly
// where time per op on a shared machine cannot (docs/store.md, the cost of
// failure injection: go test -run XXX -bench . -benchtime 20000x ./node).
func benchLevel(b *testing.B, level string, setup []string, cmd ...string) {
	benchCluster(b, nil, level, setup, cmd...)
}

func benchCluster(b *testing.B, configure func(*topology.Config), level string, setup []string, cmd ...string) {
	tc := startCluster(b, clusterOpts{racks: 3, configure: configure})
	c := tc.client(0, level)
	if setup != nil {
		c.must(setup...)
	}
	c.must("SET", "k", "v")
	var req []byte
	for range 16 {
		req = resp.AppendCommandStrings(req, cmd...)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 16 {
		if _, err := c.c.Write(req); err != nil {
			b.Fatal(err)
		}
		for range 16 {
			if _, err := c.rd.ReadValue(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkGetQuorum(b *testing.B) { benchLevel(b, "DC_QUORUM", nil, "GET", "k") }
func BenchmarkSetQuorum(b *testing.B) { benchLevel(b, "DC_QUORUM", nil, "SET", "k", "v") }
func BenchmarkGetOne(b *testing.B)    { benchLevel(b, "DC_ONE", nil, "GET", "k") }

// What versions cost a node, as make bench's write experiment compares
// them: hints and read repair off in both.
func BenchmarkSetQuorumVersioned(b *testing.B) {
	benchCluster(b, func(c *topology.Config) { c.HintedHandoff, c.ReadRepair = false, false }, "DC_QUORUM", nil, "SET", "k", "v")
}

func BenchmarkSetQuorumUnversioned(b *testing.B) {
	benchCluster(b, func(c *topology.Config) {
		c.HintedHandoff, c.ReadRepair, c.Versions, c.AntiEntropyInterval = false, false, false, 0
	}, "DC_QUORUM", nil, "SET", "k", "v")
}

// The same with lineage recorded: what asking for it costs.
func BenchmarkGetQuorumLineage(b *testing.B) {
	benchLevel(b, "DC_QUORUM", []string{"TROOP", "LINEAGE", "ON"}, "GET", "k")
}
