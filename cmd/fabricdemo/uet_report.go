package main

// The pure part of the UET demo: the samples, the summary's arithmetic,
// its checks and its text. Nothing here needs root or a lab;
// uet_report_test.go tests it directly.

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// UETFlow is one sender's stream in the summary.
type UETFlow struct {
	Sender string `json:"sender"`
	Src    string `json:"src"`
	Dst    string `json:"dst"`
	JobID  uint32 `json:"job_id"`
	PDC    uint16 `json:"pdc"` // the sender's PDC ID
	// FCTS is the time from the start to the last message's ACK.
	FCTS       float64 `json:"fct_s"`
	Messages   uint64  `json:"messages_acked"`
	BytesAcked uint64  `json:"bytes_acked"` // payload
	GoodputBps float64 `json:"goodput_bps"` // BytesAcked over FCTS
	Share      float64 `json:"share"`       // of all flows' goodput
	// The means of the sampled window and credit while the flow ran; 0
	// where the CCC runs none.
	CwndMeanBytes   float64 `json:"cwnd_mean_bytes,omitempty"`
	CreditMeanBytes float64 `json:"credit_mean_bytes,omitempty"`
	// Counters are the sender's endpoint's (one flow per endpoint), NSCC
	// its CCC's at the end.
	Counters pds.Counters    `json:"sender_counters"`
	NSCC     *nscc.Stats     `json:"nscc,omitempty"`
	Credit   *pds.CreditInfo `json:"rccc,omitempty"`
	// Pull is the flow's source at the receiver's credit pacer (RCCC).
	Pull *rccc.SourceStats `json:"pacer_source,omitempty"`
	// Received is what the receiver's target PDC of this flow counted.
	Received UETReceived `json:"received"`
	Error    string      `json:"error,omitempty"`
}

// Label is the flow's name in tables.
func (f *UETFlow) Label() string { return f.Sender }

// UETReceived is a flow at the receiver: its target PDCs' counters.
type UETReceived struct {
	Messages     uint64 `json:"messages"`
	MessageBytes uint64 `json:"message_bytes"`
	VerifyErrors uint64 `json:"verify_errors"`
	Duplicates   uint64 `json:"duplicates"`
	CEReceived   uint64 `json:"ce_received"`
	Trimmed      uint64 `json:"trimmed"`
}

func (r *UETReceived) add(t *pds.TargetStats) {
	r.Messages += t.Messages
	r.MessageBytes += t.MessageBytes
	r.VerifyErrors += t.VerifyErrors
	r.Duplicates += t.Duplicates
	r.CEReceived += t.CEReceived
	r.Trimmed += t.Trimmed
}

// UETSeries are the fast samples (every -sample): the queue and each
// flow's progress and CCC, for the plot. Arrays are parallel to T.
type UETSeries struct {
	PeriodS      float64         `json:"period_s"`
	T            []float64       `json:"t_s"` // seconds since the senders started
	BacklogBytes []uint64        `json:"backlog_bytes"`
	Flows        []UETFlowSeries `json:"flows"`
}

// UETFlowSeries is one flow's samples.
type UETFlowSeries struct {
	AckedBytes []uint64 `json:"acked_bytes"` // cumulative payload acknowledged
	// CwndBytes is NSCC's window, noWindow where the CCC runs none (or
	// is gone).
	CwndBytes     []int `json:"cwnd_bytes"`
	InFlightBytes []int `json:"in_flight_bytes"`
	// CreditBytes is RCCC's credit, empty where pds does not report it.
	CreditBytes []int `json:"credit_bytes,omitempty"`
}

// UETFlowInterval is one flow in one line of the live view.
type UETFlowInterval struct {
	Done       bool    `json:"done"` // finished before the interval
	GoodputBps float64 `json:"goodput_bps"`
	// At the end of the interval: the CCC's window (noWindow: none),
	// bytes in flight, credit (nil: not reported) and states.
	CwndBytes     int    `json:"cwnd_bytes"`
	InFlightBytes int    `json:"in_flight_bytes"`
	CreditBytes   *int   `json:"credit_bytes,omitempty"`
	State         string `json:"ccc_state"`
	RxState       string `json:"rx_ccc_state,omitempty"`
	// In the interval.
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	TrimNACKs   uint64 `json:"trim_nacks"`
}

// UETSample is one second of the live view: the port's class 3 and every
// flow.
type UETSample struct {
	Sample
	Trims   uint64            `json:"trims"`           // packets the port trimmed in the interval
	Final   bool              `json:"final,omitempty"` // the last interval, to the end of the traffic
	PerFlow []UETFlowInterval `json:"per_flow"`
}

