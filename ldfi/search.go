// Package ldfi is lineage-driven fault injection: from the lineage of
// successful requests of one class it builds a formula (each execution is a
// clause "at least one of these points failed"), tests its minimal hitting
// sets smallest first as failure hypotheses, learns from every alternate
// execution a hypothesis provokes, and reports the failure sets it finds,
// each with a scenario that reproduces it.
//
// The search is pure over a Target (one probe request of the class under a
// failure scope) and a Clock; the targets live in subpackages.
package ldfi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/troop-lab/troop/fit"
)

// A Target issues one request of a class (a probe) under a failure scope and
// judges it with its oracle.
type Target interface {
	Probe(ctx context.Context, scope fit.Scope) (Probe, error)
}

// A Probe is the outcome of one request. An error from Target.Probe means
// the probe could not be run at all (the search stops); a request that ran
// and failed is a Probe with OK false.
type Probe struct {
	OK      bool    `json:"ok"`               // the oracle's verdict
	Detail  string  `json:"detail,omitempty"` // why, for the report: "HTTP 503", "body lacks ..."
	Lineage Lineage `json:"lineage"`
}

// A Clock is time for the search: the member-pain budget waits on it.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

// Config is a search's configuration; every field is recorded in the report.
type Config struct {
	// Target describes the target, so a scenario can be replayed.
	Target Spec `json:"target"`
	// MaxFaults is k: hypotheses have at most this many points.
	MaxFaults int `json:"max_faults"`
	// Probes is the number of requests per experiment.
	Probes int `json:"probes"`
	// FailRatio: an experiment finds a failure set when more than this share
	// of the requests that reached an injected point failed (Netflix's LDFI post: 0.75).
	FailRatio float64 `json:"fail_ratio"`
	// MaxExperiments bounds the experiments, the baseline not counted.
	MaxExperiments int `json:"max_experiments"`
	// PerPeriod and Period are the member-pain budget: at most PerPeriod
	// experiments in any Period; the search waits for the next period
	// rather than exceed it. Zero PerPeriod means no limit.
	PerPeriod int           `json:"per_period,omitempty"`
	Period    time.Duration `json:"period,omitempty"`
	// Faults are the ways a hypothesis makes its points fail (their Point
	// is unused): each point is tried with each one that applies to it
	// (fit.Applies: a status at an HTTP call, a gRPC code at a gRPC call),
	// as separate hypotheses, as Filibuster does. An error by default.
	Faults []fit.Fault `json:"faults"`
	// Strategy is StrategyLineage or StrategyCompose; empty: Compose when the target's
	// lineage has call trees and there is one fault type, else Lineage.
	Strategy string `json:"strategy,omitempty"`
	// Verify makes a Compose search inject every failure set it deduced,
	// as a whole, before reporting it.
	Verify bool `json:"verify,omitempty"`
	// Seed chooses among hypotheses of the same size.
	Seed uint64 `json:"seed"`
	// Enumerator is the hitting-set enumerator (Default when nil).
	Enumerator Enumerator `json:"-"`
	// Progress, when set, is told about every experiment as it ends.
	Progress func(Experiment) `json:"-"`
}

// Spec describes a target for replay: its kind ("http", and later "store")
// and its kind's own configuration.
type Spec struct {
	Kind   string          `json:"kind"`
	Config json.RawMessage `json:"config,omitempty"`
}

// Default is the enumerator the search uses unless told otherwise: MMCS
// measured faster than SAT on every formula of the benchmark (docs/ldfi.md).
var Default Enumerator = MMCS{}

// DefaultConfig is the configuration of `troop ldfi run` without flags.
func DefaultConfig() Config {
	return Config{MaxFaults: 3, Probes: 10, FailRatio: 0.75, MaxExperiments: 200, Faults: []fit.Fault{{Kind: fit.Error}}, Verify: true, Seed: 1}
}

