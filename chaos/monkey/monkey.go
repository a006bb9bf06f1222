// Package monkey is the acting part of troop chaos: it chooses an
// instance, checks the global stop, the outage source, the calendar, the
// gap and the daily maximum, records the decision, acts through the
// backend (with a lease for faults that must be undone), and measures the
// recovery. `troop chaos kill` uses it for one kill, `troop chaos serve`
// for the daemon (Run) and the REST API (it is the API's Killer and
// Switch).
package monkey

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/api"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/chaos/records"
	"github.com/troop-lab/troop/internal/ctxtime"
)

// Clock is the daemon's time: the real one, or a fake in tests.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends (then it returns ctx's error).
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// Sleep implements Clock.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error { return ctxtime.Sleep(ctx, d) }

// Monkey acts on the groups of one config. Fill the fields, then use it;
// it is safe for concurrent use.
type Monkey struct {
	Config  *chaos.Config
	Records *records.Store
	Leases  *lease.Store
	// Backend builds the Terminator of a backend; each is built once, on
	// first use.
	Backend func(chaos.Backend) (chaos.Terminator, error)
	// StartWatchdog starts the detached process that reverts lease id at
	// its end (troop chaos watchdog). Required for leased actions.
	StartWatchdog func(id string) error
	Outage        chaos.OutageChecker // nil: no outage source
	Clock         Clock               // nil: RealClock
	// Seed seeds the daily plans (chaos.DayRand) and the picks of
	// on-demand kills.
	Seed uint64
	// RecoverWithin bounds the wait for a group's recovery after an
	// action (after the lease's end for leased ones). 0: 5 minutes.
	RecoverWithin time.Duration
	Logger        *slog.Logger // nil: discard

	mu       sync.Mutex
	backends map[chaos.Backend]chaos.Terminator
	rng      *rand.Rand
	wg       sync.WaitGroup // recoveries in flight
}

var (
	_ api.Killer = (*Monkey)(nil)
	_ api.Switch = (*Monkey)(nil)
)

func (m *Monkey) clock() Clock {
	if m.Clock == nil {
		return RealClock{}
	}
	return m.Clock
}

func (m *Monkey) log() *slog.Logger {
	if m.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Logger
}

func (m *Monkey) recoverWithin() time.Duration {
	if m.RecoverWithin <= 0 {
		return 5 * time.Minute
	}
	return m.RecoverWithin
}

func (m *Monkey) backend(b chaos.Backend) (chaos.Terminator, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.backends[b]; ok {
		return t, nil
	}
	if m.Backend == nil {
		return nil, fmt.Errorf("no %s backend", b)
	}
	t, err := m.Backend(b)
	if err != nil {
		return nil, err
	}
	if m.backends == nil {
		m.backends = map[chaos.Backend]chaos.Terminator{}
	}
	m.backends[b] = t
	return t, nil
}

// pick draws the pick of an on-demand kill.
func (m *Monkey) pick() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rng == nil {
		m.rng = rand.New(rand.NewPCG(m.Seed, 0x6f6e64656d616e64)) // "ondemand"
	}
	return m.rng.Uint64()
}

// Mode says which admission checks a kill goes through. The global stop,
// the outage source and the leash apply to every mode.
type Mode int

const (
	// Planned kills also check the calendar, the gap and the maximum
	// (chaos.Config.Admit).
	Planned Mode = iota
	// OnDemand kills (POST /api/v1/chaos) check the gap and the maximum,
	// not the calendar (chaos.Config.AdmitOnDemand).
	OnDemand
	// Forced kills (troop chaos kill) check neither: an operator asked for
	// this one, now.
	Forced
)

