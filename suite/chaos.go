package suite

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/client"
)

// Chaos is the chaos backend of a cluster troop did not start (--target,
// --cluster): one group of a chaos config (the file troop chaos reads),
// whose instances are the cluster's nodes, and the backend that acts on
// them. With it the failure phase and the durability audit run, and the
// nemesis where the backend can put its faults in place.
type Chaos struct {
	File    string        `json:"file"`
	Group   string        `json:"group"`
	Backend chaos.Backend `json:"backend"`

	group      chaos.Group
	terminator chaos.Terminator
	watchdog   []string
}

// NewChaos is the chaos of group g of the config in file, acted on through
// t, the backend of g; watchdogArgs are the flags that let troop chaos
// watchdog build the same backend (--docker-host, --kubeconfig), so that
// it can undo a leased fault if the run dies. t must list the group's
// instances, act on them, wait for their recovery and say where they are
// (chaos.RecoveryWaiter, chaos.Addresser).
func NewChaos(file string, g chaos.Group, t chaos.Terminator, watchdogArgs []string) (*Chaos, error) {
	if _, ok := t.(chaos.RecoveryWaiter); !ok {
		return nil, fmt.Errorf("the %s backend cannot tell when a node is back, which the failure phase waits for", g.Backend)
	}
	if _, ok := t.(chaos.Addresser); !ok {
		return nil, fmt.Errorf("the %s backend cannot say where its instances are, so they cannot be matched to the cluster's nodes", g.Backend)
	}
	return &Chaos{File: file, Group: g.Name, Backend: g.Backend, group: g, terminator: t, watchdog: watchdogArgs}, nil
}

// ChaosGroup is the group of cfg (read from file) that a run on a cluster
// troop did not start acts through: the one named, or the only one. It
// must have a Docker or Kubernetes backend: the lab's acts on a lab.
func ChaosGroup(cfg *chaos.Config, file, name string) (*chaos.Group, error) {
	var names []string
	for _, g := range cfg.Groups {
		names = append(names, fmt.Sprintf("%s (%s)", g.Name, g.Backend))
	}
	var g *chaos.Group
	switch {
	case name != "":
		if g = cfg.Group(name); g == nil {
			return nil, fmt.Errorf("%s has no group %q: its groups are %s", file, name, strings.Join(names, ", "))
		}
	case len(cfg.Groups) == 1:
		g = &cfg.Groups[0]
	default:
		return nil, fmt.Errorf("%s has %d groups: say which one holds the cluster's nodes with --chaos-group (%s)", file, len(cfg.Groups), strings.Join(names, ", "))
	}
	if g.Backend != chaos.Docker && g.Backend != chaos.Kubernetes {
		return nil, fmt.Errorf("%s: group %s has the %s backend: a cluster troop did not start needs a group of the docker or kubernetes backend", file, g.Name, g.Backend)
	}
	return g, nil
}

// Resolver looks up a host name's addresses, as net.Resolver.LookupHost.
type Resolver func(ctx context.Context, host string) ([]string, error)

// MatchNodes pairs each node with the instance at its address: an
// instance's bare IP takes every port at that IP, its host:port pairs one
// port each (an unspecified host, 0.0.0.0 or ::, at every address). A node
// is matched on its client address, or else its admin address; host names
// are looked up with resolve. It refuses, naming them, nodes that no
// instance is at, nodes that two instances claim, and instances at no
// node: the nemesis picks among the group's instances, and a network
// fault cuts one off from all the others, so a group larger than the
// cluster would have faults land outside it.
func MatchNodes(ctx context.Context, nodes []client.Node, insts []chaos.Instance, addrs map[string][]string, resolve Resolver) (map[string]chaos.Instance, error) {
	byNode := map[string]chaos.Instance{}
	used := map[string]bool{}
	var unmatched, ambiguous []string
	for _, n := range nodes {
		var at []chaos.Instance
		for _, a := range []string{n.Addr, n.Admin} {
			if a == "" {
				continue
			}
			eps, err := endpoints(ctx, a, resolve)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", nodeName(n), err)
			}
			for _, inst := range insts {
				if !slices.ContainsFunc(at, func(i chaos.Instance) bool { return i.ID == inst.ID }) && reaches(addrs[inst.ID], eps) {
					at = append(at, inst)
				}
			}
			if len(at) > 0 {
				break // the client address decides; the admin address only when it finds none
			}
		}
		switch len(at) {
		case 0:
			unmatched = append(unmatched, fmt.Sprintf("%s at %s", nodeName(n), n.Addr))
		case 1:
			byNode[n.Name] = at[0]
			used[at[0].ID] = true
		default:
			var names []string
			for _, i := range at {
				names = append(names, i.Name)
			}
			ambiguous = append(ambiguous, fmt.Sprintf("%s at %s (%s)", nodeName(n), n.Addr, strings.Join(names, ", ")))
		}
	}
	var errs []error
	if len(unmatched) > 0 {
		var have []string
		for _, inst := range insts {
			have = append(have, fmt.Sprintf("%s at %s", inst.Name, strings.Join(addrs[inst.ID], " ")))
		}
		if len(have) == 0 {
			have = []string{"none"}
		}
		errs = append(errs, fmt.Errorf("no instance of the chaos group is at node %s (the group's running instances: %s)",
			strings.Join(unmatched, ", node "), strings.Join(have, "; ")))
	}
	if len(ambiguous) > 0 {
		errs = append(errs, fmt.Errorf("more than one instance of the chaos group is at node %s", strings.Join(ambiguous, ", node ")))
	}
	var spare []string
	for _, inst := range insts {
		if !used[inst.ID] {
			spare = append(spare, fmt.Sprintf("%s at %s", inst.Name, strings.Join(addrs[inst.ID], " ")))
		}
	}
	if len(spare) > 0 && len(unmatched)+len(ambiguous) == 0 {
		errs = append(errs, fmt.Errorf("instance %s of the chaos group is at no node of the cluster: narrow the group's selector to the cluster's nodes, or the faults may land outside it",
			strings.Join(spare, ", instance ")))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return byNode, nil
}

