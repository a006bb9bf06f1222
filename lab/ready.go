package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// Ping sends a RESP PING to addr and succeeds if the reply is +PONG:
// every RESP server answers it, whether it is a redis-server, a troop node
// or a Dynomite. Each attempt is bounded by one second and by ctx.
func Ping(ctx context.Context, addr string) error {
	reply, err := command(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if reply != "+PONG" {
		return fmt.Errorf("PING %s: got %q, want +PONG", addr, reply)
	}
	return nil
}

// command sends one command to the RESP server at addr over a connection
// of its own and returns the first line of the reply (+OK, :1, -ERR ...),
// within one second and ctx.
func command(ctx context.Context, addr string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	req := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		req += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// waitPing retries Ping until it succeeds, stop is closed (the process
// exited), ctx ends or the deadline passes; it returns the last error.
func waitPing(ctx context.Context, addr string, deadline time.Time, stop <-chan struct{}) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for {
		last := Ping(ctx, addr)
		if last == nil {
			return nil
		}
		select {
		case <-stop:
			return fmt.Errorf("process exited")
		case <-ctx.Done():
			return last
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitMeshed waits until every node reports an open connection to every
// peer in its /cluster_describe, so that the cluster is ready for quorum
// requests: nodes that start together refuse each other's first dials and
// retry after a short backoff. troop lab up, the demo and tests call it after
// the nodes answer PING.
//
// Dynomite's nodes say nothing of their peers' connections: a write
// through each must reach every replica instead (DynomiteMeshed).
func WaitMeshed(ctx context.Context, nodes []Node, within time.Duration) error {
	if len(nodes) > 0 && nodes[0].Engine == EngineDynomite {
		return waitDynomiteMeshed(ctx, nodes, within)
	}
	deadline := time.Now().Add(within)
	for {
		missing := ""
		for _, n := range nodes {
			var described []struct {
				Name string `json:"name"`
				Up   bool   `json:"up"`
			}
			res, err := http.Get("http://" + n.StatsListen + "/cluster_describe")
			if err == nil {
				err = json.NewDecoder(res.Body).Decode(&described)
				res.Body.Close()
			}
			if err != nil {
				missing = fmt.Sprintf("%s: %v", n.Name, err)
				break
			}
			for _, d := range described {
				if !d.Up {
					missing = fmt.Sprintf("%s has no connection to a peer yet", n.Name)
				}
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster did not connect within %v: %s", within, missing)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
