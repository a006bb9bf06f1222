package monkey

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/api"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/chaos/records"
)

// The daemon's decisions are tested here against a backend double (the
// real lab backend is exercised by chaos/labchaos and by cmd/troop's
// tests, which run the monkey against a real lab): it records what it is
// asked to do and reports a fixed recovery time.

type act struct {
	at     time.Time
	inst   string
	action chaos.Action
}

type fakeBackend struct {
	clock  Clock
	mu     sync.Mutex
	acts   []act
	refuse bool // decline every action, as kubernetes does below a workload's minimum
}

const fakeRecovery = 1500 * time.Millisecond

func (f *fakeBackend) Instances(_ context.Context, g *chaos.Group) ([]chaos.Instance, error) {
	var out []chaos.Instance
	for _, id := range []string{"n1", "n2", "n3"} {
		out = append(out, chaos.Instance{ID: id, Name: id, Group: g.Name})
	}
	return out, nil
}

func (f *fakeBackend) Act(_ context.Context, inst chaos.Instance, a chaos.Action) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse {
		return fmt.Errorf("fake backend: %s would leave too few ready: %w", inst.ID, chaos.ErrRefused)
	}
	f.acts = append(f.acts, act{f.clock.Now(), inst.ID, a})
	return nil
}

func (f *fakeBackend) AwaitRecovery(context.Context, chaos.Instance, time.Time) (time.Duration, error) {
	return fakeRecovery, nil
}

func (f *fakeBackend) Acts() []act {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]act(nil), f.acts...)
}

var errEnd = errors.New("end of the simulated time")

// fakeClock jumps over every sleep, and ends at end.
type fakeClock struct {
	mu       sync.Mutex
	now, end time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	if !c.now.Before(c.end) {
		return errEnd
	}
	return ctx.Err()
}

func newMonkey(t *testing.T, yaml string, clk Clock) (*Monkey, *fakeBackend) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "chaos.yml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := chaos.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := records.Open(cfg.Path(cfg.DB), cfg.Retention)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	fb := &fakeBackend{clock: clk}
	return &Monkey{
		Config: cfg, Records: rec, Clock: clk, Seed: 42, Outage: NewOutageChecker(cfg),
		Backend: func(chaos.Backend) (chaos.Terminator, error) { return fb, nil },
	}, fb
}

const weekConfig = `leashed: false
groups:
  - name: g
    backend: lab
    enabled: true
    probability: 1
    min_time_between_kills: 1
    max_terminations_per_day: 1
  - name: off
    backend: lab
`

