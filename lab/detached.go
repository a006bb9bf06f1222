package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// The CLI runs the supervisor as its own process so that the lab outlives
// `troop lab up`: Up writes DIR/spec.json and starts `troop lab supervise
// --dir DIR --ready-fd 3` in a new session; Supervise starts the lab and
// reports on fd 3 whether it came up, then serves the socket until down.

// specJSON is what Up hands the detached supervisor.
type specJSON struct {
	Shape            Shape  `json:"shape"`
	ReplaceAfter     string `json:"replace_after"`
	ReadConsistency  string `json:"read_consistency"`
	WriteConsistency string `json:"write_consistency"`
	Netns            bool   `json:"netns,omitempty"`
	TLS              bool   `json:"tls,omitempty"`
	Engine           string `json:"engine,omitempty"`
	Dynomite         string `json:"dynomite,omitempty"`
	Troop            string `json:"troop"`
	RedisServer      string `json:"redis_server"`
	ReadyTimeout     string `json:"ready_timeout"`
	StopGrace        string `json:"stop_grace"`
	LogFormat        string `json:"log_format,omitempty"`
}

// readyReport is the one message Supervise writes on its ready pipe.
type readyReport struct {
	Error string `json:"error,omitempty"`
}

// Up starts a detached supervisor for spec (see Spec; NodeCommand cannot
// be used) and returns once the lab is ready. If a lab with the same shape
// already runs in spec.Dir it returns its status and already=true; a lab of
// another shape is an error naming both.
func Up(ctx context.Context, spec Spec) (st *Status, already bool, err error) {
	if spec.NodeCommand != nil {
		return nil, false, errors.New("lab up: NodeCommand only works with an in-process lab (Start)")
	}
	if spec, err = spec.withDefaults(); err != nil {
		return nil, false, err
	}
	dir := spec.Dir
	if err := checkSocketPath(dir); err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, fmt.Errorf("create lab directory: %w", err)
	}
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return nil, false, err
	}
	defer unlock()

	if old, err := Load(dir); err == nil {
		if old.supervisorAlive() {
			if old.Shape != spec.Shape {
				return nil, false, fmt.Errorf("a lab of shape %s already runs in %s, asked for %s: run troop lab down --dir %s first",
					old.Shape, dir, spec.Shape, dir)
			}
			if engine, _ := ParseEngine(old.Engine); engine != spec.Engine {
				return nil, false, fmt.Errorf("a lab of %s nodes already runs in %s, asked for %s: run troop lab down --dir %s first",
					engine, dir, spec.Engine, dir)
			}
			if addressed := old.Network != nil; addressed != spec.Netns {
				return nil, false, fmt.Errorf("a lab %s already runs in %s, asked for one %s: run troop lab down --dir %s first",
					modeName(addressed), dir, modeName(spec.Netns), dir)
			}
			old.SupervisorRunning = true
			return old, true, nil
		}
		// The supervisor of an earlier lab is gone; Pdeathsig took its
		// children, but a leftover must not hold the new lab's ports.
		stopChildren(old, spec.StopGrace)
	}

	sj := specJSON{
		Shape: spec.Shape, ReplaceAfter: spec.ReplaceAfter.String(),
		ReadConsistency: spec.ReadConsistency, WriteConsistency: spec.WriteConsistency, Netns: spec.Netns, TLS: spec.TLS,
		Engine: spec.Engine, Dynomite: spec.Dynomite, Troop: spec.Troop, RedisServer: spec.RedisServer,
		ReadyTimeout: spec.ReadyTimeout.String(), StopGrace: spec.StopGrace.String(), LogFormat: spec.LogFormat,
	}
	if err := writeJSON(specFile(dir), sj); err != nil {
		return nil, false, fmt.Errorf("write lab spec: %w", err)
	}
	if err := spawnSupervisor(spec); err != nil {
		return nil, false, err
	}
	st, err = Load(dir)
	if err != nil {
		return nil, false, err
	}
	st.SupervisorRunning = true
	return st, false, nil
}

// modeName says where a lab's nodes listen.
func modeName(netns bool) string {
	if netns {
		return "in address mode (--netns)"
	}
	return "on loopback"
}

