package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/troop-lab/troop/internal/certs"
	"github.com/troop-lab/troop/internal/logflag"
	"github.com/troop-lab/troop/internal/netns"
)

// Spec describes a lab to start. Zero fields take the defaults of troop lab up.
type Spec struct {
	Dir              string        // where configs, data and logs go (required)
	Shape            Shape         // default DefaultShape (1 x 3 x 1)
	ReplaceAfter     time.Duration // delay before a died process is replaced; default 3s
	ReadConsistency  string        // default DC_ONE
	WriteConsistency string        // default DC_ONE
	// Netns is address mode: each position in its own network namespace,
	// with its own address on a bridge of the lab's (see NetworkStatus).
	// It needs root.
	Netns bool
	// TLS encrypts the peer links: the lab makes a CA (DIR/tls/ca.crt) and
	// a certificate per node (DIR/<node>/tls.crt), and its nodes run with
	// secure_server_option: all, verifying each other against the CA.
	TLS bool
	// Engine is what the nodes run: EngineTroop (the default), or
	// EngineDynomite, Dynomite's own binary (Dynomite, default
	// FindDynomite's) with config files in Dynomite's format, on the same
	// redis-servers under the same supervisor.
	Engine   string
	Dynomite string

	// Troop is the troop binary: the detached supervisor and the chaos
	// faults run it. Default os.Executable(), which is wrong inside a test
	// binary: tests of other packages pass a built troop (see BuildTroop)
	// or NodeCommand. Nodes run troop-node, the node alone, when Troop's
	// directory has one (make build and BuildTroop put it there), as
	// `troop-node --config FILE`; else `Troop node --config FILE`.
	Troop string
	// nodeProgram is the nodes' command line before their flags, found
	// next to Troop by withDefaults.
	nodeProgram []string
	// RedisServer is the redis-server binary; default $TROOP_REDIS_SERVER,
	// then redis-server from PATH.
	RedisServer string
	// Hosts, on loopback, are the addresses the nodes listen at, one per
	// position in Layout's order, in place of 127.0.0.1: the node's client,
	// peer and admin listeners (its redis-server stays on 127.0.0.1). Every
	// address of 127.0.0.0/8 is this host's loopback on Linux, so a test
	// can put each node at an address another system gave it, such as a
	// pod's IP. Nodes added later (AddNode) listen at 127.0.0.1. It is not
	// carried to a detached supervisor.
	Hosts []string
	// NodeCommand, if set, replaces the node's command line, so that the
	// supervisor can be tested with a stand-in that answers PING on
	// n.Listen. It is not carried to a detached supervisor.
	NodeCommand func(n Node) []string

	ReadyTimeout time.Duration // bound on start-up readiness; default 20s
	StopGrace    time.Duration // SIGTERM to SIGKILL; default 5s

	// ServeSocket makes the lab take commands on DIR/supervisor.sock, as the
	// detached supervisor does.
	ServeSocket bool
	// Logger receives the supervisor's log; default DIR/supervisor.log.
	Logger *slog.Logger
	// LogFormat is the format of the supervisor's and the nodes' logs:
	// "text" (logfmt, the default) or "json".
	LogFormat string
}

// logFlags are the supervisor's log settings, as a node's flags say them.
func (s Spec) logFlags() *logflag.Flags { return &logflag.Flags{Format: s.LogFormat, Level: "info"} }

