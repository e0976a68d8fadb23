package main

// The report: the JSON shape, the goal checks and the terminal rendering.
// Pure, unit-tested without root.

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/stats"
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
	// Schemes holds every scheme run, in the order they ran.
	Schemes []Result `json:"scheme_runs"`
	// Summary is each scheme over its runs: means and 95 % intervals.
	Summary []Summary `json:"summary"`
	// DelayLinks are the senders' delay forwarders over the whole run.
	DelayLinks []DelayReport `json:"delay_links,omitempty"`
	Goals      []Goal        `json:"goals"`
	Notes      []string      `json:"notes,omitempty"`
}

// DelayReport is one sender's delay link (link.Delay) over the whole
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
	// Error says the link stopped delaying (its TUN was deleted,
	// link.ErrTunGone); what it took since is in Dropped.
	Error string `json:"error,omitempty"`
}

// Setup is what was run, from the flags.
type Setup struct {
	RateBps uint64 `json:"rate_bps"`
	// Timescale is the fabric's slow-down (units.Timescale): the lab ran
	// at WireRateBps, every time k times the fabric's. The report's times
	// and rates are the fabric's.
	Timescale     float64   `json:"timescale"`
	WireRateBps   uint64    `json:"wire_rate_bps"`
	Senders       int       `json:"senders"`
	DelaysUs      []float64 `json:"one_way_delays_us"`
	DelayLink     string    `json:"delay_link"`
	LongPerSender int       `json:"long_flows_per_sender"`
	Transport     string    `json:"transport"` // tcp or roce
	Congestion    string    `json:"congestion_control"`
	// CongestionName is what the sockets set (a registered BPF DCTCP has a
	// name of its run).
	CongestionName string  `json:"congestion_control_name"`
	Class          int     `json:"class"`
	DSCP           int     `json:"dscp"`
	WarmupS        float64 `json:"warmup_s"`
	MeasureS       float64 `json:"measure_s"`
	SampleUs       float64 `json:"sample_interval_us"`
	ShortMinBytes  uint64  `json:"short_min_bytes"`
	ShortMaxBytes  uint64  `json:"short_max_bytes"`
	ShortGapUs     float64 `json:"short_mean_gap_us"`
	Seed           uint64  `json:"seed"`
	Lambda         float64 `json:"lambda"`
	PstLambda      float64 `json:"pst_lambda"`
	LimitBytes     uint64  `json:"limit_bytes"`
	Attach         string  `json:"attach"`
	RPS            string  `json:"rps,omitempty"`
	OffloadsOff    bool    `json:"offloads_off"`
	// QuickAck: the receiver ACKed every packet (-quickack).
	QuickAck bool `json:"quickack,omitempty"`
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
	PooledUs stats.Dist `json:"pooled_us"`
	// Spread is the largest per-sender median over the smallest.
	Spread float64 `json:"spread"`
}

type SenderRTT struct {
	Sender  string     `json:"sender"`
	DelayUs float64    `json:"one_way_delay_us"`
	Lost    int        `json:"lost"`
	RTTUs   stats.Dist `json:"rtt_us"`
}

