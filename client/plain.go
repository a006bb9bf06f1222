package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/ring"
)

// PlainOptions configure a Plain client. Zero values take the defaults.
type PlainOptions struct {
	// ConnsPerAddr is the number of connections to each address. Default 1.
	ConnsPerAddr int
	// Timeout bounds each request, and the connect (at most 2 s of it).
	// Default 5 s.
	Timeout time.Duration
	// RoundRobin spreads commands over the connections in turn. By default
	// a command goes to the connection its key hashes to, so one key's
	// requests stay in order (and, over several nutcracker or redis
	// addresses, one key always meets the same server).
	RoundRobin bool
	// ReadLevel and WriteLevel, if set, are sent to troop nodes on every
	// new connection, as Options' are.
	ReadLevel, WriteLevel string
	// Dial authenticates and selects a database on every new connection,
	// and dials TLS when its TLS is set.
	Dial Dial
}

// Plain is a pooled, pipelined client for plain RESP servers: redis-server,
// nutcracker, or troop nodes used without token awareness. It does not
// retry. It is safe for concurrent use.
type Plain struct {
	conns      []*conn // address by address, ConnsPerAddr each
	perAddr    int
	roundRobin bool
	rr         atomic.Uint32
	closed     atomic.Bool
	view       bool // a Pinned view: the connections belong to another Plain
}

// connDefaults fills in and checks the connection options both clients
// share: connections per node or address (default 1) and the timeout
// (default 5 s).
func connDefaults(conns *int, timeout *time.Duration, per string) error {
	if *conns == 0 {
		*conns = 1
	}
	if *conns < 0 {
		return fmt.Errorf("client: %d connections per %s: must be at least 1", *conns, per)
	}
	if *timeout == 0 {
		*timeout = 5 * time.Second
	}
	if *timeout < 0 {
		return fmt.Errorf("client: timeout %v: must be positive", *timeout)
	}
	return nil
}

// NewPlain makes a client for the servers at addrs. It connects lazily.
func NewPlain(addrs []string, opts PlainOptions) (*Plain, error) {
	if len(addrs) == 0 {
		return nil, errors.New("client: no addresses")
	}
	if err := connDefaults(&opts.ConnsPerAddr, &opts.Timeout, "address"); err != nil {
		return nil, err
	}
	p := &Plain{roundRobin: opts.RoundRobin, perAddr: opts.ConnsPerAddr}
	handshake := handshake(opts.Dial.setup(opts.ReadLevel, opts.WriteLevel))
	for _, a := range addrs {
		if a == "" {
			return nil, errors.New("client: empty address")
		}
		for range opts.ConnsPerAddr {
			p.conns = append(p.conns, &conn{l: link.NewDial("server", a, opts.Timeout, opts.Dial.Dialer(), handshake)})
		}
	}
	return p, nil
}

// Send queues one command and calls done with its reply frame or error, as
// Cluster.Send does. The command is not on the wire until the next Flush.
func (p *Plain) Send(args [][]byte, done func(raw []byte, err error)) { p.send(args, done) }

// Flush writes out every command queued by Send, one write per connection
// that has any.
func (p *Plain) Flush() { flushAll(p.conns) }

// Do runs one command and waits for its reply, or for ctx. An error reply
// is returned as a *ReplyError along with the raw frame.
func (p *Plain) Do(ctx context.Context, args ...[]byte) ([]byte, error) {
	return do(ctx, args, p.send)
}

// Close closes every connection; requests in flight fail. Closing a Pinned
// view only stops the view: the connections stay with the client.
func (p *Plain) Close() error {
	p.closed.Store(true)
	if !p.view {
		closeAll(p.conns)
	}
	return nil
}

// Pinned returns a view of p that sends everything for an address over one
// of that address's connections, the n-th (modulo ConnsPerAddr); with several
// addresses a command's key picks the address. A goroutine that keeps to its
// own view has its pipeline leave in one write on its own connection, as a
// redis-benchmark client's does. The view shares p's connections.
func (p *Plain) Pinned(n int) *Plain {
	v := &Plain{perAddr: 1, view: true}
	for a := 0; a < len(p.conns)/p.perAddr; a++ {
		v.conns = append(v.conns, p.conns[a*p.perAddr+n%p.perAddr])
	}
	return v
}

// Ping sends PING on every connection and returns the first failure, which
// names the address: a wrong address fails within the connect timeout.
func (p *Plain) Ping(ctx context.Context) error {
	errs := make(chan error, len(p.conns))
	for _, c := range p.conns {
		c := c
		go func() {
			_, err := do(ctx, [][]byte{[]byte("PING")}, func(args [][]byte, done func([]byte, error)) *conn {
				sendEncoded(c, args, done)
				return c
			})
			if err != nil && !errors.Is(err, link.ErrDown) && !link.IsTimeout(err) { // those name the address already
				err = fmt.Errorf("%s: %w", c.l.Addr(), err)
			}
			errs <- err
		}()
	}
	var first error
	for range p.conns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (p *Plain) send(args [][]byte, done func([]byte, error)) *conn {
	if len(args) == 0 {
		done(nil, errors.New("client: empty command"))
		return nil
	}
	if p.closed.Load() {
		done(nil, ErrClosed)
		return nil
	}
	cn := p.pick(args)
	sendEncoded(cn, args, done)
	return cn
}

// pick chooses the connection: by key hash, or in turn for keyless
// commands and in round-robin mode.
func (p *Plain) pick(args [][]byte) *conn {
	n := uint32(len(p.conns))
	if n == 1 {
		return p.conns[0]
	}
	if !p.roundRobin {
		if key, ok := commandKey(args); ok {
			return p.conns[ring.Hash(key)%n]
		}
	}
	return p.conns[p.rr.Add(1)%n]
}
