package node

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/internal/rawio"
	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// A slot holds the reply to one request of a connection. Replies may
// complete in any order (different replicas answer at different speeds), but
// a connection's writer takes slots in request order, so pipelined clients
// get their replies in order.
type slot struct {
	ch chan []byte // the reply, for a connection with a writer goroutine
	// The connection on an event loop the reply goes to, instead of ch;
	// the read its request came in, and the reply once it is ready.
	owner *loopConn
	burst uint32
	reply []byte
	ready bool
	// What to release on completion; nil for replies given at once.
	conn *connLimit
	node *atomic.Int64
	mem  *memBudget
	cost int64 // the request's bytes counted in mem (memory.go)
	// reply's bytes counted in mem until the writer has them
	replyCost int64
	// conv maps the reply for the client (RESP3, resp3.go); nil for none.
	conv func([]byte) []byte
	// Where an error reply is counted (nil for nowhere: not a client's
	// request), and under which command id (noCommand for none).
	replies *replyStats
	cmd     int
	// quiet drops the reply once counted: CLIENT REPLY OFF or SKIP.
	quiet bool
	// Where the request's latency goes on completion (nil for nowhere),
	// when it arrived, and what kind of request it was.
	timing  *stats
	started time.Time
	write   bool
	level   consistency.Level
	// done is s.timedComplete as a func value, made once per pooled slot:
	// a method value or closure made per request is an allocation.
	done replyFunc
}

// slotPool holds *slot. Its New is set by init: a slot's methods put slots
// back in the pool, and Go refuses that cycle in an initializer.
var slotPool sync.Pool

func init() {
	slotPool.New = func() any {
		s := &slot{ch: make(chan []byte, 1)}
		s.done = s.timedComplete
		return s
	}
}

func newSlot() *slot {
	s := slotPool.Get().(*slot)
	s.conn, s.node, s.mem, s.conv, s.timing, s.replies = nil, nil, nil, nil, nil, nil
	s.owner, s.reply, s.ready, s.quiet = nil, nil, false, false
	return s
}

// measure has s.done record the request's latency in st, from started.
func (s *slot) measure(st *stats, write bool, level consistency.Level, started time.Time) {
	s.timing, s.write, s.level, s.started = st, write, level, started
}

// timedComplete records the request's latency and outcome, when timed, and
// completes s.
func (s *slot) timedComplete(reply []byte) {
	if s.timing != nil {
		s.timing.record(s.write, s.level, time.Since(s.started), len(reply) > 0 && reply[0] == '-')
	}
	s.complete(reply)
}

// complete hands the reply over; it never blocks and is called once.
func (s *slot) complete(reply []byte) {
	if hidesScript(reply) { // troop's scripts are its business, not the client's
		reply = resp.AppendError(nil, cleanScriptError(reply))
	}
	if s.replies != nil && len(reply) > 0 && reply[0] == '-' {
		s.replies.errorReply(s.cmd, reply)
	}
	if s.quiet {
		reply = nil
	} else if s.conv != nil {
		reply = s.conv(reply)
	}
	if s.mem != nil {
		s.replyCost = int64(len(reply))
		s.mem.add(s.replyCost)
	}
	if s.conn != nil {
		s.conn.release()
		s.node.Add(-1)
		s.mem.give(s.cost)
	}
	if s.owner != nil {
		s.owner.completed(s, reply)
		return
	}
	s.ch <- reply
}

// hold keeps the request's place in its connection's and the node's bounds
// on requests in flight past its reply, until the hold's last part is done:
// a write at DC_ONE answers once this rack's replica has it, and the other
// racks get it after. Without the hold, a deep pipeline would queue writes
// for a slower peer without bound, until they waited past the link's
// timeout. The hold starts with one part, the request's handling, which
// the caller lets go once it has handed the request on.
func (s *slot) hold() *hold {
	h := &hold{conn: s.conn, node: s.node, mem: s.mem, cost: s.cost}
	s.conn, s.node = nil, nil // complete no longer releases them
	h.parts.Store(1)
	return h
}

// A hold counts the parts of a request still under way: replica writes
// sent and not yet answered, and the handling itself.
type hold struct {
	parts atomic.Int32
	conn  *connLimit // nil for a request that took no token
	node  *atomic.Int64
	mem   *memBudget
	cost  int64
}

// add counts k more parts; a nil hold counts nothing.
func (h *hold) add(k int) {
	if h != nil {
		h.parts.Add(int32(k))
	}
}

