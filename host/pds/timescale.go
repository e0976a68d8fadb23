package pds

import (
	"net/netip"

	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Slowed is c on a fabric slowed by k (units.Timescale): the line rate
// over k, NSCC's base RTT and the protocol's timers (RTO, probe, idle)
// times k, an explicit RCCC configuration and the wires (a byte's
// serialisation and the latency) likewise; messages, MTU and
// windows stay in bytes. NSCC's default parameters follow the line rate
// and base RTT (nscc.LabParams: the same BDP, tq times k). PortCatchUp
// stays: it makes up for the host's late wakeups, which do not slow down.
// A NewWindow of the caller's own is the caller's to slow. Zero fields
// keep their defaults, slowed.
func (c Config) Slowed(k units.Timescale) Config {
	if k.K() == 1 {
		return c
	}
	c = c.withDefaults()
	c.LinkRate = k.Rate(c.LinkRate)
	c.BaseRTT = k.Time(c.BaseRTT)
	c.RTO = k.Time(c.RTO)
	c.ProbeTimeout = k.Time(c.ProbeTimeout)
	c.IdleTimeout = k.Time(c.IdleTimeout)
	if c.RCCC != nil {
		r := c.RCCC.Slowed(k)
		c.RCCC = &r
	}
	if c.Wires != nil {
		ws := make(map[netip.Addr]pktio.Wire, len(c.Wires))
		for a, w := range c.Wires {
			ws[a] = w.Slowed(k.K())
		}
		c.Wires = ws
	}
	return c
}
