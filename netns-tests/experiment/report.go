package main

// The report: the JSON shape, the goal checks and the terminal rendering.
// Pure, unit-tested without root.

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Report is experiment.json.
type Report struct {
	Time      time.Time      `json:"time"`
	Kernel    string         `json:"kernel"`
	CPUs      int            `json:"cpus"`
	LoadStart string         `json:"loadavg_start"`
	LoadEnd   string         `json:"loadavg_end"`
	Setup     Setup          `json:"setup"`
	RTT       RTTReport      `json:"rtt"`
	Tune      aqm.TuneOutput `json:"tune"`
	Schemes   []Result       `json:"schemes"`
	// DelayLinks are the senders' delay forwarders over the whole run.
	DelayLinks []DelayReport `json:"delay_links,omitempty"`
	Goals      []Goal        `json:"goals"`
	Notes      []string      `json:"notes,omitempty"`
}

// DelayReport is one sender's delay link (topo.DelayLink) over the whole
// run: whether it kept up and how late it released packets.
type DelayReport struct {
	Sender         string  `json:"sender"`
	DelayUs        float64 `json:"delay_us"`
	Packets        uint64  `json:"packets"`
	Dropped        uint64  `json:"dropped"` // forwarder, TUN queue and kernel drops
	MaxHeld        int     `json:"max_held"`
	LatenessMeanUs float64 `json:"lateness_mean_us"`
	LatenessP99Us  float64 `json:"lateness_p99_us"` // upper bound (log2 bins)
	LatenessMaxUs  float64 `json:"lateness_max_us"`
}

// Setup is what was run, from the flags.
type Setup struct {
	RateBps       uint64    `json:"rate_bps"`
	Senders       int       `json:"senders"`
	DelaysUs      []float64 `json:"one_way_delays_us"`
	DelayLink     string    `json:"delay_link"`
	LongPerSender int       `json:"long_flows_per_sender"`
	Congestion    string    `json:"congestion_control"`
	Class         int       `json:"class"`
	DSCP          int       `json:"dscp"`
	WarmupS       float64   `json:"warmup_s"`
	MeasureS      float64   `json:"measure_s"`
	SampleUs      float64   `json:"sample_interval_us"`
	ShortMinBytes uint64    `json:"short_min_bytes"`
	ShortMaxBytes uint64    `json:"short_max_bytes"`
	ShortGapUs    float64   `json:"short_mean_gap_us"`
	Seed          uint64    `json:"seed"`
	Lambda        float64   `json:"lambda"`
	LimitBytes    uint64    `json:"limit_bytes"`
	Attach        string    `json:"attach"`
	RPS           string    `json:"rps,omitempty"`
	OffloadsOff   bool      `json:"offloads_off"`
	// SharpOverrides are ECN♯ parameters set by flag, not by aqm.Tune.
	SharpOverrides []string `json:"ecnsharp_overrides,omitempty"`
}

// RTTReport is the base-RTT measurement before the runs: UDP echoes from
// each sender to the receiver through the idle port.
type RTTReport struct {
	Probes    int         `json:"probes_per_sender"`
	PerSender []SenderRTT `json:"per_sender"`
	// Pooled over all senders (each gave the same number of probes): the
	// RTT distribution of the flows, what Tune gets.
	PooledUs Dist `json:"pooled_us"`
	// Spread is the largest per-sender median over the smallest.
	Spread float64 `json:"spread"`
}

type SenderRTT struct {
	Sender  string  `json:"sender"`
	DelayUs float64 `json:"one_way_delay_us"`
	Lost    int     `json:"lost"`
	RTTUs   Dist    `json:"rtt_us"`
}

// Result is one scheme's run.
type Result struct {
	Scheme
	Describe  string  `json:"describe"`
	MeasuredS float64 `json:"measured_s"`
	// Queue: the class backlog sampled every SampleUs (time average).
	Queue QueueStats `json:"queue"`
	// SojournMeanUs is the mean time packets spent in the queue, from the
	// port's counters (a packet average).
	SojournMeanUs float64 `json:"sojourn_mean_us"`
	// Utilization is dequeued bytes / (rate · measured time).
	Utilization   float64 `json:"utilization"`
	DequeuedBytes uint64  `json:"dequeued_bytes"`
	// Counters over the measured window.
	ECTArrivals uint64 `json:"ect_arrivals"`
	CEMarks     uint64 `json:"ce_marks"`
	InsMarks    uint64 `json:"aqm_ins_marks"` // TCN, ECN♯ instantaneous
	PstMarks    uint64 `json:"aqm_pst_marks"` // CoDel, ECN♯ persistent
	Drops       uint64 `json:"drops"`
	// Short flows started in the measured window.
	ShortFCTUs    Dist   `json:"short_fct_us"`
	ShortFailed   int    `json:"short_failed"`
	ShortBySender []Dist `json:"short_fct_us_by_sender"`
	// Long flows over the measured window.
	Long           []LongFlow `json:"long_flows"`
	LongGoodputBps float64    `json:"long_goodput_bps"`
	Retransmits    uint64     `json:"long_retransmits"`
	// Series is the backlog downsampled for the file; Zoom the first
	// samples at full resolution (the plot's right column).
	Series Series   `json:"queue_series"`
	Zoom   []uint64 `json:"queue_zoom_bytes"`
	Error  string   `json:"error,omitempty"`
}

