package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// target is one thing the load runs against: its client addresses, the
// commands each connection sends first, and the processes whose CPU time is
// charged to it.
type target struct {
	name       string
	addrs      []string
	setup      [][]string
	proxies    []*proc     // nutcracker or troop nodes; none for direct
	redis      []*proc     // the redis-servers behind them
	redisAddrs []string    // and their addresses
	admin      []string    // troop nodes' admin addresses, for profiles
	writes     bool        // SETs only, instead of the 80:20 mix
	cmd        *command    // one command only, instead of the mix
	tls        *tls.Config // the client links' TLS; nil: plain TCP
}

// round is one measured window of one target: the JSON file holds every one.
type round struct {
	Experiment string  `json:"experiment"` // "proxy" or "cluster"
	Pipeline   int     `json:"pipeline"`
	Round      int     `json:"round"`
	Target     string  `json:"target"`
	Seconds    float64 `json:"seconds"` // the measured window, wall clock
	counts
	OpsPerSec float64 `json:"ops_per_sec"`
	// CPU seconds each process used in the window; "generator" is this
	// process, the load generator (or redis-benchmark for its round).
	CPUSeconds map[string]float64 `json:"cpu_seconds"`
	// Read and write system calls of each process in the window.
	RWCalls          map[string]int64 `json:"rw_syscalls"`
	ProxyCallsPerOp  float64          `json:"proxy_rw_syscalls_per_op"`
	RedisCallsPerOp  float64          `json:"redis_rw_syscalls_per_op"`
	GeneratorUsPerOp float64          `json:"generator_us_per_op"`
	ProxyUsPerOp     float64          `json:"proxy_us_per_op"` // all proxy processes together; 0 for direct
	// ProxySysUsPerOp is the part of ProxyUsPerOp spent in the kernel: on
	// the same system calls, the floor two proxies share.
	ProxySysUsPerOp float64 `json:"proxy_sys_us_per_op"`
	RedisUsPerOp    float64 `json:"redis_us_per_op"` // all redis-servers together
	GeneratorCores  float64 `json:"generator_cores"` // generator CPU seconds per second
	ServerCores     float64 `json:"server_cores"`    // the same for proxies and redis-servers together
	// The whole machine, all processes: busy and stolen CPU seconds per
	// second (of runtime.NumCPU cores).
	MachineBusyCores  float64 `json:"machine_busy_cores"`
	MachineStealCores float64 `json:"machine_steal_cores"`
	// GeneratorCPUBound: the generator used at least 90% of the CPU that
	// everything else on the machine left over, so it could not have gone
	// faster (see setMachine).
	GeneratorCPUBound bool   `json:"generator_cpu_bound"`
	FirstErrorReply   string `json:"first_error_reply,omitempty"`
	Error             string `json:"error,omitempty"` // the window failed: connection lost, process died
}

// sample is the state of the counters and clocks at one instant.
type sample struct {
	at          time.Time
	counts      counts
	cpu         map[string]time.Duration // user and system
	sys         map[string]time.Duration // system only
	calls       map[string]int64         // read and write system calls
	busy, steal time.Duration            // the machine's
}

func (t *target) sample(l *load) (sample, error) {
	s := sample{at: time.Now(), cpu: map[string]time.Duration{}, sys: map[string]time.Duration{}, calls: map[string]int64{}}
	if l != nil {
		s.counts = l.snapshot()
	}
	var errs []error
	add := func(name string, pid int) {
		// The total from the process's CPU clock, in nanoseconds: the
		// 10 ms ticks of /proc/PID/stat round a short window of a lightly
		// loaded process (or of one the machine starves) to nothing. The
		// ticks still give the system share.
		total, err := cpuTime(pid)
		if err != nil {
			errs = append(errs, fmt.Errorf("CPU time of %s: %w", name, err))
		}
		_, sys, err := cpuTimes(pid)
		if err != nil {
			errs = append(errs, fmt.Errorf("system CPU time of %s: %w", name, err))
		}
		s.cpu[name], s.sys[name] = total, sys
		n, err := rwCalls(pid)
		if err != nil {
			errs = append(errs, fmt.Errorf("system calls of %s: %w", name, err))
		}
		s.calls[name] = n
	}
	add("generator", 0)
	for _, p := range append(append([]*proc{}, t.proxies...), t.redis...) {
		add(p.name, p.pid())
	}
	var err error
	if s.busy, s.steal, err = machineCPU(); err != nil {
		errs = append(errs, err)
	}
	return s, errors.Join(errs...)
}

