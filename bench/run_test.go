package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/resp"
)

func smallConfig(job string) Config {
	cfg := DefaultConfig()
	cfg.Job, cfg.Keys, cfg.Requests, cfg.Duration = job, 500, 500, 0
	cfg.Workers, cfg.Readers, cfg.Writers = 4, 4, 1
	cfg.ValueSize = Range{100, 300}
	cfg.Pipeline = Range{3, 10}
	cfg.Timeout = 2 * time.Second
	return cfg
}

func respTarget(t *testing.T, addr string, conns int) *RESPTarget {
	t.Helper()
	tg, err := NewRESPTarget([]string{addr}, conns, 2*time.Second, client.Dial{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	if err := tg.Ping(); err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestCRUDTableAgainstRedis(t *testing.T) {
	srv := testredis.Start(t)
	cfg := smallConfig(JobCRUD)
	cfg.Iterations = 2
	var out bytes.Buffer
	res, err := Run(context.Background(), cfg, respTarget(t, srv.Addr, 2), &out)
	if err != nil {
		t.Fatal(err)
	}
	table := out.String()
	for _, col := range strings.Fields("Test Req/Sec 50% 90% 99% 99.5% 99.9% Max Errors Fails StdDev Ratio") {
		if !strings.Contains(table, col) {
			t.Errorf("table lacks column %s", col)
		}
	}
	for _, task := range []string{"PutCreate", "Get", "PutUpdate", "Delete"} {
		if n := strings.Count(table, "\n"+task+" "); n != 3 { // two iterations and the summary
			t.Errorf("task %s has %d rows, want 3:\n%s", task, n, table)
		}
	}
	if n := strings.Count(table, "\nTotal "); n != 5 {
		t.Errorf("%d Total rows, want 5 (one per task, one overall)", n)
	}
	if len(res.Rows) != 8 || len(res.Totals) != 4 {
		t.Fatalf("%d rows and %d totals", len(res.Rows), len(res.Totals))
	}
	for _, r := range res.Totals {
		if r.Count != 1000 || r.Errors != 0 || r.Fails != 0 {
			t.Errorf("%s: %d ops, %d errors, %d fails; want 1000, 0, 0 (%v %v)", r.Task, r.Count, r.Errors, r.Fails, r.ErrorSamples, r.FailSamples)
		}
		if r.Response.P50 <= 0 || r.ReqPerSec <= 0 || r.ResponseHist == "" {
			t.Errorf("%s: empty figures %+v", r.Task, r.Response)
		}
	}
	if res.CPU.UserSeconds+res.CPU.SystemSeconds <= 0 {
		t.Error("client CPU not measured")
	}
	t.Log("\n" + table)
}

// recorder target: logs every command (name, key, value length) in order.
type logTarget struct {
	Target
	mu  sync.Mutex
	log []string
}

func (l *logTarget) Send(args [][]byte, done func([]byte, error)) {
	l.mu.Lock()
	e := string(args[0]) + " " + string(args[1])
	if len(args) > 2 {
		e += fmt.Sprintf(" %d", len(args[2]))
	}
	l.log = append(l.log, e)
	l.mu.Unlock()
	l.Target.Send(args, done)
}

func (l *logTarget) Flush() {
	l.mu.Lock()
	l.log = append(l.log, "|")
	l.mu.Unlock()
	l.Target.Flush()
}

func TestSameSeedSameSequenceAgainstRedis(t *testing.T) {
	srv := testredis.Start(t)
	run := func(seed uint64) []string {
		cfg := smallConfig("ycsb-f")
		cfg.Workers, cfg.Seed, cfg.Distribution = 1, seed, Zipfian
		lt := &logTarget{Target: respTarget(t, srv.Addr, 1)}
		if _, err := Run(context.Background(), cfg, lt, nil); err != nil {
			t.Fatal(err)
		}
		return lt.log
	}
	a, b, c := run(7), run(7), run(8)
	if len(a) < 500 {
		t.Fatalf("only %d commands logged", len(a))
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("same seed, different command sequences")
	}
	if reflect.DeepEqual(a, c) {
		t.Error("different seeds, same command sequence")
	}
}

// tamper writes over some keys with a raw RESP SET on its own connection the
// first time the benchmark reads: damage done behind the tool's back.
type tamper struct {
	Target
	addr string
	once sync.Once
	err  error
}

func (tp *tamper) Send(args [][]byte, done func([]byte, error)) {
	if string(args[0]) == "GET" {
		tp.once.Do(func() { tp.err = tp.corrupt() })
	}
	tp.Target.Send(args, done)
}

func (tp *tamper) corrupt() error {
	c, err := net.DialTimeout("tcp", tp.addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	k := func(i uint64) []byte { return FormatKey([]byte(DefaultKeyPrefix), i, 16) }
	good := EncodeValue(nil, k(3), 1, 200)
	flipped := bytes.Clone(good)
	flipped[150] ^= 1
	var req []byte
	req = resp.AppendCommand(req, []byte("SET"), k(1), []byte("garbage"))                  // malformed
	req = resp.AppendCommand(req, []byte("SET"), k(2), flipped)                            // corrupt
	req = resp.AppendCommand(req, []byte("SET"), k(4), good)                               // another key's value
	req = resp.AppendCommand(req, []byte("SET"), k(5), EncodeValue(nil, k(5), 1<<40, 200)) // intact, a version never written
	req = resp.AppendCommand(req, []byte("DEL"), k(6))                                     // gone, though acknowledged
	if _, err := c.Write(req); err != nil {
		return err
	}
	rd := resp.NewReader(c, resp.DefaultLimits)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	for range 5 {
		if _, err := rd.ReadRaw(nil); err != nil {
			return err
		}
	}
	return nil
}

// tamperPipes is tamper for workers that drive pipes of their own.
type tamperPipes struct {
	*tamper
	piper Piper
}

func (tp *tamperPipes) Pipes() int { return tp.piper.Pipes() }

func (tp *tamperPipes) Pipe(n int) Pipe { return &tamperPipe{Pipe: tp.piper.Pipe(n), tp: tp.tamper} }

type tamperPipe struct {
	Pipe
	tp *tamper
}

func (p *tamperPipe) Send(args [][]byte) {
	if string(args[0]) == "GET" {
		p.tp.once.Do(func() { p.tp.err = p.tp.corrupt() })
	}
	p.Pipe.Send(args)
}

func TestCorruptionIsAFailNotAnError(t *testing.T) {
	srv := testredis.Start(t)
	cfg := smallConfig(JobCRUD)
	for _, conns := range []int{2, 4} { // workers share connections; each has its own pipe
		t.Run(fmt.Sprintf("conns=%d", conns), func(t *testing.T) {
			rt := respTarget(t, srv.Addr, conns)
			tp := &tamper{Target: rt, addr: srv.Addr}
			target := Target(tp)
			if conns >= cfg.Workers {
				target = &tamperPipes{tamper: tp, piper: rt}
			}
			corruptionIsAFail(t, cfg, target, tp)
		})
	}
}

func corruptionIsAFail(t *testing.T, cfg Config, target Target, tp *tamper) {
	res, err := Run(context.Background(), cfg, target, nil)
	if err != nil || tp.err != nil {
		t.Fatal(err, tp.err)
	}
	for _, r := range res.Totals {
		if r.Errors != 0 {
			t.Errorf("%s: %d errors: %v", r.Task, r.Errors, r.ErrorSamples)
		}
		if r.Task == "Get" && r.Fails != 5 {
			t.Errorf("Get: %d fails, want 5: %v", r.Fails, r.FailSamples)
		}
		if r.Task == "Get" {
			t.Logf("fail samples: %q", r.FailSamples)
		}
	}
}

func TestUnreachableTargetNamesAddress(t *testing.T) {
	tg, err := NewRESPTarget([]string{"127.0.0.1:1"}, 1, 500*time.Millisecond, client.Dial{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	start := time.Now()
	err = tg.Ping()
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Ping = %v, want an error naming the address", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("Ping took %v", time.Since(start))
	}
}

// Open loop: the run keeps the rate and stops when the requests are spent.
func TestOpenLoopRate(t *testing.T) {
	srv := testredis.Start(t)
	cfg := smallConfig(JobMixed)
	cfg.Requests, cfg.Rate, cfg.Pipeline = 1000, 2000, Range{1, 1}
	start := time.Now()
	res, err := Run(context.Background(), cfg, respTarget(t, srv.Addr, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 400*time.Millisecond || el > 2*time.Second {
		t.Errorf("1000 ops at 2000/s took %v, want about 0.5 s", el)
	}
	var n int64
	for _, r := range res.Totals {
		n += r.Count
	}
	if n != 1000 {
		t.Errorf("%d ops, want 1000", n)
	}
}

// Pausing the server for 1 s during an open-loop run at rate R shows in the
// response times, counted from each request's intended start (no coordinated
// omission): the requests meant to start in the pause but its last 0.5 s
// wait at least 0.5 s, about R/2 of them, plus any that queue behind them.
// The pause is as long as it really was between the signals (on a busy
// machine the goroutine that sends SIGCONT may run late), and the run is
// stopped a second after it ends, so that it holds the whole pause and the
// queue behind it drains.
func TestPausedServerShowsInResponseTime(t *testing.T) {
	for _, conns := range []int{2, 10} { // workers share connections; each has its own pipe
		t.Run(fmt.Sprintf("conns=%d", conns), func(t *testing.T) { pausedServer(t, conns) })
	}
}

func pausedServer(t *testing.T, conns int) {
	srv := testredis.Start(t)
	const rate = 1000
	cfg := smallConfig(JobMixed)
	cfg.Requests, cfg.Duration, cfg.Rate, cfg.Pipeline = 0, time.Minute, rate, Range{1, 1}
	cfg.Readers, cfg.Writers = 8, 2
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	paused := make(chan [2]time.Time, 1)
	go func() {
		time.Sleep(time.Second)
		srv.Cmd.Process.Signal(syscall.SIGSTOP)
		stopped := time.Now()
		time.Sleep(time.Second)
		srv.Cmd.Process.Signal(syscall.SIGCONT)
		paused <- [2]time.Time{stopped, time.Now()}
		time.Sleep(time.Second)
		stop()
	}()
	res, err := Run(ctx, cfg, respTarget(t, srv.Addr, conns), nil)
	if res == nil || err != nil && !errors.Is(err, context.Canceled) { // the stop keeps what was measured
		t.Fatal(err)
	}
	ended := time.Now()
	p := <-paused
	pause := p[1].Sub(p[0])
	slow := int64(0)
	for _, r := range res.Totals {
		h, err := DecodeHist(r.ResponseHist)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range h.Distribution() {
			if b.From >= 500_000 { // µs
				slow += b.Count
			}
		}
		if r.Errors != 0 || r.Fails != 0 {
			t.Errorf("%s: %d errors, %d fails", r.Task, r.Errors, r.Fails)
		}
	}
	// At least those meant to start in the pause but its last 0.5 s; at
	// most those meant to start from 0.5 s before it to the end, the rest
	// of the run having had a server that answers.
	least := int64(rate * (pause - 500*time.Millisecond).Seconds())
	most := int64(rate * (ended.Sub(p[0]) + 500*time.Millisecond).Seconds())
	if slow < least*6/10 || slow > most {
		t.Errorf("%d responses of at least 0.5 s, want about %d (R times the pause less 0.5 s) and at most %d, for a pause of %v at R=%d", slow, least, most, pause.Round(time.Millisecond), rate)
	}
	t.Logf("%d responses of at least 0.5 s at R=%d, the pause %v", slow, rate, pause.Round(time.Millisecond))
}

// countedPipes counts the pipes a run takes.
type countedPipes struct {
	*RESPTarget
	taken atomic.Int32
}

func (c *countedPipes) Pipe(n int) Pipe { c.taken.Add(1); return c.RESPTarget.Pipe(n) }

// With a connection for every worker, each worker drives a pipe of its own:
// every job runs through them (read-modify-writes take a second exchange)
// with every operation counted and checked, and no errors or fails. With
// fewer connections than workers, the workers share them instead.
func TestPipesAgainstRedis(t *testing.T) {
	srv := testredis.Start(t)
	for _, job := range Jobs() {
		cfg := smallConfig(job)
		cfg.Readers, cfg.Writers = 3, 1 // mixed: 4 workers, as the others have
		for _, conns := range []int{3, 4} {
			target := &countedPipes{RESPTarget: respTarget(t, srv.Addr, conns)}
			res, err := Run(context.Background(), cfg, target, nil)
			if err != nil {
				t.Fatal(err)
			}
			phases := map[string]bool{}
			for _, r := range res.Totals {
				phases[r.Phase] = true
			}
			wantPipes := int32(0)
			if conns >= 4 {
				wantPipes = int32(4 * len(phases)) // each phase's workers take one each
			}
			if got := target.taken.Load(); got != wantPipes {
				t.Errorf("%s, %d connections: %d pipes taken, want %d", job, conns, got, wantPipes)
			}
			var n int64
			for _, r := range res.Totals {
				n += r.Count
				if r.Errors != 0 || r.Fails != 0 {
					t.Errorf("%s, %d connections, %s: %d errors, %d fails: %v %v", job, conns, r.Task, r.Errors, r.Fails, r.ErrorSamples, r.FailSamples)
				}
				if r.Count > 0 && (r.Service.P50 <= 0 || r.ResponseHist == "") {
					t.Errorf("%s, %s: no latencies recorded", job, r.Task)
				}
			}
			if want := cfg.Requests * int64(len(phases)); n != want { // --requests is per phase
				t.Errorf("%s, %d connections: %d operations, want %d", job, conns, n, want)
			}
		}
	}
}
