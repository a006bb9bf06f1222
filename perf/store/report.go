package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// result is the JSON file: configuration, environment, every round, and
// the summary and checks derived from the rounds.
type result struct {
	Tool     string    `json:"tool"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Config   config    `json:"config"`
	Env      env       `json:"env"`
	Rounds   []round   `json:"rounds"`
	Summary  []summary `json:"summary"`
	Checks   []check   `json:"checks"`
	Notes    []string  `json:"notes"`
	Error    string    `json:"error,omitempty"` // why the run stopped early

	AntiEntropy *aeResult         `json:"anti_entropy,omitempty"`
	Bulk        []bulkRun         `json:"bulk,omitempty"`
	Commands    []commandRun      `json:"commands,omitempty"`
	Memory      *memoryResult     `json:"memory,omitempty"`
	Membership  *membershipResult `json:"membership,omitempty"`
	Latency     *latencyResult    `json:"latency,omitempty"`
	Peers       *peersResult      `json:"peers,omitempty"`
}

// env is what the figures depend on besides the configuration.
type env struct {
	CPUs           int     `json:"cpus"`
	CPUModel       string  `json:"cpu_model"`
	Kernel         string  `json:"kernel"`
	Go             string  `json:"go"` // the Go that built this harness
	ClockTicks     float64 `json:"clock_ticks_per_s"`
	RedisServer    string  `json:"redis_server"`
	Nutcracker     string  `json:"nutcracker"`
	RedisBenchmark string  `json:"redis_benchmark"`
	Troop          string  `json:"troop"`                   // troop --version
	TroopGo        string  `json:"troop_go"`                // the Go that built the troop binary
	TroopRevision  string  `json:"troop_revision"`          // its VCS revision, "+dirty" when the tree had changes
	BaseRevision   string  `json:"base_revision,omitempty"` // the revision --base built, for the base_ targets
	// WorkingTree is the revision of the tree the harness ran in. With
	// --troop the binary may come from elsewhere; this is the best hint.
	WorkingTree string `json:"working_tree"`
}

// summary is one target at one pipeline depth, over its rounds.
type summary struct {
	Experiment   string `json:"experiment"`
	Pipeline     int    `json:"pipeline"`
	Target       string `json:"target"`
	Rounds       int    `json:"rounds"` // windows that completed
	FailedRounds int    `json:"failed_rounds"`
	// Medians over the completed rounds.
	OpsPerSec float64 `json:"ops_per_sec"`
	// Ratio is the median over rounds of ops/s over the baseline's ops/s
	// in the same round (0 when there is no baseline).
	Baseline         string  `json:"baseline"`
	Ratio            float64 `json:"ratio"`
	GeneratorUsPerOp float64 `json:"generator_us_per_op"`
	ProxyUsPerOp     float64 `json:"proxy_us_per_op"`
	ProxySysUsPerOp  float64 `json:"proxy_sys_us_per_op"`
	RedisUsPerOp     float64 `json:"redis_us_per_op"`
	ProxyCallsPerOp  float64 `json:"proxy_rw_syscalls_per_op"`
	RedisCallsPerOp  float64 `json:"redis_rw_syscalls_per_op"`
	GeneratorCores   float64 `json:"generator_cores"`
	MachineBusy      float64 `json:"machine_busy_cores"`
	MachineSteal     float64 `json:"machine_steal_cores"`
	CPUBoundRounds   int     `json:"generator_cpu_bound_rounds"`
	// Totals over the rounds.
	Ops          int64 `json:"ops"`
	Nils         int64 `json:"nil_gets"`
	ErrorReplies int64 `json:"error_replies"`
	BadReplies   int64 `json:"bad_replies"`
}

// check is a target of the brief, or a published anchor, against the
// measured figure. A failed check is reported, never an exit status: the
// figures depend on the machine.
type check struct {
	Name     string  `json:"name"`
	Kind     string  `json:"kind"` // "target", "anchor" (a published figure) or "sanity"
	Measured float64 `json:"measured"`
	Limit    float64 `json:"limit"`
	Pass     bool    `json:"pass"`
	Text     string  `json:"text"`
}

// add records a round and prints its progress line.
func (r *result) add(rd round, log io.Writer) {
	r.Rounds = append(r.Rounds, rd)
	line := fmt.Sprintf("%-7s P=%-3d round %d  %-18s %9.0f ops/s  generator %5.1f µs/op  proxy %5.1f µs/op  redis %5.1f µs/op",
		rd.Experiment, rd.Pipeline, rd.Round, rd.Target, rd.OpsPerSec, rd.GeneratorUsPerOp, rd.ProxyUsPerOp, rd.RedisUsPerOp)
	if rd.ErrorReplies > 0 || rd.BadReplies > 0 {
		line += fmt.Sprintf("  ERRORS %d BAD %d (%s)", rd.ErrorReplies, rd.BadReplies, rd.FirstErrorReply)
	}
	if rd.Unknown > 0 {
		line += fmt.Sprintf("  outcome unknown %d", rd.Unknown)
	}
	if rd.Error != "" {
		line += "  FAILED: " + rd.Error
	}
	fmt.Fprintln(log, line)
}

func (r *result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// rounds is how many measured windows are such that f says yes.
func (r *result) rounds(f func(round) bool) int {
	n := 0
	for _, rd := range r.Rounds {
		if f(rd) {
			n++
		}
	}
	return n
}

// baselines: the target each experiment's ratios are taken against. The
// load generator anchors (redis-benchmark, troop bench) run GET only, so a
// ratio would compare different workloads; they have none.
var baselines = map[string]string{"proxy": "direct", "peers": "direct", "cluster": "dc_one", "tls": "dc_quorum", "consensus": "set", "writes": "off", "writes_one_down": "off"}

func hasBaseline(target string) bool { return target != "redis-benchmark" && target != "troop-bench" }

// summarize groups rounds by experiment, depth and target, in run order.
func summarize(rounds []round) []summary {
	type key struct {
		exp    string
		p      int
		target string
	}
	var order []key
	groups := map[key][]round{}
	base := map[[3]any]float64{} // (experiment, depth, round) -> baseline ops/s
	for _, rd := range rounds {
		k := key{rd.Experiment, rd.Pipeline, rd.Target}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], rd)
		if rd.Target == baselines[rd.Experiment] && rd.Error == "" {
			base[[3]any{rd.Experiment, rd.Pipeline, rd.Round}] = rd.OpsPerSec
		}
	}
	out := []summary{}
	for _, k := range order {
		s := summary{Experiment: k.exp, Pipeline: k.p, Target: k.target}
		if hasBaseline(k.target) {
			s.Baseline = baselines[k.exp]
		}
		var ops, ratio, gen, proxy, proxySys, redis, pcalls, rcalls, cores, busy, steal []float64
		for _, rd := range groups[k] {
			s.Nils += rd.Nils
			s.ErrorReplies += rd.ErrorReplies
			s.BadReplies += rd.BadReplies
			s.Ops += rd.Ops
			if rd.Error != "" {
				s.FailedRounds++
				continue
			}
			s.Rounds++
			ops = append(ops, rd.OpsPerSec)
			gen = append(gen, rd.GeneratorUsPerOp)
			proxy = append(proxy, rd.ProxyUsPerOp)
			proxySys = append(proxySys, rd.ProxySysUsPerOp)
			redis = append(redis, rd.RedisUsPerOp)
			pcalls = append(pcalls, rd.ProxyCallsPerOp)
			rcalls = append(rcalls, rd.RedisCallsPerOp)
			cores = append(cores, rd.GeneratorCores)
			busy = append(busy, rd.MachineBusyCores)
			steal = append(steal, rd.MachineStealCores)
			if rd.GeneratorCPUBound {
				s.CPUBoundRounds++
			}
			if b := base[[3]any{rd.Experiment, rd.Pipeline, rd.Round}]; b > 0 && s.Baseline != "" {
				ratio = append(ratio, rd.OpsPerSec/b)
			}
		}
		s.OpsPerSec, s.Ratio = median(ops), median(ratio)
		s.GeneratorUsPerOp, s.ProxyUsPerOp, s.RedisUsPerOp = median(gen), median(proxy), median(redis)
		s.ProxySysUsPerOp = median(proxySys)
		s.ProxyCallsPerOp, s.RedisCallsPerOp = median(pcalls), median(rcalls)
		s.GeneratorCores = median(cores)
		s.MachineBusy, s.MachineSteal = median(busy), median(steal)
		out = append(out, s)
	}
	return out
}

// median of xs; 0 for none. With an even count, the mean of the middle two.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

func find(ss []summary, exp string, p int, target string) *summary {
	for i := range ss {
		if ss[i].Experiment == exp && ss[i].Pipeline == p && ss[i].Target == target && ss[i].Rounds > 0 {
			return &ss[i]
		}
	}
	return nil
}

// pairedRatio is, over the rounds that measured both targets a and b of
// exp at depth p, the median and the range of a's figure f (proxy CPU per
// operation, throughput) over b's in the same round: pairing the rounds
// takes out what the machine did between them, so a small change shows
// where medians of each would drown it.
func pairedRatio(rounds []round, exp string, p int, a, b string, f func(round) float64) (med, lo, hi float64, n int) {
	us := map[[2]any]float64{} // (target, round) -> the figure
	for _, r := range rounds {
		if r.Experiment == exp && r.Pipeline == p && r.Error == "" && (r.Target == a || r.Target == b) {
			us[[2]any{r.Target, r.Round}] = f(r)
		}
	}
	var ratios []float64
	for k, x := range us {
		if y := us[[2]any{b, k[1]}]; k[0] == a && y > 0 {
			ratios = append(ratios, x/y)
		}
	}
	if len(ratios) == 0 {
		return 0, 0, 0, 0
	}
	return median(ratios), slices.Min(ratios), slices.Max(ratios), len(ratios)
}

// The figures pairedRatio compares.
func proxyUs(r round) float64   { return r.ProxyUsPerOp }
func redisUs(r round) float64   { return r.RedisUsPerOp }
func opsPerSec(r round) float64 { return r.OpsPerSec }

// Targets of the proxy and cluster experiments.
const (
	nodeOverNutcracker = 0.9  // node CPU per operation, at most this times nutcracker's
	nodeCallsPerOp     = 2.1  // node read and write calls per operation at P=1, at most
	quorumOverOne      = 0.75 // DC_QUORUM throughput, at least this times DC_ONE's
)

// evaluate holds the summary against the brief's targets and the anchors;
// rounds give the paired ratios.
func evaluate(ss []summary, rounds []round) []check {
	out := []check{}
	var depths []int
	for _, s := range ss {
		if !slices.Contains(depths, s.Pipeline) {
			depths = append(depths, s.Pipeline)
		}
	}
	for _, p := range depths {
		node, nc := find(ss, "proxy", p, "troop-node"), find(ss, "proxy", p, "nutcracker")
		if node != nil && nc != nil {
			r := node.ProxyUsPerOp / nc.ProxyUsPerOp
			med, lo, hi, n := pairedRatio(rounds, "proxy", p, "troop-node", "nutcracker", proxyUs)
			out = append(out, check{
				Name: fmt.Sprintf("node CPU/op <= %.1f x nutcracker CPU/op, P=%d", nodeOverNutcracker, p), Kind: "target",
				Measured: r, Limit: nodeOverNutcracker, Pass: r <= nodeOverNutcracker,
				Text: fmt.Sprintf("troop node %.1f µs/op (%.1f in the kernel) vs nutcracker %.1f (%.1f): %.2fx; round by round %.2fx (%.2f to %.2f, %d rounds)",
					node.ProxyUsPerOp, node.ProxySysUsPerOp, nc.ProxyUsPerOp, nc.ProxySysUsPerOp, r, med, lo, hi, n),
			})
		}
		if node != nil && p == 1 {
			out = append(out, check{
				Name: fmt.Sprintf("node read and write calls/op <= %.1f, P=%d", nodeCallsPerOp, p), Kind: "target",
				Measured: node.ProxyCallsPerOp, Limit: nodeCallsPerOp, Pass: node.ProxyCallsPerOp <= nodeCallsPerOp,
				Text: fmt.Sprintf("troop node %.2f, nutcracker %s", node.ProxyCallsPerOp, callsOf(nc)),
			})
		}
		if node != nil && find(ss, "proxy", p, "base_troop-node") != nil {
			med, lo, hi, n := pairedRatio(rounds, "proxy", p, "troop-node", "base_troop-node", proxyUs)
			out = append(out, check{
				Name: fmt.Sprintf("node CPU/op <= the base build's, P=%d", p), Kind: "target",
				Measured: med, Limit: 1, Pass: med <= 1,
				Text: fmt.Sprintf("this build at %.3fx the base's, round by round (%.3f to %.3f, %d rounds)", med, lo, hi, n),
			})
		}
		if node != nil && p == 10 {
			out = append(out, check{
				Name: "node throughput >= 0.9 x direct, P=10", Kind: "target",
				Measured: node.Ratio, Limit: 0.9, Pass: node.Ratio >= 0.9,
				Text: fmt.Sprintf("troop node at %.2f of direct", node.Ratio),
			})
		}
		if nc != nil {
			out = append(out, check{
				Name: fmt.Sprintf("nutcracker throughput >= 0.8 x direct, P=%d", p), Kind: "anchor",
				Measured: nc.Ratio, Limit: 0.8, Pass: nc.Ratio >= 0.8,
				Text: fmt.Sprintf("nutcracker at %.2f of direct (twemproxy's author reports at most 20%% lost)", nc.Ratio),
			})
		}
		if tb, rb := find(ss, "proxy", p, "troop-bench"), find(ss, "proxy", p, "redis-benchmark"); tb != nil && rb != nil {
			out = append(out, check{
				Name: fmt.Sprintf("troop bench ops per client CPU second >= redis-benchmark's, P=%d", p), Kind: "target",
				Measured: tb.GeneratorUsPerOp, Limit: rb.GeneratorUsPerOp, Pass: tb.GeneratorUsPerOp <= rb.GeneratorUsPerOp,
				Text: fmt.Sprintf("troop bench %.0f vs redis-benchmark %.0f ops per client CPU second (%.1f vs %.1f µs/op), GETs of 1 KB, every value checked",
					1e6/tb.GeneratorUsPerOp, 1e6/rb.GeneratorUsPerOp, tb.GeneratorUsPerOp, rb.GeneratorUsPerOp),
			})
		}
		for _, exp := range []string{"writes", "writes_one_down"} {
			on, versioned, off := find(ss, exp, p, "on"), find(ss, exp, p, "versioned"), find(ss, exp, p, "off")
			if on != nil && off != nil {
				out = append(out, check{
					Name: fmt.Sprintf("%s: DC_QUORUM writes with hints, read repair and versions on >= 0.95 x off, P=%d", exp, p), Kind: "target",
					Measured: on.Ratio, Limit: 0.95, Pass: on.Ratio >= 0.95,
					Text: fmt.Sprintf("on at %.2f of off (nodes %.1f vs %.1f µs/op, redis %.1f vs %.1f)", on.Ratio, on.ProxyUsPerOp, off.ProxyUsPerOp, on.RedisUsPerOp, off.RedisUsPerOp),
				})
			}
			if on != nil && versioned != nil && versioned.Ratio > 0 {
				// Both ratios are to off in the same rounds: their quotient
				// is hints and read repair against versions alone.
				r := on.Ratio / versioned.Ratio
				out = append(out, check{
					Name: fmt.Sprintf("%s: hints and read repair on >= 0.95 x off, versions on in both, P=%d", exp, p), Kind: "target",
					Measured: r, Limit: 0.95, Pass: r >= 0.95,
					Text: fmt.Sprintf("on at %.2f of versions alone (nodes %.1f vs %.1f µs/op)", r, on.ProxyUsPerOp, versioned.ProxyUsPerOp),
				})
			}
		}
		if plain, enc := find(ss, "tls", p, "dc_quorum"), find(ss, "tls", p, "tls_dc_quorum"); p == 10 && plain != nil && enc != nil && plain.ProxyUsPerOp > 0 {
			r := enc.ProxyUsPerOp / plain.ProxyUsPerOp
			out = append(out, check{
				Name: fmt.Sprintf("tls: nodes' CPU per operation with TLS client and peer links <= 1.3 x plain, DC_QUORUM, P=%d", p), Kind: "target",
				Measured: r, Limit: 1.3, Pass: r <= 1.3,
				Text: fmt.Sprintf("TLS at %.2f of plain (nodes %.1f vs %.1f µs/op)", r, enc.ProxyUsPerOp, plain.ProxyUsPerOp),
			})
		}
		if q := find(ss, "cluster", p, "dc_quorum"); q != nil {
			out = append(out, check{
				Name: fmt.Sprintf("cluster DC_QUORUM/DC_ONE >= %.2f, P=%d", quorumOverOne, p), Kind: "target",
				Measured: q.Ratio, Limit: quorumOverOne, Pass: q.Ratio >= quorumOverOne,
				Text: fmt.Sprintf("DC_QUORUM at %.2f of DC_ONE (Dynomite's figure: 0.45)", q.Ratio),
			})
			// The base build's targets have ratios to this build's DC_ONE in
			// the same rounds: quotients of them compare the two builds.
			bq, bo := find(ss, "cluster", p, "base_dc_quorum"), find(ss, "cluster", p, "base_dc_one")
			if bq != nil && bo != nil && bq.Ratio > 0 && bo.Ratio > 0 {
				out = append(out, check{
					Name: fmt.Sprintf("cluster DC_QUORUM/DC_ONE of this build >= the base build's, P=%d", p), Kind: "target",
					Measured: q.Ratio, Limit: bq.Ratio / bo.Ratio, Pass: q.Ratio >= bq.Ratio/bo.Ratio,
					Text: fmt.Sprintf("this build %.2f, base %.2f; DC_QUORUM at %.2f of the base's, DC_ONE at %.2f (nodes %.1f vs %.1f µs/op at DC_QUORUM)",
						q.Ratio, bq.Ratio/bo.Ratio, q.Ratio/bq.Ratio, 1/bo.Ratio, q.ProxyUsPerOp, bq.ProxyUsPerOp),
				})
			}
		}
	}
	for _, s := range ss {
		if s.ErrorReplies > 0 || s.BadReplies > 0 || s.FailedRounds > 0 {
			out = append(out, check{
				Name: fmt.Sprintf("%s %s P=%d answered every request correctly", s.Experiment, s.Target, s.Pipeline), Kind: "sanity",
				Measured: float64(s.ErrorReplies + s.BadReplies), Pass: false,
				Text: fmt.Sprintf("%d error replies, %d wrong replies, %d failed windows", s.ErrorReplies, s.BadReplies, s.FailedRounds),
			})
		}
	}
	return out
}

// callsOf is a target's read and write calls per operation, or "-".
func callsOf(s *summary) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", s.ProxyCallsPerOp)
}

func printHeader(w io.Writer, r *result) {
	c, e := r.Config, r.Env
	fmt.Fprintf(w, "troop store benchmark, %s\n", r.Started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "machine: %d CPUs (%s), Linux %s\n", e.CPUs, e.CPUModel, e.Kernel)
	fmt.Fprintf(w, "versions: redis-server %s, nutcracker %s, redis-benchmark %s, troop %s (%s, %s), harness %s\n",
		e.RedisServer, e.Nutcracker, e.RedisBenchmark, e.Troop, e.TroopGo, e.TroopRevision, e.Go)
	if e.BaseRevision != "" {
		fmt.Fprintf(w, "base: troop built from %s (%s), the cluster's base_ targets, interleaved with this build's\n", c.Base, e.BaseRevision)
	}
	fmt.Fprintf(w, "workload: %d connections, %d:%d GET:SET, %d-byte values, %d keys preloaded, seed %d\n",
		c.Conns, c.ReadPercent, 100-c.ReadPercent, valueSize, c.Keys, c.Seed)
	fmt.Fprintf(w, "rounds: %d per depth, targets interleaved; %v warmup + %v measured per window\n\n",
		c.Rounds, time.Duration(c.Warmup), time.Duration(c.Duration))
}

func printSummary(w io.Writer, r *result) {
	fmt.Fprintf(w, "\nMedians over %d rounds. µs/op: CPU time per operation of each process (/proc/PID/stat);\n", r.Config.Rounds)
	fmt.Fprintf(w, "calls/op: its read and write system calls per operation (/proc/PID/io); ratio: to %s in the same round.\n", "direct, dc_one, dc_quorum or off")
	for _, exp := range []string{"proxy", "cluster", "tls", "writes", "writes_one_down"} {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		title := "Proxy overhead: one redis-server; direct, nutcracker, troop node (one rack)"
		proxyCol := "proxy"
		switch exp {
		case "cluster":
			title = "Three-rack troop cluster, load spread over the 3 nodes; nodes and redis summed over all 3; base_: the same of the --base build, ratios to this build's dc_one"
			proxyCol = "nodes"
		case "tls":
			title = "TLS: the three-rack cluster at DC_QUORUM, plain (dc_quorum) vs client and peer links over TLS (tls_dc_quorum); nodes and redis summed over all 3"
			proxyCol = "nodes"
		case "writes":
			title = "DC_QUORUM SETs only, three racks: hints, read repair and versions on vs off (troop_hinted_handoff, troop_read_repair, troop_versions); versioned: versions only"
			proxyCol = "nodes"
		case "writes_one_down":
			title = "The same with one node of three stopped: on, every write leaves a hint on disk; versioned and off, it is lost"
			proxyCol = "nodes"
		}
		rows := 0
		var busy, steal []float64
		for _, s := range r.Summary {
			if s.Experiment != exp {
				continue
			}
			if rows == 0 {
				fmt.Fprintf(w, "\n%s\n", title)
				fmt.Fprintf(tw, "P\ttarget\tops/s\tratio\t%[1]s µs/op\tof it system\tredis µs/op\tgen µs/op\t%[1]s calls/op\tredis calls/op\tgen cores\tgen CPU-bound\terrors\twrong\t\n", proxyCol)
			}
			rows++
			busy, steal = append(busy, s.MachineBusy), append(steal, s.MachineSteal)
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%s\t%s\t%.1f\t%.1f\t%s\t%.2f\t%.2f\t%d/%d\t%d\t%d\t\n",
				s.Pipeline, s.Target, s.OpsPerSec, orDash(s.Ratio, "%.2f"), orDash(s.ProxyUsPerOp, "%.1f"), orDash(s.ProxySysUsPerOp, "%.1f"),
				s.RedisUsPerOp, s.GeneratorUsPerOp, orDash(s.ProxyCallsPerOp, "%.2f"), s.RedisCallsPerOp,
				s.GeneratorCores, s.CPUBoundRounds, s.Rounds, s.ErrorReplies, s.BadReplies)
		}
		tw.Flush()
		if rows > 0 {
			fmt.Fprintf(w, "machine: %.2f to %.2f of %d cores busy (all processes), steal %.2f to %.2f\n",
				slices.Min(busy), slices.Max(busy), r.Env.CPUs, slices.Min(steal), slices.Max(steal))
		}
	}
	printPeers(w, r)
	if ae := r.AntiEntropy; ae != nil {
		fmt.Fprintf(w, "\nAnti-entropy: %d keys on three racks, %d made to differ on one replica (preloaded in %.0f s)\n", ae.Keys, ae.Differing, ae.PreloadSeconds)
		fmt.Fprintf(w, "  first pass:  %s\n  second pass: %s\n  converged: %v\n", ae.First, ae.Second, ae.Converged)
	}
	if len(r.Checks) > 0 {
		fmt.Fprintln(w, "\nTargets and anchors:")
		for _, c := range r.Checks {
			verdict := "PASS"
			if !c.Pass {
				verdict = "FAIL"
			}
			if c.Kind == "anchor" {
				verdict = strings.ToLower(verdict) + " (anchor)"
			}
			fmt.Fprintf(w, "  [%s] %s: %s\n", verdict, c.Name, c.Text)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// orDash formats x, or "-" when it is zero (no such figure).
func orDash(x float64, format string) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf(format, x)
}

func writeJSON(path string, r *result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// environment records the machine and the versions of every program.
// revision is the source the harness built troop from, "" when --troop
// was given.
func environment(ctx context.Context, b binaries, revision string) env {
	e := env{CPUs: runtime.NumCPU(), Go: runtime.Version(), ClockTicks: clockTicks}
	e.CPUModel = cpuModel()
	if k, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.Kernel = strings.TrimSpace(string(k))
	}
	// redis-server: "Redis server v=7.0.15 sha=...".
	for _, f := range strings.Fields(versionOutput(ctx, b.redisServer, "--version")) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			e.RedisServer = v
		}
	}
	// nutcracker: "This is nutcracker-0.5.0".
	if _, v, ok := strings.Cut(versionOutput(ctx, b.nutcracker, "--version"), "nutcracker-"); ok {
		e.Nutcracker = v
	}
	if b.redisBenchmark != "" {
		e.RedisBenchmark = strings.TrimPrefix(versionOutput(ctx, b.redisBenchmark, "--version"), "redis-benchmark ")
	}
	e.Troop = strings.TrimPrefix(versionOutput(ctx, b.troop, "--version"), "troop version ")
	if bi, err := buildinfo.ReadFile(b.troop); err == nil {
		e.TroopGo = bi.GoVersion
		rev, dirty := "unknown", false // unknown: built with -buildvcs=false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty {
			rev += "+dirty"
		}
		e.TroopRevision = rev
	}
	if (e.TroopRevision == "" || e.TroopRevision == "unknown") && revision != "" {
		e.TroopRevision = revision
	}
	e.WorkingTree = "unknown"
	if root, err := moduleRoot(ctx); err == nil {
		e.WorkingTree = gitRevision(ctx, root)
	}
	return e
}

// versionOutput is the first line a program prints for its version flag.
func versionOutput(ctx context.Context, bin string, arg string) string {
	out, err := exec.CommandContext(ctx, bin, arg).CombinedOutput()
	if err != nil && len(out) == 0 {
		return "unknown"
	}
	line, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
	return string(line)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
