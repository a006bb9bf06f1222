package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// WriteCSV writes the table's rows as CSV, for spreadsheets and plotting
// tools: one line per task and iteration, then one per task in total
// (iteration "total"); latencies in milliseconds, of the response time
// but for the service time's p50 and p99.
func (r *Result) WriteCSV(w io.Writer) error {
	c := csv.NewWriter(w)
	c.Write([]string{"task", "phase", "iteration", "seconds", "count", "errors", "fails", "req_per_sec",
		"p50_ms", "p90_ms", "p99_ms", "p99_5_ms", "p99_9_ms", "max_ms", "mean_ms", "stddev_ms", "service_p50_ms", "service_p99_ms"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	line := func(row Row, it string) {
		l := row.Response
		c.Write([]string{row.Task, row.Phase, it, f(row.Seconds), strconv.FormatInt(row.Count, 10),
			strconv.FormatInt(row.Errors, 10), strconv.FormatInt(row.Fails, 10), f(row.ReqPerSec),
			f(l.P50), f(l.P90), f(l.P99), f(l.P995), f(l.P999), f(l.Max), f(l.Mean), f(l.StdDev),
			f(row.Service.P50), f(row.Service.P99)})
	}
	for _, row := range r.Rows {
		line(row, strconv.Itoa(row.Iteration))
	}
	for _, row := range r.Totals {
		line(row, "total")
	}
	c.Flush()
	return c.Error()
}

// hdrLog writes each task's response times second by second in
// HdrHistogram's interval log format (the .hlog of jHiccup and wrk2, read
// by HdrHistogram's HistogramLogProcessor and plotters): one interval per
// second and task, tagged with the task's name, values in nanoseconds as
// those tools expect, times relative to the run's start.
type hdrLog struct {
	lw    *hdr.HistogramLogWriter
	start time.Time
	err   error
}

func newHdrLog(w io.Writer, start time.Time, cfg *Config) *hdrLog {
	l := &hdrLog{lw: hdr.NewHistogramLogWriter(w), start: start}
	ms := start.UnixMilli()
	l.lw.SetBaseTime(ms)
	l.check(l.lw.OutputLogFormatVersion())
	l.check(l.lw.OutputComment(fmt.Sprintf("troop bench %s, seed %d: response times in nanoseconds, one interval per second and task (Tag)", cfg.Job, cfg.Seed)))
	l.check(l.lw.OutputStartTime(ms))
	l.check(l.lw.OutputBaseTime(ms))
	l.check(l.lw.OutputLegend())
	return l
}

func (l *hdrLog) check(err error) {
	if l.err == nil {
		l.err = err
	}
}

// phase writes a phase's seconds, each task's in turn.
func (l *hdrLog) phase(tasks []string, start time.Time, s *series) {
	seconds := 0
	for _, t := range s.tasks {
		seconds = max(seconds, len(t))
	}
	for sec := range seconds {
		for ti, task := range tasks {
			if sec >= len(s.tasks[ti]) || s.tasks[ti][sec].h == nil {
				continue
			}
			h := nanos(s.tasks[ti][sec].h)
			at := start.Add(time.Duration(sec) * time.Second)
			h.SetStartTimeMs(at.UnixMilli())
			h.SetEndTimeMs(at.Add(time.Second).UnixMilli())
			h.SetTag(task)
			l.check(l.lw.OutputIntervalHistogram(h))
		}
	}
}

// nanos is h (µs) in nanoseconds, at h's precision.
func nanos(h *hdr.Histogram) *hdr.Histogram {
	n := hdr.New(1000, histMax*1000, seriesDigits)
	for _, b := range h.Distribution() {
		if b.Count > 0 {
			n.RecordValues(b.To*1000, b.Count)
		}
	}
	return n
}
