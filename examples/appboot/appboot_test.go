package appboot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/freeport"
	"github.com/troop-lab/troop/ldfi"
	"github.com/troop-lab/troop/ldfi/httptarget"
)

// The test binary doubles as the service program: run with APPBOOT_SERVICE=1
// it serves one service (a real process per service, no extra build).
func TestMain(m *testing.M) {
	if os.Getenv("APPBOOT_SERVICE") == "1" {
		if err := Main(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startCluster starts the services with args added to each command line.
func startCluster(t *testing.T, args ...string) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Start(ctx, append([]string{os.Args[0]}, args...), []string{"APPBOOT_SERVICE=1"})
	if err != nil {
		t.Fatal(err)
	}
	pids := c.PIDs()
	t.Cleanup(func() {
		c.Stop()
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				t.Errorf("service process %d still runs after Stop", pid)
			}
		}
	})
	return c
}

func key(sets [][]string) []string {
	var out []string
	for _, s := range sets {
		s = slices.Clone(s)
		slices.Sort(s)
		out = append(out, "{"+strings.Join(s, ",")+"}")
	}
	slices.Sort(out)
	return out
}

// TestLDFIFindsPlantedFailures runs the search against the real processes:
// every failure set by design and every planted one, the combination of two
// included, and nothing else; every scenario replays. The services export
// their lineage as OpenTelemetry spans to a file, and the search reads each
// probe's lineage from there, by its traceparent (a probe whose spans do not
// come fails the search).
func TestLDFIFindsPlantedFailures(t *testing.T) {
	spans := filepath.Join(t.TempDir(), "spans.json")
	c := startCluster(t, "--spans", spans)
	target, err := httptarget.New(httptarget.Config{URL: c.GatewayURL(), BodyReject: MemberError, Timeout: 5 * time.Second, Spans: spans})
	if err != nil {
		t.Fatal(err)
	}
	cfg := ldfi.DefaultConfig()
	cfg.MaxFaults, cfg.Target = 2, target.Spec()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	r, err := ldfi.Search(ctx, cfg, target, ldfi.WallClock{})
	if err != nil {
		t.Fatal(err)
	}
	var found [][]string
	for _, f := range r.Failures {
		found = append(found, f.Points)
	}
	if got, want := key(found), key(Expected()); !slices.Equal(got, want) {
		t.Errorf("failure sets\n got %v\nwant %v", got, want)
	}
	if !r.Coverage.Complete {
		t.Errorf("coverage: %s", r.Coverage.Statement)
	}
	t.Logf("%d experiments in %v; %s", len(r.Experiments), time.Since(start).Round(time.Millisecond), r.Coverage.Statement)
	for _, f := range r.Failures {
		rep, err := ldfi.RunScenario(ctx, f.Scenario, target, ldfi.WallClock{})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Reproduced {
			t.Errorf("scenario %s did not reproduce: %+v", f.Scenario.Scope, rep.Experiment)
		}
	}
}

// TestPartialSuccessNeedsBodyOracle: the combination is a 200 whose body
// carries the member's error, so a status-only oracle misses it.
func TestPartialSuccessNeedsBodyOracle(t *testing.T) {
	c := startCluster(t)
	sc := ldfi.Scenario{Scope: "api->bookmarks=error,api->ratings=error", Probes: 10, FailRatio: 0.75}
	for _, reject := range []string{"", MemberError} {
		target, err := httptarget.New(httptarget.Config{URL: c.GatewayURL(), BodyReject: reject})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := ldfi.RunScenario(context.Background(), sc, target, ldfi.WallClock{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Reproduced != (reject != "") {
			t.Errorf("body reject %q: reproduced %v", reject, rep.Reproduced)
		}
	}
}

// TestLDFIReadsOTLP: the services export their spans over OTLP/HTTP to a
// receiver the target serves, each service its own spans in the request's
// trace; the search reads every probe's lineage from there.
func TestLDFIReadsOTLP(t *testing.T) {
	addr, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, "--spans", "http://"+addr+"/v1/traces")
	target, err := httptarget.New(httptarget.Config{URL: c.GatewayURL(), BodyReject: MemberError, Timeout: 5 * time.Second, Spans: "otlp:" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	cfg := ldfi.DefaultConfig()
	cfg.MaxFaults, cfg.Probes, cfg.Target = 1, 2, target.Spec()
	r, err := ldfi.Search(context.Background(), cfg, target, ldfi.WallClock{})
	if err != nil {
		t.Fatal(err)
	}
	var found, want [][]string
	for _, f := range r.Failures {
		found = append(found, f.Points)
	}
	for _, s := range Expected() {
		if len(s) == 1 {
			want = append(want, s)
		}
	}
	if got, w := key(found), key(want); !slices.Equal(got, w) {
		t.Errorf("failure sets\n got %v\nwant %v", got, w)
	}
}
