package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Node is one troop node as the client sees it: where it sits, which tokens
// it owns, and the address its clients connect to.
type Node struct {
	Name   string
	DC     string
	Rack   string
	Tokens []uint32
	Addr   string // client (RESP) address, host:port
	Admin  string // admin HTTP address, host:port; "" when not known
	// Dynomite marks a node read from a Dynomite /cluster_describe: it
	// takes no TROOP commands (its levels are its own setting), and its
	// client port is not in the answer: Addr takes the convention of
	// Dynomite's configurations, the peer port plus one (8101, 8102).
	Dynomite bool
}

// String names a node for errors: its name and place, "dc1-rack2-1 (dc1/rack2)".
func (n Node) String() string {
	name := n.Name
	if name == "" {
		name = "node " + n.Addr
	}
	return fmt.Sprintf("%s (%s/%s)", name, n.DC, n.Rack)
}

// describedNode is one element of a node's /cluster_describe answer.
type describedNode struct {
	Name       string   `json:"name"`
	Datacenter string   `json:"datacenter"`
	Rack       string   `json:"rack"`
	Tokens     []uint32 `json:"tokens"`
	Listen     string   `json:"listen"`
	Stats      string   `json:"stats_listen"`
}

// describeWait bounds how long FromClusterDescribe waits for a node to learn
// its peers' addresses when the caller's context has no deadline: peers that
// start together reach each other within tens of milliseconds.
const describeWait = 5 * time.Second

