package node

import (
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/troop-lab/troop/node/consistency"
	"github.com/troop-lab/troop/node/decide"
	"github.com/troop-lab/troop/resp"
	"github.com/troop-lab/troop/ring"
)

// Commands on several keys of one owner (SMOVE, LMOVE, RPOPLPUSH, MSETNX,
// RENAME, SUNIONSTORE ..., MULTI/EXEC and scripts over several keys) at
// DC_QUORUM and DC_SAFE_QUORUM run as a transaction over the keys'
// registers (decide.Command, node/decide's "Commands on several keys"):
// the coordinator locks every key by consensus (a lock beside each value,
// LockPrefix+key, register.go), runs the command on the values it read in
// scratch keys of its own redis-server (one MULTI block), decides a record
// of the values after under a record key of its own (recordKey), then
// writes each key's value after and unlocks it, and deletes the record.
// A change of one key by consensus that meets a lock runs as a command of
// one key that waits for the transaction or ends it (decideLocked); a
// whole-value write, a repair or a read of a locked key is refused by the
// replica (lockedError), and a read that meets the refusal reads by
// consensus.

// recordPrefix starts the name of every transaction record.
const recordPrefix = "__troop:t:"

// maxTransactTries bounds the runs of one transaction that another
// command aborted before it sent its commit (nothing of it applied).
const maxTransactTries = 4

// ownTx is a transaction this node runs: a later one of its own waits for
// its end instead of a timer.
type ownTx struct {
	seq  uint64
	done chan struct{}
}

// ownTxs are the transactions this node runs, by record key.
type ownTxs struct {
	mu  sync.Mutex
	seq uint64
	m   map[string]*ownTx
}

func (t *ownTxs) add(record string) *ownTx {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*ownTx{}
	}
	t.seq++
	tx := &ownTx{seq: t.seq, done: make(chan struct{})}
	t.m[record] = tx
	return tx
}

func (t *ownTxs) end(record string, tx *ownTx) {
	t.mu.Lock()
	delete(t.m, record)
	t.mu.Unlock()
	close(tx.done)
}

func (t *ownTxs) get(record string) *ownTx {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[record]
}

// recordKey names a fresh record for a transaction on keys of key's
// owner: never used before nor after (random bytes), and, when the
// cluster has a hash tag, of key's tag, so that it lives on key's
// replicas by its own token too. The record is decided on key's replicas
// whatever its name.
func (n *Node) recordKey(key []byte) string {
	var rnd [12]byte
	crand.Read(rnd[:])
	suffix := n.cfg.Name + ":" + hex.EncodeToString(rnd[:])
	if ht := n.cfg.HashTag; len(ht) == 2 {
		rec := recordPrefix + ht[:1] + string(ring.Tag(key, ht)) + ht[1:] + suffix
		if n.token([]byte(rec)) == n.token(key) {
			return rec
		}
	}
	return recordPrefix + suffix
}

// compoundFunc is what a transaction does to its keys' values (each a
// slot's data: expiry and DUMP, nil for none), given the ballot each was
// accepted at: the client's reply and the values after, or why this
// node's redis-server could not run it.
type compoundFunc func(values [][]byte, bases []decide.Ballot) (reply []byte, after [][]byte, err error)

