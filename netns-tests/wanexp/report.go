package main

// The numbers: queue distributions and reaction times from the samples,
// the summary over runs, the goals of (b) against (a), and the table.
// Pure: unit-tested without root.

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// sample is one reading of the sampler, every -sample from the long
// flows' start.
type sample struct {
	At time.Duration // since the long flows started
	// Backlogs in bytes: core c1's port, core c2's (reroute), PE1's
	// limiter (PE rate).
	Core, Core2, PE uint64
	// PEActions is how many light CNPs the agent has acted on so far
	// (limiter cuts or spills: len(pe.Stats.Reaction)).
	PEActions uint64
	// SenderCuts is the senders' DCQCN rate cuts so far (long flows).
	SenderCuts uint64
}

// reactions finds, in samples, the PE's reaction time — from the first
// sample with c1's backlog at T1 or more (the light marks begin) to the
// first sample after which the agent has acted — and the end-to-end
// reaction time — from the first sample with a CE-marking queue (c1, c2 or
// PE1's) above T2 to the first sample after which a sender has cut its
// rate. ok is false where the onset or the reaction never came. Both are
// resolved to the sampling period; a reaction seen in the onset's own
// sample is 0.
func reactions(ss []sample, t1, t2 uint64) (pe, e2e time.Duration, peOK, e2eOK bool) {
	light, heavy := -1, -1
	for i, s := range ss {
		if light < 0 && s.Core >= t1 {
			light = i
		}
		if heavy < 0 && max(s.Core, s.Core2, s.PE) > t2 {
			heavy = i
		}
	}
	if light >= 0 {
		for _, s := range ss[light:] {
			if s.PEActions > 0 {
				pe, peOK = s.At-ss[light].At, true
				break
			}
		}
	}
	if heavy >= 0 {
		for _, s := range ss {
			if s.SenderCuts > 0 {
				// A cut sampled before the onset (the crossing fell
				// between two samples) counts as immediate.
				e2e, e2eOK = max(s.At-ss[heavy].At, 0), true
				break
			}
		}
	}
	return pe, e2e, peOK, e2eOK
}

// backlogKB is one queue's samples in KB (1000 bytes).
func backlogKB(ss []sample, pick func(sample) uint64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = float64(pick(s)) / 1000
	}
	return out
}

// Drops are the losses of one run, in packets.
type Drops struct {
	Core  uint64 `json:"core"`   // c1's RoCE class
	Core2 uint64 `json:"core2"`  // c2's (reroute)
	PE    uint64 `json:"pe"`     // PE1's limiter (PE rate)
	Delay uint64 `json:"delay"`  // the fibers' delay links
	Other uint64 `json:"tunnel"` // the PEs' (too big, errors)
	Qdisc uint64 `json:"qdisc"`  // the ports' HTB qdiscs
	// Hosts are losses outside the network: the receiver's and the
	// senders' UDP socket buffers (RcvbufErrors), and Backlog the
	// kernel's per-CPU input backlogs (softnet, machine-wide: veths
	// deliver through them; another process's drops would count too).
	Hosts   uint64 `json:"host_sockets"`
	Backlog uint64 `json:"cpu_backlog"`
	// Agents are packets the RoCE agents failed to send (send errors,
	// replies that did not fit a batch).
	Agents uint64 `json:"agents"`
	// Retransmits are packets the senders sent again (go-back-N),
	// OutOfSequence what the receiver saw out of order (a loss, or a
	// reroute's reordering).
	Retransmits   uint64 `json:"retransmits"`
	OutOfSequence uint64 `json:"out_of_sequence"`
}

// Lost is every packet dropped in the network: ports, delay links, PEs.
func (d Drops) Lost() uint64 { return d.Core + d.Core2 + d.PE + d.Delay + d.Other + d.Qdisc }

// HostLost is every packet dropped by the hosts' kernels (see Hosts).
func (d Drops) HostLost() uint64 { return d.Hosts + d.Backlog + d.Agents }

