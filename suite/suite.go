// Package suite is `troop run`: the whole resilience suite against one
// cluster, ending in one report. The phases, in order:
//
//  1. baseline: the Dynomite benchmark's mix (80:20 GET:SET, 1 KB values)
//     at DC_ONE, then at DC_QUORUM;
//  2. failure under load: a mixed run at DC_QUORUM during which the chaos
//     monkey terminates one node and the lab replaces it;
//  3. durability audit: every key the failure phase wrote, read back at
//     DC_QUORUM against the model of acknowledged writes;
//  4. consistency: a contended register workload per level (clients
//     through every node, no think time, delays between nodes, one clock
//     ahead), each key's history checked for linearizability, stale reads
//     counted; with Coordination, the lock, id, list, counter, set, queue
//     and WATCH workloads too, each judged by its checker;
//  5. lineage-driven fault injection on the store's GET and SET.
//
// Run returns a Report; package report renders it as HTML.
package suite

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/labchaos"
	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/internal/filekind"
	"github.com/troop-lab/troop/lab"
)

// Config is everything a suite run depends on; it is recorded in the report.
type Config struct {
	Quick bool   `json:"quick" yaml:"-"`
	Seed  uint64 `json:"seed" yaml:"seed"`
	// Dir holds the lab the run starts (configs, data, logs).
	Dir string `json:"dir" yaml:"-"`
	// Lab, if set, is the directory of a lab already running (troop lab up):
	// the run uses it instead of starting one.
	Lab string `json:"lab,omitempty" yaml:"-"`
	// Target and Cluster name a cluster troop did not start, which the run
	// loads and checks without faults: Target its Redis-protocol endpoints
	// (redis-server, nutcracker, any proxy), Cluster a troop or Dynomite
	// cluster by its /cluster_describe (a file holding the answer, or a
	// node's admin address). ClientPort is Dynomite's client port when it
	// is not the peer port plus one.
	Target     []string `json:"target,omitempty" yaml:"-"`
	Cluster    string   `json:"cluster,omitempty" yaml:"-"`
	ClientPort int      `json:"client_port,omitempty" yaml:"-"`
	// Level, with Target or Cluster, is the level the cluster runs at, for
	// endpoints that do not say (a redis-server, a proxy, a Dynomite
	// described by a file): a history that is not linearizable at a quorum
	// level is then a finding that broke. With Engine dynomite it is the
	// level the lab's Dynomite runs at.
	Level string `json:"level,omitempty" yaml:"-"`
	// Chaos, with Target or Cluster, is the backend whose faults the
	// failure phase and the nemesis inject (--chaos-config): nil leaves
	// those phases out.
	Chaos *Chaos `json:"chaos,omitempty" yaml:"-"`
	// Access is how the run reaches a cluster troop did not start that
	// guards itself: credentials and, for Target, a database and TLS.
	Access bench.Access `json:"access" yaml:"-"`
	// Troop is the binary the lab's nodes run; "" for this executable.
	Troop string `json:"-" yaml:"-"`
	// Loopback starts the lab on loopback even as root, where it would give
	// each node its own network namespace; the nemesis then runs only the
	// clock faults.
	Loopback bool `json:"loopback" yaml:"-"`
	// Engine is what the nodes of a lab the run starts run: troop ("")
	// or Dynomite (lab.EngineDynomite), at Level (default DC_QUORUM).
	Engine string `json:"engine,omitempty" yaml:"-"`
	// NodeCommand, if set, is the command line of each node of a lab the
	// run starts (lab.Spec.NodeCommand): tests plant bugs with it.
	NodeCommand func(n lab.Node) []string `json:"-" yaml:"-"`

	Keys           uint64        `json:"keys" yaml:"keys"`
	ValueSize      int           `json:"value_size" yaml:"value_size"`
	ReadersPerNode int           `json:"readers_per_node" yaml:"readers_per_node"`
	WritersPerNode int           `json:"writers_per_node" yaml:"writers_per_node"`
	Baseline       time.Duration `json:"baseline" yaml:"baseline"`           // per level
	Fault          time.Duration `json:"fault" yaml:"fault"`                 // the failure phase's whole run
	KillAt         time.Duration `json:"kill_at" yaml:"kill_at"`             // into the failure phase
	ReplaceAfter   time.Duration `json:"replace_after" yaml:"replace_after"` // the lab's replacement delay
	FaultRate      float64       `json:"fault_rate" yaml:"fault_rate"`       // open-loop ops/s of the failure phase; 0 = 60% of baseline DC_QUORUM
	// ContendedKeys is how many keys get half of the failure phase's
	// operations, so that each is written by many writers through every
	// coordinator and the audit judges keys whose writes raced; 0 spreads
	// the operations evenly.
	ContendedKeys uint64 `json:"contended_keys" yaml:"contended_keys"`
	// RequestTimeout is how long the benchmark workloads' clients wait for
	// an answer before they retry through another rack. The default
	// outwaits a lab node; a shorter one retries writes still in flight,
	// which may then land after later writes (store.md says why).
	RequestTimeout time.Duration  `json:"request_timeout" yaml:"request_timeout"`
	Register       RegisterConfig `json:"register" yaml:"register"`
	Nemesis        NemesisConfig  `json:"nemesis" yaml:"nemesis"`
	Levels         []string       `json:"levels" yaml:"levels"`                   // of the baseline and the consistency phase
	LDFIMaxFaults  int            `json:"ldfi_max_faults" yaml:"ldfi_max_faults"` // k of the LDFI phase; 0 skips it
	// Coordination adds the coordination checks to the consistency phase
	// (coordination_run.go), each workload for CoordinationDuration.
	Coordination         bool          `json:"coordination" yaml:"coordination"`
	CoordinationDuration time.Duration `json:"coordination_duration" yaml:"coordination_duration"`
	// Out is where the run writes what it produces beside the report (the
	// LDFI phase's reports and scenario files).
	Out string `json:"out" yaml:"-"`

	Version  string    `json:"troop_version" yaml:"-"`
	Progress io.Writer `json:"-" yaml:"-"` // bench's progress line; nil = quiet
}

