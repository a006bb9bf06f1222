package bench

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/client"
)

// Target is what the benchmark drives: anything that carries RESP commands to
// a store and hands back each reply frame. The plain-RESP target below serves
// redis-server and nutcracker; the client package's Cluster, token and rack
// aware, satisfies the same interface.
//
// Send queues one command (args[0] is its name, args[1] the key); done runs
// exactly once with the raw reply frame, or with err set when the transport
// failed (connection refused, reset, timeout). done must not block: it may run
// on a connection's reader goroutine. Commands queued with Send are on the
// wire only after Flush, so a worker's pipeline leaves in one write. Send
// must encode or copy args before it returns: the caller reuses them.
type Target interface {
	Send(args [][]byte, done func(raw []byte, err error))
	Flush()
	Close() error
}

// Describer is implemented by targets that can say what they are, for the
// result file ("resp 127.0.0.1:6379 x2 conns").
type Describer interface {
	Describe() string
}

// Sessioner is implemented by targets that can give each worker its own
// connections: a worker's pipeline then leaves in one write on its own
// connection, as a redis-benchmark client's does, instead of being spread over
// links every worker shares. Session(n) is the view for the n-th worker.
type Sessioner interface {
	Session(n int) Target
}

// Piper is implemented by targets that can give a worker connections of its
// own that it drives itself: it writes its pipeline and reads the replies on
// its own goroutine, as a blocking redis-benchmark client does, with no reader
// goroutine and no callbacks. A phase uses pipes only when every one of its
// workers can have its own: Pipe(n), n < Pipes().
type Piper interface {
	Pipes() int
	Pipe(n int) Pipe
}

// Pipe is one worker's own connections. Send queues a command (args may be
// reused once it returns); Exchange writes everything queued and appends one
// reply per command to dst, in the order of Send. Raw frames stay valid until
// the next Exchange.
type Pipe interface {
	Send(args [][]byte)
	Exchange(dst []client.Reply) []client.Reply
}

// Sizer is implemented by targets that know how many store nodes they reach;
// per-node worker counts (--readers, --writers, --workers) are multiplied by it.
type Sizer interface {
	Nodes() int
}

// RESPTarget is a plain-RESP target: a pooled client (client.Plain) with
// conns connections to each address. Each worker takes a pinned view of it
// (Session), so its pipeline leaves in one write on its own connection, as a
// redis-benchmark client's does; with several addresses a key's hash picks
// the address (client-side sharding). Over TLS every worker has a pipe of
// its own, as each of redis-benchmark's clients has its own connection:
// the shared links dial plain TCP only.
type RESPTarget struct {
	shared  Target        // the Plain client, or a lockedPipe over TLS
	plain   *client.Plain // nil over TLS
	addrs   []string
	conns   int
	timeout time.Duration
	dial    client.Dial

	mu    sync.Mutex
	pipes []*client.Pipe // one per connection slot (per worker over TLS); they dial on first use
}

// NewRESPTarget makes a target for addrs (host:port), conns connections
// each, reached as d says (database, credentials, TLS). It connects
// lazily; Ping checks reachability within the timeout.
func NewRESPTarget(addrs []string, conns int, timeout time.Duration, d client.Dial) (*RESPTarget, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no target address given")
	}
	if conns < 1 {
		return nil, fmt.Errorf("connections per address must be at least 1, got %d", conns)
	}
	for _, a := range addrs {
		if !strings.Contains(a, ":") {
			return nil, fmt.Errorf("target %q is not host:port", a)
		}
	}
	t := &RESPTarget{addrs: addrs, conns: conns, timeout: timeout, dial: d}
	if d.TLS != nil {
		p, err := client.NewPipe(addrs, timeout, d)
		if err != nil {
			return nil, err
		}
		t.shared = &lockedPipe{pipe: p}
		return t, nil
	}
	p, err := client.NewPlain(addrs, client.PlainOptions{ConnsPerAddr: conns, Timeout: timeout, Dial: d})
	if err != nil {
		return nil, err
	}
	t.plain, t.shared = p, p
	return t, nil
}

