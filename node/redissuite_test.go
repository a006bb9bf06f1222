package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/internal/freeport"
	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/topology"
)

// TestRedisSuite runs units of Redis's own test suite, from the Debian
// source package of the installed redis-server, against a plain
// redis-server and against a node of a 3-rack cluster (hash_tag "{}", as
// the suite tags the keys of multi-key commands with {t}; flushes allowed),
// and compares: of the tests that pass against redis-server, at least 95%
// must pass through the node, per unit. It writes a report that lists every
// test that fails only through the node, with its reason. Without
// TROOP_REDIS_SUITE it runs the units of the commands most used, strings
// and counters (about a minute here); make compat runs them all.
//
//	TROOP_REDIS_SUITE=all make compat          # the data types' units below
//	TROOP_REDIS_SUITE=apps go test ./node -run TestRedisSuite  # multi, keyspace, scripting, pubsub, streams ...
//	TROOP_REDIS_SUITE=type/incr,expire go test ./node -run TestRedisSuite
//
// The sources are fetched with apt-get source into TROOP_REDIS_SRC (default
// a directory under the user's cache), with an apt configuration of their
// own: the system's apt sources are left alone.
func TestRedisSuite(t *testing.T) {
	units := []string{"type/string", "type/incr"}
	switch want := os.Getenv("TROOP_REDIS_SUITE"); want {
	case "":
	case "all":
		units = []string{"type/string", "type/incr", "type/hash", "type/list", "type/set", "type/zset", "expire"}
	case "apps": // what applications use beyond the data types; multi and scripting below 95% yet (docs/store.md)
		units = []string{"multi", "keyspace", "info-command", "scripting", "pubsub", "type/stream", "type/stream-cgroups"}
	default:
		units = strings.Split(want, ",")
	}
	src := redisTestSources(t)
	adaptRedisTests(t, src)

	plain := startRedis(t)
	tc := startCluster(t, clusterOpts{racks: 3, timeout: 5 * time.Second, configure: func(c *topology.Config) {
		c.AllowFlush, c.HashTag = true, "{}"
	}})
	node := tc.nodes[0].cfg.Listen
	out := os.Getenv("TROOP_REDIS_SUITE_REPORT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "redis-suite.md")
	}
	logs := strings.TrimSuffix(out, ".md") + "-logs" // each run's output, beside the report
	os.MkdirAll(logs, 0o755)

	var report strings.Builder
	fmt.Fprintf(&report, "Redis's own tests through a troop node (3 racks, DC_ONE, hash_tag \"{}\") against redis-server %s\n\n", redisVersion(t))
	fmt.Fprintf(&report, "| unit | pass on redis-server | of those, pass through the node | share |\n|---|---|---|---|\n")
	var failures []string
	low := false
	for _, unit := range units {
		// Each unit starts from the defaults of what the units set, as each
		// starts a redis-server of its own outside external-server mode: a
		// test that fails between its CONFIG SET maxmemory 1 and its reset
		// would refuse the next unit's writes.
		for _, addr := range []string{plain.Addr, node} {
			dial(t, addr).must("CONFIG", "SET", "maxmemory", "0", "min-replicas-to-write", "0", "lua-time-limit", "5000", "notify-keyspace-events", "")
		}
		base := runRedisUnit(t, src, plain.Addr, unit, filepath.Join(logs, "redis-"+strings.ReplaceAll(unit, "/", "-")+".txt"), nil)
		through := runRedisUnit(t, src, node, unit, filepath.Join(logs, "node-"+strings.ReplaceAll(unit, "/", "-")+".txt"), skippedThroughNode)
		passed, total := 0, 0
		var names []string
		for name := range base.ok {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			total++
			if through.ok[name] {
				passed++
				continue
			}
			why := through.why[name]
			if why == "" {
				why = "did not run through the node (the unit skipped it, or stopped before it)"
			}
			failures = append(failures, fmt.Sprintf("- %s: %s: %s", unit, name, why))
		}
		share := 1.0
		if total > 0 {
			share = float64(passed) / float64(total)
		}
		if share < 0.95 {
			low = true
		}
		fmt.Fprintf(&report, "| %s | %d | %d | %.1f%% |\n", unit, total, passed, 100*share)
	}
	fmt.Fprintf(&report, "\nFailing through the node only:\n\n%s\n", strings.Join(failures, "\n"))
	if err := os.WriteFile(out, []byte(report.String()), 0o644); err != nil {
		t.Error(err)
	}
	t.Log("\n" + report.String())
	if low {
		t.Errorf("a unit passes fewer than 95%% of its tests through the node (report: %s)", out)
	}
}

// unitResult is one run of a unit: the tests that passed, and why the
// others failed.
type unitResult struct {
	ok  map[string]bool
	why map[string]string
}

var (
	ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")
	testLine   = regexp.MustCompile(`^\[(ok|err|exception|skip)\]: (.*?)(?: \(\d+ ms\)| in tests/\S+)?$`)
)

// skippedThroughNode are the tests skipped through the node, and why.
// A test that fails inside MULTI leaves its connection there, and every
// test after it in the unit fails too; these could not pass through a
// node, so they are skipped rather than run to take the rest down with
// them.
var skippedThroughNode = map[string]string{
	// It sends a blocking command on two connections back to back, with
	// nothing to wait for the first to block, and expects the first sent
	// to be served first. redis-server reads its connections in one loop,
	// in order; the node reads each connection on its own, so the second
	// may block first, and the first then waits forever (no timeout).
	"BRPOPLPUSH with multiple blocked clients": "two blocking commands sent back to back on two connections: the node may block the second first, and the first then waits forever",
}

