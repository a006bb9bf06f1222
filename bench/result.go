package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/troop-lab/troop/internal/confdiff"
	"github.com/troop-lab/troop/internal/filekind"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Result is everything a run measured, with what is needed to reproduce it.
// It is written as JSON; the console table is drawn from it.
type Result struct {
	Kind         string    `json:"kind"` // filekind.BenchResult
	TroopVersion string    `json:"troop_version"`
	Seed         uint64    `json:"seed"`
	Config       Config    `json:"config"`
	Target       string    `json:"target"`
	Setup        Setup     `json:"setup"` // what ran, as the header block says it
	Started      time.Time `json:"started"`
	Rows         []Row     `json:"rows"`   // one per task and iteration, in run order
	Totals       []Row     `json:"totals"` // one per task, all iterations merged
	CPU          CPU       `json:"client_cpu"`
	Warnings     []string  `json:"warnings,omitempty"` // the client self-check, in plain words
	// Stopped says where an interrupted run stopped; "" for a run that ran
	// to its end. The figures of an interrupted run are those of what ran.
	Stopped string `json:"stopped,omitempty"`
	// Cleanup is what --cleanup deleted after the run.
	Cleanup *CleanupResult `json:"cleanup,omitempty"`
	// Shards is how many shards' results were merged into this one (troop
	// bench merge); 0 for a result one process measured.
	Shards int `json:"shards,omitempty"`
}

// Row is one task's figures: one iteration of it, or all of them (Total).
// Latencies are in milliseconds. Percentiles, Max and StdDev are of the
// response time; service time is alongside.
type Row struct {
	Task      string  `json:"task"`
	Phase     string  `json:"phase"`
	Iteration int     `json:"iteration"` // 0 for a total
	Seconds   float64 `json:"seconds"`   // the phase's measured wall time
	Count     int64   `json:"count"`
	Errors    int64   `json:"errors"`
	Fails     int64   `json:"fails"`
	ReqPerSec float64 `json:"req_per_sec"`

	Response Latency `json:"response_ms"`
	Service  Latency `json:"service_ms"`

	// Encoded HDR histograms (hdrhistogram-go V2, compressed, base64), in µs.
	ResponseHist string `json:"response_hist,omitempty"`
	ServiceHist  string `json:"service_hist,omitempty"`

	ErrorSamples []string `json:"error_samples,omitempty"`
	FailSamples  []string `json:"fail_samples,omitempty"`
	Series       []Point  `json:"series,omitempty"`
}

// Latency summarises one histogram, in milliseconds.
type Latency struct {
	P50    float64 `json:"p50"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
	P995   float64 `json:"p99_5"`
	P999   float64 `json:"p99_9"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
	StdDev float64 `json:"stddev"`
}

func summarize(h *hdr.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)),
		P99: ms(h.ValueAtQuantile(99)), P995: ms(h.ValueAtQuantile(99.5)),
		P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max()),
		Mean: h.Mean() / 1000, StdDev: h.StdDev() / 1000,
	}
}

func encodeHist(h *hdr.Histogram) string {
	b, err := h.Encode(hdr.V2CompressedEncodingCookieBase)
	if err != nil {
		return ""
	}
	return string(b)
}

// DecodeHist reads back a histogram of a result file.
func DecodeHist(s string) (*hdr.Histogram, error) { return hdr.Decode([]byte(s)) }

// CPU is the client's own CPU use over the measured phases.
type CPU struct {
	UserSeconds   float64 `json:"user_seconds"`
	SystemSeconds float64 `json:"system_seconds"`
	WallSeconds   float64 `json:"wall_seconds"`
	Cores         int     `json:"cores"`
	// Utilization is CPU seconds over wall seconds times cores: near 1 the
	// client, not the server, set the pace.
	Utilization float64 `json:"utilization"`
	MicrosPerOp float64 `json:"cpu_us_per_op"`
}

func newRow(phase, task string, iteration int, secs float64, s *taskStats, pts []Point) Row {
	r := Row{
		Task: task, Phase: phase, Iteration: iteration, Seconds: secs,
		Count: s.count, Errors: s.errors, Fails: s.fails,
		Response: summarize(s.response), Service: summarize(s.service),
		ResponseHist: encodeHist(s.response), ServiceHist: encodeHist(s.service),
		ErrorSamples: s.errSamples, FailSamples: s.failNotes, Series: pts,
	}
	if secs > 0 {
		r.ReqPerSec = float64(s.count) / secs
	}
	return r
}

