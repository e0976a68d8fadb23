package main

// The pure part of the RoCE demo: the samples, the summary's arithmetic and
// its text. Nothing here needs root or a lab; report_test.go and
// roce_report_test.go test it directly.

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// FlowInfo names one flow: a sender's QP writing to its QP at the receiver.
type FlowInfo struct {
	Sender      string  `json:"sender"`
	QP          int     `json:"qp"` // 1-based, within the sender
	Src         string  `json:"src"`
	Dst         string  `json:"dst"`
	SenderQPN   uint32  `json:"sender_qpn"`
	ReceiverQPN uint32  `json:"receiver_qpn"`
	StartS      float64 `json:"start_s"` // join time, seconds after the first flow
}

// Label is the flow's name in tables: the sender, and the QP if it has
// several ("s2", "s2.1").
func (f *FlowInfo) Label() string {
	return f.Sender + qpSuffix(f.QP)
}

func qpSuffix(qp int) string {
	if qp <= 1 {
		return ""
	}
	return fmt.Sprintf(".%d", qp)
}

// RoCEFlow is one flow in the summary.
type RoCEFlow struct {
	FlowInfo
	// The QPs' NIC counters at the end: the sender's requester (rp_*,
	// retransmissions) and the receiver's responder (np_*, received bytes).
	Sender   agent.Counters `json:"sender_counters"`
	Receiver agent.Counters `json:"receiver_counters"`
	RateCuts uint64         `json:"rate_cuts"`
	// GoodputBps is the payload placed at the receiver over the flow's
	// active time.
	ActiveS    float64 `json:"active_s"`
	GoodputBps float64 `json:"goodput_bps"`
	// While all flows competed: goodput, share of the flows' total, and
	// the mean of the sender's Rc samples.
	WindowBps float64 `json:"all_active_goodput_bps,omitempty"`
	Share     float64 `json:"all_active_share,omitempty"`
	RcMeanBps float64 `json:"all_active_rc_mean_bps,omitempty"`
	AlphaMean float64 `json:"all_active_alpha_mean,omitempty"`
	Error     string  `json:"error,omitempty"`
}

// Series are the fast samples (every -sample): the queue and each flow's
// DCQCN state, for the plot. Arrays are parallel to T.
type Series struct {
	PeriodS      float64      `json:"period_s"`
	T            []float64    `json:"t_s"` // seconds since the first flow started
	BacklogBytes []uint64     `json:"backlog_bytes"`
	Flows        []FlowSeries `json:"flows"`
}

// FlowSeries is one flow's samples; Rc, Rt and α are 0 before it joins.
type FlowSeries struct {
	RcBps     []float64 `json:"rc_bps"`
	RtBps     []float64 `json:"rt_bps"`
	Alpha     []float64 `json:"alpha"`
	RecvBytes []uint64  `json:"received_bytes"` // cumulative, at the receiver
}

// FlowInterval is one flow in one line of the live view.
type FlowInterval struct {
	Active     bool    `json:"active"`
	GoodputBps float64 `json:"goodput_bps"`
	RcBps      float64 `json:"rc_bps"` // at the end of the interval
	Alpha      float64 `json:"alpha"`
	CNPs       uint64  `json:"rp_cnp_handled"` // in the interval
	// Retransmits are the packets the sender sent again in the interval
	// (go-back-N after a NAK or an ACK timeout).
	Retransmits uint64 `json:"retransmitted_packets"`
}

// RoCESample is one second of the live view: the port's class 3 and every
// flow.
type RoCESample struct {
	Sample
	CNPsSent uint64         `json:"np_cnp_sent"` // by the receiver, in the interval
	PerFlow  []FlowInterval `json:"per_flow"`
}

// SocketCounters are the UDP sockets' own drops, outside the port.
type SocketCounters struct {
	RecvBufferDrops uint64 `json:"recv_buffer_drops"`
	SendErrors      uint64 `json:"send_errors"`
}

// LoopTotals are the DCQCN loop's counters summed over the flows.
type LoopTotals struct {
	CEMarked           uint64 `json:"port_ce_marked"`   // CP: class 3 marks
	CEDequeued         uint64 `json:"port_ce_dequeued"` // CE packets that left the port
	NPECNMarked        uint64 `json:"np_ecn_marked_roce_packets"`
	NPCNPSent          uint64 `json:"np_cnp_sent"`
	RPCNPHandled       uint64 `json:"rp_cnp_handled"`
	RPCNPIgnored       uint64 `json:"rp_cnp_ignored"`
	RateCuts           uint64 `json:"rate_cuts"`
	Retransmits        uint64 `json:"retransmitted_packets"`
	OutOfSequence      uint64 `json:"out_of_sequence"`
	PacketSeqErr       uint64 `json:"packet_seq_err"`
	LocalAckTimeoutErr uint64 `json:"local_ack_timeout_err"`
	DuplicateRequest   uint64 `json:"duplicate_request"`
}

// PPFCTotals are what the senders' agents did with the port's PPFC
// notifications (the port's own counters are in the class stats).
type PPFCTotals struct {
	ReceivedStop   uint64 `json:"ppfc_received_stop"`
	ReceivedResume uint64 `json:"ppfc_received_resume"`
	ReceivedHold   uint64 `json:"ppfc_received_hold"`
	ReceivedAlarm  uint64 `json:"ppfc_received_alarm"`
	Ignored        uint64 `json:"ppfc_ignored"` // unknown source or destination
	Pauses         uint64 `json:"ppfc_pauses"`  // QPs paused by a stop, summed
	Holds          uint64 `json:"ppfc_holds"`   // QPs paused again by a hold, summed
	AlarmsObeyed   uint64 `json:"ppfc_alarms_obeyed"`
	PausedNs       uint64 `json:"ppfc_paused_ns"`
}

