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
		if port := floor + rand.IntN(low-floor); take(port) {
			return addr(port), nil
		}
	}
	return pickZero()
}

// PickPair returns two free loopback addresses on consecutive ports, port
// and port+1, as Dynomite's configurations place a node's client port
// after its peer port (which a client of its /cluster_describe assumes).
func PickPair() (string, string, error) {
	low := ephemeralLow()
	mu.Lock()
	defer mu.Unlock()
	for try := 0; try < 100 && low-floor >= minRange; try++ {
		if port := floor + rand.IntN(low-floor-1); take(port) && take(port+1) {
			return addr(port), addr(port + 1), nil
		}
	}
	return "", "", fmt.Errorf("found no two free consecutive loopback ports below %d", low)
}

// take reserves port if no one holds it and it is free. A port tried is
// never tried again: held, free or not. mu is held.
func take(port int) bool {
	if issued[port] || !reserve(port) {
		return false
	}
	issued[port] = true
	l, err := net.Listen("tcp", addr(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

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
