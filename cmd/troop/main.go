// Command troop is a resilience lab for distributed key-value stores: a
// Dynomite-style store over real Redis, a benchmark, a chaos monkey and
// lineage-driven fault injection, in one binary. Each verb is a subcommand.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	promversion "github.com/prometheus/common/version"
	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	promversion.Version = version // troop_build_info's version label, on /metrics
	in := &interrupts{stderr: os.Stderr, exit: os.Exit}
	root := &cobra.Command{
		Use:           "troop",
		Short:         "A resilience lab for distributed key-value stores",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			if longVerbs[cmd.CommandPath()] {
				cmd.SetContext(in.catch(cmd.Context()))
			}
		},
	}
	for _, add := range subcommands {
		root.AddCommand(add())
	}
	err := root.Execute()
	if s := in.signal(); s != nil {
		// The verb stopped because it was asked to: its context's end is
		// no error to report, anything else is.
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "troop:", err)
		}
		os.Exit(exitStatus(s))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "troop:", err)
		os.Exit(1)
	}
}

// subcommands holds one constructor per verb; each verb's file registers
// itself in an init function so that verbs stay independent of each other.
var subcommands []func() *cobra.Command
