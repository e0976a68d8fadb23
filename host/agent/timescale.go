package agent

import "github.com/fabriclab/fabriclab/qdisc/units"

// Slowed is c on a fabric slowed by k (units.Timescale): DCQCN slowed
// (dcqcn.Params.Slowed), the rate cap over k, the CNP period, the
// in-flight time and the ACK timeout times k; the window and bursts stay
// in packets, so Rc × InflightTime stays in bytes.
func (c QPConfig) Slowed(k units.Timescale) QPConfig {
	if k.K() == 1 {
		return c
	}
	c.DCQCN = c.DCQCN.Slowed(k)
	c.RateCap = k.Rate(c.RateCap)
	c.CNPPeriod = k.Time(c.CNPPeriod)
	c.InflightTime = k.Time(c.InflightTime)
	c.AckTimeout = k.Time(c.AckTimeout)
	return c
}
