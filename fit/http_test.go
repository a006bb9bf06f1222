package fit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A tiny app: api calls ratings (optional) and playlist, falling back to
// pf; playlist reads its cache.
type app struct {
	api, ratings, playlist, pf *httptest.Server
	trees                      chan *Call
}

func newApp(t *testing.T) *app { return newExportingApp(t, nil) }

// newExportingApp is newApp whose every service hands its trees to export
// (the api's also go to a.trees).
func newExportingApp(t *testing.T, export func(context.Context, *Call)) *app {
	a := &app{trees: make(chan *Call, 10)}
	leaf := func(name string, body func(ctx context.Context) error) *httptest.Server {
		s := httptest.NewServer(Middleware(name, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if body != nil {
				if err := body(r.Context()); err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
			}
			fmt.Fprint(w, name)
		}), export))
		t.Cleanup(s.Close)
		return s
	}
	a.ratings = leaf("ratings", nil)
	a.pf = leaf("pf", nil)
	a.playlist = leaf("playlist", func(ctx context.Context) error {
		return Do(ctx, "playlist/cache", func(context.Context) error { return nil })
	})
	names := map[string]string{}
	for name, s := range map[string]*httptest.Server{"ratings": a.ratings, "playlist": a.playlist, "pf": a.pf} {
		names[strings.TrimPrefix(s.URL, "http://")] = name
	}
	client := &http.Client{Transport: &Transport{Callee: func(r *http.Request) string { return names[r.URL.Host] }}}
	get := func(ctx context.Context, url string) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return string(b), nil
	}
	a.api = httptest.NewServer(Middleware("api", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		rating, _ := get(ctx, a.ratings.URL) // optional
		list, err := get(ctx, a.playlist.URL)
		if err != nil {
			list, err = get(ctx, a.pf.URL)
		}
		if err != nil {
			http.Error(w, "no playlist", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, rating, "+", list)
	}), func(ctx context.Context, c *Call) {
		if export != nil {
			export(ctx, c)
		}
		a.trees <- c
	}))
	t.Cleanup(a.api.Close)
	return a
}

func (a *app) get(t *testing.T, scope string) (int, *Call) {
	t.Helper()
	req, _ := http.NewRequest("GET", a.api.URL, nil)
	s, err := ParseScope(scope)
	if err != nil {
		t.Fatal(err)
	}
	SetScopeHeader(req.Header, s)
	req.Header.Add("baggage", "other=1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c, err := DecodeLineage(resp.Header)
	if err != nil || c == nil {
		t.Fatalf("lineage %v, %v", c, err)
	}
	<-a.trees
	return resp.StatusCode, c
}

func TestHTTPLineage(t *testing.T) {
	a := newApp(t)
	for _, c := range []struct {
		scope, used, reached string
		status               int
	}{
		{"", "api->playlist api->ratings client->api playlist/cache", "api->playlist api->ratings client->api playlist/cache", 200},
		{"api->ratings=error", "api->playlist client->api playlist/cache", "api->playlist api->ratings client->api playlist/cache", 200},
		{"playlist/cache=error", "api->pf api->ratings client->api", "api->pf api->playlist api->ratings client->api playlist/cache", 200},
		{"api->playlist=error", "api->pf api->ratings client->api", "api->pf api->playlist api->ratings client->api", 200},
		{"api->playlist=error,api->pf=error", "api->ratings client->api", "api->pf api->playlist api->ratings client->api", 503},
		{"api->ratings=delay:5ms", "api->playlist api->ratings client->api playlist/cache", "api->playlist api->ratings client->api playlist/cache", 200},
		{"client->api=error", "", "client->api", 503},
		{"client->api=status:429", "", "client->api", 429},
		{"api->playlist=status:503", "api->pf api->ratings client->api", "api->pf api->playlist api->ratings client->api", 200},
		{"api->ratings=reset", "api->playlist client->api playlist/cache", "api->playlist api->ratings client->api playlist/cache", 200},
		{"api->ratings=code:Unavailable", "api->playlist client->api playlist/cache", "api->playlist api->ratings client->api playlist/cache", 200},
		{"client->api=timeout", "", "client->api", 504},
	} {
		status, tree := a.get(t, c.scope)
		if status != c.status {
			t.Errorf("scope %q: HTTP %d, want %d", c.scope, status, c.status)
		}
		if got := strings.Join(tree.UsedPoints(), " "); got != c.used {
			t.Errorf("scope %q: used %q, want %q", c.scope, got, c.used)
		}
		if got := strings.Join(tree.Reached(), " "); got != c.reached {
			t.Errorf("scope %q: reached %q, want %q", c.scope, got, c.reached)
		}
	}
}

// TestFaultKinds: what a caller sees of each kind of fault at an HTTP
// call, and a reset of the entry's own connection.
func TestFaultKinds(t *testing.T) {
	callee := httptest.NewServer(Middleware("b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "b") }), nil))
	defer callee.Close()
	client := &http.Client{Transport: &Transport{Callee: func(*http.Request) string { return "b" }}}
	seen := make(chan string, 1)
	api := httptest.NewServer(Middleware("a", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), "GET", callee.URL, nil)
		resp, err := client.Do(req)
		switch {
		case err != nil:
			seen <- fmt.Sprintf("error reset=%v injected=%v: %v", errors.Is(err, syscall.ECONNRESET), IsInjected(err), err)
		default:
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			seen <- fmt.Sprintf("HTTP %d %s", resp.StatusCode, b)
		}
	}), nil))
	defer api.Close()
	for scope, want := range map[string]string{
		"":                   "HTTP 200 b",
		"a->b=status:503":    "HTTP 503 fit: status:503 injected at a->b\n",
		"a->b=status:404":    "HTTP 404 fit: status:404 injected at a->b\n",
		"a->b=reset":         "error reset=true injected=true",
		"a->b=code:Internal": "error reset=false injected=true",
	} {
		req, _ := http.NewRequest("GET", api.URL, nil)
		s, _ := ParseScope(scope)
		SetScopeHeader(req.Header, s)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := <-seen; !strings.HasPrefix(got, want) {
			t.Errorf("scope %q: the caller saw %q, want %q", scope, got, want)
		}
	}
	req, _ := http.NewRequest("GET", api.URL, nil)
	SetScopeHeader(req.Header, ErrorScope())
	s, _ := ParseScope("client->a=reset")
	SetScopeHeader(req.Header, s)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("client->a=reset: HTTP %d, want the connection reset", resp.StatusCode)
	}
}

