package storetarget

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/ldfi"
	"github.com/troop-lab/troop/ldfi/oracle"
)

// The tests run ldfi against labs of real redis-servers and troop node
// processes: one datacenter, three racks, one node each.
func TestMain(m *testing.M) { testlab.Main(m) }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
func (wallClock) Sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// The points of a 3-rack lab probed through its first node, A: a replica is
// unavailable to A when its datastore fails or, for the others, A's call to
// it fails.
const (
	a, b, c = "dc1-rack1-1", "dc1-rack2-1", "dc1-rack3-1"
)

var replicaPoints = map[string][]string{
	a: {a + "/redis"},
	b: {a + "->" + b, b + "/redis"},
	c: {a + "->" + c, c + "/redis"},
}

// failureSets lists, over points, every way to make each of the given
// combinations of replicas unavailable: one point per replica.
func failureSets(combos ...[]string) []string {
	var out []string
	for _, combo := range combos {
		sets := [][]string{{}}
		for _, r := range combo {
			var next [][]string
			for _, s := range sets {
				for _, p := range replicaPoints[r] {
					next = append(next, append(slices.Clone(s), p))
				}
			}
			sets = next
		}
		for _, s := range sets {
			slices.Sort(s)
			out = append(out, strings.Join(s, " + "))
		}
	}
	slices.Sort(out)
	return out
}

// search runs ldfi on class through the lab's first node and returns the
// failure sets found, each as its sorted points joined by " + ".
func search(t *testing.T, l *lab.Lab, class string, maxFaults int) (*ldfi.Report, []string) {
	t.Helper()
	return searchConfig(t, Config{Lab: l.Dir(), Node: a, Timeout: 20 * time.Second}, class, maxFaults)
}

// searchConfig is search with the target's configuration given.
func searchConfig(t *testing.T, cfg Config, class string, maxFaults int) (*ldfi.Report, []string) {
	t.Helper()
	return searchTarget(t, newTarget(t, cfg, class), class, maxFaults)
}

// newTarget is the target of class with cfg, closed when the test ends.
func newTarget(t *testing.T, cfg Config, class string) *Target {
	t.Helper()
	if err := ParseClass(class, &cfg); err != nil {
		t.Fatal(err)
	}
	target, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Close() })
	return target
}

// searchTarget runs ldfi on target (class names it in messages) and returns
// the report and the failure sets found, as search does.
func searchTarget(t *testing.T, target interface {
	ldfi.Target
	Spec() ldfi.Spec
}, class string, maxFaults int) (*ldfi.Report, []string) {
	t.Helper()
	sc := ldfi.DefaultConfig()
	sc.Target, sc.MaxFaults, sc.Probes, sc.MaxExperiments = target.Spec(), maxFaults, 5, 100
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := ldfi.Search(ctx, sc, target, wallClock{})
	if err != nil {
		t.Fatalf("%s: %v", class, err)
	}
	var found []string
	for _, f := range r.Failures {
		points := slices.Clone(f.Points)
		slices.Sort(points)
		found = append(found, strings.Join(points, " + "))
	}
	slices.Sort(found)
	t.Logf("%s: %d experiments; failure sets %v; %s", class, len(r.Experiments), found, r.Coverage.Statement)
	if !r.Coverage.Complete {
		t.Errorf("%s: search not complete: %s", class, r.Coverage.StopReason)
	}
	return r, found
}

