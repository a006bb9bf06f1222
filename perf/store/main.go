// Command store is troop's store benchmark harness (make bench).
//
// It measures what a troop node costs in front of redis-server, against two
// anchors on the same machine in the same run: redis-server itself (direct)
// and nutcracker (twemproxy) in front of the same redis-server. A second
// experiment runs a three-rack troop cluster at DC_ONE and DC_QUORUM, the
// consensus experiment read-modify-writes against SET at DC_QUORUM, and
// the peers experiment sets three racks of troop beside three of Dynomite.
//
// The machines this runs on have two shared cores, so absolute throughput
// swings from run to run. The harness therefore interleaves the targets
// (direct, nutcracker, node, direct, ...), reports ratios within one run,
// and reports the CPU time each process spent per operation, from
// /proc/PID/stat. See docs/performance.md and perf/NOTES.md.
//
//	go run ./perf/store                 # the full run, about 4 minutes
//	go run ./perf/store --quick         # a smoke run, about 20 seconds
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is the run's configuration; it is written to the JSON file as is.
type config struct {
	Troop     string  `json:"troop"` // the troop binary; "" builds ./cmd/troop
	Rev       string  `json:"rev"`   // build troop from this git revision, not the working tree
	Base      string  `json:"base"`  // also run troop built from this revision (proxy and cluster experiments)
	Conns     int     `json:"conns"`
	Pipelines []int   `json:"pipelines"`
	Keys      int     `json:"keys"`
	Rounds    int     `json:"rounds"`
	Warmup    seconds `json:"warmup_s"`
	Duration  seconds `json:"duration_s"`
	Seed      uint64  `json:"seed"`
	Anchor    bool    `json:"anchor"`    // also run redis-benchmark against redis-server
	Proxy     bool    `json:"proxy"`     // run the proxy-overhead experiment
	Cluster   bool    `json:"cluster"`   // also run the three-rack experiment
	Peers     bool    `json:"peers"`     // also run the peers experiment: troop beside Dynomite and nutcracker
	Dynomite  string  `json:"dynomite"`  // Dynomite's binary for it; "" finds it as the lab does
	TLS       bool    `json:"tls"`       // also run the TLS experiment: DC_QUORUM, plain vs TLS client and peer links
	Consensus bool    `json:"consensus"` // also run the consensus experiment: read-modify-writes vs SET at DC_QUORUM
	Repair    bool    `json:"repair"`    // also run the repair experiments
	Bulk      int     `json:"bulk"`      // SETs of the bulk-load experiment; 0 skips it
	Commands  int     `json:"commands"`  // requests per redis-benchmark test of the commands experiment; 0 skips it
	Memory    bool    `json:"memory"`    // run the memory experiment
	Latency   bool    `json:"latency"`   // run the latency experiment: open loop at half of nutcracker's rate
	// LatencyRounds is the latency experiment's rounds: a window's p99
	// moves far more from round to round than the other figures do.
	LatencyRounds int `json:"latency_rounds"`
	// MemoryKeys is the keys of the memory experiment's used_memory part; 0 skips it.
	MemoryKeys  int     `json:"memory_keys"`
	MemoryLoad  seconds `json:"memory_load_s"`  // the burst's length
	MemoryAfter seconds `json:"memory_after_s"` // how long RSS is watched after it
	// MembershipKeys is the keys the membership experiment's lab holds; 0 skips it.
	MembershipKeys   int     `json:"membership_keys"`
	MembershipWindow seconds `json:"membership_window_s"` // its closed-loop and before windows
	MembershipLoad   float64 `json:"membership_load"`     // its workload's rate, as a share of the closed loop's
	AEKeys           int     `json:"ae_keys"`             // keys in the anti-entropy experiment
	AEDiff           int     `json:"ae_diff"`             // keys made to differ on one replica
	Quick            bool    `json:"quick"`
	Out              string  `json:"out"`
	Pprof            string  `json:"pprof_dir"` // "" = no profiles

	ValueSize   int `json:"value_size"`   // fixed: valueSize
	ReadPercent int `json:"read_percent"` // GET share of operations; the rest are SET
}

