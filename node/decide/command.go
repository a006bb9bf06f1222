package decide

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Compound is what a command does to its keys: given their values, in the
// command's order (nil for none), their values after. A command's reply is
// whatever the last call computed (a closure keeps it), as with Change.
type Compound func(values [][]byte) [][]byte

// Slot is what a key's register holds once commands of several keys may
// lock it: the key's data and the record key of the transaction that holds
// it locked, if any. Its Value is the register's value.
type Slot struct {
	Data []byte // nil: the key holds nothing
	Lock string // the locking transaction's record key; "": none
}

// Value encodes the slot as a register value: nil for an empty, unlocked
// key; else a byte of flags (1: data present), the lock's length as a
// uvarint, the lock, and the data.
func (s Slot) Value() []byte {
	if s.Data == nil && s.Lock == "" {
		return nil
	}
	v := []byte{0}
	if s.Data != nil {
		v[0] = 1
	}
	v = binary.AppendUvarint(v, uint64(len(s.Lock)))
	v = append(v, s.Lock...)
	return append(v, s.Data...)
}

// ParseSlot decodes a register value written by Slot.Value.
func ParseSlot(v []byte) (Slot, error) {
	if v == nil {
		return Slot{}, nil
	}
	if len(v) < 2 || v[0] > 1 {
		return Slot{}, fmt.Errorf("decide: a key's value %q is not a slot: no flags byte and lock length", v)
	}
	n, k := binary.Uvarint(v[1:])
	if k <= 0 || uint64(len(v)-1-k) < n {
		return Slot{}, fmt.Errorf("decide: a key's value %q is not a slot: its lock length overruns it", v)
	}
	rest := v[1+k:]
	s := Slot{Lock: string(rest[:n])}
	if v[0] == 1 {
		s.Data = append([]byte{}, rest[n:]...)
	} else if len(rest) > int(n) {
		return Slot{}, fmt.Errorf("decide: a key's value %q is not a slot: data without its flag", v)
	}
	return s, nil
}

// A transaction record's value: nil while the transaction is pending,
// recordAborted once aborted, and recordCommitted followed by the keys'
// values after it once committed. Either end is final.
const (
	recordAborted   = 'a'
	recordCommitted = 'c'
)

// fate is a transaction's end, read from its record.
type fate struct {
	committed bool
	after     map[string][]byte // committed: each key's data after it (nil: none)
}

func commitRecord(keys []string, after [][]byte) []byte {
	v := []byte{recordCommitted}
	for i, k := range keys {
		v = binary.AppendUvarint(v, uint64(len(k)))
		v = append(v, k...)
		if after[i] == nil {
			v = append(v, 0)
			continue
		}
		v = append(v, 1)
		v = binary.AppendUvarint(v, uint64(len(after[i])))
		v = append(v, after[i]...)
	}
	return v
}

func parseRecord(v []byte) (fate, error) {
	bad := func(why string) (fate, error) {
		return fate{}, fmt.Errorf("decide: a transaction record %q is malformed: %s", v, why)
	}
	switch {
	case len(v) == 1 && v[0] == recordAborted:
		return fate{}, nil
	case len(v) == 0 || v[0] != recordCommitted:
		return bad("neither aborted nor committed")
	}
	f := fate{committed: true, after: map[string][]byte{}}
	for rest := v[1:]; len(rest) > 0; {
		n, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < n+1 {
			return bad("a key's length overruns it")
		}
		key, flag := string(rest[k:k+int(n)]), rest[k+int(n)]
		rest = rest[k+int(n)+1:]
		if flag == 0 {
			f.after[key] = nil
			continue
		}
		n, k = binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < n {
			return bad("a value's length overruns it")
		}
		f.after[key] = append([]byte{}, rest[k:k+int(n)]...)
		rest = rest[k+int(n):]
	}
	return f, nil
}

// opKind says what an Op does.
type opKind int

const (
	applyOp   opKind = iota // a command of one key: apply it to the slot's data
	lockOp                  // lock a key for the transaction and read its data
	woundOp                 // decide another transaction's record: abort it unless it ended
	commitOp                // decide the transaction's own record: commit it unless it was aborted
	resolveOp               // write the own end into a key it locked, and unlock it
)

// Op is one change of one key that a Command needs decided: the caller runs
// Change through that key's Proposer (Propose, Step, Retry) and hands the
// Op back to Command.Step with how it ended.
type Op struct {
	Key    string
	Change Change
	// Wait, when not 0: the command found the key locked by a transaction
	// under way, for the Wait-th time; the caller runs the op after a
	// pause (a random backoff, longer each time), giving the transaction
	// time to end before the command aborts it. A coordinator that runs
	// that transaction itself (Holder names its record) may instead run the
	// op once the transaction has ended and unlocked its keys.
	Wait   int
	Holder string

	kind  opKind
	index int    // applyOp, lockOp, resolveOp: which of the command's keys
	tries int    // how many times this op was run
	saw   string // what its change's last call found: a lock of another transaction ("": none)
	data  []byte // lockOp: the key's data it found
	fate  fate   // woundOp, commitOp: the record's end it found
	err   error  // a value that did not parse
}

