package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/suite"
)

// shortRun is a quick run's configuration cut to seconds, for clusters
// troop did not start.
func shortRun(t *testing.T) suite.Config {
	cfg := suite.QuickConfig()
	cfg.Troop, cfg.Version = testlab.Troop(t), "test"
	cfg.Keys, cfg.Baseline, cfg.Register.Duration, cfg.LDFIMaxFaults = 1000, time.Second, time.Second, 0
	return cfg
}

func runExisting(t *testing.T, cfg suite.Config) *suite.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout strings.Builder
	rep, err := runSuite(ctx, cfg, t.TempDir(), &stdout)
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	t.Log("\n" + stdout.String())
	return rep
}

// skipped says whether the report says that phase did not run, and why.
func skipped(rep *suite.Report, phase string) bool {
	for _, s := range rep.Skipped {
		if strings.HasPrefix(s, phase+":") {
			return true
		}
	}
	return false
}

// troop run --target runs the load and the checks against a redis-server
// troop did not start, at the level --level says it runs at, names the
// store and its version, says which phases could not run there, and leaves
// the user's keys, and none of its own.
func TestRunTargetRedis(t *testing.T) {
	r := testredis.Start(t)
	redisCLI(t, r.Addr, "SET", "user:mine", "keep")
	cfg := shortRun(t)
	cfg.Target, cfg.Level = []string{r.Addr}, "dc_quorum"
	rep := runExisting(t, cfg)
	if len(rep.Baseline) != 1 || rep.Baseline[0].Level != "DC_QUORUM" || rep.Baseline[0].Result.Totals[0].Count == 0 {
		t.Fatalf("baseline: %+v", rep.Baseline)
	}
	if s := rep.Store; s.Name != "redis-server" || s.Version == "" || s.Levels != "DC_QUORUM" || s.LevelsFrom != "--level" {
		t.Errorf("store: %+v", s)
	}
	if len(rep.Verdict.Held) == 0 || !slices.ContainsFunc(rep.Verdict.Held, func(h string) bool { return strings.HasPrefix(h, "consistency at DC_QUORUM: ") }) {
		t.Errorf("held: %q, want the registers held to DC_QUORUM", rep.Verdict.Held)
	}
	if rep.Failure != nil || rep.Nemesis != nil || rep.LDFI != nil || !skipped(rep, "failure under load and durability audit") || !skipped(rep, "nemesis") {
		t.Errorf("phases that need a lab: failure %v nemesis %v ldfi %v, skipped %v", rep.Failure != nil, rep.Nemesis != nil, rep.LDFI != nil, rep.Skipped)
	}
	if len(rep.Consistency) != 1 || rep.Consistency[0].Verdict.Ops == 0 || !rep.Consistency[0].Verdict.Linearizable() {
		t.Errorf("consistency on one redis-server: %+v", rep.Consistency)
	}
	if !rep.Verdict.OK || !strings.HasPrefix(rep.Cluster, "Redis-protocol endpoints "+r.Addr) {
		t.Errorf("verdict %+v, cluster %q", rep.Verdict, rep.Cluster)
	}
	if !strings.Contains(rep.Cleanup, "deleted the keys the run wrote") {
		t.Errorf("cleanup: %q", rep.Cleanup)
	}
	if n := redisCLI(t, r.Addr, "DBSIZE"); n != "1" || redisCLI(t, r.Addr, "GET", "user:mine") != "keep" {
		t.Errorf("after the run the server holds %s keys, want the user's one: %s", n, redisCLI(t, r.Addr, "--scan"))
	}
}

// troop run --target reaches a redis-server that wants a password and a
// client certificate over TLS, in the database given: the run holds, its
// report keeps no password, and it deletes only what it wrote there. Access
// flags without a cluster troop did not start are refused, as are --level
// without one and a level that does not exist.
func TestRunTargetAuthTLS(t *testing.T) {
	srv := testredis.StartTLS(t, "--requirepass", "s3cret")
	f := srv.Files
	redisCLI(t, srv.Addr, "-a", "s3cret", "-n", "2", "SET", "user:mine", "keep")
	cfg := shortRun(t)
	cfg.Target = []string{srv.TLSAddr}
	cfg.Access = bench.Access{DB: 2, Password: "s3cret", TLS: true, TLSCA: f.CA, TLSCert: f.ClientCert, TLSKey: f.ClientKey}
	rep := runExisting(t, cfg)
	if !rep.Verdict.OK || len(rep.Baseline) != 1 || rep.Baseline[0].Result.Totals[0].Count == 0 {
		t.Errorf("verdict %+v, baseline %+v", rep.Verdict, rep.Baseline)
	}
	if js, _ := json.Marshal(rep); strings.Contains(string(js), "s3cret") {
		t.Error("the report holds the password")
	}
	if n := redisCLI(t, srv.Addr, "-a", "s3cret", "-n", "2", "DBSIZE"); n != "1" {
		t.Errorf("after the run database 2 holds %s keys, want the user's one", n)
	}

	for _, args := range [][]string{{"--password", "x"}, {"--cluster", "127.0.0.1:1", "--db", "1"}, {"--level", "DC_QUORUM"}, {"--target", "127.0.0.1:1", "--level", "DC_TWO"}} {
		cmd := newRunCmd()
		cmd.SetArgs(append(args, "--out", t.TempDir()))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), args[len(args)-2]) {
			t.Errorf("troop run %v: %v, want a refusal naming the flags", args, err)
		}
	}
}

