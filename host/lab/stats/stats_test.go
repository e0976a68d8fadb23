package stats

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestNearestRank(t *testing.T) {
	one2ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{one2ten, 0.5, 5},
		{one2ten, 0.9, 9}, // not 10: 0.9·10 is exactly rank 9
		{one2ten, 0.91, 10},
		{one2ten, 0.99, 10},
		{one2ten, 1, 10},
		{one2ten, 0.01, 1},
		{[]float64{7}, 0.99, 7},
		{nil, 0.5, 0},
	} {
		if got := NearestRank(tc.xs, tc.q); got != tc.want {
			t.Errorf("NearestRank(%v, %g) = %g, want %g", tc.xs, tc.q, got, tc.want)
		}
	}
	// 200 samples: p99 is the 198th, so one outlier in 100 does not set it.
	xs := make([]float64, 200)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	if got := NearestRank(xs, 0.99); got != 198 {
		t.Errorf("p99 of 1..200 = %g, want 198", got)
	}
}

func TestSummarize(t *testing.T) {
	in := []float64{5, 1, 4, 2, 3}
	d := Summarize(in)
	want := Dist{N: 5, Min: 1, Mean: 3, P50: 3, P90: 5, P99: 5, Max: 5}
	if d != want {
		t.Errorf("Summarize = %+v, want %+v", d, want)
	}
	if !slices.Equal(in, []float64{5, 1, 4, 2, 3}) {
		t.Errorf("Summarize sorted its input: %v", in)
	}
	if (Summarize(nil) != Dist{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", Summarize(nil))
	}
}

func TestStat(t *testing.T) {
	s := NewStat([]float64{1, 2, 3, math.NaN(), 4, 5})
	// mean 3, sd sqrt(2.5), t(4) = 2.776
	if s.N != 5 || s.Mean != 3 || s.Min != 1 || s.Max != 5 || math.Abs(s.CI95-2.776*math.Sqrt(2.5)/math.Sqrt(5)) > 1e-9 {
		t.Errorf("NewStat = %+v", s)
	}
	if one := NewStat([]float64{7}); one.N != 1 || one.Mean != 7 || !math.IsNaN(one.CI95) {
		t.Errorf("one value: %+v", one)
	}
	b, err := json.Marshal(NewStat(nil))
	if err != nil || !strings.Contains(string(b), `"mean":null`) {
		t.Errorf("an empty stat encodes as %s, %v: want null, not NaN", b, err)
	}
	if T975(40) != 1.96 || T975(1) != 12.706 || !math.IsNaN(T975(0)) {
		t.Error("T975 table")
	}
}

// TestJain: equal shares 1, one flow with everything 1/n, a 3:1 split
// 0.8, nothing 0.
func TestJain(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{5, 5, 5}, 1}, {[]float64{9, 0, 0}, 1.0 / 3}, {[]float64{3, 1}, 0.8}, {nil, 0}, {[]float64{0, 0}, 0}} {
		if got := Jain(c.xs); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Jain(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}
