package chaos

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustParse(t testing.TB, y string) *Config {
	t.Helper()
	c, err := ParseConfig([]byte(y), "test.yml", nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	return c
}

// oneGroup is a config with one enabled lab group g with the extra keys.
func oneGroup(t testing.TB, calendar string, keys ...string) *Config {
	y := calendar + "groups:\n  - name: g\n    backend: lab\n    enabled: true\n"
	for _, k := range keys {
		y += "    " + k + "\n"
	}
	return mustParse(t, y)
}

// sim is the outcome of planning consecutive days.
type sim struct {
	cfg      *Config
	workDays int
	kills    []PlannedKill // executed ones, in time order
	skipped  []PlannedKill
	workIdx  map[Date]int // index of each work day
}

// simulate plans day after day from 2026-01-01 until workDays work days have
// passed, feeding each day's kills back as history. Only the last few kills
// are passed on, as the daemon's records query would: nothing older can
// matter for a gap of at most a few work days or for today's count.
func simulate(t testing.TB, cfg *Config, workDays int, seed uint64) sim {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0))
	s := sim{cfg: cfg, workIdx: map[Date]int{}}
	var history []Termination
	for day := d("2026-01-01"); s.workDays < workDays; day = day.AddDays(1) {
		if cfg.Calendar.IsWorkDay(day) {
			s.workIdx[day] = s.workDays
			s.workDays++
		}
		for _, k := range PlanDay(cfg, day, history, rng) {
			if k.Skip != "" {
				s.skipped = append(s.skipped, k)
				continue
			}
			s.kills = append(s.kills, k)
			history = append(history, k.termination(cfg.Leashed))
		}
		if len(history) > 64 {
			history = history[len(history)-32:]
		}
	}
	return s
}

// meanGap is the mean number of work days between consecutive kills.
func (s sim) meanGap() float64 {
	if len(s.kills) < 2 {
		return math.NaN()
	}
	first, last := s.kills[0], s.kills[len(s.kills)-1]
	return float64(s.workIdx[last.Day]-s.workIdx[first.Day]) / float64(len(s.kills)-1)
}

func within(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*want {
		t.Errorf("%s = %.4f, want %.4f within %.0f%%", what, got, want, rel*100)
	} else {
		t.Logf("%s = %.4f (want %.4f)", what, got, want)
	}
}

// The tolerances: 5% is at least 3 standard deviations of the measured
// mean for the run lengths below (10,000 work days while the daily rate is
// at least 0.3, 100,000 below), so a different seed would pass too.

func TestMeanTimeBetweenKills(t *testing.T) {
	for _, tc := range []struct {
		mtbk float64
		days int
	}{{1, 10_000}, {2, 10_000}, {3, 10_000}, {5, 100_000}, {10, 100_000}} {
		s := simulate(t, oneGroup(t, "", fmt.Sprintf("mean_time_between_kills: %g", tc.mtbk)), tc.days, 1)
		within(t, fmt.Sprintf("MTBK %g: mean gap", tc.mtbk), s.meanGap(), tc.mtbk, 0.05)
		s.checkInvariants(t)
	}
}

func TestProbability(t *testing.T) {
	for _, tc := range []struct {
		p    float64
		days int
	}{{1, 10_000}, {0.5, 10_000}, {0.3, 10_000}, {0.2, 100_000}} {
		s := simulate(t, oneGroup(t, "", fmt.Sprintf("probability: %g", tc.p)), tc.days, 2)
		within(t, fmt.Sprintf("p %g: kills per work day", tc.p), float64(len(s.kills))/float64(s.workDays), tc.p, 0.05)
		s.checkInvariants(t)
	}
}

// With a gap of N work days, the days right after a kill cannot have one, so
// the expected gap is N-1 + MTBK (for N >= 1), as docs/chaos.md says.
func TestMinGapLengthensMean(t *testing.T) {
	for _, tc := range []struct {
		mtbk float64
		gap  int
	}{{2, 2}, {2, 3}, {3, 5}} {
		s := simulate(t, oneGroup(t, "", fmt.Sprintf("mean_time_between_kills: %g", tc.mtbk),
			fmt.Sprintf("min_time_between_kills: %d", tc.gap)), 10_000, 3)
		within(t, fmt.Sprintf("MTBK %g gap %d: mean gap", tc.mtbk, tc.gap), s.meanGap(), float64(tc.gap-1)+tc.mtbk, 0.05)
		s.checkInvariants(t)
		if len(s.skipped) == 0 {
			t.Error("no kill was skipped for the gap")
		}
		for _, k := range s.skipped {
			if k.Skip != MinGap {
				t.Errorf("skipped for %s", k.Skip)
			}
		}
	}
}

