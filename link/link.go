// Package link is a persistent, pipelined connection to a RESP server, shared
// by many callers: the store node uses one per peer and to its redis-server,
// the client one or more per node.
package link

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/troop-lab/troop/internal/fifo"
	"github.com/troop-lab/troop/internal/rawio"
	"github.com/troop-lab/troop/resp"
)

// A Link is one persistent, pipelined connection to a RESP server: the local
// redis-server or a peer node. Requests are written in order and their
// replies matched in order, so one connection carries many requests at once.
// Callers queue requests with send and push them out with flush. Flushes
// combine: while one caller is writing, others only append, and the writer
// takes what they appended in its next write. Under load, the requests of many
// client connections thus leave in one write, as in an event-loop proxy.
//
// A link that cannot connect is down for a short backoff, during which
// requests fail at once instead of waiting: a dead peer costs nothing.
type Link struct {
	name      string // for errors: "redis" or "peer"
	addr      string
	timeout   time.Duration
	tick      time.Duration // how often the watchdog looks for a request past its deadline
	handshake Handshake     // optional, runs after dial
	dialer    Dialer        // dialTCP unless given

	mu        sync.Mutex
	conn      net.Conn
	raw       *rawio.Conn      // conn's socket, read and written around the scheduler (rawio); nil over TLS
	out       []byte           // requests queued and not yet written
	spare     []byte           // the other buffer, swapped with out by the writer
	writing   bool             // a caller is writing out; others just append
	dialing   bool             // a connection is being made; requests queue meanwhile
	pending   fifo.Queue[call] // oldest first; values, not pointers: one allocation fewer per request
	sent      uint64           // requests sent so far, for Oldest
	ticks     uint64           // the watchdog's ticks so far: the clock deadlines are counted in
	downUntil time.Time
	backoff   time.Duration // grows while dials keep failing
	lastErr   error         // why the link went down, without the link's name
	closed    bool
	kick      chan struct{} // wakes the flusher: FlushSoon
	done      chan struct{} // closed by Close: ends the flusher

	unreachable bool                            // the last dial failed or a request timed out, and no dial succeeded since
	watch       func(reachable bool, err error) // Watch's function, nil without one
	poller      Poller                          // PollWith's, nil without one
	stopPoll    func()                          // ends the poller's reads of conn; nil when a goroutine reads it

	stats *linkStats
}

// A Dialer opens a new connection to addr within timeout: TLS, say.
type Dialer func(addr string, timeout time.Duration) (net.Conn, error)

func dialTCP(addr string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, timeout)
}

// Handshake runs on every new connection before any request, with the
// connection's reader: a peer's greeting, loading scripts into redis-server.
type Handshake func(net.Conn, *resp.Reader) error

type linkStats struct {
	mu          sync.Mutex
	timeouts    int64
	failures    int64
	drops       int64
	connects    int64
	lastFailure string
}

// A call is one request in flight; done runs exactly once, on the link's
// reader goroutine or on the caller's, and must not block.
type call struct {
	dueTick uint64 // the watchdog tick at which the request is past its deadline
	done    func(raw []byte, err error)
	skip    int    // replies to read and drop before the one done gets
	seq     uint64 // the link's count of requests when it was sent: Oldest's
}

// A link that failed waits before dialling again: minBackoff at first, then
// twice as long after each failure, up to maxBackoff. Peers that start at the
// same moment thus find each other within tens of milliseconds, while a dead
// one costs a dial at most once a second.
const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

// ErrDown wraps the reason a link is unusable.
var ErrDown = errors.New("unreachable")

func New(name, addr string, timeout time.Duration, handshake Handshake) *Link {
	return NewDial(name, addr, timeout, nil, handshake)
}

