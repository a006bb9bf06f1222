// Package dockerchaos is the Docker backend of troop chaos: its instances
// are the running containers of one Docker Engine that carry a group's
// labels, and it acts on them through the Engine API with the official Go
// client (github.com/moby/moby/client), negotiating the API version with
// the engine.
//
// Docker's restart policies do not apply to a container stopped or killed
// through the API: the engine records it as stopped by hand (measured on
// Engine 20.10 with always, unless-stopped and on-failure; see
// docs/chaos.md). A crash is what they apply to, so terminate kills the
// container's main process from the engine's host when it can, which Docker
// sees as a crash, and otherwise kills through the API and then starts the
// container itself when its policy would have restarted a crash.
package dockerchaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/fault"
)

// Terminator is the Docker backend's chaos.Terminator, chaos.Leaser,
// chaos.RecoveryWaiter and chaos.Addresser. It is safe for concurrent use.
type Terminator struct {
	api *client.Client

	// StoppedFor is how long a stop keeps the container down before the
	// lease's revert starts it again: Docker never restarts a container
	// stopped through its API, so the monkey must. Default DefaultStoppedFor.
	StoppedFor time.Duration

	// Troop is the troop binary that runs a delay's queue where the kernel
	// has no netem; default os.Executable(), the monkey's own.
	Troop string

	// hostSignals lets terminate signal the container's main process from
	// this host when it is visible here; tests turn it off to exercise the
	// API path.
	hostSignals bool

	mu        sync.Mutex
	started   map[string]string            // container ID -> State.StartedAt when last acted on
	selectors map[string]map[string]string // container ID -> its group's selector labels
	faults    map[string]chaos.Lease       // container ID -> its network or clock fault, until recovered
}

var (
	_ chaos.Terminator     = (*Terminator)(nil)
	_ chaos.Leaser         = (*Terminator)(nil)
	_ chaos.RecoveryWaiter = (*Terminator)(nil)
	_ chaos.Addresser      = (*Terminator)(nil)
)

// DefaultStoppedFor is how long a stop keeps a container down: the lab's
// default replacement delay, so that both backends stop for as long.
const DefaultStoppedFor = 3 * time.Second

// PollInterval is how often AwaitRecovery looks at the engine.
const PollInterval = 100 * time.Millisecond

// ErrNotSupported wraps the errors of actions a container cannot take,
// with the reason.
var ErrNotSupported = errors.New("not supported")

// New returns a Terminator for the engine at host (a Docker host URL such
// as unix:///var/run/docker.sock or tcp://10.0.0.5:2376). An empty host
// means DOCKER_HOST (with DOCKER_TLS_VERIFY and DOCKER_CERT_PATH), or the
// default socket when it is unset. It does not dial: the first call does,
// and negotiates the API version with the engine.
func New(host string) (*Terminator, error) {
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	api, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker backend: %w", err)
	}
	return NewWithClient(api), nil
}

// NewWithClient returns a Terminator acting through api.
func NewWithClient(api *client.Client) *Terminator {
	return &Terminator{
		api:         api,
		StoppedFor:  DefaultStoppedFor,
		hostSignals: true,
		started:     map[string]string{},
		selectors:   map[string]map[string]string{},
		faults:      map[string]chaos.Lease{},
	}
}

// Close closes the connection to the engine.
func (t *Terminator) Close() error { return t.api.Close() }

// Instances returns the group's running containers: those carrying every
// label of the selector, with the value given when it is not empty. Paused,
// restarting and stopped containers are no candidates. Exceptions are the
// caller's to apply (chaos.PlannedKill.Choose does).
func (t *Terminator) Instances(ctx context.Context, g *chaos.Group) ([]chaos.Instance, error) {
	if g.Backend != chaos.Docker {
		return nil, fmt.Errorf("docker backend: group %s has backend %q", g.Name, g.Backend)
	}
	sel := g.Selector.Labels
	if len(sel) == 0 {
		// An empty filter would select every container of the engine.
		return nil, fmt.Errorf("docker backend: group %s has no labels in its selector", g.Name)
	}
	res, err := t.api.ContainerList(ctx, client.ContainerListOptions{Filters: listFilters(sel)})
	if err != nil {
		return nil, fmt.Errorf("docker backend: list containers of group %s: %w", g.Name, err)
	}
	out := make([]chaos.Instance, 0, len(res.Items))
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range res.Items {
		out = append(out, instance(g.Name, c))
		t.selectors[c.ID] = sel
	}
	return out, nil
}

