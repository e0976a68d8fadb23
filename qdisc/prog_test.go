package qdisc

import (
	"bytes"
	"encoding/binary"
	"math"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// ECN codepoints (RFC 3168).
const (
	notECT = 0
	ect1   = 1
	ect0   = 2
	ce     = 3
)

const (
	tcActOK   = 0
	tcActShot = 2
	// tcActNext is TC_ACT_UNSPEC, TCX_NEXT: port_dequeue's pass, so that a
	// program after it at the peer's ingress still runs.
	tcActNext = 0xffffffff
)

// skbCtx is the BPF_PROG_RUN context of a TC program.
type skbCtx = bpf.SkBuff

func testConfig() Config {
	cfg := DefaultConfig(units.Gbit)
	cfg.Classes[ClassRoCE] = ClassConfig{Name: "roce", LimitBytes: 1 * units.MiB, ECN: ECNStep, MinThBytes: 10000}
	return cfg
}

func loadTest(tb testing.TB, cfg Config, mode QueueMode) *Objects {
	tb.Helper()
	labtest.RequireRoot(tb)
	o, err := LoadObjects(cfg, mode, priorityBase, LoadOptions{TestHooks: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { o.Close() })
	return o
}

type pktSpec struct {
	v6      bool
	dscp    uint8
	ecn     uint8
	payload int
	vlans   int
}

// craft builds Ethernet [+ VLAN tags] + IPv4/IPv6 + UDP with valid checksums.
func craft(tb testing.TB, p pktSpec) []byte {
	tb.Helper()
	eth := &layers.Ethernet{
		SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
	}
	var ls []gopacket.SerializableLayer
	ls = append(ls, eth)
	inner := layers.EthernetTypeIPv4
	if p.v6 {
		inner = layers.EthernetTypeIPv6
	}
	next := &eth.EthernetType
	for i := 0; i < p.vlans; i++ {
		*next = layers.EthernetTypeDot1Q
		v := &layers.Dot1Q{VLANIdentifier: uint16(100 + i)}
		ls = append(ls, v)
		next = &v.Type
	}
	*next = inner
	udp := &layers.UDP{SrcPort: 4791, DstPort: 4791}
	tos := p.dscp<<2 | p.ecn
	if p.v6 {
		ip := &layers.IPv6{Version: 6, TrafficClass: tos, FlowLabel: 0xabcde, NextHeader: layers.IPProtocolUDP, HopLimit: 64,
			SrcIP: net.ParseIP("2001:db8::1"), DstIP: net.ParseIP("2001:db8::2")}
		udp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, ip)
	} else {
		ip := &layers.IPv4{Version: 4, IHL: 5, TOS: tos, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
			SrcIP: net.IPv4(198, 18, 1, 2), DstIP: net.IPv4(198, 19, 0, 2)}
		udp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, ip)
	}
	ls = append(ls, udp, gopacket.Payload(bytes.Repeat([]byte{0xab}, p.payload)))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

type runResult struct {
	ret  uint32
	out  []byte
	ctx  skbCtx
	pkt  gopacket.Packet
	ecn  uint8
	dscp uint8
}

func run(tb testing.TB, prog *ebpf.Program, data []byte, in skbCtx) runResult {
	tb.Helper()
	var r runResult
	r.out = make([]byte, len(data)+256)
	ret, err := prog.Run(&ebpf.RunOptions{Data: data, DataOut: r.out, Context: in, ContextOut: &r.ctx})
	if err != nil {
		tb.Fatalf("prog run: %v", err)
	}
	r.ret = ret
	r.out = r.out[:len(data)]
	r.pkt = gopacket.NewPacket(r.out, layers.LayerTypeEthernet, gopacket.Default)
	if ip, ok := r.pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		r.ecn, r.dscp = ip.TOS&3, ip.TOS>>2
	}
	if ip, ok := r.pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		r.ecn, r.dscp = ip.TrafficClass&3, ip.TrafficClass>>2
	}
	return r
}

func setBacklog(tb testing.TB, o *Objects, class ClassID, bytes uint64) {
	tb.Helper()
	var st bpf.PortClassState
	if err := o.ClassQueue.Lookup(uint32(class), &st); err != nil {
		tb.Fatal(err)
	}
	st.BacklogBytes = bytes
	if err := o.ClassQueue.Put(uint32(class), &st); err != nil {
		tb.Fatal(err)
	}
}

