package consistency

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/troop-lab/troop/check"
)

// A simulation of troop's quorum protocol for one key at DC_QUORUM, with
// this package's decisions (DecideRead, DecideWrite, Resolve, Holders) and
// the replicas' version rule, over a network that delays, reorders and loses
// messages, and coordinators whose clocks disagree. Every interleaving is
// drawn from a seed, and each history is checked with porcupine: the
// property is that every history is linearizable.
//
//   - A write asks a quorum for the key's version (ABD's query phase), takes
//     the next version of its coordinator's hybrid logical clock above the
//     newest answer, and sends the value to every replica; a replica keeps
//     it only when it is newer than the version it holds, and acknowledges
//     either way. Q acknowledgements succeed.
//   - A read asks a quorum, answers the newest value, and when fewer than Q
//     replicas hold it, first writes it back until Q do (ABD's read write
//     phase).
//
//   - With stamped writes (the node's form of a quorum write when its own
//     rack holds the key), the coordinator reads its own replica's version,
//     then sends the value and that version to the next replica, which
//     stamps the write above both with its own clock (unless it arrives
//     after the write's deadline by that clock: then it is refused, not
//     applied, and the write falls back to the two phases above), applies
//     it and answers the stamp; the coordinator sends the stamped value to
//     the others. The query and the write meet on that replica, one round
//     trip fewer.
//
// The planted variants drop one of the two phases; the simulation must find
// each of them.

const (
	bugNoVersionQuery  = "no-version-query"
	bugNoReadWriteBack = "no-read-write-back"
	bugStampNoFloor    = "stamp-without-floor" // the stamper ignores the coordinator's version
)

type simConfig struct {
	racks, clients, ops int
	skew                int64   // µs: coordinators' clocks are off by up to this much
	loss                float64 // of messages, each way
	slow                float64 // of messages, 30 times slower than the rest
	bug                 string
	stamped             bool // writes take the stamped form
}

func (c simConfig) String() string {
	return fmt.Sprintf("R=%d clients=%d ops=%d skew=%dµs loss=%.2f slow=%.2f bug=%q stamped=%v", c.racks, c.clients, c.ops, c.skew, c.loss, c.slow, c.bug, c.stamped)
}

// Times are in µs.
const (
	simTimeout = 2000
	simKey     = "k"
)

