package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/resp"
)

// TestHarness runs the whole harness at smoke size against real processes
// and checks behaviour only: every target served requests, no errors or
// wrong replies, the JSON file complete. It never checks speed.
// generatorsAndTargets are the rows a full run has for each depth.
var generatorsAndTargets = []string{"direct", "nutcracker", "troop-node", "redis-benchmark", "troop-bench", "dc_one", "dc_quorum", "tls_dc_quorum"}

// repairRows are the write-path rows of the repair experiments: on,
// versioned and off, all up and one node down.
const repairRows = 6

func TestHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, nutcracker and troop nodes; skipped with -short")
	}
	for _, bin := range []string{"nutcracker", "redis-benchmark", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not installed (Debian: nutcracker, redis-tools; make test installs them): the harness needs it", bin)
		}
	}
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("TROOP_REDIS_SERVER") == "" {
		t.Fatal("redis-server not found on PATH: install it (Debian: apt-get install redis-server)")
	}
	cfg := defaultConfig()
	cfg.Quick = true
	cfg.applyQuick(nil)
	cfg.Conns = 8
	cfg.Keys = 500
	cfg.Warmup = seconds(100 * time.Millisecond)
	cfg.Duration = seconds(500 * time.Millisecond)
	cfg.MemoryKeys, cfg.MemoryLoad, cfg.MemoryAfter = 2000, seconds(time.Second), seconds(time.Second)
	cfg.MembershipKeys, cfg.MembershipWindow = 2000, seconds(time.Second)
	// A tenth of the closed loop, not half: the check is that every request
	// gets its reply through the change, and a closed loop measured for a
	// second on a busy machine can be twice what the lab serves a moment
	// later, when half of it would be an overload, its replies late past
	// the timeout.
	cfg.MembershipLoad = 0.1
	cfg.Peers = false     // TestPeers runs it, where Dynomite is at hand
	cfg.Consensus = false // TestConsensus runs it
	cfg.Out = filepath.Join(t.TempDir(), "perf-store.json")
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	// Every other experiment, each briefly: about a minute on a quiet machine,
	// more than two on a loaded one.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("harness ran in %v", time.Since(start).Round(time.Millisecond))

	data, err := os.ReadFile(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	var res result
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, p := range cfg.Pipelines {
		for _, target := range generatorsAndTargets {
			want[target+"/"+strconv.Itoa(p)] = true
		}
	}
	var redisCPU float64
	for _, r := range res.Rounds {
		delete(want, r.Target+"/"+strconv.Itoa(r.Pipeline))
		if r.Error != "" {
			t.Errorf("%s P=%d: %s", r.Target, r.Pipeline, r.Error)
		}
		if r.Ops <= 0 || r.OpsPerSec <= 0 {
			t.Errorf("%s P=%d served no requests: %+v", r.Target, r.Pipeline, r.counts)
		}
		if r.ErrorReplies != 0 || r.BadReplies != 0 {
			t.Errorf("%s P=%d: %d error replies (first: %q), %d wrong replies", r.Target, r.Pipeline, r.ErrorReplies, r.FirstErrorReply, r.BadReplies)
		}
		anchor := r.Target == "redis-benchmark" || r.Target == "troop-bench" // load generators that run GET only
		if strings.HasPrefix(r.Experiment, "writes") {
			if r.Gets != 0 || r.Sets != r.Ops {
				t.Errorf("%s %s P=%d: %d GETs + %d SETs for %d ops, want SETs only", r.Experiment, r.Target, r.Pipeline, r.Gets, r.Sets, r.Ops)
			}
		} else if !anchor && (r.Gets == 0 || r.Sets == 0 || r.Gets+r.Sets != r.Ops) {
			t.Errorf("%s P=%d: %d GETs + %d SETs for %d ops", r.Target, r.Pipeline, r.Gets, r.Sets, r.Ops)
		}
		// The generator, busy the whole window, must show CPU in every
		// round (CPU clocks count nanoseconds); a lightly loaded
		// redis-server must show some over the run.
		if r.GeneratorUsPerOp <= 0 || r.RedisUsPerOp < 0 {
			t.Errorf("%s P=%d: CPU per op not measured: generator %v, redis %v", r.Target, r.Pipeline, r.GeneratorUsPerOp, r.RedisUsPerOp)
		}
		redisCPU += r.RedisUsPerOp
		if r.Target != "direct" && !anchor && r.ProxyUsPerOp <= 0 {
			t.Errorf("%s P=%d: proxy CPU per op not measured", r.Target, r.Pipeline)
		}
	}
	if redisCPU <= 0 {
		t.Error("no round measured any redis-server CPU")
	}
	for k := range want {
		t.Errorf("no round for %s", k)
	}
	// The TLS experiment has a plain dc_quorum row of its own besides the
	// cluster experiment's.
	if want := (len(generatorsAndTargets) + repairRows + 1) * len(cfg.Pipelines); len(res.Summary) != want {
		t.Errorf("%d summary rows, want %d", len(res.Summary), want)
	}
	if ae := res.AntiEntropy; ae == nil || !ae.Converged || len(ae.First) == 0 {
		t.Errorf("anti-entropy experiment: %+v, want two passes and convergence", ae)
	} else {
		var first struct{ Differing, Repaired int64 }
		json.Unmarshal(ae.First, &first)
		if first.Differing != int64(ae.Differing) || first.Repaired != int64(ae.Differing) {
			t.Errorf("first pass found %d and repaired %d of %d differing keys", first.Differing, first.Repaired, ae.Differing)
		}
	}
	// The bulk load and the commands experiment ran, every test on both
	// targets, with the bulk load's error count read from redis-cli.
	if len(res.Bulk) != 2*cfg.Rounds || !strings.HasPrefix(res.Bulk[1].Pipe, "errors: 0,") {
		t.Errorf("bulk load: %+v", res.Bulk)
	}
	if l := res.Latency; l == nil || l.Rate <= 0 || len(l.Runs) != 2*cfg.Rounds {
		t.Errorf("latency experiment: %+v", l)
	} else {
		for _, run := range l.Runs {
			for _, r := range run.Rows {
				if r.Count == 0 || r.Errors != 0 || r.Fails != 0 {
					t.Errorf("latency experiment, %s %s: %d requests, %d errors, %d fails", run.Target, r.Task, r.Count, r.Errors, r.Fails)
				}
			}
		}
	}
	// The membership experiment added a node under a workload that got
	// every reply it asked for, before and during the change.
	if m := res.Membership; m == nil || m.ChangeSeconds <= 0 || m.Rate <= 0 || len(m.Before) == 0 || len(m.During) == 0 {
		t.Errorf("membership experiment: %+v", m)
	} else {
		for _, r := range append(m.Before, m.During...) {
			if r.Count == 0 || r.Errors != 0 || r.Fails != 0 {
				t.Errorf("membership experiment, %s: %d requests, %d errors, %d fails (%q %q)", r.Task, r.Count, r.Errors, r.Fails, r.ErrorSamples, r.FailSamples)
			}
		}
	}
	ran := map[string]bool{}
	for _, r := range res.Commands {
		if r.OpsPerSec <= 0 || (r.Target == "troop-node" && r.NodeUsPerOp <= 0) {
			t.Errorf("commands: %+v", r)
		}
		ran[r.Target+"/"+r.Test] = true
	}
	if len(ran) != 2*len(commandTests) {
		t.Errorf("commands experiment ran %d of %d tests and targets: %v", len(ran), 2*len(commandTests), ran)
	}
	// The memory experiment sampled both targets' RSS and read both
	// redis-servers' used_memory.
	if m := res.Memory; m == nil || len(m.Bursts) != 2 || m.Keys == nil {
		t.Errorf("memory experiment: %+v", m)
	} else {
		for _, b := range m.Bursts {
			if b.StartRSS <= 0 || b.PeakRSS < b.StartRSS || len(b.PerSecond) == 0 {
				t.Errorf("memory burst through %s: %+v", b.Target, b)
			}
		}
		if k := m.Keys; k.DirectUsed <= k.DirectEmpty || k.TroopUsed <= k.TroopEmpty || k.Ratio <= 0 || k.NodeRSS <= 0 {
			t.Errorf("memory of %d keys: %+v", cfg.MemoryKeys, k)
		}
	}
	if len(res.Checks) == 0 {
		t.Error("no checks evaluated")
	}
	for _, c := range res.Checks {
		if c.Kind == "sanity" {
			t.Errorf("sanity check failed: %s: %s", c.Name, c.Text)
		}
	}
	// Every field of the file is there, and the environment is filled in.
	var generic map[string]any
	if err := json.Unmarshal(data, &generic); err != nil {
		t.Fatal(err)
	}
	checkFields(t, "", reflect.TypeOf(res), generic)
	for _, f := range []string{"redis_server", "nutcracker", "redis_benchmark", "troop", "troop_go", "troop_revision", "go"} {
		if v, _ := generic["env"].(map[string]any)[f].(string); v == "" || v == "unknown" {
			t.Errorf("env.%s not recorded: %q", f, v)
		}
	}
	if res.Config.Seed != cfg.Seed || res.Env.CPUs <= 0 {
		t.Errorf("config or env incomplete: seed %d, cpus %d", res.Config.Seed, res.Env.CPUs)
	}
	for _, s := range []string{"Proxy overhead", "Three-rack", "hints, read repair and versions on vs off", "Anti-entropy", "Targets and anchors"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the printed report lacks %q:\n%s", s, out.String())
		}
	}
}

