//go:build linux

package labfile

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/htsim"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestIncastSummary: the group's tail runs from its first data start to
// its last end, the mean over its flows' ends from the same start, both
// over every byte at the port's payload capacity; the net ratios extend
// the ideal by the host-lost time in each span; the queue counts the
// samples inside the tail only.
func TestIncastSummary(t *testing.T) {
	const s = time.Second
	flows := []incastFlow{
		{name: "a", size: 1e6, share: 0.5, dataStart: s, dataMono: 100 * s, fct: 3 * s},
		{name: "b", size: 1e6, share: 0.5, dataStart: 1500 * time.Millisecond, dataMono: 100*s + 500*time.Millisecond, fct: 3500 * time.Millisecond},
	}
	// A tenth of every span was host-lost.
	starved := func(from, to time.Duration) time.Duration { return (to - from) / 10 }
	var queue []queueSample
	for k := range 12 {
		queue = append(queue, queueSample{at: time.Duration(k) * 500 * time.Millisecond, bytes: uint64(10 * k)})
	}
	var ir IncastResult
	incastSummary(&ir, flows, 8e6, 10, starved, queue)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"bytes", float64(ir.Bytes), 2e6},
		{"ideal (2 MB at half of 8 Mbit/s)", ir.IdealS, 4},
		{"tail (1 s to 5 s)", ir.TailFCTS, 4},
		{"mean (ends 3 s and 4 s after the start)", ir.MeanFCTS, 3.5},
		{"tail/ideal", ir.TailRatio, 1},
		{"mean/ideal", ir.MeanRatio, 0.875},
		{"starved in the tail", ir.StarvedS, 0.4},
		{"tail net", ir.TailRatioNet, 4 / 4.4},
		{"mean net (0.3 s and 0.4 s starved)", ir.MeanRatioNet, 3.5 / 4.35},
		// Samples at 1.0, 1.5 … 5.0 s: 20, 30 … 100 bytes.
		{"queue samples", float64(ir.QueueSamples), 9},
		{"queue p50", ir.QueueP50Bytes, 60},
		{"queue p99", ir.QueueP99Bytes, 100},
		{"queue max", ir.QueueMaxBytes, 100},
		{"queue p50 in BDPs", ir.QueueP50BDPs, 6},
		{"queue p99 in BDPs", ir.QueueP99BDPs, 10},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if ir.Error != "" || ir.Flows != 2 {
		t.Errorf("flows %d, error %q", ir.Flows, ir.Error)
	}

	// Without host-lost time there are no net ratios; a flow that did not
	// complete leaves no FCTs, only why.
	var none IncastResult
	incastSummary(&none, flows, 8e6, 0, nil, nil)
	if none.TailRatioNet != 0 || none.QueueP50BDPs != 0 || none.TailRatio != 1 {
		t.Errorf("unmetered: %+v", none)
	}
	flows[1].fct = 0
	var failed IncastResult
	incastSummary(&failed, flows, 8e6, 10, starved, queue)
	if failed.Error != "flow b did not complete" || failed.TailFCTS != 0 || failed.IdealS != 4 {
		t.Errorf("failed: %+v", failed)
	}
}

// TestIncastPlan: the examples' senders make one incast into the port in
// front of the receiver, at NSCC's base RTT's BDP (the same bytes at any
// timescale), with the uet payload share of netns-tests.
func TestIncastPlan(t *testing.T) {
	f, err := Load("examples/uet-incast-deep.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []float64{4, 1} {
		if err := f.SetTimescale(units.Timescale(k)); err != nil {
			t.Fatal(err)
		}
		ips := f.Plan().incasts()
		if len(ips) != 1 || ips[0].group != "incast" || len(ips[0].flows) != 8 || f.Plan().Ports[ips[0].port].Name != "sw:r" ||
			ips[0].class != 3 || math.Abs(ips[0].bdpBytes-62500) > 1e-6 {
			t.Fatalf("timescale %v: incasts %+v", k, ips)
		}
	}
	if got, want := f.Plan().Flows[0].payloadShare(), 4012.0/4110; got != want {
		t.Errorf("uet payload share %v, want %v", got, want)
	}
	// A group of one, a timed flow or a series is no incast.
	f, err = Parse("t.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if ips := f.Plan().incasts(); len(ips) != 0 {
		t.Errorf("incasts of flows alone: %+v", ips)
	}
}

