package chaos

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadExample(t *testing.T) {
	c, err := LoadConfig("testdata/chaos.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Leashed || c.Mode != OptIn || c.Calendar.Zone != "America/Los_Angeles" {
		t.Errorf("top level: %+v", c)
	}
	cal := c.Calendar
	for day, want := range map[string]string{
		"2026-12-24": "listed holiday",
		"2026-03-02": "Spring offsite",
		"2026-03-03": "Spring offsite",
		"2026-03-04": "",                    // DTEND is exclusive
		"2026-04-14": "Game day, all hands", // 06:00Z is the evening before in Los Angeles
		"2026-05-20": "Release day",         // folded line, TZID date as written
		"2026-06-01": "",                    // cancelled
		"2026-11-26": "Thanksgiving Day",
	} {
		if got := cal.HolidayName(d(day)); got != want {
			t.Errorf("HolidayName(%s) = %q, want %q", day, got, want)
		}
	}
	if len(c.Groups) != 3 {
		t.Fatalf("%d groups", len(c.Groups))
	}
	lab, cache, web := c.Groups[0], c.Groups[1], c.Groups[2]
	eq(t, "lab selector", lab.Selector, Selector{DC: "dc1", Rack: "rack1"})
	eq(t, "lab types", lab.Types, []Action{{Kind: Terminate}, {Kind: Pause, Duration: 30 * time.Second}})
	eq(t, "lab exceptions", lab.Exceptions, []Exception{{Pattern: "dc1-rack1-2"}, {Key: "node", Pattern: "*-9"}})
	eq(t, "lab rate", lab.DailyRate(), 0.5)
	eq(t, "cache labels", cache.Selector.Labels, map[string]string{"app": "cache", "tier": ""})
	eq(t, "cache rate", cache.DailyRate(), 0.2)
	eq(t, "cache gap", cache.MinTimeBetweenKills, Gap{WorkDays: 1})
	eq(t, "web enabled", web.Enabled, false)
	eq(t, "web namespace", web.Selector.Namespace, "shop")
	eq(t, "web requirements", web.Selector.Requirements, []Requirement{
		{Key: "app", Op: OpEquals, Values: []string{"web"}},
		{Key: "tier", Op: OpIn, Values: []string{"front", "edge"}},
		{Key: "canary", Op: OpNotExists},
	})
	eq(t, "web gap", web.MinTimeBetweenKills, Gap{Duration: time.Hour})
	n, p := web.Trials()
	eq(t, "web trials", [2]float64{float64(n), p}, [2]float64{2, 1})
}

