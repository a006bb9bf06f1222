package fault

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/internal/netprobe"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// The tests run a real lab in address mode (1 dc x 3 racks x 1 node: three
// namespaces, three redis-servers, three troop nodes) and measure what
// each fault does to the traffic between its positions, against a
// baseline measured in the same test.

func TestMain(m *testing.M) { testlab.Main(m) }

func startLab(t *testing.T) *lab.Lab {
	t.Helper()
	return testlab.Start(t, lab.Spec{Netns: true, Shape: lab.Shape{DCs: 1, Racks: 3, NodesPerRack: 1}, ReplaceAfter: time.Hour})
}

func node(n lab.Node) Node {
	return Node{ID: n.Name, IP: netip.MustParseAddr(n.IP), Netns: n.Netns, NetnsInode: n.NetnsInode, Admin: n.StatsListen}
}

// target aims action at position x of l, with the others as its peers,
// under a fresh lease of a minute.
func target(t *testing.T, l *lab.Lab, x int, a chaos.Action) Target {
	t.Helper()
	now := time.Now()
	tg := Target{Lease: chaos.Lease{ID: lease.NewID(now), Group: "g", Backend: chaos.Lab, Action: a, Start: now, Until: now.Add(time.Minute)},
		Troop: testlab.Troop(t)}
	for i, n := range l.Nodes() {
		if i == x {
			tg.Node = node(n)
		} else {
			tg.Peers = append(tg.Peers, node(n))
		}
	}
	tg.Lease.Instance = chaos.Instance{ID: tg.Node.ID}
	// Whatever the test does, the fault does not outlive it.
	t.Cleanup(func() { Revert(context.Background(), tg) })
	return tg
}

