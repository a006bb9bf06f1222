package main

import (
	"os/exec"
	"strings"
	"testing"
)

// troop-node links none of the lab's, the chaos monkey's or the report's
// dependencies: a package that pulls one in through an import of the node's
// fails here, naming it.
func TestLinksNoHeavyDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/troop-lab/troop/cmd/troop-node").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	heavy := []string{"k8s.io/", "github.com/docker/", "github.com/moby/", "github.com/chromedp/", "sqlite", "/troop/lab", "/troop/chaos"}
	for _, pkg := range strings.Fields(string(out)) {
		for _, h := range heavy {
			if strings.Contains(pkg, h) {
				t.Errorf("troop-node links %s (%s)", pkg, h)
			}
		}
	}
}
