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
	var sizes, enumName, out string
	var seed uint64
	var k, randomCap int
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Compare ldfi with random fault injection on synthetic service graphs",
		Long: `Generate seeded synthetic service graphs (fan-out, depth, optional calls,
fallbacks, planted combinations of failures), simulated in-process, and
report for each: the experiments ldfi needs to find every minimal failure set
of up to --max-faults points, what random fault injection finds in as many
experiments and how many it needs for all, and the size of the exhaustive
space. See docs/ldfi.md.`,
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
			var results []sim.Result
			for _, s := range strings.Split(sizes, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 2 {
					return fmt.Errorf("ldfi bench: --points %q: want sizes such as 20,100,500", sizes)
				}
				r, err := sim.Run(cmd.Context(), sim.DefaultParams(n, seed), k, "", enum, randomCap)
				if err != nil {
					return fmt.Errorf("ldfi bench: %d points: %w", n, err)
				}
				if isTerminal(os.Stderr) {
					fmt.Fprintf(os.Stderr, "%d points done: ldfi %d experiments\n", r.Points, r.LDFIExperiments)
				}
				results = append(results, r)
			}
			sim.WriteTable(os.Stdout, results)
			if out != "" {
				return outfile.Write(out, func(w io.Writer) error {
					enc := json.NewEncoder(w)
					enc.SetIndent("", "  ")
					return enc.Encode(map[string]any{"version": version, "seed": seed, "max_faults": k, "enumerator": enumName, "random_cap": randomCap, "results": results})
				})
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sizes, "points", "20,100,500", "graph sizes, in injection points")
	f.IntVar(&k, "max-faults", 3, "size of the failure sets to find")
	f.Uint64Var(&seed, "seed", 1, "seed of the graphs, the search and random injection")
	f.StringVar(&enumName, "enumerator", "mmcs", "hitting-set enumerator: mmcs or sat")
	f.IntVar(&randomCap, "random-cap", 1_000_000, "experiments random injection gets at most to find every set")
	f.StringVar(&out, "out", "", "write the results as JSON to this file")
	return cmd
}
