package main

// The pure metric math: percentiles, queue statistics from backlog samples,
// utilization, counter deltas and the short-flow sizes. Nothing here needs
// root or a kernel, so it is unit-tested directly.

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// durationsUs converts durations to float microseconds, the unit of every
// time in the report.
func durationsUs(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = us(d)
	}
	return out
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// fabricUs converts times measured on the slowed fabric (wall times) to
// the fabric's, in float microseconds.
func fabricUs(ds []time.Duration, k units.Timescale) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = us(k.Fabric(d))
	}
	return out
}

// netUs is fabricUs of each time less the time the host starved the
// port meanwhile (starved, in the same order), never below 0: what the
// flow would have taken had the host not taken the port's time.
func netUs(ds, starved []time.Duration, k units.Timescale) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		if i < len(starved) {
			d = max(d-starved[i], 0)
		}
		out[i] = us(k.Fabric(d))
	}
	return out
}

func fromUs(v float64) time.Duration { return time.Duration(math.Round(v * float64(time.Microsecond))) }

// bytesToUs is how long a backlog of b bytes takes to drain at rate.
func bytesToUs(b float64, rate units.Rate) float64 {
	if rate == 0 {
		return 0
	}
	return b * 8 / float64(rate) * 1e6
}

// QueueStats describe the class backlog seen by periodic samples: a time
// average, unlike the sojourn, which is an average over packets.
type QueueStats struct {
	Samples   int     `json:"samples"`
	MeanBytes float64 `json:"mean_bytes"`
	P50Bytes  float64 `json:"p50_bytes"`
	P99Bytes  float64 `json:"p99_bytes"`
	MaxBytes  float64 `json:"max_bytes"`
	// The same in µs at the port rate (bytes·8/rate).
	MeanUs float64 `json:"mean_us"`
	P99Us  float64 `json:"p99_us"`
	// IdleFraction is the share of samples that found the queue empty.
	IdleFraction float64 `json:"idle_fraction"`
}

func queueStats(backlog []uint64, rate units.Rate) QueueStats {
	xs := make([]float64, len(backlog))
	idle := 0
	for i, b := range backlog {
		xs[i] = float64(b)
		if b == 0 {
			idle++
		}
	}
	d := stats.Summarize(xs)
	q := QueueStats{Samples: d.N, MeanBytes: d.Mean, P50Bytes: d.P50, P99Bytes: d.P99, MaxBytes: d.Max,
		MeanUs: bytesToUs(d.Mean, rate), P99Us: bytesToUs(d.P99, rate)}
	if d.N > 0 {
		q.IdleFraction = float64(idle) / float64(d.N)
	}
	return q
}

// utilization is the share of the port's capacity used over dt.
func utilization(dequeuedBytes uint64, rate units.Rate, dt time.Duration) float64 {
	if rate == 0 || dt <= 0 {
		return 0
	}
	return float64(dequeuedBytes) * 8 / (float64(rate) * dt.Seconds())
}

// sub is a-b for monotonic counters, 0 if they went backwards.
func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// Series is a backlog time series downsampled to fixed buckets for the JSON
// file and the full-run panel of the plot.
type Series struct {
	BucketMs  float64   `json:"bucket_ms"`
	MeanBytes []float64 `json:"mean_bytes"`
	MaxBytes  []float64 `json:"max_bytes"`
}

// downsample averages (and takes the maximum of) consecutive groups of
// samples taken every `every`, so each bucket spans `bucket`.
func downsample(backlog []uint64, every, bucket time.Duration) Series {
	n := 1
	if every > 0 && bucket > every {
		n = int(bucket / every)
	}
	s := Series{BucketMs: float64(time.Duration(n)*every) / float64(time.Millisecond)}
	for i := 0; i < len(backlog); i += n {
		end := min(i+n, len(backlog))
		var sum, mx float64
		for _, b := range backlog[i:end] {
			sum += float64(b)
			mx = max(mx, float64(b))
		}
		s.MeanBytes = append(s.MeanBytes, sum/float64(end-i))
		s.MaxBytes = append(s.MaxBytes, mx)
	}
	return s
}

// shortFlowSizes draws n flow sizes per sender, uniform in [lo, hi] bytes,
// and the pause before each flow, exponential with the given mean (capped
// at 5 means, so no run waits unboundedly), from one seed. Every scheme
// replays the same sequence, so they are compared on the same flows.
func shortFlowSizes(seed uint64, senders, n int, lo, hi units.ByteSize, meanGap time.Duration) (sizes [][]int, gaps [][]time.Duration) {
	sizes = make([][]int, senders)
	gaps = make([][]time.Duration, senders)
	for s := range senders {
		r := rand.New(rand.NewPCG(seed, uint64(s)+1))
		sizes[s] = make([]int, n)
		gaps[s] = make([]time.Duration, n)
		for i := range n {
			sizes[s][i] = int(lo) + r.IntN(int(hi-lo)+1)
			g := time.Duration(r.ExpFloat64() * float64(meanGap))
			gaps[s][i] = min(g, 5*meanGap)
		}
	}
	return sizes, gaps
}

// rttReport summarises the RTT probes of each sender and pooled.
func rttReport(names []string, delays []time.Duration, samples [][]time.Duration, lost []int, probes int) RTTReport {
	r := RTTReport{Probes: probes}
	var pooled []time.Duration
	lo, hi := math.Inf(1), 0.0
	for i, name := range names {
		sr := SenderRTT{Sender: name}
		if i < len(delays) {
			sr.DelayUs = us(delays[i])
		}
		if i < len(lost) {
			sr.Lost = lost[i]
		}
		if i < len(samples) {
			sr.RTTUs = stats.Summarize(durationsUs(samples[i]))
			pooled = append(pooled, samples[i]...)
		}
		if sr.RTTUs.N > 0 {
			lo, hi = min(lo, sr.RTTUs.P50), max(hi, sr.RTTUs.P50)
		}
		r.PerSender = append(r.PerSender, sr)
	}
	r.PooledUs = stats.Summarize(durationsUs(pooled))
	if hi > 0 && lo > 0 && !math.IsInf(lo, 1) {
		r.Spread = hi / lo
	}
	return r
}

// incastSizes draws the query sizes of every incast round, uniform in
// [lo, hi] bytes, from one seed (another stream than the short flows').
func incastSizes(seed uint64, rounds, flows int, lo, hi units.ByteSize) [][]int {
	r := rand.New(rand.NewPCG(seed, 1<<32))
	out := make([][]int, rounds)
	for k := range out {
		out[k] = make([]int, flows)
		for i := range out[k] {
			out[k][i] = int(lo) + r.IntN(int(hi-lo)+1)
		}
	}
	return out
}
