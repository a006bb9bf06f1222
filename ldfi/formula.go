package ldfi

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"slices"

	"github.com/troop-lab/troop/fit"
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
	// Tree is the call tree, when the target has one (fit's lineage): it
	// gives each call's protocol, and so the faults that apply there.
	Tree *fit.Call `json:"tree,omitempty"`
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
//
// Clauses are kept as sorted point indices: a search over a thousand points
// learns tens of thousands of clauses of hundreds of points each, which as
// names would be a heap of pointers for the garbage collector to scan at
// every step. Clauses gives them by name; JSON carries them by name too.
type Formula struct {
	Points []string
	index  map[string]int
	sets   [][]int           // each clause's points, sorted
	found  []int             // each clause's experiment
	seen   map[[16]byte]bool // hashes of the clauses' sets
}

// Add adds the clause of a successful execution, found by experiment, and
// reports whether it was new. An empty clause (the request depended on no
// injection point) is not added: nothing could break it.
func (f *Formula) Add(points []string, experiment int) bool {
	if len(points) == 0 {
		return false
	}
	set := slices.Compact(f.indices(points))
	h := fnv.New128a()
	io.WriteString(h, setKey(set))
	var key [16]byte
	h.Sum(key[:0])
	if f.seen[key] {
		return false
	}
	if f.seen == nil {
		f.seen = map[[16]byte]bool{}
	}
	f.seen[key] = true
	f.sets = append(f.sets, set)
	f.found = append(f.found, experiment)
	return true
}

// Len returns the number of clauses.
func (f *Formula) Len() int { return len(f.sets) }

// Clauses returns the clauses by name, in the order they were found.
func (f *Formula) Clauses() []Clause {
	out := make([]Clause, len(f.sets))
	for i, set := range f.sets {
		out[i] = Clause{Points: f.names(set), Experiment: f.found[i]}
	}
	return out
}

type formulaJSON struct {
	Points  []string `json:"points"`
	Clauses []Clause `json:"clauses"`
}

// MarshalJSON writes the points and the clauses by name.
func (f *Formula) MarshalJSON() ([]byte, error) {
	return json.Marshal(formulaJSON{Points: f.Points, Clauses: f.Clauses()})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (f *Formula) UnmarshalJSON(b []byte) error {
	var in formulaJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*f = Formula{}
	for _, p := range in.Points {
		f.intern(p)
	}
	for _, c := range in.Clauses {
		f.Add(c.Points, c.Experiment)
	}
	return nil
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

// checkNames reports the first point of points new to the formula that a
// scope cannot name: a hypothesis holding it could never be injected.
func (f *Formula) checkNames(points []string) error {
	for _, p := range points {
		if _, ok := f.index[p]; ok {
			continue // a known point (one fault type: atoms are points)
		}
		if err := fit.CheckPoint(p); err != nil {
			return fmt.Errorf("a lineage reports the %v, so no scope can fail it: name services and points with letters, digits, '-', '_' and '.' (docs/fit.md)", err)
		}
	}
	return nil
}

// HitsAll reports whether failing points would hit every clause.
func (f *Formula) HitsAll(points []string) bool {
	return hitsAll(f.sets, f.indices(points))
}