// UETTotals are the senders' transport and NSCC counters summed.
type UETTotals struct {
	Retransmits    uint64            `json:"retransmits"`
	Timeouts       uint64            `json:"timeouts"`
	InferredLosses uint64            `json:"inferred_losses"`
	Probes         uint64            `json:"probes_sent"`
	ECNEchoes      uint64            `json:"ecn_echoes"`
	TrimNACKs      uint64            `json:"trim_nacks"` // TRIMMED and TRIMMED_LASTHOP
	NACKs          map[string]uint64 `json:"nacks_received"`
	PDCErrors      uint64            `json:"pdc_errors"`
	SendErrors     uint64            `json:"send_errors"`

	NSCC nscc.Stats `json:"nscc"`
	// RCCC at the senders: their CCCs' credit counters summed.
	Credit         rccc.SenderStats `json:"rccc"`
	CreditRequests uint64           `json:"credit_requests"`
}

// UETReport is the UET run's result, also written by -json.
type UETReport struct {
	Senders        int           `json:"senders"`
	Rate           units.Rate    `json:"rate"`
	DurationS      float64       `json:"duration_s"`
	BytesPerSender uint64        `json:"bytes_per_sender,omitempty"` // -bytes, whole messages; 0: until -duration
	MessageBytes   int           `json:"message_bytes"`
	MTU            int           `json:"mtu"`
	CC             pds.CCMode    `json:"cc"`
	Trim           bool          `json:"trim"`
	BaseRTT        time.Duration `json:"base_rtt_ns"`
	Kernel         string        `json:"kernel"`
	Port           qdisc.Info    `json:"port"`
	Interrupted    bool          `json:"interrupted,omitempty"`
	Scale

	Flows    []UETFlow    `json:"flows"`
	Receiver pds.Counters `json:"receiver_counters"`
	// TrafficS is the tail FCT: the start to the last flow's last ACK.
	TrafficS float64 `json:"traffic_s"`
	// IdealS is the time all the payload acknowledged takes at the port's
	// payload capacity (PayloadFraction of the rate), from the start.
	PayloadFraction float64 `json:"payload_fraction"`
	IdealS          float64 `json:"ideal_s"`
	TailOverIdeal   float64 `json:"tail_fct_over_ideal"`
	// The host's part over the tail FCT (hostlost.go), and the tail FCT
	// over the ideal extended by it: the ratio the UET incast tests
	// compare with htsim's.
	HostLost
	TailOverIdealNet float64    `json:"tail_fct_over_ideal_net"`
	GoodputBps       float64    `json:"goodput_bps"` // all payload / TrafficS
	Utilization      float64    `json:"utilization"` // class 3 dequeued L2 bits / (rate · TrafficS), resent packets included
	Jain             float64    `json:"jain"`        // over the flows' goodputs
	Queue            QueueStats `json:"queue"`       // the backlog samples of the whole run
	Transport        UETTotals  `json:"transport"`
	// Pacer is the receiver's RCCC credit pacer (CC rccc or both).
	Pacer *rccc.PacerStats `json:"pacer,omitempty"`
	// The endpoints' UDP sockets: drops outside the port.
	RecvSocket SocketCounters `json:"receiver_socket"`
	SendSocket SocketCounters `json:"sender_sockets"`

	ClassConfig  qdisc.ClassConfig    `json:"class3_config"`
	Class        qdisc.ClassStats     `json:"class3"`     // during the run
	TrimClass    *qdisc.ClassStats    `json:"trim_class"` // during the run, with trimming
	MarkFraction float64              `json:"mark_fraction"`
	TrimFraction float64              `json:"trim_fraction"` // of class 3's arrivals
	SojournP50   time.Duration        `json:"sojourn_p50_ns"`
	SojournP99   time.Duration        `json:"sojourn_p99_ns"`
	Curve        []CurveRow           `json:"curve"`
	Invariant    string               `json:"invariant_error,omitempty"`
	Qdisc        *qdisc.QdiscCounters `json:"kernel_qdisc,omitempty"`
	// ControlPackets went through class 6 (DSCP 48): the senders' CTRL
	// packets to the receiver (ACK and credit requests). OtherPackets are
	// in none of class 3, class 6 and the trim class.
	ControlPackets uint64 `json:"control_packets"`
	OtherPackets   uint64 `json:"other_class_packets"`
	Unaccounted    uint64 `json:"unaccounted_packets"`
	FlowsWithErrs  int    `json:"flows_failed"`

	Live   []UETSample `json:"live"`
	Series UETSeries   `json:"series"`
}

