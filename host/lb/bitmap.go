package lb

import (
	"math/rand/v2"
	"time"
)

// Bitmap sprays as Oblivious does but skips EVs with a penalty (htsim
// UecMpBitmap): an ECN-marked ACK adds ECNPenalty (1) to its EV, a NACK
// NackPenalty (4), a timeout sets MaxPenalty (15), the cap. Penalties
// decay as the cursor passes: each Next takes one point off the first
// penalised EV it meets, then moves on to the next clean one. So an EV
// with penalty p sits out at least p of the rounds in which the cursor
// reaches it first.
type Bitmap struct {
	evs EVRange
	rng *rand.Rand
	seq spray
	p   Params

	penalty   []uint8 // htsim _ev_skip_bitmap
	penalised int     // EVs with a penalty (htsim _ev_skip_count)
	st        Stats
}

// NewBitmap returns a Bitmap balancer (see New for rng).
func NewBitmap(p Params, rng *rand.Rand) (*Bitmap, error) {
	r, rng, err := setup(p, rng)
	if err != nil {
		return nil, err
	}
	return newBitmap(r, p, rng), nil
}

func newBitmap(r EVRange, p Params, rng *rand.Rand) *Bitmap {
	return &Bitmap{evs: r, rng: rng, seq: newSpray(r.Count, rng), p: p, penalty: make([]uint8, r.Count)}
}

// Next implements Balancer. Every EV is probed within 2·EVs steps of the
// cursor (the XOR mask changes once on the way), so a clean EV is always
// found when there is one; if none is, the last EV probed is returned.
func (b *Bitmap) Next(time.Duration) uint16 {
	b.st.Packets++
	i := b.seq.cur()
	limit := 2 * b.evs.Count // htsim: EVs+1 probes, which may miss the one clean EV
	for probes := 1; b.penalty[i] > 0; probes++ {
		if probes == 1 { // decay: the first penalised EV met only
			b.penalty[i]--
			b.st.Decays++
			if b.penalty[i] == 0 {
				b.penalised--
			}
		}
		if probes >= limit {
			break
		}
		b.st.Skipped++
		b.seq.advance(b.rng)
		i = b.seq.cur()
	}
	b.seq.advance(b.rng)
	return b.evs.ev(i)
}

// Feedback implements Balancer: PathGood changes nothing, the others add
// their penalty up to MaxPenalty.
func (b *Bitmap) Feedback(_ time.Duration, ev uint16, f PathFeedback) {
	i, ok := count(&b.st, b.evs, ev, f)
	if !ok {
		return
	}
	var add int
	switch f {
	case PathECN:
		add = int(b.p.ECNPenalty)
	case PathNack:
		add = int(b.p.NackPenalty)
	case PathTimeout:
		add = int(b.p.MaxPenalty)
	default:
		return
	}
	if b.penalty[i] == 0 {
		b.penalised++
	}
	b.penalty[i] = uint8(min(int(b.penalty[i])+add, int(b.p.MaxPenalty)))
}

// Penalty returns ev's penalty; ok is false for an EV outside EVs().
func (b *Bitmap) Penalty(ev uint16) (penalty uint8, ok bool) {
	i, ok := b.evs.index(ev)
	if !ok {
		return 0, false
	}
	return b.penalty[i], true
}

// Penalised is how many EVs have a penalty.
func (b *Bitmap) Penalised() int { return b.penalised }

// EVs implements Balancer.
func (b *Bitmap) EVs() EVRange { return b.evs }

// Stats implements Balancer.
func (b *Bitmap) Stats() Stats { return b.st }
