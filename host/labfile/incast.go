//go:build linux

package labfile

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc"
)

// An incast is a group of at least two sized flows, one instance each,
// that share a port: the group's tail and mean FCT over the group's ideal
// (all its bytes at the payload capacity of that port, as netns-tests'
// runUETIncast), the port's queue while the incast ran, in BDPs, and what
// it trimmed and dropped.

// incastSample is how often the runner reads an incast port's backlog
// (times the timescale): every read is BPF syscalls, and a softirq that
// interrupts one skips the port's departure hook (netns-tests'
// uetQueueSample: at 1 ms up to 8.9 % of an incast's departures were
// late).
const incastSample = 3 * time.Millisecond

// incastPlan is a group that makes an incast.
type incastPlan struct {
	group string
	flows []int // Plan.Flows
	port  int   // Plan.Ports: the one they share, the slowest
	class qdisc.ClassID
	// bdpBytes is the port's rate × the flows' base RTT (NSCC's for uet,
	// else the path's), 0 when that is 0.
	bdpBytes float64
}

// incasts are the plan's incast groups, in the order groups first appear.
func (p *Plan) incasts() []incastPlan {
	var order []string
	members := map[string][]int{}
	for i, fp := range p.Flows {
		g := fp.Flow.Group
		if _, ok := members[g]; !ok {
			order = append(order, g)
		}
		members[g] = append(members[g], i)
	}
	var out []incastPlan
	for _, g := range order {
		idx := members[g]
		if len(idx) < 2 {
			continue
		}
		var shared []int
		ok := true
		for k, i := range idx {
			fp := &p.Flows[i]
			if fp.Flow.Size == 0 || fp.Flow.SizeMax != 0 || fp.Flow.Count != 1 {
				ok = false
				break
			}
			if k == 0 {
				shared = slices.Clone(fp.Ports)
			} else {
				shared = slices.DeleteFunc(shared, func(j int) bool { return !slices.Contains(fp.Ports, j) })
			}
		}
		if !ok || len(shared) == 0 {
			continue
		}
		// The slowest shared port; the last on the path of equals.
		port := shared[0]
		for _, j := range shared[1:] {
			if p.Ports[j].Config.Rate <= p.Ports[port].Config.Rate {
				port = j
			}
		}
		ip := incastPlan{group: g, flows: idx, port: port}
		first := &p.Flows[idx[0]]
		ip.class = p.Ports[port].Config.DSCPClass[first.dscp()]
		rtt := first.BaseRTT
		if first.Flow.Transport == TransportUET {
			rtt = first.Client.Timescale.Time(first.Client.BaseRTT)
		}
		ip.bdpBytes = float64(p.Ports[port].Config.Rate) / 8 * rtt.Seconds()
		out = append(out, ip)
	}
	return out
}

// dscp is the DSCP of the flow's data.
func (fp *FlowPlan) dscp() uint8 {
	if fp.TCP != nil {
		return uint8(fp.TCP.DSCP)
	}
	return fp.Client.DSCP
}

// payloadShare is the payload's share of the port's bytes in the flow's
// full packets, as the port counts them (Ethernet header, no FCS): a uet
// packet of its MTU (IPv4, UDP, PDS request, SES standard header:
// netns-tests' uetPayloadShare), rocev2 WRITEs of its message size at its
// path MTU (IPv4, UDP, BTH, ICRC, a RETH per message and pad), a tcp
// segment at the path MTU with timestamps (IPv4, TCP, 12 B of options).
func (fp *FlowPlan) payloadShare() float64 {
	const eth = 14
	switch {
	case fp.TCP != nil:
		return float64(fp.PathMTU-20-20-12) / float64(fp.PathMTU+eth)
	case fp.Flow.Transport == TransportUET:
		mtu := fp.Client.MTU
		return float64(mtu-20-8-uet.RequestLen-uet.SESStdLen) / float64(mtu+eth)
	}
	msg, mtu := fp.Client.MessageBytes, fp.Client.MTU
	pkts := (msg + mtu - 1) / mtu
	pad := -(msg % mtu) & 3
	wire := msg + pkts*(eth+20+8+roce.BTHLen+roce.ICRCLen) + roce.RETHLen + pad
	return float64(msg) / float64(wire)
}

// queueSample is a port's backlog at a time from the run's start.
type queueSample struct {
	at    time.Duration
	bytes uint64
}

