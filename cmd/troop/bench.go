package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/outfile"
	"github.com/troop-lab/troop/suite"
)

func init() { subcommands = append(subcommands, newBenchCmd) }

func newBenchCmd() *cobra.Command {
	cfg := bench.DefaultConfig()
	var targets, labDir, clusterAddr, valueSize, pipeline, ratio, hotspot, shard, startAt, out, cpuProfile string
	var clientPort int
	cmd := &cobra.Command{
		Use:   "bench [JOB] (--target HOST:PORT[,...] | --lab DIR | --cluster FILE|ADMIN_ADDR)",
		Short: "Run a workload against a Redis-protocol endpoint, checking every read",
		Long: `Run a workload (crud, mixed, write, ycsb-a ... ycsb-f; default mixed) against
redis-server, nutcracker, troop or Dynomite nodes, check every value read,
and print what ran, then a VTest-style table of throughput, latency
percentiles, Errors (no proper answer) and Fails (a wrong answer). The same
--seed gives the same operations. Keys are named --key-prefix (default
troop:bench:) and a number; --cleanup deletes the keys the run wrote.
To drive more load than one machine can, run N processes with --shard I/N
and one --start-at, and add their results up with troop bench merge.
See docs/bench.md.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				cfg.Job = args[0]
			}
			if err := parseBenchFlags(cmd, &cfg, valueSize, pipeline, ratio, hotspot); err != nil {
				return err
			}
			if err := parseShardFlags(&cfg, shard, startAt); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			if cfg.Access.Password == "" {
				cfg.Access.Password = os.Getenv("REDISCLI_AUTH") // as redis-cli: out of the process list
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			// Where the results go is checked before the run, not after it.
			// With --out - the result is standard output's, and what is
			// printed for a reader goes to standard error.
			resultOut, tableOut := out, io.Writer(os.Stdout)
			if out == "-" {
				resultOut, tableOut = "", os.Stderr
			}
			if err := checkOutputs("--out", resultOut, "--csv", cfg.CSV, "--hdr-out", cfg.HdrOut, "--cpuprofile", cpuProfile); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			ctx := cmd.Context()
			t, kind, err := benchTarget(ctx, targets, labDir, clusterAddr, clientPort, cfg)
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			defer t.Close()
			var warnings []string
			for _, w := range bench.Inapplicable(&cfg, cmd.Flags().Changed, kind) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
				warnings = append(warnings, w)
			}
			cfg.Version = version
			if isTerminal(os.Stdout) {
				cfg.Progress = os.Stderr
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("bench: %w", err)
				}
				defer f.Close()
				pprof.StartCPUProfile(f)
				defer pprof.StopCPUProfile()
			}
			if cfg.HdrOut != "" {
				f, err := os.Create(cfg.HdrOut)
				if err != nil {
					return fmt.Errorf("bench: --hdr-out: %w", err)
				}
				defer f.Close()
				cfg.HdrLog = f
			}
			model := bench.NewModel(cfg.Staleness)
			res, err := bench.RunModel(ctx, cfg, t, tableOut, model)
			if err != nil && (res == nil || ctx.Err() == nil) {
				return fmt.Errorf("bench: %w", err)
			}
			res.Warnings = append(warnings, res.Warnings...)
			// An interrupted run keeps what it measured (its result says
			// where it stopped) and still cleans up after itself; a second
			// interrupt stops the cleanup too.
			if cfg.Cleanup {
				c, err := bench.Cleanup(context.WithoutCancel(ctx), t, model, cfg)
				res.Cleanup = &c
				gone := ""
				if c.Deleted < c.Keys {
					gone = " (the others were gone already: the run deleted them itself)"
				}
				fmt.Fprintf(tableOut, "\ncleanup: deleted %d of the %d keys the run wrote%s in %.1f s\n", c.Deleted, c.Keys, gone, c.Seconds)
				if err == nil && c.Errors > 0 {
					err = fmt.Errorf("%d DELs failed, first: %s", c.Errors, c.Sample)
				}
				if err != nil {
					return fmt.Errorf("bench: cleanup: %w", err)
				}
			}
			partial := ""
			if res.Stopped != "" {
				partial = "partial "
			}
			for _, o := range []struct {
				path, what string
				write      func(io.Writer) error
			}{{resultOut, "result", res.WriteJSON}, {cfg.CSV, "CSV", res.WriteCSV}} {
				if o.path == "" {
					continue
				}
				if err := outfile.Write(o.path, o.write); err != nil {
					return fmt.Errorf("bench: %w", err)
				}
				fmt.Fprintf(tableOut, "%s%s written to %s\n", partial, o.what, o.path)
			}
			if cfg.HdrOut != "" {
				fmt.Fprintf(tableOut, "%sHDR log written to %s\n", partial, cfg.HdrOut)
			}
			if out == "-" {
				return res.WriteJSON(os.Stdout)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&targets, "target", "", "HOST:PORT[,HOST:PORT...] of plain RESP servers (redis-server, nutcracker, troop nodes)")
	f.StringVar(&labDir, "lab", "", "DIR of a troop lab cluster (troop lab up's default is .troop/lab), driven by a token-aware client per rack")
	f.StringVar(&clusterAddr, "cluster", "", "a troop or Dynomite cluster: a file holding a node's /cluster_describe answer, or the admin address (HOST:PORT) of a node to ask")
	f.IntVar(&clientPort, "client-port", 0, "with --cluster of Dynomite nodes: their client port (default: each server's peer port plus one, as Dynomite's configurations have it)")
	f.Uint64Var(&cfg.Keys, "keys", cfg.Keys, "size of the key set")
	f.IntVar(&cfg.KeySize, "key-size", cfg.KeySize, "bytes per key, after the prefix")
	f.StringVar(&cfg.KeyPrefix, "key-prefix", cfg.KeyPrefix, "put before every key, to keep the run's keys apart from others (\"\" for none)")
	f.StringVar(&valueSize, "value-size", cfg.ValueSize.String(), "bytes per value: N, or LOW-HIGH drawn per write")
	f.StringVar(&cfg.Distribution, "distribution", "", "key distribution: uniform, zipfian, latest or hotspot (default: the job's)")
	f.StringVar(&hotspot, "hotspot", "0.2:0.8", "for --distribution hotspot: KEYS:OPS, the share of keys that gets the share of operations")
	f.StringVar(&ratio, "ratio", cfg.Ratio.String(), "GET:SET for the mixed job")
	f.IntVar(&cfg.Readers, "readers", cfg.Readers, "reader workers per node (mixed)")
	f.IntVar(&cfg.Writers, "writers", cfg.Writers, "writer workers per node (mixed)")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "workers per node (other jobs)")
	f.Float64Var(&cfg.Rate, "rate", 0, "open loop: operations per second for the whole run (0: closed loop)")
	f.StringVar(&pipeline, "pipeline", cfg.Pipeline.String(), "commands per batch: N, or LOW-HIGH drawn per batch")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of each task")
	f.Int64Var(&cfg.Requests, "requests", 0, "requests per task, instead of --duration")
	f.IntVar(&cfg.Iterations, "iterations", cfg.Iterations, "times to run the whole job")
	f.DurationVar(&cfg.Warmup, "warmup", 0, "unmeasured load before each iteration")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the operation sequence")
	f.StringVar(&cfg.Consistency, "consistency", cfg.Consistency, "DC_ONE, DC_QUORUM or DC_SAFE_QUORUM, for --lab and --cluster of troop nodes (recorded only with --target)")
	f.IntVar(&cfg.Staleness, "staleness", 0, "how many acknowledged writes older than the latest a read may return")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "per request and per connect")
	f.IntVar(&cfg.Conns, "conns", cfg.Conns, "connections per target address")
	addAccessFlags(f, &cfg.Access)
	f.BoolVar(&cfg.Cleanup, "cleanup", false, "at the end, delete the keys the run wrote (and no other), also after an interrupt")
	f.StringVar(&shard, "shard", "", "I/N: run shard I of N processes that share the run (their workers, rate and keys split N ways); merge their results with troop bench merge")
	f.StringVar(&startAt, "start-at", "", "begin the load at this time (RFC 3339, such as 2026-01-02T15:04:05Z): the same for every shard")
	f.StringVar(&out, "out", "", "write the JSON result to this file (- for standard output, after the table)")
	f.StringVar(&cfg.CSV, "csv", "", "write the table's rows as CSV to this file")
	f.StringVar(&cfg.HdrOut, "hdr-out", "", "write each task's response times per second to this file in HdrHistogram's log format (.hlog, nanoseconds)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of troop bench itself to this file (go tool pprof)")
	cmd.AddCommand(newBenchCompareCmd(), newBenchMergeCmd())
	return cmd
}

// benchTarget opens the one target the flags name and checks that it answers.
func benchTarget(ctx context.Context, targets, labDir, clusterAddr string, clientPort int, cfg bench.Config) (bench.Target, string, error) {
	given := 0
	for _, s := range []string{targets, labDir, clusterAddr} {
		if s != "" {
			given++
		}
	}
	if given != 1 {
		return nil, "", errors.New("give exactly one of --target HOST:PORT[,...], --lab DIR and --cluster ADMIN_ADDR")
	}
	if targets != "" {
		d, err := cfg.Access.Dial()
		if err != nil {
			return nil, "", err
		}
		t, err := bench.NewRESPTarget(strings.Split(targets, ","), cfg.Conns, cfg.Timeout, d)
		if err != nil {
			return nil, "", err
		}
		if err := t.Ping(); err != nil {
			t.Close()
			return nil, "", err
		}
		return t, bench.TargetRESP, nil
	}
	var nodes []client.Node
	var err error
	if labDir != "" {
		nodes, err = suite.LabNodes(labDir)
	} else {
		nodes, err = client.FromCluster(ctx, clusterAddr)
	}
	if err != nil {
		return nil, "", err
	}
	kind, level := bench.TargetTroop, cfg.Consistency
	if len(nodes) > 0 && nodes[0].Dynomite {
		// Dynomite takes no TROOP CONSISTENCY: its levels are its own.
		kind, level = bench.TargetDynomite, ""
		client.SetDynomitePort(nodes, clientPort)
	}
	auth, err := cfg.Access.Dial()
	if err != nil {
		return nil, "", err
	}
	auth.DB = 0 // --db does not apply to a cluster: a warning says so
	opts := client.Options{ConnsPerNode: cfg.Conns, Timeout: cfg.Timeout, ReadLevel: level, WriteLevel: level, Dial: auth}
	if kind == bench.TargetTroop && labDir == "" {
		// Nodes added to the cluster or taken out while the run goes on
		// get their share of requests, and removed ones none.
		opts.Follow = client.FollowCluster(clusterAddr)
	}
	t, err := bench.NewClusterTarget(nodes, "", opts)
	if err != nil {
		return nil, "", err
	}
	// Reach every node once, so a dead cluster fails here, naming the node.
	ping := [][]byte{[]byte("PING")}
	for _, n := range nodes {
		c, err := client.NewPlain([]string{n.Addr}, client.PlainOptions{Timeout: cfg.Timeout, Dial: auth})
		if err == nil {
			_, err = c.Do(ctx, ping...)
			c.Close()
		}
		if err != nil {
			t.Close()
			return nil, "", fmt.Errorf("node %s: %w", n, err)
		}
	}
	return t, kind, nil
}

func parseBenchFlags(cmd *cobra.Command, cfg *bench.Config, valueSize, pipeline, ratio, hotspot string) error {
	var err error
	if cfg.ValueSize, err = bench.ParseRange(valueSize); err != nil {
		return fmt.Errorf("bench: --value-size: %w", err)
	}
	if cfg.Pipeline, err = bench.ParseRange(pipeline); err != nil {
		return fmt.Errorf("bench: --pipeline: %w", err)
	}
	if cfg.Ratio, err = bench.ParseRatio(ratio); err != nil {
		return fmt.Errorf("bench: --ratio: %w", err)
	}
	if cfg.Hotspot, err = bench.ParseHotspot(hotspot); err != nil {
		return fmt.Errorf("bench: --hotspot: %w", err)
	}
	if cmd.Flags().Changed("requests") && !cmd.Flags().Changed("duration") {
		cfg.Duration = 0 // --requests replaces the default duration
	}
	return nil
}

// parseShardFlags reads --shard and --start-at; a shard needs a start.
func parseShardFlags(cfg *bench.Config, shard, startAt string) error {
	if shard != "" {
		var err error
		if cfg.Shard, err = bench.ParseShard(shard); err != nil {
			return fmt.Errorf("--shard: %w", err)
		}
		if startAt == "" {
			return errors.New("--shard needs --start-at: the shards of a run begin their load together, at a time agreed beforehand")
		}
	}
	if startAt != "" {
		t, err := time.Parse(time.RFC3339Nano, startAt)
		if err != nil {
			return fmt.Errorf("--start-at %q is not a time such as 2026-01-02T15:04:05Z (RFC 3339)", startAt)
		}
		cfg.StartAt = t
	}
	return nil
}

func newBenchMergeCmd() *cobra.Command {
	var out, csvOut string
	cmd := &cobra.Command{
		Use:   "merge SHARD.json... [--out FILE]",
		Short: "Add up the results of the shards of one run (--shard I/N) into the whole run's",
		Long: `Add up the results of every shard of one run into one result: counts,
Errors and Fails summed, HDR histograms added bucket by bucket (every
percentile is that of all the requests), per-second series added second by
second. It refuses a set with a shard missing or given twice, and shards
that ran different settings (workload, seed, --start-at). It prints the
merged table; --out writes a result that troop bench compare reads.
See docs/bench.md.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputs("--out", out, "--csv", csvOut); err != nil {
				return fmt.Errorf("bench merge: %w", err)
			}
			shards := make([]*bench.Result, len(args))
			for i, path := range args {
				r, err := readBenchResult(path)
				if err != nil {
					return fmt.Errorf("bench merge: %w", err)
				}
				shards[i] = r
			}
			m, err := bench.Merge(shards, args)
			if err != nil {
				return fmt.Errorf("bench merge: %w", err)
			}
			stdout := cmd.OutOrStdout()
			m.Setup.WriteHeader(stdout)
			m.WriteTable(stdout)
			for _, o := range []struct {
				path, what string
				write      func(io.Writer) error
			}{{out, "merged result", m.WriteJSON}, {csvOut, "CSV", m.WriteCSV}} {
				if o.path == "" {
					continue
				}
				if err := outfile.Write(o.path, o.write); err != nil {
					return fmt.Errorf("bench merge: %w", err)
				}
				fmt.Fprintf(stdout, "%s written to %s\n", o.what, o.path)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the merged JSON result to this file")
	cmd.Flags().StringVar(&csvOut, "csv", "", "write the merged table's rows as CSV to this file")
	return cmd
}

// readBenchResult reads a result file; its errors name the file.
func readBenchResult(path string) (*bench.Result, error) { return readFile(path, bench.ReadResult) }

// readFile reads the file at path with read; its errors name the file.
func readFile[T any](path string, read func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	v, err := read(f)
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func newBenchCompareCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "compare A.json B.json",
		Short: "Print two bench results side by side, with ratios B/A",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var results [2]*bench.Result
			for i, path := range args {
				r, err := readBenchResult(path)
				if err != nil {
					return fmt.Errorf("bench compare: %w", err)
				}
				results[i] = r
			}
			bench.Compare(os.Stdout, results[0], results[1])
			return nil
		},
	}
}

