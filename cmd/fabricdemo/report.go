package main

// The pure part of the demo: interval arithmetic on port counters, iperf3
// JSON, fairness, the marking-curve table and the text rendering. Nothing
// here needs root, namespaces or a kernel, so it is unit-tested directly.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Sample is one line of the live view: what class 3 did during one interval.
type Sample struct {
	T               float64       `json:"t_s"` // end of the interval, seconds since the first flow started
	Flows           int           `json:"flows"`
	DequeueBps      float64       `json:"dequeue_bps"`
	Utilization     float64       `json:"utilization"` // DequeueBps / port rate
	ECTArrivals     uint64        `json:"ect_arrivals"`
	CEMarks         uint64        `json:"ce_marks"`
	CEPerSec        float64       `json:"ce_per_s"`
	MarkFraction    float64       `json:"mark_fraction"` // CEMarks / ECTArrivals, 0 without ECT arrivals
	BacklogBytes    uint64        `json:"backlog_bytes"`
	MaxBacklogBytes uint64        `json:"max_backlog_bytes"` // peak since the port was attached
	SojournSamples  uint64        `json:"sojourn_samples"`
	SojournP50      time.Duration `json:"sojourn_p50_ns"`
	SojournP99      time.Duration `json:"sojourn_p99_ns"`
	Drops           uint64        `json:"drops"`
	PPFCStops       uint64        `json:"ppfc_stops"` // PPFC stops the port sent
}

// histDelta is the histogram of the samples taken between prev and cur. A
// bucket that went backwards (counters reset) counts from zero.
func histDelta(prev, cur *qdisc.SojournHistogram) qdisc.SojournHistogram {
	var d qdisc.SojournHistogram
	for b := range cur {
		if cur[b] >= prev[b] {
			d[b] = cur[b] - prev[b]
		} else {
			d[b] = cur[b]
		}
	}
	return d
}

// sub is a-b for monotonic counters, 0 if they went backwards.
func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// interval computes one live-view sample from two snapshots of a class.
func interval(prev, cur *qdisc.ClassStats, dt time.Duration, rate units.Rate) Sample {
	s := Sample{
		BacklogBytes:    cur.BacklogBytes,
		MaxBacklogBytes: cur.MaxBacklogBytes,
		ECTArrivals:     sub(cur.ArrivedECT0+cur.ArrivedECT1, prev.ArrivedECT0+prev.ArrivedECT1),
		CEMarks:         sub(cur.CEMarked(), prev.CEMarked()),
		Drops:           sub(cur.DroppedPackets(), prev.DroppedPackets()),
		PPFCStops:       sub(cur.PPFCStopsSent, prev.PPFCStopsSent),
		SojournSamples:  sub(cur.SojournSamples, prev.SojournSamples),
	}
	if sec := dt.Seconds(); sec > 0 {
		s.DequeueBps = float64(sub(cur.DequeuedBytes, prev.DequeuedBytes)) * 8 / sec
		s.CEPerSec = float64(s.CEMarks) / sec
	}
	if rate > 0 {
		s.Utilization = s.DequeueBps / float64(rate)
	}
	if s.ECTArrivals > 0 {
		s.MarkFraction = float64(s.CEMarks) / float64(s.ECTArrivals)
	}
	h := histDelta(&prev.Sojourn, &cur.Sojourn)
	s.SojournP50, s.SojournP99 = quantile(&h, 0.5), quantile(&h, 0.99)
	return s
}

// quantile estimates the q-quantile of a log2 sojourn histogram by
// interpolating inside the bucket it falls in, geometrically as the buckets
// are (bucket b holds [2^b, 2^(b+1)) ns). qdisc's Quantile returns the
// bucket's upper edge, a bound that moves in factors of two; this moves
// smoothly, which reads better second by second.
func quantile(h *qdisc.SojournHistogram, q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := max(q*float64(n), 1)
	var seen float64
	for b, c := range h {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			frac := (rank - seen) / float64(c)
			if b == 0 {
				return time.Duration(2 * frac)
			}
			return time.Duration(math.Exp2(float64(b) + frac))
		}
		seen += float64(c)
	}
	return time.Duration(math.Exp2(float64(len(h))))
}

