// Package fifo is a queue over a slice whose array is reused.
package fifo

// A Queue is a queue over a slice whose array is reused: a connection's
// steady bursts of replies, or a link's requests in flight, queue without
// allocating, where a slice resliced from the front lets its array go and
// a new one grows at every burst. An array grown past keep by a deep
// pipeline is let go once the queue empties. The zero Queue is empty.
type Queue[T any] struct {
	items []T // items[head:] are queued, oldest first
	head  int
}

const keep = 64

// Push queues x last.
func (q *Queue[T]) Push(x T) {
	if len(q.items) == cap(q.items) && q.head >= len(q.items)/2 {
		// Half the array is taken items: move the rest to the front
		// rather than grow, so a queue that never empties stays bounded.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, x)
}

// Len is how many items are queued.
func (q *Queue[T]) Len() int { return len(q.items) - q.head }

// All returns the queued items, oldest first, in the queue's own array.
func (q *Queue[T]) All() []T { return q.items[q.head:] }

// Drop takes the k oldest items off.
func (q *Queue[T]) Drop(k int) {
	clear(q.items[q.head : q.head+k])
	q.head += k
	if q.head == len(q.items) {
		q.Reset()
	}
}

// Reset empties the queue.
func (q *Queue[T]) Reset() {
	clear(q.items[q.head:])
	if cap(q.items) > keep {
		q.items = nil
	} else {
		q.items = q.items[:0]
	}
	q.head = 0
}
