package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestUETPayloadFraction(t *testing.T) {
	// 64 KiB in packets of 4096 B of IP: 4012 B of payload each with
	// RUD_REQ (12 B), 4008 with RUD_CC_REQ (16 B); 17 packets either way,
	// each with 14 + 20 + 8 + 44 B of headers and the PDS request.
	for _, tc := range []struct {
		mtu, req, msg int
		want          float64
	}{
		{4096, uet.RequestLen, 64 << 10, 65536.0 / (65536 + 17*(86+12))},
		{4096, uet.RequestCCLen, 64 << 10, 65536.0 / (65536 + 17*(86+16))},
		{4096, uet.RequestLen, 4012, 4012.0 / (4012 + 98)},
		{4096, uet.RequestLen, 4013, 4013.0 / (4013 + 2*98)},
		{80, uet.RequestLen, 1, 0},
		{4096, uet.RequestLen, 0, 0},
	} {
		if got := uetPayloadFraction(tc.mtu, tc.req, tc.msg); !near(got, tc.want, 1e-12) {
			t.Errorf("uetPayloadFraction(%d, %d, %d) = %v, want %v", tc.mtu, tc.req, tc.msg, got, tc.want)
		}
	}
	for m, want := range map[pds.CCMode]int{pds.CCNSCC: 12, pds.CCNone: 12, pds.CCRCCC: 16, pds.CCBoth: 16} {
		if got := uetRequestLen(m); got != want {
			t.Errorf("%s: PDS request %d B, want %d", m, got, want)
		}
	}
}

func TestUETClass(t *testing.T) {
	cc := uetClass(500*units.Mbit, true)
	// One BDP at 1 ms, 500 Mbit/s: 62 500 B; WRED from 0.2 to 0.8 of it.
	if cc.LimitBytes != 62500 || cc.MinThBytes != 12500 || cc.MaxThBytes != 50000 || cc.MaxP != 1 || cc.ECN != qdisc.ECNWRED {
		t.Errorf("class %+v", cc)
	}
	if cc.TrimBytes != qdisc.DefaultTrimBytes || cc.TrimDSCP != qdisc.DefaultTrimDSCP || cc.TrimClass != qdisc.DefaultTrimClass {
		t.Errorf("trim %v %v %v", cc.TrimBytes, cc.TrimDSCP, cc.TrimClass)
	}
	cfg := qdisc.DefaultConfig(500 * units.Mbit)
	cfg.Classes[qdisc.ClassRoCE] = cc
	if err := cfg.Validate(); err != nil {
		t.Errorf("the port refuses the class: %v", err)
	}
	if off := uetClass(250*units.Mbit, false); off.TrimBytes != 0 || off.LimitBytes != 31250 {
		t.Errorf("no trim at 250mbit: %+v", off)
	}
	// -wred applies to it as to the RoCE class.
	if err := applyWRED(&cc, "min=20kb,max=40kb"); err != nil || cc.MinThBytes != 20*units.KiB || cc.TrimBytes == 0 {
		t.Errorf("-wred: %v %+v", err, cc)
	}

	// Only the receiver, behind the port, takes the trim DSCP as its
	// last hop's.
	trim := uetClass(500*units.Mbit, true)
	r := uetEndpointConfig(500*units.Mbit, pds.CCBoth, &trim, true)
	s := uetEndpointConfig(500*units.Mbit, pds.CCBoth, &trim, false)
	if r.TrimLastHopDSCP != uint8(qdisc.DefaultTrimDSCP) || s.TrimLastHopDSCP != 0 || r.TrimDSCP != 0 {
		t.Errorf("trim DSCPs: receiver %d/%d, sender %d", r.TrimLastHopDSCP, r.TrimDSCP, s.TrimLastHopDSCP)
	}
	if r.CC != pds.CCBoth || r.LinkRate != 500*units.Mbit || r.MTU != 4096 || r.BaseRTT != time.Millisecond || !r.Verify || r.RTO != uetRTO {
		t.Errorf("endpoint %+v", r)
	}
	if n := uetEndpointConfig(500*units.Mbit, pds.CCNSCC, &off250, true); n.TrimLastHopDSCP != 0 {
		t.Errorf("no trim, yet the receiver takes DSCP %d as trimmed", n.TrimLastHopDSCP)
	}
}

