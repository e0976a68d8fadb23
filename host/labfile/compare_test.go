//go:build linux

package labfile

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/pe"
	"github.com/fabriclab/fabriclab/host/tcpflow"
	"github.com/fabriclab/fabriclab/qdisc"
)

// experimentFile is a small comparison: tcp flows, a series, variants.
const experimentFile = `name: x
seed: 7
runs: 3
nodes:
  - {name: s1, kind: host}
  - {name: s2, kind: host}
  - {name: sw, kind: switch}
  - {name: r, kind: host}
links:
  - {a: s1, b: sw, delay: 400us}
  - {a: s2, b: sw, delay: 1400us}
  - {a: sw, b: r, rate: 200mbit}
ports:
  - {port: sw:r, tc: ["0:step:k=72500b,limit=290000b"]}
flows:
  - {name: long1, group: long, from: s1, to: r, transport: tcp}
  - {name: long2, group: long, from: s2, to: r, transport: tcp, cc: cubic, dscp: 26}
  - {name: short, from: s1, to: r, transport: tcp, size: 3kb, size_max: 60kb, count: 50, pause: 20ms, start: 1s}
  - {name: query, from: s2, to: r, size: 20kb, count: 5, every: 200ms, start: 2s}
variants:
  - name: step
  - name: sharp
    ports: [{port: sw:r, tc: ["0:ecnsharp:ins=2900us,pst=323us,interval=2900us"]}]
`

// TestPlanComparison: tcp flows get their servers (one per receiver and
// congestion control), ECN at both ends, the path's base RTT; variants
// edit the file's ports and nothing else.
func TestPlanComparison(t *testing.T) {
	f, err := Parse("x.yaml", []byte(experimentFile))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Plan()
	if f.Runs != 3 || f.Seed != 7 || !slices.Equal(f.VariantNames(), []string{"step", "sharp"}) {
		t.Errorf("runs %d, seed %d, variants %v", f.Runs, f.Seed, f.VariantNames())
	}
	l1, l2, short, query := p.Flows[0], p.Flows[1], p.Flows[2], p.Flows[3]
	if l1.TCP == nil || l1.TCP.CC != CCDCTCP || l1.TCP.Duration != DefaultDuration || l1.TCP.WriteBytes != tcpflow.DefaultWrite {
		t.Errorf("long1: %+v", l1.TCP)
	}
	if l2.TCP == nil || l2.TCP.CC != "cubic" || l2.TCP.DSCP != 26 || l2.Server == l1.Server {
		t.Errorf("long2: %+v (server %d, long1's %d): cubic needs its own listener", l2.TCP, l2.Server, l1.Server)
	}
	if short.Server != l1.Server || p.Servers[l1.Server].Addr.Port() != TCPPort || p.Servers[l2.Server].Addr.Port() != TCPPort+1 {
		t.Errorf("servers %+v", p.Servers)
	}
	if l1.BaseRTT != 800*time.Microsecond || l2.BaseRTT != 2800*time.Microsecond {
		t.Errorf("base RTTs %v, %v; want 800µs, 2.8ms (the links' delays both ways)", l1.BaseRTT, l2.BaseRTT)
	}
	if query.TCP != nil || query.Client.Bytes != 20<<10 || query.Flow.Count != 5 {
		t.Errorf("query: %+v", query)
	}
	for _, n := range p.Spec.Nodes {
		want := map[string]bool{"s1": true, "s2": true, "r": true}[n.Name]
		if got := n.Sysctls["net.ipv4.tcp_ecn"] == "1"; got != want {
			t.Errorf("%s: tcp_ecn %q", n.Name, n.Sysctls["net.ipv4.tcp_ecn"])
		}
	}
	if len(p.Variants) != 2 {
		t.Fatalf("variants %+v", p.Variants)
	}
	step, sharp := p.Variants[0].Plan.Ports[0].Config.Classes[0], p.Variants[1].Plan.Ports[0].Config.Classes[0]
	if step != p.Ports[0].Config.Classes[0] || step.ECN != qdisc.ECNStep || step.MinThBytes != 72500 {
		t.Errorf("step: %+v", step)
	}
	if sharp.ECN != qdisc.ECNSharp || sharp.LimitBytes != 290000 || sharp.InsTarget != 2900*time.Microsecond {
		t.Errorf("sharp: %+v: the file's limit stays, the mode changes", sharp)
	}
	if p.Ports[0].Config.Classes[0].ECN != qdisc.ECNStep {
		t.Errorf("a variant changed the file's port")
	}
	// Deployed, tcp flows and series run on their senders' fabriclabd
	// (the file's seed and each flow's place for the sizes) against the
	// receiver's servers.
	if d, err := f.Deploy("s1"); err != nil || d.Seed != 7 || len(d.Flows) != 2 || d.Flows[0].Index != 0 || d.Flows[1].Index != 2 || d.Flows[1].Flow.Count != 50 {
		t.Errorf("Deploy of s1 (long1, the short series): %+v, %v", d, err)
	}
	if d, err := f.Deploy("r"); err != nil || len(d.Servers) != 3 || d.Servers[0].Transport != TransportTCP || d.Servers[1].CC != "cubic" {
		t.Errorf("Deploy of the tcp receiver: %+v, %v", d, err)
	}
}

