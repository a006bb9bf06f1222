package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/troop-lab/troop/bench"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/internal/outfile"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/report"
	"github.com/troop-lab/troop/suite"
)

func init() { subcommands = append(subcommands, newRunCmd) }

func newRunCmd() *cobra.Command {
	var (
		quick, strict bool
		coordination  bool
		loopback      bool
		out, labDir   string
		targets       string
		access        bench.Access
		clusterAddr   string
		level, engine string
		clientPort    int
		configFile    string
		seed          uint64
		chaosConfig   string
		chaosGroup    string
		backends      backendOptions
	)
	cmd := &cobra.Command{
		Use:   "run [--quick] [--out DIR] [--config FILE] [--lab DIR | --target HOST:PORT[,...] | --cluster FILE|ADMIN_ADDR] [--chaos-config FILE [--chaos-group NAME]]",
		Short: "Run the whole suite against a lab cluster and write one report",
		Long: `Start a lab cluster (1 datacenter x 3 racks x 1 node), or use a running one
(--lab), or a cluster troop did not start (--target: any Redis-protocol
endpoints; --cluster: troop or Dynomite nodes by their /cluster_describe;
the phases that need faults then say they did not run, unless
--chaos-config gives them a backend), and run the suite:
a baseline benchmark at DC_ONE and DC_QUORUM, a run at DC_QUORUM during which the chaos monkey terminates a node and the lab
replaces it, an audit of every acknowledged write, a linearizability check of
a register workload per level (with --coordination, also a lock, unique
ids, list append, counter, grow-only set, queue and WATCH compare-and-set
workload per level, each judged by its checker), a nemesis (partitions, packet loss and delay,
clock skew; named in --config, also kill -9 of the keys' deciding node)
while those workloads run, and lineage-driven fault injection.
Each run keeps its files in OUT/runs/<time>-<seed>/: report.html
(self-contained), report.json and the lab's directory; OUT/report.html and
OUT/report.json point at the latest, whose report draws the trend of the
earlier runs with the same settings. --quick takes about a minute; the
default about four. Compare two runs with troop run compare.

--engine dynomite starts a lab of Netflix Dynomite's own nodes instead (at
--level, default DC_QUORUM). Any cluster is held to the level it runs at,
which a troop node's or a Dynomite's admin API gives (or --level, for
endpoints that say nothing): at a quorum level a register history that is
not linearizable breaks the verdict. The report names the store and its
version.

On a cluster troop did not start, the faults come from a chaos backend:
--chaos-config names a troop chaos config whose group (--chaos-group when
it has several) lists the cluster's nodes as Docker containers or
Kubernetes pods, matched to the nodes by address. The failure phase and
the durability audit then run through it, and the nemesis through the
Docker backend (the Kubernetes backend only deletes pods: its nemesis
faults are listed as not run). Faults put in place are undone at their
end, and at once on Ctrl-C. See docs/run.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := suite.DefaultConfig()
			if quick {
				cfg = suite.QuickConfig()
			}
			if configFile != "" {
				var err error
				if cfg, err = suite.LoadConfig(configFile, cfg); err != nil {
					return fmt.Errorf("run: %w", err)
				}
			}
			if cmd.Flags().Changed("seed") || configFile == "" {
				cfg.Seed = seed
			}
			if cmd.Flags().Changed("coordination") {
				cfg.Coordination = coordination
			}
			cfg.Lab, cfg.Version, cfg.Loopback, cfg.Engine = labDir, version, loopback, engine
			cfg.Cluster, cfg.ClientPort, cfg.Access, cfg.Level = clusterAddr, clientPort, access, level
			if cfg.Access.Password == "" && (targets != "" || clusterAddr != "") {
				cfg.Access.Password = os.Getenv("REDISCLI_AUTH") // as redis-cli: out of the process list
			}
			if targets != "" {
				cfg.Target = strings.Split(targets, ",")
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("run: %w", err)
			}
			switch {
			case chaosConfig != "":
				ch, err := runChaos(chaosConfig, chaosGroup, backends)
				if err != nil {
					return fmt.Errorf("run: --chaos-config: %w", err)
				}
				cfg.Chaos = ch
				if err := cfg.Validate(); err != nil {
					return fmt.Errorf("run: %w", err)
				}
			case chaosGroup != "":
				return errors.New("run: --chaos-group names a group of --chaos-config FILE, which is missing")
			}
			if isTerminal(os.Stderr) {
				cfg.Progress = os.Stderr
			}
			if err := outfile.CheckDir("--out", out); err != nil {
				return fmt.Errorf("run: %w", err)
			}
			rep, err := runSuite(cmd.Context(), cfg, out, os.Stdout)
			if err != nil {
				return fmt.Errorf("run: %w", err)
			}
			if strict && !rep.Verdict.OK {
				return fmt.Errorf("run: %d finding(s) broke (--strict)", len(rep.Verdict.Broke))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "a short run, about a minute")
	f.StringVar(&out, "out", ".troop", "directory that keeps every run (OUT/runs/<time>-<seed>/: report, JSON, lab) and points OUT/report.html at the latest")
	f.StringVar(&configFile, "config", "", "a YAML file of phase settings over the preset (see docs/run.md)")
	f.StringVar(&labDir, "lab", "", "use the lab running in this directory (troop lab up) instead of starting one")
	f.StringVar(&targets, "target", "", "run against these Redis-protocol endpoints (redis-server, nutcracker ...) instead of a lab: load and checks, and faults only through --chaos-config")
	f.StringVar(&clusterAddr, "cluster", "", "run against a troop or Dynomite cluster troop did not start: a file holding a node's /cluster_describe answer, or its admin address")
	addAccessFlags(f, &access)
	f.StringVar(&chaosConfig, "chaos-config", "", "with --target or --cluster: a troop chaos config whose Docker or Kubernetes group holds the cluster's nodes; its backend terminates a node in the failure phase and runs the nemesis (see docs/run.md)")
	f.StringVar(&chaosGroup, "chaos-group", "", "the group of --chaos-config that holds the cluster's nodes (required when it has several)")
	f.StringVar(&backends.DockerHost, "docker-host", "", "with --chaos-config: the Docker Engine of a docker group (default: $DOCKER_HOST, else the local socket)")
	f.StringVar(&backends.Kubeconfig, "kubeconfig", "", "with --chaos-config: the kubeconfig of a kubernetes group (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	f.StringVar(&level, "level", "", "with --target or --cluster: the level the cluster runs at, for endpoints that do not say (a Dynomite's admin API says; DC_ONE, DC_QUORUM, DC_SAFE_QUORUM ...): at a quorum level a register history that is not linearizable breaks the verdict")
	f.IntVar(&clientPort, "client-port", 0, "with --cluster of Dynomite nodes: their client port (default: each server's peer port plus one)")
	f.Uint64Var(&seed, "seed", 1, "seed of the workloads and of the chaos monkey's choice")
	f.BoolVar(&coordination, "coordination", false, "add the coordination checks to the consistency phase: lock (SET NX), unique ids (INCR), list append, counter, grow-only set, queue and WATCH compare-and-set, at each level (see docs/run.md)")
	f.BoolVar(&strict, "strict", false, "exit with status 1 when the verdict says something broke")
	f.StringVar(&engine, "engine", lab.EngineTroop, "what the nodes of the lab the run starts run: troop, or dynomite (Dynomite's own binary at --level, default DC_QUORUM; see troop lab up --engine)")
	f.BoolVar(&loopback, "loopback", false, "start the lab on loopback even as root (the nemesis then runs only its clock faults)")
	cmd.AddCommand(newRunCompareCmd())
	return cmd
}

// runSuite runs the suite in a directory of its own under OUT/runs (its
// lab, its LDFI and nemesis files, its report), draws the trend of the
// earlier runs with the same settings, points OUT/report.html and
// OUT/report.json at this run's, and prints the verdict and where the
// report is. cfg.Dir and cfg.Out are set here.
func runSuite(ctx context.Context, cfg suite.Config, out string, stdout io.Writer) (*suite.Report, error) {
	if err := adoptLegacyReport(out); err != nil {
		return nil, err
	}
	dir, err := newRunDir(out, time.Now(), cfg.Seed)
	if err != nil {
		return nil, err
	}
	cfg.Dir, cfg.Out = filepath.Join(dir, "lab"), dir
	rep, err := suite.Run(ctx, cfg, stdout)
	if rep == nil {
		return nil, err
	}
	rep.History = history(out, dir, rep.Config, maxHistory)
	// An interrupted run's report holds the phases that finished, and says
	// where it stopped.
	htmlPath, jsonPath := filepath.Join(dir, "report.html"), filepath.Join(dir, "report.json")
	if err := writeReport(rep, htmlPath, jsonPath); err != nil {
		return nil, err
	}
	if err := linkLatest(out, dir); err != nil {
		return nil, err
	}
	printVerdict(stdout, rep)
	fmt.Fprintf(stdout, "\nreport: %s\n  data: %s\n  (%s and %s point at the latest run's)\n",
		htmlPath, jsonPath, filepath.Join(out, "report.html"), filepath.Join(out, "report.json"))
	return rep, err
}

// runChaos is the chaos of the group of the chaos config at path that
// holds the cluster's nodes: the one named, or the only one.
func runChaos(path, group string, opts backendOptions) (*suite.Chaos, error) {
	cfg, err := chaos.LoadConfig(path)
	if err != nil {
		return nil, err
	}
	g, err := suite.ChaosGroup(cfg, path, group)
	if err != nil {
		return nil, err
	}
	t, err := newBackend(g.Backend, opts)
	if err != nil {
		return nil, err
	}
	return suite.NewChaos(path, *g, t, opts.args())
}

// maxHistory is how many earlier runs the trend shows at most, and
// historyLookBack how many it reads to find them.
const (
	maxHistory      = 9
	historyLookBack = 50
)

// runsDir is where the runs under out are kept.
func runsDir(out string) string { return filepath.Join(out, "runs") }

// newRunDir makes the directory of a run that started at start with seed:
// OUT/runs/<time>-<seed>, named so that names sort by time.
func newRunDir(out string, start time.Time, seed uint64) (string, error) {
	if err := os.MkdirAll(runsDir(out), 0o755); err != nil {
		return "", err
	}
	base := filepath.Join(runsDir(out), fmt.Sprintf("%s-%d", start.Format("20060102-150405"), seed))
	dir := base
	for i := 2; ; i++ {
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		dir = fmt.Sprintf("%s.%d", base, i) // two runs in one second
	}
}

// linkLatest points OUT/report.html and OUT/report.json at the run's, by
// relative symbolic links replaced in one rename each.
func linkLatest(out, dir string) error {
	rel, err := filepath.Rel(out, dir)
	if err != nil {
		return err
	}
	for _, name := range []string{"report.html", "report.json"} {
		tmp := filepath.Join(out, "."+name+".link")
		os.Remove(tmp)
		if err := os.Symlink(filepath.Join(rel, name), tmp); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(out, name)); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	return nil
}

// adoptLegacyReport moves a report that an earlier troop wrote straight
// into OUT (report.html and report.json as files, not links) into a run
// directory of its own, so that the first run of this layout loses nothing.
func adoptLegacyReport(out string) error {
	jsonPath := filepath.Join(out, "report.json")
	st, err := os.Lstat(jsonPath)
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	rep, err := readRunReport(jsonPath)
	if err != nil {
		return nil // not ours to move
	}
	dir, err := newRunDir(out, rep.Started, rep.Seed)
	if err != nil {
		return err
	}
	for _, name := range []string{"report.html", "report.json"} {
		if err := os.Rename(filepath.Join(out, name), filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// history reads the summaries of the runs before dir under OUT/runs that
// checked the same things the same way (suite.Comparable), oldest first,
// at most n, looking back over the last historyLookBack runs only (a
// report is megabytes). Runs whose report cannot be read are left out.
func history(out, dir string, cfg suite.Config, n int) []suite.RunSummary {
	ents, err := os.ReadDir(runsDir(out))
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && e.Name() < filepath.Base(dir) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var got []suite.RunSummary
	for i := len(names) - 1; i >= max(0, len(names)-historyLookBack) && len(got) < n; i-- {
		rep, err := readRunReport(filepath.Join(runsDir(out), names[i], "report.json"))
		if err != nil || !suite.Comparable(rep.Config, cfg) {
			continue
		}
		got = append(got, suite.Summarize(names[i], rep))
	}
	slices.Reverse(got)
	return got
}

// readRunReport reads a troop run report.json.
func readRunReport(path string) (*suite.Report, error) { return readFile(path, suite.ReadReport) }

func writeReport(rep *suite.Report, htmlPath, jsonPath string) error {
	if err := outfile.Write(htmlPath, func(w io.Writer) error { return report.WriteHTML(w, rep) }); err != nil {
		return err
	}
	return outfile.Write(jsonPath, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(rep)
	})
}

func printVerdict(w io.Writer, rep *suite.Report) {
	if rep.Stopped != "" {
		fmt.Fprintf(w, "\nPARTIAL: %s\n", rep.Stopped)
	}
	if rep.Store.Name != "" {
		fmt.Fprintf(w, "\nstore: %s\n", rep.Store)
	}
	if rep.Verdict.OK {
		fmt.Fprintln(w, "\nverdict: everything troop checked held")
	} else {
		fmt.Fprintf(w, "\nverdict: %d finding(s) broke\n", len(rep.Verdict.Broke))
	}
	for _, s := range rep.Verdict.Broke {
		fmt.Fprintln(w, "  BROKE  ", s)
	}
	for _, s := range rep.Verdict.Held {
		fmt.Fprintln(w, "  held   ", s)
	}
	for _, s := range rep.Verdict.Notes {
		fmt.Fprintln(w, "  note   ", s)
	}
	for _, s := range rep.Skipped {
		fmt.Fprintln(w, "  not run", s)
	}
	if rep.Cleanup != "" {
		fmt.Fprintln(w, "  cleanup", rep.Cleanup)
	}
}