var off250 = uetClass(250*units.Mbit, false)

func TestUETMessages(t *testing.T) {
	for in, want := range map[units.ByteSize]uint64{0: 0, 1: 1, 64 * units.KiB: 1, 64*units.KiB + 1: 2, 8 * units.MiB: 128} {
		if got := uetMessages(in); got != want {
			t.Errorf("uetMessages(%d) = %d, want %d", in, got, want)
		}
	}
}

// fabricatedUETReport is a finished 2 s run of 3 flows at 500 Mbit/s with
// NSCC and RCCC, trimming: each flow acknowledges 160 Mbit/s, the queue
// walks 0..29 KB, the port trimmed 100 packets, every one NACKed.
func fabricatedUETReport() *UETReport {
	const n = 3
	r := &UETReport{Senders: n, Rate: 500 * units.Mbit, DurationS: 2, MessageBytes: 64 << 10, MTU: 4096, CC: pds.CCBoth, Trim: true,
		BaseRTT: time.Millisecond, ClassConfig: uetClass(500*units.Mbit, true),
		Series: UETSeries{PeriodS: 0.01, Flows: make([]UETFlowSeries, n)}}
	for i := range 201 {
		r.Series.T = append(r.Series.T, float64(i)/100)
		r.Series.BacklogBytes = append(r.Series.BacklogBytes, uint64(i%30)*1024)
		for f := range n {
			fs := &r.Series.Flows[f]
			fs.AckedBytes = append(fs.AckedBytes, uint64(i)*200_000)
			fs.CwndBytes = append(fs.CwndBytes, 40*1024)
			fs.InFlightBytes = append(fs.InFlightBytes, 20*1024)
			fs.CreditBytes = append(fs.CreditBytes, 8*1024)
		}
	}
	trims := []uint64{30, 30, 40}
	for f := range n {
		fl := UETFlow{Sender: []string{"s1", "s2", "s3"}[f], Src: []string{"198.18.1.2", "198.18.2.2", "198.18.3.2"}[f], Dst: "198.19.0.2",
			JobID: uint32(f + 1), PDC: 0x100, FCTS: 2, Messages: 610, BytesAcked: 40_000_000, NSCC: &nscc.Stats{Acks: 1000, Decreases: 2},
			Credit: &pds.CreditInfo{CreditRequests: 1, SenderStats: rccc.SenderStats{CreditBytes: 40_500_000, SentBytes: 41_000_000, SpeculativeBytes: 90_000}},
			Pull:   &rccc.SourceStats{State: rccc.SourceActive, GrantedBytes: 40_500_000}}
		fl.Counters.Retransmits = trims[f]
		fl.Counters.NacksReceived = map[string]uint64{uet.NackTrimmedLastHop.String(): trims[f]}
		fl.Received = UETReceived{Messages: 610, MessageBytes: 40_000_000, Trimmed: trims[f]}
		r.Flows = append(r.Flows, fl)
	}
	r.Pacer = &rccc.PacerStats{Grants: 7500, GrantedBytes: 121_500_000}
	r.Receiver = pds.Counters{MessagesReceived: 3 * 610, MessageBytesReceived: 120_000_000, TrimmedReceived: 100,
		NacksSent: map[string]uint64{uet.NackTrimmedLastHop.String(): 100}}
	return r
}

