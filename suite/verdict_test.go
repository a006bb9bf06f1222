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

// A coordination checker's anomaly breaks the verdict at a quorum level,
// with its first anomaly, and is a grey note at DC_ONE, which is eventual.
func TestJudgeCoordination(t *testing.T) {
	dup := check.CheckQueue([]check.Command{
		{Key: "q", Name: check.RPush, Arg: "a", Call: 0, Return: 10},
		{Key: "q", Name: check.LPop, Arg: "a", Call: 20, Return: 30},
		{Key: "q", Name: check.LPop, Arg: "a", Call: 20, Return: 30},
	})
	good := check.CheckCounter([]check.Command{{Key: "n", Name: check.IncrBy, Delta: 2, Number: 2, Call: 0, Return: 10}})
	for _, tc := range []struct {
		level             string
		broke, held, note string
	}{
		{"DC_QUORUM", "coordination at DC_QUORUM, queue: 1 delivered twice in 3 operations; first: q: a was delivered 2 times", "coordination at DC_QUORUM, counter: 1 operations", ""},
		{"DC_ONE", "", "coordination at DC_ONE, counter: 1 operations", "coordination at DC_ONE, queue: 1 delivered twice in 3 operations; first: q: a was delivered 2 times (the level allows it)"},
	} {
		v := judge(&Report{Consistency: []ConsistencyPhase{{Level: tc.level, Verdict: check.Verdict{Result: "Ok"}, Coordination: []check.Finding{dup, good}}}})
		last := func(lines []string) string {
			if len(lines) == 0 {
				return ""
			}
			return lines[len(lines)-1]
		}
		if !strings.HasPrefix(last(v.Broke), tc.broke) || !strings.HasPrefix(last(v.Held), tc.held) || !strings.HasPrefix(last(v.Notes), tc.note) || v.OK != (tc.broke == "") {
			t.Errorf("%s: broke %q, held %q, notes %q; want broke %q, held %q, note %q", tc.level, v.Broke, v.Held, v.Notes, tc.broke, tc.held, tc.note)
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
