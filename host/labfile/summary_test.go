//go:build linux

package labfile

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestSummaryDetails: a run's summary carries what the demo printed —
// the port's utilization net of the host's time, its PPFC notifications,
// its marking curve against the configured one, the DCQCN loop end to
// end, PPFC at the senders and the hosts' host queues.
func TestSummaryDetails(t *testing.T) {
	cfg := qdisc.DefaultConfig(500 * units.Mbit)
	st := qdisc.Stats{Classes: make([]qdisc.ClassStats, len(cfg.Classes))}
	c := &st.Classes[qdisc.ClassRoCE]
	c.Curve.BinBytes = 2 << 20 / qdisc.CurveBins
	c.Curve.Arrivals[0], c.Curve.Marks[0] = 1000, 0
	c.Curve.Arrivals[1], c.Curve.Marks[1] = 1000, 5
	c.Curve.Arrivals[2], c.Curve.Marks[2] = 1000, 900 // WRED marks ~1 %
	c.PPFCAlarmsSent, c.PPFCAlarmsCoalesced = 2, 40
	p := PortResult{Name: "sw:r", Watched: true, Utilization: 0.9, CEMarked: 905, EnqueuedPackets: 4000, TrimmedPackets: 40, Stats: &st, Curves: curves(&st, &cfg)}
	if len(p.Curves) != 1 || p.Curves[0].Class != int(qdisc.ClassRoCE) || p.Curves[0].Matched != 2 || len(p.Curves[0].Rows) != 3 {
		t.Fatalf("curves %+v: want class 3's, 2 of 3 bins within", p.Curves)
	}
	res := &Result{Name: "d", Ports: []PortResult{p},
		Flows: []FlowResult{{Name: "s1", Transport: TransportRoCEv2, CC: CCDCQCN, CNPSent: 30, CNPHandled: 28, CNPIgnored: 1, OutOfSequence: 2,
			PPFCPauses: 3, PPFCPausedNs: 25e6, PPFCKernel: 7, PPFCKernelLost: 1}},
		HostQueues: []HostQueueResult{{Host: "s1", LimitBytes: 128 << 10, MaxBytes: 64 << 10}, {Host: "s2", LimitBytes: 128 << 10, MaxBytes: 1024, WrittenOff: 2}},
		HostLost:   &HostLost{Report: hostlost.Report{Wall: 10 * time.Second, Ports: []hostlost.PortReport{{Name: "sw:r", Starved: time.Second}}}}}
	var b bytes.Buffer
	res.WriteSummary(&b)
	out := b.String()
	for _, want := range []string{
		"sw:r: utilization 90.0%, 100.0% net of the 1000 ms the host took from it",
		"sw:r: trimmed 40 packets (1.00% of the arrivals) instead of dropping them",
		"sw:r: PPFC sent 0 stops, 0 holds, 0 resumes, 2 alarms (coalesced: 0 stops, 0 holds, 40 alarms)",
		"sw:r: class 3 marking curve, observed vs configured (wred min 50kb max 1000kb probability 0.1): 2 of 3 bins within",
		"      128 -     192         1000        900      90.0%  0.82% - 1.49%     MISMATCH",
		"DCQCN loop: 905 CE marks at the ports -> np_cnp_sent 30 -> rp_cnp_handled 28 + rp_cnp_ignored 1 (1 CNPs never arrived); RC: 0 resent, out_of_sequence 2",
		"PPFC at the senders: 3 stops and holds obeyed, 25.0 ms paused in all; 7 notifications obeyed from their arrival (the kernel's intake), 1 lost to a burst there",
		"host queues (sent, not yet at the switch; rocev2 and uet senders wait at the bound): s1 max 64.0 KiB of 128kb, s2 max 1.0 KiB of 128kb; 2 times written off as lost on the way",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// TestDCQCNTraceCSV: the trace's CSV has a column pair per flow and a
// row per reading.
func TestDCQCNTraceCSV(t *testing.T) {
	tr := &DCQCNTrace{PeriodS: 0.003, Flows: []string{"s1", "s2"}, Samples: []DCQCNSample{
		{T: 0.003, RcBps: []uint64{500e6, 0}, Alpha: []float64{1, 0}},
		{T: 0.006, RcBps: []uint64{250e6, 400e6}, Alpha: []float64{0.5, 0.25}},
	}}
	path := filepath.Join(t.TempDir(), "dcqcn.csv")
	if err := tr.writeCSV(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "t_s,s1_rc_bps,s1_alpha,s2_rc_bps,s2_alpha\n0.0030,500000000,1.0000,0,0.0000\n0.0060,250000000,0.5000,400000000,0.2500\n"
	if string(b) != want {
		t.Errorf("csv:\n%s\nwant:\n%s", b, want)
	}
	if from, to := zoomWindow(tr, 0.001); from != 0.006 || to != 0.006 {
		t.Errorf("zoom %v..%v: want the trace's middle, clipped to its end", from, to)
	}
}

// TestMatrixCredit: the matrix's RCCC credit sums the UET servers'
// pacers and the summary prints it; without a pacer there is none.
func TestMatrixCredit(t *testing.T) {
	if credit([]ServerResult{{Node: "r", Transport: TransportRoCEv2}}) != nil {
		t.Error("credit without a pacer")
	}
	c := credit([]ServerResult{
		{Node: "h0", Transport: TransportUET, Pacer: &rccc.PacerStats{Grants: 10, GrantedBytes: 160000, SlowPulls: 4, SlowPullBytes: 36000}},
		{Node: "h1", Transport: TransportRoCEv2},
		{Node: "h2", Transport: TransportUET, Pacer: &rccc.PacerStats{Grants: 5, GrantedBytes: 80000, SlowPulls: 1, SlowPullBytes: 9000}},
	})
	if c == nil || *c != (CreditResult{Grants: 15, GrantedBytes: 240000, SlowPulls: 5, SlowPullBytes: 45000}) {
		t.Fatalf("credit %+v", c)
	}
	var b bytes.Buffer
	(&MatrixResult{Source: "allreduce-ring", Credit: c}).write(&b)
	if want := "RCCC credit: the receivers granted 0.24 MB in 15 grants, 5 of them slow pulls (0.04 MB no sender asked for)"; !strings.Contains(b.String(), want) {
		t.Errorf("summary:\n%s\nwant %q", b.String(), want)
	}
}
