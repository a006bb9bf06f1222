package lab

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The lab identifies its processes by PID plus the kernel's start time of
// that PID (field 22 of /proc/PID/stat). A PID alone may have been reused by
// an unrelated process since lab.json was written; the pair cannot be.

// startTicks returns the start time of pid in clock ticks since boot, and
// whether the process exists and is not a zombie.
func startTicks(pid int) (uint64, bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces, so
	// the fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, false
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	t, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, false
	}
	return t, true
}

// cmdline returns the command line of pid with arguments joined by spaces.
// Note that redis-server rewrites its own title ("redis-server 127.0.0.1:P").
func cmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// ours reports whether pid is still the process the lab started: the same
// start time, and a command line that mentions one of the markers (a port or
// a config path of the position).
func ours(pid int, ticks uint64, markers ...string) bool {
	t, alive := startTicks(pid)
	if !alive || (ticks != 0 && t != ticks) {
		return false
	}
	if len(markers) == 0 {
		return true
	}
	cl := cmdline(pid)
	for _, m := range markers {
		if m != "" && strings.Contains(cl, m) {
			return true
		}
	}
	return false
}

// terminatePID stops a process the lab does not hold a handle for (one
// started by another supervisor process): SIGTERM, then SIGKILL after grace.
// It returns once the process is gone, or an error after a bounded wait.
func terminatePID(pid int, ticks uint64, grace time.Duration) error {
	gone := func() bool {
		t, alive := startTicks(pid)
		return !alive || (ticks != 0 && t != ticks)
	}
	if gone() {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal pid %d: %w", pid, err)
	}
	if waitUntil(gone, grace) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill pid %d: %w", pid, err)
	}
	if waitUntil(gone, 5*time.Second) {
		return nil
	}
	return fmt.Errorf("pid %d still alive 5s after SIGKILL", pid)
}

// waitUntil polls cond every 20 ms until it holds or d has passed.
func waitUntil(cond func() bool, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tail returns the last n lines of a log file, indented, for error messages.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "    (no log: " + err.Error() + ")"
	}
	defer f.Close()
	// Logs can be large; the last 8 KiB hold more than enough lines.
	const window = 8 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		f.Seek(st.Size()-window, 0)
	}
	b := make([]byte, window)
	k, _ := f.Read(b)
	lines := strings.Split(strings.TrimRight(string(b[:k]), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "    (log is empty)"
	}
	return "    " + strings.Join(lines, "\n    ")
}

// Ours reports whether pid is still the process that had start time ticks
// (0: any) and whose command line mentions one of the markers (none: any).
// troop chaos uses it to signal only the processes it means to, by the PID
// and start time it stored in a lease.
func Ours(pid int, ticks uint64, markers ...string) bool { return ours(pid, ticks, markers...) }

// StartTicks returns pid's start time in clock ticks since boot, and
// whether it is alive (not a zombie).
func StartTicks(pid int) (uint64, bool) { return startTicks(pid) }
