package qdisc

import (
	"math"
	"net"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Two-threshold marking (seed 001) through port_enqueue under BPF_PROG_RUN:
// decision for decision against aqm.TwoThresholdDecide with the draw
// pinned, the marking fractions with the kernel's own random numbers, the
// counters, and the outer header of IP-in-IP.

// twoThresholdClass: T1 100 kB, T2 300 kB, T2max 500 kB, ECT(1) up to 1/2
// at T2, CE up to 1/5 at T2max, in a 1 MiB buffer.
func twoThresholdClass() ClassConfig {
	return ClassConfig{Name: "wan", LimitBytes: units.MiB, ECN: ECNTwoThreshold,
		TwoThreshold: TwoThreshold{T1Bytes: 100_000, T2Bytes: 300_000, T2MaxBytes: 500_000, LightMaxP: 0.5, HeavyMaxP: 0.2}}
}

func twoThresholdConfig(cc ClassConfig) Config {
	cfg := DefaultConfig(units.Gbit)
	cfg.Classes[ClassRoCE] = cc
	return cfg
}

// model is the pure-Go reference of cc, in the programs' fixed point.
func model(cc *ClassConfig) aqm.TwoThresholdConfig {
	t := &cc.TwoThreshold
	return aqm.TwoThresholdConfig{T1: uint64(t.T1Bytes), T2: uint64(t.T2Bytes), T2Max: uint64(t.T2MaxBytes),
		LightMaxP: probToFixed(t.LightMaxP), HeavyMaxP: probToFixed(t.HeavyMaxP), DropNotECT: cc.WREDDrop}
}

// TestTwoThresholdMatchesModel pins the draw on each side of both
// probabilities at backlogs in every region, for every codepoint, IPv4 and
// IPv6, in both queue modes (the virtual queue decides under its lock).
func TestTwoThresholdMatchesModel(t *testing.T) {
	for _, mode := range []QueueMode{QueueVeth, QueueVirtual} {
		for _, drop := range []bool{false, true} {
			cc := twoThresholdClass()
			cc.WREDDrop = drop
			o := loadTest(t, twoThresholdConfig(cc), mode)
			m := model(&cc)
			n := 0
			for _, backlog := range []uint64{0, 99_999, 100_000, 150_000, 299_999, 300_000, 350_000, 499_999, 500_000, 900_000} {
				pce, pl := m.HeavyP(backlog), m.LightP(backlog)
				lh := pce
				if pce < aqm.ProbOne {
					lh += pl * (aqm.ProbOne - pce) >> 32
				}
				var draws []uint64
				for _, d := range []uint64{0, pce, lh, pl, math.MaxUint32} {
					draws = append(draws, d, d-1, d+1)
				}
				for _, draw := range draws {
					if draw > math.MaxUint32 {
						continue
					}
					for _, ecn := range []uint8{notECT, ect1, ect0, ce} {
						for _, v6 := range []bool{false, true} {
							want := aqm.TwoThresholdDecide(&m, backlog, aqm.ECN(ecn), uint32(draw))
							// The virtual queue's clock stands still:
							// nothing drains between packets.
							setBacklog(t, o, ClassRoCE, backlog)
							if err := o.SetRandom(uint32(draw)); err != nil {
								t.Fatal(err)
							}
							r := run(t, o.PortEnqueue, craft(t, pktSpec{v6: v6, dscp: 26, ecn: ecn, payload: 100}), skbCtx{})
							got := verdictOf(r, ecn)
							if got != want {
								t.Errorf("%s drop=%v backlog %d draw %d ecn %d v6=%v: %s (ret %d, ecn %d), model %s",
									mode, drop, backlog, draw, ecn, v6, got, r.ret, r.ecn, want)
							}
							if !v6 && r.ret == tcActOK && !ipv4ChecksumOK(r.out[14:34]) {
								t.Errorf("backlog %d draw %d: IPv4 checksum invalid after %s", backlog, draw, got)
							}
							n++
						}
					}
				}
			}
			t.Logf("%s, wred_drop %v: %d packets agree with the model", mode, drop, n)
		}
	}
}

// verdictOf reads what the program did to a packet that arrived with ecn.
func verdictOf(r runResult, ecn uint8) aqm.TwoThresholdVerdict {
	switch {
	case r.ret == tcActShot:
		return aqm.TwoThresholdDrop
	case r.ecn == ecn:
		return aqm.TwoThresholdPass
	case r.ecn == ce:
		return aqm.TwoThresholdHeavy
	case ecn == ect0 && r.ecn == ect1:
		return aqm.TwoThresholdLight
	}
	return aqm.TwoThresholdVerdict(255) // something else: never right
}

// TestTwoThresholdFractions counts marks with the kernel's random numbers
// in each region: none below T1; between T1 and T2 ECT(1) on the light
// line and no CE; above T2 CE on the RED-like curve, the ECT(0) packets it
// spares light-marked with LightMaxP. The counters agree with what the
// packets carry.
func TestTwoThresholdFractions(t *testing.T) {
	cc := twoThresholdClass()
	o := loadRandom(t, twoThresholdConfig(cc))
	m := model(&cc)
	const n = 20000
	pkt := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 100})
	for _, backlog := range []uint64{50_000, 150_000, 250_000, 350_000, 450_000, 600_000} {
		before := stats(t, o).Classes[ClassRoCE]
		var light, heavy int
		for range n {
			setBacklog(t, o, ClassRoCE, backlog)
			switch run(t, o.PortEnqueue, pkt, skbCtx{}).ecn {
			case ect1:
				light++
			case ce:
				heavy++
			}
		}
		after := stats(t, o).Classes[ClassRoCE]
		ph := float64(m.HeavyP(backlog)) / aqm.ProbOne
		pl := float64(m.LightP(backlog)) / aqm.ProbOne * (1 - ph)
		for _, f := range []struct {
			name string
			got  int
			want float64
		}{{"ECT(1)", light, pl}, {"CE", heavy, ph}} {
			frac := float64(f.got) / n
			// 5σ of the binomial; exact where the probability is 0 or 1.
			tol := 5 * math.Sqrt(f.want*(1-f.want)/n)
			if math.Abs(frac-f.want) > tol {
				t.Errorf("backlog %d: %s fraction %.4f, want %.4f ± %.4f", backlog, f.name, frac, f.want, tol)
			}
			t.Logf("backlog %d: %s fraction %.4f (curve %.4f ± %.4f)", backlog, f.name, frac, f.want, tol)
		}
		if d := after.LightMarked - before.LightMarked; d != uint64(light) {
			t.Errorf("backlog %d: light_marked +%d, packets marked ECT(1) %d", backlog, d, light)
		}
		if d := after.HeavyMarked - before.HeavyMarked; d != uint64(heavy) {
			t.Errorf("backlog %d: heavy_marked +%d, packets marked CE %d", backlog, d, heavy)
		}
		if d := after.CEMarkedECT0 - before.CEMarkedECT0; d != uint64(heavy) {
			t.Errorf("backlog %d: ce_marked_ect0 +%d, packets marked CE %d", backlog, d, heavy)
		}
	}
}

