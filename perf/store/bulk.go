package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// bulkRun is one mass insertion: redis-cli --pipe of cfg.Bulk new SETs on
// one connection, through one target.
type bulkRun struct {
	Round   int     `json:"round"`
	Target  string  `json:"target"` // "nutcracker" or "troop-node"
	Seconds float64 `json:"seconds"`
	// Pipe is redis-cli's last line: its count of errors and replies.
	Pipe string `json:"redis_cli"`
	// Held is how many keys the redis-server behind nutcracker held at the
	// end (nutcracker's run is timed until it holds them all).
	Held int64 `json:"held,omitempty"`
}

// bulkExperiment is Redis's mass insertion, `redis-cli --pipe`, of
// cfg.Bulk new SETs: through nutcracker to one redis-server and through
// one node of a three-rack cluster at DC_ONE, interleaved round by round.
// The redis-servers are emptied before each run, so every run writes new
// keys.
//
// nutcracker does not support the ECHO that redis-cli --pipe sends last to
// learn that every reply has arrived: it closes the connection instead,
// and redis-cli may end before the last replies. So nutcracker's run is
// timed until its redis-server holds every key (polled every 10 ms, for
// at most a minute after redis-cli ends).
func bulkExperiment(ctx context.Context, cfg config, ps *procSet, bins binaries, res *result, log io.Writer) error {
	_, redisAddr, err := startRedis(ctx, ps, bins.redisServer, "bulk-redis")
	if err != nil {
		return err
	}
	_, ncAddr, err := startNutcracker(ctx, ps, bins.nutcracker, redisAddr)
	if err != nil {
		return err
	}
	cluster, err := startCluster(ctx, cfg, ps, bins.redisServer, bins.troop, "bulk_", false, consistency.DCOne)
	if err != nil {
		return err
	}
	input := filepath.Join(ps.dir, "bulk.resp")
	if err := writeBulkSets(input, cfg.Bulk, 0); err != nil {
		return err
	}
	for n := 1; n <= cfg.Rounds; n++ {
		for _, t := range []struct {
			name, addr string
			empty      []string // the redis-servers to empty first
			held       string   // the redis-server that must hold the keys, for nutcracker
		}{
			{"nutcracker", ncAddr, []string{redisAddr}, redisAddr},
			{"troop-node", cluster[0].addrs[0], cluster[0].redisAddrs, ""},
		} {
			for _, a := range t.empty {
				if _, err := redisCommand(a, time.Minute, "FLUSHALL"); err != nil {
					return fmt.Errorf("bulk: emptying %s: %w", a, err)
				}
			}
			r, err := bulkLoad(ctx, bins.redisCli, input, t.addr, t.held, cfg.Bulk)
			if err != nil {
				return fmt.Errorf("bulk through %s: %w", t.name, err)
			}
			r.Round, r.Target = n, t.name
			res.Bulk = append(res.Bulk, r)
			fmt.Fprintf(log, "bulk  round %d  %-10s  %6.1f s  %s\n", n, t.name, r.Seconds, r.Pipe)
		}
	}
	return ctx.Err()
}

// writeBulkSets writes n SETs of new keys, bulk:0 to bulk:n-1, as RESP;
// key i's value is value:i, padded with x to valueBytes when that is longer.
func writeBulkSets(path string, n, valueBytes int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var buf []byte
	for i := range n {
		k := "bulk:" + strconv.Itoa(i)
		v := "value:" + strconv.Itoa(i)
		if len(v) < valueBytes {
			v += strings.Repeat("x", valueBytes-len(v))
		}
		buf = resp.AppendCommandStrings(buf[:0], "SET", k, v)
		w.Write(buf)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// bulkLoad pipes input into redis-cli --pipe against addr and times it;
// with held set, until that redis-server holds want keys.
func bulkLoad(ctx context.Context, redisCli, input, addr, held string, want int) (bulkRun, error) {
	in, err := os.Open(input)
	if err != nil {
		return bulkRun{}, err
	}
	defer in.Close()
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.CommandContext(ctx, redisCli, "-h", host, "-p", port, "--pipe")
	var out bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, &out, &out
	start := time.Now()
	err = cmd.Run() // redis-cli fails when the connection closes early; its output says how far it got
	if err != nil && held == "" {
		return bulkRun{}, fmt.Errorf("redis-cli --pipe: %v: %s", err, strings.TrimSpace(out.String()))
	}
	var r bulkRun
	if held != "" {
		for deadline := time.Now().Add(time.Minute); ; {
			v, err := redisCommand(held, time.Minute, "DBSIZE")
			if err != nil {
				return r, err
			}
			if r.Held = v.Int; r.Held >= int64(want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	r.Seconds = time.Since(start).Seconds()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	r.Pipe = lines[len(lines)-1]
	return r, ctx.Err()
}

// bulkCheck holds the bulk load to its target: through the node within 3x
// nutcracker's time, the median of the per-round ratios, and redis-cli
// counting no error through the node. (Through nutcracker it cannot count:
// see bulkExperiment.)
func bulkCheck(runs []bulkRun) []check {
	var ratios []float64
	errorFree := true
	for _, r := range runs {
		if r.Target != "troop-node" {
			continue
		}
		errorFree = errorFree && strings.HasPrefix(r.Pipe, "errors: 0,")
		for _, nc := range runs {
			if nc.Round == r.Round && nc.Target == "nutcracker" && nc.Seconds > 0 {
				ratios = append(ratios, r.Seconds/nc.Seconds)
			}
		}
	}
	if len(ratios) == 0 {
		return nil
	}
	m := median(ratios)
	text := fmt.Sprintf("median %.2f of nutcracker's time over %d rounds (%s)", m, len(ratios), joinFloats(ratios))
	if !errorFree {
		text += "; redis-cli counted errors through the node (see the JSON)"
	}
	return []check{{Name: "bulk load through a node within 3x nutcracker's time, no error", Kind: "target", Measured: m, Limit: 3,
		Pass: m <= 3 && errorFree, Text: text}}
}

func joinFloats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}
