package sim

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/troop-lab/troop/ldfi"
)

// A Result is one graph's comparison of ldfi with random fault injection.
type Result struct {
	Params     Params `json:"params"`
	Points     int    `json:"points"`
	Planted    int    `json:"planted_sets"` // minimal failure sets of up to MaxFaults points
	MaxFaults  int    `json:"max_faults"`
	Exhaustive string `json:"exhaustive"`  // subsets of up to MaxFaults points
	AllSubsets string `json:"all_subsets"` // 2^points

	Services int    `json:"services"`
	Strategy string `json:"strategy"`

	LDFIExperiments int     `json:"ldfi_experiments"`  // the whole search
	LDFIToAll       int     `json:"ldfi_to_all_found"` // experiments until the last planted set was found
	LDFIFound       int     `json:"ldfi_found"`        // planted sets found
	LDFIExtra       int     `json:"ldfi_extra"`        // failure sets found that are not planted (should be 0)
	LDFIDeduced     int     `json:"ldfi_deduced"`      // planted sets found by composing facts of several experiments
	LDFIAlternates  int     `json:"ldfi_alternates"`   // distinct executions seen (clauses of the formula)
	LDFIComplete    bool    `json:"ldfi_complete"`
	LDFIMaxStep     float64 `json:"ldfi_max_step_ms"` // longest experiment, choosing its hypothesis included
	LDFIMeanStep    float64 `json:"ldfi_mean_step_ms"`
	LDFIMaxHyp      float64 `json:"ldfi_max_hypothesis_ms"` // longest hypothesis generation of one step
	LDFIMeanHyp     float64 `json:"ldfi_mean_hypothesis_ms"`

	RandomFoundAtLDFIBudget int `json:"random_found_at_ldfi_budget"` // planted sets random found in as many experiments as ldfi used to find all
	RandomToAll             int `json:"random_to_all_found"`         // experiments random needed to find all (0: not within RandomCap)
	RandomCap               int `json:"random_cap"`
}

// Run compares ldfi (with strategy, "" for the default) and random fault
// injection on the graph of p, random getting at most randomCap
// experiments.
func Run(ctx context.Context, p Params, k int, strategy string, enum ldfi.Enumerator, randomCap int) (Result, error) {
	g := Generate(p)
	planted := g.MinimalFailureSets(k)
	res := Result{Params: p, Points: len(g.points), Services: g.services, Planted: len(planted), MaxFaults: k, RandomCap: randomCap}
	var space int64
	for i := 1; i <= k; i++ {
		space += binomial(len(g.points), i)
	}
	res.Exhaustive = fmt.Sprint(space)
	res.AllSubsets = "2^" + fmt.Sprint(len(g.points)) + " = " + sci(new(big.Int).Lsh(big.NewInt(1), uint(len(g.points))))

	want := map[string]bool{}
	for _, s := range planted {
		want[strings.Join(s, ",")] = true
	}

	cfg := ldfi.DefaultConfig()
	cfg.MaxFaults, cfg.Probes, cfg.MaxExperiments, cfg.Seed, cfg.Enumerator, cfg.Strategy = k, 1, 1_000_000, p.Seed, enum, strategy
	cfg.Verify = false // the graph's true sets are known: the deduced ones are checked against them
	cfg.Target = ldfi.Spec{Kind: "sim"}
	last := time.Now()
	var steps, hyps []time.Duration
	cfg.Progress = func(e ldfi.Experiment) {
		now := time.Now()
		steps = append(steps, now.Sub(last))
		hyps = append(hyps, e.HypothesisTime)
		last = now
	}
	r, err := ldfi.Search(ctx, cfg, g, ldfi.WallClock{})
	if err != nil {
		return res, err
	}
	// A planted set counts as found at the experiment that completed its
	// evidence (the one that failed it, for the lineage strategy).
	for _, f := range r.Failures {
		if want[strings.Join(f.Points, ",")] {
			res.LDFIFound++
			res.LDFIToAll = max(res.LDFIToAll, f.Experiment)
			if f.Deduced {
				res.LDFIDeduced++
			}
		} else {
			res.LDFIExtra++
		}
	}
	if res.LDFIFound < len(planted) {
		res.LDFIToAll = 0
	}
	res.Strategy = r.Config.Strategy
	res.LDFIExperiments, res.LDFIComplete = len(r.Experiments), r.Coverage.Complete
	res.LDFIAlternates = r.Formula.Len()
	res.LDFIMaxStep, res.LDFIMeanStep = maxMean(steps)
	res.LDFIMaxHyp, res.LDFIMeanHyp = maxMean(hyps)

	budget := res.LDFIToAll
	if budget == 0 {
		budget = res.LDFIExperiments
	}
	res.RandomFoundAtLDFIBudget, _ = random(g, want, k, budget, p.Seed)
	_, res.RandomToAll = random(g, want, k, randomCap, p.Seed)
	return res, nil
}

