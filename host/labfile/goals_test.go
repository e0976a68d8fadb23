//go:build linux

package labfile

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/lab/stats"
)

// TestGoalsValidate: a goal names a variant, a metric of a watched port
// or a flow group, and bounds; every mistake names its field.
func TestGoalsValidate(t *testing.T) {
	good := experimentFile + `goals:
  - {name: queue, variant: sharp, than: step, metric: queue_p99_bytes, port: sw:r, change_max: -0.3}
  - {name: lossless, variant: sharp, metric: lost_packets, max: 0}
  - {name: goodput, variant: step, metric: goodput_bps, flows: long, min: 150e6}
`
	f, err := Parse("x.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Goals) != 3 || *f.Goals[0].ChangeMax != -0.3 {
		t.Fatalf("goals %+v", f.Goals)
	}
	for _, tc := range []struct{ edit, want string }{
		{"name: queue,", "goals[0].name: required"},
		{"variant: sharp, than", `goals[0].variant: "nope": must be one of the file's variants (step, sharp)`},
		{"than: step", `goals[0].than: "sharp": must be another of the file's variants`},
		{"metric: queue_p99_bytes", `goals[0].metric: "queue": must be one of`},
		{"port: sw:r", `goals[0].port: "sw:s1": a queue_p99_bytes goal needs a watched port`},
		{"flows: long", `goals[2].flows: "longest": a goodput_bps goal needs a flow group`},
		{"change_max: -0.3", "goals[0].min: with than, bound the change"},
		{"max: 0}", "goals[1].max: required: a bound"},
	} {
		var bad string
		switch tc.edit {
		case "name: queue,":
			bad = strings.Replace(good, tc.edit, "name: '',", 1)
		case "variant: sharp, than":
			bad = strings.Replace(good, tc.edit, "variant: nope, than", 1)
		case "than: step":
			bad = strings.Replace(good, tc.edit, "than: sharp", 1)
		case "metric: queue_p99_bytes":
			bad = strings.Replace(good, tc.edit, "metric: queue", 1)
		case "port: sw:r":
			bad = strings.Replace(good, "port: sw:r, change", "port: sw:s1, change", 1)
		case "flows: long":
			bad = strings.Replace(good, tc.edit, "flows: longest", 1)
		case "change_max: -0.3":
			bad = strings.Replace(good, tc.edit, "min: 1", 1)
		case "max: 0}":
			bad = strings.Replace(good, "metric: lost_packets, max: 0}", "metric: lost_packets}", 1)
		}
		if _, err := Parse("x.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want …%s…", tc.edit, err, tc.want)
		}
	}
}

// TestGoalsPE: a PE's metric names a pe node, and only a PE's metric
// takes node.
func TestGoalsPE(t *testing.T) {
	for _, tc := range []struct{ goal, want string }{
		{"{name: react, variant: sharp, metric: pe_reaction_ms, node: sw, max: 7.5}", `goals[0].node: "sw": a pe_reaction_ms goal needs a pe node of the file`},
		{"{name: lossless, variant: sharp, metric: lost_packets, node: sw, max: 0}", `goals[0].node: "sw": only with a pe's metric`},
	} {
		_, err := Parse("x.yaml", []byte(experimentFile+"goals:\n  - "+tc.goal+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want …%s…", tc.goal, err, tc.want)
		}
	}
	g := Goal{Name: "react", Variant: "pe-rate", Metric: "pe_reaction_ms", Node: "pe1", Max: new(7.5)}
	res := evalGoals([]Goal{g}, []VariantSummary{{Name: "pe-rate", Runs: 2,
		PEs: []PESummary{{Node: "pe1", FirstReactionMS: stats.NewStat([]float64{5.1, 5.5})}}}})
	if len(res) != 1 || !res[0].Evaluated || !res[0].Met || res[0].Want != "pe_reaction_ms of pe pe1 of pe-rate <= 7.5 (mean over the runs)" {
		t.Errorf("%+v", res)
	}
}

// TestEvalGoals: a change is paired run by run; a bound on one variant
// takes its mean; verdicts and the measured text are printed.
func TestEvalGoals(t *testing.T) {
	port := func(q ...float64) []PortSummary {
		return []PortSummary{{Name: "sw:r", QueueP99Bytes: stats.NewStat(q)}}
	}
	sums := []VariantSummary{
		{Name: "step", Runs: 3, Ports: port(100e3, 120e3, 80e3), Lost: stats.NewStat([]float64{0, 0, 0})},
		{Name: "sharp", Runs: 3, Ports: port(40e3, 60e3, 40e3), Lost: stats.NewStat([]float64{0, 2, 0})},
	}
	v := func(x float64) *float64 { return &x }
	gs := evalGoals([]Goal{
		{Name: "queue", Variant: "sharp", Than: "step", Metric: "queue_p99_bytes", Port: "sw:r", ChangeMax: v(-0.4)},
		{Name: "lossless", Variant: "sharp", Metric: "lost_packets", Max: v(0)},
		{Name: "lossless step", Variant: "step", Metric: "lost_packets", Max: v(0)},
	}, sums)
	// Run by run: 0.4, 0.5, 0.5 of step's: -0.6, -0.5, -0.5.
	if c := gs[0].Measured; c.N != 3 || math.Abs(c.Mean-(-1.6/3)) > 1e-9 || !gs[0].Met {
		t.Errorf("queue goal %+v", gs[0])
	}
	if !gs[1].Evaluated || gs[1].Met || !gs[2].Met {
		t.Errorf("lossless goals %+v %+v", gs[1], gs[2])
	}
	var buf bytes.Buffer
	writeGoals(&buf, gs)
	for _, want := range []string{"met            queue", "NOT MET        lossless", "-53.3% (95% CI", "want queue_p99_bytes at sw:r: sharp at most -40% against step"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("goals lack %q:\n%s", want, buf.String())
		}
	}
	// A variant with no run is not evaluated.
	gs = evalGoals([]Goal{{Name: "q", Variant: "sharp", Than: "step", Metric: "queue_p99_bytes", Port: "sw:r", ChangeMax: v(0)}},
		[]VariantSummary{{Name: "step"}, sums[1]})
	if gs[0].Evaluated || gs[0].Text != "no run of step" {
		t.Errorf("no runs: %+v", gs[0])
	}
}

