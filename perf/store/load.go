package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/resp"
)

// The workload is fixed by the benchmark's definition; only its size and
// shape (connections, pipeline depth, key space, and the GET share, to
// take a read's cost apart from a write's) are flags.
const (
	valueSize = 1024 // bytes per value
	keyLen    = 16   // "key:" and 12 digits, redis-benchmark's -r key format
)

// filler makes up each value after "<key>|". A value thus names its key, so
// a read checks not only the size but that the reply belongs to the key it
// asked for: a proxy that mixed up pipelined replies would be caught.
var filler = func() []byte {
	const pattern = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, valueSize-keyLen-1)
	for i := range b {
		b[i] = pattern[i%len(pattern)]
	}
	return b
}()

// appendKey writes key number k as "key:%012d" without allocating. It is the
// key redis-benchmark -r generates, so the anchor reads the same keys.
func appendKey(dst []byte, k int) []byte {
	var d [keyLen]byte
	copy(d[:], "key:")
	for i := keyLen - 1; i >= 4; i-- {
		d[i] = byte('0' + k%10)
		k /= 10
	}
	return append(dst, d[:]...)
}

// appendGet and appendSet encode the two commands as raw RESP; the lengths
// are constants, so no number formatting happens per request.
func appendGet(dst []byte, k int) []byte {
	dst = append(dst, "*2\r\n$3\r\nGET\r\n$16\r\n"...)
	dst = appendKey(dst, k)
	return append(dst, '\r', '\n')
}

func appendSet(dst []byte, k int) []byte {
	dst = append(dst, "*3\r\n$3\r\nSET\r\n$16\r\n"...)
	dst = appendKey(dst, k)
	dst = append(dst, "\r\n$1024\r\n"...)
	dst = appendKey(dst, k)
	dst = append(dst, '|')
	dst = append(dst, filler...)
	return append(dst, '\r', '\n')
}

var (
	okReply  = []byte("+OK\r\n")
	nilReply = []byte("$-1\r\n")
)

// getResult classifies a GET reply.
type getResult int

const (
	getHit getResult = iota
	getNil
	getBad
)

// checkGet checks a GET reply for key k: nil, or exactly the value the
// workload writes for k.
func checkGet(raw []byte, k int) getResult {
	if bytes.Equal(raw, nilReply) {
		return getNil
	}
	const header = "$1024\r\n"
	if len(raw) != len(header)+valueSize+2 || string(raw[:len(header)]) != header {
		return getBad
	}
	v := raw[len(header) : len(header)+valueSize]
	var key [keyLen]byte
	if !bytes.Equal(v[:keyLen], appendKey(key[:0], k)) || v[keyLen] != '|' || !bytes.Equal(v[keyLen+1:], filler) {
		return getBad
	}
	return getHit
}

// workload is one closed-loop load: conns connections, spread round-robin
// over addrs, each sending pipeline requests and waiting for all replies
// before sending the next batch.
type workload struct {
	addrs    []string
	conns    int
	pipeline int
	keys     int
	seed     uint64
	setup    [][]string  // commands sent once per connection; each must answer +OK
	tls      *tls.Config // nil: plain TCP
	reads    int         // percent of GETs; the rest are SETs
	cmd      *command    // when set, every operation is this command instead of the GET/SET mix
}

// counts are what a load has done so far.
type counts struct {
	Ops          int64 `json:"ops"` // replies received, errors included
	Gets         int64 `json:"gets"`
	Sets         int64 `json:"sets"`
	Nils         int64 `json:"nil_gets"`      // GETs of a key that was not there
	ErrorReplies int64 `json:"error_replies"` // -ERR, -BUSY ...
	BadReplies   int64 `json:"bad_replies"`   // wrong data: see checkGet; a SET not answered +OK
	// Unknown counts a command's answer that it failed with its outcome
	// unknown, which troop gives a change by consensus that lost a race to
	// another coordinator: a correct answer, as a timeout is.
	Unknown int64 `json:"unknown_outcome"`
}

func (c counts) sub(o counts) counts {
	return counts{c.Ops - o.Ops, c.Gets - o.Gets, c.Sets - o.Sets, c.Nils - o.Nils, c.ErrorReplies - o.ErrorReplies, c.BadReplies - o.BadReplies, c.Unknown - o.Unknown}
}

