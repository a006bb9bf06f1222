package health

import (
	"math"
	"time"
)

// phiDetector is a phi-accrual failure detector (Hayashibara et al., 2004,
// in the form Akka and Cassandra use) for one peer. It keeps the intervals
// between the peer's recent heartbeats and turns the time since the last
// one into phi, the suspicion level: phi = -log10(P(a heartbeat arrives
// later than now)), with inter-arrival times taken as normally distributed.
// phi 8 means a one in 10^8 chance that a live peer would be this late.
//
// It is a pure value: time is passed in, nothing here reads a clock or
// does I/O. The caller serialises access.
type phiDetector struct {
	cfg       detectorConfig
	intervals []float64 // ms, a ring of the last cap(intervals) samples
	next      int       // where the next sample goes once the ring is full
	last      time.Time // the last heartbeat
}

// detectorConfig tunes a phiDetector.
type detectorConfig struct {
	Interval  time.Duration // the heartbeat period; seeds the history
	Threshold float64       // phi at or above which the peer is down
	// MinStdDev keeps phi from shooting up on a history of perfectly
	// regular heartbeats, where one late beat would look impossible.
	MinStdDev time.Duration
	// Pause is added to the expected interval: a pause the detector
	// tolerates before suspicion starts to grow (a GC, a loaded machine).
	Pause time.Duration
	// MaxSample drops intervals longer than this from the history: the gap
	// of a peer that was down says nothing about its heartbeat rhythm, and
	// would make the detector slow to notice the next failure.
	MaxSample time.Duration
	Window    int // samples kept
}

// defaultDetectorConfig derives the detector's tuning from the heartbeat
// period: with a period of 250 ms a silent peer reaches phi 8 after about
// 1.3 s on a steady history, and about 2 s when heartbeats jitter by a
// quarter of a period.
func defaultDetectorConfig(interval time.Duration, threshold float64) detectorConfig {
	return detectorConfig{
		Interval:  interval,
		Threshold: threshold,
		MinStdDev: interval / 2,
		Pause:     2 * interval,
		MaxSample: 4 * interval,
		Window:    100,
	}
}

// newPhiDetector starts a detector as if a heartbeat arrived at start, so a
// peer that never answers is suspected like one that stopped answering.
func newPhiDetector(cfg detectorConfig, start time.Time) *phiDetector {
	d := &phiDetector{cfg: cfg, intervals: make([]float64, 0, max(cfg.Window, 2)), last: start}
	d.add(ms(cfg.Interval))
	return d
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (d *phiDetector) add(sample float64) {
	if len(d.intervals) < cap(d.intervals) {
		d.intervals = append(d.intervals, sample)
		return
	}
	d.intervals[d.next] = sample
	d.next = (d.next + 1) % len(d.intervals)
}

// heartbeat records a heartbeat at now.
func (d *phiDetector) heartbeat(now time.Time) {
	gap := now.Sub(d.last)
	if gap < 0 { // a clock step back: keep the later time
		return
	}
	if gap <= d.cfg.MaxSample {
		d.add(ms(gap))
	}
	d.last = now
}

// excuse takes pause off the peer's silence, as far as now: time in which
// this node could not run, so PONGs that reached it waited unread, is not
// time in which the peer was silent. It adds no sample to the history.
func (d *phiDetector) excuse(pause time.Duration, now time.Time) {
	if pause <= 0 {
		return
	}
	if d.last = d.last.Add(pause); d.last.After(now) {
		d.last = now
	}
}

// phi is the suspicion level at now.
func (d *phiDetector) phi(now time.Time) float64 {
	elapsed := ms(now.Sub(d.last))
	if elapsed <= 0 {
		return 0
	}
	var sum, sq float64
	for _, x := range d.intervals {
		sum += x
	}
	mean := sum / float64(len(d.intervals))
	for _, x := range d.intervals {
		sq += (x - mean) * (x - mean)
	}
	std := math.Max(math.Sqrt(sq/float64(len(d.intervals))), ms(d.cfg.MinStdDev))
	return phiOf(elapsed, mean+ms(d.cfg.Pause), std)
}

// phiOf is -log10 of the probability that a normal(mean, std) variable
// exceeds elapsed, using the logistic approximation of the normal CDF
// (Bowling et al., 2009) that Akka uses, which stays finite and monotone in
// the far tail where 1-CDF underflows.
func phiOf(elapsed, mean, std float64) float64 {
	y := (elapsed - mean) / std
	z := y * (1.5976 + 0.070566*y*y)
	e := math.Exp(-z)
	if elapsed > mean { // -log10(e/(1+e)), in logs so that it never overflows
		return z/math.Ln10 + math.Log10(1+e)
	}
	return -math.Log10(1 - 1/(1+e))
}

// suspect reports whether the peer is down at now.
func (d *phiDetector) suspect(now time.Time) bool { return d.phi(now) >= d.cfg.Threshold }

// lastHeartbeat is when the last heartbeat arrived.
func (d *phiDetector) lastHeartbeat() time.Time { return d.last }
