package node

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// The tests in this file run labs of real troop processes (the binary is
// built once by TestMain), because they signal nodes: SIGKILL, SIGSTOP.
// A fuzzing run (make fuzz) runs no test, so it skips the build.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	testlab.Main(m)
}

// describeState is peer's state in node's /cluster_describe ("" when the
// node does not answer).
func describeState(node, peer lab.Node) string {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get("http://" + node.StatsListen + "/cluster_describe")
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	var described []ClusterNode
	if json.NewDecoder(res.Body).Decode(&described) != nil {
		return ""
	}
	for _, d := range described {
		if d.DynListen == peer.DynListen {
			return d.State
		}
	}
	return ""
}

// waitState waits until every observer sees peer in state, and returns how
// long that took.
func waitState(t *testing.T, observers []lab.Node, peer lab.Node, state string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		seen := 0
		for _, o := range observers {
			if describeState(o, peer) == state {
				seen++
			}
		}
		if seen == len(observers) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s not %s on all of %d nodes within %v (%d see it)", peer.Name, state, len(observers), within, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A killed node and a paused (SIGSTOP) node are each marked down by their
// peers within 3 s, and up again once they are back. The paused node, once
// it runs again after 3 s stopped, finds its peers' PONGs of that time
// waiting unread: it counts its own pause, and marks neither peer down.
func TestDetectsKilledAndPausedNodes(t *testing.T) {
	l := testlab.Start(t, lab.Spec{ReplaceAfter: time.Hour})
	nodes := l.Nodes()
	victim, others := nodes[2], nodes[:2]
	waitState(t, others, victim, "up", 5*time.Second)

	if _, err := l.Kill(victim.Name, lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	if took := waitState(t, others, victim, "down", 10*time.Second); took > 3*time.Second {
		t.Errorf("killed node marked down after %v, want within 3s", took)
	} else {
		t.Logf("killed node marked down after %v", took)
	}
	if err := l.StartNode(victim.Name, lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	waitState(t, others, victim, "up", 10*time.Second)

	before := nodeInfo(t, victim.StatsListen)
	resume := pause(t, l, victim.Name, lab.NodeProc)
	stopped := time.Now()
	if took := waitState(t, others, victim, "down", 10*time.Second); took > 3*time.Second {
		t.Errorf("paused node marked down after %v, want within 3s", took)
	} else {
		t.Logf("paused node marked down after %v", took)
	}
	// Twice the time the detector takes for a silent peer, so that without
	// the guard the node would see both peers silent past their threshold.
	time.Sleep(time.Until(stopped.Add(3 * time.Second)))
	resume()
	waitState(t, others, victim, "up", 10*time.Second)
	after := nodeInfo(t, victim.StatsListen)
	if after.PeersMarkedDown != before.PeersMarkedDown {
		t.Errorf("the paused node marked %d peers down when it ran again: its own pause counted as their silence", after.PeersMarkedDown-before.PeersMarkedDown)
	}
	if after.LocalPauses == before.LocalPauses {
		t.Errorf("the paused node counted no local pause (local_pauses %d)", after.LocalPauses)
	}
}

// Catch-up: under a steady DC_QUORUM write load, one node of three is
// stopped for 30 s and started again. Within 10 s of its return every key
// written meanwhile is on all three redis-servers with the same value.
func TestCatchUpAfterOutage(t *testing.T) {
	outage := 30 * time.Second
	if os.Getenv("TROOP_SHORT_OUTAGE") != "" { // for quick local runs
		outage = 5 * time.Second
	}
	l := testlab.Start(t, lab.Spec{ReplaceAfter: time.Hour, ReadConsistency: "DC_QUORUM", WriteConsistency: "DC_QUORUM"})
	nodes := l.Nodes()
	victim := nodes[2]

	// The load: two writers, one through each surviving node, each at most
	// 100 writes a second, bounded in time by stop and in count by limit.
	const limit = 20000
	var (
		mu      sync.Mutex
		written = map[string]string{} // key -> last value acknowledged
		phase   atomic.Int32          // 0 before, 1 during, 2 after the outage
		during  = map[string]bool{}
		failed  atomic.Int64
		acked   [3]atomic.Int64 // writes acknowledged in each phase
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for w := 0; w < 2; w++ {
		c := dial(t, nodes[w].Listen)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for i := 0; i < limit; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				key, val := fmt.Sprintf("w%d:%d", w, i%500), fmt.Sprintf("v%d-%d", w, i)
				p := phase.Load()
				if v, err := c.try("SET", key, val); err != nil || v.IsError() {
					failed.Add(1)
					continue
				}
				mu.Lock()
				written[key] = val
				if p == 1 {
					during[key] = true
				}
				mu.Unlock()
				acked[p].Add(1)
			}
		}()
	}
	stopLoad := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	t.Cleanup(stopLoad)

	// loadGoesOn waits until the writers have had n writes of phase p
	// acknowledged: a count, not a time, which a busy machine could give
	// to anything but the load.
	loadGoesOn := func(p, n int64) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); acked[p].Load() < n; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d writes acknowledged in phase %d within 2 minutes, want %d (%d failed)", acked[p].Load(), p, n, failed.Load())
			}
		}
	}
	loadGoesOn(0, 50) // the load runs before the outage
	phase.Store(1)
	if err := l.StopNode(victim.Name, lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	time.Sleep(outage)
	phase.Store(2)
	if err := l.StartNode(victim.Name, lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	loadGoesOn(2, 50) // the load goes on after the return
	stopLoad()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d DC_QUORUM writes failed with one replica of three down", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(during) == 0 {
		t.Fatal("no key was written during the outage")
	}
	redis := make([]*client, len(nodes))
	for i, n := range nodes {
		redis[i] = dial(t, n.Redis)
	}
	var lastMiss string
	for time.Since(back) < 10*time.Second {
		lastMiss = ""
		for key := range during {
			want := written[key]
			for i, r := range redis {
				if got := r.must("GET", key); got != want {
					lastMiss = fmt.Sprintf("%s's redis-server has %s = %q, want %q", nodes[i].Name, key, got, want)
					break
				}
			}
			if lastMiss != "" {
				break
			}
		}
		if lastMiss == "" {
			t.Logf("%d keys written during a %v outage are on all three replicas %v after the node's return",
				len(during), outage, time.Since(back).Round(time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("10 s after the node's return: %s", lastMiss)
}