// markProb is the configured probability that an ECN-capable packet finding
// backlog bytes queued is marked (the curve the BPF program implements).
func markProb(cc *qdisc.ClassConfig, backlog uint64) float64 {
	p, _ := cc.CEProbability(backlog)
	return p
}

// CurveRow compares one backlog bin of the observed marking curve with the
// configured curve.
type CurveRow struct {
	LoBytes  uint64  `json:"lo_bytes"`
	HiBytes  uint64  `json:"hi_bytes"` // exclusive
	Arrivals uint64  `json:"ect_arrivals"`
	Marks    uint64  `json:"ce_marks"`
	Observed float64 `json:"observed"`
	// The configured probability ranges over [ConfLo, ConfHi] inside the
	// bin; the observed fraction depends on where in it the arrivals fell.
	ConfLo float64 `json:"configured_lo"`
	ConfHi float64 `json:"configured_hi"`
	// Match: Observed is inside the configured range, give or take 3
	// standard deviations of a binomial sample of Arrivals packets.
	Match bool `json:"match"`
}

// curveRows builds the table rows of the bins that saw ECN-capable arrivals.
func curveRows(c *qdisc.MarkingCurve, cc *qdisc.ClassConfig) []CurveRow {
	bin := c.BinBytes
	if bin == 0 {
		bin = uint64(cc.LimitBytes) / qdisc.CurveBins
	}
	var rows []CurveRow
	for b := range qdisc.CurveBins {
		if c.Arrivals[b] == 0 {
			continue
		}
		r := CurveRow{LoBytes: uint64(b) * bin, HiBytes: uint64(b+1) * bin, Arrivals: c.Arrivals[b], Marks: c.Marks[b]}
		if b == qdisc.CurveBins-1 { // the last bin also holds everything above
			r.HiBytes = max(r.HiBytes, uint64(cc.LimitBytes))
		}
		r.Observed = c.Fraction(b)
		r.ConfLo = markProb(cc, r.LoBytes)
		r.ConfHi = r.ConfLo
		// The curve is monotonic: its maximum in the bin is at the
		// top, except that it jumps to 1 at max_th.
		r.ConfHi = max(r.ConfHi, markProb(cc, r.HiBytes-1))
		n := float64(r.Arrivals)
		tol := func(p float64) float64 { return 3*math.Sqrt(p*(1-p)/n) + 0.5/n }
		r.Match = r.Observed >= r.ConfLo-tol(r.ConfLo) && r.Observed <= r.ConfHi+tol(r.ConfHi)
		rows = append(rows, r)
	}
	return rows
}

// iperfResult is the part of `iperf3 -c ... -J` the demo reads.
type iperfResult struct {
	Error     string `json:"error"`
	Intervals []struct {
		Sum iperfSum `json:"sum"`
	} `json:"intervals"`
	End struct {
		SumSent            iperfSum `json:"sum_sent"`
		SumReceived        iperfSum `json:"sum_received"`
		SenderCongestion   string   `json:"sender_tcp_congestion"`
		ReceiverCongestion string   `json:"receiver_tcp_congestion"`
	} `json:"end"`
}

type iperfSum struct {
	Start       float64 `json:"start"`
	End         float64 `json:"end"`
	Seconds     float64 `json:"seconds"`
	Bytes       uint64  `json:"bytes"`
	BitsPerSec  float64 `json:"bits_per_second"`
	Retransmits uint64  `json:"retransmits"`
}

func parseIperf(b []byte) (*iperfResult, error) {
	var r iperfResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("iperf3 -J output: %w", err)
	}
	return &r, nil
}

