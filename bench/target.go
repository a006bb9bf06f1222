package bench

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/resp"
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

// Sizer is implemented by targets that know how many store nodes they reach;
// per-node worker counts (--readers, --writers, --workers) are multiplied by it.
type Sizer interface {
	Nodes() int
}

// RESPTarget sends each command over one of a fixed set of pipelined links:
// conns links per address, the key's hash choosing the link, so the commands
// of one key keep their order and the key set spreads over every address
// (client-side sharding, as twemproxy's clients do without it).
type RESPTarget struct {
	addrs []string
	links []*link.Link
}

// NewRESPTarget opens conns links to each address (host:port). Links connect
// lazily; Ping checks reachability within the timeout.
func NewRESPTarget(addrs []string, conns int, timeout time.Duration) (*RESPTarget, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no target address given")
	}
	if conns < 1 {
		return nil, fmt.Errorf("connections per address must be at least 1, got %d", conns)
	}
	t := &RESPTarget{addrs: addrs}
	for _, a := range addrs {
		if !strings.Contains(a, ":") {
			return nil, fmt.Errorf("target %q is not host:port", a)
		}
		for range conns {
			t.links = append(t.links, link.New("target", a, timeout, nil))
		}
	}
	return t, nil
}

// Ping sends PING on every link and fails with the first unreachable address,
// so a wrong --target fails within the connect timeout, naming it.
func (t *RESPTarget) Ping() error {
	errs := make(chan error, len(t.links))
	req := resp.AppendCommandStrings(nil, "PING")
	for _, l := range t.links {
		l.Do(req, func(raw []byte, err error) {
			if err == nil && len(raw) > 0 && raw[0] == '-' {
				err = fmt.Errorf("target %s: %s", l.Addr(), strings.TrimSpace(string(raw[1:])))
			}
			errs <- err
		})
	}
	var first error
	for range t.links {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (t *RESPTarget) pick(args [][]byte) *link.Link {
	if len(t.links) == 1 || len(args) < 2 {
		return t.links[0]
	}
	h := fnv.New32a()
	h.Write(args[1])
	return t.links[h.Sum32()%uint32(len(t.links))]
}

func (t *RESPTarget) Send(args [][]byte, done func(raw []byte, err error)) {
	t.pick(args).Send(resp.AppendCommand(nil, args...), done)
}

// Session gives worker n one of each address's links (the n-th, modulo
// --conns), so its batch to an address leaves in one write.
func (t *RESPTarget) Session(n int) Target {
	conns := len(t.links) / len(t.addrs)
	s := &respSession{links: make([]*link.Link, len(t.addrs))}
	for a := range t.addrs {
		s.links[a] = t.links[a*conns+n%conns]
	}
	return s
}

// respSession is one worker's view of a RESPTarget.
type respSession struct {
	links []*link.Link // one per address
	buf   []byte       // encoding scratch: Link.Send copies what it is given
}

func (s *respSession) Send(args [][]byte, done func(raw []byte, err error)) {
	l := s.links[0]
	if len(s.links) > 1 && len(args) > 1 {
		h := fnv.New32a()
		h.Write(args[1])
		l = s.links[h.Sum32()%uint32(len(s.links))]
	}
	s.buf = resp.AppendCommand(s.buf[:0], args...)
	l.Send(s.buf, done)
}

func (s *respSession) Flush() {
	for _, l := range s.links {
		l.Flush()
	}
}

// Close leaves the links to the target, which owns them.
func (s *respSession) Close() error { return nil }

// Flush pushes out what every link has queued; a link with nothing queued
// returns at once.
func (t *RESPTarget) Flush() {
	for _, l := range t.links {
		l.Flush()
	}
}

func (t *RESPTarget) Close() error {
	for _, l := range t.links {
		l.Close()
	}
	return nil
}

func (t *RESPTarget) Describe() string {
	return fmt.Sprintf("resp %s, %d links per address", strings.Join(t.addrs, ","), len(t.links)/len(t.addrs))
}

func (t *RESPTarget) Nodes() int { return len(t.addrs) }
