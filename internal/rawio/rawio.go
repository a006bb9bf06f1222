// Package rawio makes the read, write, writev and epoll_wait calls of
// non-blocking sockets without telling Go's scheduler that a system call is
// under way.
//
// A call made the usual way (syscall.Syscall) enters the scheduler's
// "in a system call" state, and the first such call after every thread of
// the process went idle wakes the runtime's monitor thread (sysmon), which
// then wakes every 20 µs until the threads are all idle again. A proxy
// whose threads idle between bursts of requests does that thousands of
// times a second: the monitor took a tenth of a node's CPU, and its
// wake-ups queued behind the request path for the machine's cores. These
// calls cannot block (the descriptors are non-blocking, and epoll_wait is
// given no timeout), so there is nothing for the scheduler to hand off
// while they run. The price: a raw call cannot be preempted, and a garbage
// collection that stops the world waits for it; a call on a non-blocking
// socket moves at most the socket buffer's bytes, which takes microseconds.
package rawio

import (
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read reads into p from the non-blocking descriptor fd: unix.Read without
// the scheduler.
func Read(fd int, p []byte) (int, error) { return transfer(unix.SYS_READ, fd, p) }

// Write writes p to the non-blocking descriptor fd, as much as it takes.
func Write(fd int, p []byte) (int, error) { return transfer(unix.SYS_WRITE, fd, p) }

// transfer is a read or write call. A small Errno returned as an error
// does not allocate.
func transfer(trap uintptr, fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// EpollPoll returns the events ready on the epoll set epfd now, without
// waiting for any: epoll_pwait with no signal mask, which is epoll_wait on
// every Linux architecture (arm64 has no epoll_wait of its own).
func EpollPoll(epfd int, events []unix.EpollEvent) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// A Vec writes many buffers with one writev, reusing its array of iovecs
// from call to call (unix.Writev makes one per call).
type Vec struct {
	iov []unix.Iovec
}

// Writev writes bufs to the non-blocking descriptor fd, as much as it
// takes, and returns how many bytes it took. Empty buffers are skipped.
func (v *Vec) Writev(fd int, bufs [][]byte) (int, error) {
	v.iov = v.iov[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			iov := unix.Iovec{Base: &b[0]}
			iov.SetLen(len(b))
			v.iov = append(v.iov, iov)
		}
	}
	if len(v.iov) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&v.iov[0])), uintptr(len(v.iov)))
	clear(v.iov) // the buffers are not kept alive by the array
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// A Conn reads and writes a non-blocking socket through Go's poller, which
// parks the caller until the socket is ready, with the calls themselves
// made as Read and Write make them. Deadlines set on the socket apply.
// One goroutine may read while another writes, but Read is for one reader
// at a time, and Write and TryWrite for one writer at a time.
type Conn struct {
	rc syscall.RawConn

	rbuf       []byte
	rn         int
	rerr       error
	readFn     func(fd uintptr) bool
	tryReadFn  func(fd uintptr) bool
	wbuf       []byte
	wn         int
	werr       error
	writeFn    func(fd uintptr) bool
	tryWriteFn func(fd uintptr) bool
}

// Of returns a Conn for c when c is a socket Go's poller watches (a
// *net.TCPConn, say), and nil when it is not (TLS, or a wrapper): the
// caller then reads and writes c itself.
func Of(c net.Conn) *Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return NewConn(rc)
}

// NewConn serves rc, the raw connection of a socket Go's poller watches
// (a *net.TCPConn's SyscallConn, say).
func NewConn(rc syscall.RawConn) *Conn {
	c := &Conn{rc: rc}
	// Made once: a closure per call would be an allocation per call.
	c.readFn = func(fd uintptr) bool {
		for {
			c.rn, c.rerr = Read(int(fd), c.rbuf)
			if c.rerr != unix.EINTR {
				return c.rerr != unix.EAGAIN
			}
		}
	}
	c.tryReadFn = func(fd uintptr) bool {
		c.readFn(fd)
		return true
	}
	c.writeFn = func(fd uintptr) bool {
		for c.wn < len(c.wbuf) {
			n, err := Write(int(fd), c.wbuf[c.wn:])
			c.wn += n
			if err == unix.EAGAIN {
				return false
			}
			if err != nil && err != unix.EINTR {
				c.werr = err
				return true
			}
		}
		return true
	}
	c.tryWriteFn = func(fd uintptr) bool {
		c.wn, c.werr = Write(int(fd), c.wbuf)
		return true
	}
	return c
}

// Read reads what the socket has, waiting for something if it has nothing;
// io.EOF once the peer closed it.
func (c *Conn) Read(p []byte) (int, error) { return c.read(p, c.readFn) }

// TryRead reads what the socket has now, and never waits: 0 and no error
// when it has nothing, io.EOF once the peer closed it.
func (c *Conn) TryRead(p []byte) (int, error) { return c.read(p, c.tryReadFn) }

// read reads into p with fn, readFn or tryReadFn. EAGAIN, which only
// tryReadFn leaves, is nothing read.
func (c *Conn) read(p []byte, fn func(fd uintptr) bool) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rbuf = p
	err := c.rc.Read(fn)
	n, rerr := c.rn, c.rerr
	c.rbuf, c.rerr = nil, nil
	switch {
	case err != nil:
		return 0, err
	case rerr == unix.EAGAIN:
		return 0, nil
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Control runs f with the socket's descriptor, which stays open meanwhile
// (syscall.RawConn's Control).
func (c *Conn) Control(f func(fd uintptr)) error { return c.rc.Control(f) }

// Write writes all of p, waiting while the socket takes no more.
func (c *Conn) Write(p []byte) (int, error) {
	c.wbuf, c.wn, c.werr = p, 0, nil
	err := c.rc.Write(c.writeFn)
	n, werr := c.wn, c.werr
	c.wbuf, c.werr = nil, nil
	if err == nil {
		err = werr
	}
	return n, err
}

// TryWrite writes what the socket takes of p now, and never waits.
func (c *Conn) TryWrite(p []byte) (int, error) {
	c.wbuf = p
	err := c.rc.Write(c.tryWriteFn)
	n, werr := c.wn, c.werr
	c.wbuf, c.wn, c.werr = nil, 0, nil
	switch {
	case err != nil:
		return 0, err
	case werr == unix.EAGAIN || werr == unix.EINTR:
		return 0, nil
	}
	return n, werr
}