func stats(tb testing.TB, o *Objects) Stats {
	tb.Helper()
	s, err := readStats(&o.PortMaps, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// ipv4ChecksumOK recomputes the header checksum over the whole header.
func ipv4ChecksumOK(hdr []byte) bool {
	var sum uint32
	for i := 0; i+1 < len(hdr); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(hdr[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum) == 0xffff
}

func TestClassifyByDSCP(t *testing.T) {
	o := loadTest(t, DefaultConfig(units.Gbit), QueueVeth)
	for _, tc := range []struct {
		name  string
		p     pktSpec
		class ClassID
	}{
		{"roce v4", pktSpec{dscp: 26, ecn: ect0}, ClassRoCE},
		{"cnp v4", pktSpec{dscp: 48}, ClassCNP},
		{"best effort v4", pktSpec{dscp: 0}, ClassBestEffort},
		{"other dscp v4", pktSpec{dscp: 46}, ClassBestEffort},
		{"roce v6", pktSpec{v6: true, dscp: 26, ecn: ect0}, ClassRoCE},
		{"cnp v6", pktSpec{v6: true, dscp: 48}, ClassCNP},
		{"roce behind a vlan tag", pktSpec{dscp: 26, vlans: 1}, ClassRoCE},
		{"roce behind qinq", pktSpec{v6: true, dscp: 26, vlans: 2}, ClassRoCE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, o.PortEnqueue, craft(t, tc.p), skbCtx{})
			if r.ret != tcActOK {
				t.Fatalf("verdict %d, want pass", r.ret)
			}
			if want := uint32(priorityBase) + uint32(tc.class); r.ctx.Priority != want {
				t.Errorf("skb->priority = %#x, want %#x (class %d)", r.ctx.Priority, want, tc.class)
			}
			if r.dscp != tc.p.dscp {
				t.Errorf("dscp rewritten: %d -> %d", tc.p.dscp, r.dscp)
			}
		})
	}
	// Remap live: DSCP 46 to class 5.
	cfg := DefaultConfig(units.Gbit)
	cfg.DSCPClass[46] = 5
	if err := o.writeConfig(cfg, QueueVeth, priorityBase); err != nil {
		t.Fatal(err)
	}
	r := run(t, o.PortEnqueue, craft(t, pktSpec{dscp: 46}), skbCtx{})
	if want := uint32(priorityBase) + 5; r.ctx.Priority != want {
		t.Errorf("after remap: skb->priority = %#x, want %#x", r.ctx.Priority, want)
	}
}

func TestMarkingByCodepoint(t *testing.T) {
	cfg := testConfig() // class 3: step, K = 10000 bytes
	o := loadTest(t, cfg, QueueVeth)
	for _, v6 := range []bool{false, true} {
		for _, tc := range []struct {
			name    string
			in, out uint8
		}{
			{"ect0 -> ce", ect0, ce},
			{"ect1 -> ce", ect1, ce},
			{"not-ect never marked", notECT, notECT},
			{"ce stays ce", ce, ce},
		} {
			name := tc.name + map[bool]string{false: " v4", true: " v6"}[v6]
			t.Run(name, func(t *testing.T) {
				setBacklog(t, o, ClassRoCE, 20000) // above K
				before := stats(t, o).Classes[ClassRoCE]
				in := craft(t, pktSpec{v6: v6, dscp: 26, ecn: tc.in, payload: 100})
				r := run(t, o.PortEnqueue, in, skbCtx{})
				if r.ret != tcActOK {
					t.Fatalf("verdict %d, want pass", r.ret)
				}
				if r.ecn != tc.out || r.dscp != 26 {
					t.Fatalf("ecn %d dscp %d, want ecn %d dscp 26", r.ecn, r.dscp, tc.out)
				}
				if v6 {
					ip := r.pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
					if ip.FlowLabel != 0xabcde {
						t.Errorf("flow label changed to %#x", ip.FlowLabel)
					}
				} else {
					if !ipv4ChecksumOK(r.out[14:34]) {
						t.Errorf("IPv4 header checksum invalid after marking: % x", r.out[14:34])
					}
				}
				// Only the ECN bits may change.
				diff := 0
				for i := range in {
					if in[i] != r.out[i] {
						diff++
					}
				}
				if tc.in == tc.out && diff != 0 {
					t.Errorf("unmarked packet changed in %d bytes", diff)
				}
				after := stats(t, o).Classes[ClassRoCE]
				marks := after.CEMarked() - before.CEMarked()
				if want := uint64(map[bool]int{true: 1}[tc.in != tc.out]); marks != want {
					t.Errorf("CE marks counted %d, want %d", marks, want)
				}
				switch tc.in {
				case ect0:
					if after.CEMarkedECT0-before.CEMarkedECT0 != 1 || after.ArrivedECT0-before.ArrivedECT0 != 1 {
						t.Errorf("ect0 counters not advanced")
					}
				case ect1:
					if after.CEMarkedECT1-before.CEMarkedECT1 != 1 || after.ArrivedECT1-before.ArrivedECT1 != 1 {
						t.Errorf("ect1 counters not advanced")
					}
				case ce:
					if after.ArrivedCE-before.ArrivedCE != 1 {
						t.Errorf("ce arrival not counted")
					}
				case notECT:
					if after.ArrivedNotECT-before.ArrivedNotECT != 1 {
						t.Errorf("not-ect arrival not counted")
					}
				}
			})
		}
	}
}

func TestMalformedAndNonIP(t *testing.T) {
	o := loadTest(t, DefaultConfig(units.Gbit), QueueVeth)
	good := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 20})
	vlan4 := craft(t, pktSpec{dscp: 26, vlans: 1, payload: 20})
	vlan6 := craft(t, pktSpec{v6: true, dscp: 26, vlans: 1, payload: 20})
	badIHL := bytes.Clone(good)
	badIHL[14] = 0x43 // version 4, ihl 3
	longIHL := bytes.Clone(good)[:14+20+4]
	longIHL[14] = 0x4f // ihl 15 = 60 bytes, packet ends before
	badVersion := bytes.Clone(good)
	badVersion[14] = 0x65
	arp := append([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x06}, make([]byte, 28)...)
	for _, tc := range []struct {
		name      string
		data      []byte
		ret       uint32
		malformed uint64
		nonIP     uint64
	}{
		// BPF_PROG_RUN refuses IP frames shorter than an IP header, so
		// cut headers are tested behind a tag, where only the program's
		// own bounds checks stand guard.
		{"ipv4 header cut short behind a tag", vlan4[:14+4+12], tcActShot, 1, 0},
		{"ipv6 header cut short behind a tag", vlan6[:14+4+30], tcActShot, 1, 0},
		{"ihl below 5", badIHL, tcActShot, 1, 0},
		{"ihl beyond the packet", longIHL, tcActShot, 1, 0},
		{"ethertype ipv4, version 6", badVersion, tcActShot, 1, 0},
		{"vlan tag cut short", append(bytes.Clone(good[:12]), 0x81, 0x00, 0x00), tcActShot, 1, 0},
		{"arp passes", arp, tcActOK, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := stats(t, o).Port
			r := run(t, o.PortEnqueue, tc.data, skbCtx{})
			after := stats(t, o).Port
			if r.ret != tc.ret {
				t.Errorf("verdict %d, want %d", r.ret, tc.ret)
			}
			if got := after.MalformedPackets - before.MalformedPackets; got != tc.malformed {
				t.Errorf("malformed counted %d, want %d", got, tc.malformed)
			}
			if got := after.NonIPPackets - before.NonIPPackets; got != tc.nonIP {
				t.Errorf("non-ip counted %d, want %d", got, tc.nonIP)
			}
		})
	}
	// ARP goes to the default class and, unstampable, outside the accounting.
	s := stats(t, o)
	if s.Port.UnaccountedPackets != 1 {
		t.Errorf("unaccounted = %d, want 1 (the ARP frame)", s.Port.UnaccountedPackets)
	}
	for _, c := range s.Classes {
		if c.EnqueuedPackets != 0 {
			t.Errorf("class %d enqueued %d malformed/non-IP packets", c.Class, c.EnqueuedPackets)
		}
	}
}

