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
