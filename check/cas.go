package check

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
)

// CheckCAS checks compare-and-set increments of each key, as redis-py's
// transaction() helper makes them: WATCH k, GET k (a missing key reads 0),
// MULTI, SET k read+1, EXEC. EXEC commits only if k did not change since
// the WATCH, so the committed attempts form one chain, each reading what
// the one before wrote:
//
//   - no two committed attempts read the same value (one update lost);
//   - a committed attempt reads at least one more than every attempt
//     committed before it began (it read a value older than one already
//     written);
//   - no attempt reads more than the attempts that may have committed;
//   - each final read (GET after the workload) is at least the number of
//     committed attempts and at most that plus those of unknown outcome.
func CheckCAS(history []Command) Finding {
	f := newFinding("WATCH compare-and-set", history)
	keys, ops := byKey(history, CAS, Get)
	for _, k := range keys {
		var committed []Command
		var unknown int64
		for _, c := range ops[k] {
			switch {
			case c.Name != CAS:
			case c.Failed:
				unknown++
			case c.Acquired:
				committed = append(committed, c)
			}
		}
		n := int64(len(committed))
		byRead := map[int64][]Command{}
		for _, c := range committed {
			byRead[c.Number] = append(byRead[c.Number], c)
		}
		for _, v := range slices.Sorted(maps.Keys(byRead)) {
			if cs := byRead[v]; len(cs) > 1 {
				f.add(LostUpdate, fmt.Sprintf("%s: %d EXECs committed on the same value read, %d: all but one of their updates lost", k, len(cs), v), cs...)
			}
		}
		for _, c := range ops[k] {
			if c.Name == CAS && !c.Failed && (c.Number < 0 || c.Number > n+unknown) {
				f.add(ImpossibleID, fmt.Sprintf("%s: read %d, outside 0..%d, the values the attempts that may have committed wrote", k, c.Number, n+unknown), c)
			}
		}
		// The committed attempts by Return, and at each the one that read
		// the most of those that returned so far.
		byReturn := slices.SortedFunc(slices.Values(committed), func(a, b Command) int { return cmp.Compare(a.Return, b.Return) })
		most := make([]int, len(byReturn))
		for i := range byReturn {
			if most[i] = i; i > 0 && byReturn[most[i-1]].Number >= byReturn[i].Number {
				most[i] = most[i-1]
			}
		}
		for _, c := range committed {
			i := sort.Search(len(byReturn), func(i int) bool { return byReturn[i].Return >= c.Call })
			if i == 0 {
				continue
			}
			if before := byReturn[most[i-1]]; c.Number <= before.Number {
				f.add(StaleCAS, fmt.Sprintf("%s: an EXEC committed on the value %d, though one that read %d (and wrote %d) committed before its WATCH",
					k, c.Number, before.Number, before.Number+1), before, c)
			}
		}
		for _, c := range ops[k] {
			if c.Name == Get && !c.Failed && (c.Number < n || c.Number > n+unknown) {
				f.add(WrongFinal, fmt.Sprintf("%s: the final value %d is outside %d..%d: %d EXECs committed, %d of unknown outcome", k, c.Number, n, n+unknown, n, unknown), c)
			}
		}
	}
	return f
}
