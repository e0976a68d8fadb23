//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The RoCEv2 host rows (issue §8): roceperf's single-flow goodput against
// iperf3 -u at the same datagram size on the same veth pair, packets per
// second per core of both senders, and the DCQCN loop's CNP reaction time.

const (
	// goodputGoal and goodputStretch: roceperf / iperf3 -u goodput.
	goodputGoal    = 1.5
	goodputStretch = 2.0
	// roceMessageBytes is roceperf's message (its default, -l 64K).
	roceMessageBytes = 64 << 10
)

// RoceReport is the RoCEv2 section of the report.
type RoceReport struct {
	Goodput  *GoodputReport `json:"goodput,omitempty"`
	Reaction *ReactionRow   `json:"cnp_reaction,omitempty"`
	// ReactionKernel is the same loop with the NP in the kernel.
	ReactionKernel *ReactionRow `json:"cnp_reaction_kernel_np,omitempty"`
	// ReactionKernelRP is the loop with the NP and the RP's CNP intake in
	// the kernel (host/npbpf, host/rpbpf).
	ReactionKernelRP *ReactionRow `json:"cnp_reaction_kernel_np_rp,omitempty"`
}

// GoodputReport compares one roceperf flow with one iperf3 -u flow.
type GoodputReport struct {
	// MTU is roceperf's path MTU (payload per packet), LinkMTU the veth's.
	MTU     int `json:"mtu"`
	LinkMTU int `json:"link_mtu"`
	// DatagramBytes is iperf3's -l: the UDP payload of roceperf's
	// MIDDLE/LAST packets (BTH + MTU + ICRC); FIRST packets carry a
	// 16-byte RETH more, once per message.
	DatagramBytes int `json:"datagram_bytes"`
	// CPU both tools were pinned to (client and server), -1 none.
	CPU      int     `json:"cpu"`
	Iperf    ToolRow `json:"iperf3"`
	Roceperf ToolRow `json:"roceperf"`
	Ratio    float64 `json:"goodput_ratio,omitempty"` // roceperf / iperf3 medians
	PPSRatio float64 `json:"pps_per_core_ratio,omitempty"`
	// UET: host/pds endpoints (NSCC) with roceperf's payload per packet;
	// its ratios are to roceperf's medians.
	UET         ToolRow `json:"uet"`
	UETRatio    float64 `json:"uet_goodput_ratio,omitempty"`
	UETPPSRatio float64 `json:"uet_pps_per_core_ratio,omitempty"`
	// UETIperfPPSRatio is UET's pps per core / iperf3's.
	UETIperfPPSRatio float64 `json:"uet_pps_per_core_vs_iperf3,omitempty"`
	// RoceperfRaw and UETRaw are the same senders with every packet
	// through the raw socket (--send raw, the path before UDP GSO), in the
	// same rounds: the before beside the after. Their ratios are to
	// iperf3's medians. Absent with -send-raw-rows=false.
	RoceperfRaw         *ToolRow `json:"roceperf_raw,omitempty"`
	RawPPSRatio         float64  `json:"roceperf_raw_pps_per_core_ratio,omitempty"`
	UETRaw              *ToolRow `json:"uet_raw,omitempty"`
	UETRawIperfPPSRatio float64  `json:"uet_raw_pps_per_core_vs_iperf3,omitempty"`
	// RoceperfNoGRO and UETNoGRO are roceperf and UET with the receiver's
	// device not coalescing (GRO off, as iperf3 runs): every datagram
	// through the stack below the socket on its own. Their ratios are to
	// iperf3's medians.
	RoceperfNoGRO         *ToolRow `json:"roceperf_no_gro,omitempty"`
	NoGROPPSRatio         float64  `json:"roceperf_no_gro_pps_per_core_ratio,omitempty"`
	UETNoGRO              *ToolRow `json:"uet_no_gro,omitempty"`
	UETNoGROIperfPPSRatio float64  `json:"uet_no_gro_pps_per_core_vs_iperf3,omitempty"`
	// PPSGoal is the goal of every sender's pps per core / iperf3's.
	PPSGoal float64    `json:"pps_per_core_goal_ratio"`
	Goal    float64    `json:"goal_ratio"`
	Stretch float64    `json:"stretch_ratio"`
	Verdict string     `json:"verdict"` // stretch, ok, below, n/a
	Order   [][]string `json:"order"`   // per round, the tools in the order they ran
}

