package node

import (
	"bytes"
	"encoding/hex"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/troop-lab/troop/internal/prefetch"
	"github.com/troop-lab/troop/node/hlc"
)

// A versionCache lets most versioned writes skip the write script. The
// script is what makes a replica's writes order-independent (it reads the
// key's version and writes only when the new one is newer), but a Lua call
// costs redis-server 1.7 times a plain MSET of the value and its version
// key, and 2.1 times a SET (docs/performance.md). The node is its redis-server's only writer, so
// it can keep that comparison itself: per key, a version no older than the
// one redis holds. A plain SET newer than that bound can then go as
// `MSET key value versionkey version`.
//
// A write that changes a value in place (INCR, LPUSH, HSET: keepsExpiry)
// can skip the script too, as `MULTI; cmd; SET versionkey version; EXEC`,
// when the key is also known to have no expiry: the script gives the
// version key the key's expiry plus the tombstone grace, and the fast form
// gives it none. That is learned from redis (a plain SET's reply, or the
// script's report of the key's expiry) and lost when a request that may
// give the key an expiry is sent.
//
// The bound holds because every versioned request for a key (write, MSET,
// repair) raises it before it is queued, and an entry is never removed: a
// key the cache has no room for is simply never sent the fast way. What is
// not known is the version redis held before the entry was made (written
// before this node started, say); the first write the script applies
// teaches it, since after it redis holds exactly that version. A new
// connection to redis-server (which may have restarted with other data)
// makes every entry unknown again.
//
// Order matters only for the unconditional writes: one is queued on the
// node's redis link while its shard is locked, so no later decision can
// reach redis before it, and everything else is a conditional script that
// may arrive in any order. With more than one link to redis-server
// (datastore_connections), a transaction or multi-key write queued on one
// key's link could overtake an unconditional write to another of its keys
// on that key's link: then every write takes the script (fastWrites off),
// and the cache still answers version queries.
type versionCache struct {
	fastWrites bool          // one link to redis-server: writes may skip the script
	perShard   int           // entries each shard may hold
	epoch      atomic.Uint32 // raised by forget
	seeds      [2]maphash.Seed
	shards     [cacheShards]cacheShard
}

const (
	cacheShardBits = 6
	cacheShards    = 1 << cacheShardBits
)

// Entries are found by a 128-bit hash of the key, two maphash sums with
// random seeds, not by the key: the table then holds no pointers (the
// garbage collector skips it) and a lookup compares 16 bytes. Two keys of
// one hash would share an entry, and what redis taught about one would be
// trusted for the other; at 2^-127 per pair of keys (seeds differ per
// process; one bit marks a slot used) that is far below the odds of a
// memory error for any keyspace redis can hold.
type keyHash [2]uint64

// A shard is an open-addressing table with linear probing, of 40-byte
// slots: a decision mostly reads and writes one slot in place, where a Go
// map read a group's control word and then the slot, and did it again to
// store (perf/NOTES.md). Entries are never removed, so probing needs
// no deleted marks.
type cacheShard struct {
	mu    sync.Mutex
	slots []cacheSlot // a power of two long, at most three quarters used
	used  int
	// published is slots as of its last growth, for prefetch, which
	// reads it without the lock.
	published atomic.Pointer[[]cacheSlot]
}

type cacheSlot struct {
	key        keyHash           // key[1] is never 0 but in an empty slot
	bound      [hlc.Len / 2]byte // no older than any version sent for the key since the entry was made
	knownEpoch uint32            // bound is also no older than redis's version when this is the cache's epoch

	noExpiryEpoch uint32 // the key has no expiry in redis, nor once what was sent runs, when this is the cache's epoch
	expirySends   uint32 // requests sent that may give the key an expiry: a reply from before the last of them teaches nothing of it
}

func newVersionCache(keys int, fastWrites bool) *versionCache {
	c := &versionCache{perShard: (keys + cacheShards - 1) / cacheShards, fastWrites: fastWrites}
	c.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	c.epoch.Store(1)
	return c
}

