package lb

import (
	"math/rand/v2"
	"time"
)

// REPS recycles EVs that came back clean (htsim UecMpReps, after Bonato et
// al., "REPS: Recycled Entropy Packet Spraying"): an ACK without ECN puts
// its EV in a circular buffer of REPSBufferSize (8); Next reuses the
// earliest fresh EV in it, or draws a new one at random when none is
// fresh (exploration). ECN-marked, NACKed and timed-out EVs are simply not
// recycled. A fresh EV is used once; a clean ACK arriving with the buffer
// full of fresh EVs overwrites the oldest.
//
// Freezing (htsim's repsUseFreezing): a timeout outside exploration makes
// REPS reuse whatever its buffer holds, round robin, fresh or not (a link
// has likely failed and the EVs known to work are the safe ones); the
// first feedback after REPSFreezeTime ends it, empties the buffer and
// draws the next REPSExploreAfterFreeze EVs at random.
type REPS struct {
	evs EVRange
	rng *rand.Rand
	p   Params

	buf        []repsSlot
	head       int // next slot written
	count      int // slots written since the last reset, at most len(buf)
	fresh      int // valid slots: always the last fresh ones written before head (outside freezing)
	headFrozen int // next slot reused in freezing mode

	frozen  bool
	thawAt  time.Duration // can_exit_frozen_mode
	explore int           // explore_counter: EVs still to draw at random

	st Stats
}

type repsSlot struct {
	ev    int // index in evs
	valid bool
}

// NewREPS returns a REPS balancer (see New for rng).
func NewREPS(p Params, rng *rand.Rand) (*REPS, error) {
	r, rng, err := setup(p, rng)
	if err != nil {
		return nil, err
	}
	return &REPS{evs: r, rng: rng, p: p, buf: make([]repsSlot, p.REPSBufferSize)}, nil
}

// Next implements Balancer.
func (r *REPS) Next(time.Duration) uint16 {
	r.st.Packets++
	switch {
	case r.explore > 0:
		r.explore--
	case r.frozen && r.count > 0:
		r.st.Recycled++
		return r.evs.ev(r.takeFrozen())
	case !r.frozen && r.fresh > 0:
		r.st.Recycled++
		return r.evs.ev(r.takeFresh())
	}
	r.st.Explored++
	return r.evs.ev(r.rng.IntN(r.evs.Count))
}

// Feedback implements Balancer, in htsim's order: a timeout may freeze; any
// feedback after the freeze time thaws; a clean ACK is recycled.
func (r *REPS) Feedback(now time.Duration, ev uint16, f PathFeedback) {
	i, ok := count(&r.st, r.evs, ev, f)
	if f == PathTimeout && r.p.REPSFreeze && !r.frozen && r.explore == 0 {
		r.frozen = true
		r.thawAt = now + r.p.REPSFreezeTime
		r.headFrozen = 0
		r.st.Freezes++
	}
	if r.frozen && now > r.thawAt {
		r.frozen = false
		r.reset()
		r.explore = r.p.REPSExploreAfterFreeze
		r.st.Thaws++
	}
	if f == PathGood && ok {
		r.add(i)
	}
}

// add writes ev at head (htsim CircularBufferREPS::add).
func (r *REPS) add(ev int) {
	s := &r.buf[r.head]
	if s.valid {
		if !r.frozen {
			r.st.Overflow++ // the oldest fresh EV, never used
		}
	} else {
		r.fresh++
	}
	*s = repsSlot{ev: ev, valid: true}
	r.head = (r.head + 1) % len(r.buf)
	r.count = min(r.count+1, len(r.buf))
}

// takeFresh uses the earliest fresh EV (remove_earliest_fresh).
func (r *REPS) takeFresh() int {
	off := (r.head - r.fresh + len(r.buf)) % len(r.buf)
	s := &r.buf[off]
	s.valid = false
	r.fresh--
	return s.ev
}

// takeFrozen reuses the written slots round robin (remove_frozen).
func (r *REPS) takeFrozen() int {
	s := &r.buf[r.headFrozen]
	if s.valid {
		s.valid = false
		r.fresh--
	}
	r.headFrozen = (r.headFrozen + 1) % r.count
	return s.ev
}

// reset empties the buffer (resetBuffer).
func (r *REPS) reset() {
	clear(r.buf)
	r.head, r.count, r.fresh, r.headFrozen = 0, 0, 0, 0
}

// Frozen reports whether REPS is in freezing mode.
func (r *REPS) Frozen() bool { return r.frozen }

// Fresh is how many clean EVs wait in the buffer.
func (r *REPS) Fresh() int { return r.fresh }

// EVs implements Balancer.
func (r *REPS) EVs() EVRange { return r.evs }

// Stats implements Balancer.
func (r *REPS) Stats() Stats { return r.st }
