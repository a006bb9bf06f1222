package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troop-lab/troop/internal/confdiff"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Merge adds up the results of the shards of one run (--shard I/N), given
// in any order, into the result of the whole run: counts, Errors and Fails
// summed, HDR histograms added bucket by bucket (so every percentile is
// that of all the requests, not an average of the shards'), per-second
// series added second by second. Response times stay corrected for
// coordinated omission: each shard measured from the send times of the
// whole run's schedule. names name the results in messages (file names).
//
// It refuses, in one sentence, a set that is not every shard of one run
// exactly once, or shards that ran different workloads, seeds or starts.
func Merge(shards []*Result, names []string) (*Result, error) {
	if err := checkShards(shards, names); err != nil {
		return nil, err
	}
	first := shards[0]
	for _, s := range shards[1:] {
		if s.Config.Shard.Index < first.Config.Shard.Index {
			first = s
		}
	}
	m := &Result{
		Kind: first.Kind, TroopVersion: first.TroopVersion, Seed: first.Seed, Config: first.Config,
		Target: first.Target, Setup: first.Setup, Started: first.Started, Shards: len(shards),
	}
	m.Config.Shard, m.Config.CSV, m.Config.HdrOut = Shard{}, "", ""
	m.Setup.Shard, m.Setup.Keys, m.Setup.FirstKey = "", m.Config.Keys, string(m.Config.Key(nil, 0))
	m.Setup.Workers, m.Setup.Connections = 0, 0
	var cpuSecs float64
	var stopped []string
	targets := []string{}
	for _, s := range shards {
		name := "shard " + s.Config.Shard.String()
		m.Started = minTime(m.Started, s.Started)
		m.Setup.Workers += s.Setup.Workers
		m.Setup.Connections += s.Setup.Connections
		m.Setup.InFlight = max(m.Setup.InFlight, s.Setup.InFlight)
		m.CPU.UserSeconds += s.CPU.UserSeconds
		m.CPU.SystemSeconds += s.CPU.SystemSeconds
		m.CPU.WallSeconds = max(m.CPU.WallSeconds, s.CPU.WallSeconds)
		m.CPU.Cores += s.CPU.Cores
		cpuSecs += s.CPU.UserSeconds + s.CPU.SystemSeconds
		for _, w := range s.Warnings {
			m.Warnings = append(m.Warnings, name+": "+w)
		}
		if s.Stopped != "" {
			stopped = append(stopped, name+" "+s.Stopped)
		}
		if !slices.Contains(targets, s.Target) {
			targets = append(targets, s.Target)
		}
		if c := s.Cleanup; c != nil {
			if m.Cleanup == nil {
				m.Cleanup = &CleanupResult{}
			}
			m.Cleanup.Keys += c.Keys
			m.Cleanup.Deleted += c.Deleted
			m.Cleanup.Errors += c.Errors
			m.Cleanup.Seconds = max(m.Cleanup.Seconds, c.Seconds)
			if m.Cleanup.Sample == "" {
				m.Cleanup.Sample = c.Sample
			}
		}
	}
	m.Target = strings.Join(targets, "; ")
	m.Stopped = strings.Join(stopped, "; ")
	if m.Setup.Connections > 0 {
		m.Setup.PerConnection = float64(m.Setup.Workers) / float64(m.Setup.Connections)
	}
	if m.Config.Rate > 0 {
		m.Setup.Loop = fmt.Sprintf("open loop at %g ops/s", m.Config.Rate)
	}
	var err error
	if m.Rows, err = mergeRowLists(shards, func(r *Result) []Row { return r.Rows }); err != nil {
		return nil, err
	}
	if m.Totals, err = mergeRowLists(shards, func(r *Result) []Row { return r.Totals }); err != nil {
		return nil, err
	}
	if m.CPU.WallSeconds > 0 && m.CPU.Cores > 0 {
		m.CPU.Utilization = cpuSecs / (m.CPU.WallSeconds * float64(m.CPU.Cores))
	}
	var n int64
	for _, t := range m.Totals {
		n += t.Count
	}
	if n > 0 {
		m.CPU.MicrosPerOp = cpuSecs * 1e6 / float64(n)
	}
	return m, nil
}

