// Package netprobe measures what a network fault does to the traffic
// between network namespaces: whether an address is reached, how many
// datagrams of a burst arrive, how long a round trip takes. Tests use it
// against a baseline measured in the same test.
package netprobe

import (
	"net"
	"os"
	"slices"
	"time"

	"github.com/troop-lab/troop/internal/netns"
)

// in runs f inside ns, or here when ns is nil.
func in(ns *os.File, f func() error) error {
	if ns == nil {
		return f()
	}
	return netns.Do(ns, f)
}

// Reach dials the TCP address addr from inside ns (nil: here) and hangs
// up; an error says it was not reached within timeout.
func Reach(ns *os.File, addr string, timeout time.Duration) error {
	var dial error
	if err := in(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err == nil {
			c.Close()
		}
		dial = err
		return nil
	}); err != nil {
		return err
	}
	return dial
}

// Datagrams sends count UDP datagrams from inside from to a socket opened
// inside to on the address ip, a few at a time so that the receiver keeps
// up, and returns how many arrived.
func Datagrams(from, to *os.File, ip string, count int) (int, error) {
	var rx *net.UDPConn
	if err := in(to, func() (err error) {
		rx, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
		return err
	}); err != nil {
		return 0, err
	}
	defer rx.Close()
	rx.SetReadBuffer(4 << 20)
	var tx *net.UDPConn
	if err := in(from, func() (err error) {
		tx, err = net.DialUDP("udp", nil, rx.LocalAddr().(*net.UDPAddr))
		return err
	}); err != nil {
		return 0, err
	}
	defer tx.Close()
	got := make(chan int)
	go func() {
		n, buf := 0, make([]byte, 64)
		for {
			// A burst is over when nothing more comes for a while.
			rx.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if _, err := rx.Read(buf); err != nil {
				got <- n
				return
			}
			n++
		}
	}()
	for i := range count {
		tx.Write([]byte("troop netprobe"))
		if i%50 == 49 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	return <-got, nil
}

// ConnectTimes times count TCP connects from inside ns to addr, one at a
// time. A connect takes one round trip (SYN out, SYN-ACK back), in the
// kernels alone: no server process is scheduled in between.
func ConnectTimes(ns *os.File, addr string, count int) ([]time.Duration, error) {
	var out []time.Duration
	err := in(ns, func() error {
		for range count {
			start := time.Now()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return err
			}
			out = append(out, time.Since(start))
			c.Close()
		}
		return nil
	})
	return out, err
}

// Median is the middle of ds (the upper one of an even count).
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
