package lab

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every test here starts real redis-servers on free loopback ports. Cleanup
// goes by PID (with the /proc start time, so a reused PID is never hit) and
// is registered before anything can fail; every wait is bounded.

func needRedis(t *testing.T) {
	t.Helper()
	if _, err := FindRedisServer(""); err != nil {
		t.Skip(err)
	}
}

// standIn runs a redis-server on the node's listen address in place of
// troop node: it answers PING, which is all the supervisor looks at.
func standIn(n Node) []string { return standInNode(n.Listen, n.Dir) }

// pidRec is a process to reap at the end of a test.
type pidRec struct {
	pid   int
	ticks uint64
}

// reaper SIGKILLs, at cleanup, every recorded process still alive.
type reaper struct{ pids []pidRec }

func newReaper(t *testing.T) *reaper {
	r := &reaper{}
	t.Cleanup(func() {
		for _, p := range r.pids {
			if ours(p.pid, p.ticks) {
				t.Logf("cleanup: SIGKILL leftover pid %d", p.pid)
				syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	})
	return r
}

func (r *reaper) add(pid int, ticks uint64) {
	if pid > 0 {
		r.pids = append(r.pids, pidRec{pid, ticks})
	}
}

// addStatus records every process of a status, the supervisor too unless
// it is this test process.
func (r *reaper) addStatus(st *Status) {
	if st.SupervisorPID != os.Getpid() {
		r.add(st.SupervisorPID, st.SupervisorTicks)
	}
	for _, n := range st.Nodes {
		r.add(n.NodeP.PID, n.NodeP.StartTicks)
		r.add(n.RedisP.PID, n.RedisP.StartTicks)
	}
}

func startLab(t *testing.T, spec Spec) (*Lab, *reaper) {
	t.Helper()
	needRedis(t)
	r := newReaper(t)
	l, err := Start(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	r.addStatus(l.Status())
	t.Cleanup(func() {
		if err := l.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return l, r
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !waitUntil(cond, d) {
		t.Fatalf("%s: not within %s", what, d)
	}
}

// aliveOf lists the processes of pids still alive, with their command lines.
func aliveOf(pids []int) []string {
	var out []string
	for _, p := range pids {
		if alive(p) {
			out = append(out, strconv.Itoa(p)+" "+cmdline(p))
		}
	}
	return out
}

func alive(pid int) bool { _, ok := startTicks(pid); return ok }

func pingOK(addr string) bool { return Ping(context.Background(), addr) == nil }

func allPIDs(st *Status) []int {
	var pids []int
	for _, n := range st.Nodes {
		for _, p := range []int{n.NodePID, n.RedisPID} {
			if p > 0 {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

func TestLabReplaceStopStart(t *testing.T) {
	const replaceAfter = 500 * time.Millisecond
	dir := t.TempDir()
	l, r := startLab(t, Spec{Dir: dir, ReplaceAfter: replaceAfter, NodeCommand: standIn})

	st := l.Status()
	if len(st.Nodes) != 3 || len(l.Nodes()) != 3 {
		t.Fatalf("%d nodes, want 3", len(st.Nodes))
	}
	for _, n := range st.Nodes {
		if n.State != "up" || n.NodePID == 0 || n.RedisPID == 0 {
			t.Errorf("%s: state %s pids %d/%d", n.Name, n.State, n.NodePID, n.RedisPID)
		}
		for _, a := range []string{n.Listen, n.Redis} {
			if err := Ping(t.Context(), a); err != nil {
				t.Errorf("%s: %v", n.Name, err)
			}
		}
	}
	disk, err := Load(dir)
	if err != nil || disk.SupervisorPID != os.Getpid() || len(disk.Nodes) != 3 || disk.Nodes[2].Name != "dc1-rack3-1" {
		t.Fatalf("lab.json: %+v, %v", disk, err)
	}

	if _, err := Start(t.Context(), Spec{Dir: dir, NodeCommand: standIn}); err == nil || !strings.Contains(err.Error(), "already runs") {
		t.Fatalf("a second lab in the same directory: %v", err)
	}

	// A redis-server killed is replaced, with a new PID, after the delay.
	n := st.Nodes[1]
	killedAt := time.Now()
	pid, err := l.Kill(n.Name, RedisProc)
	if err != nil || pid != n.RedisPID {
		t.Fatalf("Kill = %d, %v; want pid %d", pid, err, n.RedisPID)
	}
	var now NodeStatus
	waitFor(t, replaceAfter+2*time.Second, "redis replaced", func() bool {
		now = l.Status().Nodes[1]
		return now.RedisPID != 0 && now.RedisPID != pid && pingOK(n.Redis)
	})
	r.add(now.RedisPID, now.RedisP.StartTicks)
	if took := time.Since(killedAt); took < replaceAfter {
		t.Errorf("replaced after %s, before the delay %s", took, replaceAfter)
	}
	if alive(pid) || now.RedisP.Restarts != 1 || !strings.Contains(now.RedisP.LastExit, "killed") {
		t.Errorf("after replacement: old pid alive %v, restarts %d, last exit %q", alive(pid), now.RedisP.Restarts, now.RedisP.LastExit)
	}
	logb, _ := os.ReadFile(SupervisorLog(dir))
	if !regexp.MustCompile(`msg=replaced node=dc1-rack2-1 proc=redis old_pid=` + strconv.Itoa(pid) + ` exit="signal: killed" died_at=\S+ new_pid=` + strconv.Itoa(now.RedisPID)).Match(logb) {
		t.Errorf("supervisor.log has no replacement line for pid %d:\n%s", pid, logb)
	}

	// A node killed too.
	pid, err = l.Kill(n.Name, NodeProc)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, replaceAfter+2*time.Second, "node replaced", func() bool {
		now = l.Status().Nodes[1]
		return now.NodePID != 0 && now.NodePID != pid && pingOK(n.Listen)
	})
	r.add(now.NodePID, now.NodeP.StartTicks)

	// Stopped stays down, well past the replacement delay.
	pid = now.NodePID
	if err := l.StopNode(n.Name, NodeProc); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("pid %d alive after StopNode", pid)
	}
	time.Sleep(2 * replaceAfter)
	now = l.Status().Nodes[1]
	if now.NodeP.State != Stopped || now.NodePID != 0 || pingOK(n.Listen) || now.State != "degraded" {
		t.Fatalf("after stop: %+v", now)
	}
	if _, err := l.Kill(n.Name, NodeProc); err == nil {
		t.Error("Kill of a stopped node succeeded")
	}
	if err := l.StartNode(n.Name, NodeProc); err != nil {
		t.Fatal(err)
	}
	now = l.Status().Nodes[1]
	r.add(now.NodePID, now.NodeP.StartTicks)
	if !pingOK(n.Listen) || now.NodeP.State != Running || now.NodeP.Restarts != 1 {
		t.Fatalf("after start: %+v", now)
	}

	if _, err := l.Kill("dc9-rack1-1", NodeProc); err == nil || !strings.Contains(err.Error(), "dc1-rack1-1") {
		t.Errorf("Kill of an unknown node: %v", err)
	}

	// Stop leaves no process of the lab alive.
	pids := allPIDs(l.Status())
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if alive(p) {
			t.Errorf("pid %d alive after Stop", p)
		}
	}
	if disk, _ := Load(dir); disk.SupervisorPID != 0 || len(allPIDs(disk)) != 0 {
		t.Errorf("lab.json after Stop: supervisor %d, pids %v", disk.SupervisorPID, allPIDs(disk))
	}
	if err := l.StartNode(n.Name, NodeProc); err == nil {
		t.Error("StartNode after Stop succeeded")
	}
}

// startedPIDs reads the PIDs the supervisor log says it started.
func startedPIDs(t *testing.T, dir string) []int {
	b, err := os.ReadFile(SupervisorLog(dir))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, m := range regexp.MustCompile(`msg=started .* pid=(\d+)`).FindAllSubmatch(b, -1) {
		p, _ := strconv.Atoi(string(m[1]))
		pids = append(pids, p)
	}
	return pids
}

func TestStartFailureNamesTheProcess(t *testing.T) {
	needRedis(t)
	for _, c := range []struct {
		name    string
		timeout time.Duration // room for the redis-server on a loaded machine
		cmd     []string
		want    []string
	}{
		{"exits", 10 * time.Second, []string{"sh", "-c", "echo boom >&2; exit 3"}, []string{"dc1-rack1-1 node", "exited: exit status 3", "boom"}},
		{"silent", 3 * time.Second, []string{"sleep", "30"}, []string{"dc1-rack1-1 node", "not ready within 3s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			start := time.Now()
			_, err := Start(t.Context(), Spec{Dir: dir, Shape: Shape{1, 1, 1}, ReadyTimeout: c.timeout,
				NodeCommand: func(Node) []string { return c.cmd }})
			pids := startedPIDs(t, dir)
			for _, p := range pids {
				if alive(p) {
					syscall.Kill(p, syscall.SIGKILL)
					t.Errorf("pid %d left running after a failed Start", p)
				}
			}
			if err == nil {
				t.Fatal("Start succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
			if len(pids) != 2 {
				t.Errorf("started %v, want a redis-server and a node", pids)
			}
			if took := time.Since(start); took > c.timeout+8*time.Second {
				t.Errorf("Start took %s to fail", took)
			}
		})
	}
}

// upDetached runs Up with this test binary standing in for troop.
func upDetached(t *testing.T, r *reaper, dir string, shape Shape) (*Status, bool, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	st, already, err := Up(t.Context(), Spec{Dir: dir, Shape: shape, Troop: exe, ReplaceAfter: 500 * time.Millisecond, StopGrace: 2 * time.Second})
	if err == nil {
		r.addStatus(st)
	}
	return st, already, err
}

func TestUpDetached(t *testing.T) {
	needRedis(t)
	dir := t.TempDir()
	r := newReaper(t)
	t.Cleanup(func() { Down(context.Background(), dir) })

	st, already, err := upDetached(t, r, dir, Shape{1, 2, 1})
	if err != nil {
		t.Fatal(err)
	}
	if already || st.SupervisorPID == os.Getpid() || !strings.Contains(cmdline(st.SupervisorPID), "lab supervise --dir "+dir) {
		t.Fatalf("up: already %v, supervisor pid %d %q", already, st.SupervisorPID, cmdline(st.SupervisorPID))
	}
	for _, n := range st.Nodes {
		if !pingOK(n.Listen) || !pingOK(n.Redis) {
			t.Errorf("%s does not answer PING", n.Name)
		}
	}

	// Up again: same shape is fine, another is an error naming both.
	if st2, already, err := upDetached(t, r, dir, Shape{1, 2, 1}); err != nil || !already || st2.SupervisorPID != st.SupervisorPID {
		t.Errorf("second up: already %v, err %v", already, err)
	}
	_, _, err = upDetached(t, r, dir, Shape{1, 3, 1})
	if err == nil || !strings.Contains(err.Error(), "1 dc x 2 racks") || !strings.Contains(err.Error(), "1 dc x 3 racks") {
		t.Errorf("up with another shape: %v", err)
	}

	// Kill over the socket; the supervisor replaces it.
	c, err := Dial(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	name, old := st.Nodes[0].Name, st.Nodes[0].NodePID
	if msg, err := c.Kill(t.Context(), name, NodeProc); err != nil || !strings.Contains(msg, strconv.Itoa(old)) {
		t.Fatalf("kill: %q, %v", msg, err)
	}
	waitFor(t, 2500*time.Millisecond, "node replaced", func() bool {
		live, err := Inspect(t.Context(), dir)
		if err == nil {
			r.addStatus(live)
		}
		return err == nil && live.Nodes[0].NodePID != old && live.Nodes[0].NodePID != 0 && pingOK(st.Nodes[0].Listen)
	})
	if _, err := c.Stop(t.Context(), name, RedisProc); err != nil {
		t.Fatal(err)
	}
	if pingOK(st.Nodes[0].Redis) {
		t.Error("redis answers after stop")
	}
	if _, err := c.Start(t.Context(), name, RedisProc); err != nil || !pingOK(st.Nodes[0].Redis) {
		t.Fatalf("start: %v", err)
	}
	if _, err := c.Kill(t.Context(), "nope", NodeProc); err == nil || !strings.Contains(err.Error(), `no node "nope"`) {
		t.Errorf("kill of an unknown node: %v", err)
	}

	env, err := Env(dir)
	if err != nil || env[0] != "TROOP_NODES="+st.Nodes[0].Listen+","+st.Nodes[1].Listen || env[3] != "TROOP_LAB="+dir {
		t.Errorf("env: %q, %v", env, err)
	}

	// Down leaves nothing of the lab alive, keeps logs, and can run twice.
	live, err := Inspect(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	r.addStatus(live)
	pids := append(allPIDs(live), live.SupervisorPID)
	if msg, err := Down(t.Context(), dir); err != nil || !strings.Contains(msg, "is down") {
		t.Fatalf("down: %q, %v", msg, err)
	}
	for _, p := range pids {
		if alive(p) {
			t.Errorf("pid %d alive after down", p)
		}
	}
	if _, err := os.Stat(SocketFile(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	for _, f := range []string{SupervisorLog(dir), st.Nodes[0].NodeLog(), st.Nodes[0].RedisLog()} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("log gone: %v", err)
		}
	}
	if msg, err := Down(t.Context(), dir); err != nil || !strings.Contains(msg, "not running") {
		t.Errorf("second down: %q, %v", msg, err)
	}
	if _, err := Dial(t.Context(), dir); err == nil {
		t.Error("a supervisor answers after down")
	}
}

func TestSupervisorDeathTakesChildren(t *testing.T) {
	needRedis(t)
	dir := t.TempDir()
	r := newReaper(t)
	t.Cleanup(func() { Down(context.Background(), dir) })

	st, _, err := upDetached(t, r, dir, Shape{1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(st.SupervisorPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(func() bool { return len(aliveOf(append(allPIDs(st), st.SupervisorPID))) == 0 }, 3*time.Second) {
		t.Fatalf("alive 3s after their supervisor died: %q", aliveOf(append(allPIDs(st), st.SupervisorPID)))
	}
	gone, err := Inspect(t.Context(), dir)
	if err != nil || gone.SupervisorRunning || gone.Nodes[0].NodeP.State != Dead || gone.Nodes[0].State != "down" {
		t.Fatalf("status after the supervisor died: %+v, %v", gone, err)
	}

	// A new up in the same directory takes over.
	st2, already, err := upDetached(t, r, dir, Shape{1, 1, 1})
	if err != nil || already || st2.SupervisorPID == st.SupervisorPID || !pingOK(st2.Nodes[0].Listen) {
		t.Fatalf("up after the supervisor died: already %v, %v", already, err)
	}
	if _, err := Down(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(allPIDs(st2), st2.SupervisorPID) {
		if alive(p) {
			t.Errorf("pid %d alive after down", p)
		}
	}
}

// Nodes run troop-node when troop's directory has an executable one, else
// troop's own node verb.
func TestNodeProgram(t *testing.T) {
	dir := t.TempDir()
	troop, lean := filepath.Join(dir, "troop"), filepath.Join(dir, "troop-node")
	if err := os.WriteFile(troop, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		make func() error
		want []string
	}{
		{"no troop-node", func() error { return nil }, []string{troop, "node"}},
		{"a troop-node that does not execute", func() error { return os.WriteFile(lean, nil, 0o644) }, []string{troop, "node"}},
		{"a troop-node", func() error { return os.Chmod(lean, 0o755) }, []string{lean}},
	} {
		if err := c.make(); err != nil {
			t.Fatal(err)
		}
		if got := nodeProgram(troop); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.what, got, c.want)
		}
	}
}

// A lab whose nodes listen at hosts of their own (Spec.Hosts): each node's
// listeners and its peers' seeds are at its host, its redis-server stays on
// 127.0.0.1, and a node killed is replaced at the same address. The stand-in
// nodes answer PING only where they listen, so a node left on 127.0.0.1
// would not be ready.
func TestLabHosts(t *testing.T) {
	hosts := []string{"127.77.1.2", "127.77.1.3", "127.77.1.4"}
	l, _ := startLab(t, Spec{Dir: t.TempDir(), ReplaceAfter: 200 * time.Millisecond, NodeCommand: standIn, Hosts: hosts})
	nodes := l.Nodes()
	for i, n := range nodes {
		for _, a := range []string{n.Listen, n.DynListen, n.StatsListen} {
			if host, _, _ := strings.Cut(a, ":"); host != hosts[i] {
				t.Errorf("%s listens at %s, want host %s", n.Name, a, hosts[i])
			}
		}
		if !strings.HasPrefix(n.Redis, "127.0.0.1:") {
			t.Errorf("%s's redis-server at %s, want 127.0.0.1", n.Name, n.Redis)
		}
		if !pingOK(n.Listen) {
			t.Errorf("%s does not answer PING at %s", n.Name, n.Listen)
		}
		cfg, err := os.ReadFile(n.Config)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range nodes {
			if want := "  - " + p.DynListen + ":"; p.Name != n.Name && !strings.Contains(string(cfg), want) {
				t.Errorf("%s's config has no seed %s:\n%s", n.Name, p.DynListen, cfg)
			}
		}
	}
	n := nodes[1]
	pid, err := l.Kill(n.Name, NodeProc)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, n.Name+" replaced at "+n.Listen, func() bool {
		st, err := l.Status().Node(n.Name)
		return err == nil && st.NodePID != pid && st.NodePID != 0 && pingOK(n.Listen)
	})

	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Hosts: hosts[:2]}, "lab hosts: 2 for 3 positions"},
		{Spec{Hosts: hosts, Netns: true}, "lab hosts: address mode gives each position an address of its own network"},
		{Spec{Hosts: []string{"127.77.1.2", "pod-1", "127.77.1.4"}}, `lab hosts: ParseAddr("pod-1")`},
	} {
		tc.spec.Dir, tc.spec.NodeCommand = t.TempDir(), standIn
		if _, err := Start(t.Context(), tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start with hosts %q: %v, want an error saying %q", tc.spec.Hosts, err, tc.want)
		}
	}
}
