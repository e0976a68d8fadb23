//go:build linux

package labfile

import "github.com/fabriclab/fabriclab/host/lab/stats"

// Fairness is how evenly the timed flows shared the fabric while all of
// them ran (the demo's "while all competed"): Jain's index of their
// goodputs over the samples in which every one of them was running, this
// sample and the one before (a whole interval each).
type Fairness struct {
	// Flows are the timed flows (no size, one instance), in file order,
	// and GoodputBps each one's mean goodput over the window.
	Flows      []string  `json:"flows"`
	GoodputBps []float64 `json:"goodput_bps"`
	// FromS and ToS bound the window (seconds since the run's start);
	// Samples is how many intervals it spans.
	FromS   float64 `json:"from_s"`
	ToS     float64 `json:"to_s"`
	Samples int     `json:"samples"`
	Jain    float64 `json:"jain"`
}

// fairness is the timed flows' Fairness from the run's samples; nil with
// fewer than two timed flows, or no interval in which all of them ran.
func fairness(p *Plan, samples []Sample) *Fairness {
	var idx []int
	f := &Fairness{}
	for i := range p.Flows {
		fl := p.Flows[i].Flow
		if fl.Size == 0 && fl.Count <= 1 {
			idx = append(idx, i)
			f.Flows = append(f.Flows, fl.Name)
		}
	}
	if len(idx) < 2 {
		return nil
	}
	running := func(s *Sample) bool {
		for _, i := range idx {
			if i >= len(s.Flows) || s.Flows[i].State != stateRunning {
				return false
			}
		}
		return true
	}
	f.GoodputBps = make([]float64, len(idx))
	for k := 1; k < len(samples); k++ {
		if !running(&samples[k-1]) || !running(&samples[k]) {
			continue
		}
		if f.Samples == 0 {
			f.FromS = samples[k-1].T
		}
		f.ToS = samples[k].T
		f.Samples++
		for j, i := range idx {
			f.GoodputBps[j] += samples[k].Flows[i].GoodputBps
		}
	}
	if f.Samples == 0 {
		return nil
	}
	for j := range f.GoodputBps {
		f.GoodputBps[j] /= float64(f.Samples)
	}
	f.Jain = stats.Jain(f.GoodputBps)
	return f
}
