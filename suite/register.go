package suite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troop-lab/troop/chaos/fault"
	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/ctxtime"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// RegisterConfig is one run of the register workload of the consistency
// phase: clients read and write a few keys through every node of the first
// datacenter, each sending its next request as soon as it has the answer to
// the last (no think time), so that writes through different coordinators
// meet within a millisecond; check.CheckRegisters then judges every key's
// history.
type RegisterConfig struct {
	Keys    int `json:"keys" yaml:"keys"`       // registers, each its own key
	Clients int `json:"clients" yaml:"clients"` // each on its own connection, to the nodes of the first datacenter in turn
	Ops     int `json:"ops" yaml:"ops"`         // per client, at most; 0 for no bound but the duration
	// OpsPerKey bounds the operations on one set of Keys keys: past it the
	// clients move on to fresh keys, as Jepsen's independent keys do, so
	// that each key's history stays small enough for porcupine to decide
	// (a write of unknown outcome is open to the end of its key's history).
	// 0: no bound.
	OpsPerKey int           `json:"ops_per_key" yaml:"ops_per_key"`
	Duration  time.Duration `json:"duration" yaml:"duration"` // at most
	Level     string        `json:"level" yaml:"-"`           // read and write consistency level
	Dial      client.Dial   `json:"-" yaml:"-"`               // credentials and TLS of a cluster that asks for them
	Writes    float64       `json:"writes" yaml:"writes"`     // share of writes, 0..1
	Timeout   time.Duration `json:"timeout" yaml:"timeout"`   // per request
	// Delay, if set, slows some requests between nodes, as a slow network
	// would (request-scoped failure injection, TROOP FIT): before each
	// operation a client draws one of these ways, and its coordinator's
	// calls to other nodes wait that way. Each of them leaves a write in
	// flight visible on some replicas and not on others, for longer than
	// on a quiet loopback:
	//   - none: no delay;
	//   - quorum first: the calls to enough nodes for a quorum go at once,
	//     those to the rest wait Delay (a write is acknowledged while some
	//     replicas have not seen it);
	//   - alone first: every call waits Delay (for that long, only the
	//     coordinator's own replica holds the write);
	//   - one peer first, one way per peer: the call to that peer goes at
	//     once, the rest, the coordinator's own redis-server among them,
	//     wait Delay (for that long, only that peer holds a write it
	//     stamped).
	Delay time.Duration `json:"delay" yaml:"delay"`
	// Skew, if set, sets the clock of the first node this far ahead while
	// the workload runs (POST /clock/skew on its admin address), as clocks
	// of different machines disagree: a store that orders writes by its
	// coordinators' clocks alone then orders some of them against real time.
	Skew   time.Duration `json:"skew" yaml:"skew"`
	Seed   uint64        `json:"seed" yaml:"-"`
	Prefix string        `json:"prefix" yaml:"-"` // of the keys; a fresh one per run keeps the initial state empty
}

// DefaultRegisterConfig is a contended workload: 6 clients, two through each
// node of a three-rack lab, on one key for 20 s, with delays of 5 ms
// between nodes and one clock 20 ms ahead.
func DefaultRegisterConfig() RegisterConfig {
	return RegisterConfig{Keys: 1, Clients: 6, OpsPerKey: 1000, Duration: 20 * time.Second, Level: "DC_QUORUM",
		Writes: 0.5, Timeout: time.Second, Delay: 5 * time.Millisecond, Skew: 20 * time.Millisecond,
		Seed: 1, Prefix: "troop:register"}
}

