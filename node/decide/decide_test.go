package decide

import (
	"reflect"
	"strconv"
	"testing"
)

func b(counter, proposer uint64) Ballot { return Ballot{Counter: counter, Proposer: proposer} }

func TestBallotOrder(t *testing.T) {
	for _, c := range []struct {
		x, y Ballot
		less bool
	}{
		{Ballot{}, b(1, 1), true},
		{b(1, 1), b(1, 2), true},
		{b(1, 2), b(2, 1), true},
		{b(2, 1), b(1, 2), false},
		{b(1, 1), b(1, 1), false},
	} {
		if got := c.x.Less(c.y); got != c.less {
			t.Errorf("%v < %v: %v, want %v", c.x, c.y, got, c.less)
		}
	}
}

func TestAcceptorTransitions(t *testing.T) {
	v, w := []byte("v"), []byte("w")
	held := Acceptor{Promised: b(3, 1), Accepted: b(2, 1), Value: v}
	for _, c := range []struct {
		name  string
		in    Acceptor
		req   Request
		out   Acceptor
		reply Reply
	}{
		{"a prepare above the promise is promised and told what was accepted", held, Prepare{b(3, 2)},
			Acceptor{Promised: b(3, 2), Accepted: b(2, 1), Value: v}, Promise{Ballot: b(3, 2), OK: true, Promised: b(3, 2), Accepted: b(2, 1), Value: v}},
		{"a prepare of the promised ballot is refused", held, Prepare{b(3, 1)},
			held, Promise{Ballot: b(3, 1), Promised: b(3, 1), Accepted: b(2, 1)}},
		{"a prepare below the promise is refused and told the promise", held, Prepare{b(2, 9)},
			held, Promise{Ballot: b(2, 9), Promised: b(3, 1), Accepted: b(2, 1)}},
		{"a first prepare is promised, with nothing accepted", Acceptor{}, Prepare{b(1, 1)},
			Acceptor{Promised: b(1, 1)}, Promise{Ballot: b(1, 1), OK: true, Promised: b(1, 1)}},
		{"an accept of the promised ballot is accepted and its next promised", held, Accept{Ballot: b(3, 1), Value: w, Next: b(4, 1)},
			Acceptor{Promised: b(4, 1), Accepted: b(3, 1), Value: w}, Accepted{Ballot: b(3, 1), OK: true, Promised: b(4, 1), Accepted: b(3, 1)}},
		{"an accept above the promise is accepted", held, Accept{Ballot: b(5, 2), Value: w},
			Acceptor{Promised: b(5, 2), Accepted: b(5, 2), Value: w}, Accepted{Ballot: b(5, 2), OK: true, Promised: b(5, 2), Accepted: b(5, 2)}},
		{"an accept below the promise is refused: the fence", held, Accept{Ballot: b(2, 9), Value: w, Next: b(3, 9)},
			held, Accepted{Ballot: b(2, 9), Promised: b(3, 1), Accepted: b(2, 1)}},
		{"an accept of the nil value deletes", held, Accept{Ballot: b(3, 1)},
			Acceptor{Promised: b(3, 1), Accepted: b(3, 1)}, Accepted{Ballot: b(3, 1), OK: true, Promised: b(3, 1), Accepted: b(3, 1)}},
	} {
		out, reply := c.in.Handle(c.req)
		if !reflect.DeepEqual(out, c.out) || !reflect.DeepEqual(reply, c.reply) {
			t.Errorf("%s:\n got %+v, %+v\nwant %+v, %+v", c.name, out, reply, c.out, c.reply)
		}
	}
}

// incr is INCR's change, with its reply.
func incr(reply *int) Change {
	return func(cur []byte) []byte {
		n, _ := strconv.Atoi(string(cur))
		*reply = n + 1
		return strconv.AppendInt(nil, int64(n+1), 10)
	}
}

// exchange delivers req to the acceptors listed, in order, and their
// replies to p; it returns p's last request and status.
func exchange(p *Proposer, acc []Acceptor, req Request, to ...int) (Request, Status) {
	var next Request
	st := Waiting
	for _, i := range to {
		var r Reply
		acc[i], r = acc[i].Handle(req)
		if n, s := p.Step(i, r); n != nil || s != Waiting {
			next, st = n, s
		}
	}
	return next, st
}

