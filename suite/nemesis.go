package suite

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/bench"
	"github.com/troop-lab/troop/chaos"
	"github.com/troop-lab/troop/chaos/fault"
	"github.com/troop-lab/troop/chaos/lease"
	"github.com/troop-lab/troop/chaos/monkey"
	"github.com/troop-lab/troop/chaos/records"
	"github.com/troop-lab/troop/check"
	"github.com/troop-lab/troop/client"
	"github.com/troop-lab/troop/lab"
	"github.com/troop-lab/troop/node"
	"github.com/troop-lab/troop/resp"
)

// NemesisConfig is the nemesis phase: one fault at a time from a seeded
// schedule of network, clock and process faults, while the register workload and
// a write workload run at each level, then the heal, and the checks.
type NemesisConfig struct {
	// Faults are the faults to inject, in order, one round each (per
	// level): partition (its mode drawn from the seed), partition:MODE
	// (isolate, halves, one-way or bridge: two nodes cut from each other,
	// the third reaching both), loss, delay, clock-skew (drawn from the
	// seed), kill-decider (kill -9 of the deciding node of the round's
	// keys), or none (the workloads alone). Empty skips the phase.
	Faults []string `json:"faults" yaml:"faults"`
	// Levels are the levels each fault runs at, one after the other; empty:
	// the run's levels.
	Levels []string `json:"levels,omitempty" yaml:"levels"`
	// Fault is how long each fault lasts; the workloads run Lead before it
	// and Lead after its end.
	Fault time.Duration `json:"fault" yaml:"fault"`
	Lead  time.Duration `json:"lead" yaml:"lead"`
	// Settle bounds the wait for the replicas to agree after the heal: a
	// key whose replicas still differ then is a finding.
	Settle time.Duration `json:"settle" yaml:"settle"`
}

// DefaultNemesisConfig: the four kinds, 8 s each.
func DefaultNemesisConfig() NemesisConfig {
	return NemesisConfig{Faults: []string{"partition", "loss", "delay", "clock-skew"},
		Fault: 8 * time.Second, Lead: time.Second, Settle: 10 * time.Second}
}

// NemesisPhase is what the nemesis found.
type NemesisPhase struct {
	// Network says whether the lab gives each node its own address: without
	// it, only the clock faults run (NetworkNote says why).
	Network     bool   `json:"network"`
	NetworkNote string `json:"network_note,omitempty"`
	// ReplicasNote says why the replicas were not compared after each
	// heal; "" when they were.
	ReplicasNote string          `json:"replicas_note,omitempty"`
	Rounds       []NemesisRound  `json:"rounds"`
	Events       []Event         `json:"events"` // seconds into the phase
	Config       NemesisConfig   `json:"config"`
	Register     RegisterConfig  `json:"register"` // the register workload of every round, but its level and keys
	Writes       NemesisWorkload `json:"writes"`
}

// NemesisWorkload is the write workload of each round and level.
type NemesisWorkload struct {
	Keys           uint64 `json:"keys"`
	ContendedKeys  uint64 `json:"contended_keys"` // get half of the operations
	ReadersPerNode int    `json:"readers_per_node"`
	WritersPerNode int    `json:"writers_per_node"`
}

// NemesisRound is one fault, and what the workloads at one level met under
// it: a fault runs once per level, on the same node, with the level's
// workloads alone, so that each has the machine to itself.
type NemesisRound struct {
	Fault string `json:"fault"` // the action, e.g. "partition isolate 8s"
	Node  string `json:"node"`  // the instance it was aimed at
	Level string `json:"level"`
	// Start, End and Healed are seconds into the phase: the fault began,
	// its lease ended, and the group was whole again (the fault gone and
	// every failure detector holding every node up).
	Start     float64           `json:"start"`
	End       float64           `json:"end"`
	Healed    float64           `json:"healed"`
	Error     string            `json:"error,omitempty"` // the fault could not be put in place
	Registers check.Verdict     `json:"registers"`
	Writes    *bench.Result     `json:"writes"`
	Audit     bench.AuditResult `json:"audit"`
	// Coordination are the findings of the round's coordination workloads
	// (Config.Coordination), which run beside the others.
	Coordination []check.Finding `json:"coordination,omitempty"`
	// Converged is the seconds from the heal until the replicas of every
	// key the round wrote agreed; Differ counts the keys whose replicas
	// still differed Settle after the heal.
	Converged float64  `json:"converged"`
	Differ    int      `json:"replicas_differ"`
	Samples   []string `json:"differ_samples,omitempty"`
}

