package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/troop-lab/troop/lab"
)

// troopBin is the troop binary the lab tests run, built once; buildErr says
// why it is missing.
var (
	troopBin string
	buildErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "troop-client-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	troopBin, buildErr = lab.BuildTroop(ctx, dir)
	cancel()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startLab starts a lab of real redis-servers and troop nodes; the test's
// cleanup stops every process by PID.
func startLab(t *testing.T, racks, perRack int) *lab.Lab {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lab.Start(ctx, lab.Spec{
		Dir:          t.TempDir(),
		Shape:        lab.Shape{DCs: 1, Racks: racks, NodesPerRack: perRack},
		ReplaceAfter: time.Minute, // tests stop nodes on purpose; nothing comes back by itself
		Troop:        troopBin,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Stop() })
	if err := lab.WaitMeshed(ctx, l.Nodes(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return l
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