// WriteJSON writes the result file.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(r)
}

// ReadResult reads a result file. Another kind of file (a troop run
// report, or JSON that is no troop file) is an error that says what it is.
func ReadResult(rd io.Reader) (*Result, error) {
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, err
	}
	if err := filekind.Expect(data, filekind.BenchResult); err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("not a troop bench result: %v", err)
	}
	if r.Config.Job == "" {
		return nil, errors.New("not a troop bench result: it names no job")
	}
	return &r, nil
}

// The table's columns, in VTest's order; latencies in milliseconds.
var tableHeader = fmt.Sprintf("%-12s %9s %8s %8s %8s %8s %8s %8s %7s %7s %8s",
	"Test", "Req/Sec", "50%", "90%", "99%", "99.5%", "99.9%", "Max", "Errors", "Fails", "StdDev")

var summaryHeader = fmt.Sprintf("%-12s %9s %6s %8s %8s %8s %8s %8s %8s %7s %7s %8s",
	"Test", "Req/Sec", "Ratio", "50%", "90%", "99%", "99.5%", "99.9%", "Max", "Errors", "Fails", "StdDev")

// fmtMs prints a latency with sub-millisecond precision: three decimals
// (microseconds) below 10 ms, two below 100, one below 1000, then whole ms.
func fmtMs(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.3f", v)
	case v < 100:
		return fmt.Sprintf("%.2f", v)
	case v < 1000:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func tableLine(name string, r Row) string {
	l := r.Response
	return fmt.Sprintf("%-12s %9.0f %8s %8s %8s %8s %8s %8s %7d %7d %8s",
		name, r.ReqPerSec, fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.P995), fmtMs(l.P999), fmtMs(l.Max),
		r.Errors, r.Fails, fmtMs(l.StdDev))
}

// WriteTable prints the result as VTest does: for each task a block with a
// row per iteration and a Total row, then a summary with each task's share
// of the run's time (Ratio), then what went wrong and what the client
// self-check found.
func (r *Result) WriteTable(w io.Writer) {
	if r.Stopped != "" {
		fmt.Fprintf(w, "==== PARTIAL: %s ====\n\n", r.Stopped)
	}
	if r.Shards > 0 {
		fmt.Fprintf(w, "==== MERGED FROM %d SHARDS ====\n\n", r.Shards)
	}
	fmt.Fprintln(w, "==== DETAIL STATUS ====")
	for _, tot := range r.Totals {
		fmt.Fprintln(w)
		fmt.Fprintln(w, tableHeader)
		for _, row := range r.Rows {
			if row.Task == tot.Task && row.Phase == tot.Phase {
				fmt.Fprintln(w, tableLine(row.Task, row))
			}
		}
		fmt.Fprintln(w, tableLine("Total", tot))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "==== SUMMARY STATUS ====")
	fmt.Fprintln(w, summaryHeader)
	var all float64
	seen := map[string]bool{}
	for _, t := range r.Totals {
		if !seen[t.Phase] { // tasks of one phase share its time
			all += t.Seconds
			seen[t.Phase] = true
		}
	}
	var errs, fails int64
	for _, t := range r.Totals {
		ratio := 0.0
		if all > 0 {
			ratio = t.Seconds / all
		}
		line := tableLine(t.Task, t)
		// Ratio goes after Req/Sec: splice it into the detail line.
		fmt.Fprintf(w, "%s %6.2f%s\n", line[:22], ratio, line[22:])
		errs += t.Errors
		fails += t.Fails
	}
	fmt.Fprintf(w, "%-12s %9s %6s %8s %8s %8s %8s %8s %8s %7d %7d\n", "Total", "", "", "", "", "", "", "", "", errs, fails)
	// Up to five samples per task of what went wrong, as VTest lists its
	// exceptions, so a Fail can be told from an Error at a glance.
	sep := "\n"
	for _, t := range r.Totals {
		for _, s := range t.ErrorSamples {
			fmt.Fprintf(w, "%serror  %-10s %s\n", sep, t.Task, s)
			sep = ""
		}
		for _, s := range t.FailSamples {
			fmt.Fprintf(w, "%sfail   %-10s %s\n", sep, t.Task, s)
			sep = ""
		}
	}
	sep = "\n"
	for _, s := range r.Warnings {
		fmt.Fprintf(w, "%swarning: %s\n", sep, s)
		sep = ""
	}
}

