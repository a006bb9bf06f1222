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
			Counterexample: &check.Counterexample{Key: "k<1>", Ops: []check.Op{{Key: "k<1>", Value: 5}}}}}},
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
