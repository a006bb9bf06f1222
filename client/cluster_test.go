package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/link"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
)

// The package bench drives both clients through this interface.
var (
	_ interface {
		Send([][]byte, func([]byte, error))
		Flush()
		Close() error
	} = (*Cluster)(nil)
	_ interface {
		Send([][]byte, func([]byte, error))
		Flush()
		Close() error
	} = (*Plain)(nil)
)

type sender interface {
	Send([][]byte, func([]byte, error))
	Flush()
}

type reply struct {
	raw []byte
	err error
}

// pipeline sends cmds through Send in batches, one Flush per batch, and
// returns every reply, in command order. A reply missing after 10 s fails
// the test, and leaves the rest of out zero.
func pipeline(t *testing.T, c sender, cmds [][][]byte, batch int) []reply {
	t.Helper()
	out := make([]reply, len(cmds))
	for i := 0; i < len(cmds); i += batch {
		end := min(i+batch, len(cmds))
		var wg sync.WaitGroup
		wg.Add(end - i)
		for j := i; j < end; j++ {
			c.Send(cmds[j], func(raw []byte, err error) { out[j] = reply{raw, err}; wg.Done() })
		}
		c.Flush()
		waited := make(chan struct{})
		go func() { wg.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(10 * time.Second): // not Fatal: callers run it on their own goroutines
			t.Errorf("batch at %d: no replies within 10s", i)
			return out
		}
	}
	return out
}