// RunRegisters runs the workload against the cluster and returns its
// history. Client i talks to node i (mod the number of nodes) of the first
// datacenter over one connection of its own, so every node coordinates;
// each client waits for every answer before its next request, so a client's
// operations never overlap. Values are unique per write: client*1e6+seq.
func RunRegisters(ctx context.Context, nodes []client.Node, cfg RegisterConfig) (history []check.Op, runErr error) {
	if cfg.Keys < 1 || cfg.Clients < 1 || cfg.Ops < 0 || cfg.OpsPerKey < 0 || cfg.Duration <= 0 || cfg.Writes < 0 || cfg.Writes > 1 {
		return nil, fmt.Errorf("register workload: keys, clients and duration must be positive, ops and ops_per_key not negative and writes within 0..1: %+v", cfg)
	}
	if len(nodes) == 0 {
		return nil, errors.New("register workload: the cluster has no nodes")
	}
	var coordinators []client.Node
	for _, n := range nodes {
		if n.DC == nodes[0].DC {
			coordinators = append(coordinators, n)
		}
	}
	if cfg.Skew != 0 {
		skewed := fault.Node{ID: coordinators[0].Name, Admin: coordinators[0].Admin}
		if err := fault.SetSkew(ctx, skewed, cfg.Skew, 0); err != nil {
			return nil, fmt.Errorf("register workload: %w", err)
		}
		defer func() {
			// The run's own context may be over; setting the clock right
			// gets a few seconds of its own.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := fault.SetSkew(ctx, skewed, 0, 0); err != nil && runErr == nil {
				runErr = fmt.Errorf("register workload: %w", err)
			}
		}()
	}
	clients := make([]*client.Plain, cfg.Clients)
	for i := range clients {
		c, err := client.NewPlain([]string{coordinators[i%len(coordinators)].Addr}, client.PlainOptions{
			Timeout: cfg.Timeout, ReadLevel: cfg.Level, WriteLevel: cfg.Level, Dial: cfg.Dial,
		})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		clients[i] = c
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	histories := make([][]check.Op, cfg.Clients)
	var started atomic.Int64 // operations begun, over every client: the key set's generation
	var wg sync.WaitGroup
	var fitErr atomic.Pointer[error] // a TROOP FIT that failed: the run is void
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
			ways := slowWays(coordinators, i%len(coordinators), cfg.Delay)
			way := 0                  // no scope yet: no delay
			var scopeLost atomic.Bool // a TROOP FIT got no answer: send the scope again
			for seq := 1; (cfg.Ops == 0 || seq <= cfg.Ops) && ctx.Err() == nil; seq++ {
				if next := rng.IntN(len(ways)); next != way || scopeLost.Swap(false) {
					way = next
					scope := ways[way]
					c.Send([][]byte{[]byte("TROOP"), []byte("FIT"), []byte(scope)}, func(raw []byte, err error) {
						switch {
						case err != nil:
							// The connection broke (a fault): the next one
							// starts without a scope.
							scopeLost.Store(true)
						case len(raw) == 0 || raw[0] == '-':
							err = fmt.Errorf("register workload: TROOP FIT %s: %q", scope, raw)
							fitErr.CompareAndSwap(nil, &err)
						}
					})
				}
				k := rng.IntN(cfg.Keys)
				if cfg.OpsPerKey > 0 {
					k += int(started.Add(1)-1) / cfg.OpsPerKey * cfg.Keys
				}
				op := check.Op{Client: i, Key: cfg.Prefix + ":" + strconv.Itoa(k)}
				op.Write = rng.Float64() < cfg.Writes
				if op.Write {
					op.Value = i*1_000_000 + seq
				}
				op.Call = int64(time.Since(start))
				err := do(ctx, c, &op)
				op.Return = int64(time.Since(start))
				if err != nil {
					// A node that failed at once fails again at once: a
					// short pause keeps the history of a fault from
					// filling with failures.
					ctxtime.Sleep(ctx, errorPause)
				}
				switch {
				case err != nil && op.Write && notApplied(err):
					continue // it did nothing: a read of its value would be a violation
				case err != nil && op.Write:
					// Also when the run's time cut it off: it was sent, and
					// other clients may read it.
					op.Failed, op.Error = true, err.Error()
				case err != nil:
					continue // a read that got no answer said nothing
				}
				histories[i] = append(histories[i], op)
			}
		}()
	}
	wg.Wait()
	if err := fitErr.Load(); err != nil {
		return nil, *err
	}
	return slices.Concat(histories...), nil
}

// notApplied says whether err is that of a troop write that did nothing
// (it could not reach a quorum for its version query, or every replica
// refused it): the history leaves it out, where a write of unknown outcome
// stays open. An error of unknown outcome may quote a replica's refusal
// among its reasons ("PROMISED ... this write was not applied here") while
// other replicas took the write: its own "outcome unknown" decides.
func notApplied(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "not applied") && !strings.Contains(msg, "outcome unknown")
}

// errorPause is how long a client waits after an error.
const errorPause = 5 * time.Millisecond

// slowWays are the failure scopes a client of coordinators[coord] draws
// from before each operation when delay is set (RegisterConfig.Delay):
// none (RESET), alone first, quorum first, and one peer first for each
// peer. Without a delay, only none.
func slowWays(coordinators []client.Node, coord int, delay time.Duration) []string {
	if delay <= 0 || len(coordinators) < 2 {
		return []string{"RESET"}
	}
	self := coordinators[coord].Name
	var quorumFirst, aloneFirst []string
	for j := 1; j < len(coordinators); j++ {
		fault := fmt.Sprintf("%s->%s=delay:%s", self, coordinators[(coord+j)%len(coordinators)].Name, delay)
		aloneFirst = append(aloneFirst, fault)
		if j >= consistency.Quorum(len(coordinators)) { // this node and j-1 peers make a quorum
			quorumFirst = append(quorumFirst, fault)
		}
	}
	ways := []string{"RESET", strings.Join(aloneFirst, ",")}
	if len(quorumFirst) > 0 {
		ways = append(ways, strings.Join(quorumFirst, ","))
	}
	ownRedis := fmt.Sprintf("%s/redis=delay:%s", self, delay)
	for first := range aloneFirst {
		rest := []string{ownRedis}
		for j, fault := range aloneFirst {
			if j != first {
				rest = append(rest, fault)
			}
		}
		ways = append(ways, strings.Join(rest, ","))
	}
	return ways
}

// do runs one operation and fills in what a read returned.
func do(ctx context.Context, c *client.Plain, op *check.Op) error {
	if op.Write {
		raw, err := c.Do(ctx, []byte("SET"), []byte(op.Key), strconv.AppendInt(nil, int64(op.Value), 10))
		if err != nil {
			return err
		}
		if string(raw) != "+OK\r\n" {
			return fmt.Errorf("unexpected reply %q", raw)
		}
		return nil
	}
	raw, err := c.Do(ctx, []byte("GET"), []byte(op.Key))
	if err != nil {
		return err
	}
	v, err := resp.Parse(raw)
	if err != nil {
		return err
	}
	if v.IsNull {
		op.Value = check.Missing
		return nil
	}
	n, err := strconv.Atoi(string(v.Str))
	if err != nil {
		return fmt.Errorf("GET %s: not a value of this workload: %q", op.Key, v.Str)
	}
	op.Value = n
	return nil
}