// DefaultConfig is the full run: about four minutes here.
func DefaultConfig() Config {
	reg := DefaultRegisterConfig()
	return Config{
		Seed: 1, Dir: ".troop/run/lab", Out: ".troop/run", Keys: 100_000, ValueSize: 1024,
		ReadersPerNode: 32, WritersPerNode: 8,
		Baseline: 20 * time.Second, Fault: 40 * time.Second, KillAt: 10 * time.Second,
		ReplaceAfter: 5 * time.Second, ContendedKeys: 100, RequestTimeout: requestTimeout, Register: reg, Nemesis: DefaultNemesisConfig(),
		Levels: []string{"DC_ONE", "DC_QUORUM"}, LDFIMaxFaults: 2, CoordinationDuration: 3 * time.Second,
	}
}

// QuickConfig finishes in about a minute.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Quick = true
	c.Keys = 10_000
	c.ReadersPerNode, c.WritersPerNode = 8, 2
	c.Baseline, c.Fault, c.KillAt, c.ReplaceAfter = 5*time.Second, 15*time.Second, 4*time.Second, 2*time.Second
	c.Register.Duration = 5 * time.Second
	c.Nemesis.Fault, c.Nemesis.Levels = 4*time.Second, []string{"DC_QUORUM"}
	c.CoordinationDuration = 2 * time.Second
	return c
}

