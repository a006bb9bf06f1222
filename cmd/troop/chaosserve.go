package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/troop-lab/troop/chaos/api"
	"github.com/troop-lab/troop/internal/logflag"
)

// DefaultChaosListen is where troop chaos serve answers by default.
const DefaultChaosListen = "127.0.0.1:8421"

func newChaosServeCmd() *cobra.Command {
	var (
		config, db, listen string
		seed               uint64
		recoverWithin      time.Duration
		opts               backendOptions
		logFlags           *logflag.Flags
	)
	cmd := &cobra.Command{
		Use:   "serve --config FILE [--lab DIR] [--listen ADDR] [--db FILE] [--seed N]",
		Short: "Run the Chaos Monkey daemon and its REST API",
		Long: `serve reverts the leases that expired while no monkey ran, then plans each
day (PlanDay, stored in the records database; a restart reuses the stored
plan) and acts at the planned times. Before each kill it checks the global
stop, asks the outage source (an error counts as an outage) and, in one
database transaction, the calendar, the group's gap and daily maximum; it
records every kill, executed or skipped with its reason (leashed, outage,
min-gap, max-per-day, holiday, stopped, ...), and the time the group took
to recover.

It serves the REST API on --listen (docs/chaos.md): GET /api/v1/chaos,
POST /api/v1/chaos (on_demand: true and the token), POST /api/v1/stop and
/resume (the token), GET /metrics and /healthz.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logFlags.Logger(cmd.ErrOrStderr())
			if err != nil {
				return fmt.Errorf("chaos serve: %v", err)
			}
			if !cmd.Flags().Changed("seed") {
				seed = rand.Uint64()
			}
			m, closeDB, err := openMonkey(config, db, opts, seed, log)
			if err != nil {
				return fmt.Errorf("chaos serve: %w", err)
			}
			defer closeDB()
			m.RecoverWithin = recoverWithin
			h, err := api.New(api.Options{Records: m.Records, Killer: m, Switch: m, Config: m.Config,
				OnDemand: m.Config.OnDemand, Token: m.Config.Token, Logger: log})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("chaos serve: %w", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
			go srv.Serve(ln)
			fmt.Fprintf(cmd.OutOrStdout(), "troop chaos serve: listening on http://%s (config %s, seed %d, leashed %v)\n",
				ln.Addr(), config, seed, m.Config.Leashed)
			err = m.Run(ctx)
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(shutdown)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "the chaos config (docs/chaos.md)")
	f.StringVar(&db, "db", "", "the records database (default: the config's db key)")
	f.StringVar(&listen, "listen", DefaultChaosListen, "address of the REST API")
	f.Uint64Var(&seed, "seed", 0, "seed of the daily plans (default: random, printed)")
	f.DurationVar(&recoverWithin, "recover-within", 5*time.Minute, "how long to wait for a group to recover after a kill")
	addBackendFlags(f, &opts)
	logFlags = logflag.Add(f)
	return cmd
}