// Result is one scheme's run.
type Result struct {
	Scheme
	// Run is which of the -runs repetitions (1-based).
	Run       int     `json:"run"`
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
	// HostLost is what the host took from the scheme's run, from the long
	// flows' start to their stop (host/hostlost; wall times);
	// HostLostShare the part of the measured window the port lost to the
	// host (idle while a sender was held, or holding packets back), and
	// UtilizationNet the utilization of the rest of the window.
	HostLost       *hostlost.Report `json:"host_lost,omitempty"`
	HostLostShare  float64          `json:"host_lost_share"`
	UtilizationNet float64          `json:"utilization_net"`
	// Counters over the measured window.
	ECTArrivals uint64 `json:"ect_arrivals"`
	CEMarks     uint64 `json:"ce_marks"`
	InsMarks    uint64 `json:"aqm_ins_marks"` // TCN, ECN♯ instantaneous
	PstMarks    uint64 `json:"aqm_pst_marks"` // CoDel, ECN♯ persistent
	Drops       uint64 `json:"drops"`
	// Short flows started in the measured window.
	ShortFCTUs stats.Dist `json:"short_fct_us"`
	// ShortFCTNetUs are the FCTs less the time the host starved the port
	// during each flow.
	ShortFCTNetUs stats.Dist   `json:"short_fct_net_us"`
	ShortFailed   int          `json:"short_failed"`
	ShortBySender []stats.Dist `json:"short_fct_us_by_sender"`
	// ShortFCTsUs are the FCTs themselves (the CDF plot).
	ShortFCTsUs []float64 `json:"short_fcts_us"`
	// Incast is the incast phase after the measured window.
	Incast IncastResult `json:"incast"`
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

// IncastResult is the incast phase (seed 002 §5.4): Rounds rounds of
// synchronized query flows on top of the long flows.
type IncastResult struct {
	Rounds int `json:"rounds"`
	Flows  int `json:"flows"`
	Failed int `json:"failed"` // queries without an answer within the short-flow timeout
	// QCTUs is per round: the time to the last answer; FCTUs per query.
	QCTUs stats.Dist `json:"qct_us"`
	// QCTNetUs is QCTUs less the time the host starved the port during
	// each round.
	QCTNetUs stats.Dist `json:"qct_net_us"`
	FCTUs    stats.Dist `json:"fct_us"`
	Drops    uint64     `json:"drops"`
	CEMarks  uint64     `json:"ce_marks"`
	Queue    QueueStats `json:"queue"`
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
	RcBps       uint64  `json:"rc_bps,omitempty"` // a RoCE QP's DCQCN rate at the window's end
}

// Goal is one of issue #3's goals for ECN♯ against step-Tail.
type Goal struct {
	Name     string `json:"name"`
	Want     string `json:"want"`
	Measured string `json:"measured"`
	// Paired is the compared quantity (a relative reduction or change) of
	// each run in which both schemes ran, ECN♯ against step-Tail of the
	// same run, and its mean with a 95 % confidence interval.
	Paired    stats.Stat `json:"paired"`
	Evaluated bool       `json:"evaluated"`
	// Met: the mean meets the goal; CIClears: the whole interval does.
	Met      bool `json:"met"`
	CIClears bool `json:"ci_clears"`
}

// Goal thresholds (issue 12 §2 and §3, after seed 002).
const (
	goalQueueCut   = 0.80 // ECN♯ mean queue at least 80 % below step-Tail's
	goalUtilWithin = 0.03 // utilization within 3 % of step-Tail's
	goalFCTCut     = 0.20 // short-flow p99 FCT at least 20 % lower
	// With DCQCN (§3, seed §5.4: up to 14.9 % lower): the short flows'
	// mean FCT at least 10 % lower than the baseline's.
	goalRoCEFCTCut = 0.10
)

// goalEps absorbs float rounding at the exact thresholds.
const goalEps = 1e-9

// goalSpec is one goal: ECN♯'s metric against the baseline's of the same
// run, as a reduction (1 − ♯/base) or, with change, a relative change
// (♯/base − 1), met at threshold or above.
type goalSpec struct {
	name, want, baseline string
	metric               func(*Result) (float64, bool)
	change               bool
	threshold            float64
	unit                 float64 // the measured values are shown divided by it
	format, unitText     string
}

// checkGoals compares ECN♯ with the baseline of each goal run by run (each
// run's pair saw the same seeded flows and the same state of the machine)
// and gives the mean change over the runs with its 95 % interval.
// Utilization "within 3 %" is relative (u♯ / u_base − 1 ≥ −3 %); being
// above counts as met.
func checkGoals(rs []Result, transport string) []Goal {
	queue := func(r *Result) (float64, bool) { return r.Queue.MeanBytes, true }
	util := func(r *Result) (float64, bool) { return r.Utilization, true }
	p99 := func(r *Result) (float64, bool) { return r.ShortFCTUs.P99, r.ShortFCTUs.N > 0 }
	mean := func(r *Result) (float64, bool) { return r.ShortFCTUs.Mean, r.ShortFCTUs.N > 0 }
	utilGoal := func(base, label string) goalSpec {
		return goalSpec{name: "utilization" + label, want: fmt.Sprintf("ECN♯ within %.0f%% of %s (or above)", 100*goalUtilWithin, baseLabel(base)),
			baseline: base, metric: util, change: true, threshold: -goalUtilWithin, unit: 0.01, format: "%.1f", unitText: "%"}
	}
	var specs []goalSpec
	if transport == transportRoCE {
		for _, b := range []struct{ base, label string }{{"step-tail", ""}, {"wred", " (WRED)"}} {
			specs = append(specs,
				goalSpec{name: "short-flow FCT" + b.label, want: fmt.Sprintf("ECN♯ mean >= %.0f%% lower than %s", 100*goalRoCEFCTCut, baseLabel(b.base)),
					baseline: b.base, metric: mean, threshold: goalRoCEFCTCut, unit: 1, format: "%.0f", unitText: " µs"},
				utilGoal(b.base, b.label))
		}
	} else {
		specs = []goalSpec{
			{name: "mean queue", want: fmt.Sprintf("ECN♯ >= %.0f%% below step-Tail", 100*goalQueueCut),
				baseline: "step-tail", metric: queue, threshold: goalQueueCut, unit: 1000, format: "%.1f", unitText: " KB"},
			utilGoal("step-tail", ""),
			{name: "short-flow p99 FCT", want: fmt.Sprintf("ECN♯ >= %.0f%% lower than step-Tail", 100*goalFCTCut),
				baseline: "step-tail", metric: p99, threshold: goalFCTCut, unit: 1, format: "%.0f", unitText: " µs"},
		}
	}
	sharp := runsOf(rs, "ecnsharp")
	goals := make([]Goal, len(specs))
	for i, sp := range specs {
		g := &goals[i]
		g.Name, g.Want = sp.name, sp.want
		var vals, before, after []float64
		for run, b := range runsOf(rs, sp.baseline) {
			s, ok := sharp[run]
			if !ok {
				continue
			}
			x, okb := sp.metric(b)
			y, oks := sp.metric(s)
			if !okb || !oks || x <= 0 {
				continue
			}
			v := 1 - y/x
			if sp.change {
				v = y/x - 1
			}
			vals, before, after = append(vals, v), append(before, x), append(after, y)
		}
		g.Paired = stats.NewStat(vals)
		g.Evaluated = g.Paired.N > 0
		if !g.Evaluated {
			g.Measured = "not evaluated: needs successful " + sp.baseline + " and ecnsharp runs with samples"
			continue
		}
		g.Met = g.Paired.Mean >= sp.threshold-goalEps
		g.CIClears = g.Paired.N > 1 && g.Paired.Lo() >= sp.threshold-goalEps
		diff := pairedText(g.Paired, "lower", "higher")
		if sp.change {
			diff = pairedSigned(g.Paired) + " relative"
		}
		g.Measured = fmt.Sprintf("%s -> %s%s: %s", meanText(before, sp.unit, sp.format), meanText(after, sp.unit, sp.format), sp.unitText, diff)
	}
	return goals
}

// baseLabel is how the goals name a baseline scheme.
func baseLabel(name string) string {
	switch name {
	case "step-tail":
		return "step-Tail"
	case "wred":
		return "WRED"
	}
	return name
}

// runsOf maps run number to the successful result of scheme name.
func runsOf(rs []Result, name string) map[int]*Result {
	out := map[int]*Result{}
	for i := range rs {
		if rs[i].Error == "" && rs[i].Name == name {
			out[rs[i].Run] = &rs[i]
		}
	}
	return out
}

// meanText is the mean of xs divided by unit.
func meanText(xs []float64, unit float64, format string) string {
	st := stats.NewStat(xs)
	if st.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf(format, st.Mean/unit)
}

// pairedText says how much lower (or higher) ECN♯ was, with the interval
// and the runs.
func pairedText(st stats.Stat, lower, higher string) string {
	if st.N == 0 {
		return "n/a"
	}
	word := lower
	m, lo, hi := st.Mean, st.Lo(), st.Hi()
	if m < 0 {
		word, m, lo, hi = higher, -m, -hi, -lo
	}
	if st.N < 2 {
		return fmt.Sprintf("%.1f%% %s (1 run)", 100*m, word)
	}
	return fmt.Sprintf("%.1f%% %s (mean of %d runs, 95%% CI %.1f to %.1f%%)", 100*m, word, st.N, 100*lo, 100*hi)
}

func pairedSigned(st stats.Stat) string {
	if st.N == 0 {
		return "n/a"
	}
	if st.N < 2 {
		return fmt.Sprintf("%+.1f%% (1 run)", 100*st.Mean)
	}
	return fmt.Sprintf("%+.1f%% (95%% CI %+.1f to %+.1f%%)", 100*st.Mean, 100*st.Lo(), 100*st.Hi())
}

func (g *Goal) verdict() string {
	switch {
	case !g.Evaluated:
		return "NOT EVALUATED"
	case g.CIClears:
		return "met"
	case g.Met:
		return "met (mean)"
	}
	return "NOT met"
}

// runLine is one scheme run's results in a line, with the figures net of
// the host's time beside the raw ones when it was metered.
func runLine(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mean queue %.1f KB, util %.1f%%", r.Queue.MeanBytes/1000, 100*r.Utilization)
	if r.HostLost != nil {
		fmt.Fprintf(&b, " (%.1f%% net of the host's %.1f%%)", 100*r.UtilizationNet, 100*r.HostLostShare)
	}
	fmt.Fprintf(&b, ", short p99 %.0f µs", r.ShortFCTUs.P99)
	if r.ShortFCTNetUs.N > 0 {
		fmt.Fprintf(&b, " (%.0f net)", r.ShortFCTNetUs.P99)
	}
	if r.Incast.Rounds > 0 {
		fmt.Fprintf(&b, ", incast QCT p99 %.0f µs", r.Incast.QCTUs.P99)
		if r.Incast.QCTNetUs.N > 0 {
			fmt.Fprintf(&b, " (%.0f net)", r.Incast.QCTNetUs.P99)
		}
		fmt.Fprintf(&b, ", %d drops", r.Incast.Drops)
	}
	return b.String()
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
	long := fmt.Sprintf("%d long TCP flows per sender (%s, ECN on both ends)", s.LongPerSender, ccText(s))
	if s.Transport == transportRoCE {
		long = fmt.Sprintf("%d long RC queue pairs per sender (RoCEv2, DCQCN, 64 KiB WRITEs); a short flow is one WRITE on a queue pair of its own", s.LongPerSender)
	}
	fmt.Fprintf(w, "flows   %s; short flows %.1f-%.1f KB uniform, one at a time per sender, exp. gaps of mean %g ms, seed %d\n",
		long, float64(s.ShortMinBytes)/1000, float64(s.ShortMaxBytes)/1000, s.ShortGapUs/1000, s.Seed)
	if s.QuickAck {
		fmt.Fprintln(w, "        the receiver ACKs every packet (-quickack: its routes' quickack, no delayed ACKs)")
	}
	fmt.Fprintf(w, "timing  per scheme: %g s warm-up, %g s measured; backlog sampled every %.0f µs\n", s.WarmupS, s.MeasureS, s.SampleUs)
	if s.Timescale > 1 {
		fmt.Fprintf(w, "scale   the fabric runs %gx slower (-timescale): the port at %s, every time %gx as long, bytes as they are; the times\n"+
			"        and rates shown are the fabric's\n", s.Timescale, units.Rate(s.WireRateBps), s.Timescale)
	}
	fmt.Fprintf(w, "host    kernel %s, %d CPUs, load average %s at start (shared machine: expect noise)\n\n", r.Kernel, r.CPUs, orNA(r.LoadStart, "?"))

	fmt.Fprintf(w, "base RTT (%d UDP echoes per sender through the idle port):\n", r.RTT.Probes)
	for _, sr := range r.RTT.PerSender {
		fmt.Fprintf(w, "  %-4s delay %6.0f µs   rtt min %6.0f  p50 %6.0f  mean %6.0f  p90 %6.0f  max %6.0f µs  (lost %d)\n",
			sr.Sender, sr.DelayUs, sr.RTTUs.Min, sr.RTTUs.P50, sr.RTTUs.Mean, sr.RTTUs.P90, sr.RTTUs.Max, sr.Lost)
	}
	p := &r.RTT.PooledUs
	fmt.Fprintf(w, "  pooled: p50 %.0f µs, mean %.0f µs, p90 %.0f µs; spread of the medians %.2fx\n\n", p.P50, p.Mean, p.P90, r.RTT.Spread)

	t := &r.Tune
	fmt.Fprintf(w, "parameters (aqm.Tune, seed 002 §3.4: λ %g for the instantaneous thresholds, λ_pst %g for the persistent target, C = %s):\n", s.Lambda, s.PstLambda, rate)
	fmt.Fprintf(w, "  step-Tail K = λ·C·RTT_p90 = %.1f KB      step-AVG K = λ·C·RTT_avg = %.1f KB\n",
		float64(t.KTailBytes)/1000, float64(t.KAvgBytes)/1000)
	fmt.Fprintf(w, "  ECN♯ ins_target = λ·RTT_p90 = %s, pst_target = λ_pst·RTT_avg = %s, pst_interval = RTT_p90 = %s\n",
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

// renderTable prints one row per scheme: each metric's mean over the runs
// ± the half-width of its 95 % confidence interval.
func renderTable(w io.Writer, r *Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	incast := slices.ContainsFunc(r.Summary, func(s Summary) bool { return s.IncastQCTP99Us.N > 0 })
	host := slices.ContainsFunc(r.Summary, func(s Summary) bool { return s.HostLostPercent.N > 0 })
	head := "scheme\tparameters\truns\tmean queue KB\tmean queue µs\tp99 queue KB\tutil %\tshort FCT avg µs\tshort FCT p99 µs\tdrops\tmarked %\t"
	if incast {
		head += "incast QCT p50 µs\tincast QCT p99 µs\tincast drops\t"
	}
	if host {
		head += "host-lost %\tutil net %\tshort FCT p99 net µs\t"
	}
	fmt.Fprintln(tw, head)
	for i := range r.Summary {
		s := &r.Summary[i]
		runs := fmt.Sprint(s.Runs)
		if s.Failed > 0 {
			runs += fmt.Sprintf(" (+%d failed)", s.Failed)
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", s.Label, s.Describe, runs,
			ci(s.MeanQueueKB, "%.1f"), ci(s.MeanQueueUs, "%.0f"), ci(s.P99QueueKB, "%.1f"), ci(s.Utilization, "%.1f"),
			ci(s.ShortFCTMeanUs, "%.0f"), ci(s.ShortFCTP99Us, "%.0f"), ci(s.Drops, "%.0f"), ci(s.MarkedPercent, "%.2f"))
		if incast {
			line += fmt.Sprintf("%s\t%s\t%s\t", ci(s.IncastQCTP50Us, "%.0f"), ci(s.IncastQCTP99Us, "%.0f"), ci(s.IncastDrops, "%.0f"))
		}
		if host {
			lost := ci(s.HostLostPercent, "%.2f")
			if s.HostStarved > 0 {
				lost += fmt.Sprintf(" (%d starved)", s.HostStarved)
			}
			line += fmt.Sprintf("%s\t%s\t%s\t", lost, ci(s.UtilizationNet, "%.1f"), ci(s.ShortFCTNetP99Us, "%.0f"))
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	fmt.Fprintf(w, "each cell: mean over the runs ± the half-width of its 95%% confidence interval (Student's t); KB = 1000 bytes;\n")
	fmt.Fprintln(w, "queue = class backlog sampled in time (µs at the port rate); util = bytes leaving the port / (rate x time); marked = CE marks / ECT arrivals;")
	fmt.Fprintln(w, "short FCT = sequential 3-60 KB flows during the measured window; incast QCT = time to the last answer of a round of synchronized queries.")
	if host {
		fmt.Fprintln(w, "host-lost = the window's time the port lost to the host (idle while a sender was held, or holding packets back; host/hostlost),")
		fmt.Fprintln(w, "\"starved\" the runs above the meter's budget; net = utilization over the rest of the window, FCTs less the host's time during each.")
	}
	fmt.Fprintln(w)
}

// ci is a Stat as "mean ± half-width".
func ci(s stats.Stat, format string) string {
	switch {
	case s.N == 0:
		return "-"
	case s.N == 1 || math.IsNaN(s.CI95):
		return fmt.Sprintf(format, s.Mean)
	}
	return fmt.Sprintf(format+" ± "+format, s.Mean, s.CI95)
}

// renderFlows prints the long flows' goodput by sender, the mean over the
// runs, and their RTTs as the kernel saw them (the least min_rtt), per
// scheme: where the throughput went.
func renderFlows(w io.Writer, r *Report) {
	fmt.Fprintln(w, "long flows: goodput by sender in Mbit/s, mean over the runs (kernel min_rtt in µs)")
	for _, sum := range r.Summary {
		by := map[string]float64{}
		rtt := map[string]float64{}
		var order []string
		runs, noECN := 0, 0
		var total float64
		for i := range r.Schemes {
			s := &r.Schemes[i]
			if s.Error != "" || s.Name != sum.Name || len(s.Long) == 0 {
				continue
			}
			runs++
			total += s.LongGoodputBps
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
		}
		if runs == 0 {
			continue
		}
		parts := make([]string, len(order))
		for j, n := range order {
			parts[j] = fmt.Sprintf("%s %.1f", n, by[n]/float64(runs)/1e6)
			if rtt[n] > 0 {
				parts[j] += fmt.Sprintf(" (%.0f)", rtt[n])
			}
		}
		line := fmt.Sprintf("  %-10s total %.1f  %s", sum.Label, total/float64(runs)/1e6, strings.Join(parts, "  "))
		if noECN > 0 {
			line += fmt.Sprintf("  WARNING: %d flows without ECN", noECN)
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
}

func renderGoals(w io.Writer, goals []Goal) {
	fmt.Fprintln(w, "goals (seed 002's results, issue 12 §2: ECN♯ against step-Tail, paired within each run; \"met\" when the whole 95% interval")
	fmt.Fprintln(w, "clears the goal, \"met (mean)\" when only the mean does; an experiment, not a test: the exit code ignores them):")
	for _, g := range goals {
		fmt.Fprintf(w, "  %-22s %-42s %-13s %s\n", g.Name, g.Want, g.verdict(), g.Measured)
	}
	fmt.Fprintln(w)
}

// ccText names the congestion control as the sockets set it.
func ccText(s *Setup) string {
	if s.CongestionName != "" && s.CongestionName != s.Congestion {
		return fmt.Sprintf("%s, registered as %s", s.Congestion, s.CongestionName)
	}
	return s.Congestion
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