// Report is what a run found; it is written as JSON and rendered as HTML.
type Report struct {
	Kind        string             `json:"kind"` // filekind.RunReport
	Troop       string             `json:"troop_version"`
	Seed        uint64             `json:"seed"`
	Config      Config             `json:"config"`
	Cluster     string             `json:"cluster"`
	Store       Store              `json:"store"`
	Started     time.Time          `json:"started"`
	Finished    time.Time          `json:"finished"`
	Verdict     Verdict            `json:"verdict"`
	Baseline    []BenchPhase       `json:"baseline"`
	Failure     *FailurePhase      `json:"failure,omitempty"`
	Durability  *bench.AuditResult `json:"durability,omitempty"`
	Consistency []ConsistencyPhase `json:"consistency"`
	Nemesis     *NemesisPhase      `json:"nemesis,omitempty"`
	LDFI        *LDFIPhase         `json:"ldfi,omitempty"`
	Skipped     []string           `json:"skipped,omitempty"` // phases not run, and why
	// Stopped says where an interrupted run stopped; "" for a run that
	// ran to its end.
	Stopped string `json:"stopped,omitempty"`
	// History holds the earlier runs with the same settings, oldest first,
	// for the report's trend (troop run fills it from its runs directory).
	History []RunSummary `json:"history,omitempty"`
	// Cleanup says what the run deleted of what it wrote on a cluster
	// troop did not start.
	Cleanup string `json:"cleanup,omitempty"`
}

// BenchPhase is one benchmark run at one level.
type BenchPhase struct {
	Level  string        `json:"level"`
	Result *bench.Result `json:"result"`
}

// FailurePhase is the mixed run during which one node was terminated.
type FailurePhase struct {
	BenchPhase
	Node string `json:"node"` // the node terminated
	// How says how it was terminated, and Back what brought it back ("":
	// kill -9, and the lab's supervisor, in reports that do not say).
	How    string  `json:"how,omitempty"`
	Back   string  `json:"back,omitempty"`
	Events []Event `json:"events"` // the chaos timeline, seconds into the phase
	// KillSecond and RecoveredSecond bound the fault, in seconds into the
	// phase; RecoverySeconds is the time from the kill until the lab's
	// replacement answered PING.
	KillSecond      float64 `json:"kill_second"`
	RecoveredSecond float64 `json:"recovered_second"`
	RecoverySeconds float64 `json:"recovery_seconds"`
	// During sums the seconds from the kill to the recovery.
	During Window `json:"during"`
	Before Window `json:"before"`
	After  Window `json:"after"`
	// ErrorFreeSecond is the first second after the kill from which no
	// request failed until the end of the phase; -1 if none.
	ErrorFreeSecond int `json:"error_free_second"`
}

// Window sums the per-second series over a span of seconds.
type Window struct {
	Seconds  int     `json:"seconds"`
	Ops      int64   `json:"ops"`
	Errors   int64   `json:"errors"`
	Fails    int64   `json:"fails"`
	MaxP99ms float64 `json:"max_p99_ms"`
}

// Event is one moment of the chaos timeline.
type Event struct {
	Second float64 `json:"second"`
	What   string  `json:"what"`
}

// ConsistencyPhase is the register workload at one level and its verdict,
// and the coordination checks' findings when they ran.
type ConsistencyPhase struct {
	Level        string          `json:"level"`
	Config       RegisterConfig  `json:"config"`
	Verdict      check.Verdict   `json:"verdict"`
	Coordination []check.Finding `json:"coordination,omitempty"`
}

// LDFIPhase is what lineage-driven fault injection found for each class.
type LDFIPhase struct {
	Classes []LDFIClass `json:"classes"`
}

// LDFIClass is one request class's search.
type LDFIClass struct {
	Name        string     `json:"name"`
	FailureSets [][]string `json:"failure_sets"`
	Replay      []string   `json:"replay"` // one command per failure set
	Experiments int        `json:"experiments"`
	Coverage    string     `json:"coverage"`
	Dir         string     `json:"dir"` // the search's report.json and scenario files
}

// Verdict says, in sentences, what held and what broke.
type Verdict struct {
	OK    bool     `json:"ok"`
	Held  []string `json:"held"`
	Broke []string `json:"broke"`
	Notes []string `json:"notes,omitempty"` // observations that are neither
}

// phaseNames name the suite's phases by number, for progress lines and
// for where an interrupted run stopped.
var phaseNames = [...]string{"starting the cluster", "baseline", "failure under load", "durability audit",
	"consistency", "nemesis", "lineage-driven fault injection", "verdict"}