// QueueStats summarise the fast backlog samples taken while all flows
// competed, against the WRED thresholds.
type QueueStats struct {
	Samples   int     `json:"samples"`
	MeanBytes float64 `json:"mean_bytes"`
	P50Bytes  uint64  `json:"p50_bytes"`
	P99Bytes  uint64  `json:"p99_bytes"`
	MaxBytes  uint64  `json:"max_bytes"`
	// Fractions of the samples below min_th, from min_th to max_th, and
	// above max_th.
	Below float64 `json:"below_min_th"`
	In    float64 `json:"between"`
	Above float64 `json:"above_max_th"`
}

// RoCEReport is the RoCE run's result, also written by -json.
type RoCEReport struct {
	Senders      int               `json:"senders"`
	QPsPerSender int               `json:"qps_per_sender"`
	Rate         units.Rate        `json:"rate"`
	DurationS    float64           `json:"duration_s"`
	StaggerS     float64           `json:"stagger_s"`
	MTU          int               `json:"mtu"`
	MessageBytes int               `json:"message_bytes"`
	Profile      string            `json:"dcqcn_profile"`
	Stretch      float64           `json:"timescale"`           // -stretch: the profile's timers were stretched by this
	Overrides    []string          `json:"dcqcn_set,omitempty"` // -dcqcn, in order
	Knobs        map[string]string `json:"dcqcn"`               // every knob's effective value, mlx5 units
	Kernel       string            `json:"kernel"`
	Port         qdisc.Info        `json:"port"`
	Interrupted  bool              `json:"interrupted,omitempty"`
	Scale

	Flows       []RoCEFlow `json:"flows"`
	TrafficS    float64    `json:"traffic_s"`    // first start to the last ACK
	AllJoinedS  float64    `json:"all_joined_s"` // when the last flow joined
	GoodputBps  float64    `json:"goodput_bps"`  // all flows' payload / traffic time
	Utilization float64    `json:"utilization"`  // class 3 dequeued L2 bits / (rate · traffic time)
	// The host's part over the traffic (hostlost.go).
	HostLost
	// While all flows competed (AllJoinedS to the end).
	UtilizationWindow float64 `json:"all_active_utilization"`
	// The host's part of that window and the utilization net of it.
	StarvedWindowS       float64    `json:"all_active_host_starved_s"`
	UtilizationWindowNet float64    `json:"all_active_utilization_net"`
	JainWindow           float64    `json:"all_active_jain"`
	Jain                 float64    `json:"jain"` // over whole-run goodputs
	Queue                QueueStats `json:"all_active_queue"`

	Loop          LoopTotals           `json:"loop"`
	PPFC          PPFCTotals           `json:"ppfc"`
	RecvAgent     agent.AgentCounters  `json:"receiver_agent"`
	RecvSocket    SocketCounters       `json:"receiver_socket"`
	SendSocket    SocketCounters       `json:"sender_sockets"`
	ClassConfig   qdisc.ClassConfig    `json:"class3_config"`
	Class         qdisc.ClassStats     `json:"class3"` // during the run
	MarkFraction  float64              `json:"mark_fraction"`
	SojournP50    time.Duration        `json:"sojourn_p50_ns"`
	SojournP99    time.Duration        `json:"sojourn_p99_ns"`
	Curve         []CurveRow           `json:"curve"`
	Invariant     string               `json:"invariant_error,omitempty"`
	Qdisc         *qdisc.QdiscCounters `json:"kernel_qdisc,omitempty"`
	OtherPackets  uint64               `json:"other_class_packets"`
	Unaccounted   uint64               `json:"unaccounted_packets"`
	FlowsWithErrs int                  `json:"flows_failed"`

	Live   []RoCESample `json:"live"`
	Series Series       `json:"series"`
	// Zoom is zoomLen of the steady state sampled every zoomPeriod.
	Zoom Series `json:"zoom"`
}

// windowRate is flow i's goodput between the first sample at or after from
// and the last sample, from the cumulative received bytes.
func (s *Series) windowRate(i int, from float64) (float64, bool) {
	a := s.indexFrom(from)
	b := len(s.T) - 1
	if a < 0 || b <= a || i >= len(s.Flows) || s.T[b]-s.T[a] <= 0 {
		return 0, false
	}
	rb := s.Flows[i].RecvBytes
	return float64(sub(rb[b], rb[a])) * 8 / (s.T[b] - s.T[a]), true
}

// indexFrom is the first sample at or after t, -1 if none.
func (s *Series) indexFrom(t float64) int { return indexFrom(s.T, t) }

// indexFrom is the first of the times ts at or after t, -1 if none.
func indexFrom(ts []float64, t float64) int {
	for i, v := range ts {
		if v >= t {
			return i
		}
	}
	return -1
}

// Goodput is flow i's goodput over a sliding window of about window
// seconds ending at each sample, as (t, bits/s) from its join on: the
// received-bytes counter moves by whole packets, so a single period is
// noisy.
func (s *Series) Goodput(i int, startS, window float64) (ts, bps []float64) {
	return slidingRate(s.T, s.Flows[i].RecvBytes, s.PeriodS, startS, window)
}

