package node

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkVersionCacheRecord measures a fast-path decision (a plain SET
// newer than the key's known bound) over keyspaces of growing size, keys in
// random order: the larger the keyspace, the more each lookup misses the
// CPU's caches.
func BenchmarkVersionCacheRecord(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			c := newVersionCache(n, true)
			keys := make([][]byte, n)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "key:%012d", i)
				c.record(keys[i], testVersion(1), clearsExpiry).learned(testVersion(1), true)
			}
			order := rand.New(rand.NewPCG(1, 2)).Perm(n)
			versions := make([][]byte, 1024)
			for i := range versions {
				versions[i] = testVersion(uint64(2 + i))
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Versions rise across passes over the keys, so every decision is fast.
				t := c.record(keys[order[i%n]], versions[min(i/n, len(versions)-1)], clearsExpiry)
				t.queued()
			}
		})
	}
}
