package node

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/troop-lab/troop/node/consistency"
)

const levels = 3 // DC_ONE, DC_QUORUM, DC_SAFE_QUORUM

// stats are the node's counters; /info and /metrics read them.
type stats struct {
	started time.Time

	reads, writes [levels]levelStats
	commands      []atomic.Int64 // by command id

	forwarded        atomic.Int64 // requests whose local-rack replica is another node
	busy             atomic.Int64 // requests refused with -BUSY
	busyMemory       atomic.Int64 // those of them refused for the memory budget
	quorumFailures   atomic.Int64
	readFailovers    atomic.Int64 // DC_ONE reads that went on to another replica
	scriptlessWrites atomic.Int64 // versioned SETs sent as MSET, the version cache vouching
	stampedWrites    atomic.Int64 // quorum writes another replica stamped (stamp.go)
	consensusWrites  atomic.Int64 // quorum writes decided by consensus per key (consensus.go)
	timeouts         atomic.Int64 // replica calls that timed out
	asyncFailures    atomic.Int64 // asynchronous replication that failed
	protocolErrors   atomic.Int64
	connections      atomic.Int64 // client connections open
	blocked          atomic.Int64 // clients waiting in a blocking pop (INFO's blocked_clients)
	connsAccepted    atomic.Int64

	authFailures    atomic.Int64 // AUTH and HELLO AUTH with a wrong user or password
	authRateLimited atomic.Int64 // AUTH refused unchecked: too many failures from the address
	aclDenied       atomic.Int64 // commands a read-only user may not run (NOPERM)

	adminAuthFailures atomic.Int64 // admin requests without the right token
	peerTLSRefused    atomic.Int64 // peer connections refused: a failed TLS handshake, or plain where TLS is due

	peersMarkedDown atomic.Int64 // times the failure detector marked a peer down
	readWriteBacks  atomic.Int64 // quorum reads that wrote their answer back to a quorum before giving it
	mirrorFailures  atomic.Int64 // writes to a moving key whose copy to its other owner failed (membership.go)
	handoffKeys     atomic.Int64 // keys this node streamed to a new owner in membership changes
}

type levelStats struct {
	requests atomic.Int64
	errors   atomic.Int64

	mu        sync.Mutex
	hist      *hdrhistogram.Histogram // microseconds
	sumMicros int64                   // of the values in hist, for /metrics' histogram
}

func newStats() *stats {
	s := &stats{started: time.Now(), commands: make([]atomic.Int64, commandCount())}
	for i := 0; i < levels; i++ {
		s.reads[i].hist = hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
		s.writes[i].hist = hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
	}
	return s
}

func (s *stats) record(write bool, level consistency.Level, d time.Duration, failed bool) {
	ls := &s.reads[level]
	if write {
		ls = &s.writes[level]
	}
	ls.requests.Add(1)
	if failed {
		ls.errors.Add(1)
	}
	us := max(d.Microseconds(), 1)
	ls.mu.Lock()
	if ls.hist.RecordValue(us) == nil {
		ls.sumMicros += us
	}
	ls.mu.Unlock()
}

// latencySnapshot is a level's latency percentiles, in microseconds.
type latencySnapshot struct {
	P50, P95, P99, P999, Max int64
}

func (ls *levelStats) latency() latencySnapshot {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	h := ls.hist
	return latencySnapshot{
		P50: h.ValueAtQuantile(50), P95: h.ValueAtQuantile(95), P99: h.ValueAtQuantile(99),
		P999: h.ValueAtQuantile(99.9), Max: h.Max(),
	}
}

// buckets are the level's latency as a Prometheus histogram: the count and
// sum of its values, and how many are at most each bound (in seconds,
// ascending). The HDR histogram keeps values to 3 significant digits, so a
// value less than 0.1% above a bound may count as at most that bound; bounds
// up to 2 ms are exact. The copy is taken under the lock and the counting
// done outside it, so a scrape holds up requests for a copy of the counts.
func (ls *levelStats) buckets(bounds []float64) (count uint64, sum float64, cumulative map[float64]uint64) {
	ls.mu.Lock()
	h, sumMicros := ls.hist.Clone(), ls.sumMicros
	ls.mu.Unlock()
	cumulative = make(map[float64]uint64, len(bounds))
	var below uint64 // values in the bars before this one
	i := 0
	for _, bar := range h.Distribution() { // ascending
		for ; i < len(bounds) && float64(bar.From) > bounds[i]*1e6; i++ {
			cumulative[bounds[i]] = below
		}
		below += uint64(bar.Count)
	}
	for ; i < len(bounds); i++ {
		cumulative[bounds[i]] = below
	}
	return uint64(h.TotalCount()), float64(sumMicros) / 1e6, cumulative
}