// slidingRate is the rate of the cumulative byte counter bytes, sampled
// at times every period seconds, over a sliding window of about window
// seconds ending at each sample from startS on, as (t, bits/s).
func slidingRate(times []float64, bytes []uint64, period, startS, window float64) (ts, bps []float64) {
	k := max(1, int(math.Round(window/max(period, 1e-9))))
	for j := range times {
		if times[j] < startS {
			continue
		}
		a := max(j-k, 0)
		for a < j && times[a] < startS { // the flow joins at a sample
			a++
		}
		if a == j || times[j]-times[a] <= 0 {
			continue
		}
		ts = append(ts, times[j])
		bps = append(bps, float64(sub(bytes[j], bytes[a]))*8/(times[j]-times[a]))
	}
	return ts, bps
}

// queueStats summarises the backlog samples at or after from.
func queueStats(s *Series, from float64, cc *qdisc.ClassConfig) QueueStats {
	return backlogStats(s.T, s.BacklogBytes, from, cc)
}

// backlogStats summarises the backlog samples taken at times at or after
// from, against the class's WRED thresholds.
func backlogStats(times []float64, backlog []uint64, from float64, cc *qdisc.ClassConfig) QueueStats {
	a := indexFrom(times, from)
	if a < 0 {
		return QueueStats{}
	}
	qs := slices.Clone(backlog[a:])
	var q QueueStats
	q.Samples = len(qs)
	if q.Samples == 0 {
		return q
	}
	var sum float64
	var below, above int
	for _, v := range qs {
		sum += float64(v)
		switch {
		case v < uint64(cc.MinThBytes):
			below++
		case v > uint64(cc.MaxThBytes):
			above++
		}
	}
	slices.Sort(qs)
	rank := func(p float64) uint64 {
		i := int(math.Ceil(p*float64(len(qs)))) - 1
		return qs[min(max(i, 0), len(qs)-1)]
	}
	n := float64(len(qs))
	q.MeanBytes = sum / n
	q.P50Bytes, q.P99Bytes, q.MaxBytes = rank(0.5), rank(0.99), qs[len(qs)-1]
	q.Below, q.Above = float64(below)/n, float64(above)/n
	q.In = 1 - q.Below - q.Above
	return q
}

// finish fills the derived fields. st is the port at rest after the run,
// base before it, joined class 3 when the last flow joined (nil if unknown).
func (r *RoCEReport) finish(st *qdisc.Stats, base, joined *qdisc.ClassStats) {
	end := st.Classes[qdisc.ClassRoCE]
	c := classDelta(base, &end)
	r.Class = c
	var goodputs, window []float64
	windowOK := len(r.Flows) > 1
	for i := range r.Flows {
		f := &r.Flows[i]
		l := &r.Loop
		l.NPECNMarked += f.Receiver.NPECNMarkedRoCEPackets
		l.NPCNPSent += f.Receiver.NPCNPSent
		l.RPCNPHandled += f.Sender.RPCNPHandled
		l.RPCNPIgnored += f.Sender.RPCNPIgnored
		l.RateCuts += f.RateCuts
		l.Retransmits += f.Sender.RetransmitPackets
		l.OutOfSequence += f.Receiver.OutOfSequence
		l.PacketSeqErr += f.Sender.PacketSeqErr
		l.LocalAckTimeoutErr += f.Sender.LocalAckTimeoutErr
		l.DuplicateRequest += f.Receiver.DuplicateRequest
		r.PPFC.Pauses += f.Sender.PPFCPauses
		r.PPFC.Holds += f.Sender.PPFCHolds
		r.PPFC.AlarmsObeyed += f.Sender.PPFCAlarmsObeyed
		r.PPFC.PausedNs += f.Sender.PPFCPausedNs
		if f.Error != "" {
			r.FlowsWithErrs++
		}
		f.ActiveS = max(r.TrafficS-f.StartS, 0)
		if f.ActiveS > 0 {
			f.GoodputBps = float64(f.Receiver.RecvBytes) * 8 / f.ActiveS
		}
		if r.TrafficS > 0 {
			r.GoodputBps += float64(f.Receiver.RecvBytes) * 8 / r.TrafficS
		}
		goodputs = append(goodputs, f.GoodputBps)
		if w, ok := r.Series.windowRate(i, r.AllJoinedS); ok {
			f.WindowBps = w
			window = append(window, w)
		} else {
			windowOK = false
		}
		if a := r.Series.indexFrom(r.AllJoinedS); a >= 0 && i < len(r.Series.Flows) {
			f.RcMeanBps = mean(r.Series.Flows[i].RcBps[a:])
			f.AlphaMean = mean(r.Series.Flows[i].Alpha[a:])
		}
	}
	r.Jain = stats.Jain(goodputs)
	if windowOK {
		r.JainWindow = stats.Jain(window)
		var total float64
		for _, w := range window {
			total += w
		}
		for i := range r.Flows {
			if total > 0 {
				r.Flows[i].Share = r.Flows[i].WindowBps / total
			}
		}
	} else if len(r.Flows) == 1 {
		r.JainWindow = 1
		r.Flows[0].Share = 1
	}
	if r.TrafficS > 0 && r.Rate > 0 {
		r.Utilization = float64(c.DequeuedBytes) * 8 / r.TrafficS / float64(r.Rate)
		if w := r.TrafficS - r.AllJoinedS; w > 0 && joined != nil {
			r.UtilizationWindow = float64(sub(end.DequeuedBytes, joined.DequeuedBytes)) * 8 / w / float64(r.Rate)
		}
	}
	r.Queue = queueStats(&r.Series, r.AllJoinedS, &r.ClassConfig)
	r.Loop.CEMarked = c.CEMarked()
	r.Loop.CEDequeued = c.DequeuedCEPackets
	if ect := c.ArrivedECT0 + c.ArrivedECT1; ect > 0 {
		r.MarkFraction = float64(c.CEMarked()) / float64(ect)
	}
	r.SojournP50, r.SojournP99 = quantile(&c.Sojourn, 0.5), quantile(&c.Sojourn, 0.99)
	r.Curve = curveRows(&c.Curve, &r.ClassConfig)
	if err := end.CheckInvariant(); err != nil {
		r.Invariant = err.Error()
	}
	for i := range st.Classes {
		if i != int(qdisc.ClassRoCE) {
			r.OtherPackets += st.Classes[i].EnqueuedPackets
		}
	}
	r.Unaccounted = st.Port.UnaccountedPackets
}

