// Package testlab starts lab clusters of real redis-servers and real troop
// nodes for the tests of other packages: the troop binary is built once per
// test process, and every lab is stopped by PID when its test ends.
package testlab

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/troop-lab/troop/lab"
)

var (
	troopBin string
	buildErr = fmt.Errorf("testlab: the package's TestMain must call testlab.Main")
)

// Main builds the troop binary, runs the tests and removes the binary. Call
// it from TestMain.
func Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "troop-testlab")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	troopBin, buildErr = lab.BuildTroop(ctx, dir)
	cancel()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Troop is the troop binary built by Main.
func Troop(t testing.TB) string {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return troopBin
}

// Dynomite is Dynomite's binary (lab.FindDynomite); the test skips, saying
// what is missing and where to put it, when there is none.
func Dynomite(t testing.TB) string {
	t.Helper()
	bin, err := lab.FindDynomite("")
	if err != nil {
		t.Skip(err)
	}
	return bin
}

// Start runs a lab of spec (Dir and Troop are filled in when empty), stops it
// when the test ends, and returns once every node is connected to its peers.
func Start(t testing.TB, spec lab.Spec) *lab.Lab {
	t.Helper()
	if spec.Troop == "" {
		spec.Troop = Troop(t)
	}
	if spec.Dir == "" {
		spec.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := lab.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Stop(); err != nil {
			t.Errorf("stop lab: %v", err)
		}
	})
	if err := lab.WaitMeshed(ctx, l.Nodes(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return l
}
