package chaos

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"
)

var groupKeys = []string{
	"name", "backend", "selector", "enabled",
	"probability", "mean_time_between_kills", "min_time_between_kills", "max_terminations_per_day",
	"types", "exceptions",
}

var selectorKeys = map[Backend][]string{
	Lab:        {"dc", "rack", "node"},
	Docker:     {"labels"},
	Kubernetes: {"namespace", "label_selector"},
}

func (p *parser) groups(n *yaml.Node, mode Mode) []Group {
	items := p.list(n, "groups")
	if n.Kind == yaml.SequenceNode && len(items) == 0 {
		p.fail(n.Line, "groups", "is empty: list the groups the monkey may act on")
	}
	var out []Group
	names := map[string]int{}
	for i, it := range items {
		path := index("groups", i)
		g, nameLine := p.group(it, path, mode)
		if g.Name != "" {
			if first, dup := names[g.Name]; dup {
				p.fail(nameLine, path+".name", "%q is already the name of a group (line %d)", g.Name, first)
			}
			names[g.Name] = nameLine
		}
		out = append(out, g)
	}
	return out
}

func (p *parser) group(n *yaml.Node, path string, mode Mode) (Group, int) {
	g := Group{
		Enabled:               mode == OptOut,
		MinTimeBetweenKills:   Gap{WorkDays: DefaultMinWorkDaysBetween},
		MaxTerminationsPerDay: DefaultMaxTerminationsPerDay,
		Types:                 []Action{{Kind: Terminate}},
	}
	f := p.fields(n, path, groupKeys)
	nameLine := n.Line
	if v := f["name"]; v != nil {
		nameLine = v.v.Line
		if s, ok := p.str(v.v, path+".name"); ok {
			if !groupName.MatchString(s) {
				p.fail(v.v.Line, path+".name", "%q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", clip(s))
			} else {
				g.Name = s
			}
		}
	} else if n.Kind == yaml.MappingNode {
		p.fail(n.Line, path+".name", "missing: every group needs a name")
	}
	if v := f["backend"]; v != nil {
		if s, ok := p.enum(v.v, path+".backend", []string{string(Lab), string(Docker), string(Kubernetes)}); ok {
			g.Backend = Backend(s)
		}
	} else if n.Kind == yaml.MappingNode {
		p.fail(n.Line, path+".backend", "missing: one of lab, docker, kubernetes")
	}
	p.selector(f["selector"], n.Line, path+".selector", &g)
	if v := f["enabled"]; v != nil {
		g.Enabled, _ = p.boolean(v.v, path+".enabled")
	}
	p.rate(f, path, &g)
	if v := f["min_time_between_kills"]; v != nil {
		g.MinTimeBetweenKills, _ = p.gap(v.v, path+".min_time_between_kills")
	}
	if v := f["max_terminations_per_day"]; v != nil {
		g.MaxTerminationsPerDay, _ = p.integer(v.v, path+".max_terminations_per_day", 1, maxPerDayLimit)
	}
	p.checkRate(f, path, &g)
	if v := f["types"]; v != nil {
		g.Types = p.types(v.v, path+".types", g.Backend)
	}
	if v := f["exceptions"]; v != nil {
		for i, it := range p.list(v.v, path+".exceptions") {
			ip := index(path+".exceptions", i)
			if s, ok := p.scalar(it, ip, "a pattern such as cache-* or rack=rack2"); ok {
				e, err := ParseException(s)
				if err != nil {
					p.fail(it.Line, ip, "%v", err)
					continue
				}
				g.Exceptions = append(g.Exceptions, e)
			}
		}
	}
	return g, nameLine
}