// FlowResult is one iperf3 flow in the summary.
type FlowResult struct {
	Sender        string  `json:"sender"`
	Src           string  `json:"src"`
	Dst           string  `json:"dst"`
	Port          int     `json:"port"`
	StartS        float64 `json:"start_s"` // when it started, seconds after the first flow
	Seconds       float64 `json:"seconds"` // how long the receiver counted
	GoodputBps    float64 `json:"goodput_bps"`
	ReceivedBytes uint64  `json:"received_bytes"`
	Retransmits   uint64  `json:"retransmits"`
	Congestion    string  `json:"congestion_control,omitempty"`
	// WindowBps is the sender-side rate while all flows were active.
	WindowBps float64 `json:"window_bps,omitempty"`
	Error     string  `json:"error,omitempty"`

	intervals []iperfSum
}

// windowRate is the flow's rate over the iperf3 intervals that lie inside
// [from, to] (seconds since the first flow), or false if none do.
func (f *FlowResult) windowRate(from, to float64) (float64, bool) {
	const slack = 0.25 // process start vs. test start
	var bytes uint64
	var secs float64
	for _, iv := range f.intervals {
		a, b := f.StartS+iv.Start, f.StartS+iv.End
		if a >= from-slack && b <= to+slack {
			bytes += iv.Bytes
			secs += iv.Seconds
		}
	}
	if secs < 0.5 {
		return 0, false
	}
	return float64(bytes) * 8 / secs, true
}

// listeningPorts reads /proc/net/tcp{,6} text and returns the local ports in
// LISTEN state.
func listeningPorts(text string) map[int]bool {
	ports := map[int]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[3] != "0A" { // TCP_LISTEN
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		if p, err := strconv.ParseUint(f[1][i+1:], 16, 16); err == nil {
			ports[int(p)] = true
		}
	}
	return ports
}

// Summary is the end-of-run report, also written by -json.
type Summary struct {
	Senders     int        `json:"senders"`
	Rate        units.Rate `json:"rate"`
	DurationS   float64    `json:"duration_s"`
	StaggerS    float64    `json:"stagger_s"`
	Kernel      string     `json:"kernel"`
	Port        qdisc.Info `json:"port"`
	Interrupted bool       `json:"interrupted,omitempty"`
	Scale

	Flows         []FlowResult         `json:"flows"`
	GoodputBps    float64              `json:"goodput_bps"`
	Utilization   float64              `json:"utilization"` // class 3 dequeued bits / (rate · traffic time)
	HostLost                           // the host's part over the traffic (hostlost.go)
	Jain          float64              `json:"jain"` // over each flow's whole-run goodput
	JainWindow    float64              `json:"jain_all_active,omitempty"`
	WindowFromS   float64              `json:"all_active_from_s,omitempty"`
	WindowToS     float64              `json:"all_active_to_s,omitempty"`
	TrafficS      float64              `json:"traffic_s"`
	ClassConfig   qdisc.ClassConfig    `json:"class3_config"`
	Class         qdisc.ClassStats     `json:"class3"`
	MarkFraction  float64              `json:"mark_fraction"`
	SojournP50    time.Duration        `json:"sojourn_p50_ns"`
	SojournP99    time.Duration        `json:"sojourn_p99_ns"`
	Curve         []CurveRow           `json:"curve"`
	Invariant     string               `json:"invariant_error,omitempty"` // "" when it holds
	Qdisc         *qdisc.QdiscCounters `json:"kernel_qdisc,omitempty"`
	OtherPackets  uint64               `json:"other_class_packets"` // enqueued in classes other than 3
	Unaccounted   uint64               `json:"unaccounted_packets"`
	Samples       []Sample             `json:"samples"`
	FlowsWithErrs int                  `json:"flows_failed"`
}

