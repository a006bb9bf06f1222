package node

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/troop-lab/troop/node/health"
	"github.com/troop-lab/troop/resp"
)

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
	m.health = health.NewPeer(n.cfg.Heartbeat, float64(n.cfg.PhiThreshold), n.log.With("peer", m.peerAddr, "dc", m.dc, "rack", m.rack), now)
}

// isDown reports whether the failure detector marked m down.
func (m *member) isDown() bool { return !m.self && m.health.Down.Load() }

// errMarkedDown is the reason given for a replica that was not asked
// because the failure detector marked it down.
func errMarkedDown(m *member) error {
	return fmt.Errorf("peer %s: marked down by the failure detector", m.peerAddr)
}

// heartbeat records a PONG from m and re-evaluates its state.
func (n *Node) heartbeat(m *member, now time.Time) {
	m.health.Heartbeat(now)
	n.evaluate(m, now)
}

// evaluate sets m's state from its detector. A peer that comes back gets
// its hints.
func (n *Node) evaluate(m *member, now time.Time) {
	m.mu.Lock()
	name := m.info.Name
	m.mu.Unlock()
	changed, down := m.health.Evaluate(now, "name", name)
	if changed && down {
		n.stats.peersMarkedDown.Add(1)
	} else if changed {
		n.replayHints(m)
	}
}

// heartbeatLoop sends PING to every peer each heartbeat period, whatever
// the state of its link (a dead peer's link fails it at once), and
// re-evaluates every peer's state. It also keeps connections open, so the
// first request after a quiet spell does not pay for a dial, and starts
// hint replay for peers that are up and have hints waiting.
//
// A tick that comes late says this node stood still (starved of CPU,
// stopped, paused by a GC): the PONGs of that time wait unread in its
// sockets, so the pause is taken off every peer's silence before the
// peers are judged, and with the same reading of the clock, so that a
// pause after it counts at the next tick and not now.
func (n *Node) heartbeatLoop(ctx context.Context) {
	tick := time.NewTicker(n.cfg.Heartbeat)
	defer tick.Stop()
	stood := health.NewLocalPause(n.cfg.Heartbeat)
	ping := resp.AppendCommandStrings(nil, "PING")
	infoServer := resp.AppendCommandStrings(nil, "INFO", "server")
	for {
		now := time.Now()
		peers := n.view().peers()
		if pause := stood.Tick(now); pause > 0 {
			n.stats.localPauses.Add(1)
			n.log.Info("this node stood still; its peers' silence in that time is not counted against them", "for", pause.Round(time.Millisecond))
			for _, m := range peers {
				m.health.Excuse(pause, now)
			}
		}
		for _, m := range peers {
			n.evaluate(m, now)
			if !m.isDown() {
				n.replayHints(m)
			}
		}
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
		for _, m := range peers {
			m.link.Do(ping, func(raw []byte, err error) {
				if err == nil && string(raw) == "+PONG\r\n" {
					n.heartbeat(m, time.Now())
				}
			})
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
	phi, last, since := m.health.State(now)
	ps := PeerState{Name: name, Datacenter: m.dc, Rack: m.rack, Addr: m.peerAddr, State: stateName(m.isDown()),
		Phi: math.Round(min(phi, 1e9)*100) / 100, SinceMS: since.Milliseconds(), LastHeartbeat: last.Milliseconds(),
		Connected: m.link.Connected()}
	if h := m.hints; h != nil {
		ps.HintsPending, ps.HintsDropped, ps.HintsReplayed = h.Counts()
	}
	return ps
}
