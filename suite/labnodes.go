package suite

import (
	"fmt"

	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/lab"
)

// LabNodes reads the nodes of the lab running in dir (DIR/lab.json) as a
// client sees them: its troop nodes, or its Dynomite nodes (lab up --engine
// dynomite), whose admin API is their stats_listen too.
func LabNodes(dir string) ([]client.Node, error) {
	st, err := lab.Load(dir)
	if err != nil {
		return nil, err
	}
	if len(st.Nodes) == 0 {
		return nil, fmt.Errorf("lab %s: no nodes", dir)
	}
	nodes := make([]client.Node, len(st.Nodes))
	for i, n := range st.Nodes {
		nodes[i] = client.Node{Name: n.Name, DC: n.DC, Rack: n.Rack, Tokens: []uint32{n.Token}, Addr: n.Listen, Admin: n.StatsListen,
			Dynomite: n.Engine == lab.EngineDynomite}
	}
	return nodes, nil
}
