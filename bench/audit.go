package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/troop-lab/troop/resp"
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
// Read it through a target at the level whose promise is audited.
func Audit(ctx context.Context, target Target, m *Model, keySize int) (AuditResult, error) {
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
			names[i] = FormatKey(nil, k, keySize)
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
			ans, err := auditAnswer(names[i], replies[i])
			switch {
			case err != nil && ans.corrupt:
				res.Corrupt++
				note("GET %s: %v", names[i], err)
			case err != nil:
				res.Errors++
				note("GET %s: %v", names[i], err)
			default:
				if ok, why := m.check(k, begins[i], ans.Answer, 0, 0); !ok {
					res.Lost++
					note("GET %s: %s", names[i], why)
				}
			}
		}
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

type auditReply struct {
	Answer
	corrupt bool
}

// auditAnswer turns a GET reply into an Answer, or says why it is none.
func auditAnswer(key []byte, rp reply) (auditReply, error) {
	if rp.err != nil {
		return auditReply{}, rp.err
	}
	v, err := resp.Parse(rp.raw)
	switch {
	case err != nil:
		return auditReply{}, fmt.Errorf("unreadable reply: %v", err)
	case v.Type == resp.Error || v.Type == resp.BlobError:
		return auditReply{}, fmt.Errorf("%s", v.Str)
	case v.IsNull:
		return auditReply{Answer: Answer{Missing: true}}, nil
	case v.Type != resp.BulkString:
		return auditReply{}, fmt.Errorf("unexpected reply type %q", byte(v.Type))
	}
	ver, integ := Verify(key, v.Str)
	if integ != Intact {
		return auditReply{corrupt: true}, fmt.Errorf("value is %s", integ)
	}
	return auditReply{Answer: Answer{Version: ver}}, nil
}