// withDefaults fills zero fields, resolves binaries and checks the rest.
func (s Spec) withDefaults() (Spec, error) {
	if s.Dir == "" {
		return s, errors.New("lab spec: no directory")
	}
	dir, err := filepath.Abs(s.Dir)
	if err != nil {
		return s, fmt.Errorf("lab directory %s: %w", s.Dir, err)
	}
	s.Dir = dir
	if s.Shape == (Shape{}) {
		s.Shape = DefaultShape
	}
	if err := s.Shape.validate(); err != nil {
		return s, err
	}
	if s.ReplaceAfter == 0 {
		s.ReplaceAfter = 3 * time.Second
	}
	if s.ReplaceAfter < 0 {
		return s, fmt.Errorf("replace-after %s: must not be negative", s.ReplaceAfter)
	}
	if len(s.Hosts) > 0 {
		if s.Netns {
			return s, errors.New("lab hosts: address mode gives each position an address of its own network")
		}
		if len(s.Hosts) != s.Shape.Size() {
			return s, fmt.Errorf("lab hosts: %d for %d positions (%s)", len(s.Hosts), s.Shape.Size(), s.Shape)
		}
		for _, h := range s.Hosts {
			if _, err := netip.ParseAddr(h); err != nil {
				return s, fmt.Errorf("lab hosts: %w", err)
			}
		}
	}
	if s.Netns {
		if err := netns.CheckRoot("lab address mode (--netns)"); err != nil {
			return s, err
		}
	}
	if s.LogFormat == "" {
		s.LogFormat = "text"
	}
	if err := s.logFlags().Check(); err != nil {
		return s, err
	}
	if s.ReadConsistency, err = normalizeLevel("read consistency", s.ReadConsistency); err != nil {
		return s, err
	}
	if s.WriteConsistency, err = normalizeLevel("write consistency", s.WriteConsistency); err != nil {
		return s, err
	}
	if s.ReadyTimeout <= 0 {
		s.ReadyTimeout = 20 * time.Second
	}
	if s.StopGrace <= 0 {
		s.StopGrace = 5 * time.Second
	}
	if s.RedisServer, err = FindRedisServer(s.RedisServer); err != nil {
		return s, err
	}
	if s.Engine, err = ParseEngine(s.Engine); err != nil {
		return s, err
	}
	if s.Engine == EngineDynomite {
		if s.TLS {
			return s, errors.New("lab --engine dynomite --tls: the lab's TLS is troop's (troop_tls_*); Dynomite encrypts its peer links its own way, which the lab does not set up")
		}
		if s.Dynomite, err = FindDynomite(s.Dynomite); err != nil {
			return s, err
		}
	}
	if s.NodeCommand == nil {
		if s.Troop == "" {
			if s.Troop, err = os.Executable(); err != nil {
				return s, fmt.Errorf("find the troop binary: %w", err)
			}
		}
		if s.Troop, err = filepath.Abs(s.Troop); err != nil {
			return s, err
		}
		if _, err := os.Stat(s.Troop); err != nil {
			return s, fmt.Errorf("troop binary: %w", err)
		}
		s.nodeProgram = nodeProgram(s.Troop)
	}
	return s, nil
}

// nodeProgram is how the nodes run: troop-node from troop's directory when
// it has one, else troop's own node verb.
func nodeProgram(troop string) []string {
	lean := filepath.Join(filepath.Dir(troop), "troop-node")
	if fi, err := os.Stat(lean); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return []string{lean}
	}
	return []string{troop, "node"}
}

// nodeArgv is the command line of the node at position n.
func (l *Lab) nodeArgv(n Node) []string {
	if l.spec.NodeCommand != nil {
		return l.spec.NodeCommand(n)
	}
	if n.Engine == EngineDynomite {
		return DynomiteCommand(l.spec.Dynomite, n)
	}
	return append(slices.Clone(l.spec.nodeProgram), "--config", n.Config, "--log-format", l.spec.LogFormat)
}

// FindRedisServer resolves the redis-server binary: path if given, else
// $TROOP_REDIS_SERVER, else redis-server from PATH.
func FindRedisServer(path string) (string, error) {
	if path == "" {
		path = os.Getenv("TROOP_REDIS_SERVER")
		if path != "" {
			p, err := exec.LookPath(path)
			if err != nil {
				return "", fmt.Errorf("TROOP_REDIS_SERVER=%s is not an executable redis-server: %w", path, err)
			}
			return p, nil
		}
		p, err := exec.LookPath("redis-server")
		if err != nil {
			return "", errors.New("redis-server not found on PATH: install it (Debian: apt-get install redis-server) or point TROOP_REDIS_SERVER at it")
		}
		return p, nil
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("redis-server %s: %w", path, err)
	}
	return p, nil
}

