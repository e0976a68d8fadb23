package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func testTune(t *testing.T) aqm.TuneOutput {
	t.Helper()
	out, err := aqm.Tune(aqm.TuneInput{Rate: 200 * units.Mbit, RTTp50: time.Millisecond,
		RTTp90: 1500 * time.Microsecond, RTTAvg: time.Millisecond, Lambda: 1})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func result(name string, meanQ, util, p99 float64) Result {
	return Result{Scheme: Scheme{Name: name, Label: name}, Queue: QueueStats{MeanBytes: meanQ},
		Utilization: util, ShortFCTUs: stats.Dist{N: 100, P99: p99}}
}

func TestCheckGoals(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tail, sh  Result
		met       [3]bool
		evaluated bool
	}{
		{"all met", result("step-tail", 30000, 0.98, 2000), result("ecnsharp", 5000, 0.96, 1500), [3]bool{true, true, true}, true},
		{"exactly at the thresholds", result("step-tail", 10000, 1, 1000), result("ecnsharp", 2000, 0.97, 800), [3]bool{true, true, true}, true},
		{"just short", result("step-tail", 10000, 1, 1000), result("ecnsharp", 2001, 0.969, 801), [3]bool{false, false, false}, true},
		{"ECN♯ above step-Tail's utilization", result("step-tail", 10000, 0.90, 1000), result("ecnsharp", 9000, 0.99, 1100), [3]bool{false, true, false}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			goals := checkGoals([]Result{tc.tail, result("codel", 1, 1, 1), tc.sh}, transportTCP)
			if len(goals) != 3 {
				t.Fatalf("%d goals, want 3", len(goals))
			}
			for i, g := range goals {
				if g.Evaluated != tc.evaluated || g.Met != tc.met[i] {
					t.Errorf("goal %q: evaluated %v met %v (value %g), want %v %v", g.Name, g.Evaluated, g.Met, g.Paired.Mean, tc.evaluated, tc.met[i])
				}
			}
		})
	}
	// The values are the reductions the goals name.
	g := checkGoals([]Result{result("step-tail", 20000, 0.8, 1000), result("ecnsharp", 5000, 0.78, 700)}, transportTCP)
	if math.Abs(g[0].Paired.Mean-0.75) > 1e-12 || math.Abs(g[1].Paired.Mean-(-0.025)) > 1e-12 || math.Abs(g[2].Paired.Mean-0.3) > 1e-12 {
		t.Errorf("values %g %g %g, want 0.75 -0.025 0.3", g[0].Paired.Mean, g[1].Paired.Mean, g[2].Paired.Mean)
	}
	if !strings.Contains(g[0].Measured, "20.0 -> 5.0 KB: 75.0% lower (1 run)") || !strings.Contains(g[2].Measured, "30.0% lower") {
		t.Errorf("measured %q, %q", g[0].Measured, g[2].Measured)
	}
	if h := checkGoals([]Result{result("step-tail", 1000, 1, 1000), result("ecnsharp", 1000, 1, 1100)}, transportTCP); !strings.Contains(h[2].Measured, "10.0% higher") {
		t.Errorf("a longer FCT reads %q, want \"10.0%% higher\"", h[2].Measured)
	}
	if g[0].CIClears {
		t.Error("one run has no interval: the goal cannot be met with confidence")
	}
}