// ToolRow is one tool over its rounds.
type ToolRow struct {
	Tool    string   `json:"tool"`
	Command string   `json:"command"`
	Runs    []UDPRun `json:"runs"`
	// Medians over the rounds.
	GoodputGbps float64 `json:"median_goodput_gbps"`
	PPSPerCore  float64 `json:"median_pps_per_core"`
	SentKpps    float64 `json:"median_sent_kpps"`
	SpreadPct   float64 `json:"goodput_spread_pct"`
	// PPSSpreadPct is (max - min) / median of the rounds' pps per core.
	PPSSpreadPct float64 `json:"pps_per_core_spread_pct"`
	// GSOPct and SegmentsPerSend: medians of the rounds' (roceperf, UET).
	GSOPct          float64 `json:"median_gso_datagrams_pct"`
	SegmentsPerSend float64 `json:"median_segments_per_gso_send"`
}

// UDPRun is one round of one tool.
type UDPRun struct {
	// GoodputGbps is measured at the receiver: iperf3's
	// end.sum_received.bits_per_second (UDP payload, lost datagrams not
	// counted); roceperf's acknowledged RDMA payload per second
	// (end.sum_sent.bits_per_second: placed in order at the responder and
	// acknowledged).
	GoodputGbps float64 `json:"goodput_gbps"`
	// SentPackets are the datagrams the sender sent (roceperf: data
	// packets, retransmissions included).
	SentPackets uint64 `json:"sent_packets"`
	// GSOPct is the share of the datagrams the sender's conn sent in UDP
	// GSO sends, SegmentsPerSend their mean per send (roceperf, UET).
	GSOPct          float64 `json:"gso_datagrams_pct"`
	SegmentsPerSend float64 `json:"segments_per_gso_send,omitempty"`
	Seconds         float64 `json:"seconds"`
	// SenderCPUSeconds is user+system time of the sender process over the
	// test (getrusage RUSAGE_SELF deltas; iperf3: its
	// cpu_utilization_percent.host_total × test seconds).
	SenderCPUSeconds float64 `json:"sender_cpu_seconds"`
	// PPSPerCore = SentPackets / SenderCPUSeconds.
	PPSPerCore float64 `json:"pps_per_core"`
	// ReceiverCPUPct is the receiver process's CPU as a share of one CPU
	// over the test (iperf3: remote_total; roceperf: the server process's
	// rusage over its lifetime, which includes the side channel).
	ReceiverCPUPct float64 `json:"receiver_cpu_pct"`
	// LossPct: iperf3's datagrams lost at the receiver; roceperf's
	// retransmitted share of the data packets (go-back-N after a drop).
	LossPct float64 `json:"loss_pct"`
}

type roceOpts struct {
	goodput, reaction bool
	// rawRows adds roceperf and UET with --send raw to the goodput rounds.
	rawRows         bool
	rounds, seconds int
	mtu             int
	cpu             int
	burst           int // roceperf --burst; 0: its default
	profileDir      string
	react           reactionOpts
}

// roceLinkMTU is the veth MTU a path MTU needs: 1500 up to 1024 (a 1024
// payload is 1072 bytes of IPv4), 9000 for 4096 (as on RoCE fabrics).
func roceLinkMTU(mtu int) int {
	if mtu > 1024 {
		return 9000
	}
	return 1500
}

// roceDatagramBytes is the UDP payload of a MIDDLE or LAST RDMA WRITE
// packet of a full MTU: BTH, payload, ICRC.
func roceDatagramBytes(mtu int) int { return roce.BTHLen + mtu + roce.ICRCLen }

// runRoce builds one two-namespace lab (one veth pair, no port) and runs
// the sections asked for; the reaction run attaches a shaped port for its
// duration.
func runRoce(ctx context.Context, o roceOpts) (*RoceReport, error) {
	rep := &RoceReport{}
	if _, err := exec.LookPath("ip"); err != nil {
		return rep, errors.New("ip (iproute2) not found in PATH: host/lab runs commands with `ip netns exec`; install iproute2")
	}
	l, err := pairLab(roceLinkMTU(o.mtu))
	if err != nil {
		return rep, err
	}
	defer closeLab(l)
	a, b := l.Node("a"), l.Node("b")
	var errs []error
	if o.goodput {
		g, err := runGoodput(ctx, a, b, o)
		rep.Goodput = g
		if err != nil {
			errs = append(errs, fmt.Errorf("goodput: %w", err))
		}
	}
	// The paper's path, then the NP and then the RP too in the kernel.
	for _, v := range []struct {
		kernelNP, kernelRP bool
		row                **ReactionRow
		what               string
	}{
		{false, false, &rep.Reaction, "cnp reaction"},
		{true, false, &rep.ReactionKernel, "cnp reaction, kernel np"},
		{true, true, &rep.ReactionKernelRP, "cnp reaction, kernel np and rp"},
	} {
		if !o.reaction || ctx.Err() != nil {
			break
		}
		k := o.react
		k.kernelNP, k.kernelRP = v.kernelNP, v.kernelRP
		progress("CNP reaction: %s, %s", k, units.FormatDuration(k.seconds))
		r, err := runReaction(ctx, a, b, k)
		*v.row = &r
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", v.what, err))
		}
	}

	return rep, errors.Join(errs...)
}