// listFilters selects the running containers with every label of sel: a
// label with an empty value only has to be present. The engine ANDs label
// filters.
func listFilters(sel map[string]string) client.Filters {
	f := make(client.Filters).Add("status", string(container.StateRunning))
	for k, v := range sel {
		if v == "" {
			f.Add("label", k)
		} else {
			f.Add("label", k+"="+v)
		}
	}
	return f
}

func instance(group string, c container.Summary) chaos.Instance {
	name := c.ID
	if len(c.Names) > 0 {
		name = strings.TrimPrefix(c.Names[0], "/")
	}
	return chaos.Instance{ID: c.ID, Name: name, Group: group, Labels: c.Labels}
}

// Act applies a non-leased action to the container:
//
//   - terminate: SIGKILL. From this host to the container's main process
//     when the engine runs here and the process is visible and ours to
//     signal: Docker sees a crash and its restart policy applies. Otherwise
//     through the API, which Docker records as a stop by hand, so the
//     backend then starts the container itself if its restart policy would
//     have restarted a crash (always, unless-stopped, on-failure with
//     retries left); with restart policy "no" it stays down, as after a
//     crash.
//   - restart: docker restart (the container's stop signal, its stop
//     timeout, then a start); it returns once the container runs again.
//
// stop, pause and burn-cpu are leased (LeaseFor, Begin, Revert), so that
// they are undone even if the monkey dies: Act refuses them.
func (t *Terminator) Act(ctx context.Context, inst chaos.Instance, a chaos.Action) error {
	if a.Kind == chaos.Stop || a.Kind.Temporary() {
		return fmt.Errorf("docker backend: %s of %s is leased: use Begin", a.Kind, inst.Name)
	}
	c, err := t.inspect(ctx, inst.ID)
	if err != nil {
		return err
	}
	if !c.State.Running || c.State.Paused {
		return fmt.Errorf("docker backend: %s %s: container is %s", a.Kind, inst.Name, c.State.Status)
	}
	t.rememberStart(c)
	switch a.Kind {
	case chaos.Terminate:
		return t.terminate(ctx, inst, c)
	case chaos.Restart:
		if _, err := t.api.ContainerRestart(ctx, c.ID, client.ContainerRestartOptions{}); err != nil {
			return fmt.Errorf("docker backend: restart %s: %w", inst.Name, err)
		}
		return nil
	}
	return fmt.Errorf("docker backend: unknown chaos type %q", a.Kind)
}

func (t *Terminator) terminate(ctx context.Context, inst chaos.Instance, c container.InspectResponse) error {
	if t.hostSignals && hostProcessOf(c.State.Pid, c.ID) {
		err := syscall.Kill(c.State.Pid, syscall.SIGKILL)
		if err == nil {
			return nil
		}
		slog.Info("docker backend: cannot signal the container's process from this host; killing through the API",
			"container", inst.Name, "pid", c.State.Pid, "err", err)
	}
	if _, err := t.api.ContainerKill(ctx, c.ID, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		return fmt.Errorf("docker backend: terminate %s: %w", inst.Name, err)
	}
	if !restartsAfterCrash(c.HostConfig.RestartPolicy, c.RestartCount) {
		return nil
	}
	// The engine answers the kill once the container is down; wait for it
	// anyway, since a start of a container still running does nothing.
	wait := t.api.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-wait.Result:
	case err := <-wait.Error:
		return fmt.Errorf("docker backend: terminate %s: wait for it to stop: %w", inst.Name, err)
	}
	if _, err := t.api.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("docker backend: terminate %s: start it again as its restart policy %q would: %w",
			inst.Name, c.HostConfig.RestartPolicy.Name, err)
	}
	return nil
}

