package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/pe"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestReactions(t *testing.T) {
	ms := time.Millisecond
	ss := []sample{
		{At: 1 * ms, Core: 10_000},
		{At: 2 * ms, Core: 40_000},                 // light onset (t1 30 KB)
		{At: 3 * ms, Core: 95_000},                 // heavy onset (t2 90 KB)
		{At: 4 * ms, Core: 120_000},                // nothing yet
		{At: 9 * ms, Core: 150_000, PEActions: 1},  // the PE cut: 7 ms after the light onset
		{At: 15 * ms, Core: 80_000, SenderCuts: 3}, // the senders: 12 ms after the heavy onset
	}
	pe, e2e, peOK, e2eOK := reactions(ss, 30_000, 90_000)
	if !peOK || !e2eOK || pe != 7*ms || e2e != 12*ms {
		t.Errorf("reactions = %v %v %v %v, want 7ms 12ms", pe, e2e, peOK, e2eOK)
	}
	// The heavy onset may be another queue's (PE1's buffer), and a cut
	// sampled before it counts as immediate.
	ss = []sample{{At: ms, SenderCuts: 1}, {At: 2 * ms, PE: 100_000, SenderCuts: 1}}
	_, e2e, peOK, e2eOK = reactions(ss, 30_000, 90_000)
	if peOK || !e2eOK || e2e != 0 {
		t.Errorf("PE-buffer onset: e2e %v ok %v, PE ok %v", e2e, e2eOK, peOK)
	}
	// No onset, no reaction.
	if _, _, peOK, e2eOK = reactions([]sample{{At: ms, PEActions: 1, SenderCuts: 1}}, 30_000, 90_000); peOK || e2eOK {
		t.Error("a reaction without an onset")
	}
}

func TestSeries(t *testing.T) {
	ms := time.Millisecond
	ss := []sample{{At: 1 * ms, Core: 1000}, {At: 4 * ms, Core: 3000, PE: 500}, {At: 16 * ms, Core2: 2000}}
	got := series(ss, 5*ms)
	want := [][]float64{{0, 3, 0, 0.5}, {15, 0, 2, 0}} // 5-15 ms: no sample, no point
	if len(got) != len(want) {
		t.Fatalf("series = %v, want %v", got, want)
	}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("series = %v, want %v", got, want)
			}
		}
	}
}

// result is a run with the fields the goals read.
func result(scheme string, run int, p99, util float64, lost, resent uint64, peMs *float64) Result {
	return Result{Scheme: scheme, Label: schemeLabels[scheme], Run: run, CoreQueueKB: stats.Dist{N: 100, P50: p99 / 4, P99: p99},
		CoreUtil: util, Drops: Drops{Core: lost, Retransmits: resent}, PEReactionMs: peMs,
		ShortFCTUs: stats.Dist{N: 10, P50: 20000, P99: 30000}}
}

func f(v float64) *float64 { return &v }