// TestCheckGoalsPaired: over several runs a goal compares ECN♯ with the
// step-Tail of the same run, and is met with confidence only when the
// whole 95 % interval clears it.
func TestCheckGoalsPaired(t *testing.T) {
	var rs []Result
	// Queue reductions 0.84, 0.86, 0.85 (mean 0.85, sd 0.01: t(2) = 4.303,
	// half-width 0.0248); step-Tail drifts between runs, which pairing
	// takes out.
	for i, pair := range [][2]float64{{10000, 1600}, {20000, 2800}, {40000, 6000}} {
		tail, sharp := result("step-tail", pair[0], 1, 1000), result("ecnsharp", pair[1], 1, 700)
		tail.Run, sharp.Run = i+1, i+1
		rs = append(rs, tail, sharp)
	}
	g := checkGoals(rs, transportTCP)
	if q := g[0].Paired; q.N != 3 || math.Abs(q.Mean-0.85) > 1e-9 || math.Abs(q.CI95-4.303*0.01/math.Sqrt(3)) > 1e-6 {
		t.Errorf("paired queue reduction %+v, want n 3, mean 0.85, ci %.4f", q, 4.303*0.01/math.Sqrt(3))
	}
	if !g[0].Met || !g[0].CIClears || !strings.Contains(g[0].Measured, "85.0% lower (mean of 3 runs, 95% CI 82.5 to 87.5%)") {
		t.Errorf("goal %+v", g[0])
	}
	// A mean above the goal whose interval reaches below it is met by the
	// mean only.
	rs = rs[:0]
	for i, pair := range [][2]float64{{10000, 1000}, {10000, 3000}} {
		tail, sharp := result("step-tail", pair[0], 1, 1000), result("ecnsharp", pair[1], 1, 700)
		tail.Run, sharp.Run = i+1, i+1
		rs = append(rs, tail, sharp)
	}
	g = checkGoals(rs, transportTCP)
	if !g[0].Met || g[0].CIClears || g[0].verdict() != "met (mean)" {
		t.Errorf("goal %+v: want met by the mean only", g[0])
	}
}

func TestCheckGoalsNotEvaluated(t *testing.T) {
	failed := result("ecnsharp", 1, 1, 1)
	failed.Error = "boom"
	noShort := result("ecnsharp", 1000, 1, 0)
	noShort.ShortFCTUs = stats.Dist{}
	for name, rs := range map[string][]Result{
		"no ECN♯":        {result("step-tail", 1, 1, 1)},
		"ECN♯ failed":    {result("step-tail", 1, 1, 1), failed},
		"nothing at all": nil,
	} {
		for _, g := range checkGoals(rs, transportTCP) {
			if g.Evaluated || g.Met || !strings.Contains(g.Measured, "not evaluated") {
				t.Errorf("%s: goal %q = %+v, want not evaluated", name, g.Name, g)
			}
		}
	}
	g := checkGoals([]Result{result("step-tail", 2000, 1, 900), noShort}, transportTCP)
	if !g[0].Evaluated || g[2].Evaluated || g[2].Met {
		t.Errorf("without short flows only the FCT goal is not evaluated: %+v", g)
	}
	zero := checkGoals([]Result{result("step-tail", 0, 1, 900), result("ecnsharp", 0, 1, 100)}, transportTCP)
	if zero[0].Evaluated || zero[0].Met {
		t.Errorf("an empty step-Tail queue cannot be cut by 80%%: %+v", zero[0])
	}
}