// nemesisWrites is the write workload's shape: workers enough to keep
// its rate while some of them wait out a node's timeout.
var nemesisWrites = NemesisWorkload{Keys: 1000, ContendedKeys: 10, ReadersPerNode: 100, WritersPerNode: 100}

// nemesisWriteRate is the write workload's rate, in operations a second:
// open loop, so that the register workload keeps the CPU it needs to meet
// writes within a millisecond.
const nemesisWriteRate = 300

// The nemesis's faults besides the chaos kinds it injects as they are.
const (
	// nemesisNone is a round without a fault: the workloads alone, the
	// other rounds' baseline on the same cluster.
	nemesisNone = "none"
	// nemesisKillDecider is kill -9 (the chaos kind terminate) of the
	// deciding node of the round's keys (decidingNode); the backend's
	// supervisor brings it back.
	nemesisKillDecider = "kill-decider"
)

// nemesisFaultNames says what a nemesis fault may be called, for errors.
const nemesisFaultNames = "none, partition (its mode drawn from the seed), partition:MODE (MODE isolate, halves, one-way or bridge), loss, delay, clock-skew or kill-decider"

// nemesisAction is the fault called name, its parameters drawn from r where
// the name leaves them open. The action of none is the zero Action.
func nemesisAction(name string, d time.Duration, r *rand.Rand) (chaos.Action, error) {
	params := map[string]string{}
	kind, mode, moded := strings.Cut(name, ":")
	switch {
	case moded && chaos.Kind(kind) != chaos.Partition:
		return chaos.Action{}, fmt.Errorf("nemesis: %q: only a partition takes a mode (want %s)", name, nemesisFaultNames)
	case kind == nemesisNone:
		return chaos.Action{}, nil
	case kind == nemesisKillDecider:
		return chaos.NewAction(chaos.Terminate, 0, nil)
	}
	switch chaos.Kind(kind) {
	case chaos.Partition:
		if !moded {
			mode = string(chaos.PartitionModes[r.IntN(len(chaos.PartitionModes))])
		}
		params["partition"] = mode
	case chaos.Loss:
		params["percent"] = "20"
	case chaos.Delay:
		params["delay"], params["jitter"] = "50ms", "10ms"
	case chaos.ClockSkew:
		// A jump of seconds or of an hour either way, or a clock that runs
		// half again as fast or half as fast: the DC_QUORUM promise claims
		// skew of any size.
		switch r.IntN(3) {
		case 0:
			params["offset"] = []string{"2s", "-2s"}[r.IntN(2)]
		case 1:
			params["offset"] = []string{"1h", "-1h"}[r.IntN(2)]
		default:
			params["rate"] = []string{"0.5", "-0.5"}[r.IntN(2)]
		}
	default:
		return chaos.Action{}, fmt.Errorf("nemesis: %q is not a fault of the nemesis (want %s)", name, nemesisFaultNames)
	}
	return chaos.NewAction(chaos.Kind(kind), d, params)
}

// nemesisFaultName names a round's fault in the report.
func nemesisFaultName(a chaos.Action) string {
	switch a.Kind {
	case "":
		return nemesisNone
	case chaos.Terminate:
		return nemesisKillDecider
	}
	return a.String()
}

// nemesisFaults are the faults the cluster's chaos backend can put in
// place, and a line for the report's Skipped for each it cannot: the lab's
// and the Docker backend's lease them all; the Kubernetes backend only
// deletes pods, in the failure phase. A clock is skewed through a troop
// node's admin API, which other stores' nodes have not, and only troop's
// nodes have a deciding node.
func (c *cluster) nemesisFaults(names []string) (can, skipped []string) {
	_, leases := c.terminator.(chaos.Leaser)
	for _, name := range names {
		kind, _, _ := strings.Cut(name, ":")
		switch {
		case kind == nemesisNone:
		case !leases:
			skipped = append(skipped, fmt.Sprintf("nemesis, %s: the %s backend of chaos group %s cannot put it in place: its only faults are pod deletions, which the failure phase makes (network and clock faults need the lab's or the Docker backend, which enter the nodes' network namespaces)",
				name, c.group.Backend, c.group.Name))
			continue
		case chaos.Kind(kind) == chaos.ClockSkew && !c.troopNodes():
			skipped = append(skipped, fmt.Sprintf("nemesis, %s: troop skews a node's clock through a troop node's admin API, which %s's nodes have not", name, c.store.Name))
			continue
		case kind == nemesisKillDecider && !c.troopNodes():
			skipped = append(skipped, fmt.Sprintf("nemesis, %s: a key's deciding node is troop's (the first rack's replica, which proposes its changes by consensus); %s's nodes have none", name, c.store.Name))
			continue
		}
		can = append(can, name)
	}
	return can, skipped
}

