package records

import (
	"context"
	"database/sql"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos"
)

func open(t *testing.T, path string, retention time.Duration) *Store {
	t.Helper()
	s, err := Open(path, retention)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func tempStore(t *testing.T, retention time.Duration) *Store {
	return open(t, filepath.Join(t.TempDir(), "chaos.db"), retention)
}

var base = time.Date(2026, 3, 10, 17, 0, 0, 0, time.UTC)

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := tempStore(t, 0)
	la, _ := time.LoadLocation("America/Los_Angeles")
	want := []chaos.Termination{
		{
			Group:    "cache",
			Instance: chaos.Instance{ID: "n3", Name: "node-3", Group: "cache", Labels: map[string]string{"dc": "dc1", "rack": "r2"}},
			Action:   chaos.Action{Kind: chaos.Pause, Duration: 90 * time.Second},
			Planned:  base.In(la),
			Executed: base.Add(1234567 * time.Nanosecond),
			Outcome:  chaos.Executed,
		},
		{Group: "web", Action: chaos.Action{Kind: chaos.Terminate}, Executed: base.Add(time.Hour), Outcome: chaos.Failed, Error: "pod delete: forbidden"},
		{Group: "web", Action: chaos.Action{Kind: chaos.Stop}, Planned: base.Add(2 * time.Hour), Outcome: chaos.Skipped, Reason: chaos.Holiday},
		{Group: "net", Action: chaos.Action{Kind: chaos.Delay, Duration: time.Minute, Delay: 50 * time.Millisecond, Jitter: 10 * time.Millisecond},
			Executed: base.Add(3 * time.Hour), Outcome: chaos.Executed, Recovery: 61 * time.Second},
	}
	for _, w := range want {
		if err := s.Record(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Terminations(ctx, chaos.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d terminations, want %d", len(got), len(want))
	}
	for i := range want {
		w := want[i]
		// Times come back in UTC; compare instants, then the rest.
		if !got[i].Planned.Equal(w.Planned) || !got[i].Executed.Equal(w.Executed) {
			t.Errorf("%d: times %v %v, want %v %v", i, got[i].Planned, got[i].Executed, w.Planned, w.Executed)
		}
		got[i].Planned, got[i].Executed, w.Planned, w.Executed = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if got[i].ID != int64(i+1) {
			t.Errorf("%d: ID %d, want %d", i, got[i].ID, i+1)
		}
		got[i].ID = 0
		if !reflect.DeepEqual(got[i], w) {
			t.Errorf("%d: got %+v, want %+v", i, got[i], w)
		}
	}

	if err := s.Record(ctx, chaos.Termination{Group: "web", Outcome: chaos.Executed}); err == nil {
		t.Error("a termination with no time was recorded")
	}
}

func TestPlanRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := tempStore(t, 0)
	day := chaos.Date{Year: 2026, Month: 3, Day: 10}
	if _, found, err := s.Plan(ctx, day); err != nil || found {
		t.Fatalf("plan before recording: found %v, err %v", found, err)
	}
	plan := []chaos.PlannedKill{
		{Group: "cache", Day: day, At: base, Action: chaos.Action{Kind: chaos.Terminate}, Pick: 1<<64 - 1},
		{Group: "web", Day: day, At: base.Add(time.Hour), Action: chaos.Action{Kind: chaos.BurnCPU, Duration: time.Minute}, Pick: 7, Skip: chaos.MinGap},
		{Group: "net", Day: day, At: base.Add(2 * time.Hour), Action: chaos.Action{Kind: chaos.Partition, Duration: time.Minute, Partition: chaos.Bridge}, Pick: 9},
	}
	if err := s.RecordPlan(ctx, day, plan); err != nil {
		t.Fatal(err)
	}
	got, found, err := s.Plan(ctx, day)
	if err != nil || !found || !reflect.DeepEqual(got, plan) {
		t.Fatalf("Plan = %+v, %v, %v; want %+v", got, found, err, plan)
	}
	// Re-planning replaces; an empty plan is still a plan.
	if err := s.RecordPlan(ctx, day, nil); err != nil {
		t.Fatal(err)
	}
	got, found, err = s.Plan(ctx, day)
	if err != nil || !found || len(got) != 0 {
		t.Fatalf("empty plan: %+v, %v, %v", got, found, err)
	}
}

func TestFilters(t *testing.T) {
	ctx := context.Background()
	s := tempStore(t, 0)
	rec := func(group string, kind chaos.Kind, at time.Time) {
		t.Helper()
		if err := s.Record(ctx, chaos.Termination{Group: group, Action: chaos.Action{Kind: kind}, Executed: at, Outcome: chaos.Executed}); err != nil {
			t.Fatal(err)
		}
	}
	// Out of order, and with a whole second next to a fraction: the text
	// form must still sort and compare as time.
	rec("web", chaos.Stop, base.Add(time.Second+100*time.Millisecond))
	rec("web", chaos.Terminate, base)
	rec("cache", chaos.Terminate, base.Add(time.Second))
	rec("web", chaos.Terminate, base.Add(2*time.Second))

	cases := []struct {
		q    chaos.Query
		want []time.Duration // offsets from base, in order
	}{
		{chaos.Query{}, []time.Duration{0, time.Second, 1100 * time.Millisecond, 2 * time.Second}},
		{chaos.Query{Group: "web"}, []time.Duration{0, 1100 * time.Millisecond, 2 * time.Second}},
		{chaos.Query{Kind: chaos.Terminate}, []time.Duration{0, time.Second, 2 * time.Second}},
		{chaos.Query{Since: base.Add(time.Second)}, []time.Duration{time.Second, 1100 * time.Millisecond, 2 * time.Second}},
		{chaos.Query{Since: base.Add(time.Second + time.Nanosecond)}, []time.Duration{1100 * time.Millisecond, 2 * time.Second}},
		{chaos.Query{Group: "web", Kind: chaos.Terminate, Since: base.Add(time.Nanosecond)}, []time.Duration{2 * time.Second}},
		{chaos.Query{Group: "nope"}, nil},
	}
	for _, c := range cases {
		got, err := s.Terminations(ctx, c.q)
		if err != nil {
			t.Fatal(err)
		}
		var offs []time.Duration
		for _, g := range got {
			offs = append(offs, g.Executed.Sub(base))
		}
		if !reflect.DeepEqual(offs, c.want) {
			t.Errorf("%+v: got %v, want %v", c.q, offs, c.want)
		}
	}
}

func TestPrune(t *testing.T) {
	ctx := context.Background()
	s := tempStore(t, 48*time.Hour)
	now := base
	for _, age := range []time.Duration{72 * time.Hour, 49 * time.Hour, 47 * time.Hour, time.Hour} {
		if err := s.Record(ctx, chaos.Termination{Group: "web", Action: chaos.Action{Kind: chaos.Terminate}, Executed: now.Add(-age), Outcome: chaos.Executed}); err != nil {
			t.Fatal(err)
		}
	}
	old, recent := chaos.DateOf(now).AddDays(-5), chaos.DateOf(now).AddDays(-1)
	for _, d := range []chaos.Date{old, recent} {
		if err := s.RecordPlan(ctx, d, nil); err != nil {
			t.Fatal(err)
		}
	}
	n, days, err := s.Prune(ctx, now)
	if err != nil || n != 2 || days != 1 {
		t.Fatalf("Prune = %d, %d, %v; want 2 terminations and 1 plan day", n, days, err)
	}
	left, _ := s.Terminations(ctx, chaos.Query{})
	if len(left) != 2 || now.Sub(left[0].Executed) != 47*time.Hour {
		t.Errorf("left %+v", left)
	}
	if _, found, _ := s.Plan(ctx, old); found {
		t.Error("old plan survived")
	}
	if _, found, _ := s.Plan(ctx, recent); !found {
		t.Error("recent plan was pruned")
	}

	keep := tempStore(t, 0)
	keep.Record(ctx, chaos.Termination{Group: "web", Executed: now.AddDate(-10, 0, 0), Outcome: chaos.Executed})
	if n, _, _ := keep.Prune(ctx, now); n != 0 {
		t.Errorf("retention 0 pruned %d", n)
	}
}

func TestRecordIfAdmittedAndSetOutcome(t *testing.T) {
	ctx := context.Background()
	s := tempStore(t, 0)
	// Only counting terminations reach admit.
	s.Record(ctx, chaos.Termination{Group: "web", Executed: base.Add(-time.Hour), Outcome: chaos.Skipped, Reason: chaos.InOutage})
	s.Record(ctx, chaos.Termination{Group: "web", Executed: base.Add(-time.Minute), Outcome: chaos.Skipped, Reason: chaos.Leashed})
	s.Record(ctx, chaos.Termination{Group: "cache", Executed: base.Add(-time.Minute), Outcome: chaos.Executed})

	var seen []chaos.Termination
	kill := chaos.Termination{Group: "web", Instance: chaos.Instance{ID: "p1"}, Action: chaos.Action{Kind: chaos.Terminate}}
	got, err := s.RecordIfAdmitted(ctx, kill, base, func(h []chaos.Termination) (bool, chaos.Reason) {
		seen = h
		return false, chaos.MinGap
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0].Reason != chaos.Leashed {
		t.Errorf("admit saw %+v, want the one leashed kill", seen)
	}
	if got.Outcome != chaos.Skipped || got.Reason != chaos.MinGap || !got.Executed.Equal(base) {
		t.Errorf("refused kill recorded as %+v", got)
	}

	later := base.Add(time.Hour)
	got, err = s.RecordIfAdmitted(ctx, kill, later, func([]chaos.Termination) (bool, chaos.Reason) { return true, "" })
	if err != nil || got.Outcome != chaos.Executed {
		t.Fatalf("admitted kill: %+v, %v", got, err)
	}
	if got.ID == 0 {
		t.Fatal("the admitted kill has no ID")
	}
	got.Outcome, got.Error = chaos.Failed, "kill: no such process"
	if err := s.SetOutcome(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRecovery(ctx, got.ID, 42*time.Second); err != nil {
		t.Fatal(err)
	}
	all, _ := s.Terminations(ctx, chaos.Query{Group: "web", Since: later})
	if len(all) != 1 || all[0].ID != got.ID || all[0].Outcome != chaos.Failed || all[0].Error != "kill: no such process" || all[0].Recovery != 42*time.Second {
		t.Errorf("after SetOutcome and SetRecovery: %+v", all)
	}
	if all, _ := s.Terminations(ctx, chaos.Query{Group: "web"}); all[0].Recovery != 0 {
		t.Errorf("unmeasured recovery read as %v", all[0].Recovery)
	}
	if err := s.SetRecovery(ctx, got.ID+100, time.Second); err == nil {
		t.Error("SetRecovery of a missing termination did not fail")
	}
}

// The global stop persists and is read inside RecordIfAdmitted's
// transaction: a stopped kill is recorded as skipped (stopped) without
// asking admit.
func TestStopInAdmission(t *testing.T) {
	ctx := context.Background()
	s := tempStore(t, 0)
	if on, err := s.Stopped(ctx); on || err != nil {
		t.Fatalf("new store: stopped %v, %v", on, err)
	}
	if err := s.SetStopped(ctx, true); err != nil {
		t.Fatal(err)
	}
	asked := false
	admit := func([]chaos.Termination) (bool, chaos.Reason) { asked = true; return true, "" }
	kill := chaos.Termination{Group: "web", Action: chaos.Action{Kind: chaos.Terminate}}
	got, err := s.RecordIfAdmitted(ctx, kill, base, admit)
	if err != nil || got.Outcome != chaos.Skipped || got.Reason != chaos.Stopped || asked {
		t.Fatalf("while stopped: %+v, %v, admit asked %v", got, err, asked)
	}
	s.SetStopped(ctx, false)
	if got, _ = s.RecordIfAdmitted(ctx, kill, base.Add(time.Hour), admit); got.Outcome != chaos.Executed || !asked {
		t.Fatalf("after resume: %+v", got)
	}
}

// TestRecordIfAdmittedRace runs two monkeys, each with its own connection
// pool on the same file, that try to kill the same group at the same time
// with a rule that admits only the first kill: exactly one must win, in
// every round.
func TestRecordIfAdmittedRace(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shared.db")
	stores := []*Store{open(t, path, 0), open(t, path, 0)}
	onlyFirst := func(h []chaos.Termination) (bool, chaos.Reason) {
		if len(h) > 0 {
			// Widen the window a racing reader would slip through.
			time.Sleep(time.Millisecond)
			return false, chaos.MaxPerDay
		}
		time.Sleep(time.Millisecond)
		return true, ""
	}
	const rounds = 20
	for r := range rounds {
		group := "g" + string(rune('a'+r))
		var wg sync.WaitGroup
		results := make([]chaos.Termination, len(stores))
		errs := make([]error, len(stores))
		start := make(chan struct{})
		for i, s := range stores {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.RecordIfAdmitted(ctx, chaos.Termination{Group: group, Action: chaos.Action{Kind: chaos.Terminate}}, base, onlyFirst)
			})
		}
		close(start)
		wg.Wait()
		admitted := 0
		for i := range stores {
			if errs[i] != nil {
				t.Fatalf("round %d, monkey %d: %v", r, i, errs[i])
			}
			if results[i].Outcome == chaos.Executed {
				admitted++
			} else if results[i].Reason != chaos.MaxPerDay {
				t.Errorf("round %d: refused with %q", r, results[i].Reason)
			}
		}
		if admitted != 1 {
			t.Fatalf("round %d: %d monkeys admitted, want exactly 1", r, admitted)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open("", time.Hour); err == nil {
		t.Error("empty path opened")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "a?b.db"), time.Hour); err == nil {
		t.Error("path with ? opened")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "x.db"), -time.Hour); err == nil {
		t.Error("negative retention accepted")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing", "x.db"), 0); err == nil {
		t.Error("database in a missing directory opened")
	}
}

// A database made before actions had parameters opens, keeps its rows,
// and takes actions with parameters from then on.
func TestUpgradeAddsActions(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	oldSchema := strings.NewReplacer("	action      TEXT NOT NULL DEFAULT '',    -- the chaos.Action as JSON, with its parameters\n", "").Replace(schema)
	if oldSchema == schema {
		t.Fatal("the old schema is the new one")
	}
	if _, err := old.Exec(oldSchema); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(`INSERT INTO terminations (grp, kind, duration_ns, at, outcome) VALUES ('web', 'pause', 30000000000, '2026-03-10T17:00:00.000000000Z', 'executed')`); err != nil {
		t.Fatal(err)
	}
	old.Close()
	s := open(t, path, 0)
	loss := chaos.Termination{Group: "web", Action: chaos.Action{Kind: chaos.Loss, Duration: time.Minute, Percent: 20}, Executed: base.Add(time.Hour), Outcome: chaos.Executed}
	if err := s.Record(ctx, loss); err != nil {
		t.Fatal(err)
	}
	got, err := s.Terminations(ctx, chaos.Query{})
	if err != nil || len(got) != 2 {
		t.Fatalf("%+v, %v", got, err)
	}
	if got[0].Action != (chaos.Action{Kind: chaos.Pause, Duration: 30 * time.Second}) || got[1].Action != loss.Action {
		t.Errorf("actions: %+v and %+v", got[0].Action, got[1].Action)
	}
}
