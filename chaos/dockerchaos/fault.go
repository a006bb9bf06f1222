package dockerchaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/fault"
)

// The network faults (partition, loss, delay) and clock-skew are package
// fault's; the Docker backend says where its containers are: the network
// namespace of each container's first process, entered from this host,
// its address on the network it shares with its group, and its troop
// node's admin API there.

// StatsPortLabel names the port of a container's troop node admin API
// (stats_listen), for clock-skew; without it, Dynomite's default 22222.
const StatsPortLabel = "troop.stats-port"

const defaultStatsPort = "22222"

// target is the lease's container and peers as the engine has them now.
// For a revert, peers that are gone are left out: their namespaces, and
// the fault's rules in them, went with them.
func (t *Terminator) target(ctx context.Context, l chaos.Lease, revert bool) (fault.Target, error) {
	troop := t.Troop
	if troop == "" {
		exe, err := os.Executable()
		if err != nil {
			return fault.Target{}, fmt.Errorf("docker backend: %w", err)
		}
		troop = exe
	}
	c, err := t.inspect(ctx, l.Instance.ID)
	if err != nil {
		return fault.Target{}, err
	}
	peers := []container.InspectResponse{}
	for _, p := range l.Peers {
		pc, err := t.inspect(ctx, p.ID)
		if revert && (cerrdefs.IsNotFound(err) || (err == nil && !pc.State.Running)) {
			continue
		}
		if err != nil {
			return fault.Target{}, fmt.Errorf("docker backend: a peer of %s: %w", l.Instance.Name, err)
		}
		peers = append(peers, pc)
	}
	network, err := sharedNetwork(c, peers)
	if err != nil {
		return fault.Target{}, fmt.Errorf("docker backend: %s of %s: %w", l.Action.Kind, l.Instance.Name, err)
	}
	tg := fault.Target{Lease: l, Troop: troop}
	if tg.Node, err = faultNode(c, network, fault.Network(l.Action.Kind)); err != nil {
		return fault.Target{}, fmt.Errorf("docker backend: %s of %s: %w", l.Action.Kind, l.Instance.Name, err)
	}
	for _, pc := range peers {
		n, err := faultNode(pc, network, true)
		if err != nil {
			return fault.Target{}, fmt.Errorf("docker backend: %s of %s: %w", l.Action.Kind, l.Instance.Name, err)
		}
		tg.Peers = append(tg.Peers, n)
	}
	return tg, nil
}

// sharedNetwork is the first network, by name, that c and all of peers
// are on.
func sharedNetwork(c container.InspectResponse, peers []container.InspectResponse) (string, error) {
	if c.NetworkSettings == nil {
		return "", fmt.Errorf("the engine sent no network settings of %s", c.Name)
	}
	var names []string
	for name := range c.NetworkSettings.Networks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if slices.IndexFunc(peers, func(p container.InspectResponse) bool {
			return p.NetworkSettings == nil || p.NetworkSettings.Networks[name] == nil
		}) < 0 {
			return name, nil
		}
	}
	return "", fmt.Errorf("%s shares no network with the rest of its group", c.Name)
}

// faultNode is c as a fault sees it; withNetns asks for its network
// namespace, which this host can enter only when the engine runs here.
func faultNode(c container.InspectResponse, network string, withNetns bool) (fault.Node, error) {
	n := fault.Node{ID: c.ID, IP: c.NetworkSettings.Networks[network].IPAddress}
	port := c.Config.Labels[StatsPortLabel]
	if port == "" {
		port = defaultStatsPort
	}
	n.Admin = net.JoinHostPort(n.IP.String(), port)
	if !withNetns {
		return n, nil
	}
	if !c.State.Running || !hostProcessOf(c.State.Pid, c.ID) {
		return n, fmt.Errorf("the network namespace of %s cannot be entered from this host (a container that is not running, or an engine on another machine)", c.Name)
	}
	n.Netns = "/proc/" + strconv.Itoa(c.State.Pid) + "/ns/net"
	return n, nil
}

// beginFault puts a network or clock fault in place; fault.Apply reverts
// what it did if it fails.
func (t *Terminator) beginFault(ctx context.Context, l chaos.Lease) (map[string]string, error) {
	tg, err := t.target(ctx, l, false)
	if err != nil {
		return nil, err
	}
	if err := fault.Apply(ctx, tg); err != nil {
		return nil, fmt.Errorf("docker backend: %w", err)
	}
	return nil, nil
}

// revertFault takes a network or clock fault away. A container removed or
// stopped meanwhile took its namespace, and the rules in it, along; what
// is left to end is the fault's own processes.
func (t *Terminator) revertFault(ctx context.Context, l chaos.Lease) error {
	c, err := t.inspect(ctx, l.Instance.ID)
	if cerrdefs.IsNotFound(err) || (err == nil && !c.State.Running) {
		return fault.Orphans(l.ID)
	}
	if err != nil {
		return err
	}
	tg, err := t.target(ctx, l, true)
	if err != nil {
		return err
	}
	return fault.Revert(ctx, tg)
}

// Present reports whether any part of the network or clock fault of l is
// in place.
func (t *Terminator) Present(ctx context.Context, l chaos.Lease) (bool, error) {
	tg, err := t.target(ctx, l, true)
	if err != nil {
		return false, err
	}
	return fault.Present(ctx, tg)
}