// redisCommand is the command line of a position's redis-server: on its
// address only (loopback, or the position's own in address mode), no
// persistence, logs to a file, in the foreground so that the supervisor is
// its parent and sees it die.
func redisCommand(bin string, n Node) []string {
	host, port, _ := net.SplitHostPort(n.Redis)
	// Protected mode refuses clients from other addresses than loopback,
	// which in address mode are the node and the host; the lab's network
	// is reachable from this host only.
	protected := "yes"
	if n.IP != "" {
		protected = "no"
	}
	return []string{bin,
		"--port", port,
		"--bind", host,
		"--protected-mode", protected,
		"--save", "",
		"--appendonly", "no",
		"--dir", n.RedisDir(),
		"--logfile", n.RedisLog(),
		"--daemonize", "no",
	}
}

// Lab is a running cluster of redis-servers and troop nodes with the
// supervisor that replaces what dies. Its methods are safe for concurrent use.
type Lab struct {
	spec    Spec
	log     *slog.Logger
	logFile *logSink // nil when the caller gave a Logger
	started time.Time
	nodes   []Node
	ticks   uint64    // this process's start time, for lab.json
	net     *network  // address mode's namespaces; nil on loopback
	ca      *certs.CA // with TLS, the lab's CA, for the nodes added later
	caFile  string    // with TLS, its certificate (DIR/tls/ca.crt)

	mu     sync.Mutex
	procs  []*proc // node and redis of each position, in position order
	closed bool

	srv      *http.Server
	stopOnce sync.Once
	stopErr  error
	done     chan struct{}
}

// proc is one supervised process. Fields are guarded by Lab.mu.
type proc struct {
	node  *Node
	kind  Proc
	argv  []string
	log   string   // stdout and stderr go here
	addr  string   // answers PING when ready
	netns *os.File // where it runs, in address mode; nil on loopback

	want     bool // the supervisor keeps it running
	state    State
	cmd      *exec.Cmd
	pid      int
	ticks    uint64
	exited   chan struct{} // closed when the current cmd has exited
	restarts int
	lastExit string
	exitAt   time.Time
	timer    *time.Timer
	gen      int // bumped by every start and stop request, to void pending replacements
}

func (p *proc) String() string { return p.node.Name + " " + string(p.kind) }

// Start lays out the lab under spec.Dir, starts every redis-server, then
// every node, and returns once all answer PING (or an error naming those
// that do not, with the tail of their logs, after spec.ReadyTimeout). On
// error nothing it started is left running. Stop the lab with Stop.
func Start(ctx context.Context, spec Spec) (*Lab, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}
	if spec.ServeSocket {
		if err := checkSocketPath(spec.Dir); err != nil {
			return nil, err
		}
	}
	// Two labs in one directory would overwrite each other's lab.json.
	if old, err := Load(spec.Dir); err == nil && old.supervisorAlive() {
		return nil, fmt.Errorf("a lab already runs in %s (supervisor pid %d): stop it first (troop lab down --dir %s)", spec.Dir, old.SupervisorPID, spec.Dir)
	}
	l := &Lab{spec: spec, started: time.Now(), done: make(chan struct{})}
	l.ticks, _ = startTicks(os.Getpid())
	if err := os.MkdirAll(spec.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create lab directory: %w", err)
	}
	l.log = spec.Logger
	if l.log == nil {
		f, err := os.OpenFile(SupervisorLog(spec.Dir), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open supervisor log: %w", err)
		}
		l.logFile = &logSink{f: f}
		l.log, _ = spec.logFlags().Logger(l.logFile) // withDefaults checked the flags
	}
	if err := l.layout(); err != nil {
		l.closeLog()
		return nil, err
	}
	l.log.Info("lab starting", "dir", spec.Dir, "shape", spec.Shape.String(), "replace_after", spec.ReplaceAfter.String(),
		"read", spec.ReadConsistency, "write", spec.WriteConsistency, "engine", spec.Engine, "troop", spec.Troop, "node_program", strings.Join(spec.nodeProgram, " "), "dynomite", spec.Dynomite,
		"redis_server", spec.RedisServer)
	if err := l.startAll(ctx); err != nil {
		l.log.Error("lab did not start", "err", err)
		l.Stop()
		return nil, err
	}

	if spec.ServeSocket {
		if err := l.serve(); err != nil {
			l.Stop()
			return nil, err
		}
	}
	l.mu.Lock()
	l.save()
	l.mu.Unlock()
	l.log.Info("lab ready", "nodes", len(l.nodes))
	return l, nil
}

