package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testredis"
)

func TestParseShard(t *testing.T) {
	if s, err := ParseShard("2/3"); err != nil || s != (Shard{2, 3}) {
		t.Errorf("2/3: %v, %v", s, err)
	}
	for _, bad := range []string{"", "2", "0/0", "0/3", "4/3", "1/0", "a/b", "-1/3", "1/3/4"} {
		if _, err := ParseShard(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The shards' keys are disjoint and cover the key set; their workers
// partition every group's.
func TestShardsPartitionKeysAndWorkers(t *testing.T) {
	for _, keys := range []uint64{3, 7, 1000, 1 << 62} {
		for n := 1; n <= 5 && uint64(n) <= keys; n++ {
			next := uint64(0)
			for i := 1; i <= n; i++ {
				first, k := Shard{i, n}.keyRange(keys)
				if first != next || k == 0 {
					t.Fatalf("keys %d, shard %d/%d: [%d, +%d) after %d", keys, i, n, first, k, next)
				}
				next = first + k
			}
			if next != keys {
				t.Fatalf("keys %d, %d shards end at %d", keys, n, next)
			}
		}
	}
	for workers := 1; workers <= 9; workers++ {
		for n := 1; n <= workers; n++ {
			owners := make([]int, workers)
			sum := 0
			for i := 1; i <= n; i++ {
				sh := Shard{i, n}
				mine := 0
				for w := range workers {
					if sh.owns(w) {
						owners[w]++
						mine++
					}
				}
				if mine != sh.workers(workers) {
					t.Fatalf("%d workers, shard %s owns %d, counts %d", workers, sh, mine, sh.workers(workers))
				}
				sum += mine
			}
			for w, o := range owners {
				if o != 1 {
					t.Fatalf("%d workers over %d shards: worker %d has %d owners", workers, n, w, o)
				}
			}
		}
	}
}

// Shard I's operations touch its own keys only, and the shards together
// issue the whole run's requests.
func TestShardOperations(t *testing.T) {
	for _, job := range []string{JobCRUD, JobMixed, "ycsb-a", "ycsb-d"} {
		whole := smallConfig(job)
		whole.Writers = 3
		var count, wholeCount int
		for _, b := range opsN(whole, 1, 1000) {
			wholeCount += countOps(b)
		}
		for i := 1; i <= 3; i++ {
			cfg := whole
			cfg.Shard = Shard{i, 3}
			first, n := cfg.Shard.keyRange(cfg.Keys)
			p, err := makePlan(&cfg, 1)
			if err != nil {
				t.Fatal(err)
			}
			for pi := range p.phases {
				for gi := range p.phases[pi].groups {
					g := &p.phases[pi].groups[gi]
					for w := range g.workers {
						if !cfg.Shard.owns(w) {
							continue
						}
						gen := newGen(&cfg, g, 1, pi, gi, w)
						for ops := gen.Batch(nil); len(ops) > 0; ops = gen.Batch(ops[:0]) {
							for _, op := range ops {
								if op.Key < first || op.Key >= first+n {
									t.Fatalf("%s shard %d/3: key %d outside [%d, %d)", job, i, op.Key, first, first+n)
								}
							}
							count += len(ops)
						}
					}
				}
			}
		}
		if count != wholeCount {
			t.Errorf("%s: the shards issued %d operations, a whole run %d", job, count, wholeCount)
		}
	}
}

func countOps(batch []Op) int {
	n := 0
	for _, op := range batch {
		if op.Task >= 0 {
			n++
		}
	}
	return n
}

// The shards' send times (Intended) are the whole run's, so together they
// keep its rate and its even spacing, and each measures from them.
func TestShardsKeepTheWholeSchedule(t *testing.T) {
	start := time.Unix(1000, 0)
	const workers, rate, perWorker = 7, 700.0, 20
	var whole, sharded []time.Time
	for w := range workers {
		for i := range int64(perWorker) {
			whole = append(whole, Intended(start, rate, w, workers, i))
		}
	}
	for s := 1; s <= 3; s++ {
		sh := Shard{s, 3}
		for w := range workers {
			if sh.owns(w) {
				for i := range int64(perWorker) {
					sharded = append(sharded, Intended(start, rate, w, workers, i))
				}
			}
		}
	}
	if fmt.Sprint(sortTimes(whole)) != fmt.Sprint(sortTimes(sharded)) {
		t.Error("the shards' send times are not the whole run's")
	}
}

func sortTimes(ts []time.Time) []time.Time {
	out := slices.Clone(ts)
	slices.SortFunc(out, time.Time.Compare)
	return out
}

func TestShardNeedsAWorkerEach(t *testing.T) {
	cfg := smallConfig(JobMixed)
	cfg.Writers, cfg.Shard = 2, Shard{1, 3}
	_, err := makePlan(&cfg, 1)
	if err == nil || !strings.Contains(err.Error(), "--writers") {
		t.Errorf("2 writers over 3 shards: %v", err)
	}
	cfg = smallConfig(JobWrite)
	cfg.Keys, cfg.KeySize, cfg.Shard = 2, 16, Shard{1, 3}
	if err := cfg.Validate(); err == nil {
		t.Error("2 keys over 3 shards: no error")
	}
}

// shardResult is a result of shard sh whose one task recorded latencies
// (µs) in seconds secs, each ending OK but for every 17th (an Error) and
// 29th (a Fail).
func shardResult(sh Shard, lat []int64, secs []int) *Result {
	cfg := smallConfig(JobWrite)
	cfg.Shard, cfg.StartAt = sh, time.Unix(2000, 0)
	s := newTaskStats()
	ser := newSeries(1)
	for i, l := range lat {
		o := OK
		switch {
		case l%17 == 0:
			o = Error
		case l%29 == 0:
			o = Fail
		}
		s.record(time.Duration(l/2)*time.Microsecond, time.Duration(l)*time.Microsecond, o, "why", 1)
		ser.record(0, secs[i], l, o, 1)
	}
	row := newRow("Write", "Set", 1, 3, s, ser.points(0, true))
	tot := row
	tot.Iteration, tot.Series = 0, nil
	return &Result{Seed: cfg.Seed, Config: cfg, Rows: []Row{row}, Totals: []Row{tot}, CPU: CPU{UserSeconds: 1, WallSeconds: 3, Cores: 2}}
}

// Property: the merge of the shards' results is, histogram for histogram,
// that of one process that recorded every request: the same counts, the
// same p99, bucket for bucket, and the same per-second series.
func TestMergeIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	for round := range 50 {
		n := 1 + r.IntN(5)
		lats := make([][]int64, n)
		secs := make([][]int, n)
		var all []int64
		var allSecs []int
		for range 1 + r.IntN(3000) {
			l := 1 + r.Int64N(1+r.Int64N(2_000_000)) // heavy tailed, up to 2 s
			sec := r.IntN(4)
			s := r.IntN(n)
			lats[s] = append(lats[s], l)
			secs[s] = append(secs[s], sec)
			all, allSecs = append(all, l), append(allSecs, sec)
		}
		shards := make([]*Result, n)
		names := make([]string, n)
		for i := range n {
			shards[i] = shardResult(Shard{i + 1, n}, lats[i], secs[i])
			names[i] = fmt.Sprintf("s%d.json", i+1)
		}
		r.Shuffle(n, func(i, j int) { shards[i], shards[j] = shards[j], shards[i]; names[i], names[j] = names[j], names[i] })
		m, err := Merge(shards, names)
		if err != nil {
			t.Fatal(err)
		}
		one := shardResult(Shard{1, 1}, all, allSecs)
		for i, pair := range [][2]Row{{m.Rows[0], one.Rows[0]}, {m.Totals[0], one.Totals[0]}} {
			got, want := pair[0], pair[1]
			if got.Count != want.Count || got.Errors != want.Errors || got.Fails != want.Fails {
				t.Fatalf("round %d row %d: merged %d/%d/%d, all %d/%d/%d", round, i, got.Count, got.Errors, got.Fails, want.Count, want.Errors, want.Fails)
			}
			if got.Response != want.Response || got.Service != want.Service {
				t.Fatalf("round %d row %d: merged %+v, all %+v", round, i, got.Response, want.Response)
			}
			if got.ResponseHist != want.ResponseHist || got.ServiceHist != want.ServiceHist {
				t.Fatalf("round %d row %d: the merged histograms differ from those of all the requests", round, i)
			}
			if fmt.Sprint(got.Series) != fmt.Sprint(want.Series) {
				t.Fatalf("round %d row %d: merged series %v, all %v", round, i, got.Series, want.Series)
			}
		}
		var sum int64
		for _, s := range shards {
			sum += s.Totals[0].Count
		}
		if m.Totals[0].Count != sum || m.Shards != n || m.Config.Shard != (Shard{}) {
			t.Fatalf("round %d: merged %d ops of %d shards (%v), the shards %d", round, m.Totals[0].Count, m.Shards, m.Config.Shard, sum)
		}
	}
}

func TestMergeRefuses(t *testing.T) {
	lat, secs := []int64{100, 200}, []int{0, 1}
	sh := func(i, n int) *Result { return shardResult(Shard{i, n}, lat, secs) }
	other := sh(2, 3)
	other.Config.Seed = 9
	late := sh(2, 3)
	late.Config.StartAt = late.Config.StartAt.Add(time.Second)
	unsharded := sh(1, 3)
	unsharded.Config.Shard = Shard{}
	nostart := sh(1, 3)
	nostart.Config.StartAt = time.Time{}
	for _, c := range []struct {
		shards []*Result
		want   string
	}{
		{[]*Result{sh(1, 3), sh(3, 3)}, "the merge needs all 3 shards of the run, and shard 2/3 is missing"},
		{[]*Result{sh(1, 4)}, "shards 2/4, 3/4 and 4/4 are missing"},
		{[]*Result{sh(1, 3), sh(2, 3), sh(2, 3), sh(3, 3)}, "shard 2/3 is given twice, as f1 and as f2"},
		{[]*Result{sh(1, 3), sh(2, 2)}, "f0 is shard 1/3 and f1 shard 2/2"},
		{[]*Result{sh(1, 3), other, sh(3, 3)}, "seed 1 → 9"},
		{[]*Result{sh(1, 3), late, sh(3, 3)}, "start-at"},
		{[]*Result{unsharded}, "f0 is no shard's result"},
		{[]*Result{nostart}, "ran without --start-at"},
		{nil, "no results"},
	} {
		names := make([]string, len(c.shards))
		for i := range names {
			names[i] = fmt.Sprintf("f%d", i)
		}
		_, err := Merge(c.shards, names)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want %q, got %v", c.want, err)
		}
	}
}

// Three shards run together against one redis-server: each checks its
// own keys without a Fail, and their merge counts every request.
func TestShardsRunAndMerge(t *testing.T) {
	srv := testredis.Start(t)
	base := smallConfig(JobMixed)
	base.Readers, base.Writers = 3, 3
	targets := []*RESPTarget{respTarget(t, srv.Addr, 2), respTarget(t, srv.Addr, 2), respTarget(t, srv.Addr, 2)}
	// Time enough for the three to reach the start on a busy machine.
	base.StartAt = time.Now().Add(time.Second)
	shards := make([]*Result, 3)
	errs := make([]error, 3)
	outs := make([]bytes.Buffer, 3)
	var wg sync.WaitGroup
	for i, tg := range targets {
		cfg := base
		cfg.Shard = Shard{i + 1, 3}
		wg.Add(1)
		go func() {
			defer wg.Done()
			shards[i], errs[i] = Run(context.Background(), cfg, tg, &outs[i])
		}()
	}
	wg.Wait()
	var sum int64
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shard %d: %v", i+1, err)
		}
		if !strings.Contains(outs[i].String(), fmt.Sprintf("shard      %d/3", i+1)) {
			t.Errorf("shard %d's header does not name it:\n%s", i+1, outs[i].String())
		}
		for _, tot := range shards[i].Totals {
			sum += tot.Count
			if tot.Fails != 0 || tot.Errors != 0 {
				t.Errorf("shard %d %s: %d errors, %d fails: %v %v", i+1, tot.Task, tot.Errors, tot.Fails, tot.ErrorSamples, tot.FailSamples)
			}
		}
	}
	m, err := Merge(shards, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	var got int64
	for _, tot := range m.Totals {
		got += tot.Count
	}
	if got != sum || got != base.Requests {
		t.Errorf("merged %d requests, the shards %d, the run asked %d", got, sum, base.Requests)
	}
	// A start already past is refused before any load.
	cfg := base
	cfg.Shard = Shard{1, 3}
	if _, err := Run(context.Background(), cfg, respTarget(t, srv.Addr, 1), nil); err == nil || !strings.Contains(err.Error(), "passed") {
		t.Errorf("a past --start-at: %v", err)
	}
}

// ParseShard takes any text without panicking, and what it accepts is a
// valid shard that prints back as it was read.
func FuzzParseShard(f *testing.F) {
	for _, s := range []string{"1/1", "2/3", "0/0", "3/2", "-1/2", "1/", "/", "9999999999999999999/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sh, err := ParseShard(s)
		if err != nil {
			return
		}
		if sh.Index < 1 || sh.Index > sh.Count {
			t.Fatalf("%q accepted as %+v", s, sh)
		}
		if again, err := ParseShard(sh.String()); err != nil || again != sh {
			t.Fatalf("%q read as %v, which reads back as %v, %v", s, sh, again, err)
		}
	})
}