// ns opens n's namespace for the test.
func ns(t *testing.T, n lab.Node) *os.File {
	t.Helper()
	f, err := lab.OpenNetns(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// datagrams sends count UDP datagrams from from's namespace to to's and
// returns how many arrived.
func datagrams(t *testing.T, from, to lab.Node, count int) int {
	t.Helper()
	n, err := netprobe.Datagrams(ns(t, from), ns(t, to), to.IP, count)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// roundTrips times count TCP connects, one round trip each, from n's
// namespace to addr.
func roundTrips(t *testing.T, n lab.Node, addr string, count int) []time.Duration {
	t.Helper()
	ds, err := netprobe.ConnectTimes(ns(t, n), addr, count)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func mustApply(t *testing.T, tg Target) {
	t.Helper()
	if err := Apply(context.Background(), tg); err != nil {
		t.Fatal(err)
	}
	if on, err := Present(context.Background(), tg); err != nil || !on {
		t.Fatalf("%s applied, yet present %v (%v)", tg.Lease.Action, on, err)
	}
}

func mustRevert(t *testing.T, tg Target) {
	t.Helper()
	for range 2 { // a second revert finds nothing to do
		if err := Revert(context.Background(), tg); err != nil {
			t.Fatal(err)
		}
	}
	if on, err := Present(context.Background(), tg); err != nil || on {
		t.Fatalf("%s reverted, yet present %v (%v)", tg.Lease.Action, on, err)
	}
}

// Every partition mode drops exactly the directions chaos.PartitionCuts
// names, and nothing after its revert.
func TestPartitionModes(t *testing.T) {
	l := startLab(t)
	nodes := l.Nodes()
	reach := func() map[string]bool {
		m := map[string]bool{}
		for _, a := range nodes {
			for _, b := range nodes {
				if a.Name != b.Name {
					m[a.Name+">"+b.Name] = datagrams(t, a, b, 20) > 0
				}
			}
		}
		return m
	}
	for _, mode := range chaos.PartitionModes {
		t.Run(string(mode), func(t *testing.T) {
			tg := target(t, l, 1, chaos.Action{Kind: chaos.Partition, Duration: time.Minute, Partition: mode})
			mustApply(t, tg)
			var ids []string
			for _, n := range nodes {
				ids = append(ids, n.Name)
			}
			cuts, _ := chaos.PartitionCuts(mode, tg.Node.ID, ids)
			cut := map[string]bool{}
			for _, c := range cuts {
				cut[c.From+">"+c.To] = true
			}
			for pair, ok := range reach() {
				if ok == cut[pair] {
					t.Errorf("%s: %s reaches: %v, cut: %v", mode, pair, ok, cut[pair])
				}
			}
			// The host, where clients are, still reaches every node.
			for _, n := range nodes {
				if err := lab.Ping(context.Background(), n.Listen); err != nil {
					t.Errorf("%s: the host cannot reach %s: %v", mode, n.Name, err)
				}
			}
			mustRevert(t, tg)
			for pair, ok := range reach() {
				if !ok {
					t.Errorf("%s reverted: %s does not reach", mode, pair)
				}
			}
		})
	}
}

// A loss of 20% drops 20% ± 5% of the packets the node sends to a peer.
func TestLoss(t *testing.T) {
	l := startLab(t)
	nodes := l.Nodes()
	const sent = 4000
	lost := func() float64 { return 100 * float64(sent-datagrams(t, nodes[0], nodes[1], sent)) / sent }
	before := lost()
	tg := target(t, l, 0, chaos.Action{Kind: chaos.Loss, Duration: time.Minute, Percent: 20})
	mustApply(t, tg)
	during := lost()
	back := datagrams(t, nodes[1], nodes[0], sent) // the other way is not lossy
	mustRevert(t, tg)
	after := lost()
	t.Logf("loss 20%%: %d datagrams from %s to %s: %.2f%% lost before, %.2f%% during, %.2f%% after; the other way %.2f%% lost",
		sent, nodes[0].Name, nodes[1].Name, before, during, after, 100*float64(sent-back)/sent)
	if before > 1 || after > 1 || back < sent*99/100 {
		t.Fatalf("%.2f%% lost without the fault (before), %.2f%% (after), %d of %d the other way: the measurement is broken", before, after, back, sent)
	}
	if during-before < 15 || during-before > 25 {
		t.Errorf("loss 20%%: %.2f%% lost, %.2f%% more than before; want 20 ± 5", during, during-before)
	}
}

// A delay of 50 ms adds 50 ms to a round trip to a peer (a TCP connect to
// its redis-server's address), and a jitter spreads it. The user-space
// queue is a process: on a machine whose cores are busy it wakes late, and
// adds to each round trip what the scheduler makes it wait. So the bounds
// are what a busy machine cannot move: a delay adds at least 40 ms (it
// holds every packet at least that long) and less than twice its 50 ms (it
// is not applied on both ways, nor twice); a jitter widens the spread of the
// round trips, which waiting only widens further; the other nodes' round
// trips and the one after the revert gain less than the delay.
func TestDelay(t *testing.T) {
	l := startLab(t)
	nodes := l.Nodes()
	peer := nodes[1].Redis
	t.Logf("netem on this kernel: %v (without it, the user-space queue)", netemAvailable())
	const pings = 40
	measure := func(what string, a chaos.Action, ok func(before time.Duration, during []time.Duration) string) {
		before := netprobe.Median(roundTrips(t, nodes[0], peer, pings))
		tg := target(t, l, 0, a)
		mustApply(t, tg)
		during := roundTrips(t, nodes[0], peer, pings)
		other := netprobe.Median(roundTrips(t, nodes[2], nodes[1].Redis, pings)) // between two other nodes: no delay
		mustRevert(t, tg)
		after := netprobe.Median(roundTrips(t, nodes[0], peer, pings))
		t.Logf("%s: median round trip %s -> %s %v before, %v during, %v after; %s -> %s %v during",
			what, nodes[0].Name, nodes[1].Name, before, netprobe.Median(during), after, nodes[2].Name, nodes[1].Name, other)
		if why := ok(before, during); why != "" {
			t.Errorf("%s: %s", what, why)
		}
		if other > 40*time.Millisecond || after > before+40*time.Millisecond {
			t.Errorf("%s: round trips without the fault: %v between other nodes, %v after the revert (%v before); want less than the delay added", what, other, after, before)
		}
	}
	measure("delay 50ms", chaos.Action{Kind: chaos.Delay, Duration: time.Minute, Delay: 50 * time.Millisecond},
		func(before time.Duration, during []time.Duration) string {
			if added := netprobe.Median(during) - before; added < 40*time.Millisecond || added >= 100*time.Millisecond {
				return fmt.Sprintf("added %v to the median round trip; want at least 40 ms and less than 100", added)
			}
			return ""
		})
	measure("delay 50ms jitter 20ms", chaos.Action{Kind: chaos.Delay, Duration: time.Minute, Delay: 50 * time.Millisecond, Jitter: 20 * time.Millisecond},
		func(before time.Duration, during []time.Duration) string {
			slices.Sort(during)
			p10, p50, p90 := during[pings/10]-before, during[pings/2]-before, during[pings*9/10]-before
			if p50 < 40*time.Millisecond || p50 >= 100*time.Millisecond || p90-p10 < 15*time.Millisecond {
				return fmt.Sprintf("added p10 %v, p50 %v, p90 %v; want a median of at least 40 ms and less than 100, p10 and p90 15 ms apart or more", p10, p50, p90)
			}
			return ""
		})
}

// A fault that fails halfway is reverted: nothing of it stays.
func TestNothingHalfApplied(t *testing.T) {
	l := startLab(t)
	tg := target(t, l, 0, chaos.Action{Kind: chaos.Partition, Duration: time.Minute, Partition: chaos.Isolate})
	// The last peer's namespace cannot be entered: the rules in the others'
	// are made first, then the apply fails.
	bad := tg
	bad.Peers = append(slices.Clone(tg.Peers[:1]), tg.Peers[1])
	bad.Peers[1].Netns = "/proc/self/fd/999999"
	if err := Apply(context.Background(), bad); err == nil || !strings.Contains(err.Error(), tg.Peers[1].ID) {
		t.Fatalf("apply with an unreachable peer: %v", err)
	}
	if on, err := Present(context.Background(), tg); err != nil || on {
		t.Errorf("after a failed apply: present %v (%v)", on, err)
	}

	// A delay whose queue cannot start leaves no rule and no process.
	d := target(t, l, 0, chaos.Action{Kind: chaos.Delay, Duration: time.Minute, Delay: 10 * time.Millisecond})
	d.Troop = "/bin/false"
	if err := Apply(context.Background(), d); err == nil {
		t.Fatal("a delay without its queue applied")
	}
	if on, err := Present(context.Background(), d); err != nil || on {
		t.Errorf("after a failed delay: present %v (%v)", on, err)
	}

	for _, tc := range []struct {
		tg   Target
		want string
	}{
		{func() Target { x := tg; x.Peers = nil; return x }(), "partition of dc1-rack1-1: its group has no other live instance to come between"},
		{func() Target { x := tg; x.Lease.Action.Partition = chaos.Bridge; x.Peers = x.Peers[:1]; return x }(), "a bridge needs one on each side of it"},
		{target(t, l, 0, chaos.Action{Kind: chaos.Pause, Duration: time.Minute}), "pause is not a network or clock fault"},
	} {
		if err := Apply(context.Background(), tc.tg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.tg.Lease.Action, err, tc.want)
		}
	}
}

// A delay's queue process ends by itself when its namespace loses its
// network (the lab stops), and Orphans ends it when asked.
func TestQueueProcessEnds(t *testing.T) {
	l := startLab(t)
	tg := target(t, l, 0, chaos.Action{Kind: chaos.Delay, Duration: time.Minute, Delay: 10 * time.Millisecond})
	mustApply(t, tg)
	if err := Orphans(tg.Lease.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(Processes(tg.Lease.ID)); n != 0 {
		t.Errorf("%d queue processes after Orphans", n)
	}
	// With no process holding the queue, packets pass (--queue-bypass).
	if rt := netprobe.Median(roundTrips(t, l.Nodes()[0], l.Nodes()[1].Redis, 10)); rt > 20*time.Millisecond {
		t.Errorf("round trip %v with the queue's process gone", rt)
	}
	mustRevert(t, tg)

	tg = target(t, l, 0, chaos.Action{Kind: chaos.Delay, Duration: time.Minute, Delay: 10 * time.Millisecond})
	mustApply(t, tg)
	if n := len(Processes(tg.Lease.ID)); n != 1 {
		t.Fatalf("%d queue processes, want 1", n)
	}
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the queue process to end with its lab", func() bool {
		return len(Processes(tg.Lease.ID)) == 0
	})
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
