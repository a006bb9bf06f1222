// Package labchaos is the lab backend of troop chaos: its instances are the
// node processes of a running `troop lab`, and it acts on them through the
// lab's supervisor, which replaces a killed node after its replace-after
// delay the way an Auto Scaling Group replaces an instance.
//
// Only the troop node process of a position is ever touched; its
// redis-server is the node's disk and stays up.
package labchaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/lab"
)

// Supervisor is the part of a lab's supervisor the backend needs. Both a
// lab reached over its socket (FromClient) and an in-process lab
// (FromLab) provide it.
type Supervisor interface {
	Status(ctx context.Context) (*lab.Status, error)
	Kill(ctx context.Context, node string) error  // SIGKILL; the supervisor replaces it
	Stop(ctx context.Context, node string) error  // SIGTERM; stays down until Start
	Start(ctx context.Context, node string) error // starts it and waits until it answers PING
}

// FromClient adapts a client of a running lab's supervisor.
func FromClient(c *lab.Client) Supervisor { return clientSupervisor{c} }

// FromLab adapts a lab running in this process, as tests start them.
func FromLab(l *lab.Lab) Supervisor { return labSupervisor{l} }

type clientSupervisor struct{ c *lab.Client }

func (s clientSupervisor) Status(ctx context.Context) (*lab.Status, error) { return s.c.Status(ctx) }
func (s clientSupervisor) Kill(ctx context.Context, node string) error {
	_, err := s.c.Kill(ctx, node, lab.NodeProc)
	return err
}
func (s clientSupervisor) Stop(ctx context.Context, node string) error {
	_, err := s.c.Stop(ctx, node, lab.NodeProc)
	return err
}
func (s clientSupervisor) Start(ctx context.Context, node string) error {
	_, err := s.c.Start(ctx, node, lab.NodeProc)
	return err
}

// labSupervisor ignores ctx where *lab.Lab takes none; its own waits are
// bounded by the lab's stop grace and ready timeout.
type labSupervisor struct{ l *lab.Lab }

func (s labSupervisor) Status(context.Context) (*lab.Status, error) { return s.l.Status(), nil }
func (s labSupervisor) Kill(_ context.Context, node string) error {
	_, err := s.l.Kill(node, lab.NodeProc)
	return err
}
func (s labSupervisor) Stop(_ context.Context, node string) error {
	return s.l.StopNode(node, lab.NodeProc)
}
func (s labSupervisor) Start(_ context.Context, node string) error {
	return s.l.StartNode(node, lab.NodeProc)
}

// Terminator is the lab backend's chaos.Terminator. It is safe for
// concurrent use.
type Terminator struct {
	dir string // for New: dial lazily, so that a lab started later is found

	mu    sync.Mutex
	sup   Supervisor
	acted map[string]memory // node name -> what was last done to it
}

// memory is what the Terminator last did to a node, for AwaitRecovery.
type memory struct {
	pid   int          // the node's PID then: recovered once another one runs (0: any)
	fault *chaos.Lease // a network or clock fault: recovered once it is over
}

var _ chaos.Terminator = (*Terminator)(nil)

// PollInterval is how often AwaitRecovery looks at the lab.
const PollInterval = 50 * time.Millisecond

// New returns a Terminator for the lab in dir. It dials the supervisor's
// socket on first use, and again after a failed dial, so that the monkey
// can start before the lab does.
func New(dir string) *Terminator {
	return &Terminator{dir: dir, acted: map[string]memory{}}
}

// NewWith returns a Terminator acting through sup.
func NewWith(sup Supervisor) *Terminator {
	return &Terminator{sup: sup, acted: map[string]memory{}}
}

func (t *Terminator) supervisor(ctx context.Context) (Supervisor, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sup != nil {
		return t.sup, nil
	}
	c, err := lab.Dial(ctx, t.dir)
	if err != nil {
		return nil, fmt.Errorf("lab backend: %w", err)
	}
	t.sup = FromClient(c)
	return t.sup, nil
}

func (t *Terminator) status(ctx context.Context) (*lab.Status, error) {
	sup, err := t.supervisor(ctx)
	if err != nil {
		return nil, err
	}
	st, err := sup.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("lab backend: status of the lab: %w", err)
	}
	return st, nil
}

// node returns the lab's status and the named node's part of it.
func (t *Terminator) node(ctx context.Context, name string) (*lab.Status, *lab.NodeStatus, error) {
	st, err := t.status(ctx)
	if err != nil {
		return nil, nil, err
	}
	n, err := st.Node(name)
	if err != nil {
		return nil, nil, fmt.Errorf("lab backend: %w", err)
	}
	return st, n, nil
}

