package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// KindSpec describes one chaos kind: its name, whether it is a fault that
// lasts for a duration and is then undone, the parameters it takes besides
// the duration, and the backends that cannot do it. Each kind has a small
// file of its own (kind_*.go) and is registered by name, as Toxiproxy
// registers its toxics; the config, the REST API and troop chaos kill read
// an action's parameters through it.
type KindSpec struct {
	Kind Kind
	// Temporary kinds last Action.Duration and are then undone; the others
	// are over as soon as they are done (the group's supervisor, restart
	// policy or replica set brings the instance back).
	Temporary bool
	Params    []Param
	// Default fills in the parameters left out that have a default. Nil:
	// none has.
	Default func(*Action)
	// Check checks the action once every parameter given is set: a
	// parameter that is required, or two that go together. Nil: nothing.
	Check func(Action) error
	// Describe is the parameters' part of Action.String. Nil: none.
	Describe func(Action) string
	// Unsupported says, per backend that cannot do the kind, why.
	Unsupported map[Backend]string
}

// Param is one parameter of a kind. It has one name everywhere: a key in
// the config's types entries, in the REST API's JSON body, and a flag of
// troop chaos kill.
type Param struct {
	Name  string
	Usage string
	// Set parses v, checks it and sets it in a.
	Set func(a *Action, v string) error
}

// kindSpecs lists every kind, in the order the docs and errors name them.
var kindSpecs = []*KindSpec{
	&terminateKind, &stopKind, &pauseKind, &restartKind, &burnCPUKind,
	&partitionKind, &lossKind, &delayKind, &clockSkewKind,
}

var kindsByName = map[Kind]*KindSpec{}

// Kinds lists every kind in the order the docs and errors name them.
var Kinds []Kind

func init() {
	for _, s := range kindSpecs {
		kindsByName[s.Kind] = s
		Kinds = append(Kinds, s.Kind)
	}
}

// Spec returns the kind's spec, and false for a kind that does not exist.
func (k Kind) Spec() (*KindSpec, bool) {
	s, ok := kindsByName[k]
	return s, ok
}

// Temporary reports whether the kind lasts for a duration and is then undone.
func (k Kind) Temporary() bool {
	s, ok := kindsByName[k]
	return ok && s.Temporary
}

// ParseKind returns the kind named s, or an error listing the kinds.
func ParseKind(s string) (Kind, error) {
	if _, ok := kindsByName[Kind(s)]; ok {
		return Kind(s), nil
	}
	return "", fmt.Errorf("unknown chaos type %q (want %s)", s, kindList())
}

func kindList() string {
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// ParamNames lists the names of the kind's parameters.
func (s *KindSpec) ParamNames() []string {
	names := make([]string, len(s.Params))
	for i, p := range s.Params {
		names[i] = p.Name
	}
	return names
}

// Param returns the kind's parameter called name.
func (s *KindSpec) Param(name string) (Param, bool) {
	for _, p := range s.Params {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// AllParams lists every parameter of every kind once, by name, for a
// command's flags.
func AllParams() []Param {
	seen := map[string]Param{}
	var out []Param
	for _, s := range kindSpecs {
		for _, p := range s.Params {
			if _, dup := seen[p.Name]; !dup {
				seen[p.Name] = p
				out = append(out, p)
			}
		}
	}
	return out
}

// NewAction builds an action of kind k. A temporary kind takes duration
// (0: DefaultTemporaryDuration), from 1s to MaxTemporaryDuration; the
// others take none. params are the kind's parameters by name, as text; a
// parameter the kind does not take is an error naming those it takes.
func NewAction(k Kind, duration time.Duration, params map[string]string) (Action, error) {
	s, ok := k.Spec()
	if !ok {
		_, err := ParseKind(string(k))
		return Action{}, err
	}
	a := Action{Kind: k}
	if s.Temporary {
		a.Duration = DefaultTemporaryDuration
		if duration != 0 {
			if duration < time.Second || duration > MaxTemporaryDuration {
				return a, fmt.Errorf("%s: duration %v: want from 1s to %v", k, duration, MaxTemporaryDuration)
			}
			a.Duration = duration
		}
	} else if duration != 0 {
		return a, fmt.Errorf("%s takes no duration: it is over when it is done", k)
	}
	for _, name := range slices.Sorted(maps.Keys(params)) {
		p, ok := s.Param(name)
		if !ok {
			return a, fmt.Errorf("%s %s", k, s.noParam(name))
		}
		if err := p.Set(&a, params[name]); err != nil {
			return a, fmt.Errorf("%s: %s: %w", k, name, err)
		}
	}
	if s.Default != nil {
		s.Default(&a)
	}
	if s.Check != nil {
		if err := s.Check(a); err != nil {
			return a, fmt.Errorf("%s: %w", k, err)
		}
	}
	return a, nil
}

// noParam says that the kind has no parameter called name.
func (s *KindSpec) noParam(name string) string {
	if len(s.Params) == 0 {
		return fmt.Sprintf("takes no %s: it has no parameters", name)
	}
	return fmt.Sprintf("takes no %s (its parameters: %s)", name, strings.Join(s.ParamNames(), ", "))
}

// The parameters' parsers, shared by the kinds.

// setDuration parses a duration from lo to hi into *d.
func setDuration(d *time.Duration, v string, lo, hi time.Duration) error {
	x, err := time.ParseDuration(v)
	if err != nil || x < lo || x > hi {
		return fmt.Errorf("%q: want a duration from %v to %v", v, lo, hi)
	}
	*d = x
	return nil
}

// setNumber parses a number in (lo, hi] into *f.
func setNumber(f *float64, v string, lo, hi float64, what string) error {
	x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(x > lo && x <= hi) {
		return fmt.Errorf("%q: want %s", v, what)
	}
	*f = x
	return nil
}
