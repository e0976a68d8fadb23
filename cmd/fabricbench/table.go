//go:build linux

package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// printTable writes the header and one table: per-packet rows, then
// throughput rows, each with its measured value, goal and verdict.
func printTable(w io.Writer, r *Report) {
	h := &r.Header
	fmt.Fprintf(w, "fabriclab bench  %s\n", h.Time.Format("2006-01-02 15:04:05Z"))
	fmt.Fprintf(w, "kernel %s, %d CPUs (%s), clocksource %s, load %s at start, %s, %s\n", h.Kernel, h.CPUs, h.CPUModel,
		orNA(h.Clocksource, "?"), orNA(h.LoadAvg, "?"), h.GoVersion, orNA(h.Iperf3, "iperf3 missing"))
	if len(r.Programs) > 0 {
		fmt.Fprintf(w, "per-packet: BPF_PROG_RUN, kernel-timed, median of %d trials x %d repetitions; packet: %s\n", h.Trials, h.Repeat, h.Packet)
	}
	pin := "not pinned"
	if h.IperfCPU >= 0 {
		pin = fmt.Sprintf("client+server pinned to CPU %d", h.IperfCPU)
	}
	if len(r.Throughput) > 0 {
		fmt.Fprintf(w, "throughput: iperf3 TCP a->b over one veth pair, offloads at defaults, %s, %d interleaved rounds x %d s, median; port: %s, no shaping\n", pin, h.Rounds, h.Seconds, h.PortConfig)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(r.Programs) > 0 || len(r.Throughput) > 0 || r.Roce != nil || r.NP != nil {
		fmt.Fprintln(tw, "measure\tstate / config\tmethod\tvalue\tnet\treference\tratio\tgoal\tverdict\tpath measured [verified by counters]")
		fmt.Fprintln(tw, "-------\t--------------\t------\t-----\t---\t---------\t-----\t----\t-------\t------------------------------------")
	}
	for _, p := range r.Programs {
		ref, ratio, goal := "-", "-", "-"
		if p.Verdict != "ref" {
			ref = fmt.Sprintf("%.0f ns goal", p.GoalNs)
			ratio = fmt.Sprintf("%.2f", p.NetNs/p.GoalNs)
			goal = fmt.Sprintf("< %.0f ns", p.GoalNs)
		}
		net := "-"
		if p.NetNs != 0 {
			net = fmt.Sprintf("%.0f ns", p.NetNs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f ns/pkt\t%s\t%s\t%s\t%s\t%s\t%s [%s]\n",
			p.Program, p.State, p.Method, p.NsPerPacket, net, ref, ratio, goal, p.Verdict, p.Path, p.Verified)
	}
	var bare float64
	for _, t := range r.Throughput {
		if t.Verdict == "ref" {
			bare = t.MedianGbps
		}
	}
	for _, t := range r.Throughput {
		ref, ratio, goal := "-", "-", "-"
		if t.Verdict != "ref" && bare > 0 {
			ref = fmt.Sprintf("%.2f Gbit/s", bare)
			goal = fmt.Sprintf(">= %.2f", goalRatio)
		}
		if t.Ratio > 0 {
			ratio = fmt.Sprintf("%.3f", t.Ratio)
		}
		value := "n/a"
		if t.MedianGbps > 0 {
			value = fmt.Sprintf("%.2f Gbit/s", t.MedianGbps)
		}
		rounds := make([]string, len(t.Gbps))
		for i, g := range t.Gbps {
			rounds[i] = fmt.Sprintf("%.2f", g)
		}
		path := "rounds " + orNA(strings.Join(rounds, " "), "none")
		if len(t.Gbps) > 1 {
			path += fmt.Sprintf(" (spread %.1f%%)", t.SpreadPct)
		}
		if len(t.Drops) > 0 {
			path += fmt.Sprintf(", port drops %v", t.Drops)
		}
		if len(t.Retransmits) > 0 {
			path += fmt.Sprintf(", retrans %v", t.Retransmits)
		}
		if t.PortCounters != "" {
			path += "; " + t.PortCounters
		}
		fmt.Fprintf(tw, "iperf3 TCP\t%s\t%s\t%s\t-\t%s\t%s\t%s\t%s\t%s\n", t.Config, "median", value, ref, ratio, goal, t.Verdict, path)
	}
	printRoceRows(tw, r.Roce)
	printNPRows(tw, r.NP)
	tw.Flush()
	if len(r.Errors) > 0 {
		fmt.Fprintln(w)
		for _, e := range r.Errors {
			fmt.Fprintf(w, "NOT MEASURED: %s\n", e)
		}
	}
	fmt.Fprintln(w)
	if len(r.Programs) > 0 {
		printProgNotes(w)
	}
	if len(r.Throughput) > 0 {
		fmt.Fprintln(w, "iperf3 rows: ratio = median(config) / median(bare veth), goal >= 0.97.")
	}
	printRoceNotes(w, r.Roce)
	printNPNotes(w, r.NP)
	printDelay(w, r.Delay)
	printIncasts(w, r.Incast)
	if r.Scale != nil {
		r.Scale.write(w)
	}
	if r.Ports != nil {
		r.Ports.write(w)
	}
	if r.Soak != nil {
		r.Soak.write(w)
	}
	printHost(w, r.Host)
	if r.ElapsedSeconds > 0 {
		fmt.Fprintf(w, "\nrun time %.0f s\n", r.ElapsedSeconds)
	}
}

func printProgNotes(w io.Writer) {
	fmt.Fprintln(w, "value: ns per run as a plain BPF_PROG_RUN repeat times it: program + the run loop's floor (empty program row), which")
	fmt.Fprintln(w, "every program pays under BPF_PROG_RUN. net = value - floor: the program alone; ratio and verdict use net.")
	fmt.Fprintln(w, "harness-diff: (harness -> program) - (harness -> empty), paired per trial, + floor. The harness rewrites the original")
	fmt.Fprintln(w, "ECT(0) IPv4 header and stamps the skb as port_enqueue does before every repetition, because BPF_PROG_RUN reuses one skb:")
	fmt.Fprintln(w, "without it a marked packet stays CE and port_dequeue finds its stamp cleared from the 2nd repetition on. No TestHooks:")
	fmt.Fprintln(w, "production clock (bpf_ktime_get_ns) and random draw (bpf_get_prandom_u32). Cross-check row (a) shows both methods agree.")
	fmt.Fprintln(w, "port_dequeue tcn/codel/ecnsharp rows: the harness stamps the packet `sojourn` ago, so the AQM sees that sojourn on the real")
	fmt.Fprintln(w, "clock, which runs on between repetitions. Before each timed run the class's AQM state is zeroed; the codel and persistent")
	fmt.Fprintln(w, "rows then send one untimed primer packet and sleep past the interval, so the timed run enters the marking state at its")
	fmt.Fprintln(w, "first packet and marks on the AQM's own schedule. pst = persistent-condition marks (ECN♯ Algorithm 1, CoDel), ins =")
	fmt.Fprintln(w, "instantaneous (TCN, ECN♯). stalled: runs whose measured sojourn fell in a log2 bucket above the stamped one (the CPU was")
	fmt.Fprintln(w, "held up between the harness's clock read and the program's); the marks they cause are allowed where none are expected.")
}

func orNA(s, na string) string {
	if s == "" {
		return na
	}
	return s
}