// uetRequestLen is a data packet's PDS header in mode m: RUD_CC_REQ
// (with ccc_id and credit_target) when the CCC runs RCCC, RUD_REQ
// otherwise (host/pds).
func uetRequestLen(m pds.CCMode) int {
	if m == pds.CCRCCC || m == pds.CCBoth {
		return uet.RequestCCLen
	}
	return uet.RequestLen
}

// uetPayloadFraction is the payload's share of the port's (L2) bytes for
// messages of msg bytes in IP packets of at most mtu bytes: each packet
// carries Ethernet 14, IPv4 20, UDP 8, the PDS request reqLen and the SES
// standard header 44 bytes; a message's last packet is short.
func uetPayloadFraction(mtu, reqLen, msg int) float64 {
	per := mtu - 20 - 8 - reqLen - uet.SESStdLen
	if per <= 0 || msg <= 0 {
		return 0
	}
	packets := (msg + per - 1) / per
	return float64(msg) / float64(msg+packets*(14+20+8+reqLen+uet.SESStdLen))
}

// finish fills the derived fields. st is the port at rest after the run,
// base before it.
func (r *UETReport) finish(st, base *qdisc.Stats) {
	end := &st.Classes[qdisc.ClassRoCE]
	r.Class = classDelta(&base.Classes[qdisc.ClassRoCE], end)
	c := &r.Class
	trimClass := -1
	if r.ClassConfig.TrimBytes != 0 {
		trimClass = int(r.ClassConfig.TrimClass)
		tc := classDelta(&base.Classes[trimClass], &st.Classes[trimClass])
		r.TrimClass = &tc
	}
	t := &r.Transport
	t.NACKs = map[string]uint64{}
	var goodputs []float64
	var bytes uint64
	for i := range r.Flows {
		f := &r.Flows[i]
		if f.Error != "" {
			r.FlowsWithErrs++
		}
		if f.FCTS > 0 {
			f.GoodputBps = float64(f.BytesAcked) * 8 / f.FCTS
		}
		goodputs = append(goodputs, f.GoodputBps)
		bytes += f.BytesAcked
		r.TrafficS = max(r.TrafficS, f.FCTS)
		fc := &f.Counters
		t.Retransmits += fc.Retransmits
		t.Timeouts += fc.Timeouts
		t.InferredLosses += fc.InferredLosses
		t.Probes += fc.ProbesSent
		t.ECNEchoes += fc.ECNEchoes
		t.PDCErrors += fc.PDCErrors
		t.SendErrors += fc.SendErrors
		for code, n := range fc.NacksReceived {
			t.NACKs[code] += n
		}
		t.TrimNACKs += trimNACKs(fc.NacksReceived)
		if f.NSCC != nil {
			addNSCC(&t.NSCC, f.NSCC)
		}
		if c := f.Credit; c != nil {
			addCredit(&t.Credit, &c.SenderStats)
			t.CreditRequests += c.CreditRequests
		}
		if i < len(r.Series.Flows) {
			f.CwndMeanBytes, f.CreditMeanBytes = r.Series.means(i, f.FCTS)
		}
	}
	var total float64
	for _, g := range goodputs {
		total += g
	}
	for i := range r.Flows {
		if total > 0 {
			r.Flows[i].Share = r.Flows[i].GoodputBps / total
		}
	}
	r.Jain = stats.Jain(goodputs)
	r.PayloadFraction = uetPayloadFraction(r.MTU, uetRequestLen(r.CC), r.MessageBytes)
	if capacity := r.PayloadFraction * float64(r.Rate); capacity > 0 {
		r.IdealS = float64(bytes) * 8 / capacity
	}
	if r.IdealS > 0 {
		r.TailOverIdeal = r.TrafficS / r.IdealS
	}
	if r.TrafficS > 0 {
		r.GoodputBps = float64(bytes) * 8 / r.TrafficS
		if r.Rate > 0 {
			r.Utilization = float64(c.DequeuedBytes) * 8 / r.TrafficS / float64(r.Rate)
		}
	}
	r.Queue = backlogStats(r.Series.T, r.Series.BacklogBytes, 0, &r.ClassConfig)
	if ect := c.ArrivedECT0 + c.ArrivedECT1; ect > 0 {
		r.MarkFraction = float64(c.CEMarked()) / float64(ect)
	}
	if c.EnqueuedPackets > 0 {
		r.TrimFraction = float64(c.TrimmedPackets) / float64(c.EnqueuedPackets)
	}
	r.SojournP50, r.SojournP99 = quantile(&c.Sojourn, 0.5), quantile(&c.Sojourn, 0.99)
	r.Curve = curveRows(&c.Curve, &r.ClassConfig)
	if err := end.CheckInvariant(); err != nil {
		r.Invariant = err.Error()
	}
	for i := range st.Classes {
		n := sub(st.Classes[i].EnqueuedPackets, base.Classes[i].EnqueuedPackets)
		switch i {
		case int(qdisc.ClassRoCE), trimClass:
		case int(qdisc.ClassCNP):
			r.ControlPackets += n
		default:
			r.OtherPackets += n
		}
	}
	r.Unaccounted = sub(st.Port.UnaccountedPackets, base.Port.UnaccountedPackets)
}