// connCounters are one connection's counts, updated once per batch. Every
// reply is a GET's, a SET's or an error, so operations are their sum, taken
// from the same reads: a separate count of operations, read a moment apart
// from its parts, let a window's difference show one more operation than
// GETs and SETs. The padding keeps two connections' counters off one cache
// line.
type connCounters struct {
	gets, sets, nils, errs, bad, unknown atomic.Int64
	_                                    [16]byte
}

// load is a running workload.
type load struct {
	w     workload
	conns []net.Conn
	ctrs  []connCounters
	stop  atomic.Bool
	wg    sync.WaitGroup

	mu       sync.Mutex
	err      error  // first connection failure
	errReply string // first error reply, to explain error counts
}

// startLoad connects, runs the setup commands, and starts the connections.
func startLoad(ctx context.Context, w workload) (*load, error) {
	l := &load{w: w, ctrs: make([]connCounters, w.conns)}
	for i := 0; i < w.conns; i++ {
		c, err := dialSetup(ctx, w.addrs[i%len(w.addrs)], w.tls, w.setup)
		if err != nil {
			l.closeConns()
			return nil, err
		}
		l.conns = append(l.conns, c)
	}
	for i, c := range l.conns {
		// One stream per connection, derived from the seed: the same seed
		// gives every connection the same sequence of operations.
		rng := rand.New(rand.NewPCG(w.seed, uint64(i)))
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.run(i, c, rng) }()
	}
	return l, nil
}

func dialSetup(ctx context.Context, addr string, tlsCfg *tls.Config, setup [][]string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		tc := tls.Client(c, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("%s: TLS: %w", addr, err)
		}
		c = tc
	}
	if len(setup) == 0 {
		return c, nil
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	rd := resp.NewReader(c, resp.DefaultLimits)
	for _, args := range setup {
		if _, err := c.Write(resp.AppendCommandStrings(nil, args...)); err != nil {
			c.Close()
			return nil, err
		}
		raw, err := rd.ReadRaw(nil)
		if err == nil && !bytes.Equal(raw, okReply) {
			err = fmt.Errorf("%s: %v answered %q", addr, args, bytes.TrimSpace(raw))
		}
		if err != nil {
			c.Close()
			return nil, err
		}
	}
	if rd.Buffered() != 0 {
		c.Close()
		return nil, fmt.Errorf("%s: unexpected bytes after the setup replies", addr)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// run is one connection's closed loop.
func (l *load) run(i int, c net.Conn, rng *rand.Rand) {
	ctr := &l.ctrs[i]
	p := l.w.pipeline
	rd := resp.NewReader(c, resp.DefaultLimits)
	buf := make([]byte, 0, p*(valueSize+64))
	keys := make([]int, p)
	isGet := make([]bool, p)
	var raw []byte
	for !l.stop.Load() {
		buf = buf[:0]
		if l.w.cmd != nil {
			if !l.runCommand(ctr, c, rd, rng) {
				return
			}
			continue
		}
		for j := range p {
			keys[j] = rng.IntN(l.w.keys)
			isGet[j] = rng.IntN(100) < l.w.reads
			if isGet[j] {
				buf = appendGet(buf, keys[j])
			} else {
				buf = appendSet(buf, keys[j])
			}
		}
		if _, err := c.Write(buf); err != nil {
			l.fail(err)
			return
		}
		var gets, sets, nils, errs, bad int64
		for j := range p {
			var err error
			if raw, err = rd.ReadRaw(raw[:0]); err != nil {
				l.fail(err)
				return
			}
			switch {
			case raw[0] == '-':
				errs++
				l.noteErrorReply(raw)
			case isGet[j]:
				gets++
				switch checkGet(raw, keys[j]) {
				case getNil:
					nils++
				case getBad:
					bad++
				}
			default:
				sets++
				if !bytes.Equal(raw, okReply) {
					bad++
				}
			}
		}
		ctr.gets.Add(gets)
		ctr.sets.Add(sets)
		ctr.nils.Add(nils)
		ctr.errs.Add(errs)
		ctr.bad.Add(bad)
	}
}

// runCommand sends one batch of the workload's command and counts its
// replies; false when the connection failed.
func (l *load) runCommand(ctr *connCounters, c net.Conn, rd *resp.Reader, rng *rand.Rand) bool {
	cmd, p := l.w.cmd, l.w.pipeline
	keys := make([]int, p)
	var buf []byte
	for j := range p {
		keys[j] = cmd.key(rng, l.w.keys)
		buf = cmd.append(buf, keys[j])
	}
	if _, err := c.Write(buf); err != nil {
		l.fail(err)
		return false
	}
	var ops, nils, errs, bad, unknown int64
	var raw []byte
	for j := range p {
		failed, unknownOutcome := false, false
		for range cmd.replies {
			var err error
			if raw, err = rd.ReadRaw(raw[:0]); err != nil {
				l.fail(err)
				return false
			}
			if raw[0] == '-' && !failed {
				failed = true
				if unknownOutcome = bytes.Contains(raw, []byte("outcome unknown")); !unknownOutcome {
					l.noteErrorReply(raw)
				}
			}
		}
		switch {
		case unknownOutcome:
			unknown++
		case failed:
			errs++
		case bytes.Equal(raw, execAborted):
			ops++
			nils++
		default:
			ops++
			if !cmd.ok(raw, keys[j]) {
				bad++
			}
		}
	}
	ctr.sets.Add(ops)
	ctr.nils.Add(nils)
	ctr.errs.Add(errs)
	ctr.bad.Add(bad)
	ctr.unknown.Add(unknown)
	return true
}

func (l *load) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil && !l.stop.Load() {
		l.err = err
	}
}

func (l *load) noteErrorReply(raw []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.errReply == "" {
		l.errReply = string(bytes.TrimSpace(raw))
	}
}

// snapshot sums the connections' counts.
func (l *load) snapshot() counts {
	var c counts
	for i := range l.ctrs {
		x := &l.ctrs[i]
		c.Gets += x.gets.Load()
		c.Sets += x.sets.Load()
		c.Nils += x.nils.Load()
		c.ErrorReplies += x.errs.Load()
		c.BadReplies += x.bad.Load()
		c.Unknown += x.unknown.Load()
	}
	c.Ops = c.Gets + c.Sets + c.ErrorReplies + c.Unknown
	return c
}

// finish stops the load: each connection completes its batch and exits. A
// target that stopped answering would hold a connection forever, so after
// a grace period the connections are closed under it.
func (l *load) finish() error {
	l.stop.Store(true)
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		err = errors.New("the target stopped answering: replies outstanding 10s after the end of the run")
	}
	l.closeConns()
	<-done
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(err, l.err)
}