// NewDial is New with connections opened by dial (nil: plain TCP).
func NewDial(name, addr string, timeout time.Duration, dial Dialer, handshake Handshake) *Link {
	if dial == nil {
		dial = dialTCP
	}
	l := &Link{name: name, addr: addr, timeout: timeout, tick: max(timeout/20, 10*time.Millisecond), handshake: handshake,
		dialer: dial, stats: &linkStats{}, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go l.watchdog()
	go l.flusher()
	return l
}

// Watch has f told when the server becomes unreachable (a dial failed or a
// request timed out) and when it is reachable again (a dial succeeded after
// that): once per change, never once per request, so a caller can log
// changes. f runs on the link's goroutines, outside its lock, and must not
// block. Call Watch before the link's first request.
func (l *Link) Watch(f func(reachable bool, err error)) {
	l.mu.Lock()
	l.watch = f
	l.mu.Unlock()
}

// reachableLocked records whether the server can be reached and returns
// what to run, after unlocking, to tell Watch's function of a change.
func (l *Link) reachableLocked(reachable bool, err error) (notify func()) {
	changed := l.unreachable == reachable
	l.unreachable = !reachable
	if !changed || l.watch == nil {
		return func() {}
	}
	watch := l.watch
	return func() { watch(reachable, err) }
}

// A Poller reads links on an event loop: a goroutine that waits for many
// sockets at once. A link read there costs no goroutine of its own, and no
// hand-off between goroutines per burst of replies: the loop that sent the
// requests reads their replies and runs their callbacks.
type Poller interface {
	// Poll has readable run on the poller's goroutine each time the
	// socket conn reaches (through its Control) has bytes to read, until
	// stop is called.
	Poll(conn *rawio.Conn, readable func()) (stop func(), err error)
	// FlushAfterPass has l flushed on the poller's goroutine before it
	// waits again, and reports true, when it is handling events now: its
	// callbacks' requests then leave together, with no flusher woken. It
	// reports false when the poller is waiting.
	FlushAfterPass(l *Link) bool
}

// PollWith has p read the link's plain TCP connections from the next one
// on; connections over TLS, which crypto/tls reads, keep a goroutine.
// Callbacks then run on p's goroutine, and must not wait for a reply on a
// link p reads. Call PollWith before the link's first request.
func (l *Link) PollWith(p Poller) {
	l.mu.Lock()
	l.poller = p
	l.mu.Unlock()
}

// Send queues req; done gets the reply frame or an error. The request is not
// on the wire until the next flush.
func (l *Link) Send(req []byte, done func(raw []byte, err error)) {
	if err := l.TrySend(req, done); err != nil {
		done(nil, err)
	}
}

// TrySend is Send that returns the error when the link cannot take req,
// instead of passing it to done: done then never runs. A caller that holds
// a lock while queueing needs this, as done may take the same lock.
func (l *Link) TrySend(req []byte, done func(raw []byte, err error)) error {
	return l.TrySendAppend(1, func(dst []byte) []byte { return append(dst, req...) }, done)
}

// TrySendAppend is TrySend for a request that appendReq encodes straight
// into the link's buffer, so that a large value is copied once rather than
// into a request of its own first. The request holds n commands that must
// reach the server together (MULTI ... EXEC, say): done gets the last one's
// reply, the others are read and dropped. appendReq runs with the link
// locked, and must only append to what it is given.
func (l *Link) TrySendAppend(n int, appendReq func(dst []byte) []byte, done func(raw []byte, err error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.connectLocked(); err != nil {
		return err
	}
	l.sent++
	l.pending.Push(call{dueTick: l.dueTickLocked(), done: done, skip: n - 1, seq: l.sent})
	l.out = appendReq(l.out)
	return nil
}

const maxSpare = 1 << 20

// Flush writes queued requests out, unless another caller is already
// writing, in which case that caller takes them along.
func (l *Link) Flush() { l.flush(false) }

// FlushNoWait is Flush for a caller that must never block, such as an event
// loop: it writes what the socket takes at once, and leaves the rest, when a
// server stops reading, to the link's flusher goroutine. Over TLS, whose
// writes cannot be tried, the flusher writes it all.
func (l *Link) FlushNoWait() { l.flush(true) }

func (l *Link) flush(noWait bool) {
	l.mu.Lock()
	if l.writing || len(l.out) == 0 || l.conn == nil {
		l.mu.Unlock()
		return
	}
	if noWait && l.raw == nil {
		l.mu.Unlock()
		l.FlushSoon()
		return
	}
	l.writing = true
	if !noWait {
		// Let other goroutines with requests ready add theirs before the
		// write: one write for many callers is the point of combining.
		l.mu.Unlock()
		runtime.Gosched()
		l.mu.Lock()
	}
	for len(l.out) > 0 && l.conn != nil {
		conn, raw, buf := l.conn, l.raw, l.out
		l.out = l.spare[:0]
		l.mu.Unlock()
		// Outside the lock: others keep appending.
		var err error
		written := len(buf)
		switch {
		case noWait:
			written, err = raw.TryWrite(buf)
		case raw != nil:
			_, err = raw.Write(buf)
		default:
			_, err = conn.Write(buf)
		}
		l.mu.Lock()
		if err == nil && written < len(buf) {
			// The socket is full: what it did not take goes first, before
			// what was queued meanwhile, and the flusher waits to write it.
			rest := make([]byte, 0, len(buf)-written+len(l.out))
			l.out = append(append(rest, buf[written:]...), l.out...)
			l.spare = buf[:0]
			l.writing = false
			l.mu.Unlock()
			l.FlushSoon()
			return
		}
		// buf becomes the spare, unless it grew huge: then let it go. Either
		// way the old spare is now out's array and must not stay the spare.
		l.spare = nil
		if cap(buf) <= maxSpare {
			l.spare = buf[:0]
		}
		if err != nil && l.conn == conn {
			l.stats.record(func(s *linkStats) { s.drops++ })
			notify := l.failLocked(fmt.Errorf("%s %s: %w: write: %v", l.name, l.addr, ErrDown, err))
			l.writing = false
			l.mu.Unlock()
			notify()
			return
		}
	}
	l.writing = false
	l.mu.Unlock()
}

// FlushSoon has the link flushed by its poller before the poller waits
// again, when the poller is handling events now (PollWith), or else by the
// link's own flusher goroutine: not by the caller. A callback that runs on
// a link's reader queues requests with Send and calls FlushSoon: the reader
// goes on with its next replies meanwhile, and the requests the callbacks
// of a whole burst of replies queued leave in one write, where flushing
// each at once would cost a write apiece.
func (l *Link) FlushSoon() {
	if l.poller != nil && l.poller.FlushAfterPass(l) {
		return
	}
	select {
	case l.kick <- struct{}{}:
	default: // a flush is due already, and takes these requests along
	}
}

func (l *Link) flusher() {
	for {
		select {
		case <-l.kick:
			l.Flush()
		case <-l.done:
			return
		}
	}
}

// Do sends one request, to be written soon (FlushSoon): it never waits
// for the socket, so that a callback on an event loop may call it.
func (l *Link) Do(req []byte, done func(raw []byte, err error)) {
	l.Send(req, done)
	l.FlushSoon()
}

// Oldest names the oldest request sent on the link and not answered yet,
// 0 when every one was: a request keeps its name until answered, so that
// a caller can tell whether the one it saw waiting still is.
func (l *Link) Oldest() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending.Len() == 0 {
		return 0
	}
	return l.pending.All()[0].seq
}

// up reports whether the link is usable or may be retried now.
func (l *Link) Up() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn != nil || time.Now().After(l.downUntil)
}