// nemesis runs the nemesis phase on the cluster, through its chaos backend.
func (c *cluster) nemesis(ctx context.Context, cfg Config, step func(string, ...any)) (*NemesisPhase, error) {
	nc := cfg.Nemesis
	ph := &NemesisPhase{Network: true, Config: nc, Writes: nemesisWrites}
	if c.kind == kindLab {
		st, err := c.status(ctx)
		if err != nil {
			return nil, err
		}
		ph.Network = st.Network != nil
	} else {
		ph.ReplicasNote = fmt.Sprintf("the replicas were not compared after each heal: troop reads them from each node's redis-server, which only a lab's nodes let it reach (the %s backend's are inside its instances)", c.group.Backend)
	}
	if !ph.Network {
		ph.NetworkNote = "the lab's nodes share one loopback, so nothing can come between them: only the clock faults ran (troop run gives each node its own network namespace when run as root, unless --loopback, or a --lab not started with --netns, says otherwise)"
	}
	m, closeMonkey, err := c.newMonkey(cfg)
	if err != nil {
		return nil, err
	}
	defer closeMonkey()
	// Interrupted: undo the fault in place at once, not at its lease's
	// end, and before the workloads' requests in flight time out (the
	// fault holds them up). Every lease in the run's store is this run's.
	// The sweep runs again at the end, for a fault put in place while the
	// first ran.
	var undoing sync.Mutex // one sweep at a time
	undo := func() {
		undoing.Lock()
		defer undoing.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := m.Sweep(rctx, true); err != nil {
			step("nemesis: undoing the fault in place: %v (its watchdog undoes it at the lease's end)", err)
		}
	}
	stopUndo := context.AfterFunc(ctx, undo)
	defer func() {
		if !stopUndo() { // it ran, or runs now: after it, once more
			undo()
		}
	}()
	r := rand.New(rand.NewPCG(cfg.Seed, 0x6e656d65736973)) // "nemesis"
	start := time.Now()
	for i, kind := range nc.Faults {
		a, err := nemesisAction(kind, nc.Fault, r)
		if err != nil {
			return nil, err
		}
		if fault.Network(a.Kind) && !ph.Network {
			continue
		}
		pick := r.Uint64() // the same node at every level
		for _, level := range c.nemesisLevels(cfg) {
			step("nemesis: %s while the workloads run at %s", nemesisFaultName(a), level)
			round, events, err := c.nemesisRound(ctx, cfg, m, a, pick, level, i, start, step)
			ph.Events = append(ph.Events, events...)
			if err != nil {
				return nil, err
			}
			ph.Rounds = append(ph.Rounds, round)
		}
	}
	ph.Register = nemesisRegisters(cfg, "", 0)
	return ph, nil
}

// nemesisLevels are the levels each fault runs at: the cluster's own where
// the client cannot choose one.
func (c *cluster) nemesisLevels(cfg Config) []string {
	if !c.troopNodes() {
		return []string{c.ownLevel()}
	}
	if len(cfg.Nemesis.Levels) > 0 {
		return cfg.Nemesis.Levels
	}
	return cfg.Levels
}

