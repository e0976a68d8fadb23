package pe

import "github.com/fabriclab/fabriclab/qdisc/units"

// Slowed is c on a fabric slowed by k (units.Timescale): the line and
// least rates over k, the WAN's round trip (and so the default DCQCN
// controller's timers, WANParams) and the reroute hold times k; the
// least change stays a ratio. Zero fields keep their defaults, slowed. A
// Controller of the caller's own is the caller's to slow.
func (c Config) Slowed(k units.Timescale) Config {
	if k.K() == 1 {
		return c
	}
	if c.RTT == 0 {
		c.RTT = defaultRTT
	}
	if c.RerouteHold == 0 {
		c.RerouteHold = defaultRerouteHold
	}
	c.LineRate = k.Rate(c.LineRate)
	c.MinRate = k.Rate(c.MinRate)
	c.RTT = k.Time(c.RTT)
	c.RerouteHold = k.Time(c.RerouteHold)
	return c
}
