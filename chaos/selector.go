package chaos

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Backend names where a group's instances live.
type Backend string

// The backends.
const (
	Lab        Backend = "lab"        // the processes `troop lab` runs
	Docker     Backend = "docker"     // containers, by label
	Kubernetes Backend = "kubernetes" // pods, by namespace and label selector
)

// Backends lists the backends.
var Backends = []Backend{Lab, Docker, Kubernetes}

// Selector says which instances of its backend a group holds. Only the
// fields of the group's backend are set.
type Selector struct {
	// lab: empty fields match every datacenter, rack or node.
	DC, Rack, Node string
	// docker: every label must be present; a non-empty value must match too.
	Labels map[string]string
	// kubernetes: the pods of Namespace matching LabelSelector.
	Namespace     string
	LabelSelector string        // as written
	Requirements  []Requirement // as parsed
}

func (s Selector) String() string {
	switch {
	case s.Namespace != "":
		return fmt.Sprintf("namespace=%s selector=%q", s.Namespace, s.LabelSelector)
	case s.Labels != nil:
		keys := make([]string, 0, len(s.Labels))
		for k := range s.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if v := s.Labels[k]; v != "" {
				keys[i] = k + "=" + v
			}
		}
		return "labels " + strings.Join(keys, ",")
	}
	var parts []string
	for _, kv := range [][2]string{{"dc", s.DC}, {"rack", s.Rack}, {"node", s.Node}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	if len(parts) == 0 {
		return "the whole lab"
	}
	return strings.Join(parts, " ")
}

// Operator is a Kubernetes label selector operator.
type Operator string

// The operators of Kubernetes label selectors.
const (
	OpEquals    Operator = "="
	OpNotEquals Operator = "!="
	OpIn        Operator = "in"
	OpNotIn     Operator = "notin"
	OpExists    Operator = "exists"
	OpNotExists Operator = "!"
)

// Requirement is one comma-separated term of a Kubernetes label selector.
type Requirement struct {
	Key    string
	Op     Operator
	Values []string
}

// Matches reports whether labels satisfy the requirement.
func (r Requirement) Matches(labels map[string]string) bool {
	v, has := labels[r.Key]
	switch r.Op {
	case OpEquals:
		return has && v == r.Values[0]
	case OpNotEquals:
		return !has || v != r.Values[0]
	case OpIn:
		return has && contains(r.Values, v)
	case OpNotIn:
		return !has || !contains(r.Values, v)
	case OpExists:
		return has
	case OpNotExists:
		return !has
	}
	return false
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

var (
	// A label name: at most 63 characters, alphanumeric at both ends, with
	// '-', '_' and '.' between.
	labelName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	// A DNS subdomain, the optional prefix of a label key.
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// A namespace is a DNS label.
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	// Lab names: what troop's topology accepts for datacenters, racks, nodes.
	labName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,255}$`)
	// Group names go into records, URLs and log lines.
	groupName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,62})$`)
)

func checkLabelKey(k string) error {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		prefix, name = "", k
	}
	if hasPrefix && (len(prefix) > 253 || !dnsSubdomain.MatchString(prefix)) {
		return fmt.Errorf("label key %q: the prefix before '/' must be a DNS subdomain (lower case, e.g. app.kubernetes.io)", clip(k))
	}
	if !labelName.MatchString(name) {
		return fmt.Errorf("label key %q: the name must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", clip(k))
	}
	return nil
}

func checkLabelValue(v string) error {
	if v != "" && !labelName.MatchString(v) {
		return fmt.Errorf("label value %q: must be empty or 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", clip(v))
	}
	return nil
}

