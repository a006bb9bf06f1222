// Package chaos is troop's Chaos Monkey core: the domain types (groups,
// instances, chaos actions, terminations), the small interfaces that the
// backends implement, the YAML config, the work-day calendar and the daily
// kill schedule.
//
// Everything here is a deterministic function of its inputs: the time of day
// and the randomness are passed in, and nothing opens a socket or starts a
// process. The one edge is LoadConfig, which reads the config file and the
// iCalendar file it names. Backends (lab, docker, kubernetes), the records
// database, the daemon and the REST API live elsewhere and depend on this
// package, never the other way round.
package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"time"
)

// Kind is what a chaos action does to one instance. The kinds are
// registered by name (KindSpec, one file each): process faults, over as
// soon as done or lasting a duration, and the network and clock faults,
// which last a duration.
type Kind string

// Action is one chaos kind with its duration (zero unless the kind is
// Temporary) and the parameters of its kind (zero for the others). It is
// comparable, so that a config can refuse the same action listed twice.
type Action struct {
	Kind     Kind          `json:"kind"`
	Duration time.Duration `json:"duration,omitempty"`

	Partition PartitionMode `json:"partition,omitempty"` // partition
	Percent   float64       `json:"percent,omitempty"`   // loss
	Delay     time.Duration `json:"delay,omitempty"`     // delay
	Jitter    time.Duration `json:"jitter,omitempty"`    // delay
	Offset    time.Duration `json:"offset,omitempty"`    // clock-skew: a jump
	Rate      float64       `json:"rate,omitempty"`      // clock-skew: seconds of drift per second
}

func (a Action) String() string {
	s := string(a.Kind)
	if spec, ok := a.Kind.Spec(); ok && spec.Describe != nil {
		s += " " + spec.Describe(a)
	}
	if a.Kind.Temporary() {
		s += " " + a.Duration.String()
	}
	return s
}

// Instance is one thing a group can lose: a lab node process, a container, a
// pod. ID is stable while the instance lives and is what backends act on.
type Instance struct {
	ID     string            `json:"id"`
	Name   string            `json:"name"`
	Group  string            `json:"group"`
	Labels map[string]string `json:"labels,omitempty"` // lab: dc, rack, node; docker and kubernetes: their labels
}

// Outcome says what became of one planned or on-demand termination.
type Outcome string

// The outcomes. A failed action may have half happened, so it counts against
// the group's gap and daily maximum like an executed one.
const (
	Executed Outcome = "executed"
	Skipped  Outcome = "skipped"
	Failed   Outcome = "failed"
)

// Reason says why a termination was skipped.
type Reason string

// The reasons a kill is skipped. The daemon decides leashed, outage and
// stopped; Admit and PlanDay decide the others.
const (
	Leashed      Reason = "leashed"       // dry run: recorded, not executed
	InOutage     Reason = "outage"        // the outage checker said so, or could not answer
	MinGap       Reason = "min-gap"       // too soon after the group's last kill
	MaxPerDay    Reason = "max-per-day"   // the group reached its daily maximum
	Holiday      Reason = "holiday"       // a built-in, listed or iCalendar holiday
	OffDay       Reason = "off-day"       // not one of the calendar's work days
	OutsideHours Reason = "outside-hours" // before the start or at or after the end hour
	Stopped      Reason = "stopped"       // the global stop is on
	Disabled     Reason = "disabled"      // the group is not enabled, or not in the config
	NoInstance   Reason = "no-instance"   // the group has no live instance outside its exceptions
	Refused      Reason = "refused"       // the backend declined and did nothing (ErrRefused)
)

// ErrRefused is what a backend's Act returns, wrapped with its reason, when
// it declines to act and did nothing: a Kubernetes workload would fall below
// its minimum of ready pods. The monkey records the kill as skipped
// (Refused), and it counts against no gap or maximum.
var ErrRefused = errors.New("refused")