func (l *load) closeConns() {
	for _, c := range l.conns {
		c.Close()
	}
}

// firstErrorReply is the first error reply seen, "" when none.
func (l *load) firstErrorReply() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.errReply
}

// preload writes every key once, so reads in the measured window find
// values. Keys are spread over conns connections (and over addrs); each
// connection pipelines its SETs.
func preload(ctx context.Context, addrs []string, tlsCfg *tls.Config, keys int, setup [][]string) error {
	const conns, depth = 8, 100
	var wg sync.WaitGroup
	errs := make([]error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = preloadConn(ctx, addrs[i%len(addrs)], tlsCfg, setup, i, conns, keys, depth)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// preloadConn writes keys first, first+step, ... below keys.
func preloadConn(ctx context.Context, addr string, tlsCfg *tls.Config, setup [][]string, first, step, keys, depth int) error {
	c, err := dialSetup(ctx, addr, tlsCfg, setup)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	rd := resp.NewReader(c, resp.DefaultLimits)
	var buf, raw []byte
	for k := first; k < keys; {
		buf = buf[:0]
		n := 0
		for ; n < depth && k < keys; k += step {
			buf = appendSet(buf, k)
			n++
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("preload %s: %w", addr, err)
		}
		for range n {
			if raw, err = rd.ReadRaw(raw[:0]); err != nil {
				return fmt.Errorf("preload %s: %w", addr, err)
			}
			if !bytes.Equal(raw, okReply) {
				return fmt.Errorf("preload %s: SET answered %q", addr, bytes.TrimSpace(raw))
			}
		}
	}
	return nil
}