func TestSchemes(t *testing.T) {
	tune := testTune(t)
	limit := autoLimit(tune.KTailBytes)
	if limit != 150000 { // 4 x 37.5 KB
		t.Errorf("autoLimit(%s) = %s, want 150000b", tune.KTailBytes, limit)
	}
	if got := autoLimit(20000); got != minLimit {
		t.Errorf("autoLimit(20000b) = %s, want the floor %s", got, minLimit)
	}
	if got := autoLimit(100 * units.KiB); got != 400*units.KiB {
		t.Errorf("autoLimit(100kb) = %s, want 400kb", got)
	}
	list, err := schemes(append(tcpSchemes[:len(tcpSchemes):len(tcpSchemes)], "two-threshold"), tune, limit, sharpOverride{}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]qdisc.ClassConfig{
		// qdisc.TwoThresholdTune: T1 = min(K_avg, K_tail/2), T2 = K_tail,
		// T2max = 2·K_tail.
		"two-threshold": {ECN: qdisc.ECNTwoThreshold, TwoThreshold: qdisc.TwoThreshold{
			T1Bytes: 18750, T2Bytes: 37500, T2MaxBytes: 75000, LightMaxP: 1, HeavyMaxP: 0.2}},
		"step-tail": {ECN: qdisc.ECNStep, MinThBytes: 37500},
		"step-avg":  {ECN: qdisc.ECNStep, MinThBytes: 25000},
		"codel":     {ECN: qdisc.ECNCoDel, Target: time.Millisecond, Interval: 1500 * time.Microsecond},
		"tcn":       {ECN: qdisc.ECNTCN, InsTarget: 1500 * time.Microsecond},
		"ecnsharp":  {ECN: qdisc.ECNSharp, InsTarget: 1500 * time.Microsecond, PstTarget: time.Millisecond, PstInterval: 1500 * time.Microsecond},
	}
	if len(list) != len(want) {
		t.Fatalf("%d schemes, want %d", len(list), len(want))
	}
	cfg := qdisc.DefaultConfig(200 * units.Mbit)
	for _, s := range list {
		cc, err := s.classConfig("roce")
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		w := want[s.Name]
		w.Name, w.LimitBytes = "roce", limit
		if cc != w {
			t.Errorf("%s: class config\n got %+v\nwant %+v", s.Name, cc, w)
		}
		// The port accepts every scheme's class as it is.
		cfg.Classes[qdisc.ClassRoCE] = cc
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: the port refuses the config: %v", s.Name, err)
		}
		if s.Params.describe(200*units.Mbit) == "" {
			t.Errorf("%s: empty description", s.Name)
		}
	}
	if d := list[0].Params.describe(200 * units.Mbit); d != "K 37.5KB=1500µs" {
		t.Errorf("step-tail described as %q", d)
	}
	if _, err := schemes([]string{"step-tail"}, tune, 30000, sharpOverride{}, false); err == nil {
		t.Error("K above the limit was accepted")
	}
	if _, err := schemes([]string{"red"}, tune, limit, sharpOverride{}, false); err == nil {
		t.Error("an unknown scheme was accepted")
	}
}

// TestSchemesRoCE: with DCQCN flows the baseline is WRED from K_avg to
// K_tail, and ECN♯'s instantaneous marking is the same curve in time
// (seed 002 §3.5), its persistent marking unchanged.
func TestSchemesRoCE(t *testing.T) {
	tune := testTune(t)
	list, err := schemes([]string{"wred", "ecnsharp"}, tune, minLimit, sharpOverride{}, true)
	if err != nil {
		t.Fatal(err)
	}
	w, sh := list[0].Params, list[1].Params
	if w.Mode != "wred" || w.KBytes != uint64(tune.KAvgBytes) || w.MaxThBytes != uint64(tune.KTailBytes) || w.MaxP != dcqcnMaxP {
		t.Errorf("wred params %+v", w)
	}
	if sh.InsTargetUs != 1000 || sh.InsMaxUs != 1500 || sh.MaxP != dcqcnMaxP || sh.PstTargetUs != us(tune.PstTarget) || list[1].Label != "ECN♯ (prob.)" {
		t.Errorf("ecnsharp params %+v, label %q: want the curve 1000-1500 µs with p 0.2", sh, list[1].Label)
	}
	cc, err := list[1].classConfig("roce")
	if err != nil {
		t.Fatal(err)
	}
	if cc.InsMax != 1500*time.Microsecond || cc.MaxP != dcqcnMaxP {
		t.Errorf("class config %+v", cc)
	}
	cfg := qdisc.DefaultConfig(200 * units.Mbit)
	cfg.Classes[qdisc.ClassRoCE] = cc
	if err := cfg.Validate(); err != nil {
		t.Errorf("the port refuses it: %v", err)
	}
	wc, _ := list[0].classConfig("roce")
	cfg.Classes[qdisc.ClassRoCE] = wc
	if err := cfg.Validate(); err != nil {
		t.Errorf("the port refuses WRED: %v", err)
	}
}

