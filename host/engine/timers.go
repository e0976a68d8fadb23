package engine

import (
	"container/heap"
	"time"
)

// Deadline is an item's place in a Timers heap: embed it in what the heap
// orders. The zero Deadline is in no heap.
type Deadline struct {
	due time.Duration
	idx int // in the heap, plus one; 0: not there
}

// Timed is what a Timers heap orders: a pointer to a struct embedding a
// Deadline (its method is unexported: only a Deadline provides it).
type Timed interface{ timerDeadline() *Deadline }

func (d *Deadline) timerDeadline() *Deadline { return d }

// Timers is a heap of items by deadline, the earliest first: the engine's
// flows waiting for theirs, a UET CCC's PDCs waiting for their timers.
type Timers[T Timed] struct{ h timerItems[T] }

// Set gives x the deadline due, or takes it out at Never.
func (t *Timers[T]) Set(x T, due time.Duration) {
	d := x.timerDeadline()
	if due == Never {
		t.Remove(x)
		return
	}
	d.due = due
	if d.idx > 0 {
		heap.Fix(&t.h, d.idx-1)
		return
	}
	heap.Push(&t.h, x)
}

// Remove takes x out, if it is there.
func (t *Timers[T]) Remove(x T) {
	if d := x.timerDeadline(); d.idx > 0 {
		heap.Remove(&t.h, d.idx-1)
	}
}

// Next is the earliest deadline, Never when there is none.
func (t *Timers[T]) Next() time.Duration {
	if len(t.h) == 0 {
		return Never
	}
	return t.h[0].timerDeadline().due
}

// PopDue takes out the earliest item if its deadline is at or before now.
func (t *Timers[T]) PopDue(now time.Duration) (x T, ok bool) {
	if len(t.h) == 0 || t.h[0].timerDeadline().due > now {
		return x, false
	}
	return heap.Pop(&t.h).(T), true
}

// Len is how many items wait.
func (t *Timers[T]) Len() int { return len(t.h) }

// timerItems is Timers' container/heap.
type timerItems[T Timed] []T

func (h timerItems[T]) Len() int { return len(h) }
func (h timerItems[T]) Less(i, j int) bool {
	return h[i].timerDeadline().due < h[j].timerDeadline().due
}
func (h timerItems[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].timerDeadline().idx, h[j].timerDeadline().idx = i+1, j+1
}
func (h *timerItems[T]) Push(x any) {
	v := x.(T)
	v.timerDeadline().idx = len(*h) + 1
	*h = append(*h, v)
}
func (h *timerItems[T]) Pop() any {
	old := *h
	last := len(old) - 1
	v := old[last]
	var zero T
	old[last] = zero
	*h = old[:last]
	v.timerDeadline().idx = 0
	return v
}
