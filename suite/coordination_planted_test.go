//go:build planted

package suite

import (
	"context"
	"strings"
	"testing"

	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/topology"
)

// With consensus planted away (no-consensus: read-modify-write commands
// run on every replica in the order they arrive there, answered by the
// coordinator's own replica, as before troop decided them by consensus)
// the checkers find the defects on every run. As in
// TestTroopQuorumLocksIDsAndListsHold, the first and the last rack's
// nodes hold back their calls to each other for the whole workload, so
// each one's own replica sees only its own client's commands until the
// end, while the middle rack's replica makes each write's quorum:
//   - locks: each coordinator's own replica grants its client every lock:
//     two winners every round;
//   - ids: each coordinator's replica counts only its own client's INCRs:
//     both clients are handed 1, 2, ...;
//   - lists: the first rack's replica holds the first client's elements
//     then, once the holds are let go, the other's; the last rack's, the
//     other way round: their final reads differ.
func TestCoordinationCheckersCatchNoConsensus(t *testing.T) {
	nodes, redis := startLabOf(t, lab.Spec{NodeCommand: plantBug(t, topology.BugNoConsensus)})
	racks, why := ProbeNodes(nodes)
	if racks == nil {
		t.Fatal(why)
	}
	first, last := racks[0], racks[2]
	ends := []client.Node{first, last}
	scopes := []string{first.Name + "->" + last.Name + "=hold", last.Name + "->" + first.Name + "=hold"}

	cfg := coordination("locks", 2, 20)
	cfg.Scopes = scopes
	if f := judged(t, RunLocks, check.CheckLocks, ends, cfg); f.ByKind[check.SeveralWinners] != 20 || f.Unknown != 0 {
		t.Errorf("locks: %d of 20 rounds with several winners, %d acquires of unknown outcome; want every round", f.Anomalies, f.Unknown)
	}

	cfg = coordination("ids", 2, 200)
	cfg.Scopes = scopes
	if f := judged(t, RunIDs, check.CheckIDs, ends, cfg); f.ByKind[check.DuplicateID] == 0 || f.Samples[0].What != "ids:id: the number 1 was handed out 2 times" {
		t.Errorf("ids: want the number 1 handed out twice first, got %+v", f.Samples)
	}

	// No reads but the final ones: a quorum read's write-back copies one
	// replica's list over another's, which could make them agree.
	cfg = coordination("list", 2, 200)
	cfg.Scopes, cfg.Redis = scopes, redis
	f := judged(t, RunList, check.CheckList, ends, cfg)
	if f.ByKind[check.ReplicasDiffer] == 0 || f.ByKind[check.OrderDiffers] == 0 {
		t.Errorf("list: want the replicas' final reads to differ, got %+v", f.Samples)
	}
}

// Under the asymmetric partition of TestTroopQuorumCoordinationUnderBridge,
// with consensus planted away, each of the two coordinators checks a
// transaction's WATCH against its own deciding replica only, which the
// other's write does not reach: both commit on one value, every round
// (watchRounds), and the checker finds the lost update every time.
func TestCoordinationCheckersCatchNoConsensusUnderBridge(t *testing.T) {
	c := nemesisLab(t, topology.BugNoConsensus)
	racks, why := ProbeNodes(c.nodes)
	if racks == nil {
		t.Fatal(why)
	}
	bridge := bridgePartition(t, c, racks)
	defer bridge()
	if f := watchRounds(t, context.Background(), racks[:2], coordination("cas", 1, 1)); f.ByKind[check.LostUpdate] != casRounds {
		t.Errorf("WATCH CAS: %d of %d rounds lost an update, want every one: %s", f.ByKind[check.LostUpdate], casRounds, f.Problem())
	}
}

// The nemesis's matrix (TestNemesisFaultMatrix) finds a store that does
// not decide read-modify-write commands by consensus (no-consensus): under
// its asymmetric partition, the bridge, two nodes cannot reach each other
// while the third reaches both. Each of the two applies its own clients'
// commands to its own replica, which the other's never reach while the
// partition holds, and answers from it: its clients win the locks the
// other's win, are handed the numbers the other's are, pop what the
// other's pop. The round's verdict breaks.
func TestNemesisMatrixCatchesNoConsensus(t *testing.T) {
	c := nemesisLab(t, topology.BugNoConsensus)
	ph, v := runMatrix(t, c, "partition:bridge")
	found := 0
	for _, f := range ph.Rounds[0].Coordination {
		if !f.OK() {
			found++
		}
	}
	broke := 0
	for _, b := range v.Broke {
		if strings.Contains(b, "coordination at DC_QUORUM") {
			broke++
		}
	}
	if found == 0 || broke != found {
		t.Errorf("under %s with no-consensus: %d coordination checks found anomalies, %d broke the verdict (%q); want at least one, each breaking it", ph.Rounds[0].Fault, found, broke, v.Broke)
	}
}