// Run runs the suite. progress gets one line per phase. A phase that fails
// to run ends the run with an error; what a phase finds goes in the report.
// When ctx ends (the run is interrupted), Run stops the phase under way,
// undoes what it started, and returns the report of the phases that ran,
// with Stopped saying where it stopped, and ctx's error.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	if progress == nil {
		progress = io.Discard
	}
	rep := &Report{Kind: filekind.RunReport, Troop: cfg.Version, Seed: cfg.Seed, Config: cfg, Started: time.Now()}
	phase := 0
	step := func(n int, format string, args ...any) {
		phase = n
		fmt.Fprintf(progress, "[%d/7 %5.1fs] %s\n", n, time.Since(rep.Started).Seconds(), fmt.Sprintf(format, args...))
	}

	cl, err := openCluster(ctx, cfg, step)
	if err != nil {
		return nil, err
	}
	defer cl.close()
	rep.Cluster, rep.Store = cl.describe(), cl.store

	err = rep.runPhases(ctx, cfg, cl, step)
	if cl.own() {
		// A cluster troop did not start gets its keys back as it had
		// them, also after an interrupt (a second one stops this too).
		rep.Cleanup = cl.cleanup(context.WithoutCancel(ctx))
	}
	if err != nil {
		if ctx.Err() == nil {
			return nil, err
		}
		rep.Stopped = fmt.Sprintf("interrupted during phase %d of 7 (%s), %.0f s into the run: the report holds the phases that finished before it",
			phase, phaseNames[phase], time.Since(rep.Started).Seconds())
	}
	rep.Verdict = judge(rep)
	rep.Finished = time.Now()
	return rep, ctx.Err()
}

