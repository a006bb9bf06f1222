package main

import (
	"reflect"
	"testing"

	"github.com/troop-lab/troop/lab"
)

// troop repair --lab runs a pass on the first rack of each datacenter,
// which owns every token range of it once.
func TestRepairTargets(t *testing.T) {
	var nodes []lab.NodeStatus
	for _, n := range []struct{ dc, rack, admin string }{
		{"dc1", "rack2", "a:2"}, {"dc1", "rack1", "a:1"}, {"dc1", "rack1", "a:0"},
		{"dc2", "rack3", "b:3"}, {"dc2", "rack2", "b:2"},
	} {
		nodes = append(nodes, lab.NodeStatus{Node: lab.Node{DC: n.dc, Rack: n.rack, StatsListen: n.admin}})
	}
	if got, want := repairTargets(nodes), []string{"a:0", "a:1", "b:2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("repairTargets = %v, want %v", got, want)
	}
}
