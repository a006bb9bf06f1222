package ldfi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troop-lab/troop/fit"
)

// Strategies of the search.
const (
	// StrategyLineage is the search of Netflix's LDFI post: hypotheses are minimal
	// hitting sets of the whole request's lineage clauses, one per
	// experiment, and every failure set is injected as a whole.
	StrategyLineage = "lineage"
	// StrategyCompose learns, for each node of the call tree, which of its points
	// fail it when they fail (a small lineage search per node, several
	// nodes per experiment), and composes the request's failure sets from
	// those. It assumes, as Filibuster's dynamic reduction does, that a
	// call's effect on its caller depends only on whether the call failed,
	// not on what below it made it fail. Needs call trees (fit's lineage).
	StrategyCompose = "compose"
)

// A cnode is one node of the request's call tree (identified by its path of
// points from the root) and what the search knows of it: the sets of its
// points (its children) whose failure it survives, as clauses of the
// points it then used, and the sets whose failure fails it.
type cnode struct {
	path     string
	point    string // "" for the root
	children []*cnode
	byPoint  map[string]*cnode
	reach    []string // points to fail, outside this node, for a request to get here

	index    map[string]int // child point to local index
	names    []string
	clauses  [][]int // used children of executions it survived, minimal ones
	fails    []fact  // sets of children whose failure failed it, minimal ones
	skipped  [][]int // hypotheses given up (never reached, or inconclusive)
	hyps     [][]int // hypotheses of the current size, untested
	hypsOK   bool    // hyps is up to date
	hypBound int     // the budget hyps was enumerated for
	minFails []fact  // minimalFails, while hypsOK
	minBound int     // the budget minFails was computed for (-1: none)
	group    int     // hypotheses tested together next (adaptive)
}

// A fact is a set of a node's children whose failure failed it, and the
// experiment that showed it.
type fact struct {
	set        []int
	experiment int
}

func newCnode(path, point string) *cnode {
	return &cnode{path: path, point: point, byPoint: map[string]*cnode{}, index: map[string]int{}}
}

// child returns the child of n at point, adding it (with reach) if new.
func (n *cnode) child(point string, reach []string) *cnode {
	if c, ok := n.byPoint[point]; ok {
		if len(reach) < len(c.reach) {
			c.reach = reach
		}
		return c
	}
	c := newCnode(n.path+" > "+point, point)
	c.reach = reach
	n.byPoint[point] = c
	n.children = append(n.children, c)
	n.index[point] = len(n.names)
	n.names = append(n.names, point)
	n.hypsOK = false
	return c
}

