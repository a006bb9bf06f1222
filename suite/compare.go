package suite

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/internal/filekind"
)

// ReadReport reads a report.json. Another kind of file (a bench result, or
// JSON that is no troop file) is an error that says what it is.
func ReadReport(r io.Reader) (*Report, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if err := filekind.Expect(data, filekind.RunReport); err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("not a troop run report: %v", err)
	}
	return &rep, nil
}

// Compare prints two runs side by side: the settings in which they
// differ, the baseline task by task at each level with the ratios B/A,
// then the failure phase, the audit, the consistency and nemesis checks,
// and the findings of one verdict that the other lacks.
func Compare(w io.Writer, a, b *Report) {
	for _, s := range []struct {
		name string
		r    *Report
	}{{"A", a}, {"B", b}} {
		quick := ""
		if s.r.Config.Quick {
			quick = ", --quick"
		}
		fmt.Fprintf(w, "%s: %s, seed %d%s, started %s: %s\n", s.name, s.r.Cluster, s.r.Seed, quick,
			s.r.Started.Format("2006-01-02 15:04:05"), verdictLine(s.r.Verdict))
		if s.r.Stopped != "" {
			fmt.Fprintf(w, "   PARTIAL: %s\n", s.r.Stopped)
		}
	}
	if d := Differences(a.Config, b.Config); len(d) == 0 {
		fmt.Fprintln(w, "\nsettings: the same")
	} else {
		fmt.Fprintln(w, "\nsettings that differ (A → B):")
		for _, c := range d {
			fmt.Fprintf(w, "  %s\n", c)
		}
	}

	for _, pa := range a.Baseline {
		i := slices.IndexFunc(b.Baseline, func(p BenchPhase) bool { return p.Level == pa.Level })
		if i < 0 {
			fmt.Fprintf(w, "\nbaseline at %s: only in A\n", pa.Level)
			continue
		}
		fmt.Fprintf(w, "\nbaseline at %s: %s ops/s over every task, B/A %s\n", pa.Level,
			pairF(Throughput(a.Baseline, pa.Level), Throughput(b.Baseline, pa.Level), "%.0f"),
			bench.FormatRatio(Throughput(b.Baseline, pa.Level), Throughput(a.Baseline, pa.Level)))
		bench.CompareTotals(w, pa.Result.Totals, b.Baseline[i].Result.Totals)
	}
	for _, pb := range b.Baseline {
		if !slices.ContainsFunc(a.Baseline, func(p BenchPhase) bool { return p.Level == pb.Level }) {
			fmt.Fprintf(w, "\nbaseline at %s: only in B\n", pb.Level)
		}
	}

	fmt.Fprintf(w, "\n%-44s %17s %17s %6s\n", "check", "A", "B", "B/A")
	row := func(name string, va, vb float64, format string) {
		fmt.Fprintf(w, "%-44s %17s %17s %6s\n", name, fmt.Sprintf(format, va), fmt.Sprintf(format, vb), bench.FormatRatio(vb, va))
	}
	text := func(name, va, vb string) { fmt.Fprintf(w, "%-44s %17s %17s\n", name, va, vb) }
	fa, fb := a.Failure, b.Failure
	switch {
	case fa != nil && fb != nil:
		row("failure: errors during the fault", float64(fa.During.Errors), float64(fb.During.Errors), "%.0f")
		row("failure: fails (wrong answers)", float64(fa.During.Fails+fa.Before.Fails+fa.After.Fails), float64(fb.During.Fails+fb.Before.Fails+fb.After.Fails), "%.0f")
		row("failure: worst p99 during the fault, ms", fa.During.MaxP99ms, fb.During.MaxP99ms, "%.1f")
		row("failure: recovery, s", fa.RecoverySeconds, fb.RecoverySeconds, "%.1f")
	case fa != nil || fb != nil:
		text("failure under load", ran(fa != nil), ran(fb != nil))
	}
	da, db := a.Durability, b.Durability
	switch {
	case da != nil && db != nil:
		row("durability: keys read back", float64(da.Keys), float64(db.Keys), "%.0f")
		row("durability: acknowledged writes lost", float64(da.Lost), float64(db.Lost), "%.0f")
	case da != nil || db != nil:
		text("durability audit", ran(da != nil), ran(db != nil))
	}
	for _, ca := range a.Consistency {
		i := slices.IndexFunc(b.Consistency, func(c ConsistencyPhase) bool { return c.Level == ca.Level })
		if i < 0 {
			text("consistency at "+ca.Level, Linearizability(ca.Verdict.Result), "not run")
			continue
		}
		cb := b.Consistency[i]
		text("consistency at "+ca.Level, Linearizability(ca.Verdict.Result), Linearizability(cb.Verdict.Result))
		row("consistency at "+ca.Level+": stale reads", float64(ca.Verdict.StaleReads), float64(cb.Verdict.StaleReads), "%.0f")
	}
	if a.Nemesis != nil && b.Nemesis != nil {
		for _, ra := range a.Nemesis.Rounds {
			kind, _, _ := strings.Cut(ra.Fault, " ")
			i := slices.IndexFunc(b.Nemesis.Rounds, func(r NemesisRound) bool {
				k, _, _ := strings.Cut(r.Fault, " ")
				return k == kind && r.Level == ra.Level
			})
			if i < 0 {
				continue
			}
			rb := b.Nemesis.Rounds[i]
			name := fmt.Sprintf("nemesis: %s at %s", kind, ra.Level)
			text(name, Linearizability(ra.Registers.Result), Linearizability(rb.Registers.Result))
			row(name+": writes lost", float64(ra.Audit.Lost), float64(rb.Audit.Lost), "%.0f")
		}
	}
	if a.LDFI != nil && b.LDFI != nil {
		for _, ca := range a.LDFI.Classes {
			if i := slices.IndexFunc(b.LDFI.Classes, func(c LDFIClass) bool { return c.Name == ca.Name }); i >= 0 {
				row("LDFI "+ca.Name+": failure sets", float64(len(ca.FailureSets)), float64(len(b.LDFI.Classes[i].FailureSets)), "%.0f")
			}
		}
	}
	onlyIn := func(name string, x, y []string) {
		for _, f := range x {
			if !slices.Contains(y, f) {
				fmt.Fprintf(w, "  broke only in %s: %s\n", name, f)
			}
		}
	}
	fmt.Fprintln(w)
	onlyIn("A", a.Verdict.Broke, b.Verdict.Broke)
	onlyIn("B", b.Verdict.Broke, a.Verdict.Broke)
}

func verdictLine(v Verdict) string {
	if v.OK {
		return "everything troop checked held"
	}
	return fmt.Sprintf("%d finding(s) broke", len(v.Broke))
}

func pairF(a, b float64, format string) string {
	return fmt.Sprintf(format+" → "+format, a, b)
}

func ran(ok bool) string {
	if ok {
		return "ran"
	}
	return "not run"
}
