package labchaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/internal/netprobe"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// The network and clock faults through the lab backend, on a real lab in
// address mode: what the nodes themselves see.

func startNetLab(t *testing.T) *lab.Lab {
	t.Helper()
	return testlab.Start(t, lab.Spec{Netns: true, Shape: lab.Shape{DCs: 1, Racks: 3, NodesPerRack: 1}, ReplaceAfter: time.Hour, ServeSocket: true})
}

// leaseOn builds the lease of a on the group's instance x, the others its
// peers, as the monkey does.
func leaseOn(t *testing.T, term *Terminator, x string, a chaos.Action, d time.Duration) chaos.Lease {
	t.Helper()
	insts, err := term.Instances(t.Context(), labGroup(chaos.Selector{}))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	l := chaos.Lease{ID: lease.NewID(now), Group: "g", Backend: chaos.Lab, Action: a, Start: now, Until: now.Add(d)}
	for _, in := range insts {
		if in.ID == x {
			l.Instance = in
		} else {
			l.Peers = append(l.Peers, in)
		}
	}
	t.Cleanup(func() { term.Revert(context.Background(), l) })
	return l
}

// stateOf is what x's failure detector says of peer.
func stateOf(t *testing.T, x, peer lab.Node) string {
	t.Helper()
	state, err := PeerState(t.Context(), x, peer)
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// dialFrom dials addr from inside n's namespace.
func dialFrom(t *testing.T, n lab.Node, addr string) error {
	t.Helper()
	ns, err := lab.OpenNetns(n)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	return netprobe.Reach(ns, addr, 500*time.Millisecond)
}

func TestPartitionSeenByFailureDetectors(t *testing.T) {
	l := startNetLab(t)
	term := NewWith(FromLab(l))
	nodes := l.Nodes()
	x, peers := nodes[0], nodes[1:]
	const lasts = 6 * time.Second
	ls := leaseOn(t, term, x.Name, chaos.Action{Kind: chaos.Partition, Duration: lasts, Partition: chaos.Isolate}, lasts)
	if _, err := term.Begin(t.Context(), ls); err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if err := dialFrom(t, x, p.DynListen); err == nil {
			t.Errorf("%s reaches %s's peer port under the partition", x.Name, p.Name)
		}
		if err := dialFrom(t, p, x.DynListen); err == nil {
			t.Errorf("%s reaches %s's peer port under the partition", p.Name, x.Name)
		}
	}
	if err := dialFrom(t, peers[0], peers[1].DynListen); err != nil {
		t.Errorf("%s and %s, on the same side, do not reach each other: %v", peers[0].Name, peers[1].Name, err)
	}
	if err := lab.Ping(t.Context(), x.Listen); err != nil {
		t.Errorf("the host does not reach %s: %v", x.Name, err)
	}
	// Both sides' failure detectors mark the other down.
	down := func() bool {
		for _, p := range peers {
			if stateOf(t, p, x) != "down" || stateOf(t, x, p) != "down" {
				return false
			}
		}
		return true
	}
	waitUntil(t, lasts, "the failure detectors to mark the partition's sides down", down)
	t.Logf("partition isolate of %s: both sides' failure detectors hold the other down %v after the fault began",
		x.Name, time.Since(ls.Start).Round(10*time.Millisecond))

	// The watchdog's part, at the lease's end; then the recovery.
	time.Sleep(time.Until(ls.Until))
	if err := term.Revert(t.Context(), ls); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	rec, err := term.AwaitRecovery(ctx, ls.Instance, ls.Start)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if stateOf(t, p, x) != "up" || stateOf(t, x, p) != "up" {
			t.Errorf("recovered, yet %s and %s do not hold each other up", p.Name, x.Name)
		}
	}
	t.Logf("partition isolate of %s for %v: recovered %v after it began", x.Name, lasts, rec.Round(10*time.Millisecond))
	if rec < lasts {
		t.Errorf("recovered after %v, before the partition's end (%v)", rec, lasts)
	}
}

// resp sends one inline command to addr and returns the reply's line (a
// bulk string's content).
func resp(t *testing.T, addr, cmd string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "%s\r\n", cmd)
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(line, "$") && line != "$-1\r\n" {
		line, err = r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
	}
	return strings.TrimRight(line, "\r\n")
}

// versionOffset writes key through node x and returns how far the version
// it got is from the wall clock: between lo and hi milliseconds (the
// request's send and reply); and the version's milliseconds.
func versionOffset(t *testing.T, x lab.Node, key string) (lo, hi, ms int64) {
	t.Helper()
	sent := time.Now().UnixMilli()
	if got := resp(t, x.Listen, "SET "+key+" v"); got != "+OK" {
		t.Fatalf("SET %s through %s: %q", key, x.Name, got)
	}
	done := time.Now().UnixMilli()
	v := resp(t, x.Redis, "GET __troop:v:"+key)
	ms, err := strconv.ParseInt(v[:12], 16, 64) // the version's first 48 bits: Unix milliseconds
	if err != nil || len(v) != 20 {
		t.Fatalf("version of %s: %q", key, v)
	}
	return ms - done, ms - sent, ms
}

