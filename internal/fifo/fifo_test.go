package fifo

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A Queue holds what a plain slice queue would, in order, through any mix of
// pushes, drops and resets; it holds on to nothing it gave up; and its
// array stays within four times the most it held at once (or keep).
func TestMatchesSliceQueue(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		var q Queue[int]
		var model []int
		most, next := 0, 1 // 0 marks a slot that holds nothing
		for step := 0; step < 2000; step++ {
			switch k := r.IntN(10); {
			case k < 6: // bursts in, in pieces out, as a pipelined connection does
				for range 1 + r.IntN(20) {
					q.Push(next)
					model = append(model, next)
					next++
				}
			case k < 9 && len(model) > 0:
				n := 1 + r.IntN(len(model))
				q.Drop(n)
				model = model[n:]
			case k == 9:
				q.Reset()
				model = nil
			}
			most = max(most, len(model))
			if q.Len() != len(model) || !slices.Equal(q.All(), model) {
				t.Fatalf("seed %d step %d: fifo holds %v, want %v", seed, step, q.All(), model)
			}
			// Slots that hold no item are zeroed, so a fifo of pointers keeps nothing it gave up alive.
			for i, x := range q.items[:cap(q.items)] {
				if (i < q.head || i >= len(q.items)) && x != 0 {
					t.Fatalf("seed %d step %d: slot %d outside the queue still holds %d", seed, step, i, x)
				}
			}
			if limit := max(2*most, keep) + 1; cap(q.items) > 2*limit {
				t.Fatalf("seed %d step %d: array of %d for at most %d items", seed, step, cap(q.items), most)
			}
		}
	}
}

// A drained Queue keeps a small array for the next burst, and lets a large
// one go.
func TestReusesSmallArrays(t *testing.T) {
	var q Queue[int]
	for i := range 10 {
		q.Push(i)
	}
	arr := &q.items[:1][0]
	q.Drop(10)
	q.Push(1)
	if &q.items[0] != arr {
		t.Fatal("a drained fifo of 10 items took a new array")
	}
	for i := range keep * 2 {
		q.Push(i)
	}
	q.Drop(q.Len())
	if q.items != nil {
		t.Fatalf("a drained fifo kept an array of %d", cap(q.items))
	}
}
