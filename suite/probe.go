package suite

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troop-lab/troop/chaos/fault"
	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/node/consistency"
)

// Probes are register histories made to order. A random workload meets an
// anomaly only when the scheduler happens to interleave requests badly; a
// probe makes the interleaving happen. It runs a few operations one at a
// time, through chosen nodes, and uses the store's own failure injection
// (TROOP FIT) to hold back or fail exactly the messages that would hide
// the anomaly, and the clock-skew admin endpoint where the anomaly needs a
// clock behind. A correct store gives a linearizable history whatever the
// probe does; a store with the defect a probe aims at gives one that is
// not, on every run, however busy the machine.
//
// A probe's holds last until its connections close, at its end: every
// message it held back is then delivered, as a slow network would.

// A Probe is one made-to-order history on a key of its own.
type Probe struct {
	Name  string // what it shows when the store has the defect
	Steps []ProbeStep
	// Behind sets the clock of one node (an index of the probe's nodes)
	// back by Skew while the probe runs; Skew 0 for none.
	Behind int
	Skew   time.Duration
}

// A ProbeStep is one operation, through one node, on a connection of its
// own that keeps its failure scope until the probe ends.
type ProbeStep struct {
	Node  int    // an index of the probe's nodes
	Scope string // TROOP FIT scope for the operation; "" for none
	Level string
	Write bool
	Side  bool // on a key of its own beside the probe's (its history is its own)
}

// probeSkew is how far a probe sets a clock back: more than any probe
// takes, however slow the machine, so the node's clock stays behind the
// versions the others stamped during the probe.
const probeSkew = 10 * time.Minute

// ProbeNodes are the nodes probes run through: one per rack of the first
// datacenter, by rack name, which is the order in which a troop node asks
// the replicas of a key (its own first, then the others by rack name). It
// returns nil, with the reason, when probes cannot run on the cluster: they
// need troop nodes with their admin API, one per rack, at least three.
func ProbeNodes(nodes []client.Node) ([]client.Node, string) {
	var dc []client.Node
	racks := map[string]bool{}
	for _, n := range nodes {
		if n.DC != nodes[0].DC {
			continue
		}
		switch {
		case n.Dynomite:
			return nil, "the cluster is Dynomite, which has no request-scoped failure injection"
		case n.Admin == "":
			return nil, fmt.Sprintf("node %s has no admin address to set its clock through", n.Name)
		case racks[n.Rack]:
			return nil, fmt.Sprintf("rack %s has several nodes: probes need one node per rack", n.Rack)
		}
		racks[n.Rack] = true
		dc = append(dc, n)
	}
	if len(dc) < 3 {
		return nil, fmt.Sprintf("the first datacenter has %d rack(s): probes need three or more", len(dc))
	}
	slices.SortFunc(dc, func(a, b client.Node) int { return cmp.Compare(a.Rack, b.Rack) })
	return dc, ""
}

// Probes returns the probes for nodes (ProbeNodes), at a quorum level.
//
//   - stamped below: a quorum write through the first rack, held back from
//     the racks past the first quorum (those its version query does not
//     ask), made twice; then a write through the last rack, whose clock is
//     behind and has never heard of the first; then a quorum read through
//     the first rack. A store that stamps a write by its coordinator's
//     clock alone, without asking a quorum for the newest version first,
//     stamps the second write below the first: the replicas keep the
//     first, and the read returns it after the second was acknowledged.
//     The clock behind makes that so while real time leads the nodes'
//     hybrid clocks; a write through the last rack on a key beside, first,
//     makes it so when they lead real time (a clock that ran ahead before):
//     the first rack then hears the last rack's clock, and its two writes
//     are stamped past it.
//   - read without write-back: a write at DC_ONE through the first rack,
//     held back from every other; a quorum read through the first rack;
//     then a quorum read through the last rack that may not ask the first.
//     A store whose quorum read returns a value that fewer than a quorum
//     hold, without writing it back first, lets the second read miss what
//     the first returned. (Read repair, asynchronous, may bring the value
//     to the others before the second read: the probe is certain only on a
//     cluster with troop_read_repair off, and likely otherwise.)
func Probes(nodes []client.Node, level string) []Probe {
	r := len(nodes)
	q := consistency.Quorum(r)
	first, last := nodes[0].Name, nodes[r-1].Name
	holds := func(from string, to []client.Node) string {
		var s []string
		for _, n := range to {
			s = append(s, from+"->"+n.Name+"=hold")
		}
		return strings.Join(s, ",")
	}
	return []Probe{
		{Name: "stamped below", Behind: r - 1, Skew: -probeSkew, Steps: []ProbeStep{
			{Node: r - 1, Level: level, Write: true, Side: true},
			{Node: 0, Scope: holds(first, nodes[q:]), Level: level, Write: true},
			{Node: 0, Scope: holds(first, nodes[q:]), Level: level, Write: true},
			{Node: r - 1, Level: level, Write: true},
			{Node: 0, Level: level},
		}},
		{Name: "read without write-back", Steps: []ProbeStep{
			{Node: 0, Scope: holds(first, nodes[1:]), Level: "DC_ONE", Write: true},
			{Node: 0, Level: level},
			{Node: r - 1, Scope: last + "->" + first + "=error", Level: level},
		}},
	}
}

