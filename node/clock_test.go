package node

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestClockSkewAPI(t *testing.T) {
	tc := startCluster(t, clusterOpts{racks: 1})
	admin := "http://" + tc.nodes[0].cfg.StatsListen
	post := func(query string) (int, string) {
		t.Helper()
		res, err := http.Post(admin+"/clock/skew"+query, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	info := func() ClockInfo { t.Helper(); return nodeInfo(t, tc.nodes[0].cfg.StatsListen).Clock }
	if ci := info(); ci != (ClockInfo{}) {
		t.Errorf("/info clock of a true clock: %+v", ci)
	}
	if code, body := post("?offset=2s&rate=0.001"); code != 200 || !strings.Contains(body, `"offset_ms": 2000`) {
		t.Errorf("set: %d %s", code, body)
	}
	if ci := info(); ci.OffsetMS != 2000 || ci.Rate != 0.001 || ci.SkewMS < 2000 || ci.SkewMS > 2100 || ci.Since == "" {
		t.Errorf("/info clock after the set: %+v", ci)
	}
	for _, bad := range []string{"", "?offset=2", "?offset=25h", "?rate=-1", "?rate=x", "?offset=1s&speed=2"} {
		if code, body := post(bad); code != 400 {
			t.Errorf("POST /clock/skew%s: %d %s, want 400", bad, code, body)
		}
	}
	res, err := http.Get(admin + "/clock/skew?offset=1s")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /clock/skew: %d, want 405", res.StatusCode)
	}
	if ci := info(); ci.OffsetMS != 2000 {
		t.Errorf("a refused request changed the skew: %+v", ci)
	}
	if code, _ := post("?offset=0&rate=0"); code != 200 || info() != (ClockInfo{}) {
		t.Errorf("clear: %d, %+v", code, info())
	}
}