type simEvent struct {
	at, seq int64
	f       func()
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simReplica struct {
	version uint64 // 0: none
	value   int
}

// simClock is a coordinator's hybrid logical clock: 48 bits of ms and 16 of
// counter, then 8 bits of coordinator id, as troop's versions are laid out.
type simClock struct {
	id     uint64
	offset int64
	last   uint64
}

func (c *simClock) next(now int64) uint64 {
	if phys := uint64(now+c.offset) / 1000 << 16; phys > c.last {
		c.last = phys
	} else {
		c.last++
	}
	return c.last<<8 | c.id
}

func (c *simClock) observe(v uint64) { c.last = max(c.last, v>>8) }

type sim struct {
	cfg      simConfig
	rng      *rand.Rand
	now, seq int64
	queue    simQueue
	replicas []simReplica
	clocks   []simClock
	history  []check.Op
}

func (s *sim) at(t int64, f func()) {
	s.seq++
	heap.Push(&s.queue, simEvent{at: t, seq: s.seq, f: f})
}

// delay is a message's time on the wire: mostly short, sometimes long
// enough to arrive after the caller gave up.
func (s *sim) delay() int64 {
	d := 20 + int64(s.rng.ExpFloat64()*80)
	if s.rng.Float64() < s.cfg.slow {
		d *= 30
	}
	return d
}

// call sends a request to replica i, which runs serve on arrival; reply gets
// its answer, or ok false when none came within the timeout.
func (s *sim) call(i int, serve func(r *simReplica) any, reply func(answer any, ok bool)) {
	settled := false
	settle := func(a any, ok bool) {
		if !settled {
			settled = true
			reply(a, ok)
		}
	}
	if s.rng.Float64() >= s.cfg.loss {
		s.at(s.now+s.delay(), func() {
			a := serve(&s.replicas[i])
			if s.rng.Float64() >= s.cfg.loss {
				s.at(s.now+s.delay(), func() { settle(a, true) })
			}
		})
	}
	s.at(s.now+simTimeout, func() { settle(nil, false) })
}

// askOrder is the coordinator's own rack first, then the others.
func (s *sim) askOrder(coord int) []int {
	order := make([]int, s.cfg.racks)
	for i := range order {
		order[i] = (coord + i) % s.cfg.racks
	}
	return order
}

// quorumAsk asks replicas in order, Q at first and one more for each that
// does not answer, and calls done with the answers once Q came, or with
// nil once Q cannot.
func (s *sim) quorumAsk(coord int, serve func(r *simReplica) any, done func(answers map[int]any)) {
	t := Tally{Replicas: s.cfg.racks}
	answers := map[int]any{}
	order, asked, decided := s.askOrder(coord), 0, false
	var ask func()
	ask = func() {
		for asked < len(order) && asked-t.Unreachable < Quorum(t.Replicas) {
			i := order[asked]
			asked++
			s.call(i, serve, func(a any, ok bool) {
				if ok {
					t.OK++
					answers[i] = a
				} else {
					t.Unreachable++
				}
				if decided {
					return
				}
				switch DecideRead(DCQuorum, t) {
				case Succeed:
					decided = true
					done(answers)
				case Fail:
					decided = true
					done(nil)
				default:
					ask()
				}
			})
		}
	}
	ask()
}

// store is the replicas' rule: keep a value only when its version is newer.
func store(version uint64, value int) func(r *simReplica) any {
	return func(r *simReplica) any {
		if version > r.version {
			r.version, r.value = version, value
		}
		return nil
	}
}

// toAll sends a versioned value to replicas and calls done(true) once
// decide says their acknowledgements succeed, done(false) once it says
// they cannot.
func (s *sim) toAll(replicas []int, version uint64, value int, decide func(Tally) Decision, done func(bool)) {
	t := Tally{Replicas: len(replicas)}
	decided := false
	for _, i := range replicas {
		s.call(i, store(version, value), func(_ any, ok bool) {
			if ok {
				t.OK++
			} else {
				t.Unreachable++
			}
			if decided {
				return
			}
			if d := decide(t); d != Wait {
				decided = true
				done(d == Succeed)
			}
		})
	}
}

func (s *sim) write(coord, value int, done func(ok bool)) {
	all := s.askOrder(coord)
	phase2 := func(newest uint64) {
		c := &s.clocks[coord]
		c.observe(newest)
		s.toAll(all, c.next(s.now), value, func(t Tally) Decision { return DecideWrite(DCQuorum, t) }, done)
	}
	if s.cfg.bug == bugNoVersionQuery {
		phase2(0)
		return
	}
	s.quorumAsk(coord, func(r *simReplica) any { return r.version }, func(answers map[int]any) {
		if answers == nil {
			done(false)
			return
		}
		var newest uint64
		for _, a := range answers {
			newest = max(newest, a.(uint64))
		}
		phase2(newest)
	})
}

// stampedWrite is a write in the stamped form (see the top of the file).
func (s *sim) stampedWrite(coord, value int, done func(ok bool)) {
	order := s.askOrder(coord)
	if len(order) == 1 || s.cfg.bug != "" && s.cfg.bug != bugStampNoFloor {
		s.write(coord, value, done)
		return
	}
	// The deadline, read on the coordinator's clock as the node reads it.
	deadline := s.now + s.clocks[coord].offset + simTimeout
	s.call(order[0], func(r *simReplica) any { return r.version }, func(a any, ok bool) {
		if !ok {
			s.write(coord, value, done)
			return
		}
		floor, stamper := a.(uint64), order[1]
		s.call(stamper, func(r *simReplica) any {
			c := &s.clocks[stamper]
			if s.now+c.offset > deadline {
				return nil // refused: not applied
			}
			if s.cfg.bug == bugStampNoFloor {
				floor = 0
			}
			c.observe(max(floor, r.version))
			v := c.next(s.now)
			store(v, value)(r)
			return v
		}, func(a any, ok bool) {
			switch {
			case !ok: // it may have been applied: the outcome is unknown
				done(false)
			case a == nil:
				s.write(coord, value, done)
			default:
				v := a.(uint64)
				s.clocks[coord].observe(v)
				var others []int
				for _, i := range order {
					if i != stamper {
						others = append(others, i)
					}
				}
				s.toAll(others, v, value, func(t Tally) Decision {
					t.Replicas++
					t.OK++ // the stamper's
					return DecideWrite(DCQuorum, t)
				}, done)
			}
		})
	})
}

func encodeValue(v int) []byte {
	if v == check.Missing {
		return []byte("nil")
	}
	return strconv.AppendInt(nil, int64(v), 10)
}

func (s *sim) read(coord int, done func(value int, ok bool)) {
	s.quorumAsk(coord, func(r *simReplica) any { return *r }, func(answers map[int]any) {
		if answers == nil {
			done(0, false)
			return
		}
		var replies []Reply
		var who []int
		for i := 0; i < s.cfg.racks; i++ {
			a, ok := answers[i]
			if !ok {
				continue
			}
			r := a.(simReplica)
			var v []byte
			if r.version != 0 {
				v = fmt.Appendf(nil, "%016x", r.version)
			}
			replies = append(replies, Reply{Version: v, Raw: encodeValue(r.value)})
			who = append(who, i)
		}
		source, _, _ := Resolve(replies)
		newest := answers[who[source]].(simReplica)
		need := Quorum(s.cfg.racks) - Holders(replies, source)
		if need <= 0 || newest.version == 0 {
			done(newest.value, true)
			return
		}
		var targets []int
		for i := 0; i < s.cfg.racks; i++ {
			if a, ok := answers[i]; !ok || a.(simReplica).version != newest.version {
				targets = append(targets, i)
			}
		}
		if s.cfg.bug == bugNoReadWriteBack {
			// Read repair, 200 ms after the answer, is as good as never
			// here: the runs are a few tens of milliseconds long.
			done(newest.value, true)
			return
		}
		s.toAll(targets, newest.version, newest.value, func(t Tally) Decision {
			switch {
			case t.OK >= need:
				return Succeed
			case t.OK+t.Pending() < need:
				return Fail
			}
			return Wait
		}, func(ok bool) { done(newest.value, ok) })
	})
}

// client runs ops operations back to back through coordinator coord.
func (s *sim) client(id, coord int) {
	seq := 0
	var next func()
	next = func() {
		if seq == s.cfg.ops {
			return
		}
		seq++
		op := check.Op{Client: id, Key: simKey, Call: s.now * 1000}
		finish := func(ok bool) {
			op.Return = s.now * 1000
			switch {
			case op.Write && !ok:
				op.Failed, op.Error = true, "no quorum"
				s.history = append(s.history, op)
			case ok:
				s.history = append(s.history, op)
			}
			next()
		}
		if s.rng.Float64() < 0.5 {
			op.Write, op.Value = true, id*1_000_000+seq
			if s.cfg.stamped {
				s.stampedWrite(coord, op.Value, finish)
			} else {
				s.write(coord, op.Value, finish)
			}
			return
		}
		s.read(coord, func(v int, ok bool) { op.Value = v; finish(ok) })
	}
	next()
}

func simulate(cfg simConfig, seed uint64) []check.Op {
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0)), replicas: make([]simReplica, cfg.racks)}
	for i := range s.replicas {
		s.replicas[i].value = check.Missing
	}
	// The clocks read milliseconds since a start 1,000 s back; the
	// simulation's version (unlike troop's) fits in 64 bits.
	s.now = 1_000_000_000
	for i := 0; i < cfg.racks; i++ {
		s.clocks = append(s.clocks, simClock{id: uint64(i + 1), offset: s.rng.Int64N(cfg.skew + 1)})
	}
	for c := 0; c < cfg.clients; c++ {
		s.client(c, c%cfg.racks)
	}
	for s.queue.Len() > 0 {
		e := heap.Pop(&s.queue).(simEvent)
		s.now = e.at
		e.f()
	}
	return s.history
}