// TestDrawSizes: sizes lie in size..size_max, depend on the seed and the
// flow only (every variant of a run replays them), and spread.
func TestDrawSizes(t *testing.T) {
	fl := &Flow{Size: 3000, SizeMax: 60000, Count: 2000}
	a, b := DrawSizes(fl, 1, 3), DrawSizes(fl, 1, 3)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed and flow drew different sizes")
	}
	if slices.Equal(a, DrawSizes(fl, 2, 3)) || slices.Equal(a, DrawSizes(fl, 1, 4)) {
		t.Error("another seed or flow drew the same sizes")
	}
	var sum float64
	for _, n := range a {
		if n < 3000 || n > 60000 {
			t.Fatalf("size %d outside 3000..60000", n)
		}
		sum += float64(n)
	}
	if mean := sum / float64(len(a)); math.Abs(mean-31500) > 1500 {
		t.Errorf("mean size %.0f, want about 31500 (uniform)", mean)
	}
	if s := DrawSizes(&Flow{Size: 5000, Count: 3}, 1, 0); !slices.Equal(s, []uint64{5000, 5000, 5000}) {
		t.Errorf("fixed size: %v", s)
	}
	if s := DrawSizes(&Flow{Count: 1}, 1, 0); s != nil {
		t.Errorf("timed flow: %v", s)
	}
}