// newMonkey builds the chaos monkey that injects the nemesis's faults
// through the cluster's chaos backend: one group of every node (the lab's,
// or the chaos config's), its records and leases under the run's output,
// every fault leased and watched by a process of its own, so that it is
// undone at its end even if this run dies.
func (c *cluster) newMonkey(cfg Config) (*monkey.Monkey, func(), error) {
	dir := filepath.Join(cfg.Out, "nemesis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	rec, err := records.Open(filepath.Join(dir, "records.db"), 0)
	if err != nil {
		return nil, nil, err
	}
	leases, err := lease.Open(filepath.Join(dir, "leases"))
	if err != nil {
		rec.Close()
		return nil, nil, err
	}
	troop, err := troopBinary(cfg)
	if err != nil {
		rec.Close()
		return nil, nil, err
	}
	g := c.group
	g.Enabled = true
	if g.Probability == 0 && g.MeanTimeBetweenKills == 0 {
		g.Probability = 1
	}
	m := &monkey.Monkey{
		Config:  &chaos.Config{Groups: []chaos.Group{g}},
		Records: rec, Leases: leases,
		Backend: func(chaos.Backend) (chaos.Terminator, error) { return c.terminator, nil },
		StartWatchdog: func(id string) error {
			_, err := lease.Spawn(append([]string{troop, "chaos", "watchdog", "--leases", leases.Dir(), "--id", id}, c.watchdog...),
				filepath.Join(leases.Dir(), id+".log"))
			return err
		},
		RecoverWithin: time.Minute,
	}
	return m, func() { rec.Close() }, nil
}

const nemesisGroup = "store"

// troopBinary is the troop the run's lab runs, whose chaos watchdog
// reverts the nemesis's leases.
func troopBinary(cfg Config) (string, error) {
	if cfg.Troop != "" {
		return cfg.Troop, nil
	}
	return os.Executable()
}

// nemesisRegisters is the register workload of a round at level: the
// contended workload, without its own delays and skew (the fault is the
// adversary now).
func nemesisRegisters(cfg Config, level string, round int) RegisterConfig {
	rc := cfg.Register
	rc.Level, rc.Seed = level, cfg.Seed+uint64(round)
	rc.Duration = cfg.Nemesis.Fault + 2*cfg.Nemesis.Lead
	rc.Skew = 0 // the clock-skew fault sets clocks now; the delays stay: they make a fault's anomalies likelier
	rc.Prefix = fmt.Sprintf("troop:nemesis:%d:%d:%s", time.Now().UnixNano(), round, level)
	return rc
}

// errWorkloadsDone ends a round's workloads Lead after its fault's end.
var errWorkloadsDone = errors.New("the round's workloads are done")

// placingBound bounds how long a fault may take to be put in place, on top
// of the workloads' own time: the bound of their durations.
const placingBound = time.Minute

// nemesisRound runs one fault at one level: the level's register and
// write workloads, the fault after Lead, the wait for the heal, then the
// checks. The workloads end Lead after the fault's end, however long the
// fault took to put in place (seconds, on a busy machine): a fault that
// came late still meets them for its whole length. A kill's end is its
// node's return (the backend's supervisor starts it again): the workloads
// run through the restart. A round of none runs the workloads for as long
// as a fault's round, with nothing in their way.
func (c *cluster) nemesisRound(ctx context.Context, cfg Config, m *monkey.Monkey, a chaos.Action, pick uint64, level string, i int, phaseStart time.Time, step func(string, ...any)) (NemesisRound, []Event, error) {
	nc := cfg.Nemesis
	round := NemesisRound{Fault: nemesisFaultName(a), Level: level}
	since := func() float64 { return time.Since(phaseStart).Seconds() }
	regs, coordinators := c.registerNodes(nemesisRegisters(cfg, level, i))
	bc := nemesisBench(cfg, level, fmt.Sprintf("nemesis:%d:%d:%s:", time.Now().UnixNano(), i, level))
	regs.Duration += placingBound
	bc.Duration += placingBound
	var checks []coordinationCheck
	prefix := coordinationPrefix(level)
	if cfg.Coordination {
		checks = nemesisCoordination()
	}
	// A kill is aimed at the deciding node of the round's keys; a bridge
	// anywhere else, so that it cuts the deciding node from a node that
	// then takes its own replica for the deciding one: two deciders.
	if a.Kind == chaos.Terminate || a.Kind == chaos.Partition && a.Partition == chaos.Bridge && c.troopNodes() {
		decider, err := decidingNode(coordinators, roundKeys(regs, prefix, checks))
		var at, n uint64
		if err == nil {
			at, n, err = c.pickOf(ctx, decider)
		}
		switch {
		case err != nil && a.Kind == chaos.Terminate:
			return round, nil, fmt.Errorf("%s at %s: %w", round.Fault, level, err)
		case err != nil: // the bridge where the seed puts it
		case a.Kind == chaos.Terminate:
			pick = at
		case pick%n == at:
			pick = at + 1
		}
	}
	wctx, endWorkloads := context.WithCancelCause(ctx)
	defer endWorkloads(nil)
	var (
		hist          []check.Op
		model         *bench.Model
		regErr, wrErr error
		wg            sync.WaitGroup
	)
	wg.Add(2)
	start := time.Now()
	// The coordination workloads, each at once beside the others, end with
	// them; their final reads then wait for the heal and the replicas, for
	// as long as the workloads may have run and Settle.
	coordination := make([][]check.Finding, len(checks))
	coordKeys := make([][]string, len(checks))
	coordErrs := make([]error, len(checks))
	for k, cc := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			coordination[k], coordKeys[k], coordErrs[k] = runCoordination(ctx, wctx, coordinators, regs, prefix, []coordinationCheck{cc}, regs.Duration, regs.Duration+nc.Settle, step)
		}()
	}
	go func() {
		defer wg.Done()
		hist, regErr = RunRegisters(wctx, coordinators, regs)
	}()
	go func() {
		defer wg.Done()
		round.Writes, model, wrErr = c.bench(wctx, bc)
	}()
	var events []Event
	var term chaos.Termination
	var ferr, healErr error
	var healed time.Time // the fault gone, its node back
	end := start.Add(a.Duration + 2*nc.Lead)
	switch {
	case a.Kind == "":
		end = start.Add(nc.Fault + 2*nc.Lead)
	default:
		term, ferr = c.nemesisFault(ctx, m, a, pick, nc.Lead)
	}
	switch {
	case ferr != nil || a.Kind == "":
	case a.Kind.Temporary():
		end = term.Executed.Add(a.Duration + nc.Lead)
	default:
		// Over when its node is back: the workloads go on through the
		// restart, and Lead after.
		if term, healErr = c.nemesisHeal(ctx, m, term); healErr == nil {
			healed = time.Now()
		}
		end = time.Now().Add(nc.Lead)
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(end)):
		endWorkloads(errWorkloadsDone)
	}
	round.Start = since()
	switch {
	case ferr != nil:
		round.Error = ferr.Error()
		events = append(events, Event{round.Start, fmt.Sprintf("the nemesis could not put %s in place: %v", round.Fault, ferr)})
	case a.Kind == "":
		round.Start = start.Sub(phaseStart).Seconds()
		round.End = round.Start + (nc.Fault + 2*nc.Lead).Seconds()
		events = append(events, Event{round.Start, fmt.Sprintf("nemesis: no fault, at %s", level)})
	default:
		// Executed is when the fault was whole, which its lease counts
		// from (a delay's queue takes a moment to start).
		round.Start = term.Executed.Sub(phaseStart).Seconds()
		round.Node = c.nodeOf(term.Instance)
		round.End = round.Start + a.Duration.Seconds()
		what := fmt.Sprintf("nemesis: %s of %s, at %s", a, round.Node, level)
		if a.Kind == chaos.Terminate {
			round.End = max(round.Start, healed.Sub(phaseStart).Seconds())
			what = fmt.Sprintf("nemesis: kill -9 of %s, the deciding node of the round's keys, at %s", round.Node, level)
		}
		events = append(events, Event{round.Start, what})
	}
	wg.Wait()
	if ctx.Err() == nil && errors.Is(context.Cause(wctx), errWorkloadsDone) {
		// Their planned end, not an interrupt.
		if errors.Is(wrErr, context.Canceled) {
			wrErr = nil
		}
		if round.Writes != nil {
			round.Writes.Stopped, round.Writes.Config.Duration = "", time.Since(start).Round(time.Millisecond)
		}
	}
	for k := range coordination {
		round.Coordination = append(round.Coordination, coordination[k]...)
		c.registerKeys = append(c.registerKeys, coordKeys[k]...)
	}
	if err := errors.Join(regErr, wrErr, errors.Join(coordErrs...)); err != nil {
		return round, events, fmt.Errorf("%s at %s: %w", round.Fault, level, err)
	}
	if ferr == nil && a.Kind != "" {
		if healErr == nil && healed.IsZero() {
			if term, healErr = c.nemesisHeal(ctx, m, term); healErr == nil {
				healed = time.Now()
			}
		}
		if healErr != nil {
			return round, events, fmt.Errorf("%s of %s did not heal: %w", round.Fault, round.Node, healErr)
		}
		round.Healed = healed.Sub(phaseStart).Seconds()
		what := fmt.Sprintf("healed: %s gone, every node holds every other up", a.Kind)
		if a.Kind == chaos.Terminate {
			what = fmt.Sprintf("healed: %s runs again and answers", round.Node)
		}
		events = append(events, Event{round.Healed, what})
	}
	if c.kind == kindLab { // the redis-servers of other clusters are out of reach (ReplicasNote)
		keys := keysOf(hist)
		for _, k := range model.Written() {
			keys = append(keys, string(bc.Key(nil, k)))
		}
		differ, err := c.awaitConvergence(ctx, keys, nc.Settle)
		if err != nil {
			return round, events, err
		}
		round.Converged = since() - max(round.Healed, round.End)
		round.Differ, round.Samples = len(differ), differ[:min(len(differ), 10)]
	}
	c.registerKeys = append(c.registerKeys, keysOf(hist)...)
	round.Registers = check.CheckRegisters(hist, 10*time.Second)
	var err error
	if round.Audit, err = c.audit(ctx, bc, model); err != nil {
		return round, events, fmt.Errorf("audit after %s at %s: %w", round.Fault, level, err)
	}
	return round, events, nil
}