func TestMalformedBaggage(t *testing.T) {
	a := newApp(t)
	for _, v := range []string{"troop-fit=nonsense", "troop-fit=a%2Fb%3Dexplode", "==="} {
		req, _ := http.NewRequest("GET", a.api.URL, nil)
		req.Header.Set("baggage", v)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "fit") || !strings.HasPrefix(resp.Header.Get(ErrorHeader), "api: fit") {
			t.Errorf("baggage %q: HTTP %d %q, %s %q: want 400 naming the problem", v, resp.StatusCode, b, ErrorHeader, resp.Header.Get(ErrorHeader))
		}
	}
}

// TestRejectedDownstream: a callee that refuses the scope (here: it only
// knows an older grammar) makes the entry's answer say so, whatever the
// entry's status, so a search cannot take the refusal for a failure.
func TestRejectedDownstream(t *testing.T) {
	strict := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ErrorHeader, "strict: fit scope: unknown action")
		http.Error(w, "bad scope", http.StatusBadRequest)
	}))
	defer strict.Close()
	client := &http.Client{Transport: &Transport{}}
	api := httptest.NewServer(Middleware("api", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), "GET", strict.URL, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
		fmt.Fprint(w, "fine without it")
	}), nil))
	defer api.Close()
	req, _ := http.NewRequest("GET", api.URL, nil)
	SetScopeHeader(req.Header, ErrorScope("api/x"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(ErrorHeader) != "strict: fit scope: unknown action" {
		t.Errorf("HTTP %d, %s %q: want the callee's refusal passed up", resp.StatusCode, ErrorHeader, resp.Header.Get(ErrorHeader))
	}
	tree, _ := DecodeLineage(resp.Header)
	host := strings.TrimPrefix(strict.URL, "http://")
	want := "api->" + Name(host)
	if tree == nil || !slices.Contains(tree.Reached(), want) || CheckPoint(want) != nil {
		t.Errorf("default callee: reached %v, want the valid point %s", tree.Reached(), want)
	}
}

func TestName(t *testing.T) {
	for in, want := range map[string]string{"ratings": "ratings", "127.0.0.1:8080": "127.0.0.1_8080", "[::1]:80": "___1__80", "a b": "a_b", "": ""} {
		if got := Name(in); got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSpansRoundTrip exports lineage as OTel spans to a JSON file and reads
// it back into the same lineage.
func TestSpansRoundTrip(t *testing.T) {
	a := newApp(t)
	path := filepath.Join(t.TempDir(), "spans.json")
	exp, closer, err := NewSpanExporter(context.Background(), "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	w := NewSpanWriter(exp)
	scopes := []string{"", "playlist/cache=error", "api->playlist=error,api->pf=error"}
	var want []*Call
	for _, s := range scopes {
		_, tree := a.get(t, s)
		want = append(want, tree)
		w.Write(context.Background(), tree)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	closer.Close()
	b, _ := os.ReadFile(path)
	got, err := ReadSpans(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d trees read back, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Service != "api" || fmt.Sprint(got[i].UsedPoints()) != fmt.Sprint(want[i].UsedPoints()) ||
			fmt.Sprint(got[i].Reached()) != fmt.Sprint(want[i].Reached()) {
			t.Errorf("tree %d (%q): read back used %v reached %v, want %v %v", i, scopes[i],
				got[i].UsedPoints(), got[i].Reached(), want[i].UsedPoints(), want[i].Reached())
		}
	}
	for _, dest := range []string{"file:", "otlp:", ""} {
		if _, _, err := NewSpanExporter(context.Background(), dest); err == nil {
			t.Errorf("destination %q was accepted", dest)
		}
	}
}

// TestTraceparentDownstream: every service exports its own spans to one
// file, and the callees' spans join the entry's trace under the calls'
// spans (the Transport sends a traceparent): each point is one span, and
// the trace read back is the whole request's lineage, as the header has it.
func TestTraceparentDownstream(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.json")
	exp, closer, err := NewSpanExporter(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	w := NewSpanWriter(exp)
	a := newExportingApp(t, w.Write)
	tail, err := NewSpanTail(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"", "playlist/cache=error"} {
		traceID, spanID := NewTraceparent()
		req, _ := http.NewRequest("GET", a.api.URL, nil)
		s, _ := ParseScope(scope)
		SetScopeHeader(req.Header, s)
		req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		header, _ := DecodeLineage(resp.Header)
		<-a.trees
		got, err := tail.Lineage(context.Background(), traceID, spanID, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got.Reached()) != fmt.Sprint(header.Reached()) || fmt.Sprint(got.UsedPoints()) != fmt.Sprint(header.UsedPoints()) {
			t.Errorf("scope %q: from spans reached %v used %v; header %v %v", scope, got.Reached(), got.UsedPoints(), header.Reached(), header.UsedPoints())
		}
	}
	w.Close(context.Background())
	closer.Close()
	b, _ := os.ReadFile(path)
	count := map[string]int{}
	traces := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var s spanJSON
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatal(err)
		}
		count[s.SpanContext.TraceID+" "+s.Name]++
		traces[s.SpanContext.TraceID] = true
	}
	for k, n := range count {
		if n > 1 {
			t.Errorf("span %s exported %d times", k, n)
		}
	}
	if len(traces) != 2 {
		t.Errorf("%d traces for two requests: the callees' spans are not in the entry's trace", len(traces))
	}
}

// TestOTLPReceiver: services export to the receiver over OTLP/HTTP, and
// the caller reads its request's lineage back from it.
func TestOTLPReceiver(t *testing.T) {
	rcv, err := NewOTLPReceiver("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	exp, _, err := NewSpanExporter(context.Background(), rcv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	w := NewSpanWriter(exp)
	defer w.Close(context.Background())
	a := newExportingApp(t, w.Write)
	traceID, spanID := NewTraceparent()
	req, _ := http.NewRequest("GET", a.api.URL, nil)
	SetScopeHeader(req.Header, ErrorScope("api->playlist"))
	req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	header, _ := DecodeLineage(resp.Header)
	<-a.trees
	got, err := rcv.Lineage(context.Background(), traceID, spanID, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Reached()) != fmt.Sprint(header.Reached()) || fmt.Sprint(got.UsedPoints()) != fmt.Sprint(header.UsedPoints()) {
		t.Errorf("from OTLP reached %v used %v; header %v %v", got.Reached(), got.UsedPoints(), header.Reached(), header.UsedPoints())
	}
	if _, err := rcv.Lineage(context.Background(), traceID, spanID, 10*time.Millisecond); err == nil {
		t.Error("a request's lineage was handed out twice")
	}
	bad, _ := http.Post(rcv.Endpoint(), "application/x-protobuf", strings.NewReader("\xff\xff"))
	if bad == nil || bad.StatusCode != 400 {
		t.Errorf("a malformed OTLP request: %v, want 400", bad)
	}
}

// TestSpansOTLP posts lineage to an OTLP/HTTP endpoint (a local server that
// records what it receives; no collector runs here).
func TestSpansOTLP(t *testing.T) {
	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- fmt.Sprintf("%s %s %s %d", r.Method, r.URL.Path, r.Header.Get("Content-Type"), len(b))
	}))
	defer srv.Close()
	exp, _, err := NewSpanExporter(context.Background(), "otlp:"+srv.URL+"/v1/traces")
	if err != nil {
		t.Fatal(err)
	}
	w := NewSpanWriter(exp)
	w.Write(context.Background(), &Call{Service: "api", OK: true, Calls: []*Call{{Point: "api->x", OK: true, Used: true}}})
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if !strings.HasPrefix(s, "POST /v1/traces application/x-protobuf") || strings.HasSuffix(s, " 0") {
			t.Errorf("OTLP request %q", s)
		}
	default:
		t.Error("no OTLP request arrived")
	}
}
