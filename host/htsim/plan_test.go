package htsim

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func mustPlan(t *testing.T, s Scenario) Plan {
	t.Helper()
	p, err := NewPlan(s)
	if err != nil {
		t.Fatalf("NewPlan: %v", err)
	}
	return p
}

// incastCM is htsim's own 15 → 1 (connection_matrices/incast.cm run with
// its defaults: 100 Gbit/s, MTU 4150, 3 tiers, 1 µs hops, 1-BDP queues of
// 43 packets that trim to 64 B, ECN at 9 and 35 packets).
func incastCM() Scenario {
	return Scenario{Senders: 15, FlowBytes: 2_000_000, Rate: 100 * units.Gbit, MTUBytes: 4150 - 14, HopLatency: time.Microsecond,
		PortQueue: PortQueue{LimitBytes: 43 * 4150, MinThBytes: 9 * 4150, MaxThBytes: 35 * 4150}, Trim: true, TrimBytes: 64 - 14,
		CC: pds.CCNSCC, Seed: 13, Mapping: Native, Topology: FatTree}
}

func TestPlanMapsTheLabsIncasts(t *testing.T) {
	for _, tc := range []struct {
		name                string
		s                   Scenario
		psPerByte           int64
		mbps                string
		scale               float64
		hopPs, rttPs        int64
		nodes, receiver     int
		queue, minTh, maxTh int64
		trimWire            int
		sack                int64
	}{
		// htsim.md: 500 Mbit/s 1 ms → 41666.666 Mbit/s 12 µs, the same
		// 62 500-B BDP; 15 packets, ECN 3–12, trimmed to 128 + 14 B.
		{"trim 8 scaled 500", labTrim(8, 500*units.Mbit, Scaled), 192, "41666.666", 1000.0 / 12, 1099296, 12_000_000, 128, 8, 15, 3, 12, 142, 16384},
		{"trim 8 native 500", labTrim(8, 500*units.Mbit, Native), 16000, "500", 1, 91_608_000, 1_000_000_000, 128, 8, 15, 3, 12, 142, 16384},
		{"trim 16 scaled 250", labTrim(16, 250*units.Mbit, Scaled), 384, "20833.333", 1000.0 / 12, 698592, 12_000_000, 512, 16, 7, 2, 6, 142, 16384},
		// Deep: 4 MiB = 1020 packets, ECN at 1 and 2 BDP, an ACK per
		// packet.
		{"deep native 500", labDeep(500*units.Mbit, Native), 16000, "500", 1, 91_608_000, 1_000_000_000, 128, 8, 1020, 15, 30, 0, 4110},
		{"deep scaled 250", labDeep(250*units.Mbit, Scaled), 384, "20833.333", 1000.0 / 12, 698592, 12_000_000, 128, 8, 510, 8, 15, 0, 4110},
		{"incast.cm", incastCM(), 80, "100000", 1, 1_000_000, 14_022_720, 16, 15, 43, 9, 35, 64, 16384},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPlan(t, tc.s)
			if p.PicosPerByte != tc.psPerByte || p.linkMbps != tc.mbps || math.Abs(p.TimeScale-tc.scale) > 1e-9 {
				t.Errorf("rate: %d ps/byte as %s Mbit/s, scale %v; want %d, %s, %v", p.PicosPerByte, p.linkMbps, p.TimeScale, tc.psPerByte, tc.mbps, tc.scale)
			}
			if p.HopLatencyPs != tc.hopPs || p.UnloadedRTTPs != tc.rttPs {
				t.Errorf("hop %d ps, RTT %d ps; want %d, %d", p.HopLatencyPs, p.UnloadedRTTPs, tc.hopPs, tc.rttPs)
			}
			if p.Nodes != tc.nodes || p.Receiver != tc.receiver {
				t.Errorf("%d nodes, receiver %d; want %d, %d", p.Nodes, p.Receiver, tc.nodes, tc.receiver)
			}
			if p.QueuePackets != tc.queue || p.MinThPackets != tc.minTh || p.MaxThPackets != tc.maxTh {
				t.Errorf("queue %d, ECN %d–%d packets; want %d, %d–%d", p.QueuePackets, p.MinThPackets, p.MaxThPackets, tc.queue, tc.minTh, tc.maxTh)
			}
			if p.TrimWireBytes != tc.trimWire || p.SACKThresholdBytes != tc.sack {
				t.Errorf("trim %d B, sack %d B; want %d, %d", p.TrimWireBytes, p.SACKThresholdBytes, tc.trimWire, tc.sack)
			}
		})
	}
}