// connected reports whether the link has an open connection.
func (l *Link) Connected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn != nil
}

// connectLocked makes sure a connection exists or is being made. Dialling
// happens on its own goroutine, so a peer that accepts but never answers the
// handshake delays only the requests queued for it, never the caller; the
// requests wait in the queue and go out once the connection is up, or fail
// with it.
func (l *Link) connectLocked() error {
	if l.closed {
		return fmt.Errorf("%s: %w: node shutting down", l.name, ErrDown)
	}
	if l.conn != nil || l.dialing {
		return nil
	}
	if time.Now().Before(l.downUntil) {
		return fmt.Errorf("%s %s: %w: %v", l.name, l.addr, ErrDown, l.lastErr)
	}
	l.dialing = true
	go l.dial()
	return nil
}

func (l *Link) dial() {
	dialTimeout := min(l.timeout, 2*time.Second)
	conn, err := l.dialer(l.addr, dialTimeout)
	var rd *resp.Reader
	var raw *rawio.Conn
	if err == nil {
		var src io.Reader = conn
		if raw = rawio.Of(conn); raw != nil {
			src = raw
		}
		rd = resp.NewReader(src, resp.DefaultLimits)
		if l.handshake != nil {
			conn.SetDeadline(time.Now().Add(dialTimeout))
			if err = l.handshake(conn, rd); err == nil {
				conn.SetDeadline(time.Time{})
			} else {
				conn.Close()
			}
		}
	}
	l.mu.Lock()
	l.dialing = false
	if err == nil && l.closed {
		conn.Close()
		err = errors.New("node shutting down")
	}
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) { // "connection refused" says it all; the address is in our message
			err = op.Err
		}
		l.markDownLocked()
		l.stats.record(func(s *linkStats) { s.failures++; s.lastFailure = err.Error() })
		notify := l.failLocked(fmt.Errorf("%s %s: %w: %v", l.name, l.addr, ErrDown, err))
		l.lastErr = err // bare, for the messages of requests refused during the backoff
		changed := func() {}
		if !l.closed {
			changed = l.reachableLocked(false, err)
		}
		l.mu.Unlock()
		notify()
		changed()
		return
	}
	l.startLocked(conn, raw, rd)
	changed := l.reachableLocked(true, nil)
	l.mu.Unlock()
	changed()
	l.Flush() // what was queued while dialling
}