// Instances returns the positions matching g's selector whose node process
// is running. A node that is down, starting or being replaced is no
// candidate: Chaos Monkey kills healthy instances, and killing one twice
// would not test anything new.
func (t *Terminator) Instances(ctx context.Context, g *chaos.Group) ([]chaos.Instance, error) {
	if g.Backend != chaos.Lab {
		return nil, fmt.Errorf("lab backend: group %s has backend %q", g.Name, g.Backend)
	}
	st, err := t.status(ctx)
	if err != nil {
		return nil, err
	}
	var out []chaos.Instance
	for _, n := range st.Nodes {
		if !Matches(g.Selector, n.Node) || n.NodeP.State != lab.Running {
			continue
		}
		out = append(out, instance(g.Name, n.Node))
	}
	return out, nil
}

// Matches reports whether the lab selector (dc, rack, node; empty fields
// match all) selects the position.
func Matches(s chaos.Selector, n lab.Node) bool {
	return (s.DC == "" || s.DC == n.DC) &&
		(s.Rack == "" || s.Rack == n.Rack) &&
		(s.Node == "" || s.Node == n.Name)
}

// instance labels the position with dc, rack and node so that exceptions
// such as rack=rack1 apply.
func instance(group string, n lab.Node) chaos.Instance {
	return chaos.Instance{
		ID: n.Name, Name: n.Name, Group: group,
		Labels: map[string]string{"dc": n.DC, "rack": n.Rack, "node": n.Name},
	}
}

// Act terminates the instance's node process (SIGKILL); the supervisor
// replaces the node after its replace-after delay.
//
// stop, restart, pause and burn-cpu are leased (LeaseFor, Begin, Revert),
// so that they are undone even if the monkey dies: Act refuses them.
func (t *Terminator) Act(ctx context.Context, inst chaos.Instance, a chaos.Action) error {
	if a.Kind != chaos.Terminate {
		return fmt.Errorf("lab backend: %s of %s is leased: use Begin", a.Kind, inst.ID)
	}
	_, n, err := t.node(ctx, inst.ID)
	if err != nil {
		return err
	}
	sup, err := t.supervisor(ctx)
	if err != nil {
		return err
	}
	t.remember(inst.ID, memory{pid: n.NodeP.PID})
	if err := sup.Kill(ctx, inst.ID); err != nil {
		return fmt.Errorf("lab backend: terminate %s: %w", inst.ID, err)
	}
	return nil
}

// startTimeout bounds the start of a stopped node; the lab's own ready
// timeout (20 s by default) ends it sooner.
const startTimeout = time.Minute

func (t *Terminator) start(sup Supervisor, node string) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := sup.Start(ctx, node); err != nil {
		return fmt.Errorf("lab backend: start %s again: %w", node, err)
	}
	return nil
}

func (t *Terminator) remember(node string, m memory) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.acted[node] = m
}

func (t *Terminator) memory(node string) memory {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acted[node]
}

// replaceAfter is the lab's replacement delay, 3 s (the lab's default)
// when the status does not say.
func replaceAfter(st *lab.Status) time.Duration {
	if d, err := time.ParseDuration(st.ReplaceAfter); err == nil && d >= 0 {
		return d
	}
	return 3 * time.Second
}

// AwaitRecovery waits until the instance's node process runs again with a
// PID other than the one it had when this Terminator last acted on it, and
// answers PING on its listen address; after a network or clock fault,
// also until the fault is gone and the node's peers' failure detectors
// hold it up, and its own them. It returns the time elapsed since since
// (normally the moment of the action). For an instance this Terminator
// never acted on, any running node that answers will do. It polls every
// PollInterval until ctx ends.
func (t *Terminator) AwaitRecovery(ctx context.Context, inst chaos.Instance, since time.Time) (time.Duration, error) {
	m := t.memory(inst.ID)
	var last error
	for {
		err := t.recovered(ctx, inst.ID, m)
		if err == nil {
			return time.Since(since), nil
		}
		last = err
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("lab backend: %s not recovered after %s: %w (last: %v)",
				inst.ID, time.Since(since).Round(time.Millisecond), ctx.Err(), last)
		case <-time.After(PollInterval):
		}
	}
}

// recovered returns nil once the node is back, or what is still missing.
func (t *Terminator) recovered(ctx context.Context, node string, m memory) error {
	st, n, err := t.node(ctx, node)
	if err != nil {
		return err
	}
	p := n.NodeP
	switch {
	case p.State != lab.Running:
		return fmt.Errorf("node process is %s", p.State)
	case p.PID == 0 || p.PID == m.pid:
		return fmt.Errorf("node process still has pid %d", p.PID)
	}
	if err := lab.Ping(ctx, n.Listen); err != nil {
		return fmt.Errorf("PING %s: %w", n.Listen, err)
	}
	if m.fault != nil {
		return t.faultRecovered(ctx, st, n, *m.fault)
	}
	return nil
}
