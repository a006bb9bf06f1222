package client

import (
	"sync"
	"testing"

	"github.com/troop-lab/troop/internal/testredis"
)

// BenchmarkClusterPipeline measures the client's own cost per command:
// routing, encoding and the link, pipelines of 100 GETs to one redis-server
// that owns the whole ring.
func BenchmarkClusterPipeline(b *testing.B) {
	srv := testredis.Start(b)
	c, err := NewCluster([]Node{{Name: "solo", DC: "dc1", Rack: "rack1", Tokens: []uint32{0}, Addr: srv.Addr}}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	args := cmd("GET", "bench:key")
	var wg sync.WaitGroup
	done := func([]byte, error) { wg.Done() }
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		wg.Add(1)
		c.Send(args, done)
		if i%100 == 99 {
			c.Flush()
			wg.Wait()
		}
	}
	c.Flush()
	wg.Wait()
}