func TestDefaults(t *testing.T) {
	c, err := ParseConfig([]byte("groups:\n  - name: g\n    backend: lab\n"), "min.yml", nil)
	if err != nil {
		t.Fatal(err)
	}
	cal := c.Calendar
	eq(t, "leashed", c.Leashed, true)
	eq(t, "mode", c.Mode, OptIn)
	eq(t, "zone", cal.Zone, "America/Los_Angeles")
	eq(t, "hours", [2]int{cal.StartHour, cal.EndHour}, [2]int{9, 15})
	eq(t, "work days", cal.WorkDays, [7]bool{false, true, true, true, true, true, false})
	eq(t, "holidays", cal.Builtin, USFederal)
	g := c.Groups[0]
	eq(t, "enabled", g.Enabled, false) // opt-in
	eq(t, "mtbk", g.MeanTimeBetweenKills, 5.0)
	eq(t, "gap", g.MinTimeBetweenKills, Gap{WorkDays: 1})
	eq(t, "max", g.MaxTerminationsPerDay, 1)
	eq(t, "types", g.Types, []Action{{Kind: Terminate}})
	eq(t, "selector", g.Selector.String(), "the whole lab")
	eq(t, "on_demand", c.OnDemand, false)
	eq(t, "db", c.DB, "chaos.db")
	eq(t, "db path", c.Path(c.DB), "chaos.db")
	eq(t, "retention", c.Retention, 365*24*time.Hour)
	eq(t, "outage", c.Outage, Outage{})

	c, err = ParseConfig([]byte("on_demand: true\ndb: /var/lib/troop/chaos.db\nretention: 90d\noutage: {url: http://status.local/outage}\n"+g0), "/etc/troop/chaos.yml", nil)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "on_demand set", c.OnDemand, true)
	eq(t, "absolute db", c.Path(c.DB), "/var/lib/troop/chaos.db")
	eq(t, "retention 90d", c.Retention, 90*24*time.Hour)
	eq(t, "outage url", c.Outage, Outage{URL: "http://status.local/outage", Timeout: 5 * time.Second})
	c, _ = ParseConfig([]byte("retention: 0\noutage: {file: outage}\n"+g0), "/etc/troop/chaos.yml", nil)
	eq(t, "retention 0", c.Retention, time.Duration(0))
	eq(t, "outage file relative", c.Path(c.Outage.File), "/etc/troop/outage")

	c, err = ParseConfig([]byte("mode: opt-out\ngroups: [{name: g, backend: kubernetes, selector: {label_selector: app}}, {name: l, backend: lab, types: [pause]}]\n"), "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "opt-out enabled", c.Groups[0].Enabled, true)
	eq(t, "namespace", c.Groups[0].Selector.Namespace, "default")
	eq(t, "pause default", c.Groups[1].Types, []Action{{Kind: Pause, Duration: time.Minute}})

	c, err = ParseConfig([]byte(g0+`    types:
      - partition
      - {type: partition, partition: bridge, duration: 30s}
      - {type: loss, percent: 20}
      - {type: delay, delay: 50ms, jitter: 10ms, duration: 2m}
      - {type: clock-skew, offset: -2s}
      - {type: clock-skew, rate: 0.01}
`), "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "network and clock types", c.Groups[0].Types, []Action{
		{Kind: Partition, Duration: time.Minute, Partition: Isolate},
		{Kind: Partition, Duration: 30 * time.Second, Partition: Bridge},
		{Kind: Loss, Duration: time.Minute, Percent: 20},
		{Kind: Delay, Duration: 2 * time.Minute, Delay: 50 * time.Millisecond, Jitter: 10 * time.Millisecond},
		{Kind: ClockSkew, Duration: time.Minute, Offset: -2 * time.Second},
		{Kind: ClockSkew, Duration: time.Minute, Rate: 0.01},
	})
	var names []string
	for _, a := range c.Groups[0].Types {
		names = append(names, a.String())
	}
	eq(t, "their names", names, []string{"partition isolate 1m0s", "partition bridge 30s", "loss 20% 1m0s",
		"delay 50ms±10ms 2m0s", "clock-skew -2s 1m0s", "clock-skew rate 0.01 1m0s"})
}

func eq(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: got %#v, want %#v", what, got, want)
	}
}

