//go:build linux

package labfile

import (
	"math"
	"slices"
	"testing"
)

// TestFairness: the window is the intervals in which every timed flow ran
// (f3 joins at the third sample), sized flows and series left out.
func TestFairness(t *testing.T) {
	p := &Plan{Flows: []FlowPlan{
		{Flow: &Flow{Name: "f1"}}, {Flow: &Flow{Name: "f2"}}, {Flow: &Flow{Name: "sized", Size: 1 << 20}}, {Flow: &Flow{Name: "f3"}},
	}}
	sample := func(t float64, states [4]string, bps [4]float64) Sample {
		s := Sample{T: t}
		for i := range 4 {
			s.Flows = append(s.Flows, FlowSample{State: states[i], GoodputBps: bps[i]})
		}
		return s
	}
	r, w := stateRunning, stateWaiting
	samples := []Sample{
		sample(0.5, [4]string{r, r, r, w}, [4]float64{300, 300, 9, 0}),
		sample(1.0, [4]string{r, r, r, r}, [4]float64{300, 300, 9, 50}), // f3 joined within
		sample(1.5, [4]string{r, r, stateDone, r}, [4]float64{200, 200, 0, 200}),
		sample(2.0, [4]string{r, r, stateDone, r}, [4]float64{100, 200, 0, 300}),
		sample(2.5, [4]string{r, stateDone, stateDone, r}, [4]float64{500, 0, 0, 100}),
	}
	f := fairness(p, samples)
	if f == nil || !slices.Equal(f.Flows, []string{"f1", "f2", "f3"}) || f.Samples != 2 || f.FromS != 1.0 || f.ToS != 2.0 {
		t.Fatalf("fairness %+v", f)
	}
	if !slices.Equal(f.GoodputBps, []float64{150, 200, 250}) {
		t.Errorf("goodputs %v, want 150 200 250", f.GoodputBps)
	}
	if want := 600.0 * 600 / (3 * (150*150 + 200*200 + 250*250)); math.Abs(f.Jain-want) > 1e-12 {
		t.Errorf("Jain %v, want %v", f.Jain, want)
	}
	if fairness(&Plan{Flows: p.Flows[:1]}, samples) != nil || fairness(p, samples[:1]) != nil {
		t.Error("one timed flow, or no whole interval: want nil")
	}
}
