//go:build linux

package labfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// CompareOptions say how to run a file's variants.
type CompareOptions struct {
	// Run is every run's options; its Variant, Run and OutDir are set per
	// run (each run's result.json and plots go to OutDir/VARIANT/runN).
	RunOptions
	// Runs overrides the file's runs. Optional: 0 keeps them.
	Runs int
	// Variants runs only these (file order kept). Optional: all of them.
	Variants []string
	// OnRun is called after each run (progress). Optional.
	OnRun func(variant string, run int, res *Result, err error)
}

// Comparison is a file's variants, each run Runs times, interleaved: run 1
// of every variant, then run 2, so that a drift of the machine spreads
// over all of them. The lab is built afresh for every run.
type Comparison struct {
	// Schema is ComparisonSchema (ResultSchema's sibling).
	Schema  string    `json:"schema"`
	Name    string    `json:"name"`
	File    string    `json:"file"`
	Start   time.Time `json:"start"`
	Seconds float64   `json:"seconds"`
	Runs    int       `json:"runs"`
	Seed    uint64    `json:"seed"`
	// Timescale is the file's: the fabric ran this many times slower
	// (Result.Timescale).
	Timescale float64  `json:"timescale"`
	Variants  []string `json:"variants"`
	// Interrupted: the context was cancelled; the runs so far are here.
	Interrupted bool `json:"interrupted,omitempty"`
	// Summary is each variant's metrics over its runs: mean and 95 %
	// confidence interval (Student's t).
	Summary []VariantSummary `json:"summary"`
	// RunResults are the runs in the order they ran, without their
	// samples and full reports (in their own result.json: Dir).
	RunResults []RunSummary `json:"runs_results"`
	// Goals are the file's goals checked on Summary.
	Goals []GoalResult `json:"goals,omitempty"`
	Files []string     `json:"files,omitempty"`
}

// RunSummary is one run of a variant.
type RunSummary struct {
	Variant string       `json:"variant"`
	Run     int          `json:"run"`
	RunID   string       `json:"run_id,omitempty"`
	Dir     string       `json:"dir,omitempty"`
	Error   string       `json:"error,omitempty"`
	Seconds float64      `json:"seconds"`
	Flows   []FlowResult `json:"flows"`
	Ports   []PortResult `json:"ports"`
	// HostLost is what the host took from the run.
	HostLost *HostLost `json:"host_lost,omitempty"`
	// Incasts are the run's incast groups.
	Incasts []IncastResult `json:"incasts,omitempty"`
}

// VariantSummary is a variant over its runs. A run whose lab broke (not
// built, a pe agent died) counts in Failed and in none of the metrics; a
// run with failed flows counts, without them (FlowsFailed says how many
// runs had one).
type VariantSummary struct {
	Name        string        `json:"name"`
	Runs        int           `json:"runs"`
	Failed      int           `json:"failed"`
	FlowsFailed int           `json:"flows_failed_runs,omitempty"`
	Ports       []PortSummary `json:"ports"`
	Flows       []FlowSummary `json:"flows"`
	PEs         []PESummary   `json:"pes,omitempty"`
	// HostLostShare is the share of each run the host took (HostLost's
	// Share); HostStarved counts the runs over its budget.
	HostLostShare stats.Stat `json:"host_lost_share"`
	HostStarved   int        `json:"host_starved_runs"`
	// Lost is each run's packets lost anywhere (Result.Lost): a lossless
	// variant has 0 in every run.
	Lost stats.Stat `json:"lost_packets"`
	// E2EReactionMS is Result.E2EReactionMS over the runs that had one.
	E2EReactionMS stats.Stat `json:"e2e_reaction_ms"`
	// Jain is Result.Fairness's index over the runs that had one.
	Jain stats.Stat `json:"jain"`
	// CNPsSent and CNPsUnanswered are Result.CNPs over the runs with
	// rocev2 flows: the DCQCN loop ran, and every CNP arrived.
	CNPsSent       stats.Stat `json:"cnps_sent"`
	CNPsUnanswered stats.Stat `json:"cnps_unanswered"`
	// CNPsHandled is the rocev2 senders' rp_cnp_handled: the rate cuts.
	CNPsHandled stats.Stat `json:"cnps_handled"`
	// Silent counts the runs in which Check named each layer silent for
	// some flow (seed 000's three layers).
	Silent map[Layer]int `json:"silent_runs,omitempty"`
	// Incasts are the runs' incast groups (Result.Incasts).
	Incasts []IncastSummary `json:"incasts,omitempty"`
	// Htsim is htsim's run of the variant's incast, once
	// (RunOptions.Htsim), or why there is none.
	Htsim *HtsimRun `json:"htsim,omitempty"`
	// Matrix is the runs' workload matrix: its completion over ideal,
	// and htsim's beside it.
	Matrix *MatrixSummary `json:"matrix,omitempty"`
}

// MatrixSummary is a workload matrix over a variant's runs.
type MatrixSummary struct {
	// CCTRatio is the whole matrix's completion over its ideal
	// (MatrixResult.All), FCTRatioP50 its flows' median FCT over
	// ideal, over the runs that completed.
	CCTRatio    stats.Stat `json:"cct_ratio"`
	FCTRatioP50 stats.Stat `json:"fct_ratio_p50"`
	Incomplete  int        `json:"incomplete_runs"`
	// HtsimCCTRatio and HtsimFCTRatioP50 are htsim's, one seed per run
	// (the file's + run − 1); LabOverHtsim is each run's CCTRatio over
	// htsim's of the same run. HtsimError says why there is none.
	HtsimCCTRatio    stats.Stat `json:"htsim_cct_ratio"`
	HtsimFCTRatioP50 stats.Stat `json:"htsim_fct_ratio_p50"`
	LabOverHtsim     stats.Stat `json:"lab_over_htsim"`
	HtsimError       string     `json:"htsim_error,omitempty"`
}

