package labchaos

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// The tests run one real lab of three racks (1 dc x 3 racks x 1 node) with
// the troop binary built from this module, and act on it in turn; every
// subtest leaves the lab whole again for the next.

const replaceAfterDelay = 500 * time.Millisecond

func TestMain(m *testing.M) { testlab.Main(m) }

func startLab(t *testing.T) *lab.Lab {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real lab")
	}
	return testlab.Start(t, lab.Spec{
		Shape:        lab.Shape{DCs: 1, Racks: 3, NodesPerRack: 1},
		ReplaceAfter: replaceAfterDelay,
		ServeSocket:  true, // so that New(dir) is tested through the socket too
	})
}

func labGroup(sel chaos.Selector) *chaos.Group {
	return &chaos.Group{Name: "g", Backend: chaos.Lab, Selector: sel, Enabled: true}
}

func nodePIDs(t *testing.T, l *lab.Lab) map[string]int {
	t.Helper()
	pids := map[string]int{}
	for _, n := range l.Status().Nodes {
		pids[n.Name] = n.NodeP.PID
	}
	return pids
}

func names(insts []chaos.Instance) []string {
	var out []string
	for _, in := range insts {
		out = append(out, in.ID)
	}
	sort.Strings(out)
	return out
}

func TestLabBackend(t *testing.T) {
	l := startLab(t)
	term := NewWith(FromLab(l))
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()

	t.Run("instances", func(t *testing.T) {
		for _, tc := range []struct {
			sel  chaos.Selector
			want int
		}{
			{chaos.Selector{}, 3},
			{chaos.Selector{DC: "dc1"}, 3},
			{chaos.Selector{Rack: "rack2"}, 1},
			{chaos.Selector{Node: "dc1-rack3-1"}, 1},
			{chaos.Selector{DC: "dc2"}, 0},
		} {
			got, err := term.Instances(ctx, labGroup(tc.sel))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Errorf("%s: %v, want %d instances", tc.sel, names(got), tc.want)
			}
		}
		got, _ := term.Instances(ctx, labGroup(chaos.Selector{Rack: "rack2"}))
		if len(got) == 1 {
			in := got[0]
			if in.ID != "dc1-rack2-1" || in.Labels["rack"] != "rack2" || in.Labels["dc"] != "dc1" || in.Labels["node"] != in.ID {
				t.Errorf("rack2 instance = %+v", in)
			}
			g := labGroup(chaos.Selector{})
			g.Exceptions = []chaos.Exception{{Key: "rack", Pattern: "rack*"}}
			if !g.Excepted(in) {
				t.Error("exception rack=rack* does not cover the rack2 instance")
			}
		}
		// The same answer through the supervisor's socket.
		viaSocket, err := New(l.Dir()).Instances(ctx, labGroup(chaos.Selector{Rack: "rack2"}))
		if err != nil || len(viaSocket) != 1 {
			t.Errorf("via socket: %v, %v", names(viaSocket), err)
		}
		if _, err := term.Instances(ctx, &chaos.Group{Name: "d", Backend: chaos.Docker}); err == nil {
			t.Error("a docker group was accepted")
		}
	})

	t.Run("terminate", func(t *testing.T) {
		before := nodePIDs(t, l)
		insts, err := term.Instances(ctx, labGroup(chaos.Selector{Rack: "rack2"}))
		if err != nil || len(insts) != 1 {
			t.Fatalf("instances: %v, %v", names(insts), err)
		}
		victim := insts[0]
		at := time.Now()
		if err := term.Act(ctx, victim, chaos.Action{Kind: chaos.Terminate}); err != nil {
			t.Fatal(err)
		}
		// A dead node is no candidate until it is back. The supervisor
		// notices the death asynchronously, so give it a moment (well
		// under replace-after).
		var left []chaos.Instance
		for deadline := time.Now().Add(replaceAfterDelay / 2); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if left, _ = term.Instances(ctx, labGroup(chaos.Selector{})); len(left) == 2 {
				break
			}
		}
		if len(left) != 2 || names(left)[0] != "dc1-rack1-1" || names(left)[1] != "dc1-rack3-1" {
			t.Errorf("after the kill: %v, want the two others", names(left))
		}
		took, err := term.AwaitRecovery(ctx, victim, at)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("recovered in %v", took)
		if took < replaceAfterDelay || took >= replaceAfterDelay+5*time.Second {
			t.Errorf("recovery took %v, want between %v and %v", took, replaceAfterDelay, replaceAfterDelay+5*time.Second)
		}
		after := nodePIDs(t, l)
		for name, pid := range before {
			switch {
			case name == victim.ID && after[name] == pid:
				t.Errorf("%s kept pid %d", name, pid)
			case name != victim.ID && after[name] != pid:
				t.Errorf("%s changed pid %d -> %d: more than one node was killed", name, pid, after[name])
			}
		}
		st, _ := l.Status().Node(victim.ID)
		if st.NodeP.Restarts != 1 {
			t.Errorf("%s: %d replacements, want 1", victim.ID, st.NodeP.Restarts)
		}
	})

	t.Run("restart leased", func(t *testing.T) {
		victim := instance("g", mustNode(t, l, "dc1-rack1-1"))
		before := nodePIDs(t, l)
		restart := chaos.Action{Kind: chaos.Restart}
		if err := term.Act(ctx, victim, restart); err == nil {
			t.Error("Act(restart) accepted: restart is leased")
		}
		d, leased, err := term.LeaseFor(ctx, victim, restart)
		if err != nil || !leased || d != 0 {
			t.Fatalf("LeaseFor(restart) = %v, %v, %v; want a lease that ends as it begins", d, leased, err)
		}
		at := time.Now()
		ls := leaseOf(victim, restart, at, d)
		if _, err := term.Begin(ctx, ls); err != nil {
			t.Fatal(err)
		}
		if st, _ := l.Status().Node(victim.ID); st.NodeP.State != lab.Stopped {
			t.Fatalf("after Begin(restart): %s, want stopped until the revert", st.NodeP.State)
		}
		if err := term.Revert(ctx, ls); err != nil {
			t.Fatal(err)
		}
		if _, err := term.AwaitRecovery(ctx, victim, at); err != nil {
			t.Fatal(err)
		}
		after := nodePIDs(t, l)
		if after[victim.ID] == before[victim.ID] {
			t.Errorf("pid %d unchanged by restart", after[victim.ID])
		}
		if err := lab.Ping(ctx, mustNode(t, l, victim.ID).Listen); err != nil {
			t.Errorf("after restart: %v", err)
		}
	})

	t.Run("stop leased", func(t *testing.T) {
		victim := instance("g", mustNode(t, l, "dc1-rack3-1"))
		before := nodePIDs(t, l)
		stop := chaos.Action{Kind: chaos.Stop}
		if err := term.Act(ctx, victim, stop); err == nil {
			t.Error("Act(stop) accepted: stop is leased")
		}
		d, leased, err := term.LeaseFor(ctx, victim, stop)
		if err != nil || !leased || d != replaceAfterDelay {
			t.Fatalf("LeaseFor(stop) = %v, %v, %v; want the replace-after delay %v", d, leased, err, replaceAfterDelay)
		}
		at := time.Now()
		ls := leaseOf(victim, stop, at, d)
		if _, err := term.Begin(ctx, ls); err != nil {
			t.Fatal(err)
		}
		if st, _ := l.Status().Node(victim.ID); st.NodeP.State != lab.Stopped {
			t.Fatalf("after Begin(stop): %s, want stopped", st.NodeP.State)
		}
		for range 2 { // idempotent
			if err := term.Revert(ctx, ls); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := term.AwaitRecovery(ctx, victim, at); err != nil {
			t.Fatal(err)
		}
		if after := nodePIDs(t, l); after[victim.ID] == before[victim.ID] {
			t.Errorf("pid %d unchanged by stop", after[victim.ID])
		}
	})

	t.Run("pause leased", func(t *testing.T) {
		n := mustNode(t, l, "dc1-rack1-1")
		victim := instance("g", n)
		before := nodePIDs(t, l)
		pause := chaos.Action{Kind: chaos.Pause, Duration: time.Minute}
		if d, leased, err := term.LeaseFor(ctx, victim, pause); d != time.Minute || !leased || err != nil {
			t.Fatalf("LeaseFor(pause) = %v, %v, %v", d, leased, err)
		}
		at := time.Now()
		ls := leaseOf(victim, pause, at, time.Minute)
		undo, err := term.Begin(ctx, ls)
		if err != nil {
			t.Fatal(err)
		}
		ls.Undo = undo
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err = lab.Ping(short, n.Listen)
		cancel()
		if err == nil {
			t.Error("a paused node answered PING")
		}
		for range 2 {
			if err := term.Revert(ctx, ls); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := term.AwaitRecovery(ctx, victim, at); err != nil {
			t.Fatal(err)
		}
		if after := nodePIDs(t, l); after[victim.ID] != before[victim.ID] {
			t.Errorf("pause changed the pid %d -> %d", before[victim.ID], after[victim.ID])
		}
		// Without undo data (the monkey died inside Begin) the revert
		// finds the node's process itself.
		ls.Undo = nil
		ls.Undo, _ = term.Begin(ctx, ls)
		if err := term.Revert(ctx, chaos.Lease{ID: ls.ID, Instance: victim, Action: pause}); err != nil {
			t.Fatal(err)
		}
		if err := lab.Ping(ctx, n.Listen); err != nil {
			t.Errorf("after a revert without undo data: %v", err)
		}
	})

	t.Run("burn-cpu leased", func(t *testing.T) {
		victim := instance("g", mustNode(t, l, "dc1-rack2-1"))
		burn := chaos.Action{Kind: chaos.BurnCPU, Duration: time.Minute}
		// A long lease is ended by the revert ...
		long := leaseOf(victim, burn, time.Now(), time.Minute)
		undo, err := term.Begin(ctx, long)
		if err != nil {
			t.Fatal(err)
		}
		long.Undo = undo
		pid, ticks, ok := undoProcess(long)
		if !ok || !lab.Ours(pid, ticks, long.ID) {
			t.Fatalf("no burner running for undo data %v", undo)
		}
		if err := term.Revert(ctx, long); err != nil {
			t.Fatal(err)
		}
		if !waitGone(pid, ticks, 5*time.Second) {
			t.Errorf("burner %d still runs after the revert", pid)
		}
		// ... a short one ends by itself.
		short := leaseOf(victim, burn, time.Now(), 500*time.Millisecond)
		undo, err = term.Begin(ctx, short)
		if err != nil {
			t.Fatal(err)
		}
		short.Undo = undo
		pid, ticks, _ = undoProcess(short)
		t.Cleanup(func() { term.Revert(context.Background(), short) })
		if !waitGone(pid, ticks, 10*time.Second) {
			t.Errorf("burner %d still runs after its lease ended", pid)
		}
	})

	t.Run("recovery bounded by ctx", func(t *testing.T) {
		// Right after a kill the node cannot be back before replace-after.
		victim := instance("g", mustNode(t, l, "dc1-rack2-1"))
		at := time.Now()
		if err := term.Act(ctx, victim, chaos.Action{Kind: chaos.Terminate}); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if _, err := term.AwaitRecovery(short, victim, at); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("short wait: %v, want a deadline error", err)
		}
		if _, err := term.AwaitRecovery(ctx, victim, at); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("network faults need address mode", func(t *testing.T) {
		x := instance("g", mustNode(t, l, "dc1-rack1-1"))
		ls := leaseOf(x, chaos.Action{Kind: chaos.Loss, Duration: time.Minute, Percent: 20}, time.Now(), time.Minute)
		ls.Peers = []chaos.Instance{instance("g", mustNode(t, l, "dc1-rack2-1"))}
		_, err := term.Begin(ctx, ls)
		if err == nil || !strings.Contains(err.Error(), "loss of dc1-rack1-1 needs a lab in address mode (troop lab up --netns)") {
			t.Errorf("loss on a loopback lab: %v", err)
		}
	})
}

func leaseOf(inst chaos.Instance, a chaos.Action, start time.Time, d time.Duration) chaos.Lease {
	return chaos.Lease{ID: lease.NewID(start), Group: inst.Group, Backend: chaos.Lab, Instance: inst,
		Action: a, Start: start, Until: start.Add(d)}
}

func waitGone(pid int, ticks uint64, within time.Duration) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !lab.Ours(pid, ticks) {
			return true
		}
	}
	return false
}

func mustNode(t *testing.T, l *lab.Lab, name string) lab.Node {
	t.Helper()
	n, ok := l.Node(name)
	if !ok {
		t.Fatalf("no node %s", name)
	}
	return n
}

func TestMatches(t *testing.T) {
	n := lab.Node{Name: "dc1-rack2-1", DC: "dc1", Rack: "rack2"}
	for _, tc := range []struct {
		sel  chaos.Selector
		want bool
	}{
		{chaos.Selector{}, true},
		{chaos.Selector{DC: "dc1", Rack: "rack2"}, true},
		{chaos.Selector{Rack: "rack1"}, false},
		{chaos.Selector{Node: "dc1-rack2-1"}, true},
		{chaos.Selector{DC: "dc2", Node: "dc1-rack2-1"}, false},
	} {
		if got := Matches(tc.sel, n); got != tc.want {
			t.Errorf("Matches(%s) = %v", tc.sel, got)
		}
	}
}

func TestNewWithoutLab(t *testing.T) {
	_, err := New(t.TempDir()).Instances(t.Context(), labGroup(chaos.Selector{}))
	if err == nil {
		t.Fatal("no error without a lab")
	}
	t.Log(err)
}
