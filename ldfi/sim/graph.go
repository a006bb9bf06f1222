// Package sim is ldfi's benchmark: a seeded generator of synthetic service
// graphs (services, fan-out, depth, optional calls, fallbacks, planted
// failure sets), simulated in-process as an ldfi target, with the graph's
// true minimal failure sets computed from its structure, and a random
// fault-injection baseline to compare against.
package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/ldfi"
)

// Params shape a generated graph.
type Params struct {
	Points   int     `json:"points"`   // injection points to generate (about)
	FanOut   int     `json:"fan_out"`  // calls per service at most
	Depth    int     `json:"depth"`    // levels of services below the root at most
	Optional float64 `json:"optional"` // share of calls the caller does without
	Fallback float64 `json:"fallback"` // share of calls and internal points with a fallback
	Internal float64 `json:"internal"` // internal points per service, on average
	Planted  int     `json:"planted"`  // planted bugs: combinations of 2 or 3 optional calls that break their caller
	Seed     uint64  `json:"seed"`
}

// AppBootParams shape a graph like Netflix's App Boot request as its LDFI
// post describes it: about 100 services and several hundred points, where
// most calls are wrapped with a fallback or are optional (the services
// degrade rather than fail), a few planted combinations of 2 or 3 optional
// calls break their caller, and each service has a couple of points inside
// it (a cache, a query).
func AppBootParams(seed uint64) Params {
	return Params{Points: 300, FanOut: 3, Depth: 8, Optional: 0.35, Fallback: 0.35, Internal: 4, Planted: 6, Seed: seed}
}

// DefaultParams are the bench's graphs with n points.
func DefaultParams(n int, seed uint64) Params {
	return Params{Points: n, FanOut: 4, Depth: 10, Optional: 0.04, Fallback: 0.04, Internal: 0.5, Planted: 3, Seed: seed}
}

type service struct {
	name  string
	steps []simStep
	bugs  [][]int // steps (indices) of optional calls that break the service when all fail
}

type simStep struct {
	point    string   // internal point, or the call's edge point
	callee   *service // nil for an internal point
	fallback string   // the fallback's point (internal, or the edge to a leaf)
	optional bool
}

// A Graph is a generated service graph; the root serves the request.
type Graph struct {
	Params   Params
	root     *service
	points   []string
	services int
}

// Services is the number of services, fallback services included.
func (g *Graph) Services() int { return g.services }

// Points lists every injection point, fallbacks included.
func (g *Graph) Points() []string { return g.points }

// Generate builds a graph from p.
func Generate(p Params) *Graph {
	rng := rand.New(rand.NewPCG(p.Seed, 0x51a))
	g := &Graph{Params: p}
	nsvc := 0
	newService := func() *service {
		nsvc++
		return &service{name: fmt.Sprintf("s%d", nsvc)}
	}
	g.root = newService()
	defer func() { g.services = nsvc }()
	type item struct {
		s     *service
		depth int
	}
	queue := []item{{g.root, 0}}
	for len(queue) > 0 && len(g.points) < p.Points {
		it := queue[0]
		queue = queue[1:]
		s := it.s
		for i := 0; float64(i) < p.Internal*2*rng.Float64() && len(g.points) < p.Points; i++ {
			st := simStep{point: fmt.Sprintf("%s/p%d", s.name, i)}
			g.points = append(g.points, st.point)
			if rng.Float64() < p.Fallback {
				st.fallback = fmt.Sprintf("%s/p%d-fallback", s.name, i)
				g.points = append(g.points, st.fallback)
			}
			s.steps = append(s.steps, st)
		}
		if it.depth >= p.Depth {
			continue
		}
		calls := 1 + rng.IntN(p.FanOut)
		if s == g.root {
			calls = p.FanOut
		}
		for i := 0; i < calls && len(g.points) < p.Points; i++ {
			c := newService()
			st := simStep{point: s.name + "->" + c.name, callee: c}
			g.points = append(g.points, st.point)
			switch r := rng.Float64(); {
			case r < p.Optional:
				st.optional = true
			case r < p.Optional+p.Fallback:
				fb := newService()
				st.fallback = s.name + "->" + fb.name
				g.points = append(g.points, st.fallback)
			}
			s.steps = append(s.steps, st)
			queue = append(queue, item{c, it.depth + 1})
		}
	}
	// Plant bugs: combinations of optional calls of one service.
	var withOptional []*service
	g.walk(g.root, func(s *service) {
		if len(s.optionalSteps()) >= 2 {
			withOptional = append(withOptional, s)
		}
	})
	for i := 0; i < p.Planted && len(withOptional) > 0; i++ {
		s := withOptional[rng.IntN(len(withOptional))]
		opt := s.optionalSteps()
		size := min(len(opt), 2+i%2)
		rng.Shuffle(len(opt), func(a, b int) { opt[a], opt[b] = opt[b], opt[a] })
		bug := slices.Sorted(slices.Values(opt[:size]))
		s.bugs = append(s.bugs, bug)
	}
	return g
}

func (s *service) optionalSteps() []int {
	var out []int
	for i, st := range s.steps {
		if st.optional {
			out = append(out, i)
		}
	}
	return out
}

func (g *Graph) walk(s *service, visit func(*service)) {
	visit(s)
	for _, st := range s.steps {
		if st.callee != nil {
			g.walk(st.callee, visit)
		}
	}
}

