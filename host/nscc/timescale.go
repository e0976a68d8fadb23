package nscc

import "github.com/fabriclab/fabriclab/qdisc/units"

// Slowed is p on a fabric slowed by k (units.Timescale): the line rate
// over k, every time (base RTT and its floor, tq, qa_threshold, the
// adjust period) times k, alpha (bytes per second of delay below tq)
// over k; byte amounts and gains stay, so each rule moves the window by
// the same bytes per round trip. NoDelay stays: the "delay ≈ 0" floor is
// the host's timing resolution, not a fabric time. LabParams at the slowed
// line rate and base RTT is LabParams slowed.
func (p Params) Slowed(k units.Timescale) Params {
	if k.K() == 1 {
		return p
	}
	p.LinkRate = k.Rate(p.LinkRate)
	p.ConfigBaseRTT = k.Time(p.ConfigBaseRTT)
	p.BaseRTTFloor = k.Time(p.BaseRTTFloor)
	p.TargetQDelay = k.Time(p.TargetQDelay)
	p.QAThreshold = k.Time(p.QAThreshold)
	p.AdjustPeriodThreshold = k.Time(p.AdjustPeriodThreshold)
	p.AlphaBytesPerSecond /= k.K()
	return p
}
