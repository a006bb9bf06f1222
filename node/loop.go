package node

import (
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/troop-lab/troop/internal/fifo"
	"github.com/troop-lab/troop/internal/rawio"
	"github.com/troop-lab/troop/link"
	"golang.org/x/sys/unix"
)

// The event loop serves plain TCP connections, of clients and of peers,
// the way twemproxy does: one goroutine waits on an epoll set, reads each
// ready connection once, and runs the requests it read. Go's own way, a
// goroutine per connection, costs a read that finds nothing after every
// request (its poller reads until EAGAIN) and a hand-off between
// goroutines per reply; at pipeline 1 that was a third more CPU per
// request than twemproxy's.
//
// The loop also reads the node's links to its redis-server and its peers
// (link.Poller), when they are plain TCP: the replies to the requests it
// sent come back to it, and their callbacks run on it, with no goroutine
// woken per burst of replies. Replies are written by whoever completes the
// last reply of a read's requests (the loop, mostly), with one writev, so a
// pipeline's replies leave together. A socket that takes less waits for
// EPOLLOUT, and the loop writes the rest.
//
// The loop never blocks for a connection. A request that has to wait (its
// connection has troop_max_inflight_per_conn requests in flight, or an
// earlier request on its key holds it: see keyGate) hands the loop to a new
// goroutine first (batch.beforeWait), and the goroutine that waits goes on
// with that connection alone until it has run what it read.
//
// TLS connections, whose records Go's crypto/tls reads, are served by a
// goroutine pair each (serveConn), as are the plain peer connections of a
// node with certificates, whose first byte was read to tell them from TLS.

// outHighWater is how many bytes of replies a connection may have waiting
// for its client to read them before the node stops reading its requests.
const outHighWater = 1 << 20

// maxIovecs bounds one writev; the rest waits for the next.
const maxIovecs = 512

// A frontLoop is one event loop with its connections.
type frontLoop struct {
	n    *Node
	file *os.File // the epoll set's descriptor
	// poll is the set as Go's poller sees it: the loop parks there as any
	// goroutine parks on a socket, and takes no thread while idle.
	poll syscall.RawConn

	// Only the goroutine running the loop touches these.
	events    []unix.EpollEvent
	ready     []unix.EpollEvent // events of the last wait not yet handled
	b         *batch            // links sent to since the last wait
	pollReady func(epfd uintptr) bool
	polled    int   // pollReady's events
	pollErr   error // and error

	mu     sync.Mutex
	conns  map[uint64]*loopConn
	links  map[uint64]func() // links the loop reads (Poll), by id, as conns
	lastID uint64
	closed bool
	// Between a wait and the next, the loop is in a pass, and the links
	// in flushes are flushed at its end (FlushAfterPass).
	inPass       bool
	flushes      []*link.Link
	flushesSpare []*link.Link // the loop's, outside mu
}

func newFrontLoop(n *Node) (*frontLoop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(epfd), "epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	l := &frontLoop{n: n, file: f, poll: rc, events: make([]unix.EpollEvent, 256), conns: map[uint64]*loopConn{}, links: map[uint64]func(){}}
	l.b = &batch{loop: l}
	// Made once, as poll.Read's argument: a closure per wait would cost
	// three allocations per wait.
	l.pollReady = func(epfd uintptr) bool {
		l.polled, l.pollErr = rawio.EpollPoll(int(epfd), l.events)
		if l.pollErr == unix.EINTR {
			l.pollErr = nil
			return false
		}
		return l.polled > 0 || l.pollErr != nil
	}
	go l.run()
	return l, nil
}

// close stops the loop and closes its connections.
func (l *frontLoop) close() {
	l.mu.Lock()
	l.closed = true
	conns := make([]*loopConn, 0, len(l.conns))
	for _, c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		c.failed = true // the replies still owed go nowhere
		c.endInputLocked()
		c.mu.Unlock()
	}
	l.file.Close() // the parked loop wakes with an error and ends
}

// ctl changes the epoll set, unless the loop has closed: through the
// poller's reference, so that the set's descriptor, closed and then reused
// by another, is never changed by mistake.
func (l *frontLoop) ctl(op, fd int, ev *unix.EpollEvent) error {
	err := net.ErrClosed
	if cerr := l.poll.Control(func(epfd uintptr) { err = unix.EpollCtl(int(epfd), op, fd, ev) }); cerr != nil {
		return cerr
	}
	return err
}

