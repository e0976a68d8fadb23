package main

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestQueueStats(t *testing.T) {
	// 200 Mbit/s: 25 000 bytes drain in 1 ms.
	rate := 200 * units.Mbit
	backlog := []uint64{0, 0, 25000, 50000}
	q := queueStats(backlog, rate)
	if q.Samples != 4 || q.MeanBytes != 18750 || q.MaxBytes != 50000 || q.P99Bytes != 50000 || q.P50Bytes != 0 {
		t.Errorf("queueStats bytes = %+v", q)
	}
	if math.Abs(q.MeanUs-750) > 1e-9 || math.Abs(q.P99Us-2000) > 1e-9 {
		t.Errorf("queueStats µs: mean %g want 750, p99 %g want 2000", q.MeanUs, q.P99Us)
	}
	if q.IdleFraction != 0.5 {
		t.Errorf("idle fraction %g, want 0.5", q.IdleFraction)
	}
	if z := queueStats(nil, rate); z.Samples != 0 || z.IdleFraction != 0 {
		t.Errorf("queueStats(nil) = %+v", z)
	}
}

func TestUtilization(t *testing.T) {
	// 200 Mbit/s for 2 s is 50 MB.
	if u := utilization(50_000_000, 200*units.Mbit, 2*time.Second); math.Abs(u-1) > 1e-12 {
		t.Errorf("utilization = %g, want 1", u)
	}
	if u := utilization(25_000_000, 200*units.Mbit, 2*time.Second); math.Abs(u-0.5) > 1e-12 {
		t.Errorf("utilization = %g, want 0.5", u)
	}
	if u := utilization(1, 0, time.Second); u != 0 {
		t.Errorf("utilization at rate 0 = %g, want 0", u)
	}
	if u := utilization(1, units.Mbit, 0); u != 0 {
		t.Errorf("utilization over 0 s = %g, want 0", u)
	}
}

func TestDownsample(t *testing.T) {
	backlog := []uint64{1, 3, 2, 10, 0, 0, 7}
	s := downsample(backlog, time.Millisecond, 3*time.Millisecond)
	if s.BucketMs != 3 {
		t.Errorf("bucket %g ms, want 3", s.BucketMs)
	}
	if want := []float64{2, 10.0 / 3, 7}; !slices.Equal(s.MeanBytes, want) {
		t.Errorf("means %v, want %v", s.MeanBytes, want)
	}
	if want := []float64{3, 10, 7}; !slices.Equal(s.MaxBytes, want) {
		t.Errorf("maxima %v, want %v", s.MaxBytes, want)
	}
	// A bucket no longer than the sampling keeps every sample.
	if s := downsample(backlog, time.Millisecond, time.Millisecond); len(s.MeanBytes) != len(backlog) || s.BucketMs != 1 {
		t.Errorf("bucket = sample interval: %+v", s)
	}
}

func TestShortFlowSizes(t *testing.T) {
	lo, hi := 3*units.KiB, 60*units.KiB
	sizes, gaps := shortFlowSizes(7, 3, 2000, lo, hi, 20*time.Millisecond)
	again, gaps2 := shortFlowSizes(7, 3, 2000, lo, hi, 20*time.Millisecond)
	if len(sizes) != 3 || len(gaps) != 3 {
		t.Fatalf("got %d size lists and %d gap lists, want 3", len(sizes), len(gaps))
	}
	var sum float64
	seenLo, seenHi := false, false
	for s := range sizes {
		if !slices.Equal(sizes[s], again[s]) || !slices.Equal(gaps[s], gaps2[s]) {
			t.Errorf("sender %d: the same seed gave different sequences", s)
		}
		for i, n := range sizes[s] {
			if n < int(lo) || n > int(hi) {
				t.Fatalf("size %d outside [%d, %d]", n, lo, hi)
			}
			seenLo = seenLo || n < int(lo)+1024
			seenHi = seenHi || n > int(hi)-1024
			sum += float64(n)
			if gaps[s][i] < 0 || gaps[s][i] > 100*time.Millisecond {
				t.Fatalf("gap %v outside [0, 5 means]", gaps[s][i])
			}
		}
	}
	if !seenLo || !seenHi {
		t.Errorf("6000 uniform draws missed an end of the range (low %v, high %v)", seenLo, seenHi)
	}
	mean := sum / 6000
	if want := float64(lo+hi) / 2; math.Abs(mean-want) > 0.03*want {
		t.Errorf("mean size %.0f, want about %.0f", mean, want)
	}
	if slices.Equal(sizes[0], sizes[1]) {
		t.Error("senders 1 and 2 got the same sequence")
	}
	other, _ := shortFlowSizes(8, 3, 2000, lo, hi, 20*time.Millisecond)
	if slices.Equal(other[0], sizes[0]) {
		t.Error("another seed gave the same sequence")
	}
}

func TestRTTReport(t *testing.T) {
	ms := time.Millisecond
	r := rttReport([]string{"s1", "s2", "s3"}, []time.Duration{ms / 2, ms, 3 * ms / 2},
		[][]time.Duration{{ms / 2, ms / 2}, {ms, ms}, {3 * ms / 2, 3 * ms / 2}}, []int{0, 1, 0}, 2)
	if r.Probes != 2 || len(r.PerSender) != 3 {
		t.Fatalf("rttReport = %+v", r)
	}
	if r.PerSender[1].Lost != 1 || r.PerSender[2].DelayUs != 1500 || r.PerSender[0].RTTUs.P50 != 500 {
		t.Errorf("per sender = %+v", r.PerSender)
	}
	if r.PooledUs.N != 6 || r.PooledUs.Mean != 1000 || r.PooledUs.P50 != 1000 || r.PooledUs.P90 != 1500 {
		t.Errorf("pooled = %+v", r.PooledUs)
	}
	if math.Abs(r.Spread-3) > 1e-12 {
		t.Errorf("spread %g, want 3", r.Spread)
	}
}