// hostLost fills the host's part from the meter's report (nil: not
// metered): the traffic from start, the window from allJoined (both on
// the meter's clock; allJoined 0 if the last flow never joined).
func (r *RoCEReport) hostLost(h *hostlost.Report, start, allJoined time.Duration) {
	if h == nil {
		return
	}
	r.HostLost.set(h, start, r.TrafficS, r.Utilization)
	if w := r.TrafficS - r.AllJoinedS; allJoined > 0 && w > 0 && r.UtilizationWindow > 0 {
		r.StarvedWindowS = h.StarvedBetween(allJoined, allJoined+durationS(w)).Seconds()
		r.UtilizationWindowNet = netUtilization(r.UtilizationWindow, w, r.StarvedWindowS)
	}
}

// wrap breaks text into lines of at most width bytes at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// classDelta is what a class counted between two snapshots: counters are
// subtracted, the backlog and its peak are taken from cur. The marking
// curve's bins are subtracted too.
func classDelta(prev, cur *qdisc.ClassStats) qdisc.ClassStats {
	d := *cur
	d.EnqueuedPackets = sub(cur.EnqueuedPackets, prev.EnqueuedPackets)
	d.EnqueuedBytes = sub(cur.EnqueuedBytes, prev.EnqueuedBytes)
	d.DequeuedPackets = sub(cur.DequeuedPackets, prev.DequeuedPackets)
	d.DequeuedBytes = sub(cur.DequeuedBytes, prev.DequeuedBytes)
	d.DequeuedCEPackets = sub(cur.DequeuedCEPackets, prev.DequeuedCEPackets)
	d.ArrivedNotECT = sub(cur.ArrivedNotECT, prev.ArrivedNotECT)
	d.ArrivedECT0 = sub(cur.ArrivedECT0, prev.ArrivedECT0)
	d.ArrivedECT1 = sub(cur.ArrivedECT1, prev.ArrivedECT1)
	d.ArrivedCE = sub(cur.ArrivedCE, prev.ArrivedCE)
	d.CEMarkedECT0 = sub(cur.CEMarkedECT0, prev.CEMarkedECT0)
	d.CEMarkedECT1 = sub(cur.CEMarkedECT1, prev.CEMarkedECT1)
	d.DroppedLimitPackets = sub(cur.DroppedLimitPackets, prev.DroppedLimitPackets)
	d.DroppedLimitBytes = sub(cur.DroppedLimitBytes, prev.DroppedLimitBytes)
	d.DroppedWREDPackets = sub(cur.DroppedWREDPackets, prev.DroppedWREDPackets)
	d.DroppedWREDBytes = sub(cur.DroppedWREDBytes, prev.DroppedWREDBytes)
	d.AQMInsMarks = sub(cur.AQMInsMarks, prev.AQMInsMarks)
	d.AQMPstMarks = sub(cur.AQMPstMarks, prev.AQMPstMarks)
	d.AQMDroppedPackets = sub(cur.AQMDroppedPackets, prev.AQMDroppedPackets)
	d.AQMDroppedBytes = sub(cur.AQMDroppedBytes, prev.AQMDroppedBytes)
	d.SojournSum = cur.SojournSum - prev.SojournSum
	d.SojournSamples = sub(cur.SojournSamples, prev.SojournSamples)
	d.Sojourn = histDelta(&prev.Sojourn, &cur.Sojourn)
	d.PPFCStopsSent = sub(cur.PPFCStopsSent, prev.PPFCStopsSent)
	d.PPFCResumesSent = sub(cur.PPFCResumesSent, prev.PPFCResumesSent)
	d.PPFCStopsCoalesced = sub(cur.PPFCStopsCoalesced, prev.PPFCStopsCoalesced)
	d.PPFCHoldsSent = sub(cur.PPFCHoldsSent, prev.PPFCHoldsSent)
	d.PPFCHoldsCoalesced = sub(cur.PPFCHoldsCoalesced, prev.PPFCHoldsCoalesced)
	d.PPFCAlarmsSent = sub(cur.PPFCAlarmsSent, prev.PPFCAlarmsSent)
	d.PPFCAlarmsCoalesced = sub(cur.PPFCAlarmsCoalesced, prev.PPFCAlarmsCoalesced)
	d.TrimmedPackets = sub(cur.TrimmedPackets, prev.TrimmedPackets)
	d.TrimmedBytes = sub(cur.TrimmedBytes, prev.TrimmedBytes)
	d.TrimmedKeptBytes = sub(cur.TrimmedKeptBytes, prev.TrimmedKeptBytes)
	d.TrimDroppedPackets = sub(cur.TrimDroppedPackets, prev.TrimDroppedPackets)
	d.TrimDroppedBytes = sub(cur.TrimDroppedBytes, prev.TrimDroppedBytes)
	d.TrimInPackets = sub(cur.TrimInPackets, prev.TrimInPackets)
	d.TrimInBytes = sub(cur.TrimInBytes, prev.TrimInBytes)
	for b := range d.Curve.Arrivals {
		d.Curve.Arrivals[b] = sub(cur.Curve.Arrivals[b], prev.Curve.Arrivals[b])
		d.Curve.Marks[b] = sub(cur.Curve.Marks[b], prev.Curve.Marks[b])
	}
	return d
}