// layout picks addresses (free loopback ports, or in address mode the
// network's addresses), writes every node's config and makes its
// directories.
func (l *Lab) layout() error {
	l.nodes = Layout(l.spec.Shape, l.spec.Dir)
	if l.spec.Netns {
		nw, err := createNetwork(l.spec.Dir, len(l.nodes))
		if err != nil {
			return err
		}
		l.net = nw
		nw.assignAddresses(l.nodes)
	} else if err := assignPorts(l.nodes); err != nil {
		return err
	}
	for i, h := range l.spec.Hosts {
		n := &l.nodes[i]
		for _, addr := range []*string{&n.Listen, &n.DynListen, &n.StatsListen} {
			_, port, _ := net.SplitHostPort(*addr)
			*addr = net.JoinHostPort(h, port)
		}
	}
	for i := range l.nodes {
		// A lab starts from its shape: what a node kept of an earlier lab
		// in this directory (hints for peers on other ports, the
		// membership steps of its changes) names addresses that are gone.
		if err := os.RemoveAll(l.nodes[i].DataDir()); err != nil {
			return fmt.Errorf("remove %s: %w", l.nodes[i].DataDir(), err)
		}
		if err := os.MkdirAll(l.nodes[i].RedisDir(), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", l.nodes[i].RedisDir(), err)
		}
	}
	if l.spec.TLS {
		var err error
		if l.ca, l.caFile, err = makeCerts(l.spec.Dir, l.nodes); err != nil {
			return fmt.Errorf("TLS certificates: %w", err)
		}
	}
	for i := range l.nodes {
		n := &l.nodes[i]
		cfg := NodeConfig(*n, l.nodes, l.spec.ReadConsistency, l.spec.WriteConsistency, l.caFile)
		if l.spec.Engine == EngineDynomite {
			n.Engine = EngineDynomite
			cfg = DynomiteConfig(*n, l.nodes, l.spec.ReadConsistency, l.spec.WriteConsistency)
		}
		if err := os.WriteFile(n.Config, cfg, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", n.Config, err)
		}
		nodeArgv := l.nodeArgv(*n)
		var ns *os.File
		if l.net != nil {
			ns = l.net.nodes[i]
		}
		l.procs = append(l.procs,
			&proc{node: n, kind: NodeProc, argv: nodeArgv, log: n.NodeLog(), addr: n.Listen, netns: ns, want: true, state: Stopped},
			&proc{node: n, kind: RedisProc, argv: redisCommand(l.spec.RedisServer, *n), log: n.RedisLog(), addr: n.Redis, netns: ns, want: true, state: Stopped})
	}
	return nil
}

// startAll starts the redis-servers, waits for them, then the nodes, so that
// a node's datastore is there when it starts. One deadline bounds both.
func (l *Lab) startAll(ctx context.Context) error {
	deadline := time.Now().Add(l.spec.ReadyTimeout)
	for _, kind := range []Proc{RedisProc, NodeProc} {
		var group []*proc
		l.mu.Lock()
		for _, p := range l.procs {
			if p.kind != kind {
				continue
			}
			if err := l.start(p); err != nil {
				l.mu.Unlock()
				return err
			}
			group = append(group, p)
		}
		l.mu.Unlock()
		if err := l.waitReady(ctx, group, deadline); err != nil {
			return err
		}
	}
	return nil
}

