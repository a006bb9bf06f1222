package node

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// logLines is a log destination tests read while the node writes to it.
type logLines struct{ lockedBuffer }

// with returns the JSON lines whose msg is msg.
func (l *logLines) with(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// A node whose redis-server dies logs it once, however many requests fail
// meanwhile, and logs once more when a new redis-server answers.
func TestDatastoreReachabilityLogged(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1, timeout: 500 * time.Millisecond})
	tn := tc.nodes[0]
	tn.stop()
	var logs logLines
	tn.log = slog.New(slog.NewJSONHandler(&logs, nil))
	tn.start()
	waitPing(t, tn.cfg.Listen)
	c := tc.client(0, "DC_ONE")
	c.must("SET", "k", "v")

	tn.redis.Kill()
	for range 20 {
		if v := c.do("GET", "k"); !v.IsError() {
			t.Fatal("GET answered with its redis-server dead")
		}
		time.Sleep(20 * time.Millisecond)
	}
	eventually(t, 5*time.Second, func() string {
		if len(logs.with("datastore unreachable")) == 0 {
			return "no line says the datastore is unreachable"
		}
		return ""
	})
	tn.redis.Restart(t)
	eventually(t, 15*time.Second, func() string { // the line waits out the gap since the last (5 s)
		if len(logs.with("datastore reachable")) == 0 {
			return "no line says the datastore is reachable again"
		}
		return ""
	})
	c.must("SET", "k", "v")
	down, up := logs.with("datastore unreachable"), logs.with("datastore reachable")
	if len(down) != 1 || len(up) != 1 {
		t.Fatalf("%d lines say unreachable and %d reachable, want 1 each", len(down), len(up))
	}
	if down[0]["level"] != "WARN" || down[0]["redis"] != tn.redis.Addr || down[0]["err"] == nil {
		t.Errorf("unreachable line %v: want WARN with the redis-server's address and the error", down[0])
	}
	if _, families := scrape(t, tn); families["troop_datastore_failures_total"] == nil ||
		families["troop_datastore_up"].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("after the restart: troop_datastore_up not 1, or no failure counter")
	}
}