// Result is one scheme's run.
type Result struct {
	Scheme string `json:"scheme"`
	Label  string `json:"label"`
	Run    int    `json:"run"`
	// WindowS is the measured time: from the long flows' start.
	WindowS float64 `json:"window_s"`
	// Queues in KB over the samples.
	CoreQueueKB  stats.Dist  `json:"core_queue_kb"`
	Core2QueueKB *stats.Dist `json:"core2_queue_kb,omitempty"`
	PEQueueKB    *stats.Dist `json:"pe_queue_kb,omitempty"`
	// Utilization of the core ports: dequeued bytes over rate × window,
	// in percent.
	CoreUtil    float64  `json:"core_util_percent"`
	Core2Util   *float64 `json:"core2_util_percent,omitempty"`
	GoodputMbps float64  `json:"goodput_mbps"` // the long flows' acknowledged payload
	Drops       Drops    `json:"drops"`
	// The WAN ports' marks and notifications (both cores), what PE1 did
	// inside (CE during a heavy hold), what PE2 kept out.
	LightMarks uint64 `json:"light_marks"`
	HeavyMarks uint64 `json:"heavy_marks"`
	CNPsToPE   uint64 `json:"cnps_to_pe1"`
	PE1InnerCE uint64 `json:"pe1_inner_ce"`
	SenderCuts uint64 `json:"sender_rate_cuts"`
	// Reaction times in ms (null: none): see reactions. PEReactionMs is
	// exact (the core's first light CNP to the agent's first change, in
	// BPF and agent timestamps) when PEReactionExact, else sampled.
	PEReactionMs    *float64 `json:"pe_reaction_ms"`
	PEReactionExact bool     `json:"pe_reaction_exact,omitempty"`
	E2EReactionMs   *float64 `json:"e2e_reaction_ms"`
	// The agent: its own reaction (a CNP's arrival at PE1 to the limiter
	// or route change), light CNPs, actions, the least rate it set.
	AgentReactionUs stats.Dist `json:"agent_reaction_us"`
	AgentLightCNPs  uint64     `json:"agent_light_cnps"`
	AgentActions    uint64     `json:"agent_actions"`
	PEMinRateMbps   float64    `json:"pe_min_rate_mbps,omitempty"`
	// HostLost is what the host took from the run, from the long flows'
	// start to the traffic's end (host/hostlost; wall times): the cores'
	// and PE1's limiter's idle time while an agent was held, and their
	// held-back time. HostLostShare is c1's part of the window, and
	// CoreUtilNet (Core2UtilNet) each core's utilization over the rest.
	HostLost      *hostlost.Report `json:"host_lost,omitempty"`
	HostLostShare float64          `json:"host_lost_share"`
	CoreUtilNet   float64          `json:"core_util_net_percent"`
	Core2UtilNet  *float64         `json:"core2_util_net_percent,omitempty"`
	// Short WRITEs: post to ACK; net: less the time the host starved c1
	// or PE1's limiter during each.
	ShortFCTNetUs stats.Dist `json:"short_fct_net_us"`
	ShortFCTUs    stats.Dist `json:"short_fct_us"`
	ShortFCTs     []float64  `json:"short_fcts_us"`
	ShortFailed   int        `json:"short_failed"`
	// Series is the backlogs for the plot: the maxima per SeriesEveryMs,
	// as [t ms, c1 KB, c2 KB, PE KB].
	SeriesEveryMs float64     `json:"series_every_ms"`
	Series        [][]float64 `json:"series"`
	Error         string      `json:"error,omitempty"`
}

// The meter's names of the ports (hostlost.PortReport.Name).
const (
	portC1  = "c1"
	portC2  = "c2"
	portPE1 = "pe1"
)

// hostLost sets the host's part of the run from the meter's report: window
// is the measured time on the wire, starved each core's starved time in
// it (c1, then c2).
func (r *Result) hostLost(host *hostlost.Report, window time.Duration, starved []time.Duration) {
	r.HostLost = host
	if window <= 0 || len(starved) == 0 {
		return
	}
	r.HostLostShare = float64(starved[0]) / float64(window)
	net := func(util float64, starved time.Duration) float64 {
		if starved >= window {
			return 0
		}
		return util * float64(window) / float64(window-starved)
	}
	r.CoreUtilNet = net(r.CoreUtil, starved[0])
	if r.Core2Util != nil && len(starved) > 1 {
		u := net(*r.Core2Util, starved[1])
		r.Core2UtilNet = &u
	}
}

// durationsUs converts times measured on the slowed fabric (wall times)
// to the fabric's, in µs.
func durationsUs(ds []time.Duration, k units.Timescale) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(k.Fabric(d)) / float64(time.Microsecond)
	}
	return out
}

// netUs is durationsUs of each time less the host's starved time during it
// (same order), never below 0.
func netUs(ds, starved []time.Duration, k units.Timescale) []float64 {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		if i < len(starved) {
			d = max(d-starved[i], 0)
		}
		out[i] = d
	}
	return durationsUs(out, k)
}

// hostLine is the run's host-lost line: the meter's report, c1's share.
func (r *Result) hostLine() string {
	if r.HostLost == nil {
		return ""
	}
	return fmt.Sprintf("c1 lost %.2f%% of the window to the host (util %.1f%% net of it); %s", 100*r.HostLostShare, r.CoreUtilNet, r.HostLost)
}