// summarizeMatrix sums the runs' matrices, nil without one.
func summarizeMatrix(rs []*Result) *MatrixSummary {
	var cct, p50, hcct, hp50, over []float64
	var ms *MatrixSummary
	for _, r := range rs {
		mr := r.Matrix
		if mr == nil {
			continue
		}
		if ms == nil {
			ms = &MatrixSummary{}
		}
		h := mr.Htsim
		if h != nil && h.Error != "" && ms.HtsimError == "" {
			ms.HtsimError = h.Error
		}
		if h != nil && h.All.CCTRatio > 0 {
			hcct, hp50 = append(hcct, h.All.CCTRatio), append(hp50, h.FCTRatio.P50)
		}
		if mr.All.CCTRatio == 0 {
			ms.Incomplete++
			continue
		}
		cct = append(cct, mr.All.CCTRatio)
		p50 = append(p50, mr.FCTRatio.P50)
		if h != nil && h.All.CCTRatio > 0 {
			over = append(over, mr.All.CCTRatio/h.All.CCTRatio)
		}
	}
	if ms != nil {
		ms.CCTRatio, ms.FCTRatioP50, ms.LabOverHtsim = stats.NewStat(cct), stats.NewStat(p50), stats.NewStat(over)
		ms.HtsimCCTRatio, ms.HtsimFCTRatioP50 = stats.NewStat(hcct), stats.NewStat(hp50)
	}
	return ms
}

// writeMatrixTable prints each variant's matrix: its completion over
// ideal and its flows' median FCT over ideal in the lab and in htsim
// (mean ± 95 % CI, least–most), and the lab's over htsim's run by run.
func writeMatrixTable(w io.Writer, c *Comparison) {
	fmt.Fprintf(w, "%-14s %-6s %20s %14s %16s %16s\n", "variant", "matrix", "completion/ideal", "least–most", "FCT/ideal p50", "lab/htsim")
	for _, v := range c.Summary {
		m := v.Matrix
		if m == nil {
			continue
		}
		span := func(s stats.Stat) string {
			if s.N == 0 {
				return "-"
			}
			return fmt.Sprintf("%.3f–%.3f", s.Min, s.Max)
		}
		fmt.Fprintf(w, "%-14s %-6s %20s %14s %16s %16s\n", orName(v.Name, c.Name), "lab", statText(m.CCTRatio, 1, "%.3f"),
			span(m.CCTRatio), statText(m.FCTRatioP50, 1, "%.3f"), span(m.LabOverHtsim))
		if m.HtsimCCTRatio.N > 0 {
			fmt.Fprintf(w, "%-14s %-6s %20s %14s %16s\n", orName(v.Name, c.Name), "htsim", statText(m.HtsimCCTRatio, 1, "%.3f"),
				span(m.HtsimCCTRatio), statText(m.HtsimFCTRatioP50, 1, "%.3f"))
		}
		if m.Incomplete > 0 {
			fmt.Fprintf(w, "%-14s %d run(s) whose matrix did not complete (not above)\n", "", m.Incomplete)
		}
		if m.HtsimError != "" {
			fmt.Fprintf(w, "%-14s htsim: %s\n", "", m.HtsimError)
		}
	}
}

// IncastSummary is an incast group over the runs: its ratios, the
// port's queue and its trims, mean and 95 % CI (IncastResult's fields).
type IncastSummary struct {
	Group        string     `json:"group"`
	Flows        int        `json:"flows"`
	Port         string     `json:"port"`
	IdealS       float64    `json:"ideal_s"`
	TailRatio    stats.Stat `json:"tail_ratio"`
	MeanRatio    stats.Stat `json:"mean_ratio"`
	TailRatioNet stats.Stat `json:"tail_ratio_net"`
	MeanRatioNet stats.Stat `json:"mean_ratio_net"`
	QueueP50BDPs stats.Stat `json:"queue_p50_bdps"`
	QueueP99BDPs stats.Stat `json:"queue_p99_bdps"`
	// In bytes: the only figures where the flows have no base RTT.
	QueueP50Bytes stats.Stat `json:"queue_p50_bytes"`
	QueueP99Bytes stats.Stat `json:"queue_p99_bytes"`
	Trimmed       stats.Stat `json:"trimmed_packets"`
	Dropped       stats.Stat `json:"dropped_packets"`
	// Failed counts runs whose incast did not complete (not in the
	// ratios).
	Failed int `json:"failed_runs,omitempty"`
}

// PESummary is a PE agent's work over the runs.
type PESummary struct {
	Node        string     `json:"node"`
	Agent       string     `json:"agent"`
	LightCNPs   stats.Stat `json:"light_cnps"`
	RateUpdates stats.Stat `json:"rate_updates"`
	// MinRateBps is the least rate the limiter was set to.
	MinRateBps    stats.Stat `json:"min_rate_bps"`
	ReactionP50MS stats.Stat `json:"reaction_p50_ms"`
	// FirstReactionMS is PEResult.FirstReactionMS: the lab's first light
	// CNP to the agent's first change.
	FirstReactionMS stats.Stat `json:"first_reaction_ms"`
	// Spills counts a reroute agent's moves onto every path.
	Spills stats.Stat `json:"spills"`
}

