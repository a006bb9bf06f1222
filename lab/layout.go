// Package lab runs local troop clusters as real processes on loopback: one
// redis-server and one troop node per position of a datacenters x racks x
// nodes shape, watched by a supervisor that plays the part of an Auto Scaling
// Group and replaces whatever dies without being asked to.
//
// Tests use Start to run a cluster inside the test process; the troop lab
// command runs the same supervisor as a detached process (Up, Supervise) and
// talks to it over a unix socket (Dial).
package lab

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/troop-lab/troop/internal/freeport"
)

// Shape is the size of a lab: datacenters, racks per datacenter and nodes
// per rack. Every rack holds a full copy of the data, so racks are replicas
// and nodes within a rack split the token ring between them.
type Shape struct {
	DCs          int `json:"dcs"`
	Racks        int `json:"racks"`
	NodesPerRack int `json:"nodes_per_rack"`
}

// NodeTimeout is a lab node's request timeout (its config's timeout): it
// answers every request within twice that, once for a quorum write's
// version query and once for its replicas.
const NodeTimeout = 5 * time.Second

// DefaultShape is one datacenter of three racks with one node each: the
// smallest shape where quorum differs from one.
var DefaultShape = Shape{DCs: 1, Racks: 3, NodesPerRack: 1}

func (s Shape) String() string {
	return fmt.Sprintf("%s x %s x %s per rack",
		plural(s.DCs, "dc", "dcs"), plural(s.Racks, "rack", "racks"), plural(s.NodesPerRack, "node", "nodes"))
}

// Size is the number of positions (node + redis-server pairs).
func (s Shape) Size() int { return s.DCs * s.Racks * s.NodesPerRack }

