package ldfi

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/troop-lab/troop/fit"
)

// treeApp is a request with a call tree: api calls a (which reads a/x and
// a/y, both needed) and b (with the fallback c). When picky, api
// survives a's failure when a/x made it fail (it reads a's error and falls
// back to a default) but not when a/y did: its behaviour depends on what
// below a call failed, against the compose strategy's assumption.
type treeApp struct{ picky bool }

func (a treeApp) Probe(_ context.Context, scope fit.Scope) (Probe, error) {
	failed := func(p string) bool { _, ok := scope.Lookup(p); return ok }
	call := func(p string, ok bool, kids ...*fit.Call) *fit.Call {
		c := &fit.Call{Point: p, OK: ok && !failed(p), Calls: kids}
		if failed(p) {
			c.Injected, c.Calls = fit.Error, nil
		}
		c.Used = c.OK
		return c
	}
	root := &fit.Call{Service: "api", Used: true}
	ok := true
	entry := call("client->api", true)
	root.Calls = append(root.Calls, entry)
	if !entry.OK {
		ok = false
	} else {
		x, y := call("a/x", true), call("a/y", true)
		ca := call("api->a", x.OK && y.OK, x, y)
		root.Calls = append(root.Calls, ca)
		if !ca.OK && !(a.picky && !x.OK && y.OK && !failed("api->a")) {
			ok = false
		}
		cb := call("api->b", true)
		root.Calls = append(root.Calls, cb)
		if !cb.OK {
			cc := call("api->c", true)
			root.Calls = append(root.Calls, cc)
			ok = ok && cc.OK
		}
	}
	root.OK = ok
	detail := ""
	if !ok {
		detail = "HTTP 503"
	}
	return Probe{OK: ok, Detail: detail, Lineage: Lineage{Known: true, Reached: root.Reached(), Used: root.UsedPoints(), Tree: root}}, nil
}

func composeSets(r *Report) string {
	var out []string
	for _, f := range r.Failures {
		s := "{" + strings.Join(f.Points, ",") + "}"
		if f.Deduced {
			s += "*"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// TestComposeFindsTrueSets: the compose strategy finds the true failure sets
// of a call tree, the deeper ones by composing what each node showed.
func TestComposeFindsTrueSets(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Probes = 1
	r, err := Search(context.Background(), cfg, treeApp{}, &fakeClock{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Config.Strategy != StrategyCompose {
		t.Fatalf("strategy %q with call trees and one fault type, want compose", r.Config.Strategy)
	}
	got := map[string]bool{}
	for _, f := range r.Failures {
		got[strings.Join(f.Points, ",")] = true
	}
	want := []string{"client->api", "api->a", "a/x", "a/y", "api->b,api->c"}
	if len(got) != len(want) {
		t.Errorf("failure sets %s, want %v", composeSets(r), want)
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("failure sets %s lack {%s}", composeSets(r), w)
		}
	}
	if !r.Coverage.Complete || !strings.Contains(r.Coverage.Statement, "Filibuster's dynamic reduction") {
		t.Errorf("coverage: %s", r.Coverage.Statement)
	}
}

// TestComposeVerify: where a caller's behaviour depends on what below a call
// failed, composition deduces a false set ({a/x}); --verify injects every
// deduced set and refutes it, so no false set is reported.
func TestComposeVerify(t *testing.T) {
	for _, verify := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.Probes, cfg.Verify = 1, verify
		r, err := Search(context.Background(), cfg, treeApp{picky: true}, &fakeClock{})
		if err != nil {
			t.Fatal(err)
		}
		sets := composeSets(r)
		switch {
		case !verify && !strings.Contains(sets, "{a/x}*"):
			t.Errorf("without verify: %s: want the false {a/x}, marked deduced", sets)
		case verify && (strings.Contains(sets, "{a/x}") || len(r.Refuted) != 1 || fmt.Sprint(r.Refuted[0].Points) != "[a/x]"):
			t.Errorf("verify: sets %s, refuted %+v: want {a/x} refuted", sets, r.Refuted)
		case verify && (!strings.Contains(sets, "{a/y}") || !strings.Contains(r.Coverage.Statement, "did NOT fail")):
			t.Errorf("verify: sets %s; %s", sets, r.Coverage.Statement)
		}
	}
}