// waitReady waits until every process answers PING, and otherwise names the
// ones that do not with the tail of their logs.
func (l *Lab) waitReady(ctx context.Context, group []*proc, deadline time.Time) error {
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	errs := make([]error, len(group))
	var wg sync.WaitGroup
	for i, p := range group {
		l.mu.Lock()
		exited := p.exited
		pid := p.pid
		l.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := waitPing(ctx, p.addr, deadline, exited); err != nil {
				l.mu.Lock()
				why := err.Error()
				if p.lastExit != "" && p.cmd == nil {
					why = "exited: " + p.lastExit
				}
				l.mu.Unlock()
				errs[i] = fmt.Errorf("%s (pid %d, %s) not ready: %s; last lines of %s:\n%s", p, pid, p.addr, why, p.log, tail(p.log, 10))
				return
			}
			l.mu.Lock()
			if p.exited == exited && p.state == Starting {
				p.state = Running
				l.save()
			}
			l.mu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lab in %s not ready within %s:\n%w", l.spec.Dir, l.spec.ReadyTimeout, err)
	}
	return nil
}

// start starts p's process. l.mu is held.
func (l *Lab) start(p *proc) error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: open log: %w", p, err)
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Dir = p.node.Dir
	cmd.Stdout, cmd.Stderr = f, f
	// Pdeathsig kills the child when the supervisor dies, so no process of a
	// lab outlives it. The kernel sends it when the forking thread exits;
	// the Go runtime does not end its threads unless a goroutine locked to
	// one exits, which the lab never does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = nil
	if p.netns != nil {
		err = netns.Do(p.netns, cmd.Start)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", p, err)
	}
	p.cmd, p.pid = cmd, cmd.Process.Pid
	p.ticks, _ = startTicks(p.pid)
	p.state = Starting
	p.exited = make(chan struct{})
	l.log.Info("started", "node", p.node.Name, "proc", string(p.kind), "pid", p.pid, "addr", p.addr)
	go l.reap(p, cmd, p.exited)
	l.save()
	return nil
}

// reap waits for cmd to exit and, unless it was asked to, schedules its
// replacement after the delay: the lab's Auto Scaling Group.
func (l *Lab) reap(p *proc, cmd *exec.Cmd, exited chan struct{}) {
	cmd.Wait()
	status := cmd.ProcessState.String()
	at := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	close(exited)
	if p.cmd != cmd {
		return
	}
	pid := p.pid
	p.cmd, p.pid, p.ticks = nil, 0, 0
	p.lastExit, p.exitAt = status, at
	if !p.want || l.closed {
		p.state = Stopped
		l.log.Info("stopped", "node", p.node.Name, "proc", string(p.kind), "pid", pid, "exit", status)
		l.save()
		return
	}
	p.state = Replacing
	l.log.Warn("died", "node", p.node.Name, "proc", string(p.kind), "pid", pid, "exit", status,
		"at", at.Format(time.RFC3339Nano), "replace_after", l.spec.ReplaceAfter.String())
	l.scheduleReplace(p, pid, status, at)
	l.save()
}

// scheduleReplace starts p again after the delay unless a request or Stop
// intervenes meanwhile. l.mu is held.
func (l *Lab) scheduleReplace(p *proc, oldPID int, status string, diedAt time.Time) {
	gen := p.gen
	p.timer = time.AfterFunc(l.spec.ReplaceAfter, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.closed || !p.want || p.gen != gen || p.cmd != nil {
			return
		}
		if err := l.start(p); err != nil {
			// A replacement that cannot start is retried after the same
			// delay, as an Auto Scaling Group keeps trying.
			l.log.Error("replacement failed", "node", p.node.Name, "proc", string(p.kind), "err", err)
			l.scheduleReplace(p, oldPID, status, diedAt)
			return
		}
		p.restarts++
		now := time.Now()
		l.log.Warn("replaced", "node", p.node.Name, "proc", string(p.kind), "old_pid", oldPID, "exit", status,
			"died_at", diedAt.Format(time.RFC3339Nano), "new_pid", p.pid, "replaced_at", now.Format(time.RFC3339Nano),
			"after", now.Sub(diedAt).Round(time.Millisecond).String())
		// Readiness is watched so that status says running once it answers.
		go l.waitReady(context.Background(), []*proc{p}, now.Add(l.spec.ReadyTimeout))
	})
}