// hostLost fills the host's part from the meter's report (nil: not
// metered) for the traffic from start on the meter's clock.
func (r *UETReport) hostLost(h *hostlost.Report, start time.Duration) {
	if h == nil {
		return
	}
	r.HostLost.set(h, start, r.TrafficS, r.Utilization)
	if r.IdealS > 0 {
		r.TailOverIdealNet = r.TrafficS / (r.IdealS + r.StarvedS)
	}
}

// trimmedRowsOff reports whether a curve row off the configured curve
// lies within a packet (frame bytes) of the buffer: an arrival there is
// trimmed, not marked.
func trimmedRowsOff(rows []CurveRow, cc *qdisc.ClassConfig, frame int) bool {
	for _, r := range rows {
		if !r.Match && r.HiBytes+uint64(frame) > uint64(cc.LimitBytes) {
			return true
		}
	}
	return false
}

// trimNACKs counts the NACKs that answer a trimmed packet.
func trimNACKs(byCode map[string]uint64) uint64 {
	return byCode[uet.NackTrimmed.String()] + byCode[uet.NackTrimmedLastHop.String()]
}

// addNSCC adds the counters the summary shows.
func addNSCC(sum, s *nscc.Stats) {
	sum.Acks += s.Acks
	sum.FairAcks += s.FairAcks
	sum.ProportionalAcks += s.ProportionalAcks
	sum.FastIncreaseAcks += s.FastIncreaseAcks
	sum.ECNBelowTargetAcks += s.ECNBelowTargetAcks
	sum.ECNAboveTargetAcks += s.ECNAboveTargetAcks
	sum.Decreases += s.Decreases
	sum.QuickAdapts += s.QuickAdapts
	sum.Nacks += s.Nacks
	sum.NackDecreases += s.NackDecreases
	sum.Losses += s.Losses
}

// addCredit sums RCCC's sender counters.
func addCredit(sum, s *rccc.SenderStats) {
	sum.Credits += s.Credits
	sum.DuplicateCredits += s.DuplicateCredits
	sum.StaleCredits += s.StaleCredits
	sum.CreditBytes += s.CreditBytes
	sum.ClampedBytes += s.ClampedBytes
	sum.SentBytes += s.SentBytes
	sum.SpeculativeBytes += s.SpeculativeBytes
	sum.UnusedSpeculative += s.UnusedSpeculative
	sum.Overdrawn += s.Overdrawn
}

// means are flow i's mean window and credit over the samples before its
// FCT (all samples if fct is 0), 0 where it has none.
func (s *UETSeries) means(i int, fct float64) (cwnd, credit float64) {
	fs := &s.Flows[i]
	var cw, cr []float64
	for j, t := range s.T {
		if fct > 0 && t >= fct {
			break
		}
		if j < len(fs.CwndBytes) && fs.CwndBytes[j] != noWindow {
			cw = append(cw, float64(fs.CwndBytes[j]))
		}
		if j < len(fs.CreditBytes) {
			cr = append(cr, float64(fs.CreditBytes[j]))
		}
	}
	return mean(cw), mean(cr)
}

// Goodput is flow i's goodput over a sliding window of about window
// seconds ending at each sample, as (t, bits/s).
func (s *UETSeries) Goodput(i int, window float64) (ts, bps []float64) {
	return slidingRate(s.T, s.Flows[i].AckedBytes, s.PeriodS, 0, window)
}

// Bounds the checks read the run against.
const (
	// wantTailOverIdeal is TestUETIncastTrim's bound: quiet runs measured
	// 1.017-1.085, with one core busy up to 1.169.
	wantTailOverIdeal = 1.25
)