// ParseLabelSelector reads a Kubernetes label selector: comma-separated
// requirements, each one of key, !key, key=value, key==value, key!=value,
// key in (v1,v2), key notin (v1,v2).
func ParseLabelSelector(s string) ([]Requirement, error) {
	terms, err := splitSelector(s)
	if err != nil {
		return nil, err
	}
	var out []Requirement
	for _, t := range terms {
		r, err := parseRequirement(strings.TrimSpace(t))
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// splitSelector splits at the commas that are not inside parentheses.
func splitSelector(s string) ([]string, error) {
	var terms []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
			if depth > 1 {
				return nil, fmt.Errorf("nested '(' in %q", clip(s))
			}
		case ')':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("')' without '(' in %q", clip(s))
			}
		case ',':
			if depth == 0 {
				terms = append(terms, s[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("'(' without ')' in %q", clip(s))
	}
	return append(terms, s[start:]), nil
}

func parseRequirement(t string) (Requirement, error) {
	if t == "" {
		return Requirement{}, fmt.Errorf("empty requirement (a stray comma?)")
	}
	if k, ok := strings.CutPrefix(t, "!"); ok {
		k = strings.TrimSpace(k)
		return Requirement{Key: k, Op: OpNotExists}, checkLabelKey(k)
	}
	for _, op := range []struct {
		sep string
		op  Operator
	}{{"!=", OpNotEquals}, {"==", OpEquals}, {"=", OpEquals}} {
		if k, v, ok := strings.Cut(t, op.sep); ok {
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if err := checkLabelKey(k); err != nil {
				return Requirement{}, err
			}
			return Requirement{Key: k, Op: op.op, Values: []string{v}}, checkLabelValue(v)
		}
	}
	if i := strings.IndexByte(t, '('); i >= 0 {
		head := strings.Fields(t[:i])
		if len(head) != 2 || (head[1] != "in" && head[1] != "notin") || !strings.HasSuffix(t, ")") {
			return Requirement{}, fmt.Errorf("%q: expected key in (v1,v2) or key notin (v1,v2)", clip(t))
		}
		if err := checkLabelKey(head[0]); err != nil {
			return Requirement{}, err
		}
		r := Requirement{Key: head[0], Op: Operator(head[1])}
		for _, v := range strings.Split(t[i+1:len(t)-1], ",") {
			v = strings.TrimSpace(v)
			if err := checkLabelValue(v); err != nil {
				return Requirement{}, err
			}
			r.Values = append(r.Values, v)
		}
		return r, nil
	}
	if strings.ContainsAny(t, " \t") {
		return Requirement{}, fmt.Errorf("%q: expected key, !key, key=value, key!=value, key in (...) or key notin (...)", clip(t))
	}
	return Requirement{Key: t, Op: OpExists}, checkLabelKey(t)
}

// Exception keeps instances out of a group. Key "" matches the pattern
// against the instance's ID and name; otherwise against that label. In the
// pattern, '*' matches any run of characters, including none; nothing else
// is special.
type Exception struct {
	Key     string
	Pattern string
}

func (e Exception) String() string {
	if e.Key == "" {
		return e.Pattern
	}
	return e.Key + "=" + e.Pattern
}

// ParseException reads "pattern" or "key=pattern".
func ParseException(s string) (Exception, error) {
	if strings.TrimSpace(s) == "" {
		return Exception{}, fmt.Errorf("empty exception")
	}
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return Exception{Pattern: s}, nil
	}
	if k == "" || v == "" {
		return Exception{}, fmt.Errorf("%q: expected pattern or key=pattern", clip(s))
	}
	return Exception{Key: k, Pattern: v}, nil
}

// Matches reports whether the exception covers inst.
func (e Exception) Matches(inst Instance) bool {
	if e.Key == "" {
		return Glob(e.Pattern, inst.ID) || Glob(e.Pattern, inst.Name)
	}
	v, ok := inst.Labels[e.Key]
	return ok && Glob(e.Pattern, v)
}

// Glob reports whether s matches pattern, where '*' matches any run of
// characters and everything else matches itself. It runs in
// O(len(pattern)*len(s)) at worst, whatever the pattern.
func Glob(pattern, s string) bool {
	// Greedy match with one backtrack point: the last '*' seen.
	p, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			mark++
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
