package actors

// fifo is a first-in first-out queue in a slice: the supervisor's rotation
// and the mailboxes' queues. It allocates only as it grows; popped slots are
// cleared for the garbage collector, and the slice is reused from the start
// once it has been emptied, or moved down once mostly popped.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) push(v T) { q.items = append(q.items, v) }

// peek returns the value at the head; false when empty.
func (q *fifo[T]) peek() (T, bool) {
	if q.head == len(q.items) {
		var zero T
		return zero, false
	}
	return q.items[q.head], true
}

// pop removes and returns the value at the head; false when empty.
func (q *fifo[T]) pop() (T, bool) {
	var zero T
	if q.head == len(q.items) {
		return zero, false
	}
	v := q.items[q.head]
	q.items[q.head] = zero
	q.head++
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head >= 1024 && q.head*2 >= len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return v, true
}