// A threshold at the limit stays within it: 4 MiB holds 1020.5 packets.
func TestPlanKeepsThresholdsWithinTheLimit(t *testing.T) {
	s := labDeep(500*units.Mbit, Native)
	s.MinThBytes, s.MaxThBytes = s.LimitBytes, s.LimitBytes
	if p := mustPlan(t, s); p.QueuePackets != 1020 || p.MinThPackets != 1020 || p.MaxThPackets != 1020 {
		t.Errorf("queue %d, ECN %d–%d: want 1020 each", p.QueuePackets, p.MinThPackets, p.MaxThPackets)
	}
}

// The ideal: N × size × (mtu/mss) × 8 / rate, the same ratio in both
// times.
func TestPlanIdeal(t *testing.T) {
	for _, tc := range []struct {
		s     Scenario
		ideal time.Duration
	}{
		// 8 × 2 MiB × 4110/4046 at 500 Mbit/s.
		{labTrim(8, 500*units.Mbit, Native), 272_681_593},
		{labTrim(8, 500*units.Mbit, Scaled), 272_681_593},
		{labTrim(16, 250*units.Mbit, Scaled), 1_090_726_371},
		// uet.md's 15 → 1: 15 × 2 MB × 4150/4086 at 100 Gbit/s.
		{incastCM(), 2_437_592},
	} {
		p := mustPlan(t, tc.s)
		if p.Ideal != tc.ideal {
			t.Errorf("%d senders at %v, %v: ideal %v, want %v", tc.s.Senders, tc.s.Rate, tc.s.Mapping, p.Ideal, tc.ideal)
		}
		if lab := float64(p.Ideal) * 1e3 / p.TimeScale; math.Abs(lab-p.IdealPs) > 1e3 {
			t.Errorf("ideal in htsim's time %v ps, want the lab's / scale = %v", p.IdealPs, lab)
		}
	}
}

func TestPlanBDP(t *testing.T) {
	for _, m := range []Mapping{Native, Scaled} {
		if p := mustPlan(t, labTrim(8, 500*units.Mbit, m)); math.Abs(p.BDPBytes-62500) > 0.1 {
			t.Errorf("%v: BDP %v B, want 62 500", m, p.BDPBytes)
		}
	}
}

func TestPlanScalesTargetQDelay(t *testing.T) {
	s := labTrim(8, 500*units.Mbit, Scaled)
	s.TargetQDelay = time.Millisecond // LabParams' tq = RTT
	if p := mustPlan(t, s); p.TargetQDelayPs != 12_000_000 {
		t.Errorf("tq %d ps, want 12 µs", p.TargetQDelayPs)
	}
}

func TestPlanRejectsAnRTTUnderTheSerialisation(t *testing.T) {
	s := labTrim(8, 500*units.Mbit, Native)
	s.BaseRTT = 200 * time.Microsecond // 4 hops of 4110 + 64 B take 267 µs
	_, err := NewPlan(s)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "base_rtt" || !strings.Contains(err.Error(), "base_rtt (200µs) must be at least 267.137µs at rate 500mbit") {
		t.Errorf("NewPlan = %v", err)
	}
}

func TestPlanRejectsARateScaledUnderAPicosecond(t *testing.T) {
	s := labTrim(8, 10*units.Tbit, Scaled)
	s.BaseRTT = time.Second
	s.LimitBytes, s.MinThBytes, s.MaxThBytes = units.GiB, 0, 0
	_, err := NewPlan(s)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "rate" || !strings.Contains(err.Error(), "rate (10tbit) must be at most 192mbit with mapping scaled") {
		t.Errorf("NewPlan = %v", err)
	}
}

