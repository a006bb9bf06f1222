// Package promcheck runs promtool's linter on a Prometheus exposition in
// tests.
package promcheck

import (
	"os/exec"
	"strings"
	"testing"
)

// Metrics fails the test when `promtool check metrics` finds anything to
// say about text. promtool comes with Debian's prometheus package, which
// make test installs.
func Metrics(t testing.TB, text string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found on PATH: install it (Debian: apt-get install prometheus); make test does this when run as root")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
