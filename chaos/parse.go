package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ParseConfig parses and validates a config. source names it in errors.
// read reads the iCalendar file the config may name; it may be nil when the
// config names none. All problems are reported together, in file order.
func ParseConfig(data []byte, source string, read ReadFileFunc) (*Config, error) {
	p := &parser{source: source, read: read}
	c := p.parse(data)
	sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
	if err := joinConfigErrors(p.errs); err != nil {
		return nil, err
	}
	return c, nil
}

type parser struct {
	source string
	read   ReadFileFunc
	errs   []*ConfigError
}

func (p *parser) fail(line int, path, format string, args ...any) {
	p.errs = append(p.errs, &ConfigError{Source: p.source, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// yamlLine pulls the line out of a yaml.v3 error ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

func (p *parser) parse(data []byte) *Config {
	root, ok := p.document(data)
	if !ok {
		return nil
	}
	c := &Config{Source: p.source, Leashed: DefaultLeashed, Mode: DefaultMode, DB: DefaultDB, Retention: DefaultRetention}
	cal, err := DefaultCalendar()
	if err != nil {
		p.fail(0, "calendar.time_zone", "cannot load the default zone %s: %v", DefaultZone, err)
		return nil
	}
	c.Calendar = cal
	if root == nil {
		p.fail(1, "groups", "missing: the file is empty; list the groups the monkey may act on")
		return nil
	}
	f := p.fields(root, "", topKeys)
	if n := f["leashed"]; n != nil {
		c.Leashed, _ = p.boolean(n.v, "leashed")
	}
	if n := f["mode"]; n != nil {
		if s, ok := p.enum(n.v, "mode", []string{string(OptIn), string(OptOut)}); ok {
			c.Mode = Mode(s)
		}
	}
	if n := f["token"]; n != nil {
		c.Token = p.token(n.v)
	}
	p.serveKeys(f, c)
	if n := f["calendar"]; n != nil {
		p.calendar(n.v, &c.Calendar)
	}
	if n := f["groups"]; n != nil {
		c.Groups = p.groups(n.v, c.Mode)
	} else {
		p.fail(root.Line, "groups", "missing: list the groups the monkey may act on")
	}
	if len(p.errs) > 0 {
		return nil
	}
	return c
}

// document decodes the YAML into a node tree, refusing a second document,
// aliases and custom tags. root is nil for an empty file.
func (p *parser) document(data []byte) (root *yaml.Node, ok bool) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := p.decode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, true
		}
		p.yamlError(err)
		return nil, false
	}
	var extra yaml.Node
	if err := p.decode(dec, &extra); err == nil {
		p.fail(extra.Line, "", "a second YAML document (---): the config is one document")
		return nil, false
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(err)
		return nil, false
	}
	if len(doc.Content) == 0 {
		return nil, true
	}
	root = doc.Content[0]
	if !p.plain(root) {
		return nil, false
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, true
	}
	if root.Kind != yaml.MappingNode {
		p.fail(root.Line, "", "the config must be a mapping of keys (leashed, mode, calendar, groups, ...), not %s", describe(root))
		return nil, false
	}
	return root, true
}

// decode runs the YAML decoder and turns a panic in it into an error: bad
// input must never crash troop, whatever the library does.
func (p *parser) decode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: cannot parse: %v", r)
		}
	}()
	return dec.Decode(n)
}

func (p *parser) yamlError(err error) {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = "yaml: " + msg[len(m[0]):]
	}
	p.fail(line, "", "%s", msg)
}

// plain walks the tree and refuses aliases and custom tags, which the rest
// of the parser would otherwise have to think about.
func (p *parser) plain(n *yaml.Node) bool {
	ok := true
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		switch {
		case n.Kind == yaml.AliasNode:
			p.fail(n.Line, "", "YAML aliases (*%s) are not supported; write the value out", clip(n.Value))
			ok = false
			return
		case n.Tag != "" && !strings.HasPrefix(n.Tag, "!!"):
			p.fail(n.Line, "", "custom YAML tags (%s) are not supported", clip(n.Tag))
			ok = false
			return
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
	return ok
}

// kv is a key and its value node.
type kv struct{ k, v *yaml.Node }

// fields checks a mapping's keys against the known ones: unknown keys get a
// suggestion, repeated keys name the first line. It returns the known keys'
// nodes; a key with no value is reported and left out.
func (p *parser) fields(n *yaml.Node, path string, known []string) map[string]*kv {
	out := map[string]*kv{}
	if n.Kind != yaml.MappingNode {
		p.fail(n.Line, path, "must be a mapping (key: value lines), not %s", describe(n))
		return out
	}
	seen := map[string]int{} // key -> line of its first appearance
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		full := join(path, name)
		if k.Kind != yaml.ScalarNode {
			p.fail(k.Line, path, "keys must be plain words, not %s", describe(k))
			continue
		}
		if !contains(known, name) {
			p.fail(k.Line, full, "unknown key%s", hint(name, known))
			continue
		}
		if first, dup := seen[name]; dup {
			p.fail(k.Line, full, "set twice (first on line %d)", first)
			continue
		}
		seen[name] = k.Line
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			p.fail(k.Line, full, "has no value; leave the key out to get its default")
			continue
		}
		out[name] = &kv{k, v}
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// describe names a node's kind for errors.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", clip(n.Value))
	}
	return "something else"
}

