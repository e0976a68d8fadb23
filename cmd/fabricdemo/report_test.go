package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestHistDelta(t *testing.T) {
	var prev, cur qdisc.SojournHistogram
	prev[3], cur[3] = 10, 15
	prev[5], cur[5] = 7, 7
	prev[8], cur[8] = 9, 4 // went backwards: counts from zero
	cur[20] = 2
	d := histDelta(&prev, &cur)
	var want qdisc.SojournHistogram
	want[3], want[8], want[20] = 5, 4, 2
	if d != want {
		t.Fatalf("histDelta = %v, want %v", d, want)
	}
}

func TestQuantile(t *testing.T) {
	var h qdisc.SojournHistogram
	if got := quantile(&h, 0.5); got != 0 {
		t.Errorf("empty: %v", got)
	}
	h[10] = 100 // [1024, 2048) ns
	p50 := quantile(&h, 0.5)
	if p50 < 1024 || p50 >= 2048 || !near(float64(p50), 1024*math.Sqrt2, 2) {
		t.Errorf("p50 = %v, want ~1448ns (geometric middle of the bucket)", p50)
	}
	h[20] = 1 // one outlier around 1ms
	if got := quantile(&h, 0.999); got < 1<<20 || got > 1<<21 {
		t.Errorf("p99.9 = %v, want in the outlier's bucket", got)
	}
	// Never beyond qdisc's upper-edge bound, and monotonic in q.
	last := time.Duration(0)
	for q := 0.01; q <= 1; q += 0.01 {
		v := quantile(&h, q)
		if v < last || v > h.Quantile(q) {
			t.Fatalf("q=%.2f: %v (previous %v, bound %v)", q, v, last, h.Quantile(q))
		}
		last = v
	}
}

func TestInterval(t *testing.T) {
	prev := qdisc.ClassStats{DequeuedBytes: 1000, ArrivedECT0: 100, CEMarkedECT0: 1, DroppedLimitPackets: 2, SojournSamples: 50}
	prev.Sojourn[10] = 50
	cur := prev
	cur.DequeuedBytes += 62_500_000 // 500 Mbit in 1 s
	cur.ArrivedECT0 += 40_000
	cur.CEMarkedECT0 += 400
	cur.DroppedLimitPackets += 3
	cur.DroppedWREDPackets = 1
	cur.BacklogBytes, cur.MaxBacklogBytes = 64*1024, 300*1024
	cur.SojournSamples += 40_000
	cur.Sojourn[18] = 39_000 // [262us, 524us)
	cur.Sojourn[21] = 1_000  // [2.1ms, 4.2ms)
	s := interval(&prev, &cur, time.Second, units.Gbit)
	if !near(s.DequeueBps, 500e6, 1) || !near(s.Utilization, 0.5, 1e-9) {
		t.Errorf("rate %v util %v", s.DequeueBps, s.Utilization)
	}
	if s.CEMarks != 400 || s.ECTArrivals != 40_000 || !near(s.MarkFraction, 0.01, 1e-12) || !near(s.CEPerSec, 400, 1e-9) {
		t.Errorf("marks %+v", s)
	}
	if s.Drops != 4 || s.BacklogBytes != 64*1024 || s.MaxBacklogBytes != 300*1024 {
		t.Errorf("drops/backlog %+v", s)
	}
	// The old samples in bucket 10 must not pull p50 down.
	if s.SojournP50 < 1<<18 || s.SojournP50 >= 1<<19 || s.SojournP99 < 1<<21 || s.SojournP99 >= 1<<22 {
		t.Errorf("sojourn p50 %v p99 %v", s.SojournP50, s.SojournP99)
	}
	// No ECN-capable arrivals: no fraction, no division by zero.
	z := interval(&prev, &prev, 0, units.Gbit)
	if z.MarkFraction != 0 || z.DequeueBps != 0 || z.SojournP50 != 0 {
		t.Errorf("idle interval %+v", z)
	}
}

