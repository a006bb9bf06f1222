package suggest

import "testing"

func TestClosest(t *testing.T) {
	keys := []string{"fault", "kill_at", "keys", "levels", "register", "readers_per_node", "writers_per_node"}
	for in, want := range map[string]string{
		"fualt": "fault", "Kill-At": "kill_at", "kill_et": "kill_at", "levles": "levels",
		"readers_per_nod": "readers_per_node", "zzz": "", "key": "keys",
		"ers_per_node": "", // too far from both
	} {
		if got := Closest(in, keys); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
}

// Candidates in capitals (consistency levels) match whatever the case.
func TestClosestLevels(t *testing.T) {
	levels := []string{"DC_ONE", "DC_QUORUM", "DC_SAFE_QUORUM"}
	for in, want := range map[string]string{"dc_quorum": "DC_QUORUM", "DC_QUORM": "DC_QUORUM", "dc-one": "DC_ONE", "DC_TWO": "", "DC_QUORUM": ""} {
		if got := Closest(in, levels); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Closest("keys", []string{"key1", "key2"}); got != "" {
		t.Errorf("a tie gave %q", got)
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "abc", 0}, {"abc", "acb", 1}, {"abc", "ab", 1}, {"kitten", "sitting", 3}} {
		if got := Distance(c.a, c.b); got != c.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}