func TestSeveralKillsADay(t *testing.T) {
	// 1/0.4 = 2.5 kills a day: three coins of 5/6 each.
	s := simulate(t, oneGroup(t, "", "mean_time_between_kills: 0.4", "min_time_between_kills: 0", "max_terminations_per_day: 3"), 10_000, 4)
	within(t, "kills per work day", float64(len(s.kills))/float64(s.workDays), 2.5, 0.05)
	within(t, "mean gap", s.meanGap(), 0.4, 0.05)
	s.checkInvariants(t)

	// A duration gap thins kills out within the day, and is never broken.
	s = simulate(t, oneGroup(t, "", "mean_time_between_kills: 0.25", "min_time_between_kills: 2h", "max_terminations_per_day: 4"), 2_000, 5)
	s.checkInvariants(t)
	if len(s.skipped) == 0 {
		t.Error("four kills in six hours with a 2h gap: none skipped")
	}
	// A daily maximum below the trials would be a config error, so plans
	// only meet it through history: see TestPlanDayHonoursHistory.
}

// checkInvariants checks every kill against the config without going through
// the code under test: on a work day (weekday, not a federal holiday or a
// listed date), inside the hours on the local clock, at most the daily
// maximum, and at least the minimum gap after the previous one.
func (s sim) checkInvariants(t *testing.T) {
	t.Helper()
	cal := s.cfg.Calendar
	g := s.cfg.Groups[0]
	perDay := map[Date]int{}
	for i, k := range s.kills {
		local := k.At.In(cal.Location)
		day := DateOf(local)
		if day != k.Day {
			t.Fatalf("kill %v is not on its day %s", local, k.Day)
		}
		if !cal.WorkDays[day.Weekday()] {
			t.Fatalf("kill on a %s: %v", day.Weekday(), local)
		}
		for _, h := range cal.Builtin.rawHolidays(day.Year) {
			if h.Date == day {
				t.Fatalf("kill on %s: %v", h.Name, local)
			}
		}
		for _, h := range cal.Builtin.rawHolidays(day.Year + 1) {
			if h.Date == day {
				t.Fatalf("kill on %s: %v", h.Name, local)
			}
		}
		if _, listed := cal.Dates[day]; listed {
			t.Fatalf("kill on a listed holiday: %v", local)
		}
		if h := local.Hour(); h < cal.StartHour || (cal.EndHour < 24 && h >= cal.EndHour) {
			t.Fatalf("kill at %v, outside %d-%d", local, cal.StartHour, cal.EndHour)
		}
		perDay[day]++
		if perDay[day] > g.MaxTerminationsPerDay {
			t.Fatalf("%d kills on %s, max %d", perDay[day], day, g.MaxTerminationsPerDay)
		}
		if i == 0 {
			continue
		}
		prev := s.kills[i-1]
		if prev.At.After(k.At) {
			t.Fatalf("kills out of order: %v then %v", prev.At, k.At)
		}
		if gap := g.MinTimeBetweenKills; gap.Duration > 0 {
			if k.At.Sub(prev.At) < gap.Duration {
				t.Fatalf("kills %v and %v closer than %v", prev.At, k.At, gap.Duration)
			}
		} else if n := s.workIdx[k.Day] - s.workIdx[prev.Day]; n < gap.WorkDays {
			t.Fatalf("kills on %s and %s, %d work days apart, min %d", prev.Day, k.Day, n, gap.WorkDays)
		}
	}
}

