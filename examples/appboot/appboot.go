// Package appboot is a set of small HTTP services modelled on Netflix's App
// Boot request (Netflix's LDFI post), instrumented with fit, for ldfi to explore: the
// api gateway's GET /appboot touches fifteen services, some calls optional,
// some with fallbacks, and planted faults, one of which only a combination
// of two failures triggers.
//
// Every service is the same program started with its name (Main); Start
// runs them all as processes on free loopback ports.
package appboot

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/troop-lab/troop/fit"
)

// A step is one thing a service does for a request, in order.
type step struct {
	call     string // the service called ("" for a step inside the service)
	point    string // for a step inside the service: its point name
	fallback string // the service (or point) used when this one fails
	optional bool   // the answer does without it
}

// Services maps each service to its steps. Leaves just answer.
var services = map[string][]step{
	"api": {
		{call: "account"},
		{call: "config"},
		{call: "abtest", optional: true},
		{call: "lolomo"},
		{call: "playlist", fallback: "playlist-fallback"},
		{call: "ratings", optional: true},
		{call: "bookmarks", optional: true},
		{call: "images", optional: true},
	},
	// Planted fault: geo was meant to be optional, but account gives up
	// without it.
	"account":           {{point: "db"}, {call: "geo"}},
	"config":            {{point: "cache", fallback: "store"}},
	"lolomo":            {{call: "catalog"}, {call: "personalization", fallback: "popular"}},
	"playlist":          {{call: "recommendations"}},
	"geo":               nil,
	"abtest":            nil,
	"catalog":           nil,
	"personalization":   nil,
	"popular":           nil,
	"playlist-fallback": nil,
	"recommendations":   nil,
	"ratings":           nil,
	"bookmarks":         nil,
	"images":            nil,
}

// Names lists the services, the gateway first.
func Names() []string {
	var out []string
	for name := range services {
		if name != Gateway {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return append([]string{Gateway}, out...)
}

// Gateway is the entry service; its request is GET /appboot.
const Gateway = "api"

// Path is the gateway's App Boot request.
const Path = "/appboot"

// MemberError marks an answer that is a 200 but a failure for the member: a
// partial success with the error embedded in the payload (Netflix's LDFI post).
const MemberError = "member_error"

// Expected lists the minimal failure sets of the App Boot request, by design
// and planted: what ldfi should find with up to two faults (the gateway's
// own failure is the entry point client->api).
func Expected() [][]string {
	return [][]string{
		{"client->api"}, // the gateway itself
		{"api->account"},
		{"account/db"},
		{"account->geo"}, // planted: geo should have been optional
		{"api->config"},
		{"config/cache", "config/store"},
		{"api->lolomo"},
		{"lolomo->catalog"},
		{"lolomo->personalization", "lolomo->popular"},
		{"api->playlist", "api->playlist-fallback"},
		{"api->playlist-fallback", "playlist->recommendations"},
		{"api->bookmarks", "api->ratings"}, // planted: the combination
	}
}

// part is what one service returns.
type part struct {
	Service  string           `json:"service"`
	Parts    map[string]*part `json:"parts,omitempty"`
	Degraded []string         `json:"degraded,omitempty"`
	Error    string           `json:"member_error,omitempty"`
}

// Handler serves service name, calling the others at peers (name to base
// URL) through client; done, when set, gets the lineage of every request
// served (fit.Middleware).
func Handler(name string, peers map[string]string, client *http.Client, done func(context.Context, *fit.Call)) (http.Handler, error) {
	steps, ok := services[name]
	if !ok {
		return nil, fmt.Errorf("appboot: no service %q (have %s)", name, strings.Join(Names(), ", "))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.Handle("GET "+Path, fit.Middleware(name, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := serve(r.Context(), name, steps, peers, client)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	}), done))
	return mux, nil
}

func serve(ctx context.Context, name string, steps []step, peers map[string]string, client *http.Client) (*part, error) {
	out := &part{Service: name, Parts: map[string]*part{}}
	for _, s := range steps {
		got, err := run(ctx, name, s.call, s.point, peers, client)
		if err != nil && s.fallback != "" {
			if s.call != "" {
				got, err = run(ctx, name, s.fallback, "", peers, client)
			} else {
				got, err = run(ctx, name, "", s.fallback, peers, client)
			}
		}
		label := s.call + s.point
		switch {
		case err == nil:
			out.Parts[label] = got
		case s.optional:
			out.Degraded = append(out.Degraded, label)
		default:
			return nil, fmt.Errorf("%s: %s: %w", name, label, err)
		}
	}
	// Planted fault: the page renders ratings inside the bookmarks row; with
	// both gone it renders an error for the member, though the answer is a 200.
	if name == Gateway && slices.Contains(out.Degraded, "ratings") && slices.Contains(out.Degraded, "bookmarks") {
		out.Error = "cannot render the continue-watching row"
	}
	return out, nil
}

// run does one step: a call to service call, or the point named point.
func run(ctx context.Context, name, call, point string, peers map[string]string, client *http.Client) (*part, error) {
	if call == "" {
		err := fit.Do(ctx, name+"/"+point, func(context.Context) error { return nil })
		return &part{Service: name + "/" + point}, err
	}
	base, ok := peers[call]
	if !ok {
		return nil, fmt.Errorf("no address for %s", call)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+Path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Appboot-Callee", call)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var p part
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return nil, err
	}
	return &p, nil
}

// NewClient is the HTTP client of a service: a fit Transport naming the
// callee from the X-Appboot-Callee header.
func NewClient() *http.Client {
	return &http.Client{Transport: &fit.Transport{Callee: func(r *http.Request) string { return r.Header.Get("X-Appboot-Callee") }}}
}

// Main runs one service until SIGTERM or SIGINT: args are
// --name NAME --listen HOST:PORT --peers NAME=URL,NAME=URL... [--spans DEST],
// DEST a file or an OTLP/HTTP URL the lineage of each request goes to as
// OpenTelemetry spans (fit.NewSpanExporter).
func Main(args []string) error {
	fs := flag.NewFlagSet("appboot", flag.ContinueOnError)
	name := fs.String("name", "", "the service to run")
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	peerList := fs.String("peers", "", "NAME=URL,... of the other services")
	spans := fs.String("spans", "", "export each request's lineage as OpenTelemetry spans to this file or OTLP/HTTP URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	peers, err := ParsePeers(*peerList)
	if err != nil {
		return err
	}
	var done func(context.Context, *fit.Call)
	if *spans != "" {
		exp, closer, err := fit.NewSpanExporter(context.Background(), *spans)
		if err != nil {
			return fmt.Errorf("appboot %s: --spans: %w", *name, err)
		}
		w := fit.NewSpanWriter(exp)
		defer closer.Close()
		defer w.Close(context.Background())
		done = w.Write
	}
	h, err := Handler(*name, peers, NewClient(), done)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("appboot %s: %w", *name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ParsePeers reads NAME=URL,NAME=URL.
func ParsePeers(s string) (map[string]string, error) {
	peers := map[string]string{}
	if s == "" {
		return peers, nil
	}
	for _, kv := range strings.Split(s, ",") {
		name, url, ok := strings.Cut(kv, "=")
		if !ok || name == "" || !strings.HasPrefix(url, "http://") {
			return nil, fmt.Errorf("appboot: peer %q: want NAME=http://HOST:PORT", kv)
		}
		peers[name] = url
	}
	return peers, nil
}
