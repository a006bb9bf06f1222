// Package shop is five small HTTP services instrumented with fit exactly as
// docs/fit.md tells a user to, and nothing more: fit.Middleware on each
// handler, a fit.Transport with its defaults (each callee named by its
// host and port), fit.Do around a step inside a service. ldfi's tests run
// a search against it to check that a first-time user's instrumentation
// gives true failure sets only.
//
//	front (GET /) -> front/session          (critical)
//	              -> catalog -> catalog/db  (critical)
//	              -> reviews                (optional)
//	              -> price, or price-backup when price fails
package shop

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/troop-lab/troop/fit"
)

// Shop is the five services, each on its own loopback port.
type Shop struct {
	URL     map[string]string // service to base URL
	servers []*http.Server
}

// Start serves the five services on free loopback ports until Stop.
func Start() (*Shop, error) {
	s := &Shop{URL: map[string]string{}}
	listeners := map[string]net.Listener{}
	for _, name := range []string{"front", "catalog", "reviews", "price", "price-backup"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.Stop()
			return nil, err
		}
		listeners[name] = l
		s.URL[name] = "http://" + l.Addr().String()
	}
	// The instrumentation, as docs/fit.md shows it.
	client := &http.Client{Transport: &fit.Transport{}, Timeout: 2 * time.Second}
	get := func(ctx context.Context, url string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
		}
		return nil
	}
	handlers := map[string]http.HandlerFunc{
		"front": func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			if err := fit.Do(ctx, "front/session", func(context.Context) error { return nil }); err != nil {
				http.Error(w, "no session", http.StatusServiceUnavailable)
				return
			}
			if err := get(ctx, s.URL["catalog"]); err != nil {
				http.Error(w, "no catalog", http.StatusServiceUnavailable)
				return
			}
			reviews := "reviews"
			if get(ctx, s.URL["reviews"]) != nil {
				reviews = "no reviews" // optional
			}
			if get(ctx, s.URL["price"]) != nil && get(ctx, s.URL["price-backup"]) != nil {
				http.Error(w, "no price", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "catalog, price,", reviews)
		},
		"catalog": func(w http.ResponseWriter, r *http.Request) {
			if err := fit.Do(r.Context(), "catalog/db", func(context.Context) error { return nil }); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			fmt.Fprintln(w, "catalog")
		},
	}
	for name, l := range listeners {
		h := handlers[name]
		if h == nil {
			h = func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, name) }
		}
		srv := &http.Server{Handler: fit.Middleware(name, h, nil), ReadHeaderTimeout: 5 * time.Second}
		s.servers = append(s.servers, srv)
		go srv.Serve(l)
	}
	return s, nil
}

// EntryURL is the request a search probes.
func (s *Shop) EntryURL() string { return s.URL["front"] + "/" }

// Point is the point of front's call to service, as fit.Transport names it
// by default: "front->" and the host and port made a valid name.
func (s *Shop) Point(service string) string {
	return "front->" + fit.Name(strings.TrimPrefix(s.URL[service], "http://"))
}

// Expected lists the true minimal failure sets of up to two points.
func (s *Shop) Expected() [][]string {
	return [][]string{
		{fit.EntryPoint("front")},
		{"front/session"},
		{s.Point("catalog")},
		{"catalog/db"},
		{s.Point("price"), s.Point("price-backup")},
	}
}

// Stop closes the services.
func (s *Shop) Stop() {
	for _, srv := range s.servers {
		srv.Close()
	}
}
