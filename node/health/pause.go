package health

import "time"

// LocalPause measures how long this node itself stood still, from the
// ticks of its heartbeat loop. A node the machine starves of CPU (or that
// is stopped, or whose GC stops the world) reads its peers' PONGs late:
// when it runs again the loop would see every peer silent for the whole
// pause and mark them all down, though the PONGs are waiting in its
// sockets. Cassandra's failure detector guards against this by not
// convicting anyone after a long local pause; here the pause is taken off
// each peer's silence instead (Peer.Excuse), so that a peer that really
// died is still marked down, only later by the time this node lost, even
// on a machine that starves the node on every tick.
//
// A pure value: the caller passes the time of each tick.
type LocalPause struct {
	period time.Duration
	prev   time.Time // the previous tick; zero before the first
}

// NewLocalPause measures pauses of a loop that ticks every period.
func NewLocalPause(period time.Duration) *LocalPause { return &LocalPause{period: period} }

// Tick records a tick of the loop at now and returns how long this node
// stood still since the previous one: the time past the period, when the
// tick came more than a whole period late, and zero otherwise. Lateness
// within a period is the ordinary jitter the detector's history learns.
func (l *LocalPause) Tick(now time.Time) time.Duration {
	prev := l.prev
	if prev.IsZero() || now.After(prev) {
		l.prev = now
	}
	if prev.IsZero() {
		return 0
	}
	if late := now.Sub(prev) - l.period; late > l.period {
		return late
	}
	return 0
}
