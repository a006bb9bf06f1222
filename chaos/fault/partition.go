package fault

import (
	"context"
	"fmt"
	"os"

	"github.com/troop-lab/troop/chaos"
)

// partition drops, for every direction chaos.PartitionCuts cuts, the
// packets from the sender's address on the receiver's INPUT: in the
// receiver's namespace, so that traffic from anywhere else (the host's
// clients) still flows. Established connections are cut too: the rule sees
// every packet, not only new connections.
type partition struct{}

func init() { register(chaos.Partition, partition{}) }

func (partition) Apply(_ context.Context, t Target) error {
	nodes := append([]Node{t.Node}, t.Peers...)
	byID := map[string]Node{}
	var ids []string
	for _, n := range nodes {
		byID[n.ID] = n
		ids = append(ids, n.ID)
	}
	cuts, err := chaos.PartitionCuts(t.Lease.Action.Partition, t.Node.ID, ids)
	if err != nil {
		return err
	}
	drops := map[string][]string{} // receiver -> its rules
	for _, c := range cuts {
		drops[c.To] = append(drops[c.To], fmt.Sprintf("-s %s -j DROP", byID[c.From].IP))
	}
	name := tag(t.Lease.ID)
	for _, n := range nodes {
		if len(drops[n.ID]) == 0 {
			continue
		}
		if _, err := inNetns(n, func(ns *os.File) error { return addChain(ns, name, []string{"INPUT"}, drops[n.ID]) }); err != nil {
			return fmt.Errorf("partition: %s: %w", n.ID, err)
		}
	}
	return nil
}

func (partition) Revert(_ context.Context, t Target) error {
	name := tag(t.Lease.ID)
	return eachNetns(append([]Node{t.Node}, t.Peers...), true, func(_ Node, ns *os.File) error { return deleteChain(ns, name) })
}

func (partition) Present(_ context.Context, t Target) (bool, error) {
	return anyChain(t, append([]Node{t.Node}, t.Peers...))
}
