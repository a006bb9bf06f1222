package ldfi

import "math/rand/v2"

// queueCap bounds the hypotheses of one size held at once; past it, the
// rest come with the next refill.
const queueCap = 4096

// hypotheses hands out the minimal hitting sets of a growing formula,
// smallest first, at random among those of one size (seeds/000: "compute
// all solutions ... and then choose randomly from the smallest"). It fills
// a queue with every minimal hitting set of the smallest size and draws from
// it, dropping a drawn set that a clause learned since no longer lets hit,
// or that contains a failure set found since; a set that still hits every
// clause is still minimal, as clauses only remove hitting sets. When the
// queue runs dry it enumerates again, which picks up the sets alternate
// executions created. Only the minimal clauses of the formula count (kept
// as it grows): a set hits every clause when it hits those.
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
	tried    []triedSet
	refills  int
}

type triedSet struct {
	set     []int
	hitting bool // it still hits every clause: its supersets are not minimal
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
	h.refills++
	for _, c := range h.fresh {
		for i := range h.tried {
			if h.tried[i].hitting && !hits(c, h.tried[i].set) {
				h.tried[i].hitting = false
			}
		}
	}
	h.fresh = nil
	exclude := append([][]int(nil), h.failures...)
	for _, t := range h.tried {
		if t.hitting {
			exclude = append(exclude, t.set)
		}
	}
	for c := range h.enum.Enumerate(h.minimal.sets, exclude, h.k) {
		if len(h.queue) > 0 && len(c) > len(h.queue[0]) || len(h.queue) == queueCap {
			break
		}
		h.queue = append(h.queue, c)
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
	h.tried = append(h.tried, triedSet{set: set, hitting: true})
	if failed {
		h.failures = append(h.failures, set)
	}
}