// random is random fault injection (ldfi.RandomInjection) on the graph: it
// returns the planted sets found within budget experiments, and the
// experiments it took to find them all (0: not within budget).
func random(g *Graph, want map[string]bool, k, budget int, seed uint64) (found, toAll int) {
	got := map[string]bool{}
	fails := func(set []string) (bool, error) {
		failed := map[string]bool{}
		for _, p := range set {
			failed[p] = true
		}
		return g.fails(failed), nil
	}
	ldfi.RandomInjection(rand.New(rand.NewPCG(seed, 0xfa11)), g.points, k, budget, fails, func(set []string, n int) bool {
		if key := strings.Join(set, ","); want[key] && !got[key] {
			got[key] = true
			if len(got) == len(want) {
				toAll = n
				return false
			}
		}
		return true
	})
	return len(got), toAll
}

// WriteTable writes results as a table: per graph, ldfi's experiments to
// find every planted set and to complete its search, the latter over the
// services, random injection's experiments to find them all and their
// ratio to ldfi's, and the time to choose a hypothesis.
func WriteTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "seed\tservices\tpoints\tplanted sets\tstrategy\tldfi: found\tdeduced\tto all found\twhole search\t/ services\thypothesis: mean ms\tmax ms\trandom: found at ldfi's budget\tto all found\trandom / ldfi\t")
	for _, r := range results {
		toAll, ratio := fmt.Sprint(r.RandomToAll), "-"
		switch {
		case r.RandomToAll == 0:
			toAll = fmt.Sprintf("> %d", r.RandomCap)
			if r.LDFIToAll > 0 {
				ratio = fmt.Sprintf("> %.0fx", float64(r.RandomCap)/float64(r.LDFIToAll))
			}
		case r.LDFIToAll > 0:
			ratio = fmt.Sprintf("%.0fx", float64(r.RandomToAll)/float64(r.LDFIToAll))
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.1f\t%d\t%s\t%s\t\n", r.Params.Seed, r.Services, r.Points, r.Planted, r.Strategy,
			r.LDFIFound, r.LDFIDeduced, r.LDFIToAll, r.LDFIExperiments, float64(r.LDFIExperiments)/float64(max(r.Services, 1)),
			r.LDFIMeanHyp, r.LDFIMaxHyp, r.RandomFoundAtLDFIBudget, toAll, ratio)
	}
	tw.Flush()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// maxMean returns the longest and the mean of ds, in milliseconds.
func maxMean(ds []time.Duration) (maxMS, meanMS float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return ms(slices.Max(ds)), ms(sum / time.Duration(len(ds)))
}

func binomial(n, k int) int64 {
	r := int64(1)
	for i := 1; i <= k; i++ {
		r = r * int64(n-k+i) / int64(i)
	}
	return r
}

func sci(x *big.Int) string {
	f, _ := new(big.Float).SetInt(x).Float64()
	return fmt.Sprintf("%.2g", f)
}
