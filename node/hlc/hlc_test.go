package hlc

import (
	"bytes"
	"testing"
	"time"
)

func TestClockMonotonicAndOrdered(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	c := NewClock(7, func() time.Time { return now })
	a := c.Next()
	b := c.Next() // same millisecond: the counter moves
	if bytes.Compare(a, b) >= 0 {
		t.Fatalf("%s !< %s", a, b)
	}
	now = now.Add(-time.Second) // the wall clock steps back; versions do not
	if d := c.Next(); bytes.Compare(b, d) >= 0 {
		t.Fatalf("after a clock step back: %s !< %s", b, d)
	}
	// Observing a version from the future moves the clock past it.
	other := NewClock(9, func() time.Time { return now.Add(time.Hour) })
	future := other.Next()
	c.Observe(future)
	if e := c.Next(); bytes.Compare(future[:16], e[:16]) >= 0 {
		t.Fatalf("after observe: %s !> %s", e, future)
	}
	if len(a) != Len {
		t.Fatalf("version %q has %d digits", a, len(a))
	}
	if v, ok := Decode(a); !ok || v != uint64(1_700_000_000_000)<<16 {
		t.Fatalf("decode %s = %d, %v", a, v, ok)
	}
	for _, bad := range []string{"nope", "0000018BCFE568000000", "0000018bcfe56800000g"} {
		if _, ok := Decode([]byte(bad)); ok {
			t.Fatalf("decoded %q: versions are 20 lowercase hex digits", bad)
		}
	}
}

// A skew set at run time moves the versions the clock issues by its
// offset, and by its drift as time passes; they never go back.
func TestClockSkew(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	c := NewClock(7, func() time.Time { return now })
	ms := func(v []byte) int64 {
		t.Helper()
		hlc, ok := Decode(v)
		if !ok {
			t.Fatalf("bad version %s", v)
		}
		return int64(hlc >> 16)
	}
	base := now.UnixMilli()
	if got := ms(c.Next()); got != base {
		t.Fatalf("true clock: %d, want %d", got, base)
	}
	c.SetSkew(2*time.Second, 0)
	if got := ms(c.Next()); got != base+2000 {
		t.Errorf("offset +2s: version at %d ms, want %d", got, base+2000)
	}
	if s, off := c.SkewNow(); s.Offset != 2*time.Second || off != 2*time.Second {
		t.Errorf("skewNow: %+v, %v", s, off)
	}
	c.SetSkew(2*time.Second, 0.5) // drift counts from now
	now = now.Add(time.Second)
	if got := ms(c.Next()); got != base+1000+2000+500 {
		t.Errorf("offset +2s, rate 0.5, 1s later: version at %d ms, want %d", got, base+3500)
	}
	last := c.Next()
	c.SetSkew(-5*time.Second, 0)
	if v := c.Next(); bytes.Compare(last, v) >= 0 || ms(v) != ms(last) {
		t.Errorf("after a skew back: %s, want just above %s (the counter moves, not the time)", v, last)
	}
	if _, off := c.SkewNow(); off != -5*time.Second {
		t.Errorf("skewNow after -5s: %v", off)
	}
	c.SetSkew(0, 0)
	if s, off := c.SkewNow(); s.Offset != 0 || s.Rate != 0 || off != 0 {
		t.Errorf("cleared: %+v, %v", s, off)
	}
}

// A stamp is above the floor and every version the clock issued, and
// refused once the clock reads past the deadline.
func TestClockStampBefore(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	c := NewClock(3, func() time.Time { return now })
	issued := c.Next()
	floor := NewClock(9, func() time.Time { return now.Add(time.Minute) }).Next()
	v, ok := c.StampBefore(now.UnixMilli(), floor)
	if !ok || bytes.Compare(v[:16], floor[:16]) <= 0 || bytes.Compare(v, issued) <= 0 {
		t.Fatalf("stamp %s (%v): want one above floor %s and issued %s", v, ok, floor, issued)
	}
	if w, ok := c.StampBefore(now.UnixMilli(), nil); !ok || bytes.Compare(w, v) <= 0 {
		t.Fatalf("stamp with no floor %s (%v): want one above %s", w, ok, v)
	}
	if _, ok := c.StampBefore(now.UnixMilli()-1, nil); ok {
		t.Fatal("stamped past the deadline")
	}
	c.SetSkew(time.Second, 0) // a clock ahead reads past a deadline its coordinator has not reached
	if _, ok := c.StampBefore(now.UnixMilli()+500, nil); ok {
		t.Fatal("a clock a second ahead stamped before a deadline half a second away")
	}
}