// FromClusterDescribe reads the topology from one node's admin API
// (GET http://adminAddr/cluster_describe). A node learns its peers' names and
// client addresses when it first reaches them, so right after start some may
// be missing: it asks again until every address is known, until ctx ends or
// for at most 5 s when ctx has no deadline, and then names the nodes it could
// not place. An admin API that cannot be reached fails at once.
func FromClusterDescribe(ctx context.Context, adminAddr string) ([]Node, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, describeWait)
		defer cancel()
	}
	var missing []string
	notKnown := func() error {
		return fmt.Errorf("cluster_describe at %s: the client address of %s is not known yet (that node has not reached it): try again once the cluster is connected, or ask another node",
			adminAddr, strings.Join(missing, ", "))
	}
	for {
		nodes, m, err := describeOnce(ctx, adminAddr)
		if err != nil {
			if missing != nil && ctx.Err() != nil {
				return nil, notKnown() // the wait ran out during a later ask
			}
			return nil, err // an unreachable or broken admin API will not mend in seconds
		}
		if missing = m; len(missing) == 0 {
			return nodes, nil
		}
		select {
		case <-ctx.Done():
			return nil, notKnown()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// describeOnce asks once. missing lists the nodes without a client address.
func describeOnce(ctx context.Context, adminAddr string) (nodes []Node, missing []string, err error) {
	body, err := adminGet(ctx, adminAddr, "/cluster_describe")
	if err != nil {
		return nil, nil, fmt.Errorf("cluster_describe at %s: %w", adminAddr, err)
	}
	adminHost, _, _ := net.SplitHostPort(adminAddr)
	return parseDescribed(bytes.NewReader(body), "cluster_describe at "+adminAddr, adminHost)
}

// dynomiteDescribe is a Dynomite node's /cluster_describe answer (its
// stats server's stats_make_cl_desc_rsp): datacenters, racks, servers,
// each server's IP (name), host, peer port and token.
type dynomiteDescribe struct {
	DCs []struct {
		Name  string `json:"name"`
		Racks []struct {
			Name    string `json:"name"`
			Servers []struct {
				Name  string `json:"name"` // its IP address
				Host  string `json:"host"`
				Port  int    `json:"port"` // dyn_listen's, the peers'
				Token uint32 `json:"token"`
			} `json:"servers"`
		} `json:"racks"`
	} `json:"dcs"`
}

// parseDescribed reads a /cluster_describe answer, troop's (a list of
// nodes) or Dynomite's (datacenters of racks of servers). Listen addresses
// on all interfaces are reached on host ("" leaves them as they are).
func parseDescribed(r io.Reader, source, host string) (nodes []Node, missing []string, err error) {
	data, err := io.ReadAll(io.LimitReader(r, 16<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", source, err)
	}
	if d := bytes.TrimLeft(data, " \t\r\n"); len(d) > 0 && d[0] == '{' {
		return parseDynomite(data, source, host)
	}
	var described []describedNode
	if err := json.Unmarshal(data, &described); err != nil {
		return nil, nil, fmt.Errorf("%s: not a cluster_describe answer of troop (a list of nodes) or Dynomite ({\"dcs\": ...}): %w", source, err)
	}
	if len(described) == 0 {
		return nil, nil, fmt.Errorf("%s: no nodes", source)
	}
	for _, d := range described {
		if d.Listen == "" {
			missing = append(missing, fmt.Sprintf("the node of %s/%s with tokens %v", d.Datacenter, d.Rack, d.Tokens))
			continue
		}
		nodes = append(nodes, Node{Name: d.Name, DC: d.Datacenter, Rack: d.Rack, Tokens: d.Tokens,
			Addr: reachable(d.Listen, host), Admin: reachable(d.Stats, host)})
	}
	return nodes, missing, nil
}

func parseDynomite(data []byte, source, host string) ([]Node, []string, error) {
	var d dynomiteDescribe
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, nil, fmt.Errorf("%s: not a Dynomite cluster_describe answer: %w", source, err)
	}
	var nodes []Node
	for _, dc := range d.DCs {
		for _, rack := range dc.Racks {
			for _, s := range rack.Servers {
				h := s.Name // the IP: a host name may not resolve here
				if net.ParseIP(h) == nil && s.Host != "" {
					h = s.Host
				}
				if s.Port <= 0 || s.Port >= 65535 || h == "" {
					return nil, nil, fmt.Errorf("%s: server %q of %s/%s has no address (host %q, port %d)", source, s.Name, dc.Name, rack.Name, s.Host, s.Port)
				}
				addr := reachable(net.JoinHostPort(h, strconv.Itoa(s.Port+1)), host)
				nodes = append(nodes, Node{Name: addr, DC: dc.Name, Rack: rack.Name, Tokens: []uint32{s.Token}, Addr: addr, Dynomite: true})
			}
		}
	}
	if len(nodes) == 0 {
		return nil, nil, fmt.Errorf("%s: no nodes", source)
	}
	return nodes, nil, nil
}

// FromCluster reads a cluster's topology from a file holding a node's
// /cluster_describe answer, when fileOrAddr names one, or else from the
// node whose admin API is at that address; troop's answer or Dynomite's.
func FromCluster(ctx context.Context, fileOrAddr string) ([]Node, error) {
	if IsFile(fileOrAddr) {
		return FromClusterFile(fileOrAddr)
	}
	return FromClusterDescribe(ctx, fileOrAddr)
}

// IsFile says whether path names a regular file (FromCluster reads it)
// rather than an admin address.
func IsFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// FollowDescribe is a Follow (Options) that asks the admin API at
// adminAddr for its /cluster_describe.
func FollowDescribe(adminAddr string) func(context.Context) ([]Node, error) {
	return func(ctx context.Context) ([]Node, error) { return FromClusterDescribe(ctx, adminAddr) }
}

// FollowCluster is the Follow of a cluster named as FromCluster takes it:
// FollowDescribe of an admin address, nil for a file, which stays as it is.
func FollowCluster(fileOrAddr string) func(context.Context) ([]Node, error) {
	if IsFile(fileOrAddr) {
		return nil
	}
	return FollowDescribe(fileOrAddr)
}

// SetDynomitePort gives the Dynomite nodes among nodes the client port
// port, which their cluster_describe does not say; 0 keeps the peer port
// plus one.
func SetDynomitePort(nodes []Node, port int) {
	if port <= 0 {
		return
	}
	for i, n := range nodes {
		if n.Dynomite {
			host, _, _ := net.SplitHostPort(n.Addr)
			nodes[i].Addr = net.JoinHostPort(host, strconv.Itoa(port))
			nodes[i].Name = nodes[i].Addr
		}
	}
}

// FromClusterFile reads the topology from a file holding a node's
// /cluster_describe answer (curl http://ADMIN/cluster_describe > FILE), for
// clusters whose admin APIs the client cannot reach. Every node must have its
// client address.
func FromClusterFile(path string) ([]Node, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	nodes, missing, err := parseDescribed(f, path, "")
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: the client address of %s is missing", path, strings.Join(missing, ", "))
	}
	return nodes, nil
}

// reachable turns a listen address into one to dial: a node listening on
// all interfaces is reached on the host its admin API answered on.
func reachable(listen, host string) string {
	h, port, err := net.SplitHostPort(listen)
	if err != nil || host == "" {
		return listen
	}
	if h == "" || h == "0.0.0.0" || h == "::" {
		return net.JoinHostPort(host, port)
	}
	return listen
}

// place resolves the client's datacenter and rack from the options: the
// first node's when not given, the datacenter holding rack when only the
// rack is given.
func place(nodes []Node, dc, rack string) (string, string, error) {
	if dc == "" {
		for _, n := range nodes {
			if rack == "" || n.Rack == rack {
				dc = n.DC
				break
			}
		}
	}
	var racks []string
	for _, n := range nodes {
		if n.DC == dc {
			racks = appendNew(racks, n.Rack)
		}
	}
	if len(racks) == 0 {
		var dcs []string
		for _, n := range nodes {
			dcs = appendNew(dcs, n.DC)
		}
		sort.Strings(dcs)
		if dc == "" {
			return "", "", fmt.Errorf("client: no rack %q in the cluster", rack)
		}
		return "", "", fmt.Errorf("client: no datacenter %q in the cluster (have %s)", dc, strings.Join(dcs, ", "))
	}
	if rack == "" {
		for _, n := range nodes {
			if n.DC == dc {
				return dc, n.Rack, nil
			}
		}
	}
	for _, r := range racks {
		if r == rack {
			return dc, rack, nil
		}
	}
	sort.Strings(racks)
	return "", "", fmt.Errorf("client: no rack %q in %s (have %s)", rack, dc, strings.Join(racks, ", "))
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// checkNodes rejects a topology the client cannot route on.
func checkNodes(nodes []Node) error {
	if len(nodes) == 0 {
		return errors.New("client: no nodes")
	}
	for _, n := range nodes {
		switch {
		case n.Addr == "":
			return fmt.Errorf("client: %s has no address", n)
		case len(n.Tokens) == 0:
			return fmt.Errorf("client: %s has no tokens", n)
		case n.DC == "" || n.Rack == "":
			return fmt.Errorf("client: node %s %s has no datacenter or rack", n.Name, n.Addr)
		}
	}
	return nil
}
