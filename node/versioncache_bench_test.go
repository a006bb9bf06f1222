package node

import (
	"fmt"
	"math/rand/v2"
	"strconv"
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
			order, version := benchDecisions(n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.record(keys[order[i%n]], version(i), clearsExpiry).queued()
			}
		})
	}
}

// BenchmarkVersionCacheRecordPrefetched is the 100,000-key case with each
// key's slot prefetched a few decisions ahead, as a write's is while it is
// routed: what the prefetch saves when the miss has work to overlap. Keys
// are formatted as they are used, so that, as in a request just read, the
// key's own bytes are in the cache and only the table misses.
func BenchmarkVersionCacheRecordPrefetched(b *testing.B) {
	const n = 100_000
	for _, ahead := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("ahead=%d", ahead), func(b *testing.B) {
			c := newVersionCache(n, true)
			key := func(dst []byte, i int) []byte { return strconv.AppendInt(append(dst[:0], "key:"...), int64(i), 10) }
			var k, next []byte
			for i := range n {
				k = key(k, i)
				c.record(k, testVersion(1), clearsExpiry).learned(testVersion(1), true)
			}
			order, version := benchDecisions(n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if ahead > 0 {
					next = key(next, order[(i+ahead)%n])
					c.prefetch(next)
				}
				k = key(k, order[i%n])
				c.record(k, version(i), clearsExpiry).queued()
			}
		})
	}
}

// benchDecisions returns the random order in which the benchmarks visit n
// keys, and the version of their i-th decision: versions rise across passes
// over the keys, so that every decision is fast.
func benchDecisions(n int) (order []int, version func(i int) []byte) {
	order = rand.New(rand.NewPCG(1, 2)).Perm(n)
	versions := make([][]byte, 1024)
	for i := range versions {
		versions[i] = testVersion(uint64(2 + i))
	}
	return order, func(i int) []byte { return versions[min(i/n, len(versions)-1)] }
}
