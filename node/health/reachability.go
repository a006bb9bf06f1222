package health

import (
	"log/slog"
	"slices"
	"sync"
	"time"
)

// reachabilityGap is the least time between two log lines about one
// target's reachability. A target that comes and goes faster gets one line
// per gap, counting the changes since the last one, and the log always ends
// on the target's current state.
const reachabilityGap = 5 * time.Second

// Reachability logs a target's changes between reachable and unreachable
// (the node's redis-server, a peer): one line per change, not one per failed
// request, and at most one per gap.
type Reachability struct {
	log      *slog.Logger // with the target's attributes
	gap      time.Duration
	down, up string // the lines' messages

	mu       sync.Mutex
	isUp     bool
	since    time.Time // when it entered its state
	loggedAt time.Time // when the last line was written
	changes  int       // changes since the last line
	err      error     // why it became unreachable, when known
	attrs    []any     // what the last change said besides, for a line put off
	timer    *time.Timer
	stopped  bool
}

// NewReachability starts a target reachable; down and up are the messages
// of its lines.
func NewReachability(log *slog.Logger, down, up string) *Reachability {
	return &Reachability{log: log, gap: reachabilityGap, down: down, up: up, isUp: true, since: time.Now()}
}

// Reachable reports the state last set.
func (r *Reachability) Reachable() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.isUp
}

// Set records the target's state; a change is logged, with attrs, at once
// or when the gap since the last line has passed.
func (r *Reachability) Set(up bool, err error, attrs ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if up == r.isUp {
		return
	}
	now := time.Now()
	held := now.Sub(r.since)
	r.isUp, r.since, r.err, r.attrs = up, now, err, attrs
	r.changes++
	if wait := r.gap - now.Sub(r.loggedAt); wait > 0 {
		if r.timer == nil && !r.stopped {
			r.timer = time.AfterFunc(wait, r.flush)
		}
		return
	}
	was := "was_up"
	if up {
		was = "was_down"
	}
	r.lineLocked(now, append(attrs, was, held.Round(time.Millisecond).String()))
}

// flush writes the line a change within the gap put off.
func (r *Reachability) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	r.putOffLineLocked()
}

// putOffLineLocked writes the line of the changes made within the gap.
func (r *Reachability) putOffLineLocked() {
	if r.changes > 0 && !r.stopped {
		r.lineLocked(time.Now(), append(slices.Clip(r.attrs), "changes", r.changes))
	}
}

func (r *Reachability) lineLocked(now time.Time, attrs []any) {
	r.loggedAt, r.changes = now, 0
	if r.isUp {
		r.log.Info(r.up, attrs...)
		return
	}
	if r.err != nil {
		attrs = append(attrs, "err", r.err.Error())
	}
	r.log.Warn(r.down, attrs...)
}

// Stop writes a line still put off, and no more: the node is shutting down.
func (r *Reachability) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.putOffLineLocked()
	r.stopped = true
}