func nodeName(n client.Node) string {
	if n.Name == "" || n.Name == n.Addr {
		return n.Addr
	}
	return n.Name
}

// endpoint is one address a node is reached at.
type endpoint struct {
	ip   netip.Addr
	port string
}

// endpoints are the IP addresses of hostport's host, with its port.
func endpoints(ctx context.Context, hostport string, resolve Resolver) ([]endpoint, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	hosts := []string{host}
	if _, err := netip.ParseAddr(host); err != nil {
		if hosts, err = resolve(ctx, host); err != nil {
			return nil, fmt.Errorf("look up %s: %w", host, err)
		}
	}
	var out []endpoint
	for _, h := range hosts {
		if ip, err := netip.ParseAddr(h); err == nil {
			out = append(out, endpoint{ip.Unmap(), port})
		}
	}
	return out, nil
}

// reaches says whether an instance at addrs (chaos.Addresser's) is at one
// of the endpoints.
func reaches(addrs []string, eps []endpoint) bool {
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			host, port = a, "" // a bare IP: every port
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		for _, e := range eps {
			if (port == "" || port == e.port) && (ip == e.ip || port != "" && ip.IsUnspecified()) {
				return true
			}
		}
	}
	return false
}

// attachChaos gives the cluster ch's backend, once every node is matched
// to one instance of its group.
func (c *cluster) attachChaos(ctx context.Context, ch *Chaos) error {
	insts, err := ch.terminator.Instances(ctx, &ch.group)
	if err != nil {
		return err
	}
	addrs := map[string][]string{}
	for _, inst := range insts {
		if addrs[inst.ID], err = ch.terminator.(chaos.Addresser).Addresses(ctx, inst); err != nil {
			return err
		}
	}
	byNode, err := MatchNodes(ctx, c.nodes, insts, addrs, net.DefaultResolver.LookupHost)
	if err != nil {
		return err
	}
	c.terminator, c.group, c.instances, c.watchdog = ch.terminator, ch.group, byNode, ch.watchdog
	c.group.Enabled = true // the run's own request, as troop chaos kill's
	return nil
}

// victims are the instances the failure phase may terminate: the running
// ones, outside the group's exceptions, in the order of the nodes.
func (c *cluster) victims(ctx context.Context) ([]chaos.Instance, error) {
	running, err := c.terminator.Instances(ctx, &c.group)
	if err != nil {
		return nil, err
	}
	if c.instances == nil {
		if len(running) == 0 {
			return nil, errors.New("no node of the lab is running")
		}
		return running, nil
	}
	var out []chaos.Instance
	for _, n := range c.nodes {
		inst, ok := c.instances[n.Name]
		if ok && !c.group.Excepted(inst) && slices.ContainsFunc(running, func(r chaos.Instance) bool { return r.ID == inst.ID }) {
			out = append(out, inst)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no instance of chaos group %s is running outside its exceptions", c.group.Name)
	}
	return out, nil
}

// nodeOf names the node of inst for the report: a lab's instance is named
// after its node; another's is "node (instance)".
func (c *cluster) nodeOf(inst chaos.Instance) string {
	for name, i := range c.instances {
		if i.ID == inst.ID {
			return fmt.Sprintf("%s (%s %s)", name, c.group.Backend, inst.Name)
		}
	}
	return inst.ID
}

// nodeAt is the node of inst; false for a lab's or an unknown instance.
func (c *cluster) nodeAt(inst chaos.Instance) (client.Node, bool) {
	for _, n := range c.nodes {
		if i, ok := c.instances[n.Name]; ok && i.ID == inst.ID {
			return n, true
		}
	}
	return client.Node{}, false
}

// killHow says how the backend terminates an instance, and backHow what
// brings it back.
func (c *cluster) killHow() string {
	switch c.group.Backend {
	case chaos.Docker:
		return "kill -9 of the container's process"
	case chaos.Kubernetes:
		return "its pod deleted with no grace period"
	}
	return "kill -9"
}

func (c *cluster) backHow() string {
	switch c.group.Backend {
	case chaos.Docker:
		return "its container's restart policy brought it back"
	case chaos.Kubernetes:
		return "its workload replaced the pod"
	}
	return "the lab replaced it"
}

// awaitPing waits until the node of inst answers PING again.
func (c *cluster) awaitPing(ctx context.Context, inst chaos.Instance) error {
	n, ok := c.nodeAt(inst)
	if !ok {
		return nil
	}
	for {
		err := c.ping(ctx, n.Addr)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not answer PING: %w (last: %v)", c.nodeOf(inst), ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// quorumLevel is the level of the failure phase and the audits: DC_QUORUM
// where the client sets the level, else the cluster's own.
func (c *cluster) quorumLevel() string {
	if c.troopNodes() {
		return "DC_QUORUM"
	}
	return c.ownLevel()
}
