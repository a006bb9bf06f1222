package decide

import (
	"slices"

	"github.com/troop-lab/troop/node/consistency"
)

// Change is what a command does to a key: given the value the key holds (nil
// for none), the value it holds after. A proposer may call it more than once
// for one command (on a retry that found a newer value) and then uses the
// last call's result, so a change that records the command's reply in a
// closure replies with the last call's.
type Change func(current []byte) []byte

// Status is where a proposer's change stands.
type Status int

const (
	// Waiting for more replies.
	Waiting Status = iota
	// Decided: the change is chosen, once; Value is the key's value after it.
	Decided
	// Refused: this ballot lost (or the caller gave up on it). Retry tries
	// again with a higher one; MayHaveApplied says what stopping means.
	Refused
	// Unknown: a retry found a value of another proposer, newer than one
	// this change sent for acceptance, which may or may not hold the
	// change. The change cannot go on: it may have been applied, once.
	Unknown
)

func (s Status) String() string {
	return [...]string{"waiting", "decided", "refused", "unknown"}[s]
}

type phase int

const (
	idle phase = iota
	preparing
	accepting
)

// Proposer runs one key's changes, one at a time, against n acceptors. It
// sends nothing: Propose, Step and Retry return the request to send to every
// acceptor, and Step takes their replies in any order, lost, late or twice.
type Proposer struct {
	id      uint64
	n       int
	counter uint64 // the highest ballot counter used or seen

	change   Change
	ballot   Ballot
	phase    phase
	status   Status
	answered []bool
	oks      int
	refusals int
	// The highest accepted value among this round's promises.
	highest      Ballot
	highestValue []byte
	// base is the ballot the value last given to the change was accepted
	// at (Base).
	base Ballot
	// The ballots at which this change's value went out for acceptance and
	// may still be chosen; value is that value.
	sent  []Ballot
	value []byte
	// clear[i]: acceptor i holds none of those tries and never will: it
	// answered, once, that it had accepted less than the first and promised
	// more than the last. Once all are clear, the tries are dead and the
	// change may be applied afresh.
	clear []bool

	// The one-round-trip form: a quorum promised next as it accepted known,
	// at knownAt.
	next    Ballot
	known   []byte
	knownAt Ballot
}

// NewProposer returns a proposer of one key against that many acceptors,
// whose ballots carry id: the coordinators that propose for a key need ids
// of their own (a node's index will do).
func NewProposer(id uint64, acceptors int) *Proposer {
	return &Proposer{id: id, n: acceptors}
}

// Propose starts a change. The first request is a Prepare; after a change
// this proposer decided, with nothing else in between, it is an Accept of
// the change applied to the decided value (one round trip instead of two).
func (p *Proposer) Propose(c Change) Request {
	p.change, p.sent, p.value = c, nil, nil
	if p.next != (Ballot{}) {
		p.ballot, p.next, p.base = p.next, Ballot{}, p.knownAt
		return p.propose(c(p.known))
	}
	return p.prepare()
}

// Retry starts the change again with a higher ballot, after Refused.
func (p *Proposer) Retry() Request {
	return p.prepare()
}

// Observe raises the proposer's counter to at least counter: its next
// prepare is above it. A caller that keeps other versions beside ballots
// (a clock's, for writes that replace the whole value) passes them, so
// that a first prepare is not refused for being below them.
func (p *Proposer) Observe(counter uint64) { p.counter = max(p.counter, counter) }

// Counter is the highest ballot counter the proposer used or saw.
func (p *Proposer) Counter() uint64 { return p.counter }

// Forget drops the one-round-trip form: the next change prepares. A
// caller whose value can change without a change (a key that expires)
// calls it after a decided change, since the value the acceptors would
// hold by then is not the one the proposer knows.
func (p *Proposer) Forget() { p.next, p.known, p.knownAt = Ballot{}, nil, Ballot{} }

// GiveUp ends the round in progress as Refused: the caller's timeout.
func (p *Proposer) GiveUp() {
	if p.phase != idle {
		p.end(Refused)
	}
}

// MayHaveApplied reports whether the change's value went out for
// acceptance without being decided: a caller that stops now must answer
// that the outcome is unknown, not that nothing was applied.
func (p *Proposer) MayHaveApplied() bool { return p.status != Decided && len(p.sent) > 0 }

// Value is the key's value after a Decided change.
func (p *Proposer) Value() []byte { return p.value }

// Ballot is the ballot of the round in progress or last ended.
func (p *Proposer) Ballot() Ballot { return p.ballot }

