package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/monkey"
)

func newChaosKillCmd() *cobra.Command {
	var (
		config, kind, db string
		duration         time.Duration
		seed             uint64
		recoverWithin    time.Duration
		opts             backendOptions
		params           = map[string]*string{}
	)
	cmd := &cobra.Command{
		Use:   "kill GROUP --config FILE [--type T] [--duration D] [type parameters] [--lab DIR] [--db FILE]",
		Short: "Act once, now, on one instance of a group",
		Long: `kill picks one running instance of GROUP (outside its exceptions), acts on
it with --type (default: terminate) and waits for the group to recover: for a
lab, until the node runs again with a new PID and answers PING, and after a
network or clock fault until the fault is gone and the node's peers hold it
up again. The calendar
and the group's gap and daily maximum do not apply: an operator asked for
this kill, now. The global stop (troop chaos stop) and the outage source do.
When the config is leashed (the default), it only says what it would do.

pause, burn-cpu, the network faults partition, loss and delay, and
clock-skew last --duration; they and the lab's stop hold a lease: a
detached watchdog undoes them at the lease's end even if this command is
killed. Network faults need a lab in address mode (troop lab up --netns) or
containers on this host. Their parameters are flags: --partition isolate,
halves, one-way or bridge; --percent of loss; --delay and --jitter;
--offset and --rate of clock-skew.

Every outcome is recorded in the records database (--db, default the
config's db key).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := chaos.ParseKind(kind)
			if err != nil {
				return fmt.Errorf("chaos kill: --type: %w", err)
			}
			given := map[string]string{}
			for name, v := range params {
				if cmd.Flags().Changed(name) {
					given[name] = *v
				}
			}
			d := time.Duration(0)
			if cmd.Flags().Changed("duration") {
				d = duration
			}
			action, err := chaos.NewAction(k, d, given)
			if err != nil {
				return fmt.Errorf("chaos kill: %w", err)
			}
			ctx := cmd.Context()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			if !cmd.Flags().Changed("seed") {
				seed = rand.Uint64()
			}
			m, closeDB, err := openMonkey(config, db, opts, seed, log)
			if err != nil {
				return fmt.Errorf("chaos kill: %w", err)
			}
			defer closeDB()
			if m.Config.Group(args[0]) == nil {
				return fmt.Errorf("chaos kill: no group %q in %s", args[0], config)
			}
			if done, err := m.Sweep(ctx, false); err != nil || len(done) > 0 {
				log.Warn("reverted expired leases", "n", len(done), "err", err)
			}
			return chaosKill(ctx, m, args[0], action, seed, recoverWithin, opts, cmd)
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "the chaos config (docs/chaos.md)")
	f.StringVar(&kind, "type", string(chaos.Terminate), "terminate, stop, restart, pause, burn-cpu, partition, loss, delay or clock-skew")
	f.DurationVar(&duration, "duration", chaos.DefaultTemporaryDuration, "how long a pause, burn-cpu, network fault or clock-skew lasts")
	for _, p := range chaos.AllParams() {
		params[p.Name] = f.String(p.Name, "", p.Usage)
	}
	f.StringVar(&db, "db", "", "the records database (default: the config's db key)")
	f.Uint64Var(&seed, "seed", 0, "seed of the instance choice (default: random)")
	f.DurationVar(&recoverWithin, "recover-within", time.Minute, "how long to wait for the group to recover (after a lease's end)")
	addBackendFlags(f, &opts)
	return cmd
}

func chaosKill(ctx context.Context, m *monkey.Monkey, group string, action chaos.Action, seed uint64, recoverWithin time.Duration, opts backendOptions, cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	m.RecoverWithin = recoverWithin
	k := chaos.PlannedKill{Group: group, Action: action, Pick: rand.New(rand.NewPCG(seed, 0)).Uint64()}
	t, err := m.Execute(ctx, k, monkey.Forced)
	fmt.Fprintf(out, "%s (seed %d)\n", describe(t), seed)
	if err != nil || t.Outcome != chaos.Executed {
		return err
	}
	t, err = m.AwaitRecovery(ctx, t)
	if ctx.Err() != nil {
		// Interrupted while the fault holds: undo it now rather than at
		// its lease's end. A termination cannot be undone; the backend
		// (the lab's supervisor, a restart policy) replaces the instance.
		return undoKill(context.WithoutCancel(ctx), m, t, opts, out)
	}
	if err != nil {
		return err
	}
	if t.Recovery > 0 {
		fmt.Fprintf(out, "%s recovered in %v\n", t.Instance.ID, t.Recovery.Round(time.Millisecond))
	}
	return nil
}

// undoKill reverts the lease of an executed kill, if it holds one, and
// says what it did.
func undoKill(ctx context.Context, m *monkey.Monkey, t chaos.Termination, opts backendOptions, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ls, err := m.Leases.List()
	if err != nil {
		return err
	}
	for _, l := range ls {
		if l.Instance.ID != t.Instance.ID || l.Action.Kind != t.Action.Kind || !l.Start.Equal(t.Executed) {
			continue
		}
		b, err := newBackend(l.Backend, opts)
		if err != nil {
			return err
		}
		r, ok := b.(chaos.Reverter)
		if !ok {
			return fmt.Errorf("the %s backend cannot revert %s early: its watchdog reverts it at %s", l.Backend, l.Action, l.Until.Format(time.RFC3339))
		}
		if err := m.Leases.Revert(ctx, l, r.Revert); err != nil {
			return fmt.Errorf("interrupted: %w (its watchdog tries again at %s)", err, l.Until.Format(time.RFC3339))
		}
		fmt.Fprintf(out, "interrupted: %s of %s undone early (record %d)\n", l.Action, l.Instance.ID, t.ID)
		return nil
	}
	fmt.Fprintf(out, "interrupted before %s recovered (record %d): a %s cannot be undone; the group's backend replaces the instance\n",
		t.Instance.ID, t.ID, t.Action.Kind)
	return nil
}
