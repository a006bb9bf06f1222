package link

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/freeport"
	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/resp"
)

// silentServer accepts connections and never answers.
func silentServer(t *testing.T) string {
	t.Helper()
	ln := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().String()
}

// oneConnServer accepts one connection, runs serve on it and closes it.
func oneConnServer(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln := listen(t)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	return ln.Addr().String()
}

// listen listens on a free loopback port until the test ends.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

type result struct {
	raw []byte
	err error
	at  time.Time
}

func collect(ch chan result) func([]byte, error) {
	return func(raw []byte, err error) { ch <- result{raw, err, time.Now()} }
}

// patience bounds a test's wait, and is the link timeout of tests that do
// not test timeouts: a request on a machine busy with other work can wait
// seconds for its turn, and that must not fail a test.
const patience = time.Minute

// A peer that accepts but never answers its handshake holds up only the
// requests queued for it, never the caller, and they fail when the handshake
// times out.
func TestLinkDialDoesNotBlockCaller(t *testing.T) {
	addr := silentServer(t)
	hello := func(c net.Conn, rd *resp.Reader) error {
		c.Write(resp.AppendCommandStrings(nil, "HELLO"))
		_, err := rd.ReadValue()
		return err
	}
	// A handshake timeout far longer than queueing a request takes, even
	// on a busy machine: a caller that returns before half of it did not
	// wait for the handshake.
	const timeout = 3 * time.Second
	l := New("peer", addr, timeout, hello)
	defer l.Close()
	ch := make(chan result, 1)
	start := time.Now()
	l.Do(resp.AppendCommandStrings(nil, "PING"), collect(ch))
	if took := time.Since(start); took > timeout/2 {
		t.Fatalf("do blocked the caller for %v", took)
	}
	select {
	case r := <-ch:
		if r.err == nil || !errors.Is(r.err, ErrDown) && !IsTimeout(r.err) {
			t.Fatalf("got %q, %v; want the link down", r.raw, r.err)
		}
		if took := r.at.Sub(start); took > 2*timeout {
			t.Fatalf("failed after %v", took)
		}
	case <-time.After(3 * timeout):
		t.Fatal("the request never failed")
	}
}

// Nothing listening: requests fail at once, and during the backoff they fail
// without dialling.
func TestLinkRefusedFailsFast(t *testing.T) {
	addr, _ := freeport.Pick()      // nobody listens here
	const timeout = 5 * time.Second // far longer than a refused connect takes, even on a busy machine
	l := New("peer", addr, timeout, nil)
	defer l.Close()
	for i := 0; i < 2; i++ {
		ch := make(chan result, 1)
		start := time.Now()
		l.Do(resp.AppendCommandStrings(nil, "PING"), collect(ch))
		r := <-ch
		if !errors.Is(r.err, ErrDown) || !strings.Contains(r.err.Error(), "connection refused") {
			t.Fatalf("request %d: %v", i, r.err)
		}
		if took := r.at.Sub(start); took > timeout/2 {
			t.Fatalf("request %d failed after %v", i, took)
		}
	}
}

// A server that takes requests and never replies costs each request one
// timeout, no more.
func TestLinkTimeout(t *testing.T) {
	const timeout = 3 * time.Second // one timeout, with room to tell it from three on a busy machine
	l := New("redis", silentServer(t), timeout, nil)
	defer l.Close()
	ch := make(chan result, 3)
	start := time.Now()
	for i := 0; i < 3; i++ {
		l.Send(resp.AppendCommandStrings(nil, "GET", "k"), collect(ch))
	}
	l.Flush()
	for i := 0; i < 3; i++ {
		r := <-ch
		if !IsTimeout(r.err) {
			t.Fatalf("reply %d: %v, want a timeout", i, r.err)
		}
		if took := r.at.Sub(start); took < timeout || took > 2*timeout { // three timeouts in a row would be 3 of them
			t.Fatalf("reply %d timed out after %v", i, took)
		}
	}
}

