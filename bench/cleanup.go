package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// CleanupResult is what --cleanup deleted.
type CleanupResult struct {
	Keys    int64   `json:"keys"`    // keys the run wrote, each sent a DEL
	Deleted int64   `json:"deleted"` // of them, those that still existed
	Errors  int64   `json:"errors"`  // DELs that got no proper answer
	Seconds float64 `json:"seconds"`
	Sample  string  `json:"sample,omitempty"` // the first error
}

const cleanupBatch = 256

// Cleanup deletes, through target, every key the model saw written (or
// deleted) and no other, so that a run leaves the store as it found it but
// for keys of its own names it overwrote. Each key gets a DEL of its own,
// so that client-side sharding sends it to the server that holds it.
func Cleanup(ctx context.Context, target Target, m *Model, cfg Config) (CleanupResult, error) {
	start := time.Now()
	keys := m.Written()
	res := CleanupResult{Keys: int64(len(keys))}
	for lo := 0; lo < len(keys); lo += cleanupBatch {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		batch := keys[lo:min(lo+cleanupBatch, len(keys))]
		var (
			wg sync.WaitGroup
			mu sync.Mutex
		)
		for _, k := range batch {
			name := cfg.Key(nil, k)
			wg.Add(1)
			target.Send([][]byte{cmdDEL, name}, func(raw []byte, err error) {
				defer wg.Done()
				v, why := replyValue(reply{raw: raw, err: err})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case why != "":
					res.Errors++
					if res.Sample == "" {
						res.Sample = fmt.Sprintf("DEL %s: %s", name, why)
					}
				case v.Int > 0:
					res.Deleted++
				}
			})
		}
		target.Flush()
		wg.Wait()
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}
