package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/troop-lab/troop/internal/outfile"
	"github.com/troop-lab/troop/report"
	"github.com/troop-lab/troop/suite"
)

func init() { subcommands = append(subcommands, newRunCmd) }

func newRunCmd() *cobra.Command {
	var (
		quick, strict bool
		loopback      bool
		out, labDir   string
		configFile    string
		seed          uint64
	)
	cmd := &cobra.Command{
		Use:   "run [--quick] [--out DIR] [--config FILE] [--lab DIR]",
		Short: "Run the whole suite against a lab cluster and write one report",
		Long: `Start a lab cluster (1 datacenter x 3 racks x 1 node), or use a running one
(--lab), and run the suite: a baseline benchmark at DC_ONE and DC_QUORUM, a
run at DC_QUORUM during which the chaos monkey terminates a node and the lab
replaces it, an audit of every acknowledged write, a linearizability check of
a register workload per level, a nemesis (partitions, packet loss and delay,
clock skew) while those workloads run, and lineage-driven fault injection.
Write DIR/report.html (self-contained) and DIR/report.json. --quick takes
about a minute; the default about four. See docs/run.md.`,
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
			cfg.Lab, cfg.Version, cfg.Loopback = labDir, version, loopback
			cfg.Dir, cfg.Out = filepath.Join(out, "lab"), out
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
	f.StringVar(&out, "out", ".troop/run", "directory for the report, its JSON and the lab")
	f.StringVar(&configFile, "config", "", "a YAML file of phase settings over the preset (see docs/run.md)")
	f.StringVar(&labDir, "lab", "", "use the lab running in this directory (troop lab up) instead of starting one")
	f.Uint64Var(&seed, "seed", 1, "seed of the workloads and of the chaos monkey's choice")
	f.BoolVar(&strict, "strict", false, "exit with status 1 when the verdict says something broke")
	f.BoolVar(&loopback, "loopback", false, "start the lab on loopback even as root (the nemesis then runs only its clock faults)")
	return cmd
}

// runSuite runs the suite, writes OUT/report.html and OUT/report.json, and
// prints the verdict and where the report is.
func runSuite(ctx context.Context, cfg suite.Config, out string, stdout io.Writer) (*suite.Report, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	rep, err := suite.Run(ctx, cfg, stdout)
	if rep == nil {
		return nil, err
	}
	// An interrupted run's report holds the phases that finished, and says
	// where it stopped.
	htmlPath, jsonPath := filepath.Join(out, "report.html"), filepath.Join(out, "report.json")
	if err := writeReport(rep, htmlPath, jsonPath); err != nil {
		return nil, err
	}
	printVerdict(stdout, rep)
	fmt.Fprintf(stdout, "\nreport: %s\n  data: %s\n", htmlPath, jsonPath)
	return rep, err
}

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
}