func TestSchemesNoSpread(t *testing.T) {
	// Equal RTTs: pst_target = ins_target; ECN♯ still runs (forced).
	tune, err := aqm.Tune(aqm.TuneInput{Rate: 200 * units.Mbit, RTTp50: time.Millisecond, RTTp90: time.Millisecond, RTTAvg: time.Millisecond, Lambda: 1})
	if err != nil {
		t.Fatal(err)
	}
	list, err := schemes([]string{"ecnsharp"}, tune, minLimit, sharpOverride{}, false)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := list[0].classConfig("roce")
	if err != nil {
		t.Fatal(err)
	}
	cfg := qdisc.DefaultConfig(200 * units.Mbit)
	cfg.Classes[qdisc.ClassRoCE] = cc
	if !cc.ForceTargets || cfg.Validate() != nil {
		t.Errorf("ECN♯ without RTT spread: force %v, validate %v", cc.ForceTargets, cfg.Validate())
	}
}

func TestSchemesOverride(t *testing.T) {
	tune := testTune(t)
	list, err := schemes([]string{"step-tail", "ecnsharp"}, tune, minLimit, sharpOverride{PstTarget: 200 * time.Microsecond}, false)
	if err != nil {
		t.Fatal(err)
	}
	p := list[1].Params
	if p.PstTargetUs != 200 || p.InsTargetUs != 1500 || p.PstIntervalUs != 1500 || len(p.Overridden) != 1 || p.ForceTargets {
		t.Errorf("ECN♯ with pst_target by flag: %+v", p)
	}
	if d := p.describe(200 * units.Mbit); !strings.Contains(d, "pst_target by flag") {
		t.Errorf("described as %q", d)
	}
	// The baselines keep aqm.Tune's values.
	if list[0].Params.KBytes != uint64(tune.KTailBytes) || len(list[0].Params.Overridden) != 0 {
		t.Errorf("step-Tail changed: %+v", list[0].Params)
	}
}

