package node

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/resp"
)

const levels = 3 // DC_ONE, DC_QUORUM, DC_SAFE_QUORUM

// stats are the node's counters; /info and /metrics read them.
type stats struct {
	started time.Time

	reads, writes [levels]levelStats
	commands      []atomic.Int64 // by command id
	replies       replyStats     // INFO's commandstats and errorstats

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
	localPauses     atomic.Int64 // heartbeat ticks that came a period or more late: this node stood still
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
	s.replies = replyStats{
		callsAtReset: make([]atomic.Int64, len(s.commands)),
		failed:       make([]atomic.Int64, len(s.commands)),
		rejected:     make([]atomic.Int64, len(s.commands)),
		byCode:       map[string]*atomic.Int64{},
	}
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

// replyStats are what Redis's INFO commandstats and errorstats count of
// the replies the node sends its clients: error replies by their code, and
// per command the calls that answered an error (failed) and those refused
// before they ran (rejected: arity, authorization, a subscribed
// connection). CONFIG RESETSTAT starts them again; /metrics' command
// counts are not reset, so calls since the reset are counted from
// callsAtReset.
type replyStats struct {
	errors       atomic.Int64   // error replies: INFO's total_error_replies
	callsAtReset []atomic.Int64 // stats.commands at the last reset, by command id
	failed       []atomic.Int64 // by command id
	rejected     []atomic.Int64 // by command id

	mu     sync.RWMutex
	byCode map[string]*atomic.Int64
}

// maxErrorCodes bounds the codes counted apart, as Redis 7.2 bounds its
// errorstats: a script's redis.error_reply can make up any number of
// codes. Past it, errors of a new code count only in the total.
const maxErrorCodes = 128

// noCommand is the command id of a reply counted under no command's stats.
const noCommand = -1

// errorReply counts an error reply to command id cmd (noCommand for none).
// It takes the read lock and allocates only for a code not seen before:
// the request path calls it for every error it answers.
func (r *replyStats) errorReply(cmd int, reply []byte) {
	r.errors.Add(1)
	if cmd != noCommand {
		r.failed[cmd].Add(1)
	}
	code := errorCode(reply)
	r.mu.RLock()
	k := r.byCode[string(code)]
	r.mu.RUnlock()
	if k == nil {
		r.mu.Lock()
		if k = r.byCode[string(code)]; k == nil && len(r.byCode) < maxErrorCodes {
			k = new(atomic.Int64)
			r.byCode[string(code)] = k
		}
		r.mu.Unlock()
	}
	if k != nil {
		k.Add(1)
	}
}

// execErrors counts the error replies inside EXEC's reply, each as a
// failed call of its command in order. An error in its place (EXECABORT)
// is EXEC's own, which the slot counts.
func (r *replyStats) execErrors(order [][][]byte, reply []byte) {
	if len(reply) == 0 || reply[0] != '*' || !bytes.Contains(reply, []byte("\r\n-")) {
		return // no error inside, or none to parse for: the usual EXEC costs a search only
	}
	v, err := resp.Parse(reply)
	if err != nil {
		return
	}
	for i, e := range v.Elems {
		if !e.IsError() || i >= len(order) {
			continue
		}
		cmd := noCommand
		if c := lookup(order[i][0]); c != nil {
			cmd = c.id
		}
		r.errorReply(cmd, append([]byte{'-'}, e.Str...))
	}
}

// reject counts a call of command id cmd refused before it ran, and its
// error reply.
func (r *replyStats) reject(cmd int, reply []byte) {
	r.rejected[cmd].Add(1)
	r.errorReply(noCommand, reply)
}

// errorCode is an error reply's code, as Redis counts it: the word after
// the '-' up to a space within the first 32 bytes of the message, or ERR
// when there is none.
func errorCode(reply []byte) []byte {
	msg := reply
	if i := bytes.IndexByte(msg, '\r'); i >= 0 {
		msg = msg[:i]
	}
	msg = msg[:min(len(msg), 32)]
	if i := bytes.IndexByte(msg, ' '); i > 1 {
		return msg[1:i]
	}
	return errCode
}

var errCode = []byte("ERR")

// reset is CONFIG RESETSTAT: the counts start again from zero.
func (r *replyStats) reset(commands []atomic.Int64) {
	for i := range commands {
		r.callsAtReset[i].Store(commands[i].Load())
		r.failed[i].Store(0)
		r.rejected[i].Store(0)
	}
	r.mu.Lock()
	r.byCode = map[string]*atomic.Int64{}
	r.mu.Unlock()
	r.errors.Store(0)
}

// codes are the error codes counted and their counts, by code.
func (r *replyStats) codes() map[string]int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make(map[string]int64, len(r.byCode))
	for code, k := range r.byCode {
		if v := k.Load(); v > 0 {
			out[code] = v
		}
	}
	return out
}
