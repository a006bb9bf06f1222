package node

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/troop-lab/troop/topology"
)

// A replica that is down gets no synchronous work: once the detector marks
// it down, DC_QUORUM writes go on with the other two, and the writes it
// missed become hints, which survive a restart of the coordinator and are
// delivered, in order, when the replica is back.
func TestHintsSurviveCoordinatorRestart(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 3, timeout: 2 * time.Second})
	coord, replica := tc.nodes[0], tc.nodes[2]
	replica.stop()
	eventually(t, 5*time.Second, func() string {
		if s := stateOf(coord.node, replica.cfg.DynListen); s != "down" {
			return "the coordinator does not see the stopped replica down: " + s
		}
		return ""
	})
	c := tc.client(0, "DC_QUORUM")
	const keys = 50
	for i := 0; i < keys; i++ {
		c.must("SET", fmt.Sprintf("h%d", i), "first")
		c.must("SET", fmt.Sprintf("h%d", i), fmt.Sprintf("v%d", i)) // the later write must win
	}
	c.must("DEL", "h0") // and a delete stays a delete
	if got := coord.node.Info().HintsPending; got != 2*keys+1 {
		t.Fatalf("hints_pending = %d, want %d", got, 2*keys+1)
	}

	coord.stop()
	coord.start()
	waitPing(t, coord.cfg.Listen)
	if got := coord.node.Info().HintsPending; got != 2*keys+1 {
		t.Fatalf("after the coordinator's restart hints_pending = %d, want %d", got, 2*keys+1)
	}
	replica.start()
	waitPing(t, replica.cfg.Listen)
	r := dial(t, replica.redis.Addr)
	eventually(t, 10*time.Second, func() string {
		if p := coord.node.Info().HintsPending; p != 0 {
			return fmt.Sprintf("%d hints still pending", p)
		}
		return ""
	})
	if got := r.must("EXISTS", "h0"); got != "0" {
		t.Fatalf("h0 was deleted, the replica has it")
	}
	for i := 1; i < keys; i++ {
		if got := r.must("GET", fmt.Sprintf("h%d", i)); got != fmt.Sprintf("v%d", i) {
			t.Fatalf("replica GET h%d = %q after hint replay", i, got)
		}
	}
	if info := coord.node.Info(); info.HintsReplayed != 2*keys+1 || info.HintsDropped != 0 {
		t.Fatalf("hints_replayed %d hints_dropped %d", info.HintsReplayed, info.HintsDropped)
	}
}

// Hints past troop_max_hint_bytes are dropped and counted.
func TestHintsBounded(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2, configure: func(c *topology.Config) { c.MaxHintBytes = 1000 }})
	tc.nodes[1].stop()
	c := tc.client(0, "DC_ONE")
	for i := 0; i < 40; i++ {
		c.must("SET", fmt.Sprintf("b%d", i), "0123456789")
	}
	info := tc.nodes[0].node.Info()
	if info.HintsDropped == 0 || info.HintsPending == 0 || info.HintsPending+info.HintsDropped != 40 {
		t.Fatalf("hints_pending %d, hints_dropped %d: want both above 0, 40 in all", info.HintsPending, info.HintsDropped)
	}
	metrics := httpGet(t, "http://"+tc.nodes[0].cfg.StatsListen+"/metrics")
	for _, want := range []string{"troop_hints_pending{", "troop_hints_dropped_total{", "troop_peer_up{"} {
		if !contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func stateOf(n *Node, peerAddr string) string {
	for _, cn := range n.Describe() {
		if cn.DynListen == peerAddr {
			return cn.State
		}
	}
	return "not listed"
}

func httpGet(t testing.TB, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("%s: %d %s", url, res.StatusCode, body)
	}
	return string(body)
}
