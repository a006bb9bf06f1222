package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// socketPair returns two connected non-blocking stream sockets, closed
// when the test ends.
func socketPair(t *testing.T) (int, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

func TestReadWriteWritevEpoll(t *testing.T) {
	a, b := socketPair(t)
	buf := make([]byte, 64)
	if n, err := Read(b, buf); n != 0 || err != unix.EAGAIN {
		t.Fatalf("read of an empty socket: %d, %v; want 0, EAGAIN", n, err)
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ep)
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, b, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(b)}); err != nil {
		t.Fatal(err)
	}
	events := make([]unix.EpollEvent, 4)
	if n, err := EpollPoll(ep, events); n != 0 || err != nil {
		t.Fatalf("poll with nothing ready: %d, %v", n, err)
	}
	if n, err := Write(a, []byte("one,")); n != 4 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	var v Vec
	if n, err := v.Writev(a, [][]byte{[]byte("two,"), nil, []byte("three")}); n != 9 || err != nil {
		t.Fatalf("writev: %d, %v", n, err)
	}
	if n, err := EpollPoll(ep, events); n != 1 || err != nil || events[0].Fd != int32(b) || events[0].Events&unix.EPOLLIN == 0 {
		t.Fatalf("poll with data ready: %d, %v, %+v", n, err, events[0])
	}
	n, err := Read(b, buf)
	if err != nil || string(buf[:n]) != "one,two,three" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if _, err := Write(-1, []byte("x")); err != unix.EBADF {
		t.Fatalf("write to a bad descriptor: %v, want EBADF", err)
	}
}

// A writev the socket cannot take whole reports what it took, and the
// bytes arrive in order once read.
func TestWritevPartial(t *testing.T) {
	a, b := socketPair(t)
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	var v Vec
	var sent []byte
	for i := 0; ; i++ {
		bufs := [][]byte{chunk[:1000+i], chunk}
		n, err := v.Writev(a, bufs)
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		all := append(append([]byte{}, bufs[0]...), bufs[1]...)
		sent = append(sent, all[:n]...)
		if n < len(all) {
			break
		}
		if i > 1000 {
			t.Fatal("the socket never filled")
		}
	}
	var got []byte
	buf := make([]byte, 1<<16)
	for len(got) < len(sent) {
		n, err := Read(b, buf)
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", len(got), len(sent), err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, sent) {
		t.Fatal("the bytes read are not the bytes written")
	}
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func newConn(t *testing.T, c *net.TCPConn) *Conn {
	t.Helper()
	rc := Of(c)
	if rc == nil {
		t.Fatal("Of gave no Conn for a TCP connection")
	}
	return rc
}

// Of serves only a socket it can reach: not one behind a wrapper, whose
// reads and writes are the wrapper's (TLS, say).
func TestOfWrapped(t *testing.T) {
	c, _ := tcpPair(t)
	if Of(struct{ net.Conn }{c}) != nil {
		t.Error("Of gave a Conn for a wrapped connection")
	}
}

// Write waits while the socket is full and delivers everything in order;
// TryWrite never waits; Read ends with io.EOF.
func TestConn(t *testing.T) {
	c, s := tcpPair(t)
	c.SetWriteBuffer(32 << 10)
	s.SetReadBuffer(32 << 10)
	w, r := newConn(t, c), newConn(t, s)
	payload := bytes.Repeat([]byte("troop rawio "), 1<<18) // 3 MiB: far more than the socket buffers hold
	wrote := make(chan error, 1)
	go func() {
		n, err := w.Write(payload)
		if err == nil && n != len(payload) {
			err = io.ErrShortWrite
		}
		c.CloseWrite()
		wrote <- err
	}()
	// The writer fills the socket and waits: the reader's receive queue
	// stopped growing while the writer's send queue holds more.
	queued := func(conn *net.TCPConn, req uint) (n int) {
		raw, err := conn.SyscallConn()
		if err == nil {
			raw.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), req) })
		}
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for last, deadline := -1, time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		in, out := queued(s, unix.SIOCINQ), queued(c, unix.SIOCOUTQ)
		if out > 0 && in == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer has not filled the socket a minute on: %d bytes queued to read, %d to send", in, out)
		}
		last = in
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(payload))
	}
	// Now fill the other way without a reader: TryWrite stops at 0, nil.
	full := false
	for i := 0; i < 10000 && !full; i++ {
		n, err := r.TryWrite(payload[:1<<16])
		if err != nil {
			t.Fatal(err)
		}
		full = n == 0
	}
	if !full {
		t.Fatal("TryWrite never found the socket full")
	}
}

// Read honours the socket's deadline and returns once it is closed.
func TestConnDeadlineAndClose(t *testing.T) {
	c, _ := tcpPair(t)
	r := newConn(t, c)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := r.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read of a closed socket: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read went on after its socket was closed")
	}
}

// TryRead never waits: nothing to read is 0 and no error; then it reads what
// came, then io.EOF once the peer closed, and an error once the socket is
// closed here.
func TestTryRead(t *testing.T) {
	c, s := tcpPair(t)
	r := newConn(t, s)
	buf := make([]byte, 16)
	if n, err := r.TryRead(buf); n != 0 || err != nil {
		t.Fatalf("TryRead of an empty socket: %d, %v", n, err)
	}
	c.Write([]byte("troop"))
	var got []byte
	for deadline := time.Now().Add(2 * time.Second); len(got) < 5 && time.Now().Before(deadline); {
		n, err := r.TryRead(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "troop" {
		t.Fatalf("TryRead read %q", got)
	}
	c.Close()
	var err error
	for deadline := time.Now().Add(2 * time.Second); err == nil && time.Now().Before(deadline); {
		_, err = r.TryRead(buf)
	}
	if err != io.EOF {
		t.Fatalf("TryRead after the peer closed: %v", err)
	}
	s.Close()
	if _, err := r.TryRead(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("TryRead of a closed socket: %v", err)
	}
}
