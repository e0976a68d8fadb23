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
	UET         ToolRow    `json:"uet"`
	UETRatio    float64    `json:"uet_goodput_ratio,omitempty"`
	UETPPSRatio float64    `json:"uet_pps_per_core_ratio,omitempty"`
	Goal        float64    `json:"goal_ratio"`
	Stretch     float64    `json:"stretch_ratio"`
	Verdict     string     `json:"verdict"` // stretch, ok, below, n/a
	Order       [][]string `json:"order"`   // per round, the tools in the order they ran
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
	SentPackets uint64  `json:"sent_packets"`
	Seconds     float64 `json:"seconds"`
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
	rounds, seconds   int
	mtu               int
	cpu               int
	burst             int // roceperf --burst; 0: its default
	profileDir        string
	react             reactionOpts
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
	lab, err := lab.Build(lab.Spec{
		Nodes: []lab.NodeSpec{{Name: "a"}, {Name: "b"}},
		Links: []lab.LinkSpec{{
			A:   lab.Endpoint{Node: "a", Dev: devA, Addr: addrA},
			B:   lab.Endpoint{Node: "b", Dev: devB, Addr: addrB},
			MTU: roceLinkMTU(o.mtu),
		}},
	})
	if err != nil {
		return rep, err
	}
	defer func() {
		if cerr := lab.Close(); cerr != nil {
			progress("closing lab: %v", cerr)
		}
	}()
	a, b := lab.Node("a"), lab.Node("b")
	var errs []error
	if o.goodput {
		g, err := runGoodput(ctx, a, b, o)
		rep.Goodput = g
		if err != nil {
			errs = append(errs, fmt.Errorf("goodput: %w", err))
		}
	}
	base := o.react
	if o.reaction && ctx.Err() == nil {
		progress("CNP reaction: %s, %s", base, units.FormatDuration(base.seconds))
		r, err := runReaction(ctx, a, b, base)
		rep.Reaction = &r
		if err != nil {
			errs = append(errs, fmt.Errorf("cnp reaction: %w", err))
		}
	}
	if o.reaction && ctx.Err() == nil {
		k := base
		k.kernelNP = true
		progress("CNP reaction: %s, %s", k, units.FormatDuration(k.seconds))
		r, err := runReaction(ctx, a, b, k)
		rep.ReactionKernel = &r
		if err != nil {
			errs = append(errs, fmt.Errorf("cnp reaction, kernel np: %w", err))
		}
	}
	if o.reaction && ctx.Err() == nil {
		k := base
		k.kernelNP, k.kernelRP = true, true
		progress("CNP reaction: %s, %s", k, units.FormatDuration(k.seconds))
		r, err := runReaction(ctx, a, b, k)
		rep.ReactionKernelRP = &r
		if err != nil {
			errs = append(errs, fmt.Errorf("cnp reaction, kernel np and rp: %w", err))
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
		Goal: goodputGoal, Stretch: goodputStretch, Verdict: "n/a",
		Iperf: ToolRow{Tool: "iperf3 -u", Command: fmt.Sprintf("iperf3 -u -b 0 -l %d -t %d", dg, o.seconds)},
		Roceperf: ToolRow{Tool: "roceperf", Command: fmt.Sprintf("roceperf --cc none -b 0 --mtu %d -l %d -t %d (WRITE, 1 QP)",
			o.mtu, roceMessageBytes, o.seconds)},
		UET: ToolRow{Tool: "uet", Command: fmt.Sprintf("UET endpoints (host/pds, NSCC, RUD), MTU %d (%d B payload), %d KiB messages, %d s",
			uetMTU(o.mtu), o.mtu, roceMessageBytes>>10, o.seconds)},
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
	n := 0
	for r := range o.rounds {
		tools := []string{"iperf3", "roceperf", "uet"}
		for range r % len(tools) {
			tools = append(tools[1:], tools[0])
		}
		g.Order = append(g.Order, tools)
		for _, tool := range tools {
			if ctx.Err() != nil {
				return finishGoodput(g), errors.Join(append(errs, ctx.Err())...)
			}
			n++
			progress("UDP goodput round %d/%d: %s (%d s)", r+1, o.rounds, tool, o.seconds)
			var run UDPRun
			var err error
			switch tool {
			case "iperf3":
				run, err = iperfUDP(ctx, a, b, iperfPort+100+n, o.seconds, dg, o.cpu)
				if err == nil {
					g.Iperf.Runs = append(g.Iperf.Runs, run)
				}
			case "uet":
				prof := ""
				if o.profileDir != "" {
					prof = filepath.Join(o.profileDir, fmt.Sprintf("round%d", r+1))
				}
				run, err = uetRun(ctx, exe, a, b, o, prof)
				if err == nil {
					g.UET.Runs = append(g.UET.Runs, run)
				}
			default:
				prof := ""
				if o.profileDir != "" {
					prof = filepath.Join(o.profileDir, fmt.Sprintf("round%d", r+1))
				}
				run, err = roceperfRun(ctx, exe, a, b, o, prof)
				if err == nil {
					g.Roceperf.Runs = append(g.Roceperf.Runs, run)
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("round %d, %s: %w", r+1, tool, err))
			}
		}
	}
	return finishGoodput(g), errors.Join(errs...)
}

func finishGoodput(g *GoodputReport) *GoodputReport {
	for _, t := range []*ToolRow{&g.Iperf, &g.Roceperf, &g.UET} {
		var gb, pps, kpps []float64
		for _, r := range t.Runs {
			gb = append(gb, r.GoodputGbps)
			pps = append(pps, r.PPSPerCore)
			if r.Seconds > 0 {
				kpps = append(kpps, float64(r.SentPackets)/r.Seconds/1e3)
			}
		}
		t.GoodputGbps, t.PPSPerCore, t.SentKpps = median(gb), median(pps), median(kpps)
		if len(gb) > 1 && t.GoodputGbps > 0 {
			t.SpreadPct = 100 * (slices.Max(gb) - slices.Min(gb)) / t.GoodputGbps
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