// Check reports the first invalid field.
func (c Config) Check() error {
	switch {
	case c.MaxFaults < 1:
		return fmt.Errorf("max faults %d: want at least 1", c.MaxFaults)
	case c.Probes < 1:
		return fmt.Errorf("probes %d: want at least 1", c.Probes)
	case c.FailRatio < 0 || c.FailRatio >= 1:
		return fmt.Errorf("fail ratio %g: want at least 0 and below 1", c.FailRatio)
	case c.Strategy != "" && c.Strategy != StrategyLineage && c.Strategy != StrategyCompose:
		return fmt.Errorf("strategy %q: want %s or %s", c.Strategy, StrategyCompose, StrategyLineage)
	case c.MaxExperiments < 1:
		return fmt.Errorf("max experiments %d: want at least 1", c.MaxExperiments)
	case c.PerPeriod < 0 || (c.PerPeriod > 0 && c.Period <= 0):
		return fmt.Errorf("per-period budget %d per %v: want a count and a positive period", c.PerPeriod, c.Period)
	case len(c.Faults) == 0:
		return errors.New("no fault type: want at least one (error, timeout, delay:D, status:N, code:C, reset)")
	}
	seen := map[string]bool{}
	for _, f := range c.Faults {
		if _, err := fit.ParseAction(f.Action()); err != nil {
			return fmt.Errorf("fault %q: %w", f.Action(), err)
		}
		if seen[f.Action()] {
			return fmt.Errorf("fault %q given twice", f.Action())
		}
		seen[f.Action()] = true
	}
	return nil
}

// Outcomes of an experiment.
const (
	Failed       = "failure-set"  // more than FailRatio of the reached requests failed
	Survived     = "survived"     // every reached request succeeded
	Inconclusive = "inconclusive" // some failed, not enough to call it a failure set
	Unreached    = "unreached"    // no request reached an injected point
)

// An Experiment is one hypothesis tested with Probes requests.
type Experiment struct {
	N          int      `json:"n"`          // 0 is the fault-free baseline
	Hypothesis []string `json:"hypothesis"` // points, or POINT=ACTION with several fault types
	Scope      string   `json:"scope"`
	Requests   int      `json:"requests"`
	Reached    int      `json:"reached"` // requests that passed an injected point
	Failed     int      `json:"failed"`  // of those, how many failed
	Outcome    string   `json:"outcome"`
	NewClauses int      `json:"new_clauses"` // alternate executions learned (Compose: facts learned)
	// Tests are the node hypotheses a Compose experiment tested together.
	Tests []string  `json:"tests,omitempty"`
	Start time.Time `json:"start"`
	// HypothesisTime is how long choosing this hypothesis took: learning
	// the clauses of the last experiment and enumerating.
	HypothesisTime time.Duration `json:"hypothesis_time_ns"`
	Examples       []string      `json:"examples,omitempty"` // details of failed requests, a few
}

// A FailureSet is a set of points whose failure breaks the class.
type FailureSet struct {
	Points []string `json:"points"`
	Faults []string `json:"faults"` // how each point failed: POINT=ACTION
	// Compose: the experiments whose facts make it a failure set, and
	// whether there were several (deduced: never injected as a whole,
	// unless Verified, the experiment that did).
	Evidence   []int    `json:"evidence,omitempty"`
	Deduced    bool     `json:"deduced,omitempty"`
	Verified   int      `json:"verified,omitempty"`
	Experiment int      `json:"experiment"`
	Scenario   Scenario `json:"scenario"`
}

// Coverage says how much of the space the search explored.
type Coverage struct {
	Complete   bool   `json:"complete"` // no hypothesis of up to MaxFaults points was left
	MaxFaults  int    `json:"max_faults"`
	Points     int    `json:"points"`      // injection points seen in any lineage
	Space      int64  `json:"space"`       // combinations of 1..MaxFaults of them
	Tested     int    `json:"tested"`      // hypotheses tested
	Pruned     int64  `json:"pruned"`      // combinations never tested: Space - Tested
	StopReason string `json:"stop_reason"` // why the search ended
	Statement  string `json:"statement"`
}

// A Report is the whole result of a search.
type Report struct {
	Config      Config       `json:"config"`
	Baseline    Experiment   `json:"baseline"`
	Experiments []Experiment `json:"experiments"`
	Formula     *Formula     `json:"formula"`
	Failures    []FailureSet `json:"failures"`
	// Compose: deduced failure sets that did not fail the request when
	// verified, hypotheses given up, and nodes that failed with none of
	// their points failing.
	Refuted   []FailureSet `json:"refuted,omitempty"`
	Skipped   []string     `json:"skipped,omitempty"`
	Anomalies []string     `json:"anomalies,omitempty"`
	Coverage  Coverage     `json:"coverage"`
	// Random is random fault injection at the same budget, when asked for.
	Random     *RandomComparison `json:"random,omitempty"`
	PainProbes int               `json:"pain_probes"` // requests that failed because of an injected fault
	Start      time.Time         `json:"start"`
	End        time.Time         `json:"end"`
}

// ErrBaselineFails is returned when the class fails without any fault: there
// is no successful execution to reason backwards from.
var ErrBaselineFails = errors.New("ldfi: the request class fails without faults")