// Termination is the record of one kill: planned or on demand, executed or
// skipped. Leashed kills are recorded with Outcome Skipped and Reason Leashed,
// and count against the gap and the daily maximum as if they had happened, so
// that a dry run shows the schedule the real run would follow.
type Termination struct {
	ID       int64     `json:"id,omitempty"` // the records' ID; 0 until recorded
	Group    string    `json:"group"`
	Instance Instance  `json:"instance"`
	Action   Action    `json:"action"`
	Planned  time.Time `json:"planned,omitzero"`  // zero for on-demand kills
	Executed time.Time `json:"executed,omitzero"` // when the action was taken or skipped
	Outcome  Outcome   `json:"outcome"`
	Reason   Reason    `json:"reason,omitempty"` // set when Outcome is Skipped
	Error    string    `json:"error,omitempty"`  // set when Outcome is Failed, or Skipped as Refused
	// Recovery is how long the group took to be whole again after an
	// executed action (see RecoveryWaiter); 0 until measured. JSON has it
	// as recovery_seconds.
	Recovery time.Duration `json:"-"`
}

// terminationJSON is Termination as JSON, with the recovery in seconds.
type terminationJSON struct {
	plainTermination
	RecoverySeconds float64 `json:"recovery_seconds,omitempty"`
}

type plainTermination Termination // without the methods, so no recursion

