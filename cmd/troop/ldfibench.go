package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/troop-lab/troop/internal/outfile"
	"github.com/troop-lab/troop/ldfi"
	"github.com/troop-lab/troop/ldfi/sim"
)

func newLDFIBenchCmd() *cobra.Command {
	var sizes, enumName, out, profile, strategy, seedList string
	var k, randomCap int
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Compare ldfi with random fault injection on synthetic service graphs",
		Long: `Generate seeded synthetic service graphs (fan-out, depth, optional calls,
fallbacks, planted combinations of failures), simulated in-process, and
report for each: the experiments ldfi needs to find every minimal failure set
of up to --max-faults points and to complete its search (and that over the
number of services), what random fault injection finds in as many
experiments and how many it needs for all, and the time to choose each
hypothesis. --profile appboot generates graphs shaped like Netflix's App Boot
request (about 100 services, 300 points, most calls optional or with a
fallback) instead of --points. See docs/ldfi.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var enum ldfi.Enumerator
			switch enumName {
			case "mmcs":
				enum = ldfi.MMCS{}
			case "sat":
				enum = ldfi.SAT{}
			default:
				return fmt.Errorf("ldfi bench: --enumerator %q: want mmcs or sat", enumName)
			}
			var seeds []uint64
			for _, f := range strings.Split(seedList, ",") {
				n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
				if err != nil {
					return fmt.Errorf("ldfi bench: --seed %q: want seeds such as 1 or 1,2,3", seedList)
				}
				seeds = append(seeds, n)
			}
			var graphs []sim.Params
			for _, seed := range seeds {
				switch profile {
				case "appboot":
					graphs = append(graphs, sim.AppBootParams(seed))
				case "default":
					for _, s := range strings.Split(sizes, ",") {
						n, err := strconv.Atoi(strings.TrimSpace(s))
						if err != nil || n < 2 {
							return fmt.Errorf("ldfi bench: --points %q: want sizes such as 20,100,500", sizes)
						}
						graphs = append(graphs, sim.DefaultParams(n, seed))
					}
				default:
					return fmt.Errorf("ldfi bench: --profile %q: want default or appboot", profile)
				}
			}
			if strategy != "" && strategy != ldfi.StrategyCompose && strategy != ldfi.StrategyLineage {
				return fmt.Errorf("ldfi bench: --strategy %q: want compose or lineage", strategy)
			}
			var results []sim.Result
			for _, p := range graphs {
				r, err := sim.Run(cmd.Context(), p, k, strategy, enum, randomCap)
				if err != nil {
					return fmt.Errorf("ldfi bench: seed %d, %d points: %w", p.Seed, p.Points, err)
				}
				if isTerminal(os.Stderr) {
					fmt.Fprintf(os.Stderr, "seed %d, %d points done: ldfi %d experiments\n", p.Seed, r.Points, r.LDFIExperiments)
				}
				results = append(results, r)
				if cmd.Context().Err() != nil {
					break // Ctrl-C: keep what was measured
				}
			}
			sim.WriteTable(os.Stdout, results)
			if out != "" {
				return outfile.Write(out, func(w io.Writer) error {
					enc := json.NewEncoder(w)
					enc.SetIndent("", "  ")
					return enc.Encode(map[string]any{"version": version, "seeds": seeds, "profile": profile, "strategy": strategy, "max_faults": k, "enumerator": enumName, "random_cap": randomCap, "results": results})
				})
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sizes, "points", "20,100,500", "graph sizes, in injection points")
	f.IntVar(&k, "max-faults", 3, "size of the failure sets to find")
	f.StringVar(&seedList, "seed", "1", "seeds of the graphs, the search and random injection, comma separated: one graph per seed (and size)")
	f.StringVar(&profile, "profile", "default", "graphs: default (--points) or appboot (shaped like Netflix's App Boot request)")
	f.StringVar(&strategy, "strategy", "", "ldfi's search: compose or lineage (default: compose, as the graphs give call trees)")
	f.StringVar(&enumName, "enumerator", "mmcs", "hitting-set enumerator: mmcs or sat")
	f.IntVar(&randomCap, "random-cap", 1_000_000, "experiments random injection gets at most to find every set")
	f.StringVar(&out, "out", "", "write the results as JSON to this file")
	return cmd
}