// spawnSupervisor starts `troop lab supervise` in its own session and waits
// (bounded) for its report on the ready pipe.
func spawnSupervisor(spec Spec) error {
	dir := spec.Dir
	logf, err := os.OpenFile(SupervisorLog(dir), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open supervisor log: %w", err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(spec.Troop, "lab", "supervise", "--dir", dir, "--ready-fd", "3")
	cmd.Dir = dir
	// Panics and anything else the supervisor prints land in its log.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	// A new session: the lab must not die with the terminal that ran up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return fmt.Errorf("start lab supervisor %s: %w", spec.Troop, err)
	}
	// Reap it should it exit while this process still runs (tests).
	go cmd.Wait()

	// The supervisor reports within its ready timeout, or after stopping
	// what it started when that passes.
	wait := spec.ReadyTimeout + 2*spec.StopGrace + 10*time.Second
	r.SetReadDeadline(time.Now().Add(wait))
	// One line; the supervisor closes the pipe after it, but a reader that
	// waited for EOF would also wait for any process that inherited it.
	b, err := bufio.NewReader(r).ReadBytes('\n')
	if len(b) > 0 && errors.Is(err, io.EOF) {
		err = nil
	}
	var rep readyReport
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		return fmt.Errorf("lab supervisor (pid %d) did not report within %s: %w; last lines of %s:\n%s",
			cmd.Process.Pid, wait, err, SupervisorLog(dir), tail(SupervisorLog(dir), 15))
	case len(b) == 0 || json.Unmarshal(b, &rep) != nil:
		return fmt.Errorf("lab supervisor (pid %d) exited without reporting; last lines of %s:\n%s",
			cmd.Process.Pid, SupervisorLog(dir), tail(SupervisorLog(dir), 15))
	case rep.Error != "":
		return errors.New(rep.Error)
	}
	return nil
}

// Supervise runs the lab described by DIR/spec.json (written by Up) until
// ctx ends, SIGTERM, SIGINT or SIGHUP arrives, or a client asks it to go
// down. If ready is not nil, it gets one JSON report once the lab is up or
// has failed, and is closed. This is `troop lab supervise`.
func Supervise(ctx context.Context, dir string, ready io.WriteCloser) error {
	// The ready fd was inherited without close-on-exec; set it so that the
	// lab's children do not hold the pipe open after the report.
	if f, ok := ready.(interface{ Fd() uintptr }); ok && ready != nil {
		syscall.CloseOnExec(int(f.Fd()))
	}
	report := func(err error) {
		if ready == nil {
			return
		}
		var rep readyReport
		if err != nil {
			rep.Error = err.Error()
		}
		json.NewEncoder(ready).Encode(rep)
		ready.Close()
	}
	spec, err := readSpec(dir)
	if err != nil {
		report(err)
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	l, err := Start(ctx, spec)
	report(err)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-l.Done():
	}
	return l.Stop()
}

func readSpec(dir string) (Spec, error) {
	b, err := os.ReadFile(specFile(dir))
	if err != nil {
		return Spec{}, fmt.Errorf("lab spec: %w", err)
	}
	var sj specJSON
	if err := json.Unmarshal(b, &sj); err != nil {
		return Spec{}, fmt.Errorf("lab spec %s: %w", specFile(dir), err)
	}
	spec := Spec{Dir: dir, Shape: sj.Shape, ReadConsistency: sj.ReadConsistency, WriteConsistency: sj.WriteConsistency, Netns: sj.Netns, TLS: sj.TLS,
		Engine: sj.Engine, Dynomite: sj.Dynomite, Troop: sj.Troop, RedisServer: sj.RedisServer, LogFormat: sj.LogFormat, ServeSocket: true}
	for _, d := range []struct {
		s   string
		out *time.Duration
	}{{sj.ReplaceAfter, &spec.ReplaceAfter}, {sj.ReadyTimeout, &spec.ReadyTimeout}, {sj.StopGrace, &spec.StopGrace}} {
		if d.s == "" {
			continue
		}
		if *d.out, err = time.ParseDuration(d.s); err != nil {
			return Spec{}, fmt.Errorf("lab spec %s: %w", specFile(dir), err)
		}
	}
	return spec, nil
}

// Inspect returns the live status: from the supervisor if one answers,
// else from lab.json with every recorded process checked against /proc.
func Inspect(ctx context.Context, dir string) (*Status, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := Load(dir)
	if err != nil {
		return nil, err
	}
	if st.Socket != "" && st.supervisorAlive() {
		if c, err := Dial(ctx, dir); err == nil {
			if live, err := c.Status(ctx); err == nil {
				return live, nil
			}
		}
	}
	st.SupervisorRunning = st.supervisorAlive()
	if !st.SupervisorRunning {
		for i := range st.Nodes {
			n := &st.Nodes[i]
			for _, ps := range []*ProcStatus{&n.NodeP, &n.RedisP} {
				if ps.PID > 0 && !ours(ps.PID, ps.StartTicks) {
					ps.State = Dead
				}
			}
			n.summarize()
		}
	}
	return st, nil
}

