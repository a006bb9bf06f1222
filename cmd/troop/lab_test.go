package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/troop-lab/troop/internal/testlab"
)

// Address mode asked of a user who is not root: one sentence says so, and
// nothing is started or created.
func TestLabUpNetnsNeedsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs troop as another user, which needs root")
	}
	// A directory nobody may use, holding a copy of troop nobody may run.
	base, err := os.MkdirTemp("", "troop-nonroot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	bin := filepath.Join(base, "troop")
	data, err := os.ReadFile(testlab.Troop(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o777); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "lab")
	cmd := exec.Command(bin, "lab", "up", "--netns", "--dir", dir)
	cmd.Dir = base
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	const want = "troop: lab address mode (--netns): network namespaces need root: run troop as root\n"
	if err == nil || string(out) != want {
		t.Errorf("lab up --netns as nobody: %v\n%q\nwant %q", err, out, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "lab.json")); err == nil {
		t.Error("a lab was started")
	}
	if links, _ := exec.Command("ip", "-o", "link", "show").Output(); strings.Contains(string(links), dir) {
		t.Errorf("an interface names %s:\n%s", dir, links)
	}
}
