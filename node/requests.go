package node

import (
	"sync"

	"github.com/troop-lab/troop/resp"
)

// requestBufSize is what a connection reads into at a time; a request
// longer than that grows its buffer to the request's size.
const requestBufSize = 16 << 10

var requestBufs = sync.Pool{New: func() any { b := make([]byte, 0, requestBufSize); return &b }}

// requestBuffer holds the bytes a client sent that the node has not run
// yet: at most the start of one request once the complete ones are taken.
// A connection with nothing held holds no buffer, so idle connections
// cost little.
type requestBuffer struct {
	buf  *[]byte // nil when nothing is held
	at   int     // where the unparsed bytes start
	need int     // the size of the request at at, when its header told
}

// space returns room to read into after what is held: enough for the
// request begun, if its size is known.
func (r *requestBuffer) space() []byte {
	if r.buf == nil {
		r.buf = requestBufs.Get().(*[]byte)
	}
	b := *r.buf
	if r.at > 0 { // move the start of a request to the front
		n := copy(b, b[r.at:])
		b, r.at = b[:n], 0
	}
	want := max(r.need, len(b)+requestBufSize/4)
	if want > cap(b) {
		nb := make([]byte, len(b), max(want, 2*cap(b)))
		copy(nb, b)
		b = nb
	}
	*r.buf = b
	return b[len(b):cap(b)]
}

// filled says n bytes were read into the space.
func (r *requestBuffer) filled(n int) { *r.buf = (*r.buf)[:len(*r.buf)+n] }

// next takes the next complete request; ok is false while the bytes held
// are only the start of one.
func (r *requestBuffer) next(lim resp.Limits) (cmd resp.Command, ok bool, err error) {
	if r.buf == nil {
		return resp.Command{}, false, nil
	}
	cmd, n, need, err := resp.ParseCommand((*r.buf)[r.at:], lim)
	if err != nil || n == 0 {
		r.need = need
		r.drop()
		return resp.Command{}, false, err
	}
	r.at += n
	r.need = 0
	r.drop()
	return cmd, true, nil
}

// drop gives the buffer back once nothing is held in it.
func (r *requestBuffer) drop() {
	if r.at < len(*r.buf) {
		return
	}
	if cap(*r.buf) == requestBufSize {
		*r.buf = (*r.buf)[:0]
		requestBufs.Put(r.buf)
	}
	r.buf, r.at = nil, 0
}

// release gives the buffer back, whatever it holds: the connection ends.
func (r *requestBuffer) release() {
	if r.buf != nil {
		r.at = len(*r.buf)
		r.drop()
	}
}
