//go:build planted

package storetarget

import (
	"fmt"
	"slices"
	"testing"

	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/topology"
)

// plant restarts every node of l with troop_planted_bug set.
func plant(t *testing.T, l *lab.Lab, bug string) {
	t.Helper()
	var names []string
	for _, n := range l.Nodes() {
		names = append(names, n.Name)
	}
	reconfigure(t, l, "troop_planted_bug", bug, names, func(n lab.Node) string {
		if got := info(n.StatsListen); got.PlantedBug != bug {
			return fmt.Sprintf("%s runs with planted bug %q", n.Name, got.PlantedBug)
		}
		return ""
	})
}

// A planted bug is found: without read failover, each single point of the
// replicas a quorum read asks first breaks it; with writes applied on the
// coordinator's replica only, its datastore alone breaks a read.
func TestSearchFindsPlantedBugs(t *testing.T) {
	l := testlab.Start(t, lab.Spec{})

	plant(t, l, topology.BugNoReadFailover)
	_, found := search(t, l, "GET at DC_QUORUM", 2)
	// The quorum read asks A and then B (racks by name) first.
	if want := []string{a + "->" + b, a + "/redis", b + "/redis"}; !slices.Equal(found, want) {
		t.Errorf("GET at DC_QUORUM with %s: failure sets %v, want the singletons %v", topology.BugNoReadFailover, found, want)
	}

	plant(t, l, topology.BugLocalWritesOnly)
	_, found = search(t, l, "GET at DC_ONE", 1)
	if want := []string{a + "/redis"}; !slices.Equal(found, want) {
		t.Errorf("GET at DC_ONE with %s: failure sets %v, want %v", topology.BugLocalWritesOnly, found, want)
	}
}
