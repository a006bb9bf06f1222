package link

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/rawio"
	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/resp"
	"golang.org/x/sys/unix"
)

// testPoller is a Poller over an epoll set of its own, waited on by one
// goroutine, as the node's event loop does.
type testPoller struct {
	epfd    int
	mu      sync.Mutex
	last    int32
	ready   map[int32]func()
	polling int // connections handed to Poll
	done    chan struct{}
}

func newTestPoller(t *testing.T) *testPoller {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPoller{epfd: epfd, ready: map[int32]func(){}, done: make(chan struct{})}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		events := make([]unix.EpollEvent, 16)
		for {
			select {
			case <-p.done:
				return
			default:
			}
			n, _ := unix.EpollWait(epfd, events, 10)
			for _, ev := range events[:max(n, 0)] {
				p.mu.Lock()
				f := p.ready[ev.Fd]
				p.mu.Unlock()
				if f != nil {
					f()
				}
			}
		}
	}()
	t.Cleanup(func() { close(p.done); <-stopped; unix.Close(epfd) })
	return p
}

func (p *testPoller) FlushAfterPass(*Link) bool { return false }

func (p *testPoller) Poll(conn *rawio.Conn, readable func()) (func(), error) {
	p.mu.Lock()
	p.last++
	id := p.last
	p.ready[id] = readable
	p.polling++
	p.mu.Unlock()
	var err error
	conn.Control(func(fd uintptr) {
		err = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &unix.EpollEvent{Events: unix.EPOLLIN, Fd: id})
	})
	return func() {
		p.mu.Lock()
		delete(p.ready, id)
		p.mu.Unlock()
		conn.Control(func(fd uintptr) { unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil) })
	}, err
}

