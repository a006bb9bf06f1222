package check

import (
	"cmp"
	"fmt"
	"slices"
)

// CheckSet checks SADDs of unique elements and SMEMBERS reads of each key,
// a grow-only set:
//
//   - no read holds an element that no SADD added;
//   - every read that began after an SADD was acknowledged holds its
//     element;
//   - the final reads (Command.Final: through each node, or on each
//     replica directly, after the writes) hold the same elements.
func CheckSet(history []Command) Finding {
	f := newFinding("grow-only set", history)
	keys, ops := byKey(history, SAdd, SMembers)
	for _, k := range keys {
		added := map[string]Command{}
		var acked []Command // by Return
		var reads, finals []Command
		for _, c := range ops[k] {
			switch {
			case c.Name == SAdd:
				added[c.Arg] = c
				if !c.Failed {
					acked = append(acked, c)
				}
			case c.Failed:
			default:
				c.List = slices.Sorted(slices.Values(c.List))
				reads = append(reads, c)
				if c.Final {
					finals = append(finals, c)
				}
			}
		}
		slices.SortStableFunc(acked, func(a, b Command) int { return cmp.Compare(a.Return, b.Return) })
		for _, r := range reads {
			for i, e := range r.List {
				if _, ok := added[e]; !ok {
					f.add(UnknownElement, fmt.Sprintf("%s: a read holds %q, which no SADD added", k, e), withList(r, i))
				}
			}
			var missing []Command
			for _, a := range acked {
				if a.Return >= r.Call {
					break
				}
				if _, found := slices.BinarySearch(r.List, a.Arg); !found {
					missing = append(missing, a)
				}
			}
			if len(missing) > 0 {
				f.add(MissingElement, fmt.Sprintf("%s: a read misses %d acknowledged elements added before it began; the first is %s", k, len(missing), missing[0].Arg),
					missing[0], withList(r, len(r.List)))
			}
		}
		for _, r := range finals[min(1, len(finals)):] {
			if !slices.Equal(r.List, finals[0].List) {
				at := diverge(r.List, finals[0].List)
				f.add(ReplicasDiffer, fmt.Sprintf("%s: final reads differ: %d and %d elements, sorted, first apart at position %d", k, len(finals[0].List), len(r.List), at),
					withList(finals[0], at), withList(r, at))
			}
		}
	}
	return f
}
