package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// AuditResult is what a read-back of every written key found.
type AuditResult struct {
	Keys    int64    `json:"keys"`    // keys the run wrote or deleted, all read back
	Lost    int64    `json:"lost"`    // answers the model rules out: an acknowledged write is gone
	Corrupt int64    `json:"corrupt"` // values that fail their checksum or name another key
	Errors  int64    `json:"errors"`  // reads that got no answer (error reply, transport)
	Seconds float64  `json:"seconds"`
	Samples []string `json:"samples,omitempty"` // the first lost, corrupt or failed reads, in words
}

// OK reports whether every acknowledged write was read back intact.
func (a AuditResult) OK() bool { return a.Lost == 0 && a.Corrupt == 0 && a.Errors == 0 }

const (
	auditBatch   = 64 // GETs per pipeline
	auditSamples = 20
)

// Audit reads back, through target, every key the model saw written, once
// every write of the run has ended, and checks each answer with no
// staleness allowed: the answer must be the latest acknowledged write of the
// key, or a later write whose outcome is unknown (it failed, and may or may
// not have happened). Anything else means an acknowledged write was lost.
// Read it through a target at the level whose promise is audited; cfg is
// the run's, for the names of its keys.
func Audit(ctx context.Context, target Target, m *Model, cfg Config) (AuditResult, error) {
	start := time.Now()
	keys := m.Written()
	res := AuditResult{Keys: int64(len(keys))}
	note := func(format string, args ...any) {
		if len(res.Samples) < auditSamples {
			res.Samples = append(res.Samples, fmt.Sprintf(format, args...))
		}
	}
	for lo := 0; lo < len(keys); lo += auditBatch {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		batch := keys[lo:min(lo+auditBatch, len(keys))]
		names := make([][]byte, len(batch))
		replies := make([]reply, len(batch))
		begins := make([]uint64, len(batch))
		var wg sync.WaitGroup
		for i, k := range batch {
			names[i] = cfg.Key(nil, k)
			begins[i] = m.BeginRead()
			wg.Add(1)
			target.Send([][]byte{[]byte("GET"), names[i]}, func(raw []byte, err error) {
				replies[i] = reply{raw: append([]byte(nil), raw...), err: err}
				wg.Done()
			})
		}
		target.Flush()
		wg.Wait()
		for i, k := range batch {
			var ans Answer
			o := Error
			v, why := replyValue(replies[i])
			if why == "" {
				ans, o, why = getAnswer(names[i], v)
			}
			switch o {
			case Fail:
				res.Corrupt++
				note("GET %s: %s", names[i], why)
			case Error:
				res.Errors++
				note("GET %s: %s", names[i], why)
			default:
				if ok, why := m.check(k, begins[i], ans, 0, 0); !ok {
					res.Lost++
					note("GET %s: %s", names[i], why)
				}
			}
		}
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}