// Execute carries out one kill: chooses the instance with k.Pick, decides
// (stop, outage, admission by mode, leash), records the decision and,
// if admitted, acts. A kill the plan already skipped (k.Skip) is recorded
// as skipped. The returned termination is what was recorded, with its ID;
// the error is the action's, when it failed (the record says so too).
// Execute does not wait for the recovery: see AwaitRecovery.
func (m *Monkey) Execute(ctx context.Context, k chaos.PlannedKill, mode Mode) (chaos.Termination, error) {
	g := m.Config.Group(k.Group)
	if g == nil {
		return chaos.Termination{}, fmt.Errorf("group %q: %w", k.Group, api.ErrUnknownGroup)
	}
	now := m.clock().Now()
	term := chaos.Termination{Group: g.Name, Action: k.Action, Executed: now}
	if mode == Planned {
		term.Planned = k.At
	}
	if k.Skip != "" {
		term.Outcome, term.Reason = chaos.Skipped, k.Skip
		return m.Records.Add(ctx, term)
	}
	t, err := m.backend(g.Backend)
	if err != nil {
		return m.fail(ctx, term, err)
	}
	live, err := t.Instances(ctx, g)
	if err != nil {
		return m.fail(ctx, term, err)
	}
	inst, ok := k.Choose(g, live)
	if !ok {
		term.Outcome, term.Reason = chaos.Skipped, chaos.NoInstance
		return m.Records.Add(ctx, term)
	}
	term.Instance = inst
	// The outage source is asked outside the records' transaction (it may
	// be slow); a stop is checked here only to say "stopped" rather than
	// "outage" while both hold, and again inside the transaction.
	if stopped, err := m.Records.Stopped(ctx); err != nil || !stopped {
		if ok, why, oerr := chaos.CheckOutage(ctx, m.Outage); !ok {
			term.Outcome, term.Reason = chaos.Skipped, why
			if oerr != nil {
				term.Error = oerr.Error()
				m.log().Warn("outage source failed: no kill", "group", g.Name, "err", oerr)
			}
			return m.Records.Add(ctx, term)
		}
	}
	term, err = m.Records.RecordIfAdmitted(ctx, term, now, func(history []chaos.Termination) (bool, chaos.Reason) {
		ok, why := true, chaos.Reason("")
		switch mode {
		case Planned:
			ok, why = m.Config.Admit(history, k, now)
		case OnDemand:
			ok, why = m.Config.AdmitOnDemand(history, g.Name, now)
		}
		if ok && m.Config.Leashed {
			return false, chaos.Leashed
		}
		return ok, why
	})
	if err != nil || term.Outcome != chaos.Executed {
		return term, err
	}
	placed, err := m.act(ctx, t, term, others(live, inst), now)
	if err != nil {
		term.Outcome, term.Error = chaos.Failed, err.Error()
		if errors.Is(err, chaos.ErrRefused) {
			term.Outcome, term.Reason, err = chaos.Skipped, chaos.Refused, nil
		}
		if serr := m.Records.SetOutcome(context.WithoutCancel(ctx), term); serr != nil {
			err = errors.Join(err, serr)
		}
		return term, err
	}
	if !placed.Equal(term.Executed) {
		// Executed is when the fault was in place, which its lease and
		// whoever waits for its end count from.
		term.Executed = placed
		if err := m.Records.SetOutcome(context.WithoutCancel(ctx), term); err != nil {
			return term, err
		}
	}
	m.log().Info("acted", "group", g.Name, "instance", inst.ID, "action", k.Action.String(), "id", term.ID)
	return term, nil
}

// errStoppedWhileActing is the failure of an action a global stop overtook.
var errStoppedWhileActing = errors.New("a global stop came while the fault was being put in place: it is undone")

// errEndedWhileActing is the failure of an action whose lease ended before
// the fault was whole.
var errEndedWhileActing = errors.New("the fault's lease ended while the fault was being put in place (putting it in place took longer than its bound): it is undone")

// fail records a kill that failed before any action.
func (m *Monkey) fail(ctx context.Context, term chaos.Termination, err error) (chaos.Termination, error) {
	term.Outcome, term.Error = chaos.Failed, err.Error()
	rec, rerr := m.Records.Add(ctx, term)
	return rec, errors.Join(err, rerr)
}

// others are the instances of live but inst.
func others(live []chaos.Instance, inst chaos.Instance) []chaos.Instance {
	var out []chaos.Instance
	for _, in := range live {
		if in.ID != inst.ID {
			out = append(out, in)
		}
	}
	return out
}