// hostProcessOf reports whether pid, as this host numbers processes, is the
// main process of container id: the engine runs on this host, in this PID
// namespace, and the process's cgroup names the container. Anything else
// (a remote engine, a VM, another PID namespace) is no.
func hostProcessOf(pid int, id string) bool {
	if pid <= 0 || len(id) < 12 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return err == nil && strings.Contains(string(b), id)
}

// restartsAfterCrash reports whether the engine restarts a container with
// this policy when its process dies by itself with a non-zero status.
func restartsAfterCrash(p container.RestartPolicy, restarts int) bool {
	switch p.Name {
	case container.RestartPolicyAlways, container.RestartPolicyUnlessStopped:
		return true
	case container.RestartPolicyOnFailure:
		return p.MaximumRetryCount == 0 || restarts < p.MaximumRetryCount
	}
	return false
}

// LeaseFor leases the temporary kinds (pause, burn-cpu, the network
// faults, clock-skew) for their duration, and stop for StoppedFor.
// terminate and restart are not leased.
func (t *Terminator) LeaseFor(_ context.Context, _ chaos.Instance, a chaos.Action) (time.Duration, bool, error) {
	if a.Kind.Temporary() {
		return a.Duration, true, nil
	}
	switch a.Kind {
	case chaos.Stop:
		if t.StoppedFor <= 0 {
			return DefaultStoppedFor, true, nil
		}
		return t.StoppedFor, true, nil
	}
	return 0, false, nil
}

// Begin puts a leased fault in place:
//
//   - pause: docker pause (the cgroup freezer). Docker has no timed pause;
//     the lease's revert unpauses.
//
//   - stop: docker stop (the container's stop signal, then SIGKILL after
//     its stop timeout); the revert starts it again.
//
//   - burn-cpu: runs a CPU burner inside the container with docker exec:
//     one busy shell loop per CPU the container may use, for the lease's
//     remaining time, after which it exits by itself; the revert kills it
//     sooner. It needs /bin/sh and sleep in the image; without them it
//     fails with ErrNotSupported and changes nothing.
//
//   - partition, loss, delay, clock-skew: package fault's, in the
//     containers' network namespaces entered from this host (fault.go).
//
// No undo data is needed: the container ID is the instance's, and the
// burner is found by the lease ID.
func (t *Terminator) Begin(ctx context.Context, l chaos.Lease) (map[string]string, error) {
	if fault.Handles(l.Action.Kind) {
		t.mu.Lock()
		t.faults[l.Instance.ID] = l
		t.mu.Unlock()
		return t.beginFault(ctx, l)
	}
	c, err := t.inspect(ctx, l.Instance.ID)
	if err != nil {
		return nil, err
	}
	if !c.State.Running || c.State.Paused {
		return nil, fmt.Errorf("docker backend: %s %s: container is %s", l.Action.Kind, l.Instance.Name, c.State.Status)
	}
	switch l.Action.Kind {
	case chaos.Pause:
		if err := t.pause(ctx, c.ID); err != nil {
			return nil, fmt.Errorf("docker backend: pause %s: %w", l.Instance.Name, err)
		}
		return nil, nil
	case chaos.Stop:
		t.rememberStart(c)
		if _, err := t.api.ContainerStop(ctx, c.ID, client.ContainerStopOptions{}); err != nil {
			return nil, fmt.Errorf("docker backend: stop %s: %w", l.Instance.Name, err)
		}
		return nil, nil
	case chaos.BurnCPU:
		return nil, t.burn(ctx, l, c)
	}
	return nil, fmt.Errorf("docker backend: %s is not leased", l.Action.Kind)
}

