package client

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/ring"
)

// A pipe's replies come back in the order of Send, each stamped with when it
// was read; over two redis-servers each key lives on the server its hash
// picks; an error reply is a frame, not a failure.
func TestPipeAgainstRedis(t *testing.T) {
	a, b := testredis.Start(t), testredis.Start(t)
	addrs := []string{a.Addr, b.Addr}
	p, err := NewPipe(addrs, 2*time.Second, Dial{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Ping(); err != nil {
		t.Fatal(err)
	}

	const n = 200
	before := time.Now()
	for i := range n {
		p.Send(cmd("SET", fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)))
		p.Send(cmd("GET", fmt.Sprintf("k%d", i)))
	}
	p.Send(cmd("LPUSH", "k0", "x")) // a string key: WRONGTYPE
	got := p.Exchange(nil)
	if len(got) != 2*n+1 {
		t.Fatalf("%d replies for %d commands", len(got), 2*n+1)
	}
	for i := range n {
		set, get := got[2*i], got[2*i+1]
		want := fmt.Sprintf("v%d", i)
		if set.Err != nil || string(set.Raw) != "+OK\r\n" {
			t.Fatalf("SET k%d: %q, %v", i, set.Raw, set.Err)
		}
		if get.Err != nil || string(get.Raw) != fmt.Sprintf("$%d\r\n%s\r\n", len(want), want) {
			t.Fatalf("GET k%d: %q, %v", i, get.Raw, get.Err)
		}
		if get.At.Before(before) || get.At.After(time.Now()) {
			t.Fatalf("GET k%d read at %v, not during the exchange", i, get.At)
		}
	}
	if last := got[2*n]; last.Err != nil || !strings.HasPrefix(string(last.Raw), "-WRONGTYPE") {
		t.Errorf("LPUSH on a string: %q, %v", last.Raw, last.Err)
	}

	// Each key is on the server its hash picks, and only there.
	for i, addr := range addrs {
		one, err := NewPipe([]string{addr}, 2*time.Second, Dial{})
		if err != nil {
			t.Fatal(err)
		}
		defer one.Close()
		for k := range n {
			one.Send(cmd("EXISTS", fmt.Sprintf("k%d", k)))
		}
		for k, r := range one.Exchange(nil) {
			key := fmt.Sprintf("k%d", k)
			want := ":0\r\n"
			if int(ring.Hash([]byte(key))%2) == i {
				want = ":1\r\n"
			}
			if r.Err != nil || string(r.Raw) != want {
				t.Fatalf("EXISTS %s on %s: %q, %v; want %q", key, addr, r.Raw, r.Err, want)
			}
		}
	}

	// Replies stay valid until the next exchange, and the next reuses the
	// connection.
	p.Send(cmd("GET", "k7"))
	first := p.Exchange(nil)
	p.Send(cmd("GET", "k8"))
	second := p.Exchange(nil)
	if string(first[0].Raw) != "$2\r\nv7\r\n" || string(second[0].Raw) != "$2\r\nv8\r\n" {
		t.Errorf("two exchanges: %q, %q", first[0].Raw, second[0].Raw)
	}
}

// A refused address fails at once; a server that never answers fails within
// the timeout; both errors name the address; the next exchange dials again,
// and after Close commands fail with ErrClosed.
func TestPipeFailures(t *testing.T) {
	refused := pickPort(t)
	silent := silentServer(t)
	// A timeout no refused connection takes to fail, even on a busy
	// machine: failing before it is failing at once.
	const timeout = 2 * time.Second
	for _, addr := range []string{refused, silent} {
		p, err := NewPipe([]string{addr}, timeout, Dial{})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for try := range 2 {
			start := time.Now()
			p.Send(cmd("GET", "a"))
			p.Send(cmd("GET", "b"))
			got := p.Exchange(nil)
			took := time.Since(start)
			for i, r := range got {
				if r.Err == nil || !strings.Contains(r.Err.Error(), addr) {
					t.Fatalf("%s, try %d, reply %d: %q, %v; want an error naming the address", addr, try, i, r.Raw, r.Err)
				}
			}
			err := got[0].Err
			t.Logf("%s: %v after %v", addr, err, took.Round(time.Millisecond))
			switch {
			case addr == refused && !errors.Is(err, link.ErrDown):
				t.Errorf("refused: %v is not link.ErrDown", err)
			case addr == refused && took >= timeout:
				t.Errorf("refused: failed after %v, want before the timeout (%v)", took, timeout)
			case addr == silent && !errors.Is(err, os.ErrDeadlineExceeded):
				t.Errorf("silent: %v is not a timeout", err)
			case addr == silent && (took < timeout || took > 3*timeout):
				t.Errorf("silent: failed after %v, want about %v", took, timeout)
			}
		}
	}

	srv := testredis.Start(t)
	p, err := NewPipe([]string{srv.Addr}, time.Second, Dial{})
	if err != nil {
		t.Fatal(err)
	}
	p.Send(cmd("PING"))
	if r := p.Exchange(nil); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	p.Close()
	p.Send(cmd("PING"))
	if r := p.Exchange(nil); !errors.Is(r[0].Err, ErrClosed) {
		t.Errorf("after Close: %q, %v", r[0].Raw, r[0].Err)
	}
	if err := p.Ping(); !errors.Is(err, ErrClosed) {
		t.Errorf("Ping after Close: %v", err)
	}
	if _, err := NewPipe(nil, 0, Dial{}); err == nil {
		t.Error("NewPipe without addresses: no error")
	}
}

// A connection the server closed between exchanges: the exchange that finds
// it broken fails, naming the address, and the next one dials again.
func TestPipeRedials(t *testing.T) {
	srv := testredis.Start(t)
	p, err := NewPipe([]string{srv.Addr}, time.Second, Dial{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Send(cmd("SET", "k", "v"))
	if r := p.Exchange(nil); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	killer, err := NewPipe([]string{srv.Addr}, time.Second, Dial{})
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close()
	killer.Send(cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"))
	if r := killer.Exchange(nil); r[0].Err != nil || string(r[0].Raw) != ":1\r\n" {
		t.Fatalf("CLIENT KILL: %q, %v", r[0].Raw, r[0].Err)
	}
	p.Send(cmd("GET", "k"))
	if r := p.Exchange(nil); r[0].Err == nil || !strings.Contains(r[0].Err.Error(), srv.Addr) {
		t.Fatalf("GET on a killed connection: %q, %v", r[0].Raw, r[0].Err)
	}
	p.Send(cmd("GET", "k"))
	if r := p.Exchange(nil); r[0].Err != nil || string(r[0].Raw) != "$1\r\nv\r\n" {
		t.Fatalf("GET after the kill: %q, %v", r[0].Raw, r[0].Err)
	}
}

// A steady pipeline allocates nothing per exchange.
func TestPipeAllocations(t *testing.T) {
	srv := testredis.Start(t)
	p, err := NewPipe([]string{srv.Addr}, time.Second, Dial{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	get := cmd("GET", "k")
	var got []Reply
	round := func() {
		for range 10 {
			p.Send(get)
		}
		got = p.Exchange(got[:0])
	}
	round()
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Errorf("%v allocations per exchange of 10 GETs", n)
	}
}

// A connection used for longer than its timeout keeps working: each
// exchange gets its own time, however long ago the connection was made.
// The timeout is one no PING takes, even on a busy machine.
func TestPipeOutlivesItsTimeout(t *testing.T) {
	srv := testredis.Start(t)
	const timeout = 2 * time.Second
	p, err := NewPipe([]string{srv.Addr}, timeout, Dial{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	for i := range 2 {
		if i > 0 {
			time.Sleep(timeout + timeout/2) // the connection is older than its timeout
		}
		p.Send(cmd("PING"))
		if r := p.Exchange(nil); r[0].Err != nil || string(r[0].Raw) != "+PONG\r\n" {
			t.Fatalf("PING %d, %v after the connection was made: %q, %v", i, time.Since(start), r[0].Raw, r[0].Err)
		}
	}
}
