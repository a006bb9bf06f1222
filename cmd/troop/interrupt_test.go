package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/internal/testredis"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/ldfi"
	"github.com/troop-lab/troop/node"
)

// syncBuffer is a buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// verb is a troop verb running as a real process of the binary built from
// this tree.
type verb struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	err            error
}

// startVerb starts troop with args; the process is killed, by its PID,
// when the test ends if it still runs.
func startVerb(t *testing.T, args ...string) *verb {
	t.Helper()
	v := &verb{cmd: exec.Command(testlab.Troop(t), args...), done: make(chan struct{})}
	v.cmd.Stdout, v.cmd.Stderr = &v.stdout, &v.stderr
	if err := v.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { v.err = v.cmd.Wait(); close(v.done) }()
	t.Cleanup(func() {
		select {
		case <-v.done:
		default:
			v.cmd.Process.Kill()
			<-v.done
		}
	})
	return v
}

func (v *verb) output() string { return v.stdout.String() + v.stderr.String() }

// await waits until the verb printed want (on either stream).
func (v *verb) await(t *testing.T, want string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(v.output(), want) {
			return
		}
		select {
		case <-v.done:
			t.Fatalf("troop %s exited (%v) before printing %q:\n%s", strings.Join(v.cmd.Args[1:], " "), v.err, want, v.output())
		default:
		}
	}
	t.Fatalf("troop %s did not print %q within %v:\n%s", strings.Join(v.cmd.Args[1:], " "), want, within, v.output())
}

func (v *verb) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := v.cmd.Process.Signal(s); err != nil {
		t.Fatal(err)
	}
}

// exit waits for the verb to end and returns its exit status.
func (v *verb) exit(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-v.done:
	case <-time.After(within):
		t.Fatalf("troop %s still runs %v after the signal:\n%s", strings.Join(v.cmd.Args[1:], " "), within, v.output())
	}
	var ee *exec.ExitError
	if errors.As(v.err, &ee) {
		return ee.ExitCode()
	}
	if v.err != nil {
		t.Fatal(v.err)
	}
	return 0
}

func redisDo(t *testing.T, addr string, args ...string) string {
	t.Helper()
	c, err := client.NewPlain([]string{addr}, client.PlainOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	raw, err := c.Do(context.Background(), b...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return strings.TrimSpace(strings.TrimLeft(strings.SplitN(string(raw), "\r\n", 2)[0], ":+"))
}

// Interrupted by SIGINT or SIGTERM, troop bench stops at once, prints the
// table marked partial, writes the partial JSON and exits 130 or 143. A
// result path that cannot be written is refused before any load is sent.
func TestBenchInterrupt(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			r := testredis.Start(t)
			out := filepath.Join(t.TempDir(), "r.json")
			v := startVerb(t, "bench", "--target", r.Addr, "--duration", "1m", "--keys", "1000", "--out", out)
			for deadline := time.Now().Add(20 * time.Second); redisDo(t, r.Addr, "DBSIZE") == "0"; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no key written:\n%s", v.output())
				}
			}
			time.Sleep(500 * time.Millisecond) // some results for the partial table; the load runs a minute
			v.signal(t, tc.sig)
			if code := v.exit(t, 15*time.Second); code != tc.code {
				t.Fatalf("exit status %d, want %d:\n%s", code, tc.code, v.output())
			}
			if !strings.Contains(v.stdout.String(), "==== PARTIAL: interrupted") || !strings.Contains(v.stdout.String(), "partial result written to") {
				t.Errorf("the table is not marked partial:\n%s", v.output())
			}
			if strings.Contains(v.stderr.String(), "context canceled") {
				t.Errorf("the interrupt is reported as an error:\n%s", v.stderr.String())
			}
			f, err := os.Open(out)
			if err != nil {
				t.Fatalf("no partial result: %v\n%s", err, v.output())
			}
			defer f.Close()
			res, err := bench.ReadResult(f)
			if err != nil {
				t.Fatal(err)
			}
			if res.Stopped == "" || len(res.Totals) == 0 || res.Totals[0].Count == 0 || res.Totals[0].Seconds >= 60 {
				t.Errorf("partial result: stopped %q, totals %+v", res.Stopped, res.Totals)
			}
		})
	}
	t.Run("bad --out before any load", func(t *testing.T) {
		r := testredis.Start(t)
		v := startVerb(t, "bench", "--target", r.Addr, "--duration", "5s", "--out", filepath.Join(t.TempDir(), "no", "such", "r.json"))
		if code := v.exit(t, 10*time.Second); code != 1 || !strings.Contains(v.stderr.String(), "--out") {
			t.Fatalf("exit %d:\n%s", code, v.output())
		}
		if n := redisDo(t, r.Addr, "DBSIZE"); n != "0" {
			t.Errorf("%s keys written before the bad path was refused", n)
		}
	})
}