// Command runs a command on one key or on several keys of one owner, over
// linearizable per-key registers (this package's Proposer, one per key and
// coordinator). A command of one key is one change of its key, as before,
// but for a lock it finds. A command of several keys is a transaction with
// a record key of its own (Percolator over the registers): it locks every
// key and reads its data, decides its record committed with the keys' data
// after, then writes that data into each key and unlocks it. A command that
// finds a key locked by another transaction decides that transaction's
// record first (aborted, unless it has ended), and then writes its end into
// the key. See the package doc, "Commands on several keys".
//
//	c, err := NewCommand(keys, record, compound)
//	ops := c.Start()               // run each op's Change on its Key (after a pause if Wait > 0)
//	ops, st := c.Step(op, status)  // as each ends: Decided, Refused (not applied) or Unknown
//	// st: Waiting, Decided (the reply is known; run the ops returned still,
//	// they unlock), Refused (not applied), Unknown (it may have been applied)
type Command struct {
	keys    []string
	record  string
	do      Compound
	fates   map[string]fate // other transactions' ends, by record key
	locked  []bool
	data    [][]byte
	wounds  map[string][]int // a transaction being wounded: the keys waiting on it
	waits   map[string]int   // how often a transaction's lock was waited on
	blocked int              // locks met: bounds the command's waits and wounds
	// committing: the commit went out; the command can no longer end
	// unapplied unless its record says aborted.
	committing bool
	applying   bool // a command of one key: its change went out
	status     Status
	err        error
}

// Bounds of one command's work: tries of one op whose outcome is unknown or
// which was refused, waits on one transaction before aborting it, and locks
// of other transactions met.
const (
	maxOpTries = 3
	maxWaits   = 4
	maxBlocked = 16
)

// NewCommand returns the command of do on keys. A command of several keys
// needs record: a key of the same owner, named for this try of this command
// alone (never used again, even after a restart) and different from keys,
// which will hold its record; a command of one key ignores it.
func NewCommand(keys []string, record string, do Compound) (*Command, error) {
	switch {
	case len(keys) == 0:
		return nil, errors.New("decide: a command needs at least one key")
	case do == nil:
		return nil, errors.New("decide: a command needs a change")
	case len(keys) > 1 && record == "":
		return nil, errors.New("decide: a command of several keys needs a record key")
	case len(keys) > 1 && slices.Contains(keys, record):
		return nil, fmt.Errorf("decide: the record key %q is one of the command's keys", record)
	}
	for i, k := range keys {
		if slices.Contains(keys[:i], k) {
			return nil, fmt.Errorf("decide: key %q appears twice in a command", k)
		}
	}
	if len(keys) == 1 {
		record = ""
	}
	return &Command{
		keys: keys, record: record, do: do,
		fates:  map[string]fate{},
		locked: make([]bool, len(keys)),
		data:   make([][]byte, len(keys)),
		wounds: map[string][]int{},
		waits:  map[string]int{},
	}, nil
}

// MayHaveApplied reports whether a command that stops now, unanswered (its
// coordinator gives up or crashes), may have been applied: a transaction
// once its commit went out, a command of one key once its change did. A
// transaction that never sent its commit never will, and no other command
// can commit it.
func (c *Command) MayHaveApplied() bool {
	if c.status == Decided {
		return true
	}
	return c.committing && c.status != Refused || c.record == "" && c.applying
}

// Err says why a command ended Refused on a value that did not parse.
func (c *Command) Err() error { return c.err }

// Start returns the command's first ops.
func (c *Command) Start() []*Op {
	ops := make([]*Op, len(c.keys))
	for i := range c.keys {
		ops[i] = c.firstOp(i)
	}
	return c.out(ops...)
}

// firstOp is the op that starts the command on key i: a transaction locks
// it, a command of one key applies itself.
func (c *Command) firstOp(i int) *Op {
	if c.record == "" {
		return c.keyOp(applyOp, i)
	}
	return c.keyOp(lockOp, i)
}

