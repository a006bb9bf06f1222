package suite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/resp"
)

// RegisterConfig is one run of the register workload of the consistency
// phase: a few clients read and write a few keys, each waiting for its
// answer, so that check.CheckRegisters can judge every key's history.
type RegisterConfig struct {
	Keys     int           `json:"keys" yaml:"keys"`         // registers, each its own key
	Clients  int           `json:"clients" yaml:"clients"`   // spread over the racks of the first datacenter
	Ops      int           `json:"ops" yaml:"ops"`           // per client, at most
	Duration time.Duration `json:"duration" yaml:"duration"` // at most
	Level    string        `json:"level" yaml:"-"`           // read and write consistency level
	Writes   float64       `json:"writes" yaml:"writes"`     // share of writes, 0..1
	Timeout  time.Duration `json:"timeout" yaml:"timeout"`   // per request
	Seed     uint64        `json:"seed" yaml:"-"`
	Prefix   string        `json:"prefix" yaml:"-"` // of the keys; a fresh one per run keeps the initial state empty
}

// DefaultRegisterConfig is a small, contended workload: 6 clients on 3 keys.
func DefaultRegisterConfig() RegisterConfig {
	return RegisterConfig{Keys: 3, Clients: 6, Ops: 2000, Duration: 10 * time.Second, Level: "DC_QUORUM",
		Writes: 0.5, Timeout: time.Second, Seed: 1, Prefix: "troop:register"}
}

// RunRegisters runs the workload against the cluster and returns its history. Each
// client waits for every answer before its next request, so a client's
// operations never overlap. Values are unique per write: client*1e6+seq.
func RunRegisters(ctx context.Context, nodes []client.Node, cfg RegisterConfig) ([]check.Op, error) {
	if cfg.Keys < 1 || cfg.Clients < 1 || cfg.Ops < 1 || cfg.Duration <= 0 || cfg.Writes < 0 || cfg.Writes > 1 {
		return nil, fmt.Errorf("register workload: keys, clients, ops and duration must be positive and writes within 0..1: %+v", cfg)
	}
	if len(nodes) == 0 {
		return nil, errors.New("register workload: the cluster has no nodes")
	}
	racks := client.Racks(nodes, nodes[0].DC)
	clients := make([]*client.Cluster, cfg.Clients)
	for i := range clients {
		c, err := client.NewCluster(nodes, client.Options{
			DC: nodes[0].DC, Rack: racks[i%len(racks)], Timeout: cfg.Timeout,
			ReadLevel: cfg.Level, WriteLevel: cfg.Level,
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
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
			for seq := 1; seq <= cfg.Ops && ctx.Err() == nil; seq++ {
				op := check.Op{Client: i, Key: cfg.Prefix + ":" + strconv.Itoa(rng.IntN(cfg.Keys))}
				op.Write = rng.Float64() < cfg.Writes
				if op.Write {
					op.Value = i*1_000_000 + seq
				}
				op.Call = int64(time.Since(start))
				err := do(ctx, c, &op)
				op.Return = int64(time.Since(start))
				if ctx.Err() != nil && err != nil {
					break // the run's time is up: the cut-off op says nothing
				}
				switch {
				case err != nil && op.Write:
					op.Failed, op.Error = true, err.Error()
				case err != nil:
					continue // a read that got no answer did nothing
				}
				histories[i] = append(histories[i], op)
			}
		}()
	}
	wg.Wait()
	return slices.Concat(histories...), nil
}

// do runs one operation and fills in what a read returned.
func do(ctx context.Context, c *client.Cluster, op *check.Op) error {
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
