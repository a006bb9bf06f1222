package decide

import (
	"reflect"
	"strings"
	"testing"
)

// registers stand for linearizable per-key registers: an op's change is
// decided the moment it runs.
type registers map[string][]byte

// run decides op and returns what the command asks next.
func (r registers) run(c *Command, op *Op) ([]*Op, Status) {
	r[op.Key] = op.Change(r[op.Key])
	return c.Step(op, Decided)
}

// drain runs ops, and those they lead to, one at a time in order; it
// returns the command's status after the last.
func (r registers) drain(t *testing.T, c *Command, ops []*Op) Status {
	st := Waiting
	for n := 0; len(ops) > 0; n++ {
		if n > 100 {
			t.Fatal("a command ran more than 100 ops")
		}
		var next []*Op
		next, st = r.run(c, ops[0])
		ops = append(ops[1:], next...)
	}
	return st
}

func data(t *testing.T, v []byte) Slot {
	t.Helper()
	s, err := ParseSlot(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// move is LMOVE src dst LEFT RIGHT over comma-joined lists, replying the
// element moved.
func move(reply *string) Compound {
	return func(v [][]byte) [][]byte {
		src := elements(v[0])
		if len(src) == 0 {
			*reply = ""
			return v
		}
		*reply = src[0]
		return [][]byte{join(src[1:]), join(append(elements(v[1]), src[0]))}
	}
}

func join(l []string) []byte {
	if len(l) == 0 {
		return nil
	}
	return []byte(strings.Join(l, ","))
}

func push(elem string) Compound {
	return func(v [][]byte) [][]byte { return [][]byte{join(append(elements(v[0]), elem))} }
}

func TestSlotAndRecordEncodings(t *testing.T) {
	for _, s := range []Slot{{}, {Data: []byte{}}, {Data: []byte("x")}, {Lock: "t1"}, {Data: []byte("1,2"), Lock: "t1"}} {
		if got := data(t, s.Value()); !reflect.DeepEqual(got, s) {
			t.Errorf("slot %+v came back as %+v", s, got)
		}
	}
	v := commitRecord([]string{"a", "b"}, [][]byte{[]byte("1"), nil})
	if f, err := parseRecord(v); err != nil || !f.committed || string(f.after["a"]) != "1" || f.after["b"] != nil {
		t.Errorf("a committed record came back as %+v, %v", f, err)
	}
	for _, bad := range []string{"", "\x02\x00", "\x00\x05ab", "\x00\x00x"} {
		if _, err := ParseSlot([]byte(bad)); err == nil || !strings.Contains(err.Error(), "is not a slot") {
			t.Errorf("ParseSlot(%q): %v, want an error saying it is not a slot", bad, err)
		}
	}
	for _, bad := range []string{"x", "c\x05ab", "c\x01a\x01\x09"} {
		if _, err := parseRecord([]byte(bad)); err == nil || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("parseRecord(%q): %v, want an error saying it is malformed", bad, err)
		}
	}
}

func TestNewCommandRefusesBadInput(t *testing.T) {
	do := func(v [][]byte) [][]byte { return v }
	for _, c := range []struct {
		keys   []string
		record string
		do     Compound
		want   string
	}{
		{nil, "r", do, "at least one key"},
		{[]string{"a"}, "", nil, "needs a change"},
		{[]string{"a", "b"}, "", do, "needs a record key"},
		{[]string{"a", "b"}, "b", do, "is one of the command's keys"},
		{[]string{"a", "a"}, "r", do, `key "a" appears twice`},
	} {
		if _, err := NewCommand(c.keys, c.record, c.do); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewCommand(%q, %q): %v, want an error saying %q", c.keys, c.record, err, c.want)
		}
	}
}

