package ldfi

import (
	"slices"
	"strings"
)

// A Lineage is what one request tells ldfi about its execution.
type Lineage struct {
	// Known is false when the request returned no lineage at all (it
	// failed before it could say); such a request cannot be filtered out.
	Known bool `json:"known"`
	// Reached lists every injection point the request passed, whether it
	// failed there or not.
	Reached []string `json:"reached,omitempty"`
	// Used lists the points whose results the answer depended on: the
	// request succeeded this way, so failing at least one of them might
	// have prevented it. It is the clause this execution adds.
	Used []string `json:"used,omitempty"`
}

// ReachedAny reports whether the request passed any of points (true when
// the lineage is unknown).
func (l Lineage) ReachedAny(points []string) bool {
	if !l.Known {
		return true
	}
	for _, p := range points {
		if slices.Contains(l.Reached, p) {
			return true
		}
	}
	return false
}

// A Clause is one successful execution's lineage read as a disjunction: "at
// least one of these points failed" would have prevented it.
type Clause struct {
	Points     []string `json:"points"`
	Experiment int      `json:"experiment"` // the experiment that found it; 0 is the fault-free baseline
}

// A Formula is the conjunction of the clauses found so far, over the points
// seen so far. A hypothesis worth testing is a minimal set of points that
// hits every clause: failing it breaks every execution known to succeed.
type Formula struct {
	Points  []string `json:"points"`
	Clauses []Clause `json:"clauses"`
	index   map[string]int
	sets    [][]int
	seen    map[string]bool
}

// Add adds the clause of a successful execution, found by experiment, and
// reports whether it was new. An empty clause (the request depended on no
// injection point) is not added: nothing could break it.
func (f *Formula) Add(points []string, experiment int) bool {
	points = slices.Clone(points)
	slices.Sort(points)
	points = slices.Compact(points)
	key := strings.Join(points, "\x00")
	if len(points) == 0 || f.seen[key] {
		return false
	}
	if f.seen == nil {
		f.seen, f.index = map[string]bool{}, map[string]int{}
	}
	f.seen[key] = true
	set := make([]int, len(points))
	for i, p := range points {
		set[i] = f.intern(p)
	}
	slices.Sort(set)
	f.sets = append(f.sets, set)
	f.Clauses = append(f.Clauses, Clause{Points: points, Experiment: experiment})
	return true
}

// intern returns the index of point, adding it if it is new.
func (f *Formula) intern(p string) int {
	if i, ok := f.index[p]; ok {
		return i
	}
	if f.index == nil {
		f.index = map[string]int{}
	}
	f.index[p] = len(f.Points)
	f.Points = append(f.Points, p)
	return len(f.Points) - 1
}

// indices maps point names to sorted indices, interning unseen names.
func (f *Formula) indices(points []string) []int {
	out := make([]int, len(points))
	for i, p := range points {
		out[i] = f.intern(p)
	}
	slices.Sort(out)
	return out
}

// names maps indices back to sorted point names.
func (f *Formula) names(set []int) []string {
	out := make([]string, len(set))
	for i, p := range set {
		out[i] = f.Points[p]
	}
	slices.Sort(out)
	return out
}

// HitsAll reports whether failing points would hit every clause.
func (f *Formula) HitsAll(points []string) bool {
	return hitsAll(f.sets, f.indices(points))
}
