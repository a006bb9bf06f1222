// Package report renders a `troop run` report as one self-contained HTML
// file: no scripts, fonts or styles from elsewhere, charts as inline SVG.
// It is pure: a suite.Report in, HTML out.
package report

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/suite"
)

//go:embed report.html.tmpl
var pageSource string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":   func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"f1":   func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"pct":  func(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) },
	"int":  func(v float64) string { return fmt.Sprintf("%.0f", v) },
	"join": func(s []string) string { return strings.Join(s, ",") },
	"svg":  func(s string) template.HTML { return template.HTML(s) }, // built by this package, text escaped
}).Parse(pageSource))

// WriteHTML renders rep.
func WriteHTML(w io.Writer, rep *suite.Report) error {
	v, err := newView(rep)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, v); err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// view is what the template shows, computed from the report.
type view struct {
	R           *suite.Report
	Title       string
	Baseline    []benchView
	Ratio       string // DC_QUORUM over DC_ONE throughput
	Failure     *failureView
	Consistency []consistencyView
	Nemesis     *nemesisView
	ConfigJSON  string
	// The trend over the earlier runs with the same settings and this one:
	// baseline throughput and p99 per level, verdict marks.
	TrendRuns                 int
	TrendThroughput, TrendP99 string
}

type nemesisView struct {
	*suite.NemesisPhase
	Timeline string
	Rounds   []nemesisRoundView
}

type nemesisRoundView struct {
	suite.NemesisRound
	Linearizable string
	Good         bool    // linearizable
	Quorum       bool    // the level promises linearizability
	StaleReads   int     // of the registers
	HealSeconds  float64 // from the fault's end to the heal
}

type benchView struct {
	Level   string
	Stopped string      // the run was interrupted: where
	Rows    []bench.Row // totals per task, then the overall total
	Chart   string
}

type failureView struct {
	*suite.FailurePhase
	Throughput, Latency, Timeline string
	Rows                          []bench.Row
}

type consistencyView struct {
	suite.ConsistencyPhase
	Linearizable string
	Good         bool
}

// The palette: readable on white, distinct for the color blind.
const (
	blue   = "#1f77b4"
	orange = "#e8710a"
	red    = "#c5221f"
	green  = "#188038"
	grey   = "#5f6368"
)

func newView(rep *suite.Report) (*view, error) {
	v := &view{R: rep, Title: "troop run: " + rep.Cluster}
	for i, b := range rep.Baseline {
		series := suite.MergeSeries(b.Result)
		v.Baseline = append(v.Baseline, benchView{
			Level: b.Level, Stopped: b.Result.Stopped, Rows: withTotal(b.Result.Totals),
			Chart: lineChart(fmt.Sprintf("baseline-%d", i), "Throughput at "+b.Level, "ops/s",
				[]line{{Name: "ops/s", Color: blue, Values: field(series, func(p bench.Point) float64 { return float64(p.Ops) })}}, nil),
		})
	}
	if one, q := suite.Throughput(rep.Baseline, "DC_ONE"), suite.Throughput(rep.Baseline, "DC_QUORUM"); one > 0 && q > 0 {
		v.Ratio = fmt.Sprintf("%.2f", q/one)
	}
	if f := rep.Failure; f != nil {
		series := suite.MergeSeries(f.Result)
		fault := []band{{From: f.KillSecond, To: f.RecoveredSecond, Label: f.Node + " down"}}
		var evs []event
		for _, e := range f.Events {
			color := green
			if strings.Contains(e.What, "terminate") {
				color = red
			}
			evs = append(evs, event{Second: e.Second, What: e.What, Color: color})
		}
		seconds := float64(len(series))
		v.Failure = &failureView{
			FailurePhase: f,
			Rows:         withTotal(f.Result.Totals),
			Throughput: lineChart("fault-throughput", "Throughput and failed requests during the fault", "per second", []line{
				{Name: "ops/s", Color: blue, Values: field(series, func(p bench.Point) float64 { return float64(p.Ops) })},
				{Name: "errors/s", Color: red, Values: field(series, func(p bench.Point) float64 { return float64(p.Errors) })},
				{Name: "fails/s", Color: orange, Values: field(series, func(p bench.Point) float64 { return float64(p.Fails) })},
			}, fault),
			Latency: lineChart("fault-latency", "Response time during the fault (worst task each second)", "ms", []line{
				{Name: "p50", Color: green, Values: field(series, func(p bench.Point) float64 { return p.P50 })},
				{Name: "p99", Color: orange, Values: field(series, func(p bench.Point) float64 { return p.P99 })},
			}, fault),
			Timeline: timeline("chaos-timeline", "Chaos timeline", seconds, evs),
		}
	}
	for _, c := range rep.Consistency {
		v.Consistency = append(v.Consistency, consistencyView{ConsistencyPhase: c, Good: c.Verdict.Linearizable(),
			Linearizable: suite.Linearizability(c.Verdict.Result)})
	}
	if n := rep.Nemesis; n != nil {
		nv := &nemesisView{NemesisPhase: n}
		seconds := 1.0
		var evs []event
		for _, e := range n.Events {
			color := green
			if !strings.HasPrefix(e.What, "healed") {
				color = red
			}
			evs = append(evs, event{Second: e.Second, What: e.What, Color: color})
			seconds = max(seconds, e.Second)
		}
		nv.Timeline = timeline("nemesis-timeline", "Nemesis timeline", seconds, evs)
		for _, r := range n.Rounds {
			nv.Rounds = append(nv.Rounds, nemesisRoundView{NemesisRound: r, Linearizable: suite.Linearizability(r.Registers.Result),
				Good: r.Registers.Linearizable(), Quorum: r.Level != "DC_ONE", StaleReads: r.Registers.StaleReads,
				HealSeconds: r.Healed - r.End})
		}
		v.Nemesis = nv
	}
	if len(rep.History) > 0 {
		v.TrendRuns = len(rep.History) + 1
		v.TrendThroughput, v.TrendP99 = trend(rep)
	}
	cfg, err := json.MarshalIndent(rep.Config, "", "  ")
	if err != nil {
		return nil, err
	}
	v.ConfigJSON = string(cfg)
	return v, nil
}

