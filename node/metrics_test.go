package node

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/troop-lab/troop/internal/promcheck"
)

// scrape reads a node's /metrics into families by name.
func scrape(t *testing.T, tn *testNode) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	text := httpGet(t, "http://"+tn.cfg.StatsListen+"/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, text)
	}
	return text, families
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// A node's /metrics: a latency histogram whose count is the requests', the
// datastore and its peers by name with their failure counters, the Go
// runtime, the process and the build; and promtool finds nothing to say.
func TestMetrics(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 2})
	c := tc.client(0, "DC_QUORUM")
	for range 5 {
		c.must("SET", "k", "v")
		c.must("GET", "k")
	}
	tn := tc.nodes[0]
	eventually(t, 5*time.Second, func() string { // the peer's name comes with its handshake
		if tn.node.peerStates()[0].Name == "" {
			return "peer not reached yet"
		}
		return ""
	})
	text, families := scrape(t, tn)

	for _, name := range []string{"go_goroutines", "go_gc_duration_seconds", "process_cpu_seconds_total",
		"process_resident_memory_bytes", "troop_build_info", "troop_datastore_up", "troop_datastore_failures_total",
		"troop_peer_up", "troop_peer_failures_total", "troop_requests_total"} {
		if families[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	hist := families["troop_request_duration_seconds"]
	if hist == nil || hist.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("troop_request_duration_seconds: %v, want a histogram", hist)
	}
	for _, m := range hist.GetMetric() {
		if label(m, "op") != "write" || label(m, "level") != "DC_QUORUM" {
			continue
		}
		h := m.GetHistogram()
		if h.GetSampleCount() != 5 || h.GetSampleSum() <= 0 || len(h.GetBucket()) != len(latencyBuckets)+1 {
			t.Fatalf("write DC_QUORUM latency: count %d, sum %g, %d buckets; want 5, above 0, %d and +Inf", h.GetSampleCount(), h.GetSampleSum(), len(h.GetBucket()), len(latencyBuckets))
		}
		if top := h.GetBucket()[len(latencyBuckets)-1]; top.GetUpperBound() != 1 || top.GetCumulativeCount() != 5 {
			t.Errorf("write DC_QUORUM latency: top bucket %v, want le=1 holding all 5", top)
		}
		if label(m, "node") != tn.cfg.Name || label(m, "rack") != "rack1" {
			t.Errorf("latency series labelled %v, want the node's name, dc and rack", m.GetLabel())
		}
	}
	peer := tc.nodes[1].cfg.Name
	for _, m := range families["troop_peer_up"].GetMetric() {
		if label(m, "peer") != peer || m.GetGauge().GetValue() != 1 {
			t.Errorf("troop_peer_up: %v = %g, want peer %q up", m.GetLabel(), m.GetGauge().GetValue(), peer)
		}
	}
	if n := len(families["troop_peer_failures_total"].GetMetric()); n != 3 {
		t.Errorf("troop_peer_failures_total: %d series, want connect, timeout and drop", n)
	}
	if up := families["troop_datastore_up"].GetMetric()[0].GetGauge().GetValue(); up != 1 {
		t.Errorf("troop_datastore_up %g, want 1", up)
	}

	promcheck.Metrics(t, text)
}

// The latency histogram's buckets hold what the HDR histogram recorded:
// a value on a bound counts as at most that bound, one above it does not.
func TestLatencyBuckets(t *testing.T) {
	s := newStats()
	for _, us := range []int64{50, 51, 5000, 5010, 2_000_000} {
		s.record(true, 0, time.Duration(us)*time.Microsecond, false)
	}
	count, sum, cum := s.writes[0].buckets(latencyBuckets)
	if count != 5 || sum != 2.010111 {
		t.Errorf("count %d, sum %g: want 5, 2.010111", count, sum)
	}
	for le, want := range map[float64]uint64{50e-6: 1, 100e-6: 2, 2e-3: 2, 5e-3: 3, 10e-3: 4, 1: 4} {
		if cum[le] != want {
			t.Errorf("le %g: %d, want %d", le, cum[le], want)
		}
	}
	if len(cum) != len(latencyBuckets) {
		t.Errorf("%d buckets, want %d", len(cum), len(latencyBuckets))
	}
}
