package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/ctxtime"
	"github.com/troop-lab/troop/internal/filekind"
	"github.com/troop-lab/troop/resp"
)

// Intended is when operation i of worker w (of workers sharing rate ops/s)
// should start: the group's operations are evenly spaced and the workers take
// turns, so together they issue exactly rate per second. Response time counts
// from here (as in wrk2): a worker held up by a slow reply sends late, and the
// lateness shows in the percentiles instead of vanishing (coordinated
// omission).
func Intended(start time.Time, rate float64, worker, workers int, i int64) time.Time {
	slot := float64(i)*float64(workers) + float64(worker)
	return start.Add(time.Duration(slot / rate * float64(time.Second)))
}

// Run executes the configured job against target, prints the table to out
// and returns the result. It stops early, with what it measured, when ctx
// ends.
func Run(ctx context.Context, cfg Config, target Target, out io.Writer) (*Result, error) {
	return RunModel(ctx, cfg, target, out, NewModel(cfg.Staleness))
}

// RunModel is Run with the model of acknowledged writes supplied by the
// caller, who can audit the store against it afterwards (Audit). A model
// may be carried over several runs on the same key set.
func RunModel(ctx context.Context, cfg Config, target Target, out io.Writer, model *Model) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	nodes := 1
	if s, ok := target.(Sizer); ok {
		nodes = s.Nodes()
	}
	p, err := makePlan(&cfg, nodes)
	if err != nil {
		return nil, err
	}
	res := &Result{Kind: filekind.BenchResult, TroopVersion: cfg.Version, Seed: cfg.Seed, Config: cfg, Started: time.Now()}
	if d, ok := target.(Describer); ok {
		res.Target = d.Describe()
	}
	res.Setup = newSetup(&cfg, p, target, nodes)
	if out != nil {
		res.Setup.WriteHeader(out)
	}
	if !cfg.StartAt.IsZero() {
		if err := waitUntil(ctx, cfg.StartAt); err != nil {
			return nil, err
		}
		res.Started = time.Now()
	}
	var hlog *hdrLog
	if cfg.HdrLog != nil {
		hlog = newHdrLog(cfg.HdrLog, res.Started, &cfg)
	}
	r := &runner{cfg: &cfg, target: target, model: model}
	stopHorizon := r.keepHorizon()
	defer stopHorizon()

	cpu0, wall0 := cpuTime(), time.Now()
	type key struct{ phase, task string }
	type total struct {
		stats *taskStats // the only row's until a second comes; then merged
		secs  float64
		rows  []int // in res.Rows
	}
	totals := map[key]*total{}
	var order []key
	for it := 1; it <= cfg.Iterations && ctx.Err() == nil; it++ {
		if cfg.Warmup > 0 {
			// Warm-up draws from its own streams (iteration+1000), so the
			// measured sequence does not depend on how long it ran.
			pr := r.runPhase(ctx, &p.phases[0], it+1000, 0, cfg.Warmup, 0, "warmup")
			if ctx.Err() != nil {
				res.Stopped = fmt.Sprintf("interrupted %.1f s into the warm-up of iteration %d of %d", pr.elapsed.Seconds(), it, cfg.Iterations)
				break
			}
		}
		for pi := range p.phases {
			if ctx.Err() != nil {
				break
			}
			ph := &p.phases[pi]
			label := fmt.Sprintf("%s %d/%d", ph.Name, it, cfg.Iterations)
			pr := r.runPhase(ctx, ph, it, pi, cfg.Duration, cfg.Requests, label)
			if ctx.Err() != nil {
				res.Stopped = fmt.Sprintf("interrupted %.1f s into %s (phase %d of %d, iteration %d of %d): the figures are those of what ran until then",
					pr.elapsed.Seconds(), ph.Name, pi+1, len(p.phases), it, cfg.Iterations)
			}
			if hlog != nil {
				hlog.phase(ph.Tasks, pr.start, pr.series)
			}
			secs := pr.elapsed.Seconds()
			for ti, task := range ph.Tasks {
				res.Rows = append(res.Rows, newRow(ph.Name, task, it, secs, pr.stats[ti], pr.series.points(ti, cfg.Shard.Count > 0)))
				k := key{ph.Name, task}
				t := totals[k]
				switch {
				case t == nil:
					t = &total{stats: pr.stats[ti]}
					totals[k] = t
					order = append(order, k)
				case len(t.rows) == 1:
					first := t.stats
					t.stats = newTaskStats()
					t.stats.merge(first)
					fallthrough
				default:
					t.stats.merge(pr.stats[ti])
				}
				t.secs += secs
				t.rows = append(t.rows, len(res.Rows)-1)
			}
			res.Warnings = append(res.Warnings, r.rateCheck(ph, pr)...)
			res.Warnings = append(res.Warnings, queueCheck(ph, res.Rows[len(res.Rows)-len(ph.Tasks):])...)
		}
	}
	for _, k := range order {
		t := totals[k]
		if len(t.rows) == 1 { // the row itself, histograms and all: no need to encode them again
			row := res.Rows[t.rows[0]]
			row.Iteration, row.Series = 0, nil
			res.Totals = append(res.Totals, row)
			continue
		}
		res.Totals = append(res.Totals, newRow(k.phase, k.task, 0, t.secs, t.stats, nil))
	}
	res.CPU = cpuSince(cpu0, wall0, res.Totals)
	if res.CPU.Utilization >= 0.9 {
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"the client used %.0f%% of this machine's %d cores: troop bench itself may have set the pace, not the server",
			100*res.CPU.Utilization, res.CPU.Cores))
	}
	if hlog != nil && hlog.err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("the HDR log (--hdr-out) is incomplete: %v", hlog.err))
	}
	if ctx.Err() != nil && res.Stopped == "" {
		res.Stopped = "interrupted before the first phase began: nothing was measured"
	}
	if out != nil {
		res.WriteTable(out)
	}
	return res, ctx.Err()
}