// Step takes how op ended: Decided, Refused (its change was not applied) or
// Unknown (it may have been). It returns the ops to run next and the
// command's status. The ops that come with the end of a transaction unlock
// its keys: the caller runs them still, or the next command to meet a lock
// does it from the record.
func (c *Command) Step(op *Op, st Status) ([]*Op, Status) {
	if c.status != Waiting {
		return nil, c.status
	}
	if st == Decided && op.err != nil {
		c.err = op.err
		if op.kind == commitOp {
			return c.end(Unknown)
		}
		return c.giveUp()
	}
	switch op.kind {
	case applyOp:
		switch {
		case st == Unknown:
			return c.end(Unknown)
		case st == Refused && op.tries < maxOpTries:
			return c.out(op), c.status
		case st == Refused:
			return c.end(Refused)
		case op.saw != "":
			return c.wound(op.saw, op.index)
		}
		return c.end(Decided)
	case lockOp:
		switch {
		case st != Decided && op.tries < maxOpTries:
			return c.out(op), c.status // locking is idempotent
		case st != Decided:
			return c.giveUp()
		case op.saw != "":
			return c.wound(op.saw, op.index)
		}
		c.locked[op.index], c.data[op.index] = true, op.data
		if slices.Contains(c.locked, false) {
			return nil, c.status
		}
		// Every key is locked: no other command changes them until the
		// record ends, so their data is one state, and the change applied
		// to it is decided by deciding the record.
		after := c.do(slices.Clone(c.data))
		if len(after) != len(c.keys) {
			c.err = fmt.Errorf("decide: a command of %d keys returned %d values", len(c.keys), len(after))
			return c.giveUp()
		}
		c.committing = true
		return c.out(c.recordOp(commitOp, c.record, commitRecord(c.keys, after))), c.status
	case woundOp:
		if st != Decided {
			if op.tries < maxOpTries {
				return c.out(op), c.status // aborting is idempotent
			}
			return c.giveUp()
		}
		c.fates[op.Key] = op.fate
		var ops []*Op
		for _, i := range c.wounds[op.Key] {
			ops = append(ops, c.firstOp(i))
		}
		delete(c.wounds, op.Key)
		return c.out(ops...), c.status
	case commitOp:
		if st != Decided {
			if op.tries < maxOpTries {
				return c.out(op), c.status // so is committing: a record ends once
			}
			return c.end(Unknown)
		}
		c.fates[c.record] = op.fate
		if op.fate.committed {
			return c.finish(Decided)
		}
		return c.finish(Refused) // another command aborted it
	}
	return nil, c.status // resolveOp
}

// wound waits for transaction tx, which holds key i, to end, and then
// starts deciding its record: a transaction whose coordinator crashed
// would hold its keys for ever.
func (c *Command) wound(tx string, i int) ([]*Op, Status) {
	if c.blocked++; c.blocked > maxBlocked {
		return c.giveUp()
	}
	if c.waits[tx]++; c.waits[tx] <= maxWaits {
		op := c.firstOp(i)
		op.Wait, op.Holder = c.waits[tx], tx
		return c.out(op), c.status
	}
	if w, ok := c.wounds[tx]; ok {
		c.wounds[tx] = append(w, i)
		return nil, c.status
	}
	c.wounds[tx] = []int{i}
	return c.out(c.recordOp(woundOp, tx, []byte{recordAborted})), c.status
}

// giveUp ends the command unapplied. A transaction that never sent its
// commit never will: its record stays pending until another command aborts
// it, so it unlocks its keys as aborted.
func (c *Command) giveUp() ([]*Op, Status) {
	switch {
	case c.record == "":
		return c.end(Refused)
	case c.committing:
		return c.end(Unknown)
	}
	c.fates[c.record] = fate{}
	return c.finish(Refused)
}

// finish ends a transaction, whose end is in c.fates, and unlocks its keys.
func (c *Command) finish(st Status) ([]*Op, Status) {
	c.status = st
	ops := make([]*Op, len(c.keys))
	for i := range c.keys {
		ops[i] = c.keyOp(resolveOp, i)
	}
	return c.out(ops...), st
}

func (c *Command) end(st Status) ([]*Op, Status) {
	c.status = st
	return nil, st
}

func (c *Command) out(ops ...*Op) []*Op {
	for _, op := range ops {
		op.tries++
	}
	return ops
}

// keyOp is an op of kind applyOp, lockOp or resolveOp on key i. Its change
// first writes into the slot the end of the transaction that locked it, if
// known; a lock it cannot resolve leaves the slot as it is, for Step to
// wound its transaction.
func (c *Command) keyOp(kind opKind, i int) *Op {
	op := &Op{Key: c.keys[i], kind: kind, index: i}
	c.applying = c.applying || kind == applyOp
	op.Change = func(v []byte) []byte {
		op.saw, op.err = "", nil
		s, err := ParseSlot(v)
		if err != nil {
			op.err = err
			return v
		}
		if f, ok := c.fates[s.Lock]; ok && s.Lock != "" {
			if f.committed {
				s.Data = f.after[c.keys[i]]
				if _, ok := f.after[c.keys[i]]; !ok {
					op.err = fmt.Errorf("decide: transaction %q locked key %q but its record has no value for it", s.Lock, c.keys[i])
					return v
				}
			}
			s.Lock = ""
		}
		if kind == resolveOp {
			return s.Value()
		}
		if s.Lock != "" && s.Lock != c.record {
			op.saw = s.Lock
			return v
		}
		if kind == lockOp {
			op.data, s.Lock = s.Data, c.record
			return s.Value()
		}
		s.Data = c.do([][]byte{s.Data})[0]
		return s.Value()
	}
	return op
}

// recordOp is an op on a transaction's record: it writes value there
// unless the record has ended, and notes the end it holds after.
func (c *Command) recordOp(kind opKind, record string, value []byte) *Op {
	op := &Op{Key: record, kind: kind}
	op.Change = func(v []byte) []byte {
		op.err = nil
		if v == nil {
			v = value
		}
		f, err := parseRecord(v)
		op.fate, op.err = f, err
		return v
	}
	return op
}
