package topology

import "testing"

// troop_planted_bug: none is always accepted; a planted bug only by a build
// that has them (the tag planted, as make test builds), and any other build
// refuses it with the reason.
func TestPlantedBugKey(t *testing.T) {
	const without = `: this troop is built without planted bugs, deliberate defects for testing checkers (make test builds troop with them: go build -tags planted)`
	type outcome struct{ read, err string }
	want := map[string]outcome{"none": {}}
	if PlantedBugsBuilt {
		want["no-read-failover"] = outcome{read: BugNoReadFailover}
		want["lose-everything"] = outcome{err: `x.yml:6: troop_planted_bug: "lose-everything" is not a planted bug troop knows (want none, no-read-failover, local-writes-only, no-version-query, no-read-write-back, no-hinted-handoff, no-handoff-mirror or no-consensus)`}
	} else {
		want["no-read-failover"] = outcome{err: `x.yml:6: troop_planted_bug: "no-read-failover"` + without}
		want["lose-everything"] = outcome{err: `x.yml:6: troop_planted_bug: "lose-everything"` + without}
	}
	for bug, w := range want {
		c, err := Parse([]byte(with("  troop_planted_bug: "+bug+"\n")), "x.yml")
		switch {
		case w.err == "" && err != nil:
			t.Errorf("troop_planted_bug: %s: %v", bug, err)
		case w.err == "" && c.PlantedBug != w.read:
			t.Errorf("troop_planted_bug: %s read as %q, want %q", bug, c.PlantedBug, w.read)
		case w.err != "" && (err == nil || err.Error() != w.err):
			t.Errorf("troop_planted_bug: %s: got  %v\nwant %s", bug, err, w.err)
		}
	}
}
