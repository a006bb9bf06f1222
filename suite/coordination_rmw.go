package suite

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/ctxtime"
	"github.com/troop-lab/troop/resp"
)

// The read-modify-write workloads beside the lock, id and list ones:
// counter, grow-only set, queue and WATCH compare-and-set, for
// check.CheckCounter, check.CheckSet, check.CheckQueue and check.CheckCAS.

// RunCounter runs INCRBY and DECRBY (every fourth change) of one key by
// small amounts through every client, each reading it (GET) as every
// cfg.ReadEvery-th operation; then the final reads (finalReads).
func RunCounter(ctx context.Context, nodes []client.Node, cfg CoordinationConfig) ([]check.Command, error) {
	key := cfg.Prefix + ":" + counterKey
	start := time.Now()
	history, err := runEach(ctx, start, nodes, cfg, func(i, seq int) (check.Command, []byte) {
		if cfg.ReadEvery > 0 && seq%cfg.ReadEvery == 0 {
			return check.Command{Key: key, Name: check.Get}, nil
		}
		n := int64(1 + (i+seq)%5)
		if seq%4 == 0 {
			return check.Command{Key: key, Name: check.DecrBy, Delta: -n}, strconv.AppendInt(nil, n, 10)
		}
		return check.Command{Key: key, Name: check.IncrBy, Delta: n}, strconv.AppendInt(nil, n, 10)
	}, func(op *check.Command, v resp.Value) (err error) {
		if op.Name == check.Get {
			op.Number, err = number(v)
			return err
		}
		if v.Type != resp.Integer {
			return fmt.Errorf("%s %s: unexpected reply %s", op.Name, key, v)
		}
		op.Number = v.Int
		return nil
	})
	if err != nil {
		return nil, err
	}
	finals, err := finalReads(ctx, start, nodes, cfg.Redis, cfg, [][]byte{[]byte("GET"), []byte(key)}, func(v resp.Value) (check.Command, error) {
		n, err := number(v)
		return check.Command{Key: key, Name: check.Get, Number: n, Final: true}, err
	})
	return append(history, finals...), err
}

// number is a GET's reply as a number; a missing key is 0.
func number(v resp.Value) (int64, error) {
	if v.IsNull {
		return 0, nil
	}
	return strconv.ParseInt(string(v.Str), 10, 64)
}

// RunSet runs SADD of unique elements (client.seq) of one key through every
// client, each reading the whole set (SMEMBERS) as every cfg.ReadEvery-th
// operation; then the final reads (finalReads).
func RunSet(ctx context.Context, nodes []client.Node, cfg CoordinationConfig) ([]check.Command, error) {
	key := cfg.Prefix + ":" + setKey
	return runGrowing(ctx, nodes, cfg, key, check.SAdd, check.SMembers, [][]byte{[]byte("SMEMBERS"), []byte(key)}, cfg.Redis)
}

// RunQueue runs RPUSH of unique elements (client.seq) of one key and LPOP
// (every cfg.ReadEvery-th operation, every second when 0) through every
// client; then, once the workload's connections are closed, drains the
// queue (drain).
func RunQueue(ctx context.Context, nodes []client.Node, cfg CoordinationConfig) ([]check.Command, error) {
	key := cfg.Prefix + ":" + queueKey
	every := cfg.ReadEvery
	if every == 0 {
		every = 2
	}
	start := time.Now()
	history, err := runEach(ctx, start, nodes, cfg, func(i, seq int) (check.Command, []byte) {
		if seq%every == 0 {
			return check.Command{Key: key, Name: check.LPop}, nil
		}
		e := strconv.Itoa(i) + "." + strconv.Itoa(seq)
		return check.Command{Key: key, Name: check.RPush, Arg: e}, []byte(e)
	}, popped(key))
	if err != nil {
		return nil, err
	}
	drained, err := drain(ctx, start, nodes, cfg, key)
	return append(history, drained...), err
}

// popped reads an RPUSH's or an LPOP's reply into op.
func popped(key string) func(op *check.Command, v resp.Value) error {
	return func(op *check.Command, v resp.Value) error {
		switch {
		case op.Name == check.RPush && v.Type == resp.Integer:
		case op.Name == check.LPop && (v.IsNull || v.Type == resp.BulkString):
			op.Arg = string(v.Str)
		default:
			return fmt.Errorf("%s %s: unexpected reply %s", op.Name, key, v)
		}
		return nil
	}
}

// maxDrain bounds the final LPOPs of the queue workload.
const maxDrain = 100_000

