package dockerchaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos"
)

// On a loaded host the engine's runtime sometimes cannot freeze a container
// ("unable to freeze") and thaws it again; a pause then tries again, a
// bounded number of times. Between the Terminator and the real engine, a
// proxy answers the first pause requests with the engine's own error.
func TestPauseRetriesUnableToFreeze(t *testing.T) {
	needEngine(t)
	t.Parallel()
	for i, tc := range []struct {
		failures int
		paused   bool
	}{{1, true}, {pauseAttempts, false}} {
		term, err := New(freezeFailingEngine(t, tc.failures))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { term.Close() })
		name := fmt.Sprintf("freeze-%d", i)
		id := run(t, spec{labels: map[string]string{groupLabel: name}})
		live, err := term.Instances(context.Background(), group(name, map[string]string{groupLabel: name}))
		if err != nil || len(live) != 1 {
			t.Fatalf("instances = %v, %v; want the one container", live, err)
		}
		now := time.Now()
		l := chaos.Lease{ID: name, Group: name, Backend: chaos.Docker, Instance: live[0],
			Action: chaos.Action{Kind: chaos.Pause, Duration: time.Second}, Start: now, Until: now.Add(time.Second)}
		_, err = term.Begin(context.Background(), l)
		if paused := inspect(t, id).State.Paused; paused != tc.paused || (err == nil) != tc.paused {
			t.Errorf("%d pause requests refused: Begin = %v, container paused %v; want paused %v", tc.failures, err, paused, tc.paused)
		}
		if err != nil && !strings.Contains(err.Error(), "unable to freeze") {
			t.Errorf("%d pause requests refused: Begin = %v, want the engine's reason", tc.failures, err)
		}
		if err := term.Revert(context.Background(), l); err != nil || inspect(t, id).State.Paused {
			t.Errorf("Revert = %v, container paused %v", err, inspect(t, id).State.Paused)
		}
	}
}

// freezeFailingEngine serves the engine's API on a local port, passing every
// request to the test's engine but the first failures pause requests, which
// it answers as the engine does when its runtime cannot freeze a container.
func freezeFailingEngine(t *testing.T, failures int) string {
	t.Helper()
	engine, err := url.Parse(api.DaemonHost())
	if err != nil {
		t.Fatal(err)
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		if engine.Scheme == "unix" {
			return d.DialContext(ctx, "unix", engine.Path)
		}
		return d.DialContext(ctx, "tcp", engine.Host)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker" },
		Transport: &http.Transport{DialContext: dial},
	}
	var left atomic.Int32
	left.Store(int32(failures))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pause") && left.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"message":"Cannot pause container: OCI runtime pause failed: unable to freeze: unknown"}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return "tcp://" + srv.Listener.Addr().String()
}