// finish fills the derived fields from the flows and the class counters.
func (s *Summary) finish(st *qdisc.Stats, trafficDequeuedBytes uint64) {
	s.Class = st.Classes[qdisc.ClassRoCE]
	c := &s.Class
	var goodputs []float64
	for i := range s.Flows {
		f := &s.Flows[i]
		if f.Error != "" {
			s.FlowsWithErrs++
			continue
		}
		if s.DurationS > 0 {
			s.GoodputBps += float64(f.ReceivedBytes) * 8 / s.DurationS
		}
		goodputs = append(goodputs, f.GoodputBps)
	}
	s.Jain = stats.Jain(goodputs)
	if s.TrafficS > 0 && s.Rate > 0 {
		s.Utilization = float64(trafficDequeuedBytes) * 8 / s.TrafficS / float64(s.Rate)
	}
	// Fairness while everyone competed: from the last start to the end.
	if len(s.Flows) > 1 && s.FlowsWithErrs == 0 {
		from, to := s.Flows[len(s.Flows)-1].StartS, s.DurationS
		var rates []float64
		for i := range s.Flows {
			r, ok := s.Flows[i].windowRate(from, to)
			if !ok {
				rates = nil
				break
			}
			s.Flows[i].WindowBps = r
			rates = append(rates, r)
		}
		if rates != nil {
			s.JainWindow, s.WindowFromS, s.WindowToS = stats.Jain(rates), from, to
		}
	}
	if ect := c.ArrivedECT0 + c.ArrivedECT1; ect > 0 {
		s.MarkFraction = float64(c.CEMarked()) / float64(ect)
	}
	s.SojournP50, s.SojournP99 = quantile(&c.Sojourn, 0.5), quantile(&c.Sojourn, 0.99)
	s.Curve = curveRows(&c.Curve, &s.ClassConfig)
	if err := c.CheckInvariant(); err != nil {
		s.Invariant = err.Error()
	}
	for i := range st.Classes {
		if i != int(qdisc.ClassRoCE) {
			s.OtherPackets += st.Classes[i].EnqueuedPackets
		}
	}
	s.Unaccounted = st.Port.UnaccountedPackets
}

// ---- text rendering ----

// kb prints bytes in KB (1024, as tc): "50", "62.4".
func kb(b uint64) string {
	if b%1024 == 0 {
		return strconv.FormatUint(b/1024, 10)
	}
	return fmt.Sprintf("%.1f", float64(b)/1024)
}

func mbits(bps float64) string { return fmt.Sprintf("%.1f", bps/1e6) }

func pct(f float64) string {
	switch {
	case f == 0:
		return "0%"
	case f < 0.001:
		return fmt.Sprintf("%.3f%%", f*100)
	case f < 0.1:
		return fmt.Sprintf("%.2f%%", f*100)
	}
	return fmt.Sprintf("%.1f%%", f*100)
}

// shortDur prints a duration with three significant digits: 524us, 1.05ms.
func shortDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return trimSig(float64(d)/1e3) + "us"
	case d < time.Second:
		return trimSig(float64(d)/1e6) + "ms"
	}
	return trimSig(d.Seconds()) + "s"
}

