package node

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/troop-lab/troop/node/hlc"
)

func testVersion(n uint64) []byte { return hlc.Encode(n<<16, 1) }

func TestVersionCacheDecisions(t *testing.T) {
	c := newVersionCache(1<<10, true)
	k := []byte("k")
	if tk := c.record(k, testVersion(5), clearsExpiry); tk.fast {
		t.Fatal("a key the cache never saw went the fast way: redis may hold a newer version")
	}
	c.record(k, testVersion(6), clearsExpiry).learned(testVersion(6), true)
	if tk := c.record(k, testVersion(7), clearsExpiry); !tk.fast {
		t.Fatal("a newer SET after a learned version did not go the fast way")
	} else {
		tk.queued()
	}
	if tk := c.record(k, testVersion(7), clearsExpiry); tk.fast {
		t.Fatal("a SET at the version already sent went the fast way")
	}
	if tk := c.record(k, testVersion(3), clearsExpiry); tk.fast {
		t.Fatal("an older SET went the fast way")
	}
	if tk := c.record(k, testVersion(9), mayExpire); tk.fast {
		t.Fatal("a write that is not a plain SET went the fast way")
	}
	if tk := c.record(k, testVersion(8), clearsExpiry); tk.fast {
		t.Fatal("a SET older than a script write already sent went the fast way")
	}
	c.forget()
	if tk := c.record(k, testVersion(20), clearsExpiry); tk.fast {
		t.Fatal("after forget, a SET went the fast way before redis taught its version")
	}
	if tk := c.record(k, []byte{}, clearsExpiry); tk.fast || tk.cache != nil {
		t.Fatal("an unversioned write touched the cache")
	}
}

func TestVersionCacheFull(t *testing.T) {
	c := newVersionCache(cacheShards, true) // one entry per shard
	var admitted, refused int
	for i := 0; i < 100*cacheShards; i++ {
		k := []byte(fmt.Sprint("k", i))
		if c.record(k, testVersion(1), clearsExpiry).cache != nil {
			admitted++
		} else {
			refused++
		}
	}
	if admitted != cacheShards || refused != 99*cacheShards {
		t.Fatalf("admitted %d and refused %d keys, want %d and %d", admitted, refused, cacheShards, 99*cacheShards)
	}
	if tk := newVersionCache(0, true).record([]byte("k"), testVersion(1), clearsExpiry); tk.cache != nil {
		t.Fatal("a cache of size 0 kept a key")
	}
}