// find returns the process kind of the named position.
func (l *Lab) find(name string, kind Proc) (*proc, error) {
	if _, err := ParseProc(string(kind)); err != nil {
		return nil, err
	}
	for _, p := range l.procs {
		if p.node.Name == name && p.kind == kind {
			return p, nil
		}
	}
	names := make([]string, len(l.nodes))
	for i, n := range l.nodes {
		names[i] = n.Name
	}
	return nil, fmt.Errorf("no node %q in the lab (have %s)", name, strings.Join(names, ", "))
}

// Kill sends SIGKILL to a process, as a failure would: the supervisor
// replaces it after the delay. It returns the PID it killed.
func (l *Lab) Kill(name string, kind Proc) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, err := l.find(name, kind)
	if err != nil {
		return 0, err
	}
	if p.cmd == nil {
		return 0, fmt.Errorf("%s is not running (%s)", p, p.state)
	}
	l.log.Info("killing on request", "node", name, "proc", string(kind), "pid", p.pid)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill %s (pid %d): %w", p, p.pid, err)
	}
	return p.pid, nil
}

// StopNode stops a process (SIGTERM, SIGKILL after the grace period) and
// keeps it down until StartNode.
func (l *Lab) StopNode(name string, kind Proc) error {
	l.mu.Lock()
	p, err := l.find(name, kind)
	if err != nil {
		l.mu.Unlock()
		return err
	}
	p.want = false
	p.gen++
	if p.timer != nil {
		p.timer.Stop()
	}
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.state = Stopped
		l.save()
		l.mu.Unlock()
		return nil
	}
	l.log.Info("stopping on request", "node", name, "proc", string(kind), "pid", p.pid)
	l.mu.Unlock()
	return l.terminate(p, cmd, exited)
}

// terminate sends SIGTERM, then SIGKILL after the grace period, and waits
// (bounded) for the process to exit.
func (l *Lab) terminate(p *proc, cmd *exec.Cmd, exited <-chan struct{}) error {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(l.spec.StopGrace):
	}
	l.log.Warn("no exit after SIGTERM, sending SIGKILL", "node", p.node.Name, "proc", string(p.kind), "pid", cmd.Process.Pid)
	cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-exited:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) still running 5s after SIGKILL", p, cmd.Process.Pid)
	}
}

// StartNode starts a stopped (or not yet replaced) process now and waits
// until it answers PING. Starting a running process does nothing.
func (l *Lab) StartNode(name string, kind Proc) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errors.New("lab is stopped")
	}
	p, err := l.find(name, kind)
	if err != nil {
		l.mu.Unlock()
		return err
	}
	p.want = true
	p.gen++
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.cmd != nil {
		l.mu.Unlock()
		return nil
	}
	if err := l.start(p); err != nil {
		l.mu.Unlock()
		return err
	}
	l.log.Info("started on request", "node", name, "proc", string(kind), "pid", p.pid)
	l.mu.Unlock()
	return l.waitReady(context.Background(), []*proc{p}, time.Now().Add(l.spec.ReadyTimeout))
}

