package deploy

// The checks that a set of node configs makes one 3-rack cluster, shared
// by the Compose and Kubernetes tests.

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/troop-lab/troop/topology"
)

// meshNode is a node config with the host its peers reach it at.
type meshNode struct {
	what string // where the config comes from, for messages
	host string
	cfg  *topology.Config
}

// checkMesh checks that the configs make one cluster of three racks: each
// node's seeds are exactly the other nodes (host, peer port, rack,
// datacenter, tokens), its client address is its own host, it talks to the
// redis-server the image's entrypoint starts, and no two nodes of a rack
// share a token.
func checkMesh(t *testing.T, nodes []meshNode) {
	t.Helper()
	racks := map[string][]uint32{}
	for _, n := range nodes {
		racks[n.cfg.Rack] = append(racks[n.cfg.Rack], n.cfg.Tokens...)
		if h, _, _ := net.SplitHostPort(n.cfg.Listen); h != n.host {
			t.Errorf("%s: listen %s: want the node's own name %s, so that /cluster_describe tells clients where to reach it", n.what, n.cfg.Listen, n.host)
		}
		if len(n.cfg.Servers) != 1 || n.cfg.Servers[0].Addr != "127.0.0.1:6379" {
			t.Errorf("%s: servers %v: want 127.0.0.1:6379, the entrypoint's redis-server", n.what, n.cfg.Servers)
		}
		var want, got []string
		for _, p := range nodes {
			if p.what != n.what {
				want = append(want, fmt.Sprintf("%s:%s %s/%s %v", p.host, portOf(p.cfg.DynListen), p.cfg.Datacenter, p.cfg.Rack, p.cfg.Tokens))
			}
		}
		for _, s := range n.cfg.Seeds {
			got = append(got, fmt.Sprintf("%s %s/%s %v", s.Addr, s.DC, s.Rack, s.Tokens))
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: seeds\n%s\nwant the other nodes\n%s", n.what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if len(racks) != 3 {
		t.Errorf("racks %v: want 3", racks)
	}
	for rack, tokens := range racks {
		slices.Sort(tokens)
		if len(slices.Compact(tokens)) != len(racks[rack]) {
			t.Errorf("rack %s: nodes share a token: %v", rack, racks[rack])
		}
	}
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
