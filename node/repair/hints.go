package repair

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/resp"
)

// Hints are the writes one peer missed, for hinted handoff
// (docs/repair.md). A write meant for a peer that is marked down, or that
// could not be reached, is kept as a hint: the peer request itself (WRITE
// or FWD, with the write's version), appended to a file per peer under
// DATA_DIR/hints. When the peer is up again the hints are sent
// to it in the order they were written, a chunk at a time, and the offset
// reached is saved beside the file, so a coordinator that restarts goes on
// where it was. Hints reach the file within hintFlushDelay of being added
// (see Add), and at once when the node stops: a node killed with SIGKILL
// keeps all but its last milliseconds of hints (the page cache survives
// the process; a machine crash may lose more, as nothing is fsynced).
type Hints struct {
	peer string // its address
	path string
	max  int64 // bytes of pending hints kept; past it new hints are dropped

	mu        sync.Mutex
	f         *os.File
	size      int64  // bytes in the file
	queue     []byte // hints added and not yet written
	queued    int    // how many
	spare     []byte // the other queue buffer
	flushing  bool   // a flush of the queue is scheduled
	offset    int64  // bytes already delivered
	replaying bool
	failed    error // why the file cannot be used; hints are dropped

	pending  atomic.Int64 // hints after offset
	dropped  atomic.Int64
	replayed atomic.Int64
}

// hintChunk is how many hints replay sends before it waits for their
// answers and saves its offset.
const hintChunk = 256

// hintFileName turns a peer address into a file name.
func hintFileName(addr string) string {
	return strings.NewReplacer(":", "_", "[", "", "]", "", "/", "_").Replace(addr) + ".hints"
}

// openHints opens (or creates) the hint file of one peer and counts the
// hints still to deliver. A hint cut short at the end of the file (the node
// died in the middle of writing it) is cut off.
func openHints(dir, addr string, max int64) (*Hints, error) {
	h := &Hints{peer: addr, path: filepath.Join(dir, hintFileName(addr)), max: max}
	f, err := os.OpenFile(h.path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	h.f = f
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	h.size = st.Size()
	if b, err := os.ReadFile(h.offsetPath()); err == nil && len(b) == 8 {
		h.offset = min(int64(binary.BigEndian.Uint64(b)), h.size)
	}
	count, good, err := countFrames(io.NewSectionReader(f, h.offset, h.size-h.offset))
	if err != nil || h.offset+good < h.size {
		if err := f.Truncate(h.offset + good); err != nil {
			f.Close()
			return nil, err
		}
		h.size = h.offset + good
	}
	h.pending.Store(count)
	return h, nil
}

func (h *Hints) offsetPath() string { return h.path + ".offset" }

// countFrames counts the complete RESP frames in r and the bytes they take;
// a frame cut short at the end is not counted.
func countFrames(r io.Reader) (count, size int64, err error) {
	rd := resp.NewReader(r, hintLimits)
	for {
		raw, err := rd.ReadRaw(nil)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return count, size, nil
			}
			return count, size, err
		}
		count++
		size += int64(len(raw))
	}
}

// hintLimits bound what a hint file may hold: what a peer would accept.
var hintLimits = resp.Limits{MaxBulk: 1 << 30, MaxFrame: 1 << 30, MaxElems: resp.DefaultLimits.MaxElems, MaxInline: resp.DefaultLimits.MaxInline, MaxDepth: 1}

// Add queues one hint; it reports false when the hint was dropped. Queued
// hints go to the file together, hintFlushDelay after the first of them
// (flush): one write(2) for all the hints of a burst, where a write per
// hint cost a tenth of the node's CPU with a replica down.
func (h *Hints) Add(req []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failed != nil || h.size+int64(len(h.queue))-h.offset+int64(len(req)) > h.max {
		h.dropped.Add(1)
		return false
	}
	h.queue = append(h.queue, req...)
	h.queued++
	h.pending.Add(1)
	if !h.flushing {
		h.flushing = true
		time.AfterFunc(hintFlushDelay, h.flush)
	}
	return true
}

// hintFlushDelay bounds how long a hint waits in memory: a node killed
// with SIGKILL loses at most the hints of its last few milliseconds.
const hintFlushDelay = 2 * time.Millisecond

// flush writes the queued hints to the file.
func (h *Hints) flush() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flushing = false
	if len(h.queue) == 0 || h.f == nil {
		return
	}
	buf, count := h.queue, h.queued
	h.queue, h.queued = h.spare[:0], 0
	n, err := h.f.Write(buf)
	h.size += int64(n)
	h.spare = buf[:0]
	if err != nil {
		// A short write leaves a partial frame: cut it off, or replay would
		// stop at it for good. The hints of this write are lost.
		if terr := h.f.Truncate(h.size - int64(n)); terr != nil {
			h.failed = fmt.Errorf("hint file %s: %v (and truncating it: %v)", h.path, err, terr)
		}
		h.size -= int64(n)
		h.pending.Add(-int64(count))
		h.dropped.Add(int64(count))
	}
}

