package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestPayloadFraction(t *testing.T) {
	for _, tc := range []struct {
		mtu, msg int
		want     float64
	}{
		// 16 packets of 4096: 16·58 header bytes and one RETH.
		{4096, 64 << 10, 65536.0 / (65536 + 16*58 + 16)},
		{1024, 64 << 10, 65536.0 / (65536 + 64*58 + 16)},
		// A short last packet is padded to 4 bytes: 1000 = 1000, 1 -> 4.
		{1024, 1025, 1025.0 / (1025 + 2*58 + 16 + 3)},
		{0, 1, 0},
	} {
		if got := payloadFraction(tc.mtu, tc.msg); !near(got, tc.want, 1e-12) {
			t.Errorf("payloadFraction(%d, %d) = %v, want %v", tc.mtu, tc.msg, got, tc.want)
		}
	}
}

func TestFlowLabel(t *testing.T) {
	f := FlowInfo{Sender: "s2", QP: 1}
	if f.Label() != "s2" {
		t.Errorf("one QP: %q", f.Label())
	}
	f.QP = 3
	if f.Label() != "s2.3" {
		t.Errorf("third QP: %q", f.Label())
	}
}

// fabricatedSeries has two flows sampled every 10 ms for 2 s: flow 0 at
// 600 Mbit/s from 0 s, then 400 from 1 s; flow 1 joins at 1 s at 400
// Mbit/s. The queue walks 0, 10, 20, ... 190 KB and around.
func fabricatedSeries() Series {
	s := Series{PeriodS: 0.01, Flows: make([]FlowSeries, 2)}
	var b0, b1 uint64
	for i := range 201 {
		t := float64(i) / 100
		s.T = append(s.T, t)
		s.BacklogBytes = append(s.BacklogBytes, uint64(i%20)*10*1024)
		rc0, rc1, a1 := 600e6, 0.0, 0.0
		if i > 0 {
			if t <= 1 {
				b0 += 600e6 / 8 / 100
			} else {
				b0 += 400e6 / 8 / 100
				b1 += 400e6 / 8 / 100
			}
		}
		if t >= 1 {
			rc0, rc1, a1 = 420e6, 410e6, 0.1
		}
		s.Flows[0].RcBps = append(s.Flows[0].RcBps, rc0)
		s.Flows[0].RtBps = append(s.Flows[0].RtBps, rc0)
		s.Flows[0].Alpha = append(s.Flows[0].Alpha, 0.2)
		s.Flows[0].RecvBytes = append(s.Flows[0].RecvBytes, b0)
		s.Flows[1].RcBps = append(s.Flows[1].RcBps, rc1)
		s.Flows[1].RtBps = append(s.Flows[1].RtBps, rc1)
		s.Flows[1].Alpha = append(s.Flows[1].Alpha, a1)
		s.Flows[1].RecvBytes = append(s.Flows[1].RecvBytes, b1)
	}
	return s
}

func TestSeriesRates(t *testing.T) {
	s := fabricatedSeries()
	if i := s.indexFrom(1); i != 100 || s.indexFrom(5) != -1 {
		t.Errorf("indexFrom(1) = %d, indexFrom(5) = %d", i, s.indexFrom(5))
	}
	for f, want := range []float64{400e6, 400e6} {
		if r, ok := s.windowRate(f, 1); !ok || !near(r, want, 1) {
			t.Errorf("flow %d: window rate %v %v, want %v", f, r, ok, want)
		}
	}
	if _, ok := s.windowRate(0, 3); ok {
		t.Error("a window after the last sample has a rate")
	}
	// 100 ms windows: flow 0 at 600 until 1 s, then moving to 400.
	ts, bps := s.Goodput(0, 0, 0.1)
	if len(ts) != 200 || ts[0] != 0.01 || !near(bps[0], 600e6, 1) || !near(bps[50], 600e6, 1) || !near(bps[len(bps)-1], 400e6, 1) {
		t.Errorf("flow 0: %d points, first %v at %v, last %v", len(ts), bps[0], ts[0], bps[len(bps)-1])
	}
	// Flow 1 starts at 1 s: no point before, and the first windows do
	// not reach back before the join.
	ts, bps = s.Goodput(1, 1, 0.1)
	if len(ts) == 0 || ts[0] <= 1 || !near(bps[0], 400e6, 1) {
		t.Errorf("flow 1: first point %v at %v", bps, ts)
	}
}