func randomSimConfig(r *rand.Rand, bug string) simConfig {
	// Lost and slow messages leave writes of unknown outcome, each of
	// which porcupine must consider at every point after its call: more
	// than these rates make some checks take seconds.
	cfg := simConfig{racks: 1 + r.IntN(7), clients: 2 + r.IntN(5), ops: 60, slow: 0.05 * r.Float64(), bug: bug, stamped: r.IntN(2) == 0}
	if r.IntN(2) == 0 {
		// Within a few milliseconds (NTP at work), within seconds, or an
		// hour off: the version query makes the order of writes that
		// follow one another independent of any clock.
		cfg.skew = r.Int64N([]int64{5_000, 2_000_000, 3_600_000_000}[r.IntN(3)])
	}
	if r.IntN(2) == 0 {
		cfg.loss = 0.05 * r.Float64()
	}
	return cfg
}

// The property: with both phases, every history is linearizable, for 1 to
// 7 racks, with or without message loss and clock skew of up to an hour.
func TestProtocolIsLinearizable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	seen := map[int]bool{}
	for seed := uint64(1); seed <= 300; seed++ {
		cfg := randomSimConfig(r, "")
		seen[cfg.racks] = true
		h := simulate(cfg, seed)
		v := check.CheckRegisters(h, 10*time.Second)
		if !v.Linearizable() {
			t.Errorf("seed %d, %s: %s", seed, cfg, v.Result)
			if v.Counterexample != nil {
				for _, o := range v.Counterexample.Ops {
					t.Log(o)
				}
			}
			return
		}
	}
	if len(seen) != 7 {
		t.Errorf("the seeds drew %d rack counts of 7", len(seen))
	}
}

// Each planted variant breaks linearizability in some runs of a contended
// three-rack cluster whose messages are sometimes slow: the simulation
// tells the protocol from one that misses a phase, or whose stamped writes
// ignore the coordinator's version. (Measured: of 400 runs, 384 without the
// version query, 9 without the read's write-back, 1 with the stamper
// ignoring the coordinator's version.)
func TestProtocolSimulationFindsPlantedBugs(t *testing.T) {
	for _, bug := range []string{bugNoVersionQuery, bugNoReadWriteBack, bugStampNoFloor} {
		r := rand.New(rand.NewPCG(2, 2))
		found := 0
		for seed := uint64(1); seed <= 400; seed++ {
			cfg := simConfig{racks: 3, clients: 5, ops: 60, skew: r.Int64N(5000), slow: 0.05, bug: bug, stamped: bug == bugStampNoFloor}
			if !check.CheckRegisters(simulate(cfg, seed), 10*time.Second).Linearizable() {
				found++
			}
		}
		t.Logf("%s: %d of 400 runs not linearizable", bug, found)
		if found == 0 {
			t.Errorf("%s: the simulation never found the planted bug", bug)
		}
	}
}