// next reads the hints after the offset, at most hintChunk of them: the
// frames, and the bytes they take in the file.
func (h *Hints) next() ([][]byte, int64, error) {
	h.mu.Lock()
	off, size := h.offset, h.size
	h.mu.Unlock()
	if off >= size {
		return nil, 0, nil
	}
	rd := resp.NewReader(io.NewSectionReader(h.f, off, size-off), hintLimits)
	var frames [][]byte
	var used int64
	for len(frames) < hintChunk {
		raw, err := rd.ReadRaw(nil)
		if err != nil {
			if errors.Is(err, io.EOF) && len(frames) > 0 {
				break
			}
			return nil, 0, fmt.Errorf("hint file %s at byte %d: %v", h.path, off+used, err)
		}
		frames = append(frames, raw)
		used += int64(len(raw))
	}
	return frames, used, nil
}

// advance records that count hints taking n bytes were delivered, saving
// the offset; once everything is delivered the file starts over empty.
func (h *Hints) advance(count int, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.offset += n
	h.pending.Add(-int64(count))
	h.replayed.Add(int64(count))
	if h.offset >= h.size {
		if err := h.f.Truncate(0); err == nil {
			h.offset, h.size = 0, 0
		}
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(h.offset))
	tmp := h.offsetPath() + ".tmp"
	if err := os.WriteFile(tmp, b[:], 0o644); err == nil {
		os.Rename(tmp, h.offsetPath())
	}
}

// dropRest gives up on a hint file that cannot be read past the offset.
func (h *Hints) dropRest() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropped.Add(h.pending.Swap(int64(h.queued)) - int64(h.queued)) // queued hints go to the file yet
	if err := h.f.Truncate(0); err == nil {
		h.offset, h.size = 0, 0
		os.Remove(h.offsetPath())
	}
}

// Close writes the hints queued and closes the file: the node stops.
func (h *Hints) Close() {
	h.flush()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.f.Close()
	h.f = nil
}

// Counts says how many hints wait for the peer, how many did not fit and
// how many were delivered.
func (h *Hints) Counts() (pending, dropped, replayed int64) {
	return h.pending.Load(), h.dropped.Load(), h.replayed.Load()
}

// OpenHints opens (or creates) the hint file of peer, the address it
// listens on for peers; nil when hinted handoff is off.
func (r *Repairer[R]) OpenHints(peer string) (*Hints, error) {
	if r.cfg.HintDir == "" {
		return nil, nil
	}
	h, err := openHints(r.cfg.HintDir, peer, r.cfg.MaxHintBytes)
	if err != nil {
		return nil, fmt.Errorf("hints for %s: %w", peer, err)
	}
	if p := h.pending.Load(); p > 0 {
		r.cfg.Log.Info("hints waiting from before the restart", "peer", peer, "hints", p)
	}
	return h, nil
}

// ReplayHints starts delivering h, the hints of peer p, unless that is
// under way or there are none.
func (r *Repairer[R]) ReplayHints(p R, h *Hints) {
	if h == nil || h.pending.Load() == 0 {
		return
	}
	h.mu.Lock()
	if h.replaying {
		h.mu.Unlock()
		return
	}
	h.replaying = true
	h.mu.Unlock()
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		err := r.deliverHints(p, h)
		h.mu.Lock()
		h.replaying = false
		h.mu.Unlock()
		if err != nil {
			// The heartbeat loop tries again while the peer is up.
			r.cfg.Log.Debug("hint replay stopped", "peer", h.peer, "pending", h.pending.Load(), "err", err)
		}
	}()
}

// deliverHints sends p's hints in order, a pipelined chunk at a time,
// until none are left or one is not delivered.
func (r *Repairer[R]) deliverHints(p R, h *Hints) error {
	start := time.Now()
	delivered := 0
	for p.MarkedDown() == nil && !r.isStopped() {
		frames, used, err := h.next()
		if err != nil {
			r.cfg.Log.Error("hint file unreadable: dropping its remaining hints", "peer", h.peer, "err", err)
			h.dropRest()
			return err
		}
		if len(frames) == 0 {
			if delivered > 0 {
				r.cfg.Log.Info("hints delivered", "peer", h.peer, "hints", delivered, "took", time.Since(start).Round(time.Millisecond).String())
			}
			return nil
		}
		// Answers come back in order; the hints up to the first one that
		// failed are delivered. The rest go again, which last-writer-wins
		// writes ignore when they did arrive.
		errs := make([]chan error, len(frames))
		for i := range errs {
			errs[i] = make(chan error, 1)
		}
		r.node.Send(p, frames, func(i int, _ []byte, err error) { errs[i] <- err })
		ok, okBytes := 0, int64(0)
		var failed error
		for i, ch := range errs {
			if err := <-ch; err != nil && failed == nil {
				failed = err
			}
			if failed == nil {
				ok++
				okBytes += int64(len(frames[i]))
			}
		}
		if failed != nil {
			if ok > 0 {
				h.advance(ok, okBytes)
			}
			return failed
		}
		h.advance(len(frames), used)
		delivered += len(frames)
	}
	return nil
}

// Stop has repair start no more hint replays and waits for those under
// way: the node is stopping.
func (r *Repairer[R]) Stop() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *Repairer[R]) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}
