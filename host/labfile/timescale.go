//go:build linux

package labfile

import (
	"fmt"
	"math"

	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/host/lab/link"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// slow puts a namespace plan on a fabric slowed by the file's timescale
// k (units.Timescale): the ports' configurations (qdisc.Config.Slowed),
// the relays' delays, the PE agents' rates and RTT, each flow's
// bottleneck, base RTT, start, every, pause and duration, and the report
// interval. The perf clients and servers keep the fabric's own settings
// with the timescale beside them: perf slows DCQCN's parameters once the
// profile and knobs are applied, and the endpoints' rates and timers
// (perf.ClientConfig.Timescale). Sizes, limits and thresholds stay.
//
// A value the slowed fabric cannot hold is refused at timescale, with
// the largest timescale that fits.
func (f *File) slow(p *Plan) error {
	k := f.Timescale
	p.Timescale = k
	p.Interval = k.Time(p.Interval)
	// tooSlow names what k pushes out of its range and the largest k that
	// keeps it in.
	tooSlow := func(what string, kmax float64) error {
		return conf.Errorf("timescale", k, "%s: want at most %s", what, units.Timescale(math.Floor(kmax*1000)/1000))
	}
	if p.Interval > perf.MaxInterval {
		return tooSlow(fmt.Sprintf("the report interval %s becomes %s, over perf's %s", units.FormatDuration(f.interval()), units.FormatDuration(p.Interval), units.FormatDuration(perf.MaxInterval)),
			float64(perf.MaxInterval)/float64(f.interval()))
	}
	if k.K() == 1 {
		return nil
	}
	for i := range p.Ports {
		po := &p.Ports[i]
		rate := po.Config.Rate
		po.Config = po.Config.Slowed(k)
		if po.Config.Rate < qdisc.MinRate {
			return tooSlow(fmt.Sprintf("port %s at %s runs at %s, below a port's minimum %s", po.Name, rate, po.Config.Rate, qdisc.MinRate),
				float64(rate)/float64(qdisc.MinRate))
		}
		if err := po.Config.Validate(); err != nil {
			return conf.Errorf("timescale", k, "port %s slowed: %s", po.Name, oneLine(err))
		}
	}
	for i := range p.Relays {
		r := &p.Relays[i]
		d := r.Delay
		r.Delay = k.Time(d)
		if r.Delay > link.MaxDelay {
			return tooSlow(fmt.Sprintf("the delay %s of the link through %s becomes %s, over %s", units.FormatDuration(d), r.Node, units.FormatDuration(r.Delay), units.FormatDuration(link.MaxDelay)),
				float64(link.MaxDelay)/float64(d))
		}
	}
	for i := range p.PEs {
		a := p.PEs[i].Agent
		if a == nil {
			continue
		}
		s := *a
		s.LineRate, s.MinRate, s.RTT = k.Rate(a.LineRate), k.Rate(a.MinRate), k.Time(a.RTT)
		if err := checkAgent(&s); err != nil {
			return conf.Errorf("timescale", k, "pe %s's agent slowed (rtt %s): %s", p.PEs[i].Node, units.FormatDuration(s.RTT), oneLine(err))
		}
		p.PEs[i].Agent = &s
	}
	for i := range p.Servers {
		p.Servers[i].Timescale = k
	}
	for i := range p.Flows {
		fp := &p.Flows[i]
		fp.Bottleneck = k.Rate(fp.Bottleneck)
		fp.BaseRTT = k.Time(fp.BaseRTT)
		fp.Wire, fp.ReplyWire = fp.Wire.Slowed(k.K()), fp.ReplyWire.Slowed(k.K())
		fp.Start, fp.Every, fp.Pause = k.Time(fp.Start), k.Time(fp.Every), k.Time(fp.Pause)
		for j := range fp.RelayHolds {
			fp.RelayHolds[j].Via = k.Time(fp.RelayHolds[j].Via)
		}
		if fp.TCP != nil {
			fp.TCP.Duration = k.Time(fp.TCP.Duration)
			continue
		}
		c := &fp.Client
		c.Timescale = k
		c.Interval = k.Time(c.Interval)
		if c.Bytes == 0 {
			d := c.Duration
			if c.Duration = k.Time(d); c.Duration > perf.MaxDuration {
				return tooSlow(fmt.Sprintf("flow %s's %s becomes %s, over perf's %s", fp.Flow.Name, units.FormatDuration(d), units.FormatDuration(c.Duration), units.FormatDuration(perf.MaxDuration)),
					float64(perf.MaxDuration)/float64(d))
			}
		}
		if err := c.Validate(); err != nil {
			return conf.Errorf("timescale", k, "flow %s slowed: %v", fp.Flow.Name, err)
		}
	}
	return nil
}