// drain LPOPs key through each node of the first datacenter in turn until
// every one of them has answered nil in a row, within cfg.Settle, and
// returns those LPOPs as final.
func drain(ctx context.Context, start time.Time, nodes []client.Node, cfg CoordinationConfig, key string) ([]check.Command, error) {
	var cs []*plainTo
	defer func() { closeAll(cs) }()
	for _, n := range firstDC(nodes) {
		c, err := dialNode(n, cfg)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	fill := popped(key)
	var out []check.Command
	deadline := time.Now().Add(cfg.Settle)
	for i, empty := 0, 0; empty < len(cs) && i < maxDrain && time.Now().Before(deadline); i++ {
		c := cs[i%len(cs)]
		op := check.Command{Client: cfg.Clients + i%len(cs), Node: c.node, Key: key, Name: check.LPop, Final: true, Call: int64(time.Since(start))}
		v, err := reply(c.Do(ctx, []byte("LPOP"), []byte(key)))
		op.Return = int64(time.Since(start))
		if err == nil {
			err = fill(&op, v)
		}
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			op.Failed, op.Error, empty = true, err.Error(), 0
		case op.Arg == "":
			empty++
		default:
			empty = 0
		}
		out = append(out, op)
	}
	return out, nil
}

// RunCAS runs compare-and-set increments of one key through every client,
// as redis-py's transaction() helper does: WATCH key, GET key, MULTI, SET
// key read+1, EXEC; an EXEC that answers nil (the key changed) is an
// attempt that did not commit, and the client tries again. An attempt
// that fails before its EXEC is sent changed nothing and is left out.
// Then a final GET through each node (finalReads).
func RunCAS(ctx context.Context, nodes []client.Node, cfg CoordinationConfig) ([]check.Command, error) {
	key := cfg.Prefix + ":" + casKey
	clients, wctx, stop, err := coordinationClients(ctx, nodes, cfg)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	histories := make([][]check.Command, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 1; (cfg.Ops == 0 || seq <= cfg.Ops) && wctx.Err() == nil; seq++ {
				op, sent := casAttempt(wctx, c, key, start)
				op.Client, op.Node = i, c.node
				if sent {
					histories[i] = append(histories[i], op)
				}
				if op.Failed || !sent {
					ctxtime.Sleep(wctx, errorPause)
				}
			}
		}()
	}
	wg.Wait()
	stop()
	history := slices.Concat(histories...)
	finals, err := finalReads(ctx, start, nodes, nil, cfg, [][]byte{[]byte("GET"), []byte(key)}, func(v resp.Value) (check.Command, error) {
		n, err := number(v)
		return check.Command{Key: key, Name: check.Get, Number: n, Final: true}, err
	})
	return append(history, finals...), err
}

// casAttempt is one WATCH/GET/MULTI/SET/EXEC on c, and whether its EXEC
// was sent. An attempt that fails before leaves the connection with no
// transaction and no watch.
func casAttempt(ctx context.Context, c *plainTo, key string, start time.Time) (op check.Command, sent bool) {
	op, err := casRead(ctx, c, key, start)
	if err != nil {
		return op, false
	}
	return casCommit(ctx, c, op, start)
}

// casRead is an attempt's WATCH and GET of key on c, or why they did not
// both answer; then the connection is left with no watch.
func casRead(ctx context.Context, c *plainTo, key string, start time.Time) (op check.Command, err error) {
	op = check.Command{Key: key, Name: check.CAS, Call: int64(time.Since(start))}
	k := []byte(key)
	if _, err := reply(c.Do(ctx, []byte("WATCH"), k)); err != nil {
		casAbort(ctx, c)
		return op, fmt.Errorf("WATCH: %w", err)
	}
	v, err := reply(c.Do(ctx, []byte("GET"), k))
	if err == nil {
		op.Number, err = number(v)
	}
	if err != nil {
		casAbort(ctx, c)
		return op, fmt.Errorf("GET: %w", err)
	}
	return op, nil
}

// casCommit is an attempt's MULTI, SET of what it read plus one, and EXEC
// on c, after casRead; and whether its EXEC was sent.
func casCommit(ctx context.Context, c *plainTo, op check.Command, start time.Time) (check.Command, bool) {
	for _, args := range [][][]byte{{[]byte("MULTI")}, {[]byte("SET"), []byte(op.Key), strconv.AppendInt(nil, op.Number+1, 10)}} {
		if _, err := reply(c.Do(ctx, args...)); err != nil {
			casAbort(ctx, c)
			return op, false
		}
	}
	v, err := reply(c.Do(ctx, []byte("EXEC")))
	op.Return = int64(time.Since(start))
	switch {
	case err != nil:
		op.Failed, op.Error = true, err.Error()
	case v.IsNull:
	case v.Type == resp.Array && len(v.Elems) == 1 && string(v.Elems[0].Str) == "OK":
		op.Acquired = true
	default:
		op.Failed, op.Error = true, fmt.Sprintf("EXEC: unexpected reply %s", v)
	}
	return op, true
}

// casAbort leaves c with no transaction and no watch.
func casAbort(ctx context.Context, c *plainTo) {
	c.Do(ctx, []byte("DISCARD"))
	c.Do(ctx, []byte("UNWATCH"))
}
