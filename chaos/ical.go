package chaos

import (
	"fmt"
	"strings"
	"time"
)

// maxEventDays bounds one all-day event; a longer one is most likely a typo
// in DTEND, and would otherwise silence the monkey for years.
const maxEventDays = 366

// ParseICal reads the holidays of an iCalendar file (RFC 5545): the date of
// every VEVENT's DTSTART, and for an all-day event every day up to its
// DTEND (which is exclusive). A DTSTART in UTC ("...Z") is moved to loc
// before its date is taken; a floating or TZID date-time keeps the date as
// written. Recurring events (RRULE, RDATE) are refused rather than taken for
// their first day only; cancelled events are left out. Errors name the
// file's line.
func ParseICal(data []byte, source string, loc *time.Location) (map[Date]string, error) {
	out := map[Date]string{}
	var ev *icalEvent
	depth, events := 0, 0 // depth counts components nested inside a VEVENT (VALARM)
	for _, ln := range unfoldICal(string(data)) {
		name, params, value, ok := splitICalLine(ln.text)
		if !ok {
			if strings.TrimSpace(ln.text) == "" {
				continue
			}
			return nil, fmt.Errorf("%s:%d: not an iCalendar line (NAME:value): %q", source, ln.line, clip(ln.text))
		}
		switch {
		case name == "BEGIN" && strings.EqualFold(value, "VEVENT"):
			if ev != nil {
				return nil, fmt.Errorf("%s:%d: VEVENT inside a VEVENT", source, ln.line)
			}
			ev = &icalEvent{line: ln.line}
		case ev == nil:
			// Outside events: VCALENDAR, VTIMEZONE and their properties.
		case name == "BEGIN":
			depth++
		case name == "END" && depth > 0:
			depth--
		case depth > 0:
			// A property of a VALARM or other nested component.
		case name == "END" && strings.EqualFold(value, "VEVENT"):
			if err := ev.addTo(out, source, loc); err != nil {
				return nil, err
			}
			ev, events = nil, events+1
		case name == "DTSTART", name == "DTEND":
			d, allDay, err := parseICalDate(value, params, loc)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %s: %v", source, ln.line, name, err)
			}
			if name == "DTSTART" {
				ev.start, ev.allDay, ev.hasStart = d, allDay, true
			} else {
				ev.end, ev.endAllDay, ev.hasEnd = d, allDay, true
			}
		case name == "RRULE", name == "RDATE":
			return nil, fmt.Errorf("%s:%d: %s: recurring events are not supported; list each day as its own event", source, ln.line, name)
		case name == "SUMMARY":
			ev.summary = unescapeICal(value)
		case name == "STATUS":
			ev.cancelled = strings.EqualFold(value, "CANCELLED")
		}
	}
	if ev != nil {
		return nil, fmt.Errorf("%s:%d: VEVENT without END:VEVENT", source, ev.line)
	}
	if events == 0 {
		return nil, fmt.Errorf("%s: no events (BEGIN:VEVENT) found", source)
	}
	return out, nil
}

type icalEvent struct {
	line              int
	start, end        Date
	hasStart, hasEnd  bool
	allDay, endAllDay bool
	cancelled         bool
	summary           string
}

func (ev *icalEvent) addTo(out map[Date]string, source string, loc *time.Location) error {
	if !ev.hasStart {
		return fmt.Errorf("%s:%d: VEVENT without DTSTART", source, ev.line)
	}
	if ev.cancelled {
		return nil
	}
	name := ev.summary
	if name == "" {
		name = "iCalendar event"
	}
	days := 1
	if ev.hasEnd && ev.allDay && ev.endAllDay {
		days = daysBetween(ev.start, ev.end)
		if days > maxEventDays {
			return fmt.Errorf("%s:%d: VEVENT lasts %d days (DTSTART %s, DTEND %s); at most %d are accepted", source, ev.line, days, ev.start, ev.end, maxEventDays)
		}
		days = max(days, 1)
	}
	for i := range days {
		d := ev.start.AddDays(i)
		if _, dup := out[d]; !dup {
			out[d] = name
		}
	}
	return nil
}

type icalLine struct {
	line int
	text string
}

// unfoldICal joins continuation lines (a line break followed by a space or a
// tab) and remembers where each logical line began.
func unfoldICal(s string) []icalLine {
	var out []icalLine
	for i, raw := range strings.Split(s, "\n") {
		raw = strings.TrimSuffix(raw, "\r")
		if len(out) > 0 && raw != "" && (raw[0] == ' ' || raw[0] == '\t') {
			out[len(out)-1].text += raw[1:]
			continue
		}
		out = append(out, icalLine{line: i + 1, text: raw})
	}
	return out
}

// splitICalLine splits NAME;PARAM=x;PARAM="a:b":value at the first colon
// outside quotes.
func splitICalLine(s string) (name string, params map[string]string, value string, ok bool) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ':':
			if quoted {
				continue
			}
			head := strings.Split(s[:i], ";")
			name = strings.ToUpper(strings.TrimSpace(head[0]))
			if name == "" {
				return "", nil, "", false
			}
			params = map[string]string{}
			for _, p := range head[1:] {
				k, v, _ := strings.Cut(p, "=")
				params[strings.ToUpper(k)] = strings.Trim(v, `"`)
			}
			return name, params, strings.TrimSpace(s[i+1:]), true
		}
	}
	return "", nil, "", false
}

// parseICalDate reads a DATE (20261225) or DATE-TIME (20261225T090000,
// optionally with Z) value and returns its date.
func parseICalDate(value string, params map[string]string, loc *time.Location) (Date, bool, error) {
	if strings.EqualFold(params["VALUE"], "DATE") || len(value) == 8 {
		t, err := time.Parse("20060102", value)
		if err != nil {
			return Date{}, false, fmt.Errorf("%q is not a date (YYYYMMDD)", clip(value))
		}
		return DateOf(t), true, nil
	}
	if v, ok := strings.CutSuffix(value, "Z"); ok {
		t, err := time.Parse("20060102T150405", v)
		if err != nil {
			return Date{}, false, fmt.Errorf("%q is not a date-time (YYYYMMDDTHHMMSSZ)", clip(value))
		}
		return DateOf(t.In(loc)), false, nil
	}
	t, err := time.Parse("20060102T150405", value)
	if err != nil {
		return Date{}, false, fmt.Errorf("%q is not a date-time (YYYYMMDDTHHMMSS)", clip(value))
	}
	return DateOf(t), false, nil
}

func unescapeICal(s string) string {
	return strings.NewReplacer(`\n`, " ", `\N`, " ", `\,`, ",", `\;`, ";", `\\`, `\`).Replace(s)
}

// clip shortens what an error echoes back.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