func TestClockSkewMovesVersions(t *testing.T) {
	l := startNetLab(t)
	term := NewWith(FromLab(l))
	x := l.Nodes()[0]
	lo0, hi0, _ := versionOffset(t, x, "before")
	ls := leaseOn(t, term, x.Name, chaos.Action{Kind: chaos.ClockSkew, Duration: time.Minute, Offset: 2 * time.Second}, time.Minute)
	if _, err := term.Begin(t.Context(), ls); err != nil {
		t.Fatal(err)
	}
	lo, hi, skewed := versionOffset(t, x, "during")
	t.Logf("clock-skew +2s on %s: a version is %d to %d ms off the wall clock before, %d to %d ms during", x.Name, lo0, hi0, lo, hi)
	if lo0 > 1 || hi0 < -1 {
		t.Fatalf("without a skew the version is %d to %d ms off the wall clock: the measurement is broken", lo0, hi0)
	}
	if lo > 2001 || hi < 1999 {
		t.Errorf("clock-skew +2s: the version is %d to %d ms off the wall clock, want 2000", lo, hi)
	}
	// Another node's clock is true, but it has seen the skewed node's
	// versions (the replicas of its writes): a hybrid logical clock issues
	// versions above every one it has seen, so its versions are pulled
	// ahead too.
	other := l.Nodes()[1]
	if c := clockOf(t, other); c["offset_ms"] != 0.0 || c["skew_ms"] != 0.0 {
		t.Errorf("%s's clock, with the skew on %s: %v", other.Name, x.Name, c)
	}
	waitUntil(t, 5*time.Second, other.Name+" to hold the replica of the skewed write", func() bool {
		return resp(t, other.Redis, "GET __troop:v:during") == resp(t, x.Redis, "GET __troop:v:during")
	})
	olo, ohi, ms := versionOffset(t, other, "other")
	t.Logf("%s, whose clock is true, writes a version %d to %d ms off the wall clock after seeing %s's", other.Name, olo, ohi, x.Name)
	if ms < skewed {
		t.Errorf("%s's version (%d ms) is below %s's skewed one (%d ms), which it has seen", other.Name, ms, x.Name, skewed)
	}
	if err := term.Revert(t.Context(), ls); err != nil {
		t.Fatal(err)
	}
	if c := clockOf(t, x); c["offset_ms"] != 0.0 || c["skew_ms"] != 0.0 {
		t.Errorf("after the revert /info has clock %v", c)
	}
}

// clockOf is the clock part of n's /info.
func clockOf(t *testing.T, n lab.Node) map[string]any {
	t.Helper()
	var info struct {
		Clock map[string]any `json:"clock"`
	}
	res, err := http.Get("http://" + n.StatsListen + "/info")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return info.Clock
}

func TestNetworkFaultsRefused(t *testing.T) {
	l := startNetLab(t)
	term := NewWith(FromLab(l))
	x := l.Nodes()[0].Name
	part := chaos.Action{Kind: chaos.Partition, Duration: time.Minute, Partition: chaos.Isolate}
	for _, tc := range []struct {
		name string
		edit func(*chaos.Lease)
		want string
	}{
		{"unknown instance", func(l *chaos.Lease) { l.Instance.ID = "dc9-rack1-1" }, `no node "dc9-rack1-1" in the lab`},
		{"unknown peer", func(l *chaos.Lease) { l.Peers[0].ID = "dc9-rack1-1" }, `a peer of dc1-rack1-1: no node "dc9-rack1-1" in the lab`},
		{"no peer", func(l *chaos.Lease) { l.Peers = nil }, "its group has no other live instance"},
		{"a bridge of two", func(l *chaos.Lease) { l.Action.Partition = chaos.Bridge; l.Peers = l.Peers[:1] }, "a bridge needs one on each side of it"},
	} {
		ls := leaseOn(t, term, x, part, time.Minute)
		tc.edit(&ls)
		if _, err := term.Begin(t.Context(), ls); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Nothing of the refused faults is in place: every node reaches every other.
	for _, a := range l.Nodes() {
		for _, b := range l.Nodes() {
			if a.Name != b.Name {
				if err := dialFrom(t, a, b.DynListen); err != nil {
					t.Errorf("%s does not reach %s after refused faults: %v", a.Name, b.Name, err)
				}
			}
		}
	}
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
