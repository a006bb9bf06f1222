package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/troop-lab/troop/internal/freeport"
	"github.com/troop-lab/troop/resp"
	"golang.org/x/sys/unix"
)

// proc is a process the harness started. The harness only ever signals
// processes through these handles, by PID, never by name.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string        // file holding its stdout and stderr
	exited chan struct{} // closed when the process has been reaped
}

// procSet owns every process of a run, so that all of them are stopped at
// the end, also when the run fails or is interrupted.
type procSet struct {
	dir   string
	mu    sync.Mutex
	procs []*proc
}

// start runs path with args. Each process gets its own process group, so a
// Ctrl-C in the terminal reaches only the harness, which then stops the
// processes in order; Pdeathsig kills them if the harness itself dies.
func (s *procSet) start(name, path string, args ...string) (*proc, error) {
	logPath := filepath.Join(s.dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(path, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(p.exited) }()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

// stopAll stops the processes in reverse start order (proxies before the
// redis-servers behind them).
func (s *procSet) stopAll() {
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop()
	}
}

// stop asks the process to end (SIGTERM), and kills it if it is still there
// after a grace period. It returns once the process has been reaped.
func (p *proc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// logTail is the end of the process's output, for error messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// clockTicks is the unit of the CPU times in /proc/PID/stat (USER_HZ).
var clockTicks = func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return float64(n)
		}
	}
	return 100 // the value on every Linux architecture Go supports
}()

// cpuTime is the CPU time (user plus system, all threads, those that
// ended too) that process pid has used so far, read from the process's CPU
// clock: it is exact up to the scheduler's tick for a thread on a CPU now,
// where /proc/PID/stat rounds to clock ticks of 10 ms, more than a short
// test costs. pid 0 means this process.
func cpuTime(pid int) (time.Duration, error) {
	clock := int32(unix.CLOCK_PROCESS_CPUTIME_ID)
	if pid != 0 {
		clock = int32(^pid)<<3 | cpuClockSched // the kernel's MAKE_PROCESS_CPUCLOCK
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, fmt.Errorf("CPU clock of process %d: %w", pid, err)
	}
	return time.Duration(ts.Nano()), nil
}

// cpuClockSched selects a process CPU clock's scheduler time (user plus
// system, in nanoseconds): CPUCLOCK_SCHED in the kernel's posix-timers.h.
const cpuClockSched = 2

// cpuTimes is the user and the system CPU time (all threads) that process
// pid has used so far, from fields 14 and 15 of /proc/PID/stat.
func cpuTimes(pid int) (user, sys time.Duration, err error) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces: count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("%s: unexpected format", path)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("%s: unexpected format", path)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("%s: %v", path, err)
	}
	ticks := func(n uint64) time.Duration { return time.Duration(float64(n) / clockTicks * float64(time.Second)) }
	return ticks(utime), ticks(stime), nil
}

// freeAddr returns a loopback address with a port nobody listens on now
// (see package freeport).
func freeAddr() (string, error) { return freeport.Pick() }

// waitPing waits until addr answers PING, or fails early when the process
// behind it exits.
func waitPing(ctx context.Context, addr string, p *proc) error {
	return waitUp(ctx, addr, "PING", ping, p)
}

// waitUp waits until probe(addr) succeeds, or fails early when the process
// behind it exits.
func waitUp(ctx context.Context, addr, what string, probe func(string) error, p *proc) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := probe(addr); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("%s at %s does not answer %s within 15s: %v\n%s", p.name, addr, what, err, p.logTail())
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited at start: %s\n%s", p.name, p.cmd.ProcessState, p.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// redisCommand sends one command to the redis-server at addr, on a
// connection of its own, and returns its reply within timeout; an error
// reply is an error.
func redisCommand(addr string, timeout time.Duration, args ...string) (resp.Value, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return resp.Value{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(resp.AppendCommandStrings(nil, args...)); err != nil {
		return resp.Value{}, err
	}
	v, err := resp.NewReader(c, resp.DefaultLimits).ReadValue()
	if err == nil && v.IsError() {
		err = fmt.Errorf("%s: %s", args[0], v.Str)
	}
	return v, err
}

func ping(addr string) error {
	v, err := redisCommand(addr, time.Second, "PING")
	if err == nil && string(v.Str) != "PONG" {
		err = fmt.Errorf("PING answered %q", v.Str)
	}
	return err
}

// machineCPU is the whole machine's CPU time so far, from the "cpu" line of
// /proc/stat: busy is user, nice, system, irq and softirq time (guest time
// is inside user); steal is time the hypervisor ran someone else while this
// machine had work. On shared machines steal tells how much of a window the
// neighbours took.
func machineCPU() (busy, steal time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected format")
	}
	var v [8]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %v", err)
		}
	}
	ticks := func(n uint64) time.Duration { return time.Duration(float64(n) / clockTicks * float64(time.Second)) }
	// user nice system idle iowait irq softirq steal
	return ticks(v[0] + v[1] + v[2] + v[5] + v[6]), ticks(v[7]), nil
}

// rwCalls is how many read and write system calls process pid (0: this
// process) has made, from syscr and syscw of /proc/PID/io: the kernel counts
// read, readv, write and writev there, which is how all the programs here
// move bytes on sockets. Calls per operation show how well a process
// batches a pipeline.
func rwCalls(pid int) (int64, error) {
	path := "/proc/self/io"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/io", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "syscr" || k == "syscw" {
			x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %v", path, err)
			}
			n += x
		}
	}
	return n, nil
}