// TestVLANInBandMarked: a frame with its tag in the data cannot be stamped,
// but still gets its class's marking decision.
func TestVLANInBandMarked(t *testing.T) {
	o := loadTest(t, testConfig(), QueueVeth)
	setBacklog(t, o, ClassRoCE, 20000)
	r := run(t, o.PortEnqueue, craft(t, pktSpec{dscp: 26, ecn: ect0, vlans: 1, payload: 50}), skbCtx{})
	if r.ret != tcActOK || r.ecn != ce {
		t.Fatalf("verdict %d ecn %d, want pass and CE", r.ret, r.ecn)
	}
	ip := r.pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	if !ipv4ChecksumOK(ip.Contents) {
		t.Errorf("checksum invalid behind vlan tag")
	}
	s := stats(t, o)
	if s.Port.VLANPackets != 1 || s.Port.UnaccountedCEMarkedPackets != 1 {
		t.Errorf("port counters %+v: want 1 vlan packet, 1 unaccounted CE mark", s.Port)
	}
}

func TestStepThreshold(t *testing.T) {
	o := loadTest(t, testConfig(), QueueVeth)
	for _, tc := range []struct {
		backlog uint64
		mark    bool
	}{{0, false}, {9999, false}, {10000, false}, {10001, true}, {500000, true}} {
		setBacklog(t, o, ClassRoCE, tc.backlog)
		r := run(t, o.PortEnqueue, craft(t, pktSpec{dscp: 26, ecn: ect0}), skbCtx{})
		if got := r.ecn == ce; got != tc.mark {
			t.Errorf("backlog %d: marked %v, want %v (K = 10000)", tc.backlog, got, tc.mark)
		}
	}
}

