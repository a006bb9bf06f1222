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
}

// Plain is a pooled, pipelined client for plain RESP servers: redis-server,
// nutcracker, or troop nodes used without token awareness. It does not
// retry. It is safe for concurrent use.
type Plain struct {
	conns      []*conn // address by address, ConnsPerAddr each
	roundRobin bool
	rr         atomic.Uint32
	closed     atomic.Bool
}

// NewPlain makes a client for the servers at addrs. It connects lazily.
func NewPlain(addrs []string, opts PlainOptions) (*Plain, error) {
	if len(addrs) == 0 {
		return nil, errors.New("client: no addresses")
	}
	if opts.ConnsPerAddr == 0 {
		opts.ConnsPerAddr = 1
	}
	if opts.ConnsPerAddr < 0 {
		return nil, fmt.Errorf("client: %d connections per address: must be at least 1", opts.ConnsPerAddr)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("client: timeout %v: must be positive", opts.Timeout)
	}
	p := &Plain{roundRobin: opts.RoundRobin}
	for _, a := range addrs {
		if a == "" {
			return nil, errors.New("client: empty address")
		}
		for range opts.ConnsPerAddr {
			p.conns = append(p.conns, &conn{l: link.New("server", a, opts.Timeout, nil)})
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

// Close closes every connection; requests in flight fail.
func (p *Plain) Close() error {
	p.closed.Store(true)
	closeAll(p.conns)
	return nil
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