// seconds is a duration written to JSON as seconds.
type seconds time.Duration

func (s seconds) MarshalJSON() ([]byte, error) {
	return []byte(strconv.FormatFloat(time.Duration(s).Seconds(), 'f', -1, 64)), nil
}

func (s *seconds) UnmarshalJSON(b []byte) error {
	f, err := strconv.ParseFloat(string(b), 64)
	*s = seconds(f * float64(time.Second))
	return err
}

func defaultConfig() config {
	return config{
		Conns:            50,
		Pipelines:        []int{1, 10},
		Keys:             100_000,
		Rounds:           3,
		Warmup:           seconds(time.Second),
		Duration:         seconds(5 * time.Second),
		Seed:             1,
		Anchor:           true,
		Proxy:            true,
		Cluster:          true,
		Peers:            true,
		TLS:              true,
		Consensus:        true,
		Repair:           true,
		Bulk:             1_000_000,
		Commands:         200_000,
		Memory:           true,
		MemoryKeys:       1_000_000,
		MemoryLoad:       seconds(20 * time.Second),
		MemoryAfter:      seconds(30 * time.Second),
		Latency:          true,
		LatencyRounds:    8,
		MembershipKeys:   1_000_000,
		MembershipWindow: seconds(30 * time.Second),
		MembershipLoad:   0.5,
		AEKeys:           1_000_000,
		AEDiff:           1000,
		Out:              "perf-store.json",
		ValueSize:        valueSize,
		ReadPercent:      80,
	}
}

// applyQuick shortens what the user did not set explicitly to a smoke run.
func (c *config) applyQuick(set map[string]bool) {
	if !set["rounds"] {
		c.Rounds = 1
	}
	if !set["latency-rounds"] {
		c.LatencyRounds = 1
	}
	if !set["duration"] {
		c.Duration = seconds(time.Second)
	}
	if !set["warmup"] {
		c.Warmup = seconds(200 * time.Millisecond)
	}
	if !set["keys"] {
		c.Keys = 1000
	}
	if !set["ae-keys"] {
		c.AEKeys = 10_000
	}
	if !set["ae-diff"] {
		c.AEDiff = 100
	}
	if !set["bulk"] {
		c.Bulk = 10_000
	}
	if !set["commands"] {
		c.Commands = 10_000
	}
	if !set["memory-keys"] {
		c.MemoryKeys = 10_000
	}
	if !set["membership-keys"] {
		c.MembershipKeys = 10_000
	}
	if !set["membership-window"] {
		c.MembershipWindow = seconds(2 * time.Second)
	}
	if !set["memory-load"] {
		c.MemoryLoad = seconds(2 * time.Second)
	}
	if !set["memory-after"] {
		c.MemoryAfter = seconds(3 * time.Second)
	}
}

