package chaos

import (
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// PlannedKill is one kill in a day's plan. The instance is not in it: the
// group's live instances are only known at action time, so the plan carries
// Pick, which Choose turns into one of them.
type PlannedKill struct {
	Group  string    `json:"group"`
	Day    Date      `json:"day"`
	At     time.Time `json:"at"` // in the calendar's zone
	Action Action    `json:"action"`
	Pick   uint64    `json:"pick"`
	Skip   Reason    `json:"skip,omitempty"` // "" when the kill is to happen
}

// PlanDay computes day's plan: for every enabled group, whether it loses an
// instance, when (uniformly at random, to the second, inside the day's
// window), which action (uniformly among the group's types) and a Pick for
// the instance. Kills that the group's max_terminations_per_day or
// min_time_between_kills would refuse, given history and the plan's earlier
// kills, stay in the plan with Skip set, so that the record shows them.
//
// Whether: a group with daily rate r (its probability, or
// 1/mean_time_between_kills) flips max(1, ceil(r)) coins, each landing with
// probability r/ceil(r).
//
// The result is a function of its arguments only. PlanDay draws exactly one
// number from rng, also on days off, and seeds each group's draws from it
// and the group's name, so that adding, removing or disabling a group, or a
// change of holidays, does not change any other group's or day's plan.
func PlanDay(cfg *Config, day Date, history []Termination, rng *rand.Rand) []PlannedKill {
	seed := rng.Uint64()
	cal := &cfg.Calendar
	if cal.DayOff(day) != "" {
		return nil
	}
	start, end, ok := cal.Window(day)
	seconds := int64(end.Sub(start) / time.Second)
	if !ok || seconds < 1 {
		return nil
	}
	var plan []PlannedKill
	for i := range cfg.Groups {
		g := &cfg.Groups[i]
		if !g.Enabled {
			continue
		}
		r := groupRand(seed, g.Name)
		trials, p := g.Trials()
		var kills []PlannedKill
		for range trials {
			// Draw everything on every trial, so that the stream does not
			// depend on earlier outcomes.
			hit := r.Float64() < p
			at := start.Add(time.Duration(r.Int64N(seconds)) * time.Second).In(cal.Location)
			action := g.Types[r.IntN(len(g.Types))]
			pick := r.Uint64()
			if hit {
				kills = append(kills, PlannedKill{Group: g.Name, Day: day, At: at, Action: action, Pick: pick})
			}
		}
		sort.SliceStable(kills, func(a, b int) bool { return kills[a].At.Before(kills[b].At) })
		past := groupHistory(history, g.Name, len(kills))
		for k := range kills {
			if ok, why := admitGroup(cal, g, past, kills[k].At); !ok {
				kills[k].Skip = why
				continue
			}
			past = append(past, kills[k].termination(cfg.Leashed))
		}
		plan = append(plan, kills...)
	}
	sort.SliceStable(plan, func(a, b int) bool { return plan[a].At.Before(plan[b].At) })
	return plan
}

// PlanDays plans n consecutive days from from, each with DayRand(seed,
// day), carrying each day's kills into the next day's history. A day's
// draws therefore depend on the seed and the date only, not on where the
// run started; which kills are skipped can still depend on the days before.
func PlanDays(cfg *Config, from Date, n int, history []Termination, seed uint64) [][]PlannedKill {
	past := slices.Clone(history)
	out := make([][]PlannedKill, n)
	for i := range n {
		day := from.AddDays(i)
		out[i] = PlanDay(cfg, day, past, DayRand(seed, day))
		for _, k := range out[i] {
			if k.Skip == "" {
				past = append(past, k.termination(cfg.Leashed))
			}
		}
	}
	return out
}

// DayRand returns the random stream for planning day with seed.
func DayRand(seed uint64, day Date) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(day.Year)<<16|uint64(day.Month)<<8|uint64(day.Day)))
}