// placeBound bounds how long a backend may take to put a leased fault in
// place (Begin's context ends after it). The lease stored before Begin
// lasts the fault's duration plus this bound, so that a monkey that dies
// inside Begin leaves a fault its watchdog still undoes, at most this late;
// once the fault is whole, its lease counts its duration from then.
const placeBound = time.Minute

// act applies the action, through a lease when the backend leases it;
// peers are the group's other live instances. It answers when the fault
// was in place: for a leased action, when Begin returned, from which its
// lease counts the action's duration; otherwise when Act returned.
func (m *Monkey) act(ctx context.Context, t chaos.Terminator, term chaos.Termination, peers []chaos.Instance, now time.Time) (time.Time, error) {
	leaser, isLeaser := t.(chaos.Leaser)
	if !isLeaser {
		if term.Action.Kind.Temporary() {
			return time.Time{}, fmt.Errorf("the %s backend cannot undo %s (it has no leases)", m.Config.Group(term.Group).Backend, term.Action.Kind)
		}
		err := t.Act(ctx, term.Instance, term.Action)
		return m.clock().Now(), err
	}
	d, leased, err := leaser.LeaseFor(ctx, term.Instance, term.Action)
	if err != nil {
		return time.Time{}, err
	}
	if !leased {
		err := t.Act(ctx, term.Instance, term.Action)
		return m.clock().Now(), err
	}
	if m.Leases == nil || m.StartWatchdog == nil {
		return time.Time{}, errors.New("leased action without a lease store and watchdog")
	}
	l := chaos.Lease{
		ID: lease.NewID(now), Group: term.Group, Backend: m.Config.Group(term.Group).Backend,
		Instance: term.Instance, Peers: peers, Action: term.Action, Start: now, Until: now.Add(d + placeBound),
	}
	// Stored and watched before the fault begins: a monkey that dies
	// inside Begin leaves a lease the watchdog reverts from the instance.
	if err := m.Leases.Save(l); err != nil {
		return time.Time{}, err
	}
	if err := m.StartWatchdog(l.ID); err != nil {
		return time.Time{}, errors.Join(err, m.Leases.Delete(l.ID))
	}
	bctx, cancel := context.WithTimeout(ctx, placeBound)
	undo, err := leaser.Begin(bctx, l)
	cancel()
	if err != nil {
		rerr := m.Leases.Revert(context.WithoutCancel(ctx), l, leaser.Revert)
		if m.Stopped() { // the stop's revert is likely what broke it
			err = fmt.Errorf("%w (%v)", errStoppedWhileActing, err)
		}
		return time.Time{}, errors.Join(err, rerr)
	}
	l.Undo = undo
	// A lease that ended while Begin ran (a Begin that overran its
	// bound) was reverted by its watchdog before the fault was whole, and
	// the watchdog is gone: stored again, the fault would stay with nobody
	// to undo it. Undo it here. (A global stop deletes the lease too.)
	if _, err := m.Leases.Load(l.ID); errors.Is(err, lease.ErrNotFound) {
		cause := errEndedWhileActing
		if m.Stopped() {
			cause = errStoppedWhileActing
		}
		return time.Time{}, errors.Join(cause, leaser.Revert(context.WithoutCancel(ctx), l))
	}
	// The fault is whole: its duration counts from now. The watchdog reads
	// the moved end at its next poll.
	placed := m.clock().Now()
	l.Start, l.Until = placed, placed.Add(d)
	if err := m.Leases.Save(l); err != nil {
		// The lease as first stored is still there, ending placeBound
		// later: the watchdog can revert from the instance.
		m.log().Error("cannot store the lease's undo data and end", "lease", l.ID, "err", err)
	}
	// A global stop sets its flag, then reverts every lease. One that came
	// while Begin ran may have reverted the lease before its fault was
	// whole, and the Save above stored it again: undo it here. One that
	// comes after this check finds the lease stored.
	if m.Stopped() {
		return time.Time{}, errors.Join(errStoppedWhileActing, m.Leases.Revert(context.WithoutCancel(ctx), l, leaser.Revert))
	}
	m.log().Info("lease", "id", l.ID, "action", l.Action.String(), "instance", l.Instance.ID, "until", l.Until.Format(time.RFC3339))
	return placed, nil
}