// trend draws the earlier runs and this one: baseline throughput and the
// worst task's p99 per level, and a dot per run for its verdict.
func trend(rep *suite.Report) (throughput, p99 string) {
	runs := append(append([]suite.RunSummary(nil), rep.History...), suite.Summarize("this run", rep))
	var levels []string
	for _, r := range runs {
		for _, l := range r.Levels {
			if !slices.Contains(levels, l.Level) {
				levels = append(levels, l.Level)
			}
		}
	}
	colors := []string{blue, orange, green, grey}
	var ops, lat []line
	for i, level := range levels {
		o := line{Name: level, Color: colors[i%len(colors)]}
		p := o
		for _, r := range runs {
			j := slices.IndexFunc(r.Levels, func(f suite.LevelFigures) bool { return f.Level == level })
			if j < 0 {
				o.Values, p.Values = append(o.Values, math.NaN()), append(p.Values, math.NaN())
				continue
			}
			o.Values = append(o.Values, r.Levels[j].ReqPerSec)
			p.Values = append(p.Values, r.Levels[j].P99ms)
		}
		ops, lat = append(ops, o), append(lat, p)
	}
	var labels []string
	var marks []mark
	for i, r := range runs {
		label := r.Started
		if len(label) > 5 {
			label = label[5:] // "01-25 03:15": the year is the report's
		}
		if i == len(runs)-1 {
			label = "this run"
		}
		labels = append(labels, label)
		m := mark{Color: green, Title: fmt.Sprintf("%s (seed %d): everything held", r.ID, r.Seed)}
		switch {
		case r.Stopped:
			m = mark{Color: orange, Title: fmt.Sprintf("%s (seed %d): interrupted", r.ID, r.Seed)}
		case !r.OK:
			m = mark{Color: red, Title: fmt.Sprintf("%s (seed %d): %d finding(s) broke", r.ID, r.Seed, r.Broke)}
		}
		marks = append(marks, m)
	}
	throughput = chart{ID: "trend-throughput", Title: "Baseline throughput per level, and each run's verdict", Unit: "ops/s",
		Lines: ops, XLabels: labels, Marks: marks, Height: 190}.draw()
	p99 = chart{ID: "trend-p99", Title: "Baseline p99 response time per level (worst task)", Unit: "ms",
		Lines: lat, XLabels: labels, Height: 170}.draw()
	return throughput, p99
}

func field(ps []bench.Point, f func(bench.Point) float64) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = f(p)
	}
	return out
}

// withTotal appends VTest's summary Total row: throughput, errors and
// fails summed over the tasks (latencies are per task only).
func withTotal(rows []bench.Row) []bench.Row {
	t := bench.Row{Task: "Total"}
	for _, r := range rows {
		t.Count += r.Count
		t.Errors += r.Errors
		t.Fails += r.Fails
		t.ReqPerSec += r.ReqPerSec
	}
	return append(append([]bench.Row(nil), rows...), t)
}
