// Package procmem reads a process's resident memory from /proc.
package procmem

import (
	"os"
	"strconv"
	"strings"
)

// RSS is the resident set (VmRSS) of process pid in bytes, or of this
// process when pid is 0; 0 when there is none (the process is gone, or the
// system has no /proc).
func RSS(pid int) int64 {
	path := "/proc/self/status"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	status, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return parseRSS(string(status))
}

// parseRSS reads VmRSS from the text of a /proc/PID/status; 0 when absent.
func parseRSS(status string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
