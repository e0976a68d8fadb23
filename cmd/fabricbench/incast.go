//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/fabriclab/fabriclab/host/htsim"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/labfile"
)

// The UET incasts beside htsim (issue 26): the lab files of netns-tests'
// incasts (host/labfile/examples/uet-incast-*.yaml: 8 → 1 × 2 MiB through
// a deep WRED queue or a 1-BDP queue that trims, at their time scale) run
// through host/labfile, each variant's congestion control several times,
// and htsim runs the same scenario (HtsimScenario) over seeds 1..N, both
// printed in one table: tail and mean FCT / ideal raw and net of the
// host-lost time, the port's queue in BDPs, trims. Without an htsim build
// ($HTSIM) the reference is htsim's recorded tail (host/htsim's
// RecordedTail). The goal is the lab's net tail within incastMargin of
// htsim's.

const incastMargin = 0.03

// incastCase is one lab file: its queue ("deep", "trim") and senders
// name htsim's recorded tails; cc names a file without variants. A case
// without htsim has no reference (DCQCN: reference/htsim.md says why
// htsim_roce is none).
type incastCase struct {
	file    string
	queue   string
	senders int
	cc      string
	htsim   bool
}

var incastCases = []incastCase{
	{"uet-incast-deep.yaml", "deep", 8, "", true},
	{"uet-incast-trim.yaml", "trim", 8, "", true},
	{"uet-incast-trim-16.yaml", "trim", 16, "", true},
	{"roce-incast.yaml", "wred", 8, "dcqcn", false},
}

// IncastReport is the incast section.
type IncastReport struct {
	Runs       int         `json:"runs"`
	HtsimSeeds int         `json:"htsim_seeds"`
	Htsim      string      `json:"htsim"` // the build's directory, or why none
	Rows       []IncastRow `json:"rows"`
}

// IncastRow is one file's variant: the lab over its runs, htsim over its
// seeds (or recorded), in one summary's terms.
type IncastRow struct {
	Case      string     `json:"case"` // queue/senders/cc
	Timescale float64    `json:"timescale"`
	Runs      int        `json:"runs"`
	Failed    int        `json:"failed_runs"`
	HostShare stats.Stat `json:"host_lost_share"`
	Starved   int        `json:"host_starved_runs"`
	// Lab is the variant's incast group over the runs. Htsim is htsim's
	// over its seeds: the tail and mean ratios, the queue in BDPs and the
	// trims (htsim's host loses no time, so it has no net ratios);
	// HtsimRecorded says its tail is the recorded one (no build).
	Lab           labfile.IncastSummary `json:"lab"`
	Htsim         labfile.IncastSummary `json:"htsim"`
	HtsimRecorded bool                  `json:"htsim_recorded,omitempty"`
	// Delta is the lab's net tail (mean) less htsim's (mean); Verdict ok
	// within incastMargin, else above or below.
	Delta   float64 `json:"delta"`
	Verdict string  `json:"verdict"`
	// WithinNet and WithinRaw count the runs whose net (raw) tail lies
	// within incastMargin of htsim's mean tail, either side.
	WithinNet int    `json:"within_net_runs"`
	WithinRaw int    `json:"within_raw_runs"`
	Error     string `json:"error,omitempty"`
}

// incastOpts are the section's settings.
type incastOpts struct {
	runs, seeds int
	smoke       bool
	examples    string // the lab files' directory
	htsimDir    string
}