func cmd(args ...string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// setGet builds n SET and GET pairs, each GET right after its SET.
func setGet(prefix string, n int) [][][]byte {
	var cmds [][][]byte
	for i := range n {
		k := fmt.Sprintf("%s:%d", prefix, i)
		cmds = append(cmds, cmd("SET", k, "v-"+k), cmd("GET", k))
	}
	return cmds
}

// checkSetGet checks the replies of setGet: OK, then the value written.
func checkSetGet(t *testing.T, cmds [][][]byte, replies []reply) {
	t.Helper()
	bad := 0
	for i := 0; i < len(cmds); i += 2 {
		want := resp.AppendBulk(nil, cmds[i][2])
		set, get := replies[i], replies[i+1]
		if set.err != nil || string(set.raw) != "+OK\r\n" || get.err != nil || string(get.raw) != string(want) {
			if bad++; bad <= 5 {
				t.Errorf("%s: SET -> %q, %v; GET -> %q, %v", cmds[i][1], set.raw, set.err, get.raw, get.err)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d SET+GET pairs wrong", bad, len(cmds)/2)
	}
}

// Every key goes to its owner in the client's rack: the first node of that
// rack whose token is >= the key's hash, wrapping to the smallest.
func TestPlacement(t *testing.T) {
	layout := lab.Layout(lab.Shape{DCs: 1, Racks: 3, NodesPerRack: 2}, t.TempDir())
	var nodes []Node
	for i, n := range layout {
		nodes = append(nodes, Node{Name: n.Name, DC: n.DC, Rack: n.Rack, Tokens: []uint32{n.Token},
			Addr: fmt.Sprintf("127.0.0.1:%d", 1+i)}) // never dialled
	}
	for _, rack := range []string{"rack1", "rack2", "rack3"} {
		c, err := NewCluster(nodes, Options{Rack: rack})
		if err != nil {
			t.Fatal(err)
		}
		var mine []Node
		for _, n := range nodes {
			if n.Rack == rack {
				mine = append(mine, n)
			}
		}
		sort.Slice(mine, func(i, j int) bool { return mine[i].Tokens[0] < mine[j].Tokens[0] })
		perNode := map[string]int{}
		for i := range 5000 {
			key := []byte(fmt.Sprintf("key:%d", i))
			want := mine[0] // wrap-around
			for _, n := range mine {
				if n.Tokens[0] >= ring.Hash(key) {
					want = n
					break
				}
			}
			if got := c.Route(key); got.Name != want.Name {
				t.Fatalf("rack %s: key %s (hash %d) goes to %s, want %s", rack, key, ring.Hash(key), got.Name, want.Name)
			}
			perNode[want.Name]++
		}
		if len(perNode) != 2 {
			t.Errorf("rack %s: keys went to %v, want both nodes of the rack", rack, perNode)
		}
		c.Close()
	}
}

// The test: a client in rack1 of a 3-rack lab sends each key to
// its owner in rack1, so no node forwards anything.
func TestNoForwardingSameRack(t *testing.T) {
	l := startLab(t, 3, 1)
	nodes := labNodes(l)
	c, err := NewCluster(nodes, Options{DC: "dc1", Rack: "rack1", ReadLevel: "DC_ONE", WriteLevel: "DC_ONE"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmds := setGet("same-rack", 2000)
	checkSetGet(t, cmds, pipeline(t, c, cmds, 200))
	for _, n := range l.Nodes() {
		ni := info(t, n.StatsListen)
		if ni.Forwarded != 0 {
			t.Errorf("%s forwarded %d requests, want 0", n.Name, ni.Forwarded)
		}
		want := int64(0)
		if n.Rack == "rack1" {
			want = 2000
		}
		if ni.Commands["GET"] != want {
			t.Errorf("%s served %d GETs, want %d", n.Name, ni.Commands["GET"], want)
		}
	}
}

// With two nodes per rack the client must pick the right one of the two:
// still nothing is forwarded. The topology comes from /cluster_describe.
func TestNoForwardingTwoNodesPerRack(t *testing.T) {
	l := startLab(t, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes, err := FromClusterDescribe(ctx, l.Nodes()[0].StatsListen)
	if err != nil {
		t.Fatal(err)
	}
	fromLab := labNodes(l)
	if got, want := fmt.Sprint(nodes), fmt.Sprint(fromLab); got != want {
		t.Errorf("cluster_describe gave\n%s\nthe lab\n%s", got, want)
	}
	c, err := NewCluster(nodes, Options{Rack: "rack2", ConnsPerNode: 2, ReadLevel: "DC_ONE", WriteLevel: "DC_ONE"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmds := setGet("two-per-rack", 2000)
	checkSetGet(t, cmds, pipeline(t, c, cmds, 250))
	gets := int64(0)
	for _, n := range l.Nodes() {
		ni := info(t, n.StatsListen)
		if ni.Forwarded != 0 {
			t.Errorf("%s forwarded %d requests, want 0", n.Name, ni.Forwarded)
		}
		g := ni.Commands["GET"]
		switch {
		case n.Rack != "rack2" && g != 0:
			t.Errorf("%s (not the client's rack) served %d GETs", n.Name, g)
		case n.Rack == "rack2" && g == 0:
			t.Errorf("%s served no GETs: keys did not spread over the rack", n.Name)
		}
		gets += g
	}
	if gets != 2000 {
		t.Errorf("%d GETs served in all, want 2000", gets)
	}
}

// When the key's owner in the client's rack stops, a client with cross-rack
// retries goes on through the next rack; one without fails at once, naming
// the node.
func TestFailover(t *testing.T) {
	l := startLab(t, 3, 1)
	nodes := labNodes(l)
	opts := Options{Rack: "rack1", Timeout: 2 * time.Second}
	bare, err := NewCluster(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	opts.Retry = Retry{Attempts: 2, CrossRack: true}
	retrying, err := NewCluster(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer retrying.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []*Cluster{bare, retrying} { // both connected before the failure
		if _, err := c.Do(ctx, cmd("SET", "warm", "up")...); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.StopNode("dc1-rack1-1", lab.NodeProc); err != nil {
		t.Fatal(err)
	}

	cmds := setGet("failover", 300)
	checkSetGet(t, cmds, pipeline(t, retrying, cmds, 100))
	for _, n := range l.Nodes()[1:] { // every GET went to the next rack after rack1
		want := map[string]int64{"dc1-rack2-1": 300, "dc1-rack3-1": 0}[n.Name]
		if got := info(t, n.StatsListen).Commands["GET"]; got != want {
			t.Errorf("%s served %d GETs, want %d", n.Name, got, want)
		}
	}

	for i := range 3 { // the first finds the connection broken, the others the node in backoff
		start := time.Now()
		_, err := bare.Do(ctx, cmd("GET", "warm")...)
		took := time.Since(start)
		if err == nil {
			t.Fatalf("GET %d without retries succeeded with the owner down", i)
		}
		if !errors.Is(err, link.ErrDown) || !strings.Contains(err.Error(), "dc1-rack1-1 (dc1/rack1) "+nodes[0].Addr) {
			t.Errorf("GET %d: error %q does not name the node, its rack and address", i, err)
		}
		t.Logf("GET %d without retries: %v", i, err)
		if took >= opts.Timeout {
			t.Errorf("GET %d failed after %v; want at once (connection refused), before the timeout", i, took)
		}
	}

	// The retries can run out too: then every try's failure is named.
	if err := l.StopNode("dc1-rack2-1", lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	if err := l.StopNode("dc1-rack3-1", lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	_, err = retrying.Do(ctx, cmd("GET", "warm")...)
	var fe *FailedError
	if !errors.As(err, &fe) || len(fe.Errs) != 3 {
		t.Fatalf("with every rack down: %v, want a FailedError of 3 tries", err)
	}
	t.Logf("with every rack down: %v", err)
	for _, name := range []string{"dc1-rack1-1", "dc1-rack2-1", "dc1-rack3-1"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
}

// The levels are set on every new connection: on the first one and again
// after the node came back.
func TestConsistencyHandshake(t *testing.T) {
	l := startLab(t, 3, 1)
	nodes := labNodes(l)
	c, err := NewCluster(nodes, Options{Rack: "rack1", ReadLevel: "dc_quorum", WriteLevel: "DC_SAFE_QUORUM"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	levels := func() string {
		raw, err := c.Do(ctx, cmd("TROOP", "CONSISTENCY")...)
		if err != nil {
			return err.Error()
		}
		v, err := resp.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return v.String()
	}
	const want = `["DC_QUORUM" "DC_SAFE_QUORUM"]`
	if got := levels(); got != want {
		t.Fatalf("TROOP CONSISTENCY on the client's connection: %s, want %s", got, want)
	}
	if _, err := c.Do(ctx, cmd("SET", "k", "v")...); err != nil {
		t.Fatal(err)
	}
	if raw, err := c.Do(ctx, cmd("GET", "k")...); err != nil || string(raw) != "$1\r\nv\r\n" {
		t.Fatalf("GET k: %q, %v", raw, err)
	}
	ni := info(t, l.Nodes()[0].StatsListen)
	if r, w := ni.Requests["read"]["DC_QUORUM"].Count, ni.Requests["write"]["DC_SAFE_QUORUM"].Count; r != 1 || w != 1 {
		t.Errorf("%s counted %d DC_QUORUM reads and %d DC_SAFE_QUORUM writes, want 1 and 1", ni.Name, r, w)
	}

	if err := l.StopNode("dc1-rack1-1", lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	if err := l.StartNode("dc1-rack1-1", lab.NodeProc); err != nil {
		t.Fatal(err)
	}
	got := ""
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = levels(); got == want {
			break
		}
	}
	if got != want {
		t.Errorf("after the node restarted, TROOP CONSISTENCY: %s, want %s", got, want)
	}
}

func TestNewClusterErrors(t *testing.T) {
	good := []Node{
		{Name: "a", DC: "dc1", Rack: "rack1", Tokens: []uint32{0}, Addr: "127.0.0.1:1"},
		{Name: "b", DC: "dc1", Rack: "rack2", Tokens: []uint32{0}, Addr: "127.0.0.1:2"},
	}
	for _, tc := range []struct {
		nodes []Node
		opts  Options
		want  string
	}{
		{nil, Options{}, "no nodes"},
		{good, Options{Rack: "rack9"}, `no rack "rack9" in the cluster`},
		{good, Options{DC: "dc1", Rack: "rack9"}, `no rack "rack9" in dc1 (have rack1, rack2)`},
		{good, Options{DC: "dc2"}, `no datacenter "dc2" in the cluster (have dc1)`},
		{good, Options{ReadLevel: "QUORUM"}, `read consistency "QUORUM"`},
		{good, Options{ConnsPerNode: -1}, "connections per node"},
		{good, Options{Retry: Retry{Attempts: -1}}, "retry attempts"},
		{[]Node{{Name: "a", DC: "dc1", Rack: "r", Tokens: []uint32{0}}}, Options{}, "a (dc1/r) has no address"},
		{[]Node{{Name: "a", DC: "dc1", Rack: "r", Addr: "x:1"}}, Options{}, "a (dc1/r) has no tokens"},
		{[]Node{{Name: "a", DC: "dc1", Rack: "r", Tokens: []uint32{5}, Addr: "x:1"},
			{Name: "b", DC: "dc1", Rack: "r", Tokens: []uint32{5}, Addr: "x:2"}}, Options{}, "token 5 is claimed twice"},
	} {
		_, err := NewCluster(tc.nodes, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewCluster(%v, %+v) = %v, want an error containing %q", tc.nodes, tc.opts, err, tc.want)
		}
	}
}

func TestRackOrder(t *testing.T) {
	var nodes []Node
	for _, r := range []string{"rack3", "rack1", "rack2"} {
		nodes = append(nodes, Node{DC: "dc1", Rack: r}, Node{DC: "dc2", Rack: r + "x"})
	}
	for own, want := range map[string]string{"rack1": "rack1 rack2 rack3", "rack2": "rack2 rack3 rack1", "rack3": "rack3 rack1 rack2"} {
		if got := strings.Join(rackOrder(nodes, "dc1", own), " "); got != want {
			t.Errorf("from %s: %s, want %s", own, got, want)
		}
	}
}