// Base is the ballot at which the value the change was last given (its
// current) had been accepted: what an acceptor that holds that value holds
// as its accepted ballot; the zero Ballot when no acceptor of the quorum
// had accepted anything. A change that compares the value with one read
// from an acceptor earlier (a compare-and-set by version) calls it, from
// inside the change.
func (p *Proposer) Base() Ballot { return p.base }

// Step takes acceptor from's reply. It returns the request to send to every
// acceptor next, if any, and the change's status. Replies to other rounds
// are ignored.
func (p *Proposer) Step(from int, r Reply) (Request, Status) {
	switch m := r.(type) {
	case Promise:
		if p.phase != preparing || m.Ballot != p.ballot || p.answered[from] {
			return nil, p.status
		}
		p.answered[from] = true
		p.noteClear(from, m.Promised, m.Accepted)
		if !p.count(m.OK, m.Promised) {
			return nil, p.status
		}
		if p.highest.Less(m.Accepted) {
			p.highest, p.highestValue = m.Accepted, m.Value
		}
		if p.oks < consistency.Quorum(p.n) {
			return nil, p.status
		}
		// A quorum promised: no lower ballot can be chosen any more, and
		// the highest value accepted among them is the only one that may
		// have been. Build on it, unless this change may be in it.
		switch {
		case len(p.sent) == 0:
			p.base = p.highest
			return p.propose(p.change(p.highestValue)), p.status
		case slices.Contains(p.sent, p.highest):
			// An earlier try may be chosen: propose it again, as it is.
			return p.propose(p.highestValue), p.status
		default:
			// An earlier try, which some acceptor may hold, may be in
			// this value or be adopted later: applying the change again
			// could apply it twice.
			p.end(Unknown)
			return nil, p.status
		}
	case Accepted:
		// Even after its round ended, a refusal may show a try dead.
		p.noteClear(from, m.Promised, m.Accepted)
		if p.phase != accepting || m.Ballot != p.ballot || p.answered[from] {
			return nil, p.status
		}
		p.answered[from] = true
		if p.count(m.OK, m.Promised) && p.oks >= consistency.Quorum(p.n) {
			p.end(Decided)
			// Each acceptor that accepted also promised the next ballot.
			p.next, p.known, p.knownAt = p.nextBallot(), p.value, p.ballot
		}
	}
	return nil, p.status
}

// noteClear takes an acceptor's promise and accepted ballot, as it
// answered: accepted below the first try, it never held one (an acceptor's
// accepted ballot only grows), and promised above the last, it never will.
func (p *Proposer) noteClear(from int, promised, accepted Ballot) {
	if len(p.sent) == 0 || !accepted.Less(p.sent[0]) || !p.sent[len(p.sent)-1].Less(promised) {
		return
	}
	if p.clear[from] = true; !slices.Contains(p.clear, false) {
		p.sent = nil
	}
}

// count tallies one answer and ends the round once a quorum of OKs is out
// of reach; it reports whether the round goes on.
func (p *Proposer) count(ok bool, promised Ballot) bool {
	p.counter = max(p.counter, promised.Counter)
	if ok {
		p.oks++
		return true
	}
	p.refusals++
	if p.refusals > p.n-consistency.Quorum(p.n) {
		p.end(Refused)
	}
	return false
}

func (p *Proposer) prepare() Request {
	p.counter++
	p.start(Ballot{Counter: p.counter, Proposer: p.id}, preparing)
	p.highest, p.highestValue = Ballot{}, nil
	return Prepare{Ballot: p.ballot}
}

// propose sends value for acceptance at the round's ballot, with the next
// ballot for the acceptors to promise.
func (p *Proposer) propose(value []byte) Request {
	p.value, p.sent = value, append(p.sent, p.ballot)
	p.clear = make([]bool, p.n)
	p.start(p.ballot, accepting)
	next := p.nextBallot()
	p.counter = max(p.counter, next.Counter)
	return Accept{Ballot: p.ballot, Value: p.value, Next: next}
}

func (p *Proposer) nextBallot() Ballot {
	return Ballot{Counter: p.ballot.Counter + 1, Proposer: p.id}
}

func (p *Proposer) start(b Ballot, ph phase) {
	p.ballot, p.phase, p.status = b, ph, Waiting
	p.answered = make([]bool, p.n)
	p.oks, p.refusals = 0, 0
}

func (p *Proposer) end(s Status) {
	p.phase, p.status = idle, s
}