// runPhases runs the phases one after the other into rep, and returns the
// error of the first that fails to run.
func (rep *Report) runPhases(ctx context.Context, cfg Config, cl *cluster, step func(int, string, ...any)) error {
	for _, level := range cl.levels(cfg) {
		step(1, "baseline: mixed 80:20, %d B values, %s at %s", cfg.ValueSize, cfg.Baseline, level)
		res, _, err := cl.bench(ctx, cl.benchConfig(cfg, level, cfg.Baseline, 0, false))
		if err != nil {
			if res != nil && res.Stopped != "" {
				// Interrupted: what it measured is kept, marked as partial.
				rep.Baseline = append(rep.Baseline, BenchPhase{Level: level, Result: res})
			}
			return fmt.Errorf("baseline at %s: %w", level, err)
		}
		rep.Baseline = append(rep.Baseline, BenchPhase{Level: level, Result: res})
	}

	if cl.terminator == nil {
		rep.Skipped = append(rep.Skipped, "failure under load and durability audit: the cluster is not a lab troop supervises, and no chaos config (--chaos-config) names a backend, so nothing can terminate a node and have it replaced")
	} else {
		rate := cfg.FaultRate
		if rate <= 0 {
			rate = 0.6 * Throughput(rep.Baseline, cl.quorumLevel())
		}
		if rate <= 0 {
			rate = 1000 // no baseline at that level to take it from
		}
		step(2, "failure under load: %s at %.0f ops/s for %s, one node terminated at %s", cl.quorumLevel(), rate, cfg.Fault, cfg.KillAt)
		fp, model, err := cl.failurePhase(ctx, cfg, rate)
		if err != nil {
			return fmt.Errorf("failure under load: %w", err)
		}
		rep.Failure = fp
		step(3, "durability audit: reading back every key written during the fault at %s", cl.quorumLevel())
		audit, err := cl.audit(ctx, fp.Result.Config, model)
		if err != nil {
			return fmt.Errorf("durability audit: %w", err)
		}
		rep.Durability = &audit
	}

	for i, level := range cl.levels(cfg) {
		rc, coordinators := cl.registers(cfg, level, i)
		how := ""
		if rc.Delay > 0 {
			how += fmt.Sprintf(", delays of %s between nodes", rc.Delay)
		}
		if rc.Skew != 0 {
			how += fmt.Sprintf(", one clock %s ahead", rc.Skew)
		}
		step(4, "consistency: %d clients through %d node(s) on %d key(s) at a time at %s for %s%s",
			rc.Clients, len(coordinators), rc.Keys, level, rc.Duration, how)
		hist, err := RunRegisters(ctx, coordinators, rc)
		if err == nil && (level == "DC_QUORUM" || level == "DC_SAFE_QUORUM") {
			// Then the probes, which make the interleavings that a random
			// workload meets only by luck (probe.go).
			var probes []check.Op
			var names []string
			var why string
			probes, names, why, err = RunProbes(ctx, coordinators, level, rc.Prefix+":probe", rc.Dial, rc.Timeout)
			switch {
			case why != "":
				step(4, "consistency: no probes at %s: %s", level, why)
			case err == nil:
				step(4, "consistency: probes at %s, histories made to order: %s", level, strings.Join(names, ", "))
			}
			hist = append(hist, probes...)
		}
		cl.registerKeys = append(cl.registerKeys, keysOf(hist)...)
		if err == nil {
			err = ctx.Err() // a history cut off by an interrupt is not judged
		}
		if err != nil {
			return fmt.Errorf("consistency at %s: %w", level, err)
		}
		ph := ConsistencyPhase{Level: level, Config: rc, Verdict: check.CheckRegisters(hist, 10*time.Second)}
		if cfg.Coordination {
			var keys []string
			ph.Coordination, keys, err = runCoordination(ctx, nil, coordinators, rc, coordinationPrefix(rc.Level), coordinationChecks, cfg.CoordinationDuration, cfg.CoordinationDuration, func(format string, args ...any) { step(4, format, args...) })
			cl.registerKeys = append(cl.registerKeys, keys...)
			if err != nil {
				return fmt.Errorf("consistency at %s: %w", level, err)
			}
		}
		rep.Consistency = append(rep.Consistency, ph)
	}

	switch {
	case len(cfg.Nemesis.Faults) == 0:
		rep.Skipped = append(rep.Skipped, "nemesis: no faults configured")
	case cl.terminator == nil:
		rep.Skipped = append(rep.Skipped, "nemesis: the cluster is not a lab troop supervises, and no chaos config (--chaos-config) names a backend, so nothing can come between its nodes or set their clocks")
	default:
		ncfg := cfg
		var skips []string
		ncfg.Nemesis.Faults, skips = cl.nemesisFaults(cfg.Nemesis.Faults)
		rep.Skipped = append(rep.Skipped, skips...)
		if len(ncfg.Nemesis.Faults) == 0 {
			break
		}
		ph, err := cl.nemesis(ctx, ncfg, func(format string, args ...any) { step(5, format, args...) })
		if err != nil {
			return fmt.Errorf("nemesis: %w", err)
		}
		rep.Nemesis = ph
	}

	switch {
	case cfg.LDFIMaxFaults > 0 && !cl.troopNodes():
		rep.Skipped = append(rep.Skipped, fmt.Sprintf("lineage-driven fault injection: it needs troop nodes, whose requests carry failure scopes and report their lineage, and %s's do neither", cl.store.Name))
	case cfg.LDFIMaxFaults > 0:
		ld, err := cl.ldfiPhase(ctx, cfg, func(format string, args ...any) { step(6, format, args...) })
		if err != nil {
			return fmt.Errorf("lineage-driven fault injection: %w", err)
		}
		rep.LDFI = ld
	default:
		rep.Skipped = append(rep.Skipped, "lineage-driven fault injection: ldfi_max_faults is 0")
	}
	step(7, "verdict")
	return ctx.Err()
}

// Throughput is the requests per second of the phase at level, summed
// over its tasks; 0 when there is no such phase.
func Throughput(phases []BenchPhase, level string) float64 {
	for _, p := range phases {
		if p.Level == level {
			var ops float64
			for _, r := range p.Result.Totals {
				ops += r.ReqPerSec
			}
			return ops
		}
	}
	return 0
}

