package client

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// A lab up with TLS runs its peer links over mutual TLS: every node's
// config says so, the nodes connect to one another, and quorum writes and
// reads go through them.
func TestLabTLS(t *testing.T) {
	l := testlab.Start(t, lab.Spec{Shape: lab.Shape{DCs: 1, Racks: 3, NodesPerRack: 1}, ReplaceAfter: time.Minute, TLS: true})
	if !l.Status().TLS {
		t.Error("lab status does not say TLS")
	}
	for _, n := range l.Nodes() {
		cfg, err := os.ReadFile(n.Config)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"secure_server_option: all", "troop_tls_ca: " + filepath.Join(l.Dir(), "tls", "ca.crt")} {
			if !strings.Contains(string(cfg), want) {
				t.Errorf("%s's config lacks %q", n.Name, want)
			}
		}
	}
	nodes := labNodes(l)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, rack := range []string{"rack1", "rack2"} {
		c, err := NewCluster(nodes, Options{Rack: rack, ReadLevel: "DC_QUORUM", WriteLevel: "DC_QUORUM"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i == 0 {
			if _, err := c.Do(ctx, []byte("SET"), []byte("k"), []byte("over tls")); err != nil {
				t.Fatalf("SET through rack1: %v", err)
			}
			continue
		}
		if raw, err := c.Do(ctx, []byte("GET"), []byte("k")); err != nil || !strings.Contains(string(raw), "over tls") {
			t.Errorf("GET through rack2 = %q, %v", raw, err)
		}
	}
}
