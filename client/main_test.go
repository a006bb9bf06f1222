package client

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

func TestMain(m *testing.M) { testlab.Main(m) }

// startLab starts a lab of real redis-servers and troop nodes; the test's
// cleanup stops every process by PID.
func startLab(t *testing.T, racks, perRack int) *lab.Lab {
	t.Helper()
	return testlab.Start(t, lab.Spec{
		Shape:        lab.Shape{DCs: 1, Racks: racks, NodesPerRack: perRack},
		ReplaceAfter: time.Minute, // tests stop nodes on purpose; nothing comes back by itself
	})
}

// nodeInfo is the part of a node's /info the tests read.
type nodeInfo struct {
	Name      string                                      `json:"name"`
	Forwarded int64                                       `json:"forwarded"`
	Commands  map[string]int64                            `json:"commands"`
	Requests  map[string]map[string]struct{ Count int64 } `json:"requests"`
}

func info(t *testing.T, statsAddr string) nodeInfo {
	t.Helper()
	res, err := http.Get("http://" + statsAddr + "/info")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var ni nodeInfo
	if err := json.NewDecoder(res.Body).Decode(&ni); err != nil {
		t.Fatalf("/info of %s: %v", statsAddr, err)
	}
	return ni
}

// labNodes is the lab's nodes as a client sees them (troop run's
// suite.LabNodes, which this package's tests cannot import).
func labNodes(l *lab.Lab) []Node {
	var nodes []Node
	for _, n := range l.Nodes() {
		nodes = append(nodes, Node{Name: n.Name, DC: n.DC, Rack: n.Rack, Tokens: []uint32{n.Token}, Addr: n.Listen, Admin: n.StatsListen})
	}
	return nodes
}