// seriesEvery is the resolution of Result.Series: the maximum of each
// bucket, so the plot keeps the peaks.
const seriesEvery = 5 * time.Millisecond

// series is the samples' maxima per bucket of every, as points [t (ms,
// the bucket's start), c1, c2, PE (KB)]; a bucket without a sample (the
// sampler was late: the CPUs were busy) has no point.
func series(ss []sample, every time.Duration) [][]float64 {
	var out [][]float64
	last := time.Duration(-1)
	for _, s := range ss {
		k := s.At / every * every
		if k != last {
			out = append(out, []float64{float64(k) / float64(time.Millisecond), 0, 0, 0})
			last = k
		}
		p := out[len(out)-1]
		p[1], p[2], p[3] = max(p[1], float64(s.Core)/1000), max(p[2], float64(s.Core2)/1000), max(p[3], float64(s.PE)/1000)
	}
	return out
}

func msPtr(d time.Duration, ok bool) *float64 {
	if !ok {
		return nil
	}
	v := float64(d) / float64(time.Millisecond)
	return &v
}

func ms(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// Summary is a scheme over its runs.
type Summary struct {
	Scheme        string     `json:"scheme"`
	Label         string     `json:"label"`
	Runs          int        `json:"runs"`
	Failed        int        `json:"failed"`
	CoreP50KB     stats.Stat `json:"core_queue_p50_kb"`
	CoreP99KB     stats.Stat `json:"core_queue_p99_kb"`
	Core2P99KB    stats.Stat `json:"core2_queue_p99_kb"`
	PEP99KB       stats.Stat `json:"pe_queue_p99_kb"`
	CoreUtil      stats.Stat `json:"core_util_percent"`
	Core2Util     stats.Stat `json:"core2_util_percent"`
	GoodputMbps   stats.Stat `json:"goodput_mbps"`
	Lost          stats.Stat `json:"lost_packets"`
	HostLost      stats.Stat `json:"host_lost_packets"`
	Retransmits   stats.Stat `json:"retransmits"`
	PEReactionMs  stats.Stat `json:"pe_reaction_ms"`
	E2EReactionMs stats.Stat `json:"e2e_reaction_ms"`
	AgentUsP50    stats.Stat `json:"agent_reaction_p50_us"`
	FCTP50Us      stats.Stat `json:"short_fct_p50_us"`
	FCTP99Us      stats.Stat `json:"short_fct_p99_us"`
	// The host's part (Result.HostLostShare, in percent), the figures net
	// of it, and the runs the meter found over its budget.
	HostLostPercent stats.Stat `json:"host_lost_percent"`
	HostStarved     int        `json:"host_starved_runs"`
	CoreUtilNet     stats.Stat `json:"core_util_net_percent"`
	FCTP99NetUs     stats.Stat `json:"short_fct_p99_net_us"`
}

func summarize(names []string, rs []Result) []Summary {
	var out []Summary
	for _, n := range names {
		s := Summary{Scheme: n, Label: schemeLabels[n]}
		var p50, p99, c2, pe, util, util2, gp, lost, hlost, retx, per, e2e, ag, f50, f99, hl, un, f99n []float64
		for i := range rs {
			r := &rs[i]
			if r.Scheme != n {
				continue
			}
			if r.Error != "" {
				s.Failed++
				continue
			}
			s.Runs++
			p50, p99 = append(p50, r.CoreQueueKB.P50), append(p99, r.CoreQueueKB.P99)
			if r.Core2QueueKB != nil {
				c2 = append(c2, r.Core2QueueKB.P99)
			}
			if r.PEQueueKB != nil {
				pe = append(pe, r.PEQueueKB.P99)
			}
			util, gp = append(util, r.CoreUtil), append(gp, r.GoodputMbps)
			if r.Core2Util != nil {
				util2 = append(util2, *r.Core2Util)
			}
			lost, retx = append(lost, float64(r.Drops.Lost())), append(retx, float64(r.Drops.Retransmits))
			hlost = append(hlost, float64(r.Drops.HostLost()))
			per, e2e = append(per, ms(r.PEReactionMs)), append(e2e, ms(r.E2EReactionMs))
			if r.AgentReactionUs.N > 0 {
				ag = append(ag, r.AgentReactionUs.P50)
			}
			if r.ShortFCTUs.N > 0 {
				f50, f99 = append(f50, r.ShortFCTUs.P50), append(f99, r.ShortFCTUs.P99)
			}
			if r.HostLost != nil {
				hl, un = append(hl, 100*r.HostLostShare), append(un, r.CoreUtilNet)
				if r.HostLost.HostStarved {
					s.HostStarved++
				}
			}
			if r.ShortFCTNetUs.N > 0 {
				f99n = append(f99n, r.ShortFCTNetUs.P99)
			}
		}
		s.CoreP50KB, s.CoreP99KB, s.Core2P99KB, s.PEP99KB = stats.NewStat(p50), stats.NewStat(p99), stats.NewStat(c2), stats.NewStat(pe)
		s.CoreUtil, s.Core2Util, s.GoodputMbps = stats.NewStat(util), stats.NewStat(util2), stats.NewStat(gp)
		s.Lost, s.HostLost, s.Retransmits = stats.NewStat(lost), stats.NewStat(hlost), stats.NewStat(retx)
		s.PEReactionMs, s.E2EReactionMs, s.AgentUsP50 = stats.NewStat(per), stats.NewStat(e2e), stats.NewStat(ag)
		s.FCTP50Us, s.FCTP99Us = stats.NewStat(f50), stats.NewStat(f99)
		s.HostLostPercent, s.CoreUtilNet, s.FCTP99NetUs = stats.NewStat(hl), stats.NewStat(un), stats.NewStat(f99n)
		out = append(out, s)
	}
	return out
}

// Goal is one of issue 13 §5's goals for (b) against (a).
type Goal struct {
	Name      string `json:"name"`
	Want      string `json:"want"`
	Measured  string `json:"measured"`
	Evaluated bool   `json:"evaluated"`
	Met       bool   `json:"met"`
}

// Goal thresholds (issue 13 §5).
const (
	goalQueueCut   = 0.50 // (b)'s WAN queue p99 at least 50 % below (a)'s
	goalUtilWithin = 0.05 // (b)'s core utilization within 5 % of (a)'s
)

// checkGoals compares (b) with (a) run by run (each pair ran back to
// back). The reaction goal: the PE reacts within a one-way WAN delay
// rather than a round trip, taken as its reaction time (the first light
// mark to its first cut, which includes the CNP's one-way crossing) below
// the midpoint, 1.5 one-way delays.
func checkGoals(rs []Result, oneWay time.Duration) []Goal {
	a, b := runsOf(rs, schemeRFC6040), runsOf(rs, schemeRate)
	var cut, util []float64
	var lost, hlost, retx uint64
	var nb int
	for run, rb := range b {
		nb++
		lost += rb.Drops.Lost()
		hlost += rb.Drops.HostLost()
		retx += rb.Drops.Retransmits
		ra, ok := a[run]
		if !ok {
			continue
		}
		if ra.CoreQueueKB.P99 > 0 {
			cut = append(cut, 1-rb.CoreQueueKB.P99/ra.CoreQueueKB.P99)
		}
		if ra.CoreUtil > 0 {
			util = append(util, rb.CoreUtil/ra.CoreUtil-1)
		}
	}
	var goals []Goal
	g := Goal{Name: "WAN queue p99", Want: fmt.Sprintf("(b) >= %.0f%% below (a)", 100*goalQueueCut)}
	if st := stats.NewStat(cut); st.N > 0 {
		g.Evaluated, g.Met = true, st.Mean >= goalQueueCut-1e-9
		g.Measured = fmt.Sprintf("%.1f%% lower%s", 100*st.Mean, ciRange(st, 100, "%"))
	}
	goals = append(goals, g)
	g = Goal{Name: "utilization", Want: fmt.Sprintf("(b) within %.0f%% of (a) (or above)", 100*goalUtilWithin)}
	if st := stats.NewStat(util); st.N > 0 {
		g.Evaluated, g.Met = true, st.Mean >= -goalUtilWithin-1e-9
		g.Measured = fmt.Sprintf("%+.1f%%%s", 100*st.Mean, ciRange(st, 100, "%"))
	}
	goals = append(goals, g)
	g = Goal{Name: "no drops", Want: "(b): no packet lost in the network or the hosts, none resent"}
	if nb > 0 {
		g.Evaluated, g.Met = true, lost == 0 && hlost == 0 && retx == 0
		g.Measured = fmt.Sprintf("%d lost in the network, %d in the hosts' kernels, %d resent in %d runs", lost, hlost, retx, nb)
	}
	goals = append(goals, g)
	var re []float64
	for _, rb := range b {
		re = append(re, ms(rb.PEReactionMs))
	}
	limit := 1.5 * float64(oneWay) / float64(time.Millisecond)
	g = Goal{Name: "PE reaction", Want: fmt.Sprintf("(b) within a one-way delay, not an RTT: first light mark to PE cut < %.1f ms (1.5 one-way)", limit)}
	if st := stats.NewStat(re); st.N > 0 {
		g.Evaluated, g.Met = true, st.N == len(re) && st.Max < limit
		g.Measured = fmt.Sprintf("%.1f ms mean, %.1f max (%d of %d runs reacted)", st.Mean, st.Max, st.N, len(re))
	}
	goals = append(goals, g)
	return goals
}

func ciRange(st stats.Stat, scale float64, unit string) string {
	if math.IsNaN(st.CI95) {
		return ""
	}
	return fmt.Sprintf(" (95%% CI %.1f to %.1f%s)", scale*st.Lo(), scale*st.Hi(), unit)
}

func runsOf(rs []Result, scheme string) map[int]*Result {
	out := map[int]*Result{}
	for i := range rs {
		if rs[i].Scheme == scheme && rs[i].Error == "" {
			out[rs[i].Run] = &rs[i]
		}
	}
	return out
}

func (g *Goal) verdict() string {
	switch {
	case !g.Evaluated:
		return "not evaluated"
	case g.Met:
		return "met"
	}
	return "**not met**"
}

// ci is a Stat as "mean ± half-width" (just the mean for one run, "—"
// for none).
func ci(s stats.Stat, format string) string {
	switch {
	case s.N == 0:
		return "—"
	case math.IsNaN(s.CI95):
		return fmt.Sprintf(format, s.Mean)
	}
	return fmt.Sprintf(format+" ± "+format, s.Mean, s.CI95)
}

// renderTable writes the summary as a Markdown table; the host's columns
// when some run was metered.
func renderTable(w io.Writer, sums []Summary) {
	host := slices.ContainsFunc(sums, func(s Summary) bool { return s.HostLostPercent.N > 0 })
	head, rule := "| scheme | WAN queue p50 | WAN queue p99 | c2 / PE queue p99 | core util | goodput | lost: network / hosts | resent | PE reaction | end-to-end reaction | agent (CNP→cut) | short FCT p50 | short FCT p99 |",
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	if host {
		head += " host-lost (c1) | core util net | short FCT p99 net |"
		rule += " --- | --- | --- |"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, s := range sums {
		other := "—"
		switch {
		case s.Core2P99KB.N > 0:
			other = "c2 " + ci(s.Core2P99KB, "%.1f") + " KB"
		case s.PEP99KB.N > 0:
			other = "PE " + ci(s.PEP99KB, "%.1f") + " KB"
		}
		util := ci(s.CoreUtil, "%.1f") + " %"
		if s.Core2Util.N > 0 {
			util += " (c2 " + ci(s.Core2Util, "%.1f") + " %)"
		}
		label := s.Label
		if s.Failed > 0 {
			label += fmt.Sprintf(" (%d failed)", s.Failed)
		}
		fmt.Fprintf(w, "| %s | %s KB | %s KB | %s | %s | %s Mbit/s | %s / %s | %s | %s | %s | %s | %s µs | %s µs |",
			label, ci(s.CoreP50KB, "%.1f"), ci(s.CoreP99KB, "%.1f"), other, util, ci(s.GoodputMbps, "%.1f"),
			ci(s.Lost, "%.0f"), ci(s.HostLost, "%.0f"), ci(s.Retransmits, "%.0f"), msText(s.PEReactionMs), msText(s.E2EReactionMs),
			usText(s.AgentUsP50), ci(s.FCTP50Us, "%.0f"), ci(s.FCTP99Us, "%.0f"))
		if host {
			lost := ci(s.HostLostPercent, "%.2f") + " %"
			if s.HostStarved > 0 {
				lost += fmt.Sprintf(" (%d host-starved)", s.HostStarved)
			}
			fmt.Fprintf(w, " %s | %s %% | %s µs |", lost, ci(s.CoreUtilNet, "%.1f"), ci(s.FCTP99NetUs, "%.0f"))
		}
		fmt.Fprintln(w)
	}
}

func msText(s stats.Stat) string {
	if s.N == 0 {
		return "—"
	}
	return ci(s, "%.1f") + " ms"
}

func usText(s stats.Stat) string {
	if s.N == 0 {
		return "—"
	}
	return ci(s, "%.0f") + " µs"
}

func renderGoals(w io.Writer, goals []Goal) {
	fmt.Fprintln(w, "| goal | want | measured | verdict |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, g := range goals {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", g.Name, g.Want, orDash(g.Measured), g.verdict())
	}
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "—"
	}
	return s
}