// pauseAttempts bounds pause's tries. The engine's runtime gives up
// freezing a container whose processes do not all stop in time ("unable to
// freeze", seen on a loaded host) and thaws it again, so a later try can
// succeed.
const pauseAttempts = 3

// pause pauses a container, trying again while the runtime could not freeze
// it.
func (t *Terminator) pause(ctx context.Context, id string) error {
	var err error
	for try := 1; try <= pauseAttempts; try++ {
		if _, err = t.api.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err == nil || !strings.Contains(err.Error(), "unable to freeze") {
			return err
		}
		if try < pauseAttempts {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return err
}

// Revert undoes a lease; a fault already gone, or a container removed
// meanwhile, is no error.
//
//   - pause: unpauses the container if it is paused.
//   - stop: starts the container if it is neither running nor restarting
//     (nor being removed).
//   - burn-cpu: kills, inside the container, every process whose command
//     line carries the lease's tag.
//   - partition, loss, delay, clock-skew: package fault's.
func (t *Terminator) Revert(ctx context.Context, l chaos.Lease) error {
	if fault.Handles(l.Action.Kind) {
		return t.revertFault(ctx, l)
	}
	c, err := t.inspect(ctx, l.Instance.ID)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	st := c.State
	switch l.Action.Kind {
	case chaos.Pause:
		if !st.Paused {
			return nil
		}
		if _, err := t.api.ContainerUnpause(ctx, c.ID, client.ContainerUnpauseOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("docker backend: unpause %s: %w", l.Instance.Name, err)
		}
		return nil
	case chaos.Stop:
		if st.Running || st.Restarting || st.Status == container.StateRemoving || st.Status == container.StateDead {
			return nil
		}
		if _, err := t.api.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("docker backend: start %s again: %w", l.Instance.Name, err)
		}
		return nil
	case chaos.BurnCPU:
		if !st.Running || st.Paused {
			// Nothing runs in a stopped container; a paused one is frozen
			// and its burner ends by itself once thawed.
			return nil
		}
		return t.endBurn(ctx, l, c)
	}
	return fmt.Errorf("docker backend: %s is not leased", l.Action.Kind)
}

// AwaitRecovery waits until the instance is whole again and returns the
// time since since. Whole means: the container runs (not paused, not
// restarting), has been started again since this Terminator last stopped,
// killed or restarted it, and is healthy when it has a healthcheck; or a
// replacement is: another running, healthy container created after since
// that carries the group's selector labels (every label of the instance
// when its group is not known). It polls every PollInterval until ctx ends.
func (t *Terminator) AwaitRecovery(ctx context.Context, inst chaos.Instance, since time.Time) (time.Duration, error) {
	oldStart, sel := t.memory(inst)
	var last error
	for {
		err := t.recovered(ctx, inst, oldStart, sel, since)
		if err == nil {
			t.forget(inst.ID)
			return time.Since(since), nil
		}
		last = err
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("docker backend: %s not recovered after %s: %w (last: %v)",
				inst.Name, time.Since(since).Round(time.Millisecond), ctx.Err(), last)
		case <-time.After(PollInterval):
		}
	}
}

// recovered returns nil once the instance or a replacement is whole, or
// what is still missing.
func (t *Terminator) recovered(ctx context.Context, inst chaos.Instance, oldStart string, sel map[string]string, since time.Time) error {
	t.mu.Lock()
	l, faulted := t.faults[inst.ID]
	t.mu.Unlock()
	if faulted {
		if on, err := t.Present(ctx, l); err != nil || on {
			return fmt.Errorf("the %s is still in place (%v)", l.Action.Kind, err)
		}
	}
	c, err := t.inspect(ctx, inst.ID)
	switch {
	case err == nil:
		if why := whole(c); why != "" {
			err = errors.New(why)
		} else if oldStart != "" && c.State.StartedAt == oldStart {
			err = errors.New("not started again yet")
		} else {
			return nil
		}
	case !cerrdefs.IsNotFound(err):
		return err
	}
	if len(sel) == 0 {
		return err // without labels, any container would pass for a replacement
	}
	res, lerr := t.api.ContainerList(ctx, client.ContainerListOptions{Filters: listFilters(sel)})
	if lerr != nil {
		return errors.Join(err, lerr)
	}
	for _, s := range res.Items {
		if s.ID == inst.ID || s.Created < since.Unix() {
			continue
		}
		r, rerr := t.inspect(ctx, s.ID)
		if rerr == nil && whole(r) == "" {
			return nil
		}
	}
	return fmt.Errorf("%w; no replacement", err)
}