// runRedisUnit runs one unit against addr, in external-server mode with a
// single database, without the tests of skip. Tests that need DEBUG or
// replication are left out by their tags; --durable makes a test that gets
// an error fail alone instead of ending its unit, and a minute with no test
// ending ends the unit (a test that hangs).
func runRedisUnit(t *testing.T, src, addr, unit, logFile string, skip map[string]string) unitResult {
	host, port, _ := strings.Cut(addr, ":")
	// The suite's test server listens from 32 below its base port (21079
	// by default): a port of its own, so that two runs at once do not meet.
	free, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	_, freePort, _ := strings.Cut(free, ":")
	base, _ := strconv.Atoi(freePort)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	args := []string{"tests/test_helper.tcl", "--host", host, "--port", port, "--singledb",
		"--single", "unit/" + unit, "--clients", "1", "--durable", "--tags", "-needs:repl", "--tags", "-needs:debug",
		"--timeout", "60", "--baseport", strconv.Itoa(base + 32)}
	for name := range skip {
		args = append(args, "--skiptest", name)
	}
	cmd := exec.CommandContext(ctx, "tclsh", args...)
	cmd.Dir = src
	// The suite starts a client process of its own: stop the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	outText, _ := cmd.CombinedOutput() // failing tests make it exit non-zero
	os.WriteFile(logFile, outText, 0o644)
	res := unitResult{ok: map[string]bool{}, why: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(ansiEscape.ReplaceAllString(string(outText), "")))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	last := ""
	for sc.Scan() {
		line := sc.Text()
		if m := testLine.FindStringSubmatch(line); m != nil {
			last = m[2]
			switch m[1] {
			case "ok":
				res.ok[last] = true
			case "skip":
				res.why[last] = "skipped by the suite"
				if why, ok := skip[last]; ok {
					res.why[last] = "skipped: " + why
				}
				last = ""
			default:
				res.why[last] = ""
			}
			continue
		}
		if last != "" && res.why[last] == "" && !res.ok[last] && strings.TrimSpace(line) != "" {
			res.why[last] = strings.TrimSpace(line) // the first line of the failure's detail
		}
	}
	if len(res.ok) == 0 {
		t.Logf("unit %s against %s passed nothing; its output:\n%s", unit, addr, outText)
	}
	return res
}

// redisTestSources returns the directory of the Redis sources (with their
// tests) of the installed redis-server, fetching them when needed.
func redisTestSources(t *testing.T) string {
	t.Helper()
	version := debianVersion(t)
	base := os.Getenv("TROOP_REDIS_SRC")
	if base == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		base = filepath.Join(cache, "troop", "redis-src")
	}
	upstream := version
	if i := strings.Index(upstream, ":"); i >= 0 {
		upstream = upstream[i+1:]
	}
	upstream, _, _ = strings.Cut(upstream, "-")
	dir := filepath.Join(base, "redis-"+upstream)
	if _, err := os.Stat(filepath.Join(dir, "tests", "test_helper.tcl")); err == nil {
		return dir
	}
	if _, err := exec.LookPath("tclsh"); err != nil {
		t.Fatal("tclsh is not installed, and Redis's tests are Tcl: install Debian's tcl (make test does)")
	}
	apt := filepath.Join(base, "apt")
	for _, d := range []string{"lists/partial", "sourceparts"} {
		if err := os.MkdirAll(filepath.Join(apt, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// deb-src entries for the suites the system installs from.
	sources, err := os.ReadFile("/etc/apt/sources.list.d/debian.sources")
	if err != nil {
		t.Skipf("no /etc/apt/sources.list.d/debian.sources to derive a deb-src entry from: %v", err)
	}
	debSrc := strings.ReplaceAll(string(sources), "Types: deb\n", "Types: deb-src\n")
	if err := os.WriteFile(filepath.Join(apt, "sourceparts", "deb-src.sources"), []byte(debSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	aptArgs := []string{"-o", "Dir::Etc::sourcelist=/dev/null", "-o", "Dir::Etc::sourceparts=" + filepath.Join(apt, "sourceparts"),
		"-o", "Dir::State::Lists=" + filepath.Join(apt, "lists")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "apt-get", append(aptArgs, "update")...).CombinedOutput(); err != nil {
		t.Fatalf("apt-get update with a private deb-src entry: %v\n%s", err, out)
	}
	get := exec.CommandContext(ctx, "apt-get", append(aptArgs, "source", "--download-only", "redis="+version)...)
	get.Dir = base
	if out, err := get.CombinedOutput(); err != nil {
		t.Fatalf("apt-get source redis=%s: %v\n%s", version, err, out)
	}
	tarball := filepath.Join(base, "redis_"+upstream+".orig.tar.gz")
	if out, err := exec.CommandContext(ctx, "tar", "-xzf", tarball, "-C", base).CombinedOutput(); err != nil {
		t.Fatalf("tar -xzf %s: %v\n%s", tarball, err, out)
	}
	return dir
}

// adaptRedisTests turns off the suite's one override troop does not pass
// on, `save ""` (snapshots off: troop's redis-servers run without them
// anyway), so the units that ask for it run.
func adaptRedisTests(t *testing.T, src string) {
	files, _ := filepath.Glob(filepath.Join(src, "tests", "unit", "type", "*.tcl"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if a := strings.ReplaceAll(string(b), `start_server [list overrides [list save ""] ] {`, `start_server {} {`); a != string(b) {
			if err := os.WriteFile(f, []byte(a), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// debianVersion is the Debian version of the installed redis-server.
func debianVersion(t *testing.T) string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "redis-server").Output()
	if err != nil || len(out) == 0 {
		t.Skipf("redis-server is not a Debian package here (dpkg-query: %v)", err)
	}
	return string(out)
}

func redisVersion(t *testing.T) string {
	out, _ := exec.Command(testredis.Path(t), "--version").Output()
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(string(out))
}