// TestWriteIncasts: the lab's row, its row net of host-lost time and
// htsim's side by side; htsim's one-line reason where it did not run.
func TestWriteIncasts(t *testing.T) {
	ic := IncastResult{Group: "incast", Flows: 8, Port: "sw:r", Class: 3, IdealS: 1.1, Bytes: 16 << 20, TailRatio: 1.031, MeanRatio: 0.924,
		StarvedS: 0.002, TailRatioNet: 1.029, MeanRatioNet: 0.923, BDPBytes: 62500, QueueP50BDPs: 1.84, QueueP99BDPs: 11.7}
	h := &HtsimRun{Result: &htsim.Result{TailOverIdeal: 1.003, MeanOverIdeal: 0.899, Queue: htsim.Queue{P50BDPs: 1.64, P99BDPs: 10.65},
		Plan: htsim.Plan{Scenario: htsim.Scenario{Seed: 1, Mapping: htsim.Scaled}}}}
	var b strings.Builder
	writeIncasts(&b, []IncastResult{ic}, h)
	for _, want := range []string{
		"incast incast: 8 flows into sw:r (class 3), ideal 1100.0 ms",
		"  lab                               1.031      0.924    1.84 BDP   11.70 BDP        0",
		"  lab, net of 2.0 ms host-lost      1.029      0.923",
		"  htsim (scaled, seed 1)            1.003      0.899    1.64 BDP   10.65 BDP        0",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	writeIncasts(&b, []IncastResult{ic}, &HtsimRun{Error: "htsim cannot run this lab: flow f2 is tcp; htsim runs UET"})
	if !strings.Contains(b.String(), "\n  htsim cannot run this lab: flow f2 is tcp") {
		t.Errorf("no reason:\n%s", b.String())
	}
}

// TestOnsetToCut: the end-to-end reaction runs from the earliest sample
// past a port's CE threshold to the first sample with a cut; a cut before
// the onset is immediate; no onset or no cut is none.
func TestOnsetToCut(t *testing.T) {
	ms := time.Millisecond
	q := queueSamples{
		ports: map[int][]queueSample{
			0: {{3 * ms, 10}, {6 * ms, 95}, {9 * ms, 200}},
			1: {{3 * ms, 0}, {6 * ms, 50}, {9 * ms, 120}},
			2: {{3 * ms, 5000}}, // no threshold: not counted
		},
		cuts: []queueSample{{3 * ms, 0}, {6 * ms, 0}, {9 * ms, 0}, {12 * ms, 0}, {15 * ms, 2}},
	}
	th := map[int]uint64{0: 90, 1: 100}
	if got := onsetToCut(q, th); got != 9 {
		t.Errorf("onset 6 ms, cut 15 ms: %g ms", got)
	}
	q.cuts[0].bytes = 1
	if got := onsetToCut(q, th); got != 0 {
		t.Errorf("cut before the onset: %g ms, want 0 (immediate)", got)
	}
	if got := onsetToCut(q, map[int]uint64{0: 1000}); got != 0 {
		t.Errorf("no onset: %g", got)
	}
	for _, tc := range []struct {
		cc   qdisc.ClassConfig
		want uint64
	}{
		{qdisc.ClassConfig{ECN: qdisc.ECNWRED, MinThBytes: 90e3}, 90e3},
		{qdisc.ClassConfig{ECN: qdisc.ECNStep, MinThBytes: 30e3}, 30e3},
		{qdisc.ClassConfig{ECN: qdisc.ECNTwoThreshold, TwoThreshold: qdisc.TwoThreshold{T1Bytes: 45e3, T2Bytes: 90e3}}, 90e3},
		{qdisc.ClassConfig{ECN: qdisc.ECNCoDel}, 0},
	} {
		if got := ceThreshold(&tc.cc); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.cc.ECN, got, tc.want)
		}
	}
}