func TestRunWeek(t *testing.T) {
	loc, _ := time.LoadLocation("America/Los_Angeles")
	// Monday 2026-11-23 to Saturday; Thursday the 26th is Thanksgiving.
	start := time.Date(2026, 11, 23, 0, 0, 0, 0, loc)
	clk := &fakeClock{now: start, end: start.AddDate(0, 0, 5)}
	m, fb := newMonkey(t, weekConfig, clk)
	if err := m.Run(t.Context()); !errors.Is(err, errEnd) {
		t.Fatalf("Run = %v, want the clock's end", err)
	}
	acts := fb.Acts()
	wantDays := []int{23, 24, 25, 27}
	if len(acts) != len(wantDays) {
		t.Fatalf("%d actions, want one on each work day %v: %+v", len(acts), wantDays, acts)
	}
	ts, err := m.Records.Terminations(t.Context(), chaos.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var executed, holiday []chaos.Termination
	for _, tr := range ts {
		switch {
		case tr.Outcome == chaos.Executed:
			executed = append(executed, tr)
		case tr.Reason == chaos.Holiday:
			holiday = append(holiday, tr)
		default:
			t.Errorf("unexpected record %+v", tr)
		}
	}
	for i, a := range acts {
		local := a.at.In(loc)
		if local.Day() != wantDays[i] || local.Hour() < 9 || local.Hour() >= 15 {
			t.Errorf("action %d at %v: want on the %d, 09:00 to 15:00", i, local, wantDays[i])
		}
		if i < len(executed) {
			e := executed[i]
			if !e.Planned.Equal(a.at) || !e.Executed.Equal(a.at) || e.Instance.ID != a.inst || e.Recovery != fakeRecovery {
				t.Errorf("record %d = %+v; want planned and executed at %v, instance %s, recovery %v", i, e, a.at, a.inst, fakeRecovery)
			}
		}
	}
	if len(holiday) != 1 || holiday[0].Group != "g" || holiday[0].Executed.In(loc).Day() != 26 {
		t.Errorf("holiday records %+v, want one for group g on the 26th", holiday)
	}
	for day := 23; day <= 27; day++ {
		if _, found, err := m.Records.Plan(t.Context(), chaos.Date{Year: 2026, Month: 11, Day: day}); !found || err != nil {
			t.Errorf("no stored plan for 2026-11-%d (%v)", day, err)
		}
	}

	// A restarted daemon over the same days reads the stored plans and
	// repeats nothing.
	clk2 := &fakeClock{now: start, end: start.AddDate(0, 0, 5)}
	fb2 := &fakeBackend{clock: clk2}
	m2 := &Monkey{Config: m.Config, Records: m.Records, Clock: clk2, Seed: m.Seed,
		Backend: func(chaos.Backend) (chaos.Terminator, error) { return fb2, nil }}
	m2.Run(t.Context())
	if n := len(fb2.Acts()); n != 0 {
		t.Errorf("restarted daemon acted %d times on days already done", n)
	}
}

const onDemandConfig = `leashed: false
on_demand: true
outage: {file: outage}
groups:
  - name: g
    backend: lab
    enabled: true
    min_time_between_kills: 1h
    max_terminations_per_day: 5
`

func TestKillChecks(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC), end: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, fb := newMonkey(t, onDemandConfig, clk)
	ctx := t.Context()
	outage := m.Config.Path("outage")
	kill := func(want chaos.Outcome, why chaos.Reason) chaos.Termination {
		t.Helper()
		tr, err := m.Kill(ctx, "g", chaos.Action{Kind: chaos.Terminate})
		if err != nil || tr.Outcome != want || tr.Reason != why {
			t.Fatalf("Kill = %+v, %v; want %s %s", tr, err, want, why)
		}
		return tr
	}

	os.WriteFile(outage, nil, 0o644)
	kill(chaos.Skipped, chaos.InOutage)
	os.Remove(outage)

	if err := m.Stop(ctx); err != nil || !m.Stopped() {
		t.Fatalf("Stop: %v, stopped %v", err, m.Stopped())
	}
	kill(chaos.Skipped, chaos.Stopped)
	if len(fb.Acts()) != 0 {
		t.Fatalf("acted while in an outage or stopped: %+v", fb.Acts())
	}
	m.Resume(ctx)
	// A Saturday night: on demand, the calendar does not apply.
	tr := kill(chaos.Executed, "")
	m.Wait()
	if len(fb.Acts()) != 1 {
		t.Fatalf("%d actions after resume, want 1", len(fb.Acts()))
	}
	got, _ := m.Records.Terminations(ctx, chaos.Query{Group: "g", Since: tr.Executed})
	if len(got) != 3 || got[2].ID != tr.ID || got[2].Recovery != fakeRecovery {
		t.Errorf("recovery not recorded: %+v", got)
	}
	// The gap holds for on-demand kills.
	if tr, _ := m.Kill(ctx, "g", chaos.Action{Kind: chaos.Terminate}); tr.Reason != chaos.MinGap {
		t.Errorf("kill within the gap: %+v", tr)
	}
	if _, err := m.Kill(ctx, "nope", chaos.Action{Kind: chaos.Terminate}); !errors.Is(err, api.ErrUnknownGroup) {
		t.Errorf("unknown group: %v", err)
	}
	// A temporary action needs a backend with leases.
	clk.Sleep(ctx, 2*time.Hour)
	if tr, err := m.Kill(ctx, "g", chaos.Action{Kind: chaos.Pause, Duration: time.Second}); err == nil || tr.Outcome != chaos.Failed {
		t.Errorf("pause without leases: %+v, %v", tr, err)
	}
}

// A kill the backend refuses is recorded as skipped (refused), with the
// backend's reason, and does not count against the group's gap.
func TestRefusedKill(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC), end: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, fb := newMonkey(t, onDemandConfig, clk)
	fb.refuse = true
	tr, err := m.Kill(t.Context(), "g", chaos.Action{Kind: chaos.Terminate})
	if err != nil || tr.Outcome != chaos.Skipped || tr.Reason != chaos.Refused || !strings.Contains(tr.Error, "too few ready") {
		t.Fatalf("refused kill: %+v, %v", tr, err)
	}
	got, _ := m.Records.Terminations(t.Context(), chaos.Query{Group: "g"})
	if len(got) != 1 || got[0].Reason != chaos.Refused {
		t.Fatalf("records: %+v", got)
	}
	fb.refuse = false
	if tr, err := m.Kill(t.Context(), "g", chaos.Action{Kind: chaos.Terminate}); err != nil || tr.Outcome != chaos.Executed {
		t.Fatalf("a refused kill counted against the gap: %+v, %v", tr, err)
	}
	m.Wait()
}

