// Package hlc is the hybrid logical clock every write's version comes
// from, and the versions' text form, which compares as the versions do.
// It is pure: the clock reads the time through the function it is given.
package hlc

import (
	"encoding/hex"
	"sync"
	"time"
)

// Every write carries a version from a hybrid logical clock: 48 bits of Unix
// milliseconds and 16 bits of logical counter, then 16 bits of node id to
// break ties between coordinators. A version is written as 20 hex digits,
// so comparing versions as strings (as the datastore scripts do) compares
// them as numbers. Len is how many digits.
const Len = 20

// Clock issues a node's versions: each greater than every version it
// issued or observed, whatever its time source does.
type Clock struct {
	mu   sync.Mutex
	last uint64 // ms<<16 | counter
	node uint16
	now  func() time.Time
	skew Skew
}

// Skew is a fault in the node's clock, set at run time through the admin
// API (troop chaos clock-skew): the clock reads Offset ahead (behind when
// negative) and drifts Rate seconds per second from Since on, as a clock
// that jumped or runs fast would. The zero Skew is a true clock.
type Skew struct {
	Offset time.Duration
	Rate   float64
	Since  time.Time
}

// MaxSkewOffset and MaxSkewRate bound what the admin API accepts: a
// clock a day off, or twice as fast, is already far past any NTP fault.
const (
	MaxSkewOffset = 24 * time.Hour
	MaxSkewRate   = 1.0
)

// at is the skewed reading of the true time t.
func (s Skew) at(t time.Time) time.Time {
	if s.Rate == 0 {
		return t.Add(s.Offset)
	}
	return t.Add(s.Offset + time.Duration(s.Rate*float64(t.Sub(s.Since))))
}

// NewClock makes the clock of the node whose id is node, reading the time
// from now.
func NewClock(node uint16, now func() time.Time) *Clock {
	return &Clock{node: node, now: now}
}

// Node is the id of the node the clock issues versions for: the last 16
// bits of each, which break ties between coordinators.
func (c *Clock) Node() uint16 { return c.node }

// SetSkew replaces the clock's skew (offset 0 and rate 0 clear it); the
// drift counts from now. Versions never go back: after a negative skew
// the clock's counter moves until the skewed time passes the last
// version, as after any clock step back.
func (c *Clock) SetSkew(offset time.Duration, rate float64) Skew {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skew = Skew{Offset: offset, Rate: rate, Since: c.now()}
	return c.skew
}

// SkewNow returns the skew and how far it puts the clock off now.
func (c *Clock) SkewNow() (Skew, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now()
	return c.skew, c.skew.at(t).Sub(t)
}

// Next returns a version greater than every version this clock issued or
// observed.
func (c *Clock) Next() []byte {
	c.mu.Lock()
	v := c.tickLocked(c.skew.at(c.now()).UnixMilli())
	c.mu.Unlock()
	return Encode(v, c.node)
}

// tickLocked moves the clock to the reading ms (Unix milliseconds), or one
// past its last version when that is ahead, and returns it.
func (c *Clock) tickLocked(ms int64) uint64 {
	if t := uint64(ms) << 16; t > c.last {
		c.last = t
	} else {
		c.last++
	}
	return c.last
}

// Millis is the clock's reading in Unix milliseconds, skew included: the
// time a stamped write's deadline is written in.
func (c *Clock) Millis() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.skew.at(c.now()).UnixMilli()
}

// StampBefore returns a version greater than floor and than every version
// this clock issued or observed, unless the clock reads past deadline (Unix
// ms): a write stamped later could outrank writes acknowledged after its
// coordinator gave up on it.
func (c *Clock) StampBefore(deadline int64, floor []byte) ([]byte, bool) {
	f, _ := Decode(floor) // none: 0
	c.mu.Lock()
	defer c.mu.Unlock()
	ms := c.skew.at(c.now()).UnixMilli()
	if ms > deadline {
		return nil, false
	}
	c.last = max(c.last, f)
	return Encode(c.tickLocked(ms), c.node), true
}

// Counter is the clock's reading as a version's counter, or its last
// version's when that is ahead, without issuing a version: the ballots of
// this node's proposers start above it (the node's consensus).
func (c *Clock) Counter() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.last, uint64(c.skew.at(c.now()).UnixMilli())<<16)
}

// Observe moves the clock past a version seen from another node, so a write
// that follows a read of that version gets a greater one.
func (c *Clock) Observe(version []byte) {
	v, ok := Decode(version)
	if !ok {
		return
	}
	c.mu.Lock()
	if v > c.last {
		c.last = v
	}
	c.mu.Unlock()
}

// Encode writes the version of clock reading hlc (ms<<16 | counter) on
// node as its 20 hex digits.
func Encode(hlc uint64, node uint16) []byte {
	var raw [10]byte
	for i := 0; i < 8; i++ {
		raw[i] = byte(hlc >> (56 - 8*i))
	}
	raw[8], raw[9] = byte(node>>8), byte(node)
	out := make([]byte, Len)
	hex.Encode(out, raw[:])
	return out
}

// Decode reads a version's clock reading (ms<<16 | counter), and says
// whether v is a version.
func Decode(v []byte) (uint64, bool) {
	raw, ok := Raw(v)
	var hlc uint64
	for i := 0; i < 8; i++ {
		hlc = hlc<<8 | uint64(raw[i])
	}
	return hlc, ok
}

// Raw decodes a version's 20 lowercase hex digits. Upper case is
// refused: redis-server compares versions as strings, which order as the
// numbers do only when all digits share one case.
func Raw(v []byte) (raw [Len / 2]byte, ok bool) {
	if len(v) != Len {
		return raw, false
	}
	for i := range raw {
		hi, ok1 := hexDigit(v[2*i])
		lo, ok2 := hexDigit(v[2*i+1])
		if !ok1 || !ok2 {
			return raw, false
		}
		raw[i] = hi<<4 | lo
	}
	return raw, true
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
