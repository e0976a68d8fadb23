//go:build linux

package labfile

import (
	"errors"
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/qdisc"
)

// HostLost is what the host took from a run (host/hostlost): the time a
// port its flows cross sat idle on their class while one of their rocev2
// or uet senders (or a receiver's replies and credit) had data and window
// and was not run, or a relay's delay link held their packets past their
// release (tcp's too: the kernel's senders are not metered themselves),
// or the port held their queued packets back while its link was free
// (its HTB late), against the run's length; and each flow's share of it. A run over the budget is host-starved: its
// efficiency figures say more about the machine than the fabric.
type HostLost struct {
	hostlost.Report
	Flows []FlowHostLost `json:"flows,omitempty"`
	// Error says why nothing (or not every port) was metered.
	Error string `json:"error,omitempty"`
}

// FlowHostLost is one flow's share of the host-lost time.
type FlowHostLost struct {
	Name string `json:"name"`
	// StarvedS is the host-lost time inside the flow's data span, from
	// its data's start to its end (summed over a series' instances).
	StarvedS float64 `json:"starved_s"`
	// FCTRatioNet is a sized flow's FCT over its ideal extended by
	// StarvedS: the fabric's own ratio, the host's share taken out.
	FCTRatioNet float64 `json:"fct_ratio_net,omitempty"`
}

// meteredPorts are the ports the run's flows cross, each with the class
// their data takes there (the most flows', where they differ: a class's
// idle periods are the port's only while the others are idle too). Kernel
// TCP's senders have no held time here (the runqueue tracer would cost
// them a tenth of their throughput), so a port only they cross counts
// the time it held packets back and the time the relays on their paths
// held their packets late.
func (p *Plan) meteredPorts() map[int]qdisc.ClassID {
	votes := map[int]map[qdisc.ClassID]int{}
	for _, fp := range p.Flows {
		dscp := fp.Client.DSCP
		if fp.TCP != nil {
			dscp = uint8(fp.TCP.DSCP)
		}
		for _, j := range fp.Ports {
			if votes[j] == nil {
				votes[j] = map[qdisc.ClassID]int{}
			}
			votes[j][p.Ports[j].Config.DSCPClass[dscp]]++
		}
	}
	out := map[int]qdisc.ClassID{}
	for j, v := range votes {
		best := 0
		for c := range qdisc.ClassID(qdisc.NumClasses) {
			if v[c] > best {
				out[j], best = c, v[c]
			}
		}
	}
	return out
}

// newMeter makes the run's meter and the flows' held logs; the ports'
// feeds open at startMeter. A meter that cannot be made leaves the run
// unmetered (meterErr).
func (r *runner) newMeter() {
	m, err := hostlost.NewMeter(hostlost.MeterConfig{})
	if err != nil {
		r.meterErr = err
		return
	}
	r.meter = m
	r.flowHeld = make([]*hostlost.Log, len(r.p.Flows))
	// A relay device's delay link holds every flow's packets it is late
	// with: one log, compared at the soonest any of them reaches a port.
	via := map[[2]string]time.Duration{}
	for i, fp := range r.p.Flows {
		if fp.TCP == nil {
			r.flowHeld[i] = m.HeldAs("flow "+fp.Flow.Name, 0)
		}
		for _, h := range fp.RelayHolds {
			key := [2]string{r.p.Relays[h.Relay].Node, h.Dev}
			if v, ok := via[key]; !ok || h.Via < v {
				via[key] = h.Via
			}
		}
	}
	r.relayHeld = make(map[[2]string]*hostlost.Log, len(via))
	for key, v := range via {
		r.relayHeld[key] = m.HeldAs("relay "+key[0]+":"+key[1], v)
	}
}

// startMeter opens the metered ports' feeds and starts the meter, right
// before the flows start.
func (r *runner) startMeter() {
	if r.meter == nil {
		return
	}
	mp := r.p.meteredPorts()
	var errs []error
	for j := range r.p.Ports {
		class, ok := mp[j]
		if !ok {
			continue
		}
		stop, err := lab.MeterPort(r.meter, r.p.Ports[j].Name, r.ports[j], class)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.stopFeeds = append(r.stopFeeds, stop)
	}
	if err := r.meter.Start(); err != nil {
		errs = append(errs, err)
		r.meter = nil
	}
	r.meterErr = errors.Join(r.meterErr, errors.Join(errs...))
}

// stopPortFeeds ends the ports' feeds (once; teardown calls it again).
func (r *runner) stopPortFeeds() error {
	var errs []error
	for _, stop := range r.stopFeeds {
		errs = append(errs, stop())
	}
	return errors.Join(errs...)
}

// stopMeter stops the meter after the flows, its feeds first so that it
// has every idle period.
func (r *runner) stopMeter() *hostlost.Report {
	if r.meter == nil {
		return nil
	}
	if err := r.stopPortFeeds(); err != nil {
		r.meterErr = errors.Join(r.meterErr, err)
	}
	rep := r.meter.Stop()
	return &rep
}

// hostLost is the run's HostLost: the meter's report and each flow's
// share of it, from its instances' data spans (res.Flows has their FCTs
// and ideals).
func (r *runner) hostLost(rep *hostlost.Report, flows []*flowRun, res *Result) *HostLost {
	out := &HostLost{}
	if r.meterErr != nil {
		out.Error = r.meterErr.Error()
	}
	if rep == nil {
		if out.Error == "" {
			out.Error = "not metered"
		}
		return out
	}
	out.Report = *rep
	for i, fr := range flows {
		if fr.plan.TCP != nil {
			continue
		}
		fr.mu.Lock()
		fh := FlowHostLost{Name: fr.plan.Flow.Name}
		var starved time.Duration
		secs := res.Flows[i].instanceSeconds()
		for k, in := range fr.instances {
			d := in.end - in.dataStart // no report: its whole span
			if k < len(secs) && secs[k] > 0 {
				d = time.Duration(secs[k] * float64(time.Second))
			}
			st := rep.StarvedBetween(in.dataMono, in.dataMono+d)
			starved += st
			if s := res.Flows[i].Series; s != nil && k < len(s.Instances) {
				ir := &s.Instances[k]
				ir.StarvedS = st.Seconds()
				if ir.FCTS > 0 && ir.IdealFCTS > 0 {
					ir.FCTRatioNet = ir.FCTS / (ir.IdealFCTS + ir.StarvedS)
				}
			}
		}
		fr.mu.Unlock()
		fh.StarvedS = starved.Seconds()
		if f := &res.Flows[i]; f.FCTS > 0 && f.IdealFCTS > 0 {
			fh.FCTRatioNet = f.FCTS / (f.IdealFCTS + fh.StarvedS)
		}
		out.Flows = append(out.Flows, fh)
	}
	return out
}

// instanceSeconds are the data times of a flow's instances, in order.
func (f *FlowResult) instanceSeconds() []float64 {
	if f.Series != nil {
		out := make([]float64, len(f.Series.Instances))
		for k, in := range f.Series.Instances {
			out[k] = in.Seconds
		}
		return out
	}
	if f.Seconds > 0 {
		return []float64{f.Seconds}
	}
	return nil
}

// line is the summary's line: the meter's report, or why there
// is none.
func (h *HostLost) line() string {
	if h == nil {
		return ""
	}
	if h.Wall == 0 {
		return fmt.Sprintf("host-lost: not measured (%s)", h.Error)
	}
	s := h.Report.String()
	if h.Error != "" {
		s += "; " + h.Error
	}
	return s
}