// ErrScopeRejected is returned when the services refused a scope (a 400
// for a malformed one): the search stops rather than count the refusal as
// a failure of the request.
var ErrScopeRejected = errors.New("ldfi: the services refused the scope")

// Search runs the lineage-driven search against t. Stopped by ctx after
// its baseline, it returns what it found so far with ctx's error, its
// coverage saying where it stopped.
func Search(ctx context.Context, cfg Config, t Target, clock Clock) (*Report, error) {
	r, err := search(ctx, cfg, t, clock)
	if r != nil && err != nil && ctx.Err() != nil {
		r.End = clock.Now()
		r.Coverage = coverage(r.Config.MaxFaults, len(r.Formula.Points), len(r.Experiments), false,
			fmt.Sprintf("interrupted after %d experiments", len(r.Experiments)))
		return r, ctx.Err()
	}
	return r, err
}

func search(ctx context.Context, cfg Config, t Target, clock Clock) (*Report, error) {
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("ldfi: %w", err)
	}
	enum := cfg.Enumerator
	if enum == nil {
		enum = Default
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x1df1))
	r := &Report{Config: cfg, Formula: &Formula{}, Start: clock.Now()}

	at := newAtoms(cfg.Faults)
	rec := &recorder{Target: t}
	base, err := experiment(ctx, cfg, rec, r.Formula, at, clock, 0, nil)
	if err != nil {
		return nil, err
	}
	r.Baseline = base
	if base.Outcome == Failed || base.NewClauses == 0 {
		return r, fmt.Errorf("%w: %d of %d requests failed (%v)", ErrBaselineFails, base.Failed, base.Requests, base.Examples)
	}
	trees := true
	for _, p := range rec.probes {
		trees = trees && (!p.OK || p.Lineage.Tree != nil)
	}
	switch {
	case cfg.Strategy == "" && trees && len(cfg.Faults) == 1:
		r.Config.Strategy = StrategyCompose
	case cfg.Strategy == "":
		r.Config.Strategy = StrategyLineage
	case cfg.Strategy == StrategyCompose && !trees:
		return r, errors.New("ldfi: the compose strategy needs call trees (fit's lineage), and this target's lineage has none: use the lineage strategy")
	case cfg.Strategy == StrategyCompose && len(cfg.Faults) > 1:
		return r, errors.New("ldfi: the compose strategy takes one fault type: use the lineage strategy to enumerate several")
	}
	periodStart, inPeriod := clock.Now(), 0
	pace := func(ctx context.Context) error {
		if cfg.PerPeriod == 0 {
			return nil
		}
		if now := clock.Now(); now.Sub(periodStart) >= cfg.Period {
			periodStart, inPeriod = now, 0
		}
		if inPeriod >= cfg.PerPeriod {
			if err := clock.Sleep(ctx, cfg.Period-clock.Now().Sub(periodStart)); err != nil {
				return err
			}
			periodStart, inPeriod = clock.Now(), 0
		}
		inPeriod++
		return nil
	}
	if r.Config.Strategy == StrategyCompose {
		cfg.Strategy = StrategyCompose
		if err := compose(ctx, cfg, t, clock, r, at, rec.probes, pace); err != nil {
			return r, err
		}
		r.End = clock.Now()
		return r, nil
	}

	hyps := &hypotheses{f: r.Formula, enum: enum, k: cfg.MaxFaults, rng: rng}
	stop := "no hypothesis of up to max-faults points is left"
	complete := true
	for {
		thinking := time.Now() // the search's own work, not the budget's time
		set, ok := hyps.next()
		if !ok {
			break
		}
		h := r.Formula.names(set)
		if len(at.points(h)) < len(h) {
			// Two ways to fail one point: no scope says that, and no
			// superset can either.
			hyps.tested(set, false)
			continue
		}
		thought := time.Since(thinking)
		if len(r.Experiments) >= cfg.MaxExperiments {
			stop, complete = fmt.Sprintf("the budget of %d experiments is spent", cfg.MaxExperiments), false
			break
		}
		if err := pace(ctx); err != nil {
			return r, err
		}
		e, err := experiment(ctx, cfg, t, r.Formula, at, clock, len(r.Experiments)+1, h)
		if err != nil {
			return r, err
		}
		e.HypothesisTime = thought
		r.Experiments = append(r.Experiments, e)
		hyps.tested(set, e.Outcome == Failed)
		r.PainProbes += e.Failed
		if e.Outcome == Failed {
			scope := at.scope(h)
			points := at.points(h)
			r.Failures = append(r.Failures, FailureSet{Points: points, Faults: faultNames(scope), Experiment: e.N, Scenario: Scenario{
				Target: cfg.Target, Scope: e.Scope, Points: points, Probes: cfg.Probes, FailRatio: cfg.FailRatio,
				Note: fmt.Sprintf("found by experiment %d: %d of %d requests failed", e.N, e.Failed, e.Reached),
			}})
		}
		if cfg.Progress != nil {
			cfg.Progress(e)
		}
	}
	r.End = clock.Now()
	r.Coverage = coverage(cfg.MaxFaults, len(r.Formula.Points), len(r.Experiments), complete, stop)
	return r, nil
}