func TestProposerTwoRoundsThenOne(t *testing.T) {
	acc := make([]Acceptor, 3)
	p := NewProposer(7, 3)
	var reply int
	req := p.Propose(incr(&reply))
	if req != (Prepare{b(1, 7)}) {
		t.Fatalf("first request %+v, want a prepare at 1.7", req)
	}
	req, st := exchange(p, acc, req, 0, 1)
	want := Accept{Ballot: b(1, 7), Value: []byte("1"), Next: b(2, 7)}
	if !reflect.DeepEqual(req, want) || st != Waiting {
		t.Fatalf("after two promises: %+v %v, want %+v", req, st, want)
	}
	if _, st = exchange(p, acc, req, 2, 0); st != Decided || string(p.Value()) != "1" || reply != 1 {
		t.Fatalf("after two acceptances: %v %q reply %d", st, p.Value(), reply)
	}
	// The next change skips the prepare: a quorum promised 2.7.
	req = p.Propose(incr(&reply))
	want = Accept{Ballot: b(2, 7), Value: []byte("2"), Next: b(3, 7)}
	if !reflect.DeepEqual(req, want) {
		t.Fatalf("second change starts with %+v, want %+v", req, want)
	}
	if _, st = exchange(p, acc, req, 0, 2); st != Decided || reply != 2 {
		t.Fatalf("second change: %v reply %d", st, reply)
	}
}

func TestProposerLearnsHighestAcceptedValue(t *testing.T) {
	acc := []Acceptor{{Promised: b(4, 2), Accepted: b(4, 2), Value: []byte("41")}, {Promised: b(3, 1), Accepted: b(3, 1), Value: []byte("40")}, {}}
	p := NewProposer(1, 3)
	var reply int
	// Refused by both, it learns the higher promise; its retry is promised
	// by both and builds on the higher of their values.
	if _, st := exchange(p, acc, p.Propose(incr(&reply)), 0, 1); st != Refused {
		t.Fatalf("refused by two of three: %v", st)
	}
	req, st := exchange(p, acc, p.Retry(), 0, 1)
	if st != Waiting || req.(Accept).Ballot != b(5, 1) || string(req.(Accept).Value) != "42" {
		t.Fatalf("retry above the promise learned: %+v %v, want 42 at 5.1", req, st)
	}
}

func TestProposerRefusedByAQuorum(t *testing.T) {
	acc := []Acceptor{{Promised: b(9, 2)}, {Promised: b(9, 2)}, {}}
	p := NewProposer(1, 3)
	var reply int
	if _, st := exchange(p, acc, p.Propose(incr(&reply)), 0, 1); st != Refused || p.MayHaveApplied() {
		t.Fatalf("refused by two of three: %v, may have applied %v", st, p.MayHaveApplied())
	}
	if req := p.Retry(); req != (Prepare{b(10, 1)}) {
		t.Fatalf("retry %+v, want a prepare above the refusals' 9.2", req)
	}
}