func (p *parser) scalar(n *yaml.Node, path, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.fail(n.Line, path, "must be %s, not %s", what, describe(n))
		return "", false
	}
	return n.Value, true
}

func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	s, ok := p.scalar(n, path, "a string")
	if ok && s == "" {
		p.fail(n.Line, path, "is empty; leave the key out to get its default")
		return "", false
	}
	return s, ok
}

func (p *parser) boolean(n *yaml.Node, path string) (bool, bool) {
	s, ok := p.scalar(n, path, "true or false")
	if !ok {
		return false, false
	}
	switch {
	case n.Tag == "!!bool" && strings.EqualFold(s, "true"):
		return true, true
	case n.Tag == "!!bool" && strings.EqualFold(s, "false"):
		return false, true
	}
	p.fail(n.Line, path, "must be true or false, not %q", clip(s))
	return false, false
}

var (
	wholeNumber   = regexp.MustCompile(`^[0-9]+$`)
	decimalNumber = regexp.MustCompile(`^([0-9]+(\.[0-9]*)?|\.[0-9]+)$`)
)

// number reads a plain decimal number: no sign, exponent, hex or quotes, so
// that what the file says is what troop uses.
func (p *parser) number(n *yaml.Node, path string) (float64, bool) {
	s, ok := p.scalar(n, path, "a number")
	if !ok {
		return 0, false
	}
	if (n.Tag != "!!int" && n.Tag != "!!float") || !decimalNumber.MatchString(s) {
		p.fail(n.Line, path, "must be a plain decimal number such as 0.2 or 5, not %q", clip(s))
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		p.fail(n.Line, path, "%q is out of range", clip(s))
		return 0, false
	}
	return f, true
}

func (p *parser) integer(n *yaml.Node, path string, lo, hi int) (int, bool) {
	s, ok := p.scalar(n, path, "a whole number")
	if !ok {
		return 0, false
	}
	if n.Tag != "!!int" || !wholeNumber.MatchString(s) {
		p.fail(n.Line, path, "must be a whole number from %d to %d, not %q", lo, hi, clip(s))
		return 0, false
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		p.fail(n.Line, path, "must be from %d to %d, not %s", lo, hi, clip(s))
		return 0, false
	}
	return v, true
}

func (p *parser) enum(n *yaml.Node, path string, allowed []string) (string, bool) {
	s, ok := p.scalar(n, path, "one of "+strings.Join(allowed, ", "))
	if !ok {
		return "", false
	}
	if !contains(allowed, s) {
		p.fail(n.Line, path, "%q is not one of %s%s", clip(s), strings.Join(allowed, ", "), didYouMean(s, allowed))
		return "", false
	}
	return s, true
}

func (p *parser) list(n *yaml.Node, path string) []*yaml.Node {
	if n.Kind != yaml.SequenceNode {
		p.fail(n.Line, path, "must be a list, not %s", describe(n))
		return nil
	}
	return n.Content
}

func (p *parser) duration(n *yaml.Node, path string, lo, hi time.Duration) (time.Duration, bool) {
	s, ok := p.scalar(n, path, "a duration such as 30s or 5m")
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || n.Tag != "!!str" {
		p.fail(n.Line, path, "must be a duration such as 30s, 5m or 1h30m, not %q", clip(s))
		return 0, false
	}
	if d < lo || d > hi {
		p.fail(n.Line, path, "must be from %v to %v, not %v", lo, hi, d)
		return 0, false
	}
	return d, true
}

func (p *parser) token(n *yaml.Node) string {
	// The token is a secret: errors describe it and never echo it.
	if n.Kind != yaml.ScalarNode {
		p.fail(n.Line, "token", "must be a string")
		return ""
	}
	s := n.Value
	switch {
	case len(s) < minTokenLen:
		p.fail(n.Line, "token", "must be at least %d characters (it has %d)", minTokenLen, len(s))
	case strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		p.fail(n.Line, "token", "must not contain spaces or control characters")
	default:
		return s
	}
	return ""
}

var topKeys = []string{"leashed", "mode", "token", "on_demand", "db", "retention", "outage", "calendar", "groups"}

var calendarKeys = []string{"time_zone", "work_days", "start_hour", "end_hour", "holidays"}

var holidayKeys = []string{"builtin", "dates", "ical"}

