package node

import (
	"context"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/internal/ctxtime"
	"github.com/troop-lab/troop/internal/procmem"
	"github.com/troop-lab/troop/resp"
)

// The node's memory is bounded three ways (docs/store.md#limits-and-backpressure):
//
//   - requests in flight and replies not yet written are counted in bytes
//     against a share of troop_max_memory_mb, and a request that would pass
//     it gets -BUSY (memBudget, below);
//   - the Go runtime's soft memory limit is the budget, less what the
//     process holds outside the runtime, so garbage is collected before the
//     heap grows past it (ManageProcessMemory);
//   - after a burst, an idle node hands its free memory back to the system
//     (ManageProcessMemory too).
//
// Per connection, the reply buffer is taken from a pool only while replies
// are being written (replyWriter), so a connection waiting for requests
// holds only its read buffer.

// A memBudget counts the bytes held by requests in flight and by replies
// waiting for their connection's writer, against a limit.
type memBudget struct {
	limit int64
	used  atomic.Int64
}

// take counts n more bytes, unless they would pass the limit while other
// bytes are counted: a request larger than the whole limit still runs when
// it is alone.
func (b *memBudget) take(n int64) bool {
	if u := b.used.Add(n); u > b.limit && u != n {
		b.used.Add(-n)
		return false
	}
	return true
}

// add counts n bytes that are held already (a reply), limit or not.
func (b *memBudget) add(n int64) { b.used.Add(n) }

// give stops counting n bytes.
func (b *memBudget) give(n int64) { b.used.Add(-n) }

// requestOverhead is what a request holds besides its bytes: its slot, its
// parsed arguments, the closures that carry its reply.
const requestOverhead = 512

// requestCost is the bytes a request of raw bytes is counted for while in
// flight: it is held twice, as parsed and as queued on a link, plus the
// overhead.
func requestCost(raw int) int64 { return 2*int64(raw) + requestOverhead }

// inflightShare is the part of the memory budget that requests in flight and
// unwritten replies may hold; the rest is for connection buffers, the version
// cache and the collector's headroom.
func inflightShare(budgetMB int) int64 { return int64(budgetMB) << 20 / 2 }

// admit gives s its place in the node's bounds on requests in flight, of
// which limit's token is already taken, or returns the -BUSY reply that
// refuses it.
func (n *Node) admit(s *slot, limit *connLimit, raw int) []byte {
	if n.inflight.Load() >= int64(n.cfg.MaxInflight) {
		n.stats.busy.Add(1)
		return resp.AppendError(nil, "BUSY troop: too many requests in flight on this node; retry later")
	}
	cost := requestCost(raw)
	if !n.mem.take(cost) {
		n.stats.busy.Add(1)
		n.stats.busyMemory.Add(1)
		return resp.AppendError(nil, "BUSY troop: requests in flight hold this node's memory budget (troop_max_memory_mb); retry later")
	}
	n.inflight.Add(1)
	s.conn, s.node, s.mem, s.cost = limit, &n.inflight, &n.mem, cost
	return nil
}

// replyBufSize is the most a connection's reply buffer holds before it is
// written out; a larger reply is written from where it lies.
const replyBufSize = 64 << 10

var replyBufs = sync.Pool{New: func() any { b := make([]byte, 0, replyBufSize); return &b }}

// A replyWriter gathers a connection's replies into a pooled buffer, which
// it holds only between the first reply of a burst and release.
type replyWriter struct {
	w   io.Writer
	buf *[]byte // nil when released
	err error   // the first write error; later writes are dropped
}

func (w *replyWriter) write(reply []byte) {
	if w.err != nil {
		return
	}
	if w.buf == nil {
		w.buf = replyBufs.Get().(*[]byte)
	}
	if len(*w.buf)+len(reply) > replyBufSize {
		w.flush()
		if len(reply) > replyBufSize {
			if w.err == nil {
				_, w.err = w.w.Write(reply)
			}
			return
		}
	}
	*w.buf = append(*w.buf, reply...)
}

// flush writes out what the buffer holds.
func (w *replyWriter) flush() error {
	if w.buf != nil && len(*w.buf) > 0 {
		if w.err == nil {
			_, w.err = w.w.Write(*w.buf)
		}
		*w.buf = (*w.buf)[:0]
	}
	return w.err
}