func (c *versionCache) hash(key []byte) keyHash {
	return keyHash{maphash.Bytes(c.seeds[0], key), maphash.Bytes(c.seeds[1], key) | 1}
}

func (c *versionCache) shard(h keyHash) *cacheShard {
	return &c.shards[h[0]&(cacheShards-1)]
}

// find returns h's slot, or the empty slot where it would go; nil when
// the table has no slots yet.
func (s *cacheShard) find(h keyHash) *cacheSlot {
	if len(s.slots) == 0 {
		return nil
	}
	mask := uint64(len(s.slots) - 1)
	for i := h[0] >> cacheShardBits & mask; ; i = (i + 1) & mask {
		if sl := &s.slots[i]; sl.key == h || sl.key[1] == 0 {
			return sl
		}
	}
}

// insert makes h's entry, growing the table first when it would be more
// than three quarters full; nil when the shard holds its share already.
func (s *cacheShard) insert(h keyHash, perShard int) *cacheSlot {
	if s.used >= perShard {
		return nil
	}
	if (s.used+1)*4 > len(s.slots)*3 {
		old := s.slots
		s.slots = make([]cacheSlot, max(2*len(old), 8))
		for _, sl := range old {
			if sl.key[1] != 0 {
				*s.find(sl.key) = sl
			}
		}
		published := s.slots
		s.published.Store(&published)
	}
	s.used++
	sl := s.find(h)
	sl.key = h
	return sl
}

// prefetch starts loading the slot where key's entry is or would go, for a
// write that will record a version for key shortly. With 100,000 keys the
// table is megabytes, beyond the CPU's caches once redis-server and the
// load have run on the same core, and the lookup in record stalled on that
// miss: about a tenth of the node's CPU at pipeline 10 (perf/NOTES.md).
// Started early, the miss overlaps the work before the lookup. A table that
// grows meanwhile makes the prefetch useless, not wrong.
func (c *versionCache) prefetch(key []byte) {
	if c == nil {
		return
	}
	h := c.hash(key)
	if slots := c.shard(h).published.Load(); slots != nil {
		t := *slots
		prefetch.Line(unsafe.Pointer(&t[h[0]>>cacheShardBits&uint64(len(t)-1)]))
	}
}

// A cacheTicket is the cache's answer for one request about to be queued.
type cacheTicket struct {
	cache       *versionCache // nil when the cache holds nothing for the key
	shard       *cacheShard   // locked until queued is called, when fast
	key         keyHash
	epoch       uint32
	expirySends uint32 // the slot's when the request was recorded
	fast        bool   // the write may go unconditionally, as MSET or MULTI
}

// expiryEffect is what a write does to its key's expiry, as far as the
// version cache needs to know.
type expiryEffect uint8

const (
	mayExpire    expiryEffect = iota // anything not below
	clearsExpiry                     // a plain SET: the key has none after it
	keepsExpiry                      // changes the value in place, and leaves the key existing with the expiry it had
)

