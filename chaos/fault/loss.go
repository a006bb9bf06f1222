package fault

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/troop-lab/troop/chaos"
)

// loss drops each packet the instance sends to a peer with the given
// probability: iptables' statistic match on OUTPUT, in the instance's
// namespace. netem's loss would do the same from the queueing layer;
// iptables does it on every kernel that has the statistic match.
type loss struct{}

func init() { register(chaos.Loss, loss{}) }

func (loss) Apply(_ context.Context, t Target) error {
	p := strconv.FormatFloat(t.Lease.Action.Percent/100, 'f', -1, 64)
	var rules []string
	for _, peer := range t.Peers {
		rules = append(rules, fmt.Sprintf("-d %s -m statistic --mode random --probability %s -j DROP", peer.IP, p))
	}
	if _, err := inNetns(t.Node, func(ns *os.File) error { return addChain(ns, tag(t.Lease.ID), []string{"OUTPUT"}, rules) }); err != nil {
		return fmt.Errorf("loss: %s: %w", t.Node.ID, err)
	}
	return nil
}

func (loss) Revert(_ context.Context, t Target) error {
	name := tag(t.Lease.ID)
	return eachNetns([]Node{t.Node}, true, func(_ Node, ns *os.File) error { return deleteChain(ns, name) })
}

func (loss) Present(_ context.Context, t Target) (bool, error) { return anyChain(t, []Node{t.Node}) }