// checkFields asserts that every JSON field of type typ (except omitempty
// ones) is present in obj, recursing into structs and the first element of
// slices.
func checkFields(t *testing.T, path string, typ reflect.Type, obj any) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch typ.Kind() {
	case reflect.Struct:
		if typ == reflect.TypeOf(time.Time{}) {
			return
		}
		m, ok := obj.(map[string]any)
		if !ok {
			t.Errorf("%s: want an object, got %T", path, obj)
			return
		}
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Anonymous { // embedded: its fields are inline
				checkFields(t, path, f.Type, obj)
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || strings.Contains(opts, "omitempty") {
				continue
			}
			v, ok := m[name]
			if !ok {
				t.Errorf("JSON lacks %s.%s", path, name)
				continue
			}
			checkFields(t, path+"."+name, f.Type, v)
		}
	case reflect.Slice:
		list, ok := obj.([]any)
		if !ok {
			if typ.Elem().Kind() != reflect.Struct {
				return
			}
			t.Errorf("%s: want a list, got %T", path, obj)
			return
		}
		if len(list) == 0 && typ.Elem().Kind() == reflect.Struct {
			t.Errorf("%s is empty", path)
		}
		if len(list) > 0 {
			checkFields(t, path+"[0]", typ.Elem(), list[0])
		}
	}
}

