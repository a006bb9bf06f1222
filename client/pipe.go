package client

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
)

// Pipe is one goroutine's own connections to plain RESP servers, one per
// address, driven synchronously: Send queues commands, Exchange writes them
// out and reads their replies itself, on the caller's goroutine, as a
// blocking redis-benchmark client does. There is no reader goroutine and no
// callback, so a pipeline costs a write and a read per connection and no
// hand-over between goroutines; the price is that a Pipe serves one
// goroutine at a time and waits for its replies. With several addresses a
// command's key picks the address, as in Plain. It does not retry.
type Pipe struct {
	conns   []*pipeConn
	timeout time.Duration
	dial    Dial
	setup   link.Handshake // AUTH, SELECT on each new connection; nil: none
	closed  bool
	owner   []int32 // per queued command, its connection; -1: refused at Send
	refused []error // per queued command refused at Send, its error
}

// pipeConn is one connection of a Pipe, dialled on first use and again
// after it failed.
type pipeConn struct {
	addr     string
	nc       net.Conn
	rd       *resp.Reader
	stamp    stampedReader
	out      []byte    // encoded requests not yet written
	queued   int       // commands in out
	replies  []byte    // this exchange's reply frames, one after the other
	failed   error     // why nc is nil in this exchange
	deadline time.Time // nc's read and write deadline
}

// deadlineSlack is the timeout's fraction an exchange may run past it.
const deadlineSlack = 8

// stampedReader notes when each read from the connection returned data, so a
// reply's time is when its last byte was read off the socket.
type stampedReader struct {
	nc net.Conn
	at time.Time
}

func (s *stampedReader) Read(b []byte) (int, error) {
	n, err := s.nc.Read(b)
	if n > 0 {
		s.at = time.Now()
	}
	return n, err
}

// Reply is one command's outcome in an Exchange: its raw reply frame (an
// error reply is a frame, with a nil Err), or the error that stopped it,
// and when it was read.
type Reply struct {
	Raw []byte
	Err error
	At  time.Time
}

// NewPipe makes a Pipe to the servers at addrs, reached as d says. It
// connects on first use. timeout bounds each exchange, and the connect (at
// most 2 s of it); 0 means 5 s.
func NewPipe(addrs []string, timeout time.Duration, d Dial) (*Pipe, error) {
	if len(addrs) == 0 {
		return nil, errors.New("client: no addresses")
	}
	conns := 1
	if err := connDefaults(&conns, &timeout, "address"); err != nil {
		return nil, err
	}
	p := &Pipe{timeout: timeout, dial: d, setup: handshake(d.setup("", ""))}
	for _, a := range addrs {
		if a == "" {
			return nil, errors.New("client: empty address")
		}
		p.conns = append(p.conns, &pipeConn{addr: a})
	}
	return p, nil
}

// Send queues one command for the next Exchange. args may be reused as soon
// as it returns.
func (p *Pipe) Send(args [][]byte) {
	var err error
	switch {
	case len(args) == 0:
		err = errors.New("client: empty command")
	case p.closed:
		err = ErrClosed
	}
	if err != nil {
		p.owner = append(p.owner, -1)
		p.refused = append(p.refused, err)
		return
	}
	i := p.pick(args)
	c := p.conns[i]
	c.out = resp.AppendCommand(c.out, args...)
	c.queued++
	p.owner = append(p.owner, int32(i))
}

// pick chooses the address by the command's key; keyless commands go to
// the first.
func (p *Pipe) pick(args [][]byte) int {
	if len(p.conns) == 1 {
		return 0
	}
	if key, ok := commandKey(args); ok {
		return int(ring.Hash(key) % uint32(len(p.conns)))
	}
	return 0
}