// Send queues a command on the shared connections.
func (t *RESPTarget) Send(args [][]byte, done func(raw []byte, err error)) { t.shared.Send(args, done) }

// Flush writes out what was queued on the shared connections.
func (t *RESPTarget) Flush() { t.shared.Flush() }

// Ping fails with the first unreachable address, naming it. It goes over
// the first pipe, whose connections the first worker then uses.
func (t *RESPTarget) Ping() error { return t.Pipe(0).(*client.Pipe).Ping() }

// Pipes is the number of workers that can each have their own pipe: one
// per connection slot (--conns), or any number over TLS.
func (t *RESPTarget) Pipes() int {
	if t.dial.TLS != nil {
		return math.MaxInt32
	}
	return t.conns
}

// Pipe is the n-th pipe: the n-th connection of each address, driven by one
// worker at a time. Its connections are the target's --conns; the shared
// ones of the embedded client serve only workers that cannot each have a
// pipe, and the audit.
func (t *RESPTarget) Pipe(n int) Pipe {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.pipes) <= n {
		p, err := client.NewPipe(t.addrs, t.timeout, t.dial)
		if err != nil { // only for arguments NewRESPTarget checked
			panic(err)
		}
		t.pipes = append(t.pipes, p)
	}
	return t.pipes[n]
}

// Close closes the pipes and the shared connections.
func (t *RESPTarget) Close() error {
	t.mu.Lock()
	for _, p := range t.pipes {
		p.Close()
	}
	t.mu.Unlock()
	return t.shared.Close()
}

// Session is worker n's view: the n-th connection of each address.
func (t *RESPTarget) Session(n int) Target {
	if t.plain == nil {
		return t.shared
	}
	return t.plain.Pinned(n)
}

// Describe says what the target is, for the result file.
func (t *RESPTarget) Describe() string {
	s := fmt.Sprintf("resp %s, %d connections per address", strings.Join(t.addrs, ","), t.conns)
	if t.dial.TLS != nil {
		s = fmt.Sprintf("resp %s over TLS, a connection per worker to each address", strings.Join(t.addrs, ","))
	}
	switch {
	case t.dial.User != "":
		s += ", AUTH as " + t.dial.User
	case t.dial.Password != "":
		s += ", AUTH"
	}
	if t.dial.DB != 0 {
		s += fmt.Sprintf(", database %d", t.dial.DB)
	}
	return s
}

// Nodes is the number of addresses, for per-node worker counts.
func (t *RESPTarget) Nodes() int { return len(t.addrs) }

// Connections is how many connections workers hold in all: one per worker
// and address when each has a pipe of its own, else --conns per address.
func (t *RESPTarget) Connections(workers int) int {
	if workers <= t.Pipes() {
		return workers * len(t.addrs)
	}
	return t.conns * len(t.addrs)
}

// lockedPipe is the Target interface over one Pipe, for what over TLS
// goes through the shared connections (the audit's and the cleanup's
// batches): a Flush exchanges everything queued, and hands each reply to
// its callback while it holds the pipe, so the frame stays valid.
type lockedPipe struct {
	mu    sync.Mutex
	pipe  *client.Pipe
	dones []func([]byte, error)
	got   []client.Reply
}

func (l *lockedPipe) Send(args [][]byte, done func(raw []byte, err error)) {
	l.mu.Lock()
	l.pipe.Send(args)
	l.dones = append(l.dones, done)
	l.mu.Unlock()
}

func (l *lockedPipe) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = l.pipe.Exchange(l.got[:0])
	for i, r := range l.got {
		l.dones[i](r.Raw, r.Err)
	}
	clear(l.dones)
	l.dones = l.dones[:0]
}

func (l *lockedPipe) Close() error { return l.pipe.Close() }