// Down stops the lab in dir: it asks the supervisor to stop everything, or
// signals it if it does not answer, then stops any process of the lab still
// alive, each by PID after checking that the PID is still the lab's. Logs
// and data stay. Running it on a stopped lab, or twice, is fine.
func Down(ctx context.Context, dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if _, err := Load(dir); errors.Is(err, ErrNoLab) {
		return fmt.Sprintf("no lab in %s: nothing to stop", dir), nil
	} else if err != nil {
		return "", err
	}
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	// Read under the lock: an up may have finished meanwhile.
	st, err := Load(dir)
	if err != nil {
		return "", err
	}

	var errs []error
	wasRunning := st.supervisorAlive()
	if wasRunning {
		if err := stopSupervisor(ctx, st); err != nil {
			errs = append(errs, err)
		}
	}
	stopped := stopChildren(st, 5*time.Second)
	// The kernel removes the namespaces of address mode with their
	// processes and holder; only an interface some stray process kept is
	// left to delete.
	if err := sweepNetwork(dir); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(SocketFile(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := markDown(dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return "", fmt.Errorf("lab down %s: %w", dir, err)
	}
	switch {
	case wasRunning:
		return fmt.Sprintf("lab in %s is down (logs kept)", dir), nil
	case stopped > 0:
		return fmt.Sprintf("lab in %s had no supervisor; stopped %d leftover processes", dir, stopped), nil
	default:
		return fmt.Sprintf("lab in %s is not running: nothing to stop", dir), nil
	}
}

// stopSupervisor asks the supervisor to go down over its socket and waits
// for it to exit; failing that it signals it, if it is a lab supervisor.
func stopSupervisor(ctx context.Context, st *Status) error {
	pid, ticks := st.SupervisorPID, st.SupervisorTicks
	// Done when the process is gone, or, for an in-process lab (whose
	// process goes on), when it has recorded that it stopped.
	detached := ours(pid, ticks, "supervise")
	gone := func() bool {
		if !ours(pid, ticks) {
			return true
		}
		if detached {
			return false
		}
		now, err := Load(st.Dir)
		return err == nil && now.SupervisorPID == 0
	}
	// A supervisor stops nodes, then redis-servers, each with a grace period.
	const patience = 30 * time.Second
	if c, err := Dial(ctx, st.Dir); err == nil {
		if err := c.Down(ctx); err == nil && waitUntil(gone, patience) {
			return nil
		}
	}
	if !detached {
		if gone() {
			return nil
		}
		return fmt.Errorf("supervisor pid %d is not a troop lab supervisor (an in-process lab?): stop it where it runs", pid)
	}
	// SIGTERM makes it stop its children gracefully; SIGKILL, if needed,
	// takes them down through Pdeathsig.
	return terminatePID(pid, ticks, patience)
}

// stopChildren stops every recorded node and redis-server still alive and
// still the lab's, and returns how many it stopped.
func stopChildren(st *Status, grace time.Duration) int {
	n := 0
	for _, node := range st.Nodes {
		for _, c := range []struct {
			ps      ProcStatus
			markers []string
		}{
			{node.NodeP, []string{node.Config, node.Listen}},
			{node.RedisP, []string{node.Redis}},
		} {
			if c.ps.PID > 0 && ours(c.ps.PID, c.ps.StartTicks, c.markers...) {
				terminatePID(c.ps.PID, c.ps.StartTicks, grace)
				n++
			}
		}
	}
	return n
}

// markDown records in lab.json that nothing of the lab runs any more.
func markDown(dir string) error {
	st, err := Load(dir)
	if err != nil {
		return err
	}
	st.SupervisorPID, st.SupervisorTicks, st.SupervisorRunning, st.Socket = 0, 0, false, ""
	for i := range st.Nodes {
		n := &st.Nodes[i]
		for _, ps := range []*ProcStatus{&n.NodeP, &n.RedisP} {
			if ps.PID > 0 && ours(ps.PID, ps.StartTicks) {
				continue // refused to die: keep the record
			}
			ps.PID, ps.StartTicks, ps.State = 0, 0, Stopped
		}
		n.summarize()
	}
	st.Updated = time.Now()
	return writeJSON(StateFile(dir), st)
}

// lockDir takes an exclusive lock on DIR/lab.lock so that two ups (or an
// up and a down) do not race; it waits at most a minute.
func lockDir(ctx context.Context, dir string) (func(), error) {
	f, err := os.OpenFile(lockFile(dir), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lab lock: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lab lock %s: %w", lockFile(dir), err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lab lock %s: another troop lab up or down holds it: %w", lockFile(dir), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Env returns the shell assignments of `troop lab env` for the lab in dir.
func Env(dir string) ([]string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := Load(dir)
	if err != nil {
		return nil, err
	}
	return st.EnvLines(), nil
}

// BuildTroop builds the troop binary into outDir and returns its path, for
// tests of other packages that need real nodes; troop-node goes next to it,
// and a lab's nodes run that (see Spec.Troop). It runs `go build`, so it
// must be called from inside the module. The binaries can run planted bugs
// (the build tag planted), which tests plant to check their checkers.
func BuildTroop(ctx context.Context, outDir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "planted", "-o", outDir+string(filepath.Separator),
		"github.com/troop-lab/troop/cmd/troop", "github.com/troop-lab/troop/cmd/troop-node")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build troop and troop-node: %w\n%s", err, b)
	}
	return filepath.Join(outDir, "troop"), nil
}
