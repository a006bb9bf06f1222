package bench

import (
	"sync"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds, from 1 µs to one hour, with three
// significant digits: the 99.9th percentile of a 2 ms service is exact to
// 2 µs, and a stall of minutes still fits. The per-second histograms of the
// series need less: two digits.
const (
	histMax      = int64(time.Hour / time.Microsecond)
	histDigits   = 3
	seriesDigits = 2
)

func newHist() *hdr.Histogram    { return hdr.New(1, histMax, histDigits) }
func newSecHist() *hdr.Histogram { return hdr.New(1, histMax, seriesDigits) }

func micros(d time.Duration) int64 { return min(max(int64(d/time.Microsecond), 1), histMax) }

// Outcome is how one operation ended.
type Outcome uint8

const (
	OK    Outcome = iota
	Error         // error reply, timeout, broken connection: the store did not answer properly
	Fail          // the store answered, and the answer was wrong (corrupt, stale, missing)
)

// maxSamples bounds the messages kept per task: enough to see what went
// wrong, not one per failed operation.
const maxSamples = 5

// taskStats is what one task measured in one phase run; workers each keep
// their own and merge at the end, so recording takes no lock.
type taskStats struct {
	service, response     *hdr.Histogram
	count, errors, fails  int64
	errSamples, failNotes []string
}

func newTaskStats() *taskStats {
	return &taskStats{service: newHist(), response: newHist()}
}

func (s *taskStats) record(service, response time.Duration, o Outcome, why string) {
	s.count++
	s.service.RecordValue(micros(service))
	s.response.RecordValue(micros(response))
	switch o {
	case Error:
		s.errors++
		if len(s.errSamples) < maxSamples {
			s.errSamples = append(s.errSamples, why)
		}
	case Fail:
		s.fails++
		if len(s.failNotes) < maxSamples {
			s.failNotes = append(s.failNotes, why)
		}
	}
}

func (s *taskStats) merge(o *taskStats) {
	s.service.Merge(o.service)
	s.response.Merge(o.response)
	s.count += o.count
	s.errors += o.errors
	s.fails += o.fails
	s.errSamples = appendSamples(s.errSamples, o.errSamples)
	s.failNotes = appendSamples(s.failNotes, o.failNotes)
}

func appendSamples(dst, src []string) []string {
	for _, x := range src {
		if len(dst) >= maxSamples {
			break
		}
		dst = append(dst, x)
	}
	return dst
}

// series collects one phase's per-second figures for each task. Workers keep
// the current second themselves and hand it over when the second changes,
// so the lock is taken about once per worker per second.
type series struct {
	mu    sync.Mutex
	tasks [][]secAgg // [task][second]
}

type secAgg struct {
	n, errors, fails int64
	h                *hdr.Histogram // response times
}

func newSeries(tasks int) *series { return &series{tasks: make([][]secAgg, tasks)} }

func (s *series) add(task, sec int, a *secAgg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.tasks[task]) <= sec {
		s.tasks[task] = append(s.tasks[task], secAgg{})
	}
	d := &s.tasks[task][sec]
	d.n += a.n
	d.errors += a.errors
	d.fails += a.fails
	if d.h == nil {
		d.h = newSecHist()
	}
	d.h.Merge(a.h)
}

// Point is one second of one task: operations, response-time percentiles in
// milliseconds, errors and fails.
type Point struct {
	T      int     `json:"t"`
	Ops    int64   `json:"ops"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	Errors int64   `json:"errors"`
	Fails  int64   `json:"fails"`
}

func (s *series) points(task int) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	pts := make([]Point, len(s.tasks[task]))
	for i, a := range s.tasks[task] {
		pts[i] = Point{T: i, Ops: a.n, Errors: a.errors, Fails: a.fails}
		if a.h != nil {
			pts[i].P50 = ms(a.h.ValueAtQuantile(50))
			pts[i].P99 = ms(a.h.ValueAtQuantile(99))
		}
	}
	return pts
}

// recorder is one worker's view of a phase: its own task stats and the
// current second of the series.
type recorder struct {
	start  time.Time
	tasks  []*taskStats
	series *series
	sec    []int // current second per task, -1 before the first
	cur    []secAgg
}

func newRecorder(start time.Time, ntasks int, s *series) *recorder {
	r := &recorder{start: start, series: s, sec: make([]int, ntasks), cur: make([]secAgg, ntasks)}
	for i := range ntasks {
		r.tasks = append(r.tasks, newTaskStats())
		r.sec[i] = -1
		r.cur[i].h = newSecHist()
	}
	return r
}

// record counts one operation that ended at now.
func (r *recorder) record(task int, now time.Time, service, response time.Duration, o Outcome, why string) {
	r.tasks[task].record(service, response, o, why)
	sec := max(int(now.Sub(r.start)/time.Second), 0)
	if sec != r.sec[task] {
		r.flushSecond(task)
		r.sec[task] = sec
	}
	c := &r.cur[task]
	c.n++
	c.h.RecordValue(micros(response))
	switch o {
	case Error:
		c.errors++
	case Fail:
		c.fails++
	}
}

func (r *recorder) flushSecond(task int) {
	if r.sec[task] < 0 || r.cur[task].n == 0 {
		return
	}
	r.series.add(task, r.sec[task], &r.cur[task])
	r.cur[task] = secAgg{h: r.cur[task].h}
	r.cur[task].h.Reset()
}

func (r *recorder) close() {
	for t := range r.tasks {
		r.flushSecond(t)
	}
}

func ms(us int64) float64 { return float64(us) / 1000 }

func (o Outcome) String() string { return [...]string{"ok", "error", "fail"}[o] }
