package decide

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The simulation's workloads of several keys: commands of two keys of one
// owner mixed with commands of one of them, each run by a Command over the
// per-key proposers of simulation_test.go, on the same network, with the
// same faults:
//
//   - transfer: LMOVE between lists a and b (either way), RPUSH of a fresh
//     element, LPOP and LRANGE of either;
//   - msetnx: MSETNX of x and y, SET, DEL and GET of either.
//
// Each history is checked by porcupine against a model of the two keys,
// and transfer's by conservation too: every element pushed is, at the end,
// in exactly one of the lists or popped once. The final read reads both
// keys in one command.
//
// The planted variants each break one part of the design, and are the
// counterparts of those of a compound written at one ballot (package doc,
// "Commands on several keys"):
//
//   - a command of one key that ignores a lock: it writes the key under a
//     transaction that read it (no expansion of the key set);
//   - a command that meets a lock and unlocks it as aborted without
//     deciding the record, which the transaction may yet commit (a
//     compound's end decided by one coordinator's view: no abort rule
//     that others must follow);
//   - a command of two keys run as two commands of one key each (an
//     accept not atomic across keys).

const (
	bugIgnoreLock  = "single-key-ignores-lock"
	bugUndecided   = "abort-without-record"
	bugKeyByKey    = "compound-key-by-key"
	recordPrefixIs = "tx:"
)

// pair is each workload's two keys.
var pair = map[workload][2]string{transfer: {"a", "b"}, msetnx: {"x", "y"}}

// run is a client's command on its way through a coordinator, as Command
// ops; a crash of the coordinator ends it.
type run struct {
	answered bool
	dead     bool
	answer   func(outcome)
	command  *Command
	onEnd    []func() // ops of other commands waiting for it to end
	seq      int      // its command's place among the coordinator's
	outer    *run     // the run this one is a try of, if any
}

// crash ends the run with its coordinator: unknown, unless its command
// cannot have been applied (a transaction that never sent its commit).
// That is the design's claim: the checker holds it to it by leaving the
// command out of the history.
func (r *run) crash() {
	r.dead = true
	if r.command != nil && !r.command.MayHaveApplied() {
		r.end(failed)
		return
	}
	r.end(unknown)
}

func (r *run) end(o outcome) {
	if !r.answered {
		r.answered = true
		r.answer(o)
		for _, f := range r.onEnd {
			f()
		}
	}
}

// clientOfSeveralKeys draws the client's command number n.
func (s *sim) clientOfSeveralKeys(op *simOp, id, n int) {
	keys := pair[s.cfg.work]
	op.key, op.to = keys[s.rng.IntN(2)], ""
	other := keys[0]
	if op.key == keys[0] {
		other = keys[1]
	}
	r := s.rng.Float64()
	switch s.cfg.work {
	case transfer:
		switch {
		case r < 0.35:
			op.cmd, op.to = "LMOVE", other
		case r < 0.65:
			op.cmd, op.arg = "RPUSH", strconv.Itoa(id*1000+n)
		case r < 0.8:
			op.cmd = "LPOP"
		default:
			op.cmd = "LRANGE"
		}
	case msetnx:
		switch {
		case r < 0.35:
			op.cmd, op.key, op.to, op.arg = "MSETNX", keys[0], keys[1], strconv.Itoa(id*1000+n)
		case r < 0.55:
			op.cmd, op.arg = "SET", strconv.Itoa(id*1000+n)
		case r < 0.75:
			op.cmd = "DEL"
		default:
			op.cmd = "GET"
		}
	}
}

