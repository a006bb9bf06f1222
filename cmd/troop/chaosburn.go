package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/chaos"
)

// newChaosBurnCmd is the burner of the lab backend's burn-cpu: a process
// that keeps one core busy until the lease's end and then exits by itself.
// The lease's revert kills it sooner (it matches it by PID, start time and
// the --lease on its command line).
func newChaosBurnCmd() *cobra.Command {
	var until, leaseID string
	cmd := &cobra.Command{
		Use:    "burn --until RFC3339 --lease ID",
		Short:  "Spin one core until a time (the lab backend's burn-cpu; not for direct use)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			end, err := time.Parse(time.RFC3339Nano, until)
			if err != nil {
				return fmt.Errorf("chaos burn: --until: %v", err)
			}
			if leaseID == "" {
				return errors.New("chaos burn: --lease is required")
			}
			// A typo must not burn for days.
			if limit := time.Now().Add(chaos.MaxTemporaryDuration + time.Minute); end.After(limit) {
				return fmt.Errorf("chaos burn: --until %s is more than %v away", until, chaos.MaxTemporaryDuration)
			}
			burn(end)
			return nil
		},
	}
	cmd.Flags().StringVar(&until, "until", "", "when to stop, RFC 3339")
	cmd.Flags().StringVar(&leaseID, "lease", "", "the lease this burner belongs to")
	return cmd
}

// burn spins until end, looking at the clock every few million additions.
func burn(end time.Time) uint64 {
	var x uint64
	for time.Now().Before(end) {
		for i := range uint64(1 << 22) {
			x += i ^ x
		}
	}
	return x
}