// A retry after an accept that went out finds the change's own value, or
// one that is not (and may hold) it; an accept that every acceptor refused
// is dead, and its retry applies the change afresh.
func TestProposerRetryAfterItsAcceptWentOut(t *testing.T) {
	for _, c := range []struct {
		name   string
		other  Acceptor // acceptor 2, which the retry's quorum meets
		status Status
		value  string
	}{
		{"its own value, highest: proposed again, not applied twice", Acceptor{Promised: b(1, 1), Accepted: b(1, 1), Value: []byte("1")}, Waiting, "1"},
		{"another proposer's value above its try: unknown", Acceptor{Promised: b(2, 2), Accepted: b(2, 2), Value: []byte("2")}, Unknown, ""},
		{"only values below its try, which acceptor 0 holds: unknown", Acceptor{}, Unknown, ""},
	} {
		acc := make([]Acceptor, 3)
		p := NewProposer(1, 3)
		var reply int
		req, _ := exchange(p, acc, p.Propose(incr(&reply)), 0, 1)
		exchange(p, acc, req, 0) // only one acceptance arrives
		p.GiveUp()
		if !p.MayHaveApplied() {
			t.Fatalf("%s: an accept went out, yet MayHaveApplied is false", c.name)
		}
		// The retry meets acceptor 1, which did not answer, and 2.
		acc[2] = c.other
		req, st := exchange(p, acc, p.Retry(), 1, 2)
		if st != c.status || reply != 1 {
			t.Errorf("%s: %v reply %d, want %v reply 1", c.name, st, reply, c.status)
			continue
		}
		if c.value != "" && string(req.(Accept).Value) != c.value {
			t.Errorf("%s: proposes %q, want %q", c.name, req.(Accept).Value, c.value)
		}
	}

	// Refused by all three, the try is dead.
	acc := make([]Acceptor, 3)
	p := NewProposer(1, 3)
	var reply int
	req, _ := exchange(p, acc, p.Propose(incr(&reply)), 0, 1)
	for i := range acc {
		acc[i].Promised = b(5, 2)
	}
	if _, st := exchange(p, acc, req, 0, 1); st != Refused || !p.MayHaveApplied() {
		t.Fatalf("refused by two: %v, may have applied %v", st, p.MayHaveApplied())
	}
	if _, st := exchange(p, acc, req, 2); st != Refused || p.MayHaveApplied() {
		t.Fatalf("refused by all three: %v, may have applied %v", st, p.MayHaveApplied())
	}
	acc[0] = Acceptor{Promised: b(5, 2), Accepted: b(5, 2), Value: []byte("7")}
	req, _ = exchange(p, acc, p.Retry(), 0, 1)
	if a, ok := req.(Accept); !ok || string(a.Value) != "8" || reply != 8 {
		t.Fatalf("the retry of a dead try: %+v reply %d, want 8 applied afresh", req, reply)
	}
}

// Replies to another round, and a reply counted twice, are ignored.
func TestProposerIgnoresStaleAndRepeatedReplies(t *testing.T) {
	p := NewProposer(1, 3)
	var reply int
	p.Propose(incr(&reply))
	if _, st := p.Step(0, Promise{Ballot: b(0, 1), OK: true}); st != Waiting {
		t.Fatal(st)
	}
	p.Step(0, Promise{Ballot: b(1, 1), OK: true})
	if req, _ := p.Step(0, Promise{Ballot: b(1, 1), OK: true}); req != nil {
		t.Fatalf("one acceptor's promise counted twice: %+v", req)
	}
	if req, _ := p.Step(1, Accepted{Ballot: b(1, 1), OK: true}); req != nil {
		t.Fatalf("an acceptance while preparing: %+v", req)
	}
}

// A coordinator's one-round-trip accept after another coordinator prepared
// is refused. When the other only prepared, every refusal shows the try
// dead (nothing accepted at or above it), and the retry applies the change
// afresh; when the other also changed the key, its value may hold the try
// (the acceptor cannot tell), and the retry ends Unknown.
func TestProposerFastAcceptAfterAnotherProposer(t *testing.T) {
	for _, otherChanged := range []bool{false, true} {
		acc := make([]Acceptor, 3)
		p, q := NewProposer(1, 3), NewProposer(2, 3)
		var reply int
		req, _ := exchange(p, acc, p.Propose(incr(&reply)), 0, 1, 2)
		if _, st := exchange(p, acc, req, 0, 1, 2); st != Decided || reply != 1 {
			t.Fatalf("p's first change: %v reply %d", st, reply)
		}
		// q's first prepare is refused: the acceptors promised p's next
		// ballot; its retry is promised.
		if _, st := exchange(q, acc, q.Propose(incr(&reply)), 0, 1, 2); st != Refused {
			t.Fatalf("q's first prepare: %v", st)
		}
		req, _ = exchange(q, acc, q.Retry(), 0, 1, 2)
		if otherChanged {
			if _, st := exchange(q, acc, req, 0, 1, 2); st != Decided || reply != 2 {
				t.Fatalf("q's change: %v reply %d", st, reply)
			}
		}
		fast := p.Propose(incr(&reply))
		if _, ok := fast.(Accept); !ok {
			t.Fatalf("p's second change starts with %+v, want its one-round-trip accept", fast)
		}
		if _, st := exchange(p, acc, fast, 0, 1, 2); st != Refused || p.MayHaveApplied() != otherChanged {
			t.Fatalf("q changed the key %v; p's stale accept: %v, may have applied %v", otherChanged, st, p.MayHaveApplied())
		}
		req, st := exchange(p, acc, p.Retry(), 0, 1)
		if otherChanged {
			if st != Unknown {
				t.Errorf("the retry after q's change: %v, want unknown", st)
			}
			continue
		}
		if _, st = exchange(p, acc, req, 1, 2); st != Decided || reply != 2 || string(p.Value()) != "2" {
			t.Errorf("the retry of the dead try: %v reply %d value %q, want 2", st, reply, p.Value())
		}
	}
}

