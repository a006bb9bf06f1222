// Package ctxtime has the one wait every clock of troop's needs: a sleep
// that ends early, with the context's error, when the context does.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits for d, or until ctx ends; it returns ctx.Err() in that case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Every calls f every d until ctx ends; the first call is d after the
// start. A call that takes longer than d delays the next, never doubles it.
func Every(ctx context.Context, d time.Duration, f func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if ctx.Err() != nil { // both were ready, and select chose the tick
			return
		}
		f()
	}
}