// TestSummarize: a variant's metrics over its runs, mean and 95 % CI, the
// group's series pooled per run.
func TestSummarize(t *testing.T) {
	run := func(util, r1, r2 float64) *Result {
		series := func(r float64) *SeriesResult {
			return &SeriesResult{Count: 2, Completed: 2, Instances: []InstanceResult{{FCTS: r / 1000, FCTRatio: r}, {FCTS: 2 * r / 1000, FCTRatio: 2 * r}}}
		}
		return &Result{
			Ports: []PortResult{{Name: "sw:r", Watched: true, Utilization: util, MarkedFraction: 0.1}, {Name: "sw:s1", Watched: false}},
			Flows: []FlowResult{
				{Name: "a", Group: "short", GoodputBps: 1e6, Series: series(r1)},
				{Name: "b", Group: "short", GoodputBps: 2e6, Series: series(r2)},
				{Name: "c", Group: "c", GoodputBps: 5e6, FCTRatio: 1.5},
			},
		}
	}
	vs := summarize("v", []*Result{run(0.9, 1, 3), run(0.8, 2, 4), run(1.0, 3, 5)}, 4)
	if vs.Runs != 3 || vs.Failed != 1 || len(vs.Ports) != 1 || len(vs.Flows) != 2 {
		t.Fatalf("%+v", vs)
	}
	u := vs.Ports[0].Utilization
	// Student's t at 2 degrees of freedom: 4.303 · 0.1 / √3.
	if math.Abs(u.Mean-0.9) > 1e-9 || math.Abs(u.CI95-4.303*0.1/math.Sqrt(3)) > 1e-6 {
		t.Errorf("utilization %+v", u)
	}
	g := vs.Flows[0]
	if g.Name != "short" || g.Flows != 2 || g.Instances != 12 || math.Abs(g.GoodputBps.Mean-3e6) > 1 {
		t.Errorf("group short: %+v", g)
	}
	// Run 1 pools ratios 1, 2, 3, 6: nearest-rank p50 2, p99 6.
	if g.RatioP50.Values[0] != 2 || g.RatioP99.Values[0] != 6 {
		t.Errorf("run 1's pooled p50 %v, p99 %v; want 2, 6", g.RatioP50.Values, g.RatioP99.Values)
	}
	if c := vs.Flows[1]; c.FCTRatio.Mean != 1.5 || c.Instances != 0 || c.RatioP50.N != 0 {
		t.Errorf("flow c: %+v", c)
	}
	var buf bytes.Buffer
	(&Comparison{Name: "x", Runs: 4, Variants: []string{"v"}, Summary: []VariantSummary{vs}}).WriteSummary(&buf)
	for _, want := range []string{"90.0±24.8%", "short (2)", "1 of 4 runs failed"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestPlanWANVariants: a variant's pes get their decap and agent, a rate
// agent its limiter port on the pe's WAN device; the file's plan keeps
// its own.
func TestPlanWANVariants(t *testing.T) {
	f, err := Load("examples/wan-experiment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base := f.Plan()
	if len(base.Ports) != 2 || len(base.PEs) != 4 || base.PEs[0].Agent == nil || base.PEs[0].Agent.Mode != pe.Observe || base.PEs[0].Config.TwoThreshold {
		t.Fatalf("the file's plan: ports %d, PEs %+v", len(base.Ports), base.PEs)
	}
	// Two tunnel paths per pe; both route the other DC over path 1.
	for i, want := range []struct {
		node, dev string
		path      int
	}{{"pe1", "core", 0}, {"pe1", "core2", 1}, {"pe2", "core", 0}, {"pe2", "core2", 1}} {
		if pp := base.PEs[i]; pp.Node != want.node || pp.Dev != want.dev || pp.Path != want.path || (pp.Path == 1 && (pp.Agent != nil || pp.Spill != nil)) {
			t.Errorf("PEs[%d]: %s:%s path %d", i, pp.Node, pp.Dev, pp.Path)
		}
	}
	if u := base.PEs[0].Unspill; len(u) != 6 || len(base.PEs[0].Spill) != 6 || len(base.PEs[0].Spill[0].Vias) != 1 {
		t.Errorf("unspill %v, spill %v", u, base.PEs[0].Spill)
	}
	for _, rs := range base.Spec.Routes {
		if rs.Node == "pe1" && rs.Dst.String() == "198.18.9.0/24" && (rs.Via.String() != "198.18.4.2" || len(rs.Vias) != 0) {
			t.Errorf("pe1's route to r's subnet: %+v; want path 1's relay only", rs)
		}
	}
	vp := base.Variants[1].Plan
	if base.Variants[1].Name != "pe-rate" || len(vp.Ports) != 3 {
		t.Fatalf("pe-rate: %+v", vp.Ports)
	}
	lim := vp.Ports[2]
	if lim.Name != "pe1:core" || !lim.Limiter || lim.Config.Rate != 150e6 || lim.PeerNode != "_l4" || lim.Config.Classes[3].MaxThBytes != 180<<10 {
		t.Errorf("the limiter: %+v", lim)
	}
	a := vp.PEs[0].Agent
	if vp.PEs[0].Node != "pe1" || a == nil || a.Mode != pe.RateLimit || a.LineRate != 150e6 || a.RTT != 10*time.Millisecond {
		t.Errorf("pe1's agent: %+v (the RTT: twice the WAN's 5 ms)", a)
	}
	if !vp.PEs[0].Config.TwoThreshold || !vp.PEs[2].Config.TwoThreshold || vp.PEs[2].Agent != nil || vp.PEs[1].Agent != nil {
		t.Errorf("pe-rate's PEs: %+v", vp.PEs)
	}
	if c := vp.Ports[0].Config.Classes[3]; c.ECN != qdisc.ECNTwoThreshold || c.TwoThreshold.NotifyInterval != time.Millisecond || c.LimitBytes != 4<<20 {
		t.Errorf("the WAN port in pe-rate: %+v", c)
	}
	rr := base.Variants[2].Plan
	if a := rr.PEs[0].Agent; base.Variants[2].Name != "reroute" || a == nil || a.Mode != pe.Reroute || len(rr.Ports) != 2 {
		t.Errorf("reroute: agent %+v, ports %d", a, len(rr.Ports))
	}
	// Deployed: pe1 runs its agent; a rate variant's limiter is one of
	// pe1's ports; a reroute agent moves pe1's own routes alone.
	if d, err := f.Deploy("pe1"); err != nil || len(d.PEs) != 2 || d.PEs[0].Agent == nil || d.PEs[0].Agent.Mode != pe.Observe || len(d.Ports) != 0 {
		t.Errorf("Deploy pe1: %+v, %v", d, err)
	}
	if d, err := f.DeployVariant("pe1", "pe-rate"); err != nil || d.Variant != "pe-rate" || d.PEs[0].Agent.Mode != pe.RateLimit || len(d.Ports) != 1 || !d.Ports[0].Limiter || d.Ports[0].Dev != "core" {
		t.Errorf("DeployVariant pe1 pe-rate: %+v, %v", d, err)
	}
	if d, err := f.DeployVariant("pe1", "reroute"); err != nil || d.PEs[0].Agent.Mode != pe.Reroute {
		t.Errorf("DeployVariant pe1 reroute: %v", err)
	} else if own := OwnRoutes(d.PEs[0].Spill, "pe1"); len(own) != 2 || len(d.PEs[0].Spill) != 6 || len(own[0].Vias) != 1 {
		t.Errorf("pe1's own spill routes %+v of %+v", own, d.PEs[0].Spill)
	}
	if _, err := f.DeployVariant("pe1", "nope"); err == nil || !strings.Contains(err.Error(), `variant: "nope": not a variant of`) {
		t.Errorf("DeployVariant of no variant: %v", err)
	}
	if d, err := f.Deploy("pe2"); err != nil || len(d.PEs) != 2 {
		t.Errorf("Deploy pe2: %v", err)
	}
}

// TestRoundQCTs: a round's QCT spans its first start to its last end;
// flows that are not rounds have none.
func TestRoundQCTs(t *testing.T) {
	series := func(every float64, in ...InstanceResult) *SeriesResult {
		return &SeriesResult{Count: len(in), EveryS: every, Instances: in}
	}
	r := &Result{Flows: []FlowResult{
		// Each instance's setup takes 5 ms before its data.
		{Name: "q1", StartS: 1, Series: series(0.2, InstanceResult{StartS: 0.995, EndS: 1.010, Seconds: 0.010}, InstanceResult{StartS: 1.195, EndS: 1.230, Seconds: 0.030})},
		{Name: "q2", StartS: 1, Series: series(0.2, InstanceResult{StartS: 0.996, EndS: 1.021, Seconds: 0.020}, InstanceResult{StartS: 1.195, EndS: 1.210, Seconds: 0.010})},
		{Name: "q3", StartS: 1, Series: series(0.2, InstanceResult{StartS: 0.995, EndS: 1.010, Seconds: 0.010}, InstanceResult{StartS: 1.195, Error: "cut"})},
		{Name: "s", StartS: 1, Series: series(0, InstanceResult{StartS: 1.0, Seconds: 0.010}, InstanceResult{StartS: 1.1, Seconds: 0.010})},
	}}
	q, ok := roundQCTs(r, []int{0, 1})
	if !ok || len(q) != 2 || math.Abs(q[0]-0.021) > 1e-9 || math.Abs(q[1]-0.030) > 1e-9 {
		t.Errorf("QCTs %v %v; want [0.021 0.030]", q, ok)
	}
	if q, ok := roundQCTs(r, []int{0, 2}); !ok || len(q) != 1 {
		t.Errorf("with a failed instance: %v %v; want round 1 only", q, ok)
	}
	for _, idx := range [][]int{{0}, {0, 3}} {
		if _, ok := roundQCTs(r, idx); ok {
			t.Errorf("%v are not rounds", idx)
		}
	}
}

// TestBoundText: a p99 over runs is shown as the histogram's bounds, never
// as a mean of bucket edges (33554±0us was one).
func TestBoundText(t *testing.T) {
	for _, tc := range []struct {
		values []float64 // µs: bucket upper edges, 2^n ns
		want   string
	}{
		{nil, "-"},
		{[]float64{33554.432, 33554.432, 33554.432}, "<33.6ms"},
		{[]float64{16777.216, 67108.864, 33554.432}, "<16.8ms..<67.2ms"},
		{[]float64{8.192}, "<8.2us"},
	} {
		if got := boundText(stats.NewStat(tc.values)); got != tc.want {
			t.Errorf("boundText(%v) = %q, want %q", tc.values, got, tc.want)
		}
	}
}

// TestLoopTable: a comparison with rocev2 flows prints each variant's
// marks, stops, CNPs and queue, the ratio to the first variant, and the
// runs in which the check found a layer silent.
func TestLoopTable(t *testing.T) {
	run := func(marks, stops, cnps uint64, q99 float64, silent Layer) *Result {
		st := &qdisc.Stats{Classes: make([]qdisc.ClassStats, qdisc.NumClasses)}
		st.Classes[3].PPFCStopsSent = stops
		r := &Result{
			Ports: []PortResult{{Name: "sw:r", Watched: true, CEMarked: marks, Stats: st, QueueP99Bytes: q99, QueueSamples: 10}},
			Flows: []FlowResult{{Name: "f", Transport: TransportRoCEv2, CNPSent: cnps, CNPHandled: cnps}},
			Check: &CheckReport{Flows: []FlowCheck{{Flow: "f", Kind: CheckOK}}},
		}
		if silent != "" {
			r.Check.Flows[0].Layer = silent
		}
		return r
	}
	base := summarize("kmin-150kb", []*Result{run(100, 4, 50, 500e3, ""), run(100, 4, 50, 500e3, "")}, 2)
	low := summarize("kmin-80kb", []*Result{run(2700, 0, 900, 250e3, ""), run(2700, 0, 900, 250e3, LayerNP)}, 2)
	if p := low.Ports[0]; p.CEMarked.Mean != 2700 || p.PPFCStops.Mean != 0 || low.CNPsHandled.Mean != 900 || low.Silent[LayerNP] != 1 {
		t.Fatalf("summary: %+v, handled %+v, silent %v", p, low.CNPsHandled, low.Silent)
	}
	var buf bytes.Buffer
	(&Comparison{Name: "x", Runs: 2, Variants: []string{"kmin-150kb", "kmin-80kb"}, Summary: []VariantSummary{base, low}}).WriteSummary(&buf)
	for _, want := range []string{"CE marked       PPFC stops        CNPs sent", "vs kmin-150kb", "×27.00", "×0.00", "×18.00", "×0.50",
		"kmin-150kb     three layers: none silent in 2 runs", "kmin-80kb      three layers: silent NP in 1 of 2 runs"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, buf.String())
		}
	}
}