// Exchange writes every command queued since the last Exchange, one write
// per connection, then reads their replies, and appends one Reply per
// command to dst, in the order of Send. Raw frames stay valid until the next
// Exchange. A connection that fails (cannot be dialled, breaks, or gives no
// reply within the timeout: an exchange may run up to an eighth longer) is
// closed, every command on it still waiting gets the error, and the next
// Exchange dials again. Errors name the address and wrap link.ErrDown, or
// match os.ErrDeadlineExceeded for a timeout (*TimeoutError).
func (p *Pipe) Exchange(dst []Reply) []Reply {
	if len(p.owner) == 0 {
		return dst
	}
	base := len(dst)
	for range p.owner {
		dst = append(dst, Reply{})
	}
	out := dst[base:]
	refused := 0
	for k, o := range p.owner {
		if o < 0 {
			out[k].Err = p.refused[refused]
			refused++
		}
	}
	var now time.Time
	for _, c := range p.conns {
		if c.queued == 0 {
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		c.write(now, p.timeout, p.dial, p.setup)
	}
	for i, c := range p.conns {
		if c.queued == 0 {
			continue
		}
		c.replies = c.replies[:0]
		for k, o := range p.owner {
			if int(o) == i {
				out[k] = c.read(p.timeout)
			}
		}
		c.out, c.queued = c.out[:0], 0
	}
	p.owner, p.refused = p.owner[:0], p.refused[:0]
	return dst
}

// write dials if needed and writes the queued requests of an exchange
// that began at now. A failure is kept in c.nc == nil and reported by read,
// one error per command.
func (c *pipeConn) write(now time.Time, timeout time.Duration, d Dial, setup link.Handshake) {
	if c.nc == nil {
		connectTimeout := min(timeout, 2*time.Second)
		nc, err := d.dialConn(c.addr, connectTimeout)
		if err != nil {
			var op *net.OpError
			if errors.As(err, &op) { // "connection refused" says it all; the address is in our message
				err = op.Err
			}
			c.fail(fmt.Errorf("server %s: %w: %v", c.addr, link.ErrDown, err))
			return
		}
		c.nc = nc
		c.stamp = stampedReader{nc: nc}
		c.rd = resp.NewReader(&c.stamp, resp.DefaultLimits)
		c.deadline = time.Time{}
		if setup != nil {
			nc.SetDeadline(time.Now().Add(connectTimeout))
			if err := setup(nc, c.rd); err != nil {
				c.fail(fmt.Errorf("server %s: %w: %v", c.addr, link.ErrDown, err))
				return
			}
		}
	}
	// The connection's deadline moves only when it is less than a timeout
	// away, and then to a timeout and a slack away: an exchange fails
	// between one timeout and one timeout and a slack after it began, and
	// setting a deadline (two runtime timers) is paid once per slack rather
	// than once per exchange.
	if c.deadline.Before(now.Add(timeout)) {
		c.deadline = now.Add(timeout + timeout/deadlineSlack)
		c.nc.SetDeadline(c.deadline)
	}
	if _, err := c.nc.Write(c.out); err != nil {
		c.fail(c.wrap("write", err, timeout))
	}
}

// fail closes the connection; err is what every command still waiting on
// it gets in this exchange.
func (c *pipeConn) fail(err error) {
	if c.nc != nil {
		c.nc.Close()
		c.nc = nil
	}
	c.failed = err
}

// read reads the next reply of this exchange.
func (c *pipeConn) read(timeout time.Duration) Reply {
	if c.nc == nil {
		return Reply{Err: c.failed, At: time.Now()}
	}
	start := len(c.replies)
	var err error
	c.replies, err = c.rd.ReadRaw(c.replies)
	if err != nil {
		c.fail(c.wrap("read", err, timeout))
		return Reply{Err: c.failed, At: time.Now()}
	}
	return Reply{Raw: c.replies[start:len(c.replies):len(c.replies)], At: c.stamp.at}
}

func (c *pipeConn) wrap(op string, err error, timeout time.Duration) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &TimeoutError{Addr: c.addr, After: timeout}
	}
	return fmt.Errorf("server %s: %w: %s: %v", c.addr, link.ErrDown, op, err)
}

// TimeoutError is a Pipe's request that got no reply within the timeout. It
// matches os.ErrDeadlineExceeded in errors.Is.
type TimeoutError struct {
	Addr  string
	After time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("server %s: timeout: no answer within %v", e.Addr, e.After)
}

func (e *TimeoutError) Is(target error) bool { return target == os.ErrDeadlineExceeded }

// Ping sends PING to every address, within the timeout, and returns the
// first failure, which names the address.
func (p *Pipe) Ping() error {
	if p.closed {
		return ErrClosed
	}
	ping := [][]byte{[]byte("PING")}
	for i, c := range p.conns {
		c.out = resp.AppendCommand(c.out, ping...)
		c.queued++
		p.owner = append(p.owner, int32(i))
	}
	for i, r := range p.Exchange(nil) {
		if r.Err != nil {
			return r.Err
		}
		if len(r.Raw) > 0 && (r.Raw[0] == '-' || r.Raw[0] == '!') {
			return fmt.Errorf("server %s: %w", p.conns[i].addr, &ReplyError{Msg: replyMessage(r.Raw)})
		}
	}
	return nil
}

// Close closes the connections; later commands fail with ErrClosed.
func (p *Pipe) Close() error {
	p.closed = true
	for _, c := range p.conns {
		if c.nc != nil {
			c.nc.Close()
			c.nc = nil
		}
	}
	return nil
}