// troop run --cluster runs against troop nodes troop did not start, by a
// node's admin address (each level, the register workload with its delays
// and skew, LDFI by the node's client address), and against the same
// nodes described as Dynomite describes its cluster (its own level; no
// LDFI); the keys it wrote are gone after either.
func TestRunCluster(t *testing.T) {
	l := startLab(t)
	t.Run("troop", func(t *testing.T) {
		cfg := shortRun(t)
		cfg.Cluster, cfg.LDFIMaxFaults = l.Nodes()[0].StatsListen, 1
		rep := runExisting(t, cfg)
		if len(rep.Baseline) != 2 || len(rep.Consistency) != 2 || rep.LDFI == nil || len(rep.LDFI.Classes) != 2 {
			t.Fatalf("baseline %d, consistency %d, ldfi %+v", len(rep.Baseline), len(rep.Consistency), rep.LDFI)
		}
		if rep.Failure != nil || rep.Nemesis != nil || !skipped(rep, "nemesis") {
			t.Errorf("phases that need a lab ran, or are not said: %v", rep.Skipped)
		}
		if !rep.Verdict.OK || !strings.HasPrefix(rep.Cluster, "troop cluster of "+cfg.Cluster+": 3 nodes") {
			t.Errorf("verdict %+v, cluster %q", rep.Verdict, rep.Cluster)
		}
		noKeysLeft(t, l.Nodes())
	})
	t.Run("Dynomite", func(t *testing.T) {
		var dcs []string
		for _, n := range l.Nodes() {
			host, port := hostPort(n.Listen)
			p, _ := strconv.Atoi(port)
			dcs = append(dcs, fmt.Sprintf(`{"name":"%s","racks":[{"name":"%s","servers":[{"name":"%s","host":"","port":%d,"token":%d}]}]}`,
				n.DC, n.Rack, host, p-1, n.Token))
		}
		file := filepath.Join(t.TempDir(), "dynomite.json")
		os.WriteFile(file, []byte(`{"dcs":[`+strings.Join(dcs, ",")+`]}`), 0o644)
		cfg := shortRun(t)
		cfg.Cluster, cfg.LDFIMaxFaults = file, 1
		rep := runExisting(t, cfg)
		if len(rep.Baseline) != 1 || rep.Baseline[0].Level != suite.OwnLevel || len(rep.Consistency) != 1 {
			t.Fatalf("baseline %+v, consistency %d", rep.Baseline, len(rep.Consistency))
		}
		if rep.Store.Name != "Dynomite" || rep.Store.Levels != "" {
			t.Errorf("store of a Dynomite described by a file, with no --level: %+v", rep.Store)
		}
		if rep.LDFI != nil || !skipped(rep, "lineage-driven fault injection") || !strings.HasPrefix(rep.Cluster, "Dynomite cluster of ") {
			t.Errorf("LDFI on Dynomite: %v, skipped %v, cluster %q", rep.LDFI != nil, rep.Skipped, rep.Cluster)
		}
		for _, b := range rep.Verdict.Broke {
			t.Errorf("broke: %s", b)
		}
		noKeysLeft(t, l.Nodes())
	})
}

// noKeysLeft checks every redis-server of the lab for the run's keys,
// for at most 10 s: the run's DELs answer once as many replicas as their
// level asks have them, and the others delete a moment later.
func noKeysLeft(t *testing.T, nodes []lab.Node) {
	t.Helper()
	for _, n := range nodes {
		for _, pattern := range []string{"troop:bench:*", "troop:register:*"} {
			keys := redisCLI(t, n.Redis, "--scan", "--pattern", pattern)
			for deadline := time.Now().Add(10 * time.Second); keys != "" && time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond)
				keys = redisCLI(t, n.Redis, "--scan", "--pattern", pattern)
			}
			if keys != "" {
				t.Errorf("%s still holds %d keys %s 10 s after the run", n.Name, len(strings.Fields(keys)), pattern)
			}
		}
	}
}

// troop run --chaos-config refuses what it cannot act through, before it
// touches a cluster: a config of several groups without --chaos-group, an
// unknown group, a lab group, a lab run, --chaos-group alone.
func TestRunChaosConfigRefusals(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "chaos.yml")
	if err := os.WriteFile(config, []byte(`groups:
  - name: store
    backend: docker
    selector: {labels: {app: troop}}
    probability: 1
  - name: nodes
    backend: lab
    probability: 1
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", "127.0.0.1:1", "--chaos-config", config}, "has 2 groups: say which one holds the cluster's nodes with --chaos-group (store (docker), nodes (lab))"},
		{[]string{"--cluster", "127.0.0.1:1", "--chaos-config", config, "--chaos-group", "web"}, `has no group "web": its groups are store (docker), nodes (lab)`},
		{[]string{"--cluster", "127.0.0.1:1", "--chaos-config", config, "--chaos-group", "nodes"}, "group nodes has the lab backend: a cluster troop did not start needs a group of the docker or kubernetes backend"},
		{[]string{"--chaos-config", config, "--chaos-group", "store"}, "--chaos-config is for a cluster troop did not start"},
		{[]string{"--target", "127.0.0.1:1", "--chaos-group", "store"}, "--chaos-group names a group of --chaos-config FILE, which is missing"},
	} {
		cmd := newRunCmd()
		cmd.SetArgs(append(tc.args, "--out", t.TempDir()))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("troop run %q: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