func wredConfig() Config {
	cfg := DefaultConfig(units.Gbit)
	cfg.Classes[ClassRoCE] = ClassConfig{Name: "roce", LimitBytes: 2 * units.MiB, ECN: ECNWRED, MinThBytes: 100000, MaxThBytes: 500000, MaxP: 0.2}
	return cfg
}

// TestWREDDeterministic checks the curve point by point with the random draw
// pinned on each side of the probability.
func TestWREDDeterministic(t *testing.T) {
	o := loadTest(t, wredConfig(), QueueVeth)
	const min, max, maxP = 100000, 500000, 0.2
	for _, backlog := range []uint64{0, 99999, 100000, 150000, 300000, 499999, 500000, 1000000} {
		var p float64
		switch {
		case backlog < min:
			p = 0
		case backlog >= max:
			p = 1
		default:
			p = maxP * float64(backlog-min) / float64(max-min)
		}
		threshold := p * (1 << 32) // marks when draw < threshold
		for _, draw := range []uint64{0, uint64(math.Max(threshold-2, 0)), uint64(threshold + 2), math.MaxUint32} {
			if draw > math.MaxUint32 {
				continue
			}
			want := float64(draw) < threshold
			if p == 0 {
				want = false
			}
			if p == 1 {
				want = true
			}
			if err := o.SetRandom(uint32(draw)); err != nil {
				t.Fatal(err)
			}
			setBacklog(t, o, ClassRoCE, backlog)
			r := run(t, o.PortEnqueue, craft(t, pktSpec{dscp: 26, ecn: ect0}), skbCtx{})
			if got := r.ecn == ce; got != want {
				t.Errorf("backlog %d, p %.4f, draw %d: marked %v, want %v", backlog, p, draw, got, want)
			}
		}
	}
}