const g0 = "groups:\n  - name: g\n    backend: lab\n"

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       string // the first error, in full
	}{
		{"mtbk zero", g0 + "    mean_time_between_kills: 0\n",
			"chaos.yml:4: groups[0].mean_time_between_kills: must be > 0 work days"},
		{"second group", g0 + "  - name: h\n    backend: lab\n    mean_time_between_kills: -1\n",
			`chaos.yml:6: groups[1].mean_time_between_kills: must be a plain decimal number such as 0.2 or 5, not "-1"`},
		{"both rates", g0 + "    probability: 0.5\n    mean_time_between_kills: 2\n",
			"chaos.yml:5: groups[0].mean_time_between_kills: set either probability (per work day) or mean_time_between_kills (in work days), not both"},
		{"probability above 1", g0 + "    probability: 2\n",
			"chaos.yml:4: groups[0].probability: must be > 0 and at most 1 (the chance of a kill per work day); for more than one kill a day use mean_time_between_kills below 1; to stop the group use enabled: false"},
		{"unknown key", g0 + "    mean_time_between_kill: 2\n",
			`chaos.yml:4: groups[0].mean_time_between_kill: unknown key (did you mean "mean_time_between_kills"?)`},
		{"chaos monkey 2 name", g0 + "    meanTimeBetweenKillsInWorkDays: 2\n",
			`chaos.yml:4: groups[0].meanTimeBetweenKillsInWorkDays: unknown key (did you mean "mean_time_between_kills"?)`},
		{"simian army name", g0 + "    maxTerminationsPerDay: 2\n",
			`chaos.yml:4: groups[0].maxTerminationsPerDay: unknown key (did you mean "max_terminations_per_day"?)`},
		{"top-level typo", "leashd: false\n" + g0,
			`chaos.yml:1: leashd: unknown key (did you mean "leashed"?)`},
		{"far from any key", "colour: red\n" + g0,
			"chaos.yml:1: colour: unknown key (known keys here: leashed, mode, token, on_demand, db, retention, outage, calendar, groups)"},
		{"retention word", "retention: forever\n" + g0,
			`chaos.yml:1: retention: must be a number of days such as 90d, a duration such as 2160h, or 0 (forever), not "forever"`},
		{"retention too short", "retention: 5m\n" + g0,
			"chaos.yml:1: retention: must be 0 (forever) or from 1h to 36500d, not 5m0s"},
		{"db with query", "db: x.db?mode=ro\n" + g0,
			"chaos.yml:1: db: must be a file name without '?' or '#'"},
		{"outage both", "outage: {file: /tmp/o, url: http://x/}\n" + g0,
			"chaos.yml:1: outage: set file or url, not both"},
		{"outage empty", "outage: {}\n" + g0,
			"chaos.yml:1: outage: set file (an outage while it exists) or url (an outage while it answers 200)"},
		{"outage url scheme", "outage: {url: ftp://x/}\n" + g0,
			`chaos.yml:1: outage.url: must be an http:// or https:// URL, not "ftp://x/"`},
		{"outage timeout without url", "outage: {file: o, timeout: 1s}\n" + g0,
			"chaos.yml:1: outage.timeout: only applies to outage.url"},
		{"on_demand not bool", "on_demand: maybe\n" + g0,
			`chaos.yml:1: on_demand: must be true or false, not "maybe"`},
		{"calendar typo", "calendar:\n  timezone: UTC\n" + g0,
			`chaos.yml:2: calendar.timezone: unknown key (did you mean "time_zone"?)`},
		{"bad zone", "calendar:\n  time_zone: Mars/Olympus\n" + g0,
			`chaos.yml:2: calendar.time_zone: "Mars/Olympus" is not a known IANA time zone (e.g. America/Los_Angeles, Europe/Berlin, UTC)`},
		{"local zone", "calendar:\n  time_zone: Local\n" + g0,
			`chaos.yml:2: calendar.time_zone: "Local" depends on the machine; name the zone, e.g. America/Los_Angeles or UTC`},
		{"hours reversed", "calendar:\n  start_hour: 15\n  end_hour: 9\n" + g0,
			"chaos.yml:3: calendar.end_hour: must be after start_hour (15): kills happen at or after start_hour:00 and before end_hour:00"},
		{"start after default end", "calendar:\n  start_hour: 16\n" + g0,
			"chaos.yml:2: calendar.start_hour: must be before end_hour (default 15)"},
		{"hour out of range", "calendar:\n  end_hour: 25\n" + g0,
			"chaos.yml:2: calendar.end_hour: must be from 1 to 24, not 25"},
		{"work day typo", "calendar:\n  work_days: [mon, tues]\n" + g0,
			`chaos.yml:2: calendar.work_days[1]: "tues" is not a day (mon, tue, wed, thu, fri, sat, sun) (did you mean "tue"?)`},
		{"work days empty", "calendar:\n  work_days: []\n" + g0,
			"chaos.yml:2: calendar.work_days: is empty: the monkey would never run; disable the groups instead"},
		{"bad date", "calendar:\n  holidays:\n    dates: [2026-02-30]\n" + g0,
			`chaos.yml:3: calendar.holidays.dates[0]: "2026-02-30" is not a date in the form YYYY-MM-DD`},
		{"builtin typo", "calendar:\n  holidays:\n    builtin: us_federal\n" + g0,
			`chaos.yml:3: calendar.holidays.builtin: "us_federal" is not one of us-federal, simian-army, none (did you mean "us-federal"?)`},
		{"ical without reader", "calendar:\n  holidays:\n    ical: h.ics\n" + g0,
			`chaos.yml:3: calendar.holidays.ical: cannot read "h.ics": no file access here (use LoadConfig)`},
		{"no groups", "leashed: false\n",
			"chaos.yml:1: groups: missing: list the groups the monkey may act on"},
		{"empty file", "",
			"chaos.yml:1: groups: missing: the file is empty; list the groups the monkey may act on"},
		{"empty groups", "groups: []\n",
			"chaos.yml:1: groups: is empty: list the groups the monkey may act on"},
		{"not a mapping", "- a\n",
			`chaos.yml:1: the config must be a mapping of keys (leashed, mode, calendar, groups, ...), not a list`},
		{"yaml syntax", "groups: [\n",
			"chaos.yml:1: yaml: did not find expected node content"},
		{"alias", "x: &a 1\n" + g0 + "    max_terminations_per_day: *a\n",
			"chaos.yml:5: YAML aliases (*a) are not supported; write the value out"},
		{"set twice", g0 + "    enabled: true\n    enabled: false\n",
			"chaos.yml:5: groups[0].enabled: set twice (first on line 4)"},
		{"no value", g0 + "    probability:\n",
			"chaos.yml:4: groups[0].probability: has no value; leave the key out to get its default"},
		{"bool yes", "leashed: yes\n" + g0,
			`chaos.yml:1: leashed: must be true or false, not "yes"`},
		{"mode typo", "mode: optout\n" + g0,
			`chaos.yml:1: mode: "optout" is not one of opt-in, opt-out (did you mean "opt-out"?)`},
		{"short token", "token: abc\n" + g0,
			"chaos.yml:1: token: must be at least 16 characters (it has 3)"},
		{"missing name", "groups:\n  - backend: lab\n",
			"chaos.yml:2: groups[0].name: missing: every group needs a name"},
		{"duplicate name", g0 + "  - name: g\n    backend: lab\n",
			`chaos.yml:4: groups[1].name: "g" is already the name of a group (line 2)`},
		{"bad name", "groups:\n  - name: a b\n    backend: lab\n",
			`chaos.yml:2: groups[0].name: "a b": use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit`},
		{"backend typo", "groups:\n  - name: g\n    backend: kubernets\n",
			`chaos.yml:3: groups[0].backend: "kubernets" is not one of lab, docker, kubernetes (did you mean "kubernetes"?)`},
		{"selector key of another backend", g0 + "    selector: {labels: {a: b}}\n",
			"chaos.yml:4: groups[0].selector.labels: unknown key (known keys here: dc, rack, node)"},
		{"docker without selector", "groups:\n  - name: g\n    backend: docker\n",
			"chaos.yml:2: groups[0].selector: missing: docker groups select containers by labels, e.g. selector: {labels: {app: cache}}"},
		{"docker empty labels", "groups:\n  - name: g\n    backend: docker\n    selector: {labels: {}}\n",
			"chaos.yml:4: groups[0].selector.labels: is empty: an empty selector would select every container"},
		{"kubernetes selector syntax", "groups:\n  - name: g\n    backend: kubernetes\n    selector: {label_selector: 'app in (a,b'}\n",
			`chaos.yml:4: groups[0].selector.label_selector: '(' without ')' in "app in (a,b"`},
		{"kubernetes bad namespace", "groups:\n  - name: g\n    backend: kubernetes\n    selector: {namespace: Shop, label_selector: app}\n",
			`chaos.yml:4: groups[0].selector.namespace: "Shop" is not a namespace name (lower-case letters, digits and '-', at most 63)`},
		{"kubernetes pause", "groups:\n  - name: g\n    backend: kubernetes\n    selector: {label_selector: app}\n    types: [restart, {type: burn-cpu, duration: 1m}]\n",
			`chaos.yml:5: groups[0].types[1]: burn-cpu is not supported by the kubernetes backend (a burner would need the pods/exec streams); use terminate, stop or restart`},
		{"kubernetes without label selector", "groups:\n  - name: g\n    backend: kubernetes\n    selector: {namespace: shop}\n",
			"chaos.yml:4: groups[0].selector.label_selector: missing: a Kubernetes label selector such as app=cache; an empty one would select every pod of the namespace"},
		{"type typo", g0 + "    types: [terminate, burncpu]\n",
			`chaos.yml:4: groups[0].types[1]: "burncpu" is not one of terminate, stop, pause, restart, burn-cpu, partition, loss, delay, clock-skew (did you mean "burn-cpu"?)`},
		{"duration on terminate", g0 + "    types:\n      - {type: terminate, duration: 1m}\n",
			"chaos.yml:5: groups[0].types[0].duration: only pause, burn-cpu, partition, loss, delay and clock-skew take a duration; terminate is over when it is done"},
		{"loss over 100", g0 + "    types:\n      - {type: loss, percent: 120}\n",
			`chaos.yml:5: groups[0].types[0]: loss: percent: "120": want a percentage more than 0 and at most 100`},
		{"loss of 0", g0 + "    types:\n      - {type: loss, percent: 0}\n",
			`chaos.yml:5: groups[0].types[0]: loss: percent: "0": want a percentage more than 0 and at most 100`},
		{"loss without percent", g0 + "    types: [loss]\n",
			"chaos.yml:4: groups[0].types[0]: loss: no percent: the share of packets to drop, e.g. 20"},
		{"a parameter of another kind", g0 + "    types:\n      - {type: delay, delay: 50ms, percent: 5}\n",
			"chaos.yml:5: groups[0].types[0].percent: delay takes no percent (its parameters: delay, jitter)"},
		{"a parameter of no kind", g0 + "    types:\n      - {type: delay, latency: 50ms}\n",
			"chaos.yml:5: groups[0].types[0].latency: unknown key (known keys here: type, duration, partition, percent, delay, jitter, offset, rate)"},
		{"jitter over delay", g0 + "    types:\n      - {type: delay, delay: 50ms, jitter: 60ms}\n",
			"chaos.yml:5: groups[0].types[0]: delay: jitter 60ms is more than the delay 50ms: a packet cannot leave before it is sent"},
		{"partition mode typo", g0 + "    types:\n      - {type: partition, partition: half}\n",
			`chaos.yml:5: groups[0].types[0]: partition: partition: "half": want isolate, halves, one-way or bridge`},
		{"clock-skew without offset or rate", g0 + "    types: [clock-skew]\n",
			"chaos.yml:4: groups[0].types[0]: clock-skew: no offset and no rate: give a jump (offset, e.g. 2s), a drift (rate, e.g. 0.01) or both"},
		{"kubernetes partition", "groups:\n  - name: g\n    backend: kubernetes\n    selector: {label_selector: app}\n    types: [partition]\n",
			`chaos.yml:5: groups[0].types[0]: partition is not supported by the kubernetes backend (it does not reach a pod's network namespace); use terminate, stop or restart`},
		{"duration too long", g0 + "    types:\n      - type: pause\n        duration: 2h\n",
			"chaos.yml:6: groups[0].types[0].duration: must be from 1s to 1h0m0s, not 2h0m0s"},
		{"type twice", g0 + "    types: [stop, stop]\n",
			"chaos.yml:4: groups[0].types[1]: stop is listed twice (first on line 4)"},
		{"gap fraction", g0 + "    min_time_between_kills: 1.5\n",
			`chaos.yml:4: groups[0].min_time_between_kills: must be a whole number of work days (0, 1, 2, ...) or a duration such as 90m or 4h, not "1.5"`},
		{"max zero", g0 + "    max_terminations_per_day: 0\n",
			"chaos.yml:4: groups[0].max_terminations_per_day: must be from 1 to 1000, not 0"},
		{"rate over gap", g0 + "    mean_time_between_kills: 0.5\n    max_terminations_per_day: 2\n",
			"chaos.yml:4: groups[0].mean_time_between_kills: 0.5 asks for 2 kills a work day, but min_time_between_kills (1 work day) allows one; set min_time_between_kills to 0 or to a duration such as 1h"},
		{"rate over max", g0 + "    mean_time_between_kills: 0.25\n    min_time_between_kills: 0\n",
			"chaos.yml:4: groups[0].mean_time_between_kills: 0.25 asks for up to 4 kills a work day, but max_terminations_per_day is 1; raise it to at least 4"},
		{"empty exception", g0 + "    exceptions: ['']\n",
			"chaos.yml:4: groups[0].exceptions[0]: empty exception"},
		{"second document", g0 + "---\nx: 1\n",
			"chaos.yml:4: a second YAML document (---): the config is one document"},
		{"custom tag", "leashed: !secret true\n" + g0,
			"chaos.yml:1: custom YAML tags (!secret) are not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.yaml), "chaos.yml", nil)
			if err == nil {
				t.Fatalf("no error; config %+v", c)
			}
			if c != nil {
				t.Error("a config came back with the error")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *ConfigError: %v", err, err)
			}
			if ce.Error() != tc.want {
				t.Errorf("got  %s\nwant %s", ce.Error(), tc.want)
			}
		})
	}
}

