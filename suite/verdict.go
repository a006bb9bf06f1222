package suite

import (
	"fmt"
	"strings"

	"github.com/troop-lab/troop/check"
)

// judge reads a report's findings and says what held and what broke. It
// holds the suite's promises: no wrong answer from the benchmark at any
// level, no acknowledged write lost at DC_QUORUM, linearizable registers at
// DC_QUORUM, and no single fault that breaks a DC_QUORUM request (a quorum
// of 2 of 3 replicas survives one). Errors during a fault and stale reads at DC_ONE are what the
// levels allow, so they are notes, not failures.
func judge(rep *Report) Verdict {
	var v Verdict
	held := func(format string, args ...any) { v.Held = append(v.Held, fmt.Sprintf(format, args...)) }
	broke := func(format string, args ...any) { v.Broke = append(v.Broke, fmt.Sprintf(format, args...)) }
	note := func(format string, args ...any) { v.Notes = append(v.Notes, fmt.Sprintf(format, args...)) }

	for _, b := range rep.Baseline {
		ops, errs, fails := totals(b)
		level := b.Level
		if b.Result.Stopped != "" {
			level += " (interrupted)"
		}
		switch {
		case fails > 0:
			broke("baseline at %s: %d wrong answers (fails) in %d operations", level, fails, ops)
		default:
			held("baseline at %s: %d operations, every answer right", level, ops)
		}
		if errs > 0 {
			note("baseline at %s: %d errors with no fault injected", level, errs)
		}
	}
	if f := rep.Failure; f != nil {
		ops, _, fails := totals(f.BenchPhase)
		if fails > 0 {
			broke("failure under load: %d wrong answers (fails) in %d operations", fails, ops)
		} else {
			held("failure under load: %d operations, no wrong answer while %s was down", ops, f.Node)
		}
		note("failure under load: %s was back %.1f s after the kill; %d requests failed during the fault (%.2f%% of them), worst p99 %.1f ms",
			f.Node, f.RecoverySeconds, f.During.Errors, pct(f.During.Errors, f.During.Ops), f.During.MaxP99ms)
	}
	if d := rep.Durability; d != nil {
		switch {
		case d.Lost > 0 || d.Corrupt > 0:
			broke("durability: %d acknowledged writes lost and %d corrupt among %d keys read back at DC_QUORUM", d.Lost, d.Corrupt, d.Keys)
		case d.Errors > 0:
			broke("durability: %d of %d keys could not be read back at DC_QUORUM", d.Errors, d.Keys)
		default:
			held("durability: all %d keys written during the fault read back at DC_QUORUM, no acknowledged write lost", d.Keys)
		}
	}
	for _, c := range rep.Consistency {
		cv := c.Verdict
		promised := promisesLinearizable(c.Level)
		switch {
		case promised && cv.Result == "Illegal":
			broke("consistency at %s: not linearizable (%d operations; %s)", c.Level, cv.Ops, counterexample(cv))
		case promised && cv.Result == "Unknown":
			note("consistency at %s: the linearizability check ran out of time", c.Level)
		case promised:
			held("consistency at %s: %d operations of %d clients through every node, linearizable", c.Level, cv.Ops, c.Config.Clients)
		case c.Level != "DC_ONE":
			// A level no node said, or mixed levels (read DC_ONE, write
			// DC_QUORUM), promise nothing troop can hold them to.
			note("consistency at %s: %s, %d stale reads in %d reads (%d operations of %d clients)", c.Level, Linearizability(cv.Result), cv.StaleReads, cv.Reads, cv.Ops, c.Config.Clients)
		default:
			note("consistency at DC_ONE: %s, %d stale reads in %d reads (the level allows both)", Linearizability(cv.Result), cv.StaleReads, cv.Reads)
		}
		if promised && cv.StaleReads > 0 {
			broke("consistency at %s: %d stale reads", c.Level, cv.StaleReads)
		}
		judgeCoordination(c.Level, c.Coordination, held, broke, note)
	}
	if n := rep.Nemesis; n != nil {
		judgeNemesis(n, held, broke, note)
	}
	if l := rep.LDFI; l != nil {
		for _, c := range l.Classes {
			var singles []string
			for _, set := range c.FailureSets {
				if len(set) == 1 {
					singles = append(singles, set[0])
				}
			}
			switch {
			case len(singles) > 0:
				broke("LDFI: one fault breaks %s: %s", c.Name, strings.Join(singles, ", "))
			default:
				held("LDFI: no single fault breaks %s (%d experiments; %d failure sets, each of two or more faults)", c.Name, c.Experiments, len(c.FailureSets))
			}
			note("LDFI, %s: %s", c.Name, c.Coverage)
		}
	}
	v.OK = len(v.Broke) == 0
	return v
}