// TestGoalsOfOneRun: a file without variants bounds its own runs (no
// variant, no than), and a single run reports them.
func TestGoalsOfOneRun(t *testing.T) {
	src := base + `goals:
  - {name: busy, metric: utilization, port: sw1:r1, min: 0.95}
  - {name: fair, metric: jain, min: 0.95}
`
	f, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ old, new, want string }{
		{"{name: fair, metric", "{name: fair, variant: step, metric", `goals[1].variant: "step": the file has no variants: leave variant out`},
		{"{name: fair, metric", "{name: fair, than: step, metric", `goals[1].than: "step": the file has no variants to compare with`},
	} {
		if _, err := Parse("t.yaml", []byte(strings.Replace(src, c.old, c.new, 1))); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want …%s…", err, c.want)
		}
	}
	res := &Result{Ports: []PortResult{{Name: "sw1:r1", Watched: true, Utilization: 0.97}}, Fairness: &Fairness{Jain: 0.9}}
	gs := f.runGoals("", res)
	if len(gs) != 2 || !gs[0].Evaluated || !gs[0].Met || !gs[1].Evaluated || gs[1].Met {
		t.Fatalf("goals %+v: want busy met, fair not", gs)
	}
	res.Goals = gs
	var b bytes.Buffer
	res.WriteSummary(&b)
	if !strings.Contains(b.String(), "fair") || !strings.Contains(b.String(), "jain >= 0.95 (mean over the runs)") || !strings.Contains(b.String(), "0.900") {
		t.Errorf("summary:\n%s", b.String())
	}
}

// TestCNPs: the rocev2 flows' CNPs sent and unanswered (sent past
// handled + ignored), other transports left out; none without rocev2.
func TestCNPs(t *testing.T) {
	res := &Result{Flows: []FlowResult{
		{Transport: TransportRoCEv2, CNPSent: 10, CNPHandled: 7, CNPIgnored: 3},
		{Transport: TransportRoCEv2, CNPSent: 5, CNPHandled: 3},
		{Transport: TransportRoCEv2, CNPSent: 2, CNPHandled: 4}, // a run's edge: not negative
		{Transport: TransportUET, CNPSent: 99},
	}}
	if sent, un, ok := res.CNPs(); sent != 17 || un != 2 || !ok {
		t.Errorf("CNPs = %d, %d, %v; want 17, 2, true", sent, un, ok)
	}
	if _, _, ok := (&Result{Flows: []FlowResult{{Transport: TransportTCP}}}).CNPs(); ok {
		t.Error("no rocev2 flow: want ok false")
	}
	vs := summarize("", []*Result{res}, 1)
	if vs.CNPsSent.Mean != 17 || vs.CNPsUnanswered.Mean != 2 {
		t.Errorf("summary: sent %v, unanswered %v", vs.CNPsSent, vs.CNPsUnanswered)
	}
}