func TestSeveralErrorsInFileOrder(t *testing.T) {
	_, err := ParseConfig([]byte("groups:\n  - name: g\n    backend: lab\n    probability: 3\n    typez: [stop]\nmode: x\n"), "c.yml", nil)
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "c.yml:4:") || !strings.HasPrefix(lines[1], "c.yml:5:") || !strings.HasPrefix(lines[2], "c.yml:6:") {
		t.Errorf("got:\n%v", err)
	}
}

func TestTokenNeverEchoed(t *testing.T) {
	_, err := ParseConfig([]byte("token: 'secret with space!'\n"+g0), "c.yml", nil)
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("got %v", err)
	}
}

func TestICalErrors(t *testing.T) {
	loc := time.UTC
	for _, tc := range []struct{ ics, want string }{
		{"BEGIN:VEVENT\nDTSTART:2026\nEND:VEVENT\n", `h.ics:2: DTSTART: "2026" is not a date-time (YYYYMMDDTHHMMSS)`},
		{"BEGIN:VEVENT\nDTSTART;VALUE=DATE:20261301\nEND:VEVENT\n", `h.ics:2: DTSTART: "20261301" is not a date (YYYYMMDD)`},
		{"BEGIN:VEVENT\nSUMMARY:x\nEND:VEVENT\n", "h.ics:1: VEVENT without DTSTART"},
		{"BEGIN:VEVENT\nDTSTART:20260101\nRRULE:FREQ=YEARLY\nEND:VEVENT\n", "h.ics:3: RRULE: recurring events are not supported; list each day as its own event"},
		{"BEGIN:VEVENT\nDTSTART:20260101\n", "h.ics:1: VEVENT without END:VEVENT"},
		{"BEGIN:VCALENDAR\nEND:VCALENDAR\n", "h.ics: no events (BEGIN:VEVENT) found"},
		{"hello\n", `h.ics:1: not an iCalendar line (NAME:value): "hello"`},
		{"BEGIN:VEVENT\nDTSTART;VALUE=DATE:20260101\nDTEND;VALUE=DATE:20280101\nEND:VEVENT\n", "h.ics:1: VEVENT lasts 730 days (DTSTART 2026-01-01, DTEND 2028-01-01); at most 366 are accepted"},
	} {
		_, err := ParseICal([]byte(tc.ics), "h.ics", loc)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\ngot  %v\nwant %s", tc.ics, err, tc.want)
		}
	}
	// CRLF line ends and folding with a tab.
	days, err := ParseICal([]byte("BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:2026\r\n\t0704\r\nEND:VEVENT\r\n"), "h.ics", loc)
	if err != nil || days[d("2026-07-04")] == "" {
		t.Errorf("folded CRLF: %v %v", days, err)
	}
}

func TestLoadConfigICalError(t *testing.T) {
	dir := t.TempDir()
	cfg := "calendar:\n  holidays:\n    ical: missing.ics\n" + g0
	if err := os.WriteFile(dir+"/c.yml", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(dir + "/c.yml")
	if err == nil || !strings.Contains(err.Error(), "c.yml:3: calendar.holidays.ical: open ") || !strings.Contains(err.Error(), "missing.ics") {
		t.Errorf("got %v", err)
	}
}