// nemesisHeal waits until the fault of term is gone and its node is back:
// for a leased fault, its lease over and every failure detector holding
// every node up; for a kill, the node running again (a new process) and
// answering.
func (c *cluster) nemesisHeal(ctx context.Context, m *monkey.Monkey, term chaos.Termination) (chaos.Termination, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Until(term.Executed.Add(term.Action.Duration))+time.Minute)
	defer cancel()
	return m.AwaitRecovery(rctx, term)
}

// roundKeys are keys of a nemesis round: its register workload's, and the
// coordination workloads' of checks under prefix (the lock's first).
func roundKeys(regs RegisterConfig, prefix string, checks []coordinationCheck) []string {
	var keys []string
	for k := range regs.Keys {
		keys = append(keys, regs.Prefix+":"+strconv.Itoa(k))
	}
	for _, cc := range checks {
		keys = append(keys, cc.prefix(prefix)+":"+cc.key)
	}
	return keys
}

// decidingNode is the node that decides the most of keys: a key's deciding
// node is its replica in the first rack of the first datacenter, which the
// nodes send its changes by consensus to while they hold it up (see
// node/consensus.go); a tie goes to the first by name. In a lab of one node
// per rack, the first rack's node decides every key.
func decidingNode(nodes []client.Node, keys []string) (string, error) {
	if len(nodes) == 0 || len(keys) == 0 {
		return "", errors.New("no nodes or no keys to find the deciding node of")
	}
	decides := map[string]int{}
	for _, k := range keys {
		reps, err := client.Replicas(nodes, nodes[0].DC, []byte(k))
		if err != nil {
			return "", err
		}
		decides[reps[0].Name]++
	}
	names := slices.Sorted(maps.Keys(decides))
	best := names[0]
	for _, n := range names {
		if decides[n] > decides[best] {
			best = n
		}
	}
	return best, nil
}

