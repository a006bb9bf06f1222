package decide

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/troop-lab/troop/node/consistency"
)

// A simulation of this package's protocol: clients run Redis commands,
// back to back, through several coordinator nodes (each with a proposer
// per key) against 3 or 5 acceptors, over a network that delays, reorders,
// loses and duplicates messages and is partitioned now and then, while coordinators
// crash and restart, and their timers run at different rates. Every
// interleaving is drawn from a seed, and each history is checked with
// porcupine against the model of its workload:
//
//   - ids: INCR and GET of one counter; every acknowledged INCR answers a
//     number of its own and the final GET counts every INCR applied;
//   - lock: every client races SET NX on a fresh key, round after round:
//     at most one winner per key;
//   - list: RPUSH and LRANGE of one list: every LRANGE is a prefix of one
//     order, and RPUSH answers the length of that prefix.
//
// The planted variants each break one part of the protocol: the acceptor's
// fence, the proposer's choice of value, and the ballots themselves (troop's
// deciding replica before this package: the first replica the coordinator
// holds up). The simulation must find each of them.

const (
	bugNoPromiseCheck = "acceptor-ignores-promise" // accepts whatever its promise
	bugOwnValue       = "proposer-own-value"       // builds on its own last value, not the promises'
	bugLocalView      = "decider-by-local-view"    // the first replica the coordinator holds up decides
)

type workload int

const (
	ids workload = iota
	lock
	list
	transfer // command_sim_test.go: LMOVE between two lists, with RPUSH, LPOP and LRANGE of each
	msetnx   // command_sim_test.go: MSETNX of two keys, with SET, DEL and GET of each
)

func (w workload) String() string {
	return [...]string{"ids", "lock", "list", "transfer", "msetnx"}[w]
}

type partition int

const (
	noPartition partition = iota
	isolated              // one coordinator and a minority of acceptors apart from the rest
	bridge                // two coordinators each reach a different majority
	oneWay                // an acceptor's replies are lost, and one coordinator's requests to another
)

func (p partition) String() string {
	return [...]string{"none", "isolated", "bridge", "one-way"}[p]
}

type simConfig struct {
	acceptors, nodes, clients, ops int
	loss, slow, duplicate          float64 // of messages
	crash                          float64 // a coordinator crashes after sending a request
	partition                      partition
	work                           workload
	bug                            string
}

func (c simConfig) String() string {
	return fmt.Sprintf("acceptors=%d nodes=%d clients=%d ops=%d loss=%.2f slow=%.2f duplicate=%.2f crash=%.3f partition=%s work=%s bug=%q",
		c.acceptors, c.nodes, c.clients, c.ops, c.loss, c.slow, c.duplicate, c.crash, c.partition, c.work, c.bug)
}

// Times are in µs.
const (
	simTimeout   = 2000 // a round's, on a coordinator's timer
	simRestart   = 3000 // a crashed coordinator is back after this
	simPartition = 5000 // partitions are on and off by turns this long
	simRetries   = 4    // tries of a change before the coordinator gives up
)

// lastReader is the client of the read after everything else.
const lastReader = -1

type simEvent struct {
	at int64
	f  func()
}

// simOp is one command of the history.
type simOp struct {
	client    int
	key       string
	cmd       string // INCR GET SETNX RPUSH LRANGE, and command_sim_test.go's
	to        string // the second key of a command of two
	arg       string
	reply     string
	known     bool // false: a change of unknown outcome, applied once or never
	call, ret int64
}

type outcome int

const (
	replied outcome = iota
	failed          // nothing was applied
	unknown         // applied once, or never
)

// command is a client's command on its way through a coordinator.
type command struct {
	change Change
	reply  string // the change writes its reply here
	done   func(outcome)
	tries  int
	// inRound: a round of it is under way. Replies after the round ended
	// still go to the proposer (a refusal may show a try dead), but they
	// do not end the command again.
	inRound bool
	// gone, if set, says the command died waiting (its coordinator crashed
	// and forgot it): it is not started.
	gone func() bool
}