// Every kill lands inside the hours on the local clock, on its own date,
// across the DST changes of Los Angeles (2026-03-08, 2026-11-01) and Berlin
// (2026-03-29, 2026-10-25), with every day a work day and windows set
// around the changes.
func TestKillsInsideHoursAcrossDST(t *testing.T) {
	for _, zone := range []string{"America/Los_Angeles", "Europe/Berlin"} {
		for _, hours := range [][2]int{{0, 24}, {1, 4}, {2, 3}, {1, 2}, {3, 4}, {9, 15}} {
			cal := fmt.Sprintf("calendar:\n  time_zone: %s\n  work_days: [mon, tue, wed, thu, fri, sat, sun]\n  start_hour: %d\n  end_hour: %d\n  holidays: {builtin: none}\n", zone, hours[0], hours[1])
			cfg := oneGroup(t, cal, "mean_time_between_kills: 0.05", "min_time_between_kills: 0", "max_terminations_per_day: 20")
			s := simulate(t, cfg, 730, 6)
			s.checkInvariants(t)
			if want := 730 * 20 * 0.9; float64(len(s.kills)) < want {
				t.Errorf("%s %v: %d kills, want about %v", zone, hours, len(s.kills), 730*20)
			}
			// On the days of change, count the kills in each hour of the
			// local clock and in each UTC offset, to see that the windows
			// stretch and shrink as they should.
			for _, day := range []string{"2026-03-08", "2026-11-01", "2026-03-29", "2026-10-25"} {
				offsets := map[int]int{}
				for _, k := range s.kills {
					if k.Day == d(day) {
						_, off := k.At.Zone()
						offsets[off]++
					}
				}
				if zone == "America/Los_Angeles" && day == "2026-03-08" && hours == [2]int{2, 3} && len(offsets) != 0 {
					t.Errorf("kills in a window that does not exist: %v", offsets)
				}
				if zone == "Europe/Berlin" && day == "2026-10-25" && hours == [2]int{2, 3} && len(offsets) != 2 {
					t.Errorf("Berlin 02:00-03:00 on the fall-back day should see both 02:00 hours: %v", offsets)
				}
			}
		}
	}
}

func TestSameSeedSamePlan(t *testing.T) {
	cfg, err := LoadConfig("testdata/chaos.yml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Groups[2].Enabled = true
	plan := func(seed uint64) [][]PlannedKill {
		return PlanDays(cfg, d("2026-03-01"), 90, nil, seed)
	}
	a, b := plan(7), plan(7)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two plans")
	}
	if reflect.DeepEqual(a, plan(8)) {
		t.Fatal("two seeds gave one plan")
	}
	n := 0
	for _, day := range a {
		n += len(day)
	}
	if n < 50 {
		t.Fatalf("only %d kills in 90 days", n)
	}

	// A day's draws do not depend on the day the run started.
	late := PlanDays(cfg, d("2026-04-01"), 30, nil, 7)
	for i := range late {
		x, y := late[i], a[31+i]
		if len(x) != len(y) {
			t.Fatalf("%s: %d kills, %d when planned from March", d("2026-04-01").AddDays(i), len(x), len(y))
		}
		for j := range x {
			kx, ky := x[j], y[j]
			kx.Skip, ky.Skip = "", ""
			if kx != ky {
				t.Fatalf("%+v planned as %+v from March", kx, ky)
			}
		}
	}

	// Dropping a group leaves the other groups' plans as they were.
	only := func(plan [][]PlannedKill, group string) []PlannedKill {
		var out []PlannedKill
		for _, day := range plan {
			for _, k := range day {
				if k.Group == group {
					out = append(out, k)
				}
			}
		}
		return out
	}
	smaller := *cfg
	smaller.Groups = cfg.Groups[1:]
	c := PlanDays(&smaller, d("2026-03-01"), 90, nil, 7)
	for _, g := range []string{"cache", "web"} {
		if !reflect.DeepEqual(only(a, g), only(c, g)) {
			t.Errorf("group %s changed when another group was removed", g)
		}
	}
}

func TestPlanDayHonoursHistory(t *testing.T) {
	cfg := oneGroup(t, "", "probability: 1", "max_terminations_per_day: 1")
	day := d("2026-03-10")
	loc := cfg.Calendar.Location
	onDemand := Termination{Group: "g", Executed: time.Date(2026, 3, 10, 8, 0, 0, 0, loc), Outcome: Executed}
	plan := PlanDay(cfg, day, []Termination{onDemand}, rand.New(rand.NewPCG(1, 1)))
	if len(plan) != 1 || plan[0].Skip != MaxPerDay {
		t.Fatalf("plan after an on-demand kill: %+v", plan)
	}
	// A kill of another group, or one skipped for an outage, does not count.
	other := onDemand
	other.Group = "h"
	outage := onDemand
	outage.Outcome, outage.Reason = Skipped, InOutage
	plan = PlanDay(cfg, day, []Termination{other, outage}, rand.New(rand.NewPCG(1, 1)))
	if len(plan) != 1 || plan[0].Skip != "" {
		t.Fatalf("plan: %+v", plan)
	}
	// Days off and windows a DST change swallows plan nothing, and still
	// draw one number, so later days do not move.
	if p := PlanDay(cfg, d("2026-03-14"), nil, rand.New(rand.NewPCG(1, 1))); p != nil {
		t.Fatalf("plan on a Saturday: %+v", p)
	}
}