// PortSummary is a watched port's metrics over the runs.
type PortSummary struct {
	Name string `json:"name"`
	// Utilization is the port's sent bits over its rate × the timed
	// flows' span (PortResult.Utilization).
	Utilization    stats.Stat `json:"utilization"`
	MeanSojournUS  stats.Stat `json:"mean_sojourn_us"`
	SojournP99US   stats.Stat `json:"sojourn_p99_us"`
	MarkedFraction stats.Stat `json:"marked_fraction"`
	// CEMarked and PPFCStops are the port's CE marks and PPFC stops
	// sent, in packets: seed 000's tune-and-verify loop reads them.
	CEMarked       stats.Stat `json:"ce_marked_packets"`
	PPFCStops      stats.Stat `json:"ppfc_stops_sent"`
	Dropped        stats.Stat `json:"dropped_packets"`
	MaxBacklog     stats.Stat `json:"max_backlog_bytes"`
	QueueMeanBytes stats.Stat `json:"queue_mean_bytes"`
	QueueP50Bytes  stats.Stat `json:"queue_p50_bytes"`
	QueueP99Bytes  stats.Stat `json:"queue_p99_bytes"`
}

// FlowSummary is a group of flows (Flow.Group; a flow alone by default)
// over the runs: their summed goodput, a single sized flow's FCT/ideal
// (the group's mean), and the series' FCTs pooled over the group's flows:
// their median and 99th percentile in each run.
type FlowSummary struct {
	Name       string     `json:"name"`
	Flows      int        `json:"flows"`
	GoodputBps stats.Stat `json:"goodput_bps"`
	FCTRatio   stats.Stat `json:"fct_ratio"`
	FCTMeanS   stats.Stat `json:"fct_mean_s"`
	FCTP50S    stats.Stat `json:"fct_p50_s"`
	FCTP99S    stats.Stat `json:"fct_p99_s"`
	RatioP50   stats.Stat `json:"fct_ratio_p50"`
	RatioP99   stats.Stat `json:"fct_ratio_p99"`
	// QCTP50S and QCTP99S are a group of rounds' query completion times
	// (seed 002 §5.4): when the group's flows are series with the same
	// start, every and count, round k's QCT is from its first instance's
	// start to its last one's end; median and p99 per run.
	QCTP50S stats.Stat `json:"qct_p50_s"`
	QCTP99S stats.Stat `json:"qct_p99_s"`
	// Instances are the group's completed series instances over all runs,
	// and FCTRatios every one's FCT over ideal (the CDF's points).
	Instances int       `json:"instances,omitempty"`
	FCTRatios []float64 `json:"fct_ratios,omitempty"`
}

// Compare runs each of f's variants (or the file as written, if it has
// none) f.Runs times and sums them up. Every run is a Run: its own lab,
// torn down before the next. The error joins the runs' errors; the
// comparison covers every run that ran.
func Compare(ctx context.Context, f *File, opts CompareOptions) (*Comparison, error) {
	if f == nil || f.plan == nil {
		return nil, errors.New("labfile: Compare needs a File from Load or Parse")
	}
	runs := f.Runs
	if opts.Runs != 0 {
		runs = opts.Runs
	}
	if runs < 1 || runs > MaxRuns {
		return nil, fmt.Errorf("labfile: runs %d: want 1..%d", runs, MaxRuns)
	}
	variants := f.VariantNames()
	if len(opts.Variants) > 0 {
		for _, v := range opts.Variants {
			if !slices.Contains(variants, v) {
				return nil, fmt.Errorf("labfile: %s has no variant %q; its variants are %s", f.RunName(), v, orList(variants))
			}
		}
		variants = slices.DeleteFunc(variants, func(v string) bool { return !slices.Contains(opts.Variants, v) })
	}
	if len(variants) == 0 {
		variants = []string{""} // the file as written
	}
	dir := opts.OutDir
	if dir == "" {
		dir = f.OutputDir()
	}
	c := &Comparison{Schema: ComparisonSchema, Name: f.RunName(), File: f.Path, Start: time.Now(), Runs: runs, Seed: f.Seed, Timescale: f.plan.Timescale.K(), Variants: variants}
	var errs []error
	results := map[string][]*Result{}
	for run := 1; run <= runs && ctx.Err() == nil; run++ {
		for _, v := range variants {
			if ctx.Err() != nil {
				break
			}
			ro := opts.RunOptions
			ro.Variant, ro.Run = v, run
			if f.matrix == nil {
				ro.Htsim = nil // once per variant, below
			} // a matrix's goes in each run's result: htsim's own run takes milliseconds
			rs := RunSummary{Variant: v, Run: run}
			if dir != "-" {
				rs.Dir = filepath.Join(dir, orName(v, "file"), fmt.Sprintf("run%d", run))
				ro.OutDir = rs.Dir
			}
			res, err := Run(ctx, f, ro)
			if opts.OnRun != nil {
				opts.OnRun(v, run, res, err)
			}
			if err != nil {
				rs.Error = err.Error()
				errs = append(errs, fmt.Errorf("%s run %d: %w", orName(v, f.RunName()), run, err))
			}
			if res != nil {
				rs.Seconds, rs.RunID, rs.HostLost, rs.Incasts = res.Seconds, res.RunID, res.HostLost, res.Incasts
				for _, fr := range res.Flows {
					fr.Report = nil
					rs.Flows = append(rs.Flows, fr)
				}
				for _, pr := range res.Ports {
					pr.Stats, pr.Config = nil, nil
					rs.Ports = append(rs.Ports, pr)
				}
				// A run whose flows failed counts: its failed instances
				// are out of the FCTs (and counted), the rest of it
				// stands. A run that broke otherwise does not.
				if err == nil || errors.Is(err, ErrFlowsFailed) {
					results[v] = append(results[v], res)
				}
			}
			c.RunResults = append(c.RunResults, rs)
		}
	}
	c.Interrupted = ctx.Err() != nil
	c.Seconds = time.Since(c.Start).Seconds()
	for _, v := range variants {
		ran := 0
		for _, rs := range c.RunResults {
			if rs.Variant == v {
				ran++
			}
		}
		vs := summarize(v, results[v], ran)
		if opts.Htsim != nil && f.matrix == nil && ctx.Err() == nil {
			if p, err := f.variantPlan(v); err == nil {
				vs.Htsim = f.runHtsim(ctx, p, opts.Htsim)
			}
		}
		c.Summary = append(c.Summary, vs)
	}
	c.Goals = evalGoals(f.Goals, c.Summary)
	if dir != "-" {
		if err := c.write(dir); err != nil {
			errs = append(errs, fmt.Errorf("labfile: %w", err))
		}
	}
	return c, errors.Join(errs...)
}

