package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/records"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// The demo runs to the end and shows each level working, then failing as
// documented, with its peer links over TLS (the plain lab runs in every
// other test).
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	if err := runDemo(ctx, &out, t.TempDir(), testlab.Troop(t), true); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		`peer links over mutual TLS (secure_server_option: all)`,
		`DC_SAFE_QUORUM  GET demo:dc_safe_quorum via dc1-rack3-1 -> "hello"`,
		`DC_QUORUM       SET demo:failure one-down -> "OK"`,
		`DC_QUORUM       SET demo:failure two-down -> (error) ERR troop: DC_QUORUM write (SET) failed`,
		`, 2 needed`,
		`DC_ONE          GET demo:failure          -> "two-down"`,
		`DC_QUORUM       GET demo:failure           -> "recovered"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out.String())
	}
}

func TestMain(m *testing.M) { testlab.Main(m) }

// startLab brings up a 1 x 3 x 1 lab of real processes running the troop
// binary built from this tree, with its control socket.
func startLab(t *testing.T) *lab.Lab {
	t.Helper()
	return testlab.Start(t, lab.Spec{ServeSocket: true})
}

func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Fatalf("%s not found on PATH: install its Debian package (make test does this when run as root)", tool)
	}
	return p
}

func hostPort(addr string) (string, string) {
	i := strings.LastIndex(addr, ":")
	return addr[:i], addr[i+1:]
}

// redis-cli works against a node: commands, replies, errors.
func TestRedisCLI(t *testing.T) {
	cli := need(t, "redis-cli")
	l := startLab(t)
	host, port := hostPort(l.Nodes()[0].Listen)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"SET", "cli", "hello world"}, "OK"},
		{[]string{"GET", "cli"}, "hello world"},
		{[]string{"TROOP", "CONSISTENCY", "DC_QUORUM"}, "OK"},
		{[]string{"RPUSH", "list", "a", "b"}, "2"},
		{[]string{"LRANGE", "list", "0", "-1"}, "a\nb"},
		{[]string{"EXEC"}, "ERR EXEC without MULTI"},
	} {
		if got := run(c.args...); got != c.want {
			t.Errorf("redis-cli %v = %q, want %q", c.args, got, c.want)
		}
	}
	// Interactive mode reads commands from stdin, over one connection.
	cmd := exec.Command(cli, "-h", host, "-p", port)
	cmd.Stdin = strings.NewReader("TROOP CONSISTENCY DC_SAFE_QUORUM\nTROOP CONSISTENCY\nGET cli\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "DC_SAFE_QUORUM\nDC_SAFE_QUORUM\nhello world") {
		t.Errorf("redis-cli from stdin: %v\n%s", err, out)
	}
}

// redis-benchmark, pipeline 1 and 10, against a node: every request answered
// without an error, as the node's own counters confirm.
func TestRedisBenchmark(t *testing.T) {
	bench := need(t, "redis-benchmark")
	l := startLab(t)
	n := l.Nodes()[0]
	host, port := hostPort(n.Listen)
	for _, pipeline := range []string{"1", "10"} {
		out, err := exec.Command(bench, "-h", host, "-p", port, "-c", "20", "-n", "4000", "-P", pipeline,
			"-t", "set,get,incr,lpush,lpop,sadd,hset,mset", "-d", "100", "-r", "1000", "-q").CombinedOutput()
		if err != nil {
			t.Fatalf("redis-benchmark -P %s: %v\n%s", pipeline, err, out)
		}
		for _, line := range strings.Split(strings.ReplaceAll(string(out), "\r", "\n"), "\n") {
			if strings.Contains(line, "rror") && !strings.Contains(line, "Could not fetch server CONFIG") {
				t.Errorf("redis-benchmark -P %s: %s", pipeline, line)
			}
		}
	}
	res, err := http.Get("http://" + n.StatsListen + "/info")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var info struct {
		Requests map[string]map[string]struct{ Count, Errors int64 }
		Busy     int64
	}
	if err := json.NewDecoder(res.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for op, levels := range info.Requests {
		for level, r := range levels {
			total += r.Count
			if r.Errors != 0 {
				t.Errorf("%s at %s: %d errors", op, level, r.Errors)
			}
		}
	}
	// 8 tests x 4000 requests x 2 pipelines; MSET counts once per key.
	if total < 8*4000*2 || info.Busy != 0 {
		t.Errorf("node counted %d requests and %d BUSY, want at least %d and none", total, info.Busy, 8*4000*2)
	}
}

// troop bench --lab drives a lab through a token-aware client per rack: every
// node serves reads, none forwards a request, nothing fails.
func TestBenchLab(t *testing.T) {
	l := startLab(t)
	printed, err := runCLI(t, "mixed", "--lab", l.Dir(), "--requests", "3000", "--keys", "500",
		"--readers", "2", "--writers", "1", "--consistency", "DC_QUORUM")
	if err != nil {
		t.Fatalf("%v\n%s", err, printed)
	}
	// The same lab described as a Dynomite node describes its cluster: the
	// client port is the peer port plus one there.
	var servers []string
	for _, n := range l.Nodes() {
		host, port := hostPort(n.Listen)
		p, _ := strconv.Atoi(port)
		servers = append(servers, fmt.Sprintf(`{"name":"%s","racks":[{"name":"%s","servers":[{"name":"%s","host":"localhost","port":%d,"token":%d}]}]}`,
			n.DC, n.Rack, host, p-1, n.Token))
	}
	dyno := filepath.Join(t.TempDir(), "dynomite.json")
	// One datacenter entry per node: the racks merge by name.
	os.WriteFile(dyno, []byte(`{"dcs":[`+strings.Join(servers, ",")+`]}`), 0o644)
	dp, err := runCLI(t, "mixed", "--cluster", dyno, "--requests", "3000", "--keys", "500",
		"--readers", "2", "--writers", "1", "--consistency", "DC_QUORUM")
	if err != nil {
		t.Fatalf("%v\n%s", err, dp)
	}
	if !strings.Contains(dp, "target     Dynomite cluster, datacenter dc1: 3 nodes in 3 racks") ||
		!strings.Contains(dp, "warning: --consistency does not apply to a Dynomite cluster") {
		t.Errorf("the Dynomite cluster is not said so:\n%s", dp)
	}
	printed += dp
	for _, n := range l.Nodes() {
		res, err := http.Get("http://" + n.StatsListen + "/info")
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Forwarded int64
			Requests  map[string]map[string]struct{ Count, Errors int64 }
		}
		json.NewDecoder(res.Body).Decode(&info)
		res.Body.Close()
		reads := info.Requests["read"]["DC_QUORUM"]
		if info.Forwarded != 0 || reads.Count == 0 || reads.Errors != 0 {
			t.Errorf("%s: forwarded %d, DC_QUORUM reads %d with %d errors", n.Name, info.Forwarded, reads.Count, reads.Errors)
		}
	}
	// Each summary's last row is "Total ... Errors Fails".
	for _, out := range []string{printed[:len(printed)-len(dp)], dp} {
		summary := out[strings.LastIndex(out, "SUMMARY"):]
		line := summary[strings.LastIndex(summary, "\nTotal")+1:]
		total := strings.Fields(line[:strings.IndexByte(line, '\n')])
		if len(total) < 3 || total[len(total)-2] != "0" || total[len(total)-1] != "0" {
			t.Errorf("errors or fails in the summary %q:\n%s", total, out)
		}
	}
}

// troop chaos kill terminates one node of a lab group, the supervisor brings
// it back, and the termination lands in the records; leashed, it acts on
// nothing.
func TestChaosKillLab(t *testing.T) {
	l := startLab(t)
	dir := t.TempDir()
	config := func(leashed bool) string {
		path := filepath.Join(dir, fmt.Sprintf("chaos-%v.yml", leashed))
		body := fmt.Sprintf("leashed: %v\ngroups:\n  - name: rack2\n    backend: lab\n    selector: {rack: rack2}\n    enabled: true\n    probability: 1\n    types: [terminate]\n", leashed)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pids := func() map[string]int {
		out := map[string]int{}
		for _, n := range l.Status().Nodes {
			out[n.Name] = n.NodePID
		}
		return out
	}
	before := pids()
	run := func(args ...string) string {
		t.Helper()
		cmd := newChaosKillCmd()
		var buf bytes.Buffer
		cmd.SetOut(&buf)
		cmd.SetErr(&buf)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("chaos kill %v: %v\n%s", args, err, buf.String())
		}
		return buf.String()
	}
	out := run("rack2", "--config", config(true), "--lab", l.Dir(), "--seed", "1")
	if !strings.Contains(out, "would terminate dc1-rack2-1") || !reflect.DeepEqual(pids(), before) {
		t.Fatalf("leashed kill acted or said %q", out)
	}
	recs := filepath.Join(dir, "records.db")
	out = run("rack2", "--config", config(false), "--lab", l.Dir(), "--db", recs, "--recover-within", "30s")
	if !strings.Contains(out, "terminate dc1-rack2-1") || !strings.Contains(out, "recovered in") {
		t.Fatalf("kill said %q", out)
	}
	after := pids()
	for name, pid := range before {
		if changed := after[name] != pid; changed != (name == "dc1-rack2-1") {
			t.Errorf("%s: PID %d -> %d", name, pid, after[name])
		}
	}
	store, err := records.Open(recs, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	got, err := store.Terminations(context.Background(), chaos.Query{})
	if err != nil || len(got) != 1 || got[0].Outcome != chaos.Executed || got[0].Instance.Name != "dc1-rack2-1" {
		t.Fatalf("records: %+v, %v", got, err)
	}
}
