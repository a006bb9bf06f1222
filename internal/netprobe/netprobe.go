// Package netprobe measures what a network fault does to the traffic
// between network namespaces: whether an address is reached, how many
// datagrams of a burst arrive, how long a round trip takes. Tests use it
// against a baseline measured in the same test.
package netprobe

import (
	"net"
	"os"
	"slices"
	"syscall"
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
// inside to on the address ip, and returns how many arrived. How many
// arrive must not depend on how the machine schedules the two ends: the
// receiving socket's buffer holds every datagram (nothing is lost to an
// overflow while the reader waits for a core), and the burst ends with
// end markers, sent one at a time until one is in the socket's queue,
// rather than after a quiet while (which a sender waiting for a core would
// end early). A veth delivers in the order sent (but for the rare packet
// that a sender moved to another core overtakes), so once a marker is in,
// every datagram sent before it has arrived or was dropped. A path that
// drops everything costs endMarkers milliseconds.
func Datagrams(from, to *os.File, ip string, count int) (int, error) {
	var rx *net.UDPConn
	if err := in(to, func() (err error) {
		rx, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
		return err
	}); err != nil {
		return 0, err
	}
	defer rx.Close()
	raw, err := rx.SyscallConn()
	if err != nil {
		return 0, err
	}
	if err := holdAll(rx, raw, count+endMarkers); err != nil {
		return 0, err
	}
	var tx *net.UDPConn
	if err := in(from, func() (err error) {
		tx, err = net.DialUDP("udp", nil, rx.LocalAddr().(*net.UDPAddr))
		return err
	}); err != nil {
		return 0, err
	}
	defer tx.Close()
	data, marker := []byte("troop netprobe"), []byte("troop netprobe end")
	n, ended := 0, false
	// drain reads what the socket's queue holds now, without waiting.
	drain := func() error {
		buf := make([]byte, 64)
		return raw.Read(func(fd uintptr) bool {
			for !ended {
				k, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
				if err != nil {
					break
				}
				if string(buf[:k]) == string(marker) {
					ended = true
				} else {
					n++
				}
			}
			return true
		})
	}
	for range count {
		tx.Write(data)
	}
	for i := 0; i < endMarkers && !ended; i++ {
		tx.Write(marker)
		if err := drain(); err != nil {
			return 0, err
		}
		if !ended {
			time.Sleep(time.Millisecond)
		}
	}
	return n, nil
}

// endMarkers bounds the end markers of a burst, sent a millisecond apart.
const endMarkers = 2000

// holdAll sizes rx's receive buffer for count small datagrams (each takes
// a kernel buffer of about a kilobyte, whatever its length), past the
// system's limit where the process may (root: SO_RCVBUFFORCE).
func holdAll(rx *net.UDPConn, raw syscall.RawConn, count int) error {
	size := 2048 * count
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, size)
	}); err != nil {
		return err
	}
	if serr != nil {
		return rx.SetReadBuffer(size)
	}
	return nil
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
