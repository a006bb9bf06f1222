package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/troop-lab/troop/examples/appboot"
	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/ldfi"
	"github.com/troop-lab/troop/ldfi/grpctarget"
	"github.com/troop-lab/troop/ldfi/httptarget"
	"github.com/troop-lab/troop/ldfi/oracle"
	"github.com/troop-lab/troop/ldfi/storetarget"
)

func init() { subcommands = append(subcommands, newLDFICmd) }

// ldfiTargets rebuilds a target from the spec a scenario records, by kind:
// a new kind of target is a package with New, FromSpec and Spec, added here
// and to newLDFIRunCmd's flags.
var ldfiTargets = map[string]func(ldfi.Spec) (ldfi.Target, error){
	httptarget.Kind:  func(s ldfi.Spec) (ldfi.Target, error) { return httptarget.FromSpec(s) },
	grpctarget.Kind:  func(s ldfi.Spec) (ldfi.Target, error) { return grpctarget.FromSpec(s) },
	storetarget.Kind: func(s ldfi.Spec) (ldfi.Target, error) { return storetarget.FromSpec(s) },
}

// ldfiTarget rebuilds the target of spec, a metric oracle's included.
func ldfiTarget(ctx context.Context, s ldfi.Spec) (ldfi.Target, error) {
	if s.Kind == oracle.Kind {
		return oracle.FromSpec(ctx, s, func(inner ldfi.Spec) (ldfi.Target, error) { return ldfiTarget(ctx, inner) })
	}
	newTarget, ok := ldfiTargets[s.Kind]
	if !ok {
		return nil, fmt.Errorf("target kind %q: want http, grpc, store or metric", s.Kind)
	}
	return newTarget(s)
}

func newLDFICmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ldfi",
		Short: "Lineage-driven fault injection: find the smallest sets of failures that break a request",
		Long: `Lineage-driven fault injection (Netflix's LDFI post, after Molly): probe a request class,
read each successful request's lineage (the injection points its answer
depended on), and inject the smallest sets of failures that could break every
execution seen so far, learning from each fallback. See docs/ldfi.md.`,
	}
	cmd.AddCommand(newLDFIRunCmd(), newLDFIReplayCmd(), newLDFIDemoCmd(), newLDFIBenchCmd(), newAppbootServiceCmd())
	return cmd
}

// addSearchFlags binds the search's flags to cfg.
func addSearchFlags(cmd *cobra.Command, cfg *ldfi.Config, fault *string) {
	f := cmd.Flags()
	f.IntVar(&cfg.MaxFaults, "max-faults", cfg.MaxFaults, "k: hypotheses fail at most this many points")
	f.IntVar(&cfg.Probes, "probes", cfg.Probes, "requests per experiment")
	f.Float64Var(&cfg.FailRatio, "fail-ratio", cfg.FailRatio, "a failure set is found when more than this share of the requests that reached an injected point failed")
	f.IntVar(&cfg.MaxExperiments, "max-experiments", cfg.MaxExperiments, "budget: experiments at most")
	f.IntVar(&cfg.PerPeriod, "per-period", 0, "member-pain budget: at most this many experiments per --period (0: no limit)")
	f.DurationVar(&cfg.Period, "period", time.Minute, "the period of --per-period")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the choice among hypotheses of one size")
	f.StringVar(&cfg.Strategy, "strategy", "", "compose (a search per call tree node, failure sets composed: needs fit's call trees and one --fault) or lineage (every failure set injected whole); default compose when it can")
	f.BoolVar(&cfg.Verify, "verify", cfg.Verify, "compose: inject every failure set deduced from several experiments before reporting it")
	f.StringVar(fault, "fault", "error", "how hypotheses fail their points, comma separated: error, timeout, delay:DURATION, status:HTTP-STATUS, code:GRPC-CODE, reset; with several, each point is tried with each that applies to it")
}

// parseFaults reads --fault: actions of the scope grammar, comma separated.
func parseFaults(s string) ([]fit.Fault, error) {
	var out []fit.Fault
	for _, a := range strings.Split(s, ",") {
		f, err := fit.ParseAction(strings.TrimSpace(a))
		if err != nil {
			return nil, fmt.Errorf("--fault %q: %q: %w", s, a, err)
		}
		out = append(out, f)
	}
	return out, nil
}

