package suite

import (
	"context"
	"errors"
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

// The coordination workloads run the commands Redis users build locks, id
// generators and logs on, with clients through every node of the first
// datacenter and no think time, and return histories for check.CheckLocks,
// check.CheckIDs and check.CheckList; coordination_rmw.go has the counter,
// set, queue and WATCH compare-and-set workloads.

// CoordinationConfig is one run of the lock, id or list workload.
type CoordinationConfig struct {
	Clients int // each on its own connection, to the nodes of the first datacenter in turn
	// Ops bounds each client's operations: its acquires (one a round) in
	// the lock workload, its INCRs or RPUSHes in the others. 0: no bound
	// but the duration.
	Ops      int
	Duration time.Duration // at most
	// End, if set, also ends the workload (its final reads go on): the
	// nemesis ends a round's workloads together.
	End     context.Context
	Level   string // read and write level; troop nodes only (Dynomite's is its own setting)
	Dial    client.Dial
	Timeout time.Duration // per request
	// Scopes, if set, are TROOP FIT scopes: client i sets Scopes[i] ("" for
	// none) on its connection before its first operation and keeps it for
	// the run, so that a hold in it holds those messages back until the
	// workload's end (docs/store.md, "Failure injection and lineage").
	Scopes []string
	// ReadEvery: in the list, counter and set workloads, every ReadEvery-th
	// operation of a client reads the whole value (in the queue workload,
	// every ReadEvery-th is an LPOP); 0 for no reads but the final ones.
	ReadEvery int
	// Redis are the replicas' redis-servers, which the final reads of the
	// list, counter and set workloads also read directly.
	Redis []string
	// Settle bounds how long the final reads wait for the replicas to hold
	// the same thing.
	Settle time.Duration
	Prefix string // of the keys; a fresh one per run keeps the keys missing at the start
}

// The workloads' keys, each under its run's prefix (Prefix + ":" + key):
// the lock workload's is its first round's, the others' their only one.
const (
	lockKey    = "0"
	idsKey     = "id"
	listKey    = "list"
	counterKey = "counter"
	setKey     = "set"
	queueKey   = "queue"
	casKey     = "cas"
)

// lockHold is how long an acquired lock would be held (SET ... PX): longer
// than any run, so no lock expires in the middle of its round.
const lockHold = 10 * time.Minute

// RunLocks runs rounds of the clients racing SET prefix:round client NX PX
// on a fresh key, all at once, until each client has raced cfg.Ops times
// or the duration is over.
func RunLocks(ctx context.Context, nodes []client.Node, cfg CoordinationConfig) ([]check.Command, error) {
	clients, ctx, stop, err := coordinationClients(ctx, nodes, cfg)
	if err != nil {
		return nil, err
	}
	defer stop()
	start := time.Now()
	var history []check.Command
	hist := make([]check.Command, len(clients))
	for round := 0; (cfg.Ops == 0 || round < cfg.Ops) && ctx.Err() == nil; round++ {
		key := cfg.Prefix + ":" + strconv.Itoa(round)
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				op := check.Command{Client: i, Node: c.node, Key: key, Name: check.SetNX, Arg: "client" + strconv.Itoa(i), Call: int64(time.Since(start))}
				raw, err := c.Do(ctx, []byte("SET"), []byte(key), []byte(op.Arg), []byte("NX"), []byte("PX"), strconv.AppendInt(nil, lockHold.Milliseconds(), 10))
				op.Return = int64(time.Since(start))
				switch v, err := reply(raw, err); {
				case err != nil:
					op.Failed, op.Error = true, err.Error()
				case v.IsNull:
				case string(v.Str) == "OK":
					op.Acquired = true
				default:
					op.Failed, op.Error = true, fmt.Sprintf("unexpected reply %s", v)
				}
				hist[i] = op
			}()
		}
		wg.Wait()
		history = append(history, hist...)
	}
	return history, nil
}

// RunIDs runs INCR of one key through every client, each as fast as it
// gets answers, then, once the workload's connections are closed (and what
// they held let go), a final GET through each node of the first
// datacenter (finalReads).
func RunIDs(ctx context.Context, nodes []client.Node, cfg CoordinationConfig) ([]check.Command, error) {
	key := cfg.Prefix + ":" + idsKey
	start := time.Now()
	history, err := runEach(ctx, start, nodes, cfg, func(i, seq int) (check.Command, []byte) {
		return check.Command{Key: key, Name: check.Incr}, nil
	}, func(op *check.Command, v resp.Value) error {
		if v.Type != resp.Integer {
			return fmt.Errorf("INCR %s: unexpected reply %s", key, v)
		}
		op.Number = v.Int
		return nil
	})
	if err != nil {
		return nil, err
	}
	finals, err := finalReads(ctx, start, nodes, nil, cfg, [][]byte{[]byte("GET"), []byte(key)}, func(v resp.Value) (check.Command, error) {
		op := check.Command{Key: key, Name: check.Get, Final: true}
		if v.IsNull {
			return op, nil
		}
		n, err := strconv.ParseInt(string(v.Str), 10, 64)
		op.Number = n
		return op, err
	})
	return append(history, finals...), err
}

