package report

import (
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/suite"
)

// A report whose verdict broke says so at the top, shows the lost writes and
// the counterexample, and escapes what it quotes.
func TestBrokenReport(t *testing.T) {
	res := &bench.Result{Totals: []bench.Row{{Task: "Get", Count: 10, ReqPerSec: 5}}, Rows: []bench.Row{{Task: "Get", Seconds: 2.5,
		Series: []bench.Point{{T: 0, Ops: 4}, {T: 1, Ops: 5}, {T: 2, Ops: 1}}}}}
	rep := &suite.Report{
		Troop: "test", Seed: 7, Cluster: "lab <x>", Started: time.Unix(0, 0), Finished: time.Unix(30, 0),
		Config:     suite.QuickConfig(),
		Baseline:   []suite.BenchPhase{{Level: "DC_QUORUM", Result: res}},
		Durability: &bench.AuditResult{Keys: 10, Lost: 2, Samples: []string{"GET key:1: missing, but the latest acknowledged write is a value"}},
		Consistency: []suite.ConsistencyPhase{{Level: "DC_QUORUM", Verdict: check.Verdict{Result: "Illegal", Ops: 3,
			Counterexample: &check.Counterexample{Key: "k<1>", Ops: []check.Op{{Key: "k<1>", Value: 5}}}},
			Coordination: []check.Finding{check.CheckLocks([]check.Command{
				{Client: 0, Key: "lock<1>", Name: check.SetNX, Arg: "me", Acquired: true},
				{Client: 1, Key: "lock<1>", Name: check.SetNX, Arg: "me", Acquired: true},
			})}}},
		Nemesis: &suite.NemesisPhase{Network: true, Rounds: []suite.NemesisRound{{Fault: "partition bridge 4s", Node: "n1", Level: "DC_QUORUM",
			Coordination: []check.Finding{check.CheckCAS([]check.Command{
				{Client: 0, Key: "c", Name: check.CAS, Acquired: true, Call: 0, Return: 10},
				{Client: 1, Key: "c", Name: check.CAS, Acquired: true, Call: 20, Return: 30},
			})}}}},
		Verdict: suite.Verdict{Broke: []string{"durability: 2 acknowledged writes lost"}},
	}
	var b strings.Builder
	if err := WriteHTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, want := range []string{
		"Something broke: 1 finding", "durability: 2 acknowledged writes lost",
		"missing, but the latest acknowledged write is a value",
		"Counterexample at DC_QUORUM: key k&lt;1&gt;", "lab &lt;x&gt;", "troop run --seed 7 --quick",
		"Coordination at DC_QUORUM", "several winners (1): 2 clients were told they hold the lock lock&lt;1&gt;",
		"client 1  SET lock&lt;1&gt; me NX -&gt; OK",
		"Coordination under partition bridge 4s of n1 at DC_QUORUM", "lost update (1)",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(html, "k<1>") || strings.Contains(html, "<script") {
		t.Error("report quotes unescaped text or has a script")
	}
	// The last second of the run was partial: it is not drawn as a drop.
	i := strings.Index(html, `<polyline points="`)
	if i < 0 || strings.Count(html, "<polyline") != 1 {
		t.Fatal("want one line drawn")
	}
	pts := html[i+len(`<polyline points="`):]
	pts = pts[:strings.Index(pts, `"`)]
	if n := len(strings.Fields(pts)); n != 2 {
		t.Errorf("%d points drawn (%s), want 2: the partial last second is left out", n, pts)
	}
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 0.3: 0.5, 7: 10, 12: 20, 180: 200, 2001: 5000} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}

// With earlier runs of the same settings, the report draws their trend and
// this run's: throughput and p99 per level, a verdict dot per run.
func TestTrend(t *testing.T) {
	res := func(ops, p99 float64) *bench.Result {
		return &bench.Result{Totals: []bench.Row{{Task: "Get", ReqPerSec: ops, Response: bench.Latency{P99: p99}}}}
	}
	rep := &suite.Report{
		Troop: "test", Seed: 3, Cluster: "lab", Started: time.Date(2026, 1, 25, 3, 15, 0, 0, time.UTC), Config: suite.QuickConfig(),
		Baseline: []suite.BenchPhase{{Level: "DC_ONE", Result: res(900, 2)}, {Level: "DC_QUORUM", Result: res(400, 5)}},
		Verdict:  suite.Verdict{OK: true},
		History: []suite.RunSummary{
			{ID: "20260124-100000-1", Started: "2026-01-24 10:00", Seed: 1, OK: false, Broke: 2,
				Levels: []suite.LevelFigures{{Level: "DC_ONE", ReqPerSec: 1000, P99ms: 1}}},
			{ID: "20260124-110000-2", Started: "2026-01-24 11:00", Seed: 2, OK: true, Stopped: true,
				Levels: []suite.LevelFigures{{Level: "DC_ONE", ReqPerSec: 1100, P99ms: 1.5}, {Level: "DC_QUORUM", ReqPerSec: 500, P99ms: 4}}},
		},
	}
	var b strings.Builder
	if err := WriteHTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	i := strings.Index(html, `id="trend-throughput"`)
	if i < 0 || !strings.Contains(html, `id="trend-p99"`) || !strings.Contains(html, "The last 3 runs with these settings") {
		t.Fatal("no trend charts")
	}
	chart := html[i : i+strings.Index(html[i:], "</svg>")]
	if strings.Contains(html, "NaN") {
		t.Error("the report draws at NaN: a missing figure reached the coordinates")
	}
	for _, want := range []string{"01-24 10:00", "01-24 11:00", "this run",
		`fill="` + red + `"><title>20260124-100000-1 (seed 1): 2 finding(s) broke`,
		`fill="` + orange + `"><title>20260124-110000-2 (seed 2): interrupted`,
		`fill="` + green + `"><title>this run (seed 3): everything held`} {
		if !strings.Contains(chart, want) {
			t.Errorf("trend lacks %q", want)
		}
	}
	if strings.Contains(html, "NaN") {
		t.Error("the trend draws NaN coordinates: a run without a level's figure spoiled the scale")
	}
	// DC_QUORUM was not run the first time: its line starts at the second run.
	if n := strings.Count(chart, "<polyline"); n != 2 {
		t.Fatalf("%d lines, want one per level", n)
	}
	lines := strings.Split(chart, `<polyline points="`)
	if got := len(strings.Fields(lines[2][:strings.Index(lines[2], `"`)])); got != 2 {
		t.Errorf("DC_QUORUM line has %d points, want 2", got)
	}
	// Without earlier runs there is no trend.
	rep.History = nil
	b.Reset()
	WriteHTML(&b, rep)
	if strings.Contains(b.String(), "trend-throughput") {
		t.Error("a trend of one run")
	}
}