func orName(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// summarize is a variant's summary over its successful runs.
func summarize(name string, rs []*Result, runs int) VariantSummary {
	vs := VariantSummary{Name: name, Runs: len(rs), Failed: runs - len(rs)}
	for _, r := range rs {
		if r.Failed() > 0 {
			vs.FlowsFailed++
		}
	}
	if len(rs) == 0 {
		return vs
	}
	col := func(get func(*Result) float64) stats.Stat {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = get(r)
		}
		return stats.NewStat(xs)
	}
	nan := math.NaN()
	vs.HostLostShare = col(func(r *Result) float64 {
		if h := r.HostLost; h != nil && h.Wall > 0 {
			if h.HostStarved {
				vs.HostStarved++
			}
			return h.Share
		}
		return nan
	})
	vs.Lost = col(func(r *Result) float64 { return float64(r.Lost()) })
	vs.Matrix = summarizeMatrix(rs)
	vs.CNPsSent = col(func(r *Result) float64 {
		if sent, _, ok := r.CNPs(); ok {
			return float64(sent)
		}
		return nan
	})
	vs.CNPsUnanswered = col(func(r *Result) float64 {
		if _, un, ok := r.CNPs(); ok {
			return float64(un)
		}
		return nan
	})
	vs.CNPsHandled = col(func(r *Result) float64 {
		n, ok := 0.0, false
		for _, f := range r.Flows {
			if f.Transport == TransportRoCEv2 {
				n, ok = n+float64(f.CNPHandled), true
			}
		}
		if !ok {
			return nan
		}
		return n
	})
	for _, r := range rs {
		if r.Check == nil {
			continue
		}
		for _, l := range r.Check.Silent() {
			if vs.Silent == nil {
				vs.Silent = map[Layer]int{}
			}
			vs.Silent[l]++
		}
	}
	vs.Jain = col(func(r *Result) float64 {
		if r.Fairness == nil {
			return nan
		}
		return r.Fairness.Jain
	})
	vs.E2EReactionMS = col(func(r *Result) float64 {
		if r.E2EReactionMS == 0 {
			return nan
		}
		return r.E2EReactionMS
	})
	for j, ic := range rs[0].Incasts {
		is := IncastSummary{Group: ic.Group, Flows: ic.Flows, Port: ic.Port, IdealS: ic.IdealS}
		for _, r := range rs {
			if j >= len(r.Incasts) || r.Incasts[j].Error != "" {
				is.Failed++
			}
		}
		get := func(f func(*IncastResult) float64) stats.Stat {
			return col(func(r *Result) float64 {
				if j >= len(r.Incasts) || r.Incasts[j].Error != "" {
					return nan
				}
				return f(&r.Incasts[j])
			})
		}
		is.TailRatio = get(func(i *IncastResult) float64 { return i.TailRatio })
		is.MeanRatio = get(func(i *IncastResult) float64 { return i.MeanRatio })
		is.TailRatioNet = get(func(i *IncastResult) float64 { return orNaN(i.TailRatioNet, boolInt(i.TailRatioNet > 0)) })
		is.MeanRatioNet = get(func(i *IncastResult) float64 { return orNaN(i.MeanRatioNet, boolInt(i.MeanRatioNet > 0)) })
		is.QueueP50BDPs = get(func(i *IncastResult) float64 {
			return orNaN(i.QueueP50BDPs, boolInt(i.BDPBytes > 0 && i.QueueSamples > 0))
		})
		is.QueueP99BDPs = get(func(i *IncastResult) float64 {
			return orNaN(i.QueueP99BDPs, boolInt(i.BDPBytes > 0 && i.QueueSamples > 0))
		})
		is.QueueP50Bytes = get(func(i *IncastResult) float64 { return orNaN(i.QueueP50Bytes, i.QueueSamples) })
		is.QueueP99Bytes = get(func(i *IncastResult) float64 { return orNaN(i.QueueP99Bytes, i.QueueSamples) })
		is.Trimmed = get(func(i *IncastResult) float64 { return float64(i.Trimmed) })
		is.Dropped = get(func(i *IncastResult) float64 { return float64(i.Dropped) })
		vs.Incasts = append(vs.Incasts, is)
	}
	for j, p := range rs[0].Ports {
		if !p.Watched {
			continue
		}
		port := func(get func(*PortResult) float64) stats.Stat {
			return col(func(r *Result) float64 {
				if j >= len(r.Ports) || r.Ports[j].Error != "" {
					return nan
				}
				return get(&r.Ports[j])
			})
		}
		vs.Ports = append(vs.Ports, PortSummary{Name: p.Name,
			Utilization:    port(func(p *PortResult) float64 { return p.Utilization }),
			MeanSojournUS:  port(func(p *PortResult) float64 { return p.MeanSojournUS }),
			SojournP99US:   port(func(p *PortResult) float64 { return p.SojournP99US }),
			MarkedFraction: port(func(p *PortResult) float64 { return p.MarkedFraction }),
			CEMarked:       port(func(p *PortResult) float64 { return float64(p.CEMarked) }),
			PPFCStops: port(func(p *PortResult) float64 {
				if p.Stats == nil {
					return nan
				}
				return float64(p.Stats.Total().PPFCStopsSent)
			}),
			Dropped:        port(func(p *PortResult) float64 { return float64(p.DroppedPackets) }),
			MaxBacklog:     port(func(p *PortResult) float64 { return float64(p.MaxBacklogBytes) }),
			QueueMeanBytes: port(func(p *PortResult) float64 { return orNaN(p.QueueMeanBytes, p.QueueSamples) }),
			QueueP50Bytes:  port(func(p *PortResult) float64 { return orNaN(p.QueueP50Bytes, p.QueueSamples) }),
			QueueP99Bytes:  port(func(p *PortResult) float64 { return orNaN(p.QueueP99Bytes, p.QueueSamples) }),
		})
	}
	for j, p := range rs[0].PEs {
		if p.AgentStats == nil {
			continue
		}
		pe := func(get func(*PEResult) float64) stats.Stat {
			return col(func(r *Result) float64 {
				if j >= len(r.PEs) || r.PEs[j].AgentStats == nil {
					return nan
				}
				return get(&r.PEs[j])
			})
		}
		vs.PEs = append(vs.PEs, PESummary{Node: p.Node, Agent: p.Agent,
			LightCNPs:   pe(func(p *PEResult) float64 { return float64(p.AgentStats.LightCNPs) }),
			RateUpdates: pe(func(p *PEResult) float64 { return float64(p.AgentStats.RateUpdates) }),
			MinRateBps: pe(func(p *PEResult) float64 {
				if p.AgentStats.RateUpdates == 0 {
					return nan
				}
				return float64(p.AgentStats.MinRate)
			}),
			ReactionP50MS: pe(func(p *PEResult) float64 {
				return orNaN(p.ReactionP50MS, int(p.AgentStats.RateUpdates+p.AgentStats.Spills))
			}),
			Spills: pe(func(p *PEResult) float64 { return float64(p.AgentStats.Spills) }),
			FirstReactionMS: pe(func(p *PEResult) float64 {
				if p.FirstReactionMS == 0 {
					return nan
				}
				return p.FirstReactionMS
			}),
		})
	}
	// Flows by group, in the order groups first appear.
	var groups []string
	members := map[string][]int{}
	for j, fl := range rs[0].Flows {
		g := fl.Group
		if _, ok := members[g]; !ok {
			groups = append(groups, g)
		}
		members[g] = append(members[g], j)
	}
	for _, g := range groups {
		idx := members[g]
		fs := FlowSummary{Name: g, Flows: len(idx)}
		var goodput, ratio, mean, p50, p99, r50, r99 []float64
		for _, r := range rs {
			var bps float64
			var fcts, ratios, single []float64
			series := false
			for _, j := range idx {
				if j >= len(r.Flows) {
					continue
				}
				f := &r.Flows[j]
				bps += f.GoodputBps
				if f.FCTRatio > 0 {
					single = append(single, f.FCTRatio)
				}
				if f.Series == nil {
					continue
				}
				series = true
				for _, in := range f.Series.Instances {
					if in.Error == "" && in.FCTRatio > 0 {
						fcts = append(fcts, in.FCTS)
						ratios = append(ratios, in.FCTRatio)
					}
				}
			}
			goodput = append(goodput, bps)
			ratio = append(ratio, orNaN(stats.Summarize(single).Mean, len(single)))
			if series {
				fd, rd := stats.Summarize(fcts), stats.Summarize(ratios)
				mean, p50, p99 = append(mean, orNaN(fd.Mean, fd.N)), append(p50, orNaN(fd.P50, fd.N)), append(p99, orNaN(fd.P99, fd.N))
				r50, r99 = append(r50, orNaN(rd.P50, rd.N)), append(r99, orNaN(rd.P99, rd.N))
				fs.FCTRatios = append(fs.FCTRatios, ratios...)
			}
		}
		var q50, q99 []float64
		for _, r := range rs {
			if qct, ok := roundQCTs(r, idx); ok {
				d := stats.Summarize(qct)
				q50, q99 = append(q50, orNaN(d.P50, d.N)), append(q99, orNaN(d.P99, d.N))
			}
		}
		fs.QCTP50S, fs.QCTP99S = stats.NewStat(q50), stats.NewStat(q99)
		fs.GoodputBps, fs.FCTRatio = stats.NewStat(goodput), stats.NewStat(ratio)
		fs.FCTMeanS = stats.NewStat(mean)
		fs.FCTP50S, fs.FCTP99S, fs.RatioP50, fs.RatioP99 = stats.NewStat(p50), stats.NewStat(p99), stats.NewStat(r50), stats.NewStat(r99)
		fs.Instances = len(fs.FCTRatios)
		vs.Flows = append(vs.Flows, fs)
	}
	return vs
}