// RunProbe runs p through nodes on the key prefix:p.Name and returns its
// history; an error when the probe itself could not run (a node that could
// not be reached, a scope refused), not when the store gave wrong answers.
func RunProbe(ctx context.Context, nodes []client.Node, p Probe, prefix string, dial client.Dial, timeout time.Duration) (history []check.Op, runErr error) {
	if p.Skew != 0 {
		behind := fault.Node{ID: nodes[p.Behind].Name, Admin: nodes[p.Behind].Admin}
		if err := fault.SetSkew(ctx, behind, p.Skew, 0); err != nil {
			return nil, fmt.Errorf("probe %s: %w", p.Name, err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := fault.SetSkew(ctx, behind, 0, 0); err != nil && runErr == nil {
				runErr = fmt.Errorf("probe %s: %w", p.Name, err)
			}
		}()
	}
	key := prefix + ":" + strings.ReplaceAll(p.Name, " ", "-")
	start := time.Now()
	for i, s := range p.Steps {
		c, err := client.NewPlain([]string{nodes[s.Node].Addr}, client.PlainOptions{
			Timeout: timeout, ReadLevel: s.Level, WriteLevel: s.Level, Dial: dial})
		if err != nil {
			return nil, fmt.Errorf("probe %s: %w", p.Name, err)
		}
		defer c.Close() // at the probe's end: what it holds is let go then
		if s.Scope != "" {
			if raw, err := c.Do(ctx, []byte("TROOP"), []byte("FIT"), []byte(s.Scope)); err != nil || string(raw) != "+OK\r\n" {
				return nil, fmt.Errorf("probe %s: TROOP FIT %s through %s: %q %v", p.Name, s.Scope, nodes[s.Node].Name, raw, err)
			}
		}
		op := check.Op{Client: i, Key: key, Write: s.Write, Value: i + 1, Call: int64(time.Since(start))}
		if s.Side {
			op.Key += ":side"
		}
		err = do(ctx, c, &op)
		op.Return = int64(time.Since(start))
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil && s.Write && notApplied(err):
			continue
		case err != nil && s.Write:
			op.Failed, op.Error = true, err.Error()
		case err != nil:
			continue // a read that got no answer said nothing
		}
		history = append(history, op)
	}
	return history, nil
}

// RunProbes runs every probe for the cluster at level, one after another,
// and returns their histories, each on its key, and their names; or the
// reason probes cannot run on the cluster (ProbeNodes).
func RunProbes(ctx context.Context, nodes []client.Node, level, prefix string, dial client.Dial, timeout time.Duration) (history []check.Op, names []string, why string, err error) {
	pn, why := ProbeNodes(nodes)
	if pn == nil {
		return nil, nil, why, nil
	}
	for _, p := range Probes(pn, level) {
		h, err := RunProbe(ctx, pn, p, prefix, dial, timeout)
		if err != nil {
			return nil, nil, "", err
		}
		history, names = append(history, h...), append(names, p.Name)
	}
	return history, names, "", nil
}
