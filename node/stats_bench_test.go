package node

import (
	"testing"
	"time"

	"github.com/troop-lab/troop/node/consistency"
)

// What recording one request's figures costs the request path, from all
// cores at once as under load.
func BenchmarkStatsRecord(b *testing.B) {
	s := newStats()
	b.RunParallel(func(pb *testing.PB) {
		d := 137 * time.Microsecond
		for pb.Next() {
			s.record(false, consistency.DCOne, d, false)
		}
	})
}
