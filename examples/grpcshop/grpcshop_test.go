package grpcshop

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/ldfi"
	"github.com/troop-lab/troop/ldfi/grpctarget"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func search(t *testing.T, cfg grpctarget.Config, faults ...fit.Fault) (*ldfi.Report, *grpctarget.Target) {
	t.Helper()
	target, err := grpctarget.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Close() })
	c := ldfi.DefaultConfig()
	c.MaxFaults, c.Probes, c.Target = 2, 2, target.Spec()
	if len(faults) > 0 {
		c.Faults = faults
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := ldfi.Search(ctx, c, target, ldfi.WallClock{})
	if err != nil {
		t.Fatal(err)
	}
	return r, target
}

func faultSets(r *ldfi.Report) string {
	var out []string
	for _, f := range r.Failures {
		out = append(out, "{"+strings.Join(f.Faults, ",")+"}")
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestLDFIThroughGRPC searches front's Get through gRPC: the scope goes in
// the metadata, each service's lineage comes back in the trailers, across a
// unary call (prices) and a server stream (reviews). With errors only, the
// failure sets are the critical points; with ResourceExhausted among the
// fault types, the planted fault shows: a reviews stream ending with it
// fails front, an error does not.
func TestLDFIThroughGRPC(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	req, _ := proto.Marshal(wrapperspb.String("book"))
	cfg := grpctarget.Config{Addr: s.Addr["front"], Method: FrontGet, Request: req, Timeout: 5 * time.Second}

	r, target := search(t, cfg)
	want := "{client->front=error} {front->shop.Prices=error} {front/session=error} {prices/db=error}"
	if got := faultSets(r); got != want || !r.Coverage.Complete {
		t.Errorf("errors: failure sets\n got %s\nwant %s\n%s", got, want, r.Coverage.Statement)
	}
	for _, f := range r.Failures {
		rep, err := ldfi.RunScenario(context.Background(), f.Scenario, target, ldfi.WallClock{})
		if err != nil || !rep.Reproduced {
			t.Errorf("scenario %s: %+v, %v", f.Scenario.Scope, rep, err)
		}
	}

	r, _ = search(t, cfg, fit.Fault{Kind: fit.Error}, fit.Fault{Kind: fit.Code, Code: "ResourceExhausted"})
	got := faultSets(r)
	for _, set := range []string{"{front->shop.Reviews=code:ResourceExhausted}", "{prices/db=error}", "{front->shop.Prices=code:ResourceExhausted}", "{client->front=code:ResourceExhausted}"} {
		if !strings.Contains(got, set) {
			t.Errorf("with ResourceExhausted: failure sets %s lack %s", got, set)
		}
	}
	if strings.Contains(got, "front->shop.Reviews=error") || strings.Contains(got, "prices/db=code") || strings.Contains(got, "reviews/db") {
		t.Errorf("with ResourceExhausted: false failure sets in %s", got)
	}
}

// TestStreamingTarget probes the reviews stream itself: the stream's
// lineage comes back in its trailers, and its critical points are found.
func TestStreamingTarget(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	r, _ := search(t, grpctarget.Config{Addr: s.Addr["reviews"], Method: ReviewsList, Stream: true})
	if got, want := faultSets(r), "{client->reviews=error} {reviews/db=error}"; got != want {
		t.Errorf("failure sets %s, want %s", got, want)
	}
	if _, err := grpctarget.New(grpctarget.Config{Addr: "x:1", Method: "Get"}); err == nil {
		t.Error("a method without its service was accepted")
	}
}
