package bench

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The model of acknowledged writes decides whether a read's answer is one the
// store may give. It is linearizability checked one operation at a time:
//
//   - every write has a start and an end on one logical clock;
//   - a write w supersedes an earlier write v once w is acknowledged and w
//     started after v ended: from then on v may no longer be read;
//   - a read that began at b and ended at e may return any write that started
//     before e and was not yet superseded at b: the latest acknowledged one, one
//     in flight when the read began, or one that started while it ran;
//   - with Staleness k (for DC_ONE, whose reads may come from a replica the
//     write has not reached), a write superseded by at most k later
//     acknowledged writes is still accepted;
//   - a write that failed (error reply, timeout) may or may not have happened:
//     it stays possible and supersedes nothing;
//   - a key this run has not yet written may hold anything intact from before.
//
// A delete is a write of "no value": a missing key is correct exactly when a
// delete (or the unknown state before the run) is a possible answer.

// inFlight marks a write not yet ended.
const inFlight = math.MaxUint64

type write struct {
	version     uint64
	del         bool
	initial     bool   // the state before this run: any intact value or none
	start, end  uint64 // logical ticks; end == inFlight until acknowledged
	ok          bool   // acknowledged; false after end means the outcome is unknown
	superseded  uint64 // tick at which a later write superseded it; 0 if not
	supersedeBy int    // how many acknowledged writes have superseded it
}

// history is one key's recent writes, oldest first. It is pure: the clock
// ticks come in as arguments.
type history struct{ writes []write }

func newHistory() *history {
	return &history{writes: []write{{initial: true, ok: true}}}
}

func (h *history) begin(version uint64, del bool, now uint64) {
	h.writes = append(h.writes, write{version: version, del: del, start: now, end: inFlight})
}

// end records the outcome of a write; an acknowledged write supersedes every
// write that ended before it started. Writes superseded at or before horizon
// (no read still running began earlier) and older than the staleness window
// are dropped.
func (h *history) end(version uint64, ok bool, now, horizon uint64, staleness int) {
	i := h.find(version)
	if i < 0 {
		return
	}
	w := &h.writes[i]
	w.end, w.ok = now, ok
	if !ok {
		return
	}
	start := w.start
	for j := range h.writes {
		v := &h.writes[j]
		if j == i || v.end == inFlight || v.end >= start || (!v.ok && !v.initial) {
			continue // in flight, concurrent with w, or of unknown outcome
		}
		v.supersedeBy++
		if v.superseded == 0 {
			v.superseded = now
		}
	}
	h.prune(horizon, staleness)
}

func (h *history) prune(horizon uint64, staleness int) {
	kept := h.writes[:0]
	for _, v := range h.writes {
		if v.superseded != 0 && v.superseded <= horizon && v.supersedeBy > staleness {
			continue
		}
		kept = append(kept, v)
	}
	clear(h.writes[len(kept):])
	h.writes = kept
}

func (h *history) find(version uint64) int {
	for i := len(h.writes) - 1; i >= 0; i-- {
		if !h.writes[i].initial && h.writes[i].version == version {
			return i
		}
	}
	return -1
}

// Answer is what a read (or a DEL's count) said about a key.
type Answer struct {
	Missing bool   // no value: nil reply, or DEL removed nothing
	Exists  bool   // some value, version unknown (DEL removed one)
	Version uint64 // an intact value's version, when neither flag is set
}

// possible reports whether a read that began at b and ended at e may return
// ans, and if not, why.
// self is the version of the operation's own write (a DEL reports whether
// it removed something), which must not count as its own evidence; 0 if none.
func (h *history) possible(ans Answer, b, e uint64, staleness int, self uint64) (bool, string) {
	for _, v := range h.writes {
		if v.start >= e || (self != 0 && !v.initial && v.version == self) {
			continue // began after the read ended
		}
		if v.superseded != 0 && v.superseded < b && v.supersedeBy > staleness {
			continue // overwritten before the read began
		}
		switch {
		case v.initial:
			return true, ""
		case ans.Missing && v.del, ans.Exists && !v.del,
			!ans.Missing && !ans.Exists && !v.del && v.version == ans.Version:
			return true, ""
		}
	}
	switch {
	case ans.Missing:
		return false, "missing, but the latest acknowledged write is a value"
	case ans.Exists:
		return false, "present, but the latest acknowledged write deleted it"
	}
	return false, fmt.Sprintf("version %d is neither the latest acknowledged write nor one in flight", ans.Version)
}