// checkShards says what makes shards no complete set of one run's shards.
func checkShards(shards []*Result, names []string) error {
	if len(shards) == 0 {
		return fmt.Errorf("no results to merge")
	}
	for i, s := range shards {
		if s.Config.Shard.Count == 0 {
			return fmt.Errorf("%s is no shard's result: it ran without --shard", names[i])
		}
		if s.Config.StartAt.IsZero() {
			return fmt.Errorf("%s (shard %s) ran without --start-at: shards are merged only when they started at an agreed time", names[i], s.Config.Shard)
		}
	}
	count := shards[0].Config.Shard.Count
	given := make([]string, count+1) // by index: the name of the result of that shard
	for i, s := range shards {
		sh := s.Config.Shard
		if sh.Count != count {
			return fmt.Errorf("%s is shard %s and %s shard %s: the shards of one run agree on N", names[0], shards[0].Config.Shard, names[i], sh)
		}
		if given[sh.Index] != "" {
			return fmt.Errorf("shard %s is given twice, as %s and as %s", sh, given[sh.Index], names[i])
		}
		given[sh.Index] = names[i]
	}
	var missing []string
	for i := 1; i <= count; i++ {
		if given[i] == "" {
			missing = append(missing, Shard{i, count}.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the merge needs all %d shards of the run, and %s missing", count, listMissing(missing))
	}
	a := shards[0].Config
	for i, s := range shards[1:] {
		// Where the results went and which shard ran are each shard's own.
		changes := confdiff.Diff(a, s.Config, "shard", "csv", "hdr-out")
		if len(changes) > 0 {
			diffs := make([]string, len(changes))
			for j, c := range changes {
				diffs[j] = c.String()
			}
			return fmt.Errorf("%s and %s are not shards of one run: their settings differ (%s)", names[0], names[i+1], strings.Join(diffs, ", "))
		}
	}
	return nil
}

func listMissing(m []string) string {
	if len(m) == 1 {
		return "shard " + m[0] + " is"
	}
	return "shards " + strings.Join(m[:len(m)-1], ", ") + " and " + m[len(m)-1] + " are"
}

// mergeRowLists merges the shards' rows (or totals) place by place; the
// shards must have the same rows, task for task.
func mergeRowLists(shards []*Result, rows func(*Result) []Row) ([]Row, error) {
	want := rows(shards[0])
	for _, s := range shards[1:] {
		got := rows(s)
		same := len(got) == len(want)
		for i := 0; same && i < len(got); i++ {
			same = got[i].Task == want[i].Task && got[i].Phase == want[i].Phase && got[i].Iteration == want[i].Iteration
		}
		if !same {
			return nil, fmt.Errorf("shards %s and %s measured different tasks (one stopped early?): %s against %s",
				shards[0].Config.Shard, s.Config.Shard, rowNames(want), rowNames(got))
		}
	}
	out := make([]Row, len(want))
	for i := range want {
		parts := make([]Row, len(shards))
		for j, s := range shards {
			parts[j] = rows(s)[i]
		}
		r, err := mergeRows(parts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", want[i].Task, err)
		}
		out[i] = r
	}
	return out, nil
}

func rowNames(rows []Row) string {
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = fmt.Sprintf("%s %d", r.Task, r.Iteration)
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// mergeRows adds up one task's row of every shard. The shards started
// together, so the row lasted as long as its longest shard.
func mergeRows(parts []Row) (Row, error) {
	s := newTaskStats()
	var secs float64
	for _, p := range parts {
		resp, err := DecodeHist(p.ResponseHist)
		if err != nil {
			return Row{}, fmt.Errorf("its response-time histogram is unreadable: %v", err)
		}
		svc, err := DecodeHist(p.ServiceHist)
		if err != nil {
			return Row{}, fmt.Errorf("its service-time histogram is unreadable: %v", err)
		}
		s.merge(&taskStats{response: resp, service: svc, count: p.Count, errors: p.Errors, fails: p.Fails,
			errSamples: p.ErrorSamples, failNotes: p.FailSamples})
		secs = max(secs, p.Seconds)
	}
	series, err := mergeSeries(parts)
	if err != nil {
		return Row{}, err
	}
	return newRow(parts[0].Phase, parts[0].Task, parts[0].Iteration, secs, s, series), nil
}

// mergeSeries adds up the shards' per-second points of one row, with the
// percentiles of each second's added histograms.
func mergeSeries(parts []Row) ([]Point, error) {
	var out []Point
	var hists []*hdr.Histogram
	for _, p := range parts {
		for _, pt := range p.Series {
			for len(out) <= pt.T {
				out = append(out, Point{T: len(out)})
				hists = append(hists, nil)
			}
			o := &out[pt.T]
			o.Ops += pt.Ops
			o.Errors += pt.Errors
			o.Fails += pt.Fails
			if pt.Ops == 0 {
				continue
			}
			h, err := DecodeHist(pt.Hist)
			if err != nil {
				return nil, fmt.Errorf("second %d of its series has no readable histogram (a result of an older troop bench?): %v", pt.T, err)
			}
			if hists[pt.T] == nil {
				hists[pt.T] = newSecHist()
			}
			hists[pt.T].Merge(h)
		}
	}
	for i, h := range hists {
		if h != nil {
			out[i].P50, out[i].P99 = secondPercentiles(h)
			out[i].Hist = encodeHist(h)
		}
	}
	return out, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