// The second signal forces the exit at once, in-process: real signals sent
// to this test process, caught by the handler the long verbs use.
func TestSecondInterruptForces(t *testing.T) {
	exited := make(chan int, 1)
	var stderr syncBuffer
	in := &interrupts{stderr: &stderr, exit: func(code int) { exited <- code }}
	ctx := in.catch(context.Background())
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first SIGINT did not end the context")
	}
	if in.signal() != os.Interrupt {
		t.Fatalf("caught %v", in.signal())
	}
	select {
	case code := <-exited:
		t.Fatalf("exited (%d) on the first signal", code)
	case <-time.After(100 * time.Millisecond):
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-exited:
		if code != 130 { // the status says what stopped the run: the first signal
			t.Errorf("forced exit %d, want 130", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second signal did not force the exit")
	}
	if !strings.Contains(stderr.String(), "SIGINT again to exit at once") || !strings.Contains(stderr.String(), "exiting now") {
		t.Errorf("messages: %q", stderr.String())
	}
}

// labPIDs are the processes of the lab of the run under out, once its
// state is written.
func labPIDs(t *testing.T, out string) []int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		dirs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "lab"))
		if len(dirs) != 1 {
			continue
		}
		st, err := lab.Load(dirs[0])
		if err != nil || len(st.Nodes) == 0 {
			continue
		}
		var pids []int
		for _, n := range st.Nodes {
			if n.NodePID > 0 && n.RedisPID > 0 {
				pids = append(pids, n.NodePID, n.RedisPID)
			}
		}
		if len(pids) == 2*len(st.Nodes) {
			return pids
		}
	}
	t.Fatalf("no lab state under %s", out)
	return nil
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func awaitGone(t *testing.T, pids []int, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		left := 0
		for _, p := range pids {
			if alive(p) {
				left++
			}
		}
		if left == 0 {
			return
		}
	}
	t.Fatalf("lab processes %v still run %v after troop run exited", pids, within)
}

// Interrupted during its baseline, troop run stops its lab, writes a
// report that says where it stopped with the baseline measured so far,
// and exits 130; interrupted twice, it exits at once, and its lab's
// processes die with it. For the second interrupt to come while the first
// is being handled, one of the lab's nodes is stopped (SIGSTOP) first: the
// clean stop then waits out its grace period for it, 5 s (a clean stop
// that ended within the 20 ms between the two interrupts failed the test).
func TestRunInterrupt(t *testing.T) {
	t.Run("once", func(t *testing.T) {
		out := t.TempDir()
		v := startVerb(t, "run", "--quick", "--loopback", "--out", out)
		v.await(t, "[1/7", time.Minute)
		pids := labPIDs(t, out)
		time.Sleep(2 * time.Second)
		v.signal(t, syscall.SIGINT)
		if code := v.exit(t, time.Minute); code != 130 {
			t.Fatalf("exit status %d, want 130:\n%s", code, v.output())
		}
		awaitGone(t, pids, 10*time.Second)
		data, err := os.ReadFile(filepath.Join(out, "report.json"))
		if err != nil {
			t.Fatalf("no report: %v\n%s", err, v.output())
		}
		for _, want := range []string{`"stopped": "interrupted during phase 1 of 7 (baseline)`, `"stopped": "interrupted `} {
			if !strings.Contains(string(data), want) {
				t.Errorf("report.json lacks %q", want)
			}
		}
		html, err := os.ReadFile(filepath.Join(out, "report.html"))
		if err != nil || !strings.Contains(string(html), "Partial report") {
			t.Errorf("report.html does not say it is partial (%v)", err)
		}
		if !strings.Contains(v.stdout.String(), "PARTIAL: interrupted during phase 1") {
			t.Errorf("the verdict printed does not say the run is partial:\n%s", v.output())
		}
	})
	t.Run("twice", func(t *testing.T) {
		out := t.TempDir()
		v := startVerb(t, "run", "--quick", "--loopback", "--out", out)
		v.await(t, "[1/7", time.Minute)
		pids := labPIDs(t, out)
		if err := syscall.Kill(pids[0], syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		v.signal(t, syscall.SIGINT)
		v.await(t, "SIGINT: stopping", time.Minute)
		v.signal(t, syscall.SIGINT)
		if code := v.exit(t, 5*time.Second); code != 130 || !strings.Contains(v.stderr.String(), "exiting now") {
			t.Fatalf("exit status %d, want 130 at once:\n%s", code, v.output())
		}
		awaitGone(t, pids, 10*time.Second)
	})
}

// Interrupted while a leased fault holds, troop chaos kill undoes it at
// once instead of at its lease's end, and exits 130.
func TestChaosKillInterrupt(t *testing.T) {
	l := startLab(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "chaos.yml")
	os.WriteFile(config, []byte(`leashed: false
groups:
  - name: rack2
    backend: lab
    selector: {rack: rack2}
    min_time_between_kills: 0
    max_terminations_per_day: 100
`), 0o644)
	db := filepath.Join(dir, "chaos.db")
	victim, _ := l.Node("dc1-rack2-1")
	v := startVerb(t, "chaos", "kill", "rack2", "--config", config, "--db", db, "--lab", l.Dir(), "--type", "pause", "--duration", "5m")
	leases, err := lease.Open(db + ".leases")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ls, _ := leases.List(); len(ls) == 1 && ls[0].Undo != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease:\n%s", v.output())
		}
	}
	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return lab.Ping(ctx, victim.Listen)
	}
	if ping() == nil {
		t.Fatal("the node answers during its pause")
	}
	v.signal(t, syscall.SIGINT)
	if code := v.exit(t, 30*time.Second); code != 130 {
		t.Fatalf("exit status %d, want 130:\n%s", code, v.output())
	}
	if !strings.Contains(v.stdout.String(), "undone early") {
		t.Errorf("chaos kill does not say it undid the pause:\n%s", v.output())
	}
	if err := ping(); err != nil {
		t.Errorf("the node is still paused after the interrupt: %v", err)
	}
	if ls, _ := leases.List(); len(ls) != 0 {
		t.Errorf("leases left: %v", ls)
	}
}