func TestProposerObserveStartsAboveAndForgetPrepares(t *testing.T) {
	// Acceptors hold a value at 100.3, say written by a clock: a proposer
	// told of 100 prepares above it at once.
	acc := []Acceptor{{Promised: b(100, 3), Accepted: b(100, 3), Value: []byte("5")}, {Promised: b(100, 3), Accepted: b(100, 3), Value: []byte("5")}, {}}
	p := NewProposer(1, 3)
	p.Observe(100)
	p.Observe(7) // never lowers it
	if p.Counter() != 100 {
		t.Fatalf("counter %d after observing 100 and 7", p.Counter())
	}
	var reply int
	req := p.Propose(incr(&reply))
	if req != (Prepare{b(101, 1)}) {
		t.Fatalf("first request %+v, want a prepare at 101.1", req)
	}
	req, _ = exchange(p, acc, req, 0, 1)
	if _, st := exchange(p, acc, req, 0, 1); st != Decided || reply != 6 {
		t.Fatalf("change above the observed counter: %v reply %d", st, reply)
	}
	// Forgotten, the next change prepares again instead of accepting at once.
	p.Forget()
	if req := p.Propose(incr(&reply)); req != (Prepare{b(103, 1)}) {
		t.Fatalf("after Forget the change starts with %+v, want a prepare at 103.1", req)
	}
}

// Base is the ballot at which the value a change is given had been
// accepted: the highest among the promises, or the ballot of the change
// this proposer decided last when it skips the prepare.
func TestProposerBase(t *testing.T) {
	held := func(x Ballot, v string) Acceptor { return Acceptor{Promised: x, Accepted: x, Value: []byte(v)} }
	// run takes a change through acceptors 0 and 1, retrying when they
	// do not both promise.
	run := func(p *Proposer, acc []Acceptor, c Change) Status {
		req, st := p.Propose(c), Waiting
		for try := 0; req != nil && try < 4; try++ {
			if req, st = exchange(p, acc, req, 0, 1); st == Refused || req == nil && st == Waiting {
				p.GiveUp()
				req = p.Retry()
			}
		}
		return st
	}
	for _, c := range []struct {
		name    string
		acc     []Acceptor
		decided int  // changes this proposer decides first
		forget  bool // then Forget: the next change prepares
		base    Ballot
	}{
		{"nothing accepted: the zero ballot", make([]Acceptor, 3), 0, false, Ballot{}},
		{"the highest accepted among a quorum's promises", []Acceptor{held(b(4, 2), "41"), held(b(3, 1), "40"), {}}, 0, false, b(4, 2)},
		{"the quorum met holds an older value only", []Acceptor{held(b(3, 1), "40"), {}, held(b(4, 2), "41")}, 0, false, b(3, 1)},
		{"one round trip: the ballot of the change decided last", make([]Acceptor, 3), 2, false, b(2, 7)},
		{"forgotten: what the prepare finds, that same ballot", make([]Acceptor, 3), 2, true, b(2, 7)},
	} {
		acc := append([]Acceptor(nil), c.acc...)
		p := NewProposer(7, 3)
		var reply int
		for range c.decided {
			if st := run(p, acc, incr(&reply)); st != Decided {
				t.Fatalf("%s: a first change ended %v", c.name, st)
			}
		}
		if c.forget {
			p.Forget()
		}
		var base Ballot
		if st := run(p, acc, func(cur []byte) []byte { base = p.Base(); return cur }); st != Decided {
			t.Fatalf("%s: the change ended %v", c.name, st)
		}
		if base != c.base {
			t.Errorf("%s: the change saw base %v, want %v", c.name, base, c.base)
		}
	}
}