func TestTuneFrom(t *testing.T) {
	rtt := &RTTReport{PooledUs: stats.Dist{N: 10, P50: 1000, P90: 1500, Mean: 1100}}
	out, err := tuneFrom(rtt, 200*units.Mbit, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if out.KTailBytes != 37500 || out.KAvgBytes != 27500 || out.InsTarget != 1500*time.Microsecond || out.PstTarget != 1100*time.Microsecond {
		t.Errorf("tuneFrom = %+v", out)
	}
	if _, err := tuneFrom(&RTTReport{}, 200*units.Mbit, 1, 0); err == nil {
		t.Error("no samples: want an error")
	}
}

func TestBuildResult(t *testing.T) {
	rate := 200 * units.Mbit
	t0 := time.Unix(1000, 0)
	a := qdisc.ClassStats{DequeuedBytes: 1000, ArrivedECT0: 10, CEMarkedECT0: 5, AQMInsMarks: 1, AQMPstMarks: 2,
		DroppedLimitPackets: 1, SojournSum: time.Second, SojournSamples: 100}
	b := a
	b.DequeuedBytes += 50_000_000 // 2 s at 200 Mbit/s
	b.ArrivedECT0 += 1000
	b.CEMarkedECT0 += 40
	b.AQMInsMarks += 10
	b.AQMPstMarks += 30
	b.DroppedLimitPackets += 3
	b.SojournSum += 200 * time.Millisecond
	b.SojournSamples += 1000 // 200 µs each
	snap := func(at time.Time, acked, retrans uint64) tcpSnap {
		return tcpSnap{At: at, BytesAcked: acked, TotalRetrans: retrans, MinRTT: 600 * time.Microsecond, SRTT: 2 * time.Millisecond, ECN: true, Congestion: "cubic"}
	}
	w := &window{
		Start: a, End: b, StartT: t0, EndT: t0.Add(2 * time.Second),
		Backlog:     make([]uint64, 2000),
		SampleEvery: time.Millisecond,
		FCTs:        [][]time.Duration{{time.Millisecond, 3 * time.Millisecond}, {2 * time.Millisecond}},
		ShortFailed: 1,
		LongSenders: []string{"s1", "s2"},
		LongA:       []tcpSnap{snap(t0, 0, 5), snap(t0, 100, 0)},
		LongB:       []tcpSnap{snap(t0.Add(2*time.Second), 25_000_000, 7), snap(t0.Add(time.Second), 100+12_500_000, 0)},
	}
	for i := range w.Backlog {
		w.Backlog[i] = uint64(i % 4 * 1000) // 0, 1000, 2000, 3000: mean 1500
	}
	r := buildResult(Scheme{Name: "tcn", Label: "TCN", Params: Params{Mode: "tcn", InsTargetUs: 1500}}, rate, w)
	if math.Abs(r.Utilization-1) > 1e-9 || r.DequeuedBytes != 50_000_000 || r.MeasuredS != 2 {
		t.Errorf("utilization %g dequeued %d over %g s", r.Utilization, r.DequeuedBytes, r.MeasuredS)
	}
	if r.Queue.Samples != 2000 || r.Queue.MeanBytes != 1500 || math.Abs(r.Queue.MeanUs-60) > 1e-9 {
		t.Errorf("queue %+v", r.Queue)
	}
	if len(r.Series.MeanBytes) != 200 || r.Series.MeanBytes[0] != 1300 || r.Series.MaxBytes[0] != 3000 {
		t.Errorf("series: %d buckets, first %g/%g", len(r.Series.MeanBytes), r.Series.MeanBytes[0], r.Series.MaxBytes[0])
	}
	if len(r.Zoom) != zoomSamples {
		t.Errorf("zoom has %d samples, want %d", len(r.Zoom), zoomSamples)
	}
	if r.SojournMeanUs != 200 {
		t.Errorf("mean sojourn %g µs, want 200", r.SojournMeanUs)
	}
	if r.ECTArrivals != 1000 || r.CEMarks != 40 || r.InsMarks != 10 || r.PstMarks != 30 || r.Drops != 3 {
		t.Errorf("counters: ect %d ce %d ins %d pst %d drops %d", r.ECTArrivals, r.CEMarks, r.InsMarks, r.PstMarks, r.Drops)
	}
	if r.ShortFCTUs.N != 3 || r.ShortFCTUs.Mean != 2000 || r.ShortFCTUs.P99 != 3000 || r.ShortFailed != 1 || len(r.ShortBySender) != 2 {
		t.Errorf("short flows %+v failed %d by sender %d", r.ShortFCTUs, r.ShortFailed, len(r.ShortBySender))
	}
	if len(r.Long) != 2 || r.Long[0].GoodputBps != 100e6 || r.Long[1].GoodputBps != 100e6 || r.LongGoodputBps != 200e6 || r.Retransmits != 2 {
		t.Errorf("long flows %+v total %g retrans %d", r.Long, r.LongGoodputBps, r.Retransmits)
	}
	if r.Long[0].MinRTTUs != 600 || !r.Long[0].ECN || r.Long[0].Congestion != "cubic" {
		t.Errorf("long flow 1: %+v", r.Long[0])
	}
}

// sampleReport is a complete report as a run would produce it.
func sampleReport(t *testing.T) *Report {
	t.Helper()
	tune := testTune(t)
	limit := autoLimit(tune.KTailBytes)
	list, err := schemes(tcpSchemes, tune, limit, sharpOverride{}, false)
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{
		Time: time.Unix(0, 0).UTC(), Kernel: "6.18.0-test", CPUs: 2, LoadStart: "0.50 0.40 0.30", LoadEnd: "1.00 0.90 0.80",
		Setup: Setup{RateBps: 200e6, Senders: 3, DelaysUs: []float64{500, 1000, 1500}, DelayLink: "test", LongPerSender: 2,
			Congestion: "cubic", Class: 3, DSCP: 26, WarmupS: 2, MeasureS: 2, SampleUs: 1000, ShortMinBytes: 3072,
			ShortMaxBytes: 61440, ShortGapUs: 20000, Seed: 1, Lambda: 1, LimitBytes: uint64(limit), Attach: "tcx"},
		RTT: rttReport([]string{"s1", "s2", "s3"}, []time.Duration{500 * time.Microsecond, time.Millisecond, 1500 * time.Microsecond},
			[][]time.Duration{{550 * time.Microsecond}, {1050 * time.Microsecond}, {1550 * time.Microsecond}}, []int{0, 0, 0}, 1),
		Tune:       tune,
		DelayLinks: []DelayReport{{Sender: "s1", DelayUs: 500, Packets: 10, LatenessMeanUs: 20, LatenessP99Us: 64, LatenessMaxUs: 80}},
	}
	for i, s := range list {
		w := &window{StartT: r.Time, EndT: r.Time.Add(2 * time.Second), SampleEvery: time.Millisecond,
			Backlog: make([]uint64, 2000), FCTs: [][]time.Duration{{time.Duration(i+1) * time.Millisecond}}}
		w.End.DequeuedBytes = 49_000_000
		for j := range w.Backlog {
			w.Backlog[j] = uint64((j % 50) * 1000 / (i + 1))
		}
		r.Schemes = append(r.Schemes, buildResult(s, 200*units.Mbit, w))
	}
	r.Schemes[2] = Result{Scheme: list[2], Error: "configure: boom"}
	for i := range r.Schemes {
		r.Schemes[i].Run = 1
	}
	r.Summary = summarizeRuns(list, r.Schemes, 200*units.Mbit)
	r.Goals = checkGoals(r.Schemes, transportTCP)
	return r
}

func TestRender(t *testing.T) {
	r := sampleReport(t)
	var b bytes.Buffer
	renderParams(&b, r)
	renderTable(&b, r)
	renderFlows(&b, r)
	renderDelays(&b, r.DelayLinks)
	renderGoals(&b, r.Goals)
	out := b.String()
	for _, want := range []string{
		"step-Tail K = λ·C·RTT_p90 = 37.5 KB", "step-AVG K = λ·C·RTT_avg = 25.0 KB",
		"ins_target = λ·RTT_p90 = 1.5ms", "pst_target = λ_pst·RTT_avg = 1ms",
		"s3   delay   1500 µs", "spread of the medians 2.82x",
		"0 (+1 failed)", "K 37.5KB=1500µs", "98.0",
		"mean queue", "NOT met", "lateness mean 20 µs",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Every scheme has a row.
	for _, s := range r.Schemes {
		if !strings.Contains(out, s.Label) {
			t.Errorf("no row for %s", s.Label)
		}
	}
}

func TestReportJSON(t *testing.T) {
	r := sampleReport(t)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"setup", "rtt", "tune", "scheme_runs", "summary", "goals", "delay_links", "loadavg_start"} {
		if _, ok := m[k]; !ok {
			t.Errorf("experiment.json lacks %q", k)
		}
	}
	s0 := m["scheme_runs"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "label", "run", "params", "queue", "utilization", "short_fct_us", "short_fcts_us", "incast", "queue_series", "drops", "ce_marks", "aqm_ins_marks", "aqm_pst_marks"} {
		if _, ok := s0[k]; !ok {
			t.Errorf("a scheme lacks %q", k)
		}
	}
	if k := s0["params"].(map[string]any)["k_bytes"]; k != float64(37500) {
		t.Errorf("step-tail k_bytes = %v, want 37500", k)
	}
	sum0 := m["summary"].([]any)[0].(map[string]any)
	mq := sum0["mean_queue_kb"].(map[string]any)
	if mq["n"] != float64(1) || mq["ci95"] != nil {
		t.Errorf("summary mean_queue_kb %v: want one run, no interval (null)", mq)
	}
	// And it reads back into the same shape.
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Schemes[0].Queue != r.Schemes[0].Queue || back.Tune.KTailBytes != r.Tune.KTailBytes || len(back.Goals) != 3 {
		t.Error("the report does not survive a JSON round trip")
	}
}

func TestWriteOutputs(t *testing.T) {
	r := sampleReport(t)
	dir := filepath.Join(t.TempDir(), "out")
	files, err := writeOutputs(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Errorf("wrote %v, want the JSON and the two PNGs", files)
	}
	if _, err := os.Stat(filepath.Join(dir, "fct.png")); err != nil {
		t.Error(err)
	}
	f, err := os.Open(filepath.Join(dir, "queue.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("queue.png: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 4*200 {
		t.Errorf("queue.png is %dx%d, want at least 1000x800 for 4 rows", b.Dx(), b.Dy())
	}
	b, err := os.ReadFile(filepath.Join(dir, "experiment.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("experiment.json: %v", err)
	}
	if len(back.Schemes) != 5 {
		t.Errorf("experiment.json has %d schemes, want 5", len(back.Schemes))
	}
	// Nothing to plot is an error, not an empty picture; writeOutputs
	// then writes the JSON alone.
	if err := writePlot(filepath.Join(dir, "empty.png"), &Report{}); err == nil {
		t.Error("writePlot without samples: want an error")
	}
	allFailed := &Report{Schemes: []Result{{Scheme: Scheme{Name: "tcn"}, Error: "boom"}}}
	if files, err := writeOutputs(t.TempDir(), allFailed); err != nil || len(files) != 1 {
		t.Errorf("every scheme failed: wrote %v, %v; want the JSON alone", files, err)
	}
}

// TestBuildResultTimescale: on a fabric slowed k times the row is the
// fabric's: FCTs, sojourns and RTTs over k, goodput and Rc times k, the
// utilization against the wire's rate; with the meter's view, the
// figures net of the host beside the raw ones.
func TestBuildResultTimescale(t *testing.T) {
	rate, k := 200*units.Mbit, units.Timescale(4)
	t0 := time.Unix(1000, 0)
	var a, b qdisc.ClassStats
	b.DequeuedBytes = 50_000_000 // 8 s at 50 Mbit/s on the wire
	b.SojournSum, b.SojournSamples = 800*time.Millisecond, 1000
	host := &hostlost.Report{Wall: 10 * time.Second, Starved: time.Second}
	w := &window{
		Start: a, End: b, StartT: t0, EndT: t0.Add(8 * time.Second), Timescale: k,
		Backlog: []uint64{1000, 3000}, SampleEvery: time.Millisecond,
		FCTs:       [][]time.Duration{{4 * time.Millisecond, 8 * time.Millisecond}},
		FCTStarved: [][]time.Duration{{0, 4 * time.Millisecond}},
		Host:       host, Starved: 2 * time.Second,
		LongSenders: []string{"s1"},
		LongA:       []tcpSnap{{At: t0}},
		LongB:       []tcpSnap{{At: t0.Add(8 * time.Second), BytesAcked: 12_500_000, MinRTT: 4 * time.Millisecond, Rc: 25_000_000}},
	}
	r := buildResult(Scheme{Name: "tcn", Label: "TCN", Params: Params{Mode: "tcn"}}, rate, w)
	if math.Abs(r.Utilization-1) > 1e-9 || r.MeasuredS != 2 {
		t.Errorf("utilization %g over %g s, want 1 over the fabric's 2 s", r.Utilization, r.MeasuredS)
	}
	if math.Abs(r.UtilizationNet-8.0/6) > 1e-9 || r.HostLostShare != 0.25 || r.HostLost != host {
		t.Errorf("net utilization %g, host share %g: want %g over the 6 s the host left, 0.25", r.UtilizationNet, r.HostLostShare, 8.0/6)
	}
	if r.SojournMeanUs != 200 || r.Queue.MeanUs != 80 {
		t.Errorf("sojourn %g µs, queue %g µs: want the fabric's 200 and 80", r.SojournMeanUs, r.Queue.MeanUs)
	}
	if r.ShortFCTUs.Min != 1000 || r.ShortFCTUs.Max != 2000 || r.ShortFCTNetUs.Max != 1000 {
		t.Errorf("FCTs %+v, net %+v: want 1000-2000 µs raw, both 1000 net", r.ShortFCTUs, r.ShortFCTNetUs)
	}
	if f := r.Long[0]; f.GoodputBps != 50e6 || f.MinRTTUs != 1000 || f.RcBps != 100_000_000 {
		t.Errorf("long flow %+v: want the fabric's 50 Mbit/s, 1000 µs, Rc 100 Mbit/s", f)
	}
	if l := runLine(&r); !strings.Contains(l, "util 100.0% (133.3% net of the host's 25.0%)") || !strings.Contains(l, "short p99 2000 µs (1000 net)") {
		t.Errorf("run line %q", l)
	}
	// Without the meter: no net figures.
	w.Host = nil
	if r := buildResult(Scheme{Name: "tcn", Params: Params{Mode: "tcn"}}, rate, w); r.UtilizationNet != 0 || r.ShortFCTNetUs.N != 0 || strings.Contains(runLine(&r), "net") {
		t.Errorf("no meter, yet net figures: %+v, %q", r.ShortFCTNetUs, runLine(&r))
	}
}

func TestNetUs(t *testing.T) {
	got := netUs([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}, []time.Duration{time.Millisecond, 2 * time.Millisecond}, 2)
	if want := []float64{1000, 0, 1000}; !slices.Equal(got, want) {
		t.Errorf("netUs = %v, want %v (never below 0; no starved time: the raw)", got, want)
	}
	if got := fabricUs([]time.Duration{time.Millisecond}, 0); got[0] != 1000 {
		t.Errorf("fabricUs at the zero time scale = %v, want 1000", got)
	}
}

// TestRenderHostLost: with metered runs the table has the host's share and
// the net figures, and counts the runs over the meter's budget.
func TestRenderHostLost(t *testing.T) {
	r := sampleReport(t)
	if strings.Contains(renderString(r), "host-lost") {
		t.Error("a report without metered runs shows host-lost columns")
	}
	for i := range r.Schemes {
		s := &r.Schemes[i]
		if s.Error != "" {
			continue
		}
		s.HostLost = &hostlost.Report{HostStarved: i == 0}
		s.HostLostShare, s.UtilizationNet = 0.05, 1.0
		s.ShortFCTNetUs = stats.Dist{N: 1, Mean: 500, P99: 900}
	}
	r.Summary = summarizeRuns([]Scheme{r.Schemes[0].Scheme, r.Schemes[1].Scheme}, r.Schemes, 200*units.Mbit)
	if s := r.Summary[0]; s.HostLostPercent.Mean != 5 || s.HostStarved != 1 || s.UtilizationNet.Mean != 100 || s.ShortFCTNetP99Us.Mean != 900 {
		t.Errorf("summary %+v", s)
	}
	out := renderString(r)
	for _, want := range []string{"host-lost %", "util net %", "short FCT p99 net µs", "5.00 (1 starved)", "host/hostlost"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"host_lost":{`, `"host_lost_share":0.05`, `"utilization_net":1`, `"short_fct_net_us"`, `"qct_net_us"`,
		`"host_lost_percent"`, `"host_starved_runs":1`, `"utilization_net_percent"`, `"short_fct_net_p99_us"`, `"starved_ns"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("experiment.json lacks %s", k)
		}
	}
}

func renderString(r *Report) string {
	var b bytes.Buffer
	renderTable(&b, r)
	return b.String()
}

// -sharp-sqrt spaces ECN♯'s persistent marks by CoDel's law, in the
// class config and the description; -quickack shows in the setup.
func TestSharpSqrtAndQuickAck(t *testing.T) {
	list, err := schemes([]string{"ecnsharp"}, testTune(t), minLimit, sharpOverride{SqrtLaw: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	p := &list[0].Params
	cc, err := list[0].classConfig("roce")
	if err != nil {
		t.Fatal(err)
	}
	if !p.SqrtLaw || !cc.SqrtLaw || !strings.Contains(p.describe(200*units.Mbit), "sqrt by flag") {
		t.Errorf("sqrt law: params %+v, class %+v", p, cc)
	}
	var out, errs bytes.Buffer
	o, _ := parseFlags([]string{"-sharp-sqrt", "-quickack"}, &out, &errs)
	if o == nil || !o.sharp.SqrtLaw || !o.quickAck {
		t.Fatalf("flags: %+v %s", o, errs.String())
	}
	r := sampleReport(t)
	r.Setup.QuickAck = true
	var b bytes.Buffer
	renderParams(&b, r)
	if !strings.Contains(b.String(), "the receiver ACKs every packet (-quickack") {
		t.Errorf("setup lacks the quickack line:\n%s", b.String())
	}
}
