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
	cfg, err := LoadConfig(write("seed: 9\nfault: 30s\nkill_at: 5s\nlevels: [DC_QUORUM]\nregister: {clients: 4}\ncoordination: true\n"), QuickConfig())
	if err != nil {
		t.Fatal(err)
	}
	q := QuickConfig()
	if cfg.Seed != 9 || cfg.Fault != 30*time.Second || cfg.KillAt != 5*time.Second || len(cfg.Levels) != 1 ||
		cfg.Register.Clients != 4 || cfg.Register.Keys != q.Register.Keys || cfg.Keys != q.Keys || !cfg.Quick ||
		!cfg.Coordination || cfg.CoordinationDuration != q.CoordinationDuration {
		t.Fatalf("overlay wrong: %+v", cfg)
	}
	if _, err := LoadConfig(write(""), DefaultConfig()); err != nil {
		t.Fatalf("an empty file is the base: %v", err)
	}
	for body, want := range map[string]string{
		"seed: 1\nfualt: 3s\n":                            `run.yml:2: fualt: unknown key (did you mean "fault"?)`,
		"register:\n  dureation: 3s\n":                    `run.yml:2: register.dureation: unknown key (did you mean "duration"?)`,
		"nemesis: {settel: 3s}\n":                         `run.yml:1: nemesis.settel: unknown key (did you mean "settle"?)`,
		"baseline: soon\n":                                `run.yml:1: baseline: want a duration such as 20s or 1m30s, not "soon"`,
		"keys: -3\n":                                      `run.yml:1: keys: want a whole number, not negative, not "-3"`,
		"levels: DC_ONE\n":                                `run.yml:1: levels: want a list such as [DC_ONE, DC_QUORUM], not "DC_ONE"`,
		"register: 5\n":                                   `run.yml:1: register: want keys and values (key: value), not "5"`,
		"seed: 1\nseed: 2\n":                              "run.yml:2: seed: set twice (first at line 1)",
		"fault: 30s\nkill_at: 50s\n":                      "run.yml:2: kill_at 50s must be inside the failure phase",
		"levels: [DC_QUORM]\n":                            `run.yml:1: levels: "DC_QUORM" is not one of DC_ONE, DC_QUORUM, DC_SAFE_QUORUM (did you mean "DC_QUORUM"?)`,
		"levels: [DC_TWO]\n":                              `"DC_TWO" is not one of`,
		"register: {writes: 2}\n":                         "run.yml:1: register: writes 2 must be a share",
		"value_size: 10\n":                                "value_size 10 is below 64 bytes",
		"register: {clients: 0}\nkeys: 5000\n":            "register: keys, clients",
		"register: {ops: -1}\n":                           "register: ops must not be negative",
		"keys: 50\ncontended_keys: 50\n":                  "contended_keys 50 must be fewer than keys 50",
		"nemesis: {faults: [terminate]}\n":                `nemesis: "terminate" is not a fault of the nemesis (want none, partition`,
		"nemesis: {faults: [\"partition:sideways\"]}\n":   `partition: "sideways": want isolate, halves, one-way or bridge`,
		"nemesis: {faults: [\"loss:bridge\"]}\n":          `nemesis: "loss:bridge": only a partition takes a mode`,
		"nemesis: {levels: [DC_TWO]}\n":                   `nemesis: levels: "DC_TWO"`,
		"nemesis: {fault: 10ms}\n":                        "nemesis: fault must be at least 1s",
		"request_timeout: 0s\n":                           "request_timeout must be positive",
		"coordination: true\ncoordination_duration: 0s\n": "run.yml:2: coordination_duration must be a positive duration",
		"a: [1\n": "run.yml:1: did not find expected",
		"- 1\n":   "run.yml:1: the file: want keys and values (key: value), not a list",
	} {
		_, err := LoadConfig(write(body), DefaultConfig())
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "run.yml") {
			t.Errorf("%q: error %v, want one naming run.yml and saying %q", body, err, want)
		}
	}
}

// No input crashes the config parser, and what it accepts validates.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"seed: 9\nfault: 30s\nkill_at: 5s\nlevels: [DC_QUORUM]\nregister: {clients: 4}\n",
		"nemesis:\n  faults: [loss]\n  settle: 2s\n", "a: [1\n", "- 1\n", "register: 5\n", "seed: &a 1\nkeys: *a\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := parseConfig("fuzz.yml", data, QuickConfig())
		if err == nil {
			if verr := cfg.Validate(); verr != nil {
				t.Fatalf("accepted a config that does not validate: %v", verr)
			}
		}
	})
}