// compoundFor returns the keys of op and its change, writing its reply.
func compoundFor(op simOp, reply *string) ([]string, Compound) {
	switch op.cmd {
	case "LMOVE":
		return []string{op.key, op.to}, move(reply)
	case "MSETNX":
		return []string{op.key, op.to}, func(v [][]byte) [][]byte {
			if v[0] != nil || v[1] != nil {
				*reply = "0"
				return v
			}
			*reply = "1"
			return [][]byte{[]byte(op.arg), []byte(op.arg)}
		}
	case "READ2":
		return []string{op.key, op.to}, func(v [][]byte) [][]byte {
			*reply = string(v[0]) + "|" + string(v[1])
			return v
		}
	}
	change := commandFor(op.cmd, op.arg, reply)
	return []string{op.key}, func(v [][]byte) [][]byte { return [][]byte{change(v[0])} }
}

// submitCommand runs op through coordinator node as a Command, and records
// it unless it failed without effect.
func (s *sim) submitCommand(node int, op simOp, then func()) {
	var reply string
	keys, do := compoundFor(op, &reply)
	r := &run{answer: func(o outcome) {
		op.ret, op.reply, op.known = s.now, reply, o == replied
		if o == replied || o == unknown && changes(op.cmd) {
			s.history = append(s.history, op)
		}
		then()
	}}
	n := s.nodes[node]
	n.runs = append(n.runs, r)
	if len(keys) > 1 && s.cfg.bug == bugKeyByKey && op.cmd != "READ2" {
		// Its first command's run is the node's too, so that a crash ends it.
		s.keyByKey(node, op, r, &reply)
		return
	}
	s.runCommand(node, keys, do, s.retried(node, keys, do, r, 1))
}

// retried is r, but for a command that ended not applied (a transaction
// another command aborted, a command of one key that met too many locks):
// the coordinator runs it again, afresh, up to simRetries times after a
// random backoff, as nothing of it was applied.
func (s *sim) retried(node int, keys []string, do Compound, r *run, try int) *run {
	again := &run{outer: r, answer: func(o outcome) {
		if o != failed || try == simRetries || r.dead {
			r.end(o)
			return
		}
		s.at(s.now+int64(s.rng.IntN(200<<try)), func() {
			if !r.dead {
				s.runCommand(node, keys, do, s.retried(node, keys, do, r, try+1))
			}
		})
	}}
	s.nodes[node].runs = append(s.nodes[node].runs, again)
	return again
}

// runCommand runs a Command of do on keys through node, answering r.
func (s *sim) runCommand(node int, keys []string, do Compound, r *run) {
	n := s.nodes[node]
	record := fmt.Sprintf("%s%d.%d.%d", recordPrefixIs, n.id, n.incarnation, n.records)
	r.seq = n.records
	n.records++
	c, err := NewCommand(keys, record, do)
	if err != nil {
		panic(err)
	}
	for x := r; x != nil; x = x.outer {
		x.command = c // the last try's is the one that may have applied
	}
	if len(keys) > 1 {
		n.live[record] = r
	}
	var issue func(ops []*Op)
	issue = func(ops []*Op) {
		for _, op := range ops {
			change := op.Change
			if op.kind == woundOp && s.cfg.bug == bugUndecided {
				// It reads the record's end as aborted, but writes nothing.
				change = func(v []byte) []byte { op.Change(v); return v }
			}
			run := &command{change: change, gone: func() bool { return r.dead }, done: func(o outcome) {
				if r.dead {
					return
				}
				next, st := c.Step(op, map[outcome]Status{replied: Decided, failed: Refused, unknown: Unknown}[o])
				if st != Waiting {
					r.end(map[Status]outcome{Decided: replied, Refused: failed, Unknown: unknown}[st])
				}
				issue(next)
			}}
			if op.Wait == 0 {
				s.start(node, op.Key, run)
				continue
			}
			if holder := n.live[op.Holder]; holder != nil && !holder.answered && (len(keys) == 1 || r.seq > holder.seq) {
				// A transaction of this coordinator, under way: the op
				// runs once it has ended and sent its unlocks (which
				// go first: they are sent as it ends). Only a later
				// command waits so, for an earlier one: no cycle of
				// waits.
				holder.onEnd = append(holder.onEnd, func() {
					s.at(s.now, func() {
						if !r.dead {
							s.start(node, op.Key, run)
						}
					})
				})
				continue
			}
			s.at(s.now+int64(s.rng.IntN(200<<op.Wait)), func() {
				if !r.dead {
					s.start(node, op.Key, run)
				}
			})
		}
	}
	if len(keys) == 1 && s.cfg.bug == bugIgnoreLock {
		// The key's data changes under the lock, which stays.
		op := c.Start()[0]
		op.Change = func(v []byte) []byte {
			sl, _ := ParseSlot(v)
			sl.Data = do([][]byte{sl.Data})[0]
			return sl.Value()
		}
		issue([]*Op{op})
		return
	}
	issue(c.Start())
}