// TestWREDStatistical checks the marking fraction with the kernel's own
// random numbers.
func TestWREDStatistical(t *testing.T) {
	labtest.RequireRoot(t)
	o, err := LoadObjects(wredConfig(), QueueVeth, priorityBase, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	const n = 20000
	pkt := craft(t, pktSpec{dscp: 26, ecn: ect0})
	for _, backlog := range []uint64{200000, 400000} {
		setBacklog(t, o, ClassRoCE, backlog)
		before := stats(t, o).Classes[ClassRoCE]
		for range n {
			// Dequeue what we enqueued, so the backlog stays put.
			run(t, o.PortEnqueue, pkt, skbCtx{})
			setBacklog(t, o, ClassRoCE, backlog)
		}
		after := stats(t, o).Classes[ClassRoCE]
		frac := float64(after.CEMarkedECT0-before.CEMarkedECT0) / n
		want := 0.2 * float64(backlog-100000) / 400000
		sigma := math.Sqrt(want * (1 - want) / n)
		if math.Abs(frac-want) > 5*sigma {
			t.Errorf("backlog %d: marked fraction %.4f, want %.4f ± %.4f (5σ)", backlog, frac, want, 5*sigma)
		}
		t.Logf("backlog %d: marked fraction %.4f (curve %.4f)", backlog, frac, want)
	}
}

func TestTailDropAndWREDDrop(t *testing.T) {
	cfg := wredConfig()
	cfg.Classes[ClassRoCE].WREDDrop = true
	o := loadTest(t, cfg, QueueVeth)
	pkt := craft(t, pktSpec{dscp: 26, ecn: notECT, payload: 1000})
	limit := uint64(cfg.Classes[ClassRoCE].LimitBytes)

	// At the limit: tail drop, and the claimed space is given back.
	setBacklog(t, o, ClassRoCE, limit-uint64(len(pkt))+1)
	if r := run(t, o.PortEnqueue, pkt, skbCtx{}); r.ret != tcActShot {
		t.Fatalf("over the limit: verdict %d, want drop", r.ret)
	}
	s := stats(t, o).Classes[ClassRoCE]
	if s.DroppedLimitPackets != 1 || s.BacklogBytes != limit-uint64(len(pkt))+1 {
		t.Errorf("limit drop: dropped %d backlog %d", s.DroppedLimitPackets, s.BacklogBytes)
	}
	// Exactly fits: passes.
	setBacklog(t, o, ClassRoCE, 0)
	if err := o.SetRandom(math.MaxUint32); err != nil { // never below p
		t.Fatal(err)
	}
	if r := run(t, o.PortEnqueue, pkt, skbCtx{}); r.ret != tcActOK {
		t.Fatalf("empty queue: verdict %d, want pass", r.ret)
	}
	// Not-ECT above max_th with the drop profile: dropped, not marked.
	setBacklog(t, o, ClassRoCE, 600000)
	if r := run(t, o.PortEnqueue, pkt, skbCtx{}); r.ret != tcActShot {
		t.Fatalf("not-ect above max_th with wred_drop: verdict %d, want drop", r.ret)
	}
	if s := stats(t, o).Classes[ClassRoCE]; s.DroppedWREDPackets != 1 {
		t.Errorf("wred drops %d, want 1", s.DroppedWREDPackets)
	}
	// ECT above max_th: marked, not dropped.
	r := run(t, o.PortEnqueue, craft(t, pktSpec{dscp: 26, ecn: ect0}), skbCtx{})
	if r.ret != tcActOK || r.ecn != ce {
		t.Errorf("ect0 above max_th: verdict %d ecn %d, want pass CE", r.ret, r.ecn)
	}
	// Without the drop profile Not-ECT passes untouched.
	cfg.Classes[ClassRoCE].WREDDrop = false
	if err := o.writeConfig(cfg, QueueVeth, priorityBase); err != nil {
		t.Fatal(err)
	}
	if r := run(t, o.PortEnqueue, pkt, skbCtx{}); r.ret != tcActOK || r.ecn != notECT {
		t.Errorf("not-ect without wred_drop: verdict %d ecn %d, want pass not-ect", r.ret, r.ecn)
	}
}

// TestDequeueAccounting enqueues, then feeds the stamped packet to the
// dequeue program at a later time: backlog returns to zero, the sojourn is
// measured, and enqueued = dequeued + dropped + backlog.
func TestDequeueAccounting(t *testing.T) {
	o := loadTest(t, DefaultConfig(units.Gbit), QueueVeth)
	const t0, wait = 1_000_000_000, 37_000 // ns
	if err := o.SetClock(t0); err != nil {
		t.Fatal(err)
	}
	pkt := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 500})
	enq := run(t, o.PortEnqueue, pkt, skbCtx{})
	if enq.ctx.Tstamp == 0 {
		t.Fatal("enqueue did not stamp the packet")
	}
	if got := stats(t, o).Classes[ClassRoCE]; got.BacklogBytes != uint64(len(pkt)) || got.BacklogPackets != 1 {
		t.Fatalf("after enqueue: backlog %d bytes %d packets", got.BacklogBytes, got.BacklogPackets)
	}
	if err := o.SetClock(t0 + wait); err != nil {
		t.Fatal(err)
	}
	deq := run(t, o.PortDequeue, enq.out, skbCtx{Tstamp: enq.ctx.Tstamp})
	if deq.ret != tcActNext {
		t.Fatalf("dequeue verdict %d", deq.ret)
	}
	checkStampReleased(t, deq.ctx.Tstamp)
	c := stats(t, o).Classes[ClassRoCE]
	if c.DequeuedCEPackets != 0 {
		t.Errorf("dequeued CE %d, want 0 (the packet left ECT(0))", c.DequeuedCEPackets)
	}
	if c.BacklogBytes != 0 || c.BacklogPackets != 0 || c.DequeuedPackets != 1 {
		t.Errorf("after dequeue: backlog %d/%d, dequeued %d", c.BacklogBytes, c.BacklogPackets, c.DequeuedPackets)
	}
	if err := c.CheckInvariant(); err != nil {
		t.Error(err)
	}
	// The stamp loses the low 8 bits: the sojourn is exact to 256 ns.
	if d := int64(c.SojournSum) - wait; d < 0 || d > 256 {
		t.Errorf("sojourn %d ns, want %d ns (+ up to 256)", int64(c.SojournSum), wait)
	}
	if c.Sojourn[15] != 1 { // 37 µs is in [2^15, 2^16) ns
		t.Errorf("sojourn histogram %v, want one sample in bucket 15", c.Sojourn)
	}
	// A packet that never went through enqueue is not counted.
	run(t, o.PortDequeue, pkt, skbCtx{})
	if s := stats(t, o); s.Port.DequeueUnstampedPackets != 1 || s.Classes[ClassRoCE].DequeuedPackets != 1 {
		t.Errorf("unstamped packet: unstamped %d, dequeued %d", s.Port.DequeueUnstampedPackets, s.Classes[ClassRoCE].DequeuedPackets)
	}
}

