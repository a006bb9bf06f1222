package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/internal/testredis"
)

// runCLI runs one troop verb in-process and returns what it printed.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newBenchCmd()
	cmd.SetArgs(args)
	var buf bytes.Buffer
	cmd.SetOut(&buf)
	cmd.SetErr(&buf)
	stdout := os.Stdout
	r, w, _ := os.Pipe()
	os.Stdout = w
	err := cmd.Execute()
	w.Close()
	os.Stdout = stdout
	var printed bytes.Buffer
	printed.ReadFrom(r)
	return printed.String() + buf.String(), err
}

func TestBenchCLI(t *testing.T) {
	r := testredis.Start(t)
	out := filepath.Join(t.TempDir(), "crud.json")
	printed, err := runCLI(t, "crud", "--target", r.Addr, "--requests", "400", "--keys", "200", "--workers", "2", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, printed)
	}
	for _, want := range []string{"Req/Sec", "50%", "99.9%", "Errors", "Fails", "StdDev", "PutCreate", "PutUpdate", "Delete", "Total", "SUMMARY"} {
		if !strings.Contains(printed, want) {
			t.Errorf("table lacks %q:\n%s", want, printed)
		}
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatalf("no result file: %v", err)
	}
	printed, err = runCLI(t, "compare", out, out)
	if err != nil || !strings.Contains(printed, "PutCreate") {
		t.Fatalf("compare: %v\n%s", err, printed)
	}
	empty := filepath.Join(t.TempDir(), "empty.json")
	os.WriteFile(empty, []byte("{}"), 0o644)
	if _, err := runCLI(t, "compare", out, empty); err == nil || !strings.Contains(err.Error(), "not a troop bench result") {
		t.Errorf("compare with {}: %v", err)
	}
	for _, bad := range [][]string{
		{"--target", r.Addr, "--ratio", "8020"},
		{"--target", r.Addr, "--pipeline", "10-3"},
		{"nosuchjob", "--target", r.Addr},
		{"--duration", "1s"},
	} {
		if _, err := runCLI(t, bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// troop bench against a redis-server that wants a password and a client
// certificate over TLS, in database 2: what ran is said first, every read
// is right, the result file holds no password, --cleanup deletes exactly
// the keys the run wrote (a key of the same prefix the run did not write,
// and the other databases, stay), and the CSV and the HDR log read back.
func TestBenchAuthTLSCleanup(t *testing.T) {
	srv := testredis.StartTLS(t, "--requirepass", "s3cret")
	f := srv.Files
	keep := map[string][]string{"0": {"user:1", "troop:bench:k000000000000005"}, "2": {"user:2", "troop:bench:k000000000009999"}}
	for db, keys := range keep {
		for _, k := range keys {
			redisCLI(t, srv.Addr, "-a", "s3cret", "-n", db, "SET", k, "mine")
		}
	}
	dir := t.TempDir()
	out, csvPath, hlog := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.hlog")
	printed, err := runCLI(t, "crud", "--target", srv.TLSAddr, "--tls", "--cacert", f.CA, "--cert", f.ClientCert, "--key", f.ClientKey,
		"--password", "s3cret", "--db", "2", "--keys", "200", "--requests", "400", "--workers", "2", "--cleanup",
		"--out", out, "--csv", csvPath, "--hdr-out", hlog)
	if err != nil {
		t.Fatalf("%v\n%s", err, printed)
	}
	for _, want := range []string{"==== WHAT RAN ====", "over TLS", "AUTH, database 2", "job        crud: PutCreate, Get, PutUpdate, Delete",
		"the first troop:bench:k000000000000000", "seed       1; closed loop, 400 requests per task", "cleanup: deleted"} {
		if !strings.Contains(printed, want) {
			t.Errorf("output lacks %q:\n%s", want, printed)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "s3cret") {
		t.Error("the result file holds the password")
	}
	res, err := bench.ReadResult(strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	var ops int64
	for _, r := range res.Totals {
		ops += r.Count
		if r.Errors+r.Fails > 0 {
			t.Errorf("%s: %d errors, %d fails: %v %v", r.Task, r.Errors, r.Fails, r.ErrorSamples, r.FailSamples)
		}
	}
	if res.Cleanup == nil || res.Cleanup.Keys != 200 || res.Cleanup.Errors != 0 {
		t.Errorf("cleanup: %+v", res.Cleanup)
	}
	for db, keys := range keep {
		if n := redisCLI(t, srv.Addr, "-a", "s3cret", "-n", db, "DBSIZE"); n != "2" {
			t.Errorf("database %s holds %s keys after the cleanup, want its 2", db, n)
		}
		for _, k := range keys {
			if v := redisCLI(t, srv.Addr, "-a", "s3cret", "-n", db, "GET", k); v != "mine" {
				t.Errorf("database %s: %s = %q", db, k, v)
			}
		}
	}
	rows, err := csv.NewReader(mustOpen(t, csvPath)).ReadAll()
	if err != nil || len(rows) != 1+4+4 || rows[0][0] != "task" || rows[5][2] != "total" {
		t.Errorf("CSV: %v %v", err, rows)
	}
	r := hdr.NewHistogramLogReader(mustOpen(t, hlog))
	var logged int64
	tags := map[string]bool{}
	for {
		h, err := r.NextIntervalHistogram()
		if err != nil {
			t.Fatal(err)
		}
		if h == nil {
			break
		}
		logged += h.TotalCount()
		tags[h.Tag()] = true
		if h.Min() < 1000 {
			t.Errorf("interval %s holds %d ns: not in nanoseconds", h.Tag(), h.Min())
		}
	}
	if logged != ops || len(tags) != 4 {
		t.Errorf("the HDR log holds %d operations of tasks %v, want %d of 4", logged, tags, ops)
	}
}

// A bench against a guarded server fails at once, saying why, without the
// password or with the wrong CA; flags that do not apply are warned about.
func TestBenchRefusalsAndWarnings(t *testing.T) {
	srv := testredis.StartTLS(t, "--requirepass", "s3cret")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", srv.Addr, "--duration", "1s"}, "NOAUTH"},
		{[]string{"--target", srv.Addr, "--password", "nope", "--duration", "1s"}, "AUTH refused"},
		{[]string{"--target", srv.TLSAddr, "--password", "s3cret", "--tls", "--cacert", testredis.MakeTLS(t).CA, "--duration", "1s"}, "certificate"},
		{[]string{"--target", srv.Addr, "--user", "bob", "--duration", "1s"}, "--user bob needs a password"},
		{[]string{"--target", srv.Addr, "--password", "s3cret", "--out", filepath.Join(t.TempDir(), "no", "r.json")}, "--out"},
	} {
		printed, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "nope") {
			t.Errorf("%v: %v\n%s", tc.args, err, printed)
		}
	}
	printed, err := runCLI(t, "crud", "--target", srv.Addr, "--password", "s3cret", "--requests", "100", "--keys", "50",
		"--ratio", "50:50", "--readers", "2", "--hotspot", "0.1:0.9", "--consistency", "DC_QUORUM", "--cacert", "x.pem")
	if err != nil {
		t.Fatalf("%v\n%s", err, printed)
	}
	for _, want := range []string{"--ratio does not apply to the crud job", "--readers does not apply", "--hotspot does not apply to the crud job",
		"--consistency does not apply to plain RESP servers", "--cacert does not apply without --tls"} {
		if !strings.Contains(printed, "warning: "+want) {
			t.Errorf("no warning %q:\n%s", want, printed)
		}
	}
	if strings.Contains(printed, "--workers does not apply") || strings.Contains(printed, "--keys does not apply") {
		t.Errorf("a warning for a flag that applies:\n%s", printed)
	}
}

func redisCLI(t *testing.T, addr string, args ...string) string {
	t.Helper()
	host, port := hostPort(addr)
	out, err := exec.Command(need(t, "redis-cli"), append([]string{"-h", host, "-p", port, "--no-auth-warning"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Two shards as processes of the troop binary, one with its result on
// standard output, then merged: the merge counts every request of both,
// compare reads the merged result, and a set with a shard missing or a
// shard twice is refused in one sentence.
func TestBenchShardsMerge(t *testing.T) {
	srv := testredis.Start(t)
	bin := testlab.Troop(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Time enough for both processes to start on a busy machine.
	start := time.Now().Add(5 * time.Second).UTC().Format(time.RFC3339Nano)
	files := []string{filepath.Join(dir, "s1.json"), filepath.Join(dir, "s2.json")}
	var cmds []*exec.Cmd
	var stdouts []*bytes.Buffer
	for i := range 2 {
		args := []string{"bench", "mixed", "--target", srv.Addr, "--requests", "600", "--keys", "300",
			"--readers", "2", "--writers", "2", "--shard", fmt.Sprintf("%d/2", i+1), "--start-at", start}
		var stdout, stderr bytes.Buffer
		if i == 0 {
			args = append(args, "--out", files[0])
		} else {
			args = append(args, "--out", "-")
		}
		c := exec.CommandContext(ctx, bin, args...)
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, stdouts = append(cmds, c), append(stdouts, &stdout)
		t.Cleanup(func() {
			if c.ProcessState == nil {
				c.Process.Kill()
				c.Wait()
			}
		})
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("shard %d: %v\n%s", i+1, err, c.Stderr)
		}
	}
	if err := os.WriteFile(files[1], stdouts[1].Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(dir, "merged.json")
	printed, err := runCLI(t, "merge", files[1], files[0], "--out", merged)
	if err != nil {
		t.Fatalf("%v\n%s", err, printed)
	}
	var sum, shardSum int64
	m, err := bench.ReadResult(mustOpen(t, merged))
	if err != nil {
		t.Fatal(err)
	}
	for _, tot := range m.Totals {
		sum += tot.Count
	}
	for _, f := range files {
		r, err := bench.ReadResult(mustOpen(t, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, tot := range r.Totals {
			shardSum += tot.Count
		}
	}
	if sum != 600 || shardSum != 600 || m.Shards != 2 || !strings.Contains(printed, "MERGED FROM 2 SHARDS") {
		t.Errorf("merged %d requests of %d shards, the shards %d, want 600:\n%s", sum, m.Shards, shardSum, printed)
	}
	if printed, err := runCLI(t, "compare", merged, files[0]); err != nil || !strings.Contains(printed, "merged from 2 shards") {
		t.Errorf("compare of a merged result: %v\n%s", err, printed)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"merge", files[0]}, "the merge needs all 2 shards of the run, and shard 2/2 is missing"},
		{[]string{"merge", files[0], files[1], files[0]}, "shard 1/2 is given twice"},
		{[]string{"merge", merged}, "no shard's result"},
		{[]string{"--target", srv.Addr, "--shard", "1/2"}, "--shard needs --start-at"},
		{[]string{"--target", srv.Addr, "--shard", "3/2", "--start-at", start}, "I must lie between 1 and N"},
		{[]string{"--target", srv.Addr, "--start-at", "noon"}, "RFC 3339"},
	} {
		if _, err := runCLI(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
