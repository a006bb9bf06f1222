package chaos

import (
	"os"
	"testing"
)

// FuzzParseConfig checks that ParseConfig never panics, returns a config or
// an error and never both, and that every config it accepts can be planned.
func FuzzParseConfig(f *testing.F) {
	example, err := os.ReadFile("testdata/chaos.yml")
	if err != nil {
		f.Fatal(err)
	}
	ics, err := os.ReadFile("testdata/holidays.ics")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(example),
		g0,
		g0 + "    mean_time_between_kills: 0.25\n    min_time_between_kills: 30m\n    max_terminations_per_day: 4\n",
		"calendar: {time_zone: Europe/Berlin, work_days: [sat, sun], start_hour: 0, end_hour: 24}\n" + g0,
		"calendar: {holidays: {ical: h.ics, dates: [2026-01-02]}}\n" + g0,
		"groups: [{name: k, backend: kubernetes, selector: {label_selector: 'a in (b,c),!d'}}]\n",
		"groups: [{name: d, backend: docker, selector: {labels: {a: ''}}, types: [{type: burn-cpu, duration: 5s}]}]\n",
		"on_demand: true\ndb: c.db\nretention: 30d\noutage: {url: 'http://h/o', timeout: 2s}\n" + g0,
		"retention: 2160h\noutage: {file: /tmp/outage}\n" + g0,
		"", "- x\n", "a: &x 1\nb: *x\n", "groups: [\n",
	} {
		f.Add([]byte(s), ics)
	}
	f.Fuzz(func(t *testing.T, data, icsData []byte) {
		read := func(string) ([]byte, error) { return icsData, nil }
		c, err := ParseConfig(data, "fuzz.yml", read)
		if err != nil {
			if c != nil {
				t.Fatalf("a config and an error: %v", err)
			}
			return
		}
		if c == nil || len(c.Groups) == 0 {
			t.Fatalf("accepted a config without groups: %+v", c)
		}
		for _, g := range c.Groups {
			if g.Name == "" || g.Backend == "" || len(g.Types) == 0 || g.DailyRate() <= 0 || g.MaxTerminationsPerDay < 1 {
				t.Fatalf("accepted a bad group: %+v", g)
			}
			g.Enabled = true
		}
		for i := range c.Groups {
			c.Groups[i].Enabled = true
		}
		PlanDays(c, d("2026-03-06"), 3, nil, 12)
	})
}
