// Package stats summarises the measurements of the lab's experiments:
// distributions with nearest-rank percentiles (Dist) and a metric over
// repeated runs with its 95 % confidence interval (Stat). Pure, shared by
// host/labfile, host/htsim and the benchmark.
package stats

import (
	"encoding/json"
	"math"
	"slices"
)

// Dist summarises a sample. Percentiles are nearest-rank: the smallest
// sample with at least q·N samples at or below it, so a p99 is a value
// that was measured, not interpolated.
type Dist struct {
	N    int     `json:"n"`
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Summarize is xs's distribution; the zero Dist for none.
func Summarize(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Dist{
		N:    len(s),
		Min:  s[0],
		Mean: sum / float64(len(s)),
		P50:  NearestRank(s, 0.50),
		P90:  NearestRank(s, 0.90),
		P99:  NearestRank(s, 0.99),
		Max:  s[len(s)-1],
	}
}

// NearestRank is the q-quantile (0 < q <= 1) of sorted, nearest-rank.
func NearestRank(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	// The epsilon keeps 0.9·10 = 9.000000000000002 at rank 9.
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Stat is one metric over the runs of a scheme.
type Stat struct {
	N      int       `json:"n"`
	Mean   float64   `json:"mean"`
	CI95   float64   `json:"ci95"` // half-width: the mean ± this covers the true mean with 95 % confidence
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Values []float64 `json:"values"`
}

// tQuantile975 is Student's t at 0.975 for df = 1..30 (two-sided 95 %).
var tQuantile975 = []float64{
	12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
}

// T975 is Student's t at 0.975 with df degrees of freedom (the normal 1.96
// beyond the table).
func T975(df int) float64 {
	switch {
	case df < 1:
		return math.NaN()
	case df <= len(tQuantile975):
		return tQuantile975[df-1]
	}
	return 1.96
}

// NewStat summarises values; NaNs (a run without the metric) are left out.
func NewStat(values []float64) Stat {
	s := Stat{Min: math.Inf(1), Max: math.Inf(-1)}
	var sum float64
	for _, v := range values {
		if math.IsNaN(v) {
			continue
		}
		s.Values = append(s.Values, v)
		sum += v
		s.Min, s.Max = min(s.Min, v), max(s.Max, v)
	}
	s.N = len(s.Values)
	if s.N == 0 {
		return Stat{Mean: math.NaN(), CI95: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	s.Mean = sum / float64(s.N)
	if s.N < 2 {
		s.CI95 = math.NaN()
		return s
	}
	var ss float64
	for _, v := range s.Values {
		ss += (v - s.Mean) * (v - s.Mean)
	}
	sd := math.Sqrt(ss / float64(s.N-1))
	s.CI95 = T975(s.N-1) * sd / math.Sqrt(float64(s.N))
	return s
}

// Lo and Hi are the ends of the confidence interval.
func (s Stat) Lo() float64 { return s.Mean - s.CI95 }
func (s Stat) Hi() float64 { return s.Mean + s.CI95 }

// MarshalJSON writes a NaN (no run had the metric, or one run has no
// interval) as null.
func (s Stat) MarshalJSON() ([]byte, error) {
	num := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	return json.Marshal(struct {
		N      int       `json:"n"`
		Mean   *float64  `json:"mean"`
		CI95   *float64  `json:"ci95"`
		Min    *float64  `json:"min"`
		Max    *float64  `json:"max"`
		Values []float64 `json:"values"`
	}{s.N, num(s.Mean), num(s.CI95), num(s.Min), num(s.Max), s.Values})
}

// Jain is Jain's fairness index of xs (Jain, Chiu and Hawe, DEC-TR-301,
// 1984): (Σx)² / (n·Σx²), 1 when every share is equal, 1/n when one has
// everything; 0 for no values or all zero.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if len(xs) == 0 || s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}
