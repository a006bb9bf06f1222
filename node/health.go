package node

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// peerHealth is what this node believes about one peer: a phi-accrual
// detector fed by the answers to the PINGs it sends every heartbeat period
// over the peer link (docs/repair.md, Failure detection).
type peerHealth struct {
	down atomic.Bool // marked down: synchronous work does not go to it

	mu    sync.Mutex
	det   *phiDetector
	since time.Time // when the state last changed

	reach *reachability // logs the changes of state
}

// PeerState is one peer as /info shows it.
type PeerState struct {
	Name          string  `json:"name"`
	Datacenter    string  `json:"datacenter"`
	Rack          string  `json:"rack"`
	Addr          string  `json:"dyn_listen"`
	State         string  `json:"state"` // "up" or "down"
	Phi           float64 `json:"phi"`
	SinceMS       int64   `json:"state_since_ms"`      // ms in the current state
	LastHeartbeat int64   `json:"last_heartbeat_ms"`   // ms since the last PONG
	HintsPending  int64   `json:"hints_pending"`       // hints waiting for it
	HintsDropped  int64   `json:"hints_dropped"`       // hints for it that did not fit
	HintsReplayed int64   `json:"hints_replayed"`      // hints delivered to it
	Connected     bool    `json:"connected,omitempty"` // the link has an open connection
}

func stateName(down bool) string {
	if down {
		return "down"
	}
	return "up"
}

// initHealth starts the failure detector of a new peer m.
func (n *Node) initHealth(m *member, now time.Time) {
	cfg := defaultDetectorConfig(n.cfg.Heartbeat, float64(n.cfg.PhiThreshold))
	m.health.det = newPhiDetector(cfg, now)
	m.health.since = now
	m.health.reach = newReachability(n.log.With("peer", m.peerAddr, "dc", m.dc, "rack", m.rack), "peer marked down", "peer up again")
}

// isDown reports whether the failure detector marked m down.
func (m *member) isDown() bool { return !m.self && m.health.down.Load() }

// errMarkedDown is the reason given for a replica that was not asked
// because the failure detector marked it down.
func errMarkedDown(m *member) error {
	return fmt.Errorf("peer %s: marked down by the failure detector", m.peerAddr)
}

// heartbeat records a PONG from m and re-evaluates its state.
func (n *Node) heartbeat(m *member, now time.Time) {
	m.health.mu.Lock()
	m.health.det.heartbeat(now)
	m.health.mu.Unlock()
	n.evaluate(m, now)
}

// evaluate sets m's state from its detector, logging changes. A peer that
// comes back gets its hints.
func (n *Node) evaluate(m *member, now time.Time) {
	m.health.mu.Lock()
	down := m.health.det.suspect(now)
	changed := down != m.health.down.Load()
	var phi float64
	if changed {
		m.health.down.Store(down)
		phi = m.health.det.phi(now)
		m.health.since = now
	}
	m.health.mu.Unlock()
	if !changed {
		return
	}
	m.mu.Lock()
	name := m.info.Name
	m.mu.Unlock()
	if down {
		n.stats.peersMarkedDown.Add(1)
		m.health.reach.set(false, nil, "name", name, "phi", fmt.Sprintf("%.1f", phi))
		return
	}
	m.health.reach.set(true, nil, "name", name)
	n.replayHints(m)
}

// heartbeatLoop sends PING to every peer each heartbeat period, whatever
// the state of its link (a dead peer's link fails it at once), and
// re-evaluates every peer's state. It also keeps connections open, so the
// first request after a quiet spell does not pay for a dial, and starts
// hint replay for peers that are up and have hints waiting.
func (n *Node) heartbeatLoop(ctx context.Context) {
	tick := time.NewTicker(n.cfg.Heartbeat)
	defer tick.Stop()
	ping := resp.AppendCommandStrings(nil, "PING")
	infoServer := resp.AppendCommandStrings(nil, "INFO", "server")
	for {
		// The datastore too, so that an idle node notices (and logs) a
		// redis-server that died or came back.
		n.store[0].Do(ping, func(raw []byte, err error) {
			if err == nil && string(raw) == "+PONG\r\n" {
				n.datastorePong.Store(time.Now().UnixNano())
			}
		})
		if n.storeVersion.Load() == nil {
			n.store[0].Do(infoServer, n.learnStoreVersion)
		}
		peers := n.view().peers()
		for _, m := range peers {
			m.link.Do(ping, func(raw []byte, err error) {
				if err == nil && string(raw) == "+PONG\r\n" {
					n.heartbeat(m, time.Now())
				}
			})
		}
		now := time.Now()
		for _, m := range peers {
			n.evaluate(m, now)
			if !m.isDown() {
				n.replayHints(m)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// peerStates lists the peers as this node sees them.
func (n *Node) peerStates() []PeerState {
	now := time.Now()
	var out []PeerState
	for _, m := range n.view().peers() {
		out = append(out, m.state(now))
	}
	return out
}

// state is peer m as this node sees it at now.
func (m *member) state(now time.Time) PeerState {
	m.mu.Lock()
	name := m.info.Name
	m.mu.Unlock()
	m.health.mu.Lock()
	phi := m.health.det.phi(now)
	last := now.Sub(m.health.det.lastHeartbeat())
	since := now.Sub(m.health.since)
	m.health.mu.Unlock()
	ps := PeerState{Name: name, Datacenter: m.dc, Rack: m.rack, Addr: m.peerAddr, State: stateName(m.isDown()),
		Phi: math.Round(min(phi, 1e9)*100) / 100, SinceMS: since.Milliseconds(), LastHeartbeat: last.Milliseconds(),
		Connected: m.link.Connected()}
	if h := m.hints; h != nil {
		ps.HintsPending, ps.HintsDropped, ps.HintsReplayed = h.pending.Load(), h.dropped.Load(), h.replayed.Load()
	}
	return ps
}

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