// roundQCTs are the completion times of the rounds the flows idx of r
// make: false unless they are at least two series with every, the same
// start and count. A round with a failed instance has no QCT.
func roundQCTs(r *Result, idx []int) ([]float64, bool) {
	if len(idx) < 2 {
		return nil, false
	}
	var first *FlowResult
	for _, j := range idx {
		if j >= len(r.Flows) {
			return nil, false
		}
		f := &r.Flows[j]
		if f.Series == nil || f.Series.EveryS == 0 {
			return nil, false
		}
		if first == nil {
			first = f
		} else if f.Series.EveryS != first.Series.EveryS || f.Series.Count != first.Series.Count || f.StartS != first.StartS {
			return nil, false
		}
	}
	var out []float64
	for k := range first.Series.Count {
		start, end := math.Inf(1), math.Inf(-1)
		for _, j := range idx {
			ins := r.Flows[j].Series.Instances
			if k >= len(ins) || ins[k].Error != "" {
				start = math.NaN()
				break
			}
			// The data's span: each instance's connection or QP setup
			// is before it (the experiment's queries go out on
			// connections made beforehand).
			start, end = min(start, ins[k].EndS-ins[k].Seconds), max(end, ins[k].EndS)
		}
		if !math.IsNaN(start) {
			out = append(out, end-start)
		}
	}
	return out, true
}