// A link read by a poller gets its replies in order, whole and intact, of
// every size: one-byte ones many to a read, and values far past the
// poller's 64 KiB arena that take many reads. A reply stays as it was while
// later ones are read, and whatever its owner appends to it. After the server dies, the requests in flight fail,
// and the next connection is read by the poller too.
func TestLinkPolled(t *testing.T) {
	r := testredis.Start(t)
	p := newTestPoller(t)
	l := New("redis", r.Addr, patience, nil)
	l.PollWith(p)
	defer l.Close()
	sizes := []int{0, 1, 100, 4 << 10, 60 << 10, 64 << 10, 200 << 10, 3 << 20, 7}
	for i, size := range sizes {
		l.Send(resp.AppendCommandStrings(nil, "SET", fmt.Sprint("k", i), string(bytes.Repeat([]byte{byte('a' + i)}, size))), func([]byte, error) {})
	}
	const rounds = 20
	ch := make(chan result, rounds*len(sizes))
	for range rounds {
		for i := range sizes {
			l.Send(resp.AppendCommandStrings(nil, "GET", fmt.Sprint("k", i)), collect(ch))
		}
		l.Flush()
	}
	var kept []result
	for n := range rounds * len(sizes) {
		res := <-ch
		i := n % len(sizes)
		want := resp.AppendBulk(nil, bytes.Repeat([]byte{byte('a' + i)}, sizes[i]))
		if res.err != nil || !bytes.Equal(res.raw, want) {
			t.Fatalf("reply %d (%d bytes): %d bytes, %v", n, sizes[i], len(res.raw), res.err)
		}
		_ = append(res.raw, '!') // an owner's append must not reach the next reply
		kept = append(kept, res)
	}
	for n, res := range kept {
		i := n % len(sizes)
		if !bytes.Equal(res.raw, resp.AppendBulk(nil, bytes.Repeat([]byte{byte('a' + i)}, sizes[i]))) {
			t.Fatalf("reply %d changed after it was given out", n)
		}
	}

	r.Kill()
	l.Do(resp.AppendCommandStrings(nil, "GET", "k1"), collect(ch))
	if res := <-ch; res.err == nil {
		t.Fatalf("a request to a dead server got %q", res.raw)
	}
	r.Restart(t)
	var res result
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		l.Do(resp.AppendCommandStrings(nil, "PING"), collect(ch))
		if res = <-ch; res.err == nil {
			break
		}
	}
	if string(res.raw) != "+PONG\r\n" {
		t.Fatalf("after the restart: %q, %v", res.raw, res.err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.polling < 2 || len(p.ready) != 1 {
		t.Errorf("%d connections handed to the poller, %d read now; want 2 or more, and 1", p.polling, len(p.ready))
	}
}

// A server whose replies arrive a few bytes at a time, each write its own
// segment: the poller reads partial replies again and again, and the link
// still hands out each whole reply once, in order. The replies are of every
// kind a scanner must walk: nested aggregates, RESP3 maps and attributes,
// nulls and bulk strings.
func TestLinkPolledTrickle(t *testing.T) {
	replies := []string{
		"+OK\r\n",
		"$5\r\nhello\r\n",
		"*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n_\r\n",
		"%1\r\n+key\r\n|1\r\n+ttl\r\n:3\r\n#t\r\n",
		"-ERR wrong\r\n",
		"$" + fmt.Sprint(70<<10) + "\r\n" + string(bytes.Repeat([]byte("v"), 70<<10)) + "\r\n",
	}
	addr := oneConnServer(t, func(c net.Conn) {
		c.(*net.TCPConn).SetNoDelay(true)
		rd := resp.NewReader(c, resp.DefaultLimits)
		for i := 0; ; i++ {
			if _, err := rd.ReadRaw(nil); err != nil {
				return
			}
			out := []byte(replies[i%len(replies)])
			piece := 1 + i%3
			if len(out) > 4096 {
				piece = 4000 // a large reply in pieces, not byte by byte
			}
			for len(out) > 0 {
				k := min(len(out), piece, 1+len(out)%5+piece/2)
				if _, err := c.Write(out[:k]); err != nil {
					return
				}
				out = out[k:]
				time.Sleep(50 * time.Microsecond)
			}
		}
	})
	p := newTestPoller(t)
	l := New("peer", addr, 10*time.Second, nil)
	l.PollWith(p)
	defer l.Close()
	const n = 3 * 6
	ch := make(chan result, n)
	for range n {
		l.Send(resp.AppendCommandStrings(nil, "PING"), collect(ch))
	}
	l.Flush()
	for i := range n {
		select {
		case res := <-ch:
			if res.err != nil || string(res.raw) != replies[i%len(replies)] {
				t.Fatalf("reply %d: %.60q, %v; want %.60q", i, res.raw, res.err, replies[i%len(replies)])
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("reply %d never came", i)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.polling != 1 {
		t.Errorf("%d connections handed to the poller, want 1", p.polling)
	}
}

// A polled link whose server answers with bytes that are no RESP frame
// fails the requests in flight with the protocol error, and is not read
// again: a bad server costs its link, never the poller.
func TestLinkPolledMalformedReply(t *testing.T) {
	addr := oneConnServer(t, func(c net.Conn) {
		resp.NewReader(c, resp.DefaultLimits).ReadRaw(nil)
		c.Write([]byte("?what\r\n"))
		io.Copy(io.Discard, c) // the link, not the server, ends the connection
	})
	p := newTestPoller(t)
	l := New("peer", addr, 10*time.Second, nil)
	l.PollWith(p)
	defer l.Close()
	ch := make(chan result, 2)
	l.Send(resp.AppendCommandStrings(nil, "PING"), collect(ch))
	l.Send(resp.AppendCommandStrings(nil, "PING"), collect(ch))
	l.Flush()
	for i := range 2 {
		select {
		case res := <-ch:
			if !errors.Is(res.err, ErrDown) || !strings.Contains(res.err.Error(), "unknown frame type") {
				t.Fatalf("request %d: %q, %v; want the link down for the protocol error", i, res.raw, res.err)
			}
		case <-time.After(patience):
			t.Fatalf("request %d never failed", i)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) != 0 {
		t.Errorf("the poller still reads %d connections", len(p.ready))
	}
}
