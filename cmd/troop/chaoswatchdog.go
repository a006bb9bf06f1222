package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/lease"
)

// newChaosWatchdogCmd is the detached process that reverts one lease at
// its end, started by the monkey for every leased fault (startWatchdog).
func newChaosWatchdogCmd() *cobra.Command {
	var (
		dir, id string
		opts    backendOptions
	)
	cmd := &cobra.Command{
		Use:    "watchdog --leases DIR --id ID [backend flags]",
		Short:  "Revert one lease at its end (started by the monkey; not for direct use)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := lease.Open(dir)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)).With("watchdog", id)
			l, err := store.Load(id)
			if errors.Is(err, lease.ErrNotFound) {
				log.Info("lease gone before the watchdog started")
				removeWatchdogLog(dir, id)
				return nil
			}
			if err != nil {
				return err
			}
			rev, err := reverterOf(l.Backend, opts)
			if err != nil {
				return err
			}
			w := &lease.Watchdog{Store: store, ID: id, Revert: rev.Revert, Logger: log}
			// The watchdog must not outlive its purpose: the lease's
			// remaining time, the retries, and a margin.
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Until(l.Until)+lease.DefaultGiveUp+time.Minute)
			defer cancel()
			if err := w.Run(ctx); err != nil {
				log.Error("lease not reverted; the monkey's next sweep will try again", "err", err)
				return err
			}
			removeWatchdogLog(dir, id)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "leases", "", "the lease directory")
	f.StringVar(&id, "id", "", "the lease to watch")
	addBackendFlags(f, &opts)
	return cmd
}

// watchdogLog is where a lease's watchdog writes; it is removed when the
// lease is reverted, and kept when it could not be.
func watchdogLog(dir, id string) string { return filepath.Join(dir, id+".log") }

func removeWatchdogLog(dir, id string) { os.Remove(watchdogLog(dir, id)) }

// reverterOf builds the backend b and returns it as a Reverter.
func reverterOf(b chaos.Backend, opts backendOptions) (chaos.Reverter, error) {
	t, err := newBackend(b, opts)
	if err != nil {
		return nil, err
	}
	rev, ok := t.(chaos.Reverter)
	if !ok {
		return nil, fmt.Errorf("the %s backend cannot revert leases", b)
	}
	return rev, nil
}

// startWatchdog starts the detached watchdog of lease id: this very troop
// binary, in its own session.
func startWatchdog(dir, id string, opts backendOptions) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("watchdog of lease %s: %w", id, err)
	}
	argv := append([]string{exe, "chaos", "watchdog", "--leases", dir, "--id", id}, opts.args()...)
	_, err = lease.Spawn(argv, watchdogLog(dir, id))
	return err
}