// waitUntil waits for the agreed start of the load. A start already past
// is an error: this shard would run behind the others.
func waitUntil(ctx context.Context, at time.Time) error {
	d := time.Until(at)
	if d < 0 {
		return fmt.Errorf("--start-at %s passed %s ago: this shard would start after the others; give every shard a later time",
			at.Format(time.RFC3339), (-d).Round(time.Millisecond))
	}
	return ctxtime.Sleep(ctx, d)
}

type runner struct {
	cfg      *Config
	target   Target
	model    *Model
	sessions atomic.Int64 // workers that took a session of the target

	mu     sync.Mutex
	oldest []*atomic.Uint64 // per worker: tick of its oldest read in flight, MaxUint64 if none
}

// keepHorizon tells the model, every few milliseconds, which ticks no read in
// flight can still need, so per-key histories stay short.
func (r *runner) keepHorizon() (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			h := r.model.clock.Load() // first: a worker starting after this reads later ticks
			r.mu.Lock()
			for _, o := range r.oldest {
				h = min(h, o.Load())
			}
			r.mu.Unlock()
			r.model.SetHorizon(h)
		}
	}()
	return func() { close(done) }
}

func (r *runner) slot() *atomic.Uint64 {
	s := new(atomic.Uint64)
	s.Store(math.MaxUint64)
	r.mu.Lock()
	r.oldest = append(r.oldest, s)
	r.mu.Unlock()
	return s
}

func (r *runner) dropSlots() {
	r.mu.Lock()
	r.oldest = nil
	r.mu.Unlock()
}

type phaseResult struct {
	start   time.Time
	elapsed time.Duration
	stats   []*taskStats
	series  *series
	issued  []int64 // per group
}

