package ldfi

import (
	"slices"
	"strings"

	"github.com/troop-lab/troop/fit"
)

// atoms are what hypotheses are made of: a point failed in one way. With
// one fault type an atom is the point itself; with several (Filibuster's
// default: every type that applies at the point) it is "POINT=ACTION", and
// the atoms of one point are always in the same clauses, so a minimal
// hitting set holds at most one of them and the enumerator yields each.
type atoms struct {
	faults []fit.Fault
	proto  map[string]string // each point's protocol, from lineage trees
}

func newAtoms(faults []fit.Fault) *atoms {
	return &atoms{faults: faults, proto: map[string]string{}}
}

// learn records the protocols of the points of tree.
func (a *atoms) learn(tree *fit.Call) {
	if tree == nil {
		return
	}
	if tree.Point != "" {
		a.proto[tree.Point] = tree.Proto // "": a point inside a service
	}
	for _, c := range tree.Calls {
		a.learn(c)
	}
}

// forPoint lists the faults a hypothesis may put at point: those that apply
// to its protocol (all when it is not known); the first configured when
// none does.
func (a *atoms) forPoint(point string) []fit.Fault {
	proto, known := a.proto[point]
	if !known {
		return a.faults
	}
	var out []fit.Fault
	for _, f := range a.faults {
		if fit.Applies(f, proto) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		out = a.faults[:1]
	}
	return out
}

// of returns the atoms of points.
func (a *atoms) of(points []string) []string {
	if len(a.faults) == 1 {
		return points
	}
	var out []string
	for _, p := range points {
		for _, f := range a.forPoint(p) {
			out = append(out, p+"="+f.Action())
		}
	}
	return out
}

// others returns, with several fault types, the atoms of the points of scope
// other than the way scope fails them.
func (a *atoms) others(scope fit.Scope) []string {
	if len(a.faults) == 1 {
		return nil
	}
	var out []string
	for _, f := range scope.Faults {
		for _, x := range a.of([]string{f.Point}) {
			if x != f.Point+"="+f.Action() {
				out = append(out, x)
			}
		}
	}
	return out
}

// fault returns the fault an atom stands for.
func (a *atoms) fault(atom string) fit.Fault {
	point, action, named := strings.Cut(atom, "=")
	f := a.faults[0]
	if named {
		f, _ = fit.ParseAction(action) // atoms are made from valid faults
	}
	f.Point = point
	return f
}

// scope is the scope that fails every atom of set.
func (a *atoms) scope(set []string) fit.Scope {
	var s fit.Scope
	for _, x := range set {
		s.Faults = append(s.Faults, a.fault(x))
	}
	return s
}

// points returns the points of the atoms of set, sorted.
func (a *atoms) points(set []string) []string {
	out := make([]string, len(set))
	for i, x := range set {
		out[i], _, _ = strings.Cut(x, "=")
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// faultNames names each fault of a scope as POINT=ACTION, sorted.
func faultNames(s fit.Scope) []string {
	out := make([]string, len(s.Faults))
	for i, f := range s.Faults {
		out[i] = f.Point + "=" + f.Action()
	}
	slices.Sort(out)
	return out
}
