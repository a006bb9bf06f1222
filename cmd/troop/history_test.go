package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/internal/filekind"
	"github.com/troop-lab/troop/suite"
)

// writeRun writes a report.json of a run with the given seed, settings and
// baseline throughput under OUT/runs/<id>.
func writeRun(t *testing.T, out, id string, cfg suite.Config, ops float64, ok bool) string {
	t.Helper()
	rep := &suite.Report{Kind: filekind.RunReport, Seed: cfg.Seed, Config: cfg, Cluster: "lab",
		Started: time.Date(2026, 1, 24, 10, 0, 0, 0, time.UTC),
		Baseline: []suite.BenchPhase{{Level: "DC_ONE", Result: &bench.Result{Totals: []bench.Row{
			{Task: "Get", ReqPerSec: ops, Response: bench.Latency{P99: 1}}, {Task: "Set", ReqPerSec: ops / 4}}}}},
		Verdict: suite.Verdict{OK: ok},
	}
	if !ok {
		rep.Verdict.Broke = []string{"durability: 2 acknowledged writes lost"}
	}
	dir := filepath.Join(out, "runs", id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(rep, filepath.Join(dir, "report.html"), filepath.Join(dir, "report.json")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The trend takes the earlier runs with the same settings (whatever their
// seed), oldest first, and leaves out the others and the later ones.
func TestHistory(t *testing.T) {
	out := t.TempDir()
	cfg := suite.QuickConfig()
	other := cfg
	other.Keys = 123
	seed2 := cfg
	seed2.Seed = 2
	writeRun(t, out, "20260101-000000-1", cfg, 100, true)
	writeRun(t, out, "20260102-000000-1", other, 200, true)
	writeRun(t, out, "20260103-000000-2", seed2, 300, false)
	os.MkdirAll(filepath.Join(out, "runs", "20260104-000000-1"), 0o755) // interrupted before its report: skipped
	writeRun(t, out, "20260109-000000-1", cfg, 900, true)               // later than the run at hand
	got := history(out, filepath.Join(out, "runs", "20260105-000000-1"), cfg, 9)
	if len(got) != 2 || got[0].ID != "20260101-000000-1" || got[1].ID != "20260103-000000-2" || got[1].OK || got[1].Levels[0].ReqPerSec != 375 {
		t.Fatalf("history = %+v", got)
	}
	if got := history(out, filepath.Join(out, "runs", "20260105-000000-1"), cfg, 1); len(got) != 1 || got[0].ID != "20260103-000000-2" {
		t.Fatalf("history of 1 = %+v", got)
	}
}

// Each run gets its own directory; report.html and report.json point at
// the latest; a report an earlier troop wrote straight into OUT is moved
// into a run directory of its own, not lost.
func TestRunDirsAndLatest(t *testing.T) {
	out := t.TempDir()
	legacy := writeRun(t, out, "x", suite.QuickConfig(), 1, true)
	for _, name := range []string{"report.html", "report.json"} {
		os.Rename(filepath.Join(legacy, name), filepath.Join(out, name))
	}
	os.Remove(legacy)
	if err := adoptLegacyReport(out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "runs", "20260124-100000-1", "report.html")); err != nil {
		t.Fatalf("the earlier report was not moved: %v", err)
	}
	at := time.Date(2026, 2, 1, 12, 0, 0, 0, time.Local)
	a, err := newRunDir(out, at, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newRunDir(out, at, 7)
	if filepath.Base(a) != "20260201-120000-7" || filepath.Base(b) != "20260201-120000-7.2" {
		t.Fatalf("run dirs %s, %s", a, b)
	}
	for _, d := range []string{a, b} {
		os.WriteFile(filepath.Join(d, "report.html"), []byte(d), 0o644)
		os.WriteFile(filepath.Join(d, "report.json"), []byte(d), 0o644)
		if err := linkLatest(out, d); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(out, "report.html"))
		if err != nil || string(got) != d {
			t.Fatalf("report.html reads %q, want the latest run's (%v)", got, err)
		}
	}
	if target, _ := os.Readlink(filepath.Join(out, "report.json")); target != filepath.Join("runs", "20260201-120000-7.2", "report.json") {
		t.Errorf("report.json -> %s, want a relative link", target)
	}
}

// troop run compare lists the settings that differ, matches the baseline's
// tasks, prints ratios and the findings of one run only; it refuses a bench
// result and an empty file, saying what they are.
func TestRunCompare(t *testing.T) {
	out := t.TempDir()
	cfg := suite.QuickConfig()
	a := writeRun(t, out, "a", cfg, 1000, true)
	cfg.Seed, cfg.ValueSize = 2, 512
	b := writeRun(t, out, "b", cfg, 500, false)
	run := func(args ...string) (string, error) {
		cmd := newRunCompareCmd()
		cmd.SetArgs(args)
		var buf bytes.Buffer
		cmd.SetOut(&buf)
		cmd.SetErr(&buf)
		err := cmd.Execute()
		return buf.String(), err
	}
	text, err := run(a, filepath.Join(b, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"settings that differ (A → B):\n  seed 1 → 2\n  value_size 1024 → 512\n",
		"baseline at DC_ONE: 1250 → 625 ops/s over every task, B/A 0.50", "Get", "Set",
		"broke only in B: durability: 2 acknowledged writes lost"} {
		if !strings.Contains(text, want) {
			t.Errorf("compare lacks %q:\n%s", want, text)
		}
	}
	res := filepath.Join(out, "bench.json")
	os.WriteFile(res, mustJSON(t, &bench.Result{Kind: filekind.BenchResult, Config: bench.DefaultConfig()}), 0o644)
	empty := filepath.Join(out, "empty.json")
	os.WriteFile(empty, []byte("{}"), 0o644)
	for file, want := range map[string]string{res: "troop bench compare", empty: "not a troop run report"} {
		if _, err := run(a, file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("compare with %s: %v, want %q", filepath.Base(file), err, want)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