// checks reads the run against what UET with trimming should deliver
// (TestUETIncastTrim, issue 11).
func (r *UETReport) checks() []Check {
	var out []Check
	add := func(ok bool, format string, a ...any) { out = append(out, Check{ok, fmt.Sprintf(format, a...)}) }
	var msgs, bytes uint64
	short := 0
	for i := range r.Flows {
		f := &r.Flows[i]
		msgs += f.Messages
		bytes += f.BytesAcked
		if r.BytesPerSender > 0 && f.BytesAcked != r.BytesPerSender {
			short++
		}
	}
	rc := &r.Receiver
	ok := rc.VerifyErrors == 0 && rc.MessagesReceived == msgs && rc.MessageBytesReceived == bytes && r.FlowsWithErrs == 0 && short == 0
	text := fmt.Sprintf("every byte arrived verified: the receiver placed %d messages (%s MB) = %d acknowledged by the senders, %d verify errors",
		rc.MessagesReceived, mb(rc.MessageBytesReceived), msgs, rc.VerifyErrors)
	if r.FlowsWithErrs > 0 {
		text += fmt.Sprintf("; %d flows failed", r.FlowsWithErrs)
	}
	if short > 0 {
		text += fmt.Sprintf("; %d flows short of -bytes %s", short, units.ByteSize(r.BytesPerSender))
	}
	add(ok, "%s", text)
	c := &r.Class
	drops := c.DroppedPackets()
	if r.TrimClass != nil {
		drops += r.TrimClass.DroppedPackets()
		add(drops == 0, "%d packets dropped at the port (want 0: trimming replaces loss; %d trimmed = %s of the arrivals)", drops, c.TrimmedPackets, pct(r.TrimFraction))
		if c.TrimmedPackets > 0 {
			// A trimmed copy of a PSN the receiver has already (a
			// resend) needs no NACK (host/pds).
			sent := trimNACKs(rc.NacksSent)
			text := fmt.Sprintf("every trimmed packet NACKed: the port trimmed %d, the receiver saw %d and sent %d trim NACKs, the senders got %d",
				c.TrimmedPackets, rc.TrimmedReceived, sent, r.Transport.TrimNACKs)
			if rc.TrimmedReceived > sent {
				text += fmt.Sprintf(" (%d trimmed copies of PSNs it had: no NACK)", rc.TrimmedReceived-sent)
			}
			add(rc.TrimmedReceived == c.TrimmedPackets && r.Transport.TrimNACKs == sent, "%s", text)
		}
	}
	if n := len(r.Flows); r.TrimClass != nil && n > 1 {
		// N senders at the line rate into one port with no CC would have
		// (N-1)/N of their packets trimmed; a CC that paces them leaves
		// trimming the bursts.
		noCC := float64(n-1) / float64(n)
		add(r.TrimFraction <= noCC/2, "%s of the arrivals trimmed (want <= %s, half the %s that %d senders at the line rate without CC would lose)",
			pct(r.TrimFraction), pct(noCC/2), pct(noCC), n)
	}
	add(r.Transport.Timeouts == 0, "%d RTOs (want 0: trim NACKs, SACK and probes recover within round trips)", r.Transport.Timeouts)
	add(r.TailOverIdeal > 0 && r.TailOverIdeal <= wantTailOverIdeal, "tail FCT %s = %.3f x the ideal %s (want <= %.2f)",
		shortDur(durationS(r.TrafficS)), r.TailOverIdeal, shortDur(durationS(r.IdealS)), wantTailOverIdeal)
	if len(r.Flows) > 1 {
		add(r.Jain >= wantJain, "Jain fairness %.3f over the %d flows' goodputs (want >= %.2f)", r.Jain, len(r.Flows), wantJain)
	}
	q, cc := &r.Queue, &r.ClassConfig
	add(q.Samples > 0 && q.P50Bytes <= uint64(cc.MaxThBytes), "queue p50 %sKB, p99 %sKB of a %sKB buffer (want p50 <= max_th %sKB: the CC, not the buffer, holds the queue)",
		kb(q.P50Bytes), kb(q.P99Bytes), kb(uint64(cc.LimitBytes)), kb(uint64(cc.MaxThBytes)))
	return out
}