func TestQueueStats(t *testing.T) {
	s := fabricatedSeries()
	cc := qdisc.ClassConfig{MinThBytes: 50 * 1024, MaxThBytes: 150 * 1024}
	q := queueStats(&s, 1, &cc)
	// Samples 100..200: backlogs (i%20)·10 KB, 101 of them.
	if q.Samples != 101 || q.MaxBytes != 190*1024 {
		t.Fatalf("%+v", q)
	}
	if q.P50Bytes != 90*1024 || q.P99Bytes != 190*1024 {
		t.Errorf("p50 %d p99 %d", q.P50Bytes, q.P99Bytes)
	}
	// 0-40 KB below (5 of 20), 160-190 above (4 of 20), the rest in.
	if !near(q.Below, 26.0/101, 1e-9) || !near(q.Above, 20.0/101, 1e-9) || !near(q.Below+q.In+q.Above, 1, 1e-12) {
		t.Errorf("below %v in %v above %v", q.Below, q.In, q.Above)
	}
	if z := queueStats(&s, 9, &cc); z.Samples != 0 {
		t.Errorf("empty window: %+v", z)
	}
}

func TestClassDelta(t *testing.T) {
	prev := qdisc.ClassStats{EnqueuedPackets: 10, DequeuedBytes: 1000, CEMarkedECT0: 2, SojournSamples: 5}
	prev.Sojourn[3] = 5
	prev.Curve.Arrivals[0], prev.Curve.Marks[0] = 7, 1
	cur := prev
	cur.EnqueuedPackets, cur.DequeuedBytes, cur.CEMarkedECT0, cur.SojournSamples = 30, 5000, 6, 25
	cur.BacklogBytes, cur.MaxBacklogBytes = 100, 900
	cur.Sojourn[3], cur.Sojourn[4] = 15, 10
	cur.Curve.Arrivals[0], cur.Curve.Marks[0] = 17, 4
	d := classDelta(&prev, &cur)
	if d.EnqueuedPackets != 20 || d.DequeuedBytes != 4000 || d.CEMarked() != 4 || d.SojournSamples != 20 {
		t.Errorf("counters %+v", d)
	}
	if d.BacklogBytes != 100 || d.MaxBacklogBytes != 900 {
		t.Errorf("backlog is a level, not a counter: %d %d", d.BacklogBytes, d.MaxBacklogBytes)
	}
	if d.Sojourn[3] != 10 || d.Sojourn[4] != 10 || d.Curve.Arrivals[0] != 10 || d.Curve.Marks[0] != 3 {
		t.Errorf("histograms %v %v", d.Sojourn[:5], d.Curve.Arrivals[:1])
	}
}

