package main

import (
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/labfile"
)

// TestPrintIncasts checks the table's lab and htsim columns, the queue in
// KiB where the lab has no BDP, and a recorded htsim tail.
func TestPrintIncasts(t *testing.T) {
	lab := labfile.IncastSummary{
		TailRatio:    stats.NewStat([]float64{1.2, 1.3}),
		TailRatioNet: stats.NewStat([]float64{1.1, 1.2}),
		MeanRatioNet: stats.NewStat([]float64{1.05}),
		QueueP50BDPs: stats.NewStat([]float64{0.5}),
		QueueP99BDPs: stats.NewStat([]float64{1.5}),
		Trimmed:      stats.NewStat([]float64{40}),
	}
	ht := labfile.IncastSummary{
		TailRatio:    stats.NewStat([]float64{1.15}),
		MeanRatio:    stats.NewStat([]float64{1.1}),
		QueueP50BDPs: stats.NewStat([]float64{0.25}),
		QueueP99BDPs: stats.NewStat([]float64{1.25}),
		Trimmed:      stats.NewStat([]float64{30}),
	}
	noBDP := labfile.IncastSummary{
		TailRatio:     stats.NewStat([]float64{1.4}),
		TailRatioNet:  stats.NewStat([]float64{1.3}),
		QueueP50Bytes: stats.NewStat([]float64{2048}),
		QueueP99Bytes: stats.NewStat([]float64{8192}),
	}
	r := &IncastReport{Runs: 2, HtsimSeeds: 1, Htsim: "/htsim", Rows: []IncastRow{
		{Case: "wred/8/nscc", Timescale: 1, Runs: 2, Lab: lab, Htsim: ht, Delta: 0.0, Verdict: "ok", WithinNet: 2, WithinRaw: 1},
		{Case: "trim/8/nscc", Timescale: 4, Runs: 1, Lab: noBDP, Htsim: labfile.IncastSummary{TailRatio: stats.NewStat([]float64{1.2})}, HtsimRecorded: true, Delta: 0.1, Verdict: "ok"},
	}}
	var b strings.Builder
	printIncasts(&b, r)
	out := b.String()
	for _, want := range []string{
		"1.250 ± ", "0.50/1.50", "40", // the lab's tail, queue and trims
		"1.150", "1.100", "0.25/1.25", "30", // htsim's
		"2/2, 1/2", // runs within, net and raw
		"2/8 KiB",  // no BDP: the queue in KiB
		"1.200 (recorded)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