// runPhase runs every worker of the phase until its requests are done, the
// duration is over or ctx ends.
func (r *runner) runPhase(ctx context.Context, ph *phasePlan, it, pi int, dur time.Duration, requests int64, label string) phaseResult {
	start := time.Now()
	var deadline time.Time
	if requests <= 0 {
		deadline = start.Add(dur)
	}
	pr := phaseResult{issued: make([]int64, len(ph.groups))}
	ps := newPhaseStats(start, len(ph.Tasks))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done *atomic.Int64 // operations so far, for the progress line only: nil without one
	)
	if r.cfg.Progress != nil {
		done = new(atomic.Int64)
	}
	stopProgress := r.progress(label, start, deadline, requests, done)
	// Workers drive pipes of their own when the target has one for each.
	piper, _ := r.target.(Piper)
	if piper != nil {
		total := 0
		for _, g := range ph.groups {
			total += r.cfg.Shard.workers(g.workers)
		}
		if total > piper.Pipes() {
			piper = nil
		}
	}
	nth := 0
	for gi := range ph.groups {
		g := &ph.groups[gi]
		for w := range g.workers {
			if !r.cfg.Shard.owns(w) {
				continue
			}
			b := r.newBatcher(piper, nth)
			nth++
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec := newRecorder(ps)
				gen := newGen(r.cfg, g, it, pi, gi, w)
				n := r.worker(ctx, gen, g, w, start, deadline, b, rec, done)
				rec.flush()
				mu.Lock()
				pr.issued[gi] += n
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	stopProgress()
	r.dropSlots()
	pr.start, pr.elapsed = start, time.Since(start)
	pr.stats, pr.series = ps.tasks, ps.series
	return pr
}

// reply is what came back for one request.
type reply struct {
	raw []byte
	err error
	at  time.Time
}

// batcher is one worker's way to the target, with the buffers it reuses
// from batch to batch: either a pipe of its own, which it writes and reads
// itself, or the shared target, whose replies come back in callbacks.
type batcher struct {
	pipe   Pipe
	target Target

	keyBuf   []byte // the batch's keys, one after the other
	keys     [][]byte
	versions []uint64
	begins   []uint64
	replies  []reply
	second   []reply // the writes of read-modify-writes
	outcomes []Outcome
	whys     []string
	rmw      []int
	intended []time.Time
	args     [3][]byte
	value    []byte
	got      []client.Reply // a pipe's replies

	// The shared target's callbacks, one per place in a batch, made once:
	// each stores its reply in into[k].
	into  []reply
	dones []func(raw []byte, err error)
	wg    sync.WaitGroup
}

func (r *runner) newBatcher(piper Piper, n int) *batcher {
	if piper != nil {
		return &batcher{pipe: piper.Pipe(n)}
	}
	target := r.target
	if s, ok := target.(Sessioner); ok {
		target = s.Session(int(r.sessions.Add(1) - 1))
	}
	return &batcher{target: target}
}

// grow sizes the per-operation slices for a batch of n.
func (b *batcher) grow(n int) {
	if cap(b.keys) < n {
		b.keys = make([][]byte, n)
		b.versions = make([]uint64, n)
		b.begins = make([]uint64, n)
		b.replies = make([]reply, n)
		b.second = make([]reply, n)
		b.outcomes = make([]Outcome, n)
		b.whys = make([]string, n)
		b.intended = make([]time.Time, n)
	}
	b.keys, b.versions, b.begins = b.keys[:n], b.versions[:n], b.begins[:n]
	b.replies, b.second = b.replies[:n], b.second[:n]
	b.outcomes, b.whys, b.intended = b.outcomes[:n], b.whys[:n], b.intended[:n]
	clear(b.versions)
	clear(b.begins)
	clear(b.intended)
	for len(b.dones) < n {
		k := len(b.dones)
		b.dones = append(b.dones, func(raw []byte, err error) {
			b.into[k] = reply{raw, err, time.Now()}
			b.wg.Done()
		})
	}
}

// send queues the command of batch place k; its reply goes to into[k].
func (b *batcher) send(k int, args [][]byte) {
	if b.pipe != nil {
		b.pipe.Send(args)
		return
	}
	b.wg.Add(1)
	b.target.Send(args, b.dones[k])
}

// wait sends what was queued and waits for the replies. places lists the
// batch places queued, in order; nil means all of them, 0, 1, 2 ...
func (b *batcher) wait(places []int) {
	if b.pipe == nil {
		b.target.Flush()
		b.wg.Wait()
		return
	}
	b.got = b.pipe.Exchange(b.got[:0])
	for i, g := range b.got {
		k := i
		if places != nil {
			k = places[i]
		}
		b.into[k] = reply{g.Raw, g.Err, g.At}
	}
}

// worker issues its batches and returns how many operations it ran.
func (r *runner) worker(ctx context.Context, gen *Gen, g *group, w int, start, deadline time.Time, b *batcher, rec *recorder, done *atomic.Int64) int64 {
	slot := r.slot()
	var (
		ops     []Op
		issued  int64
		perRate = g.rate // the group's rate; Intended spreads it over the workers
	)
	for ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)) {
		ops = gen.Batch(ops[:0])
		if len(ops) == 0 {
			break
		}
		b.grow(len(ops))
		if perRate > 0 {
			for k := range ops {
				b.intended[k] = Intended(start, perRate, w, g.workers, issued+int64(k))
			}
			// A batch leaves when its last operation is due: sending earlier
			// would exceed the rate; the earlier ones' wait counts as latency.
			if d := time.Until(b.intended[len(ops)-1]); d > 0 {
				select {
				case <-ctx.Done():
					return issued
				case <-time.After(d):
				}
			}
		}
		r.batch(b, ops, slot, rec)
		issued += int64(len(ops))
		if done != nil {
			done.Add(int64(len(ops)))
		}
	}
	return issued
}

