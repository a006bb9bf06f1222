// Package storetarget is the ldfi target of troop's store: a probe is one
// RESP command at a consistency level sent to one node of a lab or cluster,
// with the failure scope set on its connection (TROOP FIT) and its lineage
// read back (TROOP LINEAGE). docs/store.md describes both commands and the
// store's injection points.
package storetarget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/fit"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/ldfi"
	"github.com/troop-lab/troop/node"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

// Kind is the target kind in specs and scenarios.
const Kind = "store"

// Commands lists the commands a class may have.
var Commands = []string{"GET", "SET"}

// Config is one request class, "COMMAND at LEVEL" through one node, and
// where that node is: Addr, or a lab directory and a node of it.
type Config struct {
	Addr string `json:"addr,omitempty"` // the node's client address, host:port
	Lab  string `json:"lab,omitempty"`  // or: a lab directory (troop lab up --dir) ...
	Node string `json:"node,omitempty"` // ... and the node in it; default its first, dc1-rack1-1

	Command string `json:"command"` // GET or SET
	Level   string `json:"level"`   // DC_ONE, DC_QUORUM or DC_SAFE_QUORUM
	Key     string `json:"key,omitempty"`
	// WriteLevel is the level of the SET that gives a GET's key a fresh
	// value before each probe (without faults); DC_SAFE_QUORUM by default,
	// so that every replica holds it and a GET's failure sets are about
	// availability rather than DC_ONE's asynchronous replication.
	WriteLevel string `json:"write_level,omitempty"`
	// Timeout bounds one probe (its write, command and lineage).
	Timeout time.Duration `json:"timeout,omitempty"`
	// Spans, when set, is the file the node exports lineage to
	// (troop_lineage_export): each probe's command gets a W3C traceparent
	// (TROOP LINEAGE TRACEPARENT) and its lineage is read from the spans of
	// its trace, not from TROOP LINEAGE.
	Spans string `json:"spans,omitempty"`
}

// spansWait bounds the wait for a probe's spans after its answer.
const spansWait = 5 * time.Second

// DefaultTimeout bounds a probe: longer than a DC_ONE read that fails over
// through three racks each timing out after the node's default 5 s.
const DefaultTimeout = 30 * time.Second

// ParseClass reads a class as "COMMAND at LEVEL", e.g. "GET at DC_QUORUM",
// into cfg's Command and Level.
func ParseClass(class string, cfg *Config) error {
	f := strings.Fields(class)
	if len(f) != 3 || !strings.EqualFold(f[1], "at") {
		return fmt.Errorf("store class %q: want COMMAND at LEVEL, e.g. \"GET at DC_QUORUM\"", class)
	}
	cfg.Command, cfg.Level = f[0], f[2]
	return nil
}

// Target probes one request class of the store.
type Target struct {
	cfg        Config
	addr       string
	level      consistency.Level
	writeLevel consistency.Level

	mu    sync.Mutex
	conn  net.Conn
	rd    *resp.Reader
	value uint64 // the last value a probe wrote
	epoch int64  // makes values unique across targets
	spans *fit.SpanTail
}