// rate reads probability or mean_time_between_kills, and refuses both.
func (p *parser) rate(f map[string]*kv, path string, g *Group) {
	prob, mtbk := f["probability"], f["mean_time_between_kills"]
	if prob != nil && mtbk != nil {
		second := mtbk
		if prob.k.Line > mtbk.k.Line {
			second = prob
		}
		p.fail(second.k.Line, join(path, second.k.Value), "set either probability (per work day) or mean_time_between_kills (in work days), not both")
		return
	}
	switch {
	case prob != nil:
		if v, ok := p.number(prob.v, path+".probability"); ok {
			if v <= 0 || v > 1 {
				p.fail(prob.v.Line, path+".probability", "must be > 0 and at most 1 (the chance of a kill per work day); for more than one kill a day use mean_time_between_kills below 1; to stop the group use enabled: false")
				return
			}
			g.Probability = v
		}
	case mtbk != nil:
		if v, ok := p.number(mtbk.v, path+".mean_time_between_kills"); ok {
			switch {
			case v <= 0:
				p.fail(mtbk.v.Line, path+".mean_time_between_kills", "must be > 0 work days")
				return
			case v < 1.0/maxDailyRate:
				p.fail(mtbk.v.Line, path+".mean_time_between_kills", "must be at least %g work days (%d kills a day)", 1.0/maxDailyRate, maxDailyRate)
				return
			}
			g.MeanTimeBetweenKills = v
		}
	default:
		g.MeanTimeBetweenKills = DefaultMeanTimeBetweenKills
	}
}

// checkRate refuses a daily rate above 1 that the gap or the daily maximum
// would silently cut down: troop runs no setting it quietly ignores.
func (p *parser) checkRate(f map[string]*kv, path string, g *Group) {
	if g.Probability == 0 && g.MeanTimeBetweenKills == 0 {
		return // already reported
	}
	trials, _ := g.Trials()
	if trials <= 1 {
		return
	}
	at := f["mean_time_between_kills"]
	if at == nil {
		return // probability is at most 1, so only a mean below 1 gets here
	}
	rate := g.DailyRate()
	if g.MinTimeBetweenKills.Duration == 0 && g.MinTimeBetweenKills.WorkDays > 0 {
		p.fail(at.v.Line, path+".mean_time_between_kills", "%g asks for %.4g kills a work day, but min_time_between_kills (%s) allows one; set min_time_between_kills to 0 or to a duration such as 1h", g.MeanTimeBetweenKills, rate, g.MinTimeBetweenKills)
	}
	if g.MaxTerminationsPerDay < trials {
		p.fail(at.v.Line, path+".mean_time_between_kills", "%g asks for up to %d kills a work day, but max_terminations_per_day is %d; raise it to at least %d", g.MeanTimeBetweenKills, trials, g.MaxTerminationsPerDay, trials)
	}
}

// gap reads a whole number of work days, or a duration.
func (p *parser) gap(n *yaml.Node, path string) (Gap, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" && wholeNumber.MatchString(n.Value) {
		d, ok := p.integer(n, path, 0, 366)
		return Gap{WorkDays: d}, ok
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		if d, err := time.ParseDuration(n.Value); err == nil {
			if d < time.Second || d > 366*24*time.Hour {
				p.fail(n.Line, path, "must be from 1s to 8784h, not %v", d)
				return Gap{}, false
			}
			return Gap{Duration: d}, true
		}
	}
	p.fail(n.Line, path, "must be a whole number of work days (0, 1, 2, ...) or a duration such as 90m or 4h, not %s", describe(n))
	return Gap{WorkDays: DefaultMinWorkDaysBetween}, false
}

// typeKeys are the keys of a types entry: the type, its duration and
// every kind's parameters (which of them a kind takes is checked after).
func typeKeys() []string {
	keys := []string{"type", "duration"}
	for _, prm := range AllParams() {
		keys = append(keys, prm.Name)
	}
	return keys
}

