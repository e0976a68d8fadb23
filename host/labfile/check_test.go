package labfile

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// checkLab is a run's result by hand: hosts s and r, the flow's data
// through sw1:sw2 then sw2:r (class 3, seed 000's WRED at 50 KB), its
// CNPs back through sw2:sw1 (class 6). Healthy unless edited: 10,000
// packets sent ECT(0), 2,000 marked at sw2:r, 900 CE arrivals, 800 CNPs,
// 790 handled and 10 ignored.
func checkLab() *Result {
	cfg := qdisc.DefaultConfig(500 * units.Mbit)
	port := func(name string) PortResult {
		c := cfg
		st := &qdisc.Stats{Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
		return PortResult{Name: name, Stats: st, Config: &c}
	}
	res := &Result{Schema: ResultSchema, RunID: "fl-test",
		Ports: []PortResult{port("sw1:sw2"), port("sw2:r"), port("sw2:sw1")}}
	for _, i := range []int{0, 1} {
		c := &res.Ports[i].Stats.Classes[qdisc.ClassRoCE]
		c.ArrivedECT0 = 10_000
	}
	down := &res.Ports[1].Stats.Classes[qdisc.ClassRoCE]
	down.CEMarkedECT0, down.MaxBacklogBytes = 2_000, 300_000
	res.Flows = []FlowResult{{Name: "f", From: "s", To: "r", Transport: TransportRoCEv2, CC: "dcqcn", DSCP: 26, CNPDSCP: 48,
		Path:      []FlowHop{{Port: "sw1:sw2", Class: 3}, {Port: "sw2:r", Class: 3}},
		ReplyPath: []FlowHop{{Port: "sw2:sw1", Class: 3, CNPClass: 6}},
		TxPackets: 10_000, CEArrived: 900, CNPSent: 800, CNPHandled: 790, CNPIgnored: 10}}
	return res
}

// ecmp puts an ECMP alternative to sw1:sw2 on the flow's path: sw1:sw3
// (port 3), which none of its packets crossed, then applies edit.
func ecmp(edit func(*Result)) func(*Result) {
	return func(r *Result) {
		p := r.Ports[0]
		p.Name, p.Stats = "sw1:sw3", &qdisc.Stats{Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
		r.Ports = append(r.Ports, p)
		r.Flows[0].Path = []FlowHop{{Port: "sw1:sw2", Class: 3, Branch: 1}, {Port: "sw1:sw3", Class: 3, Branch: 1}, {Port: "sw2:r", Class: 3}}
		edit(r)
	}
}

// nsccFlow makes checkLab's flow a uet flow under NSCC, healthy (900 CE at
// the target, 850 echoed, 400 of them above NSCC's target delay, 30
// decreases), then applies edit.
func nsccFlow(edit func(*Result)) func(*Result) {
	return func(r *Result) {
		f := &r.Flows[0]
		f.Transport, f.CC, f.CNPDSCP = TransportUET, "nscc", 0
		f.CEArrived, f.CNPSent, f.CNPHandled, f.CNPIgnored = 0, 0, 0, 0
		f.ReplyPath[0].CNPClass = 0
		f.CEReceived, f.ECNEchoes, f.NSCCECNAboveTarget, f.NSCCECNBelowTarget, f.NSCCDecreases = 900, 850, 400, 450, 30
		edit(r)
	}
}

// tcpFlow makes checkLab's flow a tcp flow (cubic): 14 MB delivered of
// the 15 MB its classes took, 1,500 segments CE-echoed, then applies
// edit.
func tcpFlow(edit func(*Result)) func(*Result) {
	return func(r *Result) {
		f := &r.Flows[0]
		f.Transport, f.CC, f.KernelCC, f.CNPDSCP = TransportTCP, "cubic", "cubic", 0
		f.TxPackets, f.CEArrived, f.CNPSent, f.CNPHandled, f.CNPIgnored = 0, 0, 0, 0, 0
		f.ReplyPath[0].CNPClass = 0
		f.Bytes, f.DeliveredCE = 14_000_000, 1_500
		for _, i := range []int{0, 1} {
			class(r, i, 3).EnqueuedBytes = 15_000_000
		}
		edit(r)
	}
}

func class(res *Result, port int, c qdisc.ClassID) *qdisc.ClassStats {
	return &res.Ports[port].Stats.Classes[c]
}

func TestCheckVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Result)
		layer Layer
		kind  string
		hop   string
		cites string // a counter the verdict must cite
	}{
		{"healthy", func(*Result) {}, "", CheckOK, "", "rp_cnp_handled"},
		{"idle", func(r *Result) {
			class(r, 1, 3).CEMarkedECT0, class(r, 1, 3).MaxBacklogBytes = 0, 20_000
			r.Flows[0].CEArrived, r.Flows[0].CNPSent, r.Flows[0].CNPHandled, r.Flows[0].CNPIgnored = 0, 0, 0, 0
		}, "", CheckIdle, "", "ce_marked"},
		// UET's NSCC loop: the target echoes CE, NSCC cuts above its target.
		{"uet healthy", nsccFlow(func(*Result) {}), "", CheckOK, "", "nscc_decreases"},
		{"uet cc both", nsccFlow(func(r *Result) { r.Flows[0].CC = "both" }), "", CheckOK, "", "nscc_decreases"},
		{"uet echoes under the target", nsccFlow(func(r *Result) {
			r.Flows[0].NSCCECNAboveTarget, r.Flows[0].NSCCDecreases = 0, 0
		}), "", CheckOK, "", "nscc_ecn_below_target_acks"},
		{"uet rccc", nsccFlow(func(r *Result) { r.Flows[0].CC = "rccc" }), "", CheckNotJudged, "", ""},
		{"uet target counts lost", nsccFlow(func(r *Result) { r.Flows[0].NoTargetCounts = true }), "", CheckNotJudged, "", ""},
		{"uet no source counts", nsccFlow(func(r *Result) { r.Flows[0].TxPackets = 0 }), "", CheckNotJudged, "", ""},
		{"uet deployed", nsccFlow(func(r *Result) { r.Flows[0].State = FlowDeployed }), "", CheckNotJudged, "", ""},
		{"tcp deployed", tcpFlow(func(r *Result) { r.Flows[0].State = FlowDeployed }), "", CheckNotJudged, "", ""},
		{"rocev2 deployed", func(r *Result) { r.Flows[0].State = FlowDeployed }, "", CheckOK, "", ""},
		{"uet echo silent", nsccFlow(func(r *Result) { r.Flows[0].ECNEchoes = 0 }), LayerNP, CheckEchoSilent, "target r", "ecn_echoes"},
		{"uet a few CE, no echo", nsccFlow(func(r *Result) { r.Flows[0].ECNEchoes, r.Flows[0].CEReceived = 0, 3 }), "", CheckIdle, "", "ce_received"},
		{"uet nscc deaf", nsccFlow(func(r *Result) { r.Flows[0].NSCCDecreases = 0 }), LayerRP, CheckNSCCNoCuts, "source s", "nscc_ecn_above_target_acks"},
		// A short episode: too few echoes above the target for NSCC's
		// average delay to pass it.
		{"uet few echoes above the target", nsccFlow(func(r *Result) { r.Flows[0].NSCCDecreases, r.Flows[0].NSCCECNAboveTarget = 0, 50 }), "", CheckOK, "", "nscc_ecn_below_target_acks"},
		{"uet quick adapts count as cuts", nsccFlow(func(r *Result) { r.Flows[0].NSCCDecreases, r.Flows[0].NSCCQuickAdapts = 0, 4 }), "", CheckOK, "", "nscc_quick_adapts"},
		{"uet CE cleared", nsccFlow(func(r *Result) { r.Flows[0].CEReceived, r.Flows[0].ECNEchoes = 0, 0 }), LayerPath, CheckECNCleared, "sw2:r → the receiver r", "ce_received"},
		{"uet dscp bleached", nsccFlow(func(r *Result) {
			class(r, 1, 3).ArrivedECT0 = 40
			class(r, 1, 0).ArrivedECT0 = 10_000
		}), LayerPath, CheckDSCPChanged, "sw1:sw2 → sw2:r", "arrived_packets"},
		// TCP: the flow in bytes; the receiver's echo as delivered_ce.
		{"tcp healthy", tcpFlow(func(*Result) {}), "", CheckOK, "", "delivered_ce"},
		{"tcp no ecn", tcpFlow(func(r *Result) { r.Flows[0].NoECN = 1 }), LayerPath, CheckNotECT, "the sender s → sw1:sw2", "no_ecn"},
		{"tcp no echo", tcpFlow(func(r *Result) { r.Flows[0].DeliveredCE = 0 }), LayerNP, CheckEchoSilent, "receiver r", "delivered_ce"},
		// One connection of ten without ECN (a SYN lost and resent
		// without it) is not the sender's setting.
		{"tcp one connection of ten without ecn", tcpFlow(func(r *Result) { r.Flows[0].NoECN, r.Flows[0].TCPConns = 1, 10 }), "", CheckOK, "", "delivered_ce"},
		{"tcp most connections without ecn", tcpFlow(func(r *Result) { r.Flows[0].NoECN, r.Flows[0].TCPConns = 6, 10 }), LayerPath, CheckNotECT, "the sender s → sw1:sw2", "no_ecn"},
		// ECMP: the flow took sw1:sw2 (unmarked) or its alternative
		// sw1:sw3, which marked other traffic heavily; which one the
		// counters do not say, so no echo back says nothing.
		{"tcp ecmp alternative marked", tcpFlow(ecmp(func(r *Result) {
			class(r, 1, 3).CEMarkedECT0 = 0
			alt := class(r, 3, 3)
			alt.CEMarkedECT0, alt.EnqueuedBytes, alt.ArrivedECT0 = 400, 15_000_000, 10_000
			r.Flows[0].DeliveredCE = 0
		})), "", CheckIdle, "", "delivered_ce"},
		// Both ports of the group marked: no echo is a verdict.
		{"tcp ecmp group marked", tcpFlow(ecmp(func(r *Result) {
			class(r, 1, 3).CEMarkedECT0 = 0
			class(r, 0, 3).CEMarkedECT0 = 300
			alt := class(r, 3, 3)
			alt.CEMarkedECT0, alt.EnqueuedBytes, alt.ArrivedECT0 = 400, 15_000_000, 10_000
			r.Flows[0].DeliveredCE = 0
		})), LayerNP, CheckEchoSilent, "receiver r", "delivered_ce"},
		{"tcp light flow, no echo", tcpFlow(func(r *Result) { r.Flows[0].DeliveredCE, r.Flows[0].Bytes = 0, 50_000 }), "", CheckIdle, "", "delivered_ce"},
		{"tcp dscp bleached", tcpFlow(func(r *Result) { class(r, 1, 3).EnqueuedBytes = 100_000 }), LayerPath, CheckDSCPChanged, "sw1:sw2 → sw2:r", "arrived_bytes"},
		{"tcp nothing delivered", tcpFlow(func(r *Result) { r.Flows[0].Bytes = 0 }), "", CheckNotJudged, "", ""},
		{"tcp drops with few marks", tcpFlow(func(r *Result) {
			class(r, 1, 3).CEMarkedECT0, class(r, 1, 3).DroppedLimitPackets = 99, 10
		}), LayerCP, CheckThresholdsHigh, "sw2:r", "dropped_packets"},
		{"uet drops with few marks", nsccFlow(func(r *Result) {
			class(r, 1, 3).CEMarkedECT0, class(r, 1, 3).DroppedLimitPackets = 99, 10
		}), LayerCP, CheckThresholdsHigh, "sw2:r", "dropped_packets"},
		{"cc none", func(r *Result) { r.Flows[0].CC = "none" }, "", CheckNotJudged, "", ""},
		{"no counters", func(r *Result) { r.Ports[1].Stats = nil }, "", CheckNotJudged, "", ""},
		// A middle hop rewrote DSCP 26 to 0: sw2:r's class 3 saw none of it.
		{"dscp bleached", func(r *Result) {
			class(r, 1, 3).ArrivedECT0 = 40
			class(r, 1, 0).ArrivedECT0 = 10_000
			class(r, 0, 3).RemarkedPackets = 10_000
		}, LayerPath, CheckDSCPChanged, "sw1:sw2 → sw2:r", "remarked_packets"},
		{"dscp at the first hop", func(r *Result) { class(r, 0, 3).ArrivedECT0 = 0 }, LayerPath, CheckDSCPChanged, "the sender s → sw1:sw2", "tx_packets"},
		{"sender not ECT", func(r *Result) {
			class(r, 0, 3).ArrivedECT0, class(r, 0, 3).ArrivedNotECT = 0, 10_000
		}, LayerPath, CheckNotECT, "the sender s → sw1:sw2", "arrived_not_ect"},
		{"ecn cleared between hops", func(r *Result) {
			class(r, 1, 3).ArrivedECT0, class(r, 1, 3).ArrivedNotECT = 0, 10_000
		}, LayerPath, CheckECNCleared, "sw1:sw2 → sw2:r", "arrived_not_ect"},
		{"CE cleared after the last mark", func(r *Result) { r.Flows[0].CEArrived = 0 }, LayerPath, CheckECNCleared, "sw2:r → the receiver r", "np_ecn_marked_roce_packets"},
		// A light flow in a busy class: its share of the marks is too
		// small for none arriving to mean a hop cleared them.
		{"light flow unmarked", func(r *Result) {
			r.Flows[0].TxPackets, r.Flows[0].CEArrived, r.Flows[0].CNPSent, r.Flows[0].CNPHandled, r.Flows[0].CNPIgnored = 40, 0, 0, 0, 0
		}, "", CheckIdle, "", "tx_packets"},
		// Other senders' Not-ECT traffic in the class is not the flow's.
		{"not-ect neighbours", func(r *Result) { class(r, 0, 3).ArrivedNotECT = 50_000 }, "", CheckOK, "", ""},
		{"a few CNPs in flight", func(r *Result) {
			r.Flows[0].CNPSent, r.Flows[0].CNPHandled, r.Flows[0].CNPIgnored = 5, 1, 0
		}, "", CheckOK, "", ""},
		{"no marks", func(r *Result) { class(r, 1, 3).CEMarkedECT0 = 0 }, LayerCP, CheckNoMarks, "sw2:r", "max_backlog_bytes"},
		// A window of a live lab's counters has no maximum backlog: the
		// queue is the p99 sojourn at the class's rate (2^21 ns at 500
		// Mbit/s is 131 KB, past the 50 KB min_th).
		{"no marks in a window", func(r *Result) {
			c := class(r, 1, 3)
			c.CEMarkedECT0, c.MaxBacklogBytes = 0, 0
			c.Sojourn[20] = 1000
		}, LayerCP, CheckNoMarks, "sw2:r", "sojourn_p99_as_bytes"},
		// A brief excursion past min_th: the 3 arrivals that found the
		// queue there expect 0.002 marks under WRED's 0.1 at 1 MB.
		{"brief excursion", func(r *Result) {
			c := class(r, 1, 3)
			c.CEMarkedECT0, c.MaxBacklogBytes = 0, 60_000
			c.Curve.BinBytes, c.Curve.Arrivals[0], c.Curve.Arrivals[7] = 8192, 9_997, 3
			r.Flows[0].CEArrived, r.Flows[0].CNPSent, r.Flows[0].CNPHandled, r.Flows[0].CNPIgnored = 0, 0, 0, 0
		}, "", CheckIdle, "", "ce_marked"},
		// 1,000 arrivals found 248 KB and more: about 20 marks expected.
		{"no marks, the curve's", func(r *Result) {
			c := class(r, 1, 3)
			c.CEMarkedECT0 = 0
			c.Curve.BinBytes, c.Curve.Arrivals[0], c.Curve.Arrivals[31] = 8192, 9_000, 1_000
		}, LayerCP, CheckNoMarks, "sw2:r", "max_backlog_bytes"},
		// ECMP: the flow crossed sw1:sw2, not its alternative sw1:sw3.
		{"ecmp alternative unused", ecmp(func(r *Result) {}), "", CheckOK, "", ""},
		{"ecmp: neither alternative", ecmp(func(r *Result) { class(r, 0, 3).ArrivedECT0 = 0 }),
			LayerPath, CheckDSCPChanged, "the sender s → sw1:sw2 or its ECMP alternatives", "tx_packets"},
		{"marking off", func(r *Result) {
			r.Ports[1].Config.Classes[3].ECN = qdisc.ECNOff
			class(r, 1, 3).CEMarkedECT0, class(r, 1, 3).MaxBacklogBytes = 0, 900_000
		}, LayerCP, CheckMarkingOff, "sw2:r", "ce_marked"},
		{"thresholds high", func(r *Result) {
			class(r, 1, 3).CEMarkedECT0, class(r, 1, 3).PPFCStopsSent = 30, 700
		}, LayerCP, CheckThresholdsHigh, "sw2:r", "ppfc_stops_sent"},
		{"drops with few marks", func(r *Result) {
			class(r, 1, 3).CEMarkedECT0, class(r, 1, 3).DroppedLimitPackets = 99, 10
		}, LayerCP, CheckThresholdsHigh, "sw2:r", "dropped_packets"},
		// One stray mark while PPFC fired: the flow's share of the
		// marks says nothing of the loop, the stops say the thresholds.
		{"a stray mark before PPFC", func(r *Result) {
			class(r, 1, 3).CEMarkedECT0, class(r, 1, 3).PPFCStopsSent = 1, 700
			r.Flows[0].CEArrived, r.Flows[0].CNPSent, r.Flows[0].CNPHandled, r.Flows[0].CNPIgnored = 0, 0, 0, 0
		}, LayerCP, CheckThresholdsHigh, "sw2:r", "ppfc_stops_sent"},
		{"no marks before PPFC", func(r *Result) {
			class(r, 1, 3).CEMarkedECT0, class(r, 1, 3).PPFCStopsSent = 0, 700
			r.Flows[0].CEArrived, r.Flows[0].CNPSent, r.Flows[0].CNPHandled, r.Flows[0].CNPIgnored = 0, 0, 0, 0
		}, LayerCP, CheckThresholdsHigh, "sw2:r", "ppfc_stops_sent"},
		// The loop is walked in order: a silent NP is named before the
		// thresholds, though PPFC fires for it.
		{"np silent while PPFC fires", func(r *Result) {
			class(r, 1, 3).PPFCStopsSent = 700
			r.Flows[0].CNPSent, r.Flows[0].CNPHandled, r.Flows[0].CNPIgnored = 0, 0, 0
		}, LayerNP, CheckNPSilent, "receiver r", "ppfc_stops_sent"},
		{"np silent", func(r *Result) { r.Flows[0].CNPSent, r.Flows[0].CNPHandled, r.Flows[0].CNPIgnored = 0, 0, 0 }, LayerNP, CheckNPSilent, "receiver r", "np_cnp_sent"},
		{"rp disabled", func(r *Result) { r.Flows[0].CNPHandled, r.Flows[0].CNPIgnored = 0, 800 }, LayerRP, CheckRPDisabled, "sender s", "rp_cnp_ignored"},
		{"cnp class shared", func(r *Result) {
			r.Flows[0].CNPDSCP, r.Flows[0].ReplyPath[0].CNPClass = 26, 3
			class(r, 2, 3).SojournSum, class(r, 2, 3).SojournSamples = 3_000_000_000, 1000
		}, LayerNP, CheckCNPClassShared, "sw2:sw1", "mean_sojourn_us"},
		{"cnps lost", func(r *Result) {
			r.Flows[0].CNPHandled, r.Flows[0].CNPIgnored = 300, 0
			class(r, 2, 6).DroppedLimitPackets = 500
		}, LayerRP, CheckCNPsLost, "r → s", "dropped_packets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := checkLab()
			tc.edit(res)
			c := Check(res)
			f := c.Flows[0]
			if f.Layer != tc.layer || f.Kind != tc.kind || f.Hop != tc.hop {
				t.Fatalf("got layer %q kind %q hop %q (%s), want %q %q %q", f.Layer, f.Kind, f.Hop, f.Says, tc.layer, tc.kind, tc.hop)
			}
			if f.Says == "" {
				t.Error("a verdict without words")
			}
			if tc.cites != "" && !slices.ContainsFunc(f.Evidence, func(e Evidence) bool { return e.Counter == tc.cites }) {
				t.Errorf("evidence %v does not cite %s", f.Evidence, tc.cites)
			}
			silent := c.Silent()
			if (tc.layer == "") != (len(silent) == 0) {
				t.Errorf("Silent() = %v with layer %q", silent, tc.layer)
			}
		})
	}
}