// New checks cfg, resolves a lab's node to its address, and returns the
// target. It does not connect yet.
func New(cfg Config) (*Target, error) {
	cfg.Command = strings.ToUpper(cfg.Command)
	if !slices.Contains(Commands, cfg.Command) {
		return nil, fmt.Errorf("store target: command %q: want %s", cfg.Command, strings.Join(Commands, " or "))
	}
	level, err := consistency.ParseLevel(cfg.Level)
	if err != nil {
		return nil, fmt.Errorf("store target: %w", err)
	}
	cfg.Level = level.String()
	if cfg.WriteLevel == "" {
		cfg.WriteLevel = consistency.DCSafeQuorum.String()
	}
	writeLevel, err := consistency.ParseLevel(cfg.WriteLevel)
	if err != nil {
		return nil, fmt.Errorf("store target: write level: %w", err)
	}
	cfg.WriteLevel = writeLevel.String()
	if cfg.Key == "" {
		cfg.Key = "troop:ldfi:" + strings.ToLower(cfg.Command)
	}
	if strings.HasPrefix(cfg.Key, "__troop:") {
		return nil, fmt.Errorf("store target: key %q: keys starting with __troop: are reserved", cfg.Key)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	addr, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	t := &Target{cfg: cfg, addr: addr, level: level, writeLevel: writeLevel, epoch: time.Now().UnixNano()}
	if cfg.Spans != "" {
		if t.spans, err = fit.NewSpanTail(cfg.Spans); err != nil {
			return nil, fmt.Errorf("store target: %w", err)
		}
	}
	return t, nil
}

// resolve finds the node's address.
func resolve(cfg Config) (string, error) {
	switch {
	case cfg.Addr != "" && cfg.Lab != "":
		return "", errors.New("store target: give addr or lab, not both")
	case cfg.Addr != "":
		if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
			return "", fmt.Errorf("store target: addr %q: want host:port", cfg.Addr)
		}
		return cfg.Addr, nil
	case cfg.Lab == "":
		return "", errors.New("store target: no node: give addr (host:port) or lab (a lab directory)")
	}
	st, err := lab.Load(cfg.Lab)
	if err != nil {
		return "", fmt.Errorf("store target: %w", err)
	}
	if cfg.Node == "" {
		if len(st.Nodes) == 0 {
			return "", fmt.Errorf("store target: the lab in %s has no nodes", cfg.Lab)
		}
		return st.Nodes[0].Listen, nil
	}
	n, err := st.Node(cfg.Node)
	if err != nil {
		return "", fmt.Errorf("store target: %w", err)
	}
	return n.Listen, nil
}

// FromSpec rebuilds a target from its spec (a scenario's).
func FromSpec(s ldfi.Spec) (*Target, error) {
	if s.Kind != Kind {
		return nil, fmt.Errorf("store target: spec of kind %q", s.Kind)
	}
	var cfg Config
	dec := json.NewDecoder(strings.NewReader(string(s.Config)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("store target: spec: %w", err)
	}
	return New(cfg)
}

// Spec describes the target for scenarios: a lab's node by name, so that a
// replay finds it again after the lab restarted on other ports.
func (t *Target) Spec() ldfi.Spec {
	b, _ := json.Marshal(t.cfg) // a Config always marshals
	return ldfi.Spec{Kind: Kind, Config: b}
}

// Addr is the address of the node the target probes.
func (t *Target) Addr() string { return t.addr }

// Close closes the target's connection.
func (t *Target) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropLocked()
	return nil
}

func (t *Target) dropLocked() {
	if t.conn != nil {
		t.conn.Close()
		t.conn, t.rd = nil, nil
	}
}