func TestConnectionMatrix(t *testing.T) {
	s := labTrim(2, 500*units.Mbit, Native)
	s.FlowBytes = 65536
	want := "Nodes 8\nConnections 2\n0->2 start 0 size 65536\n1->2 start 0 size 65536\n"
	if p := mustPlan(t, s); p.ConnectionMatrix() != want {
		t.Errorf("ConnectionMatrix:\n%s\nwant\n%s", p.ConnectionMatrix(), want)
	}
	p := mustPlan(t, incastCM())
	if cm := p.ConnectionMatrix(); !strings.HasPrefix(cm, "Nodes 16\nConnections 15\n0->15 start 0 size 2000000\n") || !strings.HasSuffix(cm, "\n14->15 start 0 size 2000000\n") {
		t.Errorf("incast.cm:\n%s", cm)
	}
}

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    func() Scenario
		want string
	}{
		{"trim scaled", func() Scenario { return labTrim(8, 500*units.Mbit, Scaled) },
			"-tm x.cm -sender_cc_only -linkspeed 41666.666 -mtu 4110 -tiers 2 -hop_latency 1.0992965 -q 15 -ecn 3 12 -trimsize 142 " +
				"-end 7129 -seed 1 -log tor_downqueue -logtime_us 3.2721795 -o x.log"},
		{"deep native, ACK per packet", func() Scenario { s := labDeep(500*units.Mbit, Native); s.CC = pds.CCBoth; return s },
			"-tm x.cm -sender_cc -receiver_cc -linkspeed 500 -mtu 4110 -tiers 2 -hop_latency 91.6080005 -q 1020 -ecn 15 30 -disable_trim -sack_threshold 4110 " +
				"-end 2175228 -seed 1 -log tor_downqueue -logtime_us 272.6815925 -o x.log"},
		{"deep scaled, htsim's recovery, tq", func() Scenario {
			s := labDeep(500*units.Mbit, Scaled)
			s.CC, s.TargetQDelay = pds.CCNSCC, time.Millisecond
			s.SetHtsimRecovery()
			return s
		}, "-tm x.cm -sender_cc_only -linkspeed 41666.666 -mtu 4110 -tiers 2 -hop_latency 1.0992965 -q 1020 -ecn 15 30 -disable_trim -target_q_delay 12.0000005 -sleek " +
			"-end 26163 -seed 1 -log tor_downqueue -logtime_us 3.2721795 -o x.log"},
		{"rccc", func() Scenario { s := labTrim(8, 500*units.Mbit, Scaled); s.CC = pds.CCRCCC; return s },
			"-tm x.cm -receiver_cc_only -linkspeed 41666.666"},
		{"incast.cm", incastCM,
			"-tm x.cm -sender_cc_only -linkspeed 100000 -mtu 4150 -tiers 3 -hop_latency 1.0000005 -q 43 -ecn 9 35 -trimsize 64 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPlan(t, tc.s())
			got := strings.Join(p.args("x.cm", "x.log", p.EndPs), " ")
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("args\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// htsim reads -linkspeed as a double × 1e6 truncated to bit/s and
// serialises at 8e12/bit/s truncated to ps: every ps/byte comes back, but
// under 2.8 Mbit/s, where no whole bit/s has it, the nearest does.
func TestLinkMbpsRoundTrips(t *testing.T) {
	for ps := int64(1); ps <= 100_000_000; ps = ps*11/10 + 1 {
		got := htsimPicosPerByte(htsimBitsPerSecond(ps))
		if miss := math.Abs(float64(got - ps)); ps <= 2_800_000 && miss != 0 || miss > float64(ps)*float64(ps)/8e12+1 {
			t.Errorf("%d ps/byte as %s Mbit/s: htsim serialises at %d", ps, linkMbps(ps), got)
		}
	}
	for ps, want := range map[int64]string{16000: "500", 32000: "250", 192: "41666.666", 384: "20833.333", 80: "100000", 191: "41884.816"} {
		if got := linkMbps(ps); got != want {
			t.Errorf("linkMbps(%d) = %s, want %s", ps, got, want)
		}
	}
}

// htsim reads µs as a double × 1e6 truncated to ps.
func TestMicrosRoundTrips(t *testing.T) {
	for _, ps := range []int64{0, 1, 999_999, 1_000_000, 1_099_296, 91_608_000, 3_272_179, 272_681_593, 9_999_999_999_999} {
		v, err := strconv.ParseFloat(micros(ps), 64)
		if got := int64(v * 1e6); err != nil || got != ps {
			t.Errorf("micros(%d) = %s: htsim reads %d ps", ps, micros(ps), got)
		}
	}
}

func TestPlanFatTreeSizes(t *testing.T) {
	var got []int
	for _, n := range []int{1, 15, 16, 53, 127} {
		s := incastCM()
		s.Senders = n
		p := mustPlan(t, s)
		got = append(got, p.Nodes, p.Receiver)
	}
	if want := []int{2, 1, 16, 15, 54, 53, 54, 53, 128, 127}; !slices.Equal(got, want) {
		t.Errorf("nodes, receiver: %v, want %v", got, want)
	}
}
