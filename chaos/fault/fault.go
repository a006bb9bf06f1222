// Package fault puts troop chaos's network and clock faults in place and
// takes them away, for every backend that can reach an instance's network
// namespace on this host (a lab in address mode, containers of a local
// Docker Engine).
//
// Each kind has a small file of its own, registered by name as Toxiproxy
// registers its toxics:
//
//   - partition (partition.go): iptables DROP rules on the receiving side
//     of every cut direction (chaos.PartitionCuts);
//   - loss (loss.go): an iptables rule with the statistic match, dropping
//     that share of what the instance sends to its peers;
//   - delay (delay.go): netem where the kernel has it, else every packet
//     the instance sends to its peers goes through a user-space queue
//     (NFQUEUE) held by a troop process, which lets it go after the delay;
//   - clock-skew (clockskew.go): the troop node's admin API.
//
// Rules live in a chain of the fault's own, named after its lease, in the
// instances' own namespaces: never on the host, so nothing here can match
// anyone else's traffic. A backend builds a Target and calls Apply, which
// reverts whatever it did when it fails, and Revert, which is idempotent
// and needs no undo data.
package fault

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/internal/netns"
)

// Node is one instance as a fault sees it.
type Node struct {
	ID string     // the instance's ID
	IP netip.Addr // its address where its peers reach it
	// Netns is where its network namespace opens: /proc/PID/fd/N of a
	// process holding it, or /proc/PID/ns/net of one inside; NetnsInode,
	// if not 0, is checked (netns.Open).
	Netns      string
	NetnsInode uint64
	Admin      string // host:port of its troop node's admin API, for clock-skew
}

// Target is what a fault acts on.
type Target struct {
	// Lease is the fault's: its ID names the fault's rules and processes,
	// its Action says what to do, its Until when the fault's own processes
	// end by themselves.
	Lease chaos.Lease
	Node  Node   // the instance
	Peers []Node // the rest of its group
	Troop string // the troop binary that runs a delay's queue
}

// Fault is one kind's mechanism.
type Fault interface {
	// Apply puts the fault in place. It may leave part of the fault in
	// place when it fails: the package's Apply reverts it.
	Apply(ctx context.Context, t Target) error
	// Revert takes the fault away; what is already gone is no error. It
	// needs nothing but t: what a fault makes is named after its lease.
	Revert(ctx context.Context, t Target) error
	// Present reports whether any part of the fault is in place.
	Present(ctx context.Context, t Target) (bool, error)
}

var registry = map[chaos.Kind]Fault{}

// register adds a kind's mechanism; each kind's file does it in init.
func register(k chaos.Kind, f Fault) { registry[k] = f }

// Handles reports whether the package has k's mechanism.
func Handles(k chaos.Kind) bool {
	_, ok := registry[k]
	return ok
}

// Network reports whether k acts on the network between instances.
func Network(k chaos.Kind) bool { return k == chaos.Partition || k == chaos.Loss || k == chaos.Delay }

func lookup(k chaos.Kind) (Fault, error) {
	f, ok := registry[k]
	if !ok {
		return nil, fmt.Errorf("%s is not a network or clock fault", k)
	}
	return f, nil
}

// Apply puts t's fault in place. When it fails, it reverts what it did
// before returning the error: nothing is left half applied.
func Apply(ctx context.Context, t Target) error {
	f, err := lookup(t.Lease.Action.Kind)
	if err != nil {
		return err
	}
	if Network(t.Lease.Action.Kind) && len(t.Peers) == 0 {
		return fmt.Errorf("%s of %s: its group has no other live instance to come between", t.Lease.Action.Kind, t.Node.ID)
	}
	if err := f.Apply(ctx, t); err != nil {
		if rerr := f.Revert(context.WithoutCancel(ctx), t); rerr != nil {
			err = errors.Join(err, fmt.Errorf("and reverting what was done failed: %w", rerr))
		}
		return err
	}
	return nil
}

// Revert takes t's fault away; see Fault.Revert.
func Revert(ctx context.Context, t Target) error {
	f, err := lookup(t.Lease.Action.Kind)
	if err != nil {
		return err
	}
	return f.Revert(ctx, t)
}

// Present reports whether any part of t's fault is in place: a recovery
// is not over before it is gone.
func Present(ctx context.Context, t Target) (bool, error) {
	f, err := lookup(t.Lease.Action.Kind)
	if err != nil {
		return false, err
	}
	return f.Present(ctx, t)
}

// Processes lists the processes a fault of lease leaseID runs (a delay's
// queue), found by its tag on their command lines.
func Processes(leaseID string) []int { return queueProcesses(tag(leaseID)) }

// Orphans ends what a fault of lease leaseID put outside its instances'
// namespaces (a delay's queue process), for a revert whose instances are
// gone, and their namespaces and rules with them.
func Orphans(leaseID string) error {
	name := tag(leaseID)
	os.Remove(queueLog(name))
	return endQueues(name)
}

// anyChain reports whether the chain of t's fault is in the namespace of
// one of nodes (gone namespaces hold none).
func anyChain(t Target, nodes []Node) (bool, error) {
	name, found := tag(t.Lease.ID), false
	err := eachNetns(nodes, true, func(_ Node, ns *os.File) error {
		has, err := hasChain(ns, name)
		found = found || has
		return err
	})
	return found, err
}

// tag is the fault's mark, derived from its lease ID: it names the
// fault's iptables chain and is on its processes' command lines.
func tag(leaseID string) string {
	sum := sha256.Sum256([]byte(leaseID))
	return "troop-" + hex.EncodeToString(sum[:6])
}

// inNetns runs f inside n's namespace. gone reports that the namespace
// could not be opened because it no longer exists (its holder ended):
// whatever a fault put there went with it.
func inNetns(n Node, f func(ns *os.File) error) (gone bool, err error) {
	if n.Netns == "" {
		return false, fmt.Errorf("%s has no network namespace this host can enter", n.ID)
	}
	ns, err := netns.Open(n.Netns, n.NetnsInode)
	if err != nil {
		return errors.Is(err, netns.ErrGone), err
	}
	defer ns.Close()
	return false, f(ns)
}

// eachNetns runs f in the namespaces of nodes and joins the errors; a
// namespace that is gone is skipped when skipGone (a revert: the fault
// went with it).
func eachNetns(nodes []Node, skipGone bool, f func(n Node, ns *os.File) error) error {
	var errs []error
	for _, n := range nodes {
		gone, err := inNetns(n, func(ns *os.File) error { return f(n, ns) })
		if err != nil && !(gone && skipGone) {
			errs = append(errs, fmt.Errorf("%s: %w", n.ID, err))
		}
	}
	return errors.Join(errs...)
}
