// Package client talks to troop clusters the way Netflix's Dyno talks to
// Dynomite: it reads the topology, sends each key straight to the node that
// owns it in the client's own rack (token aware, rack aware), keeps a few
// persistent pipelined connections per node, and fails over to the key's
// owner in another rack when that node is down. Plain is the same API over
// plain RESP servers (redis-server, nutcracker) without any routing.
//
// Both are built for pipelining callers: Send queues a command, Flush pushes
// everything queued out, and the reply arrives in a callback. Do runs one
// command and waits.
package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/resp"
)

// ErrClosed is the error of a command sent after Close.
var ErrClosed = errors.New("client: closed")

// ReplyError is an error reply from the server, as Do returns it. It is an
// answer, not a failure: the client never retries it. Send's callbacks get
// error replies as raw frames with a nil error.
type ReplyError struct {
	Msg string // the reply without its '-', e.g. "ERR unknown command ..."
}

func (e *ReplyError) Error() string { return e.Msg }

// conn is one link and a mark that something was queued on it since the
// last flush, so that Flush writes only to the links a caller touched.
type conn struct {
	l     *link.Link
	dirty atomic.Bool
}

// send queues an encoded request. The mark is set after the request is
// queued: a Flush that clears it before then is followed by the sender's
// own Flush, which finds it set.
func (c *conn) send(req []byte, done func([]byte, error)) {
	c.l.Send(req, done)
	if !c.dirty.Load() { // skip the write to a shared cache line when already set
		c.dirty.Store(true)
	}
}

// flush writes out what was queued, if anything was. A link writes all it
// holds, so clearing the mark of another caller's requests is harmless:
// they leave with ours.
func (c *conn) flush() {
	if c.dirty.Swap(false) {
		c.l.Flush()
	}
}

func flushAll(conns []*conn) {
	for _, c := range conns {
		c.flush()
	}
}

func closeAll(conns []*conn) {
	for _, c := range conns {
		c.l.Close()
	}
}

// bufs recycles request encodings: a link copies a request into its own
// buffer, so the encoding is garbage once Send returns.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// sendEncoded encodes args into a recycled buffer and queues it on c.
func sendEncoded(c *conn, args [][]byte, done func([]byte, error)) {
	bp := bufs.Get().(*[]byte)
	*bp = resp.AppendCommand((*bp)[:0], args...)
	c.send(*bp, done)
	if cap(*bp) <= 64<<10 { // a huge one would pin its memory in the pool
		bufs.Put(bp)
	}
}

type result struct {
	raw []byte
	err error
}

// do runs one command through send (which returns the conn it queued on,
// or nil when it already answered), flushes that conn and waits for the
// reply or ctx. An error reply becomes a *ReplyError beside the raw frame.
func do(ctx context.Context, args [][]byte, send func([][]byte, func([]byte, error)) *conn) ([]byte, error) {
	if len(args) == 0 {
		return nil, errors.New("client: empty command")
	}
	ch := make(chan result, 1) // buffered: a reply after ctx ended must not block the link
	if c := send(args, func(raw []byte, err error) { ch <- result{raw, err} }); c != nil {
		c.flush()
	}
	select {
	case r := <-ch:
		if r.err == nil && len(r.raw) > 0 && (r.raw[0] == '-' || r.raw[0] == '!') {
			return r.raw, &ReplyError{Msg: replyMessage(r.raw)}
		}
		return r.raw, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", printable(args[0]), ctx.Err())
	}
}

// replyMessage extracts the text of an error frame.
func replyMessage(raw []byte) string {
	v, err := resp.Parse(raw)
	if err != nil {
		return string(raw)
	}
	return string(v.Str)
}

// printable shortens a command name for messages.
func printable(b []byte) string {
	if len(b) > 40 {
		b = b[:40]
	}
	q := strconv.Quote(string(b))
	return q[1 : len(q)-1]
}