func (p *parser) calendar(n *yaml.Node, c *Calendar) {
	f := p.fields(n, "calendar", calendarKeys)
	if z := f["time_zone"]; z != nil {
		if s, ok := p.str(z.v, "calendar.time_zone"); ok {
			loc, err := loadZone(s)
			if err != nil {
				p.fail(z.v.Line, "calendar.time_zone", "%v", err)
			} else {
				c.Zone, c.Location = s, loc
			}
		}
	}
	if w := f["work_days"]; w != nil {
		p.workDays(w.v, c)
	}
	startLine := 0
	if s := f["start_hour"]; s != nil {
		startLine = s.v.Line
		c.StartHour, _ = p.integer(s.v, "calendar.start_hour", 0, 23)
	}
	if e := f["end_hour"]; e != nil {
		if v, ok := p.integer(e.v, "calendar.end_hour", 1, 24); ok {
			c.EndHour = v
			if v <= c.StartHour {
				p.fail(e.v.Line, "calendar.end_hour", "must be after start_hour (%d): kills happen at or after start_hour:00 and before end_hour:00", c.StartHour)
			}
		}
	} else if c.EndHour <= c.StartHour {
		p.fail(startLine, "calendar.start_hour", "must be before end_hour (default %d)", c.EndHour)
	}
	if h := f["holidays"]; h != nil {
		p.holidays(h.v, c)
	}
}

// loadZone refuses "Local" and "": a config must mean the same on every
// machine.
func loadZone(s string) (*time.Location, error) {
	if s == "Local" {
		return nil, fmt.Errorf(`"Local" depends on the machine; name the zone, e.g. America/Los_Angeles or UTC`)
	}
	loc, err := time.LoadLocation(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not a known IANA time zone (e.g. America/Los_Angeles, Europe/Berlin, UTC)", clip(s))
	}
	return loc, nil
}

var weekdayNames = map[string]time.Weekday{}

func init() {
	for wd := time.Sunday; wd <= time.Saturday; wd++ {
		long := strings.ToLower(wd.String())
		weekdayNames[long] = wd
		weekdayNames[long[:3]] = wd
	}
}

func (p *parser) workDays(n *yaml.Node, c *Calendar) {
	if n.Kind == yaml.SequenceNode && len(n.Content) == 0 {
		p.fail(n.Line, "calendar.work_days", "is empty: the monkey would never run; disable the groups instead")
		return
	}
	items := p.list(n, "calendar.work_days")
	if items == nil {
		return
	}
	var days [7]bool
	for i, it := range items {
		path := index("calendar.work_days", i)
		s, ok := p.scalar(it, path, "a day name such as mon")
		if !ok {
			continue
		}
		wd, known := weekdayNames[strings.ToLower(s)]
		if !known {
			p.fail(it.Line, path, "%q is not a day (mon, tue, wed, thu, fri, sat, sun)%s", clip(s), didYouMean(strings.ToLower(s), dayNameList))
			continue
		}
		if days[wd] {
			p.fail(it.Line, path, "%s is listed twice", wd)
			continue
		}
		days[wd] = true
	}
	c.WorkDays = days
}

var dayNameList = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}

func (p *parser) holidays(n *yaml.Node, c *Calendar) {
	f := p.fields(n, "calendar.holidays", holidayKeys)
	if b := f["builtin"]; b != nil {
		names := make([]string, len(HolidayLists))
		for i, l := range HolidayLists {
			names[i] = string(l)
		}
		if s, ok := p.enum(b.v, "calendar.holidays.builtin", names); ok {
			c.Builtin = HolidayList(s)
		}
	}
	dates := map[Date]string{}
	if d := f["dates"]; d != nil {
		for i, it := range p.list(d.v, "calendar.holidays.dates") {
			path := index("calendar.holidays.dates", i)
			s, ok := p.scalar(it, path, "a date (YYYY-MM-DD)")
			if !ok {
				continue
			}
			day, err := ParseDate(s)
			if err != nil {
				p.fail(it.Line, path, "%v", err)
				continue
			}
			dates[day] = "listed holiday"
		}
	}
	if ic := f["ical"]; ic != nil {
		if name, ok := p.str(ic.v, "calendar.holidays.ical"); ok {
			p.ical(ic.v.Line, name, c.Location, dates)
		}
	}
	if len(dates) > 0 {
		c.Dates = dates
	}
}

func (p *parser) ical(line int, name string, loc *time.Location, dates map[Date]string) {
	if p.read == nil {
		p.fail(line, "calendar.holidays.ical", "cannot read %q: no file access here (use LoadConfig)", clip(name))
		return
	}
	data, err := p.read(name)
	if err != nil {
		p.fail(line, "calendar.holidays.ical", "%v", err)
		return
	}
	days, err := ParseICal(data, name, loc)
	if err != nil {
		p.fail(line, "calendar.holidays.ical", "%v", err)
		return
	}
	for d, n := range days {
		if _, listed := dates[d]; !listed {
			dates[d] = n
		}
	}
}
