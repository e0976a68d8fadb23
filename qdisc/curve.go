package qdisc

import "math"

// CurveRow compares one backlog bin of an observed MarkingCurve with the
// class's configured curve (CEProbability).
type CurveRow struct {
	LoBytes  uint64  `json:"lo_bytes"`
	HiBytes  uint64  `json:"hi_bytes"` // exclusive
	Arrivals uint64  `json:"ect_arrivals"`
	Marks    uint64  `json:"ce_marks"`
	Observed float64 `json:"observed"`
	// The configured probability ranges over [ConfLo, ConfHi] inside the
	// bin; the observed fraction depends on where in it the arrivals fell.
	ConfLo float64 `json:"configured_lo"`
	ConfHi float64 `json:"configured_hi"`
	// Match: Observed is inside the configured range, give or take 3
	// standard deviations of a binomial sample of Arrivals packets.
	// AtLimit: an arrival in the bin may not have fit in the buffer
	// (dropped or trimmed at the limit, counted unmarked): not judged,
	// Match false.
	Match   bool `json:"match"`
	AtLimit bool `json:"at_limit,omitempty"`
}

// curveFrameBytes is the largest frame a lab link carries (MTU 9000)
// with its headers: a backlog within it of the limit may not take an
// arrival.
const curveFrameBytes = 9216

// Compare lines the observed curve up with cc's configured one, a row
// per bin that saw ECN-capable arrivals; nil when cc's mode does not mark
// on the backlog at enqueue (CoDel, TCN, ECN♯: their curve is in time).
// The port counts an arrival in its bin whatever became of it, so the
// bins within a frame of the limit are AtLimit, not judged.
func (c *MarkingCurve) Compare(cc *ClassConfig) []CurveRow {
	if _, ok := cc.CEProbability(0); !ok {
		return nil
	}
	prob := func(b uint64) float64 { p, _ := cc.CEProbability(b); return p }
	bin := c.BinBytes
	if bin == 0 {
		bin = uint64(cc.LimitBytes) / CurveBins
	}
	var rows []CurveRow
	for b := range CurveBins {
		if c.Arrivals[b] == 0 {
			continue
		}
		r := CurveRow{LoBytes: uint64(b) * bin, HiBytes: uint64(b+1) * bin, Arrivals: c.Arrivals[b], Marks: c.Marks[b]}
		if b == CurveBins-1 { // the last bin also holds everything above
			r.HiBytes = max(r.HiBytes, uint64(cc.LimitBytes))
		}
		r.Observed = c.Fraction(b)
		// The curve is monotonic: its maximum in the bin is at the top,
		// except that it jumps to 1 at max_th.
		r.ConfLo = prob(r.LoBytes)
		r.ConfHi = max(r.ConfLo, prob(r.HiBytes-1))
		if r.HiBytes+curveFrameBytes > uint64(cc.LimitBytes) {
			r.AtLimit = true
			rows = append(rows, r)
			continue
		}
		n := float64(r.Arrivals)
		tol := func(p float64) float64 { return 3*math.Sqrt(p*(1-p)/n) + 0.5/n }
		r.Match = r.Observed >= r.ConfLo-tol(r.ConfLo) && r.Observed <= r.ConfHi+tol(r.ConfHi)
		rows = append(rows, r)
	}
	return rows
}
