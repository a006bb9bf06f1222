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

// taskStats is what one task measured in one phase run, or in all of them.
type taskStats struct {
	service, response     *hdr.Histogram
	count, errors, fails  int64
	errSamples, failNotes []string
}

func newTaskStats() *taskStats {
	return &taskStats{service: newHist(), response: newHist()}
}

// record counts n operations that took the same times and ended alike
// (n > 1 only for OK ones: errors and fails keep a sample each).
func (s *taskStats) record(service, response time.Duration, o Outcome, why string, n int64) {
	s.count += n
	s.service.RecordValues(micros(service), n)
	s.response.RecordValues(micros(response), n)
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

// series collects one phase's per-second figures for each task.
type series struct {
	tasks [][]secAgg // [task][second]
}

type secAgg struct {
	n, errors, fails int64
	h                *hdr.Histogram // response times
}

func newSeries(tasks int) *series { return &series{tasks: make([][]secAgg, tasks)} }

func (s *series) record(task, sec int, response int64, o Outcome, n int64) {
	for len(s.tasks[task]) <= sec {
		s.tasks[task] = append(s.tasks[task], secAgg{})
	}
	d := &s.tasks[task][sec]
	d.n += n
	switch o {
	case Error:
		d.errors += n
	case Fail:
		d.fails += n
	}
	if d.h == nil {
		d.h = newSecHist()
	}
	d.h.RecordValues(response, n)
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
	// Hist is the second's response-time histogram, encoded as the rows'
	// are, in a shard's result only: merging shards adds them up.
	Hist string `json:"hist,omitempty"`
}

// points is a task's series; withHist keeps each second's histogram too.
func (s *series) points(task int, withHist bool) []Point {
	pts := make([]Point, len(s.tasks[task]))
	for i, a := range s.tasks[task] {
		pts[i] = Point{T: i, Ops: a.n, Errors: a.errors, Fails: a.fails}
		if a.h != nil {
			pts[i].P50, pts[i].P99 = secondPercentiles(a.h)
			if withHist {
				pts[i].Hist = encodeHist(a.h)
			}
		}
	}
	return pts
}

// secondPercentiles is the p50 and p99 of a second's histogram, in ms.
func secondPercentiles(h *hdr.Histogram) (p50, p99 float64) {
	return ms(h.ValueAtQuantile(50)), ms(h.ValueAtQuantile(99))
}

// phaseStats is what one phase run measured: each task's figures and the
// per-second series. Workers record into it through recorders.
type phaseStats struct {
	start  time.Time
	mu     sync.Mutex
	tasks  []*taskStats
	series *series
}

func newPhaseStats(start time.Time, ntasks int) *phaseStats {
	ps := &phaseStats{start: start, series: newSeries(ntasks)}
	for range ntasks {
		ps.tasks = append(ps.tasks, newTaskStats())
	}
	return ps
}

// recorder is one worker's way into the phase's figures. It keeps what the
// worker measured and hands it over in bunches, so a worker takes the
// phase's lock about once per pendingMax records, and the histograms exist
// once per phase rather than once per worker (each is a few hundred
// kilobytes, and merging them cost more than recording).
type recorder struct {
	ps      *phaseStats
	pending []pendingRecord
}

// pendingRecord is n operations of one task that took the same times and
// ended alike, in second sec of the phase.
type pendingRecord struct {
	task, sec         int
	service, response time.Duration
	o                 Outcome
	why               string
	n                 int64
}

const pendingMax = 64

func newRecorder(ps *phaseStats) *recorder {
	return &recorder{ps: ps, pending: make([]pendingRecord, 0, pendingMax)}
}

// record counts n operations of one task that ended at now, alike (see
// taskStats.record).
func (r *recorder) record(task int, now time.Time, service, response time.Duration, o Outcome, why string, n int64) {
	sec := max(int(now.Sub(r.ps.start)/time.Second), 0)
	r.pending = append(r.pending, pendingRecord{task, sec, service, response, o, why, n})
	if len(r.pending) == pendingMax {
		r.flush()
	}
}

// flush hands the pending records over to the phase.
func (r *recorder) flush() {
	ps := r.ps
	ps.mu.Lock()
	for _, p := range r.pending {
		ps.tasks[p.task].record(p.service, p.response, p.o, p.why, p.n)
		ps.series.record(p.task, p.sec, micros(p.response), p.o, p.n)
	}
	ps.mu.Unlock()
	clear(r.pending) // let go of the messages
	r.pending = r.pending[:0]
}

func ms(us int64) float64 { return float64(us) / 1000 }

func (o Outcome) String() string { return [...]string{"ok", "error", "fail"}[o] }
