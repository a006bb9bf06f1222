package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/troop-lab/troop/internal/procmem"
	"github.com/troop-lab/troop/resp"
)

// memoryResult is the memory experiment: resident memory under a burst,
// and what troop's versions cost redis-server in memory.
type memoryResult struct {
	Bursts []burstRun `json:"bursts"`
	Keys   *keysRun   `json:"keys,omitempty"` // nil with --memory-keys 0
}

// burstRun is one target's resident memory (VmRSS, sampled every 100 ms)
// while redis-benchmark loads it for cfg.MemoryLoad, and for
// cfg.MemoryAfter after.
type burstRun struct {
	Target  string `json:"target"` // "troop-node" or "nutcracker"
	Command string `json:"command"`
	// Bytes: before the load, the most during the load and after, and at
	// the end of the after window; at the start and the end also split
	// into the process's own memory (anon) and the pages of files it maps
	// (file: its executable's, shared page cache).
	StartRSS  int64 `json:"start_rss"`
	StartAnon int64 `json:"start_rss_anon"`
	StartFile int64 `json:"start_rss_file"`
	PeakRSS   int64 `json:"peak_rss"`
	EndRSS    int64 `json:"end_rss"`
	EndAnon   int64 `json:"end_rss_anon"`
	EndFile   int64 `json:"end_rss_file"`
	// SettledAfter is how long after the load the RSS first fell under
	// settledRSS, in seconds; -1 when it did not within the window.
	SettledAfter float64 `json:"settled_after_s"`
	// Each second: the RSS from the start of the load to the end of the
	// window.
	PerSecond []int64 `json:"rss_per_second"`
	// INFO's figures of the node at the end (0 for nutcracker): requests
	// refused with -BUSY, and those for the memory budget.
	BusyReplies       int64 `json:"busy_replies"`
	BusyMemoryReplies int64 `json:"busy_memory_replies"`
}

// keysRun is cfg.MemoryKeys SETs of 1 KiB values written with redis-cli
// --pipe to a redis-server directly and through a node in front of
// another: the used_memory of each after (INFO memory), and before, empty.
type keysRun struct {
	Keys            int     `json:"keys"`
	ValueBytes      int     `json:"value_bytes"`
	DirectEmpty     int64   `json:"direct_used_memory_empty"`
	DirectUsed      int64   `json:"direct_used_memory"`
	TroopEmpty      int64   `json:"troop_used_memory_empty"`
	TroopUsed       int64   `json:"troop_used_memory"`
	Ratio           float64 `json:"ratio"`         // TroopUsed / DirectUsed
	DatasetRatio    float64 `json:"dataset_ratio"` // the same, less each server's empty used_memory
	NodeRSS         int64   `json:"node_rss"`      // the node's resident memory 3 s after the load
	ThroughTroopSec float64 `json:"through_troop_s"`
}

// The experiment's fixed parts: the burst of the report that asked for a
// bounded node (-c 500 -P 64, 1 KiB values, SET then GET), the RSS it must
// settle under after, and the value size of the keys part.
const (
	burstConns     = 500
	burstDepth     = 64
	burstValue     = 1024
	settledRSS     = 64 << 20
	peakRSSTarget  = 256 << 20
	keysValueBytes = 1024
	keysRatioLimit = 1.10
)