func (l *Link) markDownLocked() {
	l.backoff = min(max(2*l.backoff, minBackoff), maxBackoff)
	l.downUntil = time.Now().Add(l.backoff)
}

func (l *Link) startLocked(conn net.Conn, raw *rawio.Conn, rd *resp.Reader) {
	l.backoff = 0
	l.raw = raw
	l.conn = conn // requests queued while dialling stay in out, for this connection
	l.stats.record(func(s *linkStats) { s.connects++ })
	if l.poller != nil && raw != nil && rd.Buffered() == 0 {
		r := &polledReader{l: l, conn: conn, raw: raw, scan: resp.FrameScanner{Limits: resp.DefaultLimits}}
		if stop, err := l.poller.Poll(raw, r.readable); err == nil {
			l.stopPoll = stop
			return
		}
	}
	go l.readLoop(conn, rd)
}

// Replies are read into arenas of arenaSize bytes, carved one reply after
// the other, instead of one allocation (and a regrowth for a large value)
// per reply: under load that was the reader's main cost. A reply keeps its
// arena alive while its owner holds it.
const (
	arenaSize    = 64 << 10
	arenaMinFree = 4 << 10 // below this, start a new arena
)

func (l *Link) readLoop(conn net.Conn, rd *resp.Reader) {
	var arena []byte
	for {
		if cap(arena)-len(arena) < arenaMinFree {
			arena = make([]byte, 0, arenaSize)
		}
		raw, err := rd.ReadRaw(arena[len(arena):])
		if len(raw) > 0 && cap(arena) > len(arena) && &raw[0] == &arena[:len(arena)+1][len(arena)] {
			arena = arena[:len(arena)+len(raw)] // carved from the arena
		}
		if !l.deliver(conn, raw[:len(raw):len(raw)], err) { // an append by its owner must not reach the next reply
			return
		}
	}
}

// A polledReader reads one connection's replies on the link's poller, when
// the poller finds bytes on the socket: one read each time, into an arena
// the replies are cut from where they lie.
type polledReader struct {
	l     *Link
	conn  net.Conn
	raw   *rawio.Conn
	arena []byte // what was read; the bytes from at on are a reply not yet whole
	at    int
	scan  resp.FrameScanner // where the reply at at ends
}

func (r *polledReader) readable() {
	if cap(r.arena)-len(r.arena) < arenaMinFree {
		// A new arena, where the reply not yet whole moves: the replies
		// given out keep the old one.
		partial := r.arena[r.at:]
		r.arena = append(make([]byte, 0, max(arenaSize, 2*len(partial))), partial...)
		r.at = 0
	}
	k, err := r.raw.TryRead(r.arena[len(r.arena):cap(r.arena)])
	if err != nil {
		r.l.deliver(r.conn, nil, err)
		return
	}
	r.arena = r.arena[:len(r.arena)+k]
	for r.at < len(r.arena) {
		n, err := r.scan.Scan(r.arena[r.at:])
		if err != nil {
			r.l.deliver(r.conn, nil, err)
			return
		}
		if n == 0 {
			return // the rest of the reply is still to come
		}
		raw := r.arena[r.at : r.at+n : r.at+n]
		r.at += n
		if !r.l.deliver(r.conn, raw, nil) {
			return
		}
	}
}