// recorder keeps the probes it passes on (the baseline's, for Compose).
type recorder struct {
	Target
	probes []Probe
}

func (r *recorder) Probe(ctx context.Context, scope fit.Scope) (Probe, error) {
	p, err := r.Target.Probe(ctx, scope)
	if err == nil {
		r.probes = append(r.probes, p)
	}
	return p, err
}

// experiment runs cfg.Probes requests failing the atoms of set (none: the
// baseline), learns the clauses of the successful ones, and judges the
// outcome.
func experiment(ctx context.Context, cfg Config, t Target, f *Formula, at *atoms, clock Clock, n int, set []string) (Experiment, error) {
	e, err := experimentScope(ctx, cfg, t, f, at, clock, n, at.scope(set))
	e.Hypothesis = set
	return e, err
}

// experimentScope is experiment under any scope (a scenario's).
func experimentScope(ctx context.Context, cfg Config, t Target, f *Formula, at *atoms, clock Clock, n int, scope fit.Scope) (Experiment, error) {
	points := scope.Points()
	e := Experiment{N: n, Hypothesis: points, Scope: scope.String(), Requests: cfg.Probes, Start: clock.Now()}
	var good []Lineage
	for i := 0; i < cfg.Probes; i++ {
		p, err := t.Probe(ctx, scope)
		if err != nil {
			return e, fmt.Errorf("ldfi: experiment %d, probe %d: %w", n, i+1, err)
		}
		if len(points) > 0 && !p.Lineage.ReachedAny(points) {
			continue // the request never met the fault: it says nothing about it
		}
		e.Reached++
		if !p.OK {
			e.Failed++
			if len(e.Examples) < 3 && !slices.Contains(e.Examples, p.Detail) {
				e.Examples = append(e.Examples, p.Detail)
			}
			continue
		}
		if err := f.checkNames(p.Lineage.Reached); err != nil {
			return e, fmt.Errorf("ldfi: experiment %d: %w", n, err)
		}
		at.learn(p.Lineage.Tree)
		good = append(good, p.Lineage)
	}
	e.Outcome = judge(e.Reached, e.Failed, cfg.FailRatio)
	if e.Outcome != Failed {
		// An execution that survived a point failed one way would not
		// happen were the point failed another way: those atoms are in
		// its clause too.
		other := at.others(scope)
		for _, l := range good {
			if f.Add(append(at.of(l.Used), other...), n) {
				e.NewClauses++
			}
		}
	}
	return e, nil
}

// judge is the oracle over an experiment's requests (Netflix's LDFI post).
func judge(reached, failed int, ratio float64) string {
	switch {
	case reached == 0:
		return Unreached
	case float64(failed) > ratio*float64(reached):
		return Failed
	case failed == 0:
		return Survived
	default:
		return Inconclusive
	}
}

func coverage(k, points, tested int, complete bool, stop string) Coverage {
	c := Coverage{Complete: complete, MaxFaults: k, Points: points, Tested: tested, StopReason: stop}
	for i := 1; i <= k; i++ {
		c.Space += binomial(points, i)
	}
	c.Pruned = c.Space - int64(tested)
	if complete {
		c.Statement = fmt.Sprintf("every combination of up to %d faults that could break this class was explored: %d hypotheses tested, %d of the %d combinations of the %d points seen pruned by the formula",
			k, tested, c.Pruned, c.Space, points)
	} else {
		c.Statement = fmt.Sprintf("NOT complete (%s): %d hypotheses tested; combinations of up to %d faults remain untested", stop, tested, k)
	}
	return c
}

func binomial(n, k int) int64 {
	if k < 0 || k > n {
		return 0
	}
	r := int64(1)
	for i := 1; i <= k; i++ {
		r = r * int64(n-k+i) / int64(i)
	}
	return r
}