func trimSig(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// gaugeWidth is the width of the live queue gauge.
const gaugeWidth = 20

// gauge draws the backlog against the marking thresholds: '#' is filled
// queue, '|' marks min_th, the right edge is max_th (mark everything); '>'
// means the queue is beyond max_th.
func gauge(backlog uint64, cc *qdisc.ClassConfig) string {
	top := uint64(cc.MaxThBytes)
	if cc.ECN != qdisc.ECNWRED || top == 0 {
		top = uint64(cc.LimitBytes)
	}
	cell := func(i int) uint64 { return top * uint64(i) / gaugeWidth }
	minCell := -1
	if cc.ECN != qdisc.ECNOff {
		minCell = int(uint64(cc.MinThBytes) * gaugeWidth / top)
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := range gaugeWidth {
		switch {
		case backlog > cell(i):
			b.WriteByte('#')
		case i == minCell:
			b.WriteByte('|')
		default:
			b.WriteByte('.')
		}
	}
	if backlog > top {
		b.WriteByte('>')
	} else {
		b.WriteByte(']')
	}
	return b.String()
}

// liveHeader heads the live view; its columns line up with renderSample's.
var liveHeader = fmt.Sprintf("%6s %5s %8s %6s %7s %7s %10s %8s  %-22s %11s %6s %6s\n",
	"time", "flows", "Mbit/s", "util", "CE/s", "marked", "queue KB", "peak KB", "queue vs WRED curve", "sojourn p50", "p99", "drops")

// renderSample prints one live-view line.
func renderSample(w io.Writer, s *Sample, cc *qdisc.ClassConfig) {
	marked := "-"
	if s.ECTArrivals > 0 {
		marked = pct(s.MarkFraction)
	}
	fmt.Fprintf(w, "%5.0fs %5d %8s %6s %7.0f %7s %10s %8s  %s %11s %6s %6d\n",
		s.T, s.Flows, mbits(s.DequeueBps), pct(s.Utilization), s.CEPerSec, marked,
		kb(s.BacklogBytes), kb(s.MaxBacklogBytes), gauge(s.BacklogBytes, cc),
		shortDur(s.SojournP50), shortDur(s.SojournP99), s.Drops)
}

// wredText describes a class's marking policy in switch-CLI terms.
func wredText(cc *qdisc.ClassConfig) string {
	switch cc.ECN {
	case qdisc.ECNWRED:
		return fmt.Sprintf("WRED ECN min_th %sKB max_th %sKB max_p %g", kb(uint64(cc.MinThBytes)), kb(uint64(cc.MaxThBytes)), cc.MaxP)
	case qdisc.ECNStep:
		return fmt.Sprintf("step ECN K %sKB", kb(uint64(cc.MinThBytes)))
	case qdisc.ECNOff:
		return "no ECN"
	}
	return cc.ECNText()
}

// renderCurve prints the observed marking curve next to the configured one.
func renderCurve(w io.Writer, rows []CurveRow, cc *qdisc.ClassConfig) {
	fmt.Fprintf(w, "Marking curve: observed vs configured (%s)\n", wredText(cc))
	if len(rows) == 0 {
		fmt.Fprintf(w, "  no ECN-capable packets arrived: is net.ipv4.tcp_ecn=1 on the senders?\n")
		return
	}
	fmt.Fprintf(w, "  %-17s %12s %10s %10s  %s\n", "backlog found KB", "ECT arrivals", "CE marks", "observed", "configured")
	for _, r := range rows {
		conf := pct(r.ConfLo)
		if r.ConfHi != r.ConfLo {
			conf = pct(r.ConfLo) + " - " + pct(r.ConfHi)
		}
		verdict := "ok"
		if !r.Match {
			verdict = "MISMATCH"
		}
		fmt.Fprintf(w, "  %7s - %7s %12d %10d %10s  %-17s %s\n",
			kb(r.LoBytes), kb(r.HiBytes), r.Arrivals, r.Marks, pct(r.Observed), conf, verdict)
	}
}

// renderSummary prints the end-of-run report.
func renderSummary(w io.Writer, s *Summary) {
	c := &s.Class
	fmt.Fprintf(w, "\n=== Summary: %d TCP flow(s) into one %s port, %.0f s ===\n\n", s.Senders, s.Rate, s.DurationS)
	fmt.Fprintf(w, "Flows (iperf3 -J; goodput as counted by the receiver)\n")
	fmt.Fprintf(w, "  %-4s %-34s %-8s %14s %8s  %s\n", "flow", "path", "active", "goodput Mbit/s", "retrans", "cc")
	for i, f := range s.Flows {
		path := fmt.Sprintf("%s %s -> %s:%d", f.Sender, f.Src, f.Dst, f.Port)
		if f.Error != "" {
			fmt.Fprintf(w, "  %-4d %-34s failed: %s\n", i+1, path, f.Error)
			continue
		}
		active := fmt.Sprintf("%.0f-%.0fs", f.StartS, f.StartS+f.Seconds)
		fmt.Fprintf(w, "  %-4d %-34s %-8s %14s %8d  %s\n", i+1, path, active, mbits(f.GoodputBps), f.Retransmits, f.Congestion)
	}
	fmt.Fprintf(w, "  %-4s %-34s %-8s %14s\n", "all", "(all bytes received / run time)", fmt.Sprintf("0-%.0fs", s.DurationS), mbits(s.GoodputBps))
	switch {
	case len(s.Flows) == 1:
		fmt.Fprintf(w, "  Jain fairness: 1 (a single flow)\n")
	case s.WindowToS > s.WindowFromS:
		var shares []string
		for _, f := range s.Flows {
			shares = append(shares, mbits(f.WindowBps))
		}
		fmt.Fprintf(w, "  Jain fairness: %.3f while all %d flows competed (t=%.0f-%.0f s: %s Mbit/s, sender side)\n",
			s.JainWindow, len(s.Flows), s.WindowFromS, s.WindowToS, strings.Join(shares, " / "))
		fmt.Fprintf(w, "                 %.3f over whole-run averages (lower: the flows started at different times)\n", s.Jain)
	default:
		fmt.Fprintf(w, "  Jain fairness: %.3f over whole-run averages\n", s.Jain)
	}
	fmt.Fprintf(w, "  Link utilization: %s of %s (class 3 dequeued, L2 bytes, over the %.2f s from first start to last end)\n",
		pct(s.Utilization), s.Rate, s.TrafficS)
	renderHostLost(w, &s.HostLost)
	fmt.Fprintln(w)

	renderClass(w, classView{c: c, cc: &s.ClassConfig, markFraction: s.MarkFraction, p50: s.SojournP50, p99: s.SojournP99,
		invariant: s.Invariant, qd: s.Qdisc, dev: s.Port.Dev, other: s.OtherPackets, unaccounted: s.Unaccounted,
		notECTNote: "(Linux TCP sends SYNs, pure ACKs and retransmissions as Not-ECT)"})
	fmt.Fprintln(w)
	renderCurve(w, s.Curve, &s.ClassConfig)
	if v := verdict(s); v != "" {
		fmt.Fprintf(w, "\n%s\n", v)
	}
}

// classView is what renderClass prints about class 3.
type classView struct {
	c                  *qdisc.ClassStats
	cc                 *qdisc.ClassConfig
	markFraction       float64
	p50, p99           time.Duration
	invariant          string
	qd                 *qdisc.QdiscCounters
	dev                string
	other, unaccounted uint64
	notECTNote         string // why Not-ECT packets arrived, if some did
}

// renderClass prints class 3's counters: arrivals, marks, drops, the queue,
// the invariant and the kernel qdisc's own counters.
func renderClass(w io.Writer, v classView) {
	c := v.c
	fmt.Fprintf(w, "Class 3 %q (DSCP %d), %s, buffer %sKB\n", c.Name, qdisc.DSCPRoCE, wredText(v.cc), kb(uint64(v.cc.LimitBytes)))
	ect := c.ArrivedECT0 + c.ArrivedECT1
	fmt.Fprintf(w, "  enqueued   %10d pkt %14d bytes  (ECT(0) %d, ECT(1) %d, Not-ECT %d, CE %d)\n",
		c.EnqueuedPackets, c.EnqueuedBytes, c.ArrivedECT0, c.ArrivedECT1, c.ArrivedNotECT, c.ArrivedCE)
	if c.ArrivedNotECT > 0 && ect > 0 {
		fmt.Fprintf(w, "             %s\n", v.notECTNote)
	}
	fmt.Fprintf(w, "  dequeued   %10d pkt %14d bytes\n", c.DequeuedPackets, c.DequeuedBytes)
	fmt.Fprintf(w, "  CE marked  %10d pkt  = %s of %d ECN-capable arrivals\n", c.CEMarked(), pct(v.markFraction), ect)
	fmt.Fprintf(w, "  dropped    %10d pkt  (buffer full: %d, WRED early drop: %d)\n",
		c.DroppedPackets(), c.DroppedLimitPackets, c.DroppedWREDPackets)
	if v.cc.TrimBytes != 0 || c.TrimmedPackets > 0 {
		fmt.Fprintf(w, "  trimmed    %10d pkt  to %d B with DSCP %d into class %d (%d bytes cut off); %d dropped with the trim class full too\n",
			c.TrimmedPackets, v.cc.TrimBytes, v.cc.TrimDSCP, v.cc.TrimClass, c.TrimmedBytes, c.TrimDroppedPackets)
	}
	fmt.Fprintf(w, "  queue      sojourn p50 %s  p99 %s  mean %s;  backlog peak %sKB (%d pkt)\n",
		shortDur(v.p50), shortDur(v.p99), shortDur(c.MeanSojourn()), kb(c.MaxBacklogBytes), c.MaxBacklogPackets)
	switch {
	case v.invariant == "" && c.TrimmedPackets > 0:
		fmt.Fprintf(w, "  invariant  enqueued = dequeued + dropped + trimmed + backlog: %d = %d + %d + %d + %d pkt, bytes too: OK\n",
			c.EnqueuedPackets, c.DequeuedPackets, c.DroppedPackets(), c.TrimmedPackets, c.BacklogPackets)
	case v.invariant == "":
		fmt.Fprintf(w, "  invariant  enqueued = dequeued + dropped + backlog: %d = %d + %d + %d pkt, bytes too: OK\n",
			c.EnqueuedPackets, c.DequeuedPackets, c.DroppedPackets(), c.BacklogPackets)
	default:
		fmt.Fprintf(w, "  invariant  VIOLATED: %s\n", v.invariant)
	}
	if v.qd != nil {
		fmt.Fprintf(w, "  kernel     %s root on %s: sent %d pkt, dropped %d, overlimits %d\n",
			v.qd.Kind, v.dev, v.qd.SentPackets, v.qd.Drops, v.qd.Overlimits)
	}
	if v.other > 0 || v.unaccounted > 0 {
		fmt.Fprintf(w, "  other      %d pkt in other classes (ARP, ...); %d non-IP frame(s) passed unaccounted\n", v.other, v.unaccounted)
	}
}

// verdict is the one-paragraph reading of the run.
func verdict(s *Summary) string {
	c := &s.Class
	mismatch := 0
	for _, r := range s.Curve {
		if !r.Match {
			mismatch++
		}
	}
	var parts []string
	switch {
	case c.EnqueuedPackets == 0:
		return "No packet reached class 3: check that the senders set DSCP 26 (iperf3 -S 0x68)."
	case c.DroppedPackets() == 0 && c.CEMarked() > 0:
		parts = append(parts, fmt.Sprintf("No drops: marking %s of the packets CE was enough to hold the queue at p99 %s"+
			" (peak %sKB of a %sKB buffer) while the port ran at %s.",
			pct(s.MarkFraction), shortDur(s.SojournP99), kb(c.MaxBacklogBytes), kb(uint64(s.ClassConfig.LimitBytes)), pct(s.Utilization)))
	case c.DroppedPackets() > 0:
		parts = append(parts, fmt.Sprintf("%d drops (%d with the buffer full): ECN did not hold the queue below the %sKB limit.",
			c.DroppedPackets(), c.DroppedLimitPackets, kb(uint64(s.ClassConfig.LimitBytes))))
	case c.CEMarked() == 0:
		parts = append(parts, "No CE marks: the queue never reached min_th, or the senders are not ECN-capable.")
	}
	if len(s.Curve) > 0 {
		if mismatch == 0 {
			parts = append(parts, "The observed marking follows the configured WRED curve in every bin.")
		} else {
			parts = append(parts, fmt.Sprintf("%d bin(s) of the observed marking curve are off the configured curve.", mismatch))
		}
	}
	return strings.Join(parts, " ")
}
