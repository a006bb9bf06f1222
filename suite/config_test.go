package suite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "run.yml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := LoadConfig(write("seed: 9\nfault: 30s\nkill_at: 5s\nlevels: [DC_QUORUM]\nregister: {clients: 4}\n"), QuickConfig())
	if err != nil {
		t.Fatal(err)
	}
	q := QuickConfig()
	if cfg.Seed != 9 || cfg.Fault != 30*time.Second || cfg.KillAt != 5*time.Second || len(cfg.Levels) != 1 ||
		cfg.Register.Clients != 4 || cfg.Register.Keys != q.Register.Keys || cfg.Keys != q.Keys || !cfg.Quick {
		t.Fatalf("overlay wrong: %+v", cfg)
	}
	if _, err := LoadConfig(write(""), DefaultConfig()); err != nil {
		t.Fatalf("an empty file is the base: %v", err)
	}
	for body, want := range map[string]string{
		"seed: 1\nfualt: 3s\n":                 "line 2: field fualt not found",
		"baseline: soon\n":                     "line 1",
		"kill_at: 50s\n":                       "kill_at 50s must be inside the failure phase",
		"levels: [DC_TWO]\n":                   `"DC_TWO" is not one of`,
		"register: {writes: 2}\n":              "writes 2 must be a share",
		"value_size: 10\n":                     "value_size 10 is below 64 bytes",
		"register: {clients: 0}\nkeys: 5000\n": "register: keys, clients",
		"register: {ops: -1}\n":                "register: ops must not be negative",
		"keys: 50\ncontended_keys: 50\n":       "contended_keys 50 must be fewer than keys 50",
		"nemesis: {faults: [terminate]}\n":     `nemesis: "terminate" is not a network or clock fault`,
		"nemesis: {levels: [DC_TWO]}\n":        `nemesis: levels: "DC_TWO"`,
		"nemesis: {fault: 10ms}\n":             "nemesis: fault must be at least 1s",
		"request_timeout: 0s\n":                "request_timeout must be positive",
	} {
		_, err := LoadConfig(write(body), DefaultConfig())
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "run.yml") {
			t.Errorf("%q: error %v, want one naming run.yml and saying %q", body, err, want)
		}
	}
}