// TestVirtualQueue drives the single-ended mode with a controlled clock: the
// queue drains at the configured rate and the sojourn is known on arrival.
func TestVirtualQueue(t *testing.T) {
	cfg := testConfig() // 1 Gbit/s = 125 bytes/µs, step K = 10000 bytes
	o := loadTest(t, cfg, QueueVirtual)
	pkt := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 1000 - 42})
	if len(pkt) != 1000 {
		t.Fatalf("packet is %d bytes, want 1000", len(pkt))
	}
	at := func(ns uint64) runResult {
		if err := o.SetClock(ns); err != nil {
			t.Fatal(err)
		}
		return run(t, o.PortEnqueue, pkt, skbCtx{})
	}
	const t0 = 1_000_000_000
	// A burst of 12 packets at t0: the 12th finds 11000 bytes > K.
	for i := range 12 {
		r := at(t0)
		if mark := r.ecn == ce; mark != (i == 11) {
			t.Errorf("burst packet %d: marked %v", i, mark)
		}
	}
	c := stats(t, o).Classes[ClassRoCE]
	if c.BacklogBytes != 12000 || c.BacklogPackets != 12 {
		t.Fatalf("after the burst: backlog %d bytes %d packets", c.BacklogBytes, c.BacklogPackets)
	}
	// 40 µs later 5000 bytes have left: the packet finds 7000 bytes, which
	// it will wait 56 µs for.
	hist := c.Sojourn
	r := at(t0 + 40_000)
	if r.ecn == ce {
		t.Error("7000 bytes queued < K, but marked")
	}
	c = stats(t, o).Classes[ClassRoCE]
	if c.DequeuedBytes != 5000 || c.BacklogBytes != 8000 {
		t.Errorf("after 40 µs: dequeued %d bytes, backlog %d; want 5000 and 8000", c.DequeuedBytes, c.BacklogBytes)
	}
	if c.Sojourn[15] != hist[15]+1 { // 56 µs in [32.8, 65.5) µs
		t.Errorf("sojourn histogram %v -> %v: want the 56 µs sample in bucket 15", hist, c.Sojourn)
	}
	// The burst waited 0, 8, ... 88 µs, then 56 µs: 584 µs in all.
	if c.SojournSum != 584*time.Microsecond {
		t.Errorf("sojourn sum %v, want 584µs", c.SojournSum)
	}
	// Long after, the queue is empty and the counters balance.
	at(t0 + 1_000_000)
	at(t0 + 2_000_000)
	c = stats(t, o).Classes[ClassRoCE]
	if c.BacklogBytes != 1000 || c.BacklogPackets != 1 {
		t.Errorf("idle queue then one packet: backlog %d/%d, want 1000/1", c.BacklogBytes, c.BacklogPackets)
	}
	if err := c.CheckInvariant(); err != nil {
		t.Error(err)
	}
}