func TestMarkProb(t *testing.T) {
	cc := qdisc.DefaultConfig(units.Gbit).Classes[qdisc.ClassRoCE] // 51200..1024000, 0.1
	for _, tc := range []struct {
		backlog uint64
		want    float64
	}{
		{0, 0}, {51199, 0}, {51200, 0},
		{(51200 + 1024000) / 2, 0.05},
		{1023999, 0.1}, {1024000, 1}, {2 << 20, 1},
	} {
		if got := markProb(&cc, tc.backlog); !near(got, tc.want, 1e-6) {
			t.Errorf("wred(%d) = %v, want %v", tc.backlog, got, tc.want)
		}
	}
	step := qdisc.ClassConfig{ECN: qdisc.ECNStep, MinThBytes: 1000, LimitBytes: 10000}
	if markProb(&step, 1000) != 0 || markProb(&step, 1001) != 1 {
		t.Error("step curve")
	}
	off := qdisc.ClassConfig{LimitBytes: 10000}
	if markProb(&off, 9999) != 0 {
		t.Error("off marks")
	}
}

// fabricatedCurve is what 3 cubic flows typically leave on the default
// class 3: most arrivals near min_th, a few up the ramp.
func fabricatedCurve() qdisc.MarkingCurve {
	c := qdisc.MarkingCurve{BinBytes: 2 << 20 / qdisc.CurveBins} // 64 KiB
	c.Arrivals[0], c.Marks[0] = 700_000, 100
	c.Arrivals[1], c.Marks[1] = 240_000, 900
	c.Arrivals[2], c.Marks[2] = 33_000, 320
	c.Arrivals[15], c.Marks[15] = 1000, 300 // straddles max_th: 9.6% .. 100%
	return c
}

func TestCurveRows(t *testing.T) {
	cc := qdisc.DefaultConfig(units.Gbit).Classes[qdisc.ClassRoCE]
	c := fabricatedCurve()
	rows := curveRows(&c, &cc)
	if len(rows) != 4 {
		t.Fatalf("%d rows, want the 4 bins with arrivals", len(rows))
	}
	r := rows[1]
	if r.LoBytes != 65536 || r.HiBytes != 131072 || r.Arrivals != 240_000 || r.Marks != 900 {
		t.Errorf("row 1 %+v", r)
	}
	if !near(r.ConfLo, 0.1*(65536-51200)/(1024000-51200), 1e-9) || !near(r.Observed, 900.0/240_000, 1e-12) {
		t.Errorf("row 1 fractions %+v", r)
	}
	if rows[0].ConfLo != 0 || rows[3].ConfHi != 1 {
		t.Errorf("edges: bin 0 from %v, bin 15 to %v", rows[0].ConfLo, rows[3].ConfHi)
	}
	for _, r := range rows {
		if !r.Match {
			t.Errorf("bin %d-%d should match: %+v", r.LoBytes, r.HiBytes, r)
		}
	}
	// Marking below min_th at a rate WRED cannot produce is a mismatch;
	// so is a bin that marks far too little.
	c.Marks[0] = 70_000
	c.Marks[2] = 0
	rows = curveRows(&c, &cc)
	if rows[0].Match || rows[2].Match || !rows[1].Match {
		t.Errorf("mismatch detection: %v %v %v", rows[0].Match, rows[1].Match, rows[2].Match)
	}
}

func TestRenderCurve(t *testing.T) {
	cc := qdisc.DefaultConfig(units.Gbit).Classes[qdisc.ClassRoCE]
	c := fabricatedCurve()
	var b bytes.Buffer
	renderCurve(&b, curveRows(&c, &cc), &cc)
	out := b.String()
	for _, want := range []string{
		"WRED ECN min_th 50KB max_th 1000KB max_p 0.1",
		"       0 -      64       700000        100     0.014%  0% - 0.15%        ok",
		"      64 -     128       240000        900      0.38%  0.15% - 0.82%     ok",
		"     960 -    1024         1000        300      30.0%  9.58% - 100.0%    ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "MISMATCH") {
		t.Errorf("unexpected mismatch:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(l, " ") {
			t.Errorf("trailing space: %q", l)
		}
	}
	b.Reset()
	renderCurve(&b, nil, &cc)
	if !strings.Contains(b.String(), "tcp_ecn") {
		t.Errorf("empty curve should hint at ECN: %s", b.String())
	}
}