// runIncasts runs every case: in a smoke run only the 8 → 1 files' first
// variant, once.
func runIncasts(ctx context.Context, o incastOpts) (*IncastReport, error) {
	rep := &IncastReport{Runs: o.runs, HtsimSeeds: o.seeds}
	var runner *htsim.Runner
	if _, err := htsim.Locate(o.htsimDir); err != nil {
		rep.Htsim = "recorded tails (htsim.RecordedTail): " + err.Error()
		rep.HtsimSeeds = 0
	} else {
		rep.Htsim = o.htsimDir
		runner = &htsim.Runner{Dir: o.htsimDir}
	}
	var errs []error
	for _, c := range incastCases {
		if o.smoke && c.senders != 8 {
			continue
		}
		f, err := labfile.Load(filepath.Join(o.examples, c.file))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		variants := f.VariantNames()
		if o.smoke && len(variants) > 1 {
			variants = variants[:1]
		}
		out, err := os.MkdirTemp("", "bench-incast-")
		if err != nil {
			return rep, err
		}
		progress("incast: %s, variants %s, %d run(s) each", c.file, strings.Join(variants, ","), o.runs)
		cmp, err := labfile.Compare(ctx, f, labfile.CompareOptions{Runs: o.runs, Variants: variants, RunOptions: labfile.RunOptions{OutDir: out}})
		os.RemoveAll(out)
		if cmp == nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.file, err))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.file, err))
		}
		for _, v := range cmp.Summary {
			row := IncastRow{Case: htsim.RecordedKey(c.queue, c.senders, orNA(v.Name, c.cc)), Timescale: cmp.Timescale, Runs: v.Runs, Failed: v.Failed,
				HostShare: v.HostLostShare, Starved: v.HostStarved}
			if len(v.Incasts) != 1 {
				row.Error = fmt.Sprintf("%d incast groups: want one", len(v.Incasts))
				errs = append(errs, fmt.Errorf("%s %s: %s", c.file, v.Name, row.Error))
				rep.Rows = append(rep.Rows, row)
				continue
			}
			row.Lab = v.Incasts[0]
			if !c.htsim {
				row.Verdict = "no reference"
			} else if err := incastHtsim(ctx, &row, f, v.Name, runner, o.seeds); err != nil {
				row.Error = err.Error()
				errs = append(errs, fmt.Errorf("%s %s: htsim: %w", c.file, v.Name, err))
			}
			if lab, ht := row.Lab, row.Htsim; lab.TailRatioNet.N > 0 && ht.TailRatio.N > 0 {
				row.Delta = lab.TailRatioNet.Mean - ht.TailRatio.Mean
				switch {
				case row.Delta > incastMargin:
					row.Verdict = "above"
				case row.Delta < -incastMargin:
					row.Verdict = "below"
				default:
					row.Verdict = "ok"
				}
				row.WithinNet = within(lab.TailRatioNet.Values, ht.TailRatio.Mean)
				row.WithinRaw = within(lab.TailRatio.Values, ht.TailRatio.Mean)
			}
			rep.Rows = append(rep.Rows, row)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return rep, errors.Join(errs...)
}

// within counts the values within incastMargin of ref.
func within(vs []float64, ref float64) int {
	n := 0
	for _, v := range vs {
		if math.Abs(v-ref) <= incastMargin {
			n++
		}
	}
	return n
}

// incastHtsim fills the row's htsim columns: runner's seeds 1..seeds of
// the variant's scenario, or with no runner the recorded tail.
func incastHtsim(ctx context.Context, row *IncastRow, f *labfile.File, variant string, runner *htsim.Runner, seeds int) error {
	if runner == nil {
		ref, ok := htsim.RecordedTail(row.Case)
		if !ok {
			return fmt.Errorf("no recorded tail for %s", row.Case)
		}
		row.Htsim.TailRatio, row.HtsimRecorded = stats.NewStat([]float64{ref}), true
		return nil
	}
	s, err := f.HtsimScenario(variant)
	if err != nil {
		return err
	}
	var tail, mean, p50, p99, trims []float64
	for seed := 1; seed <= seeds; seed++ {
		s.Seed = seed
		res, err := runner.Run(ctx, s)
		if err != nil {
			return fmt.Errorf("seed %d: %w", seed, err)
		}
		tail, mean = append(tail, res.TailOverIdeal), append(mean, res.MeanOverIdeal)
		p50, p99 = append(p50, res.Queue.P50BDPs), append(p99, res.Queue.P99BDPs)
		trims = append(trims, float64(res.Counters.NACKs))
	}
	row.Htsim = labfile.IncastSummary{Group: row.Lab.Group, Flows: row.Lab.Flows, Port: row.Lab.Port,
		TailRatio: stats.NewStat(tail), MeanRatio: stats.NewStat(mean),
		QueueP50BDPs: stats.NewStat(p50), QueueP99BDPs: stats.NewStat(p99), Trimmed: stats.NewStat(trims)}
	return nil
}

