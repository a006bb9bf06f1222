package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/chaos/records"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

const chaosToken = "test-token-0123456789"

// TestChaosMonkeyLab runs the monkey as real troop processes against one
// real lab of three racks: a pause outlives a SIGKILLed monkey by no more
// than its lease, and troop chaos serve's REST API kills exactly one node,
// records its recovery, refuses what it must and obeys the global stop.
func TestChaosMonkeyLab(t *testing.T) {
	l := startLab(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "chaos.yml")
	// The group is not enabled, so the daemon plans nothing; on-demand
	// kills may still target it.
	body := fmt.Sprintf(`leashed: false
on_demand: true
token: %s
groups:
  - name: rack2
    backend: lab
    selector: {rack: rack2}
    min_time_between_kills: 0
    max_terminations_per_day: 100
`, chaosToken)
	if err := os.WriteFile(config, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "chaos.db")
	victim, ok := l.Node("dc1-rack2-1")
	if !ok {
		t.Fatal("no dc1-rack2-1")
	}
	pids := func() map[string]int {
		out := map[string]int{}
		for _, n := range l.Status().Nodes {
			out[n.Name] = n.NodePID
		}
		return out
	}
	ping := func(within time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		return lab.Ping(ctx, victim.Listen)
	}

	t.Run("pause undone after SIGKILL of the monkey", func(t *testing.T) {
		before := pids()
		const pauseFor = 3 * time.Second
		kill := exec.Command(testlab.Troop(t), "chaos", "kill", "rack2", "--config", config, "--db", db,
			"--lab", l.Dir(), "--type", "pause", "--duration", pauseFor.String())
		var out bytes.Buffer
		kill.Stdout, kill.Stderr = &out, &out
		if err := kill.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kill.Process.Kill(); kill.Wait() })
		leases, _ := lease.Open(db + ".leases")
		var ls []chaos.Lease
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if ls, _ = leases.List(); len(ls) == 1 && ls[0].Undo != nil {
				break
			}
		}
		if len(ls) != 1 || ls[0].Undo == nil {
			t.Fatalf("no lease with undo data appeared: %v\n%s", ls, out.String())
		}
		leaseID := ls[0].ID
		kill.Process.Signal(syscall.SIGKILL)
		kill.Wait()
		if ping(300*time.Millisecond) == nil {
			t.Fatal("the node answers PING during its pause")
		}
		// The watchdog resumes it at the lease's end; wide margin for a
		// loaded machine.
		var err error
		for deadline := ls[0].Until.Add(15 * time.Second); time.Now().Before(deadline); {
			if err = ping(time.Second); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("node still paused %v after its lease ended: %v", time.Since(ls[0].Until), err)
		}
		if resumed := time.Now(); resumed.Before(ls[0].Until) {
			t.Errorf("resumed at %v, before the lease's end %v", resumed, ls[0].Until)
		}
		// The watchdog removes the lease, then its log, and exits.
		logPath := filepath.Join(leases.Dir(), leaseID+".log")
		var logErr error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			ls, _ = leases.List()
			if _, logErr = os.Stat(logPath); len(ls) == 0 && logErr != nil {
				break
			}
		}
		if len(ls) != 0 {
			t.Errorf("lease left after its revert: %v", ls)
		}
		if logErr == nil {
			t.Error("watchdog log left after a successful revert")
		}
		if after := pids(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("a pause changed PIDs: %v -> %v", before, after)
		}
	})

	t.Run("stop reverts an active pause", func(t *testing.T) {
		kill := exec.Command(testlab.Troop(t), "chaos", "kill", "rack2", "--config", config, "--db", db,
			"--lab", l.Dir(), "--type", "pause", "--duration", "1m")
		var out bytes.Buffer
		kill.Stdout, kill.Stderr = &out, &out
		if err := kill.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kill.Process.Kill(); kill.Wait() })
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && ping(200*time.Millisecond) == nil; {
			time.Sleep(20 * time.Millisecond)
		}
		if ping(200*time.Millisecond) == nil {
			t.Fatalf("the node was not paused\n%s", out.String())
		}
		chaosSwitch(t, "stop", "--config", config, "--db", db, "--lab", l.Dir())
		if err := ping(5 * time.Second); err != nil {
			t.Fatalf("the pause outlived the global stop: %v", err)
		}
		awaitRecovered(t, kill, &out, 20*time.Second)
		chaosSwitch(t, "resume", "--config", config, "--db", db, "--lab", l.Dir())
	})

	t.Run("serve", func(t *testing.T) {
		base := startServe(t, config, db, l.Dir())
		post := func(path, token, body string) (int, chaos.Termination) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var term chaos.Termination
			b, _ := io.ReadAll(resp.Body)
			json.Unmarshal(b, &term)
			return resp.StatusCode, term
		}
		list := func(query string) []chaos.Termination {
			t.Helper()
			resp, err := http.Get(base + "/api/v1/chaos?" + query)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var ts []chaos.Termination
			if err := json.NewDecoder(resp.Body).Decode(&ts); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET list?%s: %s, %v", query, resp.Status, err)
			}
			return ts
		}
		before := pids()
		start := time.Now().UTC()
		kill := `{"group": "rack2", "type": "terminate"}`
		if code, _ := post("/api/v1/chaos", "", kill); code != http.StatusUnauthorized {
			t.Errorf("POST without a token: %d, want 401", code)
		}
		if code, _ := post("/api/v1/chaos", "wrong-token-0123456789", kill); code != http.StatusForbidden {
			t.Errorf("POST with a wrong token: %d, want 403", code)
		}
		if code, _ := post("/api/v1/chaos", chaosToken, `{"group": "nope"}`); code != http.StatusNotFound {
			t.Errorf("POST for an unknown group: %d, want 404", code)
		}
		if got := list("since=" + start.Format(time.RFC3339Nano)); len(got) != 0 || fmt.Sprint(pids()) != fmt.Sprint(before) {
			t.Fatalf("refused requests left records %+v or killed: %v -> %v", got, before, pids())
		}

		// The global stop, through the verb and the server.
		stop := newChaosStopCmd()
		stop.SetArgs([]string{"--config", config, "--server", base})
		var out bytes.Buffer
		stop.SetOut(&out)
		if err := stop.Execute(); err != nil || !strings.Contains(out.String(), "stopped true") {
			t.Fatalf("chaos stop: %v %s", err, out.String())
		}
		if code, term := post("/api/v1/chaos", chaosToken, kill); code != http.StatusConflict || term.Reason != chaos.Stopped {
			t.Errorf("kill while stopped: %d %+v, want 409 skipped stopped", code, term)
		}
		// Resume through the database, as without a server.
		resume := newChaosResumeCmd()
		resume.SetArgs([]string{"--config", config, "--db", db, "--lab", l.Dir()})
		resume.SetOut(&out)
		if err := resume.Execute(); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(pids()) != fmt.Sprint(before) {
			t.Fatalf("killed while stopped: %v -> %v", before, pids())
		}

		code, term := post("/api/v1/chaos", chaosToken, kill)
		if code != http.StatusOK || term.Outcome != chaos.Executed || term.Instance.ID != victim.Name || term.ID == 0 {
			t.Fatalf("kill after resume: %d %+v", code, term)
		}
		// The supervisor brings it back; serve records the recovery.
		var rec []chaos.Termination
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if rec = list("group=rack2&type=terminate&since=" + start.Format(time.RFC3339Nano)); len(rec) == 2 && rec[1].Recovery > 0 {
				break
			}
		}
		if len(rec) != 2 || rec[0].Reason != chaos.Stopped || rec[1].ID != term.ID || rec[1].Recovery <= 0 {
			t.Fatalf("records of group rack2: %+v; want the stopped kill, then the executed one with its recovery", rec)
		}
		t.Logf("recovery recorded: %v", rec[1].Recovery)
		if rec[1].Recovery < 3*time.Second {
			t.Errorf("recovery %v shorter than the lab's replace-after (3s)", rec[1].Recovery)
		}
		after := pids()
		for name, pid := range before {
			if changed := after[name] != pid; changed != (name == victim.Name) {
				t.Errorf("%s: PID %d -> %d; want only %s replaced", name, pid, after[name], victim.Name)
			}
		}
		if got := list("type=pause&group=rack2&since=" + start.Format(time.RFC3339Nano)); len(got) != 0 {
			t.Errorf("type=pause lists %+v", got)
		}
		if got := list("group=other"); len(got) != 0 {
			t.Errorf("group=other lists %+v", got)
		}
		if got := list("since=" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); len(got) != 0 {
			t.Errorf("since the future lists %+v", got)
		}
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		metrics, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(metrics), `troop_chaos_terminations{group="rack2",outcome="executed",reason=""}`) ||
			!strings.Contains(string(metrics), "troop_chaos_stopped 0") {
			t.Errorf("metrics:\n%s", metrics)
		}
		store, err := records.Open(db, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if all, _ := store.Terminations(context.Background(), chaos.Query{Kind: chaos.Pause}); len(all) != 2 || all[0].Outcome != chaos.Executed || all[1].Outcome != chaos.Executed {
			t.Errorf("the pauses of the first subtests are not recorded as executed: %+v", all)
		}
	})
}