func (p *parser) types(n *yaml.Node, path string, backend Backend) []Action {
	items := p.list(n, path)
	if n.Kind == yaml.SequenceNode && len(items) == 0 {
		p.fail(n.Line, path, "is empty; leave the key out for [terminate], or disable the group")
	}
	kinds := make([]string, len(Kinds))
	for i, k := range Kinds {
		kinds[i] = string(k)
	}
	var out []Action
	seen := map[Action]int{}
	for i, it := range items {
		ip := index(path, i)
		line := it.Line
		var (
			name     string
			ok       bool
			duration time.Duration
			params   = map[string]string{}
		)
		if it.Kind == yaml.MappingNode {
			f := p.fields(it, ip, typeKeys())
			t := f["type"]
			if t == nil {
				p.fail(it.Line, ip+".type", "missing: one of %s", strings.Join(kinds, ", "))
				continue
			}
			if name, ok = p.enum(t.v, ip+".type", kinds); !ok {
				continue
			}
			spec, _ := Kind(name).Spec()
			if d := f["duration"]; d != nil {
				if !spec.Temporary {
					p.fail(d.k.Line, ip+".duration", "only %s take a duration; %s is over when it is done", listKinds(func(s *KindSpec) bool { return s.Temporary }, "and"), name)
					continue
				}
				if duration, ok = p.duration(d.v, ip+".duration", time.Second, MaxTemporaryDuration); !ok {
					continue
				}
			}
			for key, v := range f {
				if key == "type" || key == "duration" {
					continue
				}
				if _, takes := spec.Param(key); !takes {
					p.fail(v.k.Line, join(ip, key), "%s %s", name, spec.noParam(key))
					ok = false
					continue
				}
				if params[key], ok = p.scalar(v.v, join(ip, key), "a value"); !ok {
					continue
				}
			}
			if !ok {
				continue
			}
		} else if name, ok = p.enum(it, ip, kinds); !ok {
			continue
		}
		spec, _ := Kind(name).Spec()
		if why, no := spec.Unsupported[backend]; no {
			p.fail(line, ip, "%s is not supported by the %s backend (%s); use %s", name, backend, why,
				listKinds(func(s *KindSpec) bool { return s.Unsupported[backend] == "" }, "or"))
			continue
		}
		a, err := NewAction(Kind(name), duration, params)
		if err != nil {
			p.fail(line, ip, "%v", err)
			continue
		}
		if first, dup := seen[a]; dup {
			p.fail(line, ip, "%s is listed twice (first on line %d)", a, first)
			continue
		}
		seen[a] = line
		out = append(out, a)
	}
	return out
}