// hints explain failed checks, and what a run without trimming or
// without CC shows, from what else the run measured.
func (r *UETReport) hints() []string {
	var out []string
	c, t, q, cc := &r.Class, &r.Transport, &r.Queue, &r.ClassConfig
	if r.TrimClass == nil && c.DroppedPackets() > 0 {
		out = append(out, fmt.Sprintf("Without trimming the %sKB buffer dropped %d packets: the senders found them by SACK (%d inferred losses), probes (%d) and the RTO (%d), and resent %d.",
			kb(uint64(cc.LimitBytes)), c.DroppedPackets(), t.InferredLosses, t.Probes, t.Timeouts, t.Retransmits))
	}
	if n := float64(len(r.Flows)); r.CC == pds.CCNone && (q.P50Bytes > uint64(cc.MaxThBytes) || n > 1 && r.TrimFraction > (n-1)/n/2) {
		out = append(out, "With -cc none every sender runs at its line rate: the queue sits at the buffer and the port trims (or drops) the excess, which the senders resend at once; -cc nscc, rccc or both hold it.")
	}
	if r.TailOverIdeal > wantTailOverIdeal && c.DroppedPackets() == 0 && t.Timeouts == 0 && r.Utilization < 0.9 {
		out = append(out, fmt.Sprintf("No loss, yet the port ran at %s of %s: the senders did not keep it busy. The hosts share this machine's CPUs; other load slows them (run the demo on an idle machine, or a lower -rate).",
			pct(r.Utilization), r.Rate))
	}
	if sent := trimNACKs(r.Receiver.NacksSent); r.TrimClass != nil && t.TrimNACKs < sent {
		why := "lost on the way back"
		if d := r.SendSocket.RecvBufferDrops; d > 0 {
			why = fmt.Sprintf("lost where the senders' receive buffers dropped %d datagrams (an endpoint fell behind)", d)
		}
		out = append(out, fmt.Sprintf("The receiver sent %d trim NACKs, the senders got %d: the others were %s; probes and SACK recovered their packets.",
			sent, t.TrimNACKs, why))
	}
	if t.Timeouts > 0 && c.DroppedPackets() == 0 {
		out = append(out, fmt.Sprintf("%d RTOs without a drop at the port: an endpoint starved of CPU for more than the %s RTO, or a loss outside the port (a socket buffer).", t.Timeouts, shortDur(uetRTO)))
	}
	return out
}

// ---- text ----

func mb(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/1e6) }

// kbOrDash prints bytes in KB, "-" for a negative (absent) value.
func kbOrDash(b int) string {
	if b < 0 {
		return "-"
	}
	return kb(uint64(b))
}

