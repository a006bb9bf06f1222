package health

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// downAfter feeds n heartbeats at the given period (with jitter drawn from
// rng, as a fraction of the period) and returns how long after the last one
// the detector suspects the peer.
func downAfter(cfg detectorConfig, n int, period time.Duration, jitter float64, rng *rand.Rand) time.Duration {
	now := t0
	d := newPhiDetector(cfg, now)
	for i := 0; i < n; i++ {
		step := period
		if jitter > 0 {
			step += time.Duration((rng.Float64()*2 - 1) * jitter * float64(period))
		}
		now = now.Add(step)
		d.heartbeat(now)
	}
	last := now
	for !d.suspect(now) {
		now = now.Add(time.Millisecond)
		if now.Sub(last) > time.Minute {
			return time.Minute
		}
	}
	return now.Sub(last)
}

// The default tuning suspects a silent peer well within the 3 s target,
// and not before a few missed heartbeats, for steady and jittery peers.
func TestDetectorDefaultTuning(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tt := range []struct {
		name           string
		period         time.Duration
		jitter         float64
		beats          int
		least, longest time.Duration
	}{
		{"steady", 250 * time.Millisecond, 0, 50, 750 * time.Millisecond, 2 * time.Second},
		{"jitter 25%", 250 * time.Millisecond, 0.25, 200, 750 * time.Millisecond, 2500 * time.Millisecond},
		{"jitter 50%", 250 * time.Millisecond, 0.5, 200, 750 * time.Millisecond, 3 * time.Second},
		{"no heartbeat ever", 250 * time.Millisecond, 0, 0, 750 * time.Millisecond, 2 * time.Second},
	} {
		cfg := defaultDetectorConfig(250*time.Millisecond, 8)
		got := downAfter(cfg, tt.beats, tt.period, tt.jitter, rng)
		if got < tt.least || got > tt.longest {
			t.Errorf("%s: suspected after %v, want %v to %v", tt.name, got, tt.least, tt.longest)
		}
	}
}

// Properties: phi grows with silence, is never negative, never NaN or
// infinite (it is shown in /info as JSON), and a heartbeat clears
// suspicion.
func TestDetectorProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 200; trial++ {
		period := time.Duration(10+rng.IntN(1000)) * time.Millisecond
		cfg := defaultDetectorConfig(period, 1+rng.Float64()*15)
		now := t0
		d := newPhiDetector(cfg, now)
		for i := rng.IntN(300); i > 0; i-- {
			now = now.Add(time.Duration(rng.Float64() * 3 * float64(period)))
			d.heartbeat(now)
		}
		prev := -1.0
		for step := 0; step < 400; step++ {
			at := now.Add(time.Duration(step) * period / 4)
			p := d.phi(at)
			if math.IsNaN(p) || math.IsInf(p, 0) || p < 0 {
				t.Fatalf("trial %d: phi = %v at %v", trial, p, at.Sub(now))
			}
			if p < prev-1e-9 {
				t.Fatalf("trial %d: phi fell from %v to %v with more silence", trial, prev, p)
			}
			prev = p
		}
		later := now.Add(100 * period)
		if !d.suspect(later) {
			t.Fatalf("trial %d: not suspected after 100 periods of silence (phi %v)", trial, d.phi(later))
		}
		d.heartbeat(later)
		if d.suspect(later.Add(period / 2)) {
			t.Fatalf("trial %d: still suspected right after a heartbeat", trial)
		}
	}
}

// A long outage does not enter the history: after the peer returns, the
// next failure is noticed as fast as the first.
func TestDetectorIgnoresOutageGap(t *testing.T) {
	cfg := defaultDetectorConfig(250*time.Millisecond, 8)
	now := t0
	d := newPhiDetector(cfg, now)
	beat := func(n int) {
		for i := 0; i < n; i++ {
			now = now.Add(250 * time.Millisecond)
			d.heartbeat(now)
		}
	}
	beat(40)
	first := suspectedAfter(d, now)
	now = now.Add(30 * time.Second) // down for 30 s, then back
	d.heartbeat(now)
	beat(40)
	if again := suspectedAfter(d, now); again != first {
		t.Fatalf("suspected after %v before the outage, %v after it", first, again)
	}
	// A clock that steps back does not move the last heartbeat back.
	d.heartbeat(now.Add(-time.Hour))
	if !d.lastHeartbeat().Equal(now) {
		t.Fatalf("last heartbeat moved to %v", d.lastHeartbeat())
	}
}

func suspectedAfter(d *phiDetector, from time.Time) time.Duration {
	at := from
	for !d.suspect(at) {
		at = at.Add(time.Millisecond)
	}
	return at.Sub(from)
}