// The thresholds' edges: MarksPerSafetyEvent marks per stop are enough.
func TestCheckMarksPerSafetyEdge(t *testing.T) {
	res := checkLab()
	class(res, 1, 3).CEMarkedECT0, class(res, 1, 3).PPFCStopsSent = 10*MarksPerSafetyEvent, 10
	if f := Check(res).Flows[0]; f.Kind != CheckOK {
		t.Errorf("%d marks for 10 stops: %s (%s), want ok", 10*MarksPerSafetyEvent, f.Kind, f.Says)
	}
	class(res, 1, 3).CEMarkedECT0--
	if f := Check(res).Flows[0]; f.Kind != CheckThresholdsHigh {
		t.Errorf("one mark fewer: %s, want %s", f.Kind, CheckThresholdsHigh)
	}
}

// Silent lists each layer once, in the loop's order; WriteCheck names it.
func TestCheckReportSilent(t *testing.T) {
	c := &CheckReport{Flows: []FlowCheck{{Flow: "a", Layer: LayerRP, Kind: CheckRPDisabled, Says: "x"}, {Flow: "b", Layer: LayerNP, Kind: CheckNPSilent, Says: "y"},
		{Flow: "c", Layer: LayerRP, Kind: CheckCNPsLost, Says: "z"}, {Flow: "d", Kind: CheckOK, Says: "ok"}}}
	if got := c.Silent(); !slices.Equal(got, []Layer{LayerNP, LayerRP}) {
		t.Errorf("Silent() = %v", got)
	}
	var b bytes.Buffer
	WriteCheck(&b, c)
	if out := b.String(); !strings.HasPrefix(out, "three layers (seed 000): silent: NP, RP\n") || !strings.Contains(out, "rp-disabled") {
		t.Errorf("WriteCheck:\n%s", out)
	}
	b.Reset()
	WriteCheck(&b, Check(checkLab()))
	if !strings.HasPrefix(b.String(), "three layers (seed 000): no layer silent (1 of 1 flows judged ok)") {
		t.Errorf("WriteCheck:\n%s", b.String())
	}
}

// ReadResult takes what a run wrote and refuses a comparison's file.
func TestReadResult(t *testing.T) {
	dir := t.TempDir()
	res := checkLab()
	if err := res.write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := ReadResult(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Check(back).Flows[0], Check(res).Flows[0]; got.Kind != want.Kind || len(got.Evidence) != len(want.Evidence) {
		t.Errorf("read back: %+v, want %+v", got, want)
	}
	other := filepath.Join(dir, "comparison.json")
	if err := os.WriteFile(other, []byte(`{"schema": "fabriclab.comparison/1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadResult(other); err == nil || !strings.Contains(err.Error(), `schema "fabriclab.comparison/1"`) {
		t.Errorf("a comparison's file: %v", err)
	}
}