// counts prints a counter map sorted by name: "TRIMMED_LASTHOP 12, ...",
// "none" when empty.
func counts(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k, v := range m {
			if v > 0 && !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// uetLiveFormat lays out a live line; uetLiveHeader and renderUETSample
// share it.
const (
	uetFlowCols = "%5s %-5s %8s %7s %7s %7s %-8s %-10s %5s %5s %4s |"
	uetPortCols = " %7s %6s %6s %6s %5s %8s  %-22s %7s %7s"
)

// uetLiveHeader heads the live view.
func uetLiveHeader() string {
	return strings.TrimRight(fmt.Sprintf(uetFlowCols+uetPortCols, "", "", "goodput", "cwnd", "flight", "credit", "CCC", "CCC", "", "trim", "",
		"port", "", "CE", "", "", "", "", "sojourn", ""), " ") + "\n" +
		fmt.Sprintf(uetFlowCols+uetPortCols, "time", "flow", "Mbit/s", "KB", "KB", "KB", "sender", "receiver", "retx", "NACKs", "RTO",
			"Mbit/s", "util", "marks", "trims", "drops", "queue KB", "queue vs WRED curve", "p50", "p99") + "\n"
}

// renderUETSample prints one second of the live view: a line per flow
// still sending, the port's columns on the first.
func renderUETSample(w io.Writer, s *UETSample, labels []string, cc *qdisc.ClassConfig) {
	port := fmt.Sprintf(uetPortCols, mbits(s.DequeueBps), pct(s.Utilization), fmt.Sprint(s.CEMarks), fmt.Sprint(s.Trims), fmt.Sprint(s.Drops),
		kb(s.BacklogBytes), gauge(s.BacklogBytes, cc), shortDur(s.SojournP50), shortDur(s.SojournP99))
	first := true
	for i, f := range s.PerFlow {
		if f.Done {
			continue
		}
		t := ""
		if first {
			t = liveTime(s)
		}
		credit := "-"
		if f.CreditBytes != nil {
			credit = fmt.Sprintf("%.1f", float64(*f.CreditBytes)/1024)
		}
		rx := f.RxState
		if rx == "" {
			rx = "-"
		}
		line := fmt.Sprintf(uetFlowCols, t, labels[i], mbits(f.GoodputBps), kbOrDash(f.CwndBytes), kb(uint64(max(f.InFlightBytes, 0))), credit,
			f.State, rx, fmt.Sprint(f.Retransmits), fmt.Sprint(f.TrimNACKs), fmt.Sprint(f.Timeouts))
		if first {
			line += port
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
		first = false
	}
	if first { // every flow done
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf(uetFlowCols, liveTime(s), "-", "", "", "", "", "", "", "", "", "")+port, " "))
	}
}

// liveTime labels a live line: whole seconds, the last (shorter)
// interval, which ends with the last ACK, to the hundredth.
func liveTime(s *UETSample) string {
	if s.Final {
		return fmt.Sprintf("%.2fs", s.T)
	}
	return fmt.Sprintf("%.0fs", s.T)
}

// renderUETSummary prints the end-of-run report.
func renderUETSummary(w io.Writer, r *UETReport) {
	trim := "that trims"
	if !r.Trim {
		trim = "that drops (no trimming)"
	}
	fmt.Fprintf(w, "\n=== Summary: %d UET flows, CC %s, into one %s port %s, ", len(r.Flows), r.CC, r.Rate, trim)
	if r.BytesPerSender > 0 {
		fmt.Fprintf(w, "%s each ===\n\n", units.ByteSize(r.BytesPerSender))
	} else {
		fmt.Fprintf(w, "%.0f s ===\n\n", r.DurationS)
	}
	fmt.Fprintf(w, "Flows (goodput: payload acknowledged over the flow's FCT; cwnd, credit: means of the samples)\n")
	fmt.Fprintf(w, "  %-6s %-32s %8s %9s %8s %6s %6s %6s %6s %6s %4s %6s\n",
		"flow", "path", "FCT", "MB", "Mbit/s", "share", "cwnd", "credit", "retx", "trimNK", "RTO", "verify")
	fmt.Fprintf(w, "  %-6s %-32s %8s %9s %8s %6s %6s %6s\n", "", "", "", "", "", "", "KB", "KB")
	for i := range r.Flows {
		f := &r.Flows[i]
		path := fmt.Sprintf("%s PDC %#x job %d -> r", f.Src, f.PDC, f.JobID)
		cwnd, credit := "-", "-"
		if f.CwndMeanBytes > 0 {
			cwnd = fmt.Sprintf("%.1f", f.CwndMeanBytes/1024)
		}
		if f.CreditMeanBytes != 0 {
			credit = fmt.Sprintf("%.1f", f.CreditMeanBytes/1024)
		}
		verify := "ok"
		if f.Received.VerifyErrors > 0 || f.Received.MessageBytes != f.BytesAcked {
			verify = fmt.Sprintf("%d bad", f.Received.VerifyErrors)
			if f.Received.MessageBytes != f.BytesAcked {
				verify = fmt.Sprintf("rx %s MB", mb(f.Received.MessageBytes))
			}
		}
		line := fmt.Sprintf("  %-6s %-32s %8s %9s %8s %6s %6s %6s %6d %6d %4d %6s", f.Label(), path, shortDur(durationS(f.FCTS)), mb(f.BytesAcked),
			mbits(f.GoodputBps), pct(f.Share), cwnd, credit, f.Counters.Retransmits, trimNACKs(f.Counters.NacksReceived), f.Counters.Timeouts, verify)
		if f.Error != "" {
			line += "  failed: " + f.Error
		}
		fmt.Fprintln(w, line)
	}
	var bytes uint64
	for i := range r.Flows {
		bytes += r.Flows[i].BytesAcked
	}
	fmt.Fprintf(w, "  %-6s %-32s %8s %9s %8s\n", "all", "(all payload / tail FCT)", shortDur(durationS(r.TrafficS)), mb(bytes), mbits(r.GoodputBps))
	fmt.Fprintf(w, "  Tail FCT %s = %.3f x ideal %s: all %s MB at the port's payload capacity %s Mbit/s (%s of %s: %d KiB messages in packets of %d B, PDS header %d B)\n",
		shortDur(durationS(r.TrafficS)), r.TailOverIdeal, shortDur(durationS(r.IdealS)), mb(bytes), mbits(r.PayloadFraction*float64(r.Rate)),
		pct(r.PayloadFraction), r.Rate, r.MessageBytes>>10, r.MTU, uetRequestLen(r.CC))
	if len(r.Flows) > 1 {
		fmt.Fprintf(w, "  Jain fairness: %.3f over the flows' goodputs\n", r.Jain)
	}
	fmt.Fprintf(w, "  Link utilization: %s of %s over the tail FCT (class 3 dequeued, L2 bytes, resent packets included)\n", pct(r.Utilization), r.Rate)
	renderHostLost(w, &r.HostLost)
	if r.Report != nil && r.TailOverIdealNet > 0 {
		fmt.Fprintf(w, "        tail FCT %.3f x (the ideal + the host's %s)\n", r.TailOverIdealNet, shortDur(durationS(r.StarvedS)))
	}
	fmt.Fprintln(w)

	t, rc := &r.Transport, &r.Receiver
	fmt.Fprintf(w, "UET transport (the senders' endpoints summed, then the receiver's)\n")
	fmt.Fprintf(w, "  senders   retransmitted %d: %d trim NACKs, %d losses inferred by SACK, %d probes, %d RTOs; NACKs received: %s\n",
		t.Retransmits, t.TrimNACKs, t.InferredLosses, t.Probes, t.Timeouts, counts(t.NACKs))
	fmt.Fprintf(w, "            ECN echoes %d (ACKs with M), PDC errors %d, send errors %d\n", t.ECNEchoes, t.PDCErrors, t.SendErrors)
	fmt.Fprintf(w, "  receiver  %d messages (%s MB) placed and verified, %d verify errors, %d duplicates; %d CE, %d trimmed received; NACKs sent: %s\n",
		rc.MessagesReceived, mb(rc.MessageBytesReceived), rc.VerifyErrors, rc.Duplicates, rc.CEReceived, rc.TrimmedReceived, counts(rc.NacksSent))
	if n := &t.NSCC; n.Acks > 0 {
		fmt.Fprintf(w, "  NSCC      %d ACKs: %d fair, %d proportional, %d fast increase, %d ECN below target (no change), %d ECN above target;\n",
			n.Acks, n.FairAcks, n.ProportionalAcks, n.FastIncreaseAcks, n.ECNBelowTargetAcks, n.ECNAboveTargetAcks)
		fmt.Fprintf(w, "            %d multiplicative decreases, %d quick adapts, %d NACKs (%d cut cwnd), %d losses\n",
			n.Decreases, n.QuickAdapts, n.Nacks, n.NackDecreases, n.Losses)
	}
	if p := r.Pacer; p != nil {
		cr := &t.Credit
		fmt.Fprintf(w, "  RCCC      pacer at r: %d grants (%s MB), %d slow pulls (%s MB), %d targets (%d stale); %d grants caught up late, %s of its schedule lost\n",
			p.Grants, mb(p.GrantedBytes), p.SlowPulls, mb(p.SlowPullBytes), p.Targets, p.StaleTargets, p.CaughtUp, shortDur(p.Lost))
		fmt.Fprintf(w, "            senders: sent %s MB on credit, %s MB of it speculative (%s MB left unused); credit taken %s MB (%s MB clamped at MaxWnd), %d credit requests, %d overdrawn\n",
			mb(cr.SentBytes), mb(cr.SpeculativeBytes), mb(cr.UnusedSpeculative), mb(cr.CreditBytes), mb(cr.ClampedBytes), t.CreditRequests, cr.Overdrawn)
	}
	fmt.Fprintf(w, "  host      sockets' receive-buffer drops: %d at the receiver, %d at the senders; send errors %d\n",
		r.RecvSocket.RecvBufferDrops, r.SendSocket.RecvBufferDrops, r.RecvSocket.SendErrors+r.SendSocket.SendErrors)
	fmt.Fprintln(w)

	renderClass(w, classView{c: &r.Class, cc: &r.ClassConfig, markFraction: r.MarkFraction, p50: r.SojournP50, p99: r.SojournP99,
		invariant: r.Invariant, qd: r.Qdisc, dev: r.Port.Dev, other: r.OtherPackets, unaccounted: r.Unaccounted,
		notECTNote: "(UET data goes ECT(0): something else used DSCP 26)"})
	if r.ControlPackets > 0 {
		fmt.Fprintf(w, "  control    %d pkt in class 6 (DSCP 48, strict): the senders' CTRL packets to r, ACK requests (probes) and credit requests\n", r.ControlPackets)
	}
	if tc := r.TrimClass; tc != nil {
		fmt.Fprintf(w, "  trim class %d %q: took in %d trimmed packets, dequeued %d, dropped %d, backlog peak %sKB\n",
			r.ClassConfig.TrimClass, tc.Name, tc.TrimInPackets, tc.DequeuedPackets, tc.DroppedPackets(), kb(tc.MaxBacklogBytes))
	}
	if q := &r.Queue; q.Samples > 0 {
		fmt.Fprintf(w, "  backlog    over the run (%d samples, every %s): p50 %sKB  p99 %sKB  mean %sKB  max %sKB\n",
			q.Samples, shortDur(durationS(r.Series.PeriodS)), kb(q.P50Bytes), kb(q.P99Bytes), kb(uint64(q.MeanBytes)), kb(q.MaxBytes))
		fmt.Fprintf(w, "             below min_th %s of the time, between min_th and max_th %s, above max_th %s\n", pct(q.Below), pct(q.In), pct(q.Above))
	}
	fmt.Fprintln(w)
	if len(r.Curve) > 0 {
		renderCurve(w, r.Curve, &r.ClassConfig)
		if r.Trim && trimmedRowsOff(r.Curve, &r.ClassConfig, r.MTU+14) {
			fmt.Fprintf(w, "  (the bins within a packet of the %sKB buffer are mostly packets the port trimmed, which it does not mark)\n", kb(uint64(r.ClassConfig.LimitBytes)))
		}
	}
	renderChecks(w, r.checks(), r.hints())
}