type simNode struct {
	id        uint64
	rate      float64 // its timer's speed against real time
	down      bool
	proposers map[string]*Proposer
	running   map[string]*command // the command each key's proposer runs
	waiting   map[string][]*command
	gen       map[string]int      // the key's rounds started: older rounds' timers do nothing
	last      map[string]Acceptor // the value it last decided: bugOwnValue builds on it
	// Commands of the workloads of several keys (command_sim_test.go):
	// those under way, and what names their transactions' records, which
	// no restart reuses.
	runs        []*run
	live        map[string]*run // transactions by record key
	incarnation int
	records     int
}

type sim struct {
	cfg       simConfig
	rng       *rand.Rand
	now       int64
	events    []simEvent // by time
	acceptors []map[string]Acceptor
	nodes     []*simNode
	history   []simOp
	requests  int // proposers' requests sent to every acceptor: round trips
}

// at schedules f at time t, after the events already scheduled then.
func (s *sim) at(t int64, f func()) {
	i := sort.Search(len(s.events), func(i int) bool { return s.events[i].at > t })
	s.events = slices.Insert(s.events, i, simEvent{at: t, f: f})
}

// delay is a message's time on the wire: mostly short, sometimes long
// enough to arrive after its round ended.
func (s *sim) delay() int64 {
	d := 20 + int64(s.rng.ExpFloat64()*80)
	if s.rng.Float64() < s.cfg.slow {
		d *= 30
	}
	return d
}

// cut reports whether the partition drops a message between coordinator
// node and acceptor a, in the direction given.
func (s *sim) cut(node, a int, toAcceptor bool) bool {
	if s.cfg.partition == noPartition || s.now/simPartition%2 == 0 {
		return false
	}
	n, minority := s.cfg.acceptors, s.cfg.acceptors/2 // acceptors [0, minority) are a minority
	switch s.cfg.partition {
	case isolated:
		return (node == 0) != (a < minority)
	case bridge:
		return node == 0 && a < minority || node == 1 && a >= n-minority
	case oneWay:
		return !toAcceptor && a == 0 || toAcceptor && node == 1 && a == n-1
	}
	return false
}

func (s *sim) deliver(node, a int, toAcceptor bool) bool {
	return !s.cut(node, a, toAcceptor) && s.rng.Float64() >= s.cfg.loss
}

// broadcast sends a proposer's request for key to every acceptor (some
// twice), and their replies back to whichever proposer then runs the key on
// that node.
func (s *sim) broadcast(node int, key string, req Request) {
	s.requests++
	for a := range s.acceptors {
		if s.cfg.duplicate > 0 && s.rng.Float64() < s.cfg.duplicate {
			s.deliverRequest(node, a, key, req)
		}
		s.deliverRequest(node, a, key, req)
	}
	if s.rng.Float64() < s.cfg.crash {
		s.crashNode(node)
	}
}

func (s *sim) deliverRequest(node, a int, key string, req Request) {
	s.send(node, a, func() any { return s.handle(node, a, key, req) }, func(reply any) {
		n := s.nodes[node]
		p := n.proposers[key]
		if p == nil {
			return
		}
		next, st := p.Step(a, reply.(Reply))
		if c := n.running[key]; c != nil && c.inRound && (next != nil || st != Waiting) {
			s.progress(node, key, next, st)
		}
	})
}

// handle is acceptor a's rule, or a planted variant of it.
func (s *sim) handle(node, a int, key string, req Request) Reply {
	acc := s.acceptors[a][key]
	promised := acc.Promised
	if _, ok := req.(Accept); ok && s.cfg.bug == bugNoPromiseCheck {
		acc.Promised = Ballot{}
	}
	acc, reply := acc.Handle(req)
	if s.cfg.bug == bugNoPromiseCheck && acc.Promised.Less(promised) {
		acc.Promised = promised
	}
	s.acceptors[a][key] = acc
	if p, ok := reply.(Promise); ok && p.OK && s.cfg.bug == bugOwnValue {
		// The proposer sees its own last decided value in every promise.
		own := s.nodes[node].last[key]
		p.Accepted, p.Value = own.Accepted, own.Value
		return p
	}
	return reply
}

