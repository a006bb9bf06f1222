package labchaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/fault"
	"github.com/troop-lab/troop/lab"
)

// The network faults (partition, loss, delay) and clock-skew are package
// fault's; the lab backend says where its instances are: each position's
// address and network namespace (a lab in address mode), its admin API,
// and the lab's troop binary.

// target is the lease's instance and peers as the lab has them now.
func (t *Terminator) target(ctx context.Context, l chaos.Lease) (fault.Target, error) {
	st, n, err := t.node(ctx, l.Instance.ID)
	if err != nil {
		return fault.Target{}, err
	}
	k := l.Action.Kind
	if fault.Network(k) && st.Network == nil {
		return fault.Target{}, fmt.Errorf("lab backend: %s of %s needs a lab in address mode (troop lab up --netns): on loopback its nodes share one network, so nothing can come between them", k, n.Name)
	}
	tg := fault.Target{Lease: l, Node: faultNode(n.Node), Troop: st.Troop}
	for _, p := range l.Peers {
		pn, err := st.Node(p.ID)
		if err != nil {
			return fault.Target{}, fmt.Errorf("lab backend: a peer of %s: %w", n.Name, err)
		}
		tg.Peers = append(tg.Peers, faultNode(pn.Node))
	}
	return tg, nil
}

func faultNode(n lab.Node) fault.Node {
	ip, _ := netip.ParseAddr(n.IP) // the zero Addr on loopback, where no network fault goes
	return fault.Node{ID: n.Name, IP: ip, Netns: n.Netns, NetnsInode: n.NetnsInode, Admin: n.StatsListen}
}

// beginFault puts a network or clock fault in place (fault.Apply reverts
// what it did if it fails), and remembers it for AwaitRecovery. It needs
// no undo data.
func (t *Terminator) beginFault(ctx context.Context, l chaos.Lease) (map[string]string, error) {
	tg, err := t.target(ctx, l)
	if err != nil {
		return nil, err
	}
	t.remember(l.Instance.ID, memory{fault: &l})
	if err := fault.Apply(ctx, tg); err != nil {
		return nil, fmt.Errorf("lab backend: %w", err)
	}
	return nil, nil
}

// revertFault takes a network or clock fault away. With the lab down, its
// namespaces and nodes are gone, and so are the fault's rules and the
// skew; what is left to end is the fault's own processes.
func (t *Terminator) revertFault(ctx context.Context, l chaos.Lease) error {
	if t.labDown(ctx) {
		return fault.Orphans(l.ID)
	}
	tg, err := t.target(ctx, l)
	if err != nil {
		return err
	}
	return fault.Revert(ctx, tg)
}

// labDown reports whether the lab has stopped (or was never started in
// its directory), as opposed to not answering for a moment.
func (t *Terminator) labDown(ctx context.Context) bool {
	t.mu.Lock()
	sup, dir := t.sup, t.dir
	t.mu.Unlock()
	if dir == "" {
		st, err := sup.Status(ctx)
		return err == nil && !st.SupervisorRunning
	}
	st, err := lab.Inspect(ctx, dir)
	return errors.Is(err, lab.ErrNoLab) || (err == nil && !st.SupervisorRunning)
}

// Present reports whether any part of the network or clock fault of l is
// in place in the lab.
func (t *Terminator) Present(ctx context.Context, l chaos.Lease) (bool, error) {
	tg, err := t.target(ctx, l)
	if err != nil {
		return false, err
	}
	return fault.Present(ctx, tg)
}

// faultRecovered returns nil once the fault is gone (reverted at the
// lease's end, or sooner by the global stop) and the node's peers hold it
// up again, and it them; or what is still missing. Dynomite's nodes say
// nothing of their peers: a write through each must reach every replica.
func (t *Terminator) faultRecovered(ctx context.Context, st *lab.Status, n *lab.NodeStatus, l chaos.Lease) error {
	if present, err := t.Present(ctx, l); err != nil || present {
		return fmt.Errorf("the %s is still in place (%v)", l.Action.Kind, err)
	}
	if n.Engine == lab.EngineDynomite {
		var running []lab.Node
		for _, p := range st.Nodes {
			if p.NodeP.State == lab.Running && p.RedisP.State == lab.Running {
				running = append(running, p.Node)
			}
		}
		if missing := lab.DynomiteMeshed(ctx, running); missing != "" {
			return errors.New(missing)
		}
		return nil
	}
	for _, p := range st.Nodes {
		if p.Name == n.Name || p.NodeP.State != lab.Running {
			continue
		}
		if err := holdsUp(ctx, p.Node, n.Node); err != nil {
			return err
		}
		if err := holdsUp(ctx, n.Node, p.Node); err != nil {
			return err
		}
	}
	return nil
}

// holdsUp returns nil when from's failure detector holds peer up.
func holdsUp(ctx context.Context, from, peer lab.Node) error {
	state, err := PeerState(ctx, from, peer)
	if err == nil && state != "up" {
		err = fmt.Errorf("%s holds %s %s", from.Name, peer.Name, state)
	}
	return err
}

// PeerState is what from's failure detector says of peer in its /info:
// "up" or "down".
func PeerState(ctx context.Context, from, peer lab.Node) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+from.StatsListen+"/info", nil)
	if err != nil {
		return "", err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("%s /info: %w", from.Name, err)
	}
	defer res.Body.Close()
	var info struct {
		Peers []struct {
			Addr  string `json:"dyn_listen"`
			State string `json:"state"`
		} `json:"peers"`
	}
	if err := json.NewDecoder(res.Body).Decode(&info); err != nil {
		return "", fmt.Errorf("%s /info: %w", from.Name, err)
	}
	for _, p := range info.Peers {
		if p.Addr == peer.DynListen {
			return p.State, nil
		}
	}
	return "", fmt.Errorf("%s has no peer %s", from.Name, peer.Name)
}