// listKinds names the kinds that match, in order, as "a, b and c".
func listKinds(match func(*KindSpec) bool, conj string) string {
	var names []string
	for _, s := range kindSpecs {
		if match(s) {
			names = append(names, string(s.Kind))
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " " + conj + " " + names[len(names)-1]
}

func (p *parser) selector(f *kv, groupLine int, path string, g *Group) {
	switch g.Backend {
	case "":
		return // the missing or bad backend is reported; keys depend on it
	case Docker:
		if f == nil {
			p.fail(groupLine, path, "missing: docker groups select containers by labels, e.g. selector: {labels: {app: cache}}")
			return
		}
	case Kubernetes:
		if f == nil {
			p.fail(groupLine, path, "missing: kubernetes groups need selector: {namespace: ..., label_selector: ...}")
			return
		}
	case Lab:
		if f == nil {
			return // the whole lab
		}
	}
	keys := p.fields(f.v, path, selectorKeys[g.Backend])
	s := &g.Selector
	switch g.Backend {
	case Lab:
		for _, k := range []struct {
			name string
			to   *string
		}{{"dc", &s.DC}, {"rack", &s.Rack}, {"node", &s.Node}} {
			if v := keys[k.name]; v != nil {
				if name, ok := p.str(v.v, join(path, k.name)); ok {
					if !labName.MatchString(name) {
						p.fail(v.v.Line, join(path, k.name), "%q: use letters, digits, '.', '_' and '-'", clip(name))
						continue
					}
					*k.to = name
				}
			}
		}
	case Docker:
		v := keys["labels"]
		if v == nil {
			if f.v.Kind == yaml.MappingNode {
				p.fail(f.v.Line, path+".labels", "missing: docker groups select containers by labels, e.g. labels: {app: cache}")
			}
			return
		}
		p.dockerLabels(v.v, path+".labels", s)
	case Kubernetes:
		s.Namespace = DefaultNamespace
		if v := keys["namespace"]; v != nil {
			if ns, ok := p.str(v.v, path+".namespace"); ok {
				if !dnsLabel.MatchString(ns) {
					p.fail(v.v.Line, path+".namespace", "%q is not a namespace name (lower-case letters, digits and '-', at most 63)", clip(ns))
				} else {
					s.Namespace = ns
				}
			}
		}
		v := keys["label_selector"]
		if v == nil {
			if f.v.Kind == yaml.MappingNode {
				p.fail(f.v.Line, path+".label_selector", "missing: a Kubernetes label selector such as app=cache; an empty one would select every pod of the namespace")
			}
			return
		}
		if sel, ok := p.str(v.v, path+".label_selector"); ok {
			reqs, err := ParseLabelSelector(sel)
			if err != nil {
				p.fail(v.v.Line, path+".label_selector", "%v", err)
				return
			}
			s.LabelSelector, s.Requirements = sel, reqs
		}
	}
}

func (p *parser) dockerLabels(n *yaml.Node, path string, s *Selector) {
	if n.Kind != yaml.MappingNode {
		p.fail(n.Line, path, "must be a mapping of label: value (an empty value matches any), not %s", describe(n))
		return
	}
	if len(n.Content) == 0 {
		p.fail(n.Line, path, "is empty: an empty selector would select every container")
		return
	}
	s.Labels = map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kp := join(path, k.Value)
		if k.Kind != yaml.ScalarNode || k.Value == "" || strings.ContainsAny(k.Value, "= \t\n") {
			p.fail(k.Line, path, "label keys must be non-empty words without '=' or spaces, not %s", describe(k))
			continue
		}
		if _, dup := s.Labels[k.Value]; dup {
			p.fail(k.Line, kp, "set twice")
			continue
		}
		val := ""
		if !(v.Kind == yaml.ScalarNode && v.Tag == "!!null") {
			var ok bool
			if val, ok = p.scalar(v, kp, "a label value"); !ok {
				continue
			}
			if strings.ContainsAny(val, "\n\x00") {
				p.fail(v.Line, kp, "label values cannot hold newlines or NUL")
				continue
			}
		}
		s.Labels[k.Value] = val
	}
}

// aliases maps the names Chaos Monkey 2 and Simian Army used to troop's,
// so that a carried-over setting gets pointed to its new name.
var aliases = map[string]string{
	"meantimebetweenkillsinworkdays": "mean_time_between_kills",
	"mintimebetweenkillsinworkdays":  "min_time_between_kills",
	"maxterminationsperday":          "max_terminations_per_day",
	"openhour":                       "start_hour",
	"closehour":                      "end_hour",
	"timezone":                       "time_zone",
	"tz":                             "time_zone",
	"dryrun":                         "leashed",
	"dry_run":                        "leashed",
	"workdays":                       "work_days",
	"probabilty":                     "probability",
	"exception":                      "exceptions",
	"type":                           "types",
	"grouping":                       "selector",
}

// hint returns ` (did you mean "x"?)` when one known name is close to s,
// else the list of known keys when it is short.
func hint(s string, known []string) string {
	if m := didYouMean(s, known); m != "" {
		return m
	}
	if len(known) <= 12 && len(known) > 0 {
		return " (known keys here: " + strings.Join(known, ", ") + ")"
	}
	return ""
}

// didYouMean returns ` (did you mean "x"?)` when one name is close to s.
func didYouMean(s string, known []string) string {
	if m := suggest(s, known); m != "" {
		return fmt.Sprintf(" (did you mean %q?)", m)
	}
	return ""
}

func suggest(s string, known []string) string {
	norm := snake(s)
	if a, ok := aliases[strings.ReplaceAll(norm, "_", "")]; ok && contains(known, a) {
		return a
	}
	if a, ok := aliases[norm]; ok && contains(known, a) {
		return a
	}
	if norm != s && contains(known, norm) {
		return norm
	}
	if len(norm) > 64 {
		return "" // long strings are not typos, and distance is quadratic
	}
	limit := max(1, min(3, len(norm)/4))
	best, bestDist, ties := "", limit+1, 0
	for _, k := range known {
		switch d := editDistance(norm, k); {
		case d < bestDist:
			best, bestDist, ties = k, d, 1
		case d == bestDist:
			ties++
		}
	}
	if ties != 1 {
		return ""
	}
	return best
}

// snake turns camelCase, kebab-case and upper case into snake_case.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '-' || r == ' ':
			b.WriteByte('_')
		case unicode.IsUpper(r):
			if i > 0 {
				prev := rune(s[i-1])
				if unicode.IsLower(prev) || unicode.IsDigit(prev) {
					b.WriteByte('_')
				}
			}
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions, and swaps of neighbours, the commonest typo.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
