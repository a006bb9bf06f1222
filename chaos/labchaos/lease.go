package labchaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/fault"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/lab"
)

var _ chaos.Leaser = (*Terminator)(nil)

// LeaseFor leases the temporary kinds (pause, burn-cpu, the network
// faults, clock-skew) for their duration, stop for the lab's replace-after
// delay, and restart for no time at all: the lab keeps a stopped node down
// for good, so the node must be started again, also if the monkey dies
// between the stop and the start.
func (t *Terminator) LeaseFor(ctx context.Context, inst chaos.Instance, a chaos.Action) (time.Duration, bool, error) {
	if a.Kind.Temporary() {
		return a.Duration, true, nil
	}
	switch a.Kind {
	case chaos.Stop:
		st, err := t.status(ctx)
		if err != nil {
			return 0, false, err
		}
		return replaceAfter(st), true, nil
	case chaos.Restart:
		return 0, true, nil
	}
	return 0, false, nil
}

// Undo keys of the lab's leases.
const (
	undoPID   = "pid"         // the paused node process, or the burner
	undoTicks = "start_ticks" // its start time, so that a reused PID is left alone
)

// Begin puts a leased fault in place:
//
//   - pause: SIGSTOP to the node process. Its redis-server keeps running;
//     peers and clients see a node that accepts connections and never
//     answers.
//   - burn-cpu: starts a burner, `troop chaos burn` from the lab's own troop
//     binary, in its own session; it spins one core until l.Until and exits
//     by itself, and the lease's revert kills it sooner if need be.
//   - stop, restart: a graceful stop; the revert starts the node again (for
//     a restart, at once: its lease ends as it begins).
func (t *Terminator) Begin(ctx context.Context, l chaos.Lease) (map[string]string, error) {
	if fault.Handles(l.Action.Kind) {
		return t.beginFault(ctx, l)
	}
	st, n, err := t.node(ctx, l.Instance.ID)
	if err != nil {
		return nil, err
	}
	p := n.NodeP
	switch l.Action.Kind {
	case chaos.Pause:
		if p.State != lab.Running || p.PID == 0 {
			return nil, fmt.Errorf("lab backend: pause %s: node process is %s", n.Name, p.State)
		}
		t.remember(n.Name, memory{}) // recovered once it answers again, same PID
		if err := syscall.Kill(p.PID, syscall.SIGSTOP); err != nil {
			return nil, fmt.Errorf("lab backend: pause %s (pid %d): %w", n.Name, p.PID, err)
		}
		undo := pidUndo(p.PID, p.StartTicks)
		// kill returns before every thread has stopped; on a busy machine
		// one may still answer a request meanwhile. The fault is in place
		// when Begin returns.
		if err := waitStopped(p.PID, stopWait); err != nil {
			return undo, fmt.Errorf("lab backend: pause %s (pid %d): %w", n.Name, p.PID, err)
		}
		return undo, nil
	case chaos.BurnCPU:
		t.remember(n.Name, memory{})
		pid, err := lease.Spawn([]string{st.Troop, "chaos", "burn", "--until", l.Until.UTC().Format(time.RFC3339Nano), "--lease", l.ID}, os.DevNull)
		if err != nil {
			return nil, fmt.Errorf("lab backend: burn-cpu next to %s: %w", n.Name, err)
		}
		ticks, _ := lab.StartTicks(pid)
		if err := waitBurner(pid, ticks, l.ID, stopWait); err != nil {
			return pidUndo(pid, ticks), fmt.Errorf("lab backend: burn-cpu next to %s: %w", n.Name, err)
		}
		return pidUndo(pid, ticks), nil
	case chaos.Stop, chaos.Restart:
		sup, err := t.supervisor(ctx)
		if err != nil {
			return nil, err
		}
		t.remember(n.Name, memory{pid: p.PID})
		if err := sup.Stop(ctx, n.Name); err != nil {
			return nil, fmt.Errorf("lab backend: stop %s: %w", n.Name, err)
		}
		return nil, nil
	}
	return nil, fmt.Errorf("lab backend: %s is not leased", l.Action.Kind)
}

// stopWait bounds the wait for a paused process's threads to stop.
const stopWait = 5 * time.Second