// Table values of phiOf against the normal distribution's tail.
func TestPhiOf(t *testing.T) {
	for _, tt := range []struct {
		elapsed, mean, std float64
		lo, hi             float64
	}{
		{100, 100, 10, 0.29, 0.31},        // at the mean: P = 0.5, phi = 0.301
		{120, 100, 10, 1.63, 1.68},        // 2 std: P = 0.0228, phi = 1.64
		{130, 100, 10, 2.85, 2.92},        // 3 std: P = 0.00135, phi = 2.87
		{50, 100, 10, 0, 0.0001},          // well before the mean
		{1e6, 100, 10, 1e10, math.Inf(1)}, // far tail: huge but finite
	} {
		got := phiOf(tt.elapsed, tt.mean, tt.std)
		if got < tt.lo || got > tt.hi || math.IsInf(got, 0) {
			t.Errorf("phiOf(%v, %v, %v) = %v, want %v to %v", tt.elapsed, tt.mean, tt.std, got, tt.lo, tt.hi)
		}
	}
}

// A pause of this node is taken off its peer's silence: a peer that
// answered throughout is not suspected when the node runs again, a peer
// that really went silent still is, later by the pause, and the last
// heartbeat never moves past now.
func TestDetectorExcusesLocalPause(t *testing.T) {
	cfg := defaultDetectorConfig(250*time.Millisecond, 8)
	steady := func() (*phiDetector, time.Time) {
		now := t0
		d := newPhiDetector(cfg, now)
		for i := 0; i < 40; i++ {
			now = now.Add(250 * time.Millisecond)
			d.heartbeat(now)
		}
		return d, now
	}

	d, last := steady()
	resumed := last.Add(100*time.Millisecond + 3*time.Second) // stood still 3 s
	if !d.suspect(resumed) {
		t.Fatalf("without the excuse a 3 s pause should look like a dead peer (phi %v)", d.phi(resumed))
	}
	d.excuse(3*time.Second, resumed)
	if d.suspect(resumed) {
		t.Fatalf("suspected right after an excused 3 s pause (phi %v)", d.phi(resumed))
	}

	// A dead peer is still found: later by the pause, no more.
	d, last = steady()
	first := suspectedAfter(d, last)
	d.excuse(3*time.Second, last.Add(4*time.Second))
	if got := suspectedAfter(d, last); got != first+3*time.Second {
		t.Fatalf("suspected %v after the last heartbeat with a 3 s pause excused, want %v", got, first+3*time.Second)
	}

	// An excuse longer than the silence so far stops at now.
	d, last = steady()
	d.excuse(time.Hour, last.Add(time.Second))
	if !d.lastHeartbeat().Equal(last.Add(time.Second)) {
		t.Fatalf("last heartbeat moved to %v, past now", d.lastHeartbeat().Sub(last))
	}
	d.excuse(-time.Second, last.Add(2*time.Second))
	if !d.lastHeartbeat().Equal(last.Add(time.Second)) {
		t.Fatalf("a negative excuse moved the last heartbeat to %v", d.lastHeartbeat().Sub(last))
	}
}

func TestLocalPause(t *testing.T) {
	const period = 250 * time.Millisecond
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tt := range []struct {
		name  string
		ticks []time.Time
		want  []time.Duration // pause reported at each tick
	}{
		{"first tick", []time.Time{ms(0)}, []time.Duration{0}},
		{"on time", []time.Time{ms(0), ms(250), ms(500)}, []time.Duration{0, 0, 0}},
		{"jitter within a period", []time.Time{ms(0), ms(490), ms(700)}, []time.Duration{0, 0, 0}},
		{"a period late", []time.Time{ms(0), ms(500)}, []time.Duration{0, 0}},
		{"stood still 3 s", []time.Time{ms(0), ms(250), ms(3500), ms(3750)}, []time.Duration{0, 0, 3000 * time.Millisecond, 0}},
		{"starved at every tick", []time.Time{ms(0), ms(600), ms(1200)}, []time.Duration{0, 350 * time.Millisecond, 350 * time.Millisecond}},
		{"clock stepped back", []time.Time{ms(1000), ms(0), ms(1250)}, []time.Duration{0, 0, 0}},
	} {
		l := NewLocalPause(period)
		for i, at := range tt.ticks {
			if got := l.Tick(at); got != tt.want[i] {
				t.Errorf("%s: tick %d at %v: pause %v, want %v", tt.name, i, at.Sub(t0), got, tt.want[i])
			}
		}
	}
}
