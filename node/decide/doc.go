// Package decide orders the commands on one key among the key's replicas so
// that every command, read-modify-write included (INCR, SET NX, RPUSH, LPOP
// ...), is linearizable, even when coordinators disagree about who is up.
// It is per-key Paxos whose accepted value is changed by a function:
// CASPaxos (Rystsov, 2018), the per-partition Paxos of Cassandra's
// lightweight transactions without its separate read and commit rounds. It
// is pure: no I/O, no clock, no randomness; the caller sends the requests it
// returns and feeds back the replies.
//
// # The API
//
// Each replica keeps an [Acceptor] per key: the key's value, the [Ballot] it
// was accepted at (its version), and the highest ballot it promised.
// [Acceptor.Handle] is its whole rule. A coordinator keeps a [Proposer] per
// key (its id unique among coordinators) and runs one [Change] at a time:
//
//	req := p.Propose(change)          // send req to every acceptor
//	next, st := p.Step(from, reply)   // for each reply; send next if not nil
//	// st: Waiting, Decided (p.Value()), Refused (p.Retry(), or stop),
//	// Unknown (stop: it may have been applied)
//	p.GiveUp()                        // the caller's timeout: Refused
//
// A change is a function from the key's value to its next value; the
// command's reply is whatever the last call of that function computed (a
// closure keeps it). A read is a change that returns the value unchanged.
// Inside the change, [Proposer.Base] is the ballot that value had been
// accepted at (its version on the acceptors that hold it), so a change can
// compare it with a version read earlier: a compare-and-set.
// A caller that stops after Refused answers "outcome unknown" when
// [Proposer.MayHaveApplied], "not applied" otherwise.
//
// # The protocol
//
// A round has two phases. The proposer picks a ballot above every one it
// has used or seen (a counter, then its id: ballots are totally ordered and
// no two proposers share one) and asks every acceptor to promise it. An
// acceptor promises a ballot above its promise, and answers what it
// accepted; it refuses any other. With a quorum (a majority) of promises,
// the proposer applies the change to the value of the highest ballot among
// them, and asks every acceptor to accept the result at its ballot. An
// acceptor accepts at or above its promise, and refuses below it: that is
// the fence. A quorum of acceptances decides the change.
//
// Safety, sketched. An acceptor's promise never goes down, and it accepts
// nothing below it. Say a change was decided at ballot b: a quorum accepted
// its value v. A later round with ballot c > b that gathers a quorum of
// promises meets that quorum in at least one acceptor, which accepted b
// before it promised c (had it promised c first, it would have refused b),
// so the round sees a ballot of at least b; by induction on ballots, the
// value of the highest ballot it sees descends from v. So every decided
// value is built on the previous decided one: the decided changes form one
// chain, and that chain is the linearization. A change decided before
// another began is earlier in the chain, since the later one's promises see
// it. Two coordinators can both be preparing a key, but only the one with
// the higher ballot can get its accept through a quorum that promised it:
// the other is fenced. "Who decides" is never a local view of who is up;
// it is whoever holds a quorum of promises for the highest ballot.
//
// Retries. A round refused by a quorum, or given up, may have left its
// value accepted on some acceptors, where a later round may adopt it: the
// change may yet be applied. So a retry applies the change afresh only when
// every earlier try of it is dead: every acceptor answered (a promise or a
// refusal) that it had accepted less than the first try and promised more
// than the last, so none ever held one (an acceptor's accepted ballot only
// grows) and none ever will. A refusal alone would not do: a request
// delivered twice may be accepted, then refused. When the retry's promises
// show one of its own tries as the highest, it proposes that value again,
// as it is; when they show another proposer's value, which may hold the
// change, it stops with Unknown. A change is thus applied once or not at
// all. A read that ends Unknown may simply be sent again.
//
// A coordinator that restarts may reuse its id with its counter back at
// zero: a prepare must be strictly above a promise, so it cannot gather a
// quorum for a ballot it used before (its promise quorum would meet one
// that promised that ballot already). Acceptors, though, must keep their
// promises as long as the value: a replica that restarts empty must not
// answer as an acceptor until it is refilled, or two proposers could both
// get a quorum for one ballot.
//
// # Round trips
//
// Two per change: prepare, then accept. One for a coordinator whose last
// change of the key was decided and which nobody has prepared since: each
// Accept carries Next, the proposer's next ballot, which the acceptor
// promises as it accepts (an accept followed at once by a prepare of Next,
// at the same acceptor). A quorum of acceptances is then a quorum of
// promises of Next, all holding the decided value, which is what a prepare
// would have found; so the next change starts with its accept. When
// another proposer prepared in between, that accept is refused, and the
// retry takes the two round trips; when the other also changed the key,
// the acceptors cannot tell whether its value holds the refused try, and
// the change ends Unknown (routing a key's commands through one
// coordinator avoids this, see Liveness). Reads cost the same as writes.
// In the simulation (TestRoundTrips, `go test -run RoundTrips -v
// ./node/decide`, 20 runs of 25 commands per client on 3 acceptors): a lone
// coordinator takes 1.04 round trips per command with 1 client and 1.01
// with 6 (the first command of a run takes 2); 3 coordinators with 6
// clients contending for one key take 1.35 per command, 64 of 3,020
// commands end with an unknown outcome and 153 fail without effect
// (duelling proposers, each giving up after 5 tries with a random backoff).
//
// # Liveness
//
// A change needs a quorum of acceptors that answer. Proposers that keep
// preparing over one another can starve each other (no consensus protocol
// is live in every asynchronous run); random backoff between tries breaks
// most duels, and routing a key's commands through one coordinator (any
// rule, even a local view of who is up) avoids them and keeps the form with
// one round trip: such a rule can only cost time, never safety.
//
// # Clocks
//
// Nothing here reads a clock; ballots are counters. Clock skew of any size,
// or a clock set back, cannot change what is decided. Timeouts and backoff
// are the caller's: a clock that runs fast or slow only makes a coordinator
// give up a round sooner or later (the simulation runs each coordinator's
// timer at 0.5 to 2 times real time). There are no leases; a read
// optimisation by leases would need bounded clock drift, and is not here.
//
// # Wiring notes
//
//   - An acceptor's state (value, accepted and promised ballots) lives on the
//     key's replica and changes atomically (a script on its redis-server).
//     Mixing this protocol with another way of writing the key (versions
//     from clocks) would let the two orders disagree, unless the other
//     writes keep its rules: troop writes ballots as versions, answers a
//     version query with the promise too, and refuses a whole-value write
//     at or below the promise (docs/store.md has the argument).
//   - The change runs the Redis command on the value: for example RESTORE
//     the value into a scratch key of the coordinator's redis-server, run
//     the command, DUMP the result; list order then converges with the
//     value, since replicas hold the decided bytes.
//   - A replica that missed decisions catches up when it gets an Accept of
//     the highest accepted value at its ballot, with no Next (repair may
//     send one: it is a copy of the accept that value's proposer sent, and
//     the replica checks it as any accept).
//   - Commands on several keys of one owner need those keys to be one
//     register here (one acceptor state for the group); that is not here.
package decide