// sampleQueues reads the backlog of each port the flows cross, of the
// class they take there (an incast's own class at its port), every
// incastSample × timescale until ctx ends; samples[j] is Plan.Ports j's.
func (r *runner) sampleQueues(ctx context.Context, t0 time.Time, ips []incastPlan, flows []*flowRun) queueSamples {
	out := queueSamples{ports: map[int][]queueSample{}}
	class := r.p.meteredPorts()
	for _, ip := range ips {
		class[ip.port] = ip.class
	}
	traced := dcqcnTraced(flows)
	if len(traced) > 0 {
		out.dcqcn = &DCQCNTrace{PeriodS: r.p.Timescale.Time(incastSample).Seconds()}
		for _, fr := range traced {
			out.dcqcn.Flows = append(out.dcqcn.Flows, fr.plan.Flow.Name)
		}
	}
	if len(class) == 0 && len(traced) == 0 {
		return out
	}
	tick := time.NewTicker(r.p.Timescale.Time(incastSample))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		at := time.Since(t0)
		for j, c := range class {
			b, _, err := r.ports[j].Backlog(c)
			if err != nil {
				continue
			}
			out.ports[j] = append(out.ports[j], queueSample{at: at, bytes: b})
		}
		if len(traced) > 0 {
			out.dcqcn.Samples = append(out.dcqcn.Samples, traceDCQCN(at, traced))
		}
		// e2eReaction needs the first cut only: after it, no QP is read.
		if n := len(out.cuts); n == 0 || out.cuts[n-1].bytes == 0 {
			if cuts, ok := r.rateCuts(); ok {
				out.cuts = append(out.cuts, queueSample{at: at, bytes: cuts})
			}
		}
	}
}

// queueSamples are the queue sampler's readings: each metered port's
// backlog, and the RoCEv2 senders' DCQCN rate cuts so far (in bytes'
// place), every 3 ms × timescale.
type queueSamples struct {
	ports map[int][]queueSample
	cuts  []queueSample
	dcqcn *DCQCNTrace
}

// maxTracedFlows bounds the DCQCN trace: beyond it the run has no trace
// (dcqcn.csv's width, and the QPs the sampler reads every 3 ms).
const maxTracedFlows = 16

// DCQCNTrace is the rocev2 flows' DCQCN state every 3 ms × timescale
// (the queue sampler's period; PeriodS as run): each flow's Rc (summed
// over its QPs) and α (their mean), as the demo plots them.
type DCQCNTrace struct {
	PeriodS float64       `json:"period_s"`
	Flows   []string      `json:"flows"`
	Samples []DCQCNSample `json:"samples"`
}

// DCQCNSample is one reading: RcBps[i] and Alpha[i] are Flows[i]'s, 0
// while it has no QP under DCQCN (waiting, between instances, done).
type DCQCNSample struct {
	T     float64   `json:"t"`
	RcBps []uint64  `json:"rc_bps"`
	Alpha []float64 `json:"alpha"`
}