// fill computes a round's figures from the samples around its window.
func (r *round) fill(t *target, s0, s1 sample) {
	r.Seconds = s1.at.Sub(s0.at).Seconds()
	r.counts = s1.counts.sub(s0.counts)
	r.CPUSeconds = map[string]float64{}
	for name, d := range s1.cpu {
		r.CPUSeconds[name] = (d - s0.cpu[name]).Seconds()
	}
	r.RWCalls = map[string]int64{}
	for name, n := range s1.calls {
		r.RWCalls[name] = n - s0.calls[name]
	}
	sum := func(ps []*proc) float64 {
		var s float64
		for _, p := range ps {
			s += r.CPUSeconds[p.name]
		}
		return s
	}
	calls := func(ps []*proc) float64 {
		var n int64
		for _, p := range ps {
			n += r.RWCalls[p.name]
		}
		return float64(n) / float64(max(r.Ops, 1))
	}
	r.ProxyCallsPerOp, r.RedisCallsPerOp = calls(t.proxies), calls(t.redis)
	var proxySys time.Duration
	for _, p := range t.proxies {
		proxySys += s1.sys[p.name] - s0.sys[p.name]
	}
	r.ProxySysUsPerOp = proxySys.Seconds() / float64(max(r.Ops, 1)) * 1e6
	r.setFigures(r.CPUSeconds["generator"], sum(t.proxies), sum(t.redis))
	r.setMachine(s0, s1)
}

// setMachine adds the whole machine's figures, and decides whether the
// generator was CPU-bound: whether it used at least 90% of the CPU that
// everything else on the machine (servers, other tenants, the hypervisor's
// steal) left it.
func (r *round) setMachine(s0, s1 sample) {
	r.MachineBusyCores = (s1.busy - s0.busy).Seconds() / r.Seconds
	r.MachineStealCores = (s1.steal - s0.steal).Seconds() / r.Seconds
	others := r.MachineBusyCores + r.MachineStealCores - r.GeneratorCores
	left := float64(runtime.NumCPU()) - others
	r.GeneratorCPUBound = r.GeneratorCores >= 0.9*left
}

// setFigures derives the per-operation and per-second figures.
func (r *round) setFigures(gen, proxy, redis float64) {
	r.OpsPerSec = float64(r.Ops) / r.Seconds
	if r.Ops > 0 {
		perOp := func(cpu float64) float64 { return cpu / float64(r.Ops) * 1e6 }
		r.GeneratorUsPerOp, r.ProxyUsPerOp, r.RedisUsPerOp = perOp(gen), perOp(proxy), perOp(redis)
	}
	r.GeneratorCores = gen / r.Seconds
	r.ServerCores = (proxy + redis) / r.Seconds
}

// measure runs the load against t: connect, warm up, measure one window.
func measure(ctx context.Context, cfg config, exp string, t *target, pipeline, n int) round {
	r := round{Experiment: exp, Pipeline: pipeline, Round: n, Target: t.name}
	reads := cfg.ReadPercent
	if t.writes {
		reads = 0
	}
	l, err := startLoad(ctx, workload{addrs: t.addrs, conns: cfg.Conns, pipeline: pipeline, keys: cfg.Keys, seed: cfg.Seed, setup: t.setup, reads: reads, tls: t.tls, cmd: t.cmd})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	s0, s1, err := window(ctx, cfg, t, l)
	if ferr := l.finish(); ferr != nil && err == nil {
		err = ferr
	}
	r.FirstErrorReply = l.firstErrorReply()
	if err == nil {
		err = t.alive()
	}
	if err != nil {
		r.Error = err.Error()
		if s0.cpu == nil || s1.cpu == nil {
			return r
		}
	}
	r.fill(t, s0, s1)
	return r
}

// window waits out the warmup, then takes the samples around the
// measured window.
func window(ctx context.Context, cfg config, t *target, l *load) (s0, s1 sample, err error) {
	if err = sleep(ctx, time.Duration(cfg.Warmup)); err != nil {
		return
	}
	if s0, err = t.sample(l); err != nil {
		return
	}
	if err = sleep(ctx, time.Duration(cfg.Duration)); err != nil {
		return
	}
	s1, err = t.sample(l)
	return
}

