// Package testredis starts real redis-server processes for tests, on free
// loopback ports, and stops them by PID when the test ends.
package testredis

import (
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/freeport"
)

// Server is a redis-server started for a test.
type Server struct {
	Addr string
	Cmd  *exec.Cmd
}

// Path finds redis-server: $TROOP_REDIS_SERVER, else PATH.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TROOP_REDIS_SERVER"); p != "" {
		return p
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found on PATH: install it (Debian: apt-get install redis-server); make test does this when run as root")
	}
	return p
}

// Start runs a redis-server without persistence and waits until it answers
// PING; the test's cleanup kills it.
func Start(t testing.TB) *Server { return StartArgs(t) }

// StartArgs is Start with more arguments for redis-server, such as
// --requirepass or TLS ports. It waits until the plain port answers PING,
// or refuses it for want of a password (the server is up).
func StartArgs(t testing.TB, args ...string) *Server {
	t.Helper()
	addr, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	argv := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", t.TempDir()}, args...)
	cmd := exec.Command(Path(t), argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: addr, Cmd: cmd}
	t.Cleanup(s.Kill)
	WaitPing(t, addr)
	return s
}

// Kill stops the server (also when it is paused) and waits for it.
func (s *Server) Kill() {
	if s.Cmd.Process != nil {
		s.Cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot die until continued
		s.Cmd.Process.Kill()
		s.Cmd.Wait()
	}
}

// Restart kills the server and starts a new one on the same address with the
// same arguments (and an empty dataset), waiting until it answers PING.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	cmd := exec.Command(s.Cmd.Path, s.Cmd.Args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.Cmd = cmd
	WaitPing(t, s.Addr)
}

// WaitPing waits up to 10 s for addr to answer PING with +PONG (or -NOAUTH,
// from a server that wants a password).
func WaitPing(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			c.Write([]byte("*1\r\n$4\r\nPING\r\n"))
			buf := make([]byte, 7)
			_, err := io.ReadFull(c, buf)
			c.Close()
			if err == nil && (string(buf) == "+PONG\r\n" || string(buf) == "-NOAUTH") {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s does not answer PING within 10s", addr)
}
