package bench

import (
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/troop-lab/troop/client"
)

// ClusterTarget drives a troop cluster the way the Dynomite benchmark did:
// a Dyno client in every rack (availability zone) of the datacenter. Each key
// goes to one rack's client, chosen by the key's hash, and that client sends
// it straight to the key's owner in its own rack (token and rack aware), so
// the load spreads over every node and no node forwards it.
type ClusterTarget struct {
	dc      string
	racks   []string
	clients []*client.Cluster
	nodes   int
	level   string
	conns   int    // per node and rack client
	kind    string // "troop" or "Dynomite"
}

// NewClusterTarget makes one client per rack of datacenter dc ("" = the
// first node's). opts apply to every client; its DC and Rack are set here.
func NewClusterTarget(nodes []client.Node, dc string, opts client.Options) (*ClusterTarget, error) {
	if len(nodes) == 0 {
		return nil, errors.New("the cluster has no nodes")
	}
	if dc == "" {
		dc = nodes[0].DC
	}
	t := &ClusterTarget{dc: dc, level: opts.ReadLevel, racks: client.Racks(nodes, dc), conns: max(opts.ConnsPerNode, 1), kind: "troop"}
	if nodes[0].Dynomite {
		t.kind = "Dynomite"
	}
	for _, n := range nodes {
		if n.DC == dc {
			t.nodes++
		}
	}
	if t.nodes == 0 {
		return nil, fmt.Errorf("the cluster has no node in datacenter %q", dc)
	}
	for _, rack := range t.racks {
		o := opts
		o.DC, o.Rack = dc, rack
		c, err := client.NewCluster(nodes, o)
		if err != nil {
			t.Close()
			return nil, err
		}
		t.clients = append(t.clients, c)
	}
	return t, nil
}

// Send routes the command through the client of the rack its key hashes to.
func (t *ClusterTarget) Send(args [][]byte, done func(raw []byte, err error)) {
	c := t.clients[0]
	if len(args) > 1 && len(t.clients) > 1 {
		h := fnv.New32a()
		h.Write(args[1])
		c = t.clients[h.Sum32()%uint32(len(t.clients))]
	}
	c.Send(args, done)
}

// Flush flushes every rack's client.
func (t *ClusterTarget) Flush() {
	for _, c := range t.clients {
		c.Flush()
	}
}

// Close closes every rack's client.
func (t *ClusterTarget) Close() error {
	var errs []error
	for _, c := range t.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Nodes is the number of nodes in the datacenter, for per-node worker counts.
func (t *ClusterTarget) Nodes() int { return t.nodes }

// Connections is how many connections the rack clients use: each client's
// to the nodes of its own rack (more while it fails over to another rack).
func (t *ClusterTarget) Connections(int) int {
	return len(t.clients) * t.conns * max(t.nodes/max(len(t.racks), 1), 1)
}

// Describe says what the target is, for the result file.
func (t *ClusterTarget) Describe() string {
	s := fmt.Sprintf("%s cluster, datacenter %s: %d nodes in %d racks, a token-aware client per rack", t.kind, t.dc, t.nodes, len(t.racks))
	if t.level != "" {
		s += ", " + t.level
	}
	return s
}