// batch sends one pipeline, waits for every reply and records each
// operation. Read-modify-writes take a second round for their writes.
func (r *runner) batch(b *batcher, ops []Op, slot *atomic.Uint64, rec *recorder) {
	slot.Store(r.model.clock.Load()) // before any read of the batch begins
	defer slot.Store(math.MaxUint64)
	b.keyBuf = b.keyBuf[:0]
	b.into = b.replies // set before any send: with shared links, another worker's flush may carry ours
	sent := time.Now()
	for k, op := range ops {
		at := len(b.keyBuf)
		b.keyBuf = r.cfg.Key(b.keyBuf, op.Key)
		key := b.keyBuf[at:len(b.keyBuf):len(b.keyBuf)]
		b.keys[k] = key
		args := b.args[:2]
		switch op.Kind {
		case Get, RMW:
			if b.pipe == nil {
				b.begins[k] = r.model.BeginRead()
			}
			args[0], args[1] = cmdGET, key
		case Set:
			b.versions[k] = r.model.NextVersion()
			r.model.BeginWrite(op.Key, b.versions[k], false)
			b.value = EncodeValue(b.value[:0], key, b.versions[k], op.Size)
			args = append(args, b.value)
			args[0], args[1] = cmdSET, key
		case Del:
			b.begins[k] = r.model.BeginRead()
			b.versions[k] = r.model.NextVersion()
			r.model.BeginWrite(op.Key, b.versions[k], true)
			args[0], args[1] = cmdDEL, key
		}
		b.send(k, args)
	}
	if b.pipe != nil {
		// A pipe's commands leave together when it exchanges them, so its
		// reads all begin then: one tick, later than one taken per read
		// as it was queued, so it rules out no less.
		begin := r.model.BeginRead()
		for k, op := range ops {
			if op.Kind == Get || op.Kind == RMW {
				b.begins[k] = begin
			}
		}
	}
	b.wait(nil)
	// Every reply is in: the batch's reads all ended by now.
	end := r.model.Now()

	b.rmw = b.rmw[:0]
	for k, op := range ops {
		b.outcomes[k], b.whys[k] = r.judge(op, b.keys[k], b.versions[k], b.begins[k], end, b.replies[k])
		if op.Kind == RMW && b.outcomes[k] == OK {
			b.rmw = append(b.rmw, k)
		}
	}
	if len(b.rmw) > 0 {
		b.into = b.second
		for _, k := range b.rmw {
			b.versions[k] = r.model.NextVersion()
			r.model.BeginWrite(ops[k].Key, b.versions[k], false)
			b.value = EncodeValue(b.value[:0], b.keys[k], b.versions[k], ops[k].Size)
			b.send(k, append(b.args[:0], cmdSET, b.keys[k], b.value))
		}
		b.wait(b.rmw)
		for _, k := range b.rmw {
			op := ops[k]
			op.Kind = Set
			b.outcomes[k], b.whys[k] = r.judge(op, b.keys[k], b.versions[k], 0, 0, b.second[k])
			b.replies[k].at = b.second[k].at
		}
	}
	// Operations of one task whose replies came in the same read and that
	// were meant to start together took the same times: a run of them that
	// all went well is recorded at once, with its count.
	for k := 0; k < len(ops); {
		at, task := b.replies[k].at, ops[k].Task
		n := 1
		if b.outcomes[k] == OK {
			for k+n < len(ops) && ops[k+n].Task == task && b.outcomes[k+n] == OK &&
				b.replies[k+n].at.Equal(at) && b.intended[k+n].Equal(b.intended[k]) {
				n++
			}
		}
		service := at.Sub(sent)
		response := service
		if !b.intended[k].IsZero() {
			response = at.Sub(b.intended[k])
		}
		rec.record(task, at, service, response, b.outcomes[k], b.whys[k], int64(n))
		k += n
	}
}