// counterexample names the counterexample of a verdict that is not
// linearizable: its operations are in the report.
func counterexample(v check.Verdict) string {
	if v.Counterexample == nil {
		return "no counterexample kept"
	}
	return fmt.Sprintf("counterexample of %d operations on %s", len(v.Counterexample.Ops), v.Counterexample.Key)
}

// promisesLinearizable says whether a level promises linearizable
// registers: the quorum levels, whichever store runs them.
func promisesLinearizable(level string) bool {
	switch level {
	case "DC_QUORUM", "DC_SAFE_QUORUM", "DC_EACH_SAFE_QUORUM":
		return true
	}
	return false
}

func totals(b BenchPhase) (ops, errs, fails int64) {
	for _, r := range b.Result.Totals {
		ops += r.Count
		errs += r.Errors
		fails += r.Fails
	}
	return
}

func pct(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

// Linearizability names a porcupine result for a reader.
func Linearizability(result string) string {
	switch result {
	case "Ok":
		return "linearizable"
	case "Illegal":
		return "not linearizable"
	}
	return "undecided (the check ran out of time)"
}

// judgeNemesis holds each level to its promise under each fault: at the
// quorum levels no history that is not linearizable, no stale read and no
// acknowledged write lost; at every level, replicas that agree once the
// fault has healed. What DC_ONE allows is a note.
func judgeNemesis(n *NemesisPhase, held, broke, note func(string, ...any)) {
	if n.NetworkNote != "" {
		note("nemesis: %s", n.NetworkNote)
	}
	if n.ReplicasNote != "" {
		note("nemesis: %s", n.ReplicasNote)
	}
	for _, r := range n.Rounds {
		name := r.Fault
		if r.Node != "" {
			name += " of " + r.Node
		}
		name += ", " + r.Level
		if r.Error != "" {
			note("nemesis, %s: the fault could not be put in place (%s)", name, r.Error)
		}
		v, a := r.Registers, r.Audit
		var bad []string
		switch v.Result {
		case "Illegal":
			bad = append(bad, fmt.Sprintf("not linearizable (%s)", counterexample(v)))
		case "Unknown":
			note("nemesis, %s: the linearizability check ran out of time", name)
		}
		if v.StaleReads > 0 {
			bad = append(bad, fmt.Sprintf("%d stale reads", v.StaleReads))
		}
		if a.Lost > 0 || a.Corrupt > 0 {
			bad = append(bad, fmt.Sprintf("%d acknowledged writes lost and %d corrupt of %d keys", a.Lost, a.Corrupt, a.Keys))
		}
		if a.Errors > 0 {
			bad = append(bad, fmt.Sprintf("%d of %d keys unreadable at DC_QUORUM after the heal", a.Errors, a.Keys))
		}
		switch {
		case len(bad) > 0 && r.Level != "DC_ONE":
			broke("nemesis, %s: %s", name, strings.Join(bad, "; "))
		case len(bad) > 0:
			note("nemesis, %s: %s (the level allows it)", name, strings.Join(bad, "; "))
		case v.Linearizable():
			held("nemesis, %s: %d register operations linearizable, %d keys written, none lost", name, v.Ops, a.Keys)
		}
		if r.Differ > 0 {
			broke("nemesis, %s: the replicas of %d keys still differed %s after the heal", name, r.Differ, n.Config.Settle)
		}
		prefixed := func(say func(string, ...any)) func(string, ...any) {
			return func(f string, a ...any) { say("nemesis, %s: %s", name, fmt.Sprintf(f, a...)) }
		}
		judgeCoordination(r.Level, r.Coordination, prefixed(held), prefixed(broke), prefixed(note))
	}
}