// docs/store.md: a DC_QUORUM read fails when fewer than two of the three
// replicas can answer; a DC_ONE read fails over to the next rack, so it
// fails only when all three are unavailable. Through node A, replica A is
// its datastore, replicas B and C each their datastore or the call to them.
func TestSearchStore(t *testing.T) {
	l := testlab.Start(t, lab.Spec{})

	r, found := search(t, l, "GET at DC_QUORUM", 3)
	if want := failureSets([]string{a, b}, []string{a, c}, []string{b, c}); !slices.Equal(found, want) {
		t.Errorf("GET at DC_QUORUM: failure sets\n%v\nwant the three pairs of replicas\n%v", found, want)
	}
	// Every scenario replays, also from its spec alone.
	for _, f := range r.Failures {
		target, err := FromSpec(f.Scenario.Target)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := ldfi.RunScenario(context.Background(), f.Scenario, target, wallClock{})
		target.Close()
		if err != nil || !rep.Reproduced {
			t.Errorf("scenario %s did not replay: %+v, %v", f.Scenario.Scope, rep.Experiment, err)
		}
	}

	_, found = search(t, l, "GET at DC_ONE", 3)
	if want := failureSets([]string{a, b, c}); !slices.Equal(found, want) {
		t.Errorf("GET at DC_ONE: failure sets\n%v\nwant every replica at once\n%v", found, want)
	}

	// Writes: a DC_QUORUM write needs two acknowledgements, a DC_ONE write
	// fails over to any rack that acknowledges.
	_, found = search(t, l, "SET at DC_QUORUM", 3)
	if want := failureSets([]string{a, b}, []string{a, c}, []string{b, c}); !slices.Equal(found, want) {
		t.Errorf("SET at DC_QUORUM: failure sets\n%v\nwant the three pairs of replicas\n%v", found, want)
	}
	_, found = search(t, l, "SET at DC_ONE", 3)
	if want := failureSets([]string{a, b, c}); !slices.Equal(found, want) {
		t.Errorf("SET at DC_ONE: failure sets\n%v\nwant every replica at once\n%v", found, want)
	}
}

// TestSearchStoreFromSpans: node A exports the lineage of traced requests as
// OpenTelemetry spans to a file (troop_lineage_export), and the search reads
// each probe's lineage from there by its traceparent; it finds the same
// failure sets as from TROOP LINEAGE.
func TestSearchStoreFromSpans(t *testing.T) {
	l := testlab.Start(t, lab.Spec{})
	spans := filepath.Join(t.TempDir(), "spans.json")
	reconfigure(t, l, "troop_lineage_export", spans, []string{a}, func(lab.Node) string { return "" })
	_, found := searchConfig(t, Config{Lab: l.Dir(), Node: a, Timeout: 20 * time.Second, Spans: spans}, "GET at DC_QUORUM", 2)
	if want := failureSets([]string{a, b}, []string{a, c}, []string{b, c}); !slices.Equal(found, want) {
		t.Errorf("GET at DC_QUORUM from spans: failure sets\n%v\nwant the three pairs of replicas\n%v", found, want)
	}
	trees, err := readSpansFile(spans)
	if err != nil || len(trees) == 0 || trees[0].Service != a {
		t.Errorf("spans file: %d trees, %v; want trees of node %s", len(trees), err, a)
	}
}

func readSpansFile(path string) ([]*fit.Call, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return fit.ReadSpans(f)
}

