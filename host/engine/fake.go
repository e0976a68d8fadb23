package engine

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// FakeClock is a Clock that moves only when told, with Wakers whose sleeps
// end when the clock reaches their deadline: an engine on it runs its
// loops in fake time (quic-go's mock clock is the model). Tests drive it
// with Advance, or with AdvanceToNext, which jumps to the earliest sleep's
// deadline: an event-driven run of the transmit loop.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Duration
	wakers  []*FakeWaker
	changed *sync.Cond
}

var _ Clock = (*FakeClock)(nil)

// NewFakeClock returns a fake clock at start.
func NewFakeClock(start time.Duration) *FakeClock {
	c := &FakeClock{now: start}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// Now implements Clock.
func (c *FakeClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t (never back) and wakes the sleeps due by then.
func (c *FakeClock) Set(t time.Duration) {
	c.mu.Lock()
	c.now = max(c.now, t)
	c.mu.Unlock()
	c.changed.Broadcast()
}

// Advance moves the clock d forward.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += max(d, 0)
	c.mu.Unlock()
	c.changed.Broadcast()
}

// Sleeping is how many of the clock's wakers are in Sleep and stay there:
// a kicked or due sleeper is about to run, and does not count.
func (c *FakeClock) Sleeping() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.wakers {
		if w.sleeping && !w.kicked && !w.done && (w.deadline < 0 || c.now < w.deadline) {
			n++
		}
	}
	return n
}

// NextDeadline is the earliest deadline of a waker in Sleep; ok is false
// if none sleeps with a deadline.
func (c *FakeClock) NextDeadline() (at time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.wakers {
		if w.sleeping && !w.kicked && w.deadline >= 0 && (!ok || w.deadline < at) {
			at, ok = w.deadline, true
		}
	}
	return at, ok
}

// AdvanceToNext moves the clock to the earliest sleep's deadline and
// reports whether there was one.
func (c *FakeClock) AdvanceToNext() bool {
	at, ok := c.NextDeadline()
	if ok {
		c.Set(at)
	}
	return ok
}

// NewWaker returns a Waker on this clock.
func (c *FakeClock) NewWaker() *FakeWaker {
	w := &FakeWaker{c: c, deadline: -1}
	c.mu.Lock()
	c.wakers = append(c.wakers, w)
	c.mu.Unlock()
	return w
}

// FakeWaker is a FakeClock's Waker. Its fields are guarded by the clock's
// mutex.
type FakeWaker struct {
	c                      *FakeClock
	sleeping, kicked, done bool
	deadline               time.Duration // -1: none
}

var _ Waker = (*FakeWaker)(nil)

var errWakerClosed = errors.New("engine: waker closed")

// Sleep implements Waker on the fake clock.
func (w *FakeWaker) Sleep(d time.Duration) error {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.done {
		return errWakerClosed
	}
	if w.kicked {
		w.kicked = false
		return nil
	}
	w.deadline = -1
	if d >= 0 {
		w.deadline = c.now + d
	}
	w.sleeping = true
	for !w.kicked && !w.done && (w.deadline < 0 || c.now < w.deadline) {
		c.changed.Wait()
	}
	w.sleeping, w.kicked, w.deadline = false, false, -1
	if w.done {
		return errWakerClosed
	}
	return nil
}

// Kick implements Waker.
func (w *FakeWaker) Kick() {
	w.c.mu.Lock()
	w.kicked = true
	w.c.mu.Unlock()
	w.c.changed.Broadcast()
}

// Close implements Waker.
func (w *FakeWaker) Close() error {
	w.c.mu.Lock()
	w.done = true
	w.c.mu.Unlock()
	w.c.changed.Broadcast()
	return nil
}

// Drive runs fake time event by event until done reports true: whenever
// the system is quiet (idle reports true on two looks 50 µs of real time
// apart: no packet in flight, every loop asleep or blocked), the clock
// jumps to the earliest sleep's deadline. It fails if the clock would pass
// limit, or if the system stays quiet with no deadline to jump to (a
// deadlock: nothing will ever happen).
func (c *FakeClock) Drive(done, idle func() bool, limit time.Duration) error {
	stuck := 0
	for !done() {
		if !idle() {
			stuck = 0
			time.Sleep(20 * time.Microsecond)
			continue
		}
		time.Sleep(50 * time.Microsecond)
		if done() || !idle() {
			continue
		}
		at, ok := c.NextDeadline()
		switch {
		case !ok:
			if stuck++; stuck > 2000 { // 0.1 s of real time
				return fmt.Errorf("engine: fake time stuck at %v: nothing sleeps with a deadline and nothing moves", c.Now())
			}
			continue
		case at > limit:
			return fmt.Errorf("engine: fake time would pass %v (next deadline %v)", limit, at)
		}
		stuck = 0
		c.Set(at)
	}
	return nil
}

// RunUntil runs fake time to t: whenever the system is quiet (as for
// Drive), the clock jumps to the earliest sleep's deadline or to t,
// whichever comes first.
func (c *FakeClock) RunUntil(t time.Duration, idle func() bool) {
	for c.Now() < t {
		if !idle() {
			time.Sleep(20 * time.Microsecond)
			continue
		}
		time.Sleep(50 * time.Microsecond)
		if !idle() {
			continue
		}
		at, ok := c.NextDeadline()
		if !ok || at > t {
			at = t
		}
		c.Set(at)
	}
}