// progress acts on a proposer's step: sends its next request, or ends,
// retries or gives up its command.
func (s *sim) progress(node int, key string, next Request, st Status) {
	n := s.nodes[node]
	c := n.running[key]
	if c == nil {
		return
	}
	p := n.proposers[key]
	if next != nil {
		s.broadcast(node, key, next)
		return
	}
	c.inRound = false
	switch st {
	case Decided:
		n.last[key] = Acceptor{Accepted: p.Ballot(), Value: p.Value()}
		s.finish(node, key, replied)
	case Unknown:
		s.finish(node, key, unknown)
	case Refused:
		if c.tries == simRetries {
			s.finish(node, key, map[bool]outcome{true: unknown, false: failed}[p.MayHaveApplied()])
			return
		}
		c.tries++
		n.gen[key]++
		gen := n.gen[key]
		backoff := int64(s.rng.IntN(200 << c.tries))
		s.at(s.now+backoff, func() {
			if n.gen[key] == gen && n.running[key] == c {
				s.round(node, key, p.Retry())
			}
		})
	}
}

// round sends a round's first request and sets its timer.
func (s *sim) round(node int, key string, req Request) {
	n := s.nodes[node]
	n.gen[key]++
	gen := n.gen[key]
	n.running[key].inRound = true
	s.at(s.now+int64(simTimeout/n.rate), func() {
		if p := n.proposers[key]; n.gen[key] == gen && p != nil {
			p.GiveUp()
			s.progress(node, key, nil, Refused)
		}
	})
	s.broadcast(node, key, req)
}

// finish answers the key's running command and starts the next waiting one.
func (s *sim) finish(node int, key string, o outcome) {
	n := s.nodes[node]
	c := n.running[key]
	delete(n.running, key)
	n.gen[key]++
	s.startWaiting(node, key)
	c.done(o)
}

// startWaiting starts the next command waiting for key, if any.
func (s *sim) startWaiting(node int, key string) {
	n := s.nodes[node]
	for w := n.waiting[key]; len(w) > 0 && n.running[key] == nil && !n.down; w = n.waiting[key] {
		n.waiting[key] = w[1:]
		if w[0].gone == nil || !w[0].gone() {
			s.start(node, key, w[0])
		}
	}
}

func (s *sim) start(node int, key string, c *command) {
	n := s.nodes[node]
	if n.down || n.running[key] != nil {
		n.waiting[key] = append(n.waiting[key], c)
		return
	}
	n.running[key] = c
	if s.cfg.bug == bugLocalView {
		s.decideByLocalView(node, key, c)
		return
	}
	p := n.proposers[key]
	if p == nil {
		p = NewProposer(n.id, s.cfg.acceptors)
		n.proposers[key] = p
	}
	s.round(node, key, p.Propose(c.change))
}

// crashNode stops a coordinator: its running commands end with an unknown
// outcome, it forgets its proposers, and it is back after simRestart with
// the same id and its waiting commands.
func (s *sim) crashNode(node int) {
	n := s.nodes[node]
	if n.down {
		return
	}
	n.down = true
	clear(n.proposers)
	n.incarnation++
	runs := n.runs
	n.runs = nil
	clear(n.live)
	for _, r := range runs {
		r.crash()
	}
	// In key order: the runs are deterministic.
	for _, key := range slices.Sorted(maps.Keys(n.running)) {
		c := n.running[key]
		delete(n.running, key)
		n.gen[key]++
		c.done(unknown)
	}
	s.at(s.now+simRestart, func() {
		n.down = false
		for _, key := range slices.Sorted(maps.Keys(n.waiting)) {
			s.startWaiting(node, key)
		}
	})
}

// decideByLocalView is the planted variant of the whole protocol, troop's
// deciding replica before it: the first acceptor the coordinator holds up
// (it holds up those it can reach both ways) runs the change on its own
// value, versions it above its own, and the coordinator copies the result
// to the others, which keep it when its version is newer. Q holders succeed.
func (s *sim) decideByLocalView(node int, key string, c *command) {
	n := s.nodes[node]
	decider := 0
	for decider < s.cfg.acceptors-1 && (s.cut(node, decider, true) || s.cut(node, decider, false)) {
		decider++
	}
	n.gen[key]++
	gen := n.gen[key]
	ended := func(o outcome) {
		if n.gen[key] == gen && n.running[key] == c {
			s.finish(node, key, o)
		}
	}
	s.at(s.now+int64(simTimeout/n.rate), func() { ended(unknown) })
	keep := func(a int, b Ballot, v []byte) {
		if acc := s.acceptors[a][key]; acc.Accepted.Less(b) {
			s.acceptors[a][key] = Acceptor{Accepted: b, Value: v}
		}
	}
	s.send(node, decider, func() any {
		acc := s.acceptors[decider][key]
		b := Ballot{Counter: acc.Accepted.Counter + 1, Proposer: n.id}
		v := c.change(acc.Value)
		keep(decider, b, v)
		return Accept{Ballot: b, Value: v}
	}, func(a any) {
		m := a.(Accept)
		holders := 1
		for i := range s.acceptors {
			if i == decider {
				continue
			}
			s.send(node, i, func() any { keep(i, m.Ballot, m.Value); return nil }, func(any) {
				if holders++; holders == consistency.Quorum(s.cfg.acceptors) {
					ended(replied)
				}
			})
		}
		if holders >= consistency.Quorum(s.cfg.acceptors) {
			ended(replied)
		}
	})
}