// The command names, shared by every batch.
var (
	cmdGET = []byte("GET")
	cmdSET = []byte("SET")
	cmdDEL = []byte("DEL")
)

// judge classifies one reply, updating the model for writes. An error reply
// or a broken transport is an Error; an answer that is corrupt or that the
// model rules out is a Fail. A read began at tick begin and ended by tick
// end.
func (r *runner) judge(op Op, key []byte, version, begin, end uint64, rp reply) (Outcome, string) {
	isWrite := op.Kind == Set || op.Kind == Del
	v, why := replyValue(rp)
	if why != "" {
		if isWrite {
			r.model.EndWrite(op.Key, version, false)
		}
		return Error, fmt.Sprintf("%s %s: %s", op.Kind, key, why)
	}
	switch op.Kind {
	case Set:
		if v.Type != resp.SimpleString || string(v.Str) != "OK" {
			r.model.EndWrite(op.Key, version, false)
			return Error, fmt.Sprintf("SET %s: unexpected reply %q", key, rp.raw)
		}
		r.model.EndWrite(op.Key, version, true)
		return OK, ""
	case Del:
		if v.Type != resp.Integer {
			r.model.EndWrite(op.Key, version, false)
			return Error, fmt.Sprintf("DEL %s: unexpected reply %q", key, rp.raw)
		}
		ok, why := r.model.CheckEnded(op.Key, begin, end, Answer{Missing: v.Int == 0, Exists: v.Int > 0}, version)
		r.model.EndWrite(op.Key, version, true)
		if !ok {
			return Fail, fmt.Sprintf("DEL %s: %s", key, why)
		}
		return OK, ""
	}
	// GET, or the read of a read-modify-write.
	ans, o, why := getAnswer(key, v)
	if o == OK {
		if ok, modelWhy := r.model.CheckEnded(op.Key, begin, end, ans, 0); !ok {
			o, why = Fail, modelWhy
		}
	}
	if o != OK {
		return o, fmt.Sprintf("GET %s: %s", key, why)
	}
	return OK, ""
}

// replyValue parses a reply, or says why it is no answer: the transport
// failed, the frame is unreadable, or it is an error reply.
func replyValue(rp reply) (resp.Value, string) {
	if rp.err != nil {
		return resp.Value{}, rp.err.Error()
	}
	v, err := resp.Parse(rp.raw)
	switch {
	case err != nil:
		return v, fmt.Sprintf("unreadable reply: %v", err)
	case v.Type == resp.Error || v.Type == resp.BlobError:
		return v, string(v.Str)
	}
	return v, ""
}

