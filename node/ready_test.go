package node

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// ready is a node's GET /ready: the status and the body's first line
// (0 when the node does not answer).
func ready(n lab.Node) (int, string) {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get("http://" + n.StatsListen + "/ready")
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(b))
}

// waitReady waits until n's /ready answers status with a body that
// contains want, and fails the test otherwise.
func waitReady(t *testing.T, n lab.Node, status int, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got int
	var body string
	for time.Now().Before(deadline) {
		if got, body = ready(n); got == status && strings.Contains(body, want) {
			return
		}
		time.Sleep(50 * time.Millisecond) // a poll interval, not a synchronisation
	}
	t.Fatalf("%s /ready: %d %q after %v, want %d with %q", n.Name, got, body, within, status, want)
}

// /ready answers 503 while the node's redis-server is paused (SIGSTOP) or
// stopped, and while fewer than a quorum of its datacenter's racks are
// reachable, saying why; 200 once they are back.
func TestReady(t *testing.T) {
	l := testlab.Start(t, lab.Spec{ReplaceAfter: time.Hour})
	nodes := l.Nodes()
	n := nodes[0]
	waitReady(t, n, http.StatusOK, "ready", 10*time.Second)

	resume := pause(t, l, n.Name, lab.RedisProc)
	waitReady(t, n, http.StatusServiceUnavailable, "redis-server "+n.Redis+" has not answered a PING for", 10*time.Second)
	resume()
	waitReady(t, n, http.StatusOK, "ready", 10*time.Second)

	if err := l.StopNode(n.Name, lab.RedisProc); err != nil {
		t.Fatal(err)
	}
	waitReady(t, n, http.StatusServiceUnavailable, "redis-server "+n.Redis, 10*time.Second)
	if err := l.StartNode(n.Name, lab.RedisProc); err != nil {
		t.Fatal(err)
	}
	waitReady(t, n, http.StatusOK, "ready", 10*time.Second)

	// A node in standby serves no clients.
	post := func(path string) {
		t.Helper()
		res, err := http.Post("http://"+n.StatsListen+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %s", path, res.Status)
		}
	}
	post("/state/standby")
	if code, body := ready(n); code != http.StatusServiceUnavailable || !strings.Contains(body, "standby") {
		t.Errorf("in standby: %d %q, want 503", code, body)
	}
	post("/state/normal")
	if code, body := ready(n); code != http.StatusOK {
		t.Errorf("back to normal: %d %q, want 200", code, body)
	}

	// One rack of three down leaves a quorum; two do not.
	if err := l.StopNode(nodes[1].Name, lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	waitState(t, []lab.Node{n}, nodes[1], "down", 10*time.Second)
	if code, body := ready(n); code != http.StatusOK {
		t.Errorf("one rack of three down: %d %q, want 200", code, body)
	}
	if err := l.StopNode(nodes[2].Name, lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	waitReady(t, n, http.StatusServiceUnavailable, "1 of the 3 racks of datacenter dc1 are reachable, fewer than the quorum of 2", 10*time.Second)
	if err := l.StartNode(nodes[2].Name, lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	waitReady(t, n, http.StatusOK, "ready", 10*time.Second)
}

// pause stops (SIGSTOP) a process of a lab node and returns the function
// that resumes it (SIGCONT), which also runs when the test ends.
func pause(t *testing.T, l *lab.Lab, node string, kind lab.Proc) (resume func()) {
	t.Helper()
	st, err := l.Status().Node(node)
	if err != nil {
		t.Fatal(err)
	}
	pid := st.NodePID
	if kind == lab.RedisProc {
		pid = st.RedisPID
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	return resume
}