// transact runs do on keys (distinct, of one owner, whose replicas are
// reps) as a transaction, and answers the client's reply. A transaction
// another command aborted before its commit went out changed nothing,
// and runs again under a new record, at most maxTransactTries times.
func (n *Node) transact(tr *trace, level consistency.Level, name []byte, keys [][]byte, reps []*member, do compoundFunc) []byte {
	skeys := make([]string, len(keys))
	for i, k := range keys {
		skeys[i] = string(k)
	}
	for try := 1; ; try++ {
		record := n.recordKey(keys[0])
		own := n.txs.add(record)
		r := newTxRun(n, tr, reps, own)
		var reply []byte
		var doErr error
		c, err := decide.NewCommand(skeys, record, func(values [][]byte) [][]byte {
			bases := make([]decide.Ballot, len(skeys))
			r.mu.Lock()
			for i, k := range skeys {
				bases[i] = r.bases[k]
			}
			r.mu.Unlock()
			rep, after, err := do(values, bases)
			if err != nil {
				doErr = err
				return nil // not one value per key: the command gives up, unapplied
			}
			reply = rep
			return after
		})
		if err != nil {
			n.txs.end(record, own)
			return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) was not applied: %v", level, name, err))
		}
		st := r.run(c)
		n.txs.end(record, own)
		if r.unlocked(skeys, record) {
			go r.deleteRecord(record)
		}
		switch {
		case st == decide.Decided:
			n.stats.consensusWrites.Add(1)
			return reply
		case doErr != nil:
			n.stats.quorumFailures.Add(1)
			return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) failed and was not applied: this node's redis-server could not run it (%v)", level, name, doErr))
		case st == decide.Refused && !c.MayHaveApplied() && try < maxTransactTries:
			time.Sleep(rand.N(consensusBackoff << try)) // a random backoff, not a synchronisation
			continue
		case st == decide.Refused && !c.MayHaveApplied():
			n.stats.quorumFailures.Add(1)
			return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) failed, not applied: its keys stayed locked by other commands, or no quorum of %d of %d replicas took it, within %d tries (%s)",
				level, name, consistency.Quorum(len(reps)), len(reps), maxTransactTries, strings.Join(r.reasons, "; ")))
		}
		n.stats.quorumFailures.Add(1)
		return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) failed, outcome unknown: its commit went out and was not known decided; it may have been applied, once (%s)",
			level, name, strings.Join(r.reasons, "; ")))
	}
}

// decideLocked runs run, a change of key that found the key locked by a
// transaction, as a command of one key (decide.Command): it waits for the
// transaction to end, or ends it, writes its end into the key, and
// applies the change.
func (n *Node) decideLocked(tr *trace, level consistency.Level, name, key []byte, run changeFunc, reps []*member) ([]byte, *decidedValue) {
	r := newTxRun(n, tr, reps, nil)
	var reply []byte
	var changeErr error
	k := string(key)
	c, err := decide.NewCommand([]string{k}, "", func(values [][]byte) [][]byte {
		r.mu.Lock()
		base, at := r.bases[k], r.ats[k]
		r.mu.Unlock()
		rep, next, err := run(makeSlot(values[0], nil), base, at)
		if err != nil {
			changeErr, reply = err, nil
			return values
		}
		changeErr, reply = nil, rep
		data, _ := splitSlot(next)
		return [][]byte{data}
	})
	if err != nil {
		return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) was not applied: %v", level, name, err)), nil
	}
	st := r.run(c)
	if changeErr != nil {
		n.stats.quorumFailures.Add(1)
		return resp.AppendError(nil, fmt.Sprintf("ERR troop: %s write (%s) failed and was not applied: this node's redis-server could not run it (%v)", level, name, changeErr)), nil
	}
	return n.outcomeReply(level, name, len(reps), proposal{st: st, mayHaveApplied: c.MayHaveApplied(), changed: true, reasons: r.reasons, decided: r.last}, reply)
}

// lockedWrite is a whole-value write of one key at a level decided by
// consensus, as its write quorum keeps it: when replicas refuse it because
// a transaction on several keys holds the key locked, it runs again by
// consensus, as a command of one key that waits for that transaction or
// ends it. A whole-value write sets the value whatever it was: running it
// again where it was taken changes nothing there.
type lockedWrite struct {
	cmd  *command
	key  []byte
	args [][]byte
	view *view
	hold *hold
}

// refusedAsLocked says whether a replica refused w's write as locked.
// The caller holds w.mu.
func (w *writeQuorum) refusedAsLocked() bool {
	for _, r := range w.reasons {
		if strings.Contains(r, lockedCode) {
			return true
		}
	}
	return false
}

// byConsensus runs the write again by consensus and answers w's client.
func (l lockedWrite) byConsensus(w *writeQuorum) {
	n := w.n
	n.decideHere(w.tr, l.view, w.level, l.args[0], l.key, n.commandChange(w.tr, l.cmd, l.key, l.args), w.replicas, l.hold, w.done)
}