// memoryExperiment measures a troop node's resident memory under
// redis-benchmark -c 500 -P 64 for cfg.MemoryLoad and cfg.MemoryAfter after,
// with nutcracker under the same load as the anchor, each in front of its
// own redis-server; then, with cfg.MemoryKeys above 0, redis-server's
// used_memory for that many 1 KiB keys written through a node over written
// directly.
func memoryExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	res.Memory = &memoryResult{}
	_, behind, err := startRedis(ctx, ps, bins.redisServer, "memory-redis")
	if err != nil {
		return err
	}
	nodeCfg, err := nodeConfig("memory-node", "rack1", behind, false)
	if err != nil {
		return err
	}
	node, err := startNode(ctx, ps, bins.troop, nodeCfg)
	if err != nil {
		return err
	}
	_, ncBehind, err := startRedis(ctx, ps, bins.redisServer, "memory-nc-redis")
	if err != nil {
		return err
	}
	nc, ncAddr, err := startNutcracker(ctx, ps, bins.nutcracker, ncBehind)
	if err != nil {
		return err
	}
	for _, t := range []struct {
		name, addr string
		p          *proc
	}{{"troop-node", nodeCfg.Listen, node}, {"nutcracker", ncAddr, nc}} {
		r, err := burst(ctx, cfg, bins.redisBenchmark, t.addr, t.p.pid())
		if err != nil {
			return fmt.Errorf("memory: burst through %s: %w", t.name, err)
		}
		r.Target = t.name
		if t.p == node {
			info, err := redisCommand(t.addr, 10*time.Second, "INFO")
			if err != nil {
				return fmt.Errorf("memory: INFO of the node: %w", err)
			}
			r.BusyReplies, r.BusyMemoryReplies = infoField(string(info.Str), "busy_replies"), infoField(string(info.Str), "busy_memory_replies")
		}
		res.Memory.Bursts = append(res.Memory.Bursts, r)
		fmt.Fprintf(log, "memory  %-10s  RSS %s at start (anon %s, file %s), peak %s, %s after %v (anon %s, file %s; under %s after %s)  busy %d\n", t.name,
			mib(r.StartRSS), mib(r.StartAnon), mib(r.StartFile), mib(r.PeakRSS), mib(r.EndRSS), time.Duration(cfg.MemoryAfter),
			mib(r.EndAnon), mib(r.EndFile), mib(settledRSS), settled(r.SettledAfter), r.BusyReplies)
	}
	ps.stopAll()
	if cfg.MemoryKeys == 0 {
		return ctx.Err()
	}
	k, err := keysMemory(ctx, cfg, ps, bins)
	if err != nil {
		return fmt.Errorf("memory: %d keys: %w", cfg.MemoryKeys, err)
	}
	res.Memory.Keys = k
	fmt.Fprintf(log, "memory  %d keys of %d B: redis used_memory direct %s, through troop %s: ratio %.3f (less empty: %.3f); node RSS %s\n",
		k.Keys, k.ValueBytes, mib(k.DirectUsed), mib(k.TroopUsed), k.Ratio, k.DatasetRatio, mib(k.NodeRSS))
	return ctx.Err()
}

// burst runs the load against addr and samples pid's RSS.
func burst(ctx context.Context, cfg config, redisBenchmark, addr string, pid int) (burstRun, error) {
	host, port, _ := net.SplitHostPort(addr)
	args := []string{"-c", strconv.Itoa(burstConns), "-P", strconv.Itoa(burstDepth),
		"-t", "set,get", "-d", strconv.Itoa(burstValue), "-n", "100000000", "-q"}
	start := procmem.Read(pid)
	r := burstRun{Command: "redis-benchmark " + strings.Join(args, " "), SettledAfter: -1,
		StartRSS: start.Total, StartAnon: start.Anon, StartFile: start.File}
	loadCtx, cancel := context.WithTimeout(ctx, time.Duration(cfg.MemoryLoad))
	defer cancel()
	cmd := exec.CommandContext(loadCtx, redisBenchmark, append([]string{"-h", host, "-p", port}, args...)...)
	if err := cmd.Start(); err != nil {
		return r, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	began := time.Now()
	var loadEnd time.Time
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case err := <-done:
			if loadCtx.Err() == nil { // it ended before its time: it failed
				return r, fmt.Errorf("redis-benchmark ended after %v: %v", time.Since(began).Round(time.Millisecond), err)
			}
			loadEnd, done = time.Now(), nil
		case <-tick.C:
		}
		now := procmem.Read(pid)
		rss := now.Total
		r.PeakRSS = max(r.PeakRSS, rss)
		if n%10 == 0 {
			r.PerSecond = append(r.PerSecond, rss)
		}
		if !loadEnd.IsZero() {
			after := time.Since(loadEnd)
			if r.SettledAfter < 0 && rss < settledRSS {
				r.SettledAfter = after.Seconds()
			}
			if after >= time.Duration(cfg.MemoryAfter) {
				r.EndRSS, r.EndAnon, r.EndFile = rss, now.Anon, now.File
				return r, nil
			}
		}
	}
}

