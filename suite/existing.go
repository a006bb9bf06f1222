package suite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/client"
)

// The kinds of cluster a run meets.
const (
	kindLab      = "lab"      // a lab troop started, or one running under troop lab up
	kindTroop    = "troop"    // troop nodes troop did not start (--cluster)
	kindDynomite = "Dynomite" // Dynomite nodes (--cluster)
	kindRESP     = "resp"     // any Redis-protocol endpoints (--target)
)

// OwnLevel is the level of a cluster whose client cannot choose one
// (plain endpoints, and Dynomite, whose levels are a setting of its own)
// when nothing says which it is: neither its admin API nor --level.
const OwnLevel = "its own level"

// openExisting opens the cluster troop did not start that cfg names, and
// checks that every node answers PING; nil when cfg names none.
func openExisting(ctx context.Context, cfg Config) (*cluster, error) {
	var c *cluster
	switch {
	case len(cfg.Target) > 0:
		c = &cluster{kind: kindRESP, source: strings.Join(cfg.Target, ",")}
		for _, a := range cfg.Target {
			c.nodes = append(c.nodes, client.Node{Name: a, Addr: a})
		}
	case cfg.Cluster != "":
		nodes, err := client.FromCluster(ctx, cfg.Cluster)
		if err != nil {
			return nil, err
		}
		client.SetDynomitePort(nodes, cfg.ClientPort)
		c = &cluster{kind: kindTroop, source: cfg.Cluster, nodes: nodes}
		if nodes[0].Dynomite {
			c.kind = kindDynomite
		}
	default:
		return nil, nil
	}
	var err error
	if c.dial, err = cfg.Access.Dial(); err != nil {
		return nil, err
	}
	for _, n := range c.nodes {
		if err := c.ping(ctx, n.Addr); err != nil {
			return nil, fmt.Errorf("%s: %w", n.Addr, err)
		}
	}
	admin := ""
	if cfg.Cluster != "" && !client.IsFile(cfg.Cluster) {
		admin = cfg.Cluster // the admin address the topology came from
	}
	if err := c.readStore(ctx, cfg, admin); err != nil {
		return nil, err
	}
	if cfg.Chaos != nil {
		if err := c.attachChaos(ctx, cfg.Chaos); err != nil {
			return nil, fmt.Errorf("--chaos-config %s, group %s: %w", cfg.Chaos.File, cfg.Chaos.Group, err)
		}
	}
	return c, nil
}

// ping sends PING to the node at addr, with the cluster's credentials.
func (c *cluster) ping(ctx context.Context, addr string) error {
	p, err := client.NewPlain([]string{addr}, client.PlainOptions{Timeout: 5 * time.Second, Dial: c.dial})
	if err != nil {
		return err
	}
	defer p.Close()
	_, err = p.Do(ctx, []byte("PING"))
	return err
}

// own says whether the cluster is someone else's: the run deletes what it
// wrote there.
func (c *cluster) own() bool {
	return c.kind == kindTroop || c.kind == kindDynomite || c.kind == kindRESP
}

// addrs are the nodes' client addresses.
func (c *cluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr
	}
	return out
}

// levels are the levels the baseline and the consistency phase run at:
// the configured ones on troop nodes, which a client sets per connection;
// elsewhere the cluster's own.
func (c *cluster) levels(cfg Config) []string {
	if c.troopNodes() {
		return cfg.Levels
	}
	return []string{c.ownLevel()}
}

// benchConfig is benchConfig for this cluster: a client of nodes that are
// not troop's sets no level (the level is only the phase's name), and
// reads from Dynomite, which may run at DC_ONE, may be a write behind, as
// troop's at DC_ONE.
func (c *cluster) benchConfig(cfg Config, level string, d time.Duration, rate float64, contended bool) bench.Config {
	bc := benchConfig(cfg, level, d, rate, contended)
	if !c.troopNodes() {
		bc.Consistency = ""
	}
	if c.store.Name == storeDynomite {
		bc.Staleness = 1
	}
	return bc
}

// registers is the register workload of the consistency phase at level,
// and the nodes its clients go through. Only troop nodes take the delays
// between nodes (TROOP FIT) and a clock skew (their admin API); plain
// endpoints may be shards of different data, so every client goes through
// the first.
func (c *cluster) registers(cfg Config, level string, i int) (RegisterConfig, []client.Node) {
	rc := cfg.Register
	rc.Level, rc.Seed = level, cfg.Seed+uint64(i)
	rc.Prefix = fmt.Sprintf("troop:register:%d:%s", time.Now().UnixNano(), strings.ReplaceAll(level, " ", "-"))
	return c.registerNodes(rc)
}

// registerNodes is rc as this cluster takes it (see registers), with its
// credentials, and the nodes its clients go through.
func (c *cluster) registerNodes(rc RegisterConfig) (RegisterConfig, []client.Node) {
	rc.Dial = c.dial
	nodes := c.nodes
	switch {
	case !c.troopNodes():
		rc.Level, rc.Delay, rc.Skew = "", 0, 0
		if c.kind == kindRESP {
			nodes = nodes[:1]
		}
	case nodes[0].Admin == "":
		rc.Skew = 0 // no admin address to set the clock through
	}
	return rc, nodes
}

// writtenKeys is what one benchmark run wrote, to delete later.
type writtenKeys struct {
	cfg   bench.Config
	model *bench.Model
}

// cleanup deletes what the run wrote on a cluster troop did not start:
// every key its benchmark runs wrote, and the registers' keys, and says so.
func (c *cluster) cleanup(ctx context.Context) string {
	t, err := c.target(OwnLevel, requestTimeout)
	if err != nil {
		return fmt.Sprintf("the keys the run wrote could not be deleted: %v", err)
	}
	defer t.Close()
	var keys, deleted int64
	var errs []error
	for _, w := range c.written {
		r, err := bench.Cleanup(ctx, t, w.model, w.cfg)
		keys, deleted = keys+r.Keys, deleted+r.Deleted
		if err == nil && r.Errors > 0 {
			err = errors.New(r.Sample)
		}
		errs = append(errs, err)
	}
	for _, k := range c.registerKeys {
		done := make(chan struct{})
		t.Send([][]byte{[]byte("DEL"), []byte(k)}, func(raw []byte, err error) {
			if err == nil && len(raw) > 1 && raw[0] == ':' && raw[1] != '0' {
				deleted++
			}
			close(done)
		})
		t.Flush()
		<-done
		keys++
	}
	msg := fmt.Sprintf("deleted the keys the run wrote on the cluster: %d of %d were still there", deleted, keys)
	if err := errors.Join(errs...); err != nil {
		msg += fmt.Sprintf(" (some could not be deleted: %v)", err)
	}
	return msg
}
