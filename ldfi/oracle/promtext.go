package oracle

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// A selector picks series by name and, optionally, label values.
type selector struct {
	name   string
	labels map[string]string
}

// parseSelector reads NAME or NAME{label="value",...}.
func parseSelector(s string) (selector, error) {
	name, labels, err := parseSeries(s)
	if err != nil {
		return selector{}, fmt.Errorf("metric %q: %w", s, err)
	}
	return selector{name: name, labels: labels}, nil
}

// sum adds up the values of the series of a Prometheus text exposition that
// sel picks; found is false when none is there.
func sum(text []byte, sel selector) (total float64, found bool, err error) {
	for n, line := range bytes.Split(text, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		series, value, ok := cutValue(string(line))
		if !ok {
			return 0, false, fmt.Errorf("line %d: no value: %.60q", n+1, line)
		}
		name, labels, err := parseSeries(series)
		if err != nil {
			return 0, false, fmt.Errorf("line %d: %w", n+1, err)
		}
		if name != sel.name || !hasLabels(labels, sel.labels) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, false, fmt.Errorf("line %d: value %q: not a number", n+1, value)
		}
		total, found = total+v, true
	}
	return total, found, nil
}

// cutValue splits "series value [timestamp]" after the series, whose label
// values may hold spaces.
func cutValue(line string) (series, value string, ok bool) {
	end := strings.IndexAny(line, "{ \t")
	if end >= 0 && line[end] == '{' {
		close := labelsEnd(line[end:])
		if close < 0 {
			return "", "", false
		}
		end += close + 1
	}
	if end < 0 {
		return "", "", false
	}
	fields := strings.Fields(line[end:])
	if len(fields) == 0 || len(fields) > 2 {
		return "", "", false
	}
	return line[:end], fields[0], true
}

// labelsEnd returns the index of the '}' closing s's label set, which
// starts at s[0]; -1 when there is none.
func labelsEnd(s string) int {
	quoted := false
	for i := 1; i < len(s); i++ {
		switch {
		case quoted && s[i] == '\\':
			i++
		case s[i] == '"':
			quoted = !quoted
		case !quoted && s[i] == '}':
			return i
		}
	}
	return -1
}

// parseSeries reads NAME or NAME{label="value",...}.
func parseSeries(s string) (name string, labels map[string]string, err error) {
	name, rest, hasLabels := strings.Cut(s, "{")
	if !validName(name) {
		return "", nil, fmt.Errorf("bad metric name %q", name)
	}
	labels = map[string]string{}
	if !hasLabels {
		return name, labels, nil
	}
	if !strings.HasSuffix(rest, "}") {
		return "", nil, fmt.Errorf("labels of %s: no closing brace", name)
	}
	rest = rest[:len(rest)-1]
	for rest != "" {
		key, after, ok := strings.Cut(rest, "=")
		key = strings.TrimSpace(key)
		after = strings.TrimLeft(after, " ")
		if !ok || !validName(key) || !strings.HasPrefix(after, `"`) {
			return "", nil, fmt.Errorf("labels of %s: want label=\"value\" at %.40q", name, rest)
		}
		value, n, err := unquote(after)
		if err != nil {
			return "", nil, fmt.Errorf("labels of %s: %w", name, err)
		}
		labels[key] = value
		rest = strings.TrimLeft(after[n:], " ")
		if rest != "" {
			if rest[0] != ',' {
				return "", nil, fmt.Errorf("labels of %s: want a comma at %.40q", name, rest)
			}
			rest = strings.TrimLeft(rest[1:], " ")
		}
	}
	return name, labels, nil
}

// unquote reads the quoted label value at the start of s (escapes \\, \"
// and \n) and returns it and the bytes it took.
func unquote(s string) (string, int, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), i + 1, nil
		case '\\':
			if i+1 == len(s) {
				return "", 0, fmt.Errorf("unfinished escape")
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case '\\', '"':
				b.WriteByte(s[i])
			default:
				return "", 0, fmt.Errorf("unknown escape \\%c", s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, fmt.Errorf("unterminated label value")
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		letter := c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
