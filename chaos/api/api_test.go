package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/records"
	"github.com/troop-lab/troop/internal/promcheck"
)

const token = "s3cret-token-0123456789"

// fakeKiller counts its calls and returns an executed termination.
type fakeKiller struct {
	mu    sync.Mutex
	calls []chaos.Action
	err   error
	out   chaos.Outcome
}

func (k *fakeKiller) Kill(ctx context.Context, group string, a chaos.Action) (chaos.Termination, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, a)
	if k.err != nil {
		return chaos.Termination{}, k.err
	}
	out := k.out
	if out == "" {
		out = chaos.Executed
	}
	t := chaos.Termination{Group: group, Instance: chaos.Instance{ID: "n1", Group: group}, Action: a, Executed: time.Now(), Outcome: out}
	if out == chaos.Skipped {
		t.Reason = chaos.Stopped
	}
	return t, nil
}

func (k *fakeKiller) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.calls)
}

type fakeSwitch struct {
	mu             sync.Mutex
	stopped        bool
	stops, resumes int
}

func (s *fakeSwitch) Stop(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stops++
	s.stopped = true
	return nil
}

func (s *fakeSwitch) Resume(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resumes++
	s.stopped = false
	return nil
}

func (s *fakeSwitch) Stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

type fixture struct {
	srv    *httptest.Server
	killer *fakeKiller
	sw     *fakeSwitch
	store  *records.Store
}