// boolInt is 1 for true: a count of one sample for orNaN.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// orNaN is v, or NaN when it summarises no sample.
func orNaN(v float64, n int) float64 {
	if n == 0 {
		return math.NaN()
	}
	return v
}

func seriesDist(f *FlowResult, ratio bool) stats.Dist {
	if f.Series == nil {
		return stats.Dist{}
	}
	if ratio {
		return f.Series.FCTRatio
	}
	return f.Series.FCTS
}

// write puts result.json (the comparison) and fct.png (the series' FCT
// over ideal, a CDF per variant) in dir.
func (c *Comparison) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	png, perr := c.plotFCT(dir)
	if png != "" {
		c.Files = append(c.Files, png)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return perr
}

// plotFCT draws the CDF of every variant's series FCT/ideal, pooled over
// its flows and runs; "" when no variant has a series.
func (c *Comparison) plotFCT(dir string) (string, error) {
	p := plot.New()
	p.Title.Text = c.Name + ": FCT / ideal of the series' instances, every run"
	p.X.Label.Text, p.Y.Label.Text = "FCT / ideal", "fraction of instances"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	drawn := false
	for i, v := range c.Summary {
		var xs []float64
		for _, f := range v.Flows {
			xs = append(xs, f.FCTRatios...)
		}
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		xy := make(plotter.XYs, len(xs))
		for k, x := range xs {
			xy[k] = plotter.XY{X: x, Y: float64(k+1) / float64(len(xs))}
		}
		if err := addLine(p, i, orName(v.Name, c.Name), xy); err != nil {
			return "", err
		}
		drawn = true
	}
	if !drawn {
		return "", nil
	}
	p.Legend.Top, p.Legend.Left = false, false
	path := filepath.Join(dir, "fct.png")
	return path, save(path, p)
}