// cluster is the store under test, and what can act on it.
type cluster struct {
	kind       string // kindLab, kindTroop, kindDynomite or kindRESP
	store      Store  // what its nodes are, and their own levels
	source     string // where its topology came from, for the report
	nodes      []client.Node
	dial       client.Dial // how its clients connect: credentials, TLS
	lab        *lab.Lab    // the lab this run started, or nil
	labDir     string
	terminator chaos.Terminator // what terminates a node; nil: nothing can
	// group is the chaos group whose instances terminator lists, and
	// instances the instance of each node by name (nil for a lab, whose
	// instances are named after its nodes); watchdog are the backend's
	// flags for the chaos watchdog of the nemesis's faults.
	group     chaos.Group
	instances map[string]chaos.Instance
	watchdog  []string

	// What the run wrote on a cluster troop did not start, to delete at
	// its end.
	written      []writtenKeys
	registerKeys []string
}

func openCluster(ctx context.Context, cfg Config, step func(int, string, ...any)) (*cluster, error) {
	if c, err := openExisting(ctx, cfg); c != nil || err != nil {
		return c, err
	}
	if cfg.Lab != "" {
		nodes, err := LabNodes(cfg.Lab)
		if err != nil {
			return nil, err
		}
		c, err := labCluster(nodes, nil, cfg.Lab, labchaos.New(cfg.Lab))
		if err != nil {
			return nil, err
		}
		return c, c.readStore(ctx, cfg, "")
	}
	netns := !cfg.Loopback && os.Geteuid() == 0
	mode := "on loopback"
	if netns {
		mode = "each node in its own network namespace"
	}
	spec := lab.Spec{Dir: cfg.Dir, Troop: cfg.Troop, ReplaceAfter: cfg.ReplaceAfter,
		NodeCommand: cfg.NodeCommand, Netns: netns, ServeSocket: true} // the socket lets the nemesis's watchdogs reach the lab
	what := "troop nodes"
	if cfg.Engine == lab.EngineDynomite {
		// Dynomite's level is a setting of its nodes, not of the client.
		spec.Engine, spec.ReadConsistency = lab.EngineDynomite, cmp.Or(cfg.Level, "DC_QUORUM")
		spec.WriteConsistency = spec.ReadConsistency
		what = "Dynomite nodes at " + spec.ReadConsistency
	}
	step(0, "starting a lab cluster: 1 datacenter x 3 racks x 1 node, %s, %s, in %s", what, mode, cfg.Dir)
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, err
	}
	l, err := lab.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := lab.WaitMeshed(ctx, l.Nodes(), 10*time.Second); err != nil {
		l.Stop()
		return nil, err
	}
	nodes, err := LabNodes(cfg.Dir)
	if err != nil {
		l.Stop()
		return nil, err
	}
	c, err := labCluster(nodes, l, cfg.Dir, labchaos.NewWith(labchaos.FromLab(l)))
	if err == nil {
		err = c.readStore(ctx, cfg, "")
	}
	if err != nil {
		l.Stop()
		return nil, err
	}
	return c, nil
}

// labCluster is the lab in dir, l when this run started it, whose nodes
// the lab's chaos backend t terminates and its supervisor replaces.
func labCluster(nodes []client.Node, l *lab.Lab, dir string, t *labchaos.Terminator) (*cluster, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return &cluster{kind: kindLab, nodes: nodes, lab: l, labDir: dir, terminator: t,
		group: chaos.Group{Name: nemesisGroup, Backend: chaos.Lab}, watchdog: []string{"--lab", abs}}, nil
}

func (c *cluster) close() {
	if c.lab != nil {
		c.lab.Stop()
	}
}

func (c *cluster) describe() string {
	switch c.kind {
	case kindRESP:
		return fmt.Sprintf("Redis-protocol endpoints %s, not started by troop", c.source)
	case kindTroop, kindDynomite:
		return fmt.Sprintf("%s cluster of %s: %d nodes, not started by troop", c.kind, c.source, len(c.nodes))
	}
	return fmt.Sprintf("lab %s: %d nodes", filepath.Clean(c.labDir), len(c.nodes))
}

