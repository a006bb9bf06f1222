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
	// Fault is how a hypothesis makes its points fail (its Point is unused):
	// an error by default.
	Fault fit.Fault `json:"fault"`
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
	return Config{MaxFaults: 3, Probes: 10, FailRatio: 0.75, MaxExperiments: 200, Fault: fit.Fault{Kind: fit.Error}, Seed: 1}
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
	case c.MaxExperiments < 1:
		return fmt.Errorf("max experiments %d: want at least 1", c.MaxExperiments)
	case c.PerPeriod < 0 || (c.PerPeriod > 0 && c.Period <= 0):
		return fmt.Errorf("per-period budget %d per %v: want a count and a positive period", c.PerPeriod, c.Period)
	case c.Fault.Kind != fit.Error && c.Fault.Kind != fit.Timeout && c.Fault.Kind != fit.Delay:
		return fmt.Errorf("fault kind %q: want error, timeout or delay", c.Fault.Kind)
	case c.Fault.Kind == fit.Delay && c.Fault.Delay <= 0:
		return errors.New("fault delay: want a positive duration")
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
	N          int       `json:"n"` // 0 is the fault-free baseline
	Hypothesis []string  `json:"hypothesis"`
	Scope      string    `json:"scope"`
	Requests   int       `json:"requests"`
	Reached    int       `json:"reached"` // requests that passed an injected point
	Failed     int       `json:"failed"`  // of those, how many failed
	Outcome    string    `json:"outcome"`
	NewClauses int       `json:"new_clauses"` // alternate executions learned
	Start      time.Time `json:"start"`
	// HypothesisTime is how long choosing this hypothesis took: learning
	// the clauses of the last experiment and enumerating.
	HypothesisTime time.Duration `json:"hypothesis_time_ns"`
	Examples       []string      `json:"examples,omitempty"` // details of failed requests, a few
}

// A FailureSet is a set of points whose failure breaks the class.
type FailureSet struct {
	Points     []string `json:"points"`
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
	Coverage    Coverage     `json:"coverage"`
	PainProbes  int          `json:"pain_probes"` // requests that failed because of an injected fault
	Start       time.Time    `json:"start"`
	End         time.Time    `json:"end"`
}

// ErrBaselineFails is returned when the class fails without any fault: there
// is no successful execution to reason backwards from.
var ErrBaselineFails = errors.New("ldfi: the request class fails without faults")

// ErrScopeRejected is returned when the services refused a scope (a 400
// for a malformed one): the search stops rather than count the refusal as
// a failure of the request.
var ErrScopeRejected = errors.New("ldfi: the services refused the scope")

// Search runs the lineage-driven search against t.
func Search(ctx context.Context, cfg Config, t Target, clock Clock) (*Report, error) {
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("ldfi: %w", err)
	}
	enum := cfg.Enumerator
	if enum == nil {
		enum = Default
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x1df1))
	r := &Report{Config: cfg, Formula: &Formula{}, Start: clock.Now()}

	base, err := experiment(ctx, cfg, t, r.Formula, clock, 0, nil)
	if err != nil {
		return nil, err
	}
	r.Baseline = base
	if base.Outcome == Failed || base.NewClauses == 0 {
		return r, fmt.Errorf("%w: %d of %d requests failed (%v)", ErrBaselineFails, base.Failed, base.Requests, base.Examples)
	}

	hyps := &hypotheses{f: r.Formula, enum: enum, k: cfg.MaxFaults, rng: rng}
	periodStart, inPeriod := clock.Now(), 0
	stop := "no hypothesis of up to max-faults points is left"
	complete := true
	for {
		thinking := time.Now() // the search's own work, not the budget's time
		set, ok := hyps.next()
		if !ok {
			break
		}
		thought := time.Since(thinking)
		if len(r.Experiments) >= cfg.MaxExperiments {
			stop, complete = fmt.Sprintf("the budget of %d experiments is spent", cfg.MaxExperiments), false
			break
		}
		if cfg.PerPeriod > 0 {
			if now := clock.Now(); now.Sub(periodStart) >= cfg.Period {
				periodStart, inPeriod = now, 0
			}
			if inPeriod >= cfg.PerPeriod {
				if err := clock.Sleep(ctx, cfg.Period-clock.Now().Sub(periodStart)); err != nil {
					return r, err
				}
				periodStart, inPeriod = clock.Now(), 0
			}
			inPeriod++
		}
		h := r.Formula.names(set)
		e, err := experiment(ctx, cfg, t, r.Formula, clock, len(r.Experiments)+1, h)
		if err != nil {
			return r, err
		}
		e.HypothesisTime = thought
		r.Experiments = append(r.Experiments, e)
		hyps.tested(set, e.Outcome == Failed)
		r.PainProbes += e.Failed
		if e.Outcome == Failed {
			r.Failures = append(r.Failures, FailureSet{Points: h, Experiment: e.N, Scenario: Scenario{
				Target: cfg.Target, Scope: e.Scope, Points: h, Probes: cfg.Probes, FailRatio: cfg.FailRatio,
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

// experiment runs cfg.Probes requests failing points (none: the baseline),
// learns the clauses of the successful ones, and judges the outcome.
func experiment(ctx context.Context, cfg Config, t Target, f *Formula, clock Clock, n int, points []string) (Experiment, error) {
	return experimentScope(ctx, cfg, t, f, clock, n, fit.ScopeOf(cfg.Fault, points...))
}

// experimentScope is experiment under any scope (a scenario's).
func experimentScope(ctx context.Context, cfg Config, t Target, f *Formula, clock Clock, n int, scope fit.Scope) (Experiment, error) {
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
		good = append(good, p.Lineage)
	}
	e.Outcome = judge(e.Reached, e.Failed, cfg.FailRatio)
	if e.Outcome != Failed {
		for _, l := range good {
			if f.Add(l.Used, n) {
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
