package main

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	_ "time/tzdata" // calendar zones must load on machines without a zoneinfo database

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/records"
)

func init() { subcommands = append(subcommands, newChaosCmd) }

func newChaosCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Chaos Monkey: kill, freeze, cut off, slow down or skew lab nodes, containers and pods on a work-day schedule",
		Long: `chaos is troop's Chaos Monkey. A config (see docs/chaos.md) lists groups of
instances, how often each may lose one (a probability per work day, or a mean
time between kills in work days), the chaos types allowed, and a calendar of
work days, hours and holidays.

schedule prints plans; kill acts once, now; serve runs the daemon and its
REST API; stop and resume are the global stop. Faults that must be undone
(pause, burn-cpu, the network faults partition, loss and delay, clock-skew,
the lab's stop) hold a lease that a detached watchdog reverts at its end,
even if the monkey dies.`,
	}
	cmd.AddCommand(newChaosScheduleCmd(), newChaosKillCmd(), newChaosServeCmd(), newChaosStopCmd(), newChaosResumeCmd(),
		newChaosWatchdogCmd(), newChaosBurnCmd(), newChaosDelayCmd())
	return cmd
}

func newChaosScheduleCmd() *cobra.Command {
	var (
		config string
		date   string
		days   int
		seed   uint64
		dryRun bool
		db     string
	)
	cmd := &cobra.Command{
		Use:   "schedule --config FILE [--date YYYY-MM-DD] [--days N] [--seed N] [--dry-run]",
		Short: "Print the kill plan of one or more days, per group",
		Long: `schedule prints, for each day and each group, whether the group loses an
instance, when (a random second inside the day's window, in the calendar's
zone and in UTC), and with which chaos type. The instance itself is chosen when
the kill happens, from the group's live instances; the plan carries the pick
that chooses it.

The plan of a day depends only on the config, the seed, the date and the kills
of the days before it in the same run (for min_time_between_kills). The same
--seed gives the same plan; without --seed a random one is used and printed so
that the plan can be reproduced. Kills the gap or the daily maximum refuse are
listed as skipped, with the reason.

schedule acts on nothing. With --dry-run=false it also stores the plans in the
records database (--db, default the config's db), where troop chaos serve
finds and follows them instead of drawing its own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config == "" {
				return fmt.Errorf("chaos schedule: --config is required")
			}
			if days < 1 || days > 3660 {
				return fmt.Errorf("chaos schedule: --days must be from 1 to 3660, not %d", days)
			}
			cfg, err := chaos.LoadConfig(config)
			if err != nil {
				return err
			}
			from := chaos.DateOf(time.Now().In(cfg.Calendar.Location))
			if date != "" {
				if from, err = chaos.ParseDate(date); err != nil {
					return fmt.Errorf("chaos schedule: --date: %v", err)
				}
			}
			if !cmd.Flags().Changed("seed") {
				seed = randomSeed()
			}
			plans := chaos.PlanDays(cfg, from, days, nil, seed)
			if err := printSchedule(cmd.OutOrStdout(), cfg, from, plans, seed); err != nil || dryRun {
				return err
			}
			if db == "" {
				db = cfg.Path(cfg.DB)
			}
			rec, err := records.Open(db, cfg.Retention)
			if err != nil {
				return err
			}
			defer rec.Close()
			for i, plan := range plans {
				if err := rec.RecordPlan(cmd.Context(), from.AddDays(i), plan); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nstored %d days of plans in %s\n", len(plans), db)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "the chaos config (YAML, see docs/chaos.md)")
	f.StringVar(&date, "date", "", "the first day to plan, YYYY-MM-DD (default: today in the calendar's zone)")
	f.IntVar(&days, "days", 1, "how many consecutive days to plan")
	f.Uint64Var(&seed, "seed", 0, "the seed of the plan (default: a random seed, printed)")
	f.BoolVar(&dryRun, "dry-run", true, "print the plan without storing it; false also stores it for troop chaos serve")
	f.StringVar(&db, "db", "", "the records database the plans go to with --dry-run=false (default: the config's db)")
	return cmd
}

func randomSeed() uint64 {
	var b [8]byte
	if _, err := crand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return binary.LittleEndian.Uint64(b[:])
}

func printSchedule(w io.Writer, cfg *chaos.Config, from chaos.Date, plans [][]chaos.PlannedKill, seed uint64) error {
	cal := &cfg.Calendar
	fmt.Fprintf(w, "config %s, seed %d\n", cfg.Source, seed)
	fmt.Fprintf(w, "calendar: %s, %02d:00 to %02d:00 %s, holidays: %s\n",
		workDayNames(cal), cal.StartHour, cal.EndHour, cal.Zone, holidaySummary(cal))
	if cfg.Leashed {
		fmt.Fprintln(w, "leashed: true (dry run): these kills would be recorded, not executed")
	} else {
		fmt.Fprintln(w, "leashed: false: these kills would be executed")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, plan := range plans {
		day := from.AddDays(i)
		fmt.Fprintln(tw)
		if why := cal.DayOff(day); why != "" {
			what := "off day"
			if why == chaos.Holiday {
				what = "holiday (" + cal.HolidayName(day) + ")"
			}
			fmt.Fprintf(tw, "%s %s\tno kills: %s\n", day, day.Weekday().String()[:3], what)
			continue
		}
		start, end, ok := cal.Window(day)
		if !ok {
			fmt.Fprintf(tw, "%s %s\tno kills: a DST change leaves no time between %02d:00 and %02d:00\n", day, day.Weekday().String()[:3], cal.StartHour, cal.EndHour)
			continue
		}
		fmt.Fprintf(tw, "%s %s\twindow %s to %s (%s to %s UTC)\n", day, day.Weekday().String()[:3],
			start.Format("15:04 MST"), end.Format("15:04 MST"), start.UTC().Format("15:04"), end.UTC().Format("15:04"))
		for gi := range cfg.Groups {
			g := &cfg.Groups[gi]
			if !g.Enabled {
				fmt.Fprintf(tw, "  %s\tdisabled\n", g.Name)
				continue
			}
			var mine []chaos.PlannedKill
			for _, k := range plan {
				if k.Group == g.Name {
					mine = append(mine, k)
				}
			}
			if len(mine) == 0 {
				fmt.Fprintf(tw, "  %s\tno kill\t\t\t\t(%s)\n", g.Name, rateText(g))
				continue
			}
			for _, k := range mine {
				what := "kill"
				note := fmt.Sprintf("instance chosen at action time (pick %016x)", k.Pick)
				if k.Skip != "" {
					what, note = "skipped", "("+string(k.Skip)+")"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s UTC\t%s\t%s\n", g.Name, what,
					k.At.Format("15:04:05 MST"), k.At.UTC().Format("15:04:05"), k.Action, note)
			}
		}
	}
	return tw.Flush()
}

func rateText(g *chaos.Group) string {
	if g.Probability > 0 {
		return fmt.Sprintf("daily probability %g", g.Probability)
	}
	return fmt.Sprintf("mean time between kills %g work days", g.MeanTimeBetweenKills)
}

func workDayNames(cal *chaos.Calendar) string {
	var names []string
	for _, wd := range []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday} {
		if cal.WorkDays[wd] {
			names = append(names, wd.String()[:3])
		}
	}
	return strings.Join(names, " ")
}

func holidaySummary(cal *chaos.Calendar) string {
	s := string(cal.Builtin)
	if n := len(cal.Dates); n > 0 {
		s += fmt.Sprintf(" + %d listed or iCalendar days", n)
	}
	return s
}