// send is one request from coordinator node to acceptor a and its answer,
// unless lost or cut.
func (s *sim) send(node, a int, serve func() any, reply func(any)) {
	if !s.deliver(node, a, true) {
		return
	}
	s.at(s.now+s.delay(), func() {
		answer := serve()
		if s.deliver(node, a, false) {
			s.at(s.now+s.delay(), func() {
				if !s.nodes[node].down {
					reply(answer)
				}
			})
		}
	})
}

// The workloads' commands. A value is the decimal counter, the lock
// holder, or the list's elements joined by commas.

func number(v []byte) int { n, _ := strconv.Atoi(string(v)); return n }

func elements(v []byte) []string {
	if len(v) == 0 {
		return nil
	}
	return strings.Split(string(v), ",")
}

// commandFor returns the change for cmd with arg, writing its reply.
func commandFor(cmd, arg string, reply *string) Change {
	switch cmd {
	case "INCR":
		return func(v []byte) []byte {
			*reply = strconv.Itoa(number(v) + 1)
			return []byte(*reply)
		}
	case "SETNX":
		return func(v []byte) []byte {
			if v != nil {
				*reply = "0"
				return v
			}
			*reply = "1"
			return []byte(arg)
		}
	case "RPUSH":
		return func(v []byte) []byte {
			l := append(elements(v), arg)
			*reply = strconv.Itoa(len(l))
			return []byte(strings.Join(l, ","))
		}
	case "LPOP":
		return func(v []byte) []byte {
			l := elements(v)
			if len(l) == 0 {
				*reply = ""
				return v
			}
			*reply = l[0]
			return join(l[1:])
		}
	case "SET":
		return func([]byte) []byte { *reply = "OK"; return []byte(arg) }
	case "DEL":
		return func(v []byte) []byte { *reply = map[bool]string{true: "0", false: "1"}[v == nil]; return nil }
	}
	return func(v []byte) []byte { // GET, LRANGE
		*reply = string(v)
		return v
	}
}

// client sends its command number n (from 1) through coordinator node, and
// the next once that one is answered, until it sent cfg.ops.
func (s *sim) client(id, node, n int) {
	if n > s.cfg.ops {
		return
	}
	op := simOp{client: id, key: "k", call: s.now}
	write := s.rng.Float64() < 0.6
	switch s.cfg.work {
	case ids:
		op.cmd = map[bool]string{true: "INCR", false: "GET"}[write]
	case lock:
		op.cmd, op.key, op.arg = "SETNX", fmt.Sprintf("lock-%d", n), strconv.Itoa(id)
	case list:
		op.cmd = map[bool]string{true: "RPUSH", false: "LRANGE"}[write]
		op.arg = strconv.Itoa(id*1000 + n)
	}
	if s.cfg.work == transfer || s.cfg.work == msetnx {
		s.clientOfSeveralKeys(&op, id, n)
		s.submitCommand(node, op, func() { s.client(id, node, n+1) })
		return
	}
	s.submit(node, op, func() { s.client(id, node, n+1) })
}

// submit runs op through node, and records it unless it failed without
// effect: a failed read, or a change never applied.
func (s *sim) submit(node int, op simOp, then func()) {
	c := &command{}
	c.change = commandFor(op.cmd, op.arg, &c.reply)
	c.done = func(o outcome) {
		op.ret, op.reply, op.known = s.now, c.reply, o == replied
		if o == replied || o == unknown && changes(op.cmd) {
			s.history = append(s.history, op)
		}
		then()
	}
	s.start(node, op.key, c)
}