// AwaitRecovery waits until the group of an executed termination is whole
// again, through the backend's RecoveryWaiter, and records how long it
// took. For a leased action the wait starts counting at the action and
// includes the lease. It returns the termination with its Recovery set.
func (m *Monkey) AwaitRecovery(ctx context.Context, term chaos.Termination) (chaos.Termination, error) {
	if term.Outcome != chaos.Executed {
		return term, nil
	}
	t, err := m.backend(m.Config.Group(term.Group).Backend)
	if err != nil {
		return term, err
	}
	w, ok := t.(chaos.RecoveryWaiter)
	if !ok {
		return term, nil
	}
	ctx, cancel := context.WithTimeout(ctx, term.Action.Duration+m.recoverWithin())
	defer cancel()
	d, err := w.AwaitRecovery(ctx, term.Instance, term.Executed)
	if err != nil {
		return term, fmt.Errorf("%s of group %s not recovered: %w", term.Instance.ID, term.Group, err)
	}
	term.Recovery = d
	if err := m.Records.SetRecovery(context.WithoutCancel(ctx), term.ID, d); err != nil {
		return term, err
	}
	m.log().Info("recovered", "group", term.Group, "instance", term.Instance.ID, "after", d.Round(time.Millisecond).String(), "id", term.ID)
	return term, nil
}

// awaitRecoveryLater measures the recovery in the background; Wait waits
// for those in flight.
func (m *Monkey) awaitRecoveryLater(ctx context.Context, term chaos.Termination) {
	if term.Outcome != chaos.Executed {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if _, err := m.AwaitRecovery(ctx, term); err != nil {
			m.log().Warn("recovery", "err", err)
		}
	}()
}

// Wait waits for the recoveries measured in the background.
func (m *Monkey) Wait() { m.wg.Wait() }

// Kill is an on-demand kill (the REST API's): a random pick, the OnDemand
// checks, the recovery measured in the background.
func (m *Monkey) Kill(ctx context.Context, group string, action chaos.Action) (chaos.Termination, error) {
	if m.Config.Group(group) == nil {
		return chaos.Termination{}, fmt.Errorf("group %q: %w", group, api.ErrUnknownGroup)
	}
	term, err := m.Execute(ctx, chaos.PlannedKill{Group: group, Action: action, Pick: m.pick()}, OnDemand)
	if err == nil {
		// Not the request's context: the answer goes out before the
		// group has recovered.
		m.awaitRecoveryLater(context.WithoutCancel(ctx), term)
	}
	return term, err
}

// Stop is the global stop: it is recorded in the database (so that it
// outlives the daemon and holds every monkey sharing it), and every active
// lease is reverted.
func (m *Monkey) Stop(ctx context.Context) error {
	if err := m.Records.SetStopped(ctx, true); err != nil {
		return err
	}
	done, err := m.Sweep(ctx, true)
	m.log().Warn("global stop", "reverted_leases", len(done))
	return err
}

// Resume ends the global stop.
func (m *Monkey) Resume(ctx context.Context) error {
	if err := m.Records.SetStopped(ctx, false); err != nil {
		return err
	}
	m.log().Warn("global stop ended")
	return nil
}

// Stopped reports whether the global stop is on; it fails closed (a
// database error reads as stopped).
func (m *Monkey) Stopped() bool {
	on, err := m.Records.Stopped(context.Background())
	return on || err != nil
}

// Sweep reverts the leases that have expired, or all of them, through
// their backends.
func (m *Monkey) Sweep(ctx context.Context, all bool) ([]chaos.Lease, error) {
	if m.Leases == nil {
		return nil, nil
	}
	return m.Leases.Sweep(ctx, m.clock().Now(), all, func(ctx context.Context, l chaos.Lease) error {
		t, err := m.backend(l.Backend)
		if err != nil {
			return err
		}
		r, ok := t.(chaos.Reverter)
		if !ok {
			return fmt.Errorf("the %s backend cannot revert leases", l.Backend)
		}
		return r.Revert(ctx, l)
	})
}
