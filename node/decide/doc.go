// Package decide orders the commands on one key among the key's replicas so
// that every command, read-modify-write included (INCR, SET NX, RPUSH, LPOP
// ...), is linearizable, even when coordinators disagree about who is up;
// and, as transactions over those keys, commands on several keys of one
// owner (see "Commands on several keys").
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
//   - Commands on several keys of one owner run as a [Command], below
//     (see "Wiring a Command").
//
// # Commands on several keys
//
// A [Command] runs a command on one key, or on several keys of one owner
// (LMOVE, SMOVE, MSETNX, RENAME, MULTI/EXEC or EVAL over several keys), over
// the registers above, one per key: it is a transaction with a record key of
// its own, Percolator's (Peng and Dabek, 2010) over linearizable registers
// instead of timestamps.
//
//	c, err := NewCommand(keys, record, compound) // record: a fresh key of the owner
//	ops := c.Start()              // run each op's Change on op.Key, by its Proposer
//	ops, st := c.Step(op, status) // as each op ends: Decided, Refused or Unknown
//	// st: Waiting, Decided (answer; run the ops returned still: they
//	// unlock), Refused (not applied), Unknown (it may have been applied)
//
// A key's register holds a [Slot]: its data and the record key of the
// transaction that locks it, if any. A command of several keys:
//
//  1. locks every key and reads its data (one change of each key, all at
//     once; locking is idempotent, so an op of unknown outcome is sent
//     again);
//  2. applies the compound to the data read, and decides its record,
//     absent until then, as committed with every key's data after (a
//     change of the record key that writes it only if absent);
//  3. writes each key's data after into it and unlocks it.
//
// A command that finds a key locked by another transaction waits (an op
// with Wait, after a backoff; or, for a transaction its own coordinator
// runs, until that one ends), and then decides that transaction's record:
// aborted if absent, else as it is. It then writes the transaction's end
// into the key (the data after, if committed; unlocked either way) and goes
// on. A command of one key is its one change, unless it meets a lock.
//
// Safety, sketched. Each register is linearizable (above), so every change
// of a key, a lock or an unlock included, takes effect at one point, in one
// order. A record ends once: committed by its transaction or aborted by
// another command, whichever change of the record key is decided first,
// and never changes after. A key's data changes only while it is unlocked
// (a command of one key), or by writing the end of the transaction that
// holds it, once that end is decided. So while a transaction holds every
// key (from its last lock to the decision of its record), no key's data
// changes: the data it read is one state, the one the keys hold at the
// moment its record is decided committed. That moment is the
// transaction's linearization point: a change of one of its keys decided
// after it finds the data after (written by the transaction, or by itself
// from the record as it meets the lock); one decided before it ran before
// the transaction locked the key (its effect is in the data read), or met
// the lock and aborted the transaction. A transaction whose record is
// aborted changed nothing: its data after lives only in a record that
// never holds it. All-or-nothing on every key follows: every key's data
// after comes from one record, decided once. This is two-phase locking,
// with the commit point a consensus decision instead of a log write.
//
// Retries. A transaction never sent its commit has not been applied, and
// never will be: only it commits its record, and another command that
// meets its lock aborts it. [Command.MayHaveApplied] says so, so its
// caller can answer "not applied" and run it again under a new record
// (the simulation does, after a backoff). Once the commit went out, its
// outcome is known only from the record: its retries are the same
// change, idempotent, and if none is decided, the outcome is unknown.
//
// Why not one ballot for all the keys. The alternative, a compound change
// prepared and accepted at one ballot for all its keys (each acceptor
// promising and accepting all of them in one script, each entry tagged with
// the compound and the values before it), needs a rule for a compound that
// reached only some acceptors: a later round that meets it completes it,
// unless a key of it shows a higher ballot without its tag, and then
// aborts it by the values before. Take keys k and j and acceptors x, y, z.
// Compound D on {k, j} at ballot 1 reaches x only. Compound C on {k, j} at
// ballot 5 prepares at x and y, finds D on both keys, completes it, adds
// its own change, and reaches x only. A round on j alone at 7 prepares at
// y and z, meets no tag, and is decided there: j without D. A round on k
// at 9 prepares at x and y, meets C on k, and on j the round of 7, higher
// and untagged: it aborts C, and k takes C's value before, which holds D.
// D is then in k and not in j. To be right, the values before must be the
// tagged entries themselves, so that the abort of C brings back D's tag
// and aborts D too: undo records nest along every chain of compounds not
// known decided, without bound unless a third message clears the tags of
// compounds known decided. That design costs two round trips where this one
// costs three before the answer (lock; prepare and accept of the record,
// a fresh key), but it needs a new acceptor rule over several keys,
// nested undo records in every value, and a proof about the fates of
// interleaved compounds; this one keeps the acceptor rule and the
// register's proof as they are, and its argument is two-phase locking's.
//
// Costs and liveness. In the simulation (TestCostOfSeveralKeys, `go test
// -run CostOfSeveralKeys -v ./node/decide`, 20 runs of 25 commands per
// client on 3 acceptors, lists a and b: LMOVE 35%, RPUSH 30%, LPOP 15%,
// LRANGE 20%, on a quiet network) a lone client of a lone coordinator
// waits 825 µs on average for an LMOVE and 348 µs for an RPUSH (one
// message takes 20 µs plus an exponential 80 µs on average), and every
// command is answered. Clients that contend for the two keys queue behind
// the locks: 6 clients of a lone coordinator wait 9.8 ms for an LMOVE and
// 6.0 ms for an RPUSH, and 85 of 3,020 commands end unanswered (aborted
// or blocked past their retries, or of unknown outcome); through 3
// coordinators, 16.0 ms and 2.5 ms, and 592 of 3,020. Two transactions
// can wait on each other's locks; a coordinator lets only a later one of
// its own wait for an earlier one without a timer, and a wait on any
// other transaction ends, after a few backoffs, in deciding its record,
// so waits never form a cycle for ever (a transaction whose coordinator
// crashed is aborted that way).
//
// The simulation runs commands of two keys mixed with commands of one of
// them (LMOVE between two lists with RPUSH, LPOP and LRANGE; MSETNX with
// SET, DEL and GET) over loss, duplication, partitions and coordinator
// crashes (mid-commit too), checks each history with porcupine over a
// model of both keys and transfer's by conservation of its elements, and
// finds three planted variants, the counterparts of the one-ballot
// design's failures: a command of one key that ignores a lock (no
// expansion of the key set), an abort without deciding the record (an end
// decided by one coordinator's view: no abort rule that binds the others),
// and a command of two keys run as two commands of one key (an accept not
// atomic across keys).
//
// # Wiring a Command
//
// How the node runs commands of several keys of one owner so, at
// DC_QUORUM and DC_SAFE_QUORUM (node/transact.go, docs/store.md):
//
//   - The lock lives beside the key's value on each replica (a key of its
//     own, `__troop:l:`+key), written by the accept script in the same
//     script as the value and at the same version, and answered with it by
//     the prepare script: the register's value is the pair. Repair (hints,
//     read repair, anti-entropy) refuses to copy into or out of a locked
//     key, and reads the key by consensus instead: two replicas never hold
//     one version with different contents.
//   - Record keys are keys of the owner (the hash tag of the first key,
//     when the cluster has one; they are decided on its replicas anyway),
//     named for one try of one command, never reused (the node's name and
//     random bytes), and deleted by their coordinator once every key the
//     transaction locked is unlocked; a record deleted early would be read
//     as absent, and a lock of a committed transaction would then be
//     undone as aborted, so a record outlives its locks (a locked key's
//     lock, and a record, never expire).
//   - Whole-value writes (SET, DEL, versions from the clock) refuse a
//     locked key as they refuse one promised above their version, and go
//     by consensus instead: a write under a lock would be undone by the
//     transaction's data after. So do reads: a replica's value of a locked
//     key may be older than a transaction already decided.
//   - The coordinator runs the compound on the keys' data in its scratch
//     area (RESTORE each, run the command or the MULTI/EXEC or script, DUMP
//     each), and waits for a transaction of its own begun earlier by its
//     end, not a timer.
//   - A change of one key that meets a lock leaves the key as it is and
//     runs again as a [Command] of one key, so a command that meets no
//     lock costs what it cost before locks.
package decide
