package htsim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/stats"
)

// Result is one htsim run of a Scenario. Times are the lab's (htsim's
// × Plan.TimeScale); ratios are over Plan.Ideal.
type Result struct {
	Plan Plan `json:"plan"`
	// Flows are the senders' flows, by host.
	Flows []Flow `json:"flows"`
	// TailFCT is the last flow's completion, MeanFCT the flows' mean.
	TailFCT time.Duration `json:"tail_fct"`
	MeanFCT time.Duration `json:"mean_fct"`
	// TailOverIdeal and MeanOverIdeal are TailFCT and MeanFCT over the
	// ideal.
	TailOverIdeal float64 `json:"tail_over_ideal"`
	MeanOverIdeal float64 `json:"mean_over_ideal"`
	// Counters are htsim's totals: NACKs (the trims), retransmits, ….
	Counters Counters `json:"counters"`
	// Queue is the receiver's downlink queue, sampled every
	// Plan.SamplePeriodPs until the last flow finished.
	Queue Queue `json:"queue"`
	// Wall is how long htsim and its log's parse took.
	Wall time.Duration `json:"wall"`
}

// Flow is one sender's flow.
type Flow struct {
	Sender    int           `json:"sender"`
	FCT       time.Duration `json:"fct"`
	OverIdeal float64       `json:"over_ideal"`
}

// Queue is the receiver's downlink queue over a run: percentiles
// (nearest rank) of its samples, the most it held, in bytes (of wire
// packets, as the lab's port counts) and in the lab's BDPs.
type Queue struct {
	Samples  int     `json:"samples"`
	P50Bytes int64   `json:"p50_bytes"`
	P99Bytes int64   `json:"p99_bytes"`
	MaxBytes int64   `json:"max_bytes"`
	P50BDPs  float64 `json:"p50_bdps"`
	P99BDPs  float64 `json:"p99_bdps"`
	MaxBDPs  float64 `json:"max_bdps"`
}

// result puts a run's output and log together.
func (p *Plan) result(o output, lr logRecords) (Result, error) {
	r := Result{Plan: *p, Counters: o.counters}
	if o.unloadedRTTUs != 0 {
		// htsim prints 6 digits; a larger miss means its RTT is not
		// the one this package solved for (another htsim?).
		if planned := float64(p.UnloadedRTTPs) / 1e6; math.Abs(o.unloadedRTTUs-planned) > 1e-5*planned {
			return r, fmt.Errorf("htsim: unloaded RTT %v µs, planned %v µs: the hop latency was solved for another htsim", o.unloadedRTTUs, planned)
		}
	}
	var tailPs, sumPs int64
	for src := range p.Scenario.Senders {
		t, ok := lr.finishPs[src]
		if !ok {
			return r, fmt.Errorf("htsim: the log has no finish of sender %d (the output has %d of %d)", src, len(o.finishedUs), p.Scenario.Senders)
		}
		r.Flows = append(r.Flows, Flow{Sender: src, FCT: p.labTime(t), OverIdeal: float64(t) / p.IdealPs})
		tailPs = max(tailPs, t)
		sumPs += t
	}
	meanPs := float64(sumPs) / float64(p.Scenario.Senders)
	r.TailFCT, r.MeanFCT = p.labTime(tailPs), p.labTime(int64(math.Round(meanPs)))
	r.TailOverIdeal, r.MeanOverIdeal = float64(tailPs)/p.IdealPs, meanPs/p.IdealPs
	r.Queue = p.queue(lr.samples, tailPs)
	return r, nil
}

// queue summarises the samples up to tailPs. htsim's sampler writes
// nothing before a queue's first packet: the instants before it count as
// empty.
func (p *Plan) queue(samples []queueSample, tailPs int64) Queue {
	var last []float64
	var most int64
	for _, s := range samples {
		if s.tPs > tailPs {
			break
		}
		last = append(last, float64(s.lastBytes))
		most = max(most, s.maxBytes)
	}
	if want := int(tailPs / p.SamplePeriodPs); len(last) < want {
		last = append(make([]float64, want-len(last)), last...)
	}
	slices.Sort(last)
	q := Queue{
		Samples:  len(last),
		P50Bytes: int64(stats.NearestRank(last, 0.50)),
		P99Bytes: int64(stats.NearestRank(last, 0.99)),
		MaxBytes: most,
	}
	q.P50BDPs = float64(q.P50Bytes) / p.BDPBytes
	q.P99BDPs = float64(q.P99Bytes) / p.BDPBytes
	q.MaxBDPs = float64(q.MaxBytes) / p.BDPBytes
	return q
}

// labTime is htsim's ps in the lab's time.
func (p *Plan) labTime(ps int64) time.Duration {
	return time.Duration(math.Round(float64(ps) * p.TimeScale / 1e3))
}
