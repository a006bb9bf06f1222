package procmem

import (
	"os"
	"testing"
)

func TestParseRSS(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"Name:\ttroop\nVmHWM:\t  9000 kB\nVmRSS:\t   51784 kB\nRssAnon:\t 1 kB\n", 51784 << 10},
		{"Name:\tkthreadd\n", 0},
		{"VmRSS:\tlots kB\n", 0},
	} {
		if got := parseRSS(c.in); got != c.want {
			t.Errorf("parseRSS(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	if _, err := os.Stat("/proc/self/status"); err == nil {
		if RSS(0) <= 0 || RSS(os.Getpid()) <= 0 {
			t.Errorf("this process's RSS: %d, by pid %d", RSS(0), RSS(os.Getpid()))
		}
	}
}
