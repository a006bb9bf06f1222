package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// commandTests are redis-benchmark's own tests run by the commands
// experiment: the writes a Redis user runs beyond GET and SET.
var commandTests = []string{"set", "get", "incr", "lpush", "hset", "sadd", "zadd"}

// commandsDepth is the experiment's pipeline depth, redis-benchmark's -P.
const commandsDepth = 16

// commandRun is one redis-benchmark test against one target.
type commandRun struct {
	Round     int     `json:"round"`
	Target    string  `json:"target"` // "direct" or "troop-node"
	Test      string  `json:"test"`   // redis-benchmark's -t name
	Requests  int     `json:"requests"`
	OpsPerSec float64 `json:"ops_per_sec"` // redis-benchmark's figure
	// CPU µs per request of the node (0 for direct) and of its
	// redis-server, from /proc.
	NodeUsPerOp  float64 `json:"node_us_per_op"`
	RedisUsPerOp float64 `json:"redis_us_per_op"`
}

// commandsExperiment runs redis-benchmark's tests of common commands (-t
// set,get,incr,lpush,hset,sadd,zadd, -P 16, 50 connections) against a
// redis-server (direct) and through a troop node of a one-rack cluster in
// front of another, one test at a time after an unmeasured pass of it, the
// two targets interleaved test by test. The node's cost of each command is
// set beside its cost of SET.
func commandsExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	redis, redisAddr, err := startRedis(ctx, ps, bins.redisServer, "commands-direct")
	if err != nil {
		return err
	}
	behind, behindAddr, err := startRedis(ctx, ps, bins.redisServer, "commands-redis")
	if err != nil {
		return err
	}
	nodeCfg, err := nodeConfig("commands-node", "rack1", behindAddr, false)
	if err != nil {
		return err
	}
	node, err := startNode(ctx, ps, bins.troop, nodeCfg)
	if err != nil {
		return err
	}
	targets := []struct {
		name, addr  string
		node, redis *proc
		flush       string
	}{
		{"direct", redisAddr, nil, redis, redisAddr},
		{"troop-node", nodeCfg.Listen, node, behind, behindAddr},
	}
	for n := 1; n <= cfg.Rounds; n++ {
		for _, t := range targets {
			if _, err := redisCommand(t.flush, time.Minute, "FLUSHALL"); err != nil {
				return fmt.Errorf("commands: emptying %s: %w", t.flush, err)
			}
		}
		for _, test := range commandTests {
			for _, t := range targets {
				// A pass first, unmeasured, so that the measured one meets
				// keys that exist: a SET of a key the node has not seen
				// yet runs the write script, later ones need not.
				if _, err := runCommandTest(ctx, bins.redisBenchmark, t.addr, test, cfg.Commands/4, cfg.Conns, nil, t.redis); err != nil {
					return fmt.Errorf("commands: %s through %s: %w", test, t.name, err)
				}
				r, err := runCommandTest(ctx, bins.redisBenchmark, t.addr, test, cfg.Commands, cfg.Conns, t.node, t.redis)
				if err != nil {
					return fmt.Errorf("commands: %s through %s: %w", test, t.name, err)
				}
				r.Round, r.Target = n, t.name
				res.Commands = append(res.Commands, r)
				fmt.Fprintf(log, "commands  round %d  %-10s  %-5s  %8.0f ops/s  node %5.1f µs/op  redis %5.1f µs/op\n",
					n, t.name, test, r.OpsPerSec, r.NodeUsPerOp, r.RedisUsPerOp)
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// runCommandTest runs one redis-benchmark test against addr and reads the
// CPU the node (nil for none) and the redis-server spent on it.
func runCommandTest(ctx context.Context, redisBenchmark, addr, test string, requests, conns int, node, redis *proc) (commandRun, error) {
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.CommandContext(ctx, redisBenchmark, "-h", host, "-p", port, "-t", test, "-n", strconv.Itoa(requests),
		"-c", strconv.Itoa(conns), "-P", strconv.Itoa(commandsDepth), "-r", "100000", "--csv")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cpu := func(p *proc) time.Duration {
		if p == nil {
			return 0
		}
		d, _ := cpuTime(p.pid())
		return d
	}
	nodeBefore, redisBefore := cpu(node), cpu(redis)
	if err := cmd.Run(); err != nil {
		return commandRun{}, fmt.Errorf("%v: %s", err, strings.TrimSpace(errOut.String()))
	}
	r := commandRun{Test: test, Requests: requests,
		NodeUsPerOp:  float64((cpu(node) - nodeBefore).Microseconds()) / float64(requests),
		RedisUsPerOp: float64((cpu(redis) - redisBefore).Microseconds()) / float64(requests)}
	rows, err := csv.NewReader(&out).ReadAll()
	if err != nil || len(rows) < 2 || len(rows[1]) < 2 {
		return r, fmt.Errorf("redis-benchmark --csv printed %q", out.String())
	}
	if r.OpsPerSec, err = strconv.ParseFloat(rows[1][1], 64); err != nil {
		return r, fmt.Errorf("redis-benchmark --csv: %q is not a rate", rows[1][1])
	}
	return r, nil
}

// commandsCheck holds each command through the node to at least 0.8 of
// the node's own SET throughput (the median of the rounds' ratios). Beside
// it, what the machine's noise does not move: the CPU per request of the
// node and its redis-server together, SET's over the command's (the
// throughput ratio a saturated machine would give), and the same of
// redis-server alone for direct, where commands cost what Redis makes
// them cost.
func commandsCheck(runs []commandRun) []check {
	find := func(round int, target, test string) *commandRun {
		for i := range runs {
			if r := &runs[i]; r.Round == round && r.Target == target && r.Test == test {
				return r
			}
		}
		return nil
	}
	var out []check
	for _, test := range commandTests {
		if test == "set" {
			continue
		}
		var ops, cost, direct []float64
		for _, r := range runs {
			if r.Target != "troop-node" || r.Test != test {
				continue
			}
			set, dset, dr := find(r.Round, "troop-node", "set"), find(r.Round, "direct", "set"), find(r.Round, "direct", test)
			if set == nil || set.OpsPerSec == 0 || r.NodeUsPerOp+r.RedisUsPerOp == 0 {
				continue
			}
			ops = append(ops, r.OpsPerSec/set.OpsPerSec)
			cost = append(cost, (set.NodeUsPerOp+set.RedisUsPerOp)/(r.NodeUsPerOp+r.RedisUsPerOp))
			if dset != nil && dr != nil && dr.RedisUsPerOp > 0 {
				direct = append(direct, dset.RedisUsPerOp/dr.RedisUsPerOp)
			}
		}
		if len(ops) == 0 {
			continue
		}
		m := median(ops)
		out = append(out, check{Name: fmt.Sprintf("%s through a node >= 0.8 of the node's SET throughput, P=%d", strings.ToUpper(test), commandsDepth),
			Kind: "target", Measured: m, Limit: 0.8, Pass: m >= 0.8,
			Text: fmt.Sprintf("median %.2f of SET's ops/s over %d rounds (%s); by CPU per request, node and redis-server: %.2f (direct, redis-server alone: %.2f)",
				m, len(ops), joinFloats(ops), median(cost), median(direct))})
	}
	return out
}