// getAnswer reads a GET reply that is not an error: what it says of the key
// (OK), or why it says nothing: an Error for a reply of the wrong type, a
// Fail for a value that is corrupt or names another key.
func getAnswer(key []byte, v resp.Value) (Answer, Outcome, string) {
	switch {
	case v.IsNull:
		return Answer{Missing: true}, OK, ""
	case v.Type != resp.BulkString:
		return Answer{}, Error, fmt.Sprintf("unexpected reply type %q", byte(v.Type))
	}
	ver, integ := Verify(key, v.Str)
	if integ != Intact {
		return Answer{}, Fail, fmt.Sprintf("value is %s", integ)
	}
	return Answer{Version: ver}, OK, ""
}

// rateCheck is the open-loop half of the self-check: a generator that could
// not issue the requested rate says so.
func (r *runner) rateCheck(ph *phasePlan, pr phaseResult) []string {
	var warn []string
	for gi, g := range ph.groups {
		if g.rate <= 0 || pr.elapsed <= 0 {
			continue
		}
		got, want := float64(pr.issued[gi])/pr.elapsed.Seconds(), g.rate*float64(r.cfg.Shard.workers(g.workers))/float64(g.workers)
		if got < 0.9*want {
			warn = append(warn, fmt.Sprintf(
				"%s: the generator issued %.0f ops/s of the %.0f requested: the response times include its own backlog; add workers or lower --rate",
				ph.Name, got, want))
		}
	}
	return warn
}

// queueWaitMs is the least wait for a free worker queueCheck reports: a
// shorter one can be the generator's own scheduling on a busy machine.
const queueWaitMs = 10

// queueCheck is the open-loop self-check's other half: a task whose
// response times run far above its service times waited for a free
// worker, so its tail is the generator's own queue, whatever its issued
// rate (a backlog that drained before the end keeps that rate).
func queueCheck(ph *phasePlan, rows []Row) []string {
	if !slices.ContainsFunc(ph.groups, func(g group) bool { return g.rate > 0 }) {
		return nil
	}
	var warn []string
	for _, row := range rows {
		r, s := row.Response.P99, row.Service.P99
		if r >= 2*s && r-s >= queueWaitMs {
			warn = append(warn, fmt.Sprintf(
				"%s: response time p99 %s ms against a service time p99 of %s ms: requests waited for a free worker, so the tail is troop bench's own queue; add workers (--workers, or --readers and --writers for mixed) to measure the server's",
				row.Task, fmtMs(r), fmtMs(s)))
		}
	}
	return warn
}

// progress prints a progress line every second until stopped, when the
// configuration has somewhere to print it (a terminal).
func (r *runner) progress(label string, start, deadline time.Time, requests int64, done *atomic.Int64) (stop func()) {
	w := r.cfg.Progress
	if w == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-t.C:
			}
			el := time.Since(start)
			n := done.Load()
			rate := float64(n) / el.Seconds()
			eta := "?"
			switch {
			case !deadline.IsZero():
				eta = time.Until(deadline).Round(time.Second).String()
			case requests > 0 && rate > 0:
				eta = (time.Duration(float64(requests-n)/rate) * time.Second).Round(time.Second).String()
			}
			fmt.Fprintf(w, "\r\033[K%s  %d ops  %.0f ops/s  %s elapsed  ETA %s", label, n, rate, el.Round(time.Second), eta)
		}
	}()
	return func() { close(quit); wg.Wait() }
}

type cpuStamp struct{ user, sys time.Duration }

func cpuTime() cpuStamp {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return cpuStamp{}
	}
	return cpuStamp{time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())}
}

func cpuSince(c0 cpuStamp, wall0 time.Time, totals []Row) CPU {
	c1 := cpuTime()
	c := CPU{
		UserSeconds:   (c1.user - c0.user).Seconds(),
		SystemSeconds: (c1.sys - c0.sys).Seconds(),
		WallSeconds:   time.Since(wall0).Seconds(),
		Cores:         runtime.NumCPU(),
	}
	if c.WallSeconds > 0 {
		c.Utilization = (c.UserSeconds + c.SystemSeconds) / (c.WallSeconds * float64(c.Cores))
	}
	var n int64
	for _, t := range totals {
		n += t.Count
	}
	if n > 0 {
		c.MicrosPerOp = (c.UserSeconds + c.SystemSeconds) * 1e6 / float64(n)
	}
	return c
}
