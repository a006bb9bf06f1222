package node

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/troop-lab/troop/topology"
)

// A hint file keeps hints in order up to its bound, drops the rest, and
// after a restart goes on from the saved offset; a hint cut short by a
// crash is cut off.
func TestHintLog(t *testing.T) {
	dir := t.TempDir()
	req := func(i int) []byte {
		return appendPeerRequest(nil, "WRITE", encodeVersion(uint64(i)<<16, 1), [][]byte{[]byte("SET"), []byte(fmt.Sprintf("k%d", i)), []byte("v")})
	}
	size := int64(len(req(0)))
	h, err := openHintLog(dir, "127.0.0.1:7000", 10*size)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 12; i++ {
		h.add(req(i))
	}
	if p, d := h.pending.Load(), h.dropped.Load(); p != 10 || d != 2 {
		t.Fatalf("pending %d dropped %d, want 10 and 2", p, d)
	}
	h.flush() // what the timer does hintFlushDelay after the first hint
	frames, used, err := h.next()
	if err != nil || len(frames) != 10 || used != 10*size {
		t.Fatalf("next: %d frames, %d bytes, %v", len(frames), used, err)
	}
	for i, f := range frames {
		if string(f) != string(req(i)) {
			t.Fatalf("hint %d out of order: %q", i, f)
		}
	}
	h.advance(4, 4*size)
	// A crash in the middle of a hint: half a frame at the end.
	h.f.Write(req(99)[:size/2])
	h.close()

	h, err = openHintLog(dir, "127.0.0.1:7000", 10*size)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if p := h.pending.Load(); p != 6 {
		t.Fatalf("after reopening, %d pending, want 6", p)
	}
	frames, _, err = h.next()
	if err != nil || len(frames) != 6 || string(frames[0]) != string(req(4)) {
		t.Fatalf("after reopening: %d frames (%v), first %q", len(frames), err, frames)
	}
	h.advance(6, 6*size)
	if st, _ := os.Stat(h.path); st.Size() != 0 || h.pending.Load() != 0 {
		t.Fatalf("a delivered hint file should start over: size %d, pending %d", st.Size(), h.pending.Load())
	}
	// Room again after delivery.
	if !h.add(req(100)) {
		t.Fatal("no room after delivery")
	}
}

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