// deliver hands raw, the next reply read on conn, to its request, or fails
// the link with err, the read's error. It reports false when conn is no
// longer the link's, and its reader ends.
func (l *Link) deliver(conn net.Conn, raw []byte, err error) bool {
	l.mu.Lock()
	if l.conn != conn { // this connection was already failed and replaced
		l.mu.Unlock()
		return false
	}
	if err != nil {
		l.stats.record(func(s *linkStats) { s.drops++ })
		notify := l.failLocked(fmt.Errorf("%s %s: %w: %v", l.name, l.addr, ErrDown, err))
		l.mu.Unlock()
		notify()
		return false
	}
	if l.pending.Len() == 0 {
		notify := l.failLocked(fmt.Errorf("%s: reply without a request", l.name))
		l.mu.Unlock()
		notify()
		return false
	}
	if first := &l.pending.All()[0]; first.skip > 0 {
		first.skip--
		l.mu.Unlock()
		return true
	}
	c := l.pending.All()[0]
	l.pending.Drop(1) // its callback goes with it
	l.mu.Unlock()
	c.done(raw, nil)
	return true
}

// failLocked closes the connection and detaches every request in flight:
// with in-order replies there is no way to skip one lost answer. The caller
// runs the returned function after unlocking, because a failed request's
// callback may fail over to another link.
func (l *Link) failLocked(err error) (notify func()) {
	if l.stopPoll != nil {
		l.stopPoll()
		l.stopPoll = nil
	}
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
	l.out = l.out[:0] // its requests fail below; none may reach a new connection
	pending := l.pending
	l.pending = fifo.Queue[call]{}
	return func() {
		for _, c := range pending.All() {
			c.done(nil, err)
		}
	}
}

// dueTickLocked is the deadline of a request queued now, in watchdog ticks:
// the first tick at least the timeout away, whatever the current tick's
// phase. Counting ticks rather than reading the clock keeps a clock read
// off every request; a tick the watchdog misses (a busy machine) only
// makes a deadline later, never earlier.
func (l *Link) dueTickLocked() uint64 {
	return l.ticks + uint64((l.timeout+l.tick-1)/l.tick) + 1
}

// watchdog fails the link when its oldest request is past its deadline, so a
// stopped or partitioned server costs at most one timeout (and a tick).
func (l *Link) watchdog() {
	tick := time.NewTicker(l.tick)
	defer tick.Stop()
	for range tick.C {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return
		}
		l.ticks++
		notify, changed := func() {}, func() {}
		if l.pending.Len() > 0 && l.ticks >= l.pending.All()[0].dueTick {
			l.stats.record(func(s *linkStats) { s.timeouts++ })
			notify = l.failLocked(&TimeoutError{link: l.name, addr: l.addr, after: l.timeout})
			// Do not dial again at once: the server is there but not answering.
			l.markDownLocked()
			l.lastErr = fmt.Errorf("timeout: no answer within %v", l.timeout)
			changed = l.reachableLocked(false, l.lastErr)
		}
		l.mu.Unlock()
		notify()
		changed()
	}
}

func (l *Link) Close() {
	l.mu.Lock()
	if !l.closed {
		close(l.done)
	}
	l.closed = true
	notify := l.failLocked(fmt.Errorf("%s: %w: node shutting down", l.name, ErrDown))
	l.mu.Unlock()
	notify()
}

// Stats are a link's connection counters.
type Stats struct {
	Connects    int64
	Failures    int64 // connections that could not be made
	Timeouts    int64 // connections failed because a request timed out
	Drops       int64 // connections lost to a read or write error (the server closed it, or died)
	LastFailure string
}

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	l.stats.mu.Lock()
	defer l.stats.mu.Unlock()
	return Stats{Connects: l.stats.connects, Failures: l.stats.failures, Timeouts: l.stats.timeouts, Drops: l.stats.drops,
		LastFailure: l.stats.lastFailure}
}

// Name and Addr say what the link connects to.
func (l *Link) Name() string { return l.name }

// Addr is the address the link dials.
func (l *Link) Addr() string { return l.addr }

func (s *linkStats) record(f func(*linkStats)) {
	s.mu.Lock()
	f(s)
	s.mu.Unlock()
}

type TimeoutError struct {
	link, addr string
	after      time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s %s: timeout: no answer within %v", e.link, e.addr, e.after)
}

func IsTimeout(err error) bool {
	var te *TimeoutError
	return errors.As(err, &te)
}
