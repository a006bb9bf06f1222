package suite

import (
	"strings"
	"testing"

	"github.com/troop-lab/troop/check"
)

// A register history that is not linearizable at a quorum level breaks the
// verdict, with its counterexample, whoever runs the level: the run's
// client (troop), the cluster's own setting read from its admin API
// (Dynomite), or --level. Levels that promise nothing (DC_ONE, mixed, or
// none said) make a note.
func TestJudgeConsistencyLevels(t *testing.T) {
	illegal := check.Verdict{Ops: 40, Result: "Illegal", Counterexample: &check.Counterexample{Key: "troop:register:1:0", Ops: make([]check.Op, 4)}}
	legal := check.Verdict{Ops: 40, Result: "Ok"}
	for _, tc := range []struct {
		level   string
		verdict check.Verdict
		broke   string
		held    string
		note    string
	}{
		{"DC_QUORUM", illegal, "consistency at DC_QUORUM: not linearizable (40 operations; counterexample of 4 operations on troop:register:1:0)", "", ""},
		{"DC_EACH_SAFE_QUORUM", illegal, "consistency at DC_EACH_SAFE_QUORUM: not linearizable", "", ""},
		{"DC_SAFE_QUORUM", legal, "", "consistency at DC_SAFE_QUORUM: 40 operations", ""},
		{"DC_ONE", illegal, "", "", "consistency at DC_ONE: not linearizable"},
		{"read DC_ONE, write DC_QUORUM", illegal, "", "", "consistency at read DC_ONE, write DC_QUORUM: not linearizable"},
		{OwnLevel, illegal, "", "", "consistency at its own level: not linearizable"},
	} {
		v := judge(&Report{Consistency: []ConsistencyPhase{{Level: tc.level, Verdict: tc.verdict}}})
		has := func(got []string, want string) bool {
			if want == "" {
				return len(got) == 0
			}
			return len(got) == 1 && strings.HasPrefix(got[0], want)
		}
		if !has(v.Broke, tc.broke) || !has(v.Held, tc.held) || !has(v.Notes, tc.note) || v.OK != (tc.broke == "") {
			t.Errorf("%s, %s: broke %q, held %q, notes %q; want broke %q, held %q, note %q",
				tc.level, tc.verdict.Result, v.Broke, v.Held, v.Notes, tc.broke, tc.held, tc.note)
		}
	}
}

// The report names the store, its version and where its level came from.
func TestStoreString(t *testing.T) {
	for _, tc := range []struct {
		s    Store
		want string
	}{
		{Store{Name: "Dynomite", Version: "2046b05", Levels: "DC_QUORUM", LevelsFrom: "its admin API at 127.0.0.1:22221"},
			"Dynomite 2046b05, at DC_QUORUM (its admin API at 127.0.0.1:22221)"},
		{Store{Name: "redis-server", Version: "7.0.15", Levels: "DC_QUORUM", LevelsFrom: "--level"}, "redis-server 7.0.15, at DC_QUORUM (--level)"},
		{Store{Name: "Redis-protocol endpoints"}, "Redis-protocol endpoints (version not given), at a level nothing says (give it with --level)"},
		{Store{Name: "troop", Version: "v1", Levels: "DC_ONE"}, "troop v1, the level set per request by the run's clients (its own: DC_ONE)"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
}