// A shard's table doubles as keys arrive; every entry, and what redis
// taught about it, must survive the moves.
func TestVersionCacheKeepsEntriesAsItGrows(t *testing.T) {
	const n = 20_000 // about 300 a shard: six doublings each
	c := newVersionCache(n*2, true)
	key := func(i int) []byte { return fmt.Appendf(nil, "key:%d", i) }
	for i := range n {
		c.record(key(i), testVersion(1), clearsExpiry).learned(testVersion(1), true)
	}
	for i := range n {
		tk := c.record(key(i), testVersion(2), clearsExpiry)
		tk.queued()
		if !tk.fast {
			t.Fatalf("key %d of %d was forgotten as the table grew", i, n)
		}
	}
	for i := range n {
		if tk := c.record(key(i), testVersion(2), clearsExpiry); tk.fast {
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

// TestVersionCacheNeverLetsAnOlderWriteWin runs the cache against a model of
// redis-server: random writes to a few keys (plain SETs, writes that change
// a value in place, others that may give a key an expiry or delete it),
// queued in order and run by "redis" later, replies (which teach the cache) later still; meanwhile redis may
// hold versions from before the node started, expire keys, and be reached
// by a new connection, maybe replaced by a server holding other data;
// replies from before may still arrive. A write the cache lets skip the
// script must never replace a newer version, nor (one that changes a value
// in place) run on a key that has an expiry.
func TestVersionCacheNeverLetsAnOlderWriteWin(t *testing.T) {
	fast := map[expiryEffect]int{}
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		c := newVersionCache(1<<10, true)
		keys := []string{"a", "b", "c"}
		type state struct {
			version       uint64
			has           bool // a version key
			absent        bool // no value: its version is a tombstone, and may expire
			expiry        bool // the value has an expiry
			beforeStarted bool
		}
		redis := map[string]*state{}
		fill := func(step int) {
			for _, k := range keys {
				st := &state{absent: true}
				if rng.IntN(2) == 0 { // written before the node started
					st = &state{version: uint64(step/2 + rng.IntN(60)), has: true, expiry: rng.IntN(3) == 0}
				}
				redis[k] = st
			}
		}
		fill(0)
		type queuedWrite struct {
			key     string
			version uint64
			effect  expiryEffect
			fast    bool
			ticket  cacheTicket
		}
		var queue []queuedWrite // sent, not yet run by redis
		type reply struct {
			w        queuedWrite
			version  uint64
			noExpiry bool
		}
		var replies []reply // run, reply not yet seen
		effects := []expiryEffect{clearsExpiry, clearsExpiry, keepsExpiry, keepsExpiry, keepsExpiry, mayExpire}
		for step := 0; step < 400; step++ {
			switch r := rng.IntN(10); {
			case r < 5: // a write is queued
				k := keys[rng.IntN(len(keys))]
				v := uint64(step/2 + rng.IntN(8)) // clocks run forward, not in step
				effect := effects[rng.IntN(len(effects))]
				tk := c.record([]byte(k), testVersion(v), effect)
				queue = append(queue, queuedWrite{key: k, version: v, effect: effect, fast: tk.fast, ticket: tk})
				tk.queued()
			case r < 8 && len(queue) > 0: // redis runs the oldest queued request
				w := queue[0]
				queue = queue[1:]
				st := redis[w.key]
				if w.fast {
					fast[w.effect]++
					if st.has && st.version >= w.version {
						t.Fatalf("seed %d: a fast write of version %d replaced version %d of %s", seed, w.version, st.version, w.key)
					}
					if w.effect == keepsExpiry && st.expiry {
						t.Fatalf("seed %d: a fast in-place write of %s ran on a key with an expiry: its version would outlive it", seed, w.key)
					}
					st.version, st.has, st.absent = w.version, true, false
					if w.effect == clearsExpiry {
						st.expiry = false
					}
					continue
				}
				newer := !st.has || st.version < w.version
				switch w.effect {
				case clearsExpiry: // the script's last-writer-wins SET
					if newer {
						st.version, st.has, st.absent, st.expiry = w.version, true, false, false
						replies = append(replies, reply{w: w, version: w.version, noExpiry: true})
					}
				case keepsExpiry: // the script, reporting
					if newer {
						st.version, st.has = w.version, true
					}
					st.absent = false
					replies = append(replies, reply{w: w, version: st.version, noExpiry: !st.expiry})
				default: // EXPIRE, DEL, ...: the script
					if newer {
						st.version, st.has = w.version, true
					}
					switch rng.IntN(3) {
					case 0:
						st.expiry = !st.absent
					case 1:
						st.absent, st.expiry = true, false
					}
				}
			case r < 9 && len(replies) > 0: // a reply arrives
				i := rng.IntN(len(replies))
				replies[i].w.ticket.learned(testVersion(replies[i].version), replies[i].noExpiry)
				replies = append(replies[:i], replies[i+1:]...)
			default:
				switch rng.IntN(6) {
				case 0: // expiry: a value with one goes, a tombstone's version goes
					st := redis[keys[rng.IntN(len(keys))]]
					switch {
					case st.expiry:
						st.absent, st.expiry = true, false
					case st.absent:
						st.has = false
					}
				case 1: // a new connection, maybe to a redis-server with other data
					queue = nil // requests on the old connection failed
					if rng.IntN(2) == 0 {
						fill(step)
					}
					c.forget()
				}
			}
		}
	}
	if fast[clearsExpiry] < 1000 || fast[keepsExpiry] < 1000 {
		t.Fatalf("only %d SETs and %d in-place writes went the fast way: the test checks too little", fast[clearsExpiry], fast[keepsExpiry])
	}
}

// With more than one link to redis-server no write skips the script: a
// transaction queued on another key's link could overtake it.
func TestVersionCacheSeveralLinks(t *testing.T) {
	c := newVersionCache(1<<10, false)
	k := []byte("k")
	c.record(k, testVersion(1), clearsExpiry).learned(testVersion(1), true)
	for i, effect := range []expiryEffect{clearsExpiry, keepsExpiry} {
		if tk := c.record(k, testVersion(uint64(2+i)), effect); tk.fast {
			t.Fatalf("effect %d went the fast way", effect)
		}
	}
	if v, ok := c.known(k); !ok || !bytes.Equal(v, testVersion(3)) {
		t.Fatalf("known: %q %v, want the bound %q", v, ok, testVersion(3))
	}
}

func TestVersionedSetEncoding(t *testing.T) {
	got := appendVersionedSet(nil, []byte("k"), []byte("v"), []byte("00000000000000000001"))
	want := "*5\r\n$4\r\nMSET\r\n$1\r\nk\r\n$1\r\nv\r\n$11\r\n" + VersionPrefix + "k\r\n$20\r\n00000000000000000001\r\n"
	if !bytes.Equal(got, []byte(want)) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