// ---- text ----

// knobSummary names the knobs that shape the sawtooth, in mlx5 units: how
// the rate climbs back, and how it is cut.
func knobSummary(p *dcqcn.Params) (increase, decrease string) {
	get := func(n string) string { v, _ := p.Get(n); return v }
	increase = fmt.Sprintf("rpg_time_reset %s us, rpg_byte_reset %s B, rpg_threshold %s, rpg_ai_rate %s Mbit/s, rpg_hai_rate %s Mbit/s",
		get("rpg_time_reset"), get("rpg_byte_reset"), get("rpg_threshold"), get("rpg_ai_rate"), get("rpg_hai_rate"))
	decrease = fmt.Sprintf("α gain %d/1024 every dce_tcp_rtt %s us, clamp_tgt_rate %s, rpg_min_dec_fac %s%%, rpg_min_rate %s Mbit/s",
		1024-p.DCETCPG, get("dce_tcp_rtt"), get("clamp_tgt_rate"), get("rpg_min_dec_fac"), get("rpg_min_rate"))
	return increase, decrease
}

// stretchText says how the profile's timers were stretched.
func stretchText(f float64) string {
	if f == 1 {
		return "its own timers"
	}
	return fmt.Sprintf("timers stretched x%g (-stretch)", f)
}

// roceLiveHeader heads the live view; its columns line up with
// renderRoCESample's.
func roceLiveHeader() string {
	f := "%5s %-5s %8s %8s %6s %7s %5s | %7s %6s %6s %6s %9s  %-22s %8s %7s %5s %5s"
	return strings.TrimRight(fmt.Sprintf(f, "", "", "goodput", "Rc", "", "CNPs", "", "port", "", "CE", "CNPs", "", "", "sojourn", "", "", "PPFC"), " ") + "\n" +
		fmt.Sprintf(f, "time", "flow", "Mbit/s", "Mbit/s", "α", "handled", "retr", "Mbit/s", "util", "marks", "sent", "queue KB", "queue vs WRED curve", "p50", "p99", "drops", "stops") + "\n"
}

// renderRoCESample prints one second of the live view: a line per active
// flow, the port's columns on the first.
func renderRoCESample(w io.Writer, s *RoCESample, labels []string, cc *qdisc.ClassConfig) {
	port := fmt.Sprintf("%7s %6s %6d %6d %9s  %s %8s %7s %5d %5d",
		mbits(s.DequeueBps), pct(s.Utilization), s.CEMarks, s.CNPsSent, kb(s.BacklogBytes), gauge(s.BacklogBytes, cc),
		shortDur(s.SojournP50), shortDur(s.SojournP99), s.Drops, s.PPFCStops)
	first := true
	for i, f := range s.PerFlow {
		if !f.Active {
			continue
		}
		t := ""
		if first {
			t = fmt.Sprintf("%.0fs", s.T)
		}
		line := fmt.Sprintf("%5s %-5s %8s %8s %6.3f %7d %5d |", t, labels[i], mbits(f.GoodputBps), mbits(f.RcBps), f.Alpha, f.CNPs, f.Retransmits)
		if first {
			line += " " + port
		}
		fmt.Fprintln(w, line)
		first = false
	}
	if first { // no flow yet
		fmt.Fprintf(w, "%5s %-5s %8s %8s %6s %7s %5s | %s\n", fmt.Sprintf("%.0fs", s.T), "-", "", "", "", "", "", port)
	}
}

// payloadFraction is the share of the wire (L2) bytes that is payload for
// a stream of WRITEs of msg bytes at this MTU: Ethernet 14, IPv4 20, UDP 8,
// BTH 12, ICRC 4 per packet, a RETH (16) on each message's first packet.
func payloadFraction(mtu, msg int) float64 {
	if mtu <= 0 || msg <= 0 {
		return 0
	}
	ppm := (msg + mtu - 1) / mtu
	wire := msg + ppm*(14+20+8+12+4) + 16
	for k := range ppm { // 4-byte pad of a short last packet
		plen := min(mtu, msg-k*mtu)
		wire += -plen & 3
	}
	return float64(msg) / float64(wire)
}

// Check is one line of the run's verdict.
type Check struct {
	OK   bool   `json:"ok"`
	Text string `json:"text"`
}

// Thresholds the verdict checks (issue §9; dcqcn.md scenario 5).
const (
	wantUtilization = 0.95
	wantJain        = 0.95
)

