package node

import (
	"encoding/hex"
	"sync"
	"time"
)

// Every write carries a version from a hybrid logical clock: 48 bits of Unix
// milliseconds and 16 bits of logical counter, then 16 bits of node id to
// break ties between coordinators. A version is written as 20 hex digits,
// so comparing versions as strings (as the datastore scripts do) compares
// them as numbers.
const versionLen = 20

type clock struct {
	mu   sync.Mutex
	last uint64 // ms<<16 | counter
	node uint16
	now  func() time.Time
}

func newClock(node uint16, now func() time.Time) *clock {
	return &clock{node: node, now: now}
}

// next returns a version greater than every version this clock issued or
// observed.
func (c *clock) next() []byte {
	c.mu.Lock()
	t := uint64(c.now().UnixMilli()) << 16
	if t > c.last {
		c.last = t
	} else {
		c.last++
	}
	v := c.last
	c.mu.Unlock()
	return encodeVersion(v, c.node)
}

// observe moves the clock past a version seen from another node, so a write
// that follows a read of that version gets a greater one.
func (c *clock) observe(version []byte) {
	v, ok := decodeVersion(version)
	if !ok {
		return
	}
	c.mu.Lock()
	if v > c.last {
		c.last = v
	}
	c.mu.Unlock()
}

func encodeVersion(hlc uint64, node uint16) []byte {
	var raw [10]byte
	for i := 0; i < 8; i++ {
		raw[i] = byte(hlc >> (56 - 8*i))
	}
	raw[8], raw[9] = byte(node>>8), byte(node)
	out := make([]byte, versionLen)
	hex.Encode(out, raw[:])
	return out
}

func decodeVersion(v []byte) (uint64, bool) {
	raw, ok := versionBytes(v)
	var hlc uint64
	for i := 0; i < 8; i++ {
		hlc = hlc<<8 | uint64(raw[i])
	}
	return hlc, ok
}

// versionBytes decodes a version's 20 lowercase hex digits. Upper case is
// refused: redis-server compares versions as strings, which order as the
// numbers do only when all digits share one case.
func versionBytes(v []byte) (raw [versionLen / 2]byte, ok bool) {
	if len(v) != versionLen {
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
