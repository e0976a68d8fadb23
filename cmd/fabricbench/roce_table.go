//go:build linux

package main

import (
	"fmt"
	"github.com/fabriclab/fabriclab/host/uet"
	"io"
	"strings"
)

// printRoceRows writes the RoCEv2 rows into the bench's table (same
// columns: measure, state / config, method, value, net, reference, ratio,
// goal, verdict, path measured).
func printRoceRows(tw io.Writer, r *RoceReport) {
	if r == nil {
		return
	}
	if g := r.Goodput; g != nil {
		ref := "-"
		if g.Iperf.GoodputGbps > 0 {
			ref = fmt.Sprintf("%.2f Gbit/s", g.Iperf.GoodputGbps)
		}
		ratio := func(v float64) string {
			if v <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(tw, "UDP goodput\t%s\tmedian\t%s\t-\t-\t-\t-\tref\t%s\n",
			g.Iperf.Command, gbps(g.Iperf.GoodputGbps), runsPath(&g.Iperf, "loss"))
		fmt.Fprintf(tw, "UDP goodput\t%s\tmedian\t%s\t-\t%s\t%s\t>= %.1f (stretch %.0f)\t%s\t%s\n",
			g.Roceperf.Command, gbps(g.Roceperf.GoodputGbps), ref, ratio(g.Ratio), g.Goal, g.Stretch, g.Verdict, runsPath(&g.Roceperf, "retrans"))
		for _, t := range []*ToolRow{g.RoceperfNoGRO, g.RoceperfRaw} {
			if t != nil && len(t.Runs) > 0 {
				fmt.Fprintf(tw, "UDP goodput\t%s\tmedian\t%s\t-\t%s\t%s\t-\tbefore\t%s\n",
					t.Command, gbps(t.GoodputGbps), ref, ratio(div(t.GoodputGbps, g.Iperf.GoodputGbps)), runsPath(t, "retrans"))
			}
		}
		ppsRef := "-"
		if g.Iperf.PPSPerCore > 0 {
			ppsRef = kpps(g.Iperf.PPSPerCore) + "/core"
		}
		ppsGoal := fmt.Sprintf(">= %.1f", g.PPSGoal)
		ppsVerdict := func(r float64) string {
			switch {
			case r <= 0:
				return "n/a"
			case r >= g.PPSGoal:
				return "ok"
			}
			return "below"
		}
		fmt.Fprintf(tw, "pkts/s per core\tiperf3 -u sender, %d-byte datagrams\tmedian\t%s/core\t-\t-\t-\t-\tref\t%s\n",
			g.DatagramBytes, kpps(g.Iperf.PPSPerCore), ppsPath(&g.Iperf))
		fmt.Fprintf(tw, "pkts/s per core\troceperf sender (client), receiver GRO\tmedian\t%s/core\t-\t%s\t%s\t%s\t%s\t%s\n",
			kpps(g.Roceperf.PPSPerCore), ppsRef, ratio(g.PPSRatio), ppsGoal, ppsVerdict(g.PPSRatio), ppsPath(&g.Roceperf))
		if t := g.RoceperfNoGRO; t != nil && len(t.Runs) > 0 {
			fmt.Fprintf(tw, "pkts/s per core\troceperf sender, receiver without GRO\tmedian\t%s/core\t-\t%s\t%s\t-\tbefore\t%s\n",
				kpps(t.PPSPerCore), ppsRef, ratio(g.NoGROPPSRatio), ppsPath(t))
		}
		if t := g.RoceperfRaw; t != nil {
			fmt.Fprintf(tw, "pkts/s per core\troceperf sender, --send raw\tmedian\t%s/core\t-\t%s\t%s\t-\tbefore\t%s\n",
				kpps(t.PPSPerCore), ppsRef, ratio(g.RawPPSRatio), ppsPath(t))
		}
		if len(g.UET.Runs) > 0 {
			rref := "-"
			if g.Roceperf.GoodputGbps > 0 {
				rref = fmt.Sprintf("%.2f Gbit/s", g.Roceperf.GoodputGbps)
			}
			fmt.Fprintf(tw, "UDP goodput, UET\t%s\tmedian\t%s\t-\t%s\t%s\t-\tvs roceperf\t%s\n",
				g.UET.Command, gbps(g.UET.GoodputGbps), rref, ratio(g.UETRatio), runsPath(&g.UET, "retrans"))
			for _, t := range []*ToolRow{g.UETNoGRO, g.UETRaw} {
				if t != nil && len(t.Runs) > 0 {
					fmt.Fprintf(tw, "UDP goodput, UET\t%s\tmedian\t%s\t-\t%s\t%s\t-\tbefore\t%s\n",
						t.Command, gbps(t.GoodputGbps), rref, ratio(div(t.GoodputGbps, g.Roceperf.GoodputGbps)), runsPath(t, "retrans"))
				}
			}
			fmt.Fprintf(tw, "pkts/s per core, UET\tUET sender (host/pds endpoint), receiver GRO\tmedian\t%s/core\t-\t%s\t%s\t%s\t%s\t%s\n",
				kpps(g.UET.PPSPerCore), ppsRef, ratio(g.UETIperfPPSRatio), ppsGoal, ppsVerdict(g.UETIperfPPSRatio), ppsPath(&g.UET))
			if t := g.UETNoGRO; t != nil && len(t.Runs) > 0 {
				fmt.Fprintf(tw, "pkts/s per core, UET\tUET sender, receiver without GRO\tmedian\t%s/core\t-\t%s\t%s\t-\tbefore\t%s\n",
					kpps(t.PPSPerCore), ppsRef, ratio(g.UETNoGROIperfPPSRatio), ppsPath(t))
			}
			if t := g.UETRaw; t != nil && len(t.Runs) > 0 {
				fmt.Fprintf(tw, "pkts/s per core, UET\tUET sender, raw socket\tmedian\t%s/core\t-\t%s\t%s\t-\tbefore\t%s\n",
					kpps(t.PPSPerCore), ppsRef, ratio(g.UETRawIperfPPSRatio), ppsPath(t))
			}
		}
	}
	if x := r.Reaction; x != nil {
		counts := reactionCounts(x, false)
		fmt.Fprintf(tw, "CNP reaction\tCE at NP -> Rc cut at RP\tp50\t%s\t-\t-\t-\t-\t-\t%s; %s\n", usVal(x.Reaction), x.Reaction, counts)
		fmt.Fprintf(tw, "CNP reaction\t  NP: CE -> CNP to sendmmsg\tp50\t%s\t-\t-\t-\t-\t-\t%s; the %d held by N alone: %s\n", usVal(x.NP), x.NP, x.Held, x.NPHeld)
		fmt.Fprintf(tw, "CNP reaction\t  return: CNP sendmmsg -> cut\tp50\t%s\t-\t-\t-\t-\t-\t%s; %s\n", usVal(x.Return), x.Return, x.Config)
	}
	if x := r.ReactionKernel; x != nil {
		counts := reactionCounts(x, true)
		fmt.Fprintf(tw, "CNP reaction, kernel NP\tCE at NP device -> Rc cut at RP\tp50\t%s\t-\t-\t-\t-\t-\t%s; %s\n", usVal(x.Reaction), x.Reaction, counts)
		fmt.Fprintf(tw, "CNP reaction, kernel NP\t  NP: CE in -> CNP out (tap)\tp50\t%s\t-\t-\t-\t-\t-\t%s; the %d held by N alone: %s\n", usVal(x.NP), x.NP, x.Held, x.NPHeld)
		fmt.Fprintf(tw, "CNP reaction, kernel NP\t  return: CNP out -> cut\tp50\t%s\t-\t-\t-\t-\t-\t%s; %s\n", usVal(x.Return), x.Return, x.Config)
	}
	if x := r.ReactionKernelRP; x != nil {
		const name = "CNP reaction, kernel NP+RP"
		counts := reactionCounts(x, true)
		verdict := func(p Percentiles) string {
			switch {
			case p.N == 0:
				return "-"
			case p.P99 > 100:
				return "missed"
			}
			return "met"
		}
		const goal = "p99 <= 100 µs"
		fmt.Fprintf(tw, "%s\tCE at NP device -> Rc cut at RP device\tp99\t%s\t-\t-\t-\t%s\t%s\t%s; %s\n", name, p99Val(x.Reaction), goal, verdict(x.Reaction), x.Reaction, counts)
		fmt.Fprintf(tw, "%s\t  the same, CNPs not held by N\tp99\t%s\t-\t-\t-\t%s\t%s\t%s\n", name, p99Val(x.Immediate), goal, verdict(x.Immediate), x.Immediate)
		fmt.Fprintf(tw, "%s\t  NP: CE in -> CNP out (tap)\tp50\t%s\t-\t-\t-\t-\t-\t%s; the %d held by N alone: %s\n", name, usVal(x.NP), x.NP, x.Held, x.NPHeld)
		fmt.Fprintf(tw, "%s\t  return: CNP out -> taken at RP device\tp50\t%s\t-\t-\t-\t-\t-\t%s\n", name, usVal(x.Return), x.Return)
		fmt.Fprintf(tw, "%s\t  taken -> read by the QP\tp50\t%s\t-\t-\t-\t-\t-\t%s; %s\n", name, usVal(x.Sync), x.Sync, x.Config)
	}

}

// div is a/b, 0 without a b.
func div(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func gbps(v float64) string {
	if v <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f Gbit/s", v)
}

func kpps(v float64) string {
	if v <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f kpps", v/1e3)
}

func usVal(p Percentiles) string {
	if p.N == 0 {
		return "n/a"
	}
	return fmtUs(p.P50) + " µs"
}

func runsPath(t *ToolRow, lossName string) string {
	var gs, ls []string
	for _, r := range t.Runs {
		gs = append(gs, fmt.Sprintf("%.2f", r.GoodputGbps))
		ls = append(ls, fmt.Sprintf("%.1f%%", r.LossPct))
	}
	s := "rounds " + orNA(strings.Join(gs, " "), "none")
	if len(t.Runs) > 1 {
		s += fmt.Sprintf(" (spread %.1f%%)", t.SpreadPct)
	}
	if len(ls) > 0 {
		s += fmt.Sprintf(", %s %s", lossName, strings.Join(ls, " "))
	}
	return s
}

func ppsPath(t *ToolRow) string {
	var ps, cs []string
	for _, r := range t.Runs {
		ps = append(ps, fmt.Sprintf("%.0f", r.PPSPerCore/1e3))
		cs = append(cs, fmt.Sprintf("%.0f%%/%.0f%%", 100*r.SenderCPUSeconds/max(r.Seconds, 1e-9), r.ReceiverCPUPct))
	}
	out := fmt.Sprintf("rounds %s kpps/core", orNA(strings.Join(ps, " "), "none"))
	if len(t.Runs) > 1 {
		out += fmt.Sprintf(" (spread %.0f%%)", t.PPSSpreadPct)
	}
	out += fmt.Sprintf("; sent %.0f kpps; CPU sender/receiver %s", t.SentKpps, orNA(strings.Join(cs, " "), "-"))
	if t.GSOPct > 0 {
		out += fmt.Sprintf("; %.0f%% of datagrams in UDP GSO sends, %.1f per send", t.GSOPct, t.SegmentsPerSend)
	}
	return out
}

// printRoceNotes explains the RoCEv2 rows under the table.
func printRoceNotes(w io.Writer, r *RoceReport) {
	if r == nil {
		return
	}
	if g := r.Goodput; g != nil {
		pin := "not pinned (each process free on both CPUs)"
		if g.CPU >= 0 {
			pin = fmt.Sprintf("client and server of both tools pinned to CPU %d", g.CPU)
		}
		fmt.Fprintf(w, "UDP goodput rows: one flow a->b over a bare veth pair (MTU %d, no port, no shaping), iperf3 -u and roceperf alternating,\n", g.LinkMTU)
		fmt.Fprintf(w, "%d rounds each (order swapped every round), medians; %s. Datagrams: roceperf MTU %d WRITEs carry BTH 12 + %d + ICRC 4\n", len(g.Order), pin, g.MTU, g.MTU)
		fmt.Fprintf(w, "= %d bytes of UDP payload (+16 RETH on a message's first packet, 1 in %d), so iperf3 -l %d. Goodput at the receiver:\n", g.DatagramBytes, roceMessageBytes/g.MTU, g.DatagramBytes)
		fmt.Fprintln(w, "iperf3's end.sum_received.bits_per_second (its datagrams' whole UDP payload; lost ones not counted); roceperf's")
		fmt.Fprintf(w, "acknowledged RDMA payload (end.sum_sent, --cc none, unpaced): its %d header+ICRC bytes per packet are not counted, so the\n", g.DatagramBytes-g.MTU)
		fmt.Fprintf(w, "ratio is %.1f%% conservative. roceperf runs in two child processes of the bench (host/perf, what cmd/roceperf runs), like iperf3.\n", 100*float64(g.DatagramBytes-g.MTU)/float64(g.DatagramBytes))
		fmt.Fprintln(w, "pkts/s per core = datagrams the sender sent / CPU seconds (user+sys) of the sender process over the test, from getrusage:")
		fmt.Fprintln(w, "iperf3's cpu_utilization_percent.host_total x seconds, roceperf's RUSAGE_SELF delta around RunClient (data packets incl.")
		fmt.Fprintln(w, "retransmissions). Tick-based accounting charges the veth's receive softirq run inside the sender's send call to the sender,")
		fmt.Fprintln(w, "for both tools alike. CPU column: sender and receiver process CPU as % of one CPU (roceperf server: over its lifetime).")
		fmt.Fprintln(w, "Receiver GRO: for the roceperf and UET goal rows the receiver's veth coalesces (ethtool -K gro on rx-udp-gro-forwarding on,")
		fmt.Fprintln(w, "lab.Node.SetReceiveCoalescing): a run of datagrams of one flow crosses the stack below the socket as one sk_buff and the")
		fmt.Fprintln(w, "agent's socket (UDP_GRO) splits it; what the sender's CPU pays for the receive softirq falls. iperf3 and the 'before' rows")
		fmt.Fprintln(w, "run with it off, as before (iperf3 sets no UDP_GRO: with it on its datagrams would only be coalesced and cut again).")
		if len(g.UET.Runs) > 0 {
			fmt.Fprintf(w, "UET rows: two host/pds endpoints (UDP 4793, RUD, NSCC at a %v line rate so the window does not bind) in child processes,\n", uetBenchLinkRate)
			fmt.Fprintf(w, "in the same rounds (the tools rotate). Each full packet carries roceperf's %d B of payload behind PDS 12 + SES %d bytes\n", g.MTU, uet.SESStdLen)
			fmt.Fprintln(w, "(UET MTU = IP packet). Goodput: acknowledged message payload, ratio UET / roceperf (the two transports on the one engine);")
			fmt.Fprintln(w, "pkts/s per core: data packets (retransmissions included, probes and closes not) / the sender process's CPU seconds, ratio")
			fmt.Fprintln(w, "to iperf3's.")
		}
		if g.RoceperfRaw != nil {
			fmt.Fprintln(w, "roceperf and UET send runs of one source port (a QP's, a PDC's EV) as UDP GSO sends through a UDP socket bound to that port")
			fmt.Fprintln(w, "(host/pktio; the veth cuts them into datagrams as it transmits: tx-udp-segmentation off), the rest through the raw socket;")
			fmt.Fprintln(w, "'before' rows: the same senders with every packet through the raw socket (--send raw), in the same rounds.")
		}
	}
	if x := r.Reaction; x != nil {
		fmt.Fprintln(w, "CNP reaction rows: two agents in this process on one clock (sockets opened in namespaces a and b), one QP a->b, DCQCN")
		fmt.Fprintf(w, "paper profile at the RP (every CNP cuts at once), %s. Times are on the agents' clock: CE = the CE packet's kernel\n", x.Config)
		fmt.Fprintln(w, "arrival at the NP (SO_TIMESTAMPNS); CNP = built, just before its sendmmsg; cut = when the RP's receive loop applied the")
		fmt.Fprintln(w, "CNP, Rc lowered (not the CNP's arrival). Each CNP is charged to the first CE since the NP's previous CNP; CNPs reach the RP in order (one path, no")
		fmt.Fprintln(w, "port on b's egress), so the k-th handled is the k-th sent. Only CNPs that cut Rc count (none at Rmin). Percentiles: nearest rank.")
		fmt.Fprintln(w, "held by N: the trigger CE came less than min_time_between_cnps after the previous CNP (often in the same receive batch); the")
		fmt.Fprintln(w, "agent's transmit loop sends such a CNP when N has passed, so its NP time is N plus that loop's timerfd wake-up.")
		fmt.Fprintln(w, "The port runs below what the RP's pacer delivers at its line rate, so the queue builds from Rc rather than from bursts")
		fmt.Fprintln(w, "(paced, a QP releases at most max_burst packets back to back, woken by a timerfd 25-60 µs late; the lateness is credited back).")
	}
	if r.ReactionKernelRP != nil {
		fmt.Fprintln(w, "kernel NP+RP: the NP in eBPF on b's device (host/npbpf) and the RP's CNP intake in eBPF on a's device (host/rpbpf); CE and")
		fmt.Fprintln(w, "CNP out are a tap's kernel stamps on b, the cut is the CNP's arrival at a's TCX ingress (bpf_ktime_get_ns), from when every")
		fmt.Fprintln(w, "pacing decision of the QP uses the cut Rc (the QP runs its RP on each counted CNP, at that time, before it paces). 'not held")
		fmt.Fprintln(w, "by N': CNPs whose trigger CE came N or more after the previous CNP, so the NP answered at once (a held one waits for the QP's")
		fmt.Fprintln(w, "next packet after N: the kernel NP has no timer). 'read by the QP': when the QP's next pacing pass or receive loop took it.")
	}
}

// reactionCounts is a reaction row's counters, worded for where its NP
// ran: the agent, or the kernel (on the device).
func reactionCounts(x *ReactionRow, kernelNP bool) string {
	ce, cnps, rmin := "the NP", "sent", "at Rmin (no cut)"
	if kernelNP {
		ce, cnps, rmin = "the device", "out", "at Rmin"
	}
	return fmt.Sprintf("%d CNPs cut Rc (%d held by N), %d CE at %s, %d CNPs %s, %d handled, %d %s, %d unmatched; port CE-marked %d, dropped %d; %.2f Gbit/s acked in %.1f s",
		x.Cuts, x.Held, x.CEReceived, ce, x.CNPSent, cnps, x.CNPHandled, x.NoCut, rmin, x.Unmatched, x.PortMarked, x.PortDropped, x.AckedGbps, x.Seconds)
}