func (n *cnode) local(points []string) []int {
	out := make([]int, 0, len(points))
	for _, p := range points {
		out = append(out, n.index[p])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (n *cnode) pointsOf(set []int) []string {
	out := make([]string, len(set))
	for i, x := range set {
		out[i] = n.names[x]
	}
	slices.Sort(out)
	return out
}

// survived adds the clause of an execution n survived using used; false
// when it was known.
func (n *cnode) survived(used []int) bool {
	for _, c := range n.clauses {
		if subsetInts(c, used) {
			return false
		}
	}
	n.clauses = slices.DeleteFunc(n.clauses, func(c []int) bool { return subsetInts(used, c) })
	n.clauses = append(n.clauses, used)
	n.hypsOK = false
	return true
}

// failed adds a set of children whose failure failed n; false when a subset
// of it was known.
func (n *cnode) failed(set []int, experiment int) bool {
	for _, f := range n.fails {
		if subsetInts(f.set, set) {
			return false
		}
	}
	n.fails = slices.DeleteFunc(n.fails, func(f fact) bool { return subsetInts(set, f.set) })
	n.fails = append(n.fails, fact{set, experiment})
	n.hypsOK = false
	return true
}

// hypotheses returns the untested minimal hitting sets of n's clauses of the
// smallest size up to budget that contain no known failing set.
func (n *cnode) hypotheses(budget int) [][]int {
	if n.hypsOK && n.hypBound == budget {
		return n.hyps
	}
	n.hyps, n.hypsOK, n.hypBound, n.minFails = nil, true, budget, nil
	if len(n.clauses) == 0 {
		return nil
	}
	exclude := slices.Clone(n.skipped)
	for _, f := range n.fails {
		exclude = append(exclude, f.set)
	}
	for set := range (MMCS{}).Enumerate(n.clauses, exclude, budget) {
		if len(n.hyps) > 0 && len(set) > len(n.hyps[0]) {
			break
		}
		n.hyps = append(n.hyps, set)
	}
	return n.hyps
}

// minimalFails returns the failing sets of n that are minimal hitting sets of
// its clauses (every proper subset is known to be survived), of up to
// budget points.
func (n *cnode) minimalFails(budget int) []fact {
	if n.hypsOK && n.minBound == budget && n.minFails != nil {
		return n.minFails
	}
	if !n.hypsOK {
		n.hypotheses(budget) // brings hypsOK back, and with it this cache
	}
	var out []fact
	for _, f := range n.fails {
		if len(f.set) <= budget && minimalHitting(n.clauses, f.set) {
			out = append(out, f)
		}
	}
	n.minFails, n.minBound = out, budget
	if out == nil {
		n.minFails = []fact{}
	}
	return out
}

// minimalHitting reports whether set hits every clause and no set with one
// point less does.
func minimalHitting(clauses [][]int, set []int) bool {
	if !hitsAll(clauses, set) {
		return false
	}
	for i := range set {
		if hitsAll(clauses, slices.Delete(slices.Clone(set), i, i+1)) {
			return false
		}
	}
	return true
}

// subsetInts reports whether sorted a is inside sorted b.
func subsetInts(a, b []int) bool {
	i := 0
	for _, x := range b {
		if i < len(a) && a[i] == x {
			i++
		}
	}
	return i == len(a)
}

// composer is the state of a Compose search.
type composer struct {
	cfg       Config
	at        *atoms
	root      *cnode
	nodes     map[string]*cnode
	tested    int      // node hypotheses tested
	anomalies []string // nodes that failed with none of their points failing
	skipped   []string // hypotheses given up, and why
}

// A test is one node's group of hypotheses in an experiment.
type test struct {
	node  *cnode
	hyps  [][]int
	fail  []string // the points the experiment fails for it: the group's and its reach
	label string
}

// plan chooses the node tests of the next experiment: from the root down,
// every node with hypotheses left (its descendants wait until it has none),
// below nodes with none left, children whose failure could break the
// request with fewer than k faults in all.
func (s *composer) plan() []test {
	var out []test
	var walk func(n *cnode, cost int)
	walk = func(n *cnode, cost int) {
		budget := s.cfg.MaxFaults - cost
		if budget < 1 || len(n.children) == 0 {
			return
		}
		if hyps := n.hypotheses(budget); len(hyps) > 0 {
			g := min(max(n.group, 1), len(hyps))
			if n.group == 0 {
				g = len(hyps)
			}
			var fail []string
			for _, h := range hyps[:g] {
				fail = append(fail, n.pointsOf(h)...)
			}
			fail = append(fail, n.reach...)
			slices.Sort(fail)
			var label []string
			for _, h := range hyps[:g] {
				label = append(label, "{"+strings.Join(n.pointsOf(h), ",")+"}")
			}
			out = append(out, test{node: n, hyps: hyps[:g], fail: slices.Compact(fail), label: nodeName(n) + ": " + strings.Join(label, " ")})
			return
		}
		extra := map[int]int{} // child to the fewest other children that fail n with it
		for _, f := range n.minimalFails(budget) {
			for _, c := range f.set {
				if e, ok := extra[c]; !ok || len(f.set)-1 < e {
					extra[c] = len(f.set) - 1
				}
			}
		}
		for _, c := range n.children {
			if e, ok := extra[n.index[c.point]]; ok {
				walk(c, cost+e)
			}
		}
	}
	walk(s.root, 0)
	return out
}

func nodeName(n *cnode) string {
	if n.point == "" {
		return "the request"
	}
	return n.point
}

// observe learns from one probe: each node of its tree that was not itself
// failed tells which of its children failed and whether it failed.
// Observations are counted per node and per set of failed children, and
// judged when the experiment ends (judge).
func (s *composer) observe(p Probe, injected map[string]bool, obs map[string]map[string]*observation) {
	if p.Lineage.Tree == nil {
		return
	}
	var walk func(n *cnode, c *fit.Call, ok bool, reach []string)
	walk = func(n *cnode, c *fit.Call, ok bool, reach []string) {
		failed := map[string]bool{}
		var reached []string
		for _, k := range c.Calls {
			if !slices.Contains(reached, k.Point) {
				reached = append(reached, k.Point)
			}
			if !k.OK {
				failed[k.Point] = true
			}
		}
		// A child first seen here is reached by failing, besides this
		// node's own reach, what was injected at or below its failed
		// siblings.
		var siblingsFailed []string
		for _, k := range c.Calls {
			if !k.OK {
				siblingsFailed = injectedIn(k, injected, siblingsFailed)
			}
		}
		var used, fails []string
		for _, p := range reached {
			if failed[p] {
				fails = append(fails, p)
			} else {
				used = append(used, p)
			}
		}
		for _, p := range reached {
			n.child(p, append(slices.Clone(reach), without0(siblingsFailed, p)...))
		}
		key := strings.Join(slices.Sorted(slices.Values(fails)), ",")
		m := obs[n.path]
		if m == nil {
			m = map[string]*observation{}
			obs[n.path] = m
		}
		o := m[key]
		if o == nil {
			o = &observation{node: n, failed: n.local(fails)}
			m[key] = o
		}
		o.n++
		if !ok {
			o.bad++
		} else {
			o.used = append(o.used, n.local(used))
		}
		for _, k := range c.Calls {
			if k.Injected != "" || len(k.Calls) == 0 {
				continue // failed by the scope: its children did not run
			}
			walk(n.byPoint[k.Point], k, k.OK, append(slices.Clone(reach), without0(siblingsFailed, k.Point)...))
		}
	}
	s.nodes[s.root.path] = s.root
	walk(s.root, p.Lineage.Tree, p.OK, nil)
}

// injectedIn adds to out the points at or below c that the scope failed.
func injectedIn(c *fit.Call, injected map[string]bool, out []string) []string {
	if c.Injected != "" && injected[c.Point] && !slices.Contains(out, c.Point) {
		out = append(out, c.Point)
	}
	for _, k := range c.Calls {
		out = injectedIn(k, injected, out)
	}
	return out
}

// without0 returns set without x.
func without0(set []string, x string) []string {
	return slices.DeleteFunc(slices.Clone(set), func(p string) bool { return p == x })
}

// An observation is what the probes of one experiment showed at one node
// with one set of failed children.
type observation struct {
	node   *cnode
	failed []int
	n, bad int
	used   [][]int
}

// learn judges an experiment's observations and adds what they show;
// it returns how many facts were new.
func (s *composer) learn(obs map[string]map[string]*observation, experiment int) (learned int) {
	for _, m := range obs {
		for _, o := range m {
			switch judge(o.n, o.bad, s.cfg.FailRatio) {
			case Failed:
				if len(o.failed) == 0 {
					s.anomaly(o.node, "failed while none of its points did")
					continue
				}
				// An execution it survived with these points failed
				// (its clause misses them) contradicts this one: what
				// failed below them made the difference. The failure,
				// seen, wins.
				n := len(o.node.clauses)
				o.node.clauses = slices.DeleteFunc(o.node.clauses, func(c []int) bool { return !hits(c, o.failed) })
				if len(o.node.clauses) < n {
					s.anomaly(o.node, "failed and survived with the same points failed")
				}
				if o.node.failed(o.failed, experiment) {
					learned++
				}
			case Survived:
				if slices.ContainsFunc(o.node.fails, func(f fact) bool { return subsetInts(f.set, o.failed) }) {
					s.anomaly(o.node, "failed and survived with the same points failed")
					continue
				}
				for _, u := range o.used {
					if o.node.survived(u) {
						learned++
					}
				}
			}
		}
	}
	return learned
}

func (s *composer) anomaly(n *cnode, what string) {
	msg := fmt.Sprintf("%s %s: its outcome depends on more than whether its points failed, so failure sets composed through it may be false or missed (--verify checks the deduced ones)", nodeName(n), what)
	if !slices.Contains(s.anomalies, msg) {
		s.anomalies = append(s.anomalies, msg)
	}
}

// A cut is a set of points whose failure fails a node, and the experiments
// whose facts show it.
type cut struct {
	points      []string
	experiments []int
}

// cuts returns the minimal sets of up to k points whose failure fails n: its
// own point, and for each set of children that fails it, the product of
// theirs.
func (s *composer) cuts(n *cnode, k int) []cut {
	var out []cut
	if n.point != "" {
		out = append(out, cut{points: []string{n.point}})
	}
	for _, f := range n.minimalFails(k) {
		prod := []cut{{}}
		for _, c := range f.set {
			prod = productCuts(prod, s.cuts(n.byPoint[n.names[c]], k), k)
		}
		for _, p := range prod {
			p.experiments = append(slices.Clone(p.experiments), f.experiment)
			out = append(out, p)
		}
	}
	return minimizeCuts(out, k)
}

func productCuts(a, b []cut, k int) []cut {
	var out []cut
	for _, x := range a {
		for _, y := range b {
			u := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(x.points), y.points...))))
			if len(u) <= k {
				out = append(out, cut{points: u, experiments: append(slices.Clone(x.experiments), y.experiments...)})
			}
		}
	}
	return minimizeCuts(out, k)
}

