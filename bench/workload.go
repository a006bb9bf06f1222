package bench

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Kind is what an operation does on the wire.
type Kind uint8

const (
	Get Kind = iota
	Set
	Del
	RMW // read-modify-write: GET, then SET of the next version (YCSB F)
)

func (k Kind) String() string { return [...]string{"GET", "SET", "DEL", "RMW"}[k] }

// Op is one operation of a workload: the task it counts for (an index into
// the phase's Tasks), what it does, to which key, and how large a value it
// writes.
type Op struct {
	Task int
	Kind Kind
	Key  uint64
	Size int
}

// A Phase is one stretch of a job whose tasks run at the same time; its table
// rows are its tasks. crud has four phases of one task each; mixed has one
// phase with a Get and a Set task.
type Phase struct {
	Name  string
	Tasks []string
	// roles are the kinds of workers: for mixed, readers and writers; for the
	// rest, one kind. Each role gets its own share of workers and requests.
	roles []role
}

type role struct {
	weight  int  // share of requests and rate
	readers bool // counted with --readers (mixed) rather than --writers
	// mix maps a uniform draw to a task and kind: cumulative fractions.
	mix  []mixEntry
	seq  bool   // keys in sequence (crud) rather than from the distribution
	dist string // default distribution
}

type mixEntry struct {
	upTo   float64
	task   int
	kind   Kind
	insert bool // the key is the worker's next insert, not a drawn one
}

type jobDef struct {
	phases []Phase
}

func one(task int, k Kind) []mixEntry { return []mixEntry{{1, task, k, false}} }

// jobSpec defines the jobs. The YCSB core workloads follow the published mixes;
// their "insert" writes the key after the worker's newest, inside the fixed
// key set, so the set's size (and memory) stays as configured.
func jobSpec(name string) (jobDef, error) {
	crud := func(task string, k Kind) Phase {
		return Phase{Name: task, Tasks: []string{task}, roles: []role{{weight: 1, mix: one(0, k), seq: true}}}
	}
	ycsb := func(name string, tasks []string, mix []mixEntry, dist string) jobDef {
		return jobDef{[]Phase{{Name: name, Tasks: tasks, roles: []role{{weight: 1, mix: mix, dist: dist}}}}}
	}
	switch name {
	case JobCRUD:
		return jobDef{[]Phase{crud("PutCreate", Set), crud("Get", Get), crud("PutUpdate", Set), crud("Delete", Del)}}, nil
	case JobMixed:
		return jobDef{[]Phase{{Name: "Mixed", Tasks: []string{"Get", "Set"}, roles: []role{
			{weight: 0, readers: true, mix: one(0, Get), dist: Uniform},
			{weight: 0, mix: one(1, Set), dist: Uniform},
		}}}}, nil
	case JobWrite:
		return jobDef{[]Phase{{Name: "Write", Tasks: []string{"Set"}, roles: []role{{weight: 1, mix: one(0, Set), dist: Uniform}}}}}, nil
	case "ycsb-a":
		return ycsb("ycsb-a", []string{"Read", "Update"}, []mixEntry{{0.5, 0, Get, false}, {1, 1, Set, false}}, Zipfian), nil
	case "ycsb-b":
		return ycsb("ycsb-b", []string{"Read", "Update"}, []mixEntry{{0.95, 0, Get, false}, {1, 1, Set, false}}, Zipfian), nil
	case "ycsb-c":
		return ycsb("ycsb-c", []string{"Read"}, one(0, Get), Zipfian), nil
	case "ycsb-d":
		return ycsb("ycsb-d", []string{"Read", "Insert"}, []mixEntry{{0.95, 0, Get, false}, {1, 1, Set, true}}, Latest), nil
	case "ycsb-e":
		return jobDef{}, fmt.Errorf("job ycsb-e is not supported: its short range scans have no equivalent over plain key-value RESP commands; run ycsb-a, -b, -c, -d or -f")
	case "ycsb-f":
		return ycsb("ycsb-f", []string{"Read", "ReadModifyWrite"}, []mixEntry{{0.5, 0, Get, false}, {1, 1, RMW, false}}, Zipfian), nil
	}
	return jobDef{}, fmt.Errorf("unknown job %q: use crud, mixed, write, ycsb-a, ycsb-b, ycsb-c, ycsb-d or ycsb-f", name)
}

// Jobs lists the job names, for help texts.
func Jobs() []string {
	return strings.Fields("crud mixed write ycsb-a ycsb-b ycsb-c ycsb-d ycsb-f")
}

// A plan is a job laid out for a configuration: for each phase, each role's
// worker count, requests per worker and rate per worker.
type plan struct {
	phases []phasePlan
}

type phasePlan struct {
	Phase
	groups []group
}

// group is the workers of one role.
type group struct {
	role
	workers int
	// requests is the role's total for the task (0: run for the duration).
	requests int64
	rate     float64 // ops/s for the whole group; 0 = closed loop
	dist     KeyDist
}

