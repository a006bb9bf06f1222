package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/fault"
	"github.com/troop-lab/troop/chaos/labchaos"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/internal/testlab"
	"github.com/troop-lab/troop/lab"
)

// TestChaosNetworkFaultsLab runs the monkey as real troop processes against
// a real lab in address mode: every network and clock fault outlives a
// SIGKILLed troop chaos kill by no more than its lease, troop chaos stop
// takes each away at once, and lab down takes them all away with the lab.
func TestChaosNetworkFaultsLab(t *testing.T) {
	l := testlab.Start(t, lab.Spec{Netns: true, ServeSocket: true, ReplaceAfter: time.Hour})
	dir := t.TempDir()
	config := filepath.Join(dir, "chaos.yml")
	if err := os.WriteFile(config, []byte("leashed: false\ngroups:\n  - name: all\n    backend: lab\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "chaos.db")
	leases, err := lease.Open(db + ".leases")
	if err != nil {
		t.Fatal(err)
	}
	term := labchaos.New(l.Dir())

	// kill starts troop chaos kill and returns it with its lease, once its
	// fault is in place.
	before := map[string]bool{} // the leases kill has returned
	kill := func(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer, chaos.Lease) {
		t.Helper()
		cmd := exec.Command(testlab.Troop(t), append([]string{"chaos", "kill", "all", "--config", config, "--db", db, "--lab", l.Dir()}, args...)...)
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			ls, _ := leases.List()
			for _, x := range ls {
				if before[x.ID] {
					continue
				}
				// In place once the monkey says so: a delay's queue
				// process runs before its rules are made. The monkey
				// says so after it stored the lease again from when the
				// fault was whole, so the lease is read again.
				if on, _ := term.Present(context.Background(), x); on && strings.Contains(out.String(), "(seed ") {
					x, err := leases.Load(x.ID)
					if err != nil {
						t.Fatalf("the lease of a fault in place: %v", err)
					}
					before[x.ID] = true
					return cmd, &out, x
				}
			}
		}
		t.Fatalf("troop chaos kill %s: no fault in place within 20s\n%s", strings.Join(args, " "), out.String())
		return nil, nil, chaos.Lease{}
	}
	present := func(t *testing.T, ls chaos.Lease) bool {
		t.Helper()
		on, err := term.Present(context.Background(), ls)
		if err != nil {
			t.Fatal(err)
		}
		return on
	}
	// gone waits until the fault and its lease are gone, and returns when.
	gone := func(t *testing.T, ls chaos.Lease, within time.Duration) time.Time {
		t.Helper()
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			left, _ := leases.List()
			if len(left) == 0 && !present(t, ls) {
				return time.Now()
			}
		}
		left, _ := leases.List()
		// A watchdog keeps its log when it could not revert its lease.
		logs, _ := filepath.Glob(filepath.Join(leases.Dir(), "*.log"))
		var said strings.Builder
		for _, f := range logs {
			b, _ := os.ReadFile(f)
			said.WriteString(filepath.Base(f) + ":\n" + string(b))
		}
		t.Fatalf("%s of %s still in place %v after its lease's end (leases: %v)\nwatchdogs' logs:\n%s", ls.Action, ls.Instance.ID, time.Since(ls.Until), left, said.String())
		return time.Time{}
	}

	faults := []struct {
		name string
		args []string
	}{
		{"partition", []string{"--type", "partition", "--partition", "halves"}},
		{"loss", []string{"--type", "loss", "--percent", "20"}},
		{"delay", []string{"--type", "delay", "--delay", "50ms", "--jitter", "5ms"}},
		{"clock-skew", []string{"--type", "clock-skew", "--offset", "2s"}},
	}
	for _, tc := range faults {
		t.Run(tc.name+" undone after SIGKILL of the monkey", func(t *testing.T) {
			cmd, out, ls := kill(t, append(tc.args, "--duration", "3s")...)
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			if !present(t, ls) {
				t.Fatalf("the fault went with the monkey\n%s", out.String())
			}
			// The watchdog reverts it at the lease's end; a wide margin
			// for a loaded machine.
			at := gone(t, ls, time.Until(ls.Until)+15*time.Second)
			t.Logf("%s undone %v after its lease's end, its monkey SIGKILLed", ls.Action, at.Sub(ls.Until).Round(10*time.Millisecond))
			if at.Before(ls.Until) {
				t.Errorf("undone at %v, before its lease's end %v", at, ls.Until)
			}
		})
	}

	for _, tc := range faults {
		t.Run("stop reverts an active "+tc.name, func(t *testing.T) {
			cmd, out, ls := kill(t, append(tc.args, "--duration", "1m")...)
			chaosSwitch(t, "stop", "--config", config, "--db", db, "--lab", l.Dir())
			if present(t, ls) {
				t.Fatalf("the %s outlived the global stop", tc.name)
			}
			awaitRecovered(t, cmd, out, 30*time.Second)
			chaosSwitch(t, "resume", "--config", config, "--db", db)
		})
	}

	t.Run("lab down takes every fault away", func(t *testing.T) {
		var active []chaos.Lease
		for _, tc := range faults {
			_, _, ls := kill(t, append(tc.args, "--duration", "1m")...)
			active = append(active, ls)
		}
		queues := func() (n int) {
			for _, ls := range active {
				n += len(fault.Processes(ls.ID))
			}
			return n
		}
		if queues() == 0 {
			t.Fatal("no delay queue process")
		}
		st := l.Status() // a skew lives in its node's process: lab down ends them all
		down := exec.Command(testlab.Troop(t), "lab", "down", "--dir", l.Dir())
		if out, err := down.CombinedOutput(); err != nil {
			t.Fatalf("lab down: %v\n%s", err, out)
		}
		for deadline := time.Now().Add(5 * time.Second); queues() > 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if n := queues(); n > 0 {
			t.Errorf("%d delay queue processes left 5s after lab down", n)
		}
		for _, n := range st.Nodes {
			if syscall.Kill(n.NodePID, 0) == nil {
				t.Errorf("the node process of %s (%d) outlived lab down", n.Name, n.NodePID)
			}
		}
		// The rules of the partition and the loss were in the nodes'
		// namespaces, which lab down removed.
		for _, n := range st.Nodes {
			if _, err := lab.OpenNetns(n.Node); err == nil {
				t.Errorf("the namespace of %s outlived lab down", n.Name)
			}
		}
		// A revert finds the lab down and ends every lease without error.
		chaosSwitch(t, "stop", "--config", config, "--db", db, "--lab", l.Dir())
		if left, _ := leases.List(); len(left) != 0 {
			t.Errorf("leases left: %v", left)
		}
	})
}