// fabricatedReport is a finished run of fabricatedSeries: two flows, the
// second joining at 1 s, 2 s in all, on the default class 3.
func fabricatedReport(t *testing.T) *RoCEReport {
	t.Helper()
	cc := qdisc.DefaultConfig(units.Gbit).Classes[qdisc.ClassRoCE]
	s := fabricatedSeries()
	r := &RoCEReport{Senders: 2, QPsPerSender: 1, Rate: units.Gbit, DurationS: 2, StaggerS: 1, MTU: 4096, MessageBytes: 64 << 10,
		Profile: "paper", Stretch: 40, ClassConfig: cc, Series: s, TrafficS: 2, AllJoinedS: 1}
	p := dcqcn.PaperParams(units.Gbit)
	stretchTimers(&p, 40)
	r.Knobs = knobValues(&p)
	for i := range 2 {
		f := RoCEFlow{FlowInfo: FlowInfo{Sender: []string{"s1", "s2"}[i], QP: 1, Src: []string{"198.18.1.2", "198.18.2.2"}[i], Dst: "198.19.0.2",
			SenderQPN: 0x11, ReceiverQPN: uint32(0x11 + i), StartS: float64(i)}}
		f.Receiver.RecvBytes = s.Flows[i].RecvBytes[len(s.T)-1]
		f.Receiver.NPECNMarkedRoCEPackets, f.Receiver.NPCNPSent = 60, 50
		f.Sender.RPCNPHandled = 50
		f.RateCuts = 50
		r.Flows = append(r.Flows, f)
	}
	base := qdisc.ClassStats{Class: 3, Name: "roce"}
	st := qdisc.Stats{Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
	c := &st.Classes[qdisc.ClassRoCE]
	*c = qdisc.ClassStats{Class: 3, Name: "roce", EnqueuedPackets: 60000, EnqueuedBytes: 250_000_000, DequeuedPackets: 60000,
		DequeuedBytes: 250_000_000, ArrivedECT0: 60000, CEMarkedECT0: 120, DequeuedCEPackets: 120, MaxBacklogBytes: 190 * 1024}
	c.Sojourn[19], c.SojournSamples = 60000, 60000
	c.Curve.BinBytes = 64 * 1024
	c.Curve.Arrivals[0], c.Curve.Marks[0] = 40000, 10
	c.Curve.Arrivals[1], c.Curve.Marks[1] = 20000, 110
	joined := qdisc.ClassStats{DequeuedBytes: 125_000_000} // half of the bytes by the join
	r.finish(&st, &base, &joined)
	return r
}

func TestRoCEFinish(t *testing.T) {
	r := fabricatedReport(t)
	if !near(r.JainWindow, 1, 1e-9) || !near(r.Flows[0].Share, 0.5, 1e-9) || !near(r.Flows[1].WindowBps, 400e6, 1) {
		t.Errorf("window: jain %v shares %v %v", r.JainWindow, r.Flows[0].Share, r.Flows[1].Share)
	}
	// Flow 0: 75 MB + 50 MB over 2 s; flow 1: 50 MB over its 1 s.
	if !near(r.Flows[0].GoodputBps, 500e6, 1) || !near(r.Flows[1].GoodputBps, 400e6, 1) || r.Flows[1].ActiveS != 1 {
		t.Errorf("goodput %v %v active %v", r.Flows[0].GoodputBps, r.Flows[1].GoodputBps, r.Flows[1].ActiveS)
	}
	if !near(r.GoodputBps, 700e6, 1) || !near(r.Jain, stats.Jain([]float64{500e6, 400e6}), 1e-12) {
		t.Errorf("total %v jain %v", r.GoodputBps, r.Jain)
	}
	// 250 MB in 2 s on 1 Gbit/s; 125 MB in the second second.
	if !near(r.Utilization, 1, 1e-9) || !near(r.UtilizationWindow, 1, 1e-9) {
		t.Errorf("utilization %v, window %v", r.Utilization, r.UtilizationWindow)
	}
	if !near(r.Flows[0].RcMeanBps, 420e6, 1) || !near(r.Flows[1].RcMeanBps, 410e6, 1) {
		t.Errorf("Rc means %v %v", r.Flows[0].RcMeanBps, r.Flows[1].RcMeanBps)
	}
	l := r.Loop
	if l.NPCNPSent != 100 || l.RPCNPHandled != 100 || l.NPECNMarked != 120 || l.CEMarked != 120 || l.CEDequeued != 120 || l.RateCuts != 100 {
		t.Errorf("loop %+v", l)
	}
	if r.Invariant != "" || r.Queue.Samples != 101 || len(r.Curve) != 2 || !near(r.MarkFraction, 0.002, 1e-12) {
		t.Errorf("invariant %q queue %+v curve %d frac %v", r.Invariant, r.Queue, len(r.Curve), r.MarkFraction)
	}
	for _, c := range r.checks() {
		if !c.OK {
			t.Errorf("check failed: %s", c.Text)
		}
	}

	// Lost CNPs, drops and retransmissions fail their checks.
	r.Flows[0].Sender.RPCNPHandled = 40
	r.Flows[1].Sender.RetransmitPackets = 3
	st := qdisc.Stats{Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
	st.Classes[qdisc.ClassRoCE] = r.Class
	st.Classes[qdisc.ClassRoCE].DroppedLimitPackets = 5
	st.Classes[qdisc.ClassRoCE].EnqueuedPackets += 5
	r.Loop = LoopTotals{}
	r.finish(&st, &qdisc.ClassStats{}, &qdisc.ClassStats{DequeuedBytes: 125_000_000})
	var failed []string
	for _, c := range r.checks() {
		if !c.OK {
			failed = append(failed, c.Text)
		}
	}
	want := []string{"5 packets dropped", "every CNP arrived: np_cnp_sent 100 = rp_cnp_handled 90", "3 packets retransmitted"}
	if len(failed) != len(want) {
		t.Fatalf("failed checks %q, want %d", failed, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(failed[i], want[i]) {
			t.Errorf("check %q, want it to start with %q", failed[i], want[i])
		}
	}
}

func TestHints(t *testing.T) {
	r := fabricatedReport(t)
	if h := r.hints(); len(h) != 0 {
		t.Errorf("a good run has hints: %q", h)
	}
	// mlx5 with α near 0 and the queue over max_th.
	r.Profile = "mlx5"
	for i := range r.Flows {
		r.Flows[i].AlphaMean = 0.003
	}
	r.Queue.Above = 0.5
	h := r.hints()
	if len(h) != 1 || !strings.Contains(h[0], "α averaged 0.003") || !strings.Contains(h[0], "mlx5 samples α once per dce_tcp_rtt") {
		t.Errorf("mlx5 hint: %q", h)
	}
	r.Profile = "paper"
	if h := r.hints(); len(h) != 1 || !strings.HasPrefix(h[0], "α stayed near 0 (mean 0.003)") {
		t.Errorf("α hint: %q", h)
	}
	// The paper's own timers: α fine, the queue still overflows.
	for i := range r.Flows {
		r.Flows[i].AlphaMean = 0.1
	}
	r.Class.DroppedLimitPackets = 100
	r.Loop.Retransmits = 300
	r.UtilizationWindow = 0.9
	if h := r.hints(); len(h) != 1 || !strings.HasPrefix(h[0], "The queue overflowed (100 drops, above max_th in 50.0% of the samples)") ||
		!strings.Contains(h[0], "(5 x 2200 us here)") {
		t.Errorf("overflow hint (and no host hint with drops): %q", h)
	}
	// Rc adds up to the line rate but the port ran short: the hosts.
	r = fabricatedReport(t)
	r.UtilizationWindow = 0.9
	r.Flows[0].RcMeanBps, r.Flows[1].RcMeanBps = 500e6, 500e6
	h = r.hints()
	if len(h) != 1 || !strings.Contains(h[0], "Rc added up to 1000.0 Mbit/s, yet the port ran at 90.0%") {
		t.Errorf("host hint: %q", h)
	}
	r.Flows[1].Sender.RetransmitPackets, r.Loop.Retransmits = 7, 7
	r.RecvSocket.RecvBufferDrops = 2
	h = r.hints()
	if len(h) != 1 || !strings.HasPrefix(h[0], "2 packets were dropped by the hosts' UDP receive buffers") {
		t.Errorf("receive buffer hint: %q", h)
	}
	// Drops only in the second after a join.
	r2 := fabricatedReport(t)
	r2.Class.DroppedLimitPackets = 9
	r2.Live = []RoCESample{{Sample: Sample{T: 1, Drops: 0}}, {Sample: Sample{T: 2, Drops: 9}}}
	if h := r2.hints(); len(h) != 1 || !strings.HasPrefix(h[0], "All 9 drops came in the second after a sender joined") {
		t.Errorf("join hint: %q", h)
	}
	r2.Live = append(r2.Live, RoCESample{Sample: Sample{T: 5, Drops: 1}})
	if h := r2.hints(); len(h) != 1 || !strings.HasPrefix(h[0], "The queue overflowed (9 drops") {
		t.Errorf("a drop away from any join: %q", h)
	}
	var b bytes.Buffer
	renderRoCESummary(&b, r)
	if !strings.Contains(b.String(), "  hint: 2 packets were dropped by the hosts' UDP") || !strings.Contains(b.String(), "\n        ") {
		t.Errorf("hints not printed and wrapped:\n%s", b.String())
	}
}

func TestWrap(t *testing.T) {
	got := wrap("aa bb cc dd", 5)
	if len(got) != 2 || got[0] != "aa bb" || got[1] != "cc dd" {
		t.Errorf("%q", got)
	}
	if got := wrap("", 5); got != nil {
		t.Errorf("%q", got)
	}
}

func TestRoCEFinishOneFlow(t *testing.T) {
	r := fabricatedReport(t)
	r.Flows, r.Series.Flows, r.AllJoinedS = r.Flows[:1], r.Series.Flows[:1], 0
	st := qdisc.Stats{Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
	st.Classes[qdisc.ClassRoCE] = qdisc.ClassStats{EnqueuedPackets: 1, DequeuedPackets: 1, EnqueuedBytes: 250_000_000, DequeuedBytes: 250_000_000}
	r.Loop = LoopTotals{}
	r.finish(&st, &qdisc.ClassStats{}, &qdisc.ClassStats{}) // joined at t=0, nothing sent yet
	if !near(r.UtilizationWindow, 1, 1e-9) || r.JainWindow != 1 || r.Flows[0].Share != 1 {
		t.Errorf("one flow: utilization %v jain %v share %v", r.UtilizationWindow, r.JainWindow, r.Flows[0].Share)
	}
	for _, c := range r.checks() {
		if strings.Contains(c.Text, "queue p50") || strings.Contains(c.Text, "the loop ran") || strings.Contains(c.Text, "Jain") {
			t.Errorf("a check that needs competing flows: %s", c.Text)
		}
	}
}

func TestRenderRoCESummary(t *testing.T) {
	r := fabricatedReport(t)
	var b bytes.Buffer
	renderRoCESummary(&b, r)
	out := b.String()
	for _, want := range []string{
		`=== Summary: 2 RoCEv2 flow(s), DCQCN "paper" profile, into one 1gbit WRED port, 2 s ===`,
		"  s1     198.18.1.2 QP 0x11 -> r QP 0x11      0-2s       500.0     400.0 50.0%    420       50        0       50      0",
		"  s2     198.18.2.2 QP 0x11 -> r QP 0x12      1-2s       400.0     400.0 50.0%    410       50        0       50      0",
		"Jain fairness: 1.000 while all 2 flows competed (t=1-2s), 0.988 over whole-run averages",
		"Link utilization: 100.0% of 1gbit while all competed, 100.0% over the 2.00 s run",
		"payload is 98.6% of the wire bytes at MTU 4096, so goodput tops out near 985.8 Mbit/s",
		"NP  receiver  np_ecn_marked_roce_packets 120 (= CE packets out of the port: OK), np_cnp_sent 100",
		"RP  senders   rp_cnp_handled 100, rp_cnp_ignored 0 (no CNP lost), rate cuts 100",
		"backlog    while all competed (101 samples, every 10.0ms): p50 90KB  p99 190KB",
		"[ok  ] queue p50 90KB (want >= min_th/2 25KB), p99 190KB (want <= max_th 1000KB)",
		"Marking curve: observed vs configured",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MISS") {
		t.Errorf("a check failed:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(l, " ") {
			t.Errorf("trailing space: %q", l)
		}
	}
}

func TestRenderRoCESample(t *testing.T) {
	cc := qdisc.DefaultConfig(units.Gbit).Classes[qdisc.ClassRoCE]
	s := RoCESample{
		Sample: Sample{T: 7, Flows: 2, DequeueBps: 991.3e6, Utilization: 0.9913, CEMarks: 150, BacklogBytes: 100 * 1024,
			SojournP50: 600 * time.Microsecond, SojournP99: 2 * time.Millisecond, PPFCStops: 3},
		CNPsSent: 140,
		PerFlow: []FlowInterval{
			{Active: true, GoodputBps: 490.1e6, RcBps: 512.5e6, Alpha: 0.104, CNPs: 70},
			{Active: false},
			{Active: true, GoodputBps: 480e6, RcBps: 470e6, Alpha: 0.0999, CNPs: 70, Retransmits: 2},
		},
	}
	var b bytes.Buffer
	renderRoCESample(&b, &s, []string{"s1", "s2", "s3"}, &cc)
	want := "   7s s1       490.1    512.5  0.104      70     0 |   991.3  99.1%    150    140       100  [##..................]    600us  2.00ms     0     3\n" +
		"      s3       480.0    470.0  0.100      70     2 |\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	head := strings.Split(roceLiveHeader(), "\n")
	first := strings.Split(want, "\n")[0]
	runes := func(s string) int { return len([]rune(s)) }
	if runes(head[1]) != runes(first) || runes(head[1][:strings.Index(head[1], "|")]) != runes(first[:strings.Index(first, "|")]) {
		t.Errorf("header and line differ:\n%s\n%s", head[1], first)
	}
	// Before the first flow: the port only.
	b.Reset()
	s.PerFlow = []FlowInterval{{}}
	renderRoCESample(&b, &s, []string{"s1"}, &cc)
	if !strings.HasPrefix(b.String(), "   7s -") || !strings.Contains(b.String(), "991.3") {
		t.Errorf("no flow: %q", b.String())
	}
}

func TestWriteRoCEPlot(t *testing.T) {
	r := fabricatedReport(t)
	path := filepath.Join(t.TempDir(), "dcqcn.png")
	if err := writeRoCEPlot(path, r); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 800 {
		t.Errorf("image %v: too small to read", b)
	}
	// The panels get their data: two flows with goodput, Rc and α, the
	// fair-share line, the queue and min_th (max_th is off scale).
	rates, alpha, queue, err := rocePlots(r)
	if err != nil {
		t.Fatal(err)
	}
	if rates.Y.Max < 1000 || alpha.Y.Max != 1.05 || queue.Y.Max < 190 || queue.Y.Max > 500 {
		t.Errorf("y ranges: rates %v alpha %v queue %v", rates.Y.Max, alpha.Y.Max, queue.Y.Max)
	}
	r.Series = Series{PeriodS: 0.01, T: []float64{0}, BacklogBytes: []uint64{0}, Flows: make([]FlowSeries, 2)}
	if err := writeRoCEPlot(filepath.Join(t.TempDir(), "x.png"), r); err == nil {
		t.Error("a plot of one sample")
	}
}

func TestAckTimeout(t *testing.T) {
	for _, tc := range []struct {
		limit units.ByteSize
		rate  units.Rate
		want  time.Duration
	}{
		{2 * units.MiB, units.Gbit, 268435456 * time.Nanosecond},        // 16.8 ms to drain: never below 16
		{2 * units.MiB, 100 * units.Mbit, 1073741824 * time.Nanosecond}, // 168 ms: 18
		{64 * units.KiB, 10 * units.Gbit, 268435456 * time.Nanosecond},  // never below 16
		{1 << 30, units.Mbit, 4096 * time.Nanosecond << 23},             // capped at 23 (34 s)
	} {
		if got := ackTimeoutFor(tc.limit, tc.rate); got != tc.want {
			t.Errorf("ackTimeoutFor(%v, %v) = %v, want %v", tc.limit, tc.rate, got, tc.want)
		}
	}
}

func TestZoomWindow(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		duration, lastJoin time.Duration
		from, to           time.Duration
	}{
		{20 * s, 6 * s, 18500 * time.Millisecond, 19 * s},                // a second before the end
		{8 * s, 6 * s, 6750 * time.Millisecond, 7250 * time.Millisecond}, // centred in a short steady state
		{6 * s, 5500 * time.Millisecond, 0, 0},                           // too short
	} {
		from, to := zoomWindow(tc.duration, tc.lastJoin)
		if from != tc.from || to != tc.to {
			t.Errorf("zoomWindow(%v, %v) = %v, %v; want %v, %v", tc.duration, tc.lastJoin, from, to, tc.from, tc.to)
		}
	}
}

func TestWriteRoCEPlotZoom(t *testing.T) {
	r := fabricatedReport(t)
	// A DCQCN sawtooth: Rc cut by 5 % every 20 ms, climbing back halfway to
	// Rt every 2 ms.
	z := Series{PeriodS: 0.001, Flows: make([]FlowSeries, 2)}
	rc := []float64{400e6, 410e6}
	for j := range 500 {
		z.T = append(z.T, 1.4+float64(j)/1000)
		z.BacklogBytes = append(z.BacklogBytes, uint64(60_000+j%20*3000))
		for i := range 2 {
			rt := 420e6
			if (j+10*i)%20 == 0 {
				rc[i] *= 0.95
			} else if j%2 == 0 {
				rc[i] = (rc[i] + rt) / 2
			}
			z.Flows[i].RcBps = append(z.Flows[i].RcBps, rc[i])
			z.Flows[i].RtBps = append(z.Flows[i].RtBps, rt)
			z.Flows[i].Alpha = append(z.Flows[i].Alpha, 0.1)
			z.Flows[i].RecvBytes = append(z.Flows[i].RecvBytes, 0)
		}
	}
	r.Zoom = z
	zp, err := zoomPlots(r)
	if err != nil || len(zp) != 3 {
		t.Fatalf("zoom panels: %v %d", err, len(zp))
	}
	if zp[0].X.Min != 0 || !near(zp[0].X.Max, 499, 1e-6) || zp[0].Y.Max < 420 || zp[2].X.Label.Text != "ms after t=1.40 s" {
		t.Errorf("zoom axes: x %v-%v, y max %v", zp[0].X.Min, zp[0].X.Max, zp[0].Y.Max)
	}
	path := filepath.Join(t.TempDir(), "zoom.png")
	if err := writeRoCEPlot(path, r); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width < 1700 {
		t.Errorf("a zoomed plot is wider: %v %+v", err, cfg)
	}
}

func TestParseFlagsRoCE(t *testing.T) {
	var out, errb bytes.Buffer
	o, code := parseFlags(nil, &out, &errb)
	if o == nil || code != exitOK {
		t.Fatalf("defaults: %d %s", code, errb.String())
	}
	if o.traffic != trafficRoCE || o.profile != "paper" || o.stretch != 80 || o.rate != 500*units.Mbit || o.mtu != 4096 || o.plotPath != defaultPlot || o.qps != 1 {
		t.Errorf("defaults %+v", o)
	}
	if o.params.RPGTimeReset != 4400*time.Microsecond || o.params.DCETCPRTT != 4400*time.Microsecond ||
		o.params.MinTimeBetweenCNPs != 4*time.Millisecond || o.params.RPGAIRate != 500*units.Kbit || o.params.RateValidation != 75 {
		t.Errorf("paper at 500mbit, x80: %+v", o.params)
	}
	o, _ = parseFlags([]string{"-profile", "mlx5", "-stretch", "1", "-dcqcn", "rpg_ai_rate=2,rpg_time_reset=100", "-dcqcn", "rpg_threshold=3",
		"-qps", "2", "-mtu", "1024", "-wred", "min=20kb,p=0.2", "-plot", "", "-sample", "5ms"}, &out, &errb)
	if o == nil {
		t.Fatalf("flags: %s", errb.String())
	}
	if o.profile != "mlx5" || o.stretch != 1 || o.params.RPGAIRate != 2*units.Mbit || o.params.RPGTimeReset != 100*time.Microsecond ||
		o.params.RPGThreshold != 3 || o.params.DCETCPRTT != time.Microsecond || o.qps != 2 || o.mtu != 1024 || o.plotPath != "" ||
		o.sample != 5*time.Millisecond || o.wred != "min=20kb,p=0.2" {
		t.Errorf("flags %+v", o)
	}
	if o, _ := parseFlags([]string{"-traffic", "tcp"}, &out, &errb); o == nil || o.plotPath != "" {
		t.Errorf("tcp: %+v", o)
	}
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-traffic", "udp"}, `-traffic "udp": want roce, tcp or uet`},
		{[]string{"-traffic", "tcp", "-profile", "mlx5", "-qps", "2"}, "-qps, -profile: only with -traffic roce"},
		{[]string{"-profile", "fast"}, "-profile fast: want lab or mlx5 or paper"},
		{[]string{"-dcqcn", "rpg_ai_rate"}, "want name=value"},
		{[]string{"-dcqcn", "rpg_speed=3"}, `unknown knob "rpg_speed"`},
		{[]string{"-dcqcn", "rpg_ai_rate=5gbit"}, "-dcqcn rpg_ai_rate=5gbit"},
		{[]string{"-wred", "min=2mb"}, "max_th"},
		{[]string{"-wred", "k=1kb"}, `k is a setting of step but class 3 is in wred mode`},
		{[]string{"-wred", "burst=1"}, `unknown key "burst"`},
		{[]string{"-mtu", "9000"}, "-mtu 9000: want 256, 512, 1024, 2048 or 4096"},
		{[]string{"-qps", "0"}, "-qps 0: want 1 to 16"},
		{[]string{"-stretch", "fast"}, "want auto or a factor"},
		{[]string{"-sample", "10us"}, "-sample 10µs: want 1ms to 1s"},
	} {
		errb.Reset()
		o, code := parseFlags(tc.args, &out, &errb)
		if o != nil || code != exitUsage || !strings.Contains(errb.String(), tc.err) {
			t.Errorf("%v: %v %d %q, want an error with %q", tc.args, o, code, errb.String(), tc.err)
		}
	}
}

func TestStretch(t *testing.T) {
	if f := autoStretch("paper", units.Gbit); f != 40 {
		t.Errorf("paper at 1gbit: %v", f)
	}
	if f := autoStretch("mlx5", units.Gbit); f != 25 {
		t.Errorf("mlx5 at 1gbit: %v", f)
	}
	if f := autoStretch("paper", 100*units.Gbit); f != 1 {
		t.Errorf("paper above its reference: %v", f)
	}
	p := dcqcn.MLX5Params(units.Gbit)
	stretchTimers(&p, 25)
	if p.RPGTimeReset != 7500*time.Microsecond || p.DCETCPRTT != 25*time.Microsecond || p.MinTimeBetweenCNPs != 100*time.Microsecond ||
		p.RateReduceMonitorPeriod != 100*time.Microsecond || p.RPGByteReset != 32767 {
		t.Errorf("mlx5 x25: %+v", p)
	}
	p = dcqcn.PaperParams(units.Gbit)
	stretchTimers(&p, 1e4)
	if p.RPGTimeReset != maxTimerKnob || p.DCETCPRTT != maxTimerKnob || p.RateReduceMonitorPeriod != 0 {
		t.Errorf("paper x10000: %+v", p)
	}
	// Past the knobs' range the paper's K > N cannot hold: the error says
	// what to change.
	if _, _, err := demoParams("paper", 10*units.Mbit, 0, nil); err == nil || !strings.Contains(err.Error(), "-stretch") {
		t.Errorf("paper at 10mbit: %v", err)
	}
}

func TestApplyWRED(t *testing.T) {
	cc := qdisc.DefaultConfig(units.Gbit).Classes[qdisc.ClassRoCE]
	if err := applyWRED(&cc, "min=100kb, max=2mb,p=0.2,limit=4mb"); err != nil {
		t.Fatal(err)
	}
	if cc.MinThBytes != 100*units.KiB || cc.MaxThBytes != 2*units.MiB || cc.MaxP != 0.2 || cc.ECN != qdisc.ECNWRED || cc.LimitBytes != 4*units.MiB {
		t.Errorf("%+v", cc)
	}
	for _, bad := range []string{"min", "min=1kb,min=2kb", "p=x", "p=2", "max=1zb", "limit=1kb"} {
		c := cc
		if err := applyWRED(&c, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The counters the summary sums come from agent.Counters by their mlx5
// names; a renamed field would silently read zero.
var _ = agent.Counters{NPCNPSent: 1, NPECNMarkedRoCEPackets: 1, RPCNPHandled: 1, RPCNPIgnored: 1}

func init() {
	// Flag parsing must not depend on the machine's load.
	cpuShare = func() float64 { return 1 }
}

func TestAutoRate(t *testing.T) {
	if autoRate(0.98) != 500*units.Mbit || autoRate(0.6) != 250*units.Mbit {
		t.Errorf("autoRate: %v idle, %v beside a busy core", autoRate(0.98), autoRate(0.6))
	}
}