// record notes that a request writing version to key is about to be queued
// and says whether it may skip the script: only a write newer than every
// version the key may hold, and then a plain SET (clearsExpiry), or a
// keepsExpiry write to a key known to have no expiry. When fast, the
// caller queues the request and then calls queued, which unlocks the
// shard. Versions are checked where they enter the node (peer.go); one
// that is not a version is never cached.
func (c *versionCache) record(key, version []byte, effect expiryEffect) cacheTicket {
	if c == nil {
		return cacheTicket{}
	}
	v, ok := hlc.Raw(version)
	if !ok {
		return cacheTicket{}
	}
	h := c.hash(key)
	sh := c.shard(h)
	epoch := c.epoch.Load()
	sh.mu.Lock()
	sl := sh.find(h)
	if sl == nil || sl.key[1] == 0 {
		sl = sh.insert(h, c.perShard)
		if sl == nil {
			sh.mu.Unlock()
			return cacheTicket{}
		}
		sl.bound = v
		sl.sent(effect)
		t := cacheTicket{cache: c, key: h, epoch: epoch, expirySends: sl.expirySends}
		sh.mu.Unlock()
		return t
	}
	newer := bytes.Compare(v[:], sl.bound[:]) > 0
	if newer {
		sl.bound = v
	}
	sl.sent(effect)
	t := cacheTicket{cache: c, key: h, epoch: epoch, expirySends: sl.expirySends}
	if c.fastWrites && newer && sl.knownEpoch == epoch && (effect == clearsExpiry || effect == keepsExpiry && sl.noExpiryEpoch == epoch) {
		if effect == clearsExpiry {
			sl.noExpiryEpoch = epoch // the MSET runs after everything sent before it, before anything sent after it
		}
		t.shard, t.fast = sh, true
		return t
	}
	sh.mu.Unlock()
	return t
}

// sent notes what a request about to be queued may do to the key's expiry.
func (sl *cacheSlot) sent(effect expiryEffect) {
	if effect == mayExpire {
		sl.noExpiryEpoch = 0
		sl.expirySends++
	}
}

// known returns the key's bound when it is also no older than the version
// redis-server holds (the entry's epoch is the cache's): an answer to a
// version query (ABD's first phase) that needs no request to redis.
func (c *versionCache) known(key []byte) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	h := c.hash(key)
	sh := c.shard(h)
	epoch := c.epoch.Load()
	sh.mu.Lock()
	sl := sh.find(h)
	if sl == nil || sl.key != h || sl.knownEpoch != epoch {
		sh.mu.Unlock()
		return nil, false
	}
	bound := sl.bound
	sh.mu.Unlock()
	out := make([]byte, hlc.Len)
	hex.Encode(out, bound[:])
	return out, true
}

// bound returns the key's bound, known or not: no older than any version
// sent for the key since the entry was made.
func (c *versionCache) bound(key []byte) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	h := c.hash(key)
	sh := c.shard(h)
	sh.mu.Lock()
	sl := sh.find(h)
	if sl == nil || sl.key != h {
		sh.mu.Unlock()
		return nil, false
	}
	bound := sl.bound
	sh.mu.Unlock()
	out := make([]byte, hlc.Len)
	hex.Encode(out, bound[:])
	return out, true
}

// queued ends a fast ticket's hold on its shard, once its request is queued.
func (t cacheTicket) queued() {
	if t.fast {
		t.shard.mu.Unlock()
	}
}

// learned records what redis answered to a write sent with this ticket:
// it held exactly version after it, and the bound, which covers every
// request sent since, is no older than what it holds now; noExpiry, that
// the key had no expiry then, which holds until a request that may give it
// one is sent. It runs on a reply, never while the node holds a shard (a
// request that cannot be queued fails without a reply).
func (t cacheTicket) learned(version []byte, noExpiry bool) {
	v, ok := hlc.Raw(version)
	if t.cache == nil || !ok {
		return
	}
	sh := t.cache.shard(t.key)
	sh.mu.Lock()
	// A reply from before a forget teaches an epoch already past: the
	// entry stays unknown.
	if sl := sh.find(t.key); sl != nil && sl.key == t.key {
		if t.epoch > sl.knownEpoch {
			if bytes.Compare(v[:], sl.bound[:]) > 0 {
				sl.bound = v
			}
			sl.knownEpoch = t.epoch
		}
		if noExpiry && t.epoch == sl.knownEpoch && t.expirySends == sl.expirySends {
			sl.noExpiryEpoch = t.epoch
		}
	}
	sh.mu.Unlock()
}

// forget makes every entry unknown: redis-server may have been replaced.
func (c *versionCache) forget() {
	if c != nil {
		c.epoch.Add(1)
	}
}
