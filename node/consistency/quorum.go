package consistency

import "bytes"

// Quorum is the number of replicas that make a majority of r: floor(r/2)+1.
func Quorum(r int) int { return r/2 + 1 }

// Outcome is what one replica did with a request.
type Outcome int

const (
	// Pending: no answer yet.
	Pending Outcome = iota
	// OK: the replica answered (for a write, it applied the write).
	OK
	// Failed: the replica answered with an error (for a write, it did not
	// apply it; for a read an error reply is still an answer, see Tally).
	Failed
	// Unreachable: the replica could not be reached, or did not answer in time.
	Unreachable
)

// Tally counts replica outcomes for one request in the local datacenter.
type Tally struct {
	Replicas    int     // replicas asked: one per rack
	OK          int     // answers (writes: acknowledgements)
	Failed      int     // error answers (writes only; a read's error reply counts as OK)
	Unreachable int     // no answer
	Agreeing    int     // reads: size of the largest group of identical answers
	Local       Outcome // the replica in the coordinator's own rack
}

// Pending is the number of replicas still to answer.
func (t Tally) Pending() int { return t.Replicas - t.OK - t.Failed - t.Unreachable }

// Decision is what a coordinator does next.
type Decision int

const (
	// Wait for more answers.
	Wait Decision = iota
	// Succeed: answer the client now.
	Succeed
	// Fail: answer the client with an error now.
	Fail
)

func (d Decision) String() string {
	return [...]string{"wait", "succeed", "fail"}[d]
}

// DecideWrite applies the write column of the consistency table.
//
//   - DC_ONE succeeds when the local replica acknowledges. If the local replica
//     is unreachable, the write fails over: the first acknowledgement from
//     another rack makes it succeed. An error answer from the local replica
//     fails it.
//   - DC_QUORUM succeeds on Q acknowledgements, fails once Q is out of reach.
//   - DC_SAFE_QUORUM succeeds on Q acknowledgements once every reachable
//     replica has answered without error; any error answer fails it.
func DecideWrite(l Level, t Tally) Decision {
	q := Quorum(t.Replicas)
	switch l {
	case DCOne:
		switch t.Local {
		case OK:
			return Succeed
		case Failed:
			return Fail
		case Unreachable:
			if t.OK > 0 {
				return Succeed
			}
			if t.Pending() == 0 {
				return Fail
			}
		}
		return Wait
	case DCSafeQuorum:
		if t.Failed > 0 || t.OK+t.Pending() < q {
			return Fail
		}
		if t.OK >= q && t.Pending() == 0 {
			return Succeed
		}
		return Wait
	default: // DCQuorum
		if t.OK >= q {
			return Succeed
		}
		if t.OK+t.Pending() < q {
			return Fail
		}
		return Wait
	}
}

// DecideRead applies the read column of the consistency table, for reads
// sent to every replica of the local datacenter (DC_ONE reads go to one
// replica at a time and need no tally).
//
//   - DC_QUORUM succeeds on Q answers (the newest of them is returned).
//   - DC_SAFE_QUORUM succeeds once Q answers agree, and fails once no group of
//     Q agreeing answers can form.
func DecideRead(l Level, t Tally) Decision {
	q := Quorum(t.Replicas)
	if l == DCSafeQuorum {
		if t.Agreeing >= q {
			return Succeed
		}
		if t.Agreeing+t.Pending() < q {
			return Fail
		}
		return Wait
	}
	if t.OK >= q {
		return Succeed
	}
	if t.OK+t.Pending() < q {
		return Fail
	}
	return Wait
}

// Reply is one replica's answer to a versioned read.
type Reply struct {
	Version []byte // the value's version; empty when the key has none
	Raw     []byte // the reply frame, as the datastore sent it
}

// Newest returns the index of the reply with the greatest version; on a tie
// the earliest wins, so callers list the local replica first. Versions are
// fixed-width, so byte order is version order.
func Newest(replies []Reply) int {
	best := 0
	for i := 1; i < len(replies); i++ {
		if bytes.Compare(replies[i].Version, replies[best].Version) > 0 {
			best = i
		}
	}
	return best
}

// LargestAgreement returns the size of the largest group of identical replies
// (same version and same bytes), and the index of one of its members.
func LargestAgreement(replies []Reply) (size, index int) {
	for i := range replies {
		if n := Holders(replies, i); n > size {
			size, index = n, i
		}
	}
	return size, index
}
