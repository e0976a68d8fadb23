package lb

import (
	"math/rand/v2"
	"time"
)

// Mixed is htsim's default balancer (UecMpMixed): every clean ACK queues
// its EV for reuse (the first REPS, UecMpRepsLegacy, whose list has no
// size limit and no freezing), and Next reuses the oldest queued EV or,
// when none waits, asks a Bitmap, which sees all feedback too.
type Mixed struct {
	bitmap *Bitmap

	queue       []int // EV indices, a ring of MixedRecycleLimit
	qHead, qLen int
	st          Stats
}

// NewMixed returns a Mixed balancer (see New for rng).
func NewMixed(p Params, rng *rand.Rand) (*Mixed, error) {
	r, rng, err := setup(p, rng)
	if err != nil {
		return nil, err
	}
	return &Mixed{bitmap: newBitmap(r, p, rng), queue: make([]int, p.MixedRecycleLimit)}, nil
}

// Next implements Balancer.
func (m *Mixed) Next(now time.Duration) uint16 {
	m.st.Packets++
	if m.qLen > 0 {
		i := m.queue[m.qHead]
		m.qHead = (m.qHead + 1) % len(m.queue)
		m.qLen--
		m.st.Recycled++
		return m.bitmap.evs.ev(i)
	}
	return m.bitmap.Next(now)
}

// Feedback implements Balancer: to the Bitmap, and a clean ACK's EV to the
// queue.
func (m *Mixed) Feedback(now time.Duration, ev uint16, f PathFeedback) {
	m.bitmap.Feedback(now, ev, f)
	i, ok := count(&m.st, m.bitmap.evs, ev, f)
	if f != PathGood || !ok {
		return
	}
	if m.qLen == len(m.queue) { // full: drop the oldest
		m.qHead = (m.qHead + 1) % len(m.queue)
		m.qLen--
		m.st.Overflow++
	}
	m.queue[(m.qHead+m.qLen)%len(m.queue)] = i
	m.qLen++
}

// Bitmap is the Bitmap Mixed falls back on (its penalties).
func (m *Mixed) Bitmap() *Bitmap { return m.bitmap }

// Queued is how many clean EVs wait to be reused.
func (m *Mixed) Queued() int { return m.qLen }

// EVs implements Balancer.
func (m *Mixed) EVs() EVRange { return m.bitmap.evs }

// Stats implements Balancer: Mixed's own counts, with the Bitmap's skips
// and decays.
func (m *Mixed) Stats() Stats {
	s := m.st
	b := m.bitmap.st
	s.Skipped, s.Decays = b.Skipped, b.Decays
	return s
}
