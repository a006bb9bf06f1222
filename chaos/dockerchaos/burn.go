package dockerchaos

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/troop-lab/troop/chaos"
)

// burnScript runs as `sh -c burnScript TAG SECONDS N`: N busy loops for
// SECONDS, then it kills them and exits, so the burn ends by itself even
// if nobody reverts it. $0, the tag, is in the command line of the shell
// and of its subshells, which is how endBurnScript finds them. It is one
// line because endBurnScript reads command lines with read, which stops at
// the first newline, before the tag.
const burnScript = `i=0; pids=; while [ "$i" -lt "$2" ]; do (while :; do :; done) & pids="$pids $!"; i=$((i+1)); done; sleep "$1"; kill $pids`

// endBurnScript runs as `sh -c endBurnScript troop-end-burn TAG`: it kills
// every process of the container whose command line holds TAG, except
// itself. It needs nothing but the shell: /proc, read and kill are there.
// The burner's sleep is left to end by itself; it uses no CPU.
const endBurnScript = `for d in /proc/[0-9]*; do
	p=${d#/proc/}
	[ "$p" = "$$" ] && continue
	c=
	IFS= read -r c 2>/dev/null <"$d/cmdline"
	case "$c" in *"$1"*) kill -9 "$p" 2>/dev/null ;; esac
done
exit 0`

// burnTag marks the processes of one lease's burner. The trailing ':' keeps
// lease "a1" from matching the burner of lease "a10".
func burnTag(leaseID string) string { return "troop-burn-cpu:" + leaseID + ":" }

// execTimeout bounds the short commands the backend runs in containers.
const execTimeout = 30 * time.Second

func (t *Terminator) burn(ctx context.Context, l chaos.Lease, c container.InspectResponse) error {
	name := l.Instance.Name
	if _, err := t.api.ContainerStatPath(ctx, c.ID, client.ContainerStatPathOptions{Path: "/bin/sh"}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("docker backend: burn-cpu in %s: %w: its image has no /bin/sh to run a CPU burner with", name, ErrNotSupported)
		}
		return fmt.Errorf("docker backend: burn-cpu in %s: look for /bin/sh: %w", name, err)
	}
	code, err := t.run(ctx, c.ID, []string{"/bin/sh", "-c", "command -v sleep"})
	if err != nil {
		return fmt.Errorf("docker backend: burn-cpu in %s: %w", name, err)
	}
	if code != 0 {
		return fmt.Errorf("docker backend: burn-cpu in %s: %w: its image has no sleep command to end the burn with", name, ErrNotSupported)
	}
	secs := int(math.Ceil(time.Until(l.Until).Seconds()))
	if secs < 1 {
		return fmt.Errorf("docker backend: burn-cpu in %s: the lease ended at %s", name, l.Until.Format(time.RFC3339))
	}
	engineCPUs := 1
	if c.HostConfig.NanoCPUs == 0 && c.HostConfig.CPUQuota == 0 && c.HostConfig.CpusetCpus == "" {
		info, err := t.api.Info(ctx, client.InfoOptions{})
		if err != nil {
			return fmt.Errorf("docker backend: burn-cpu in %s: count the engine's CPUs: %w", name, err)
		}
		engineCPUs = info.Info.NCPU
	}
	cmd := []string{"/bin/sh", "-c", burnScript, burnTag(l.ID), strconv.Itoa(secs), strconv.Itoa(cpus(c.HostConfig, engineCPUs))}
	ex, err := t.api.ExecCreate(ctx, c.ID, client.ExecCreateOptions{Cmd: cmd})
	if err != nil {
		return fmt.Errorf("docker backend: burn-cpu in %s: %w", name, err)
	}
	if _, err := t.api.ExecStart(ctx, ex.ID, client.ExecStartOptions{Detach: true}); err != nil {
		return fmt.Errorf("docker backend: burn-cpu in %s: %w", name, err)
	}
	return nil
}

func (t *Terminator) endBurn(ctx context.Context, l chaos.Lease, c container.InspectResponse) error {
	if _, err := t.api.ContainerStatPath(ctx, c.ID, client.ContainerStatPathOptions{Path: "/bin/sh"}); cerrdefs.IsNotFound(err) {
		return nil // no shell, so no burner was ever started
	}
	code, err := t.run(ctx, c.ID, []string{"/bin/sh", "-c", endBurnScript, "troop-end-burn", burnTag(l.ID)})
	if err != nil {
		return fmt.Errorf("docker backend: end the burn-cpu of lease %s in %s: %w", l.ID, l.Instance.Name, err)
	}
	if code != 0 {
		return fmt.Errorf("docker backend: end the burn-cpu of lease %s in %s: exit status %d", l.ID, l.Instance.Name, code)
	}
	return nil
}

// run runs cmd in the container, waits for it to exit and returns its exit
// status.
func (t *Terminator) run(ctx context.Context, id string, cmd []string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	ex, err := t.api.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: cmd})
	if err != nil {
		return 0, err
	}
	if _, err := t.api.ExecStart(ctx, ex.ID, client.ExecStartOptions{Detach: true}); err != nil {
		return 0, err
	}
	for {
		st, err := t.api.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		if err != nil {
			return 0, err
		}
		if !st.Running {
			return st.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s did not finish: %w", cmd[0], ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
