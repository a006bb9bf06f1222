package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/troop-lab/troop/examples/appboot"
	"github.com/troop-lab/troop/ldfi"
	"github.com/troop-lab/troop/ldfi/httptarget"
)

func newLDFIDemoCmd() *cobra.Command {
	cfg := ldfi.DefaultConfig()
	cfg.MaxFaults = 2
	var fault, out string
	var serve bool
	cmd := &cobra.Command{
		Use:   "demo [flags]",
		Short: "Run ldfi against the App Boot example services",
		Long: `Start the fifteen App Boot example services (examples/appboot) as
processes on free loopback ports, search the failure sets of the gateway's
GET /appboot (oracle: a 2xx whose body has no member_error), print them,
replay every scenario, and stop the services. With --serve the services
keep running until Ctrl-C, for troop ldfi run and replay by hand.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if cfg.Faults, err = parseFaults(fault); err != nil {
				return fmt.Errorf("ldfi demo: %w", err)
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runLDFIDemo(ctx, os.Stdout, exe, cfg, out, serve)
		},
	}
	cmd.Flags().StringVar(&out, "out", ".troop/ldfi-demo", "directory for report.json and the scenario files")
	cmd.Flags().BoolVar(&serve, "serve", false, "after the search, keep the services running until Ctrl-C")
	addSearchFlags(cmd, &cfg, &fault)
	return cmd
}

// runLDFIDemo runs the demo with troop (the binary with the hidden
// appboot-service verb) as the services' program.
func runLDFIDemo(ctx context.Context, w io.Writer, troop string, cfg ldfi.Config, out string, serve bool) error {
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := appboot.Start(startCtx, []string{troop, "ldfi", "appboot-service"}, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("ldfi demo: %w", err)
	}
	defer c.Stop()
	fmt.Fprintf(w, "started %d App Boot services (PIDs %v); the request: GET %s\n\n", len(c.URLs), c.PIDs(), c.GatewayURL())
	t, err := httptarget.New(httptarget.Config{URL: c.GatewayURL(), BodyReject: appboot.MemberError, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	cfg.Target = t.Spec()
	if isTerminal(os.Stderr) {
		cfg.Progress = func(e ldfi.Experiment) { fmt.Fprintln(os.Stderr, ldfi.ProgressLine(e)) }
	}
	r, err := ldfi.Search(ctx, cfg, t, ldfi.WallClock{})
	if err != nil {
		return fmt.Errorf("ldfi demo: %w", err)
	}
	r.WriteText(w)
	if err := r.WriteFiles(out); err != nil {
		return fmt.Errorf("ldfi demo: %w", err)
	}
	fmt.Fprintf(w, "\nreplaying the %d scenarios written to %s:\n", len(r.Failures), out)
	failed := 0
	for i, f := range r.Failures {
		rep, err := ldfi.RunScenario(ctx, f.Scenario, t, ldfi.WallClock{})
		if err != nil {
			return fmt.Errorf("ldfi demo: replay: %w", err)
		}
		verdict := "reproduced"
		if !rep.Reproduced {
			verdict, failed = "NOT reproduced", failed+1
		}
		fmt.Fprintf(w, "  %s  %-14s %2d/%d failed  %s\n", filepath.Join(out, ldfi.ScenarioFile(i)), verdict, rep.Experiment.Failed, rep.Experiment.Reached, f.Scenario.Scope)
	}
	if serve {
		fmt.Fprintf(w, "\nthe services keep running; try: troop ldfi replay %s\nCtrl-C stops them.\n", filepath.Join(out, ldfi.ScenarioFile(0)))
		<-ctx.Done()
	}
	if failed > 0 {
		return fmt.Errorf("ldfi demo: %d scenarios did not reproduce", failed)
	}
	return nil
}
