package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/examples/appboot"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/ldfi"
)

// faultKeys is setKeys with each point failed by action, as the report
// prints failure sets.
func faultKeys(sets [][]string, action string) []string {
	var named [][]string
	for _, s := range sets {
		var n []string
		for _, p := range s {
			n = append(n, p+"="+action)
		}
		named = append(named, n)
	}
	return setKeys(named)
}

func setKeys(sets [][]string) []string {
	var out []string
	for _, s := range sets {
		s = slices.Sorted(slices.Values(s))
		out = append(out, "{"+strings.Join(s, ", ")+"}")
	}
	slices.Sort(out)
	return out
}

// TestLDFIDemo: troop ldfi demo starts the App Boot services (the troop
// binary's hidden verb), finds every planted failure set, the combination
// of two included, and nothing else, and every scenario it wrote replays.
func TestLDFIDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := ldfi.DefaultConfig()
	cfg.MaxFaults = 2
	var out strings.Builder
	if err := runLDFIDemo(ctx, &out, testlab.Troop(t), cfg, dir, false); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	for _, set := range faultKeys(appboot.Expected(), "error") {
		if !strings.Contains(text, set) {
			t.Errorf("the demo's report lacks the failure set %s", set)
		}
	}
	if n := strings.Count(text, " reproduced "); n != len(appboot.Expected()) {
		t.Errorf("%d scenarios reproduced, want %d", n, len(appboot.Expected()))
	}
	if !strings.Contains(text, "every combination of up to 2 faults that could break this class was explored") {
		t.Error("no coverage statement")
	}
	var r ldfi.Report
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		t.Fatal(err)
	}
	var found [][]string
	for _, f := range r.Failures {
		found = append(found, f.Points)
	}
	if got, want := setKeys(found), setKeys(appboot.Expected()); !slices.Equal(got, want) {
		t.Errorf("report.json failure sets\n got %v\nwant %v", got, want)
	}
	if t.Failed() {
		t.Log(text)
	}
}

// TestLDFIRunReplay runs troop ldfi run and troop ldfi replay, as processes,
// against App Boot services started for the test.
func TestLDFIRunReplay(t *testing.T) {
	troop := testlab.Troop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := appboot.Start(ctx, []string{troop, "ldfi", "appboot-service"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		b, err := exec.CommandContext(ctx, troop, args...).CombinedOutput()
		return string(b), err
	}
	// Status only: the combination, a 200 with the member's error in the
	// body, stays hidden; the rest is found.
	text, err := run("ldfi", "run", "--url", c.GatewayURL(), "--max-faults", "2", "--seed", "3", "--out", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if strings.Contains(text, "{api->bookmarks=error, api->ratings=error}") || !strings.Contains(text, "{account->geo=error}") {
		t.Errorf("status oracle: report\n%s", text)
	}
	text, err = run("ldfi", "run", "--url", c.GatewayURL(), "--body-reject", appboot.MemberError, "--max-faults", "2", "--out", dir, "--compare-random")
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if !strings.Contains(text, "random fault injection, same budget (") {
		t.Errorf("--compare-random: no comparison in\n%s", text)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "scenario-*.json"))
	if len(files) != len(appboot.Expected()) || !strings.Contains(text, "{api->bookmarks=error, api->ratings=error}") {
		t.Fatalf("%d scenarios, want %d; report\n%s", len(files), len(appboot.Expected()), text)
	}
	text, err = run(append([]string{"ldfi", "replay"}, files...)...)
	if err != nil || strings.Count(text, "REPRODUCED") != len(files) {
		t.Errorf("replay: %v\n%s", err, text)
	}

	// A scenario that does not fail the request is reported, exit 1.
	sc := ldfi.Scenario{Scope: "api->ratings=error", Probes: 10, FailRatio: 0.75}
	b, _ := os.ReadFile(files[0])
	var first ldfi.Scenario
	json.Unmarshal(b, &first)
	sc.Target = first.Target
	bad := filepath.Join(dir, "optional.json")
	f, _ := os.Create(bad)
	sc.WriteJSON(f)
	f.Close()
	text, err = run("ldfi", "replay", bad)
	if err == nil || !strings.Contains(text, "NOT reproduced") {
		t.Errorf("replay of a harmless scope: %v\n%s", err, text)
	}
	text, err = run("ldfi", "run", "--url", "ftp://x")
	if err == nil || !strings.Contains(text, "want http://HOST:PORT/PATH") {
		t.Errorf("bad URL: %v\n%s", err, text)
	}
}
