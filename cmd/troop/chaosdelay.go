package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/chaos/fault"
)

// newChaosDelayCmd is the user-space queue of the delay chaos type on a
// kernel without netem: started by the fault in its own session, it holds
// the packets iptables queues for it until the lease's end, SIGTERM, or its
// namespace losing its network (the lab or container gone), and then lets
// them all go.
func newChaosDelayCmd() *cobra.Command {
	var (
		cfg        fault.QueueConfig
		queue      uint16
		until, tag string
	)
	cmd := &cobra.Command{
		Use:    "delay --netns PATH --queue N --delay D --until RFC3339 --tag TAG",
		Short:  "Hold a delay's packets in user space (the delay chaos type without netem; not for direct use)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			end, err := time.Parse(time.RFC3339Nano, until)
			if err != nil {
				return fmt.Errorf("chaos delay: --until: %v", err)
			}
			if tag == "" || cfg.Netns == "" || cfg.Delay <= 0 {
				return errors.New("chaos delay: --tag, --netns and --delay are required")
			}
			cfg.Queue, cfg.Until, cfg.Seed = queue, end, randomSeed()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)).With("tag", tag)
			return fault.RunQueue(ctx, cfg, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Netns, "netns", "", "the network namespace to hold the queue in (/proc/PID/fd/N or /proc/PID/ns/net)")
	f.Uint64Var(&cfg.NetnsInode, "netns-inode", 0, "the namespace's inode, checked when not 0")
	f.Uint16Var(&queue, "queue", 0, "the NFQUEUE number")
	f.DurationVar(&cfg.Delay, "delay", 0, "how long each packet is held")
	f.DurationVar(&cfg.Jitter, "jitter", 0, "each packet's delay varies by up to this much either way")
	f.StringVar(&until, "until", "", "when to let everything go and exit, RFC 3339")
	f.StringVar(&tag, "tag", "", "the fault's tag, by which its revert finds this process")
	return cmd
}
