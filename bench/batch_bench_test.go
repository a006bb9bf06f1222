package bench

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/resp"
)

// cannedPipe answers every GET with the value its key was given, at once,
// with no network: what is left is troop bench's own work per operation
// (encoding, the model, checking the value, the histograms).
type cannedPipe struct {
	values map[string][]byte // key -> reply frame
	queued [][]byte
}

func (p *cannedPipe) Send(args [][]byte) { p.queued = append(p.queued, p.values[string(args[1])]) }

func (p *cannedPipe) Exchange(dst []client.Reply) []client.Reply {
	now := time.Now()
	for _, raw := range p.queued {
		dst = append(dst, client.Reply{Raw: raw, At: now})
	}
	p.queued = p.queued[:0]
	return dst
}

// BenchmarkBatchGet is one worker's batches of 10 GETs of 1 KB values,
// each checked and recorded; ns/op is per GET.
func BenchmarkBatchGet(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Keys = 1000
	pipe := &cannedPipe{values: map[string][]byte{}}
	for k := range cfg.Keys {
		key := FormatKey(nil, k, cfg.KeySize)
		pipe.values[string(key)] = resp.AppendBulk(nil, EncodeValue(nil, key, 1, 1024))
	}
	r := &runner{cfg: &cfg, model: NewModel(0)}
	ps := newPhaseStats(time.Now(), 1)
	rec := newRecorder(ps)
	bt := &batcher{pipe: pipe}
	slot := new(atomic.Uint64)
	slot.Store(math.MaxUint64)
	ops := make([]Op, 10)
	b.ResetTimer()
	for i := 0; i < b.N; i += len(ops) {
		for k := range ops {
			ops[k] = Op{Kind: Get, Key: uint64(i+k) % cfg.Keys}
		}
		bt.grow(len(ops))
		r.batch(bt, ops, slot, rec)
	}
	rec.flush()
	if s := ps.tasks[0]; s.count < int64(b.N) || s.fails+s.errors != 0 {
		b.Fatalf("%d ops recorded, %d fails, %d errors", s.count, s.fails, s.errors)
	}
}
