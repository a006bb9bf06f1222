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

// pingRequest is PING as a RESP array: every RESP server answers it,
// whether it is a redis-server or a troop node.
const pingRequest = "*1\r\n$4\r\nPING\r\n"

// Ping sends a RESP PING to addr and succeeds if the reply is +PONG. Each
// attempt is bounded by one second and by ctx.
func Ping(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte(pingRequest)); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got := strings.TrimRight(line, "\r\n"); got != "+PONG" {
		return fmt.Errorf("PING %s: got %q, want +PONG", addr, got)
	}
	return nil
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
func WaitMeshed(ctx context.Context, nodes []Node, within time.Duration) error {
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