// Stop stops every process (nodes first, then their redis-servers), the
// socket and the log, and records the final state in lab.json. It is safe
// to call more than once and from t.Cleanup.
func (l *Lab) Stop() error {
	l.stopOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		type running struct {
			p      *proc
			cmd    *exec.Cmd
			exited chan struct{}
		}
		var byKind = map[Proc][]running{}
		for _, p := range l.procs {
			p.want = false
			p.gen++
			if p.timer != nil {
				p.timer.Stop()
			}
			if p.cmd != nil {
				byKind[p.kind] = append(byKind[p.kind], running{p, p.cmd, p.exited})
			}
		}
		l.log.Info("lab stopping")
		l.mu.Unlock()
		if l.srv != nil {
			l.srv.Close()
			os.Remove(SocketFile(l.spec.Dir))
		}
		// Nodes go first so that none of them sees its redis-server vanish.
		var errs []error
		for _, kind := range []Proc{NodeProc, RedisProc} {
			var wg sync.WaitGroup
			var mu sync.Mutex
			for _, r := range byKind[kind] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := l.terminate(r.p, r.cmd, r.exited); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
		}
		if l.net != nil {
			if err := l.net.close(); err != nil {
				errs = append(errs, err)
			}
		}
		l.stopErr = errors.Join(errs...)
		l.mu.Lock()
		l.save()
		l.mu.Unlock()
		l.log.Info("lab stopped", "err", l.stopErr)
		l.closeLog()
		close(l.done)
	})
	return l.stopErr
}

func (l *Lab) closeLog() {
	if l.logFile != nil {
		l.logFile.Close()
	}
}

// logSink is the supervisor log file; once closed it drops writes, so that
// a late line from a request racing Stop cannot write to a closed file.
type logSink struct {
	mu sync.Mutex
	f  *os.File
}

func (s *logSink) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return len(b), nil
	}
	return s.f.Write(b)
}

func (s *logSink) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// Done is closed once the lab has stopped.
func (l *Lab) Done() <-chan struct{} { return l.done }

// Dir is the lab's directory, absolute.
func (l *Lab) Dir() string { return l.spec.Dir }

// Nodes lists the positions in dc, rack, node order, then those added.
func (l *Lab) Nodes() []Node {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Node(nil), l.nodes...)
}

// Node finds a position by name.
func (l *Lab) Node(name string) (Node, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// Status is a snapshot of the lab, as written to lab.json.
func (l *Lab) Status() *Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status()
}

// status builds the snapshot. l.mu is held.
func (l *Lab) status() *Status {
	s := &Status{
		Dir: l.spec.Dir, Shape: l.spec.Shape, ReplaceAfter: l.spec.ReplaceAfter.String(),
		ReadConsistency: l.spec.ReadConsistency, WriteConsistency: l.spec.WriteConsistency, TLS: l.spec.TLS,
		Engine: l.spec.Engine, Dynomite: l.spec.Dynomite, Troop: l.spec.Troop, RedisServer: l.spec.RedisServer, Started: l.started, Updated: time.Now(),
	}
	if l.net != nil {
		nw := l.net.NetworkStatus
		s.Network = &nw
	}
	if !l.closed {
		s.SupervisorPID, s.SupervisorTicks, s.SupervisorRunning = os.Getpid(), l.ticks, true
		if l.srv != nil {
			s.Socket = SocketFile(l.spec.Dir)
		}
	}
	for i := range l.nodes {
		ns := NodeStatus{Node: l.nodes[i]}
		for _, p := range l.procs[2*i : 2*i+2] {
			ps := ns.Proc(p.kind)
			ps.PID, ps.StartTicks, ps.State, ps.Restarts, ps.LastExit = p.pid, p.ticks, p.state, p.restarts, p.lastExit
			if !p.exitAt.IsZero() {
				at := p.exitAt
				ps.LastExitAt = &at
			}
		}
		ns.summarize()
		s.Nodes = append(s.Nodes, ns)
	}
	return s
}

// save writes lab.json. l.mu is held; a failure is logged, not fatal,
// because the processes matter more than their record.
func (l *Lab) save() {
	if err := writeJSON(StateFile(l.spec.Dir), l.status()); err != nil {
		l.log.Error("write lab.json", "err", err)
	}
}
