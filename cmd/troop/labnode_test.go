package main

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/resp"
)

// troop lab add-node starts a node that joins rack1 and adds it while the
// cluster serves; remove-node takes it out and stops it. Keys written
// before read back at DC_QUORUM through the new node, and after its
// removal through another.
func TestLabAddRemoveNode(t *testing.T) {
	l := startLab(t)
	do := func(addr string, args ...string) resp.Value {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		rd := resp.NewReader(c, resp.DefaultLimits)
		var v resp.Value
		for _, cmd := range [][]string{{"TROOP", "CONSISTENCY", "DC_QUORUM"}, args} {
			if _, err := c.Write(resp.AppendCommandStrings(nil, cmd...)); err != nil {
				t.Fatal(err)
			}
			if v, err = rd.ReadValue(); err != nil {
				t.Fatal(err)
			}
		}
		return v
	}
	first := l.Nodes()[0].Listen
	for i := 0; i < 50; i++ {
		if v := do(first, "SET", fmt.Sprintf("k%d", i), fmt.Sprint(i)); v.IsError() {
			t.Fatalf("SET: %s", v)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		cmd := newLabCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append(args, "--dir", l.Dir()))
		if err := cmd.Execute(); err != nil {
			t.Fatalf("troop lab %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	out := run("add-node", "--rack", "rack1")
	if !strings.Contains(out, "epoch 3, stable") || !strings.Contains(out, "moves dc1/rack1 (0, 2147483648]") {
		t.Fatalf("add-node:\n%s", out)
	}
	added, ok := l.Node("dc1-rack1-2")
	if !ok {
		t.Fatalf("no position dc1-rack1-2 after add-node: %v", l.Nodes())
	}
	for i := 0; i < 50; i++ {
		if v := do(added.Listen, "GET", fmt.Sprintf("k%d", i)); string(v.Str) != fmt.Sprint(i) {
			t.Fatalf("GET k%d through the added node = %s", i, v)
		}
	}
	out = run("remove-node", "dc1-rack1-2")
	if !strings.Contains(out, "epoch 6, stable") || !strings.Contains(out, "removed dc1-rack1-2 from the cluster and stopped it") {
		t.Fatalf("remove-node:\n%s", out)
	}
	for i := 0; i < 50; i++ {
		if v := do(first, "GET", fmt.Sprintf("k%d", i)); string(v.Str) != fmt.Sprint(i) {
			t.Fatalf("GET k%d after the removal = %s", i, v)
		}
	}
	st := l.Status()
	n, err := st.Node("dc1-rack1-2")
	if err != nil || n.NodeP.State != lab.Stopped || n.RedisP.State != lab.Stopped {
		t.Fatalf("the removed position: %+v, %v", n, err)
	}
}
