package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/node"
	"github.com/troop-lab/troop/resp"
)

func init() { subcommands = append(subcommands, newDemoCmd) }

func newDemoCmd() *cobra.Command {
	var (
		dir     string
		encrypt bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show a lab cluster serving reads and writes at each consistency level, and under failure",
		Long: `Bring up a lab cluster (1 datacenter x 3 racks x 1 node, real redis-server
and troop node processes on loopback), write and read keys through it at
DC_ONE, DC_QUORUM and DC_SAFE_QUORUM, stop one and then two redis-servers to
show what each level does under failure, and bring the cluster down.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd.Context(), os.Stdout, dir, "", encrypt)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".troop/demo", "directory for the demo cluster's configs, data and logs")
	cmd.Flags().BoolVar(&encrypt, "tls", false, "run the nodes' peer links over mutual TLS, with a CA and certificates made for the demo (as troop lab up --tls)")
	return cmd
}

// runDemo runs the demo; troop is the binary the nodes run ("" for this
// one); encrypt runs the peer links over TLS.
func runDemo(ctx context.Context, out io.Writer, dir, troop string, encrypt bool) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	say("== Starting a lab cluster: 1 datacenter x 3 racks x 1 node (a redis-server and a troop node per rack)")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	l, err := lab.Start(ctx, lab.Spec{Dir: dir, Troop: troop, ReplaceAfter: time.Hour, TLS: encrypt}) // the demo replaces nothing by itself
	if err != nil {
		return err
	}
	defer func() {
		say("== Bringing the cluster down")
		l.Stop()
	}()
	nodes := l.Nodes()
	if err := lab.WaitMeshed(ctx, nodes, 10*time.Second); err != nil {
		return err
	}
	if encrypt {
		say("   peer links over mutual TLS (secure_server_option: all), certificates of %s", filepath.Join(dir, "tls", "ca.crt"))
	}
	for _, n := range nodes {
		say("   %-12s rack %-6s token %-10d client %s  admin %s  redis %s", n.Name, n.Rack, n.Token, n.Listen, n.StatsListen, n.Redis)
	}
	conns := make([]*demoConn, len(nodes))
	for i, n := range nodes {
		if conns[i], err = dialDemo(n.Listen); err != nil {
			return err
		}
		defer conns[i].Close()
	}
	first := conns[0]

	say("\n== Writes through %s, read back through every node, at each level", nodes[0].Name)
	for _, level := range []string{"DC_ONE", "DC_QUORUM", "DC_SAFE_QUORUM"} {
		key := "demo:" + strings.ToLower(level)
		for _, c := range conns {
			c.Do("TROOP", "CONSISTENCY", level)
		}
		start := time.Now()
		say("   %-15s SET %s hello  -> %s (%v)", level, key, first.Do("SET", key, "hello"), time.Since(start).Round(time.Microsecond))
		time.Sleep(20 * time.Millisecond) // let DC_ONE's asynchronous copies land
		for i, c := range conns {
			start := time.Now()
			say("   %-15s GET %s via %s -> %s (%v)", level, key, nodes[i].Name, c.Do("GET", key), time.Since(start).Round(time.Microsecond))
		}
	}

	say("\n== Each redis-server holds the plain value, and its version beside it")
	for _, n := range nodes {
		r, err := dialDemo(n.Redis)
		if err != nil {
			return err
		}
		say("   redis %s: GET demo:dc_quorum -> %s, version %s", n.Redis, r.Do("GET", "demo:dc_quorum"), r.Do("GET", node.VersionPrefix+"demo:dc_quorum"))
		r.Close()
	}

	say("\n== Stopping the redis-server of %s: one replica of three is down", nodes[2].Name)
	if err := l.StopNode(nodes[2].Name, lab.RedisProc); err != nil {
		return err
	}
	first.Do("TROOP", "CONSISTENCY", "DC_QUORUM")
	say("   DC_QUORUM       SET demo:failure one-down -> %s", first.Do("SET", "demo:failure", "one-down"))
	say("   DC_QUORUM       GET demo:failure          -> %s", first.Do("GET", "demo:failure"))
	first.Do("TROOP", "CONSISTENCY", "DC_SAFE_QUORUM")
	say("   DC_SAFE_QUORUM  GET demo:failure          -> %s", first.Do("GET", "demo:failure"))
	conns[2].Do("TROOP", "CONSISTENCY", "DC_ONE")
	say("   DC_ONE via %s (its own replica is down, so it fails over to another rack):", nodes[2].Name)
	say("                   GET demo:failure          -> %s", conns[2].Do("GET", "demo:failure"))

	say("\n== Stopping the redis-server of %s too: two of three are down, no quorum", nodes[1].Name)
	if err := l.StopNode(nodes[1].Name, lab.RedisProc); err != nil {
		return err
	}
	first.Do("TROOP", "CONSISTENCY", "DC_QUORUM")
	say("   DC_QUORUM       SET demo:failure two-down -> %s", first.Do("SET", "demo:failure", "two-down"))
	first.Do("TROOP", "CONSISTENCY", "DC_ONE")
	say("   DC_ONE          SET demo:failure two-down -> %s", first.Do("SET", "demo:failure", "two-down"))
	say("   DC_ONE          GET demo:failure          -> %s", first.Do("GET", "demo:failure"))

	say("\n== Starting both redis-servers again")
	for _, i := range []int{1, 2} {
		if err := l.StartNode(nodes[i].Name, lab.RedisProc); err != nil {
			return err
		}
	}
	time.Sleep(time.Second) // the nodes' links retry after a short backoff
	first.Do("TROOP", "CONSISTENCY", "DC_QUORUM")
	say("   DC_QUORUM       SET demo:failure recovered -> %s", first.Do("SET", "demo:failure", "recovered"))
	say("   DC_QUORUM       GET demo:failure           -> %s", first.Do("GET", "demo:failure"))
	say("\n   (the restarted redis-servers came back empty: read repair and hints refill them, and troop repair runs an anti-entropy pass; see docs/repair.md)")
	return showCounters(say, nodes[0])
}

// showCounters prints a node's request counters from its admin API.
func showCounters(say func(string, ...any), n lab.Node) error {
	res, err := http.Get("http://" + n.StatsListen + "/info")
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var info node.Info
	if err := json.NewDecoder(res.Body).Decode(&info); err != nil {
		return err
	}
	say("\n== What %s counted (GET http://%s/info)", n.Name, n.StatsListen)
	for _, op := range []string{"read", "write"} {
		for _, level := range []string{"DC_ONE", "DC_QUORUM", "DC_SAFE_QUORUM"} {
			r := info.Requests[op][level]
			if r.Count > 0 {
				say("   %-5s %-15s %3d requests, %d errors, p99 %d µs", op, level, r.Count, r.Errors, r.Latency["p99"])
			}
		}
	}
	say("   quorum failures %d, timeouts %d, asynchronous replication failures %d", info.QuorumFailures, info.Timeouts, info.AsyncFailures)
	return nil
}

// demoConn is a one-request-at-a-time RESP connection that renders replies
// as redis-cli would.
type demoConn struct {
	c  net.Conn
	rd *resp.Reader
}

func dialDemo(addr string) (*demoConn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &demoConn{c: c, rd: resp.NewReader(c, resp.DefaultLimits)}, nil
}

func (d *demoConn) Do(args ...string) string {
	d.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := d.c.Write(resp.AppendCommandStrings(nil, args...)); err != nil {
		return "(connection error) " + err.Error()
	}
	v, err := d.rd.ReadValue()
	if err != nil {
		return "(connection error) " + err.Error()
	}
	return v.String()
}

func (d *demoConn) Close() error { return d.c.Close() }