// runGoodput alternates iperf3 -u and roceperf, rounds times each, the
// order swapped every round so neither always runs first.
func runGoodput(ctx context.Context, a, b *lab.Node, o roceOpts) (*GoodputReport, error) {
	dg := roceDatagramBytes(o.mtu)
	g := &GoodputReport{
		MTU: o.mtu, LinkMTU: roceLinkMTU(o.mtu), DatagramBytes: dg, CPU: o.cpu,
		Goal: goodputGoal, Stretch: goodputStretch, PPSGoal: goodputGoal, Verdict: "n/a",
		Iperf: ToolRow{Tool: "iperf3 -u", Command: fmt.Sprintf("iperf3 -u -b 0 -l %d -t %d", dg, o.seconds)},
		Roceperf: ToolRow{Tool: "roceperf", Command: fmt.Sprintf("roceperf --cc none -b 0 --mtu %d -l %d -t %d (WRITE, 1 QP)",
			o.mtu, roceMessageBytes, o.seconds)},
		UET: ToolRow{Tool: "uet", Command: fmt.Sprintf("UET endpoints (host/pds, NSCC, RUD), MTU %d (%d B payload), %d KiB messages, %d s",
			uetMTU(o.mtu), o.mtu, roceMessageBytes>>10, o.seconds)},
	}
	g.RoceperfNoGRO = &ToolRow{Tool: "roceperf, receiver without GRO", Command: g.Roceperf.Command + ", receiver GRO off"}
	g.UETNoGRO = &ToolRow{Tool: "uet, receiver without GRO", Command: g.UET.Command + ", receiver GRO off"}
	g.Roceperf.Command += ", receiver GRO on"
	g.UET.Command += ", receiver GRO on"
	tools := []string{"iperf3", "roceperf", "roceperf-nogro", "uet", "uet-nogro"}
	if o.rawRows {
		g.RoceperfRaw = &ToolRow{Tool: "roceperf --send raw", Command: g.RoceperfNoGRO.Command + ", --send raw"}
		g.UETRaw = &ToolRow{Tool: "uet, raw socket", Command: g.UETNoGRO.Command + ", raw socket (pktio.SendRaw)"}
		tools = []string{"iperf3", "roceperf", "roceperf-nogro", "roceperf-raw", "uet", "uet-nogro", "uet-raw"}
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		return g, errIperfMissing
	}
	exe, err := os.Executable()
	if err != nil {
		return g, fmt.Errorf("cannot re-execute the bench for roceperf: %w", err)
	}
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return g, err
		}
	}
	var errs []error
	// The sections after this one attach ports to the pair: a port refuses
	// a peer that coalesces.
	defer func() {
		if err := b.SetReceiveCoalescing(devB, false); err != nil {
			progress("receiver GRO off: %v", err)
		}
	}()
	n := 0
	for r := range o.rounds {
		order := slices.Clone(tools)
		for range r % len(order) {
			order = append(order[1:], order[0])
		}
		g.Order = append(g.Order, order)
		for _, tool := range order {
			if ctx.Err() != nil {
				return finishGoodput(g), errors.Join(append(errs, ctx.Err())...)
			}
			n++
			progress("UDP goodput round %d/%d: %s (%d s)", r+1, o.rounds, tool, o.seconds)
			var run UDPRun
			var err error
			prof := ""
			if o.profileDir != "" {
				prof = filepath.Join(o.profileDir, fmt.Sprintf("round%d-%s", r+1, tool))
			}
			// The receiver coalesces for roceperf's and UET's goal rows
			// only: iperf3 and the before rows run as before.
			if err := b.SetReceiveCoalescing(devB, tool == "roceperf" || tool == "uet"); err != nil {
				return finishGoodput(g), errors.Join(append(errs, err)...)
			}
			var row *ToolRow
			switch tool {
			case "iperf3":
				run, err = iperfUDP(ctx, a, b, iperfPort+100+n, o.seconds, dg, o.cpu)
				row = &g.Iperf
			case "uet":
				run, err = uetRun(ctx, exe, a, b, o, prof, pktio.SendAuto)
				row = &g.UET
			case "uet-raw":
				run, err = uetRun(ctx, exe, a, b, o, prof, pktio.SendRaw)
				row = g.UETRaw
			case "roceperf-raw":
				run, err = roceperfRun(ctx, exe, a, b, o, prof, pktio.SendRaw)
				row = g.RoceperfRaw
			case "roceperf-nogro":
				run, err = roceperfRun(ctx, exe, a, b, o, prof, pktio.SendAuto)
				row = g.RoceperfNoGRO
			case "uet-nogro":
				run, err = uetRun(ctx, exe, a, b, o, prof, pktio.SendAuto)
				row = g.UETNoGRO
			default:
				run, err = roceperfRun(ctx, exe, a, b, o, prof, pktio.SendAuto)
				row = &g.Roceperf
			}
			if err == nil {
				row.Runs = append(row.Runs, run)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("round %d, %s: %w", r+1, tool, err))
			}
		}
	}
	return finishGoodput(g), errors.Join(errs...)
}