// writeCSV writes the trace as CSV: t_s, then each flow's rc_bps and
// alpha.
func (tr *DCQCNTrace) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	head := []string{"t_s"}
	for _, n := range tr.Flows {
		head = append(head, n+"_rc_bps", n+"_alpha")
	}
	_ = w.Write(head)
	row := make([]string, len(head))
	for _, s := range tr.Samples {
		row[0] = strconv.FormatFloat(s.T, 'f', 4, 64)
		for i := range tr.Flows {
			row[1+2*i] = strconv.FormatUint(s.RcBps[i], 10)
			row[2+2*i] = strconv.FormatFloat(s.Alpha[i], 'f', 4, 64)
		}
		_ = w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// dcqcnTraced are the flows the trace follows: the rocev2 flows under
// DCQCN, none when there are more than maxTracedFlows.
func dcqcnTraced(flows []*flowRun) []*flowRun {
	var out []*flowRun
	for _, fr := range flows {
		if fl := fr.plan.Flow; fl.Transport == TransportRoCEv2 && fl.CC == CCDCQCN {
			out = append(out, fr)
		}
	}
	if len(out) > maxTracedFlows {
		return nil
	}
	return out
}

// traceDCQCN reads each traced flow's QPs now.
func traceDCQCN(at time.Duration, traced []*flowRun) DCQCNSample {
	s := DCQCNSample{T: at.Seconds(), RcBps: make([]uint64, len(traced)), Alpha: make([]float64, len(traced))}
	for i, fr := range traced {
		fr.mu.Lock()
		a := fr.agent
		fr.mu.Unlock()
		s.RcBps[i], s.Alpha[i] = dcqcnNow(a)
	}
	return s
}

// dcqcnNow is an agent's DCQCN state now: Rc summed over its QPs under
// DCQCN, α their mean; zeros without an agent or such a QP.
func dcqcnNow(a *agent.Agent) (rcBps uint64, alpha float64) {
	if a == nil {
		return 0, 0
	}
	n := 0
	for _, qp := range a.QPs() {
		if cc, ok := qp.CC(); ok {
			rcBps += uint64(cc.Rc)
			alpha += cc.Alpha
			n++
		}
	}
	if n > 0 {
		alpha /= float64(n)
	}
	return rcBps, alpha
}

// rateCuts sums the DCQCN rate cuts of the RoCEv2 flows' QPs so far;
// false without a RoCEv2 flow under DCQCN.
func (r *runner) rateCuts() (uint64, bool) {
	r.rocev2.Lock()
	agents := slices.Clone(r.rocev2.agents)
	r.rocev2.Unlock()
	var cuts uint64
	ok := false
	for _, a := range agents {
		for _, qp := range a.QPs() {
			if cc, has := qp.CC(); has {
				cuts += cc.Stats.RateCuts
				ok = true
			}
		}
	}
	return cuts, ok
}

// e2eReaction is the end-to-end reaction of the RoCEv2 senders (seed
// 001's figure against the PE's): from the first sample with a queue
// past its CE threshold (min_th, step's K, or two-threshold's T2) at a
// port the flows cross, to the first sample after which a sender has
// cut its rate; resolved to the sampling period, as measured. 0: no
// onset, no cut, or no such port.
func (r *runner) e2eReaction(q queueSamples) float64 {
	th := map[int]uint64{}
	for j, c := range r.p.meteredPorts() {
		if t := ceThreshold(&r.p.Ports[j].Config.Classes[c]); t > 0 {
			th[j] = t
		}
	}
	return onsetToCut(q, th)
}

// onsetToCut is e2eReaction's figure from the samples and each port's CE
// threshold, in ms.
func onsetToCut(q queueSamples, threshold map[int]uint64) float64 {
	var onset time.Duration = -1
	for j, ss := range q.ports {
		th, ok := threshold[j]
		if !ok {
			continue
		}
		for _, s := range ss {
			if s.bytes > th {
				if onset < 0 || s.at < onset {
					onset = s.at
				}
				break
			}
		}
	}
	if onset < 0 {
		return 0
	}
	for _, s := range q.cuts {
		if s.bytes > 0 {
			// A cut sampled before the onset (the crossing fell between
			// two samples) counts as immediate.
			return float64(max(s.at-onset, 0)) / 1e6
		}
	}
	return 0
}

// ceThreshold is the backlog from which a class marks CE: WRED's
// min_th, step's K, two-threshold's T2; 0 for the AQMs that mark on
// sojourn, or none.
func ceThreshold(cc *qdisc.ClassConfig) uint64 {
	switch cc.ECN {
	case qdisc.ECNWRED, qdisc.ECNStep:
		return uint64(cc.MinThBytes)
	case qdisc.ECNTwoThreshold:
		return uint64(cc.TwoThreshold.T2Bytes)
	}
	return 0
}

// portQueues sets each port's queue percentiles from its samples over
// Utilization's span: the timed flows' (the load the file keeps up), or
// the whole run.
func (r *runner) portQueues(res *Result, queues map[int][]queueSample) {
	span := time.Duration(res.Seconds * float64(time.Second))
	if r.busy.bytes != nil {
		span = r.busy.at
	}
	for j, ss := range queues {
		if j >= len(res.Ports) {
			continue
		}
		res.Ports[j].queue = ss
		var q []float64
		for _, s := range ss {
			if s.at <= span {
				q = append(q, float64(s.bytes))
			}
		}
		if len(q) == 0 {
			continue
		}
		d := stats.Summarize(q)
		p := &res.Ports[j]
		p.QueueSamples, p.QueueMeanBytes, p.QueueP50Bytes, p.QueueP99Bytes = d.N, d.Mean, d.P50, d.P99
	}
}

// IncastResult is an incast group's summary.
type IncastResult struct {
	Group string `json:"group"`
	Flows int    `json:"flows"`
	// Port is the port the flows share (the slowest), Class the class
	// their data takes there.
	Port  string `json:"port"`
	Class int    `json:"class"`
	Bytes uint64 `json:"bytes"`
	// IdealS is every byte of the group at the port's payload capacity
	// (its rate × the payload's share of its packets), no round trip:
	// netns-tests' and htsim's ideal.
	IdealS float64 `json:"ideal_s"`
	// TailFCTS is from the group's first data start to its last flow's
	// end, MeanFCTS the mean of its flows' ends from the same start; the
	// ratios are over IdealS.
	TailFCTS  float64 `json:"tail_fct_s"`
	MeanFCTS  float64 `json:"mean_fct_s"`
	TailRatio float64 `json:"tail_ratio"`
	MeanRatio float64 `json:"mean_ratio"`
	// StarvedS is the host-lost time inside the tail; the net ratios are
	// over the ideal extended by the host-lost time inside each span (the
	// tail's, and on average each flow's).
	StarvedS     float64 `json:"starved_s"`
	TailRatioNet float64 `json:"tail_ratio_net,omitempty"`
	MeanRatioNet float64 `json:"mean_ratio_net,omitempty"`
	// BDPBytes is the port's rate × the flows' base RTT; the queue is the
	// class's backlog sampled every incastSample × timescale while the
	// incast ran, nearest-rank percentiles in bytes and BDPs.
	BDPBytes      float64 `json:"bdp_bytes,omitempty"`
	QueueSamples  int     `json:"queue_samples"`
	QueueP50Bytes float64 `json:"queue_p50_bytes"`
	QueueP99Bytes float64 `json:"queue_p99_bytes"`
	QueueMaxBytes float64 `json:"queue_max_bytes"`
	QueueP50BDPs  float64 `json:"queue_p50_bdps,omitempty"`
	QueueP99BDPs  float64 `json:"queue_p99_bdps,omitempty"`
	// Trimmed and Dropped are the port's class's over the run; the
	// flows' retransmissions beside them.
	Trimmed     uint64 `json:"trimmed_packets"`
	Dropped     uint64 `json:"dropped_packets"`
	Retransmits uint64 `json:"retransmits"`
	// Error says why there are no FCTs (a flow failed).
	Error string `json:"error,omitempty"`
}

// incastFlow is one flow of an incast as incastSummary takes it.
type incastFlow struct {
	name      string
	size      uint64
	share     float64       // payloadShare
	dataStart time.Duration // from the run's start
	dataMono  time.Duration // the same on CLOCK_MONOTONIC
	fct       time.Duration // 0: it did not complete
}

// incastSummary is an incast's arithmetic: rateBps is the port's (as it
// ran), starved the host-lost time between two CLOCK_MONOTONIC times (nil:
// none measured), queue the port's samples over the run.
func incastSummary(out *IncastResult, flows []incastFlow, rateBps float64, bdpBytes float64, starved func(from, to time.Duration) time.Duration, queue []queueSample) {
	out.Flows = len(flows)
	out.BDPBytes = bdpBytes
	var ideal float64
	start, startMono := time.Duration(math.MaxInt64), time.Duration(0)
	for _, f := range flows {
		out.Bytes += f.size
		ideal += float64(f.size) * 8 / (f.share * rateBps)
		if f.fct == 0 && out.Error == "" {
			out.Error = fmt.Sprintf("flow %s did not complete", f.name)
		}
		if f.dataStart < start {
			start, startMono = f.dataStart, f.dataMono
		}
	}
	out.IdealS = ideal
	if out.Error != "" || len(flows) == 0 {
		return
	}
	var tail, sum time.Duration
	var sumStarved time.Duration
	for _, f := range flows {
		end := f.dataStart + f.fct - start
		tail = max(tail, end)
		sum += end
		if starved != nil {
			sumStarved += starved(startMono, startMono+end)
		}
	}
	mean := sum / time.Duration(len(flows))
	out.TailFCTS, out.MeanFCTS = tail.Seconds(), mean.Seconds()
	out.TailRatio, out.MeanRatio = out.TailFCTS/ideal, out.MeanFCTS/ideal
	if starved != nil {
		st := starved(startMono, startMono+tail)
		out.StarvedS = st.Seconds()
		out.TailRatioNet = out.TailFCTS / (ideal + out.StarvedS)
		out.MeanRatioNet = out.MeanFCTS / (ideal + (sumStarved / time.Duration(len(flows))).Seconds())
	}
	var q []float64
	for _, s := range queue {
		if s.at >= start && s.at <= start+tail {
			q = append(q, float64(s.bytes))
		}
	}
	slices.Sort(q)
	out.QueueSamples = len(q)
	if len(q) > 0 {
		out.QueueP50Bytes, out.QueueP99Bytes, out.QueueMaxBytes = stats.NearestRank(q, 0.5), stats.NearestRank(q, 0.99), q[len(q)-1]
		if bdpBytes > 0 {
			out.QueueP50BDPs, out.QueueP99BDPs = out.QueueP50Bytes/bdpBytes, out.QueueP99Bytes/bdpBytes
		}
	}
}

// incastResults sums up the run's incasts from its flows, the ports'
// counters (res.Ports) and queue samples, and the host-lost report.
func (r *runner) incastResults(ips []incastPlan, flows []*flowRun, res *Result, host *hostlost.Report, queues map[int][]queueSample) []IncastResult {
	var out []IncastResult
	for _, ip := range ips {
		po := &r.p.Ports[ip.port]
		ir := IncastResult{Group: ip.group, Port: po.Name, Class: int(ip.class)}
		var fs []incastFlow
		for _, i := range ip.flows {
			fr, f := flows[i], &res.Flows[i]
			inf := incastFlow{name: f.Name, size: uint64(fr.plan.Flow.Size), share: fr.plan.payloadShare()}
			fr.mu.Lock()
			if len(fr.instances) > 0 {
				in := fr.instances[0]
				inf.dataStart, inf.dataMono = in.dataStart, in.dataMono
			}
			fr.mu.Unlock()
			if f.Error == "" && f.FCTS > 0 {
				inf.fct = time.Duration(f.FCTS * float64(time.Second))
			}
			ir.Retransmits += f.Retransmits
			fs = append(fs, inf)
		}
		var starved func(from, to time.Duration) time.Duration
		if host != nil {
			starved = host.StarvedBetween
		}
		incastSummary(&ir, fs, float64(po.Config.Rate), ip.bdpBytes, starved, queues[ip.port])
		if pr := &res.Ports[ip.port]; pr.Stats != nil {
			c := &pr.Stats.Classes[ip.class]
			ir.Trimmed, ir.Dropped = c.TrimmedPackets, c.DroppedPackets()
		}
		out = append(out, ir)
	}
	return out
}

// writeIncasts prints the run's incasts: a line of what each is, then its
// row, net of host-lost time, and htsim's for the same setting when it ran
// (h: the first incast's, the one htsim can express).
func writeIncasts(w io.Writer, incasts []IncastResult, h *HtsimRun) {
	row := func(what string, tail, mean float64, p50, p99 string, trims string) {
		fmt.Fprintf(w, "  %-28s %10.3f %10.3f %11s %11s %8s\n", what, tail, mean, p50, p99, trims)
	}
	bdp := func(v float64, ok bool) string {
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%.2f BDP", v)
	}
	for k, ic := range incasts {
		fmt.Fprintf(w, "incast %s: %d flows into %s (class %d), ideal %.1f ms (%s at its payload capacity)", ic.Group, ic.Flows, ic.Port, ic.Class, 1e3*ic.IdealS, kb(ic.Bytes))
		if ic.Error != "" {
			fmt.Fprintf(w, ": %s\n", ic.Error)
			continue
		}
		fmt.Fprintf(w, "; queue max %s, %d samples, BDP %s; %d dropped, %d retransmits\n", kb(uint64(ic.QueueMaxBytes)), ic.QueueSamples, kb(uint64(ic.BDPBytes)), ic.Dropped, ic.Retransmits)
		fmt.Fprintf(w, "  %-28s %10s %10s %11s %11s %8s\n", "", "tail/ideal", "mean/ideal", "queue p50", "queue p99", "trims")
		row("lab", ic.TailRatio, ic.MeanRatio, bdp(ic.QueueP50BDPs, ic.BDPBytes > 0), bdp(ic.QueueP99BDPs, ic.BDPBytes > 0), fmt.Sprint(ic.Trimmed))
		if ic.TailRatioNet > 0 {
			row(fmt.Sprintf("lab, net of %.1f ms host-lost", 1e3*ic.StarvedS), ic.TailRatioNet, ic.MeanRatioNet, "", "", "")
		}
		if k > 0 || h == nil {
			continue
		}
		if r := h.Result; r != nil {
			s := &r.Plan.Scenario
			row(fmt.Sprintf("htsim (%s, seed %d)", s.Mapping, s.Seed), r.TailOverIdeal, r.MeanOverIdeal, bdp(r.Queue.P50BDPs, true), bdp(r.Queue.P99BDPs, true), fmt.Sprint(r.Counters.NACKs))
		} else {
			fmt.Fprintf(w, "  %s\n", h.Error)
		}
	}
	if len(incasts) == 0 && h != nil {
		fmt.Fprintln(w, h.line())
	}
}
