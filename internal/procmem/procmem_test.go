package procmem

import (
	"os"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Resident
	}{
		{"Name:\ttroop\nVmHWM:\t  9000 kB\nVmRSS:\t   51784 kB\nRssAnon:\t   16432 kB\nRssFile:\t   35352 kB\n",
			Resident{Total: 51784 << 10, Anon: 16432 << 10, File: 35352 << 10}},
		{"Name:\tkthreadd\n", Resident{}},
		{"VmRSS:\tlots kB\nRssAnon:\t 4 kB\n", Resident{Anon: 4 << 10}},
	} {
		if got := parse(c.in); got != c.want {
			t.Errorf("parse(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if _, err := os.Stat("/proc/self/status"); err == nil {
		self, byPid := Read(0), Read(os.Getpid())
		if self.Total <= 0 || self.Anon <= 0 || byPid.Total <= 0 {
			t.Errorf("this process: %+v, by pid %+v", self, byPid)
		}
	}
}
