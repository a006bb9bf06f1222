package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPickIsFreeUniqueAndBelowEphemeral(t *testing.T) {
	seen := map[string]bool{}
	low := ephemeralLow()
	for i := 0; i < 50; i++ {
		addr, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if low-floor >= minRange && (port < floor || port >= low) {
			t.Fatalf("port %d outside [%d, %d)", port, floor, low)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("picked %s, but it cannot be bound: %v", addr, err)
		}
		l.Close()
	}
}

// A port another process holds is not handed out: the lock is the
// machine-wide reservation.
func TestPickSkipsPortsOthersHold(t *testing.T) {
	addr, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	// This process holds the lock: a second descriptor (as another
	// process would open) cannot take it.
	mu.Lock()
	delete(issued, port)
	mu.Unlock()
	if reserve(port) {
		t.Fatalf("port %d reserved twice", port)
	}
}

// PickPair hands out two free consecutive ports, neither handed out
// before, nor after by Pick.
func TestPickPair(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		a, b, err := PickPair()
		if err != nil {
			t.Fatal(err)
		}
		_, pa, _ := net.SplitHostPort(a)
		_, pb, _ := net.SplitHostPort(b)
		na, _ := strconv.Atoi(pa)
		nb, _ := strconv.Atoi(pb)
		if nb != na+1 || seen[a] || seen[b] {
			t.Fatalf("pair %s %s: not consecutive, or handed out before", a, b)
		}
		seen[a], seen[b] = true, true
		if p, err := Pick(); err != nil || seen[p] {
			t.Fatalf("Pick after PickPair: %s, %v", p, err)
		}
	}
}