// termination is the record the kill would leave if it went ahead, as it
// counts for later gaps and maximums.
func (k PlannedKill) termination(leashed bool) Termination {
	t := Termination{Group: k.Group, Action: k.Action, Planned: k.At, Executed: k.At, Outcome: Executed}
	if leashed {
		t.Outcome, t.Reason = Skipped, Leashed
	}
	return t
}

// groupRand derives a group's random stream from the day's seed and the
// group's name.
func groupRand(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// groupHistory returns the group's counting terminations, in a new slice
// with room for extra more.
func groupHistory(history []Termination, group string, extra int) []Termination {
	n := 0
	for _, t := range history {
		if t.Group == group && t.Counts() {
			n++
		}
	}
	out := make([]Termination, 0, n+extra)
	for _, t := range history {
		if t.Group == group && t.Counts() {
			out = append(out, t)
		}
	}
	return out
}

// Admit decides, at action time, whether a planned kill may go ahead now:
// the group must exist and be enabled, now must be inside a work day's
// hours, and the group's daily maximum and minimum gap must hold given
// history (every termination recorded so far; only those of the kill's
// group that count are looked at). Leashed, outage and the global stop are
// the daemon's to check; they need no calendar.
func (c *Config) Admit(history []Termination, k PlannedKill, now time.Time) (bool, Reason) {
	g := c.Group(k.Group)
	if g == nil || !g.Enabled {
		return false, Disabled
	}
	cal := &c.Calendar
	if why := cal.DayOff(DateOf(now.In(cal.Location))); why != "" {
		return false, why
	}
	if !cal.InHours(now) {
		return false, OutsideHours
	}
	return admitGroup(cal, g, groupHistory(history, g.Name, 0), now)
}

// admitGroup checks the group's daily maximum, then its minimum gap, for a
// kill at now against past, the group's counting terminations.
func admitGroup(cal *Calendar, g *Group, past []Termination, now time.Time) (bool, Reason) {
	loc := cal.Location
	today := DateOf(now.In(loc))
	gap := g.MinTimeBetweenKills
	n, tooClose := 0, false
	var last time.Time // the latest counting kill at or before now
	for _, t := range past {
		at := t.At()
		if DateOf(at.In(loc)) == today {
			n++
		}
		if d := now.Sub(at); gap.Duration > 0 && d < gap.Duration && d > -gap.Duration {
			tooClose = true
		}
		if !at.After(now) && at.After(last) {
			last = at
		}
	}
	if n >= g.MaxTerminationsPerDay {
		return false, MaxPerDay
	}
	// Counting work days, only the latest kill matters: an earlier one is
	// at least as many work days away.
	if gap.Duration == 0 && gap.WorkDays > 0 && !last.IsZero() {
		tooClose = cal.WorkDaysAfter(DateOf(last.In(loc)), today, gap.WorkDays) < gap.WorkDays
	}
	if tooClose {
		return false, MinGap
	}
	return true, ""
}

// Choose turns the plan's Pick into one of the group's live instances: those
// outside the group's exceptions, sorted by ID, indexed by Pick modulo their
// number. ok is false when none is left.
func (k PlannedKill) Choose(g *Group, live []Instance) (inst Instance, ok bool) {
	var eligible []Instance
	for _, in := range live {
		if !g.Excepted(in) {
			eligible = append(eligible, in)
		}
	}
	if len(eligible) == 0 {
		return Instance{}, false
	}
	sort.Slice(eligible, func(a, b int) bool { return strings.Compare(eligible[a].ID, eligible[b].ID) < 0 })
	return eligible[k.Pick%uint64(len(eligible))], true
}

// AdmitOnDemand decides whether an on-demand kill of the group may happen
// now: the calendar does not apply (someone asked for it now), the group's
// daily maximum and minimum gap do, given history. Disabled groups may be
// killed on demand; unknown ones may not.
func (c *Config) AdmitOnDemand(history []Termination, group string, now time.Time) (bool, Reason) {
	g := c.Group(group)
	if g == nil {
		return false, Disabled
	}
	return admitGroup(&c.Calendar, g, groupHistory(history, g.Name, 0), now)
}
