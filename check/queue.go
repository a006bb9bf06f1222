package check

import (
	"cmp"
	"fmt"
	"slices"
)

// CheckQueue checks RPUSHes of unique elements and LPOPs of each key, used
// as a queue (Jepsen's total-queue asks the same):
//
//   - each element is delivered (an acknowledged LPOP's reply) at most
//     once;
//   - no LPOP delivers an element that no RPUSH pushed, or one whose RPUSH
//     began after the LPOP ended;
//   - once the queue is drained (a final LPOP, Command.Final, answered
//     nil), every acknowledged element was delivered, but for as many as
//     there were LPOPs of unknown outcome, each of which may have taken
//     one.
func CheckQueue(history []Command) Finding {
	f := newFinding("queue", history)
	keys, ops := byKey(history, RPush, LPop)
	for _, k := range keys {
		pushed := map[string]Command{}
		delivered := map[string][]Command{}
		var order []string // delivered elements, in order of their first delivery
		unknownPops, drained := 0, false
		for _, c := range ops[k] {
			switch {
			case c.Name == RPush:
				pushed[c.Arg] = c
			case c.Failed:
				unknownPops++
			case c.Arg == "":
				drained = drained || c.Final
			default:
				if len(delivered[c.Arg]) == 0 {
					order = append(order, c.Arg)
				}
				delivered[c.Arg] = append(delivered[c.Arg], c)
			}
		}
		for _, e := range order {
			pops := delivered[e]
			p, ok := pushed[e]
			switch {
			case !ok:
				f.add(UnknownElement, fmt.Sprintf("%s: LPOP delivered %q, which no RPUSH pushed", k, e), pops[0])
			case p.Call > pops[0].Return:
				f.add(UnknownElement, fmt.Sprintf("%s: LPOP delivered %s before its RPUSH began", k, e), pops[0], p)
			}
			if len(pops) > 1 {
				if ok {
					pops = append([]Command{p}, pops...)
				}
				f.add(DeliveredTwice, fmt.Sprintf("%s: %s was delivered %d times", k, e, len(delivered[e])), pops...)
			}
		}
		if !drained {
			continue
		}
		var lost []Command
		for _, p := range pushed {
			if !p.Failed && len(delivered[p.Arg]) == 0 {
				lost = append(lost, p)
			}
		}
		if len(lost) > unknownPops {
			slices.SortFunc(lost, func(a, b Command) int { return cmp.Compare(a.Call, b.Call) })
			f.add(LostElement, fmt.Sprintf("%s: the drained queue never delivered %d acknowledged elements, and only %d LPOPs of unknown outcome may have taken any; the first is %s",
				k, len(lost), unknownPops, lost[0].Arg), lost[0])
		}
	}
	return f
}