func changes(cmd string) bool {
	switch cmd {
	case "INCR", "SETNX", "RPUSH", "LPOP", "SET", "DEL", "LMOVE", "MSETNX":
		return true
	}
	return false
}

func (s *sim) run() {
	for len(s.events) > 0 {
		e := s.events[0]
		s.events = s.events[1:]
		s.now = e.at
		e.f()
	}
}

// simulate runs cfg and returns its history and the number of round trips
// its proposers made.
func simulate(cfg simConfig, seed uint64) ([]simOp, int) {
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0))}
	for range cfg.acceptors {
		s.acceptors = append(s.acceptors, map[string]Acceptor{})
	}
	for i := range cfg.nodes {
		s.nodes = append(s.nodes, &simNode{
			id:        uint64(i + 1),
			rate:      0.5 + 1.5*s.rng.Float64(),
			proposers: map[string]*Proposer{},
			running:   map[string]*command{},
			waiting:   map[string][]*command{},
			gen:       map[string]int{},
			last:      map[string]Acceptor{},
			live:      map[string]*run{},
		})
	}
	for c := range cfg.clients {
		s.client(c, c%cfg.nodes, 1)
	}
	s.run()
	// A last read once everything settled, over a quiet network. A read
	// whose outcome is unknown (a stale one-round-trip accept whose
	// refusals came late, say) is sent again: reading twice does no harm.
	if cfg.work != lock {
		s.cfg.loss, s.cfg.crash, s.cfg.partition = 0, 0, noPartition
		cmd := map[workload]string{ids: "GET", list: "LRANGE"}[cfg.work]
		for range 10 {
			switch op := (simOp{client: lastReader, key: "k", cmd: cmd, call: s.now}); cfg.work {
			case transfer, msetnx:
				op.cmd, op.key, op.to = "READ2", pair[cfg.work][0], pair[cfg.work][1]
				s.submitCommand(0, op, func() {})
			default:
				s.submit(0, op, func() {})
			}
			if s.run(); len(s.history) > 0 && s.history[len(s.history)-1].client == lastReader {
				break
			}
		}
	}
	return s.history, s.requests
}

// models are the workloads' single-key Redis semantics, for porcupine.
// The state is the key's value as the simulation writes it.
var models = map[workload]porcupine.Model{
	ids:      {Init: func() any { return "" }, Step: step},
	list:     {Init: func() any { return "" }, Step: step},
	lock:     {Init: func() any { return "" }, Step: step, Partition: byKey},
	transfer: {Init: func() any { return twoKeys{} }, Step: stepOfSeveralKeys},
	msetnx:   {Init: func() any { return twoKeys{} }, Step: stepOfSeveralKeys},
}

// step runs a command on the state with commandFor, and accepts it when
// the reply matches (or is unknown).
func step(state, in, _ any) (bool, any) {
	op := in.(simOp)
	var reply string
	var v []byte // nil: the key holds nothing
	if state != "" {
		v = []byte(state.(string))
	}
	next := commandFor(op.cmd, op.arg, &reply)(v)
	return !op.known || op.reply == reply, string(next)
}

func byKey(h []porcupine.Operation) [][]porcupine.Operation {
	keys := map[string]int{}
	var out [][]porcupine.Operation
	for _, o := range h {
		k := o.Input.(simOp).key
		i, ok := keys[k]
		if !ok {
			i, keys[k] = len(out), len(out)
			out = append(out, nil)
		}
		out[i] = append(out[i], o)
	}
	return out
}

// linearizable checks h with porcupine. A change of unknown outcome may
// take effect at any time after its call, or never: it returns after
// everything else, on a client of its own. An element of a list, though,
// is pushed before the first command that answers it returns (a read
// that holds it, a pop or a move of it); and in list, with no pops, never
// when the last read, on a quiet network, does not hold it.
func linearizable(w workload, h []simOp) porcupine.CheckResult {
	var end int64
	var last *simOp
	for i, o := range h {
		end = max(end, o.ret)
		if o.client == lastReader {
			last = &h[i]
		}
	}
	var ops []porcupine.Operation
	for i, o := range h {
		ret, client := o.ret, o.client
		if !o.known {
			if (w == transfer || w == msetnx) && changedNothing(o) {
				continue
			}
			ret, client = end+1, 1_000_000+i
			if o.cmd == "RPUSH" && (w == list || w == transfer) {
				switch read, pushed := firstRead(h, o.arg); {
				case pushed:
					ret = read
				case last != nil && w == list:
					continue
				}
			}
		}
		ops = append(ops, porcupine.Operation{ClientId: client, Input: o, Call: o.call, Output: o, Return: ret})
	}
	return porcupine.CheckOperationsTimeout(models[w], ops, 10*time.Second)
}