// run serves one request of s with the points in failed failing, and
// returns whether it succeeded, adding the points it reached and used, and
// a node per step (and fallback) it passed to tree (unless nil).
func (s *service) run(failed map[string]bool, reached, used *[]string, tree *fit.Call) bool {
	var down []int // optional steps that failed
	for i, st := range s.steps {
		ok := st.try(failed, reached, used, tree)
		if !ok && st.fallback != "" {
			*reached = append(*reached, st.fallback)
			ok = !failed[st.fallback]
			if tree != nil {
				tree.Calls = append(tree.Calls, &fit.Call{Point: st.fallback, OK: ok, Used: ok, Injected: injected(failed, st.fallback)})
			}
			if ok {
				*used = append(*used, st.fallback)
			}
		}
		if !ok {
			if !st.optional {
				return false
			}
			down = append(down, i)
		}
	}
	for _, bug := range s.bugs {
		if len(bug) > 0 && allIn(bug, down) {
			return false
		}
	}
	return true
}

func injected(failed map[string]bool, point string) fit.Kind {
	if failed[point] {
		return fit.Error
	}
	return ""
}

// try runs the step itself (not its fallback).
func (st simStep) try(failed map[string]bool, reached, used *[]string, tree *fit.Call) bool {
	*reached = append(*reached, st.point)
	var node *fit.Call
	if tree != nil {
		node = &fit.Call{Point: st.point, Injected: injected(failed, st.point)}
		tree.Calls = append(tree.Calls, node)
	}
	if failed[st.point] {
		return false
	}
	var below []string
	if st.callee != nil && !st.callee.run(failed, reached, &below, node) {
		return false
	}
	if node != nil {
		node.OK, node.Used = true, true
	}
	*used = append(*used, st.point)
	*used = append(*used, below...)
	return true
}

func allIn(small, big []int) bool {
	for _, x := range small {
		if !slices.Contains(big, x) {
			return false
		}
	}
	return true
}

// fails reports whether the request fails with failed points failing (random
// injection's experiment: no lineage needed).
func (g *Graph) fails(failed map[string]bool) bool {
	var reached, used []string
	return !g.root.run(failed, &reached, &used, nil)
}

// Request runs one request with failed points failing; its lineage has
// the call tree.
func (g *Graph) Request(failed map[string]bool) (ok bool, l ldfi.Lineage) {
	l.Known = true
	l.Tree = &fit.Call{Service: g.root.name, Used: true}
	ok = g.root.run(failed, &l.Reached, &l.Used, l.Tree)
	l.Tree.OK = ok
	return ok, l
}

// Probe implements ldfi.Target: the graph is deterministic, so one probe per
// experiment says all an experiment can.
func (g *Graph) Probe(_ context.Context, scope fit.Scope) (ldfi.Probe, error) {
	failed := map[string]bool{}
	for _, f := range scope.Faults {
		failed[f.Point] = true
	}
	ok, l := g.Request(failed)
	return ldfi.Probe{OK: ok, Lineage: l}, nil
}

// MinimalFailureSets computes, from the structure, every minimal set of up to
// k points whose failure fails the request: a service fails when one of its
// required steps fails or one of its bugs' calls all fail; a step with a
// fallback fails when both fail; a call fails when its edge or its callee
// fails.
func (g *Graph) MinimalFailureSets(k int) [][]string {
	return minimize(g.root.cuts(k), k)
}

func (s *service) cuts(k int) [][]string {
	var out [][]string
	stepCuts := make([][][]string, len(s.steps))
	for i, st := range s.steps {
		c := [][]string{{st.point}}
		if st.callee != nil {
			c = append(c, st.callee.cuts(k)...)
		}
		if st.fallback != "" {
			c = product(c, [][]string{{st.fallback}}, k)
		}
		stepCuts[i] = c
		if !st.optional {
			out = append(out, c...)
		}
	}
	for _, bug := range s.bugs {
		c := [][]string{{}}
		for _, i := range bug {
			c = product(c, stepCuts[i], k)
		}
		out = append(out, c...)
	}
	return minimize(out, k)
}

// product is every union of one set of a and one of b, of at most k points.
func product(a, b [][]string, k int) [][]string {
	var out [][]string
	for _, x := range a {
		for _, y := range b {
			u := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(x), y...))))
			if len(u) <= k {
				out = append(out, u)
			}
		}
	}
	return minimize(out, k)
}

// minimize keeps the sets of at most k points that contain no other set.
func minimize(sets [][]string, k int) [][]string {
	for i := range sets {
		sets[i] = slices.Compact(slices.Sorted(slices.Values(sets[i])))
	}
	slices.SortFunc(sets, func(a, b []string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(strings.Join(a, ","), strings.Join(b, ","))
	})
	var out [][]string
	for _, s := range sets {
		if len(s) > k || len(s) == 0 {
			continue
		}
		dominated := false
		for _, o := range out {
			if subsetOf(o, s) {
				dominated = true
				break
			}
		}
		if !dominated {
			out = append(out, s)
		}
	}
	return out
}

func subsetOf(small, big []string) bool {
	for _, x := range small {
		if _, ok := slices.BinarySearch(big, x); !ok {
			return false
		}
	}
	return true
}