// requestTimeout is the workloads' default timeout per request: longer
// than a lab node takes to answer, so that a client retries only a request
// the node has given up on. A shorter one retries writes the node is still
// working on, which may then land after later writes, and outrank them.
const requestTimeout = 2*lab.NodeTimeout + time.Second

// target is a Dyno-style client per rack at level, waiting timeout for
// each answer and then failing over across racks once, as a Dyno client
// configured for availability does.
// Plain endpoints get two connections each, the client's keys sharded
// over them by hash, as troop bench --target does. Only troop nodes take
// a level from the client.
func (c *cluster) target(level string, timeout time.Duration) (bench.Target, error) {
	if c.kind == kindRESP {
		return bench.NewRESPTarget(c.addrs(), 2, timeout, c.dial)
	}
	if !c.troopNodes() || level == OwnLevel {
		level = ""
	}
	return bench.NewClusterTarget(c.nodes, "", client.Options{ConnsPerNode: 2, Timeout: timeout,
		ReadLevel: level, WriteLevel: level, Retry: client.Retry{Attempts: 1, CrossRack: true}, Dial: c.dial})
}

// benchConfig is the mixed job at level for d; rate 0 is closed loop.
// contended sends half the operations to cfg.ContendedKeys keys.
func benchConfig(cfg Config, level string, d time.Duration, rate float64, contended bool) bench.Config {
	bc := bench.DefaultConfig()
	bc.Job, bc.Keys, bc.ValueSize = bench.JobMixed, cfg.Keys, bench.Range{Min: cfg.ValueSize, Max: cfg.ValueSize}
	if contended && cfg.ContendedKeys > 0 && cfg.ContendedKeys < cfg.Keys {
		bc.Distribution = bench.Hotspot
		bc.Hotspot = bench.HotspotSpec{KeyFraction: float64(cfg.ContendedKeys) / float64(cfg.Keys), OpFraction: 0.5}
	}
	bc.Readers, bc.Writers = cfg.ReadersPerNode, cfg.WritersPerNode
	bc.Duration, bc.Rate, bc.Seed, bc.Consistency = d, rate, cfg.Seed, level
	if level == OwnLevel {
		bc.Consistency = "" // the cluster's own, not set by the client
	}
	bc.Timeout, bc.Version, bc.Progress = cfg.RequestTimeout, cfg.Version, cfg.Progress
	if level == "DC_ONE" {
		bc.Staleness = 1 // DC_ONE reads may come from a replica an acknowledged write has not reached
	}
	return bc
}

// bench runs bc against the cluster, through a client at its level, and
// returns the result and the model of what it wrote.
func (c *cluster) bench(ctx context.Context, bc bench.Config) (*bench.Result, *bench.Model, error) {
	t, err := c.target(bc.Consistency, bc.Timeout)
	if err != nil {
		return nil, nil, err
	}
	defer t.Close()
	model := bench.NewModel(bc.Staleness)
	res, err := bench.RunModel(ctx, bc, t, nil, model)
	if c.own() {
		c.written = append(c.written, writtenKeys{bc, model})
	}
	return res, model, err
}

// FailureVictim is which of n nodes, in their order, the failure phase of
// a run with seed kills.
func FailureVictim(seed uint64, n int) int { return rand.New(rand.NewPCG(seed, 2)).IntN(n) }

