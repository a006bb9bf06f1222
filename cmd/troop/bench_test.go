package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troop-lab/troop/internal/testredis"
)

// runCLI runs one troop verb in-process and returns what it printed.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newBenchCmd()
	cmd.SetArgs(args)
	var buf bytes.Buffer
	cmd.SetOut(&buf)
	cmd.SetErr(&buf)
	stdout := os.Stdout
	r, w, _ := os.Pipe()
	os.Stdout = w
	err := cmd.Execute()
	w.Close()
	os.Stdout = stdout
	var printed bytes.Buffer
	printed.ReadFrom(r)
	return printed.String() + buf.String(), err
}

func TestBenchCLI(t *testing.T) {
	r := testredis.Start(t)
	out := filepath.Join(t.TempDir(), "crud.json")
	printed, err := runCLI(t, "crud", "--target", r.Addr, "--requests", "400", "--keys", "200", "--workers", "2", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, printed)
	}
	for _, want := range []string{"Req/Sec", "50%", "99.9%", "Errors", "Fails", "StdDev", "PutCreate", "PutUpdate", "Delete", "Total", "SUMMARY"} {
		if !strings.Contains(printed, want) {
			t.Errorf("table lacks %q:\n%s", want, printed)
		}
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatalf("no result file: %v", err)
	}
	printed, err = runCLI(t, "compare", out, out)
	if err != nil || !strings.Contains(printed, "PutCreate") {
		t.Fatalf("compare: %v\n%s", err, printed)
	}
	for _, bad := range [][]string{
		{"--target", r.Addr, "--ratio", "8020"},
		{"--target", r.Addr, "--pipeline", "10-3"},
		{"nosuchjob", "--target", r.Addr},
		{"--duration", "1s"},
	} {
		if _, err := runCLI(t, bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