// checks reads the run against what the DCQCN loop should deliver.
func (r *RoCEReport) checks() []Check {
	var out []Check
	add := func(ok bool, format string, a ...any) { out = append(out, Check{ok, fmt.Sprintf(format, a...)}) }
	util := r.UtilizationWindow
	if util == 0 {
		util = r.Utilization
	}
	if len(r.Flows) > 1 {
		add(util >= wantUtilization, "utilization %s of %s while all flows competed (want >= %s)", pct(util), r.Rate, pct(wantUtilization))
	} else {
		add(util >= wantUtilization, "utilization %s of %s (want >= %s)", pct(util), r.Rate, pct(wantUtilization))
	}
	if len(r.Flows) > 1 {
		add(r.JainWindow >= wantJain, "Jain fairness %.3f over %d flows while all competed (want >= %.2f)", r.JainWindow, len(r.Flows), wantJain)
	}
	c := &r.Class
	add(c.DroppedPackets() == 0, "%d packets dropped in class 3 (want 0: ECN, not loss, is the signal)", c.DroppedPackets())
	l := &r.Loop
	if len(r.Flows) > 1 { // one sender at the line rate need not congest the port
		add(l.CEMarked > 0 && l.NPCNPSent > 0 && l.RPCNPHandled > 0,
			"the loop ran: %d CE marks -> %d CNPs sent -> %d handled by the senders", l.CEMarked, l.NPCNPSent, l.RPCNPHandled)
	}
	add(l.NPCNPSent == l.RPCNPHandled+l.RPCNPIgnored, "every CNP arrived: np_cnp_sent %d = rp_cnp_handled %d + rp_cnp_ignored %d",
		l.NPCNPSent, l.RPCNPHandled, l.RPCNPIgnored)
	if r.ClassConfig.XoffBytes != 0 && c.PPFCStopsSent+c.PPFCResumesSent+c.PPFCHoldsSent+c.PPFCAlarmsSent > 0 {
		pf := &r.PPFC
		add(pf.ReceivedStop == c.PPFCStopsSent && pf.ReceivedResume == c.PPFCResumesSent && pf.ReceivedHold == c.PPFCHoldsSent &&
			pf.ReceivedAlarm == c.PPFCAlarmsSent && pf.Ignored == 0,
			"every PPFC notification arrived and was obeyed: the port sent %d stops, %d holds, %d resumes and %d alarms, the senders took %d, %d, %d and %d (%d ignored)",
			c.PPFCStopsSent, c.PPFCHoldsSent, c.PPFCResumesSent, c.PPFCAlarmsSent, pf.ReceivedStop, pf.ReceivedHold, pf.ReceivedResume, pf.ReceivedAlarm, pf.Ignored)
	}
	cc := &r.ClassConfig
	q := &r.Queue
	if len(r.Flows) > 1 {
		// DCQCN settles at the foot of the curve (marking starts at min_th,
		// at most max_p by max_th): p50 near min_th, p99 below max_th.
		add(q.Samples > 0 && q.P50Bytes >= uint64(cc.MinThBytes)/2 && q.P99Bytes <= uint64(cc.MaxThBytes),
			"queue p50 %sKB (want >= min_th/2 %sKB), p99 %sKB (want <= max_th %sKB)", kb(q.P50Bytes), kb(uint64(cc.MinThBytes)/2), kb(q.P99Bytes), kb(uint64(cc.MaxThBytes)))
	}
	add(l.Retransmits == 0, "%d packets retransmitted (go-back-N after a loss or reordering)", l.Retransmits)
	return out
}

// hints explain failed checks from what else the run measured.
func (r *RoCEReport) hints() []string {
	var out []string
	var alpha, rc float64
	for i := range r.Flows {
		alpha += r.Flows[i].AlphaMean / float64(len(r.Flows))
		rc += r.Flows[i].RcMeanBps
	}
	c, q, l := &r.Class, &r.Queue, &r.Loop
	drops := c.DroppedPackets()
	// Drops only right after a join are the start at the line rate.
	var atJoin, live uint64
	for _, s := range r.Live {
		live += s.Drops
		for i := range r.Flows {
			if st := r.Flows[i].StartS; st > s.T-1.5 && st <= s.T {
				atJoin += s.Drops
				break
			}
		}
	}
	joinDrops := drops > 0 && live > 0 && atJoin == live
	overflow := (drops > 0 && !joinDrops) || q.Above > 0.05
	switch {
	case joinDrops && q.Above <= 0.05:
		out = append(out, fmt.Sprintf("All %d drops came in the second after a sender joined: a new QP starts at the line rate (DCQCN has no slow start)"+
			" and the queue overflowed before its first CNPs. Real fabrics make such bursts lossless with PFC; here PPFC does it (-ppfc, on unless off).", drops))
	case overflow && r.Profile == "mlx5":
		out = append(out, fmt.Sprintf("The queue ran over max_th: the mlx5 loop did not hold it (α averaged %.3f)."+
			" mlx5 samples α once per dce_tcp_rtt (α ≈ the share of periods with a CNP) and climbs back every rpg_byte_reset bytes towards an Rt"+
			" it lowers only after a timer increase: a loop built for a CNP every few µs on a 25 Gbit/s NIC, where this lab's senders see one"+
			" every ms or so. The paper profile holds this port.", alpha))
	case overflow && alpha < 0.02:
		out = append(out, fmt.Sprintf("α stayed near 0 (mean %.3f), so each CNP cut Rc by only α/2 and the senders kept near the line rate.", alpha))
	case overflow:
		out = append(out, fmt.Sprintf("The queue overflowed (%d drops, above max_th in %s of the samples): the senders climbed back faster"+
			" than the CNPs cut them. After a cut, fast recovery restores the rate in rpg_threshold x rpg_time_reset (%s x %s us here);"+
			" longer timers (-stretch) or a steeper curve (-wred) hold the queue.", drops, pct(q.Above), r.Knobs["rpg_threshold"], r.Knobs["rpg_time_reset"]))
	}
	util := r.UtilizationWindow
	if util == 0 {
		util = r.Utilization
	}
	switch {
	case util >= wantUtilization:
	case drops == 0 && l.Retransmits == 0 && rc >= 0.97*float64(r.Rate):
		out = append(out, fmt.Sprintf("The senders' Rc added up to %s Mbit/s, yet the port ran at %s: the hosts did not send at Rc."+
			" The whole lab runs on this machine's CPUs; other load slows the senders' pacing (run the demo on an idle machine).",
			mbits(rc), pct(util)))
	case drops == 0 && l.Retransmits == 0 && q.Below > 0.3:
		out = append(out, fmt.Sprintf("The queue was below min_th %s of the time: the cuts emptied it. Smaller cuts (rpg_min_dec_fac, dce_tcp_g) or a higher min_th keep it busy.", pct(q.Below)))
	}
	if l.Retransmits > 0 {
		if d := r.RecvSocket.RecvBufferDrops + r.SendSocket.RecvBufferDrops; d > 0 {
			out = append(out, fmt.Sprintf("%d packets were dropped by the hosts' UDP receive buffers (an agent fell behind): RC went back N for each.", d))
		} else if drops == 0 && l.LocalAckTimeoutErr > 0 {
			out = append(out, fmt.Sprintf("%d ACK timeouts without a drop: a round trip exceeded the %s local ACK timeout.",
				l.LocalAckTimeoutErr, shortDur(ackTimeoutFor(r.ClassConfig.LimitBytes, r.Rate))))
		}
	}
	return out
}

