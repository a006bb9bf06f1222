package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/node/consistency"
)

// The peers experiment sets troop beside the stores its users run or weigh
// it against, in one interleaved run: three racks of troop and three racks
// of Dynomite (its own binary, built from its source) at DC_ONE and at
// DC_QUORUM, all loaded through rack1's node, and, for the single-proxy
// figures, redis-server itself and nutcracker and a troop node in front of
// one redis-server. Each level is a cluster of its own, the level set in its
// config files, as a user of either store sets it.

// peerPair is a comparison of the peer table: troop's target against its
// peer's, measured in the same rounds.
type peerPair struct {
	Name  string `json:"name"`
	Troop string `json:"troop"`
	Peer  string `json:"peer"`
}

var peerPairs = []peerPair{
	{"DC_ONE, three racks", "troop_dc_one", "dynomite_dc_one"},
	{"DC_QUORUM, three racks", "troop_dc_quorum", "dynomite_dc_quorum"},
	{"one proxy, one redis-server", "troop-node", "nutcracker"},
}

// peersResult is the peers experiment's latency part; its throughput and
// CPU windows are rounds of experiment "peers".
type peersResult struct {
	Dynomite string `json:"dynomite"` // the binary, and its version
	// Rates: per comparison, half of the lower closed-loop throughput of its
	// two targets at the lowest depth measured, the open-loop rate both run
	// at (direct runs at the single proxies' rate).
	Rates map[string]float64 `json:"rates"`
	Runs  []latencyRun       `json:"runs"`
}

