package monkey

import (
	"context"
	"fmt"
	"time"

	"github.com/troop-lab/troop/chaos"
)

// SweepEvery is how often the daemon wakes at least: to revert leases
// whose watchdog failed, and to notice a new day.
const SweepEvery = time.Minute

// Run is the daemon: it reverts the leases that expired while no monkey
// ran, then, day after day, plans the day (or reads the plan a previous
// run stored), and executes each planned kill at its time, recording every
// outcome; it prunes the records past their retention once a day. It
// returns when the clock's Sleep fails (ctx ended), after the recoveries
// in flight are measured.
//
// Kills planned for a time at which no daemon ran (a restart in the middle
// of the day) are executed late, at once; Admit refuses them once the
// day's hours are over, and the record says outside-hours.
func (m *Monkey) Run(ctx context.Context) error {
	defer m.Wait()
	log := m.log()
	if done, err := m.Sweep(ctx, false); err != nil || len(done) > 0 {
		log.Warn("reverted leases that expired while no monkey ran", "reverted", len(done), "err", err)
	}
	loc := m.Config.Calendar.Location
	var (
		day  chaos.Date
		plan []chaos.PlannedKill
		done map[killKey]bool
	)
	for {
		now := m.clock().Now()
		today := chaos.DateOf(now.In(loc))
		if done == nil || today != day {
			var err error
			if plan, done, err = m.planDay(ctx, today, now); err != nil {
				log.Error("cannot plan the day; trying again", "day", today.String(), "err", err)
				if err := m.clock().Sleep(ctx, SweepEvery); err != nil {
					return err
				}
				continue
			}
			day = today
			if n, days, err := m.Records.Prune(ctx, now); err != nil || n+days > 0 {
				log.Info("pruned the records", "terminations", n, "plan_days", days, "err", err)
			}
		}
		y, mo, d := now.In(loc).Date()
		next := time.Date(y, mo, d+1, 0, 0, 0, 0, loc)
		for _, k := range plan {
			key := keyOf(k.Group, k.At)
			if done[key] {
				continue
			}
			if k.At.After(now) {
				if k.At.Before(next) {
					next = k.At
				}
				continue
			}
			done[key] = true
			term, err := m.Execute(ctx, k, Planned)
			if err != nil {
				log.Error("planned kill", "group", k.Group, "at", k.At.Format(time.RFC3339), "err", err)
				continue
			}
			log.Info("planned kill", "group", k.Group, "at", k.At.Format(time.RFC3339), "outcome", string(term.Outcome), "reason", string(term.Reason), "instance", term.Instance.ID)
			m.awaitRecoveryLater(ctx, term)
		}
		if err := m.clock().Sleep(ctx, min(next.Sub(now), SweepEvery)); err != nil {
			return err
		}
		if _, err := m.Sweep(ctx, false); err != nil {
			log.Error("reverting expired leases", "err", err)
		}
	}
}

type killKey struct {
	group string
	at    int64 // UnixNano of the planned time
}

func keyOf(group string, at time.Time) killKey { return killKey{group, at.UnixNano()} }

// planDay returns day's plan, the one stored by an earlier run if any (so
// that a restarted daemon neither re-draws nor repeats the day's kills),
// and which of its kills are recorded already. A new plan is stored; on a
// holiday, each enabled group gets a record skipped with reason holiday.
func (m *Monkey) planDay(ctx context.Context, day chaos.Date, now time.Time) ([]chaos.PlannedKill, map[killKey]bool, error) {
	plan, found, err := m.Records.Plan(ctx, day)
	if err != nil {
		return nil, nil, err
	}
	history, err := m.Records.Terminations(ctx, chaos.Query{})
	if err != nil {
		return nil, nil, err
	}
	if !found {
		plan = chaos.PlanDay(m.Config, day, history, chaos.DayRand(m.Seed, day))
		if err := m.Records.RecordPlan(ctx, day, plan); err != nil {
			return nil, nil, err
		}
		if m.Config.Calendar.DayOff(day) == chaos.Holiday {
			for _, g := range m.Config.Groups {
				if !g.Enabled {
					continue
				}
				t := chaos.Termination{Group: g.Name, Executed: now, Outcome: chaos.Skipped, Reason: chaos.Holiday}
				if _, err := m.Records.Add(ctx, t); err != nil {
					return nil, nil, fmt.Errorf("record the holiday of group %s: %w", g.Name, err)
				}
			}
		}
		m.log().Info("planned", "day", day.String(), "kills", len(plan))
	}
	done := map[killKey]bool{}
	for _, t := range history {
		if !t.Planned.IsZero() {
			done[keyOf(t.Group, t.Planned)] = true
		}
	}
	return plan, done, nil
}
