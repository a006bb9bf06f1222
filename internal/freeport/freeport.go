// Package freeport picks loopback ports for the servers troop starts (lab
// clusters, tests, benchmarks).
//
// The usual trick, listening on port 0 and closing the listener, hands out a
// port from the kernel's ephemeral range, where any outgoing connection on the
// machine may take it as its source port before the server binds it. Pick
// chooses below that range instead, at random, so only another picker could
// collide, and checks that the port is free now. Within one process it never
// hands out the same port twice, and across processes it holds a lock on
// each port it handed out (a file under the system's temporary directory,
// locked until the process ends), which other pickers respect: tests of
// several packages run at once, each starting servers on ports it picked a
// moment before they bind them.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

const (
	floor    = 10000 // lowest port Pick uses
	minRange = 2000  // fewer ports than this below the ephemeral range: use port 0 instead
)

var (
	mu     sync.Mutex
	issued = map[int]bool{}
	held   []*os.File // the locks on the ports handed out
)

// Pick returns a free "127.0.0.1:port".
func Pick() (string, error) {
	low := ephemeralLow()
	if low-floor < minRange {
		return pickZero()
	}
	mu.Lock()
	defer mu.Unlock()
	for try := 0; try < 100; try++ {
		port := floor + rand.IntN(low-floor)
		if issued[port] {
			continue
		}
		if !reserve(port) {
			continue
		}
		issued[port] = true // held, free or not: another try picks another port
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		return addr, nil
	}
	return pickZero()
}

func pickZero() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 by
// default on Linux).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil || low <= 0 {
		return 32768
	}
	return low
}

// reserve takes the machine-wide lock on port, and keeps it until the
// process ends; false when another process holds it. Without a lock
// directory, every port counts as free of other pickers.
func reserve(port int) bool {
	dir := filepath.Join(os.TempDir(), "troop-freeport")
	if err := os.MkdirAll(dir, 0o1777); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	held = append(held, f) // the lock lives as long as the descriptor
	return true
}
