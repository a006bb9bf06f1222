// Package health is what a node believes about the health of its peers
// and of its redis-server (docs/repair.md, Failure detection): a
// phi-accrual failure detector per peer, a pure core that takes time as
// an input (detector.go); Peer, which marks a peer down or up from its
// detector and logs the changes; and Reachability, which logs a target
// going and coming back at most once per gap. It does no I/O of its own
// and needs nothing of the node: the node feeds it the answers to the
// PINGs it sends every heartbeat period, asks it whether a peer is down
// before it sends synchronous work, and decides what follows a change
// (hint replay, its counters). Whether the node is ready (GET /ready)
// stays with the node: that takes its membership, its standby state and
// its redis-server's answers besides the detectors' verdicts.
package health

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Peer is what this node believes about one peer: a phi-accrual detector
// fed by the answers to the PINGs the node sends it.
type Peer struct {
	// Down says the detector marked the peer down: synchronous work does
	// not go to it. An atomic, as every request reads it.
	Down atomic.Bool

	mu    sync.Mutex
	det   *phiDetector
	since time.Time // when the state last changed

	reach *Reachability // logs the changes of state
}

// NewPeer starts the detector of a peer at now, with the node's heartbeat
// period and phi threshold; log carries the peer's attributes.
func NewPeer(heartbeat time.Duration, threshold float64, log *slog.Logger, now time.Time) *Peer {
	return &Peer{
		det:   newPhiDetector(defaultDetectorConfig(heartbeat, threshold), now),
		since: now,
		reach: NewReachability(log, "peer marked down", "peer up again"),
	}
}

// Heartbeat records a PONG from the peer at now.
func (p *Peer) Heartbeat(now time.Time) {
	p.mu.Lock()
	p.det.heartbeat(now)
	p.mu.Unlock()
}

// Excuse takes a local pause off the peer's silence (see LocalPause).
func (p *Peer) Excuse(pause time.Duration, now time.Time) {
	p.mu.Lock()
	p.det.excuse(pause, now)
	p.mu.Unlock()
}

// Evaluate sets the peer's state from its detector at now and reports
// whether it changed and to what; a change is logged, with attrs.
func (p *Peer) Evaluate(now time.Time, attrs ...any) (changed, down bool) {
	p.mu.Lock()
	down = p.det.suspect(now)
	changed = down != p.Down.Load()
	var phi float64
	if changed {
		p.Down.Store(down)
		phi = p.det.phi(now)
		p.since = now
	}
	p.mu.Unlock()
	if !changed {
		return false, down
	}
	if down {
		p.reach.Set(false, nil, append(attrs, "phi", fmt.Sprintf("%.1f", phi))...)
	} else {
		p.reach.Set(true, nil, attrs...)
	}
	return true, down
}

// State is the peer's suspicion level at now, how long since its last
// heartbeat, and how long it has been in its state.
func (p *Peer) State(now time.Time) (phi float64, sinceHeartbeat, inState time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.det.phi(now), now.Sub(p.det.lastHeartbeat()), now.Sub(p.since)
}

// Stop writes a log line still put off, and no more.
func (p *Peer) Stop() { p.reach.Stop() }
