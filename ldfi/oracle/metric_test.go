package oracle

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/ldfi"
)

func TestSum(t *testing.T) {
	text := `# HELP troop_requests_total requests
# TYPE troop_requests_total counter
troop_requests_total{op="get",level="DC_ONE"} 7
troop_requests_total{op="set",level="DC_ONE"} 3 1700000000000
troop_requests_total{op="get",level="DC_QUORUM"} 1e3
odd_labels{path="a b}c",q="say \"hi\"\n"} 2
troop_inflight 4
`
	for _, c := range []struct {
		metric string
		want   float64
		found  bool
	}{
		{"troop_requests_total", 1010, true},
		{`troop_requests_total{op="get"}`, 1007, true},
		{`troop_requests_total{op="get", level="DC_ONE"}`, 7, true},
		{`troop_requests_total{op="del"}`, 0, false},
		{`odd_labels{path="a b}c"}`, 2, true},
		{`odd_labels{q="say \"hi\"\n"}`, 2, true},
		{"troop_inflight", 4, true},
		{"troop_inflight_total", 0, false},
	} {
		sel, err := parseSelector(c.metric)
		if err != nil {
			t.Fatalf("%s: %v", c.metric, err)
		}
		got, found, err := sum([]byte(text), sel)
		if err != nil || got != c.want || found != c.found {
			t.Errorf("%s: %v %v %v, want %v %v", c.metric, got, found, err, c.want, c.found)
		}
	}
}

func TestBadInput(t *testing.T) {
	for _, s := range []string{"", "1abc", "a{", `a{b=c}`, `a{b="c"`, `a{b="c" d="e"}`, `a{b="\x"}`} {
		if _, err := parseSelector(s); err == nil {
			t.Errorf("selector %q accepted", s)
		}
	}
	sel, _ := parseSelector("a")
	for _, text := range []string{"a\n", "a{b=\"c\" 1\n", "a one\n", "a 1 2 3\n", "a{b=\"c\"} x\n"} {
		if _, _, err := sum([]byte(text), sel); err == nil {
			t.Errorf("exposition %q accepted", text)
		}
	}
}

func FuzzSum(f *testing.F) {
	f.Add([]byte("a{b=\"c\"} 1\n# x\na 2 3\n"), `a{b="c"}`)
	f.Add([]byte("odd{p=\"a b}c\\\"\"} 2\n"), "odd")
	f.Fuzz(func(t *testing.T, text []byte, metric string) {
		sel, err := parseSelector(metric)
		if err != nil {
			return
		}
		sum(text, sel)
	})
}

// checkout is a request that needs its cart and its payment; a failed
// cart call falls back to a cached cart, which the answer does not show
// but the fallbacks_total counter does.
type checkout struct{ fallbacks *atomic.Int64 }

func (c checkout) Probe(ctx context.Context, scope fit.Scope) (ldfi.Probe, error) {
	_, cartDown := scope.Lookup("shop->cart")
	_, cacheDown := scope.Lookup("shop/cart-cache")
	_, payDown := scope.Lookup("shop->payment")
	used := []string{"shop->cart", "shop->payment"}
	if cartDown {
		c.fallbacks.Add(1)
		used[0] = "shop/cart-cache"
	}
	lin := ldfi.Lineage{Known: true, Reached: append(slices.Clone(used), "shop->cart"), Used: used}
	if payDown || cartDown && cacheDown {
		return ldfi.Probe{OK: false, Detail: "HTTP 503", Lineage: lin}, nil
	}
	return ldfi.Probe{OK: true, Lineage: lin}, nil
}

// TestMetricOracleFindsSilentFallback: without the oracle the cart call
// is covered by its cache; with fallbacks_total as the oracle, failing the
// cart alone is a failure set.
func TestMetricOracleFindsSilentFallback(t *testing.T) {
	var fallbacks atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE fallbacks_total counter\nfallbacks_total{service=\"shop\"} %d\n", fallbacks.Load())
	}))
	defer srv.Close()
	inner := checkout{fallbacks: &fallbacks}

	search := func(t ldfi.Target) string {
		cfg := ldfi.DefaultConfig()
		cfg.Probes, cfg.MaxFaults = 2, 2
		r, err := ldfi.Search(context.Background(), cfg, t, ldfi.WallClock{})
		if err != nil {
			panic(err)
		}
		var sets []string
		for _, f := range r.Failures {
			sets = append(sets, strings.Join(f.Points, "+"))
		}
		slices.Sort(sets)
		return strings.Join(sets, " ")
	}
	if got, want := search(inner), "shop->cart+shop/cart-cache shop->payment"; got != want {
		t.Fatalf("without the oracle: %s, want %s", got, want)
	}
	m, err := NewMetric(context.Background(), MetricConfig{URL: srv.URL + "/metrics", Metric: `fallbacks_total{service="shop"}`, Target: ldfi.Spec{Kind: "checkout"}}, inner)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := search(m), "shop->cart shop->payment"; got != want {
		t.Fatalf("with the fallbacks_total oracle: %s, want %s", got, want)
	}

	// The spec rebuilds the same oracle around the rebuilt target.
	again, err := FromSpec(context.Background(), m.Spec(), func(s ldfi.Spec) (ldfi.Target, error) {
		if s.Kind != "checkout" {
			return nil, fmt.Errorf("kind %q", s.Kind)
		}
		return inner, nil
	})
	if err != nil || string(again.Spec().Config) != string(m.Spec().Config) {
		t.Fatalf("from spec: %v %v, want %s", again, err, m.Spec().Config)
	}

	// A metric the endpoint does not serve is an error before any probe.
	if _, err := NewMetric(context.Background(), MetricConfig{URL: srv.URL, Metric: "errors_total"}, inner); err == nil || !strings.Contains(err.Error(), "serves no series errors_total") {
		t.Fatalf("missing metric: %v", err)
	}
}