// Compare prints two runs side by side: first the settings in which they
// differ, then task by task (matched by name, whatever their jobs) the
// ratio B/A of throughput and latencies, the only comparison these shared
// machines allow.
func Compare(w io.Writer, a, b *Result) {
	for _, s := range []struct {
		name string
		r    *Result
	}{{"A", a}, {"B", b}} {
		merged := ""
		if s.r.Shards > 0 {
			merged = fmt.Sprintf(", merged from %d shards", s.r.Shards)
		}
		fmt.Fprintf(w, "%s: %s, seed %d, %s, started %s%s\n", s.name, s.r.Config.Job, s.r.Seed, s.r.Target, s.r.Started.Format("2006-01-02 15:04:05"), merged)
		if s.r.Stopped != "" {
			fmt.Fprintf(w, "   PARTIAL: %s\n", s.r.Stopped)
		}
	}
	changes := confdiff.Diff(a.Config, b.Config)
	if a.Target != b.Target {
		changes = append(changes, confdiff.Change{Key: "target", A: a.Target, B: b.Target})
	}
	if len(changes) == 0 {
		fmt.Fprintln(w, "\nsettings: the same")
	} else {
		fmt.Fprintln(w, "\nsettings that differ (A → B):")
		for _, c := range changes {
			fmt.Fprintf(w, "  %s\n", c)
		}
	}
	fmt.Fprintln(w)
	CompareTotals(w, a.Totals, b.Totals)
	fmt.Fprintf(w, "\nclient CPU µs/op: A %.1f  B %.1f\n", a.CPU.MicrosPerOp, b.CPU.MicrosPerOp)
	for _, r := range []*Result{a, b} {
		for _, s := range r.Warnings {
			name := "A"
			if r == b {
				name = "B"
			}
			fmt.Fprintf(w, "warning (%s): %s\n", name, s)
		}
	}
}

// CompareTotals prints two runs' task totals side by side, matched by task
// name, with the ratios B/A of throughput and of the p50 and p99 response
// times; a task of one side only says so.
func CompareTotals(w io.Writer, a, b []Row) {
	fmt.Fprintf(w, "%-16s %10s %10s %6s %9s %9s %6s %9s %9s %6s %8s %8s\n",
		"Test", "Req/Sec A", "Req/Sec B", "B/A", "50% A", "50% B", "B/A", "99% A", "99% B", "B/A", "Err A/B", "Fail A/B")
	used := make([]bool, len(b))
	for _, ta := range a {
		i := matchTask(ta, b, used)
		if i < 0 {
			fmt.Fprintf(w, "%-16s %10.0f %10s\n", ta.Task, ta.ReqPerSec, "(only in A)")
			continue
		}
		used[i] = true
		tb := b[i]
		fmt.Fprintf(w, "%-16s %10.0f %10.0f %6s %9s %9s %6s %9s %9s %6s %8s %8s\n", ta.Task,
			ta.ReqPerSec, tb.ReqPerSec, FormatRatio(tb.ReqPerSec, ta.ReqPerSec),
			fmtMs(ta.Response.P50), fmtMs(tb.Response.P50), FormatRatio(tb.Response.P50, ta.Response.P50),
			fmtMs(ta.Response.P99), fmtMs(tb.Response.P99), FormatRatio(tb.Response.P99, ta.Response.P99),
			fmt.Sprintf("%d/%d", ta.Errors, tb.Errors), fmt.Sprintf("%d/%d", ta.Fails, tb.Fails))
	}
	for i, tb := range b {
		if !used[i] {
			fmt.Fprintf(w, "%-16s %10s %10.0f\n", tb.Task, "(only in B)", tb.ReqPerSec)
		}
	}
}

// matchTask finds the total of rows, not yet used, for t's task: the one
// of the same phase when several phases ran a task of that name, else the
// first; -1 when there is none.
func matchTask(t Row, rows []Row, used []bool) int {
	found := -1
	for i, r := range rows {
		if used[i] || r.Task != t.Task {
			continue
		}
		if r.Phase == t.Phase {
			return i
		}
		if found < 0 {
			found = i
		}
	}
	return found
}

// FormatRatio writes b/a with two decimals, "-" when a is 0.
func FormatRatio(b, a float64) string {
	if a == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", b/a)
}
