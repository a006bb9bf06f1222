// Package httptarget is the ldfi target of HTTP services instrumented with
// fit: a probe is one HTTP request to the entry service with the scope in
// its baggage; its lineage comes back in the answer's fit.LineageHeader.
package httptarget

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/ldfi"
)

// Kind is the target kind in specs and scenarios.
const Kind = "http"

// Config is one request class and its oracle.
type Config struct {
	URL    string `json:"url"`
	Method string `json:"method"`
	Body   string `json:"body,omitempty"`
	// Status lists the statuses that count as success; any 2xx when empty.
	Status []int `json:"status,omitempty"`
	// BodyMatch, when set, must match the answer's body; BodyReject must not
	// (a partial success with the member's error embedded in a 200).
	BodyMatch  string        `json:"body_match,omitempty"`
	BodyReject string        `json:"body_reject,omitempty"`
	Timeout    time.Duration `json:"timeout"`
	// Spans, when set, is where the services export their lineage as
	// OpenTelemetry spans (fit.NewSpanExporter): a file, or "otlp:ADDR" for
	// an OTLP/HTTP receiver the target serves at ADDR (the services export
	// to http://ADDR/v1/traces). Each probe carries a W3C traceparent and
	// its lineage is read from the spans of its trace, not from the
	// answer's header.
	Spans string `json:"spans,omitempty"`
}

// spansWait bounds the wait for a probe's spans after its answer.
const spansWait = 5 * time.Second

// Target probes one request class.
type Target struct {
	cfg           Config
	client        *http.Client
	match, reject *regexp.Regexp
	spans         fit.SpanSource
	closer        io.Closer
}

// New checks cfg and returns its target.
func New(cfg Config) (*Target, error) {
	if cfg.Method == "" {
		cfg.Method = http.MethodGet
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("http target: URL %q: want http://HOST:PORT/PATH", cfg.URL)
	}
	t := &Target{cfg: cfg, client: &http.Client{Timeout: cfg.Timeout}}
	if addr, ok := strings.CutPrefix(cfg.Spans, "otlp:"); ok {
		rcv, err := fit.NewOTLPReceiver(addr)
		if err != nil {
			return nil, fmt.Errorf("http target: %w", err)
		}
		t.spans, t.closer = rcv, rcv
	} else if cfg.Spans != "" {
		if t.spans, err = fit.NewSpanTail(cfg.Spans); err != nil {
			return nil, fmt.Errorf("http target: %w", err)
		}
	}
	if cfg.BodyMatch != "" {
		if t.match, err = regexp.Compile(cfg.BodyMatch); err != nil {
			return nil, fmt.Errorf("http target: body match: %w", err)
		}
	}
	if cfg.BodyReject != "" {
		if t.reject, err = regexp.Compile(cfg.BodyReject); err != nil {
			return nil, fmt.Errorf("http target: body reject: %w", err)
		}
	}
	return t, nil
}

// Close stops the OTLP receiver, if the target serves one.
func (t *Target) Close() error {
	if t.closer != nil {
		return t.closer.Close()
	}
	return nil
}

// FromSpec rebuilds a target from its spec (a scenario's).
func FromSpec(s ldfi.Spec) (*Target, error) {
	if s.Kind != Kind {
		return nil, fmt.Errorf("http target: spec of kind %q", s.Kind)
	}
	var cfg Config
	if err := json.Unmarshal(s.Config, &cfg); err != nil {
		return nil, fmt.Errorf("http target: spec: %w", err)
	}
	return New(cfg)
}

// Spec describes the target for scenarios.
func (t *Target) Spec() ldfi.Spec {
	b, _ := json.Marshal(t.cfg) // a Config always marshals
	return ldfi.Spec{Kind: Kind, Config: b}
}

// Probe sends one request under scope and judges it. An unreachable
// service is a failed request; a canceled context, or an answer that says a
// service refused the scope (fit.ErrorHeader), is an error: that request
// ran without the faults, so it says nothing about them.
func (t *Target) Probe(ctx context.Context, scope fit.Scope) (ldfi.Probe, error) {
	req, err := http.NewRequestWithContext(ctx, t.cfg.Method, t.cfg.URL, strings.NewReader(t.cfg.Body))
	if err != nil {
		return ldfi.Probe{}, err
	}
	if err := fit.SetScopeHeader(req.Header, scope); err != nil {
		return ldfi.Probe{}, err
	}
	var traceID, spanID string
	if t.spans != nil {
		traceID, spanID = fit.NewTraceparent()
		req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
	}
	resp, err := t.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ldfi.Probe{}, ctx.Err()
		}
		return ldfi.Probe{OK: false, Detail: err.Error()}, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	if why := resp.Header.Get(fit.ErrorHeader); why != "" {
		return ldfi.Probe{}, fmt.Errorf("%w: %s (HTTP %d)", ldfi.ErrScopeRejected, why, resp.StatusCode)
	}
	p := ldfi.Probe{OK: true}
	tree, lerr := fit.DecodeLineage(resp.Header)
	if t.spans != nil {
		if tree, lerr = t.spans.Lineage(ctx, traceID, spanID, spansWait); lerr != nil {
			return ldfi.Probe{}, fmt.Errorf("http target: %w", lerr)
		}
	}
	if tree != nil && lerr == nil {
		p.Lineage = ldfi.Lineage{Known: true, Reached: tree.Reached(), Used: tree.UsedPoints(), Tree: tree}
	}
	switch {
	case err != nil:
		p.OK, p.Detail = false, fmt.Sprintf("HTTP %d, body: %v", resp.StatusCode, err)
	case !t.statusOK(resp.StatusCode):
		p.OK, p.Detail = false, fmt.Sprintf("HTTP %d", resp.StatusCode)
	case t.match != nil && !t.match.Match(body):
		p.OK, p.Detail = false, fmt.Sprintf("HTTP %d, body does not match %q", resp.StatusCode, t.cfg.BodyMatch)
	case t.reject != nil && t.reject.Match(body):
		p.OK, p.Detail = false, fmt.Sprintf("HTTP %d, body matches %q: %.80s", resp.StatusCode, t.cfg.BodyReject, t.reject.Find(body))
	}
	return p, nil
}

func (t *Target) statusOK(code int) bool {
	if len(t.cfg.Status) == 0 {
		return code >= 200 && code < 300
	}
	for _, s := range t.cfg.Status {
		if s == code {
			return true
		}
	}
	return false
}
