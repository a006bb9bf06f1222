package node

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

func testVersion(n uint64) []byte { return encodeVersion(n<<16, 1) }

func TestVersionCacheDecisions(t *testing.T) {
	c := newVersionCache(1 << 10)
	k := []byte("k")
	if tk := c.record(k, testVersion(5), true); tk.fast {
		t.Fatal("a key the cache never saw went the fast way: redis may hold a newer version")
	}
	c.record(k, testVersion(6), true).applied(testVersion(6))
	if tk := c.record(k, testVersion(7), true); !tk.fast {
		t.Fatal("a newer SET after a learned version did not go the fast way")
	} else {
		tk.queued()
	}
	if tk := c.record(k, testVersion(7), true); tk.fast {
		t.Fatal("a SET at the version already sent went the fast way")
	}
	if tk := c.record(k, testVersion(3), true); tk.fast {
		t.Fatal("an older SET went the fast way")
	}
	if tk := c.record(k, testVersion(9), false); tk.fast {
		t.Fatal("a write that is not a plain SET went the fast way")
	}
	if tk := c.record(k, testVersion(8), true); tk.fast {
		t.Fatal("a SET older than a script write already sent went the fast way")
	}
	c.forget()
	if tk := c.record(k, testVersion(20), true); tk.fast {
		t.Fatal("after forget, a SET went the fast way before redis taught its version")
	}
	if tk := c.record(k, []byte{}, true); tk.fast || tk.cache != nil {
		t.Fatal("an unversioned write touched the cache")
	}
}

func TestVersionCacheFull(t *testing.T) {
	c := newVersionCache(cacheShards) // one entry per shard
	var admitted, refused int
	for i := 0; i < 100*cacheShards; i++ {
		k := []byte(fmt.Sprint("k", i))
		if c.record(k, testVersion(1), true).cache != nil {
			admitted++
		} else {
			refused++
		}
	}
	if admitted != cacheShards || refused != 99*cacheShards {
		t.Fatalf("admitted %d and refused %d keys, want %d and %d", admitted, refused, cacheShards, 99*cacheShards)
	}
	if tk := newVersionCache(0).record([]byte("k"), testVersion(1), true); tk.cache != nil {
		t.Fatal("a cache of size 0 kept a key")
	}
}

// A shard's table doubles as keys arrive; every entry, and what redis
// taught about it, must survive the moves.
func TestVersionCacheKeepsEntriesAsItGrows(t *testing.T) {
	const n = 20_000 // about 300 a shard: six doublings each
	c := newVersionCache(n * 2)
	key := func(i int) []byte { return fmt.Appendf(nil, "key:%d", i) }
	for i := range n {
		c.record(key(i), testVersion(1), true).applied(testVersion(1))
	}
	for i := range n {
		tk := c.record(key(i), testVersion(2), true)
		tk.queued()
		if !tk.fast {
			t.Fatalf("key %d of %d was forgotten as the table grew", i, n)
		}
	}
	for i := range n {
		if tk := c.record(key(i), testVersion(2), true); tk.fast {
			t.Fatalf("key %d: a write no newer than its bound went the fast way", i)
		}
	}
	used := 0
	for i := range c.shards {
		used += c.shards[i].used
		if l := len(c.shards[i].slots); l&(l-1) != 0 || c.shards[i].used*4 > l*3 {
			t.Fatalf("shard %d: %d entries in %d slots", i, c.shards[i].used, l)
		}
	}
	if used != n {
		t.Fatalf("%d entries for %d keys", used, n)
	}
}

// The cache's promise, checked against a simulated redis-server: a write
// sent the fast way (unconditionally) never replaces a newer version. The
// simulation runs what the node does: writes of random versions to a few
// keys, some plain SETs, some other writes and repairs, queued in order and
// run by "redis" later, replies (which teach the cache) later still;
// meanwhile redis may hold versions from before the node started, lose keys
// (expiry) and be reached by a new connection, maybe replaced by a server
// holding newer versions; replies from before may still arrive.
func TestVersionCacheNeverLetsAnOlderWriteWin(t *testing.T) {
	fastRuns := 0
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		c := newVersionCache(1 << 10)
		keys := []string{"a", "b", "c"}
		redis := map[string]uint64{}
		for _, k := range keys {
			if rng.IntN(2) == 0 {
				redis[k] = uint64(rng.IntN(60)) // written before the node started
			}
		}
		type queuedWrite struct {
			key     string
			version uint64
			fast    bool
			set     bool
			ticket  cacheTicket
		}
		var queue []queuedWrite   // sent, not yet run by redis
		var replies []queuedWrite // run, reply not yet seen
		for step := 0; step < 400; step++ {
			switch r := rng.IntN(10); {
			case r < 5: // a write is queued
				k := keys[rng.IntN(len(keys))]
				v := uint64(step/2 + rng.IntN(8)) // clocks run forward, not in step
				set := rng.IntN(4) != 0
				tk := c.record([]byte(k), testVersion(v), set)
				queue = append(queue, queuedWrite{key: k, version: v, fast: tk.fast, set: set, ticket: tk})
				tk.queued()
			case r < 8 && len(queue) > 0: // redis runs the oldest queued request
				w := queue[0]
				queue = queue[1:]
				cur, has := redis[w.key]
				if w.fast {
					fastRuns++
					if has && cur >= w.version {
						t.Fatalf("seed %d: a fast write of version %d replaced version %d of %s", seed, w.version, cur, w.key)
					}
					redis[w.key] = w.version
				} else if !has || cur < w.version {
					redis[w.key] = w.version
					if w.set {
						replies = append(replies, w)
					}
				}
			case r < 9 && len(replies) > 0: // a reply arrives
				i := rng.IntN(len(replies))
				replies[i].ticket.applied(testVersion(replies[i].version))
				replies = append(replies[:i], replies[i+1:]...)
			default:
				switch rng.IntN(6) {
				case 0:
					delete(redis, keys[rng.IntN(len(keys))]) // expiry
				case 1: // a new connection, maybe to a redis-server with other data
					queue = nil // requests on the old connection failed
					if rng.IntN(2) == 0 {
						for _, k := range keys {
							redis[k] = uint64(step/2 + rng.IntN(60))
						}
					}
					c.forget()
				}
			}
		}
	}
	if fastRuns < 1000 {
		t.Fatalf("only %d writes went the fast way: the test checks too little", fastRuns)
	}
}

func TestVersionedSetEncoding(t *testing.T) {
	got := appendVersionedSet(nil, []byte("k"), []byte("v"), []byte("00000000000000000001"))
	want := "*5\r\n$4\r\nMSET\r\n$1\r\nk\r\n$1\r\nv\r\n$11\r\n" + VersionPrefix + "k\r\n$20\r\n00000000000000000001\r\n"
	if !bytes.Equal(got, []byte(want)) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