// Probe runs one request of the class under scope and judges it: an error
// reply fails it, and so does a GET that does not return the value written
// just before (without faults). Only a canceled context, or a GET whose
// fault-free write fails, is an error: a node that cannot be reached is a
// failed request.
func (t *Target) Probe(ctx context.Context, scope fit.Scope) (ldfi.Probe, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return ldfi.Probe{}, err
	}
	deadline := time.Now().Add(t.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if t.conn == nil {
		if err := t.connectLocked(deadline); err != nil {
			if ctx.Err() != nil {
				return ldfi.Probe{}, ctx.Err()
			}
			return ldfi.Probe{Detail: err.Error()}, nil
		}
	}
	t.value++
	value := fmt.Sprintf("v%d-%d", t.epoch, t.value)
	fitArg := "RESET"
	if len(scope.Faults) > 0 {
		fitArg = scope.String()
	}
	// One round trip: [the fault-free write,] the scope, the command, its
	// lineage. TROOP LINEAGE answers once the command has its answer.
	var cmds [][]string
	if t.cfg.Command == "GET" {
		cmds = append(cmds, []string{"TROOP", "FIT", "RESET"}, []string{"SET", t.cfg.Key, value})
	}
	cmds = append(cmds, []string{"TROOP", "FIT", fitArg})
	var traceID, spanID string
	if t.spans != nil {
		traceID, spanID = fit.NewTraceparent()
		cmds = append(cmds, []string{"TROOP", "LINEAGE", "TRACEPARENT", "00-" + traceID + "-" + spanID + "-01"})
	}
	if t.cfg.Command == "GET" {
		cmds = append(cmds, []string{"GET", t.cfg.Key})
	} else {
		cmds = append(cmds, []string{"SET", t.cfg.Key, value})
	}
	if t.spans != nil {
		cmds = append(cmds, []string{"TROOP", "LINEAGE", "TRACEPARENT", "RESET"})
	}
	cmds = append(cmds, []string{"TROOP", "LINEAGE"})
	replies, err := t.roundTrip(cmds, deadline)
	if err != nil {
		t.dropLocked()
		if ctx.Err() != nil {
			return ldfi.Probe{}, ctx.Err()
		}
		return ldfi.Probe{Detail: err.Error()}, nil
	}
	if t.cfg.Command == "GET" {
		if w := replies[1]; w.IsError() {
			return ldfi.Probe{}, fmt.Errorf("store target: the write before the probe, at %s without faults, failed: %s", t.cfg.WriteLevel, w.Str)
		}
		replies = replies[2:]
	}
	if f := replies[0]; f.IsError() {
		return ldfi.Probe{}, fmt.Errorf("store target: TROOP FIT %s: %s", fitArg, f.Str)
	}
	if t.spans != nil {
		for _, r := range []resp.Value{replies[1], replies[3]} {
			if r.IsError() {
				return ldfi.Probe{}, fmt.Errorf("store target: TROOP LINEAGE TRACEPARENT: %s", r.Str)
			}
		}
		replies = []resp.Value{replies[0], replies[2], replies[4]}
	}
	p := ldfi.Probe{OK: true}
	if t.spans != nil {
		tree, err := t.spans.Lineage(ctx, traceID, spanID, spansWait)
		if err != nil {
			return ldfi.Probe{}, fmt.Errorf("store target: %w", err)
		}
		p.Lineage = ldfi.Lineage{Known: true, Reached: tree.Reached(), Used: tree.UsedPoints()}
	} else if l := replies[2]; !l.IsError() && !l.IsNull {
		var lin node.Lineage
		if err := json.Unmarshal(l.Str, &lin); err == nil {
			p.Lineage = ldfi.Lineage{Known: true, Reached: lin.Reached, Used: lin.Used}
		}
	}
	got := replies[1]
	switch {
	case got.IsError():
		p.OK, p.Detail = false, string(got.Str)
	case t.cfg.Command == "GET" && (got.IsNull || string(got.Str) != value):
		p.OK, p.Detail = false, fmt.Sprintf("GET returned %s, want %q (written just before)", show(got), value)
	case t.cfg.Command == "SET" && string(got.Str) != "OK":
		p.OK, p.Detail = false, fmt.Sprintf("SET answered %s, want OK", show(got))
	}
	return p, nil
}

func show(v resp.Value) string {
	if v.IsNull {
		return "nil"
	}
	return fmt.Sprintf("%q", v.Str)
}

// connectLocked dials the node and sets the connection's levels and
// lineage recording.
func (t *Target) connectLocked(deadline time.Time) error {
	c, err := net.DialTimeout("tcp", t.addr, time.Until(deadline))
	if err != nil {
		return fmt.Errorf("store target: %w", err)
	}
	t.conn, t.rd = c, resp.NewReader(c, resp.DefaultLimits)
	level := t.level // the class's command runs at its level
	if t.cfg.Command == "GET" {
		level = t.writeLevel // the write before a GET runs at the write level
	}
	replies, err := t.roundTrip([][]string{
		{"TROOP", "CONSISTENCY", "READ", t.level.String()},
		{"TROOP", "CONSISTENCY", "WRITE", level.String()},
		{"TROOP", "LINEAGE", "ON"},
	}, deadline)
	if err == nil {
		for _, r := range replies {
			if r.IsError() {
				err = fmt.Errorf("store target: %s answered %s (is it a troop node?)", t.addr, r.Str)
				break
			}
		}
	}
	if err != nil {
		t.dropLocked()
	}
	return err
}

// roundTrip sends cmds in one write and reads their replies.
func (t *Target) roundTrip(cmds [][]string, deadline time.Time) ([]resp.Value, error) {
	var req []byte
	for _, c := range cmds {
		req = resp.AppendCommandStrings(req, c...)
	}
	t.conn.SetDeadline(deadline)
	if _, err := t.conn.Write(req); err != nil {
		return nil, fmt.Errorf("store target: %s: %w", t.addr, err)
	}
	out := make([]resp.Value, 0, len(cmds))
	for range cmds {
		v, err := t.rd.ReadValue()
		if err != nil {
			return nil, fmt.Errorf("store target: %s: %w", t.addr, err)
		}
		out = append(out, v)
	}
	return out, nil
}
