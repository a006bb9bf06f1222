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
