//go:build linux

package main

import "testing"

// TestSoakJudge: the soak's verdict from its samples. Steps' goroutine
// floors that wobble by one are flat; a floor that rises, or memory that
// grows 10 %, is growth; memory given back is not; five samples are too
// few, and a run under 10 minutes is shown, not judged.
func TestSoakJudge(t *testing.T) {
	samples := func(n int, rss func(i int) uint64, gor func(i int) int) []SoakSample {
		var s []SoakSample
		for i := range n {
			s = append(s, SoakSample{AtSeconds: float64(60 * i), RSSBytes: rss(i), HeapBytes: 30 << 20, Goroutines: gor(i)})
		}
		return s
	}
	flatRSS := func(i int) uint64 { return 68<<20 + uint64(i%3)<<20 }
	swing := func(i int) int { return []int{14, 14, 15, 14, 14}[i%5] } // steps' floors
	for _, tc := range []struct {
		name    string
		s       []SoakSample
		verdict string
	}{
		{"swinging goroutines, steady memory", samples(60, flatRSS, swing), "flat"},
		{"the first step's floor as the flows start", samples(61, flatRSS, func(i int) int { return []int{5, 17}[min(i, 1)] }), "flat"},
		{"a goroutine leaked every 6 samples", samples(60, flatRSS, func(i int) int { return 14 + i/6 }), "grew"},
		{"memory up 10 %", samples(60, func(i int) uint64 { return 68<<20 + uint64(i)*(68<<20)/10/60 }, swing), "grew"},
		{"memory given back, 10 %", samples(60, func(i int) uint64 { return 68<<20 - uint64(i)*(68<<20)/10/60 }, swing), "shrank"},
		{"five samples", samples(5, flatRSS, swing), "too short"},
		{"eight minutes", samples(9, func(i int) uint64 { return 30<<20 + uint64(i)<<22 }, swing), "not judged (under 10m0s)"},
	} {
		r := &SoakReport{Goal: soakGoal, Samples: tc.s}
		r.judge()
		if r.Verdict != tc.verdict {
			t.Errorf("%s: %s (RSS %.3f, goroutines %.3f), want %s", tc.name, r.Verdict, r.RSSRatio, r.GoroutineRatio, tc.verdict)
		}
	}
}