func (s Shape) validate() error {
	// The bounds keep a typo from starting thousands of processes.
	const most = 64
	if s.DCs < 1 || s.Racks < 1 || s.NodesPerRack < 1 {
		return fmt.Errorf("lab shape %d x %d x %d: datacenters, racks and nodes per rack must each be at least 1", s.DCs, s.Racks, s.NodesPerRack)
	}
	if s.Size() > most {
		return fmt.Errorf("lab shape %s has %d positions: at most %d fit on one machine", s, s.Size(), most)
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Node is one position of the lab: where its troop node and its
// redis-server listen and where its files live. Addresses are host:port.
type Node struct {
	Name        string `json:"name"`
	DC          string `json:"dc"`
	Rack        string `json:"rack"`
	Index       int    `json:"index"` // 1-based position within the rack
	Token       uint32 `json:"token"`
	Listen      string `json:"listen"`       // client RESP
	DynListen   string `json:"dyn_listen"`   // peers
	StatsListen string `json:"stats_listen"` // admin HTTP
	Redis       string `json:"redis"`        // the node's redis-server
	Dir         string `json:"dir"`          // DIR/<name>
	Config      string `json:"config"`       // DIR/<name>/node.yml
	// Engine is what the node runs: "" for troop's node, or
	// EngineDynomite.
	Engine string `json:"engine,omitempty"`

	// In address mode: the position's own address, and its network
	// namespace as other processes open it while the supervisor runs
	// (/proc/PID/fd/N of the supervisor, and the namespace's inode to
	// check it against; see OpenNetns).
	IP         string `json:"ip,omitempty"`
	Netns      string `json:"netns,omitempty"`
	NetnsInode uint64 `json:"netns_inode,omitempty"`
}

// NodeLog, RedisLog and RedisDir are the files of a position.
func (n Node) NodeLog() string  { return filepath.Join(n.Dir, "node.log") }
func (n Node) RedisLog() string { return filepath.Join(n.Dir, "redis.log") }
func (n Node) RedisDir() string { return filepath.Join(n.Dir, "redis") }
func (n Node) TLSCert() string  { return filepath.Join(n.Dir, "tls.crt") }
func (n Node) TLSKey() string   { return filepath.Join(n.Dir, "tls.key") }

// DataDir is where the node keeps its files (troop_data_dir's default
// beside its config): hints and membership steps.
func (n Node) DataDir() string { return filepath.Join(n.Dir, "troop-data", n.Name) }

// Names of datacenters, racks and nodes, all counted from 1.
func DCName(d int) string                    { return fmt.Sprintf("dc%d", d) }
func RackName(r int) string                  { return fmt.Sprintf("rack%d", r) }
func NodeName(dc, rack string, i int) string { return fmt.Sprintf("%s-%s-%d", dc, rack, i) }

// Token is the token of node i (0-based) of n in a rack: floor(i * 2^32 / n),
// so the nodes of a rack split the 32-bit ring evenly and node 0 owns 0.
func Token(i, n int) uint32 {
	return uint32(uint64(i) << 32 / uint64(n))
}

// Layout lists the positions of a shape in dc, rack, node order with names,
// tokens and directories under dir, but no addresses yet.
func Layout(s Shape, dir string) []Node {
	var nodes []Node
	for d := 1; d <= s.DCs; d++ {
		for r := 1; r <= s.Racks; r++ {
			for i := 1; i <= s.NodesPerRack; i++ {
				dc, rack := DCName(d), RackName(r)
				name := NodeName(dc, rack, i)
				nodes = append(nodes, Node{
					Name: name, DC: dc, Rack: rack, Index: i,
					Token:  Token(i-1, s.NodesPerRack),
					Dir:    filepath.Join(dir, name),
					Config: filepath.Join(dir, name, "node.yml"),
				})
			}
		}
	}
	return nodes
}

// assignPorts gives every position four free loopback ports (see package
// freeport for why not port 0), its client port right after its peer port
// as in Dynomite's configurations, which is where a client of a Dynomite's
// /cluster_describe looks for it.
func assignPorts(nodes []Node) error {
	for i := range nodes {
		n := &nodes[i]
		var err error
		if n.DynListen, n.Listen, err = freeport.PickPair(); err != nil {
			return err
		}
		for _, addr := range []*string{&n.StatsListen, &n.Redis} {
			if *addr, err = freeport.Pick(); err != nil {
				return err
			}
		}
	}
	return nil
}

// NodeConfig renders a node's config in Dynomite's YAML format. Every other
// node of the lab, in every datacenter, is a seed. It is written as text so
// that the lab does not depend on the config parser it is used to test.
// With caFile (not ""), every peer link is mutual TLS, with the node's
// certificate in its directory (makeCerts).
func NodeConfig(n Node, all []Node, readConsistency, writeConsistency, caFile string) []byte {
	var b strings.Builder
	writeDynomiteKeys(&b, n, all, readConsistency, writeConsistency)
	fmt.Fprintf(&b, "  troop_node_name: %s\n", n.Name)
	fmt.Fprintf(&b, "  troop_pprof: true\n") // a lab is for measuring: its nodes serve Go's profiler
	if caFile != "" {
		fmt.Fprintf(&b, "  secure_server_option: all\n")
		fmt.Fprintf(&b, "  troop_tls_cert: %s\n", n.TLSCert())
		fmt.Fprintf(&b, "  troop_tls_key: %s\n", n.TLSKey())
		fmt.Fprintf(&b, "  troop_tls_ca: %s\n", caFile)
	}
	return []byte(b.String())
}

// writeDynomiteKeys writes the keys of a position's config that troop and
// Dynomite share: where it sits and listens, its seeds, token, datastore,
// levels and timeout.
func writeDynomiteKeys(b *strings.Builder, n Node, all []Node, readConsistency, writeConsistency string) {
	fmt.Fprintf(b, "dyn_o_mite:\n")
	fmt.Fprintf(b, "  datacenter: %s\n", n.DC)
	fmt.Fprintf(b, "  rack: %s\n", n.Rack)
	fmt.Fprintf(b, "  listen: %s\n", n.Listen)
	fmt.Fprintf(b, "  dyn_listen: %s\n", n.DynListen)
	fmt.Fprintf(b, "  stats_listen: %s\n", n.StatsListen)
	fmt.Fprintf(b, "  dyn_seeds:\n")
	for _, p := range all {
		if p.Name == n.Name {
			continue
		}
		fmt.Fprintf(b, "  - %s:%s:%s:%d\n", p.DynListen, p.Rack, p.DC, p.Token)
	}
	fmt.Fprintf(b, "  tokens: '%d'\n", n.Token)
	fmt.Fprintf(b, "  servers:\n")
	fmt.Fprintf(b, "  - %s:1\n", n.Redis)
	fmt.Fprintf(b, "  data_store: 0\n")
	fmt.Fprintf(b, "  read_consistency: %s\n", readConsistency)
	fmt.Fprintf(b, "  write_consistency: %s\n", writeConsistency)
	fmt.Fprintf(b, "  timeout: %d\n", NodeTimeout.Milliseconds())
}

// consistencyLevels are the levels a node accepts, as Dynomite spells them.
var consistencyLevels = []string{"DC_ONE", "DC_QUORUM", "DC_SAFE_QUORUM"}

// normalizeLevel accepts a level in any case and returns its canonical name.
func normalizeLevel(what, s string) (string, error) {
	if s == "" {
		return "DC_ONE", nil
	}
	for _, l := range consistencyLevels {
		if strings.EqualFold(s, l) {
			return l, nil
		}
	}
	return "", fmt.Errorf("unknown %s %q (want DC_ONE, DC_QUORUM or DC_SAFE_QUORUM)", what, s)
}