// startServe runs troop chaos serve as a process on a free port, stopped
// (SIGTERM, then SIGKILL) when the test ends, and returns its base URL.
func startServe(t *testing.T, config, db, labDir string) string {
	t.Helper()
	cmd := exec.Command(testlab.Troop(t), "chaos", "serve", "--config", config, "--db", db, "--lab", labDir, "--listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("chaos serve exited with %v\n%s", err, logs.String())
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("chaos serve ignored SIGTERM\n%s", logs.String())
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
				addr <- strings.Fields(rest)[0]
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(20 * time.Second):
		t.Fatalf("chaos serve did not say where it listens\n%s", logs.String())
	}
	return ""
}

// schedule --dry-run=false stores the plans it prints, for serve to follow.
func TestChaosScheduleStores(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "chaos.yml")
	os.WriteFile(config, []byte("groups: [{name: g, backend: lab, enabled: true, probability: 1}]\n"), 0o644)
	run := func(args ...string) {
		t.Helper()
		cmd := newChaosScheduleCmd()
		cmd.SetArgs(append([]string{"--config", config, "--date", "2026-11-23", "--days", "3", "--seed", "7"}, args...))
		cmd.SetOut(io.Discard)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if _, err := os.Stat(filepath.Join(dir, "chaos.db")); err == nil {
		t.Fatal("a dry run created the records database")
	}
	run("--dry-run=false")
	store, err := records.Open(filepath.Join(dir, "chaos.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg, _ := chaos.LoadConfig(config)
	from := chaos.Date{Year: 2026, Month: 11, Day: 23}
	for i, want := range chaos.PlanDays(cfg, from, 3, nil, 7) {
		got, found, err := store.Plan(context.Background(), from.AddDays(i))
		if err != nil || !found || len(got) != len(want) || len(got) != 1 || !got[0].At.Equal(want[0].At) || got[0].Pick != want[0].Pick {
			t.Errorf("day %d: stored %+v (%v, %v), want %+v", i, got, found, err, want)
		}
	}
}

// chaosSwitch runs troop chaos stop or resume in this process.
func chaosSwitch(t *testing.T, verb string, args ...string) {
	t.Helper()
	cmd := newChaosSwitchCmd(verb == "stop")
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("chaos %s: %v", verb, err)
	}
}

// awaitRecovered waits for troop chaos kill to see its group recovered,
// say so and exit, well before its fault's lease would have ended.
func awaitRecovered(t *testing.T, kill *exec.Cmd, out fmt.Stringer, within time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- kill.Wait() }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), "recovered in") {
			t.Errorf("chaos kill: %v\n%s", err, out.String())
		}
	case <-time.After(within):
		t.Errorf("chaos kill still waits %v after the stop reverted its fault\n%s", within, out.String())
	}
}