// txRun is one run of a decide.Command by this node.
type txRun struct {
	n    *Node
	tr   *trace
	reps []*member
	own  *ownTx // the transaction this run is; nil for a command of one key

	mu      sync.Mutex
	bases   map[string]decide.Ballot // each key's: the ballot its value was accepted at, as its last change found it
	ats     map[string]decide.Ballot // each key's: the ballot of its last change
	locks   map[string]string        // each key's lock as its last decided change left it
	reasons []string
	last    *decidedValue // the last value decided, of a command of one key
}

func newTxRun(n *Node, tr *trace, reps []*member, own *ownTx) *txRun {
	return &txRun{n: n, tr: tr, reps: reps, own: own, bases: map[string]decide.Ballot{}, ats: map[string]decide.Ballot{}, locks: map[string]string{}}
}

// run drives c to its end, the ops that unlock its keys after its answer
// included, and answers its status.
func (r *txRun) run(c *decide.Command) decide.Status {
	type result struct {
		op *decide.Op
		st decide.Status
	}
	results := make(chan result)
	pending := 0
	launch := func(ops []*decide.Op) {
		for _, op := range ops {
			pending++
			go func() { results <- result{op, r.runOp(op)} }()
		}
	}
	launch(c.Start())
	final := decide.Waiting
	for pending > 0 {
		res := <-results
		pending--
		ops, st := c.Step(res.op, res.st)
		if final == decide.Waiting {
			final = st
		}
		launch(ops)
	}
	return final
}

// runOp runs one op of a command, after its wait, by this node's
// proposer of its key, and says how it ended. A record's register holds
// the record in its lock's place, with no data.
func (r *txRun) runOp(op *decide.Op) decide.Status {
	r.wait(op)
	record := strings.HasPrefix(op.Key, recordPrefix)
	o := r.n.propose(r.tr, []byte(op.Key), r.reps, func(p *decide.Proposer) decide.Change {
		return func(v []byte) []byte {
			if record {
				_, rec := splitSlot(v)
				if len(rec) == 0 {
					rec = nil
				}
				out := op.Change(rec)
				if len(out) == 0 {
					return nil
				}
				return makeSlot(nil, out)
			}
			r.mu.Lock()
			r.bases[op.Key], r.ats[op.Key] = p.Base(), p.Ballot()
			r.mu.Unlock()
			return op.Change(v)
		}
	}, nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(o.reasons) > 0 {
		r.reasons = append(r.reasons, op.Key+": "+strings.Join(o.reasons, ", "))
	}
	switch {
	case o.st == decide.Decided:
		if !record {
			_, lock := splitSlot(o.decided.value)
			r.locks[op.Key] = string(lock)
			r.last = o.decided
			if len(lock) == 0 {
				r.n.forwardDecided(r.tr, r.n.view(), []byte(op.Key), o.decided, nil)
			}
		}
		return decide.Decided
	case o.st == decide.Refused && !o.mayHaveApplied:
		return decide.Refused
	}
	return decide.Unknown
}

// wait makes an op that found a key locked wait: for the end of the
// transaction that holds it when this node runs that one and it began
// before this one (so waits form no cycle), within the node's timeout;
// else a random backoff, longer each time, after which the command ends
// that transaction.
func (r *txRun) wait(op *decide.Op) {
	if op.Wait == 0 {
		return
	}
	if h := r.n.txs.get(op.Holder); h != nil && (r.own == nil || h.seq < r.own.seq) {
		t := time.NewTimer(r.n.cfg.Timeout)
		defer t.Stop()
		select {
		case <-h.done:
		case <-t.C:
		}
		return
	}
	time.Sleep(rand.N(consensusBackoff << min(op.Wait, 6))) // a random backoff, not a synchronisation
}

// unlocked reports whether the last decided change of every key left it
// without record's lock: the record is then read by nobody again.
func (r *txRun) unlocked(keys []string, record string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		if l, ok := r.locks[k]; !ok || l == record {
			return false
		}
	}
	return true
}

// deleteRecord deletes a transaction's record once no key holds its lock.
func (r *txRun) deleteRecord(record string) {
	r.n.propose(nil, []byte(record), r.reps, func(*decide.Proposer) decide.Change {
		return func([]byte) []byte { return nil }
	}, nil)
}