// pickOf is the pick that has the monkey aim at node: the index of its
// instance among the group's n live instances outside its exceptions, by
// ID, as chaos.PlannedKill.Choose orders them.
func (c *cluster) pickOf(ctx context.Context, node string) (pick, n uint64, err error) {
	id := node
	if c.instances != nil {
		inst, ok := c.instances[node]
		if !ok {
			return 0, 0, fmt.Errorf("node %s has no instance in chaos group %s", node, c.group.Name)
		}
		id = inst.ID
	}
	live, err := c.terminator.Instances(ctx, &c.group)
	if err != nil {
		return 0, 0, err
	}
	var ids []string
	for _, in := range live {
		if !c.group.Excepted(in) {
			ids = append(ids, in.ID)
		}
	}
	slices.Sort(ids)
	i := slices.Index(ids, id)
	if i < 0 {
		return 0, 0, fmt.Errorf("node %s is not among the running instances of chaos group %s outside its exceptions (%s)", node, c.group.Name, strings.Join(ids, ", "))
	}
	return uint64(i), uint64(len(ids)), nil
}

// nemesisFault waits lead, then has the monkey inject a on the node of
// the lab that pick chooses, under a lease.
func (c *cluster) nemesisFault(ctx context.Context, m *monkey.Monkey, a chaos.Action, pick uint64, lead time.Duration) (chaos.Termination, error) {
	select {
	case <-ctx.Done():
		return chaos.Termination{}, ctx.Err()
	case <-time.After(lead):
	}
	term, err := m.Execute(ctx, chaos.PlannedKill{Group: c.group.Name, Action: a, Pick: pick}, monkey.Forced)
	if err == nil && term.Outcome != chaos.Executed {
		err = fmt.Errorf("%s: %s", term.Outcome, term.Reason)
	}
	return term, err
}