func TestRenderSample(t *testing.T) {
	cc := qdisc.DefaultConfig(units.Gbit).Classes[qdisc.ClassRoCE]
	s := Sample{T: 7, Flows: 3, DequeueBps: 998.1e6, Utilization: 0.998, ECTArrivals: 83000, CEMarks: 209, CEPerSec: 209,
		MarkFraction: 0.0025, BacklogBytes: 37 * 1024, MaxBacklogBytes: 297*1024 + 200,
		SojournP50: 460 * time.Microsecond, SojournP99: 1930 * time.Microsecond, Drops: 0}
	var b bytes.Buffer
	renderSample(&b, &s, &cc)
	want := "    7s     3    998.1  99.8%     209   0.25%         37    297.2  [#|..................]       460us 1.93ms      0\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
	if len(want) != len(liveHeader) {
		t.Errorf("line is %d wide, header %d", len(want), len(liveHeader))
	}
}

func TestGauge(t *testing.T) {
	cc := qdisc.DefaultConfig(units.Gbit).Classes[qdisc.ClassRoCE] // cells of 51200 B
	for _, tc := range []struct {
		backlog uint64
		want    string
	}{
		{0, "[.|..................]"},
		{30000, "[#|..................]"},
		{51201, "[##..................]"},
		{512000, "[##########..........]"},
		{1024000, "[####################]"},
		{1500000, "[####################>"},
	} {
		if got := gauge(tc.backlog, &cc); got != tc.want {
			t.Errorf("gauge(%d) = %s, want %s", tc.backlog, got, tc.want)
		}
	}
}

func TestShortDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "-", 800: "800ns", 1448: "1.45us", 262144: "262us", 1048576: "1.05ms", 16 * time.Millisecond: "16.0ms", 2 * time.Second: "2.00s",
	} {
		if got := shortDur(d); got != want {
			t.Errorf("shortDur(%d) = %s, want %s", d, got, want)
		}
	}
}