// loadRandom loads cfg with the kernel's random numbers (no test hooks),
// after loadTest's privilege check.
func loadRandom(tb testing.TB, cfg Config) *Objects {
	tb.Helper()
	loadTest(tb, cfg, QueueVeth)
	o, err := LoadObjects(cfg, QueueVeth, priorityBase, LoadOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { o.Close() })
	return o
}

// craftIPIP builds Ethernet + IPv4 (protocol 4, IP-in-IP) + IPv4 + UDP:
// outer and inner codepoints and DSCPs apart.
func craftIPIP(tb testing.TB, outerDSCP, outerECN, innerDSCP, innerECN uint8) []byte {
	tb.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		EthernetType: layers.EthernetTypeIPv4}
	outer := &layers.IPv4{Version: 4, IHL: 5, TOS: outerDSCP<<2 | outerECN, TTL: 64, Protocol: layers.IPProtocolIPv4,
		SrcIP: net.IPv4(203, 0, 113, 1), DstIP: net.IPv4(203, 0, 113, 2)}
	inner := &layers.IPv4{Version: 4, IHL: 5, TOS: innerDSCP<<2 | innerECN, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: net.IPv4(198, 18, 1, 2), DstIP: net.IPv4(198, 19, 0, 2)}
	udp := &layers.UDP{SrcPort: 4791, DstPort: 4791}
	udp.SetNetworkLayerForChecksum(inner)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, outer, inner, udp, gopacket.Payload(make([]byte, 100))); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestTwoThresholdIPIPOuterHeader: the port classifies and marks the first