// keyByKey is the planted variant that runs a command of two keys as a
// command of the first key, then one of the second.
func (s *sim) keyByKey(node int, op simOp, r *run, reply *string) {
	second := func(do Compound) {
		s.runCommand(node, []string{op.to}, do, r)
	}
	first := &run{answer: func(o outcome) {
		if r.dead {
			return
		}
		if o != replied {
			r.end(o)
			return
		}
		switch op.cmd {
		case "LMOVE":
			if *reply == "" {
				r.end(replied)
				return
			}
			elem := *reply
			second(func(v [][]byte) [][]byte { *reply = elem; return [][]byte{join(append(elements(v[0]), elem))} })
		case "MSETNX":
			if *reply == "0" {
				r.end(replied)
				return
			}
			second(func(v [][]byte) [][]byte {
				if v[0] == nil {
					return [][]byte{[]byte(op.arg)}
				}
				return v
			})
		}
	}}
	s.nodes[node].runs = append(s.nodes[node].runs, first)
	var do Compound
	switch op.cmd {
	case "LMOVE":
		do = compound1(commandFor("LPOP", "", reply))
	case "MSETNX":
		do = compound1(commandFor("SETNX", op.arg, reply))
		// SETNX answers 1 for set, as MSETNX.
	}
	s.runCommand(node, []string{op.key}, do, first)
}

func compound1(c Change) Compound {
	return func(v [][]byte) [][]byte { return [][]byte{c(v[0])} }
}

// twoKeys is the model's state: the two keys' values ("" for none), and
// whether the last read is linearized.
type twoKeys struct {
	values [2]string
	over   bool
}

// stepOfSeveralKeys runs a command on the two keys' values with
// compoundFor, and accepts it when the reply matches. The reply of a
// command of unknown outcome is the one it had if applied (its change's
// last call: no earlier call's value can be chosen once the change is
// called again), so it must match too, unless the command goes after the
// last read: never applied.
func stepOfSeveralKeys(state, in, _ any) (bool, any) {
	op := in.(simOp)
	st := state.(twoKeys)
	if st.over {
		return !op.known, st
	}
	index := func(k string) int {
		if k == "a" || k == "x" {
			return 0
		}
		return 1
	}
	var reply string
	keys, do := compoundFor(op, &reply)
	values := make([][]byte, len(keys))
	for i, k := range keys {
		if v := st.values[index(k)]; v != "" {
			values[i] = []byte(v)
		}
	}
	for i, v := range do(values) {
		st.values[index(keys[i])] = string(v)
	}
	st.over = op.client == lastReader
	return op.reply == reply, st
}

