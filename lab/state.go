package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Proc names one of the two processes of a position.
type Proc string

const (
	NodeProc  Proc = "node"  // the troop node
	RedisProc Proc = "redis" // its redis-server
)

// ParseProc accepts "node" or "redis".
func ParseProc(s string) (Proc, error) {
	switch Proc(s) {
	case NodeProc, RedisProc:
		return Proc(s), nil
	}
	return "", fmt.Errorf("unknown process %q (want node or redis)", s)
}

// State is the state of one process as the supervisor sees it.
type State string

const (
	Starting  State = "starting"  // started, not yet known to be ready
	Running   State = "running"   // alive
	Replacing State = "replacing" // died unasked; the supervisor starts it again after the delay
	Stopped   State = "stopped"   // stopped on request; stays down until started
	Dead      State = "dead"      // seen by status when no supervisor is running
)

// ProcStatus is one process of a position.
type ProcStatus struct {
	PID        int        `json:"pid"`
	StartTicks uint64     `json:"start_ticks,omitempty"` // /proc start time, to tell a reused PID apart
	State      State      `json:"state"`
	Restarts   int        `json:"restarts"` // replacements by the supervisor
	LastExit   string     `json:"last_exit,omitempty"`
	LastExitAt *time.Time `json:"last_exit_at,omitempty"`
}

// NodeStatus is one position: where it listens and how its processes are.
type NodeStatus struct {
	Node
	NodePID  int        `json:"node_pid"`
	RedisPID int        `json:"redis_pid"`
	State    string     `json:"state"` // up (both running), down (neither) or degraded
	NodeP    ProcStatus `json:"node_process"`
	RedisP   ProcStatus `json:"redis_process"`
}

// Proc returns the status of one of the position's processes.
func (n *NodeStatus) Proc(p Proc) *ProcStatus {
	if p == RedisProc {
		return &n.RedisP
	}
	return &n.NodeP
}

func (n *NodeStatus) summarize() {
	n.NodePID, n.RedisPID = n.NodeP.PID, n.RedisP.PID
	up := func(s State) bool { return s == Running || s == Starting }
	switch {
	case up(n.NodeP.State) && up(n.RedisP.State):
		n.State = "up"
	case !up(n.NodeP.State) && !up(n.RedisP.State):
		n.State = "down"
	default:
		n.State = "degraded"
	}
}

// Status is the content of DIR/lab.json: the lab's shape and settings, the
// supervisor and every position.
type Status struct {
	Dir               string         `json:"dir"`
	Shape             Shape          `json:"shape"`
	ReplaceAfter      string         `json:"replace_after"`
	ReadConsistency   string         `json:"read_consistency"`
	WriteConsistency  string         `json:"write_consistency"`
	SupervisorPID     int            `json:"supervisor_pid"`
	SupervisorTicks   uint64         `json:"supervisor_start_ticks,omitempty"`
	SupervisorRunning bool           `json:"supervisor_running"`
	Socket            string         `json:"socket,omitempty"`
	Engine            string         `json:"engine,omitempty"`   // what the nodes run: troop ("" in older labs) or dynomite
	Dynomite          string         `json:"dynomite,omitempty"` // Dynomite's binary, with engine dynomite
	Troop             string         `json:"troop"`
	RedisServer       string         `json:"redis_server"`
	TLS               bool           `json:"tls,omitempty"`     // peer links over mutual TLS, with the CA in DIR/tls/ca.crt
	Network           *NetworkStatus `json:"network,omitempty"` // address mode only
	Started           time.Time      `json:"started"`
	Updated           time.Time      `json:"updated"`
	Nodes             []NodeStatus   `json:"nodes"`
}

// Node finds a position by name.
func (s *Status) Node(name string) (*NodeStatus, error) {
	for i := range s.Nodes {
		if s.Nodes[i].Name == name {
			return &s.Nodes[i], nil
		}
	}
	names := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		names[i] = n.Name
	}
	return nil, fmt.Errorf("no node %q in the lab (have %s)", name, strings.Join(names, ", "))
}

