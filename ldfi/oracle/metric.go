// Package oracle holds ldfi oracles that wrap a target's own: Metric also
// fails a probe when a Prometheus metric rose while it ran (an error
// counter, a fallback counter: harm that the answer itself does not show).
package oracle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/ldfi"
)

// Kind is the kind of a metric-wrapped target in specs and scenarios.
const Kind = "metric"

// MetricConfig is a metric oracle and the target it wraps.
type MetricConfig struct {
	// URL serves the metric in the Prometheus text format (a troop node's
	// /metrics, an application's).
	URL string `json:"url"`
	// Metric selects the series, summed: NAME or NAME{label="value",...}.
	Metric string `json:"metric"`
	// Max is how much the metric may rise during one probe that still
	// succeeds; 0 by default: any rise fails it.
	Max float64 `json:"max,omitempty"`
	// Target is the wrapped target's spec.
	Target ldfi.Spec `json:"target"`
}

// Metric is a target whose probes also fail when the metric rose by more
// than Max while they ran. Probes run one at a time (ldfi's are), so a rise
// belongs to the probe, unless something else moves the metric meanwhile.
type Metric struct {
	cfg    MetricConfig
	sel    selector
	inner  ldfi.Target
	client *http.Client
}

// NewMetric wraps inner, whose spec is cfg.Target, and reads the metric
// once, so that a wrong URL or a metric the endpoint does not serve is an
// error before any experiment.
func NewMetric(ctx context.Context, cfg MetricConfig, inner ldfi.Target) (*Metric, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("metric oracle: URL %q: want http://HOST:PORT/metrics", cfg.URL)
	}
	sel, err := parseSelector(cfg.Metric)
	if err != nil {
		return nil, fmt.Errorf("metric oracle: %w", err)
	}
	if cfg.Max < 0 {
		return nil, fmt.Errorf("metric oracle: max %v: want 0 or more", cfg.Max)
	}
	m := &Metric{cfg: cfg, sel: sel, inner: inner, client: &http.Client{Timeout: 5 * time.Second}}
	if _, err := m.read(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// FromSpec rebuilds a metric-wrapped target from its spec; inner rebuilds
// the wrapped one.
func FromSpec(ctx context.Context, s ldfi.Spec, inner func(ldfi.Spec) (ldfi.Target, error)) (*Metric, error) {
	if s.Kind != Kind {
		return nil, fmt.Errorf("metric oracle: spec of kind %q", s.Kind)
	}
	var cfg MetricConfig
	if err := json.Unmarshal(s.Config, &cfg); err != nil {
		return nil, fmt.Errorf("metric oracle: spec: %w", err)
	}
	t, err := inner(cfg.Target)
	if err != nil {
		return nil, err
	}
	return NewMetric(ctx, cfg, t)
}

// Spec records the oracle and the wrapped target's spec.
func (m *Metric) Spec() ldfi.Spec {
	b, _ := json.Marshal(m.cfg) // a MetricConfig always marshals
	return ldfi.Spec{Kind: Kind, Config: b}
}

// Probe runs the wrapped target's probe between two readings of the
// metric. A reading that fails stops the search: without it no verdict is
// honest.
func (m *Metric) Probe(ctx context.Context, scope fit.Scope) (ldfi.Probe, error) {
	before, err := m.read(ctx)
	if err != nil {
		return ldfi.Probe{}, err
	}
	p, err := m.inner.Probe(ctx, scope)
	if err != nil {
		return p, err
	}
	after, err := m.read(ctx)
	if err != nil {
		return ldfi.Probe{}, err
	}
	if rise := after - before; p.OK && rise > m.cfg.Max {
		p.OK, p.Detail = false, fmt.Sprintf("%s rose by %g", m.cfg.Metric, rise)
	}
	return p, nil
}

func (m *Metric) read(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.cfg.URL, nil)
	if err != nil {
		return 0, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("metric oracle: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metric oracle: %s answered HTTP %d", m.cfg.URL, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, fmt.Errorf("metric oracle: %s: %w", m.cfg.URL, err)
	}
	v, found, err := sum(body, m.sel)
	switch {
	case err != nil:
		return 0, fmt.Errorf("metric oracle: %s: %w", m.cfg.URL, err)
	case !found:
		return 0, fmt.Errorf("metric oracle: %s serves no series %s", m.cfg.URL, m.cfg.Metric)
	}
	return v, nil
}
