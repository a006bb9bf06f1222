package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/troop-lab/troop/bench"
)

// latencyResult is the latency experiment: troop bench mixed in an open
// loop at half of nutcracker's saturating rate, against nutcracker and a
// one-rack node in front of the same redis-server.
type latencyResult struct {
	Saturating float64      `json:"nutcracker_closed_loop_ops_per_sec"`
	Rate       float64      `json:"rate"`
	Runs       []latencyRun `json:"runs"`
}

type latencyRun struct {
	Round  int         `json:"round"`
	Target string      `json:"target"` // "nutcracker" or "troop-node"
	Rows   []bench.Row `json:"totals"`
}

// p99 is the run's 99th percentile of response time over all its
// requests: the larger of its tasks', which the totals keep apart.
func (r latencyRun) p99() float64 {
	var p float64
	for _, row := range r.Rows {
		p = max(p, row.Response.P99)
	}
	return p
}

// p50 is the larger of its tasks' medians of response time.
func (r latencyRun) p50() float64 {
	var p float64
	for _, row := range r.Rows {
		p = max(p, row.Response.P50)
	}
	return p
}

// latencyExperiment measures the response time the node adds where a proxy
// is not saturated: nutcracker's closed-loop rate first (troop bench mixed,
// cfg.Conns connections), then open-loop runs at half of it, nutcracker and
// the node interleaved round by round. Open loop, so a stall counts from
// when each request was due.
func latencyExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	_, redisAddr, err := startRedis(ctx, ps, bins.redisServer, "latency-redis")
	if err != nil {
		return err
	}
	_, ncAddr, err := startNutcracker(ctx, ps, bins.nutcracker, redisAddr)
	if err != nil {
		return err
	}
	nodeCfg, err := nodeConfig("latency-node", "rack1", redisAddr, false)
	if err != nil {
		return err
	}
	if _, err := startNode(ctx, ps, bins.troop, nodeCfg); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(ps.dir, "latency.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	mixed := func(name, addr string, extra ...string) ([]bench.Row, error) {
		return benchMixed(ctx, cfg, bins.troop, filepath.Join(ps.dir, "latency-"+name+".json"), logFile, addr, extra...)
	}
	l := &latencyResult{}
	res.Latency = l
	rows, err := mixed("nutcracker-closed", ncAddr)
	if err != nil {
		return err
	}
	var rate string
	l.Saturating, l.Rate, rate = loadAt(rows, 0.5)
	type target struct{ name, addr string }
	targets := []target{{"nutcracker", ncAddr}, {"troop-node", nodeCfg.Listen}}
	for n := 1; n <= cfg.LatencyRounds; n++ {
		for _, t := range roundOrder(targets, n, 1) {
			rows, err := mixed(fmt.Sprintf("%s-%d", t.name, n), t.addr, "--rate", rate)
			if err != nil {
				return err
			}
			run := latencyRun{Round: n, Target: t.name, Rows: rows}
			l.Runs = append(l.Runs, run)
			fmt.Fprintf(log, "latency  round %d  %-10s  at %s ops/s (half of nutcracker's %.0f)  p99 %.2f ms\n", n, t.name, rate, l.Saturating, run.p99())
		}
	}
	return ctx.Err()
}

// latencyCheck compares the median p99 of the node's runs with
// nutcracker's, and gives the rounds' own ratios beside it: a round's two
// runs share the machine's load, which moves either p99 more than the node
// does.
func latencyCheck(l *latencyResult) []check {
	if l == nil || len(l.Runs) == 0 {
		return nil
	}
	p99s := map[string][]float64{}
	byRound := map[int]map[string]float64{}
	for _, r := range l.Runs {
		p99s[r.Target] = append(p99s[r.Target], r.p99())
		if byRound[r.Round] == nil {
			byRound[r.Round] = map[string]float64{}
		}
		byRound[r.Round][r.Target] = r.p99()
	}
	var ratios []float64
	for _, r := range byRound {
		if nc := r["nutcracker"]; nc > 0 && r["troop-node"] > 0 {
			ratios = append(ratios, r["troop-node"]/nc)
		}
	}
	node, nc := median(p99s["troop-node"]), median(p99s["nutcracker"])
	text := fmt.Sprintf("troop node %.2f ms vs nutcracker %.2f ms at %.0f ops/s (troop bench mixed --rate; nutcracker's closed loop %.0f)", node, nc, l.Rate, l.Saturating)
	if len(ratios) > 0 {
		text += fmt.Sprintf("; round by round %.2fx (%.2f to %.2f, %d rounds)", median(ratios), slices.Min(ratios), slices.Max(ratios), len(ratios))
	}
	return []check{{Name: "node p99 <= nutcracker p99, open loop at half of nutcracker's saturating rate", Kind: "target",
		Measured: node, Limit: nc, Pass: node <= nc, Text: text}}
}

// benchMixed runs troop bench mixed against addr for one window of
// cfg.Duration (its default 80:20 GET:SET of 1 KB values, like the
// harness's own load), writes its result to out and answers its totals;
// its output goes to log.
func benchMixed(ctx context.Context, cfg config, troop, out string, log *os.File, addr string, extra ...string) ([]bench.Row, error) {
	args := append([]string{"bench", "mixed", "--target", addr, "--conns", strconv.Itoa(cfg.Conns), "--keys", strconv.Itoa(cfg.Keys),
		"--seed", strconv.FormatUint(cfg.Seed, 10), "--duration", time.Duration(cfg.Duration).String(), "--out", out}, extra...)
	cmd := exec.CommandContext(ctx, troop, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("troop bench mixed against %s: %w (log: %s)", addr, err, log.Name())
	}
	return benchTotals(out)
}