func TestLeashed(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC), end: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, fb := newMonkey(t, "groups: [{name: g, backend: lab, enabled: true}]\n", clk)
	tr, err := m.Kill(t.Context(), "g", chaos.Action{Kind: chaos.Terminate})
	if err != nil || tr.Reason != chaos.Leashed || len(fb.Acts()) != 0 {
		t.Fatalf("leashed kill: %+v, %v, acts %v", tr, err, fb.Acts())
	}
}

func TestURLOutageFailsClosed(t *testing.T) {
	status := http.StatusNotFound
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	o := &URLOutage{URL: srv.URL, Client: srv.Client()}
	for _, tc := range []struct {
		status int
		ok     bool
	}{{http.StatusNotFound, true}, {http.StatusNoContent, true}, {http.StatusOK, false}, {http.StatusInternalServerError, false}} {
		status = tc.status
		if ok, _, _ := chaos.CheckOutage(t.Context(), o); ok != tc.ok {
			t.Errorf("status %d: kill allowed %v, want %v", tc.status, ok, tc.ok)
		}
	}
	srv.Close()
	if ok, _, _ := chaos.CheckOutage(t.Context(), o); ok {
		t.Error("an unreachable outage source allowed a kill")
	}
}

// leasingBackend leases every action; its Begin runs during a global
// stop (a stop that came while the fault was put in place), and it counts
// the faults in place.
type leasingBackend struct {
	fakeBackend
	m        *Monkey
	stopMid  bool          // the stop comes while Begin runs, after the fault is whole
	endMid   *lease.Store  // the lease ends while Begin runs: its watchdog reverts it from there
	fail     error         // Begin fails halfway, with the fault partly in place
	slow     time.Duration // Begin takes this long on the fake clock
	inPlace  int
	reverted int
}

func (b *leasingBackend) LeaseFor(_ context.Context, _ chaos.Instance, a chaos.Action) (time.Duration, bool, error) {
	return a.Duration, true, nil
}

func (b *leasingBackend) Begin(ctx context.Context, l chaos.Lease) (map[string]string, error) {
	b.mu.Lock()
	b.inPlace++
	b.mu.Unlock()
	if b.fail != nil {
		return nil, b.fail
	}
	if b.stopMid {
		if err := b.m.Stop(ctx); err != nil {
			return nil, err
		}
	}
	if b.slow > 0 {
		b.clock.Sleep(ctx, b.slow)
	}
	if b.endMid != nil {
		if err := b.endMid.Revert(ctx, l, b.Revert); err != nil {
			return nil, err
		}
		b.mu.Lock()
		b.inPlace++ // the rest of Begin puts the fault back in place
		b.mu.Unlock()
	}
	return map[string]string{"k": "v"}, nil
}

func (b *leasingBackend) Revert(_ context.Context, l chaos.Lease) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inPlace > 0 {
		b.inPlace--
	}
	b.reverted++
	return nil
}

// A global stop that comes while a fault is being put in place wins: the
// fault is undone, no lease is left, and the kill is recorded failed
// with the reason.
func TestStopWhileActing(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC), end: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, _ := newMonkey(t, onDemandConfig, clk)
	b := &leasingBackend{fakeBackend: fakeBackend{clock: clk}, m: m, stopMid: true}
	m.Backend = func(chaos.Backend) (chaos.Terminator, error) { return b, nil }
	leases, err := lease.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m.Leases, m.StartWatchdog = leases, func(string) error { return nil }
	tr, err := m.Kill(t.Context(), "g", chaos.Action{Kind: chaos.Delay, Duration: time.Minute, Delay: 50 * time.Millisecond})
	if !errors.Is(err, errStoppedWhileActing) || tr.Outcome != chaos.Failed {
		t.Fatalf("kill overtaken by a stop: %+v, %v", tr, err)
	}
	if b.inPlace != 0 {
		t.Errorf("%d faults still in place after the stop", b.inPlace)
	}
	if left, _ := leases.List(); len(left) != 0 {
		t.Errorf("leases left: %v", left)
	}
	got, _ := m.Records.Terminations(t.Context(), chaos.Query{Group: "g"})
	if len(got) != 1 || got[0].Outcome != chaos.Failed || !strings.Contains(got[0].Error, "global stop") {
		t.Errorf("records: %+v", got)
	}
	m.Wait()
}