// renderRoCESummary prints the end-of-run report.
func renderRoCESummary(w io.Writer, r *RoCEReport) {
	fmt.Fprintf(w, "\n=== Summary: %d RoCEv2 flow(s), DCQCN %q profile, into one %s WRED port, %.0f s ===\n\n",
		len(r.Flows), r.Profile, r.Rate, r.DurationS)
	from, to := r.AllJoinedS, r.TrafficS
	win := fmt.Sprintf("t=%.0f-%.0fs", from, to)
	fmt.Fprintf(w, "Flows (goodput: payload placed in order at the receiver; Rc: the sender's DCQCN rate, wire bytes)\n")
	fmt.Fprintf(w, "  %-6s %-36s %-7s %8s  %-21s %8s %8s %8s\n", "", "", "", "goodput", "while all competed,", "CNPs", "CNPs", "rate")
	fmt.Fprintf(w, "  %-6s %-36s %-7s %8s  %8s %5s %6s %8s %8s %8s %6s\n",
		"flow", "path", "active", "Mbit/s", win, "share", "Rc", "handled", "ignored", "cuts", "retr")
	for i := range r.Flows {
		f := &r.Flows[i]
		path := fmt.Sprintf("%s QP %#x -> r QP %#x", f.Src, f.SenderQPN, f.ReceiverQPN)
		active := fmt.Sprintf("%.0f-%.0fs", f.StartS, f.StartS+f.ActiveS)
		line := fmt.Sprintf("  %-6s %-36s %-7s %8s  %8s %5s %6s %8d %8d %8d %6d",
			f.Label(), path, active, mbits(f.GoodputBps), mbits(f.WindowBps), pct(f.Share), fmt.Sprintf("%.0f", f.RcMeanBps/1e6),
			f.Sender.RPCNPHandled, f.Sender.RPCNPIgnored, f.RateCuts, f.Sender.RetransmitPackets)
		if f.Error != "" {
			line += "  failed: " + f.Error
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	var sumWin float64
	for i := range r.Flows {
		sumWin += r.Flows[i].WindowBps
	}
	fmt.Fprintf(w, "  %-6s %-36s %-7s %8s  %8s\n", "all", "(all payload received / run time)", fmt.Sprintf("0-%.0fs", r.TrafficS), mbits(r.GoodputBps), mbits(sumWin))
	if len(r.Flows) > 1 {
		fmt.Fprintf(w, "  Jain fairness: %.3f while all %d flows competed (%s), %.3f over whole-run averages (the flows joined one by one)\n",
			r.JainWindow, len(r.Flows), win, r.Jain)
	} else {
		fmt.Fprintf(w, "  Jain fairness: 1 (a single flow)\n")
	}
	if len(r.Flows) > 1 {
		fmt.Fprintf(w, "  Link utilization: %s of %s while all competed, %s over the %.2f s run (class 3 dequeued, L2 bytes);\n",
			pct(r.UtilizationWindow), r.Rate, pct(r.Utilization), r.TrafficS)
	} else {
		fmt.Fprintf(w, "  Link utilization: %s of %s over the %.2f s run (class 3 dequeued, L2 bytes);\n", pct(r.Utilization), r.Rate, r.TrafficS)
	}
	fmt.Fprintf(w, "                    payload is %s of the wire bytes at MTU %d, so goodput tops out near %s Mbit/s\n",
		pct(payloadFraction(r.MTU, r.MessageBytes)), r.MTU, mbits(payloadFraction(r.MTU, r.MessageBytes)*float64(r.Rate)))
	renderHostLost(w, &r.HostLost)
	if r.Report != nil && r.UtilizationWindowNet > 0 {
		fmt.Fprintf(w, "        while all competed: %s of it, utilization %s net of it\n", shortDur(durationS(r.StarvedWindowS)), pct(r.UtilizationWindowNet))
	}
	fmt.Fprintln(w)

	l := &r.Loop
	fmt.Fprintf(w, "DCQCN loop (the port's counters, then the NICs', mlx5 names)\n")
	ceNote := "OK"
	if l.NPECNMarked != l.CEDequeued {
		ceNote = fmt.Sprintf("differs by %d", int64(l.NPECNMarked)-int64(l.CEDequeued))
	}
	cnpNote := "no CNP lost"
	if l.NPCNPSent != l.RPCNPHandled+l.RPCNPIgnored {
		cnpNote = fmt.Sprintf("%d CNPs missing", int64(l.NPCNPSent)-int64(l.RPCNPHandled+l.RPCNPIgnored))
	}
	fmt.Fprintf(w, "  CP  switch    CE marked %d pkt = %s of ECN-capable arrivals; %d CE packets left the queue\n",
		l.CEMarked, pct(r.MarkFraction), l.CEDequeued)
	fmt.Fprintf(w, "  NP  receiver  np_ecn_marked_roce_packets %d (= CE packets out of the port: %s), np_cnp_sent %d\n",
		l.NPECNMarked, ceNote, l.NPCNPSent)
	fmt.Fprintf(w, "  RP  senders   rp_cnp_handled %d, rp_cnp_ignored %d (%s), rate cuts %d\n",
		l.RPCNPHandled, l.RPCNPIgnored, cnpNote, l.RateCuts)
	fmt.Fprintf(w, "  RC  transport retransmitted %d, out_of_sequence %d, packet_seq_err %d, local_ack_timeout_err %d, duplicate_request %d\n",
		l.Retransmits, l.OutOfSequence, l.PacketSeqErr, l.LocalAckTimeoutErr, l.DuplicateRequest)
	fmt.Fprintf(w, "  host  sockets receive-buffer drops %d at the receiver, %d at the senders; send errors %d\n",
		r.RecvSocket.RecvBufferDrops, r.SendSocket.RecvBufferDrops, r.RecvSocket.SendErrors+r.SendSocket.SendErrors)
	if cc := &r.ClassConfig; cc.XoffBytes != 0 {
		c, pf := &r.Class, &r.PPFC
		alarm := "off"
		if cc.AlarmBytes != 0 {
			alarm = kb(uint64(cc.AlarmBytes)) + "KB"
		}
		fmt.Fprintf(w, "  PPFC  switch  xoff %sKB xon %sKB alarm %s: stops sent %d (coalesced %d: the sender was paused already), holds sent %d (coalesced %d), resumes sent %d, alarms sent %d (coalesced %d: once per episode)\n",
			kb(uint64(cc.XoffBytes)), kb(uint64(cc.XonBytes)), alarm, c.PPFCStopsSent, c.PPFCStopsCoalesced, c.PPFCHoldsSent, c.PPFCHoldsCoalesced,
			c.PPFCResumesSent, c.PPFCAlarmsSent, c.PPFCAlarmsCoalesced)
		fmt.Fprintf(w, "        senders took %d stops, %d holds, %d resumes, %d alarms (%d ignored); QPs paused %d times and held %d, %s in all; rate increases held by %d alarms\n",
			pf.ReceivedStop, pf.ReceivedHold, pf.ReceivedResume, pf.ReceivedAlarm, pf.Ignored, pf.Pauses, pf.Holds, shortDur(time.Duration(pf.PausedNs)), pf.AlarmsObeyed)
		if c.MaxBacklogBytes > uint64(cc.XoffBytes) {
			fmt.Fprintf(w, "        peak backlog %sKB: %sKB over xoff of the %sKB headroom (what was on the way when the senders stopped)\n",
				kb(c.MaxBacklogBytes), kb(c.MaxBacklogBytes-uint64(cc.XoffBytes)), kb(uint64(cc.LimitBytes-cc.XoffBytes)))
		}
	} else {
		fmt.Fprintf(w, "  PPFC  off (-ppfc)\n")
	}
	fmt.Fprintln(w)

	renderClass(w, classView{c: &r.Class, cc: &r.ClassConfig, markFraction: r.MarkFraction, p50: r.SojournP50, p99: r.SojournP99,
		invariant: r.Invariant, qd: r.Qdisc, dev: r.Port.Dev, other: r.OtherPackets, unaccounted: r.Unaccounted,
		notECTNote: "(RoCE sends everything ECT(0): something else used DSCP 26)"})
	if q := &r.Queue; q.Samples > 0 {
		when := "while all competed"
		if len(r.Flows) == 1 {
			when = "over the run"
		}
		fmt.Fprintf(w, "  backlog    %s (%d samples, every %s): p50 %sKB  p99 %sKB  mean %sKB  max %sKB\n",
			when, q.Samples, shortDur(time.Duration(r.Series.PeriodS*1e9)), kb(q.P50Bytes), kb(q.P99Bytes), kb(uint64(q.MeanBytes)), kb(q.MaxBytes))
		fmt.Fprintf(w, "             below min_th %s of the time, between min_th and max_th %s, above max_th %s\n",
			pct(q.Below), pct(q.In), pct(q.Above))
	}
	fmt.Fprintln(w)
	if len(r.Curve) > 0 {
		renderCurve(w, r.Curve, &r.ClassConfig)
	} else {
		fmt.Fprintf(w, "Marking curve: no ECN-capable packet arrived in class 3\n")
	}
	renderChecks(w, r.checks(), r.hints())
}

func durationS(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// renderChecks prints a run's checks, ok or MISS, and the hints that
// explain the misses.
func renderChecks(w io.Writer, checks []Check, hints []string) {
	fmt.Fprintf(w, "\nChecks\n")
	for _, c := range checks {
		mark := "ok  "
		if !c.OK {
			mark = "MISS"
		}
		fmt.Fprintf(w, "  [%s] %s\n", mark, c.Text)
	}
	for _, h := range hints {
		for i, l := range wrap(h, 104) {
			if i == 0 {
				fmt.Fprintf(w, "  hint: %s\n", l)
			} else {
				fmt.Fprintf(w, "        %s\n", l)
			}
		}
	}
}