// IP header, the outer one of IPv4 protocol 4 (seed 001: the egress PE
// reads the outer codepoint); the inner header, its checksum and the
// payload are untouched.
func TestTwoThresholdIPIPOuterHeader(t *testing.T) {
	cc := twoThresholdClass()
	o := loadTest(t, twoThresholdConfig(cc), QueueVeth)
	// Outer DSCP 26 (class 3); the inner DSCP 0 would be class 0, which
	// does not mark.
	for _, c := range []struct {
		backlog uint64
		draw    uint32
		want    uint8
		why     string
	}{
		{200_000, 0, ect1, "between T1 and T2, draw 0: light"},
		{600_000, math.MaxUint32, ce, "above T2max: CE"},
		{50_000, 0, ect0, "below T1: untouched"},
	} {
		in := craftIPIP(t, 26, ect0, 0, ect0)
		setBacklog(t, o, ClassRoCE, c.backlog)
		if err := o.SetRandom(c.draw); err != nil {
			t.Fatal(err)
		}
		before := stats(t, o).Classes
		r := run(t, o.PortEnqueue, in, skbCtx{})
		after := stats(t, o).Classes
		if after[ClassRoCE].EnqueuedPackets != before[ClassRoCE].EnqueuedPackets+1 {
			t.Fatalf("%s: not classified by the outer DSCP into class 3", c.why)
		}
		var ips []*layers.IPv4
		for _, l := range r.pkt.Layers() {
			if ip, ok := l.(*layers.IPv4); ok {
				ips = append(ips, ip)
			}
		}
		if len(ips) != 2 {
			t.Fatalf("%s: %d IPv4 headers decoded, want 2", c.why, len(ips))
		}
		if got := ips[0].TOS & 3; got != c.want {
			t.Errorf("%s: outer ECN %d, want %d", c.why, got, c.want)
		}
		if ips[0].TOS>>2 != 26 {
			t.Errorf("%s: outer DSCP %d, want 26", c.why, ips[0].TOS>>2)
		}
		if !ipv4ChecksumOK(r.out[14:34]) {
			t.Errorf("%s: outer checksum invalid", c.why)
		}
		// Everything after the outer header is as it was.
		if string(r.out[34:]) != string(in[34:]) {
			t.Errorf("%s: the inner packet changed", c.why)
		}
		if ips[1].TOS&3 != ect0 || !ipv4ChecksumOK(r.out[34:54]) {
			t.Errorf("%s: inner ECN %d (want ECT(0)) or checksum changed", c.why, ips[1].TOS&3)
		}
	}
}

// TestTwoThresholdValidate: T1 < T2 < T2max ≤ limit, probabilities in
// (0, 1]; each error names the field, the value and the range.
func TestTwoThresholdValidate(t *testing.T) {
	for _, c := range []struct {
		edit func(*TwoThreshold)
		want string
	}{
		{func(t *TwoThreshold) { t.T1Bytes = 300_000 }, "two-threshold: t2 (300000b) must be greater than t1 (300000b)"},
		{func(t *TwoThreshold) { t.T2MaxBytes = 2 * units.MiB }, "two-threshold: t2_max (2mb) must be greater than t2 (300000b) and at most limit (1mb)"},
		{func(t *TwoThreshold) { t.T2MaxBytes = 300_000 }, "two-threshold: t2_max (300000b) must be greater than t2 (300000b)"},
		{func(t *TwoThreshold) { t.LightMaxP = 0 }, "two-threshold: light_max_p (0) must be in (0, 1]"},
		{func(t *TwoThreshold) { t.HeavyMaxP = 1.5 }, "two-threshold: heavy_max_p (1.5) must be in (0, 1]"},
	} {
		cc := twoThresholdClass()
		c.edit(&cc.TwoThreshold)
		cfg := twoThresholdConfig(cc)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", cc.TwoThreshold, err, c.want)
		}
	}
	ok := twoThresholdConfig(twoThresholdClass())
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}