// WriteSummary prints the comparison: per variant, the watched ports
// and the flows, mean ± 95 % CI over the runs.
func (c *Comparison) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "\n%s: %d variant(s) × %d run(s), seed %d, %.0f s", c.Name, len(c.Variants), c.Runs, c.Seed, c.Seconds)
	if c.Timescale != 1 && c.Timescale != 0 {
		fmt.Fprintf(w, ", timescale %g", c.Timescale)
	}
	if c.Interrupted {
		fmt.Fprint(w, ", interrupted")
	}
	fmt.Fprintln(w, "; mean ± 95% CI over the runs")
	fmt.Fprintf(w, "%-14s %-14s %14s %16s %16s %16s %14s %10s\n", "variant", "port", "utilization", "mean queue", "mean wait", "p99 wait", "CE marked", "drops")
	for _, v := range c.Summary {
		if v.Runs == 0 {
			fmt.Fprintf(w, "%-14s every run failed\n", orName(v.Name, c.Name))
			continue
		}
		for _, p := range v.Ports {
			fmt.Fprintf(w, "%-14s %-14s %14s %16s %16s %16s %14s %10s\n", orName(v.Name, c.Name), p.Name,
				statText(p.Utilization, 100, "%.1f%%"), statText(p.QueueMeanBytes, 1e-3, "%.1fKB"), statText(p.MeanSojournUS, 1, "%.0fus"), boundText(p.SojournP99US),
				statText(p.MarkedFraction, 100, "%.2f%%"), statText(p.Dropped, 1, "%.0f"))
		}
	}
	fmt.Fprintf(w, "%-14s %-14s %16s %16s %16s %16s %9s %16s\n", "variant", "flows", "goodput", "FCT/ideal", "series p50", "series p99", "instances", "round QCT p99")
	for _, v := range c.Summary {
		for _, f := range v.Flows {
			p50, p99 := "-", "-"
			if f.Instances > 0 {
				p50 = statText(f.RatioP50, 1, "%.2f×")
				p99 = statText(f.RatioP99, 1, "%.2f×")
			}
			name := f.Name
			if f.Flows > 1 {
				name = fmt.Sprintf("%s (%d)", f.Name, f.Flows)
			}
			fmt.Fprintf(w, "%-14s %-14s %16s %16s %16s %16s %9d %16s\n", orName(v.Name, c.Name), name,
				statText(f.GoodputBps, 1e-6, "%.1fMb/s"), statText(f.FCTRatio, 1, "%.2f×"), p50, p99, f.Instances, statText(f.QCTP99S, 1e3, "%.1fms"))
		}
		if v.Failed > 0 {
			fmt.Fprintf(w, "%-14s %d of %d runs failed\n", orName(v.Name, c.Name), v.Failed, v.Failed+v.Runs)
		}
		if v.FlowsFailed > 0 {
			fmt.Fprintf(w, "%-14s %d of %d runs had failed flows (not in the FCTs; result.json says which)\n", orName(v.Name, c.Name), v.FlowsFailed, v.Runs)
		}
	}
	if slices.ContainsFunc(c.Summary, func(v VariantSummary) bool { return len(v.Incasts) > 0 }) {
		writeIncastTable(w, c)
	}
	if slices.ContainsFunc(c.Summary, func(v VariantSummary) bool { return v.Matrix != nil }) {
		writeMatrixTable(w, c)
	}
	if slices.ContainsFunc(c.Summary, func(v VariantSummary) bool { return v.CNPsSent.N > 0 }) {
		writeLoopTable(w, c)
	}
	for _, v := range c.Summary {
		if v.Jain.N > 0 {
			fmt.Fprintf(w, "%-14s fairness: Jain %s over the timed flows while all ran\n", orName(v.Name, c.Name), statText(v.Jain, 1, "%.3f"))
		}
	}
	for _, v := range c.Summary {
		if v.E2EReactionMS.N > 0 {
			fmt.Fprintf(w, "%-14s end-to-end reaction %s (a queue past its CE threshold to the first DCQCN cut, sampled every 3 ms)\n",
				orName(v.Name, c.Name), statText(v.E2EReactionMS, 1, "%.1fms"))
		}
	}
	for _, v := range c.Summary {
		if v.Lost.N > 0 && v.Lost.Max > 0 {
			fmt.Fprintf(w, "%-14s lost %s packets per run (ports, host queues and sockets, and resends)\n", orName(v.Name, c.Name), statText(v.Lost, 1, "%.0f"))
		}
	}
	for _, v := range c.Summary {
		if v.HostLostShare.N > 0 {
			fmt.Fprintf(w, "%-14s host-lost %s of each run (a port idle with a sender held, or holding packets back); %d of %d runs host-starved\n",
				orName(v.Name, c.Name), statText(v.HostLostShare, 100, "%.2f%%"), v.HostStarved, v.Runs)
		}
	}
	if slices.ContainsFunc(c.Summary, func(v VariantSummary) bool { return len(v.PEs) > 0 }) {
		fmt.Fprintf(w, "%-14s %-14s %14s %14s %16s %10s %16s %18s\n", "variant", "pe agent", "light CNPs", "rate changes", "least rate", "spills", "reaction p50", "first reaction")
		for _, v := range c.Summary {
			for _, p := range v.PEs {
				fmt.Fprintf(w, "%-14s %-14s %14s %14s %16s %10s %16s %18s\n", orName(v.Name, c.Name), p.Node+" "+p.Agent,
					statText(p.LightCNPs, 1, "%.0f"), statText(p.RateUpdates, 1, "%.0f"), statText(p.MinRateBps, 1e-6, "%.1fMb/s"),
					statText(p.Spills, 1, "%.0f"), statText(p.ReactionP50MS, 1, "%.2fms"), statText(p.FirstReactionMS, 1, "%.2fms"))
			}
		}
	}
	writeGoals(w, c.Goals)
	for _, f := range c.Files {
		fmt.Fprintf(w, "wrote %s\n", f)
	}
}

// statText is "mean ± ci" in format's unit (values × scale).
func statText(s stats.Stat, scale float64, format string) string {
	if s.N == 0 || math.IsNaN(s.Mean) {
		return "-"
	}
	m := fmt.Sprintf(format, s.Mean*scale)
	if s.N < 2 || math.IsNaN(s.CI95) {
		return m
	}
	unit := strings.TrimLeft(fmt.Sprintf(format, 0.0), "0123456789.")
	return strings.TrimSuffix(m, unit) + "±" + fmt.Sprintf(format, s.CI95*scale)
}

// boundText is a histogram bound over the runs (microseconds): each run's
// is a bucket's upper edge, not a value, so their mean would be false
// precision. One bound if every run had it, else the least and the most.
func boundText(s stats.Stat) string {
	if s.N == 0 || s.Max <= 0 {
		return "-"
	}
	us := func(v float64) string { return units.FormatBound(time.Duration(v * 1e3)) }
	if s.Min == s.Max {
		return us(s.Max)
	}
	return us(s.Min) + ".." + us(s.Max)
}

