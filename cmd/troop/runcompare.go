package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/troop-lab/troop/suite"
)

func newRunCompareCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "compare A B",
		Short: "Print two runs' reports side by side, with the settings that differ and ratios B/A",
		Long: `Compare two troop run reports: A and B are report.json files, or run
directories holding one (.troop/runs/<time>-<seed>). It prints the settings
in which the runs differ, the baseline task by task at each level with the
ratios B/A of throughput and latency, the failure phase, the audit, the
consistency and nemesis checks, and the findings that broke in one run only.
Only runs made one after the other on the same machine compare well.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reps [2]*suite.Report
			for i, path := range args {
				if st, err := os.Stat(path); err == nil && st.IsDir() {
					path = filepath.Join(path, "report.json")
				}
				rep, err := readRunReport(path)
				if err != nil {
					return fmt.Errorf("run compare: %w", err)
				}
				reps[i] = rep
			}
			suite.Compare(cmd.OutOrStdout(), reps[0], reps[1])
			return nil
		},
	}
}