func TestCheckGoals(t *testing.T) {
	oneWay := 5 * time.Millisecond
	rs := []Result{
		result(schemeRFC6040, 1, 400, 80, 0, 0, nil), result(schemeRate, 1, 100, 78, 0, 0, f(6)),
		result(schemeRFC6040, 2, 500, 80, 0, 0, nil), result(schemeRate, 2, 200, 77, 0, 0, f(7)),
	}
	g := checkGoals(rs, oneWay)
	if len(g) != 4 {
		t.Fatalf("%d goals", len(g))
	}
	// Queue: 75 % and 60 % lower, mean 67.5 %.
	if !g[0].Met || !strings.HasPrefix(g[0].Measured, "67.5% lower") {
		t.Errorf("queue goal %+v", g[0])
	}
	// Utilization: −2.5 % and −3.75 %: within 5 %.
	if !g[1].Met {
		t.Errorf("utilization goal %+v", g[1])
	}
	if !g[2].Met || g[2].Measured != "0 lost in the network, 0 in the hosts' kernels, 0 resent in 2 runs" {
		t.Errorf("drops goal %+v", g[2])
	}
	if !g[3].Met { // 7 < 7.5 ms
		t.Errorf("reaction goal %+v", g[3])
	}

	// Not met: a queue cut under 50 %, utilization 10 % down, a resend,
	// a reaction of an RTT, and a run whose PE never reacted.
	rs = []Result{
		result(schemeRFC6040, 1, 400, 80, 0, 0, nil), result(schemeRate, 1, 300, 72, 0, 1, f(10)),
		result(schemeRFC6040, 2, 400, 80, 0, 0, nil), result(schemeRate, 2, 300, 72, 0, 0, nil),
	}
	g = checkGoals(rs, oneWay)
	for i, gl := range g {
		if !gl.Evaluated || gl.Met || gl.verdict() != "**not met**" {
			t.Errorf("goal %d %+v: want not met", i, gl)
		}
	}
	// A failed run of (a) leaves its pair out; without (b) nothing is
	// evaluated.
	g = checkGoals([]Result{result(schemeRFC6040, 1, 400, 80, 0, 0, nil)}, oneWay)
	for _, gl := range g {
		if gl.Evaluated || gl.verdict() != "not evaluated" {
			t.Errorf("goal %+v evaluated without (b)", gl)
		}
	}
}

