package httptarget

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/ldfi"
)

// TestOracle: status and body predicates judge a probe; the scope reaches
// the service; a service without fit gives an unknown lineage.
func TestOracle(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("baggage") != "" {
			w.WriteHeader(299)
		}
		w.Write([]byte(`{"rows": 3, "member_error": "x"}`))
	}))
	defer plain.Close()
	fitted := httptest.NewServer(fit.Middleware("api", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := fit.Do(r.Context(), "api/cache", func(context.Context) error { return nil }); err != nil {
			http.Error(w, "no cache", http.StatusServiceUnavailable)
		}
	}), nil))
	defer fitted.Close()
	scope := fit.ErrorScope("api/cache")
	for _, c := range []struct {
		cfg    Config
		scope  fit.Scope
		ok     bool
		detail string
		known  bool
	}{
		{Config{URL: plain.URL}, fit.Scope{}, true, "", false},
		{Config{URL: plain.URL}, scope, true, "", false}, // 299 is a 2xx
		{Config{URL: plain.URL, Status: []int{200}}, scope, false, "HTTP 299", false},
		{Config{URL: plain.URL, BodyReject: "member_error"}, fit.Scope{}, false, `body matches "member_error"`, false},
		{Config{URL: plain.URL, BodyMatch: `"rows": [1-9]`}, fit.Scope{}, true, "", false},
		{Config{URL: plain.URL, BodyMatch: `"rows": 0`}, fit.Scope{}, false, "does not match", false},
		{Config{URL: fitted.URL}, fit.Scope{}, true, "", true},
		{Config{URL: fitted.URL}, scope, false, "HTTP 503", true},
		{Config{URL: "http://127.0.0.1:1/"}, fit.Scope{}, false, "connection refused", false},
	} {
		tg, err := New(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		p, err := tg.Probe(context.Background(), c.scope)
		if err != nil {
			t.Fatal(err)
		}
		if p.OK != c.ok || !strings.Contains(p.Detail, c.detail) || p.Lineage.Known != c.known {
			t.Errorf("%+v under %q: %+v", c.cfg, c.scope, p)
		}
	}
	// The spec rebuilds the same target.
	tg, _ := New(Config{URL: fitted.URL, BodyReject: "x"})
	again, err := FromSpec(tg.Spec())
	if err != nil || again.cfg.URL != fitted.URL || again.cfg.BodyReject != "x" {
		t.Errorf("FromSpec: %+v, %v", again, err)
	}
	if _, err := FromSpec(ldfi.Spec{Kind: "store"}); err == nil {
		t.Error("a store spec made an HTTP target")
	}
	for _, bad := range []Config{{URL: "ftp://x"}, {URL: "http://"}, {URL: "http://x", BodyMatch: "("}} {
		if _, err := New(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestRejectedScope: a service that refuses the scope (fit.Middleware's
// 400 for a malformed one) stops the search with an error; the refusal is
// never counted as a failed request, so no false failure set comes of it.
func TestRejectedScope(t *testing.T) {
	mw := fit.Middleware("api", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fit.Do(r.Context(), "api/cache", func(context.Context) error { return nil })
	}), nil)
	// In front of it, a proxy that mangles every scope it passes on.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("baggage") != "" {
			r.Header.Set("baggage", "troop-fit=api%2Fcache%3Dexplode")
		}
		mw.ServeHTTP(w, r)
	}))
	defer srv.Close()
	tg, err := New(Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r, err := ldfi.Search(context.Background(), ldfi.DefaultConfig(), tg, ldfi.WallClock{})
	if !errors.Is(err, ldfi.ErrScopeRejected) || !strings.Contains(err.Error(), `api: fit scope: fault 1 "api/cache=explode"`) {
		t.Fatalf("err %v: want ErrScopeRejected naming the service and the problem", err)
	}
	if r != nil && len(r.Failures) > 0 {
		t.Errorf("failure sets %+v from refused scopes", r.Failures)
	}
}
