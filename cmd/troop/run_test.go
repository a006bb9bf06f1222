package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/suite"
)

// troop run --quick produces the HTML report and the JSON with every
// section, and the report opens in a real headless Chromium with no console
// error and every chart drawn.
func TestRunQuickReport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := t.TempDir()
	cfg := suite.QuickConfig()
	cfg.Troop, cfg.Version = testlab.Troop(t), "test"
	// An earlier run with the same settings but its seed: the report draws
	// the trend of the two.
	earlier := cfg
	earlier.Seed = 9
	writeRun(t, out, "20000101-000000-9", earlier, 2000, false)
	var stdout strings.Builder
	rep, err := runSuite(ctx, cfg, out, &stdout)
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	t.Log("\n" + stdout.String())
	if len(rep.History) != 1 || rep.History[0].ID != "20000101-000000-9" {
		t.Errorf("history: %+v", rep.History)
	}
	if target, err := os.Readlink(filepath.Join(out, "report.html")); err != nil || !strings.HasPrefix(target, "runs/") {
		t.Errorf("report.html is not a link to the run's: %q %v", target, err)
	}

	var js map[string]json.RawMessage
	data, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &js); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"seed", "config", "verdict", "baseline", "failure", "durability", "consistency", "nemesis", "ldfi"} {
		if len(js[k]) == 0 || string(js[k]) == "null" {
			t.Errorf("report.json lacks %q", k)
		}
	}
	if len(rep.Baseline) != 2 || rep.Failure == nil || rep.Durability == nil || len(rep.Consistency) != 2 {
		t.Fatalf("report lacks phases: %d baselines, failure %v, durability %v, %d consistency", len(rep.Baseline), rep.Failure != nil, rep.Durability != nil, len(rep.Consistency))
	}
	if rep.Failure.RecoverySeconds <= 0 || len(rep.Failure.Events) != 2 {
		t.Errorf("failure phase: recovery %.1f s, events %v", rep.Failure.RecoverySeconds, rep.Failure.Events)
	}
	if rep.Durability.Keys == 0 {
		t.Error("the durability audit read back no key")
	}
	// The nemesis, on a lab in address mode (tests run as root): every
	// kind put in place, undone and healed, the replicas agreeing after it,
	// and nothing broken at DC_QUORUM.
	if n := rep.Nemesis; n == nil || !n.Network || len(n.Rounds) != 4 {
		t.Fatalf("nemesis phase: %+v", n)
	}
	for _, r := range rep.Nemesis.Rounds {
		if r.Error != "" || r.Healed < r.End || r.Differ > 0 || r.Registers.Ops == 0 || r.Audit.Keys == 0 {
			t.Errorf("nemesis, %s at %s: error %q, healed at %.1f s for an end at %.1f s, %d keys differ, %d register ops, %d keys audited",
				r.Fault, r.Level, r.Error, r.Healed, r.End, r.Differ, r.Registers.Ops, r.Audit.Keys)
		}
	}
	for _, b := range rep.Verdict.Broke {
		if strings.HasPrefix(b, "nemesis") {
			t.Errorf("the nemesis broke the store: %s", b)
		}
	}
	if rep.LDFI == nil || len(rep.LDFI.Classes) != 2 {
		t.Fatalf("LDFI phase: %+v", rep.LDFI)
	}
	for _, c := range rep.LDFI.Classes {
		if len(c.FailureSets) == 0 || len(c.Replay) != len(c.FailureSets) {
			t.Errorf("LDFI %s: failure sets %v, replay %v", c.Name, c.FailureSets, c.Replay)
		}
		for _, set := range c.FailureSets {
			if len(set) < 2 {
				t.Errorf("LDFI %s: one fault breaks it: %v", c.Name, set)
			}
		}
		for _, r := range c.Replay {
			if _, err := os.Stat(strings.TrimPrefix(r, "troop ldfi replay ")); err != nil {
				t.Errorf("LDFI %s: no scenario file: %v", c.Name, err)
			}
		}
	}

	html, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{`id="verdict"`, `id="trend"`, `id="baseline"`, `id="failure"`, `id="chaos"`, `id="durability"`, `id="consistency"`, `id="nemesis"`, `id="ldfi"`, `id="config"`} {
		if !strings.Contains(string(html), id) {
			t.Errorf("report.html lacks the section %s", id)
		}
	}
	for _, external := range []string{"<script", "src=\"http", "href=\"http", "@import", "url("} {
		if strings.Contains(string(html), external) {
			t.Errorf("report.html is not self-contained: it has %q", external)
		}
	}
	openInBrowser(t, filepath.Join(out, "report.html"), 8)
}

// openInBrowser loads the report in headless Chromium, fails on any console
// error or exception, checks the number of charts drawn, and saves a
// screenshot to $TROOP_ARTIFACTS (default .troop/artifacts in the module).
func openInBrowser(t *testing.T, path string, charts int) {
	t.Helper()
	browser := need(t, "chromium")
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1000, 1400))...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()

	// The first Run starts the browser; it lives as long as ctx.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	var problems []string
	collected := make(chan struct{})
	consoleCtx, stopConsole := context.WithCancel(ctx)
	messages := chromedp.Console(consoleCtx)
	go func() {
		defer close(collected)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				problems = append(problems, m.String())
			}
		}
	}()
	step, stepCancel := context.WithTimeout(ctx, time.Minute)
	defer stepCancel()
	if err := chromedp.Do(step, chromedp.Navigate("file://"+path), chromedp.WaitVisible("#config")); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	drawn, err := chromedp.Run(step, chromedp.Evaluate[int](`[...document.querySelectorAll("svg.chart")].filter(s => s.getBBox().width > 0 && s.querySelector("polyline, circle")).length`))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	shot, err := chromedp.Run(step, chromedp.FullScreenshot(80))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	stopConsole()
	<-collected
	if len(problems) > 0 {
		t.Errorf("the report caused browser errors: %v", problems)
	}
	if drawn != charts {
		t.Errorf("%d charts drawn, want %d", drawn, charts)
	}
	dir := os.Getenv("TROOP_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", ".troop", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(dir, "report.png")
	if err := os.WriteFile(png, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the report: %s", png)
}