// The commands the generator writes are well-formed RESP, and the read
// check accepts exactly nil and the value written for that key.
func TestCommandsAndCheck(t *testing.T) {
	for _, k := range []int{0, 7, 123456, 999_999_999_999} {
		v, err := resp.Parse(appendSet(nil, k))
		if err != nil || len(v.Elems) != 3 || string(v.Elems[0].Str) != "SET" || len(v.Elems[2].Str) != valueSize {
			t.Fatalf("SET %d: %v %v", k, v, err)
		}
		key := v.Elems[1].Str
		if len(key) != keyLen || !bytes.HasPrefix(v.Elems[2].Str, append(key, '|')) {
			t.Fatalf("SET %d: key %q, value starts %q", k, key, v.Elems[2].Str[:20])
		}
		g, err := resp.Parse(appendGet(nil, k))
		if err != nil || len(g.Elems) != 2 || string(g.Elems[0].Str) != "GET" || !bytes.Equal(g.Elems[1].Str, key) {
			t.Fatalf("GET %d: %v %v", k, g, err)
		}
		reply := resp.AppendBulk(nil, v.Elems[2].Str)
		if got := checkGet(reply, k); got != getHit {
			t.Errorf("value of %d: %v, want hit", k, got)
		}
		if got := checkGet(reply, k+1); got != getBad {
			t.Errorf("value of %d read as %d: %v, want bad", k, k+1, got)
		}
		short := resp.AppendBulk(nil, v.Elems[2].Str[:valueSize-1])
		if got := checkGet(short, k); got != getBad {
			t.Errorf("short value: %v, want bad", got)
		}
		if got := checkGet([]byte("$-1\r\n"), k); got != getNil {
			t.Errorf("nil: %v", got)
		}
		if got := checkGet([]byte("-ERR x\r\n"), k); got != getBad {
			t.Errorf("error reply: %v", got)
		}
	}
	if got := string(appendKey(nil, 42)); got != "key:000000000042" {
		t.Errorf("key 42 is %q, want redis-benchmark's key:000000000042", got)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--quick", "--rounds", "2", "--pipelines", "1,4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rounds != 2 || cfg.LatencyRounds != 1 || time.Duration(cfg.Duration) != time.Second || cfg.Keys != 1000 || !reflect.DeepEqual(cfg.Pipelines, []int{1, 4}) {
		t.Errorf("quick with explicit rounds: %+v", cfg)
	}
	for _, bad := range [][]string{{"--conns", "0"}, {"--pipelines", "0"}, {"--pipelines", "x"}, {"--latency-rounds", "0"}, {"extra"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The latency check compares the medians of the p99s, each run's p99 being
// the larger of its tasks', and pairs the runs of a round for its ratios.
func TestLatencyCheck(t *testing.T) {
	run := func(round int, target string, p99s ...float64) latencyRun {
		r := latencyRun{Round: round, Target: target}
		for _, p := range p99s {
			r.Rows = append(r.Rows, bench.Row{Response: bench.Latency{P99: p}})
		}
		return r
	}
	l := &latencyResult{Rate: 1000, Runs: []latencyRun{
		run(1, "nutcracker", 1.0, 1.2), run(1, "troop-node", 1.5, 0.9),
		run(2, "troop-node", 1.0), run(2, "nutcracker", 2.0),
		run(3, "nutcracker", 1.0), run(3, "troop-node", 1.1),
	}}
	cs := latencyCheck(l)
	if len(cs) != 1 {
		t.Fatalf("%d checks, want 1", len(cs))
	}
	c := cs[0]
	// node p99s 1.5, 1.0, 1.1: median 1.1; nutcracker's 1.2, 2.0, 1.0: 1.2.
	// Ratios 1.25, 0.5, 1.1: median 1.1.
	if c.Measured != 1.1 || c.Limit != 1.2 || !c.Pass {
		t.Errorf("check %+v: want node 1.1 against nutcracker 1.2, passing", c)
	}
	if !strings.Contains(c.Text, "round by round 1.10x (0.50 to 1.25, 3 rounds)") {
		t.Errorf("text %q lacks the rounds' ratios", c.Text)
	}
	if latencyCheck(nil) != nil || latencyCheck(&latencyResult{}) != nil {
		t.Error("a check without runs")
	}
}

// TestCPUTime reads a busy child's CPU clock: it grows while the child
// spins, and, the child stopped, stays within a clock tick of what
// /proc/PID/stat counts. No pid reaches 1<<22, the kernel's largest
// pid_max.
func TestCPUTime(t *testing.T) {
	child := exec.Command("sh", "-c", "while :; do :; done")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	pid := child.Process.Pid
	// The clock grows while the child spins, however little of the CPU a
	// busy machine gives it: read until it has run, then until it ran more.
	var first, second time.Duration
	for deadline := time.Now().Add(time.Minute); second <= first || first == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the child's CPU clock read %v, then %v a minute later", first, second)
		}
		now, err := cpuTime(pid)
		if err != nil {
			t.Fatal(err)
		}
		if first == 0 {
			first = now
		} else {
			second = now
		}
	}
	// Stopped, the child's clock and its /proc/PID/stat stand still: read
	// one after the other, they agree.
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); procState(t, pid) != "T"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the child is in state %s a minute after SIGSTOP", procState(t, pid))
		}
	}
	clock, _ := cpuTime(pid)
	user, sys, _ := cpuTimes(pid)
	if d := clock - (user + sys); d < -20*time.Millisecond || d > 20*time.Millisecond {
		t.Errorf("CPU clock %v, /proc/PID/stat %v", clock, user+sys)
	}
	if _, err := cpuTime(1 << 22); err == nil {
		t.Error("the CPU clock of a process that does not exist read without error")
	}
}

// procState is process pid's state, field 3 of /proc/PID/stat (R, S, T ...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 {
		return f[0]
	}
	return ""
}