func TestSummarize(t *testing.T) {
	rs := []Result{
		result(schemeRFC6040, 1, 400, 80, 0, 0, nil), result(schemeRate, 1, 100, 78, 2, 5, f(6)),
		result(schemeRFC6040, 2, 500, 70, 0, 0, nil), result(schemeRate, 2, 0, 0, 0, 0, nil),
	}
	rs[3].Error = "boom"
	sums := summarize([]string{schemeRFC6040, schemeRate}, rs)
	a, b := sums[0], sums[1]
	if a.Runs != 2 || a.CoreP99KB.Mean != 450 || a.CoreUtil.Mean != 75 || a.PEReactionMs.N != 0 {
		t.Errorf("(a) %+v", a)
	}
	if b.Runs != 1 || b.Failed != 1 || b.Lost.Mean != 2 || b.Retransmits.Mean != 5 || b.PEReactionMs.Mean != 6 {
		t.Errorf("(b) %+v", b)
	}
	var buf bytes.Buffer
	renderTable(&buf, sums)
	out := buf.String()
	for _, want := range []string{"| (a) RFC 6040, one threshold | 112.5 ± ", "450.0 ± ", "(1 failed)", "6.0 ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSchemes(t *testing.T) {
	o := defaultOptions()
	o.peRate = 150 * units.Mbit
	s := o.setup()
	a, err := s.scheme(schemeRFC6040)
	if err != nil {
		t.Fatal(err)
	}
	c := a.Core.Classes[qdisc.ClassRoCE]
	if c.ECN != qdisc.ECNWRED || c.MinThBytes != o.t2 || c.MaxThBytes != o.t2Max || a.TwoThreshold || a.Limiter != nil || a.Agent.Mode != pe.Observe {
		t.Errorf("(a) %+v", a)
	}
	b, err := s.scheme(schemeRate)
	if err != nil {
		t.Fatal(err)
	}
	c = b.Core.Classes[qdisc.ClassRoCE]
	if c.ECN != qdisc.ECNTwoThreshold || c.TwoThreshold.T1Bytes != o.t1 || c.TwoThreshold.T2Bytes != o.t2 || c.TwoThreshold.NotifyInterval != o.notify ||
		!b.TwoThreshold || b.Limiter == nil || b.Limiter.Rate != o.peRate || b.Agent.Mode != pe.RateLimit || b.Agent.LineRate != o.peRate || b.Agent.RTT != 2*o.delay {
		t.Errorf("(b) %+v", b)
	}
	// (b)'s PE buffer marks on (a)'s curve.
	if l := b.Limiter.Classes[qdisc.ClassRoCE]; l.ECN != qdisc.ECNWRED || l.MinThBytes != o.t2 {
		t.Errorf("(b) limiter class %+v", l)
	}
	cc, err := s.scheme(schemeReroute)
	if err != nil {
		t.Fatal(err)
	}
	if !cc.SecondPath || cc.Agent.Mode != pe.Reroute || cc.Limiter != nil {
		t.Errorf("(c) %+v", cc)
	}
	if _, err := s.scheme("nope"); err == nil {
		t.Error("an unknown scheme")
	}
	for _, sc := range []Scheme{a, b, cc} {
		if sc.describe() == "" {
			t.Errorf("%s: no description", sc.Name)
		}
	}
}

func TestParseFlags(t *testing.T) {
	var out, errb bytes.Buffer
	o, code := parseFlags([]string{"-runs", "2", "-schemes", "rfc6040,pe-rate", "-rate", "200mbit"}, &out, &errb)
	if o == nil || code != exitOK {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	if o.runs != 2 || len(o.schemes) != 2 || o.rate != 200*units.Mbit || o.peRate != 300*units.Mbit || o.senderRTT != 10*time.Millisecond {
		t.Errorf("options %+v", o)
	}
	for _, args := range [][]string{
		{"-schemes", "x"}, {"-pe-rate", "50mbit"}, {"-t1", "100kb"}, {"-rate", "400mbit"}, {"-runs", "0"}, {"extra"},
	} {
		errb.Reset()
		if o, code := parseFlags(args, &out, &errb); o != nil || code != exitUsage {
			t.Errorf("%q: accepted", args)
		}
	}
	if o, code := parseFlags([]string{"-help"}, &out, &errb); o != nil || code != exitOK || !strings.Contains(errb.String(), "rfc6040") {
		t.Errorf("-help: code %d", code)
	}
}

func TestWriteOutputs(t *testing.T) {
	dir := t.TempDir()
	r1 := result(schemeRFC6040, 1, 400, 80, 0, 0, nil)
	r1.Series, r1.SeriesEveryMs = [][]float64{{0, 10, 0, 0}, {5, 50, 0, 0}}, 5
	r1.ShortFCTs = []float64{20000, 25000}
	r2 := result(schemeRate, 1, 100, 78, 0, 0, f(6))
	pq := stats.Summarize([]float64{1, 2})
	r2.PEQueueKB = &pq
	r2.Series, r2.SeriesEveryMs = [][]float64{{0, 5, 0, 30}}, 5
	r2.ShortFCTs = []float64{21000}
	rep := &Report{Setup: Setup{T1: 30000, T2: 90000, T2Max: 180000}, Schemes: []Result{r1, r2}}
	rep.Summary = summarize(schemeNames, rep.Schemes)
	rep.Goals = checkGoals(rep.Schemes, 5*time.Millisecond)
	files, err := writeOutputs(dir, rep)
	if err != nil || len(files) != 3 {
		t.Fatalf("files %v, %v", files, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "wanexp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Schemes) != 2 || *back.Schemes[1].PEReactionMs != 6 {
		t.Errorf("wanexp.json: %v", err)
	}
	if !math.IsNaN(ms(nil)) {
		t.Error("ms(nil)")
	}
}

// TestHostLost: the run's host-lost figures, net of each core's own
// starved time, in the summary, the table and the JSON file.
func TestHostLost(t *testing.T) {
	r := result(schemeReroute, 1, 100, 80, 0, 0, nil)
	u2 := 40.0
	r.Core2Util = &u2
	host := &hostlost.Report{Wall: 5 * time.Second, Starved: time.Second, HostStarved: true}
	r.hostLost(host, 4*time.Second, []time.Duration{time.Second, 2 * time.Second})
	if r.HostLost != host || r.HostLostShare != 0.25 || math.Abs(r.CoreUtilNet-80.0*4/3) > 1e-9 || *r.Core2UtilNet != 80 {
		t.Errorf("share %g, c1 net %g, c2 net %v: want 0.25, %g, 80", r.HostLostShare, r.CoreUtilNet, *r.Core2UtilNet, 80.0*4/3)
	}
	if l := r.hostLine(); !strings.Contains(l, "c1 lost 25.00% of the window to the host (util 106.7% net of it); host-starved:") {
		t.Errorf("host line %q", l)
	}
	// A core starved the whole window has no net utilization.
	r2 := result(schemeRFC6040, 1, 100, 80, 0, 0, nil)
	r2.hostLost(host, time.Second, []time.Duration{time.Second})
	if r2.CoreUtilNet != 0 {
		t.Errorf("c1 starved all along: net utilization %g, want 0", r2.CoreUtilNet)
	}
	r.ShortFCTNetUs = stats.Summarize(netUs([]time.Duration{4 * time.Millisecond, time.Millisecond}, []time.Duration{2 * time.Millisecond, 3 * time.Millisecond}, 2))
	if r.ShortFCTNetUs.Max != 1000 || r.ShortFCTNetUs.Min != 0 {
		t.Errorf("net FCTs %+v: want the fabric's 1000 and 0 µs", r.ShortFCTNetUs)
	}
	sums := summarize([]string{schemeReroute}, []Result{r})
	if s := sums[0]; s.HostLostPercent.Mean != 25 || s.HostStarved != 1 || s.FCTP99NetUs.Mean != 1000 {
		t.Errorf("summary %+v", s)
	}
	var buf bytes.Buffer
	renderTable(&buf, sums)
	if out := buf.String(); !strings.Contains(out, "| host-lost (c1) | core util net | short FCT p99 net |") || !strings.Contains(out, "| 25.00 % (1 host-starved) | 106.7 % | 1000 µs |") {
		t.Errorf("table:\n%s", out)
	}
	buf.Reset()
	renderTable(&buf, summarize([]string{schemeRFC6040}, []Result{result(schemeRFC6040, 1, 100, 80, 0, 0, nil)}))
	if strings.Contains(buf.String(), "host-lost") {
		t.Errorf("no metered run, yet the host's columns:\n%s", buf.String())
	}
	b, err := json.Marshal(Report{Schemes: []Result{r}, Summary: sums})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"host_lost":{`, `"host_lost_share":0.25`, `"core_util_net_percent"`, `"core2_util_net_percent":80`, `"short_fct_net_us"`, `"host_starved_runs":1`, `"short_fct_p99_net_us"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("wanexp.json lacks %s", k)
		}
	}
}

func TestParseFlagsTimescale(t *testing.T) {
	var out, errb bytes.Buffer
	o, code := parseFlags([]string{"-timescale", "4", "-rate", "200mbit", "-duration", "1s"}, &out, &errb)
	if o == nil || code != exitOK {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	if o.timescale != 4 || o.wire(o.duration) != 4*time.Second || o.rate != 200*units.Mbit {
		t.Errorf("options %+v", o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-timescale", "2000"}, "-timescale: timescale 2000: must be 1..1000"},
		{[]string{"-timescale", "x"}, "want a factor"},
		{[]string{"-timescale", "100", "-duration", "10s"}, "-duration (10s, 16m40s at -timescale 100): want it to take 500ms..5m"},
		// 3 x 400 Mbit/s is too much for the delay links, 3 x 100 on the wire is not.
		{[]string{"-rate", "400mbit"}, "at most 1gbit offered on the wire"},
	} {
		errb.Reset()
		if o, _ := parseFlags(tc.args, &out, &errb); o != nil || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: %q, want %q", tc.args, errb.String(), tc.want)
		}
	}
	if o, _ := parseFlags([]string{"-rate", "400mbit", "-timescale", "4"}, &out, &errb); o == nil {
		t.Errorf("400mbit slowed 4x refused: %s", errb.String())
	}
	errb.Reset()
	parseFlags([]string{"-help"}, &out, &errb)
	if !strings.Contains(errb.String(), "-timescale k slows the whole fabric") {
		t.Error("-help does not document -timescale")
	}
}
