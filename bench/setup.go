package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// Setup is what ran, as the header block above the table says it: a
// reader of the table must not have to guess how many requests were in
// flight on a connection, or which keys were touched.
type Setup struct {
	Target      string   `json:"target"`
	Job         string   `json:"job"`
	Tasks       []string `json:"tasks"`
	Nodes       int      `json:"nodes"`
	Workers     int      `json:"workers"`     // in all, in the phase with most
	WorkerText  string   `json:"worker_text"` // how they are made up, in words
	Connections int      `json:"connections"` // the workers', in all
	// PerConnection is workers per connection; InFlight the requests in
	// flight on a connection at most: workers per connection times the
	// deepest pipeline.
	PerConnection float64 `json:"workers_per_connection"`
	InFlight      int     `json:"in_flight_per_connection"`
	Pipeline      string  `json:"pipeline"`
	ValueSize     string  `json:"value_size"`
	Keys          uint64  `json:"keys"`
	FirstKey      string  `json:"first_key"`
	DB            int     `json:"db"`
	Seed          uint64  `json:"seed"`
	Loop          string  `json:"loop"`
	Length        string  `json:"length"`
	Shard         string  `json:"shard,omitempty"` // which part of a sharded run, in words
}

// Connector is implemented by targets that know how many connections a
// number of workers holds in all.
type Connector interface {
	Connections(workers int) int
}

func newSetup(cfg *Config, p plan, target Target, nodes int) Setup {
	first, keys := cfg.Shard.keyRange(cfg.Keys)
	s := Setup{Job: cfg.Job, Nodes: nodes, Pipeline: cfg.Pipeline.String(), ValueSize: cfg.ValueSize.String() + " B",
		Keys: keys, FirstKey: string(cfg.Key(nil, first)), DB: cfg.Access.DB, Seed: cfg.Seed}
	if cfg.Shard.Count > 0 {
		s.Shard = fmt.Sprintf("%s of a run over %d keys in all: the workers, keys and rate above are this shard's", cfg.Shard, cfg.Keys)
	}
	if d, ok := target.(Describer); ok {
		s.Target = d.Describe()
	}
	for _, ph := range p.phases {
		s.Tasks = append(s.Tasks, ph.Tasks...)
		n := 0
		for _, g := range ph.groups {
			n += cfg.Shard.workers(g.workers)
		}
		s.Workers = max(s.Workers, n)
	}
	if cfg.Job == JobMixed {
		s.WorkerText = fmt.Sprintf("%d readers and %d writers per node", cfg.Readers, cfg.Writers)
	} else {
		s.WorkerText = fmt.Sprintf("%d per node", cfg.Workers)
	}
	s.Connections = s.Workers
	if c, ok := target.(Connector); ok {
		s.Connections = c.Connections(s.Workers)
	}
	if s.Connections > 0 {
		s.PerConnection = float64(s.Workers) / float64(s.Connections)
	}
	// A worker has one pipeline in flight: on one connection when it owns
	// its connections, spread over the addresses otherwise.
	s.InFlight = int(math.Ceil(max(s.PerConnection, 1))) * cfg.Pipeline.Max
	switch {
	case cfg.Rate > 0:
		s.Loop = fmt.Sprintf("open loop at %g ops/s", shardRate(cfg, p))
	default:
		s.Loop = "closed loop"
	}
	if cfg.Requests > 0 {
		s.Length = fmt.Sprintf("%d requests per task", cfg.Requests)
	} else {
		s.Length = cfg.Duration.String() + " per task"
	}
	if cfg.Iterations > 1 {
		s.Length += fmt.Sprintf(", %d iterations", cfg.Iterations)
	}
	return s
}

// WriteHeader prints the block of what ran.
func (s Setup) WriteHeader(w io.Writer) {
	fmt.Fprintln(w, "==== WHAT RAN ====")
	fmt.Fprintf(w, "target     %s\n", s.Target)
	fmt.Fprintf(w, "job        %s: %s\n", s.Job, strings.Join(s.Tasks, ", "))
	fmt.Fprintf(w, "workers    %d on %d node(s) (%s) over %d connection(s): %.3g per connection\n",
		s.Workers, s.Nodes, s.WorkerText, s.Connections, s.PerConnection)
	fmt.Fprintf(w, "pipeline   %s: up to %d requests in flight per connection\n", s.Pipeline, s.InFlight)
	fmt.Fprintf(w, "values     %s; %d keys, the first %s", s.ValueSize, s.Keys, s.FirstKey)
	if s.DB != 0 {
		fmt.Fprintf(w, ", database %d", s.DB)
	}
	fmt.Fprintf(w, "\nseed       %d; %s, %s\n", s.Seed, s.Loop, s.Length)
	if s.Shard != "" {
		fmt.Fprintf(w, "shard      %s\n", s.Shard)
	}
	fmt.Fprintln(w)
}

// shardRate is the rate this shard issues: its workers' share of each
// group's, in the first phase (every phase has the same).
func shardRate(cfg *Config, p plan) float64 {
	var rate float64
	for _, g := range p.phases[0].groups {
		rate += g.rate * float64(cfg.Shard.workers(g.workers)) / float64(g.workers)
	}
	return rate
}
