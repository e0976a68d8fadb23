package lb

import (
	"math/rand/v2"
	"testing"
	"time"
)

const ms = time.Millisecond

func newTestREPS(t *testing.T, edit func(*Params)) *REPS {
	t.Helper()
	p := DefaultParams()
	if edit != nil {
		edit(&p)
	}
	r, err := NewREPS(p, rand.New(rand.NewPCG(11, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func expectNext(t *testing.T, b Balancer, step string, now time.Duration, want ...uint16) {
	t.Helper()
	for i, w := range want {
		if got := b.Next(now); got != w {
			t.Fatalf("%s: packet %d: EV %d, want %d", step, i, got, w)
		}
	}
}

// Clean EVs come back first, oldest first; marked, NACKed and timed-out
// ones never; with nothing fresh REPS explores.
func TestREPSRecycleInOrder(t *testing.T) {
	r := newTestREPS(t, func(p *Params) { p.REPSFreeze = false })
	e := r.EVs()
	ev := func(i int) uint16 { return e.ev(i) }
	// Before any feedback: explore.
	for range 5 {
		r.Next(0)
	}
	if st := r.Stats(); st.Explored != 5 || st.Recycled != 0 {
		t.Fatalf("no feedback yet: %+v", st)
	}
	r.Feedback(0, ev(7), PathGood)
	r.Feedback(0, ev(3), PathECN)
	r.Feedback(0, ev(5), PathGood)
	r.Feedback(0, ev(9), PathNack)
	r.Feedback(0, ev(1), PathGood)
	r.Feedback(0, ev(2), PathTimeout)
	if r.Fresh() != 3 {
		t.Fatalf("fresh %d, want 3", r.Fresh())
	}
	expectNext(t, r, "recycled", 0, ev(7), ev(5), ev(1))
	before := r.Stats().Explored
	r.Next(0)
	if st := r.Stats(); st.Explored != before+1 || st.Recycled != 3 {
		t.Fatalf("buffer used up: %+v, want one more exploration", st)
	}
	// Interleaved: each clean EV is used once, in order of arrival.
	r.Feedback(0, ev(20), PathGood)
	expectNext(t, r, "one", 0, ev(20))
	r.Feedback(0, ev(21), PathGood)
	r.Feedback(0, ev(22), PathGood)
	expectNext(t, r, "two", 0, ev(21))
	r.Feedback(0, ev(23), PathGood)
	expectNext(t, r, "three", 0, ev(22), ev(23))
	// The same EV clean twice is used twice.
	r.Feedback(0, ev(4), PathGood)
	r.Feedback(0, ev(4), PathGood)
	expectNext(t, r, "twice", 0, ev(4), ev(4))
}

// The buffer holds 8 (htsim repsBufferSize): the 9th and 10th clean EVs
// overwrite the two oldest, which are never used.
func TestREPSBufferOverflow(t *testing.T) {
	r := newTestREPS(t, nil)
	e := r.EVs()
	for i := range 10 {
		r.Feedback(0, e.ev(i), PathGood)
	}
	if r.Fresh() != 8 || r.Stats().Overflow != 2 {
		t.Fatalf("fresh %d overflow %d, want 8 and 2", r.Fresh(), r.Stats().Overflow)
	}
	for i := 2; i < 10; i++ {
		expectNext(t, r, "after overflow", 0, e.ev(i))
	}
	if r.Fresh() != 0 {
		t.Fatalf("fresh %d after using all", r.Fresh())
	}
	// A smaller buffer.
	r = newTestREPS(t, func(p *Params) { p.REPSBufferSize = 2 })
	for i := range 5 {
		r.Feedback(0, e.ev(i), PathGood)
	}
	expectNext(t, r, "buffer of 2", 0, r.EVs().ev(3), r.EVs().ev(4))
}

// Freezing (htsim UecMpReps::processEv): a timeout freezes; frozen, Next
// reuses the buffer's EVs round robin, used or not, and clean EVs still
// join it; the first feedback after 10 ms thaws, empties the buffer and
// explores 16 EVs before recycling again. A timeout while exploring does
// not freeze.
func TestREPSFreezing(t *testing.T) {
	r := newTestREPS(t, nil)
	e := r.EVs()
	ev := func(i int) uint16 { return e.ev(i) }
	r.Feedback(0, ev(1), PathGood)
	r.Feedback(0, ev(2), PathGood)
	r.Feedback(0, ev(3), PathGood)
	expectNext(t, r, "before", 0, ev(1)) // ev(1) used: no longer fresh
	r.Feedback(1*ms, ev(9), PathTimeout)
	if !r.Frozen() || r.Stats().Freezes != 1 {
		t.Fatal("timeout did not freeze")
	}
	expectNext(t, r, "frozen: round robin over what was written", 2*ms, ev(1), ev(2), ev(3), ev(1), ev(2))
	r.Feedback(5*ms, ev(4), PathGood) // joins the buffer while frozen
	expectNext(t, r, "frozen, one more", 5*ms, ev(3), ev(4), ev(1))
	r.Feedback(11*ms, ev(5), PathECN) // not after 1 ms + 10 ms yet
	if !r.Frozen() {
		t.Fatal("thawed at exactly the freeze time (htsim: strictly after)")
	}
	r.Feedback(11*ms+1, ev(6), PathGood)
	if r.Frozen() || r.Stats().Thaws != 1 {
		t.Fatal("feedback after the freeze time did not thaw")
	}
	if r.Fresh() != 1 {
		t.Fatalf("after the thaw the buffer holds %d, want only ev(6)", r.Fresh())
	}
	before := r.Stats()
	// A timeout while exploring does not freeze again.
	r.Feedback(12*ms, ev(7), PathTimeout)
	if r.Frozen() {
		t.Fatal("froze while exploring")
	}
	for range 16 {
		r.Next(12 * ms)
	}
	if st := r.Stats(); st.Explored != before.Explored+16 || st.Recycled != before.Recycled {
		t.Fatalf("after the thaw: %+v, want 16 explorations", st)
	}
	expectNext(t, r, "recycling again", 13*ms, ev(6))
	// Exploration over: a timeout freezes again; an empty buffer explores.
	r.Feedback(14*ms, ev(7), PathTimeout)
	if !r.Frozen() {
		t.Fatal("second timeout did not freeze")
	}
	r2 := newTestREPS(t, nil)
	r2.Feedback(0, ev(1), PathTimeout)
	r2.Next(0)
	if !r2.Frozen() || r2.Stats().Explored != 1 {
		t.Fatalf("frozen with an empty buffer: %+v, want an exploration", r2.Stats())
	}
	// Freezing off: a timeout changes nothing.
	r3 := newTestREPS(t, func(p *Params) { p.REPSFreeze = false })
	r3.Feedback(0, ev(1), PathTimeout)
	if r3.Frozen() {
		t.Fatal("froze with REPSFreeze off")
	}
}

// A timeout freezes whatever its EV (htsim reports it without one).
func TestREPSForeignTimeout(t *testing.T) {
	r := newTestREPS(t, nil)
	r.Feedback(0, r.EVs().First-1, PathTimeout)
	if !r.Frozen() || r.Stats().Foreign != 1 {
		t.Fatalf("foreign timeout: frozen %v, %+v", r.Frozen(), r.Stats())
	}
}