// checkOutputs checks flag and path pairs with outfile.Check, in order.
func checkOutputs(flagsAndPaths ...string) error {
	for i := 0; i+1 < len(flagsAndPaths); i += 2 {
		if err := outfile.Check(flagsAndPaths[i], flagsAndPaths[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// isTerminal reports whether f is a terminal (not merely a character device
// such as /dev/null).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// addAccessFlags registers how a verb reaches servers that guard
// themselves: database, credentials and TLS.
func addAccessFlags(f *pflag.FlagSet, a *bench.Access) {
	f.IntVar(&a.DB, "db", 0, "--target: the database to SELECT on every connection")
	f.StringVar(&a.User, "user", "", "AUTH as this ACL user (with --password)")
	f.StringVar(&a.Password, "password", "", "AUTH with this password (requirepass, or --user's); $REDISCLI_AUTH keeps it out of the process list")
	f.BoolVar(&a.TLS, "tls", false, "connect with TLS (with --target, a connection per worker)")
	f.StringVar(&a.TLSCA, "cacert", "", "with --tls: PEM file of the CA certificates to trust (default: the system's)")
	f.StringVar(&a.TLSCert, "cert", "", "with --tls: the client certificate (PEM), for servers that ask for one (tls-auth-clients)")
	f.StringVar(&a.TLSKey, "key", "", "with --tls: the client certificate's private key (PEM)")
	f.StringVar(&a.TLSServerName, "sni", "", "with --tls: the server name to ask for and check (default: the target's host)")
	f.BoolVar(&a.TLSInsecure, "insecure", false, "with --tls: do not check the server's certificate")
}