// fabricatedUETStats are the port before and after fabricatedUETReport's
// run: 30 000 data packets, 100 trimmed into class 7, 50 CTRL packets in
// class 6, 2 ARP in class 0.
func fabricatedUETStats() (base, st qdisc.Stats) {
	base = qdisc.Stats{Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
	st = qdisc.Stats{Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
	c := &st.Classes[qdisc.ClassRoCE]
	*c = qdisc.ClassStats{Class: 3, Name: "uet", EnqueuedPackets: 30000, EnqueuedBytes: 123_000_000, DequeuedPackets: 29900,
		DequeuedBytes: 122_000_000 - 100*128, TrimmedPackets: 100, TrimmedBytes: 1_000_000 - 100*128 + 100*128, TrimmedKeptBytes: 0,
		ArrivedECT0: 30000, CEMarkedECT0: 6300, MaxBacklogBytes: 61 * 1024}
	c.TrimmedBytes = c.EnqueuedBytes - c.DequeuedBytes - 100*128
	c.TrimmedKeptBytes = 100 * 128
	c.Sojourn[18], c.SojournSamples = 29900, 29900
	c.Curve.BinBytes = 62500 / qdisc.CurveBins
	c.Curve.Arrivals[10], c.Curve.Marks[10] = 30000, 6300 // 19.5-21.5 KB: 19-24 %
	tc := &st.Classes[qdisc.DefaultTrimClass]
	*tc = qdisc.ClassStats{Class: qdisc.DefaultTrimClass, Name: "tc7", EnqueuedPackets: 100, DequeuedPackets: 100, TrimInPackets: 100}
	st.Classes[qdisc.ClassCNP].EnqueuedPackets = 50
	st.Classes[0].EnqueuedPackets = 2
	return base, st
}

func TestUETFinish(t *testing.T) {
	r := fabricatedUETReport()
	base, st := fabricatedUETStats()
	r.finish(&st, &base)
	if r.TrafficS != 2 || !near(r.Flows[0].GoodputBps, 160e6, 1) || !near(r.Flows[2].Share, 1.0/3, 1e-12) || !near(r.Jain, 1, 1e-12) {
		t.Errorf("tail %v goodput %v share %v jain %v", r.TrafficS, r.Flows[0].GoodputBps, r.Flows[2].Share, r.Jain)
	}
	pf := uetPayloadFraction(4096, uet.RequestCCLen, 64<<10)
	ideal := 120e6 * 8 / (pf * 500e6)
	if !near(r.PayloadFraction, pf, 1e-12) || !near(r.IdealS, ideal, 1e-9) || !near(r.TailOverIdeal, 2/ideal, 1e-9) {
		t.Errorf("payload %v ideal %v tail/ideal %v; want %v %v", r.PayloadFraction, r.IdealS, r.TailOverIdeal, pf, ideal)
	}
	if !near(r.GoodputBps, 480e6, 1) || !near(r.Utilization, float64(st.Classes[3].DequeuedBytes)*8/2/500e6, 1e-12) {
		t.Errorf("goodput %v utilization %v", r.GoodputBps, r.Utilization)
	}
	if !near(r.Flows[1].CwndMeanBytes, 40*1024, 1e-9) || !near(r.Flows[1].CreditMeanBytes, 8*1024, 1e-9) {
		t.Errorf("means cwnd %v credit %v", r.Flows[1].CwndMeanBytes, r.Flows[1].CreditMeanBytes)
	}
	tr := r.Transport
	if tr.Retransmits != 100 || tr.TrimNACKs != 100 || tr.NACKs[uet.NackTrimmedLastHop.String()] != 100 || tr.NSCC.Acks != 3000 || tr.NSCC.Decreases != 6 ||
		tr.Credit.SentBytes != 123_000_000 || tr.Credit.SpeculativeBytes != 270_000 || tr.CreditRequests != 3 {
		t.Errorf("transport %+v", tr)
	}
	if r.Invariant != "" || r.TrimClass == nil || r.TrimClass.TrimInPackets != 100 || r.ControlPackets != 50 || r.OtherPackets != 2 {
		t.Errorf("invariant %q trim class %+v control %d other %d", r.Invariant, r.TrimClass, r.ControlPackets, r.OtherPackets)
	}
	if !near(r.TrimFraction, 100.0/30000, 1e-12) || !near(r.MarkFraction, 0.21, 1e-12) {
		t.Errorf("trim fraction %v mark fraction %v", r.TrimFraction, r.MarkFraction)
	}
	// Samples over the whole run: 0..29 KB, each 6-7 times.
	if q := r.Queue; q.Samples != 201 || q.MaxBytes != 29*1024 || q.P50Bytes != 14*1024 {
		t.Errorf("queue %+v", q)
	}
	for _, c := range r.checks() {
		if !c.OK {
			t.Errorf("check failed: %s", c.Text)
		}
	}
	if h := r.hints(); len(h) != 0 {
		t.Errorf("hints for a good run: %q", h)
	}
}

func failedChecks(r *UETReport) []string {
	var failed []string
	for _, c := range r.checks() {
		if !c.OK {
			failed = append(failed, c.Text)
		}
	}
	return failed
}

func TestUETChecksFail(t *testing.T) {
	// A verify error, two drops the trim class could not take, an RTO,
	// a trim NACK short, a slow and unfair tail.
	r := fabricatedUETReport()
	base, st := fabricatedUETStats()
	r.Receiver.VerifyErrors = 1
	r.Flows[0].Counters.Timeouts = 1
	r.Flows[1].Counters.NacksReceived[uet.NackTrimmedLastHop.String()] = 29
	r.Flows[2].FCTS = 4
	st.Classes[qdisc.ClassRoCE].TrimDroppedPackets = 2
	st.Classes[qdisc.ClassRoCE].EnqueuedPackets += 2
	r.finish(&st, &base)
	want := []string{"every byte arrived verified", "2 packets dropped at the port", "every trimmed packet NACKed: the port trimmed 100, the receiver saw 100 and sent 100 trim NACKs, the senders got 99",
		"1 RTOs", "tail FCT 4.00s = 2.0", "Jain fairness 0.9"}
	failed := failedChecks(r)
	if len(failed) != len(want) {
		t.Fatalf("failed checks %q, want %d", failed, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(failed[i], want[i]) {
			t.Errorf("check %q, want it to start with %q", failed[i], want[i])
		}
	}
	// The RTO came with drops (the trim class was full): no hint blames
	// the CPU for it.
	if h := strings.Join(r.hints(), " "); strings.Contains(h, "without a drop") {
		t.Errorf("hints %q", h)
	}

	// A trimmed resend of a PSN the receiver had is not NACKed: no miss.
	r = fabricatedUETReport()
	r.Flows[1].Counters.NacksReceived[uet.NackTrimmedLastHop.String()] = 29
	r.Receiver.NacksSent[uet.NackTrimmedLastHop.String()] = 99
	base, st = fabricatedUETStats()
	r.finish(&st, &base)
	if f := failedChecks(r); len(f) != 0 {
		t.Errorf("a trimmed duplicate: failed %q", f)
	}
	if c := r.checks()[2].Text; !strings.HasSuffix(c, "the senders got 99 (1 trimmed copies of PSNs it had: no NACK)") {
		t.Errorf("a trimmed duplicate: %q", c)
	}

	// -bytes: a flow short of its bytes fails the first check.
	r = fabricatedUETReport()
	r.BytesPerSender = 40_000_000
	r.Flows[2].BytesAcked, r.Flows[2].Error = 39_000_000, "not done within -duration 2s"
	base, st = fabricatedUETStats()
	r.finish(&st, &base)
	if f := failedChecks(r); len(f) == 0 || !strings.Contains(f[0], "1 flows failed; 1 flows short of -bytes") {
		t.Errorf("short flow: %q", f)
	}
}

func TestUETHints(t *testing.T) {
	// No CC: the queue at the buffer.
	r := fabricatedUETReport()
	r.CC = pds.CCNone
	for i := range r.Series.BacklogBytes {
		r.Series.BacklogBytes[i] = 60 * 1024
	}
	base, st := fabricatedUETStats()
	r.finish(&st, &base)
	if f := failedChecks(r); len(f) != 1 || !strings.HasPrefix(f[0], "queue p50 60KB") {
		t.Errorf("no CC: failed %q", f)
	}
	if h := strings.Join(r.hints(), " "); !strings.Contains(h, "-cc none") {
		t.Errorf("no CC: hints %q", h)
	}

	// No CC, the queue below max_th at the samples, but 40 % trimmed.
	r = fabricatedUETReport()
	r.CC = pds.CCNone
	base, st = fabricatedUETStats()
	st.Classes[qdisc.ClassRoCE].TrimmedPackets = 20000
	st.Classes[qdisc.ClassRoCE].EnqueuedPackets += 20000 - 100
	r.Receiver.TrimmedReceived, r.Receiver.NacksSent[uet.NackTrimmedLastHop.String()] = 20000, 19999
	for i, n := range []uint64{6666, 6666, 6667} {
		r.Flows[i].Counters.NacksReceived[uet.NackTrimmedLastHop.String()] = n
	}
	r.finish(&st, &base)
	if f := failedChecks(r); len(f) != 1 || !strings.HasPrefix(f[0], "40.1% of the arrivals trimmed (want <= 33.3%, half the 66.7% that 3 senders") {
		t.Errorf("no CC, 40 %% trimmed: failed %q", f)
	}
	if h := strings.Join(r.hints(), " "); !strings.Contains(h, "-cc none") {
		t.Errorf("no CC, 40 %% trimmed: hints %q", h)
	}

	// A trim NACK lost in a sender's socket buffer.
	r = fabricatedUETReport()
	r.Flows[1].Counters.NacksReceived[uet.NackTrimmedLastHop.String()] = 29
	r.SendSocket.RecvBufferDrops = 3
	base, st = fabricatedUETStats()
	r.finish(&st, &base)
	if h := strings.Join(r.hints(), " "); !strings.Contains(h, "The receiver sent 100 trim NACKs, the senders got 99") ||
		!strings.Contains(h, "receive buffers dropped 3 datagrams") {
		t.Errorf("lost NACK: hints %q", h)
	}

	// No trimming: the drops are said, and how they were recovered.
	r = fabricatedUETReport()
	r.Trim, r.ClassConfig = false, uetClass(500*units.Mbit, false)
	base, st = fabricatedUETStats()
	c := &st.Classes[qdisc.ClassRoCE]
	c.DroppedLimitPackets, c.DroppedLimitBytes = c.TrimmedPackets, c.TrimmedBytes+c.TrimmedKeptBytes
	c.TrimmedPackets, c.TrimmedBytes, c.TrimmedKeptBytes = 0, 0, 0
	st.Classes[qdisc.DefaultTrimClass] = qdisc.ClassStats{}
	for i := range r.Flows {
		r.Flows[i].Counters.NacksReceived = nil
		r.Flows[i].Counters.InferredLosses = r.Flows[i].Counters.Retransmits
	}
	r.Receiver.TrimmedReceived = 0
	r.finish(&st, &base)
	if r.TrimClass != nil || r.Invariant != "" {
		t.Errorf("no trim: trim class %+v, invariant %q", r.TrimClass, r.Invariant)
	}
	if f := failedChecks(r); len(f) != 0 {
		t.Errorf("no trim: failed %q (drops are no check without trimming)", f)
	}
	if h := strings.Join(r.hints(), " "); !strings.Contains(h, "Without trimming the 61.0KB buffer dropped 100 packets") || !strings.Contains(h, "100 inferred losses") {
		t.Errorf("no trim: hints %q", h)
	}
}

func TestRenderUETSample(t *testing.T) {
	cc := uetClass(500*units.Mbit, true)
	credit := 6 * 1024
	s := UETSample{Sample: Sample{T: 3, DequeueBps: 460e6, Utilization: 0.92, CEMarks: 4000, BacklogBytes: 20 * 1024,
		SojournP50: 300 * time.Microsecond, SojournP99: time.Millisecond}, Trims: 500,
		PerFlow: []UETFlowInterval{
			{GoodputBps: 150e6, CwndBytes: 60 * 1024, InFlightBytes: 32 * 1024, CreditBytes: &credit, State: "READY", RxState: "active", Retransmits: 7, TrimNACKs: 7},
			{Done: true},
			{GoodputBps: 140e6, CwndBytes: noWindow, InFlightBytes: 4096, State: "ACTIVE"},
		}}
	var b bytes.Buffer
	renderUETSample(&b, &s, []string{"s1", "s2", "s3"}, &cc)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a line per flow still sending:\n%s", b.String())
	}
	for _, want := range []string{"3s", "s1", "150.0", "60", "32", "6.0", "READY", "active", "460.0", "92.0%", "4000", "500", "[######", "300us", "1.00ms"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("first line lacks %q: %s", want, lines[0])
		}
	}
	// No window, no credit, no receiver state: dashes; no port columns.
	if f := strings.Fields(lines[1]); len(f) != 11 || f[0] != "s3" || f[2] != "-" || f[4] != "-" || f[6] != "-" || f[10] != "|" {
		t.Errorf("second line %q", lines[1])
	}
	// The columns line up with the header's.
	h := strings.Split(uetLiveHeader(), "\n")
	if i, j := strings.Index(h[1], "|"), strings.Index(lines[0], "|"); i != j || i < 0 {
		t.Errorf("'|' at %d in the header, %d in the line:\n%s\n%s", i, j, h[1], lines[0])
	}
	s.Final, s.T = true, 10.034
	for i := range s.PerFlow {
		s.PerFlow[i].Done = true
	}
	b.Reset()
	renderUETSample(&b, &s, []string{"s1", "s2", "s3"}, &cc)
	if !strings.HasPrefix(strings.TrimSpace(b.String()), "10.03s -") {
		t.Errorf("the last line, every flow done: %q", b.String())
	}
}

func TestRenderUETSummary(t *testing.T) {
	r := fabricatedUETReport()
	base, st := fabricatedUETStats()
	r.finish(&st, &base)
	var b bytes.Buffer
	renderUETSummary(&b, r)
	out := b.String()
	for _, want := range []string{
		"=== Summary: 3 UET flows, CC both, into one 500mbit port that trims, 2 s ===",
		"s1     198.18.1.2 PDC 0x100 job 1 -> r",
		"Tail FCT 2.00s = 1.0",
		"PDS header 16 B",
		"Jain fairness: 1.000",
		"retransmitted 100: 100 trim NACKs",
		"NACKs received: TRIMMED_LASTHOP 100",
		"1830 messages (120.0 MB) placed and verified, 0 verify errors",
		"NSCC      3000 ACKs",
		"RCCC      pacer at r: 7500 grants (121.5 MB)",
		"host      sockets' receive-buffer drops: 0 at the receiver, 0 at the senders",
		"senders: sent 123.0 MB on credit, 0.3 MB of it speculative",
		"trimmed           100 pkt  to 128 B with DSCP 9 into class 7",
		"invariant  enqueued = dequeued + dropped + trimmed + backlog: 30000 = 29900 + 0 + 100 + 0 pkt",
		"control    50 pkt in class 6",
		"trim class 7 \"tc7\": took in 100 trimmed packets",
		"backlog    over the run (201 samples, every 10.0ms): p50 14KB",
		"[ok  ] every byte arrived verified",
		"[ok  ] queue p50 14KB, p99 29KB of a 61.0KB buffer",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MISS") || strings.Contains(out, "hint:") {
		t.Errorf("a good run with a MISS or a hint:\n%s", out)
	}
	// -json: the report marshals, the modes by name.
	j, err := json.Marshal(r)
	if err != nil || !bytes.Contains(j, []byte(`"cc":"both"`)) || !bytes.Contains(j, []byte(`"tail_fct_over_ideal":1.01`)) {
		t.Errorf("json: %v %.300s", err, j)
	}
}

func TestTrimmedRowsOff(t *testing.T) {
	cc := uetClass(500*units.Mbit, true)
	rows := []CurveRow{{LoBytes: 0, HiBytes: 1000, Match: true}, {LoBytes: 58000, HiBytes: 60000, Match: false}}
	if !trimmedRowsOff(rows, &cc, 4110) {
		t.Error("a mismatch within a packet of the buffer is the trim's")
	}
	rows[1].LoBytes, rows[1].HiBytes = 20000, 22000
	if trimmedRowsOff(rows, &cc, 4110) {
		t.Error("a mismatch mid-curve is no trim's")
	}
}

func TestWriteUETPlot(t *testing.T) {
	r := fabricatedUETReport()
	base, st := fabricatedUETStats()
	r.finish(&st, &base)
	for _, mode := range []pds.CCMode{pds.CCBoth, pds.CCRCCC, pds.CCNone} {
		r.CC = mode
		for i := range r.Series.Flows {
			fs := &r.Series.Flows[i]
			for j := range fs.CwndBytes {
				if mode != pds.CCBoth {
					fs.CwndBytes[j] = noWindow
				}
			}
			if mode == pds.CCNone {
				fs.CreditBytes = nil
			}
		}
		path := filepath.Join(t.TempDir(), "uet.png")
		if err := writeUETPlot(path, r); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil || cfg.Width < 1200 || cfg.Height < 900 {
			t.Errorf("%s: %v %+v", mode, err, cfg)
		}
	}
	r.Series.T = r.Series.T[:1]
	if err := writeUETPlot(filepath.Join(t.TempDir(), "x.png"), r); err == nil {
		t.Error("a plot of one sample")
	}
}

func TestUETSince(t *testing.T) {
	prev := uetPoint{t: time.Second, flows: []uetFlowPoint{{acked: 1000, retx: 5, trimNACK: 4}, {acked: 0, done: true}}}
	cur := uetPoint{t: 2 * time.Second, flows: []uetFlowPoint{
		{acked: 1000 + 20_000_000, retx: 8, trimNACK: 6, timeouts: 1, ccc: cccView{ok: true, state: "READY", cwnd: 50000, inFlight: 9000, credit: -300, hasCred: true}},
		{acked: 0, done: true},
	}}
	iv := cur.since(&prev)
	a := iv[0]
	if !near(a.GoodputBps, 160e6, 1) || a.Retransmits != 3 || a.TrimNACKs != 2 || a.Timeouts != 1 || a.State != "READY" || a.CwndBytes != 50000 ||
		a.CreditBytes == nil || *a.CreditBytes != -300 || a.Done {
		t.Errorf("flow 0: %+v", a)
	}
	if !iv[1].Done || iv[1].State != "-" || iv[1].CreditBytes != nil {
		t.Errorf("flow 1, done and its CCC gone: %+v", iv[1])
	}
	// RCCC alone: no window, whatever pds reports for it; the credit.
	ci := pds.CCCInfo{State: pds.CCCActive, Window: 0, InFlight: 4096, Credit: &pds.CreditInfo{Credit: -1200}}
	if v := viewCCC(ci, pds.CCRCCC); v.cwnd != noWindow || v.state != "ACTIVE" || !v.ok || !v.hasCred || v.credit != -1200 {
		t.Errorf("rccc: %+v", v)
	}
	ci.Window, ci.Credit = 40000, nil
	if v := viewCCC(ci, pds.CCNSCC); v.cwnd != 40000 || v.hasCred {
		t.Errorf("nscc: %+v", v)
	}
}

func TestParseFlagsUET(t *testing.T) {
	var out, errb bytes.Buffer
	o, code := parseFlags([]string{"-traffic", "uet"}, &out, &errb)
	if o == nil || code != exitOK {
		t.Fatalf("defaults: %d %s", code, errb.String())
	}
	if o.cc != pds.CCBoth || !o.trim || o.bytes != 0 || o.stagger != 0 || o.plotPath != defaultUETPlot || o.rate != 500*units.Mbit || o.senders != 3 {
		t.Errorf("defaults %+v", o)
	}
	o, _ = parseFlags([]string{"-traffic", "uet", "-cc", "nscc", "-trim=false", "-bytes", "8mb", "-senders", "8", "-plot", "", "-wred", "min=10kb", "-sample", "5ms"}, &out, &errb)
	if o == nil {
		t.Fatalf("flags: %s", errb.String())
	}
	if o.cc != pds.CCNSCC || o.trim || o.bytes != 8*units.MiB || o.senders != 8 || o.plotPath != "" || o.wred != "min=10kb" || o.sample != 5*time.Millisecond {
		t.Errorf("flags %+v", o)
	}
	if o, _ := parseFlags([]string{"-traffic", "uet", "-cc", "RCCC"}, &out, &errb); o == nil || o.cc != pds.CCRCCC {
		t.Errorf("-cc RCCC: %+v", o)
	}
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-traffic", "uet", "-cc", "dcqcn"}, "-cc dcqcn: want nscc, rccc, both, none"},
		{[]string{"-traffic", "uet", "-stagger", "2"}, "-stagger: not with -traffic uet"},
		{[]string{"-traffic", "uet", "-qps", "2", "-profile", "mlx5"}, "-qps, -profile: only with -traffic roce"},
		{[]string{"-traffic", "uet", "-bytes", "100gb"}, "-bytes 102400mb: want at most 65536mb per sender"},
		{[]string{"-traffic", "uet", "-bytes", "lots"}, "invalid value"},
		{[]string{"-traffic", "uet", "-wred", "max=100kb"}, "limit"},
		{[]string{"-cc", "nscc"}, "-cc: only with -traffic uet"},
		{[]string{"-traffic", "tcp", "-trim=false", "-bytes", "1mb"}, "-trim, -bytes: only with -traffic uet"},
	} {
		errb.Reset()
		o, code := parseFlags(tc.args, &out, &errb)
		if o != nil || code != exitUsage || !strings.Contains(errb.String(), tc.err) {
			t.Errorf("%v: %v %d %q, want an error with %q", tc.args, o, code, errb.String(), tc.err)
		}
	}
}
