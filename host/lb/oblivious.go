package lb

import (
	"math/rand/v2"
	"time"
)

// Oblivious sprays packets over its EVs and ignores feedback (htsim
// UecMpOblivious), the baseline: every run of EVs packets uses each EV
// once, in the order index XOR a mask drawn afresh at each wrap.
type Oblivious struct {
	evs EVRange
	rng *rand.Rand
	seq spray
	st  Stats
}

// NewOblivious returns an Oblivious balancer (see New for rng).
func NewOblivious(p Params, rng *rand.Rand) (*Oblivious, error) {
	r, rng, err := setup(p, rng)
	if err != nil {
		return nil, err
	}
	return &Oblivious{evs: r, rng: rng, seq: newSpray(r.Count, rng)}, nil
}

// Next implements Balancer.
func (o *Oblivious) Next(time.Duration) uint16 {
	o.st.Packets++
	return o.evs.ev(o.seq.next(o.rng))
}

// Feedback implements Balancer: it only counts.
func (o *Oblivious) Feedback(_ time.Duration, ev uint16, f PathFeedback) {
	count(&o.st, o.evs, ev, f)
}

// EVs implements Balancer.
func (o *Oblivious) EVs() EVRange { return o.evs }

// Stats implements Balancer.
func (o *Oblivious) Stats() Stats { return o.st }

// spray is htsim's cursor over n (a power of two) EVs: _current_ev_index
// counts 0..n−1 and the EV is the index XOR _path_xor, redrawn at each
// wrap.
type spray struct {
	n, mask int
	idx     int
	xor     int
}

func newSpray(n int, rng *rand.Rand) spray {
	return spray{n: n, mask: n - 1, xor: rng.IntN(n)}
}

// cur is the EV index under the cursor.
func (s *spray) cur() int { return (s.idx ^ s.xor) & s.mask }

// advance moves the cursor, redrawing the mask at the wrap.
func (s *spray) advance(rng *rand.Rand) {
	s.idx++
	if s.idx == s.n {
		s.idx = 0
		s.xor = rng.IntN(s.n)
	}
}

// next returns the index under the cursor and advances.
func (s *spray) next(rng *rand.Rand) int {
	i := s.cur()
	s.advance(rng)
	return i
}