// done ends one part; the last gives the request's token back.
func (h *hold) done() {
	if h != nil && h.parts.Add(-1) == 0 && h.conn != nil {
		h.conn.release()
		h.node.Add(-1)
		h.mem.give(h.cost)
	}
}

// connLimit bounds a connection's requests in flight: a token per request,
// taken by the reader before it handles one and given back when the reply is
// ready, or for a write once every replica answered (hold). A reader that finds none left stops reading, so TCP pushes back on
// the client, as Redis and twemproxy do, instead of refusing it.
type connLimit struct{ tokens chan struct{} }

func newConnLimit(max int) *connLimit { return &connLimit{tokens: make(chan struct{}, max)} }

// acquire takes a token, flushing the connection's batch before it waits:
// the requests whose replies would free one may still be in it.
func (l *connLimit) acquire(b *batch) {
	select {
	case l.tokens <- struct{}{}:
		return
	default:
	}
	b.beforeWait()
	l.tokens <- struct{}{}
}

func (l *connLimit) release() { <-l.tokens }

// session is the per-connection state a handler may change.
type session struct {
	readLevel, writeLevel consistency.Level
	quit                  bool
	fit                   *connFit      // nil until TROOP FIT or TROOP LINEAGE ON
	gate                  keyGate       // keeps the connection's requests on a key in order
	tx                    *txn          // between MULTI and EXEC or DISCARD
	watches               []*watch      // since the last EXEC, DISCARD or UNWATCH
	name                  string        // CLIENT SETNAME
	proto                 int           // RESP version (HELLO); 0 is 2
	user                  *authUser     // who the connection authenticated as; nil before AUTH (auth.go)
	remote                string        // the client's address, without the port: failed AUTHs are limited by it
	closed                chan struct{} // closed when the connection is: blocked commands stop waiting
	client                *clientConn   // as other connections see it; nil for a peer's
	subscriptions         int           // channels, patterns and shard channels subscribed (pubsub.go)
	replyMode             replyMode     // CLIENT REPLY (clients.go)
}

// requestHandler answers one request, now or later, by completing its slot;
// it queues datastore and peer traffic on b, which the connection flushes
// once the client's pipeline is drained.
type requestHandler func(cmd resp.Command, s *slot, sess *session, b *batch)

// serveConn runs a connection: a reader that parses requests and hands them
// to handle, and a writer that sends replies back in order. At most
// maxInflight requests of one connection are in progress; past that the
// reader stops reading until replies are ready, so a deep pipeline is slowed,
// never refused. The reply queue is bounded too, so a client that does not
// read its replies stops being read from: memory stays bounded. Only when
// the whole node has too many requests in flight does a request get -BUSY.
func (n *Node) serveConn(c net.Conn, maxInflight int, sess *session, handle requestHandler) {
	var rw io.ReadWriter = c
	if raw := rawio.Of(c); raw != nil {
		rw = raw // its calls wake no monitor thread (package rawio)
	}
	replies := make(chan *slot, maxInflight+64)
	// Pub/sub messages join the replies; one that finds the queue full
	// disconnects the client that does not read, as redis-server does.
	var pushMu sync.Mutex
	pushClosed := false
	if sess.client != nil {
		sess.client.attach(func() { c.Close() }, func(msg []byte) bool {
			pushMu.Lock()
			defer pushMu.Unlock()
			if pushClosed {
				return false
			}
			s := newSlot()
			s.ch <- msg
			select {
			case replies <- s:
				return true
			default:
				c.Close()
				return false
			}
		})
	}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		writeReplies(rw, c, replies)
	}()

	var in requestBuffer
	var b batch
	limit := newConnLimit(maxInflight)
	for !sess.quit {
		cmd, ok, err := in.next(n.limits)
		if err != nil {
			s := newSlot()
			s.complete(n.protocolError(err))
			queueReply(replies, s, &b)
			break
		}
		if !ok {
			b.flush() // the pipeline is drained: send what it queued
			k, err := rw.Read(in.space())
			if k > 0 {
				in.filled(k)
				b.readAt = time.Now()
				continue
			}
			if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				n.log.Debug("client connection", "remote", c.RemoteAddr().String(), "err", err)
			}
			break
		}
		limit.acquire(&b)
		s := newSlot()
		queueReply(replies, s, &b)
		n.start(cmd, s, limit, sess, handle, &b)
	}
	in.release()
	b.flush()
	if sess.closed != nil {
		close(sess.closed) // a blocked command's reply would hold the writer below
	}
	pushMu.Lock()
	pushClosed = true
	pushMu.Unlock()
	close(replies)
	<-writerDone
	c.Close()
}

