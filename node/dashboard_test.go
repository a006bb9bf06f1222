package node

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// The Grafana dashboard in docs/ parses, every panel queries something, and
// every metric it names is one a node exports.
func TestGrafanaDashboard(t *testing.T) {
	const path = "../docs/grafana/troop-cluster.json"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("%s: title %q, uid %q, %d panels", path, dash.Title, dash.UID, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q: a target without a query", p.Title)
			}
		}
	}

	tc := startCluster(t, clusterOpts{racks: 2})
	tc.client(0, "DC_QUORUM").must("SET", "k", "v")
	_, families := scrape(t, tc.nodes[0])
	names := regexp.MustCompile(`\b(?:troop|go|process)_[a-z0-9_]+`).FindAllString(string(raw), -1)
	if len(names) == 0 {
		t.Fatal("the dashboard names no metric")
	}
	for _, name := range names {
		f := families[name]
		if f == nil {
			base := name[:strings.LastIndex(name, "_")]
			if h := families[base]; h != nil && h.GetType() == dto.MetricType_HISTOGRAM &&
				slices.Contains([]string{"_bucket", "_sum", "_count"}, name[len(base):]) {
				continue
			}
			t.Errorf("the dashboard queries %s, which a node does not export", name)
		}
	}
}
