package node

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troop-lab/troop/node/consistency"
)

// datastoreSilence is how many heartbeat periods without a PONG from the
// node's redis-server make the node unready: one late answer on a busy
// machine is not enough, a stopped or dead redis-server is.
const datastoreSilence = 4

// unready says why the node should get no requests now, "" when it is
// ready (GET /ready). A node is ready when
//   - it is a member that serves clients (not joining, not removed, not
//     in standby);
//   - its redis-server answered the heartbeat's PING within the last
//     datastoreSilence heartbeat periods; and
//   - a quorum of its datacenter's racks (R/2+1 of R, as DC_QUORUM counts
//     replicas) is reachable: its own rack, and each other rack of which
//     the failure detector marks no node down (a rack with a node down
//     cannot give a replica of that node's keys).
//
// Fewer racks, and a DC_QUORUM request through this node fails; without
// its redis-server, every request for a key of its own fails.
func (n *Node) unready(now time.Time) string {
	v := n.view()
	if v.refuse != nil {
		return strings.TrimPrefix(strings.TrimSpace(string(v.refuse)), "-")
	}
	if n.state.Load() == stateStandby {
		return "the node is in standby (POST /state/normal serves clients again)"
	}
	silence := time.Duration(datastoreSilence) * n.cfg.Heartbeat
	last := n.datastorePong.Load()
	if last == 0 {
		return fmt.Sprintf("redis-server %s has not answered a PING yet", n.cfg.Servers[0].Addr)
	}
	if quiet := now.Sub(time.Unix(0, last)); quiet > silence {
		return fmt.Sprintf("redis-server %s has not answered a PING for %s", n.cfg.Servers[0].Addr, quiet.Round(time.Millisecond))
	}
	racks := map[string][]string{n.self.rack: nil} // rack: its nodes marked down
	for _, m := range v.members {
		if m.dc != n.self.dc {
			continue
		}
		if m.isDown() {
			racks[m.rack] = append(racks[m.rack], m.peerAddr)
		} else if _, ok := racks[m.rack]; !ok {
			racks[m.rack] = nil
		}
	}
	var cut []string
	for rack, down := range racks {
		if rack != n.self.rack && len(down) > 0 {
			cut = append(cut, fmt.Sprintf("%s (%s down)", rack, strings.Join(down, ", ")))
		}
	}
	if q := consistency.Quorum(len(racks)); len(racks)-len(cut) < q {
		slices.Sort(cut)
		return fmt.Sprintf("%d of the %d racks of datacenter %s are reachable, fewer than the quorum of %d: %s unreachable",
			len(racks)-len(cut), len(racks), n.self.dc, q, strings.Join(cut, "; "))
	}
	return ""
}