// minimizeCuts keeps the cuts of up to k points that contain no other,
// each with the evidence of the earliest-known copy.
func minimizeCuts(cuts []cut, k int) []cut {
	for i := range cuts {
		slices.Sort(cuts[i].experiments)
		cuts[i].experiments = slices.Compact(cuts[i].experiments)
	}
	slices.SortStableFunc(cuts, func(a, b cut) int {
		if len(a.points) != len(b.points) {
			return len(a.points) - len(b.points)
		}
		if c := strings.Compare(strings.Join(a.points, ","), strings.Join(b.points, ",")); c != 0 {
			return c
		}
		return lastOf(a.experiments) - lastOf(b.experiments)
	})
	var out []cut
	for _, c := range cuts {
		if len(c.points) > k || len(c.points) == 0 {
			continue
		}
		dominated := false
		for _, o := range out {
			if subsetStrings(o.points, c.points) {
				dominated = true
				break
			}
		}
		if !dominated {
			out = append(out, c)
		}
	}
	return out
}

func lastOf(xs []int) int {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

func subsetStrings(small, big []string) bool {
	for _, x := range small {
		if _, ok := slices.BinarySearch(big, x); !ok {
			return false
		}
	}
	return true
}

// compose runs the Compose search after the baseline (base, whose probes are
// in baseline) and fills r.
func compose(ctx context.Context, cfg Config, t Target, clock Clock, r *Report, at *atoms, baseline []Probe, pace func(context.Context) error) error {
	s := &composer{cfg: cfg, at: at, root: newCnode("", ""), nodes: map[string]*cnode{}}
	obs := map[string]map[string]*observation{}
	for _, p := range baseline {
		s.observe(p, nil, obs)
	}
	s.learn(obs, 0)
	stop, complete := "no hypothesis of up to max-faults points is left at any node", true
	alone := false // the last experiment learned nothing: test one node alone
	for {
		thinking := time.Now()
		tests := s.plan()
		if len(tests) == 0 {
			break
		}
		if alone {
			tests = tests[:1]
		}
		thought := time.Since(thinking)
		if len(r.Experiments) >= cfg.MaxExperiments {
			stop, complete = fmt.Sprintf("the budget of %d experiments is spent", cfg.MaxExperiments), false
			break
		}
		if err := pace(ctx); err != nil {
			return err
		}
		var fail []string
		var labels []string
		for _, ts := range tests {
			fail = append(fail, ts.fail...)
			labels = append(labels, ts.label)
		}
		slices.Sort(fail)
		fail = slices.Compact(fail)
		n := len(r.Experiments) + 1
		scope := at.scope(fail)
		injected := map[string]bool{}
		for _, p := range fail {
			injected[p] = true
		}
		e := Experiment{N: n, Hypothesis: fail, Scope: scope.String(), Requests: cfg.Probes, Start: clock.Now(), HypothesisTime: thought, Tests: labels}
		obs := map[string]map[string]*observation{}
		for i := 0; i < cfg.Probes; i++ {
			p, err := t.Probe(ctx, scope)
			if err != nil {
				return fmt.Errorf("ldfi: experiment %d, probe %d: %w", n, i+1, err)
			}
			e.Reached++
			if !p.OK {
				e.Failed++
				if len(e.Examples) < 3 && !slices.Contains(e.Examples, p.Detail) {
					e.Examples = append(e.Examples, p.Detail)
				}
			} else if err := r.Formula.checkNames(p.Lineage.Reached); err != nil {
				return fmt.Errorf("ldfi: experiment %d: %w", n, err)
			} else if r.Formula.Add(p.Lineage.Used, n) {
				e.NewClauses++
			}
			s.observe(p, injected, obs)
		}
		e.Outcome = judge(e.Reached, e.Failed, cfg.FailRatio)
		learned := s.learn(obs, n)
		s.tested += len(tests)
		for _, ts := range tests {
			// Adaptive group size: halve after a failure, double after a
			// survival.
			_, seen := obs[ts.node.path]
			switch {
			case alone && learned == 0 && seen && len(ts.hyps) > 1:
				ts.node.group = 1 // they failed together: one at a time
			case alone && learned == 0:
				why := "inconclusive"
				if !seen {
					why = "the node was not reached with it failed"
				}
				for _, h := range ts.hyps {
					ts.node.skipped = append(ts.node.skipped, h)
					s.skipped = append(s.skipped, fmt.Sprintf("%s: {%s} (%s)", nodeName(ts.node), strings.Join(ts.node.pointsOf(h), ", "), why))
				}
				ts.node.hypsOK = false
			case !seen:
			case failedAt(obs, ts.node):
				ts.node.group = max(1, len(ts.hyps)/2)
			default:
				ts.node.group = 2 * max(1, len(ts.hyps))
			}
		}
		alone = learned == 0 && !alone
		e.NewClauses = learned
		r.Experiments = append(r.Experiments, e)
		r.PainProbes += e.Failed
		if cfg.Progress != nil {
			cfg.Progress(e)
		}
	}
	return s.report(ctx, r, t, clock, complete, stop)
}

// failedAt reports whether node n failed in an experiment's observations.
func failedAt(obs map[string]map[string]*observation, n *cnode) bool {
	for _, o := range obs[n.path] {
		if o.bad > 0 {
			return true
		}
	}
	return false
}

// report composes the request's failure sets from what the nodes showed,
// verifies the deduced ones when asked, and states the coverage.
func (s *composer) report(ctx context.Context, r *Report, t Target, clock Clock, complete bool, stop string) error {
	cfg := s.cfg
	for _, c := range s.cuts(s.root, cfg.MaxFaults) {
		scope := s.at.scope(c.points)
		last := lastOf(c.experiments)
		f := FailureSet{Points: c.points, Faults: faultNames(scope), Experiment: last, Evidence: c.experiments, Deduced: len(c.experiments) > 1}
		note := fmt.Sprintf("found by experiment %d", last)
		if f.Deduced {
			note = fmt.Sprintf("deduced from experiments %s: each showed one call tree node failing when some of its points failed", joinInts(c.experiments))
		}
		f.Scenario = Scenario{Target: cfg.Target, Scope: scope.String(), Points: c.points, Probes: cfg.Probes, FailRatio: cfg.FailRatio, Note: note}
		if f.Deduced && cfg.Verify {
			n := len(r.Experiments) + 1
			var f0 Formula
			e, err := experimentScope(ctx, cfg, t, &f0, s.at, clock, n, scope)
			if err != nil {
				return err
			}
			e.Tests = []string{"verify a deduced failure set"}
			r.Experiments = append(r.Experiments, e)
			r.PainProbes += e.Failed
			if cfg.Progress != nil {
				cfg.Progress(e)
			}
			if e.Outcome != Failed {
				r.Refuted = append(r.Refuted, f)
				continue
			}
			f.Verified = n
			f.Scenario.Note += fmt.Sprintf("; verified by experiment %d: %d of %d requests failed", n, e.Failed, e.Reached)
		}
		r.Failures = append(r.Failures, f)
	}
	r.Skipped, r.Anomalies = s.skipped, s.anomalies
	nodes := 0
	var count func(n *cnode)
	count = func(n *cnode) {
		if len(n.children) > 0 {
			nodes++
		}
		for _, c := range n.children {
			count(c)
		}
	}
	count(s.root)
	deduced := 0
	for _, f := range r.Failures {
		if f.Deduced {
			deduced++
		}
	}
	r.Coverage = coverage(cfg.MaxFaults, len(r.Formula.Points), s.tested, complete && len(s.skipped) == 0, stop)
	if len(s.skipped) > 0 && complete {
		r.Coverage.StopReason = fmt.Sprintf("%d hypotheses were given up (see skipped)", len(s.skipped))
	}
	if r.Coverage.Complete {
		r.Coverage.Statement = fmt.Sprintf("every combination of up to %d faults that could break this class was explored, "+
			"assuming a call's effect on its caller depends only on whether it failed (Filibuster's dynamic reduction): "+
			"%d hypotheses tested at %d call tree nodes in %d experiments; of the %d failure sets, %d were composed from several experiments (deduced), %s",
			cfg.MaxFaults, s.tested, nodes, len(r.Experiments), len(r.Failures), deduced, verifiedWords(cfg.Verify, len(r.Refuted)))
	} else {
		r.Coverage.Statement = fmt.Sprintf("NOT complete (%s): %d hypotheses tested at %d call tree nodes; combinations of up to %d faults remain untested", r.Coverage.StopReason, s.tested, nodes, cfg.MaxFaults)
	}
	if len(s.anomalies) > 0 {
		r.Coverage.Statement += fmt.Sprintf("; the assumption does not hold at %d node(s) (see anomalies)", len(s.anomalies))
	}
	return nil
}

func verifiedWords(verify bool, refuted int) string {
	if !verify {
		return "not injected as a whole (--verify injects them)"
	}
	if refuted == 0 {
		return "and every one of those was verified by injecting it"
	}
	return fmt.Sprintf("and %d of those did NOT fail the request when injected (see refuted): the assumption does not hold there", refuted)
}

func joinInts(xs []int) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, x)
	}
	return b.String()
}