// release writes out the buffer and gives it back to the pool.
func (w *replyWriter) release() error {
	err := w.flush()
	if w.buf != nil {
		replyBufs.Put(w.buf)
		w.buf = nil
	}
	return err
}

// memoryInfo is INFO's memory section, in Redis's field names where Redis
// has them.
func (n *Node) memoryInfo() string {
	var b strings.Builder
	b.WriteString("used_memory:" + strconv.FormatInt(runtimeHeld(), 10))
	if rss := procmem.Read(0).Total; rss > 0 {
		b.WriteString("\r\nused_memory_rss:" + strconv.FormatInt(rss, 10))
	}
	b.WriteString("\r\nmaxmemory:" + strconv.FormatInt(int64(n.cfg.MaxMemoryMB)<<20, 10))
	b.WriteString("\r\ninflight_bytes:" + strconv.FormatInt(n.mem.used.Load(), 10))
	b.WriteString("\r\ninflight_bytes_limit:" + strconv.FormatInt(n.mem.limit, 10))
	b.WriteString("\r\nbusy_memory_replies:" + strconv.FormatInt(n.stats.busyMemory.Load(), 10) + "\r\n")
	return b.String()
}

// runtimeHeld is the memory the Go runtime holds from the system: what its
// soft limit counts.
func runtimeHeld() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}

// limitMargin: the runtime's limit is a further 1/limitMargin of the budget
// below it, since the limit is soft and the part outside the runtime is
// measured only once a second.
const limitMargin = 16

// ManageProcessMemory keeps the process's resident memory within budgetMB
// until ctx ends. Once a second it sets the Go runtime's soft memory limit
// to the budget less what the process holds outside the runtime (its code,
// mostly, which grows as more of it runs) and a margin, and never less than
// half the budget; GOMEMLIMIT in the environment wins.
//
// And after a burst, one that made the runtime hold more than half the
// budget (any steady load does, with GOGC=off), it hands the runtime's free
// memory back to the system once the process has been idle (allocating
// less than idleAllocBytes a second) for firstRelease seconds, and again
// after lastRelease, since what a burst leaves behind becomes garbage over
// a while (its connections close one by one).
// Without this the free pages stay until the runtime's background
// scavenger gets to them, minutes later. A shorter pause keeps them: a
// node whose load pauses for a few seconds would otherwise fault its heap
// back in when it resumes, which cost the next 5 s of load 1.3 to 1.7
// times the node CPU per request in a three-rack cluster at DC_ONE
// (docs/performance.md#memory).
//
// It sets process-wide values, so the troop binary calls it, not New: a
// test process runs many nodes.
func ManageProcessMemory(ctx context.Context, budgetMB int, log *slog.Logger) {
	const (
		idleAllocBytes = 1 << 20
		firstRelease   = 8 // idle seconds
		lastRelease    = 16
	)
	limited := os.Getenv("GOMEMLIMIT") == ""
	budget := int64(budgetMB) << 20
	var outside int64 // the most seen: it only grows as more code runs
	setLimit := func() int64 {
		outside = max(outside, procmem.Read(0).Total-runtimeHeld())
		limit := max(budget-outside-budget/limitMargin, budget/2)
		debug.SetMemoryLimit(limit)
		return limit
	}
	if limited {
		log.Info("memory limit", "troop_max_memory_mb", budgetMB, "go_memory_limit_bytes", setLimit())
	} else {
		log.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
	}
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	last := s[0].Value.Uint64()
	idleFor, nextRelease := 0, firstRelease
	burst := false // the runtime held more than half the budget since the last releases
	ctxtime.Every(ctx, time.Second, func() {
		if limited {
			setLimit()
		}
		metrics.Read(s)
		now := s[0].Value.Uint64()
		if now-last >= idleAllocBytes {
			idleFor, nextRelease = 0, firstRelease
			burst = burst || runtimeHeld() > budget/2
		} else if idleFor++; burst && idleFor == nextRelease {
			debug.FreeOSMemory()
			nextRelease *= 2
			burst = nextRelease <= lastRelease
		}
		last = now
	})
}