// A lease that ends while its fault is being put in place (its watchdog
// reverts it, and exits) leaves no fault and no lease: the monkey undoes
// what Begin finished after the revert, and records the kill failed with
// the reason.
func TestLeaseEndedWhileActing(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC), end: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, _ := newMonkey(t, onDemandConfig, clk)
	leases, err := lease.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &leasingBackend{fakeBackend: fakeBackend{clock: clk}, m: m, endMid: leases}
	m.Backend = func(chaos.Backend) (chaos.Terminator, error) { return b, nil }
	m.Leases, m.StartWatchdog = leases, func(string) error { return nil }
	tr, err := m.Kill(t.Context(), "g", chaos.Action{Kind: chaos.Delay, Duration: 3 * time.Second, Delay: 50 * time.Millisecond})
	if tr.Outcome != chaos.Failed || !strings.Contains(fmt.Sprint(err), "lease ended while the fault was being put in place") {
		t.Fatalf("kill whose lease ended while acting: %+v, %v", tr, err)
	}
	if b.inPlace != 0 {
		t.Errorf("%d faults still in place, with no lease to undo them", b.inPlace)
	}
	if left, _ := leases.List(); len(left) != 0 {
		t.Errorf("leases left with no watchdog: %v", left)
	}
	m.Wait()
}

// A fault that took longer to put in place than it lasts (a delay's queue
// starting on a busy machine) still lasts its whole duration, counted from
// when it was whole: the lease and the termination's executed time say so.
func TestLeaseCountsFromWholeFault(t *testing.T) {
	start := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	clk := &fakeClock{now: start, end: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, _ := newMonkey(t, onDemandConfig, clk)
	leases, err := lease.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var first chaos.Lease // the lease as stored before Begin
	b := &leasingBackend{fakeBackend: fakeBackend{clock: clk}, m: m, slow: 5 * time.Second}
	m.Backend = func(chaos.Backend) (chaos.Terminator, error) { return b, nil }
	m.Leases = leases
	m.StartWatchdog = func(id string) (err error) { first, err = leases.Load(id); return err }
	d := 3 * time.Second
	tr, err := m.Kill(t.Context(), "g", chaos.Action{Kind: chaos.Delay, Duration: d, Delay: 50 * time.Millisecond})
	if err != nil || tr.Outcome != chaos.Executed {
		t.Fatalf("kill with a slow Begin: %+v, %v", tr, err)
	}
	whole := start.Add(b.slow)
	if !first.Until.After(start.Add(d + b.slow)) {
		t.Errorf("lease before Begin ends %v: a monkey dying in a Begin that takes %v would leave the fault %v short", first.Until, b.slow, start.Add(d+b.slow).Sub(first.Until))
	}
	ls, err := leases.List()
	if err != nil || len(ls) != 1 {
		t.Fatalf("leases: %v, %v", ls, err)
	}
	if !ls[0].Start.Equal(whole) || !ls[0].Until.Equal(whole.Add(d)) {
		t.Errorf("lease from %v until %v, want from %v (the fault whole) until %v", ls[0].Start, ls[0].Until, whole, whole.Add(d))
	}
	if !tr.Executed.Equal(whole) {
		t.Errorf("executed at %v, want %v, when the fault was whole", tr.Executed, whole)
	}
	got, _ := m.Records.Terminations(t.Context(), chaos.Query{Group: "g"})
	if len(got) != 1 || !got[0].Executed.Equal(whole) {
		t.Errorf("records: %+v", got)
	}
	m.Wait()
}

// A fault that fails halfway is undone, leaves no lease, and is recorded
// failed with its error.
func TestFailedFaultRecorded(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC), end: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, _ := newMonkey(t, onDemandConfig, clk)
	b := &leasingBackend{fakeBackend: fakeBackend{clock: clk}, m: m, fail: errors.New("partition: dc1-rack3-1: cannot enter its namespace")}
	m.Backend = func(chaos.Backend) (chaos.Terminator, error) { return b, nil }
	leases, err := lease.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m.Leases, m.StartWatchdog = leases, func(string) error { return nil }
	tr, err := m.Kill(t.Context(), "g", chaos.Action{Kind: chaos.Partition, Duration: time.Minute, Partition: chaos.Isolate})
	if err == nil || tr.Outcome != chaos.Failed {
		t.Fatalf("a failed partition: %+v, %v", tr, err)
	}
	if b.inPlace != 0 || b.reverted == 0 {
		t.Errorf("after the failure: %d faults in place, %d reverts", b.inPlace, b.reverted)
	}
	if left, _ := leases.List(); len(left) != 0 {
		t.Errorf("leases left: %v", left)
	}
	got, _ := m.Records.Terminations(t.Context(), chaos.Query{Group: "g"})
	if len(got) != 1 || got[0].Outcome != chaos.Failed || !strings.Contains(got[0].Error, "cannot enter its namespace") {
		t.Errorf("records: %+v", got)
	}
	m.Wait()
}
