package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/client"
)

// The coordination checks of the consistency phase (Config.Coordination):
// each workload of coordination.go and coordination_rmw.go, at the phase's
// level, with clients through every node of the first datacenter, no
// think time, and its checker's finding in the report.

// A coordinationCheck is one workload and its checker.
type coordinationCheck struct {
	name  string
	run   func(context.Context, []client.Node, CoordinationConfig) ([]check.Command, error)
	judge func([]check.Command) check.Finding
	ops   int    // per client, at most (rounds of the lock)
	reads int    // CoordinationConfig.ReadEvery
	key   string // the workload's key (the lock's first), under its prefix
}

var coordinationChecks = []coordinationCheck{
	{"lock", RunLocks, check.CheckLocks, 200, 0, lockKey},
	{"unique ids", RunIDs, check.CheckIDs, 2000, 0, idsKey},
	{"list append", RunList, check.CheckList, 2000, 10, listKey},
	{"counter", RunCounter, check.CheckCounter, 2000, 10, counterKey},
	{"grow-only set", RunSet, check.CheckSet, 2000, 10, setKey},
	{"queue", RunQueue, check.CheckQueue, 2000, 2, queueKey},
	{"WATCH compare-and-set", RunCAS, check.CheckCAS, 2000, 0, casKey},
}

// coordinationClientsPerNode is how many clients each node of the first
// datacenter coordinates for, in each workload.
const coordinationClientsPerNode = 2

// coordinationPrefix is a fresh prefix of the coordination workloads' keys
// at level: under it, each workload's keys are under prefix(cc).
func coordinationPrefix(level string) string {
	return fmt.Sprintf("troop:coordination:%d:%s", time.Now().UnixNano(), strings.ReplaceAll(cmpLevel(level), " ", "-"))
}

// prefix is the prefix of cc's keys under the run's prefix p.
func (cc coordinationCheck) prefix(p string) string {
	return p + ":" + strings.ReplaceAll(cc.name, " ", "-")
}

// runCoordination runs the coordination workloads of checks one after
// another at rc's level, through nodes, their keys under prefix
// (coordinationPrefix), each for at most d, or until end is done (nil: no
// end but d), and the final reads settling for at most settle; and returns
// their findings and the keys they wrote.
func runCoordination(ctx, end context.Context, nodes []client.Node, rc RegisterConfig, prefix string, checks []coordinationCheck, d, settle time.Duration, step func(string, ...any)) ([]check.Finding, []string, error) {
	var findings []check.Finding
	var keys []string
	for _, cc := range checks {
		cfg := CoordinationConfig{Clients: coordinationClientsPerNode * len(firstDC(nodes)), Ops: cc.ops, Duration: d, End: end,
			Level: rc.Level, Dial: rc.Dial, Timeout: rc.Timeout, ReadEvery: cc.reads, Settle: settle, Prefix: cc.prefix(prefix)}
		step("coordination at %s: %s, %d clients for at most %s", cmpLevel(rc.Level), cc.name, cfg.Clients, d)
		h, err := cc.run(ctx, nodes, cfg)
		for _, c := range h {
			keys = append(keys, c.Key)
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			return nil, compactKeys(keys), fmt.Errorf("coordination, %s: %w", cc.name, err)
		}
		findings = append(findings, cc.judge(h))
	}
	return findings, compactKeys(keys), nil
}

// nemesisCoordination are the coordination checks of a nemesis round: all
// seven, each bounded by the round's time alone (no bound on its
// operations).
func nemesisCoordination() []coordinationCheck {
	out := slices.Clone(coordinationChecks)
	for i := range out {
		out[i].ops = 0
	}
	return out
}

// cmpLevel names a level a client does not set (the cluster's own).
func cmpLevel(level string) string {
	if level == "" {
		return "the cluster's own level"
	}
	return level
}

func compactKeys(keys []string) []string {
	slices.Sort(keys)
	return slices.Compact(keys)
}

// judgeCoordination says what each coordination finding at level means:
// at a quorum level, which promises every command on one key linearizable,
// an anomaly breaks the verdict; at DC_ONE, which is eventual, it is a
// note.
func judgeCoordination(level string, findings []check.Finding, held, broke, note func(string, ...any)) {
	for _, f := range findings {
		switch {
		case f.Ops == 0:
			note("coordination at %s, %s: no operation ran, so nothing was checked", level, f.Checker)
		case f.OK():
			held("coordination at %s, %s: %d operations of clients through every node, nothing wrong (%d of unknown outcome)", level, f.Checker, f.Ops, f.Unknown)
		case promisesLinearizable(level):
			broke("coordination at %s, %s: %s", level, f.Checker, anomalies(f))
		default:
			note("coordination at %s, %s: %s (the level allows it)", level, f.Checker, anomalies(f))
		}
	}
}

// anomalies is a finding's count of each kind, and its first anomaly.
func anomalies(f check.Finding) string {
	var kinds []string
	for _, a := range f.Samples {
		kinds = append(kinds, fmt.Sprintf("%d %s", f.ByKind[a.Kind], a.Kind))
	}
	return fmt.Sprintf("%s in %d operations; first: %s", strings.Join(kinds, ", "), f.Ops, f.Samples[0].What)
}