func TestAdmit(t *testing.T) {
	cfg := mustParse(t, `calendar:
  holidays: {dates: [2026-03-11]}
groups:
  - {name: g, backend: lab, enabled: true, min_time_between_kills: 2}
  - {name: off, backend: lab}
  - {name: h, backend: lab, enabled: true, mean_time_between_kills: 0.5, min_time_between_kills: 90m, max_terminations_per_day: 2}
`)
	loc := cfg.Calendar.Location
	at := func(day string, hour, min int) time.Time {
		x := d(day)
		return time.Date(x.Year, x.Month, x.Day, hour, min, 0, 0, loc)
	}
	kill := func(group string, tm time.Time, o Outcome, r Reason) Termination {
		return Termination{Group: group, Executed: tm, Outcome: o, Reason: r}
	}
	for _, tc := range []struct {
		name    string
		group   string
		now     time.Time
		history []Termination
		want    Reason
	}{
		{"first kill", "g", at("2026-03-10", 10, 0), nil, ""},
		{"unknown group", "nope", at("2026-03-10", 10, 0), nil, Disabled},
		{"disabled group", "off", at("2026-03-10", 10, 0), nil, Disabled},
		{"saturday", "g", at("2026-03-14", 10, 0), nil, OffDay},
		{"listed holiday", "g", at("2026-03-11", 10, 0), nil, Holiday},
		{"federal holiday", "g", at("2026-11-26", 10, 0), nil, Holiday},
		{"before hours", "g", at("2026-03-10", 8, 59), nil, OutsideHours},
		{"at start", "g", at("2026-03-10", 9, 0), nil, ""},
		{"at end", "g", at("2026-03-10", 15, 0), nil, OutsideHours},
		{"same day", "g", at("2026-03-10", 14, 0), []Termination{kill("g", at("2026-03-10", 9, 30), Executed, "")}, MaxPerDay},
		{"leashed counts", "g", at("2026-03-10", 14, 0), []Termination{kill("g", at("2026-03-10", 9, 30), Skipped, Leashed)}, MaxPerDay},
		{"failed counts", "g", at("2026-03-10", 14, 0), []Termination{kill("g", at("2026-03-10", 9, 30), Failed, "")}, MaxPerDay},
		{"outage skip does not count", "g", at("2026-03-10", 14, 0), []Termination{kill("g", at("2026-03-10", 9, 30), Skipped, InOutage)}, ""},
		{"other group", "g", at("2026-03-10", 14, 0), []Termination{kill("h", at("2026-03-10", 9, 30), Executed, "")}, ""},
		{"one work day later", "g", at("2026-03-10", 10, 0), []Termination{kill("g", at("2026-03-09", 14, 0), Executed, "")}, MinGap},
		// Monday the 9th, then the 10th, the 11th is a holiday: Thursday
		// the 12th is two work days later.
		{"two work days later, over a holiday", "g", at("2026-03-12", 10, 0), []Termination{kill("g", at("2026-03-09", 14, 0), Executed, "")}, ""},
		{"over a weekend", "g", at("2026-03-09", 10, 0), []Termination{kill("g", at("2026-03-05", 14, 0), Executed, "")}, ""},
		{"friday to monday is one", "g", at("2026-03-09", 10, 0), []Termination{kill("g", at("2026-03-06", 14, 0), Executed, "")}, MinGap},
		{"duration gap too short", "h", at("2026-03-10", 11, 0), []Termination{kill("h", at("2026-03-10", 9, 45), Executed, "")}, MinGap},
		{"duration gap kept", "h", at("2026-03-10", 11, 15), []Termination{kill("h", at("2026-03-10", 9, 45), Executed, "")}, ""},
		{"duration gap across days", "h", at("2026-03-10", 9, 10), []Termination{kill("h", at("2026-03-09", 14, 50), Executed, "")}, ""},
		{"daily max before gap", "h", at("2026-03-10", 14, 0), []Termination{kill("h", at("2026-03-10", 9, 0), Executed, ""), kill("h", at("2026-03-10", 13, 0), Executed, "")}, MaxPerDay},
	} {
		ok, why := cfg.Admit(tc.history, PlannedKill{Group: tc.group}, tc.now)
		if ok != (tc.want == "") || why != tc.want {
			t.Errorf("%s: Admit = %v %q, want %q", tc.name, ok, why, tc.want)
		}
	}
	// On demand the calendar does not apply, and disabled groups may be
	// killed; the gap and the maximum still hold.
	for _, tc := range []struct {
		name    string
		group   string
		now     time.Time
		history []Termination
		want    Reason
	}{
		{"saturday", "g", at("2026-03-14", 3, 0), nil, ""},
		{"disabled group", "off", at("2026-03-10", 10, 0), nil, ""},
		{"unknown group", "nope", at("2026-03-10", 10, 0), nil, Disabled},
		{"gap", "g", at("2026-03-10", 20, 0), []Termination{kill("g", at("2026-03-09", 14, 0), Executed, "")}, MinGap},
		{"max", "h", at("2026-03-10", 23, 0), []Termination{kill("h", at("2026-03-10", 9, 0), Executed, ""), kill("h", at("2026-03-10", 13, 0), Executed, "")}, MaxPerDay},
	} {
		ok, why := cfg.AdmitOnDemand(tc.history, tc.group, tc.now)
		if ok != (tc.want == "") || why != tc.want {
			t.Errorf("on demand, %s: AdmitOnDemand = %v %q, want %q", tc.name, ok, why, tc.want)
		}
	}
}

