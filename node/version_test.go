package node

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
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

// A skew set at run time moves the versions the clock issues by its
// offset, and by its drift as time passes; they never go back.
func TestClockSkew(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	c := newClock(7, func() time.Time { return now })
	ms := func(v []byte) int64 {
		t.Helper()
		hlc, ok := decodeVersion(v)
		if !ok {
			t.Fatalf("bad version %s", v)
		}
		return int64(hlc >> 16)
	}
	base := now.UnixMilli()
	if got := ms(c.next()); got != base {
		t.Fatalf("true clock: %d, want %d", got, base)
	}
	c.setSkew(2*time.Second, 0)
	if got := ms(c.next()); got != base+2000 {
		t.Errorf("offset +2s: version at %d ms, want %d", got, base+2000)
	}
	if s, off := c.skewNow(); s.Offset != 2*time.Second || off != 2*time.Second {
		t.Errorf("skewNow: %+v, %v", s, off)
	}
	c.setSkew(2*time.Second, 0.5) // drift counts from now
	now = now.Add(time.Second)
	if got := ms(c.next()); got != base+1000+2000+500 {
		t.Errorf("offset +2s, rate 0.5, 1s later: version at %d ms, want %d", got, base+3500)
	}
	last := c.next()
	c.setSkew(-5*time.Second, 0)
	if v := c.next(); bytes.Compare(last, v) >= 0 || ms(v) != ms(last) {
		t.Errorf("after a skew back: %s, want just above %s (the counter moves, not the time)", v, last)
	}
	if _, off := c.skewNow(); off != -5*time.Second {
		t.Errorf("skewNow after -5s: %v", off)
	}
	c.setSkew(0, 0)
	if s, off := c.skewNow(); s.Offset != 0 || s.Rate != 0 || off != 0 {
		t.Errorf("cleared: %+v, %v", s, off)
	}
}

func TestClockSkewAPI(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1})
	admin := "http://" + tc.nodes[0].cfg.StatsListen
	post := func(query string) (int, string) {
		t.Helper()
		res, err := http.Post(admin+"/clock/skew"+query, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	info := func() ClockInfo {
		t.Helper()
		res, err := http.Get(admin + "/info")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var i Info
		if err := json.NewDecoder(res.Body).Decode(&i); err != nil {
			t.Fatal(err)
		}
		return i.Clock
	}
	if ci := info(); ci != (ClockInfo{}) {
		t.Errorf("/info clock of a true clock: %+v", ci)
	}
	if code, body := post("?offset=2s&rate=0.001"); code != 200 || !strings.Contains(body, `"offset_ms": 2000`) {
		t.Errorf("set: %d %s", code, body)
	}
	if ci := info(); ci.OffsetMS != 2000 || ci.Rate != 0.001 || ci.SkewMS < 2000 || ci.SkewMS > 2100 || ci.Since == "" {
		t.Errorf("/info clock after the set: %+v", ci)
	}
	for _, bad := range []string{"", "?offset=2", "?offset=25h", "?rate=-1", "?rate=x", "?offset=1s&speed=2"} {
		if code, body := post(bad); code != 400 {
			t.Errorf("POST /clock/skew%s: %d %s, want 400", bad, code, body)
		}
	}
	res, err := http.Get(admin + "/clock/skew?offset=1s")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /clock/skew: %d, want 405", res.StatusCode)
	}
	if ci := info(); ci.OffsetMS != 2000 {
		t.Errorf("a refused request changed the skew: %+v", ci)
	}
	if code, _ := post("?offset=0&rate=0"); code != 200 || info() != (ClockInfo{}) {
		t.Errorf("clear: %d, %+v", code, info())
	}
}

// A stamp is above the floor and every version the clock issued, and
// refused once the clock reads past the deadline.
func TestClockStampBefore(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	c := newClock(3, func() time.Time { return now })
	issued := c.next()
	floor := newClock(9, func() time.Time { return now.Add(time.Minute) }).next()
	v, ok := c.stampBefore(now.UnixMilli(), floor)
	if !ok || bytes.Compare(v[:16], floor[:16]) <= 0 || bytes.Compare(v, issued) <= 0 {
		t.Fatalf("stamp %s (%v): want one above floor %s and issued %s", v, ok, floor, issued)
	}
	if w, ok := c.stampBefore(now.UnixMilli(), nil); !ok || bytes.Compare(w, v) <= 0 {
		t.Fatalf("stamp with no floor %s (%v): want one above %s", w, ok, v)
	}
	if _, ok := c.stampBefore(now.UnixMilli()-1, nil); ok {
		t.Fatal("stamped past the deadline")
	}
	c.setSkew(time.Second, 0) // a clock ahead reads past a deadline its coordinator has not reached
	if _, ok := c.stampBefore(now.UnixMilli()+500, nil); ok {
		t.Fatal("a clock a second ahead stamped before a deadline half a second away")
	}
}