func TestValidate(t *testing.T) {
	bad := func(mut func(*Config)) error {
		c := DefaultConfig(units.Gbit)
		mut(&c)
		return c.Validate()
	}
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"zero rate", func(c *Config) { c.Rate = 0 }, "rate (0bit) must be at least 640kbit"},
		{"rate below the minimum", func(c *Config) { c.Rate = 64000 }, "rate (64kbit) must be at least 640kbit"},
		{"min >= max", func(c *Config) { c.Classes[3].MinThBytes = 2 * units.MiB; c.Classes[3].MaxThBytes = 50 * units.KiB },
			"class 3: wred: max_th (50kb) must be greater than min_th (2mb)"},
		{"max_p zero", func(c *Config) { c.Classes[3].MaxP = 0 }, "class 3: wred: max_p (0) must be in (0, 1]"},
		{"max_p above 1", func(c *Config) { c.Classes[3].MaxP = 1.5 }, "max_p (1.5) must be in (0, 1]"},
		{"limit zero", func(c *Config) { c.Classes[0].LimitBytes = 0 }, "class 0: limit (0b) must be greater than 0"},
		{"max_th over limit", func(c *Config) { c.Classes[3].LimitBytes = 512 * units.KiB }, "max_th (1000kb) must not exceed limit (512kb)"},
		{"class out of range", func(c *Config) { c.DSCPClass[10] = 8 }, "dscp 10: class (8) must be 0 to 7"},
		{"default class out of range", func(c *Config) { c.DefaultClass = 9 }, "default_class (9) must be 0 to 7"},
		{"step K at limit", func(c *Config) { c.Classes[1].ECN = ECNStep; c.Classes[1].MinThBytes = c.Classes[1].LimitBytes }, "step: K (1mb) must be below limit (1mb)"},
		{"tcn without threshold", func(c *Config) { c.Classes[3].ECN = ECNTCN }, "class 3: tcn: ins_target (0us) must be greater than 0 and at most 4s"},
		{"codel interval too long", func(c *Config) { c.Classes[3] = codelClass(5*time.Millisecond, 5*time.Second) },
			"class 3: codel: interval (5s) must be greater than 0 and at most 4s"},
		{"ecnsharp pst above ins", func(c *Config) {
			c.Classes[3] = sharpClass(100*time.Microsecond, 150*time.Microsecond, 200*time.Microsecond)
		},
			"class 3: ecnsharp: pst_target (150us) must be below ins_target (100us) (force_targets to allow)"},
		{"ecnsharp curve without max_p", func(c *Config) {
			c.Classes[3] = sharpClass(100*time.Microsecond, 50*time.Microsecond, 200*time.Microsecond)
			c.Classes[3].InsMax = 300 * time.Microsecond
		}, "ecnsharp: max_p (0) must be in (0, 1] for the probabilistic curve"},
		{"ecnsharp ins_max below ins", func(c *Config) {
			c.Classes[3] = sharpClass(100*time.Microsecond, 50*time.Microsecond, 200*time.Microsecond)
			c.Classes[3].InsMax, c.Classes[3].MaxP = 80*time.Microsecond, 0.1
		}, "ecnsharp: ins_max (80us) must be 0 (cut-off) or above ins_target (100us)"},
		{"ecnsharp bytes without queue signal", func(c *Config) {
			c.Classes[3] = sharpClass(100*time.Microsecond, 50*time.Microsecond, 200*time.Microsecond)
			c.Classes[3].PstTargetBytes = 1000
		}, "the byte thresholds (ins_target_bytes 0b, ins_max_bytes 0b, pst_target_bytes 1000b) need queue_signal"},
		{"ecnsharp queue signal with durations", func(c *Config) {
			c.Classes[3] = sharpClass(100*time.Microsecond, 50*time.Microsecond, 200*time.Microsecond)
			c.Classes[3].QueueSignal = true
		}, "queue_signal compares bytes"},
		{"sqrt law outside ecnsharp", func(c *Config) { c.Classes[3].SqrtLaw = true }, "wred: sqrt_law and queue_signal are ecnsharp options"},
		{"ppfc xon without xoff", func(c *Config) { c.Classes[3].XonBytes = 1000 }, "class 3: ppfc: xon (1000b) needs xoff (0: PPFC off)"},
		{"ppfc xoff over limit", func(c *Config) { c.Classes[3].XoffBytes = 3 * units.MiB }, "class 3: ppfc: xoff (3mb) must not exceed limit (2mb)"},
		{"ppfc xon at xoff", func(c *Config) { c.Classes[3].XoffBytes, c.Classes[3].XonBytes = units.MiB, units.MiB },
			"class 3: ppfc: xon (1mb) must be below xoff (1mb)"},
		{"ppfc alarm without xoff", func(c *Config) { c.Classes[3].AlarmBytes = 600 * units.KiB }, "class 3: ppfc: alarm (600kb) needs xoff (0: PPFC off)"},
		{"ppfc alarm at xon", func(c *Config) {
			c.Classes[3].XoffBytes, c.Classes[3].XonBytes, c.Classes[3].AlarmBytes = units.MiB, 512*units.KiB, 512*units.KiB
		}, "class 3: ppfc: alarm (512kb) must be above xon (512kb) and below xoff (1mb), or 0 (off)"},
		{"ppfc alarm at xoff", func(c *Config) {
			c.Classes[3].XoffBytes, c.Classes[3].XonBytes, c.Classes[3].AlarmBytes = units.MiB, 512*units.KiB, units.MiB
		}, "class 3: ppfc: alarm (1mb) must be above xon (512kb) and below xoff (1mb), or 0 (off)"},
	} {
		err := bad(tc.mut)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	if c := DefaultConfig(100 * units.Mbit); c.Validate() != nil {
		t.Errorf("default config invalid: %v", c.Validate())
	}
	c := DefaultConfig(units.Gbit)
	c.Classes[3].XoffBytes, c.Classes[3].XonBytes, c.Classes[3].AlarmBytes = units.MiB, 512*units.KiB, 768*units.KiB
	if err := c.Validate(); err != nil {
		t.Errorf("xon < alarm < xoff: %v", err)
	}
}

