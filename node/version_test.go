package node

import (
	"bytes"
	"testing"
	"time"
)

func TestClockMonotonicAndOrdered(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	c := newClock(7, func() time.Time { return now })
	a := c.next()
	b := c.next() // same millisecond: the counter moves
	if bytes.Compare(a, b) >= 0 {
		t.Fatalf("%s !< %s", a, b)
	}
	now = now.Add(-time.Second) // the wall clock steps back; versions do not
	if d := c.next(); bytes.Compare(b, d) >= 0 {
		t.Fatalf("after a clock step back: %s !< %s", b, d)
	}
	// Observing a version from the future moves the clock past it.
	other := newClock(9, func() time.Time { return now.Add(time.Hour) })
	future := other.next()
	c.observe(future)
	if e := c.next(); bytes.Compare(future[:16], e[:16]) >= 0 {
		t.Fatalf("after observe: %s !> %s", e, future)
	}
	if len(a) != versionLen {
		t.Fatalf("version %q has %d digits", a, len(a))
	}
	if v, ok := decodeVersion(a); !ok || v != uint64(1_700_000_000_000)<<16 {
		t.Fatalf("decode %s = %d, %v", a, v, ok)
	}
	for _, bad := range []string{"nope", "0000018BCFE568000000", "0000018bcfe56800000g"} {
		if _, ok := decodeVersion([]byte(bad)); ok {
			t.Fatalf("decoded %q: versions are 20 lowercase hex digits", bad)
		}
	}
}