func newFixture(t *testing.T, onDemand bool) *fixture {
	t.Helper()
	cfg, err := chaos.ParseConfig([]byte("groups:\n  - name: web\n    backend: lab\n  - name: cache\n    backend: lab\n"), "test.yml", nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := records.Open(filepath.Join(t.TempDir(), "chaos.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f := &fixture{killer: &fakeKiller{}, sw: &fakeSwitch{}, store: store}
	h, err := New(Options{Records: store, Killer: f.killer, Switch: f.sw, Config: cfg, OnDemand: onDemand, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

// do sends a request; auth is the whole Authorization header, "" for none.
func (f *fixture) do(t *testing.T, method, path, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const killBody = `{"group": "web", "type": "terminate"}`

func TestKillRefusals(t *testing.T) {
	cases := []struct {
		name     string
		onDemand bool
		auth     string
		body     string
		code     int
		msg      string
	}{
		{"no token", true, "", killBody, 401, "missing Authorization"},
		{"not bearer", true, "Basic " + token, killBody, 401, "missing Authorization"},
		{"wrong token", true, "Bearer " + token + "x", killBody, 403, "wrong bearer token"},
		{"prefix of token", true, "Bearer " + token[:5], killBody, 403, "wrong bearer token"},
		{"disabled", false, "Bearer " + token, killBody, 403, "on-demand terminations are disabled in the config"},
		{"disabled, no token", false, "", killBody, 401, "missing Authorization"},
		{"unknown group", true, "Bearer " + token, `{"group": "nope"}`, 404, `unknown group \"nope\"`},
		{"unknown type", true, "Bearer " + token, `{"group": "web", "type": "nuke"}`, 400, `unknown chaos type \"nuke\"`},
		{"no group", true, "Bearer " + token, `{"type": "stop"}`, 400, "group is missing"},
		{"bad json", true, "Bearer " + token, `{"group": `, 400, "body"},
		{"unknown field", true, "Bearer " + token, `{"group": "web", "force": true}`, 400, "force"},
		{"duration on terminate", true, "Bearer " + token, `{"group": "web", "duration": "5s"}`, 400, "takes no duration"},
		{"duration too long", true, "Bearer " + token, `{"group": "web", "type": "pause", "duration": "2h"}`, 400, "duration"},
		{"loss over 100", true, "Bearer " + token, `{"group": "web", "type": "loss", "percent": 120}`, 400, `loss: percent: \"120\": want a percentage more than 0 and at most 100`},
		{"a parameter of another type", true, "Bearer " + token, `{"group": "web", "type": "delay", "delay": "50ms", "percent": 5}`, 400, "delay takes no percent (its parameters: delay, jitter)"},
		{"a parameter that is no scalar", true, "Bearer " + token, `{"group": "web", "type": "loss", "percent": [20]}`, 400, "percent: want a string or a number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c.onDemand)
			code, body := f.do(t, "POST", "/api/v1/chaos", c.auth, c.body)
			if code != c.code || !strings.Contains(body, c.msg) {
				t.Errorf("got %d %s, want %d with %q", code, body, c.code, c.msg)
			}
			if strings.Contains(body, token[:8]) {
				t.Errorf("the answer echoes the token: %s", body)
			}
			if n := f.killer.count(); n != 0 {
				t.Errorf("%d kills, want none", n)
			}
		})
	}
}

func TestKill(t *testing.T) {
	f := newFixture(t, true)
	code, body := f.do(t, "POST", "/api/v1/chaos", "Bearer "+token, `{"group": "web", "type": "pause", "duration": "30s"}`)
	if code != 200 {
		t.Fatalf("got %d %s", code, body)
	}
	var got chaos.Termination
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := chaos.Action{Kind: chaos.Pause, Duration: 30 * time.Second}
	if got.Group != "web" || got.Action != want || got.Outcome != chaos.Executed {
		t.Errorf("answer %+v", got)
	}
	if len(f.killer.calls) != 1 || f.killer.calls[0] != want {
		t.Errorf("calls %+v", f.killer.calls)
	}
	// Parameters, as numbers or strings.
	f.do(t, "POST", "/api/v1/chaos", "Bearer "+token, `{"group": "web", "type": "loss", "percent": 20, "duration": "30s"}`)
	f.do(t, "POST", "/api/v1/chaos", "Bearer "+token, `{"group": "web", "type": "clock-skew", "offset": "-2s", "rate": "0.01"}`)
	if got := f.killer.calls[1:]; got[0] != (chaos.Action{Kind: chaos.Loss, Duration: 30 * time.Second, Percent: 20}) ||
		got[1] != (chaos.Action{Kind: chaos.ClockSkew, Duration: time.Minute, Offset: -2 * time.Second, Rate: 0.01}) {
		t.Errorf("parameters: %+v", got)
	}
	f.killer.calls = f.killer.calls[:1]
	// The type defaults to terminate, pause to a minute.
	f.do(t, "POST", "/api/v1/chaos", "bearer "+token, `{"group": "cache"}`)
	f.do(t, "POST", "/api/v1/chaos", "Bearer "+token, `{"group": "cache", "type": "pause"}`)
	if f.killer.calls[1] != (chaos.Action{Kind: chaos.Terminate}) || f.killer.calls[2] != (chaos.Action{Kind: chaos.Pause, Duration: time.Minute}) {
		t.Errorf("defaults: %+v", f.killer.calls[1:])
	}

	f.killer.out = chaos.Skipped
	if code, body := f.do(t, "POST", "/api/v1/chaos", "Bearer "+token, killBody); code != 409 || !strings.Contains(body, `"stopped"`) {
		t.Errorf("skipped kill: %d %s", code, body)
	}
	f.killer.err = errors.Join(ErrUnknownGroup, errors.New("web is gone"))
	if code, _ := f.do(t, "POST", "/api/v1/chaos", "Bearer "+token, killBody); code != 404 {
		t.Errorf("killer's unknown group: %d", code)
	}
	f.killer.err = errors.New("backend down")
	if code, body := f.do(t, "POST", "/api/v1/chaos", "Bearer "+token, killBody); code != 500 || !strings.Contains(body, "backend down") {
		t.Errorf("failed kill: %d %s", code, body)
	}
}

func TestStopResume(t *testing.T) {
	f := newFixture(t, false) // the switch does not depend on on-demand kills
	for _, path := range []string{"/api/v1/stop", "/api/v1/resume"} {
		if code, _ := f.do(t, "POST", path, "", ""); code != 401 {
			t.Errorf("%s without token: %d", path, code)
		}
		if code, _ := f.do(t, "POST", path, "Bearer nope", ""); code != 403 {
			t.Errorf("%s with a wrong token: %d", path, code)
		}
	}
	if f.sw.stops != 0 || f.sw.resumes != 0 {
		t.Fatalf("refused requests switched: %d stops, %d resumes", f.sw.stops, f.sw.resumes)
	}
	if code, body := f.do(t, "POST", "/api/v1/stop", "Bearer "+token, ""); code != 200 || !strings.Contains(body, `"stopped": true`) {
		t.Errorf("stop: %d %s", code, body)
	}
	if _, body := f.do(t, "GET", "/metrics", "", ""); !strings.Contains(body, "troop_chaos_stopped 1\n") {
		t.Errorf("metrics while stopped:\n%s", body)
	}
	if code, body := f.do(t, "POST", "/api/v1/resume", "Bearer "+token, ""); code != 200 || !strings.Contains(body, `"stopped": false`) {
		t.Errorf("resume: %d %s", code, body)
	}
	if f.sw.stops != 1 || f.sw.resumes != 1 {
		t.Errorf("%d stops, %d resumes", f.sw.stops, f.sw.resumes)
	}
	if code, _ := f.do(t, "GET", "/api/v1/stop", "Bearer "+token, ""); code != 405 {
		t.Errorf("GET /api/v1/stop: %d", code)
	}
}

func TestNoTokenConfigured(t *testing.T) {
	k := &fakeKiller{}
	h, err := New(Options{Records: &fakeLister{}, Killer: k, Switch: &fakeSwitch{}, OnDemand: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/api/v1/chaos", strings.NewReader(killBody))
	req.Header.Set("Authorization", "Bearer ")
	h.ServeHTTP(rec, req)
	if rec.Code != 403 || k.count() != 0 {
		t.Errorf("got %d and %d kills", rec.Code, k.count())
	}
}

type fakeLister struct{}

func (fakeLister) Terminations(context.Context, chaos.Query) ([]chaos.Termination, error) {
	return nil, nil
}

func TestList(t *testing.T) {
	f := newFixture(t, true)
	ctx := context.Background()
	base := time.Date(2026, 3, 10, 17, 0, 0, 0, time.UTC)
	for i, r := range []struct {
		group string
		kind  chaos.Kind
	}{{"web", chaos.Terminate}, {"cache", chaos.Terminate}, {"web", chaos.Stop}, {"web", chaos.Terminate}} {
		tm := chaos.Termination{Group: r.group, Action: chaos.Action{Kind: r.kind}, Executed: base.Add(time.Duration(i) * time.Hour), Outcome: chaos.Executed}
		if i == 3 {
			tm.Outcome, tm.Reason = chaos.Skipped, chaos.Leashed
		}
		if err := f.store.Record(ctx, tm); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		query string
		hours []int
	}{
		{"", []int{0, 1, 2, 3}},
		{"?group=web", []int{0, 2, 3}},
		{"?type=terminate", []int{0, 1, 3}},
		{"?since=2026-03-10T18:00:00Z", []int{1, 2, 3}},
		{"?since=2026-03-10T11:30:00-07:00", []int{2, 3}}, // 18:30 UTC
		{"?since=2026-03-10T18:00:00Z&group=web&type=terminate", []int{3}},
		{"?group=nope", []int{}},
	}
	for _, c := range cases {
		code, body := f.do(t, "GET", "/api/v1/chaos"+c.query, "", "")
		if code != 200 {
			t.Errorf("%s: %d %s", c.query, code, body)
			continue
		}
		var got []chaos.Termination
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("%s: %v in %s", c.query, err, body)
		}
		hours := []int{}
		for _, g := range got {
			hours = append(hours, int(g.Executed.Sub(base)/time.Hour))
		}
		if !equal(hours, c.hours) {
			t.Errorf("%s: hours %v, want %v", c.query, hours, c.hours)
		}
	}
	for q, msg := range map[string]string{
		"?since=yesterday":  "parameter since",
		"?since=2026-03-10": "parameter since",
		"?type=nuke":        "parameter type",
	} {
		if code, body := f.do(t, "GET", "/api/v1/chaos"+q, "", ""); code != 400 || !strings.Contains(body, msg) {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}

	code, body := f.do(t, "GET", "/metrics", "", "")
	for _, line := range []string{
		`troop_chaos_terminations{group="cache",outcome="executed",reason=""} 1`,
		`troop_chaos_terminations{group="web",outcome="executed",reason=""} 2`,
		`troop_chaos_terminations{group="web",outcome="skipped",reason="leashed"} 1`,
		"troop_chaos_stopped 0",
	} {
		if code != 200 || !strings.Contains(body, line+"\n") {
			t.Errorf("metrics lack %s:\n%s", line, body)
		}
	}
	if code, body := f.do(t, "GET", "/healthz", "", ""); code != 200 || body != "ok\n" {
		t.Errorf("healthz: %d %q", code, body)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The metrics pass promtool's linter, and records that cannot be read make
// a scrape fail (500) rather than report no terminations.
func TestMetrics(t *testing.T) {
	f := newFixture(t, true)
	tm := chaos.Termination{Group: "we\"b", Action: chaos.Action{Kind: chaos.Terminate}, Executed: time.Now(), Outcome: chaos.Executed}
	if err := f.store.Record(context.Background(), tm); err != nil {
		t.Fatal(err)
	}
	code, body := f.do(t, "GET", "/metrics", "", "")
	if code != 200 || !strings.Contains(body, `troop_chaos_terminations{group="we\"b",outcome="executed",reason=""} 1`) ||
		!strings.Contains(body, "process_cpu_seconds_total") || !strings.Contains(body, "troop_build_info{") {
		t.Errorf("metrics: %d\n%s", code, body)
	}
	promcheck.Metrics(t, body)

	h, err := New(Options{Records: brokenLister{}, Killer: &fakeKiller{}, Switch: &fakeSwitch{}})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), "disk on fire") {
		t.Errorf("metrics with broken records: %d %s", rec.Code, rec.Body)
	}
}

type brokenLister struct{}

func (brokenLister) Terminations(context.Context, chaos.Query) ([]chaos.Termination, error) {
	return nil, errors.New("disk on fire")
}