func codelClass(target, interval time.Duration) ClassConfig {
	return ClassConfig{Name: "roce", LimitBytes: units.MiB, ECN: ECNCoDel, Target: target, Interval: interval}
}

func sharpClass(ins, pst, interval time.Duration) ClassConfig {
	return ClassConfig{Name: "roce", LimitBytes: units.MiB, ECN: ECNSharp, InsTarget: ins, PstTarget: pst, PstInterval: interval}
}

func TestValidateAQMAccepts(t *testing.T) {
	c := DefaultConfig(units.Gbit)
	c.Classes[1] = sharpClass(100*time.Microsecond, 150*time.Microsecond, 200*time.Microsecond)
	c.Classes[1].ForceTargets = true
	c.Classes[2] = codelClass(85*time.Microsecond, 200*time.Microsecond)
	c.Classes[3] = sharpClass(100*time.Microsecond, 50*time.Microsecond, 200*time.Microsecond)
	c.Classes[3].InsMax, c.Classes[3].MaxP, c.Classes[3].SqrtLaw = 400*time.Microsecond, 0.2, true
	c.Classes[4] = ClassConfig{LimitBytes: units.MiB, ECN: ECNSharp, QueueSignal: true,
		InsTargetBytes: 250000, PstTargetBytes: 100000, PstInterval: 200 * time.Microsecond}
	c.Classes[5] = ClassConfig{LimitBytes: units.MiB, ECN: ECNTCN, InsTarget: 100 * time.Microsecond, WREDDrop: true}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func TestLeafRatesNeverExceedPort(t *testing.T) {
	for _, rate := range []units.Rate{MinRate, units.Mbit, 100 * units.Mbit, 400 * units.Gbit} {
		for strict := 0; strict <= NumClasses; strict++ {
			cfg := DefaultConfig(rate)
			for i := range cfg.Classes {
				cfg.Classes[i].Strict = i < strict
			}
			var sum uint64
			for _, r := range leafRates(&cfg) {
				if r == 0 {
					t.Errorf("rate %s, %d strict: a class got no guarantee", rate, strict)
				}
				sum += r
			}
			if sum > uint64(rate) {
				t.Errorf("rate %s, %d strict: guarantees add up to %d bit/s", rate, strict, sum)
			}
		}
	}
}

// checkStampReleased: the dequeue hook left a delivery time that is no
// port's (no magic in the low byte) and not 0, so the stack stamps the
// packet's receive time as it delivers it (port.c port_dequeue).
func checkStampReleased(t *testing.T, tstamp uint64) {
	t.Helper()
	if tstamp == 0 || tstamp&0xff != 0 {
		t.Errorf("dequeue left the stamp %#x on the packet: want a delivery time with a low byte of 0", tstamp)
	}
}
