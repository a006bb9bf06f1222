package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/labchaos"
	"github.com/troop-lab/troop/chaos/records"
)

func newChaosKillCmd() *cobra.Command {
	var (
		config, kind, labDir, recordsPath string
		seed                              uint64
		recoverWithin                     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "kill GROUP --config FILE [--type T] [--lab DIR] [--records FILE]",
		Short: "Act once, now, on one instance of a group (lab groups only, for now)",
		Long: `kill picks one running instance of GROUP (outside its exceptions), acts on
it with --type (default: terminate) and waits for the group to recover: for a
lab, until the node runs again with a new PID and answers PING. The calendar
and the group's gap and daily maximum do not apply: this is an on-demand kill.
When the config is leashed (the default), it only says what it would do.

With --records, the termination and its outcome go into that records
database. Only the lab backend exists yet; pause and burn-cpu need leases,
which do not exist yet either.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if config == "" {
				return errors.New("chaos kill: --config FILE is required")
			}
			cfg, err := chaos.LoadConfig(config)
			if err != nil {
				return err
			}
			g := cfg.Group(args[0])
			if g == nil {
				return fmt.Errorf("chaos kill: no group %q in %s", args[0], config)
			}
			if g.Backend != chaos.Backend("lab") {
				return fmt.Errorf("chaos kill: group %q uses the %s backend; only the lab backend exists yet", g.Name, g.Backend)
			}
			action := chaos.Action{Kind: chaos.Kind(kind)}
			if action.Kind.Temporary() {
				return fmt.Errorf("chaos kill: %s needs leases, which troop does not have yet", kind)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var rec *records.Store
			if recordsPath != "" {
				if rec, err = records.Open(recordsPath, 0); err != nil {
					return err
				}
				defer rec.Close()
			}
			t, err := chaosKill(ctx, labchaos.New(labDir), cfg, g, action, seed, recoverWithin, cmd.OutOrStdout())
			if rec != nil && t.Outcome != "" {
				if rerr := rec.Record(ctx, t); rerr != nil && err == nil {
					err = rerr
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "the chaos config (docs/chaos.md)")
	f.StringVar(&kind, "type", string(chaos.Terminate), "terminate, stop or restart")
	f.StringVar(&labDir, "lab", ".troop/lab", "the lab's directory, for lab groups")
	f.StringVar(&recordsPath, "records", "", "record the termination in this records database (SQLite file)")
	f.Uint64Var(&seed, "seed", 0, "seed of the instance choice (default: random)")
	f.DurationVar(&recoverWithin, "recover-within", time.Minute, "how long to wait for the group to recover")
	return cmd
}

// chaosKill chooses an instance of g, acts on it unless the config is
// leashed, and measures the recovery. The termination it returns is what
// happened, for the records.
func chaosKill(ctx context.Context, t *labchaos.Terminator, cfg *chaos.Config, g *chaos.Group, action chaos.Action, seed uint64, recoverWithin time.Duration, out io.Writer) (chaos.Termination, error) {
	live, err := t.Instances(ctx, g)
	if err != nil {
		return chaos.Termination{}, err
	}
	if seed == 0 {
		seed = rand.Uint64()
	}
	inst, ok := chaos.PlannedKill{Group: g.Name, Action: action, Pick: rand.New(rand.NewPCG(seed, 0)).Uint64()}.Choose(g, live)
	now := time.Now()
	term := chaos.Termination{Group: g.Name, Instance: inst, Action: action, Planned: now, Executed: now}
	if !ok {
		term.Outcome, term.Reason = chaos.Skipped, chaos.NoInstance
		fmt.Fprintf(out, "group %s: no running instance outside its exceptions: nothing to %s\n", g.Name, action.Kind)
		return term, nil
	}
	if cfg.Leashed {
		term.Outcome, term.Reason = chaos.Skipped, chaos.Leashed
		fmt.Fprintf(out, "leashed (dry run): would %s %s of group %s (seed %d); set leashed: false to act\n", action.Kind, inst.Name, g.Name, seed)
		return term, nil
	}
	fmt.Fprintf(out, "%s %s of group %s (seed %d)\n", action.Kind, inst.Name, g.Name, seed)
	if err := t.Act(ctx, inst, action); err != nil {
		term.Outcome, term.Error = chaos.Failed, err.Error()
		return term, err
	}
	term.Outcome = chaos.Executed
	rctx, cancel := context.WithTimeout(ctx, recoverWithin)
	defer cancel()
	took, err := t.AwaitRecovery(rctx, inst, now)
	if err != nil {
		return term, fmt.Errorf("%s did not recover within %v: %w", inst.Name, recoverWithin, err)
	}
	fmt.Fprintf(out, "%s recovered in %v\n", inst.Name, took.Round(time.Millisecond))
	return term, nil
}