func finishGoodput(g *GoodputReport) *GoodputReport {
	for _, t := range []*ToolRow{&g.Iperf, &g.Roceperf, &g.UET, g.RoceperfRaw, g.UETRaw, g.RoceperfNoGRO, g.UETNoGRO} {
		if t == nil {
			continue
		}
		var gb, pps, kpps, gso, segs []float64
		for _, r := range t.Runs {
			gb = append(gb, r.GoodputGbps)
			pps = append(pps, r.PPSPerCore)
			gso = append(gso, r.GSOPct)
			segs = append(segs, r.SegmentsPerSend)
			if r.Seconds > 0 {
				kpps = append(kpps, float64(r.SentPackets)/r.Seconds/1e3)
			}
		}
		t.GoodputGbps, t.PPSPerCore, t.SentKpps = median(gb), median(pps), median(kpps)
		t.GSOPct, t.SegmentsPerSend = median(gso), median(segs)
		if len(gb) > 1 && t.GoodputGbps > 0 {
			t.SpreadPct = 100 * (slices.Max(gb) - slices.Min(gb)) / t.GoodputGbps
		}
		if len(pps) > 1 && t.PPSPerCore > 0 {
			t.PPSSpreadPct = 100 * (slices.Max(pps) - slices.Min(pps)) / t.PPSPerCore
		}
	}
	if g.Iperf.GoodputGbps > 0 && g.Roceperf.GoodputGbps > 0 {
		g.Ratio = g.Roceperf.GoodputGbps / g.Iperf.GoodputGbps
		switch {
		case g.Ratio >= g.Stretch:
			g.Verdict = "stretch"
		case g.Ratio >= g.Goal:
			g.Verdict = "ok"
		default:
			g.Verdict = "below"
		}
	}
	if g.Iperf.PPSPerCore > 0 && g.Roceperf.PPSPerCore > 0 {
		g.PPSRatio = g.Roceperf.PPSPerCore / g.Iperf.PPSPerCore
	}
	if g.Roceperf.GoodputGbps > 0 && g.UET.GoodputGbps > 0 {
		g.UETRatio = g.UET.GoodputGbps / g.Roceperf.GoodputGbps
	}
	if g.Roceperf.PPSPerCore > 0 && g.UET.PPSPerCore > 0 {
		g.UETPPSRatio = g.UET.PPSPerCore / g.Roceperf.PPSPerCore
	}
	perIperf := func(t *ToolRow) float64 {
		if t == nil || t.PPSPerCore <= 0 || g.Iperf.PPSPerCore <= 0 {
			return 0
		}
		return t.PPSPerCore / g.Iperf.PPSPerCore
	}
	g.UETIperfPPSRatio = perIperf(&g.UET)
	g.RawPPSRatio = perIperf(g.RoceperfRaw)
	g.UETRawIperfPPSRatio = perIperf(g.UETRaw)
	g.NoGROPPSRatio = perIperf(g.RoceperfNoGRO)
	g.UETNoGROIperfPPSRatio = perIperf(g.UETNoGRO)
	return g
}

// pinned prefixes a command with taskset when cpu >= 0, so every thread
// of the process (the Go runtime's too) inherits the affinity.
func pinned(cpu int, name string, args ...string) (string, []string) {
	if cpu < 0 {
		return name, args
	}
	return "taskset", append([]string{"-c", fmt.Sprint(cpu), name}, args...)
}