// StateFile, SocketFile and the others are the lab's files under its dir.
func StateFile(dir string) string     { return filepath.Join(dir, "lab.json") }
func SocketFile(dir string) string    { return filepath.Join(dir, "supervisor.sock") }
func SupervisorLog(dir string) string { return filepath.Join(dir, "supervisor.log") }
func specFile(dir string) string      { return filepath.Join(dir, "spec.json") }
func lockFile(dir string) string      { return filepath.Join(dir, "lab.lock") }

// ErrNoLab is returned when a directory holds no lab.json.
var ErrNoLab = errors.New("no lab")

// Load reads DIR/lab.json as last written by the supervisor. It does not
// check whether the processes are alive; see Inspect.
func Load(dir string) (*Status, error) {
	b, err := os.ReadFile(StateFile(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s (start one with: troop lab up --dir %s)", ErrNoLab, dir, dir)
	}
	if err != nil {
		return nil, err
	}
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read %s: %w", StateFile(dir), err)
	}
	return &s, nil
}

// writeJSON writes v to path atomically so that readers never see half a file.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// supervisorAlive reports whether the supervisor recorded in s still runs.
func (s *Status) supervisorAlive() bool {
	return s.SupervisorPID > 0 && ours(s.SupervisorPID, s.SupervisorTicks)
}

// EnvLines are shell assignments for other tools: client, admin and redis
// addresses in dc, rack, node order, and the lab directory. The last line
// exports them so that `eval "$(troop lab env)"` reaches child processes.
func (s *Status) EnvLines() []string {
	var nodes, stats, redis []string
	for _, n := range s.Nodes {
		nodes = append(nodes, n.Listen)
		stats = append(stats, n.StatsListen)
		redis = append(redis, n.Redis)
	}
	return []string{
		"TROOP_NODES=" + strings.Join(nodes, ","),
		"TROOP_STATS=" + strings.Join(stats, ","),
		"TROOP_REDIS=" + strings.Join(redis, ","),
		"TROOP_LAB=" + shellQuote(s.Dir),
		"export TROOP_NODES TROOP_STATS TROOP_REDIS TROOP_LAB",
	}
}

// shellQuote quotes s for a POSIX shell unless it is plainly safe.
func shellQuote(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:,+=@", r))
	}) < 0
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// WriteTable prints the status for people: one line for the lab, then one
// row per position.
func (s *Status) WriteTable(w io.Writer) error {
	sup := "not running"
	if s.SupervisorRunning {
		sup = fmt.Sprintf("pid %d", s.SupervisorPID)
	}
	fmt.Fprintf(w, "lab %s: %s, replace after %s, read %s, write %s, supervisor %s\n",
		s.Dir, s.Shape, s.ReplaceAfter, s.ReadConsistency, s.WriteConsistency, sup)
	if s.Engine == EngineDynomite {
		fmt.Fprintf(w, "the nodes are Dynomite's (%s), with configs in its format\n", s.Dynomite)
	}
	if s.TLS {
		fmt.Fprintf(w, "peer links over mutual TLS, certificates of %s\n", filepath.Join(s.Dir, "tls", "ca.crt"))
	}
	if nw := s.Network; nw != nil {
		fmt.Fprintf(w, "address mode: each node in its own network namespace, on %s; the host is %s on %s\n", nw.Subnet, nw.Host, nw.Interface)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tLISTEN\tSTATS\tDYN\tTOKEN\tNODE\tREDIS\tREDIS ADDR")
	for _, n := range s.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", n.Name, n.State, n.Listen, n.StatsListen,
			n.DynListen, n.Token, procCell(n.NodeP), procCell(n.RedisP), n.Redis)
	}
	return tw.Flush()
}

// procCell is "running pid 123" plus the number of replacements, if any.
func procCell(p ProcStatus) string {
	s := string(p.State)
	if p.PID > 0 {
		s += fmt.Sprintf(" pid %d", p.PID)
	}
	if p.Restarts > 0 {
		s += " (" + plural(p.Restarts, "restart", "restarts") + ")"
	}
	return s
}