// MarshalJSON writes the recovery time as recovery_seconds.
func (t Termination) MarshalJSON() ([]byte, error) {
	return json.Marshal(terminationJSON{plainTermination(t), t.Recovery.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (t *Termination) UnmarshalJSON(b []byte) error {
	var j terminationJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*t = Termination(j.plainTermination)
	t.Recovery = time.Duration(math.Round(j.RecoverySeconds * float64(time.Second)))
	return nil
}

// Counts reports whether t counts against its group's minimum gap and daily
// maximum: executed and failed kills do, and so do leashed ones.
func (t Termination) Counts() bool {
	return t.Outcome == Executed || t.Outcome == Failed ||
		(t.Outcome == Skipped && t.Reason == Leashed)
}

// At is the time the termination counts from: when it was executed, or when
// it was planned if it has no execution time yet.
func (t Termination) At() time.Time {
	if !t.Executed.IsZero() {
		return t.Executed
	}
	return t.Planned
}

// Terminator is what a backend implements: list a group's live instances and
// act on one of them.
type Terminator interface {
	// Instances returns the group's live instances, in any order.
	Instances(ctx context.Context, g *Group) ([]Instance, error)
	// Act applies the action to the instance. For a temporary action it
	// returns once the fault is in place; undoing it when its duration is
	// over is the backend's job, also if the caller dies meanwhile.
	Act(ctx context.Context, inst Instance, a Action) error
}

// Query selects terminations from a Recorder. Zero fields select everything.
type Query struct {
	Since time.Time
	Group string
	Kind  Kind
}

// Recorder keeps the record of every termination and every day's plan.
type Recorder interface {
	Record(ctx context.Context, t Termination) error
	Terminations(ctx context.Context, q Query) ([]Termination, error)
	RecordPlan(ctx context.Context, day Date, plan []PlannedKill) error
	Plan(ctx context.Context, day Date) (plan []PlannedKill, found bool, err error)
}

// OutageChecker tells whether an outage is going on, in which case no kill
// happens. Use CheckOutage rather than calling it directly: it fails closed.
type OutageChecker interface {
	Outage(ctx context.Context) (bool, error)
}

// CheckOutage asks oc and fails closed: an error, like an outage, means no
// kill. A nil checker means there is no outage source, so kills go ahead.
func CheckOutage(ctx context.Context, oc OutageChecker) (ok bool, reason Reason, err error) {
	if oc == nil {
		return true, "", nil
	}
	out, err := oc.Outage(ctx)
	if err != nil || out {
		return false, InOutage, err
	}
	return true, "", nil
}

// Lease is a fault in place that must be undone at Until: a paused or
// CPU-burning instance, or a lab node stopped until its replacement delay
// is over. The monkey writes it to its lease store before the fault begins
// and a detached watchdog process reverts it at Until, so the fault is
// undone even if the monkey dies meanwhile; a monkey that starts reverts
// every lease past its end.
type Lease struct {
	ID       string   `json:"id"` // unique; the store's file name
	Group    string   `json:"group"`
	Backend  Backend  `json:"backend"`
	Instance Instance `json:"instance"`
	// Peers are the other live instances of the group when the fault
	// began: the other side of a network fault.
	Peers  []Instance `json:"peers,omitempty"`
	Action Action     `json:"action"`
	Start  time.Time  `json:"start"`
	Until  time.Time  `json:"until"`
	// Undo is the backend's own data for Revert (a PID, a container ID),
	// as Begin returned it. Nil until Begin has returned.
	Undo map[string]string `json:"undo,omitempty"`
}

// Expired reports whether the lease's end has come at now.
func (l Lease) Expired(now time.Time) bool { return !now.Before(l.Until) }

// Reverter undoes a leased fault. Revert is idempotent: reverting a fault
// that is already gone (undone before, or its instance replaced) is not an
// error. It must also work when l.Undo is nil, from l.Instance alone: the
// monkey may have died while Begin ran, before it could store Begin's undo
// data.
type Reverter interface {
	Revert(ctx context.Context, l Lease) error
}

// RecoveryWaiter measures how long an instance takes to be whole again
// after an action taken at since: a lab node running with a new PID and
// answering PING, a container running again, the workload's ready
// replicas back. It returns the time from since until then, or an error
// when ctx ends first.
type RecoveryWaiter interface {
	AwaitRecovery(ctx context.Context, inst Instance, since time.Time) (time.Duration, error)
}

// Leaser is what a backend with leased faults implements besides
// Terminator. The monkey acts on an instance like this:
//
//  1. d, leased, err := LeaseFor(ctx, inst, a). Not leased: call
//     Terminator.Act and stop here.
//  2. Build the Lease (ID, Group, Backend, Instance, the group's other
//     live instances as Peers, Action, Start = now, Until = now + d plus
//     a bound on how long Begin may take, Undo nil), store it and start
//     its watchdog.
//  3. undo, err := Begin(ctx, lease): the backend puts the fault in place
//     so that it lasts until lease.Until at least, and returns what Revert
//     will need (nil if Instance is enough, e.g. a container ID that is the
//     Instance.ID). The monkey stores the lease again with Undo set, Start
//     = the time the fault was whole and Until = Start + d, so the fault
//     lasts d however long Begin took. If Begin fails, the monkey reverts
//     the lease at once.
//  4. At Until the watchdog (or a monkey sweeping expired leases) calls
//     Revert and deletes the lease.
//
// Begin must not wait for the lease's end. Where the backend can, a fault
// should also end by itself at Until (a CPU burner that exits on its own),
// as a second line behind the watchdog.
type Leaser interface {
	Reverter
	// LeaseFor says whether action a on inst is leased and for how long:
	// pause and burn-cpu for a.Duration; a backend may lease other kinds
	// it has to undo itself (the lab's stop, for the lab's replacement
	// delay). Kinds it does not lease go to Act.
	LeaseFor(ctx context.Context, inst Instance, a Action) (d time.Duration, leased bool, err error)
	// Begin puts the fault of l.Action on l.Instance in place until
	// l.Until and returns the undo data for Revert.
	Begin(ctx context.Context, l Lease) (undo map[string]string, err error)
}

// Addresser is what a backend implements whose instances can be matched
// to the nodes of a cluster troop did not start by their addresses (troop
// run --cluster or --target with a chaos config).
type Addresser interface {
	// Addresses returns where inst is reached: bare IP addresses, at which
	// every port is inst's (a container's address on its networks, a
	// pod's IPs), and host:port pairs for one port (a port a container
	// publishes on its host; the unspecified host, 0.0.0.0 or ::, stands
	// for every address of that host).
	Addresses(ctx context.Context, inst Instance) ([]string, error)
}
