package dockerchaos

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/chaostest"
	"github.com/troop-lab/troop/chaos/lease"
)

// groupLabel tells the tests' groups apart within the run.
const groupLabel = "dev.troop.chaos-test-group"

func newTerminator(t *testing.T) *Terminator {
	t.Helper()
	term, err := New("") // DOCKER_HOST or the default socket, as the CLI will
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Close() })
	return term
}

func group(name string, labels map[string]string, exceptions ...string) *chaos.Group {
	sel := map[string]string{runLabel: runID}
	for k, v := range labels {
		sel[k] = v
	}
	return &chaos.Group{Name: name, Backend: chaos.Docker, Selector: chaos.Selector{Labels: sel},
		Exceptions: chaostest.Exceptions(exceptions...)}
}

func sorted(s ...string) []string { slices.Sort(s); return s }

func TestInstancesByLabel(t *testing.T) {
	needEngine(t)
	t.Parallel()
	term := newTerminator(t)
	g := "instances"
	front := run(t, spec{labels: map[string]string{groupLabel: g, "tier": "front"}})
	back := run(t, spec{labels: map[string]string{groupLabel: g, "tier": "back"}})
	bare := run(t, spec{labels: map[string]string{groupLabel: g}})
	other := run(t, spec{labels: map[string]string{groupLabel: "other", "tier": "front"}})
	run(t, spec{labels: map[string]string{groupLabel: g, "tier": "front"}, stopped: true})
	paused := run(t, spec{labels: map[string]string{groupLabel: g, "tier": "front"}})
	ctx := context.Background()
	// Paused as the pause fault does: the engine's runtime may fail to
	// freeze a container on a loaded host, and pause tries again.
	if err := term.pause(ctx, paused); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   []string
	}{
		{"group label only", map[string]string{groupLabel: g}, sorted(front, back, bare)},
		{"label present, any value", map[string]string{groupLabel: g, "tier": ""}, sorted(front, back)},
		{"label with value", map[string]string{groupLabel: g, "tier": "front"}, []string{front}},
		{"across groups", map[string]string{"tier": "front"}, sorted(front, other)},
		{"no such value", map[string]string{groupLabel: g, "tier": "middle"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := term.Instances(ctx, group("g", tc.labels))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(chaostest.IDs(got), tc.want) {
				t.Errorf("instances = %v, want %v", chaostest.IDs(got), tc.want)
			}
			for _, in := range got {
				if in.Group != "g" || in.Name == "" || strings.HasPrefix(in.Name, "/") || in.Labels[runLabel] != runID {
					t.Errorf("instance %+v: want group g, a name without '/', and the container's labels", in)
				}
			}
		})
	}

	// Exceptions, by label and by name, are applied by the core's Choose
	// over what Instances returns: no pick ever lands on them.
	backName := inspect(t, back).Name[1:]
	for _, exc := range [][]string{{"tier=back"}, {"tier=b*"}, {backName}, {back[:12] + "*"}} {
		grp := group("g", map[string]string{groupLabel: g}, exc...)
		live, err := term.Instances(ctx, grp)
		if err != nil {
			t.Fatal(err)
		}
		chosen := map[string]bool{}
		for pick := range uint64(12) {
			in, ok := chaos.PlannedKill{Pick: pick}.Choose(grp, live)
			if !ok {
				t.Fatalf("exceptions %v: no instance chosen from %v", exc, chaostest.IDs(live))
			}
			chosen[in.ID] = true
		}
		if chosen[back] || !chosen[front] || !chosen[bare] || len(chosen) != 2 {
			t.Errorf("exceptions %v: chose %v; want %s and %s, never %s", exc, chosen, front[:12], bare[:12], back[:12])
		}
	}

	if _, err := term.Instances(ctx, &chaos.Group{Name: "none", Backend: chaos.Docker}); err == nil {
		t.Error("a group without labels selected containers; want an error (it would select every container)")
	}
	if _, err := term.Instances(ctx, &chaos.Group{Name: "lab", Backend: chaos.Lab}); err == nil {
		t.Error("a lab group was accepted by the docker backend")
	}
}

