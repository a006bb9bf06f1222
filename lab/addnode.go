package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// validRackName reports whether rack can name a rack of the lab: its
// positions' names and directories are made of it.
func validRackName(rack string) bool {
	if rack == "" {
		return false
	}
	for _, c := range rack {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// AddNode lays out and starts a new position in rack dc/rack (a new rack
// of an existing datacenter too, whose first node owns the whole ring): its own
// redis-server and a node that joins (troop_join: true, every position of
// the lab as its seeds, token as its token), and returns once both answer
// PING. The node serves nothing until a membership change names it (troop
// lab add-node sends it: POST /cluster/add on a member). In address mode
// (--netns) it gets its own namespace and the next address of the lab's
// network; with --tls a certificate from the lab's CA. The position lasts
// as long as the supervisor.
func (l *Lab) AddNode(ctx context.Context, dc, rack string, token uint32) (Node, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return Node{}, errors.New("lab is stopped")
	}
	if l.spec.Engine == EngineDynomite {
		l.mu.Unlock()
		return Node{}, errors.New("a Dynomite lab takes no new node: Dynomite changes its membership by a token of its own in every node's config, not by a membership change troop can send")
	}
	knownDC := false
	index := 1
	for _, n := range l.nodes {
		knownDC = knownDC || n.DC == dc
		if n.DC == dc && n.Rack == rack {
			index = max(index, n.Index+1)
		}
	}
	if !knownDC {
		l.mu.Unlock()
		return Node{}, fmt.Errorf("the lab has no datacenter %s: a node joins a rack of an existing datacenter", dc)
	}
	if !validRackName(rack) {
		l.mu.Unlock()
		return Node{}, fmt.Errorf("rack name %q: want letters, digits, '_' or '-' only", rack)
	}
	name := NodeName(dc, rack, index)
	n := Node{Name: name, DC: dc, Rack: rack, Index: index, Token: token,
		Dir: filepath.Join(l.spec.Dir, name), Config: filepath.Join(l.spec.Dir, name, "node.yml")}
	var ns *os.File
	if l.net != nil {
		i, err := l.net.addPosition()
		if err != nil {
			l.mu.Unlock()
			return Node{}, err
		}
		l.net.assignAddress(&n, i)
		ns = l.net.nodes[i]
	} else {
		nodes := []Node{n}
		if err := assignPorts(nodes); err != nil {
			l.mu.Unlock()
			return Node{}, err
		}
		n = nodes[0]
	}
	if err := os.MkdirAll(n.RedisDir(), 0o755); err != nil {
		l.mu.Unlock()
		return Node{}, fmt.Errorf("create %s: %w", n.RedisDir(), err)
	}
	if l.ca != nil {
		if err := issueCert(l.ca, n); err != nil {
			l.mu.Unlock()
			return Node{}, fmt.Errorf("TLS certificate of %s: %w", name, err)
		}
	}
	cfg := NodeConfig(n, l.nodes, l.spec.ReadConsistency, l.spec.WriteConsistency, l.caFile)
	cfg = append(cfg, "  troop_join: true\n"...)
	if err := os.WriteFile(n.Config, cfg, 0o644); err != nil {
		l.mu.Unlock()
		return Node{}, fmt.Errorf("write %s: %w", n.Config, err)
	}
	// The procs keep pointers to their position: a new slice for the
	// positions, so those of the others stay where they are.
	l.nodes = append(append(make([]Node, 0, len(l.nodes)+1), l.nodes...), n)
	pos := &l.nodes[len(l.nodes)-1]
	np := &proc{node: pos, kind: NodeProc, argv: l.nodeArgv(n), log: n.NodeLog(), addr: n.Listen, netns: ns, want: true, state: Stopped}
	rp := &proc{node: pos, kind: RedisProc, argv: redisCommand(l.spec.RedisServer, n), log: n.RedisLog(), addr: n.Redis, netns: ns, want: true, state: Stopped}
	l.procs = append(l.procs, np, rp)
	l.log.Info("adding a node", "node", name, "dc", dc, "rack", rack, "token", token, "dyn_listen", n.DynListen)
	err := l.start(rp)
	l.mu.Unlock()
	deadline := time.Now().Add(l.spec.ReadyTimeout)
	if err == nil {
		err = l.waitReady(ctx, []*proc{rp}, deadline)
	}
	if err == nil {
		l.mu.Lock()
		err = l.start(np)
		l.mu.Unlock()
	}
	if err == nil {
		err = l.waitReady(ctx, []*proc{np}, deadline)
	}
	if err != nil {
		return n, fmt.Errorf("add %s: %w (stop it with: troop lab stop %s; troop lab stop --redis %s)", name, err, name, name)
	}
	return n, nil
}