func TestFlowWindowAndSummary(t *testing.T) {
	cc := qdisc.DefaultConfig(units.Gbit).Classes[qdisc.ClassRoCE]
	mk := func(start float64, secs int, perSec uint64, gbps float64) FlowResult {
		f := FlowResult{Sender: "s", Src: "198.18.1.2", Dst: "198.19.0.2", Port: 5201, StartS: start,
			Seconds: float64(secs), GoodputBps: gbps, ReceivedBytes: perSec * uint64(secs), Congestion: "cubic"}
		for i := range secs {
			f.intervals = append(f.intervals, iperfSum{Start: float64(i), End: float64(i + 1), Seconds: 1, Bytes: perSec})
		}
		return f
	}
	// Flow 1 alone for 3 s at 1 Gbit/s, then both at 500 Mbit/s.
	f1 := mk(0, 6, 62_500_000, 750e6)
	for i := 3; i < 6; i++ {
		f1.intervals[i].Bytes = 62_500_000 / 2
	}
	f2 := mk(3, 3, 62_500_000/2, 500e6)
	st := qdisc.Stats{Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
	c := &st.Classes[qdisc.ClassRoCE]
	*c = qdisc.ClassStats{Class: 3, Name: "roce", EnqueuedPackets: 10, EnqueuedBytes: 15000, DequeuedPackets: 9, DequeuedBytes: 13500,
		DroppedLimitPackets: 1, DroppedLimitBytes: 1500, ArrivedECT0: 10, CEMarkedECT0: 2, MaxBacklogBytes: 3000}
	c.Curve = fabricatedCurve()
	c.Sojourn[15] = 10
	st.Classes[0].EnqueuedPackets = 4
	s := &Summary{Senders: 2, Rate: units.Gbit, DurationS: 6, TrafficS: 6, ClassConfig: cc, Flows: []FlowResult{f1, f2}}
	s.finish(&st, 750_000_000) // 6 s at 1 Gbit/s
	if !near(s.JainWindow, 1, 1e-12) || s.WindowFromS != 3 || s.WindowToS != 6 {
		t.Errorf("window jain %v over %v-%v", s.JainWindow, s.WindowFromS, s.WindowToS)
	}
	if !near(s.Jain, stats.Jain([]float64{750e6, 500e6}), 1e-12) {
		t.Errorf("whole-run jain %v", s.Jain)
	}
	if !near(s.GoodputBps, 1e9*(6*0.5+3*0.5+1.5)/6*0+(float64(f1.ReceivedBytes+f2.ReceivedBytes)*8/6), 1) {
		t.Errorf("goodput %v", s.GoodputBps)
	}
	if !near(s.Utilization, 1, 1e-12) || !near(s.MarkFraction, 0.2, 1e-12) || s.OtherPackets != 4 {
		t.Errorf("util %v frac %v other %d", s.Utilization, s.MarkFraction, s.OtherPackets)
	}
	if s.Invariant != "" {
		t.Errorf("invariant: %s", s.Invariant)
	}
	var b bytes.Buffer
	renderSummary(&b, s)
	out := b.String()
	for _, want := range []string{
		"Jain fairness: 1.000 while all 2 flows competed (t=3-6 s: 250.0 / 250.0 Mbit/s",
		"Link utilization: 100.0% of 1gbit (class 3 dequeued, L2 bytes, over the 6.00 s",
		"dropped             1 pkt  (buffer full: 1, WRED early drop: 0)",
		"10 = 9 + 1 + 0 pkt, bytes too: OK",
		"1 drops (1 with the buffer full)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}

	// A broken invariant is reported, not hidden.
	c.DequeuedPackets = 8
	s2 := &Summary{Senders: 1, Rate: units.Gbit, DurationS: 6, ClassConfig: cc, Flows: []FlowResult{f1}}
	s2.finish(&st, 0)
	b.Reset()
	renderSummary(&b, s2)
	if s2.Invariant == "" || !strings.Contains(b.String(), "invariant  VIOLATED") || !strings.Contains(b.String(), "Jain fairness: 1 (a single flow)") {
		t.Errorf("invariant %q:\n%s", s2.Invariant, b.String())
	}
}

func TestParseIperf(t *testing.T) {
	js := `{"start":{},"intervals":[{"streams":[],"sum":{"start":0,"end":1.0001,"seconds":1.0001,"bytes":117440512,"bits_per_second":939413487.2,"retransmits":3}}],
	"end":{"sum_sent":{"start":0,"end":12,"seconds":12,"bytes":1400000000,"bits_per_second":933333333,"retransmits":7},
	"sum_received":{"start":0,"end":12.0003,"seconds":12.0003,"bytes":1399000000,"bits_per_second":932640000},
	"sender_tcp_congestion":"cubic","receiver_tcp_congestion":"cubic"}}`
	r, err := parseIperf([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if r.End.SumReceived.BitsPerSec != 932640000 || r.End.SumSent.Retransmits != 7 || r.End.SenderCongestion != "cubic" ||
		len(r.Intervals) != 1 || r.Intervals[0].Sum.Bytes != 117440512 {
		t.Errorf("%+v", r)
	}
	r, err = parseIperf([]byte(`{"start":{},"intervals":[],"end":{},"error":"unable to connect to server: Connection refused"}`))
	if err != nil || !strings.Contains(r.Error, "refused") {
		t.Errorf("error case: %v %+v", err, r)
	}
	if _, err := parseIperf([]byte("iperf3: error")); err == nil {
		t.Error("garbage parsed")
	}
}

func TestListeningPorts(t *testing.T) {
	text := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 020013C6:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 020013C6:1452 020112C6:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:1453 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 3 1
`
	got := listeningPorts(text)
	want := map[int]bool{5201: true, 5203: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestEnsureIperf3(t *testing.T) {
	type call = string
	setup := func(have map[string]bool, fail map[string]int) (func(string) (string, error), runFunc, *[]call) {
		var calls []call
		look := func(name string) (string, error) {
			if have[name] {
				return "/usr/bin/" + name, nil
			}
			return "", exec.ErrNotFound
		}
		run := func(_ context.Context, name string, args ...string) error {
			c := name + " " + strings.Join(args, " ")
			calls = append(calls, c)
			if fail[c] > 0 {
				fail[c]--
				return errors.New("exit status 100")
			}
			if c == "apt-get install -y iperf3" {
				have["iperf3"] = true
			}
			return nil
		}
		return look, run, &calls
	}
	ctx := context.Background()
	var out bytes.Buffer

	look, run, calls := setup(map[string]bool{"iperf3": true, "apt-get": true}, nil)
	if err := ensureIperf3(ctx, &out, look, run); err != nil || len(*calls) != 0 {
		t.Errorf("present: %v %v", err, *calls)
	}

	look, run, calls = setup(map[string]bool{"apt-get": true}, nil)
	if err := ensureIperf3(ctx, &out, look, run); err != nil || !reflect.DeepEqual(*calls, []call{"apt-get install -y iperf3"}) {
		t.Errorf("install: %v %v", err, *calls)
	}

	look, run, calls = setup(map[string]bool{"apt-get": true}, map[string]int{"apt-get install -y iperf3": 1})
	out.Reset()
	err := ensureIperf3(ctx, &out, look, run)
	if err != nil || !reflect.DeepEqual(*calls, []call{"apt-get install -y iperf3", "apt-get update", "apt-get install -y iperf3"}) {
		t.Errorf("update then retry: %v %v", err, *calls)
	}
	if !strings.Contains(out.String(), "apt-get update") {
		t.Errorf("the update is not announced: %s", out.String())
	}

	look, run, _ = setup(map[string]bool{"apt-get": true}, map[string]int{"apt-get install -y iperf3": 2})
	if err := ensureIperf3(ctx, &out, look, run); err == nil {
		t.Error("failed install not reported")
	}
	look, run, calls = setup(map[string]bool{}, nil)
	if err := ensureIperf3(ctx, &out, look, run); err == nil || len(*calls) != 0 {
		t.Errorf("no apt-get: %v %v", err, *calls)
	}
}

func TestKernelAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{
		"6.18.44-fc-v595": true, "6.6.0": true, "6.5.13-generic": false, "5.15.0-91-generic": false,
		"7.0": true, "6.10-rc1": true, "6.6-rc2": true, "weird": true,
	} {
		if got := kernelAtLeast(rel, "6.6"); got != want {
			t.Errorf("kernelAtLeast(%q) = %v", rel, got)
		}
	}
}

func TestFitStagger(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		n          int
		dur, want  time.Duration
		wantStagge time.Duration
	}{
		{1, 20 * s, 3 * s, 3 * s},
		{3, 20 * s, 3 * s, 3 * s},
		{3, 12 * s, 3 * s, 3 * s},
		{3, 6 * s, 3 * s, 2 * s},
		{8, 20 * s, 3 * s, 1 * s},
		{16, 12 * s, 3 * s, 0},
	} {
		if got := fitStagger(tc.n, tc.dur, tc.want); got != tc.wantStagge {
			t.Errorf("fitStagger(%d, %v) = %v, want %v", tc.n, tc.dur, got, tc.wantStagge)
		}
	}
}

func TestParseFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if o, code := parseFlags([]string{"-help"}, &out, &errb); o != nil || code != exitOK || !strings.Contains(out.String(), "Usage: sudo fabricdemo") || errb.Len() != 0 {
		t.Errorf("-help: %v %d %q %q", o, code, out.String(), errb.String())
	}
	o, code := parseFlags([]string{"-senders", "2", "-rate", "100mbit", "-duration", "12", "-json", "x.json", "-legacy"}, &out, &errb)
	if o == nil || code != exitOK || o.senders != 2 || o.rate != 100*units.Mbit || o.duration != 12*time.Second || o.jsonPath != "x.json" || !o.legacy {
		t.Errorf("flags: %+v %d", o, code)
	}
	for _, bad := range [][]string{{"-senders", "0"}, {"-rate", "fast"}, {"-duration", "1s"}, {"-duration", "1.5s"}, {"extra"}} {
		errb.Reset()
		if o, code := parseFlags(bad, &out, &errb); o != nil || code != exitUsage || errb.Len() == 0 {
			t.Errorf("%v: %v %d %q", bad, o, code, errb.String())
		}
	}
}