func TestChoose(t *testing.T) {
	cfg := mustParse(t, `groups:
  - {name: g, backend: lab, exceptions: ["*-seed", "rack=rack3"]}
`)
	g := &cfg.Groups[0]
	live := []Instance{
		{ID: "n3", Name: "n3-seed"},
		{ID: "n2", Labels: map[string]string{"rack": "rack2"}},
		{ID: "n1", Labels: map[string]string{"rack": "rack1"}},
		{ID: "n4", Labels: map[string]string{"rack": "rack3"}},
	}
	seen := map[string]bool{}
	for pick := range uint64(10) {
		inst, ok := PlannedKill{Pick: pick}.Choose(g, live)
		if !ok {
			t.Fatal("nothing chosen")
		}
		seen[inst.ID] = true
		if again, _ := (PlannedKill{Pick: pick}).Choose(g, []Instance{live[2], live[1], live[3], live[0]}); again.ID != inst.ID {
			t.Errorf("pick %d: %s, then %s in another order", pick, inst.ID, again.ID)
		}
	}
	if !reflect.DeepEqual(seen, map[string]bool{"n1": true, "n2": true}) {
		t.Errorf("chose %v", seen)
	}
	if _, ok := (PlannedKill{}).Choose(g, live[3:]); ok {
		t.Error("chose an excepted instance")
	}
}

func TestGlobAndSelectors(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"a*", "abc", true}, {"*c", "abc", true}, {"a*c", "abbbc", true},
		{"a*c", "abcd", false}, {"*-seed", "n3-seed", true}, {"a**b", "ab", true},
		{"abc", "abc", true}, {"abc", "ab", false}, {"a*b*c", "a-b-b-c", true}, {"a?", "ab", false},
	} {
		if got := Glob(tc.pattern, tc.s); got != tc.want {
			t.Errorf("Glob(%q, %q) = %v", tc.pattern, tc.s, got)
		}
	}
	reqs, err := ParseLabelSelector("app=web, tier in (a, b),env!=prod,!canary,track,x==y,z notin (q)")
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web", "tier": "b", "env": "dev", "track": "", "x": "y"}
	for _, r := range reqs {
		if !r.Matches(labels) {
			t.Errorf("%+v does not match %v", r, labels)
		}
	}
	for _, bad := range []string{"", "a,,b", "a in (b", "a in b)", "-a=b", "a=b c", "a in [b]", "x/y/z=1", strings.Repeat("a", 64)} {
		if _, err := ParseLabelSelector(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