// LongFlow is one long TCP flow over the measured window, from TCP_INFO.
type LongFlow struct {
	Sender      string  `json:"sender"`
	GoodputBps  float64 `json:"goodput_bps"` // bytes acked in the window
	Retransmits uint64  `json:"retransmits"` // total_retrans in the window
	MinRTTUs    float64 `json:"min_rtt_us"`  // the kernel's min_rtt
	SRTTUs      float64 `json:"srtt_us"`     // at the end of the window
	ECN         bool    `json:"ecn"`         // ECN negotiated
	Congestion  string  `json:"congestion_control"`
}

// Goal is one of issue #3's goals for ECN♯ against step-Tail.
type Goal struct {
	Name      string  `json:"name"`
	Want      string  `json:"want"`
	Measured  string  `json:"measured"`
	Value     float64 `json:"value"` // the compared quantity (a ratio or difference)
	Evaluated bool    `json:"evaluated"`
	Met       bool    `json:"met"`
}

// Goal thresholds (issue #3 §5).
const (
	goalQueueCut   = 0.80 // ECN♯ mean queue at least 80 % below step-Tail's
	goalUtilWithin = 0.03 // utilization within 3 % of step-Tail's
	goalFCTCut     = 0.20 // short-flow p99 FCT at least 20 % lower
)

// goalEps absorbs float rounding at the exact thresholds.
const goalEps = 1e-9

// checkGoals compares ECN♯ with step-Tail. Utilization "within 3 %" is
// relative (|u♯ − u_tail| ≤ 3 % of u_tail); being above counts as met.
func checkGoals(rs []Result) []Goal {
	var tail, sharp *Result
	for i := range rs {
		switch {
		case rs[i].Error != "":
		case rs[i].Name == "step-tail":
			tail = &rs[i]
		case rs[i].Name == "ecnsharp":
			sharp = &rs[i]
		}
	}
	goals := []Goal{
		{Name: "mean queue", Want: fmt.Sprintf("ECN♯ >= %.0f%% below step-Tail", 100*goalQueueCut)},
		{Name: "utilization", Want: fmt.Sprintf("ECN♯ within %.0f%% of step-Tail (or above)", 100*goalUtilWithin)},
		{Name: "short-flow p99 FCT", Want: fmt.Sprintf("ECN♯ >= %.0f%% lower than step-Tail", 100*goalFCTCut)},
	}
	if tail == nil || sharp == nil {
		for i := range goals {
			goals[i].Measured = "not evaluated: needs successful step-tail and ecnsharp runs"
		}
		return goals
	}
	reduction := func(a, b float64) float64 { // how much lower b is than a
		if a <= 0 {
			return math.NaN()
		}
		return 1 - b/a
	}
	q := reduction(tail.Queue.MeanBytes, sharp.Queue.MeanBytes)
	goals[0].Value, goals[0].Evaluated = q, !math.IsNaN(q)
	goals[0].Met = goals[0].Evaluated && q >= goalQueueCut-goalEps
	goals[0].Measured = fmt.Sprintf("%.1f KB -> %.1f KB: %s", tail.Queue.MeanBytes/1000, sharp.Queue.MeanBytes/1000, lowerText(q))

	u := -reduction(tail.Utilization, sharp.Utilization) // relative change
	goals[1].Value, goals[1].Evaluated = u, !math.IsNaN(u)
	goals[1].Met = goals[1].Evaluated && u >= -goalUtilWithin-goalEps
	goals[1].Measured = fmt.Sprintf("%.1f%% -> %.1f%%: %s relative", 100*tail.Utilization, 100*sharp.Utilization, signedPct(u))

	f := reduction(tail.ShortFCTUs.P99, sharp.ShortFCTUs.P99)
	goals[2].Value, goals[2].Evaluated = f, !math.IsNaN(f) && tail.ShortFCTUs.N > 0 && sharp.ShortFCTUs.N > 0
	goals[2].Met = goals[2].Evaluated && f >= goalFCTCut-goalEps
	goals[2].Measured = fmt.Sprintf("%.0f µs -> %.0f µs: %s", tail.ShortFCTUs.P99, sharp.ShortFCTUs.P99, lowerText(f))
	for i := range goals {
		if !goals[i].Evaluated {
			goals[i].Measured = "not evaluated (no samples): " + goals[i].Measured
		}
	}
	return goals
}

