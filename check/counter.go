package check

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
)

// CheckCounter checks INCRBY and DECRBY of each key, read by GET and by
// their own replies, as Jepsen's counter checker bounds its reads: a value
// read is consistent with some order of the changes that respects real
// time only if it lies between
//
//   - the lower bound: the changes acknowledged before the read began, plus
//     every decrement that may have happened by its end;
//   - the upper bound: the changes acknowledged before the read began, plus
//     every increment that may have happened by its end.
//
// A change may have happened by a read's end when it began before that end
// and was not acknowledged before the read began (it may be concurrent, or
// of unknown outcome). An INCRBY's reply is a read that its own change
// precedes. With increments only, that is Jepsen's check exactly: between
// the acknowledged increments completed before the read and all increments
// attempted before it ended. The key starts missing (0).
func CheckCounter(history []Command) Finding {
	f := newFinding("counter", history)
	keys, ops := byKey(history, IncrBy, DecrBy, Get)
	for _, k := range keys {
		b := newBounds(ops[k])
		for _, r := range ops[k] {
			if r.Failed {
				continue
			}
			lo, hi := b.at(r)
			if r.Number < lo || r.Number > hi {
				f.add(OutOfBounds, fmt.Sprintf("%s: read %d, outside %d..%d (what was acknowledged before it began, and what may have happened by its end)",
					k, r.Number, lo, hi), b.witnesses(r)...)
			}
		}
	}
	return f
}

// bounds answers, for a read, the sums over the changes of one key that
// bound it, each in O(log n).
type bounds struct {
	acked []Command // acknowledged changes by Return
	// Prefix sums over acked: of Delta, of its negative part, of its
	// positive part.
	ackedSum, ackedNeg, ackedPos []int64
	called                       []Command // every change by Call
	calledNeg, calledPos         []int64
}

func newBounds(ops []Command) bounds {
	var b bounds
	for _, c := range ops {
		if c.Name == Get {
			continue
		}
		b.called = append(b.called, c)
		if !c.Failed {
			b.acked = append(b.acked, c)
		}
	}
	slices.SortStableFunc(b.acked, func(x, y Command) int { return cmp.Compare(x.Return, y.Return) })
	slices.SortStableFunc(b.called, func(x, y Command) int { return cmp.Compare(x.Call, y.Call) })
	b.ackedSum, b.ackedNeg, b.ackedPos = prefix(b.acked)
	_, b.calledNeg, b.calledPos = prefix(b.called)
	return b
}

// prefix is the prefix sums of cs's deltas, their negative and their
// positive parts.
func prefix(cs []Command) (sum, neg, pos []int64) {
	sum, neg, pos = make([]int64, len(cs)+1), make([]int64, len(cs)+1), make([]int64, len(cs)+1)
	for i, c := range cs {
		sum[i+1] = sum[i] + c.Delta
		neg[i+1] = neg[i] + min(0, c.Delta)
		pos[i+1] = pos[i] + max(0, c.Delta)
	}
	return
}

// at is the lower and upper bound of what read r may return.
func (b bounds) at(r Command) (lo, hi int64) {
	d := sort.Search(len(b.acked), func(i int) bool { return b.acked[i].Return >= r.Call })   // acknowledged before r began
	p := sort.Search(len(b.called), func(i int) bool { return b.called[i].Call >= r.Return }) // begun before r ended
	// The possible changes are those begun before r ended less the
	// acknowledged ones before it began, which all began before it ended.
	lo = b.ackedSum[d] + b.calledNeg[p] - b.ackedNeg[d]
	hi = b.ackedSum[d] + b.calledPos[p] - b.ackedPos[d]
	if r.Name != Get {
		// r's own change: counted as possible above, but it happened.
		lo += max(0, r.Delta)
		hi += min(0, r.Delta)
	}
	return lo, hi
}

// maxWitnesses bounds the changes a read out of bounds is shown with.
const maxWitnesses = 4

// witnesses are the operations that show a read out of bounds: the last
// change each client had acknowledged before it began (of a few clients),
// the read, and the first change begun after it ended.
func (b bounds) witnesses(r Command) []Command {
	var out []Command
	seen := map[int]bool{}
	d := sort.Search(len(b.acked), func(i int) bool { return b.acked[i].Return >= r.Call })
	for i := d - 1; i >= 0 && len(out) < maxWitnesses; i-- {
		if c := b.acked[i]; !seen[c.Client] {
			seen[c.Client] = true
			out = append(out, c)
		}
	}
	slices.Reverse(out)
	out = append(out, r)
	if p := sort.Search(len(b.called), func(i int) bool { return b.called[i].Call >= r.Return }); p < len(b.called) {
		out = append(out, b.called[p])
	}
	return out
}