func (c *config) validate() error {
	var bad []string
	if c.Conns < 1 {
		bad = append(bad, "--conns must be at least 1")
	}
	if len(c.Pipelines) == 0 {
		bad = append(bad, "--pipelines needs at least one depth")
	}
	for _, p := range c.Pipelines {
		if p < 1 || p > 1000 {
			bad = append(bad, fmt.Sprintf("--pipelines: depth %d is outside 1..1000", p))
		}
	}
	if c.Keys < 1 || c.Keys > 1_000_000_000_000 {
		bad = append(bad, "--keys must be 1 to 10^12 (keys are key:%012d)")
	}
	if c.Bulk < 0 {
		bad = append(bad, "--bulk must not be negative (0 skips the bulk load)")
	}
	if c.Commands < 0 {
		bad = append(bad, "--commands must not be negative (0 skips the commands experiment)")
	}
	if c.MemoryKeys < 0 {
		bad = append(bad, "--memory-keys must not be negative (0 skips the used_memory part)")
	}
	if c.Memory && (c.MemoryLoad <= 0 || c.MemoryAfter <= 0) {
		bad = append(bad, "--memory-load and --memory-after must be positive")
	}
	if c.AEDiff < 1 || c.AEDiff > c.AEKeys {
		bad = append(bad, "--ae-diff must be 1 to --ae-keys")
	}
	if c.MembershipLoad <= 0 || c.MembershipLoad >= 1 {
		bad = append(bad, "--membership-load must be between 0 and 1 (a share of the closed loop's throughput)")
	}
	if c.Rounds < 1 {
		bad = append(bad, "--rounds must be at least 1")
	}
	if c.LatencyRounds < 1 {
		bad = append(bad, "--latency-rounds must be at least 1")
	}
	if c.Troop != "" && c.Rev != "" {
		bad = append(bad, "--troop and --rev exclude each other")
	}
	if c.Base != "" && !c.Cluster && !c.Proxy && !c.Consensus {
		bad = append(bad, "--base compares the proxy, three-rack and consensus experiments: it needs --proxy, --cluster or --consensus")
	}
	if c.ReadPercent < 0 || c.ReadPercent > 100 {
		bad = append(bad, "--read-percent must be between 0 and 100")
	}
	if c.Duration <= 0 || c.Warmup < 0 {
		bad = append(bad, "--duration must be positive and --warmup not negative")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}

// intList is a flag holding comma-separated integers.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("not a list of whole numbers: %q", v)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

func parseFlags(args []string, errOut io.Writer) (config, error) {
	c := defaultConfig()
	fs := flag.NewFlagSet("store", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: go run ./perf/store [flags]

Benchmarks a troop node against redis-server (direct) and nutcracker in front
of the same redis-server, then a three-rack troop cluster at DC_ONE and
DC_QUORUM, then troop beside Dynomite (the peers experiment). Targets are interleaved round by round; the table reports medians,
ratios, and CPU microseconds per operation of each process. The JSON file
holds every round.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.Troop, "troop", c.Troop, "troop binary to benchmark (default: go build ./cmd/troop into a temporary directory)")
	fs.StringVar(&c.Rev, "rev", c.Rev, "build troop from this git revision (git archive REV) instead of the working tree, e.g. HEAD")
	fs.StringVar(&c.Base, "base", c.Base, "also run troop built from this git revision beside this build, interleaved round by round: one node in the proxy experiment, a cluster in the three-rack experiment; for the cost of a change (e.g. --base HEAD~1)")
	fs.IntVar(&c.Conns, "conns", c.Conns, "client connections (C)")
	pipes := intList(c.Pipelines)
	fs.Var(&pipes, "pipelines", "pipeline depths (P) to run, comma-separated")
	fs.IntVar(&c.Keys, "keys", c.Keys, "key space: keys are drawn uniformly from this many, all preloaded")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "rounds (R) of interleaved targets per pipeline depth")
	fs.DurationVar((*time.Duration)(&c.Warmup), "warmup", time.Duration(c.Warmup), "load before each measured window")
	fs.IntVar(&c.ReadPercent, "read-percent", c.ReadPercent, "GET share of operations in percent; the rest are SET")
	fs.DurationVar((*time.Duration)(&c.Duration), "duration", time.Duration(c.Duration), "measured window (D) per target and round")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the operation sequence (keys and GET/SET choices)")
	fs.BoolVar(&c.Anchor, "anchor", c.Anchor, "also run redis-benchmark (GET) against redis-server: the load generator's anchor")
	fs.BoolVar(&c.Proxy, "proxy", c.Proxy, "run the proxy-overhead experiment (direct, nutcracker, one troop node)")
	fs.BoolVar(&c.Cluster, "cluster", c.Cluster, "also run the three-rack DC_ONE vs DC_QUORUM experiment")
	fs.BoolVar(&c.Peers, "peers", c.Peers, "also run the peers experiment: three racks of troop and of Dynomite at DC_ONE and DC_QUORUM through rack1's node, redis-server direct, nutcracker and a troop node, interleaved; then each in an open loop at half load (--latency-rounds rounds) for p50 and p99")
	fs.StringVar(&c.Dynomite, "dynomite", c.Dynomite, "Dynomite binary for the peers experiment (default: $TROOP_DYNOMITE, dynomite on PATH, or the one scripts/dynomite built)")
	fs.BoolVar(&c.TLS, "tls", c.TLS, "also run the TLS experiment: the three-rack cluster at DC_QUORUM, plain vs with its client and peer links over TLS")
	fs.BoolVar(&c.Consensus, "consensus", c.Consensus, "also run the consensus experiment: the three-rack cluster at DC_QUORUM running SET, GET, INCR, LPUSH, SET NX on new keys and a WATCH/GET/MULTI/SET/EXEC compare-and-set, one at a time, interleaved; each as a ratio to SET, and with --base, SET and GET against the base build's")
	fs.BoolVar(&c.Repair, "repair", c.Repair, "also run the repair experiments: DC_QUORUM writes with hints, read repair and versions on vs off (all up, one node down), and an anti-entropy pass")
	fs.IntVar(&c.AEKeys, "ae-keys", c.AEKeys, "anti-entropy experiment: keys preloaded on three racks")
	fs.IntVar(&c.Bulk, "bulk", c.Bulk, "bulk-load experiment: new SETs piped by redis-cli --pipe through nutcracker and through a troop node, interleaved; 0 skips it")
	fs.IntVar(&c.AEDiff, "ae-diff", c.AEDiff, "anti-entropy experiment: keys made to differ on one replica")
	fs.IntVar(&c.Commands, "commands", c.Commands, "commands experiment: requests per redis-benchmark test (-t set,get,incr,lpush,hset,sadd,zadd, -P 16) through a one-rack node and direct, interleaved; 0 skips it")
	fs.BoolVar(&c.Memory, "memory", c.Memory, "memory experiment: a troop node's and nutcracker's RSS under redis-benchmark -c 500 -P 64 -t set,get -d 1024 for --memory-load and --memory-after after, then redis-server's used_memory for --memory-keys keys of 1 KiB through a node over direct")
	fs.IntVar(&c.MemoryKeys, "memory-keys", c.MemoryKeys, "memory experiment: keys of 1 KiB written directly and through a node for redis-server's used_memory; 0 skips that part")
	fs.DurationVar((*time.Duration)(&c.MemoryLoad), "memory-load", time.Duration(c.MemoryLoad), "memory experiment: how long the burst runs")
	fs.DurationVar((*time.Duration)(&c.MemoryAfter), "memory-after", time.Duration(c.MemoryAfter), "memory experiment: how long RSS is watched after the burst")
	fs.BoolVar(&c.Latency, "latency", c.Latency, "latency experiment: troop bench mixed in an open loop at half of nutcracker's closed-loop rate, against nutcracker and a node in front of the same redis-server, --latency-rounds rounds of --duration")
	fs.IntVar(&c.LatencyRounds, "latency-rounds", c.LatencyRounds, "rounds of the latency experiment (a window's p99 moves more between rounds than the other experiments' figures do)")
	fs.IntVar(&c.MembershipKeys, "membership-keys", c.MembershipKeys, "membership experiment: keys of 1 KB in a three-rack lab (troop lab up, troop bench write) to which troop lab add-node adds a node while troop bench mixed runs at --membership-load of the lab's closed loop; 0 skips it")
	fs.Float64Var(&c.MembershipLoad, "membership-load", c.MembershipLoad, "membership experiment: the workload's rate, as a share of the lab's closed-loop throughput")
	fs.DurationVar((*time.Duration)(&c.MembershipWindow), "membership-window", time.Duration(c.MembershipWindow), "membership experiment: how long the closed loop and the workload before the change run")
	fs.BoolVar(&c.Quick, "quick", c.Quick, "smoke run: 1 round, 1s windows, 1000 keys, anti-entropy over 10,000 keys, a 2s memory burst watched 3s after, 10,000 keys for used_memory (flags given explicitly still apply)")
	fs.StringVar(&c.Out, "out", c.Out, "JSON result file")
	fs.StringVar(&c.Pprof, "pprof", c.Pprof, "directory for CPU profiles of the troop nodes, taken in an extra unrecorded window per experiment and depth")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	c.Pipelines = pipes
	if c.Quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		c.applyQuick(set)
	}
	return c, c.validate()
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err == flag.ErrHelp {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "store:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "store:", err)
		stop()
		os.Exit(1)
	}
}
