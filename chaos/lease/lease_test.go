package lease

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/troop-lab/troop/chaos"
)

var t0 = time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)

func newLease(start time.Time, d time.Duration) chaos.Lease {
	return chaos.Lease{
		ID: NewID(start), Group: "g", Backend: chaos.Lab,
		Instance: chaos.Instance{ID: "dc1-rack1-1", Name: "dc1-rack1-1", Group: "g"},
		Action:   chaos.Action{Kind: chaos.Pause, Duration: d},
		Start:    start, Until: start.Add(d),
	}
}

func TestStore(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "leases"))
	if err != nil {
		t.Fatal(err)
	}
	a, b := newLease(t0.Add(time.Second), time.Minute), newLease(t0, time.Hour)
	b.Undo = map[string]string{"pid": "42"}
	for _, l := range []chaos.Lease{a, b} {
		if err := s.Save(l); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Load(b.ID)
	if err != nil || got.Undo["pid"] != "42" || !got.Until.Equal(b.Until) || got.Instance.ID != b.Instance.ID {
		t.Fatalf("Load = %+v, %v; want %+v", got, err, b)
	}
	ls, err := s.List()
	if err != nil || len(ls) != 2 || ls[0].ID != b.ID || ls[1].ID != a.ID {
		t.Fatalf("List = %v, %v; want b then a (by start)", ls, err)
	}
	if err := s.Delete(a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(a.ID); err != nil {
		t.Fatalf("second Delete: %v; want nil", err)
	}
	if _, err := s.Load(a.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load of a deleted lease: %v; want ErrNotFound", err)
	}
	for _, id := range []string{"", "../x", ".tmp", "a/b"} {
		if err := s.Save(chaos.Lease{ID: id}); err == nil {
			t.Errorf("Save with ID %q: no error", id)
		}
	}
	// A corrupt file is an error, not a lease silently forgotten.
	os.WriteFile(filepath.Join(s.Dir(), "bad.json"), []byte("{"), 0o644)
	if _, err := s.List(); err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Fatalf("List with a corrupt file: %v; want an error naming it", err)
	}
}

func TestSweep(t *testing.T) {
	s, _ := Open(t.TempDir())
	old, fresh, failing := newLease(t0, time.Minute), newLease(t0.Add(time.Second), time.Hour), newLease(t0.Add(2*time.Second), time.Minute)
	failing.Instance.ID = "bad"
	for _, l := range []chaos.Lease{old, fresh, failing} {
		s.Save(l)
	}
	var reverted []string
	revert := func(_ context.Context, l chaos.Lease) error {
		if l.Instance.ID == "bad" {
			return errors.New("boom")
		}
		reverted = append(reverted, l.ID)
		return nil
	}
	done, err := s.Sweep(t.Context(), t0.Add(10*time.Minute), false, revert)
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Sweep error = %v; want the failing revert's", err)
	}
	if len(done) != 1 || done[0].ID != old.ID || len(reverted) != 1 {
		t.Fatalf("Sweep of expired reverted %v; want only %s", reverted, old.ID)
	}
	ls, _ := s.List()
	if len(ls) != 2 {
		t.Fatalf("after the sweep %d leases remain; want the fresh one and the failed one", len(ls))
	}
	done, _ = s.Sweep(t.Context(), t0, true, revert)
	if len(done) != 1 || done[0].ID != fresh.ID {
		t.Fatalf("Sweep(all) reverted %v; want the unexpired %s too", done, fresh.ID)
	}
}

// fakeClock is a clock whose Sleep advances it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return ctx.Err()
}

func TestWatchdogRevertsAtUntil(t *testing.T) {
	s, _ := Open(t.TempDir())
	l := newLease(t0, 30*time.Second)
	s.Save(l)
	clk := &fakeClock{now: t0}
	var at []time.Time
	w := &Watchdog{Store: s, ID: l.ID, Now: clk.Now, Sleep: clk.Sleep, Poll: 7 * time.Second,
		Revert: func(context.Context, chaos.Lease) error { at = append(at, clk.Now()); return nil }}
	if err := w.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(at) != 1 || !at[0].Equal(l.Until) {
		t.Fatalf("reverted at %v; want once at %v", at, l.Until)
	}
	if _, err := s.Load(l.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lease still stored after the revert: %v", err)
	}
}

func TestWatchdogEndsWhenLeaseGone(t *testing.T) {
	s, _ := Open(t.TempDir())
	l := newLease(t0, time.Hour)
	s.Save(l)
	clk := &fakeClock{now: t0}
	polls := 0
	w := &Watchdog{Store: s, ID: l.ID, Now: clk.Now, Poll: time.Second,
		Sleep: func(ctx context.Context, d time.Duration) error {
			if polls++; polls == 3 {
				s.Delete(l.ID) // the global stop reverted it
			}
			return clk.Sleep(ctx, d)
		},
		Revert: func(context.Context, chaos.Lease) error { t.Error("reverted a lease that is gone"); return nil }}
	if err := w.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if polls != 3 {
		t.Fatalf("watchdog polled %d times; want it to stop at the third, when the lease went", polls)
	}
}

func TestWatchdogGivesUp(t *testing.T) {
	s, _ := Open(t.TempDir())
	l := newLease(t0, time.Second)
	s.Save(l)
	clk := &fakeClock{now: t0}
	tries := 0
	w := &Watchdog{Store: s, ID: l.ID, Now: clk.Now, Sleep: clk.Sleep, GiveUp: 5 * time.Minute,
		Revert: func(context.Context, chaos.Lease) error { tries++; return errors.New("lab unreachable") }}
	err := w.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "lab unreachable") {
		t.Fatalf("Run = %v; want it to give up with the revert's error", err)
	}
	if elapsed := clk.Now().Sub(l.Until); elapsed < 5*time.Minute || elapsed > 6*time.Minute {
		t.Fatalf("gave up %v after the lease's end; want just past 5m", elapsed)
	}
	if _, err := s.Load(l.ID); err != nil {
		t.Fatalf("the unreverted lease must stay for the sweep: %v", err)
	}
	if tries < 3 {
		t.Fatalf("%d tries; want retries", tries)
	}
}

func TestSpawnDetaches(t *testing.T) {
	log := filepath.Join(t.TempDir(), "spawn.log")
	pid, err := Spawn([]string{"sleep", "30"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	// Field 6 of /proc/PID/stat is the session ID: setsid makes it the PID.
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if sid := fields[3]; sid != strconv.Itoa(pid) {
		t.Fatalf("spawned process %d is in session %s; want its own", pid, sid)
	}
	if _, err := Spawn(nil, log); err == nil {
		t.Fatal("Spawn of nothing: no error")
	}
}