// nemesisBench is the write workload of a round at level, its keys under
// prefix: troop run's mixed job, half reads, on fewer keys, half of the
// operations on a few of them.
func nemesisBench(cfg Config, level, prefix string) bench.Config {
	w := nemesisWrites
	nc := cfg
	nc.Keys, nc.ContendedKeys, nc.ValueSize = w.Keys, w.ContendedKeys, 256
	nc.ReadersPerNode, nc.WritersPerNode = w.ReadersPerNode, w.WritersPerNode
	bc := benchConfig(nc, level, cfg.Nemesis.Fault+2*cfg.Nemesis.Lead, nemesisWriteRate, true)
	bc.KeyPrefix, bc.Ratio, bc.Progress = prefix, bench.Ratio{Get: 50, Set: 50}, nil
	return bc
}

// keysOf lists the keys of a history.
func keysOf(hist []check.Op) []string {
	var out []string
	for _, o := range hist {
		if !slices.Contains(out, o.Key) {
			out = append(out, o.Key)
		}
	}
	return out
}

// awaitConvergence waits until every key's replicas hold the same value
// and version, for at most settle, and returns the keys that still differ
// then, each with what its replicas hold.
func (c *cluster) awaitConvergence(ctx context.Context, keys []string, settle time.Duration) ([]string, error) {
	deadline := time.Now().Add(settle)
	for {
		differ, err := c.differingReplicas(ctx, keys)
		if err != nil || len(differ) == 0 || !time.Now().Before(deadline) {
			return differ, err
		}
		keys = keys[:0]
		for _, d := range differ {
			keys = append(keys, d[:strings.IndexByte(d, ' ')])
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// differingReplicas reads each key, value and version, from the
// redis-server of its replica in every rack of the first datacenter, and
// lists the keys they disagree on: "key rack1=... rack2=...".
func (c *cluster) differingReplicas(ctx context.Context, keys []string) ([]string, error) {
	st, err := c.status(ctx)
	if err != nil {
		return nil, err
	}
	redisOf := map[string]string{}
	for _, n := range st.Nodes {
		redisOf[n.Name] = n.Redis
	}
	conns := map[string]*client.Plain{}
	defer func() {
		for _, p := range conns {
			p.Close()
		}
	}()
	var out []string
	for _, key := range keys {
		reps, err := client.Replicas(c.nodes, c.nodes[0].DC, []byte(key))
		if err != nil {
			return nil, err
		}
		var held []string
		differs := false
		for _, r := range reps {
			addr := redisOf[r.Name]
			p := conns[addr]
			if p == nil {
				if p, err = client.NewPlain([]string{addr}, client.PlainOptions{Timeout: 5 * time.Second}); err != nil {
					return nil, err
				}
				conns[addr] = p
			}
			raw, err := p.Do(ctx, []byte("MGET"), []byte(key), []byte(node.VersionPrefix+key))
			if err != nil {
				return nil, fmt.Errorf("reading %s from the redis-server of %s: %w", key, r.Name, err)
			}
			v, err := resp.Parse(raw)
			if err != nil || len(v.Elems) != 2 {
				return nil, fmt.Errorf("reading %s from the redis-server of %s: unexpected reply %q", key, r.Name, raw)
			}
			got := fmt.Sprintf("%s@%s", v.Elems[0], v.Elems[1])
			differs = differs || len(held) > 0 && got != held[0][strings.IndexByte(held[0], '=')+1:]
			held = append(held, r.Rack+"="+got)
		}
		if differs {
			out = append(out, key+" "+strings.Join(held, " "))
		}
	}
	slices.Sort(out)
	return out, nil
}

// status is the lab's status: the lab's own when this run started it.
func (c *cluster) status(ctx context.Context) (*lab.Status, error) {
	if c.lab != nil {
		return c.lab.Status(), nil
	}
	return lab.Inspect(ctx, c.labDir)
}
