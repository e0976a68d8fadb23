package dcqcn

import "github.com/fabriclab/fabriclab/qdisc/units"

// Slowed is p on a fabric slowed by k (units.Timescale): every rate knob
// divided by k, every timer multiplied by k; the byte counter, g, F and
// the clamps stay. The RP then takes k times as long per step for the
// same change of Rc relative to the line: the paper's dynamics, slower.
func (p Params) Slowed(k units.Timescale) Params {
	if k.K() == 1 {
		return p
	}
	p.LineRate = k.Rate(p.LineRate)
	p.RPGMaxRate = k.Rate(p.RPGMaxRate)
	p.RPGAIRate = k.Rate(p.RPGAIRate)
	p.RPGHAIRate = k.Rate(p.RPGHAIRate)
	p.RPGMinRate = max(k.Rate(p.RPGMinRate), 1)
	p.RateToSetOnFirstCNP = k.Rate(p.RateToSetOnFirstCNP)
	p.RPGTimeReset = k.Time(p.RPGTimeReset)
	p.DCETCPRTT = k.Time(p.DCETCPRTT)
	p.RateReduceMonitorPeriod = k.Time(p.RateReduceMonitorPeriod)
	p.MinTimeBetweenCNPs = k.Time(p.MinTimeBetweenCNPs)
	return p
}