// Replies come back in request order, many requests on one connection.
func TestLinkPipelinesInOrder(t *testing.T) {
	r := testredis.Start(t)
	l := New("redis", r.Addr, patience, nil)
	defer l.Close()
	const n = 2000
	ch := make(chan result, n)
	for i := 0; i < n; i++ {
		l.Send(resp.AppendCommandStrings(nil, "ECHO", fmt.Sprint(i)), collect(ch))
		if i%100 == 99 {
			l.Flush()
		}
	}
	l.Flush()
	for i := 0; i < n; i++ {
		res := <-ch
		if res.err != nil {
			t.Fatal(res.err)
		}
		if want := fmt.Sprintf("$%d\r\n%d\r\n", len(fmt.Sprint(i)), i); string(res.raw) != want {
			t.Fatalf("reply %d = %q, want %q", i, res.raw, want)
		}
	}
}

// Requests queued from callbacks on the link's own reader goroutine, as a
// coordinator queues a write when a version answer arrives, go out through
// FlushSoon: each is answered, in order, and a FlushSoon after Close is
// harmless.
func TestLinkFlushSoonFromCallbacks(t *testing.T) {
	r := testredis.Start(t)
	l := New("redis", r.Addr, patience, nil)
	const n = 500
	ch := make(chan result, n)
	var chain func(i int) func([]byte, error)
	chain = func(i int) func([]byte, error) {
		return func(raw []byte, err error) {
			ch <- result{raw, err, time.Now()}
			if i+1 < n {
				l.Send(resp.AppendCommandStrings(nil, "ECHO", fmt.Sprint(i+1)), chain(i+1))
				l.FlushSoon()
			}
		}
	}
	l.Send(resp.AppendCommandStrings(nil, "ECHO", "0"), chain(0))
	l.FlushSoon()
	for i := 0; i < n; i++ {
		select {
		case res := <-ch:
			if res.err != nil {
				t.Fatal(res.err)
			}
			if want := fmt.Sprintf("$%d\r\n%d\r\n", len(fmt.Sprint(i)), i); string(res.raw) != want {
				t.Fatalf("reply %d = %q, want %q", i, res.raw, want)
			}
		case <-time.After(patience):
			t.Fatalf("reply %d never came: a request queued for FlushSoon was not written", i)
		}
	}
	l.Close()
	l.FlushSoon()
}

