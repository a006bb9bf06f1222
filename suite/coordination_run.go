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
	ops   int // per client, at most (rounds of the lock)
	reads int // CoordinationConfig.ReadEvery
}

var coordinationChecks = []coordinationCheck{
	{"lock", RunLocks, check.CheckLocks, 200, 0},
	{"unique ids", RunIDs, check.CheckIDs, 2000, 0},
	{"list append", RunList, check.CheckList, 2000, 10},
	{"counter", RunCounter, check.CheckCounter, 2000, 10},
	{"grow-only set", RunSet, check.CheckSet, 2000, 10},
	{"queue", RunQueue, check.CheckQueue, 2000, 2},
	{"WATCH compare-and-set", RunCAS, check.CheckCAS, 2000, 0},
}

// coordinationClientsPerNode is how many clients each node of the first
// datacenter coordinates for, in each workload.
const coordinationClientsPerNode = 2

// runCoordination runs the coordination workloads of checks one after
// another at rc's level, through nodes, each for at most d, or until end
// is done (nil: no end but d), and the final reads settling for at most
// settle; and returns their findings and the keys they wrote.
func runCoordination(ctx, end context.Context, nodes []client.Node, rc RegisterConfig, checks []coordinationCheck, d, settle time.Duration, step func(string, ...any)) ([]check.Finding, []string, error) {
	var findings []check.Finding
	var keys []string
	prefix := fmt.Sprintf("troop:coordination:%d:%s", time.Now().UnixNano(), strings.ReplaceAll(cmpLevel(rc.Level), " ", "-"))
	for _, cc := range checks {
		cfg := CoordinationConfig{Clients: coordinationClientsPerNode * len(firstDC(nodes)), Ops: cc.ops, Duration: d, End: end,
			Level: rc.Level, Dial: rc.Dial, Timeout: rc.Timeout, ReadEvery: cc.reads, Settle: settle,
			Prefix: prefix + ":" + strings.ReplaceAll(cc.name, " ", "-")}
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

// nemesisCoordinationPerRound is how many coordination workloads each
// nemesis round runs, at once, beside its register and write workloads:
// two keep the machine's load modest, and the quick run's four rounds still
// meet all seven.
const nemesisCoordinationPerRound = 2

// nemesisCoordination are the coordination checks of the nemesis's round
// (counted over the phase), taken round-robin, each bounded by the round's
// time alone (no bound on its operations).
func nemesisCoordination(round int) []coordinationCheck {
	var out []coordinationCheck
	for k := range nemesisCoordinationPerRound {
		cc := coordinationChecks[(round*nemesisCoordinationPerRound+k)%len(coordinationChecks)]
		cc.ops = 0
		out = append(out, cc)
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