// unconserved says when transfer's elements were not conserved: the
// final read must hold each element at most once, none popped, only
// elements pushed, and every one acknowledged unless popped by a command
// of unknown outcome.
func unconserved(h []simOp) string {
	pushed, maybePushed, popped := map[string]bool{}, map[string]bool{}, map[string]bool{}
	unknownPops := 0
	var final []string
	for _, o := range h {
		switch {
		case o.cmd == "RPUSH" && o.known:
			pushed[o.arg] = true
		case o.cmd == "RPUSH":
			maybePushed[o.arg] = true
		case o.cmd == "LPOP" && !o.known:
			unknownPops++
		case o.cmd == "LPOP" && o.reply != "":
			if popped[o.reply] {
				return fmt.Sprintf("element %s popped twice", o.reply)
			}
			popped[o.reply] = true
		case o.cmd == "READ2" && o.client == lastReader:
			a, b, _ := strings.Cut(o.reply, "|")
			final = append(elements([]byte(a)), elements([]byte(b))...)
		}
	}
	if final == nil && !slices.ContainsFunc(h, func(o simOp) bool { return o.client == lastReader }) {
		return "no final read"
	}
	seen := map[string]bool{}
	for _, e := range final {
		switch {
		case seen[e]:
			return fmt.Sprintf("element %s is in the lists twice at the end", e)
		case popped[e]:
			return fmt.Sprintf("element %s is in the lists at the end, yet was popped", e)
		case !pushed[e] && !maybePushed[e]:
			return fmt.Sprintf("element %s is in the lists at the end, yet was never pushed", e)
		}
		seen[e] = true
	}
	missing := 0
	for e := range pushed {
		if !seen[e] && !popped[e] {
			missing++
		}
	}
	if missing > unknownPops {
		return fmt.Sprintf("%d acknowledged elements are neither in the lists nor popped, and only %d pops are of unknown outcome", missing, unknownPops)
	}
	return ""
}

// The property: every history of both workloads of several keys is
// linearizable and conserves its elements, with 3 or 5 acceptors, 2 to 4
// coordinators, message loss, delay and reordering, each kind of
// partition, and coordinators that crash mid-command.
func TestCommandsOfSeveralKeysAreLinearizable(t *testing.T) {
	simulateSeeds(t, rand.New(rand.NewPCG(2, 2)), 160, []workload{transfer, msetnx})
}

// Each planted variant breaks both workloads in some runs, and the design
// passes the same runs.
func TestSimulationFindsPlantedBugsOfSeveralKeys(t *testing.T) {
	for _, work := range []workload{transfer, msetnx} {
		for _, bug := range []string{"", bugIgnoreLock, bugUndecided, bugKeyByKey} {
			plantedRuns(t, simConfig{acceptors: 3, nodes: 3, clients: 6, ops: 25, loss: 0.02, slow: 0.02, crash: 0.01, partition: bridge, work: work, bug: bug})
		}
	}
}

// What a command of two keys costs against one of one key, in requests
// sent to every acceptor and in time to its answer, on a quiet network: a
// lone client of a lone coordinator has every command answered; clients
// that contend for the two keys wait for one another's locks, and abort
// one another's transactions now and then.
func TestCostOfSeveralKeys(t *testing.T) {
	for _, c := range []struct{ nodes, clients int }{{1, 1}, {1, 6}, {3, 6}} {
		requests, commands, notAnswered := 0, 0, 0
		took, count := map[string]int64{}, map[string]int{}
		for seed := uint64(1); seed <= 20; seed++ {
			cfg := simConfig{acceptors: 3, nodes: c.nodes, clients: c.clients, ops: 25, work: transfer}
			h, n := simulate(cfg, seed)
			requests, commands = requests+n, commands+cfg.clients*cfg.ops+1
			notAnswered += cfg.clients*cfg.ops + 1
			for _, o := range h {
				if o.known {
					notAnswered--
					took[o.cmd] += o.ret - o.call
					count[o.cmd]++
				}
			}
		}
		t.Logf("%d coordinators, %d clients: %.2f requests per command; mean time to answer LMOVE %dµs, RPUSH %dµs, LPOP %dµs; %d of %d commands not answered (unknown or not applied)",
			c.nodes, c.clients, float64(requests)/float64(commands),
			took["LMOVE"]/int64(max(count["LMOVE"], 1)), took["RPUSH"]/int64(max(count["RPUSH"], 1)), took["LPOP"]/int64(max(count["LPOP"], 1)),
			notAnswered, commands)
		if c.clients == 1 && notAnswered > 0 {
			t.Errorf("a lone client of a lone coordinator on a quiet network had %d commands unanswered", notAnswered)
		}
	}
}