// RunList runs RPUSH of unique elements (client.seq) of one key through
// every client, each client reading the whole list (LRANGE) as every
// cfg.ReadEvery-th operation; then, once the workload's connections are
// closed, a final LRANGE directly on each of cfg.Redis and through each
// node of the first datacenter (finalReads).
func RunList(ctx context.Context, nodes []client.Node, cfg CoordinationConfig) ([]check.Command, error) {
	key := cfg.Prefix + ":" + listKey
	return runGrowing(ctx, nodes, cfg, key, check.RPush, check.LRange, lrangeAll(key), cfg.Redis)
}

// runGrowing runs add (RPUSH, SADD) of unique elements (client.seq) of key
// through every client, each reading the whole collection (read, LRANGE or
// SMEMBERS, sent as readAll) as every cfg.ReadEvery-th operation; then the
// final reads (finalReads) through each node and directly on each of redis.
func runGrowing(ctx context.Context, nodes []client.Node, cfg CoordinationConfig, key, add, read string, readAll [][]byte, redis []string) ([]check.Command, error) {
	start := time.Now()
	history, err := runEach(ctx, start, nodes, cfg, func(i, seq int) (check.Command, []byte) {
		if cfg.ReadEvery > 0 && seq%cfg.ReadEvery == 0 {
			return check.Command{Key: key, Name: read}, nil
		}
		e := strconv.Itoa(i) + "." + strconv.Itoa(seq)
		return check.Command{Key: key, Name: add, Arg: e}, []byte(e)
	}, func(op *check.Command, v resp.Value) error {
		if op.Name == add {
			if v.Type != resp.Integer {
				return fmt.Errorf("%s %s: unexpected reply %s", add, key, v)
			}
			return nil
		}
		op.List = elements(v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	finals, err := finalReads(ctx, start, nodes, redis, cfg, readAll, func(v resp.Value) (check.Command, error) {
		return check.Command{Key: key, Name: read, List: elements(v), Final: true}, nil
	})
	return append(history, finals...), err
}

// lrangeAll reads the whole list key.
func lrangeAll(key string) [][]byte {
	return [][]byte{[]byte("LRANGE"), []byte(key), []byte("0"), []byte("-1")}
}

// elements are the strings of an array reply.
func elements(v resp.Value) []string {
	out := make([]string, len(v.Elems))
	for i, e := range v.Elems {
		out[i] = string(e.Str)
	}
	return out
}

// reads says whether command name changes nothing.
func reads(name string) bool {
	return name == check.LRange || name == check.Get || name == check.SMembers
}

// runEach runs the clients at once, timing operations from start, each doing next's command (with its
// argument, if any, after the key) one after another, and fill to read the
// reply into the operation, until the client has done cfg.Ops or the
// duration is over. An error reply or a timeout leaves its operation of
// unknown outcome.
func runEach(ctx context.Context, start time.Time, nodes []client.Node, cfg CoordinationConfig,
	next func(client, seq int) (check.Command, []byte), fill func(*check.Command, resp.Value) error) ([]check.Command, error) {
	clients, ctx, stop, err := coordinationClients(ctx, nodes, cfg)
	if err != nil {
		return nil, err
	}
	defer stop()
	histories := make([][]check.Command, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 1; (cfg.Ops == 0 || seq <= cfg.Ops) && ctx.Err() == nil; seq++ {
				op, arg := next(i, seq)
				op.Client, op.Node = i, c.node
				args := [][]byte{[]byte(op.Name), []byte(op.Key)}
				if op.Name == check.LRange {
					args = lrangeAll(op.Key)
				}
				if arg != nil {
					args = append(args, arg)
				}
				op.Call = int64(time.Since(start))
				v, err := reply(c.Do(ctx, args...))
				op.Return = int64(time.Since(start))
				if err == nil {
					err = fill(&op, v)
				}
				if err != nil {
					if reads(op.Name) {
						continue // a read that got no answer said nothing
					}
					op.Failed, op.Error = true, err.Error()
					ctxtime.Sleep(ctx, errorPause)
				}
				histories[i] = append(histories[i], op)
			}
		}()
	}
	wg.Wait()
	return slices.Concat(histories...), nil
}

// finalReads waits until the answers to cmd agree in size (the same
// length of list, the same number), on each redis-server of redis directly
// when there are any (reading a replica directly changes nothing, where a
// quorum read may write back), else through each node of the first
// datacenter, or until cfg.Settle is over. It then reads cmd on each
// redis-server and through each node at the level, timed from start, each
// answer made into a command by parse.
func finalReads(ctx context.Context, start time.Time, nodes []client.Node, redis []string, cfg CoordinationConfig, cmd [][]byte,
	parse func(resp.Value) (check.Command, error)) ([]check.Command, error) {
	var readers []*plainTo
	defer func() { closeAll(readers) }()
	for _, addr := range redis {
		c, err := client.NewPlain([]string{addr}, client.PlainOptions{Timeout: cfg.Timeout, Dial: cfg.Dial})
		if err != nil {
			return nil, err
		}
		readers = append(readers, &plainTo{Plain: c, node: "redis " + addr})
	}
	for _, n := range firstDC(nodes) {
		c, err := dialNode(n, cfg)
		if err != nil {
			return nil, err
		}
		readers = append(readers, c)
	}
	read := func(readers []*plainTo) ([]check.Command, error) {
		out := make([]check.Command, len(readers))
		for i, c := range readers {
			call := int64(time.Since(start))
			v, err := reply(c.Do(ctx, cmd...))
			if err == nil {
				out[i], err = parse(v)
			}
			if err != nil {
				return nil, fmt.Errorf("final read through %s: %w", c.node, err)
			}
			out[i].Client, out[i].Node, out[i].Call, out[i].Return = cfg.Clients+i, c.node, call, int64(time.Since(start))
		}
		return out, nil
	}
	deadline := time.Now().Add(cfg.Settle)
	// A read that fails is tried again until the deadline: a node that
	// still holds a peer down after a fault's end answers once it heals.
	retried := func(readers []*plainTo) ([]check.Command, error) {
		for {
			out, err := read(readers)
			if err == nil || !time.Now().Before(deadline) {
				return out, err
			}
			if err := ctxtime.Sleep(ctx, settlePoll); err != nil {
				return nil, err
			}
		}
	}
	settling := readers
	if len(redis) > 0 {
		settling = readers[:len(redis)]
	}
	for time.Now().Before(deadline) {
		out, err := retried(settling)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(out, func(c check.Command) bool { return c.Number != out[0].Number || len(c.List) != len(out[0].List) }) {
			break
		}
		if err := ctxtime.Sleep(ctx, settlePoll); err != nil {
			return nil, err
		}
	}
	return retried(readers)
}

// settlePoll is how often the final reads ask again while replicas differ.
const settlePoll = 50 * time.Millisecond

// reply parses a raw reply; an error reply is an error.
func reply(raw []byte, err error) (resp.Value, error) {
	if err != nil {
		return resp.Value{}, err
	}
	v, err := resp.Parse(raw)
	if err != nil {
		return v, err
	}
	if v.IsError() {
		return v, errors.New(string(v.Str))
	}
	return v, nil
}

// plainTo is a client of one node, by name.
type plainTo struct {
	*client.Plain
	node string
}

func closeAll(cs []*plainTo) {
	for _, c := range cs {
		c.Close()
	}
}

// firstDC are the nodes of the first datacenter.
func firstDC(nodes []client.Node) []client.Node {
	var dc []client.Node
	for _, n := range nodes {
		if n.DC == nodes[0].DC {
			dc = append(dc, n)
		}
	}
	return dc
}

// dialNode connects to n at cfg.Level, unless n is Dynomite, whose level
// is its own setting and which takes no TROOP commands.
func dialNode(n client.Node, cfg CoordinationConfig) (*plainTo, error) {
	level := cfg.Level
	if n.Dynomite {
		level = ""
	}
	c, err := client.NewPlain([]string{n.Addr}, client.PlainOptions{Timeout: cfg.Timeout, ReadLevel: level, WriteLevel: level, Dial: cfg.Dial})
	if err != nil {
		return nil, err
	}
	return &plainTo{Plain: c, node: n.Name}, nil
}

// coordinationClients connects client i to node i (mod their number) of the
// first datacenter, with its failure scope set, and returns them with the
// workload's context, which ends after cfg.Duration, and stop, which ends
// it and closes the clients (letting go of what their scopes held).
func coordinationClients(ctx context.Context, nodes []client.Node, cfg CoordinationConfig) (_ []*plainTo, _ context.Context, stop func(), _ error) {
	if cfg.Clients < 1 || cfg.Ops < 0 || cfg.ReadEvery < 0 || cfg.Duration <= 0 || cfg.Timeout <= 0 || cfg.Settle < 0 || len(cfg.Scopes) > cfg.Clients {
		return nil, nil, nil, fmt.Errorf("coordination workload: clients, duration and timeout must be positive, ops, read_every and settle not negative, and at most one scope a client: %+v", cfg)
	}
	if len(nodes) == 0 {
		return nil, nil, nil, errors.New("coordination workload: the cluster has no nodes")
	}
	dc := firstDC(nodes)
	var clients []*plainTo
	for i := range cfg.Clients {
		c, err := dialNode(dc[i%len(dc)], cfg)
		if err != nil {
			closeAll(clients)
			return nil, nil, nil, err
		}
		clients = append(clients, c)
		if i >= len(cfg.Scopes) || cfg.Scopes[i] == "" {
			continue
		}
		if raw, err := c.Do(ctx, []byte("TROOP"), []byte("FIT"), []byte(cfg.Scopes[i])); err != nil || string(raw) != "+OK\r\n" {
			closeAll(clients)
			return nil, nil, nil, fmt.Errorf("coordination workload: TROOP FIT %s through %s: %q %v", cfg.Scopes[i], c.node, raw, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	unlink := func() bool { return false }
	if cfg.End != nil {
		unlink = context.AfterFunc(cfg.End, cancel)
	}
	return clients, ctx, func() { unlink(); cancel(); closeAll(clients) }, nil
}