func (c *cluster) failurePhase(ctx context.Context, cfg Config, rate float64) (*FailurePhase, *bench.Model, error) {
	insts, err := c.victims(ctx)
	if err != nil {
		return nil, nil, err
	}
	victim := insts[FailureVictim(cfg.Seed, len(insts))]
	fp := &FailurePhase{Node: c.nodeOf(victim), ErrorFreeSecond: -1, How: c.killHow(), Back: c.backHow()}
	recovery := c.terminator.(chaos.RecoveryWaiter) // every backend of a cluster has one (NewChaos)

	type chaosOutcome struct {
		events          []Event
		kill, recovered float64
		err             error
	}
	start := time.Now()
	chaosDone := make(chan chaosOutcome, 1)
	go func() {
		var out chaosOutcome
		defer func() { chaosDone <- out }()
		select {
		case <-ctx.Done():
			out.err = ctx.Err()
			return
		case <-time.After(cfg.KillAt):
		}
		at := time.Now()
		out.kill = at.Sub(start).Seconds()
		if err := c.terminator.Act(ctx, victim, chaos.Action{Kind: chaos.Terminate}); err != nil {
			out.err = err
			return
		}
		out.events = append(out.events, Event{out.kill, fmt.Sprintf("chaos monkey terminates %s (%s)", fp.Node, fp.How)})
		rctx, cancel := context.WithTimeout(ctx, cfg.ReplaceAfter+time.Minute)
		defer cancel()
		if _, err := recovery.AwaitRecovery(rctx, victim, at); err != nil {
			out.err = err
			return
		}
		if c.kind == kindLab {
			out.recovered = time.Since(start).Seconds()
			out.events = append(out.events, Event{out.recovered, fmt.Sprintf("lab replaced %s after its %s delay; it answers PING", victim.ID, cfg.ReplaceAfter)})
			return
		}
		if err := c.awaitPing(rctx, victim); err != nil {
			out.err = err
			return
		}
		out.recovered = time.Since(start).Seconds()
		out.events = append(out.events, Event{out.recovered, fmt.Sprintf("%s is back (%s) and answers PING", fp.Node, fp.Back)})
	}()
	level := c.quorumLevel()
	res, model, err := c.bench(ctx, c.benchConfig(cfg, level, cfg.Fault, rate, true))
	co := <-chaosDone
	if err != nil {
		return nil, nil, err
	}
	if co.err != nil {
		return nil, nil, co.err
	}
	fp.Level, fp.Result = level, res
	fp.Events = co.events
	fp.KillSecond, fp.RecoveredSecond = co.kill, co.recovered
	fp.RecoverySeconds = co.recovered - co.kill
	series := MergeSeries(res)
	k, r := int(co.kill), int(co.recovered)
	fp.Before = window(series, 0, k)
	fp.During = window(series, k, r+1)
	fp.After = window(series, r+1, len(series))
	for s := len(series) - 1; s >= k; s-- {
		if series[s].Errors > 0 || series[s].Fails > 0 {
			break
		}
		fp.ErrorFreeSecond = s
	}
	return fp, model, nil
}

// MergeSeries adds up the tasks' per-second points of a one-iteration run.
// A last second the run did not fill is left out: its low count would read
// as a drop in throughput.
func MergeSeries(res *bench.Result) []bench.Point {
	var out []bench.Point
	for _, row := range res.Rows {
		for _, p := range row.Series {
			if float64(p.T+1) > row.Seconds+0.05 {
				continue
			}
			for len(out) <= p.T {
				out = append(out, bench.Point{T: len(out)})
			}
			o := &out[p.T]
			o.Ops += p.Ops
			o.Errors += p.Errors
			o.Fails += p.Fails
			// The merged p50 and p99 are the worst task's: a reader of the
			// report wants to see the slowest operation class's tail.
			o.P50 = max(o.P50, p.P50)
			o.P99 = max(o.P99, p.P99)
		}
	}
	return out
}

func window(series []bench.Point, from, to int) Window {
	w := Window{}
	for s := max(from, 0); s < min(to, len(series)); s++ {
		p := series[s]
		w.Seconds++
		w.Ops += p.Ops
		w.Errors += p.Errors
		w.Fails += p.Fails
		w.MaxP99ms = max(w.MaxP99ms, p.P99)
	}
	return w
}

// audit reads back what a run of bc wrote, through a fresh client at
// DC_QUORUM (or the cluster's own level), against its model.
func (c *cluster) audit(ctx context.Context, bc bench.Config, model *bench.Model) (bench.AuditResult, error) {
	t, err := c.target(c.quorumLevel(), bc.Timeout)
	if err != nil {
		return bench.AuditResult{}, err
	}
	defer t.Close()
	return bench.Audit(ctx, t, model, bc)
}
