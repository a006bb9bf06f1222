package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// dynSeeds is the dyn_seeds list of a lab node's config.
var dynSeeds = regexp.MustCompile(`(?m)^  dyn_seeds:\n(  - .*\n)*`)

// Nodes whose configs say dyn_seed_provider: florida_provider find their
// peers in the seed list an HTTP server answers where Dynomite's provider
// asks (DYNOMITE_FLORIDA_*), the node itself among them: the lab's three
// connect and serve a quorum write. A node with dns_provider whose name
// does not resolve stops at start, saying where it asked.
func TestNodeSeedProviders(t *testing.T) {
	troop := testlab.Troop(t)
	var mu sync.Mutex
	var seeds []string
	asked := 0
	florida := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/REST/v1/admin/get_seeds" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		asked++
		fmt.Fprint(w, strings.Join(seeds, "|"))
	}))
	defer florida.Close()
	host, port := hostPort(strings.TrimPrefix(florida.URL, "http://"))
	l := testlab.Start(t, lab.Spec{NodeCommand: func(n lab.Node) []string {
		mu.Lock()
		seeds = append(seeds, fmt.Sprintf("%s:%s:%s:%d", n.DynListen, n.Rack, n.DC, n.Token))
		mu.Unlock()
		return []string{"env", "DYNOMITE_FLORIDA_IP=" + host, "DYNOMITE_FLORIDA_PORT=" + port,
			troop, "node", "--config", withoutSeeds(t, n, "florida_provider")}
	}})
	if got := quorumDo(t, l.Nodes()[0].Listen, "SET", "k", "v"); string(got.Str) != "OK" {
		t.Errorf("a quorum write through nodes that found each other through florida_provider: %+v", got)
	}
	if mu.Lock(); asked != 3 || strings.Contains(readTestFile(t, l.Nodes()[1].Dir, "florida_provider.yml"), "dyn_seeds") {
		t.Errorf("florida was asked %d times, want once by each node, whose configs have no dyn_seeds", asked)
	}
	mu.Unlock()

	n := l.Nodes()[0]
	cmd := exec.Command(troop, "node", "--config", withoutSeeds(t, n, "dns_provider"))
	cmd.Env = append(os.Environ(), "DYNOMITE_DNS_NAME=_dynomite.troop-test.invalid")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "dyn_seed_provider: dns_provider: the TXT record of _dynomite.troop-test.invalid (DYNOMITE_DNS_NAME): ") {
		t.Errorf("a dns_provider name that does not resolve: %v\n%s", err, out)
	}
}

func readTestFile(t *testing.T, dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// withoutSeeds writes n's config with provider in place of its dyn_seeds,
// and returns its path.
func withoutSeeds(t *testing.T, n lab.Node, provider string) string {
	conf, err := os.ReadFile(n.Config)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(n.Dir, provider+".yml")
	conf = dynSeeds.ReplaceAll(conf, []byte("  dyn_seed_provider: "+provider+"\n"))
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