func newLDFIRunCmd() *cobra.Command {
	cfg := ldfi.DefaultConfig()
	var hc httptarget.Config
	var gc grpctarget.Config
	var sc storetarget.Config
	var requestHex string
	var compare bool
	var fault, status, out, class string
	var metric oracle.MetricConfig
	cmd := &cobra.Command{
		Use:   "run (--url URL | --grpc HOST:PORT --method /pkg.Service/Method | --lab DIR --class CLASS | --addr HOST:PORT --class CLASS) [flags]",
		Short: "Search the failure sets of one request class",
		Long: `Search the failure sets of one request class. The HTTP target sends
--method to --url, the entry of services instrumented with package fit;
the oracle is the status (any 2xx unless --status), optionally a body
predicate (--body-match, --body-reject); the lineage comes back in the
answer, or, with --spans FILE, from the spans the services export there.
The gRPC target calls --method at --grpc (services instrumented with fit's
interceptors; the request is --request-hex, protobuf bytes, empty by
default); the oracle is the call's status.
With --metric-url and --metric, a request whose answer passes still fails
when the metric rose while it ran (an error or fallback counter).
Writes DIR/report.json and a
scenario file per failure set (replay with troop ldfi replay FILE).
The store target sends --class ("GET at DC_QUORUM") to a node of a lab
(--lab DIR [--node NAME]) or at --addr; see docs/store.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if cfg.Faults, err = parseFaults(fault); err != nil {
				return fmt.Errorf("ldfi run: %w", err)
			}
			var t interface {
				ldfi.Target
				Spec() ldfi.Spec
			}
			switch {
			case gc.Addr != "" && hc.URL == "" && class == "":
				if gc.Request, err = hex.DecodeString(requestHex); err != nil {
					return fmt.Errorf("ldfi run: --request-hex: %w", err)
				}
				gc.Timeout, gc.Method = hc.Timeout, hc.Method
				if !cmd.Flags().Changed("method") {
					return errors.New("ldfi run: --grpc needs --method /package.Service/Method")
				}
				var gt *grpctarget.Target
				if gt, err = grpctarget.New(gc); err == nil {
					defer gt.Close()
					t = gt
				}
			case hc.URL != "" && class == "":
				if hc.Status, err = parseStatuses(status); err != nil {
					return fmt.Errorf("ldfi run: %w", err)
				}
				var ht *httptarget.Target
				if ht, err = httptarget.New(hc); err == nil {
					defer ht.Close()
					t = ht
				}
			case hc.URL == "" && class != "":
				sc.Spans = hc.Spans // --spans serves both targets
				if err = storetarget.ParseClass(class, &sc); err == nil {
					var st *storetarget.Target
					if st, err = storetarget.New(sc); err == nil {
						defer st.Close()
						t = st
					}
				}
			default:
				err = errors.New("give --url URL (HTTP), --grpc HOST:PORT with --method (gRPC), or --class CLASS with --lab DIR or --addr HOST:PORT (store)")
			}
			if err == nil && (metric.URL != "" || metric.Metric != "") {
				metric.Target = t.Spec()
				t, err = oracle.NewMetric(cmd.Context(), metric, t)
			}
			if err != nil {
				return fmt.Errorf("ldfi run: %w", err)
			}
			cfg.Target = t.Spec()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			_, err = runSearch(ctx, cfg, t, out, compare)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&hc.URL, "url", "", "the entry request: http://HOST:PORT/PATH")
	f.StringVar(&hc.Method, "method", "GET", "HTTP method; with --grpc, the gRPC method: /package.Service/Method")
	f.StringVar(&hc.Body, "body", "", "request body")
	f.StringVar(&status, "status", "", "statuses that count as success, comma separated (default any 2xx)")
	f.StringVar(&hc.BodyMatch, "body-match", "", "a regular expression the body of a successful answer matches")
	f.StringVar(&hc.BodyReject, "body-reject", "", "a regular expression the body of a successful answer does not match")
	f.DurationVar(&hc.Timeout, "timeout", 10*time.Second, "per request")
	f.StringVar(&hc.Spans, "spans", "", "read each probe's lineage from the OpenTelemetry spans the services (or the node: troop_lineage_export) export to this file, by a W3C traceparent per probe, not from the answer; HTTP: otlp:HOST:PORT serves an OTLP/HTTP receiver there instead (the services export to http://HOST:PORT/v1/traces)")
	f.StringVar(&metric.URL, "metric-url", "", "also fail a request when --metric rose while it ran: a Prometheus text endpoint, http://HOST:PORT/metrics")
	f.StringVar(&metric.Metric, "metric", "", `the metric of --metric-url, summed over the series picked: NAME or NAME{label="value",...}`)
	f.Float64Var(&metric.Max, "metric-max", 0, "how much --metric may rise during a request that still succeeds")
	f.StringVar(&gc.Addr, "grpc", "", "gRPC: the entry service's HOST:PORT (plaintext)")
	f.StringVar(&requestHex, "request-hex", "", "gRPC: the request message, protobuf bytes in hex (default: empty, every field at its default)")
	f.BoolVar(&gc.Stream, "stream", false, "gRPC: the method streams its answers (all are read)")
	f.StringVar(&class, "class", "", `store: the request class, "GET at DC_QUORUM", "SET at DC_ONE" ...`)
	f.StringVar(&sc.Lab, "lab", "", "store: a lab directory (troop lab up)")
	f.StringVar(&sc.Node, "node", "", "store: the lab's node to send the class to (default its first)")
	f.StringVar(&sc.Addr, "addr", "", "store: a node's client address, instead of --lab")
	f.StringVar(&out, "out", ".troop/ldfi", "directory for report.json and the scenario files")
	f.BoolVar(&compare, "compare-random", false, "after the search, run random fault injection with as many experiments against the same services and report both")
	addSearchFlags(cmd, &cfg, &fault)
	return cmd
}

func parseStatuses(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 100 || n > 599 {
			return nil, fmt.Errorf("--status %q: want HTTP statuses such as 200,204", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// runSearch runs a search (and random injection at its budget, when
// compare is set), shows progress on a terminal, prints the readable report
// and writes the files.
func runSearch(ctx context.Context, cfg ldfi.Config, t ldfi.Target, out string, compare bool) (*ldfi.Report, error) {
	if isTerminal(os.Stderr) {
		cfg.Progress = func(e ldfi.Experiment) { fmt.Fprintln(os.Stderr, ldfi.ProgressLine(e)) }
	}
	r, err := ldfi.Search(ctx, cfg, t, ldfi.WallClock{})
	interrupted := err != nil && r != nil && ctx.Err() != nil
	if err != nil && !interrupted {
		return r, fmt.Errorf("ldfi: %w", err)
	}
	r.WriteText(os.Stdout)
	if compare && !interrupted {
		if isTerminal(os.Stderr) {
			fmt.Fprintf(os.Stderr, "random fault injection: %d experiments...\n", len(r.Experiments))
		}
		c, err := ldfi.CompareRandom(ctx, r.Config, t, ldfi.WallClock{}, r)
		if err != nil && ctx.Err() == nil {
			return r, fmt.Errorf("ldfi: random injection: %w", err)
		}
		r.Random = c // what was measured, also when Ctrl-C stopped it
		c.WriteText(os.Stdout, len(r.Failures))
	}
	if out != "" {
		if err := r.WriteFiles(out); err != nil {
			return r, fmt.Errorf("ldfi: %w", err)
		}
		fmt.Printf("report and %d scenario(s) written to %s\n", len(r.Failures), out)
	}
	return r, nil
}

func newLDFIReplayCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "replay FILE...",
		Short: "Replay failure scenarios; exit 1 when one does not reproduce",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			failed := 0
			for _, path := range args {
				ok, err := replayFile(cmd.Context(), path)
				if err != nil {
					return fmt.Errorf("ldfi replay: %s: %w", path, err)
				}
				if !ok {
					failed++
				}
			}
			if failed > 0 {
				return fmt.Errorf("ldfi replay: %d of %d scenarios did not reproduce", failed, len(args))
			}
			return nil
		},
	}
}

func replayFile(ctx context.Context, path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	sc, err := ldfi.ReadScenario(f)
	f.Close()
	if err != nil {
		return false, err
	}
	t, err := ldfiTarget(ctx, sc.Target)
	if err != nil {
		return false, err
	}
	rep, err := ldfi.RunScenario(ctx, sc, t, ldfi.WallClock{})
	if err != nil {
		return false, err
	}
	e := rep.Experiment
	verdict := "REPRODUCED"
	if !rep.Reproduced {
		verdict = "NOT reproduced"
	}
	fmt.Printf("%s: %s: %s: %d of %d requests failed (%d reached an injected point) %v\n",
		path, verdict, sc.Scope, e.Failed, e.Requests, e.Reached, e.Examples)
	return rep.Reproduced, nil
}

func newAppbootServiceCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "appboot-service --name NAME --listen ADDR --peers NAME=URL,...",
		Short:              "Run one App Boot example service (started by troop ldfi demo)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return appboot.Main(args)
		},
	}
}