// lowerText says how much lower (r > 0) or higher (r < 0) ECN♯ was.
func lowerText(r float64) string {
	switch {
	case math.IsNaN(r):
		return "n/a"
	case r >= 0:
		return fmt.Sprintf("%.1f%% lower", 100*r)
	}
	return fmt.Sprintf("%.1f%% higher", -100*r)
}

func signedPct(f float64) string {
	if math.IsNaN(f) {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f%%", 100*f)
}

func (g *Goal) verdict() string {
	switch {
	case !g.Evaluated:
		return "NOT EVALUATED"
	case g.Met:
		return "met"
	}
	return "NOT met"
}

// renderParams prints the setup, the measured RTTs and the derived
// parameters: everything a reader needs to reproduce the run.
func renderParams(w io.Writer, r *Report) {
	s := &r.Setup
	rate := units.Rate(s.RateBps)
	fmt.Fprintf(w, "setup   %d senders -> sw:swp0 -> r; port %s (%s, HTB + eBPF), class %d (DSCP %d), buffer %.1f KB; offloads off; %s\n",
		s.Senders, rate, s.Attach, s.Class, s.DSCP, float64(s.LimitBytes)/1000, orNA(s.RPS, "no RPS steering"))
	delays := make([]string, len(s.DelaysUs))
	for i, d := range s.DelaysUs {
		delays[i] = fmt.Sprintf("s%d %.0fµs", i+1, d)
	}
	fmt.Fprintf(w, "delay   one-way at the senders: %s (%s)\n", strings.Join(delays, ", "), s.DelayLink)
	fmt.Fprintf(w, "flows   %d long TCP flows per sender (%s, classic ECN: tcp_ecn=1); short flows %.1f-%.1f KB uniform, one at a time per sender, exp. gaps of mean %.0f ms, seed %d\n",
		s.LongPerSender, s.Congestion, float64(s.ShortMinBytes)/1000, float64(s.ShortMaxBytes)/1000, s.ShortGapUs/1000, s.Seed)
	fmt.Fprintf(w, "timing  per scheme: %.0f s warm-up, %.0f s measured; backlog sampled every %.0f µs\n", s.WarmupS, s.MeasureS, s.SampleUs)
	fmt.Fprintf(w, "host    kernel %s, %d CPUs, load average %s at start (shared machine: expect noise)\n\n", r.Kernel, r.CPUs, orNA(r.LoadStart, "?"))

	fmt.Fprintf(w, "base RTT (%d UDP echoes per sender through the idle port):\n", r.RTT.Probes)
	for _, sr := range r.RTT.PerSender {
		fmt.Fprintf(w, "  %-4s delay %6.0f µs   rtt min %6.0f  p50 %6.0f  mean %6.0f  p90 %6.0f  max %6.0f µs  (lost %d)\n",
			sr.Sender, sr.DelayUs, sr.RTTUs.Min, sr.RTTUs.P50, sr.RTTUs.Mean, sr.RTTUs.P90, sr.RTTUs.Max, sr.Lost)
	}
	p := &r.RTT.PooledUs
	fmt.Fprintf(w, "  pooled: p50 %.0f µs, mean %.0f µs, p90 %.0f µs; spread of the medians %.2fx\n\n", p.P50, p.Mean, p.P90, r.RTT.Spread)

	t := &r.Tune
	fmt.Fprintf(w, "parameters (aqm.Tune, seed 002 §3.4, lambda %g, C = %s):\n", s.Lambda, rate)
	fmt.Fprintf(w, "  step-Tail K = λ·C·RTT_p90 = %.1f KB      step-AVG K = λ·C·RTT_avg = %.1f KB\n",
		float64(t.KTailBytes)/1000, float64(t.KAvgBytes)/1000)
	fmt.Fprintf(w, "  ECN♯ ins_target = λ·RTT_p90 = %s, pst_target = λ·RTT_avg = %s, pst_interval = RTT_p90 = %s\n",
		units.FormatDuration(t.InsTarget), units.FormatDuration(t.PstTarget), units.FormatDuration(t.PstInterval))
	fmt.Fprintf(w, "  CoDel target %s, interval %s; TCN threshold %s\n",
		units.FormatDuration(t.CoDelTarget), units.FormatDuration(t.CoDelInterval), units.FormatDuration(t.TCNThreshold))
	if len(s.SharpOverrides) > 0 {
		fmt.Fprintf(w, "  ECN♯ runs with these instead, set by flag: %s\n", strings.Join(s.SharpOverrides, ", "))
	}
	for _, n := range t.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	fmt.Fprintln(w)
}

// renderTable prints one row per scheme.
func renderTable(w io.Writer, r *Report) {
	rate := units.Rate(r.Setup.RateBps)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scheme\tparameters\tmean queue\tp99 queue\tmean sojourn\tutil\tshort FCT avg\tshort FCT p99\tshort n\tdrops\tCE marks (ins/pst)\tretrans\t")
	for i := range r.Schemes {
		s := &r.Schemes[i]
		if s.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\tfailed: %s\t\t\t\t\t\t\t\t\t\t\n", s.Label, s.Params.describe(rate), s.Error)
			continue
		}
		marks := fmt.Sprint(s.CEMarks)
		if s.InsMarks+s.PstMarks > 0 {
			marks = fmt.Sprintf("%d (%d/%d)", s.CEMarks, s.InsMarks, s.PstMarks)
		}
		short := fmt.Sprint(s.ShortFCTUs.N)
		if s.ShortFailed > 0 {
			short += fmt.Sprintf(" (+%d failed)", s.ShortFailed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f KB %4.0f µs\t%.1f KB %4.0f µs\t%.0f µs\t%.1f%%\t%.0f µs\t%.0f µs\t%s\t%d\t%s\t%d\t\n",
			s.Label, s.Params.describe(rate),
			s.Queue.MeanBytes/1000, s.Queue.MeanUs, s.Queue.P99Bytes/1000, s.Queue.P99Us, s.SojournMeanUs,
			100*s.Utilization, s.ShortFCTUs.Mean, s.ShortFCTUs.P99, short, s.Drops, marks, s.Retransmits)
	}
	tw.Flush()
	fmt.Fprintln(w, "KB = 1000 bytes; queue = class backlog sampled in time (µs at the port rate); sojourn = per packet, from the port's counters;")
	fmt.Fprintln(w, "util = bytes leaving the port / (rate x time); CE marks (ins/pst) split dequeue-AQM marks into instantaneous (TCN, ECN♯) and persistent (CoDel, ECN♯).")
	fmt.Fprintln(w)
}

// renderFlows prints the long flows' goodput by sender and their RTTs as
// the kernel saw them, per scheme: where the throughput went.
func renderFlows(w io.Writer, r *Report) {
	fmt.Fprintln(w, "long flows: goodput by sender in Mbit/s (kernel min_rtt in µs)")
	for i := range r.Schemes {
		s := &r.Schemes[i]
		if s.Error != "" || len(s.Long) == 0 {
			continue
		}
		by := map[string]float64{}
		rtt := map[string]float64{}
		var order []string
		noECN := 0
		for _, f := range s.Long {
			if _, ok := by[f.Sender]; !ok {
				order = append(order, f.Sender)
				rtt[f.Sender] = f.MinRTTUs
			}
			by[f.Sender] += f.GoodputBps
			rtt[f.Sender] = min(rtt[f.Sender], f.MinRTTUs)
			if !f.ECN {
				noECN++
			}
		}
		parts := make([]string, len(order))
		for j, n := range order {
			parts[j] = fmt.Sprintf("%s %.1f (%.0f)", n, by[n]/1e6, rtt[n])
		}
		line := fmt.Sprintf("  %-10s total %.1f  %s", s.Label, s.LongGoodputBps/1e6, strings.Join(parts, "  "))
		if noECN > 0 {
			line += fmt.Sprintf("  WARNING: %d flows without ECN", noECN)
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
}

func renderGoals(w io.Writer, goals []Goal) {
	fmt.Fprintln(w, "goals (issue #3 §5, ECN♯ against step-Tail; an experiment, not a test: the exit code ignores them):")
	for _, g := range goals {
		fmt.Fprintf(w, "  %-19s %-46s %-14s %s\n", g.Name, g.Want, g.verdict(), g.Measured)
	}
	fmt.Fprintln(w)
}

func orNA(s, na string) string {
	if s == "" {
		return na
	}
	return s
}

// renderDelays prints how well the delay links kept their delays.
func renderDelays(w io.Writer, ds []DelayReport) {
	if len(ds) == 0 {
		return
	}
	fmt.Fprintln(w, "delay links (whole run): release lateness after the due time, and drops")
	for _, d := range ds {
		fmt.Fprintf(w, "  %-4s %6.0f µs: %d packets, lateness mean %.0f µs, p99 < %.0f µs, max %.0f µs; dropped %d; most held %d\n",
			d.Sender, d.DelayUs, d.Packets, d.LatenessMeanUs, d.LatenessP99Us, d.LatenessMaxUs, d.Dropped, d.MaxHeld)
	}
	fmt.Fprintln(w)
}