// Model is the concurrent model of a run: per-key histories in shards, one
// logical clock. Workers call BeginWrite/EndWrite around every write and
// BeginRead/Check around every read.
type Model struct {
	Staleness int // older acknowledged writes accepted (DC_ONE); 0 = linearizable

	clock   atomic.Uint64
	horizon atomic.Uint64
	version atomic.Uint64 // the last write version handed out
	shards  [64]modelShard
}

type modelShard struct {
	mu   sync.Mutex
	keys map[uint64]*history
	// written is set before the shard's first history is made: until then a
	// read can be checked without the lock.
	written atomic.Bool
}

func NewModel(staleness int) *Model {
	m := &Model{Staleness: staleness}
	m.clock.Store(1) // tick 0 is the state before the run
	// Versions start at the wall clock in microseconds, so that two runs
	// against one store (each with its own model) never write the same
	// version of a key: a value left by an earlier run is then "not
	// written by this run" rather than mistaken for one of its writes.
	m.version.Store(uint64(time.Now().UnixMicro()))
	for i := range m.shards {
		m.shards[i].keys = make(map[uint64]*history)
	}
	return m
}

// NextVersion returns a write version no earlier write of this model had.
func (m *Model) NextVersion() uint64 { return m.version.Add(1) }

// Now advances the clock and returns the new tick.
func (m *Model) Now() uint64 { return m.clock.Add(1) }

// SetHorizon says that no read still running began before tick: history older
// than that may be forgotten.
func (m *Model) SetHorizon(tick uint64) { m.horizon.Store(tick) }

func (m *Model) shard(key uint64) *modelShard { return &m.shards[fnv64(key)%64] }

// BeginWrite records the start of a write (or a delete) of key.
func (m *Model) BeginWrite(key, version uint64, del bool) {
	s := m.shard(key)
	s.mu.Lock()
	h := s.keys[key]
	if h == nil {
		s.written.Store(true)
		h = newHistory()
		s.keys[key] = h
	}
	h.begin(version, del, m.Now())
	s.mu.Unlock()
}

// EndWrite records a write's outcome: ok when acknowledged, false when it
// failed in a way that leaves its effect unknown.
func (m *Model) EndWrite(key, version uint64, ok bool) {
	s := m.shard(key)
	s.mu.Lock()
	if h := s.keys[key]; h != nil {
		h.end(version, ok, m.Now(), m.horizon.Load(), m.Staleness)
	}
	s.mu.Unlock()
}

// BeginRead returns the tick a read starts at.
func (m *Model) BeginRead() uint64 { return m.Now() }

// Check decides whether ans is a correct answer for a read of key begun at
// tick begin and ending now. self is the operation's own write version, for
// a DEL (whose reply says whether the key existed); 0 for a read.
func (m *Model) Check(key uint64, begin uint64, ans Answer, self uint64) (bool, string) {
	return m.check(key, begin, ans, self, m.Staleness)
}

// CheckEnded is Check for a read that ended at tick end, taken after its
// reply came: a batch of reads can share one.
func (m *Model) CheckEnded(key uint64, begin, end uint64, ans Answer, self uint64) (bool, string) {
	return m.checkAt(key, begin, end, ans, self, m.Staleness)
}

func (m *Model) check(key uint64, begin uint64, ans Answer, self uint64, staleness int) (bool, string) {
	return m.checkAt(key, begin, m.Now(), ans, self, staleness)
}

func (m *Model) checkAt(key uint64, begin, e uint64, ans Answer, self uint64, staleness int) (bool, string) {
	s := m.shard(key)
	if !s.written.Load() {
		// No write of this shard had begun when the read ended (a write
		// marks the shard before it takes its tick): nothing to hold it to.
		return true, ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.keys[key]
	if h == nil {
		return true, "" // never written by this run: only integrity is checked
	}
	return h.possible(ans, begin, e, staleness, self)
}

// Written returns the keys this run wrote or deleted, in ascending order.
func (m *Model) Written() []uint64 {
	var keys []uint64
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for k := range s.keys {
			keys = append(keys, k)
		}
		s.mu.Unlock()
	}
	slices.Sort(keys)
	return keys
}
