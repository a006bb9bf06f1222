package ldfi

import (
	"math/rand/v2"
	"slices"
)

// queueCap bounds the hypotheses of one size held at once; past it, the
// rest come with the next refill.
const queueCap = 4096

// hypotheses hands out the minimal hitting sets of a growing formula,
// smallest first, at random among those of one size (Netflix's LDFI post: "compute
// all solutions ... and then choose randomly from the smallest"). It fills
// a queue with every minimal hitting set of the smallest size and draws from
// it, dropping a drawn set that a clause learned since no longer lets hit,
// or that contains a failure set found since; a set that still hits every
// clause is still minimal, as clauses only remove hitting sets. When the
// queue runs dry it enumerates again, which picks up the sets alternate
// executions created. Only the minimal clauses of the formula count (kept
// as it grows, over classes of interchangeable points): a set hits every
// clause when it hits those.
type hypotheses struct {
	f        *Formula
	enum     Enumerator
	k        int
	rng      *rand.Rand
	queue    [][]int
	minimal  minimalClauses
	synced   int     // clauses of the formula added to minimal
	fresh    [][]int // minimal clauses added since the queue was filled
	failures [][]int
	tried    [][]int // tested sets that still hit every clause: their supersets are not minimal
}

// next returns the next hypothesis, or false when none of up to k points
// is left.
func (h *hypotheses) next() ([]int, bool) {
	for {
		h.sync()
		for len(h.queue) > 0 {
			i, last := h.rng.IntN(len(h.queue)), len(h.queue)-1
			c := h.queue[i]
			h.queue[i], h.queue = h.queue[last], h.queue[:last]
			if hitsAll(h.fresh, c) && !supersetOfExcluded(c, h.failures) {
				return c, true
			}
		}
		if !h.refill() {
			return nil, false
		}
	}
}

// refill enumerates the smallest untested hypotheses; false when there are
// none.
func (h *hypotheses) refill() bool {
	// A tried set that misses a new clause is no hitting set any more, and
	// never will be again (clauses only add up): it needs no excluding.
	h.tried = slices.DeleteFunc(h.tried, func(t []int) bool { return !hitsAll(h.fresh, t) })
	h.fresh = nil
	exclude := append(slices.Clone(h.failures), h.tried...)
	banned, larger := splitExclude(exclude)
	classes, alive := h.minimal.classes(banned)
	// The enumerator works on the classes; each set of classes it finds
	// stands for every choice of one point per class.
	ex := newExcluder(larger)
	for cs := range enumerateRows(h.enum, &h.minimal.bits, alive, h.k) {
		if len(h.queue) > 0 && len(cs) > len(h.queue[0]) {
			break
		}
		full := !expand(cs, classes, func(set []int) bool {
			if !ex.excludes(set) {
				h.queue = append(h.queue, set)
			}
			return len(h.queue) < queueCap
		})
		if full {
			break
		}
	}
	return len(h.queue) > 0
}

// sync adds the clauses the formula learned since the last call.
func (h *hypotheses) sync() {
	for _, c := range h.f.sets[h.synced:] {
		if h.minimal.add(c) {
			h.fresh = append(h.fresh, c)
		}
	}
	h.synced = len(h.f.sets)
}

// tested records the outcome of testing set.
func (h *hypotheses) tested(set []int, failed bool) {
	h.tried = append(h.tried, set)
	if failed {
		h.failures = append(h.failures, set)
	}
}
