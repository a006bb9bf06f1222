package node

// A fifo is a queue over a slice whose array is reused: a connection's
// steady bursts of requests queue without allocating, where a slice
// resliced from the front lets its array go and a new one grows at every
// burst. An array grown past fifoKeep by a deep pipeline is let go once
// the queue empties.
type fifo[T any] struct {
	items []T // items[head:] are queued, oldest first
	head  int
}

const fifoKeep = 64

func (q *fifo[T]) push(x T) {
	if len(q.items) == cap(q.items) && q.head >= len(q.items)/2 {
		// Half the array is taken items: move the rest to the front
		// rather than grow, so a queue that never empties stays bounded.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, x)
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

// all returns the queued items, oldest first, in the fifo's own array.
func (q *fifo[T]) all() []T { return q.items[q.head:] }

// drop takes the k oldest items off.
func (q *fifo[T]) drop(k int) {
	clear(q.items[q.head : q.head+k])
	q.head += k
	if q.head == len(q.items) {
		q.reset()
	}
}

// reset empties the queue.
func (q *fifo[T]) reset() {
	clear(q.items[q.head:])
	if cap(q.items) > fifoKeep {
		q.items = nil
	} else {
		q.items = q.items[:0]
	}
	q.head = 0
}