// printIncasts prints the section's table.
func printIncasts(w io.Writer, r *IncastReport) {
	if r == nil || len(r.Rows) == 0 {
		return
	}
	ref := fmt.Sprintf("htsim %s, seeds 1..%d", r.Htsim, r.HtsimSeeds)
	if r.HtsimSeeds == 0 {
		ref = "htsim: " + r.Htsim
	}
	fmt.Fprintf(w, "\nUET incasts, the lab (host/labfile/examples/uet-incast-*.yaml, %d run(s) per variant) beside %s\n", r.Runs, ref)
	fmt.Fprintf(w, "FCT / ideal: mean ± 95%% CI over the runs; net: over the ideal extended by the host-lost time; queue: the port's, p50/p99 in BDPs; goal: net tail within %.2f of htsim's; runs within: net, raw\n", incastMargin)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "incast\tscale\thost-lost\ttail\ttail net\tmean net\tqueue p50/p99\ttrimmed\thtsim tail\thtsim mean\thtsim queue\thtsim trimmed\tnet - htsim\truns within\tverdict")
	for _, x := range r.Rows {
		lab, ht := x.Lab, x.Htsim
		if x.Error != "" && lab.TailRatioNet.N == 0 {
			fmt.Fprintf(tw, "%s\t%g×\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", x.Case, x.Timescale, x.Error)
			continue
		}
		host := fmt.Sprintf("%.1f%% (%d/%d starved)", 100*x.HostShare.Mean, x.Starved, x.Runs)
		htail := ratioStat(ht.TailRatio)
		if x.HtsimRecorded {
			htail += " (recorded)"
		}
		verdict := orNA(x.Verdict, "-")
		if x.Error != "" {
			verdict += ": " + x.Error
		}
		delta, in := "-", "-"
		if ht.TailRatio.N > 0 {
			delta = fmt.Sprintf("%+.3f", x.Delta)
			in = fmt.Sprintf("%d/%d, %d/%d", x.WithinNet, lab.TailRatioNet.N, x.WithinRaw, lab.TailRatio.N)
		}
		fmt.Fprintf(tw, "%s\t%g×\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.Case, x.Timescale, host,
			ratioStat(lab.TailRatio), ratioStat(lab.TailRatioNet), ratioStat(lab.MeanRatioNet), incastQueue(lab), countStat(lab.Trimmed),
			htail, ratioStat(ht.MeanRatio), incastQueue(ht), countStat(ht.Trimmed), delta, in, verdict)
	}
	tw.Flush()
}

func ratioStat(s stats.Stat) string {
	switch {
	case s.N == 0:
		return "-"
	case s.N == 1 || math.IsNaN(s.CI95):
		return fmt.Sprintf("%.3f", s.Mean)
	}
	return fmt.Sprintf("%.3f ± %.3f", s.Mean, s.CI95)
}

// incastQueue is the port's queue p50/p99 in BDPs, or in KiB where the
// flows have no base RTT (no BDP).
func incastQueue(s labfile.IncastSummary) string {
	switch {
	case s.QueueP50BDPs.N > 0:
		return fmt.Sprintf("%.2f/%.2f", s.QueueP50BDPs.Mean, s.QueueP99BDPs.Mean)
	case s.QueueP50Bytes.N > 0 && s.QueueP99Bytes.Mean > 0:
		return fmt.Sprintf("%.0f/%.0f KiB", s.QueueP50Bytes.Mean/1024, s.QueueP99Bytes.Mean/1024)
	}
	return "-"
}

func countStat(s stats.Stat) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", s.Mean)
}

// examplesDir finds host/labfile/examples from the working directory up
// (make bench runs from the repository's root).
func examplesDir() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if c := filepath.Join(d, "host", "labfile", "examples"); isDir(c) {
			return c
		}
		if filepath.Dir(d) == d {
			return filepath.Join(dir, "host", "labfile", "examples")
		}
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