// killOne terminates one container of a group of three and checks that it,
// and no other, went down and came back; it returns the victim.
func killOne(t *testing.T, term *Terminator, name string, restarts int) chaos.Instance {
	t.Helper()
	var all []string
	for range 3 {
		all = append(all, run(t, spec{labels: map[string]string{groupLabel: name}, restart: container.RestartPolicyAlways, health: true}))
	}
	waitWhole(t, all...)
	before := map[string]container.InspectResponse{}
	for _, id := range all {
		before[id] = inspect(t, id)
	}
	ctx := context.Background()
	grp := group(name, map[string]string{groupLabel: name})
	live, err := term.Instances(ctx, grp)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(chaostest.IDs(live), sorted(all...)) {
		t.Fatalf("instances = %v, want %v", chaostest.IDs(live), sorted(all...))
	}
	victim, _ := chaos.PlannedKill{Pick: 1}.Choose(grp, live)

	since := time.Now()
	if err := term.Act(ctx, victim, chaos.Action{Kind: chaos.Terminate}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	took, err := term.AwaitRecovery(rctx, victim, since)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: terminated %s; whole again (running, healthy) after %s", name, victim.Name, took.Round(time.Millisecond))
	if took <= 0 || took > time.Since(since) {
		t.Errorf("recovery time %s, want in (0, %s]", took, time.Since(since))
	}
	for _, id := range all {
		now := inspect(t, id)
		if id != victim.ID {
			if now.State.StartedAt != before[id].State.StartedAt || now.RestartCount != 0 || !now.State.Running {
				t.Errorf("bystander %.12s was touched: started %s -> %s, restarts %d, running %v",
					id, before[id].State.StartedAt, now.State.StartedAt, now.RestartCount, now.State.Running)
			}
			continue
		}
		if now.State.StartedAt == before[id].State.StartedAt {
			t.Errorf("victim %.12s was not started again (started %s)", id, now.State.StartedAt)
		}
		if now.RestartCount != restarts {
			t.Errorf("victim %.12s has restart count %d, want %d", id, now.RestartCount, restarts)
		}
		if w := whole(now); w != "" {
			t.Errorf("victim %.12s recovered but is %s", id, w)
		}
	}
	return victim
}

// TestTerminateCrashRestartPolicy kills the main process from this host,
// which Docker counts as a crash: its restart policy brings it back (the
// restart count says it was the engine, not the backend).
func TestTerminateCrashRestartPolicy(t *testing.T) {
	needEngine(t)
	t.Parallel()
	term := newTerminator(t)
	probe := run(t, spec{labels: map[string]string{groupLabel: "probe"}})
	if c := inspect(t, probe); !hostProcessOf(c.State.Pid, c.ID) {
		t.Skipf("skipped: the engine's container processes are not visible from this host (a remote engine, a VM or another PID namespace); TestTerminateThroughAPI covers that case")
	}
	killOne(t, term, "crash", 1)
}

// TestTerminateThroughAPI kills through the Engine API, which Docker
// counts as a stop by hand and does not restart: the backend starts the
// container again as its restart policy would have, and leaves a container
// with restart policy "no" down, as a crash would.
func TestTerminateThroughAPI(t *testing.T) {
	needEngine(t)
	t.Parallel()
	term := newTerminator(t)
	term.hostSignals = false
	killOne(t, term, "apikill", 0)

	ctx := context.Background()
	id := run(t, spec{labels: map[string]string{groupLabel: "norestart"}})
	live, err := term.Instances(ctx, group("norestart", map[string]string{groupLabel: "norestart"}))
	if err != nil || len(live) != 1 {
		t.Fatalf("instances = %v, %v; want the one container", chaostest.IDs(live), err)
	}
	if err := term.Act(ctx, live[0], chaos.Action{Kind: chaos.Terminate}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if c := inspect(t, id); c.State.Running || c.State.ExitCode != 137 {
		t.Errorf("container with restart policy no: running %v, exit code %d; want down with 137 (SIGKILL)", c.State.Running, c.State.ExitCode)
	}
}

func TestRestart(t *testing.T) {
	needEngine(t)
	t.Parallel()
	term := newTerminator(t)
	id := run(t, spec{labels: map[string]string{groupLabel: "restart"}, health: true})
	waitWhole(t, id)
	before := inspect(t, id)
	ctx := context.Background()
	live, err := term.Instances(ctx, group("restart", map[string]string{groupLabel: "restart"}))
	if err != nil || len(live) != 1 {
		t.Fatalf("instances = %v, %v; want the one container", chaostest.IDs(live), err)
	}
	since := time.Now()
	if err := term.Act(ctx, live[0], chaos.Action{Kind: chaos.Restart}); err != nil {
		t.Fatal(err)
	}
	after := inspect(t, id)
	if !after.State.Running || after.State.StartedAt == before.State.StartedAt {
		t.Errorf("after restart: running %v, started %s (was %s); want running, started again", after.State.Running, after.State.StartedAt, before.State.StartedAt)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	took, err := term.AwaitRecovery(rctx, live[0], since)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restart: healthy again after %s", took.Round(time.Millisecond))
}

func TestLeasedKindsRefusedByAct(t *testing.T) {
	needEngine(t)
	t.Parallel()
	term := newTerminator(t)
	id := run(t, spec{labels: map[string]string{groupLabel: "refuse"}})
	inst := chaos.Instance{ID: id, Name: id[:12]}
	for _, a := range []chaos.Action{{Kind: chaos.Stop}, {Kind: chaos.Pause, Duration: time.Second}, {Kind: chaos.BurnCPU, Duration: time.Second}} {
		if err := term.Act(context.Background(), inst, a); err == nil || !strings.Contains(err.Error(), "leased") {
			t.Errorf("Act(%s) = %v, want an error saying it is leased", a, err)
		}
	}
	if c := inspect(t, id); !c.State.Running || c.State.Paused {
		t.Errorf("container is %s after refused actions, want running", c.State.Status)
	}
}

// begin runs the monkey's side of a lease: LeaseFor, a stored lease, Begin,
// the lease stored again. It returns the lease and its store.
func begin(t *testing.T, term *Terminator, inst chaos.Instance, a chaos.Action, want time.Duration) (chaos.Lease, *lease.Store) {
	t.Helper()
	ctx := context.Background()
	d, leased, err := term.LeaseFor(ctx, inst, a)
	if err != nil || !leased || d != want {
		t.Fatalf("LeaseFor(%s) = %s, %v, %v; want %s, leased", a, d, leased, err, want)
	}
	store, err := lease.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	l := chaos.Lease{ID: lease.NewID(now), Group: inst.Group, Backend: chaos.Docker, Instance: inst, Action: a, Start: now, Until: now.Add(d)}
	if err := store.Save(l); err != nil {
		t.Fatal(err)
	}
	undo, err := term.Begin(ctx, l)
	if err != nil {
		t.Fatalf("Begin(%s): %v", a, err)
	}
	l.Undo = undo
	if err := store.Save(l); err != nil {
		t.Fatal(err)
	}
	return l, store
}

// watchdog runs the lease's watchdog as the monkey's detached process
// would, in this process, and returns when it has reverted the lease.
func watchdog(t *testing.T, term *Terminator, store *lease.Store, l chaos.Lease) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := &lease.Watchdog{Store: store, ID: l.ID, Revert: term.Revert, Poll: 50 * time.Millisecond}
	if err := w.Run(ctx); err != nil {
		t.Fatalf("watchdog: %v", err)
	}
	return time.Now()
}

func TestPause(t *testing.T) {
	needEngine(t)
	t.Parallel()
	term := newTerminator(t)
	id := run(t, spec{labels: map[string]string{groupLabel: "pause"}})
	ctx := context.Background()
	grp := group("pause", map[string]string{groupLabel: "pause"})
	live, err := term.Instances(ctx, grp)
	if err != nil || len(live) != 1 {
		t.Fatalf("instances = %v, %v; want the one container", chaostest.IDs(live), err)
	}
	inst := live[0]

	// Undone at the lease's end, by the watchdog.
	pause := chaos.Action{Kind: chaos.Pause, Duration: 2 * time.Second}
	l, store := begin(t, term, inst, pause, 2*time.Second)
	if c := inspect(t, id); !c.State.Paused {
		t.Fatalf("after Begin(pause) the container is %s, want paused", c.State.Status)
	}
	if again, err := term.Instances(ctx, grp); err != nil || len(again) != 0 {
		t.Errorf("instances while paused = %v, %v; want none", chaostest.IDs(again), err)
	}
	done := watchdog(t, term, store, l)
	if done.Before(l.Until) {
		t.Errorf("watchdog reverted at %s, before the lease's end %s", done.Format(time.StampMilli), l.Until.Format(time.StampMilli))
	}
	if c := inspect(t, id); c.State.Paused || !c.State.Running {
		t.Fatalf("after the lease's end the container is %s, want running", c.State.Status)
	}

	// Undone early by Revert (the global stop), and Revert is idempotent.
	l, _ = begin(t, term, inst, chaos.Action{Kind: chaos.Pause, Duration: time.Hour}, time.Hour)
	if c := inspect(t, id); !c.State.Paused {
		t.Fatalf("after Begin(pause) the container is %s, want paused", c.State.Status)
	}
	l.Undo = nil // as if the monkey died before storing Begin's answer
	for i := range 2 {
		if err := term.Revert(ctx, l); err != nil {
			t.Fatalf("Revert #%d: %v", i+1, err)
		}
		if c := inspect(t, id); c.State.Paused || !c.State.Running {
			t.Fatalf("after Revert #%d the container is %s, want running", i+1, c.State.Status)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := term.AwaitRecovery(rctx, inst, l.Start); err != nil {
		t.Errorf("AwaitRecovery after the pause: %v", err)
	}
}

func TestStop(t *testing.T) {
	needEngine(t)
	t.Parallel()
	term := newTerminator(t)
	term.StoppedFor = 2 * time.Second
	id := run(t, spec{labels: map[string]string{groupLabel: "stop"}, restart: container.RestartPolicyAlways, health: true})
	waitWhole(t, id)
	ctx := context.Background()
	live, err := term.Instances(ctx, group("stop", map[string]string{groupLabel: "stop"}))
	if err != nil || len(live) != 1 {
		t.Fatalf("instances = %v, %v; want the one container", chaostest.IDs(live), err)
	}
	l, store := begin(t, term, live[0], chaos.Action{Kind: chaos.Stop}, 2*time.Second)
	c := inspect(t, id)
	if c.State.Running || c.State.Restarting {
		t.Fatalf("after Begin(stop) the container is %s, want stopped", c.State.Status)
	}
	// 137 would be the SIGKILL the engine sends when the stop timeout runs out.
	if c.State.ExitCode == 137 {
		t.Errorf("stop ended with exit code 137: the container did not stop gracefully within its timeout")
	}
	// Docker does not restart a container stopped through its API, even
	// with restart policy always: the lease does.
	time.Sleep(time.Second)
	if c := inspect(t, id); c.State.Running {
		t.Fatalf("the engine restarted a stopped container by itself; the lease is not needed")
	}
	watchdog(t, term, store, l)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	took, err := term.AwaitRecovery(rctx, live[0], l.Start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stop: stopped for %s, whole again %s after the stop began", term.StoppedFor, took.Round(time.Millisecond))
	if took < term.StoppedFor {
		t.Errorf("recovered %s after the stop, before the lease's end (%s)", took, term.StoppedFor)
	}
	if err := term.Revert(ctx, l); err != nil {
		t.Errorf("second Revert of a stop: %v", err)
	}
}

// burners counts the processes of the container that belong to a lease's
// burner, as the engine's top lists them.
func burners(t *testing.T, id string, l chaos.Lease) int {
	t.Helper()
	res, err := api.ContainerTop(context.Background(), id, client.ContainerTopOptions{Arguments: []string{"-eo", "pid,args"}})
	if err != nil {
		t.Fatalf("top %.12s: %v", id, err)
	}
	n := 0
	for _, p := range res.Processes {
		if strings.Contains(strings.Join(p, " "), burnTag(l.ID)) {
			n++
		}
	}
	return n
}

// cpuTime is the container's CPU time so far.
func cpuTime(t *testing.T, id string) time.Duration {
	t.Helper()
	res, err := api.ContainerStats(context.Background(), id, client.ContainerStatsOptions{Stream: false, IncludePreviousSample: false})
	if err != nil {
		t.Fatalf("stats %.12s: %v", id, err)
	}
	defer res.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		t.Fatalf("stats %.12s: %v", id, err)
	}
	return time.Duration(st.CPUStats.CPUUsage.TotalUsage)
}

func TestBurnCPU(t *testing.T) {
	needEngine(t)
	t.Parallel()
	if shellImage == "" {
		t.Skipf("skipped: no image with a shell could be built from this host's files: %v", shellErr)
	}
	term := newTerminator(t)
	id := run(t, spec{image: shellImage, labels: map[string]string{groupLabel: "burn"}})
	ctx := context.Background()
	live, err := term.Instances(ctx, group("burn", map[string]string{groupLabel: "burn"}))
	if err != nil || len(live) != 1 {
		t.Fatalf("instances = %v, %v; want the one container", chaostest.IDs(live), err)
	}
	inst := live[0]

	// Ended early by Revert.
	l, _ := begin(t, term, inst, chaos.Action{Kind: chaos.BurnCPU, Duration: time.Minute}, time.Minute)
	// The container has half a CPU: one burner shell plus its loop.
	waitFor(t, 10*time.Second, "no burner processes in the container", func() bool { return burners(t, id, l) >= 2 })
	// An idle container uses next to no CPU: a burning one reaches 200 ms
	// of it, in 0.4 s at its half CPU, later on a machine busy with other
	// work (142 ms in 2 s beside two CPU hogs and a second suite), so the
	// wait is for the CPU time, bounded by the fault's minute.
	c0, start := cpuTime(t, id), time.Now()
	waitFor(t, 50*time.Second, "the burning container has not used 200ms of CPU", func() bool {
		return cpuTime(t, id)-c0 >= 200*time.Millisecond
	})
	t.Logf("burn-cpu: 200ms of CPU time in %s (the container may use half a CPU)", time.Since(start).Round(time.Millisecond))
	for i := range 2 {
		if err := term.Revert(ctx, l); err != nil {
			t.Fatalf("Revert #%d: %v", i+1, err)
		}
	}
	if n := burners(t, id, l); n != 0 {
		t.Errorf("%d burner processes left after Revert", n)
	}
	c0 = cpuTime(t, id)
	time.Sleep(time.Second)
	if used := cpuTime(t, id) - c0; used > 200*time.Millisecond {
		t.Errorf("the container still used %s of CPU in 1s after Revert", used)
	}

	// Ends by itself at the lease's end, with nobody reverting it.
	l, _ = begin(t, term, inst, chaos.Action{Kind: chaos.BurnCPU, Duration: 2 * time.Second}, 2*time.Second)
	waitFor(t, 10*time.Second, "no burner processes in the container", func() bool { return burners(t, id, l) >= 2 })
	waitFor(t, 15*time.Second, "the burner did not end by itself after its lease", func() bool { return burners(t, id, l) == 0 })
	if time.Now().Before(l.Until) {
		t.Errorf("the burner ended before the lease's end")
	}
}

func TestBurnCPUWithoutShell(t *testing.T) {
	needEngine(t)
	t.Parallel()
	term := newTerminator(t)
	id := run(t, spec{labels: map[string]string{groupLabel: "noshell"}})
	inst := chaos.Instance{ID: id, Name: id[:12]}
	now := time.Now()
	l := chaos.Lease{ID: "noshell", Instance: inst, Action: chaos.Action{Kind: chaos.BurnCPU, Duration: time.Minute}, Start: now, Until: now.Add(time.Minute)}
	_, err := term.Begin(context.Background(), l)
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "/bin/sh") {
		t.Errorf("Begin(burn-cpu) in an image without a shell = %v; want ErrNotSupported naming /bin/sh", err)
	}
	if err := term.Revert(context.Background(), l); err != nil {
		t.Errorf("Revert of a burn that never started: %v", err)
	}
}

func TestRevertGoneContainer(t *testing.T) {
	needEngine(t)
	t.Parallel()
	term := newTerminator(t)
	id := run(t, spec{labels: map[string]string{groupLabel: "gone"}})
	if _, err := api.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []chaos.Kind{chaos.Pause, chaos.Stop, chaos.BurnCPU} {
		l := chaos.Lease{ID: "gone", Instance: chaos.Instance{ID: id}, Action: chaos.Action{Kind: k}}
		if err := term.Revert(context.Background(), l); err != nil {
			t.Errorf("Revert(%s) of a removed container = %v, want nil", k, err)
		}
	}
}