// serve takes c over from Go's poller and serves it on the loop: handle
// runs its requests, at most maxInflight at once, and closed runs once
// when it closes (nil for nothing).
func (l *frontLoop) serve(c *net.TCPConn, sess *session, handle requestHandler, maxInflight int, closed func()) error {
	c.SetNoDelay(true)
	rc, err := c.SyscallConn()
	fd := -1
	if err == nil {
		rc.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	}
	// The duplicate keeps the socket, and its O_NONBLOCK, which belongs to
	// the socket; Go's poller lets go of the original.
	c.Close()
	l.mu.Lock()
	if err == nil && l.closed {
		unix.Close(fd)
		err = net.ErrClosed
	}
	if err != nil {
		l.mu.Unlock()
		if closed != nil {
			closed()
		}
		close(sess.closed)
		return err
	}
	l.lastID++
	lc := &loopConn{loop: l, id: l.lastID, fd: fd, sess: sess, handle: handle, onClose: closed, limit: newConnLimit(maxInflight)}
	l.conns[lc.id] = lc
	l.mu.Unlock()
	if sess.client != nil {
		sess.client.attach(lc.kill, lc.push)
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.events = unix.EPOLLIN | unix.EPOLLRDHUP
	if err := l.ctl(unix.EPOLL_CTL_ADD, fd, lc.event(lc.events)); err != nil {
		lc.failed = true
		lc.endInputLocked()
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// Poll reads a link on the loop (link.Poller): readable runs on the loop
// each time conn's socket has bytes to read, level-triggered, until stop.
func (l *frontLoop) Poll(conn *rawio.Conn, readable func()) (stop func(), err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, net.ErrClosed
	}
	l.lastID++
	id := l.lastID
	l.links[id] = readable
	l.mu.Unlock()
	ev := epollEvent(id, unix.EPOLLIN|unix.EPOLLRDHUP)
	if cerr := conn.Control(func(fd uintptr) { err = l.ctl(unix.EPOLL_CTL_ADD, int(fd), ev) }); cerr != nil {
		err = cerr
	}
	stop = func() {
		l.mu.Lock()
		delete(l.links, id)
		l.mu.Unlock()
		// A socket closed already left the set as it closed.
		conn.Control(func(fd uintptr) { l.ctl(unix.EPOLL_CTL_DEL, int(fd), nil) })
	}
	if err != nil {
		stop()
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	return stop, nil
}

// run is the loop: it handles the events of a wait, then waits again. It
// returns when the loop closes, or when its goroutine had to wait for a
// request and handed the loop to a new one (batch.beforeWait).
func (l *frontLoop) run() {
	for {
		for len(l.ready) > 0 {
			ev := l.ready[0]
			l.ready = l.ready[1:]
			id := epollID(ev)
			l.mu.Lock()
			c := l.conns[id]
			var readable func()
			if c == nil {
				readable = l.links[id]
			}
			l.mu.Unlock()
			if c == nil {
				if readable != nil {
					readable()
				}
				continue // or closed since
			}
			switch {
			case ev.Events&(unix.EPOLLERR|unix.EPOLLHUP) != 0:
				c.hangUp()
				continue
			case ev.Events&unix.EPOLLOUT != 0:
				c.writable()
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP) != 0 && !l.readable(c) {
				return
			}
		}
		l.endPass()
		err := l.poll.Read(l.pollReady)
		if err != nil || l.pollErr != nil {
			return // closed
		}
		l.ready = l.events[:l.polled]
		l.mu.Lock()
		l.inPass = true
		l.mu.Unlock()
	}
}

// endPass flushes the links the loop's requests and callbacks queued
// requests on, before the loop waits again.
func (l *frontLoop) endPass() {
	l.b.flush()
	l.mu.Lock()
	l.inPass = false
	links := l.flushes
	l.flushes = l.flushesSpare[:0]
	l.mu.Unlock()
	for _, lk := range links {
		lk.FlushNoWait()
	}
	clear(links)
	l.flushesSpare = links[:0]
}

// FlushAfterPass has the loop flush lk before it waits again, when it is
// handling events now (link.Poller): the callbacks of a burst of replies
// then queue requests that leave with one write per link, with no flusher
// woken.
func (l *frontLoop) FlushAfterPass(lk *link.Link) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.inPass {
		return false
	}
	if !slices.Contains(l.flushes, lk) {
		l.flushes = append(l.flushes, lk)
	}
	return true
}

// readable reads what c's client sent, once, and runs the requests in it.
// It reports false when the goroutine stopped being the loop's on the way.
func (l *frontLoop) readable(c *loopConn) bool {
	c.mu.Lock()
	if c.inputDone || c.offLoop {
		c.mu.Unlock()
		return true
	}
	c.running = true // nor is c closed while the loop reads it
	c.burst++
	c.mu.Unlock()
	k, err := rawio.Read(c.fd, c.in.space())
	if k <= 0 {
		c.in.drop()
		c.mu.Lock()
		c.running = false
		if err != unix.EAGAIN && err != unix.EINTR {
			if err != nil && err != unix.ECONNRESET {
				l.n.log.Debug("client connection", "err", err)
			}
			c.endInputLocked() // end of stream: the replies owed still go out
		}
		c.collectLocked()
		c.mu.Unlock()
		return true
	}
	c.in.filled(k)
	b := l.b
	b.conn = c
	b.readAt = time.Now()
	return c.run(b)
}

// A loopConn is a client's or a peer's connection served by a loop.
type loopConn struct {
	loop    *frontLoop
	id      uint64
	fd      int
	sess    *session
	handle  requestHandler
	onClose func() // nil for nothing
	limit   *connLimit
	in      requestBuffer // the loop's, or the goroutine's that runs c's requests
	vec     rawio.Vec     // writeLocked's, under mu

	mu        sync.Mutex
	owed      fifo.Queue[*slot]  // replies not yet written, in request order
	out       fifo.Queue[[]byte] // replies ready to write, in order
	outBytes  int
	outBurst  uint32 // the read the last reply in out answers
	burst     uint32 // counts reads: a read's replies are written together
	running   bool   // a read's requests are being run: their replies wait for the last
	offLoop   bool   // a goroutine of its own runs c's requests: one had to wait
	inputDone bool   // end of stream, QUIT, a protocol error, a hang-up or shutdown
	waitOut   bool   // the socket took less than offered: EPOLLOUT is wanted
	failed    bool   // a write failed: replies are dropped
	closed    bool
	events    uint32 // what the epoll set watches for c
}

func (c *loopConn) event(events uint32) *unix.EpollEvent { return epollEvent(c.id, events) }

// epollEvent is an epoll registration for events that carries id, a
// connection's or a link's in the loop's maps, in its 64 bits of data
// (epollID reads it back): never the descriptor, which may be reused.
func epollEvent(id uint64, events uint32) *unix.EpollEvent {
	return &unix.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

func epollID(ev unix.EpollEvent) uint64 { return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32 }

// run runs the requests held in c.in, on the loop or, after a request had
// to wait, on the goroutine that waited. It reports whether it is still
// the loop's goroutine.
func (c *loopConn) run(b *batch) (onLoop bool) {
	n := c.loop.n
	ended := false // a protocol error or QUIT: nothing more is read
	for !ended {
		cmd, ok, err := c.in.next(n.limits)
		if err != nil {
			s := newSlot()
			c.owe(s)
			s.complete(n.protocolError(err))
			ended = true
			break
		}
		if !ok {
			break
		}
		c.limit.acquire(b)
		s := newSlot()
		c.owe(s)
		n.start(cmd, s, c.limit, c.sess, c.handle, b)
		ended = c.sess.quit
	}
	if ended {
		c.in.release()
	}
	onLoop = b.loop != nil
	if !onLoop {
		b.flush()
	}
	c.mu.Lock()
	c.running = false
	if !onLoop {
		c.offLoop = false
		c.rearmLocked()
	}
	if ended {
		c.endInputLocked()
	}
	c.collectLocked()
	c.mu.Unlock()
	return onLoop
}

// owe queues s as c's next reply.
func (c *loopConn) owe(s *slot) {
	s.owner = c
	c.mu.Lock()
	s.burst = c.burst
	c.owed.Push(s)
	c.mu.Unlock()
}

// completed takes s's reply; the writer is whoever completes the last reply
// of a read's requests.
func (c *loopConn) completed(s *slot, reply []byte) {
	c.mu.Lock()
	s.reply, s.ready = reply, true
	c.collectLocked()
	c.mu.Unlock()
}

// collectLocked moves the replies ready at the head of c.owed to c.out, and
// writes them once the replies of a read are all there.
func (c *loopConn) collectLocked() {
	owed := c.owed.All()
	ready := 0
	for ready < len(owed) && owed[ready].ready {
		s := owed[ready]
		ready++
		if !c.failed && len(s.reply) > 0 { // none for a reply CLIENT REPLY drops: writeLocked drops an empty one only behind a longer one
			c.out.Push(s.reply)
			c.outBytes += len(s.reply)
			c.outBurst = s.burst
		}
		if s.mem != nil {
			s.mem.give(s.replyCost)
		}
		slotPool.Put(s)
	}
	c.owed.Drop(ready)
	if c.out.Len() > 0 && !c.running && !c.waitOut && (c.owed.Len() == 0 || c.owed.All()[0].burst != c.outBurst || c.outBytes >= replyBufSize) {
		c.writeLocked()
	}
	c.maybeCloseLocked()
}

// writeLocked writes c.out with as few writev calls as the socket takes;
// what it does not take waits for EPOLLOUT.
func (c *loopConn) writeLocked() {
	for c.out.Len() > 0 && !c.failed {
		out := c.out.All()
		iov := out[:min(len(out), maxIovecs)]
		k, err := c.vec.Writev(c.fd, iov)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			k = 0
		} else if err != nil {
			c.failed = true
			c.endInputLocked()
			break
		}
		c.outBytes -= k
		written := 0
		for k > 0 && k >= len(out[written]) {
			k -= len(out[written])
			written++
		}
		if k > 0 {
			out[written] = out[written][k:]
		}
		c.out.Drop(written)
		if err == unix.EAGAIN || (c.out.Len() > 0 && len(iov) < maxIovecs) {
			c.waitOut = true
			break
		}
	}
	if c.failed || c.out.Len() == 0 {
		c.out.Reset()
		c.outBytes, c.waitOut = 0, false
	}
	c.rearmLocked()
}

// writable: the socket takes more.
func (c *loopConn) writable() {
	c.mu.Lock()
	c.waitOut = false
	c.writeLocked()
	c.maybeCloseLocked()
	c.mu.Unlock()
}

// hangUp: the connection broke both ways, and nothing more can be read or
// written. The epoll set lets go of it, or it would report the hang-up
// again at every wait.
func (c *loopConn) hangUp() {
	c.mu.Lock()
	c.failed = true
	c.endInputLocked()
	c.mu.Unlock()
}

// maxPushBacklog bounds the bytes waiting to be written to a subscriber
// that does not read: past it, it is disconnected, as redis-server's
// client-output-buffer-limit for pubsub (32 MB) does.
const maxPushBacklog = 32 << 20

// push writes a pub/sub message to c, after the replies owed before it.
// False when c is closed, or so far behind that it is killed instead.
func (c *loopConn) push(msg []byte) bool {
	c.mu.Lock()
	if c.closed || c.inputDone {
		c.mu.Unlock()
		return false
	}
	if c.outBytes > maxPushBacklog {
		c.mu.Unlock()
		c.kill()
		return false
	}
	s := newSlot()
	s.owner, s.burst, s.reply, s.ready = c, c.burst, msg, true
	c.owed.Push(s)
	c.collectLocked()
	c.mu.Unlock()
	return true
}

// kill ends c (CLIENT KILL): the loop sees it hang up.
func (c *loopConn) kill() {
	c.mu.Lock()
	if !c.closed { // the descriptor is still c's
		unix.Shutdown(c.fd, unix.SHUT_RDWR)
	}
	c.mu.Unlock()
}

// endInputLocked stops reading c: what was read still runs, and its
// replies are written, and then c closes.
func (c *loopConn) endInputLocked() {
	if !c.inputDone {
		c.inputDone = true
		close(c.sess.closed) // a blocked command stops waiting
	}
	if c.failed {
		c.out.Reset()
		c.outBytes, c.waitOut = 0, false
	}
	c.rearmLocked()
	c.maybeCloseLocked()
}

// rearmLocked has the epoll set watch c for what it can do now.
func (c *loopConn) rearmLocked() {
	if c.closed {
		return
	}
	var want uint32
	if !c.inputDone && !c.offLoop && c.outBytes < outHighWater {
		want |= unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if c.waitOut {
		want |= unix.EPOLLOUT
	}
	if c.failed {
		want = 0
	}
	if want == c.events {
		return
	}
	op := unix.EPOLL_CTL_MOD
	if c.failed {
		op = unix.EPOLL_CTL_DEL
	}
	c.loop.ctl(op, c.fd, c.event(want))
	c.events = want
}

// maybeCloseLocked closes c once nothing is left to do for it.
func (c *loopConn) maybeCloseLocked() {
	if c.closed || !c.inputDone || c.offLoop || c.running || c.owed.Len() > 0 || c.out.Len() > 0 {
		return
	}
	c.closed = true
	l := c.loop
	l.mu.Lock()
	delete(l.conns, c.id)
	l.mu.Unlock()
	l.ctl(unix.EPOLL_CTL_DEL, c.fd, nil)
	unix.Close(c.fd)
	if c.onClose != nil {
		c.onClose()
	}
}

// handOff makes a new goroutine the loop's, with the events still to
// handle: the caller, about to wait for one of b.conn's requests, goes on
// with that connection alone.
func (l *frontLoop) handOff(b *batch) {
	c := b.conn
	c.mu.Lock()
	c.offLoop = true
	c.running = false // its replies go out as they come meanwhile
	c.rearmLocked()
	c.mu.Unlock()
	b.loop, b.conn = nil, nil
	l.b = &batch{loop: l}
	go l.run()
}