func TestTransactionOnFreeKeys(t *testing.T) {
	r := registers{"a": Slot{Data: []byte("1,2")}.Value()}
	var reply string
	c, err := NewCommand([]string{"a", "b"}, "t1", move(&reply))
	if err != nil {
		t.Fatal(err)
	}
	if st := r.drain(t, c, c.Start()); st != Decided || reply != "1" {
		t.Fatalf("LMOVE: %v reply %q, want decided, 1", st, reply)
	}
	if a, b := data(t, r["a"]), data(t, r["b"]); string(a.Data) != "2" || string(b.Data) != "1" || a.Lock != "" || b.Lock != "" {
		t.Errorf("after LMOVE a=%+v b=%+v, want 2 and 1, unlocked", a, b)
	}
}

// A command that meets a lock of a pending transaction aborts it, and the
// transaction's commit finds its record aborted: it was not applied.
func TestCommandAbortsAPendingTransaction(t *testing.T) {
	r := registers{"a": Slot{Data: []byte("1")}.Value()}
	var reply string
	tx, _ := NewCommand([]string{"a", "b"}, "t1", move(&reply))
	var commit []*Op
	for _, op := range tx.Start() {
		commit, _ = r.run(tx, op)
	}
	if len(commit) != 1 || commit[0].kind != commitOp {
		t.Fatalf("after locking both keys the transaction asks %+v, want its commit", commit)
	}
	p, _ := NewCommand([]string{"b"}, "", push("9"))
	if st := r.drain(t, p, p.Start()); st != Decided {
		t.Fatalf("RPUSH b on a locked key: %v", st)
	}
	if string(r["t1"]) != "a" {
		t.Errorf("the transaction's record holds %q, want aborted", r["t1"])
	}
	if st := r.drain(t, tx, commit); st != Refused {
		t.Errorf("the aborted transaction's commit: %v, want refused", st)
	}
	if a, b := data(t, r["a"]), data(t, r["b"]); string(a.Data) != "1" || string(b.Data) != "9" || a.Lock != "" || b.Lock != "" {
		t.Errorf("a=%+v b=%+v, want 1 and 9, unlocked", a, b)
	}
}

// A command that meets a lock of a committed transaction, whose unlocking
// was lost, writes the transaction's value first.
func TestCommandRollsACommittedTransactionForward(t *testing.T) {
	r := registers{"a": Slot{Data: []byte("1")}.Value()}
	var reply string
	tx, _ := NewCommand([]string{"a", "b"}, "t1", move(&reply))
	ops := tx.Start()
	for len(ops) > 0 && ops[0].kind != resolveOp {
		var next []*Op
		next, _ = r.run(tx, ops[0])
		ops = append(ops[1:], next...)
	}
	if tx.status != Decided {
		t.Fatalf("the transaction did not commit: %v", tx.status)
	}
	var read string
	g, _ := NewCommand([]string{"b"}, "", func(v [][]byte) [][]byte { read = string(v[0]); return v })
	if st := r.drain(t, g, g.Start()); st != Decided || read != "1" {
		t.Errorf("LRANGE b after the commit, its unlock lost: %v %q, want 1", st, read)
	}
}

// A value that is not a slot ends the command, unapplied, with an error
// naming it.
func TestCommandOnAMalformedValue(t *testing.T) {
	r := registers{"a": []byte("\x07junk")}
	c, _ := NewCommand([]string{"a"}, "", push("1"))
	if st := r.drain(t, c, c.Start()); st != Refused || c.Err() == nil || !strings.Contains(c.Err().Error(), "is not a slot") {
		t.Errorf("%v %v, want refused with an error saying the value is not a slot", st, c.Err())
	}
	if string(r["a"]) != "\x07junk" {
		t.Errorf("the malformed value was changed to %q", r["a"])
	}
}