// keysMemory loads cfg.MemoryKeys keys into a redis-server directly and
// into another through a node, and reads their used_memory.
func keysMemory(ctx context.Context, cfg config, ps *procSet, bins binaries) (*keysRun, error) {
	_, direct, err := startRedis(ctx, ps, bins.redisServer, "keys-direct")
	if err != nil {
		return nil, err
	}
	_, behind, err := startRedis(ctx, ps, bins.redisServer, "keys-redis")
	if err != nil {
		return nil, err
	}
	nodeCfg, err := nodeConfig("keys-node", "rack1", behind, false)
	if err != nil {
		return nil, err
	}
	node, err := startNode(ctx, ps, bins.troop, nodeCfg)
	if err != nil {
		return nil, err
	}
	input := filepath.Join(ps.dir, "keys.resp")
	if err := writeBulkSets(input, cfg.MemoryKeys, keysValueBytes); err != nil {
		return nil, err
	}
	defer os.Remove(input)
	k := &keysRun{Keys: cfg.MemoryKeys, ValueBytes: keysValueBytes}
	if k.DirectEmpty, err = usedMemory(direct); err != nil {
		return nil, err
	}
	if k.TroopEmpty, err = usedMemory(behind); err != nil {
		return nil, err
	}
	if _, err := bulkLoad(ctx, bins.redisCli, input, direct, "", cfg.MemoryKeys); err != nil {
		return nil, fmt.Errorf("direct: %w", err)
	}
	through, err := bulkLoad(ctx, bins.redisCli, input, nodeCfg.Listen, "", cfg.MemoryKeys)
	if err != nil {
		return nil, fmt.Errorf("through troop: %w", err)
	}
	if !strings.HasPrefix(through.Pipe, "errors: 0,") {
		return nil, fmt.Errorf("through troop, redis-cli says %q", through.Pipe)
	}
	k.ThroughTroopSec = through.Seconds
	for _, a := range []string{direct, behind} {
		if n, err := redisCommand(a, time.Minute, "DBSIZE"); err != nil || n.Int < int64(cfg.MemoryKeys) {
			return nil, fmt.Errorf("%s holds %d keys after the load (%v), want at least %d", a, n.Int, err, cfg.MemoryKeys)
		}
	}
	if k.DirectUsed, err = usedMemory(direct); err != nil {
		return nil, err
	}
	if k.TroopUsed, err = usedMemory(behind); err != nil {
		return nil, err
	}
	k.Ratio = float64(k.TroopUsed) / float64(k.DirectUsed)
	k.DatasetRatio = float64(k.TroopUsed-k.TroopEmpty) / float64(k.DirectUsed-k.DirectEmpty)
	select { // the node hands its free memory back after a second idle
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(3 * time.Second):
	}
	k.NodeRSS = procmem.Read(node.pid()).Total
	return k, nil
}

// usedMemory is a redis-server's used_memory.
func usedMemory(addr string) (int64, error) {
	v, err := redisCommand(addr, time.Minute, "INFO", "memory")
	if err != nil {
		return 0, err
	}
	if v.Type == resp.Error {
		return 0, fmt.Errorf("INFO memory: %s", v.Str)
	}
	return infoField(string(v.Str), "used_memory"), nil
}

// infoField is a numeric field of an INFO reply, 0 when absent.
func infoField(info, name string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func settled(s float64) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", s)
}

// memoryCheck holds the node to the targets: peak RSS under the burst at
// most 256 MiB, under 64 MiB within the window after, and redis-server's
// used_memory through troop at most 1.10 of direct.
func memoryCheck(m *memoryResult, after time.Duration) []check {
	if m == nil {
		return nil
	}
	var out []check
	for _, b := range m.Bursts {
		if b.Target != "troop-node" {
			continue
		}
		anchor := ""
		for _, a := range m.Bursts {
			if a.Target == "nutcracker" {
				anchor = fmt.Sprintf("; nutcracker under the same load: peak %s, %s after", mib(a.PeakRSS), mib(a.EndRSS))
			}
		}
		out = append(out,
			check{Name: "node peak RSS under " + b.Command, Kind: "target", Measured: float64(b.PeakRSS), Limit: peakRSSTarget,
				Pass: b.PeakRSS <= peakRSSTarget, Text: fmt.Sprintf("peak %s from %s at start, %d BUSY replies (%d for memory)%s",
					mib(b.PeakRSS), mib(b.StartRSS), b.BusyReplies, b.BusyMemoryReplies, anchor)},
			check{Name: fmt.Sprintf("node RSS back under %s within %v after", mib(settledRSS), after), Kind: "target",
				Measured: b.SettledAfter, Limit: after.Seconds(), Pass: b.SettledAfter >= 0,
				Text: fmt.Sprintf("under it %s after; %s at the end of the window: %s of its own (anon; %s before the burst) and %s of the troop binary's pages (file; %s before)",
					settled(b.SettledAfter), mib(b.EndRSS), mib(b.EndAnon), mib(b.StartAnon), mib(b.EndFile), mib(b.StartFile))})
	}
	if k := m.Keys; k != nil {
		out = append(out, check{Name: fmt.Sprintf("redis-server used_memory, %d keys of %d B, through troop / direct <= %.2f", k.Keys, k.ValueBytes, keysRatioLimit),
			Kind: "target", Measured: k.Ratio, Limit: keysRatioLimit, Pass: k.Ratio <= keysRatioLimit,
			Text: fmt.Sprintf("%.3f (%s / %s); less each server's empty used_memory %.3f; the node's own RSS 3 s after the load %s",
				k.Ratio, mib(k.TroopUsed), mib(k.DirectUsed), k.DatasetRatio, mib(k.NodeRSS))})
	}
	return out
}
