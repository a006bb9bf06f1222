package ldfi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/troop-lab/troop/internal/ctxtime"
	"github.com/troop-lab/troop/internal/outfile"
)

// WallClock is the real clock.
type WallClock struct{}

// Now implements Clock.
func (WallClock) Now() time.Time { return time.Now() }

// Sleep implements Clock.
func (WallClock) Sleep(ctx context.Context, d time.Duration) error { return ctxtime.Sleep(ctx, d) }

// ScenarioFile is the name of the i-th failure set's scenario (from 0).
func ScenarioFile(i int) string { return fmt.Sprintf("scenario-%02d.json", i+1) }

// WriteJSON writes the report, indented.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteFiles writes DIR/report.json and a scenario file per failure set.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := outfile.Write(filepath.Join(dir, "report.json"), r.WriteJSON); err != nil {
		return err
	}
	for i, f := range r.Failures {
		if err := outfile.Write(filepath.Join(dir, ScenarioFile(i)), f.Scenario.WriteJSON); err != nil {
			return err
		}
	}
	return nil
}

// WriteText writes the readable report.
func (r *Report) WriteText(w io.Writer) {
	c := r.Config
	var kinds []string
	for _, f := range c.Faults {
		kinds = append(kinds, f.Action())
	}
	fmt.Fprintf(w, "ldfi: %s target, seed %d, up to %d faults (%s), %d requests per experiment, failure above %.0f%%\n",
		c.Target.Kind, c.Seed, c.MaxFaults, strings.Join(kinds, ", "), c.Probes, 100*c.FailRatio)
	fmt.Fprintf(w, "baseline: %d requests, %d failed; %d execution(s) learned\n", r.Baseline.Requests, r.Baseline.Failed, r.Baseline.NewClauses)
	counts := map[string]int{}
	learned := 0
	for _, e := range r.Experiments {
		counts[e.Outcome]++
		learned += e.NewClauses
	}
	fmt.Fprintf(w, "experiments: %d (%d found a failure set, %d survived, %d inconclusive, %d unreached); %d alternate executions learned; %d requests failed by injection\n",
		len(r.Experiments), counts[Failed], counts[Survived], counts[Inconclusive], counts[Unreached], learned, r.PainProbes)
	fmt.Fprintf(w, "formula: %d clauses over %d points\n\n", r.Formula.Len(), len(r.Formula.Points))
	if len(r.Failures) == 0 {
		fmt.Fprintln(w, "no failure set found")
	} else {
		fmt.Fprintf(w, "failure sets (%d):\n", len(r.Failures))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  #\tfaults\texperiments\tfailed\tscenario\texample")
		for i, f := range r.Failures {
			// A deduced set was not failed as a whole by its last
			// experiment: the counts are its verification's, if any.
			n, which := f.Experiment, fmt.Sprint(f.Experiment)
			if f.Deduced {
				n, which = f.Verified, fmt.Sprintf("%s deduced", joinInts(f.Evidence))
				if f.Verified > 0 {
					which += fmt.Sprintf(", verified %d", f.Verified)
				}
			}
			failed, example := "-", ""
			if n > 0 {
				e := r.Experiments[n-1]
				failed = fmt.Sprintf("%d/%d", e.Failed, e.Reached)
				if len(e.Examples) > 0 {
					example = e.Examples[0]
				}
			}
			fmt.Fprintf(tw, "  %d\t{%s}\t%s\t%s\t%s\t%.60s\n", i+1, strings.Join(f.Faults, ", "), which, failed, ScenarioFile(i), example)
		}
		tw.Flush()
	}
	for _, f := range r.Refuted {
		fmt.Fprintf(w, "refuted (deduced, but did not fail the request when injected): {%s}\n", strings.Join(f.Faults, ", "))
	}
	for _, a := range r.Anomalies {
		fmt.Fprintf(w, "anomaly: %s\n", a)
	}
	for _, sk := range r.Skipped {
		fmt.Fprintf(w, "skipped: %s\n", sk)
	}
	fmt.Fprintf(w, "\ncoverage: %s\n", r.Coverage.Statement)
}

// ProgressLine is a one-line account of an experiment, for a terminal.
func ProgressLine(e Experiment) string {
	return fmt.Sprintf("experiment %3d  %-13s %2d/%-2d failed  {%s}", e.N, e.Outcome, e.Failed, e.Reached, strings.Join(e.Hypothesis, ", "))
}