// changedNothing reports whether a command of unknown outcome changes
// nothing if applied, by the reply it had then (see stepOfSeveralKeys): a
// pop of an empty list, MSETNX or DEL that did not set or delete. Such a
// command linearizes anywhere its reply holds, as it never applied.
func changedNothing(o simOp) bool {
	switch o.cmd {
	case "LPOP", "LMOVE":
		return o.reply == ""
	case "MSETNX", "DEL":
		return o.reply == "0"
	}
	return false
}

// firstRead returns when the first command that answered element (a read
// that holds it, or a pop or move of it) returned.
func firstRead(h []simOp, element string) (ret int64, ok bool) {
	for _, o := range h {
		if !o.known || !slices.Contains([]string{"LRANGE", "READ2", "LPOP", "LMOVE"}, o.cmd) {
			continue
		}
		a, b, _ := strings.Cut(o.reply, "|")
		if held := append(elements([]byte(a)), elements([]byte(b))...); slices.Contains(held, element) && (!ok || o.ret < ret) {
			ret, ok = o.ret, true
		}
	}
	return ret, ok
}

// twice returns a reply the workload promises once (an id, a lock won)
// that was acknowledged twice, or "".
func twice(w workload, h []simOp) string {
	seen := map[string]bool{}
	for _, o := range h {
		var what string
		switch {
		case !o.known:
			continue
		case w == ids && o.cmd == "INCR":
			what = "INCR answered " + o.reply
		case w == lock && o.reply == "1":
			what = o.key + " won"
		default:
			continue
		}
		if seen[what] {
			return what + " twice"
		}
		seen[what] = true
	}
	return ""
}

// miscounted says when the last GET of the counter did not count every
// INCR applied: at least those acknowledged, at most with those of unknown
// outcome.
func miscounted(h []simOp) string {
	acknowledged, unknown := 0, 0
	for _, o := range h {
		switch {
		case o.cmd != "INCR":
		case o.known:
			acknowledged++
		default:
			unknown++
		}
	}
	for _, o := range h {
		if o.client == lastReader {
			if n := number([]byte(o.reply)); n < acknowledged || n > acknowledged+unknown {
				return fmt.Sprintf("the last GET reads %d after %d acknowledged INCRs and %d of unknown outcome", n, acknowledged, unknown)
			}
		}
	}
	return ""
}

// timedOut is problem's answer when porcupine could not decide: a finding
// of nothing, which no test may count as a bug found.
const timedOut = "porcupine timed out"

// problem is what is wrong with a history, or "".
func problem(w workload, h []simOp) string {
	if p := twice(w, h); p != "" {
		return p
	}
	if p := miscounted(h); w == ids && p != "" {
		return p
	}
	if p := unconserved(h); w == transfer && p != "" {
		return p
	}
	switch linearizable(w, h) {
	case porcupine.Unknown:
		return timedOut
	case porcupine.Illegal:
		return "porcupine: not linearizable"
	}
	return ""
}

func randomSimConfig(r *rand.Rand, work workload, bug string) simConfig {
	cfg := simConfig{
		acceptors: []int{3, 5}[r.IntN(2)],
		nodes:     2 + r.IntN(3),
		clients:   3 + r.IntN(4),
		ops:       25,
		slow:      0.05 * r.Float64(),
		partition: partition(r.IntN(4)),
		work:      work,
		bug:       bug,
	}
	// Half the runs lose messages, half duplicate them, half crash
	// coordinators.
	cfg.loss = float64(r.IntN(2)) * 0.1 * r.Float64()
	cfg.duplicate = float64(r.IntN(2)) * 0.05 * r.Float64()
	cfg.crash = float64(r.IntN(2)) * 0.02 * r.Float64()
	return cfg
}

// The property: every history of every workload is linearizable, with 3 or
// 5 acceptors, 2 to 4 coordinators, message loss, delay and reordering,
// each kind of partition, and coordinators that crash.
func TestProtocolIsLinearizable(t *testing.T) {
	simulateSeeds(t, rand.New(rand.NewPCG(1, 1)), 300, []workload{ids, lock, list})
}

