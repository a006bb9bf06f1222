// Package procmem reads a process's resident memory from /proc.
package procmem

import (
	"os"
	"strconv"
	"strings"
)

// Resident is a process's resident memory in bytes: Total (VmRSS) is Anon
// (RssAnon: its heap, stacks and other memory of its own) plus File
// (RssFile: pages of files it maps, its executable's code mostly, which
// live in the page cache, shared with every process that maps them) plus
// shared memory.
type Resident struct {
	Total, Anon, File int64
}

// Read reads the resident memory of process pid, or of this process when
// pid is 0; all zero when there is none (the process is gone, or the
// system has no /proc).
func Read(pid int) Resident {
	path := "/proc/self/status"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	status, err := os.ReadFile(path)
	if err != nil {
		return Resident{}
	}
	return parse(string(status))
}

// parse reads a /proc/PID/status text; a field absent or unreadable is 0.
func parse(status string) Resident {
	var r Resident
	for _, line := range strings.Split(status, "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var field *int64
		switch name {
		case "VmRSS":
			field = &r.Total
		case "RssAnon":
			field = &r.Anon
		case "RssFile":
			field = &r.File
		default:
			continue
		}
		if kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64); err == nil {
			*field = kb << 10
		}
	}
	return r
}