// Many senders at once, with requests large enough that the write buffer
// outgrows the spare limit: every byte reaches redis-server intact and every
// reply matches its request.
func TestLinkConcurrentLargeRequests(t *testing.T) {
	r := testredis.Start(t)
	l := New("redis", r.Addr, 10*time.Second, nil)
	defer l.Close()
	const senders, each = 4, 40
	errs := make(chan error, senders)
	for s := 0; s < senders; s++ {
		go func(s int) {
			ch := make(chan result, 2*each)
			values := make([]string, each)
			for i := range values { // all in flight at once, flushed one pair at a time
				values[i] = strings.Repeat(fmt.Sprintf("%d-%d.", s, i), 40000) // about 200 KB
				l.Send(resp.AppendCommandStrings(nil, "SET", fmt.Sprintf("k%d-%d", s, i), values[i]), collect(ch))
				l.Send(resp.AppendCommandStrings(nil, "STRLEN", fmt.Sprintf("k%d-%d", s, i)), collect(ch))
				l.Flush()
			}
			for i, value := range values {
				set, strlen := <-ch, <-ch
				if set.err != nil || string(set.raw) != "+OK\r\n" {
					errs <- fmt.Errorf("sender %d SET %d: %.80q %v", s, i, set.raw, set.err)
					return
				}
				if want := fmt.Sprintf(":%d\r\n", len(value)); strlen.err != nil || string(strlen.raw) != want {
					errs <- fmt.Errorf("sender %d STRLEN %d: %.80q %v, want %q", s, i, strlen.raw, strlen.err, want)
					return
				}
			}
			errs <- nil
		}(s)
	}
	for s := 0; s < senders; s++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// FlushNoWait never blocks, even when the server stops reading and its
// socket fills; what the socket did not take is written later, before
// anything queued after it, so every request arrives whole and in order.
func TestLinkFlushNoWait(t *testing.T) {
	r := testredis.Start(t)
	l := New("redis", r.Addr, 20*time.Second, nil)
	defer l.Close()
	ping := make(chan result, 1)
	l.Do(resp.AppendCommandStrings(nil, "PING"), collect(ping))
	if v := <-ping; v.err != nil {
		t.Fatal(v.err)
	}
	r.Cmd.Process.Signal(syscall.SIGSTOP)
	defer r.Cmd.Process.Signal(syscall.SIGCONT)
	const senders, each = 4, 20 // 16 MB: many times what the sockets hold
	chans := make([]chan result, senders)
	values := make([][]string, senders)
	var wg sync.WaitGroup
	for s := range senders {
		chans[s] = make(chan result, 2*each)
		values[s] = make([]string, each)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				values[s][i] = strings.Repeat(fmt.Sprintf("%d-%d.", s, i), 40000) // about 200 KB
				l.Send(resp.AppendCommandStrings(nil, "SET", fmt.Sprintf("k%d-%d", s, i), values[s][i]), collect(chans[s]))
				l.Send(resp.AppendCommandStrings(nil, "STRLEN", fmt.Sprintf("k%d-%d", s, i)), collect(chans[s]))
				l.FlushNoWait()
			}
		}()
	}
	// A flush that waited would wait for the paused server, that is for
	// ever: the senders are done well within patience, however busy the
	// machine, only if no flush waited.
	queued := make(chan struct{})
	go func() { wg.Wait(); close(queued) }()
	select {
	case <-queued:
	case <-time.After(patience):
		t.Fatalf("queueing and flushing 16 MB for a paused server took over %v: a flush waited", patience)
	}
	r.Cmd.Process.Signal(syscall.SIGCONT)
	for s := range senders {
		for i, value := range values[s] {
			set, strlen := <-chans[s], <-chans[s]
			if set.err != nil || string(set.raw) != "+OK\r\n" {
				t.Fatalf("sender %d SET %d: %.80q %v", s, i, set.raw, set.err)
			}
			if want := fmt.Sprintf(":%d\r\n", len(value)); strlen.err != nil || string(strlen.raw) != want {
				t.Fatalf("sender %d STRLEN %d: %.80q %v, want %q", s, i, strlen.raw, strlen.err, want)
			}
		}
	}
}

// Watch hears of each change between reachable and unreachable once, not
// once per failed request, and Stats count the connection the server's
// death dropped.
func TestLinkWatchTellsChangesOnce(t *testing.T) {
	srv := testredis.Start(t)
	l := New("redis", srv.Addr, patience, nil)
	defer l.Close()
	events := make(chan bool, 10)
	l.Watch(func(reachable bool, err error) {
		if reachable != (err == nil) {
			t.Errorf("reachable %v with error %v", reachable, err)
		}
		events <- reachable
	})
	ping := func() error {
		ch := make(chan result, 1)
		l.Do(resp.AppendCommandStrings(nil, "PING"), collect(ch))
		return (<-ch).err
	}
	if err := ping(); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for i := 0; i < 20; i++ { // past several backoffs
		ping()
		time.Sleep(10 * time.Millisecond)
	}
	srv.Restart(t)
	deadline := time.Now().Add(patience)
	for ping() != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var got []bool
	for len(events) > 0 {
		got = append(got, <-events)
	}
	if fmt.Sprint(got) != "[false true]" {
		t.Errorf("Watch told %v, want [false true]: unreachable once, then reachable once", got)
	}
	if st := l.Stats(); st.Drops != 1 || st.Failures == 0 {
		t.Errorf("stats %+v: want 1 drop and some failures", st)
	}
}
