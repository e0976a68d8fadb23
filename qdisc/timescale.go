package qdisc

import "github.com/fabriclab/fabriclab/qdisc/units"

// Slowed is c on a fabric slowed by k (units.Timescale): the port's and
// the classes' rates divided by k, every AQM time (TCN's and ECN♯'s
// targets, CoDel's target and interval, the two-threshold notification
// interval) multiplied by k; limits, thresholds and trim sizes stay in
// bytes.
func (c Config) Slowed(k units.Timescale) Config {
	if k.K() == 1 {
		return c
	}
	c.Rate = k.Rate(c.Rate)
	for i := range c.Classes {
		cc := &c.Classes[i]
		cc.Rate = k.Rate(cc.Rate)
		cc.InsTarget = k.Time(cc.InsTarget)
		cc.InsMax = k.Time(cc.InsMax)
		cc.PstTarget = k.Time(cc.PstTarget)
		cc.PstInterval = k.Time(cc.PstInterval)
		cc.Target = k.Time(cc.Target)
		cc.Interval = k.Time(cc.Interval)
		cc.TwoThreshold.NotifyInterval = k.Time(cc.TwoThreshold.NotifyInterval)
	}
	return c
}