// Interrupted during a slow anti-entropy pass, troop repair ends the
// node's pass (no key is copied after it exits), says where it stopped and
// exits 130.
func TestRepairInterrupt(t *testing.T) {
	troop := testlab.Troop(t)
	l := testlab.Start(t, lab.Spec{ServeSocket: true, NodeCommand: func(n lab.Node) []string {
		conf, err := os.ReadFile(n.Config)
		if err != nil {
			t.Error(err)
		}
		slow := filepath.Join(n.Dir, "slow-repair.yml")
		// Background anti-entropy off: it would go on repairing after the
		// interrupted pass, which is what the test looks for.
		if err := os.WriteFile(slow, append(conf, "  troop_repair_keys_per_sec: 2\n  troop_anti_entropy_interval_ms: 0\n"...), 0o644); err != nil {
			t.Error(err)
		}
		return []string{troop, "node", "--config", slow}
	}})
	nodes := l.Nodes()
	const keys = 40
	for i := range keys {
		k := "repair:" + strconv.Itoa(i)
		if got := redisDo(t, nodes[0].Listen, "SET", k, "v"); got != "OK" {
			t.Fatalf("SET: %s", got)
		}
	}
	victim := nodes[2].Redis
	count := func() int {
		n, _ := strconv.Atoi(redisDo(t, victim, "DBSIZE"))
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); count() < 2*keys; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the writes did not reach %s: %d keys", nodes[2].Name, count())
		}
	}
	for i := range keys {
		k := "repair:" + strconv.Itoa(i)
		redisDo(t, victim, "DEL", k, node.VersionPrefix+k)
	}
	v := startVerb(t, "repair", "--lab", l.Dir())
	for deadline := time.Now().Add(30 * time.Second); count() < 4; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pass repairs nothing:\n%s", v.output())
		}
	}
	v.signal(t, syscall.SIGINT)
	if code := v.exit(t, 10*time.Second); code != 130 {
		t.Fatalf("exit status %d, want 130:\n%s", code, v.output())
	}
	if !strings.Contains(v.stderr.String(), "interrupted during the pass on") {
		t.Errorf("repair does not say where it stopped:\n%s", v.output())
	}
	// A negative window: once a write the pass had under way has landed,
	// 2 s (4 keys at 2 a second) in which no key may come back.
	time.Sleep(time.Second)
	at := count()
	time.Sleep(2 * time.Second)
	if after := count(); after != at || after >= 2*keys {
		t.Errorf("the pass went on after the interrupt: %d keys, then %d (of %d)", at, after, 2*keys)
	}
}

// Interrupted during its search, troop ldfi run stops at once, writes the
// report of the experiments it ran, saying where it stopped, and exits 130
// (its faults are request-scoped: nothing stays in place).
func TestLDFIRunInterrupt(t *testing.T) {
	l := startLab(t)
	out := filepath.Join(t.TempDir(), "ldfi")
	v := startVerb(t, "ldfi", "run", "--lab", l.Dir(), "--class", "GET at DC_QUORUM", "--fault", "delay:2s",
		"--probes", "20", "--out", out)
	time.Sleep(3 * time.Second)
	select {
	case <-v.done:
		t.Fatalf("the search ended before the interrupt:\n%s", v.output())
	default:
	}
	v.signal(t, syscall.SIGINT)
	if code := v.exit(t, 15*time.Second); code != 130 {
		t.Fatalf("exit status %d, want 130:\n%s", code, v.output())
	}
	if strings.Contains(v.stderr.String(), "context canceled") {
		t.Errorf("the interrupt is reported as an error:\n%s", v.stderr.String())
	}
	var r ldfi.Report
	if b, err := os.ReadFile(filepath.Join(out, "report.json")); err != nil {
		t.Errorf("no partial report: %v\n%s", err, v.output())
	} else if err := json.Unmarshal(b, &r); err != nil {
		t.Errorf("the partial report: %v", err)
	} else if r.Coverage.Complete || !strings.HasPrefix(r.Coverage.StopReason, "interrupted after") {
		t.Errorf("the partial report's coverage: %+v, want not complete, interrupted", r.Coverage)
	}
	if !strings.Contains(v.stdout.String(), "NOT complete (interrupted after") {
		t.Errorf("the printed report does not say where the search stopped:\n%s", v.output())
	}
}
