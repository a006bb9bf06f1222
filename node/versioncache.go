package node

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/troop-lab/troop/ring"
)

// A versionCache lets most versioned writes skip the write script. The
// script is what makes a replica's writes order-independent (it reads the
// key's version and writes only when the new one is newer), but a Lua call
// costs redis-server about twice a plain MSET of the value and its version
// key (docs/performance.md). The node is its redis-server's only writer, so
// it can keep that comparison itself: per key, a version no older than the
// one redis holds. A plain SET newer than that bound can then go as
// `MSET key value versionkey version`.
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
// Order matters only for the unconditional MSETs: one is queued on the
// key's redis link while its shard is locked, so no later decision can
// reach redis before it, and everything else is a conditional script that
// may arrive in any order.
type versionCache struct {
	perShard int           // entries each shard may hold; 0 turns the cache off
	epoch    atomic.Uint64 // raised by forget
	shards   [cacheShards]cacheShard
}

const cacheShards = 64

type cacheShard struct {
	mu sync.Mutex
	m  map[string]*cachedVersion
}

type cachedVersion struct {
	bound      [versionLen]byte // no older than any version sent for the key since the entry was made
	knownEpoch uint64           // bound is also no older than redis's version when this is the cache's epoch
	learned    atomic.Pointer[learnedVersion]
}

// learnedVersion is what a reply taught: redis held exactly version when
// the request, sent in epoch, ran.
type learnedVersion struct {
	version [versionLen]byte
	epoch   uint64
}

func newVersionCache(keys int) *versionCache {
	c := &versionCache{perShard: (keys + cacheShards - 1) / cacheShards}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*cachedVersion)
	}
	c.epoch.Store(1)
	return c
}

// A cacheTicket is the cache's answer for one request about to be queued.
type cacheTicket struct {
	shard *cacheShard    // locked until queued is called, when fast
	entry *cachedVersion // nil when the cache holds nothing for the key
	epoch uint64
	Fast  bool // the write may go unconditionally, as MSET
}

// record notes that a request writing version to key is about to be queued
// and says whether it may skip the script: only a whole-value write
// (wholeValue: a plain SET) newer than every version the key may hold. When
// Fast, the caller queues the request and then calls queued, which unlocks
// the shard.
func (c *versionCache) record(key, version []byte, wholeValue bool) cacheTicket {
	if c == nil || c.perShard == 0 || len(version) != versionLen {
		return cacheTicket{}
	}
	sh := &c.shards[ring.Hash(key)%cacheShards]
	epoch := c.epoch.Load()
	sh.mu.Lock()
	e := sh.m[string(key)]
	if e == nil {
		if len(sh.m) >= c.perShard {
			sh.mu.Unlock()
			return cacheTicket{}
		}
		e = &cachedVersion{}
		copy(e.bound[:], version)
		sh.m[string(key)] = e
		sh.mu.Unlock()
		return cacheTicket{entry: e, epoch: epoch}
	}
	if l := e.learned.Swap(nil); l != nil && l.epoch == epoch {
		if bytes.Compare(l.version[:], e.bound[:]) > 0 {
			e.bound = l.version
		}
		e.knownEpoch = epoch
	}
	newer := bytes.Compare(version, e.bound[:]) > 0
	if newer {
		copy(e.bound[:], version)
	}
	if wholeValue && newer && e.knownEpoch == epoch {
		return cacheTicket{shard: sh, entry: e, epoch: epoch, Fast: true}
	}
	sh.mu.Unlock()
	return cacheTicket{entry: e, epoch: epoch}
}

// queued ends a fast ticket's hold on its shard, once its request is queued.
func (t cacheTicket) queued() {
	if t.Fast {
		t.shard.mu.Unlock()
	}
}

// applied records that redis ran a whole-value write of version sent with
// this ticket: redis held exactly that version then.
func (t cacheTicket) applied(version []byte) {
	if t.entry == nil {
		return
	}
	l := &learnedVersion{epoch: t.epoch}
	copy(l.version[:], version)
	t.entry.learned.Store(l)
}

// forget makes every entry unknown: redis-server may have been replaced.
func (c *versionCache) forget() {
	if c != nil {
		c.epoch.Add(1)
	}
}