// whole returns "" when the container runs and is healthy (or has no
// healthcheck), else what it is.
func whole(c container.InspectResponse) string {
	st := c.State
	switch {
	case st.Restarting:
		return "restarting"
	case st.Paused:
		return "paused"
	case !st.Running:
		return string(st.Status)
	case st.Health != nil && st.Health.Status != container.Healthy:
		return "running, health " + string(st.Health.Status)
	}
	return ""
}

// Addresses returns where the container is reached: its address on each
// of its networks, and each port it publishes on its host as host:port.
func (t *Terminator) Addresses(ctx context.Context, inst chaos.Instance) ([]string, error) {
	c, err := t.inspect(ctx, inst.ID)
	if err != nil {
		return nil, err
	}
	return addresses(c), nil
}

func addresses(c container.InspectResponse) []string {
	var out []string
	if c.NetworkSettings == nil {
		return nil
	}
	for _, n := range c.NetworkSettings.Networks {
		if n != nil && n.IPAddress.IsValid() {
			out = append(out, n.IPAddress.String())
		}
	}
	for _, bindings := range c.NetworkSettings.Ports {
		for _, b := range bindings {
			host := "0.0.0.0"
			if b.HostIP.IsValid() {
				host = b.HostIP.String()
			}
			if b.HostPort != "" {
				out = append(out, net.JoinHostPort(host, b.HostPort))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (t *Terminator) inspect(ctx context.Context, id string) (container.InspectResponse, error) {
	res, err := t.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return container.InspectResponse{}, fmt.Errorf("docker backend: inspect %s: %w", id, err)
	}
	c := res.Container
	if c.State == nil || c.HostConfig == nil {
		return container.InspectResponse{}, fmt.Errorf("docker backend: inspect %s: the engine sent no state", id)
	}
	return c, nil
}

func (t *Terminator) rememberStart(c container.InspectResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.started[c.ID] = c.State.StartedAt
}

// memory returns the start time remembered for the instance and the labels
// a replacement must carry.
func (t *Terminator) memory(inst chaos.Instance) (started string, sel map[string]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sel = t.selectors[inst.ID]
	if sel == nil {
		sel = inst.Labels
	}
	return t.started[inst.ID], sel
}

// forget drops what was remembered of a container once it has recovered,
// so that a long-running monkey does not keep every container it saw.
func (t *Terminator) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.started, id)
	delete(t.selectors, id)
	delete(t.faults, id)
}

// cpus is how many CPUs the container may use: its CPU limit rounded up,
// else the size of its cpuset, else the engine's CPUs; at least 1.
func cpus(hc *container.HostConfig, engineCPUs int) int {
	n := engineCPUs
	switch {
	case hc.NanoCPUs > 0:
		n = int(math.Ceil(float64(hc.NanoCPUs) / 1e9))
	case hc.CPUQuota > 0:
		period := hc.CPUPeriod
		if period <= 0 {
			period = 100_000 // the kernel's default CFS period, in µs
		}
		n = int(math.Ceil(float64(hc.CPUQuota) / float64(period)))
	case hc.CpusetCpus != "":
		if m := cpusetSize(hc.CpusetCpus); m > 0 {
			n = m
		}
	}
	return max(n, 1)
}

// cpusetSize counts the CPUs of a cpuset list such as "0-3,6"; 0 when it
// does not parse.
func cpusetSize(s string) int {
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}
