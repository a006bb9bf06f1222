package appboot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/troop-lab/troop/internal/freeport"
)

// A Cluster is every App Boot service running as its own process.
type Cluster struct {
	URLs  map[string]string // service name to base URL
	procs []*exec.Cmd
}

// Start runs every service as a process: command (the program and its
// leading arguments, such as troop's "ldfi appboot-service") followed by
// --name, --listen and --peers. The processes die with the caller (parent
// death signal); Stop ends them by PID.
func Start(ctx context.Context, command []string, env []string) (*Cluster, error) {
	c := &Cluster{URLs: map[string]string{}}
	addrs := map[string]string{}
	for _, name := range Names() {
		addr, err := freeport.Pick()
		if err != nil {
			return nil, err
		}
		addrs[name] = addr
		c.URLs[name] = "http://" + addr
	}
	var peers []string
	for _, name := range Names() {
		peers = append(peers, name+"="+c.URLs[name])
	}
	for _, name := range Names() {
		args := append(append([]string{}, command[1:]...), "--name", name, "--listen", addrs[name], "--peers", strings.Join(peers, ","))
		cmd := exec.Command(command[0], args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			c.Stop()
			return nil, fmt.Errorf("appboot: start %s: %w", name, err)
		}
		c.procs = append(c.procs, cmd)
	}
	if err := c.waitHealthy(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// GatewayURL is the URL of the App Boot request.
func (c *Cluster) GatewayURL() string { return c.URLs[Gateway] + Path }

// PIDs lists the processes' IDs.
func (c *Cluster) PIDs() []int {
	var out []int
	for _, p := range c.procs {
		out = append(out, p.Process.Pid)
	}
	return out
}

func (c *Cluster) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, name := range Names() {
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.URLs[name]+"/healthz", nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("appboot: %s at %s did not answer: %w", name, c.URLs[name], errors.Join(ctx.Err(), err))
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// Stop ends every process by PID: SIGTERM, then SIGKILL after two seconds.
func (c *Cluster) Stop() {
	for _, p := range c.procs {
		p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range c.procs {
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
	c.procs = nil
}