func makePlan(cfg *Config, nodes int) (plan, error) {
	def, err := jobSpec(cfg.Job)
	if err != nil {
		return plan{}, err
	}
	nodes = max(nodes, 1)
	dists := map[string]KeyDist{}
	distFor := func(name string) (KeyDist, error) {
		if cfg.Distribution != "" {
			name = cfg.Distribution
		}
		if d, ok := dists[name]; ok {
			return d, nil
		}
		_, n := cfg.Shard.keyRange(cfg.Keys)
		d, err := NewKeyDist(name, n, cfg.Hotspot)
		dists[name] = d
		return d, err
	}
	var p plan
	for _, ph := range def.phases {
		pp := phasePlan{Phase: ph}
		total := 0
		for i := range ph.roles {
			if cfg.Job == JobMixed {
				if ph.roles[i].readers {
					ph.roles[i].weight = cfg.Ratio.Get
				} else {
					ph.roles[i].weight = cfg.Ratio.Set
				}
			}
			total += ph.roles[i].weight
		}
		for _, r := range ph.roles {
			if r.weight == 0 {
				continue
			}
			g := group{role: r, workers: cfg.Workers * nodes}
			if cfg.Job == JobMixed {
				g.workers = cfg.Writers * nodes
				if r.readers {
					g.workers = cfg.Readers * nodes
				}
			}
			if g.workers < cfg.Shard.of() {
				return plan{}, fmt.Errorf("--shard %s: the %s phase has %d %s in all, fewer than the %d shards: give each shard at least one",
					cfg.Shard, ph.Name, g.workers, workerFlag(cfg, r), cfg.Shard.Count)
			}
			g.requests = cfg.Requests * int64(r.weight) / int64(total)
			g.rate = cfg.Rate * float64(r.weight) / float64(total)
			if !r.seq {
				if g.dist, err = distFor(r.dist); err != nil {
					return plan{}, err
				}
			}
			pp.groups = append(pp.groups, g)
		}
		p.phases = append(p.phases, pp)
	}
	return p, nil
}

// workerFlag names the workers of a role as the flag that sets them.
func workerFlag(cfg *Config, r role) string {
	switch {
	case cfg.Job != JobMixed:
		return "workers (--workers)"
	case r.readers:
		return "readers (--readers)"
	}
	return "writers (--writers)"
}

// Gen produces one worker's operations. Its output is a function of the seed
// and the worker's place (iteration, phase, group, index) alone.
type Gen struct {
	r          *rand.Rand
	g          *group
	first      uint64 // the shard's first key; keys from it on are its own
	keys       uint64
	valueSize  Range
	pipeline   Range
	w, workers uint64 // this worker's index among its group's workers of the shard, and how many they are
	left       int64  // requests still to issue; -1 = unbounded
	next       uint64 // sequential key cursor (crud) and insert cursor, from first
	newest     uint64 // the last key this worker inserted (latest distribution), from first
}

// streamID names a worker's random stream; it must differ for every worker
// of a run, so they do not repeat one another.
func streamID(iteration, phase, group, worker int) uint64 {
	return uint64(iteration)<<48 | uint64(phase)<<40 | uint64(group)<<32 | uint64(worker)
}

// newGen makes the generator of worker w of group g (w counts all the
// group's workers, of every shard).
func newGen(cfg *Config, g *group, iteration, phase, gi, w int) *Gen {
	first, keys := cfg.Shard.keyRange(cfg.Keys)
	gen := &Gen{
		r: rand.New(rand.NewPCG(cfg.Seed, streamID(iteration, phase, gi, w))),
		g: g, first: first, keys: keys, valueSize: cfg.ValueSize, pipeline: cfg.Pipeline,
		w: uint64(w / cfg.Shard.of()), workers: uint64(cfg.Shard.workers(g.workers)), left: -1,
		newest: keys - 1,
	}
	if g.requests > 0 {
		gen.left = g.requests / int64(g.workers)
		if int64(w) < g.requests%int64(g.workers) {
			gen.left++
		}
	}
	// Sequential and insert keys interleave: worker w takes w, w+W, w+2W ...
	gen.next = gen.w
	return gen
}

// Batch appends the next pipeline's operations to dst: a depth drawn from
// the pipeline range, cut short when the worker's requests run out. An empty
// batch means the worker is done.
func (gen *Gen) Batch(dst []Op) []Op {
	n := int64(gen.pipeline.Draw(gen.r))
	if gen.left >= 0 {
		n = min(n, gen.left)
		gen.left -= n
	}
	for range n {
		dst = append(dst, gen.op())
	}
	return dst
}

func (gen *Gen) op() Op {
	m := gen.g.mix[0]
	if len(gen.g.mix) > 1 {
		u := gen.r.Float64()
		for _, e := range gen.g.mix {
			m = e
			if u < e.upTo {
				break
			}
		}
	}
	op := Op{Task: m.task, Kind: m.kind}
	switch {
	case gen.g.seq || m.insert:
		op.Key = gen.next % gen.keys
		gen.newest = op.Key
		gen.next += gen.workers
	default:
		op.Key = gen.g.dist.Next(gen.r, gen.newest)
	}
	op.Key += gen.first
	if op.Kind == Set || op.Kind == RMW {
		op.Size = gen.valueSize.Draw(gen.r)
	}
	return op
}
