package rccc

import "github.com/fabriclab/fabriclab/qdisc/units"

// Slowed is p on a fabric slowed by k (units.Timescale): the line rate
// over k, the base RTT and the pacer's catch-up times k; the grants, the
// windows and the share of the line stay.
func (p Params) Slowed(k units.Timescale) Params {
	p.LinkRate = k.Rate(p.LinkRate)
	p.ConfigBaseRTT = k.Time(p.ConfigBaseRTT)
	p.CatchUp = k.Time(p.CatchUp)
	return p
}