// startDynomite starts three racks of Dynomite, a node and a redis-server
// each, with the lab's Dynomite config at level, waits until a write
// through every node reaches every redis-server, preloads the keys through
// rack1's node, and answers the target through rack1's node.
func startDynomite(ctx context.Context, cfg config, ps *procSet, redisServer, dynomite, name, level string) (*target, error) {
	nodes := lab.Layout(lab.Shape{DCs: 1, Racks: 3, NodesPerRack: 1}, filepath.Join(ps.dir, name))
	var redises, procs []*proc
	var redisAddrs []string
	for i := range nodes {
		n := &nodes[i]
		n.Engine = lab.EngineDynomite
		redis, addr, err := startRedis(ctx, ps, redisServer, fmt.Sprintf("%s_redis%d", name, i+1))
		if err != nil {
			return nil, err
		}
		redises, redisAddrs, n.Redis = append(redises, redis), append(redisAddrs, addr), addr
		for _, a := range []*string{&n.Listen, &n.DynListen, &n.StatsListen} {
			if *a, err = freeAddr(); err != nil {
				return nil, err
			}
		}
	}
	for i, n := range nodes {
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(n.Config, lab.DynomiteConfig(n, nodes, level, level), 0o644); err != nil {
			return nil, err
		}
		argv := lab.DynomiteCommand(dynomite, n)
		p, err := ps.start(fmt.Sprintf("%s_node%d", name, i+1), argv[0], argv[1:]...)
		if err != nil {
			return nil, err
		}
		if err := waitPing(ctx, n.Listen, p); err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	if err := lab.WaitMeshed(ctx, nodes, 30*time.Second); err != nil {
		return nil, err
	}
	if err := preload(ctx, []string{nodes[0].Listen}, nil, cfg.Keys, nil); err != nil {
		return nil, fmt.Errorf("preload through %s: %w", name, err)
	}
	return &target{name: name, addrs: []string{nodes[0].Listen}, proxies: procs, redis: redises, redisAddrs: redisAddrs}, nil
}

// peersExperiment runs the peer table's targets interleaved round by
// round at each depth, then each in an open loop at half load for the
// p50 and p99 of its response time, interleaved again. Without a Dynomite
// binary it says what is missing and runs nothing.
func peersExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	dynomite, err := lab.FindDynomite(cfg.Dynomite)
	if err != nil {
		res.note("peers experiment skipped: %v", err)
		fmt.Fprintf(log, "peers: skipped: %v\n", err)
		return nil
	}
	pr := &peersResult{Dynomite: dynomite + " " + versionOutput(ctx, dynomite, "-V"), Rates: map[string]float64{}}
	res.Peers = pr

	// One proxy: direct, nutcracker and a troop node share a redis-server.
	targets, _, err := startOneProxy(ctx, cfg, ps, bins, false)
	if err != nil {
		return err
	}
	// Three racks of each store per level, loaded through rack1's node.
	for _, level := range []consistency.Level{consistency.DCOne, consistency.DCQuorum} {
		suffix := strings.ToLower(level.String()) // dc_one, dc_quorum
		ts, err := startCluster(ctx, cfg, ps, bins.redisServer, bins.troop, "troop_"+suffix+"_", false, level)
		if err != nil {
			return err
		}
		t := ts[0]
		if level == consistency.DCQuorum {
			t = ts[1]
		}
		t.name, t.addrs = "troop_"+suffix, t.addrs[:1]
		d, err := startDynomite(ctx, cfg, ps, bins.redisServer, dynomite, "dynomite_"+suffix, level.String())
		if err != nil {
			return fmt.Errorf("Dynomite at %s: %w", level, err)
		}
		targets = append(targets, t, d)
	}
	for _, p := range cfg.Pipelines {
		for n := 1; n <= cfg.Rounds; n++ {
			for _, t := range roundOrder(targets, n, 1) {
				res.add(measure(ctx, cfg, "peers", t, p, n), log)
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		if cfg.Pprof != "" { // rack1's node, which takes the load
			for _, t := range targets {
				if strings.HasPrefix(t.name, "troop_") {
					if err := profile(ctx, cfg, t, p, fmt.Sprintf("peers-%s-P%d-node1.pprof", t.name, p)); err != nil {
						res.note("profile of %s at P=%d failed: %v", t.name, p, err)
					}
				}
			}
		}
	}
	return peersLatency(ctx, cfg, ps, bins, targets, res, log)
}

// peersLatency runs every target in an open loop (troop bench mixed
// --rate) at its comparison's rate, LatencyRounds rounds interleaved.
func peersLatency(ctx context.Context, cfg config, ps *procSet, bins binaries, targets []*target, res *result, log io.Writer) error {
	pr := res.Peers
	depth := slices.Min(cfg.Pipelines)
	ss := summarize(res.Rounds)
	rate := map[string]float64{} // target -> ops/s
	for _, pair := range peerPairs {
		a, b := find(ss, "peers", depth, pair.Troop), find(ss, "peers", depth, pair.Peer)
		if a == nil || b == nil {
			continue
		}
		r := float64(int(min(a.OpsPerSec, b.OpsPerSec) / 2))
		pr.Rates[pair.Name] = r
		rate[pair.Troop], rate[pair.Peer] = r, r
	}
	rate["direct"] = rate["troop-node"]
	logFile, err := os.Create(filepath.Join(ps.dir, "peers-latency.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	for n := 1; n <= cfg.LatencyRounds; n++ {
		for _, t := range roundOrder(targets, n, 1) {
			r := rate[t.name]
			if r <= 0 {
				continue
			}
			out := filepath.Join(ps.dir, fmt.Sprintf("peers-latency-%s-%d.json", t.name, n))
			rows, err := benchMixed(ctx, cfg, bins.troop, out, logFile, t.addrs[0], "--rate", strconv.FormatFloat(r, 'f', 0, 64))
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("peers latency: %w", err)
			}
			run := latencyRun{Round: n, Target: t.name, Rows: rows}
			pr.Runs = append(pr.Runs, run)
			fmt.Fprintf(log, "peers latency  round %d  %-18s  at %.0f ops/s  p50 %.2f ms  p99 %.2f ms\n", n, t.name, r, run.p50(), run.p99())
		}
	}
	return ctx.Err()
}

// peerLatency is the median over rounds of a target's p50 and p99, and
// the median over rounds of its p99 over other's in the same round.
func peerLatency(pr *peersResult, target, other string) (p50, p99, ratio float64) {
	var p50s, p99s, ratios []float64
	byRound := map[int]map[string]float64{}
	for _, r := range pr.Runs {
		if byRound[r.Round] == nil {
			byRound[r.Round] = map[string]float64{}
		}
		byRound[r.Round][r.Target] = r.p99()
		if r.Target == target {
			p50s, p99s = append(p50s, r.p50()), append(p99s, r.p99())
		}
	}
	for _, r := range byRound {
		if a, b := r[target], r[other]; a > 0 && b > 0 {
			ratios = append(ratios, a/b)
		}
	}
	return median(p50s), median(p99s), median(ratios)
}

// Targets of the peers experiment: troop's throughput over Dynomite's
// through one node of three racks, at both levels.
var peerThroughput = map[int]float64{1: 1.5, 10: 3}

// peersCheck holds the peer table against its targets: throughput over
// Dynomite's at P=1 and P=10, and p99 at half load no higher than the
// peer's.
func peersCheck(ss []summary, rounds []round, pr *peersResult) []check {
	var out []check
	for _, pair := range peerPairs[:2] {
		for _, p := range []int{1, 10} {
			want, a, b := peerThroughput[p], find(ss, "peers", p, pair.Troop), find(ss, "peers", p, pair.Peer)
			if a == nil || b == nil {
				continue
			}
			med, lo, hi, n := pairedRatio(rounds, "peers", p, pair.Troop, pair.Peer, opsPerSec)
			out = append(out, check{
				Name: fmt.Sprintf("peers: troop throughput >= %.1f x Dynomite's, %s, P=%d", want, pair.Name, p), Kind: "target",
				Measured: med, Limit: want, Pass: med >= want,
				Text: fmt.Sprintf("troop %.0f vs Dynomite %.0f ops/s: %.2fx round by round (%.2f to %.2f, %d rounds)", a.OpsPerSec, b.OpsPerSec, med, lo, hi, n),
			})
		}
	}
	if pr == nil {
		return out
	}
	for _, pair := range peerPairs {
		_, troop, ratio := peerLatency(pr, pair.Troop, pair.Peer)
		_, peer, _ := peerLatency(pr, pair.Peer, pair.Troop)
		if troop == 0 || peer == 0 {
			continue
		}
		out = append(out, check{
			Name: fmt.Sprintf("peers: troop p99 <= %s's at half load, %s", peerName(pair.Peer), pair.Name), Kind: "target",
			Measured: troop, Limit: peer, Pass: troop <= peer,
			Text: fmt.Sprintf("troop %.2f ms vs %.2f ms at %.0f ops/s; round by round %.2fx", troop, peer, pr.Rates[pair.Name], ratio),
		})
	}
	return out
}

// peerName is a peer target's store: "Dynomite" or "nutcracker".
func peerName(target string) string {
	if strings.HasPrefix(target, "dynomite") {
		return "Dynomite"
	}
	return target
}

// printPeers prints the peer table: per comparison and depth, troop's
// figures and its peer's, ratios round by round, and the open-loop
// latencies at half load.
func printPeers(w io.Writer, r *result) {
	if find(r.Summary, "peers", slices.Min(r.Config.Pipelines), "direct") == nil {
		return
	}
	fmt.Fprintf(w, "\nPeers: troop beside Dynomite (three racks, a node and a redis-server each, the load through rack1's node; the level set in each cluster's config)\n")
	fmt.Fprintf(w, "and beside nutcracker (one proxy in front of one redis-server). Medians of %d interleaved rounds; ratios: troop ÷ peer, round by round.\n", r.Config.Rounds)
	fmt.Fprintf(w, "proxies: CPU µs/op of the proxies (all three nodes for a cluster); redis: of the redis-servers behind them.\n")
	if r.Peers != nil {
		fmt.Fprintf(w, "Dynomite: %s\n", r.Peers.Dynomite)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "comparison\tP\ttroop ops/s\tpeer ops/s\tthroughput ratio\tproxies µs/op troop : peer\tratio\tredis µs/op troop : peer\tratio\tgen cores\tmachine busy\t\n")
	for _, pair := range peerPairs {
		for _, p := range r.Config.Pipelines {
			a, b := find(r.Summary, "peers", p, pair.Troop), find(r.Summary, "peers", p, pair.Peer)
			if a == nil || b == nil {
				continue
			}
			ops, _, _, _ := pairedRatio(r.Rounds, "peers", p, pair.Troop, pair.Peer, opsPerSec)
			proxy, _, _, _ := pairedRatio(r.Rounds, "peers", p, pair.Troop, pair.Peer, proxyUs)
			redis, _, _, _ := pairedRatio(r.Rounds, "peers", p, pair.Troop, pair.Peer, redisUs)
			fmt.Fprintf(tw, "%s vs %s\t%d\t%.0f\t%.0f\t%.2f\t%.1f : %.1f\t%.2f\t%.1f : %.1f\t%.2f\t%.2f : %.2f\t%.2f\t\n",
				pair.Name, peerName(pair.Peer), p, a.OpsPerSec, b.OpsPerSec, ops, a.ProxyUsPerOp, b.ProxyUsPerOp, proxy,
				a.RedisUsPerOp, b.RedisUsPerOp, redis, a.GeneratorCores, b.GeneratorCores, max(a.MachineBusy, b.MachineBusy))
		}
	}
	for _, p := range r.Config.Pipelines {
		if d := find(r.Summary, "peers", p, "direct"); d != nil {
			fmt.Fprintf(tw, "direct redis-server\t%d\t-\t%.0f\t-\t-\t-\t%.1f\t-\t%.2f\t%.2f\t\n", p, d.OpsPerSec, d.RedisUsPerOp, d.GeneratorCores, d.MachineBusy)
		}
	}
	tw.Flush()
	pr := r.Peers
	if pr == nil || len(pr.Runs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nResponse time at half load: troop bench mixed --rate at half of the lower P=1 throughput of the pair, open loop, medians of %d interleaved rounds\n", r.Config.LatencyRounds)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "comparison\tops/s\ttroop p50 ms\tpeer p50 ms\ttroop p99 ms\tpeer p99 ms\tp99 ratio\t\n")
	for _, pair := range peerPairs {
		a50, a99, ratio := peerLatency(pr, pair.Troop, pair.Peer)
		b50, b99, _ := peerLatency(pr, pair.Peer, pair.Troop)
		if a99 == 0 || b99 == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s vs %s\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", pair.Name, peerName(pair.Peer), pr.Rates[pair.Name], a50, b50, a99, b99, ratio)
	}
	if d50, d99, _ := peerLatency(pr, "direct", ""); d99 > 0 {
		fmt.Fprintf(tw, "direct redis-server\t%.0f\t-\t%.2f\t-\t%.2f\t-\t\n", pr.Rates["one proxy, one redis-server"], d50, d99)
	}
	tw.Flush()
}