// simulateSeeds simulates seeds runs, their configurations drawn from draw
// with the workloads in turn, checks each history, and checks the runs drew
// every combination of acceptors, partition, workload and crashes.
func simulateSeeds(t *testing.T, draw *rand.Rand, seeds uint64, works []workload) {
	t.Helper()
	combinations := map[string]bool{}
	for seed := range seeds {
		cfg := randomSimConfig(draw, works[seed%uint64(len(works))], "")
		combinations[fmt.Sprint(cfg.acceptors, cfg.partition, cfg.work, cfg.crash > 0)] = true
		h, _ := simulate(cfg, seed)
		if p := problem(cfg.work, h); p != "" {
			t.Errorf("seed %d, %s: %s", seed, cfg, p)
			for _, o := range h {
				t.Log(o)
			}
			return
		}
	}
	if want := 2 * 4 * len(works) * 2; len(combinations) != want {
		t.Errorf("the seeds drew %d of the %d combinations of acceptors, partition, workload and crashes", len(combinations), want)
	}
}

// Each planted variant breaks every workload in some runs of three
// coordinators of which two each reach a different majority of three (or
// five) acceptors now and then, and the correct protocol passes the same
// runs. (Measured, of 20 runs for ids, lock and list, with three and five
// acceptors: an acceptor that ignores its promise 19, 10, 19 and 20, 12,
// 20; a proposer that builds on its own last value 20 of each; the decider
// by local view 20, 8, 20 and 20, 6, 20.)
func TestSimulationFindsPlantedBugs(t *testing.T) {
	for _, acceptors := range []int{3, 5} {
		for _, work := range []workload{ids, lock, list} {
			for _, bug := range []string{"", bugNoPromiseCheck, bugOwnValue, bugLocalView} {
				plantedRuns(t, simConfig{acceptors: acceptors, nodes: 3, clients: 6, ops: 25, loss: 0.02, slow: 0.02, partition: bridge, work: work, bug: bug})
			}
		}
	}
}

// plantedRuns simulates 20 runs of cfg: without a planted bug none may be
// wrong, with one at least one must be (a porcupine timeout counts as
// neither).
func plantedRuns(t *testing.T, cfg simConfig) {
	t.Helper()
	found, first := 0, ""
	for seed := uint64(1); seed <= 20; seed++ {
		h, _ := simulate(cfg, seed)
		switch p := problem(cfg.work, h); {
		case p != "" && cfg.bug == "":
			t.Errorf("seed %d, %s: %s", seed, cfg, p)
		case p != "" && p != timedOut:
			found++
			first = cmp.Or(first, p)
		}
	}
	if first != "" {
		first = ", the first: " + first
	}
	t.Logf("%s: %d of 20 runs wrong%s", cfg, found, first)
	if cfg.bug != "" && found == 0 {
		t.Errorf("%s: the simulation never found the planted bug", cfg)
	}
}

// A lone coordinator's changes of a key take one round trip each, but the
// first: the accept of each carries the prepare of the next. Coordinators
// that contend for a key take more, and some of their changes fail.
func TestRoundTrips(t *testing.T) {
	for _, c := range []struct{ nodes, clients int }{{1, 1}, {1, 6}, {3, 6}} {
		commands, trips, answered, unknown := 0, 0, 0, 0
		for seed := uint64(1); seed <= 20; seed++ {
			cfg := simConfig{acceptors: 3, nodes: c.nodes, clients: c.clients, ops: 25, work: ids}
			h, n := simulate(cfg, seed)
			trips, answered = trips+n, answered+len(h)
			commands += cfg.clients*cfg.ops + 1
			for _, o := range h {
				if !o.known {
					unknown++
				}
			}
		}
		perCommand := float64(trips) / float64(commands)
		t.Logf("%d coordinators, %d clients: %.2f round trips per command; of %d commands, %d of unknown outcome, %d failed with no effect",
			c.nodes, c.clients, perCommand, commands, unknown, commands-answered)
		if c.nodes == 1 && perCommand > 1.05 {
			t.Errorf("a lone coordinator takes %.2f round trips per command, want 1 (and 2 for the first)", perCommand)
		}
	}
}