// alive reports a process of the target that exited during the window.
func (t *target) alive() error {
	for _, p := range append(append([]*proc{}, t.proxies...), t.redis...) {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during the run: %s\n%s", p.name, p.cmd.ProcessState, p.logTail())
		default:
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// measureAnchor runs redis-benchmark (GET only) against the target: the
// load generator's anchor.
func measureAnchor(ctx context.Context, cfg config, bin string, t *target, pipeline, n int, ops int64) round {
	cmd := exec.CommandContext(ctx, bin, "-h", "127.0.0.1", "-p", port(t.addrs[0]),
		"-c", strconv.Itoa(cfg.Conns), "-P", strconv.Itoa(pipeline), "-n", strconv.FormatInt(ops, 10),
		"-r", strconv.Itoa(cfg.Keys), "-t", "get", "-q")
	return measureGenerator(cmd, "redis-benchmark", t, pipeline, n, ops)
}

// measureTroopBench runs troop bench as a load generator against the same
// target, reading ops keys like the redis-benchmark anchor (GET only, 1 KB
// values, the same connections and depth), with its histograms and its check
// of every value on.
func measureTroopBench(ctx context.Context, cfg config, troop string, t *target, pipeline, n int, ops int64) round {
	cmd := exec.CommandContext(ctx, troop, "bench", "mixed", "--target", t.addrs[0],
		"--ratio", "100:0", "--readers", strconv.Itoa(cfg.Conns), "--writers", "0", "--conns", strconv.Itoa(cfg.Conns),
		"--pipeline", strconv.Itoa(pipeline), "--requests", strconv.FormatInt(ops, 10),
		"--keys", strconv.Itoa(cfg.Keys), "--value-size", "1024", "--seed", strconv.FormatUint(cfg.Seed, 10))
	return measureGenerator(cmd, "troop-bench", t, pipeline, n, ops)
}

// measureGenerator runs a load generator that does ops GETs and exits, and
// measures its CPU per operation (from its rusage) and the redis-servers'.
func measureGenerator(cmd *exec.Cmd, name string, t *target, pipeline, n int, ops int64) round {
	r := round{Experiment: "proxy", Pipeline: pipeline, Round: n, Target: name}
	s0, err := t.sample(nil)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.Error = fmt.Sprintf("%s: %v: %s", name, err, out)
		return r
	}
	s1, err := t.sample(nil)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Seconds = s1.at.Sub(s0.at).Seconds()
	r.Ops, r.Gets = ops, ops
	gen := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	r.CPUSeconds = map[string]float64{"generator": gen}
	r.RWCalls = map[string]int64{}
	var redis float64
	var calls int64
	for _, p := range t.redis {
		r.CPUSeconds[p.name] = (s1.cpu[p.name] - s0.cpu[p.name]).Seconds()
		r.RWCalls[p.name] = s1.calls[p.name] - s0.calls[p.name]
		redis += r.CPUSeconds[p.name]
		calls += r.RWCalls[p.name]
	}
	r.RedisCallsPerOp = float64(calls) / float64(ops)
	r.setFigures(gen, 0, redis)
	r.setMachine(s0, s1)
	return r
}

// preloadTroopBench writes the key set in troop bench's self-checking format,
// so that its GETs read real 1 KB values.
func preloadTroopBench(ctx context.Context, cfg config, troop, addr string) error {
	cmd := exec.CommandContext(ctx, troop, "bench", "write", "--target", addr, "--workers", "8", "--pipeline", "10",
		"--requests", strconv.Itoa(cfg.Keys), "--keys", strconv.Itoa(cfg.Keys), "--value-size", "1024")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("troop bench write (preload): %v: %s", err, out)
	}
	return nil
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// profile takes a CPU profile of a troop node over an extra window that is
// not recorded: profiling costs the node some CPU.
func profile(ctx context.Context, cfg config, t *target, pipeline int, file string) error {
	l, err := startLoad(ctx, workload{addrs: t.addrs, conns: cfg.Conns, pipeline: pipeline, keys: cfg.Keys, seed: cfg.Seed, setup: t.setup, tls: t.tls})
	if err != nil {
		return err
	}
	defer l.finish()
	if err := sleep(ctx, time.Duration(cfg.Warmup)); err != nil {
		return err
	}
	secs := max(1, int(time.Duration(cfg.Duration).Seconds()))
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", t.admin[0], secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile of %s: %s", t.name, resp.Status)
	}
	if err := os.MkdirAll(cfg.Pprof, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(cfg.Pprof, file))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