// waitStopped waits until every thread of pid is in state T (stopped).
func waitStopped(pid int, within time.Duration) error {
	stopped, err := poll(within, func() (bool, error) { return allThreadsStopped(pid) })
	if err == nil && !stopped {
		err = fmt.Errorf("threads still running %v after SIGSTOP", within)
	}
	return err
}

// waitBurner waits until the burner's command line names its lease. The
// spawn returns once the exec has begun, and for a moment after, /proc shows
// the new program without its arguments: a Revert then could not tell the
// burner is the lease's, and would leave it to end by itself.
func waitBurner(pid int, ticks uint64, leaseID string, within time.Duration) error {
	shown, err := poll(within, func() (bool, error) {
		if lab.Ours(pid, ticks, leaseID) {
			return true, nil
		}
		if _, alive := lab.StartTicks(pid); !alive {
			return false, fmt.Errorf("the burner (pid %d) exited at once", pid)
		}
		return false, nil
	})
	if err == nil && !shown {
		err = fmt.Errorf("the burner (pid %d) did not show its lease within %v", pid, within)
	}
	return err
}

// poll asks cond every few milliseconds until it holds or fails, for at
// most within; false without an error when the time ran out.
func poll(within time.Duration, cond func() (bool, error)) (bool, error) {
	deadline := time.Now().Add(within)
	for {
		if ok, err := cond(); ok || err != nil {
			return ok, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func allThreadsStopped(pid int) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, fmt.Errorf("no threads of pid %d", pid)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue // the thread exited
		}
		// The state is the first field after the command name's ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("bad %s", task)
		}
		if st := b[i+2]; st != 'T' && st != 't' {
			return false, nil
		}
	}
	return true, nil
}

func pidUndo(pid int, ticks uint64) map[string]string {
	return map[string]string{undoPID: strconv.Itoa(pid), undoTicks: strconv.FormatUint(ticks, 10)}
}

func undoProcess(l chaos.Lease) (pid int, ticks uint64, ok bool) {
	pid, err := strconv.Atoi(l.Undo[undoPID])
	if err != nil || pid <= 0 {
		return 0, 0, false
	}
	ticks, _ = strconv.ParseUint(l.Undo[undoTicks], 10, 64)
	return pid, ticks, true
}

// Revert undoes a lease; a fault already gone is no error.
//
//   - pause: SIGCONT to the process paused, if it is still the same process
//     (PID and start time); without undo data, to the node's current
//     process (SIGCONT to a running process does nothing).
//   - burn-cpu: SIGKILL to the burner's session, if it is still the
//     burner. Without undo data there is nothing to find it by, and it
//     ends by itself at the lease's end.
//   - stop, restart: starts the node if it is not running.
func (t *Terminator) Revert(ctx context.Context, l chaos.Lease) error {
	if fault.Handles(l.Action.Kind) {
		return t.revertFault(ctx, l)
	}
	switch l.Action.Kind {
	case chaos.Pause:
		pid, ticks, ok := undoProcess(l)
		if !ok {
			_, n, err := t.node(ctx, l.Instance.ID)
			if err != nil {
				return err
			}
			pid, ticks = n.NodeP.PID, n.NodeP.StartTicks
		}
		if pid == 0 || !lab.Ours(pid, ticks) {
			return nil // replaced or stopped meanwhile: nothing paused any more
		}
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("lab backend: resume %s (pid %d): %w", l.Instance.ID, pid, err)
		}
		return nil
	case chaos.BurnCPU:
		pid, ticks, ok := undoProcess(l)
		if !ok || !lab.Ours(pid, ticks, l.ID) {
			return nil
		}
		// The burner leads its own session: kill its whole group.
		if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("lab backend: end burner %d of lease %s: %w", pid, l.ID, err)
		}
		return nil
	case chaos.Stop, chaos.Restart:
		_, n, err := t.node(ctx, l.Instance.ID)
		if err != nil {
			return err
		}
		if n.NodeP.State == lab.Running {
			return nil
		}
		sup, err := t.supervisor(ctx)
		if err != nil {
			return err
		}
		return t.start(sup, n.Name)
	}
	return fmt.Errorf("lab backend: %s is not leased", l.Action.Kind)
}