// protocolError counts a request that broke the protocol and makes its
// reply, the connection's last.
func (n *Node) protocolError(err error) []byte {
	n.stats.protocolErrors.Add(1)
	return resp.AppendError(nil, "ERR "+err.Error())
}

// start hands a request, whose token and reply's place are taken, to
// handle, unless the node is too busy for it.
func (n *Node) start(cmd resp.Command, s *slot, limit *connLimit, sess *session, handle requestHandler, b *batch) {
	if busy := n.admit(s, limit, len(cmd.Raw)); busy != nil {
		limit.release()
		if sess.client != nil { // a client's call, refused before it ran
			if c := lookup(cmd.Args[0]); c != nil {
				n.stats.replies.reject(c.id, busy)
			} else {
				n.stats.replies.errorReply(noCommand, busy)
			}
		}
		s.complete(busy)
		return
	}
	handle(cmd, s, sess, b)
}

// queueReply puts s in the writer's queue, flushing the batch before it
// waits for room: the writer may be waiting for a reply to a request in it.
func queueReply(replies chan<- *slot, s *slot, b *batch) {
	select {
	case replies <- s:
		return
	default:
	}
	b.beforeWait()
	replies <- s
}

// writeReplies writes replies to out in order, flushing whenever the next
// reply is not ready yet, so a pipeline's replies leave in as few writes as
// possible. Its buffer goes back to the pool whenever no reply is queued.
// After a failed write it closes c and drops the rest.
func writeReplies(out io.Writer, c net.Conn, replies <-chan *slot) {
	w := replyWriter{w: out}
	for s := range replies {
		var reply []byte
		select {
		case reply = <-s.ch:
		default:
			w.flush()
			reply = <-s.ch
		}
		w.write(reply)
		if s.mem != nil {
			s.mem.give(s.replyCost)
		}
		slotPool.Put(s)
		if len(replies) == 0 {
			w.release()
		}
		if w.err != nil { // keep draining so completions never block
			c.Close()
		}
	}
	w.release()
}

// A batch collects the links a connection sent to while working through its
// pipeline, to flush each once at the end.
type batch struct {
	links []*link.Link
	// The event loop whose batch this is, and the connection whose
	// requests it is running; nil for a goroutine's own batch.
	loop *frontLoop
	conn *loopConn
	// readAt is when the bytes of the requests being run were read: their
	// latency counts from there. One clock read per read, not per request.
	readAt time.Time
}

// started is when the batch's current requests arrived; now without a
// batch, or before its first read.
func (b *batch) started() time.Time {
	if b == nil || b.readAt.IsZero() {
		return time.Now()
	}
	return b.readAt
}

// beforeWait is called before a connection's goroutine blocks for one of its
// requests. It flushes the batch, whose requests may be what it waits for.
// On an event loop, it first hands the loop to a new goroutine, so that
// the other connections are served meanwhile.
func (b *batch) beforeWait() {
	b.flush()
	if b.loop != nil {
		b.loop.handOff(b)
	}
}

func (b *batch) send(l *link.Link, req []byte, done func([]byte, error)) {
	b.sendAppend(l, func(dst []byte) []byte { return append(dst, req...) }, done)
}

// sendAppend is send of a request that appendReq encodes straight into l's
// buffer (link.TrySendAppend).
func (b *batch) sendAppend(l *link.Link, appendReq func(dst []byte) []byte, done func([]byte, error)) {
	if err := l.TrySendAppend(1, appendReq, done); err != nil {
		done(nil, err)
		return
	}
	b.add(l)
}

// add marks l, which has requests queued, for the batch's flush. Without a
// batch (a callback that a link's reply ran, say), FlushSoon has them
// written out by l's event loop at the end of its pass, or by l's flusher,
// together with whatever else is queued on l by then.
func (b *batch) add(l *link.Link) {
	if b == nil {
		l.FlushSoon()
		return
	}
	for _, x := range b.links {
		if x == l {
			return
		}
	}
	b.links = append(b.links, l)
}

func (b *batch) flush() {
	for _, l := range b.links {
		if b.loop != nil {
			// A server that stops reading (paused, cut off) fills the
			// socket, and a write would block the loop.
			l.FlushNoWait()
		} else {
			l.Flush()
		}
	}
	b.links = b.links[:0]
}