// writeIncastTable prints each variant's incasts: the lab's ratios raw
// and net of host-lost time, the queue in BDPs and the trims, mean ± 95 %
// CI over the runs.
func writeIncastTable(w io.Writer, c *Comparison) {
	fmt.Fprintf(w, "%-14s %-16s %-6s %14s %14s %14s %14s %12s %12s %10s\n", "variant", "incast", "", "tail/ideal", "mean/ideal", "tail net", "mean net", "queue p50", "queue p99", "trims")
	for _, v := range c.Summary {
		for _, ic := range v.Incasts {
			fmt.Fprintf(w, "%-14s %-16s %-6s %14s %14s %14s %14s %12s %12s %10s\n", orName(v.Name, c.Name), fmt.Sprintf("%s (%d)", ic.Group, ic.Flows), "lab",
				statText(ic.TailRatio, 1, "%.3f"), statText(ic.MeanRatio, 1, "%.3f"), statText(ic.TailRatioNet, 1, "%.3f"), statText(ic.MeanRatioNet, 1, "%.3f"),
				statText(ic.QueueP50BDPs, 1, "%.2fBDP"), statText(ic.QueueP99BDPs, 1, "%.2fBDP"), statText(ic.Trimmed, 1, "%.0f"))
			if ic.Failed > 0 {
				fmt.Fprintf(w, "%-14s %-16s %d run(s) with a flow that did not complete (not above)\n", "", "", ic.Failed)
			}
		}
		if h := v.Htsim; h != nil && h.Result != nil {
			r := h.Result
			fmt.Fprintf(w, "%-14s %-16s %-6s %14.3f %14.3f %14s %14s %12s %12s %10d\n", orName(v.Name, c.Name), fmt.Sprintf("seed %d", r.Plan.Scenario.Seed), "htsim",
				r.TailOverIdeal, r.MeanOverIdeal, "", "", fmt.Sprintf("%.2fBDP", r.Queue.P50BDPs), fmt.Sprintf("%.2fBDP", r.Queue.P99BDPs), r.Counters.NACKs)
		} else if h != nil {
			fmt.Fprintf(w, "%-14s %s\n", orName(v.Name, c.Name), h.Error)
		}
	}
}

// plural is "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// writeLoopTable prints the DCQCN loop of each variant (seed 000's
// tune-and-verify loop): the watched ports' CE marks and PPFC stops, the
// CNPs sent and handled, the queue's p99, each against the first
// variant's as a ratio of means; and the runs in which Check found a
// layer silent.
func writeLoopTable(w io.Writer, c *Comparison) {
	fmt.Fprintf(w, "%-14s %-14s %16s %16s %16s %16s %16s\n", "variant", "port", "CE marked", "PPFC stops", "CNPs sent", "CNPs handled", "queue p99")
	first := &c.Summary[0]
	ratio := func(s, base stats.Stat) string {
		switch {
		case s.N == 0 || base.N == 0:
			return "-"
		case base.Mean == 0 && s.Mean == 0:
			return "= 0"
		case base.Mean == 0:
			return "from 0"
		}
		return fmt.Sprintf("×%.2f", s.Mean/base.Mean)
	}
	for i := range c.Summary {
		v := &c.Summary[i]
		if v.Runs == 0 {
			continue
		}
		for j, p := range v.Ports {
			fmt.Fprintf(w, "%-14s %-14s %16s %16s %16s %16s %16s\n", orName(v.Name, c.Name), p.Name,
				statText(p.CEMarked, 1, "%.0f"), statText(p.PPFCStops, 1, "%.0f"), statText(v.CNPsSent, 1, "%.0f"),
				statText(v.CNPsHandled, 1, "%.0f"), statText(p.QueueP99Bytes, 1e-3, "%.1fKB"))
			if i == 0 || j >= len(first.Ports) || first.Runs == 0 {
				continue
			}
			fp := &first.Ports[j]
			fmt.Fprintf(w, "%-14s %-14s %16s %16s %16s %16s %16s\n", "", "vs "+orName(first.Name, c.Name),
				ratio(p.CEMarked, fp.CEMarked), ratio(p.PPFCStops, fp.PPFCStops), ratio(v.CNPsSent, first.CNPsSent),
				ratio(v.CNPsHandled, first.CNPsHandled), ratio(p.QueueP99Bytes, fp.QueueP99Bytes))
		}
	}
	for i := range c.Summary {
		v := &c.Summary[i]
		if v.Runs == 0 || v.CNPsSent.N == 0 {
			continue
		}
		if len(v.Silent) == 0 {
			fmt.Fprintf(w, "%-14s three layers: none silent in %d run%s\n", orName(v.Name, c.Name), v.Runs, plural(v.Runs))
			continue
		}
		var parts []string
		for _, l := range []Layer{LayerCP, LayerPath, LayerNP, LayerRP} {
			if n := v.Silent[l]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s in %d of %d runs", strings.ToUpper(string(l)), n, v.Runs))
			}
		}
		fmt.Fprintf(w, "%-14s three layers: silent %s (fabriclab check -result on a run's result.json says why)\n", orName(v.Name, c.Name), strings.Join(parts, ", "))
	}
}