// A command that meets a lock waits for it maxWaits times, each wait
// longer, and then decides the transaction's record.
func TestCommandWaitsBeforeAborting(t *testing.T) {
	r := registers{}
	var reply string
	tx, _ := NewCommand([]string{"a", "b"}, "t1", move(&reply))
	for _, op := range tx.Start() {
		r.run(tx, op) // both locked; the commit is never sent
	}
	p, _ := NewCommand([]string{"a"}, "", push("9"))
	ops := p.Start()
	for wait := 1; wait <= maxWaits; wait++ {
		next, st := r.run(p, ops[0])
		if len(next) != 1 || next[0].Wait != wait || next[0].Holder != "t1" || next[0].Key != "a" || st != Waiting {
			t.Fatalf("meeting the lock for the %dth time: %+v %v, want a wait on t1 of a", wait, next, st)
		}
		ops = next
	}
	next, _ := r.run(p, ops[0])
	if len(next) != 1 || next[0].Key != "t1" || next[0].Wait != 0 {
		t.Fatalf("after %d waits: %+v, want the decision of t1's record", maxWaits, next)
	}
	if st := r.drain(t, p, next); st != Decided || string(r["t1"]) != "a" || string(data(t, r["a"]).Data) != "9" {
		t.Errorf("%v, record %q, a=%+v: want decided, t1 aborted, a holding 9", st, r["t1"], data(t, r["a"]))
	}
}

// A transaction whose locks end unknown sends them again; one that never
// sent its commit ends not applied and unlocks its keys; one whose commit
// ends unknown every time ends unknown.
func TestTransactionOutcomes(t *testing.T) {
	var reply string
	tx, _ := NewCommand([]string{"a", "b"}, "t1", move(&reply))
	ops := tx.Start()
	for try := 2; try <= maxOpTries; try++ {
		next, st := tx.Step(ops[0], Unknown)
		if len(next) != 1 || next[0] != ops[0] || next[0].tries != try || st != Waiting {
			t.Fatalf("a lock of unknown outcome, try %d: %+v %v, want it sent again", try, next, st)
		}
	}
	next, st := tx.Step(ops[0], Unknown)
	if st != Refused || tx.MayHaveApplied() || len(next) != 2 || next[0].kind != resolveOp {
		t.Fatalf("out of tries before its commit: %v, may have applied %v, %d ops, want refused, not applied, two unlocks", st, tx.MayHaveApplied(), len(next))
	}

	r := registers{}
	tx, _ = NewCommand([]string{"a", "b"}, "t2", move(&reply))
	var commit []*Op
	for _, op := range tx.Start() {
		commit, _ = r.run(tx, op)
	}
	for range maxOpTries - 1 {
		commit, _ = tx.Step(commit[0], Unknown)
	}
	if _, st := tx.Step(commit[0], Unknown); st != Unknown || !tx.MayHaveApplied() {
		t.Errorf("a commit of unknown outcome every try: %v, may have applied %v, want unknown", st, tx.MayHaveApplied())
	}
}

// Two transactions on the same keys: the second meets the first's lock,
// and, once the first committed, writes its data after and goes on.
func TestTransactionAfterAnother(t *testing.T) {
	r := registers{"a": Slot{Data: []byte("1,2")}.Value()}
	var first, second string
	t1, _ := NewCommand([]string{"a", "b"}, "t1", move(&first))
	ops := t1.Start()
	for len(ops) > 0 && ops[0].kind != resolveOp {
		var next []*Op
		next, _ = r.run(t1, ops[0])
		ops = append(ops[1:], next...)
	}
	t2, _ := NewCommand([]string{"a", "b"}, "t2", move(&second))
	if st := r.drain(t, t2, t2.Start()); st != Decided || first != "1" || second != "2" {
		t.Fatalf("%v, replies %q %q, want decided, 1 then 2", st, first, second)
	}
	if a, b := data(t, r["a"]), data(t, r["b"]); a.Data != nil || string(b.Data) != "1,2" || a.Lock != "" || b.Lock != "" {
		t.Errorf("a=%+v b=%+v, want a empty, b 1,2, both unlocked", a, b)
	}
}
