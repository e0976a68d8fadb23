package main

// The host's part of a run (host/hostlost): a meter over the traffic, the
// port's idle periods in class 3 against the time the agents and
// endpoints of this process held their flows, and the port's held-back
// time. iperf3's kernel TCP has no held log: for -traffic tcp the meter
// gives the port's idle and held-back time and the kernel's accounting.

import (
	"fmt"
	"io"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// HostLost is the host's part of a run in the summaries and -json.
type HostLost struct {
	// Report is the meter's, over the traffic (wall times); nil when
	// the run was not metered.
	Report *hostlost.Report `json:"host_lost,omitempty"`
	// StarvedS is the traffic's time the port lost to the host: idle
	// while a sender was held, or holding packets back.
	StarvedS float64 `json:"host_starved_s"`
	// UtilizationNet is the utilization over the rest of the traffic.
	UtilizationNet float64 `json:"utilization_net"`
}

// netUtilization is util over a span of spanS seconds, taken over the
// span less the starvedS seconds the host took: 0 if it took it all.
func netUtilization(util, spanS, starvedS float64) float64 {
	if spanS <= starvedS {
		return 0
	}
	return util * spanS / (spanS - starvedS)
}

// openMeter starts feeding the port's class 3 idle periods to a new
// meter; the traffic starts it (startMeter) and stops it (stopMeter).
func (d *demo) openMeter() error {
	m, err := hostlost.NewMeter(hostlost.MeterConfig{})
	if err != nil {
		return err
	}
	// Class 3 only: a class's idle periods are the link's only while the
	// others idle too, and the others (CNPs, UET's trimmed headers) are
	// sent while class 3 holds a queue.
	stop, err := lab.MeterPort(m, "bottleneck", d.port, qdisc.ClassRoCE)
	if err != nil {
		return err
	}
	d.meter, d.stopFeed = m, stop
	return nil
}

// held is a new held-time log for an agent or endpoint, nil without a
// meter.
func (d *demo) held() *hostlost.Log {
	if d.meter == nil {
		return nil
	}
	return d.meter.Held()
}

// startMeter starts the meter: the traffic begins. It returns the start
// on the meter's clock.
func (d *demo) startMeter() (time.Duration, error) {
	if d.meter == nil {
		return 0, nil
	}
	if err := d.meter.Start(); err != nil {
		return 0, err
	}
	return hostlost.Now(), nil
}

// stopMeter stops the port's feed, then the meter: the traffic ended.
// It returns the report (nil without a meter); the summary prints it.
func (d *demo) stopMeter() (*hostlost.Report, error) {
	if d.meter == nil {
		return nil, nil
	}
	err := d.stopFeed()
	r := d.meter.Stop()
	if err != nil {
		return nil, fmt.Errorf("host-lost meter: %w", err)
	}
	return &r, nil
}

// closeMeter stops what is left of the meter (an early return).
func (d *demo) closeMeter() error {
	if d.meter == nil {
		return nil
	}
	err := d.stopFeed()
	d.meter.Stop()
	d.meter = nil
	return err
}

// set fills h from the meter's report for traffic from start (the
// meter's clock) lasting spanS seconds, at raw utilization util.
func (h *HostLost) set(r *hostlost.Report, start time.Duration, spanS, util float64) {
	if r == nil {
		return
	}
	h.Report = r
	h.StarvedS = r.StarvedBetween(start, start+durationS(spanS)).Seconds()
	h.UtilizationNet = netUtilization(util, spanS, h.StarvedS)
}

// renderHostLost prints the host's part of a run under the utilization.
func renderHostLost(w io.Writer, h *HostLost) {
	if h.Report == nil {
		return
	}
	fmt.Fprintf(w, "  Host: the port lost %s of the traffic to the host: utilization %s net of it\n", shortDur(durationS(h.StarvedS)), pct(h.UtilizationNet))
	fmt.Fprintf(w, "        %s\n", h.Report)
}

// Scale is the fabric's time scale in the summaries and -json: the rates
// and times they show are the wire's, FabricRate the -rate they model.
type Scale struct {
	LabTimescale float64    `json:"lab_timescale"`
	FabricRate   units.Rate `json:"fabric_rate"`
}

func (d *demo) scale() Scale { return Scale{LabTimescale: d.o.timescale.K(), FabricRate: d.o.rate} }

// scaleIntro says how the fabric is slowed, if it is.
func (d *demo) scaleIntro() {
	if k := d.o.timescale; k.K() != 1 {
		d.printf("scale  the fabric at %s runs %sx slower (-timescale): the port at %s, every time %sx as long, bytes as they are;\n"+
			"       the rates and times below are the wire's\n", d.o.rate, k, d.w.rate, k)
	}
}
