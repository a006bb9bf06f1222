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
