package decide

import "fmt"

// Ballot orders proposals: by Counter, then by Proposer, so two proposers
// never share one. The zero Ballot is below every ballot a proposer uses.
// No clock goes into a ballot.
type Ballot struct {
	Counter  uint64
	Proposer uint64
}

// Less reports whether b is below o.
func (b Ballot) Less(o Ballot) bool {
	return b.Counter < o.Counter || b.Counter == o.Counter && b.Proposer < o.Proposer
}

func (b Ballot) String() string { return fmt.Sprintf("%d.%d", b.Counter, b.Proposer) }

// Acceptor is one replica's state for one key. It must survive as long as
// the value does: an acceptor that forgets its promise can break them.
type Acceptor struct {
	Promised Ballot // prepares at or below it, and accepts below it, are refused
	Accepted Ballot // the ballot Value was accepted at: the value's version
	Value    []byte // nil: the key holds nothing
}

// Request is what a proposer sends to every acceptor: a Prepare or an Accept.
type Request interface{ request() }

// Reply is what an acceptor answers: a Promise or an Accepted.
type Reply interface{ reply() }

// Prepare asks an acceptor to promise Ballot and to tell what it accepted.
type Prepare struct{ Ballot Ballot }

// Accept asks an acceptor to accept Value at Ballot. When Next is above
// Ballot, the acceptor also promises Next as it accepts: the proposer's
// next change of the key can skip its prepare.
type Accept struct {
	Ballot Ballot
	Value  []byte
	Next   Ballot
}

// Promise answers a Prepare. Promised and Accepted are the acceptor's once
// it handled the Prepare (when not OK, Promised outranks Ballot); when OK,
// Value is the value it accepted.
type Promise struct {
	Ballot   Ballot
	OK       bool
	Promised Ballot
	Accepted Ballot
	Value    []byte
}

// Accepted answers an Accept. Promised and Accepted are the acceptor's once
// it handled the Accept (when not OK, Promised outranks Ballot).
type Accepted struct {
	Ballot   Ballot
	OK       bool
	Promised Ballot
	Accepted Ballot
}

func (Prepare) request() {}
func (Accept) request()  {}
func (Promise) reply()   {}
func (Accepted) reply()  {}

// Handle is the acceptor's whole rule: it returns its next state and its
// answer.
//
//   - A Prepare above every promise is promised, and told what was
//     accepted; any other is refused.
//   - An Accept at or above the promise is accepted (and its Next promised);
//     one below is refused. This is the fence: once an acceptor promised b,
//     no proposer with a lower ballot changes it.
func (a Acceptor) Handle(r Request) (Acceptor, Reply) {
	switch m := r.(type) {
	case Prepare:
		if !a.Promised.Less(m.Ballot) {
			return a, Promise{Ballot: m.Ballot, Promised: a.Promised, Accepted: a.Accepted}
		}
		a.Promised = m.Ballot
		return a, Promise{Ballot: m.Ballot, OK: true, Promised: a.Promised, Accepted: a.Accepted, Value: a.Value}
	case Accept:
		if m.Ballot.Less(a.Promised) {
			return a, Accepted{Ballot: m.Ballot, Promised: a.Promised, Accepted: a.Accepted}
		}
		a.Promised, a.Accepted, a.Value = m.Ballot, m.Ballot, m.Value
		if m.Ballot.Less(m.Next) {
			a.Promised = m.Next
		}
		return a, Accepted{Ballot: m.Ballot, OK: true, Promised: a.Promised, Accepted: a.Accepted}
	}
	panic(fmt.Sprintf("decide: unknown request %T", r))
}