// reconfigure sets key to value in the config of the named nodes of l and
// restarts them, then waits until ready says "" of every node and every
// node sees every peer up.
func reconfigure(t *testing.T, l *lab.Lab, key, value string, names []string, ready func(lab.Node) string) {
	t.Helper()
	for _, n := range l.Nodes() {
		if !slices.Contains(names, n.Name) {
			continue
		}
		text, err := os.ReadFile(n.Config)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, line := range strings.SplitAfter(string(text), "\n") {
			if !strings.Contains(line, key+":") {
				lines = append(lines, line)
			}
		}
		lines = append(lines, "  "+key+": "+value+"\n")
		if err := os.WriteFile(n.Config, []byte(strings.Join(lines, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := l.StopNode(n.Name, lab.NodeProc); err != nil {
			t.Fatal(err)
		}
		if err := l.StartNode(n.Name, lab.NodeProc); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until every node is ready and sees every peer up: a peer
	// still marked down from the restart would get no reads.
	deadline := time.Now().Add(20 * time.Second)
	for {
		missing := ""
		for _, n := range l.Nodes() {
			if m := ready(n); m != "" {
				missing = m
				continue
			}
			for _, p := range info(n.StatsListen).Peers {
				if p.State != "up" || !p.Connected {
					missing = fmt.Sprintf("%s sees %s %s", n.Name, p.Name, p.State)
				}
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// info is a node's /info, the zero Info when it does not answer.
func info(admin string) (out struct {
	PlantedBug string `json:"planted_bug"`
	Peers      []struct {
		Name      string `json:"name"`
		State     string `json:"state"`
		Connected bool   `json:"connected"`
	} `json:"peers"`
}) {
	res, err := http.Get("http://" + admin + "/info")
	if err != nil {
		return out
	}
	defer res.Body.Close()
	json.NewDecoder(res.Body).Decode(&out)
	return out
}

func TestConfig(t *testing.T) {
	for _, tt := range []struct {
		class string
		cfg   Config
		err   string
	}{
		{"GET at DC_QUORUM", Config{Addr: "127.0.0.1:1"}, ""},
		{"set AT dc_one", Config{Addr: "127.0.0.1:1"}, ""},
		{"GET DC_QUORUM", Config{Addr: "127.0.0.1:1"}, "want COMMAND at LEVEL"},
		{"INCR at DC_ONE", Config{Addr: "127.0.0.1:1"}, `command "INCR": want GET or SET`},
		{"GET at DC_MOST", Config{Addr: "127.0.0.1:1"}, "unknown consistency level"},
		{"GET at DC_ONE", Config{}, "give addr (host:port) or lab"},
		{"GET at DC_ONE", Config{Addr: "localhost"}, "want host:port"},
		{"GET at DC_ONE", Config{Addr: "127.0.0.1:1", Lab: "x"}, "not both"},
		{"GET at DC_ONE", Config{Lab: t.TempDir()}, "no lab"},
		{"GET at DC_ONE", Config{Addr: "127.0.0.1:1", Key: "__troop:v:x"}, "reserved"},
		{"GET at DC_ONE", Config{Addr: "127.0.0.1:1", WriteLevel: "ALL"}, "write level"},
	} {
		cfg := tt.cfg
		err := ParseClass(tt.class, &cfg)
		if err == nil {
			var target *Target
			if target, err = New(cfg); err == nil {
				// The spec round-trips.
				back, ferr := FromSpec(target.Spec())
				if ferr != nil || back.cfg != target.cfg {
					t.Errorf("%s: spec round trip %+v, %v", tt.class, back, ferr)
				}
			}
		}
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s %+v: error %v, want %q", tt.class, tt.cfg, err, tt.err)
		}
	}
	if _, err := FromSpec(ldfi.Spec{Kind: "store", Config: json.RawMessage(`{"addr":"127.0.0.1:1","command":"GET","level":"DC_ONE","color":"red"}`)}); err == nil {
		t.Error("a spec with an unknown field was accepted")
	}
	// A node that cannot be reached is a failed request, not an error.
	target, err := New(Config{Addr: "127.0.0.1:1", Command: "GET", Level: "DC_ONE"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := target.Probe(context.Background(), fit.Scope{})
	if err != nil || p.OK || p.Lineage.Known {
		t.Errorf("probe of an unreachable node: %+v, %v", p, err)
	}
}

// TestMetricOracleOnStore: a DC_ONE read through node A survives its own
// replica's failure by failing over, which its answer does not show; with
// troop_read_failovers_total as the oracle, that one point is a failure set.
func TestMetricOracleOnStore(t *testing.T) {
	l := testlab.Start(t, lab.Spec{})
	_, found := search(t, l, "GET at DC_ONE", 1)
	if len(found) != 0 {
		t.Fatalf("GET at DC_ONE, one fault, no metric: failure sets %v, want none", found)
	}

	inner := newTarget(t, Config{Lab: l.Dir(), Node: a, Timeout: 20 * time.Second}, "GET at DC_ONE")
	var stats string // node A's, whose reads fail over
	for _, n := range l.Nodes() {
		if n.Name == a {
			stats = n.StatsListen
		}
	}
	target, err := oracle.NewMetric(context.Background(), oracle.MetricConfig{
		URL: "http://" + stats + "/metrics", Metric: "troop_read_failovers_total", Target: inner.Spec()}, inner)
	if err != nil {
		t.Fatal(err)
	}
	r, sets := searchTarget(t, target, "GET at DC_ONE with troop_read_failovers_total", 1)
	if want := []string{a + "/redis"}; !slices.Equal(sets, want) {
		t.Fatalf("with troop_read_failovers_total: failure sets %v, want %v", sets, want)
	}
	if ex := r.Failures[0]; !strings.Contains(fmt.Sprint(r.Experiments[ex.Experiment-1].Examples), "troop_read_failovers_total rose by") {
		t.Errorf("the failure set's examples do not name the metric: %v", r.Experiments[ex.Experiment-1].Examples)
	}
}
