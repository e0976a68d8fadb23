package tunnel

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// TC verdicts as the programs return them.
const (
	verdictNext = 0xffffffff // TC_ACT_UNSPEC: TCX_NEXT
	verdictShot = 2
)

var (
	peLocal  = netip.MustParseAddr("198.18.100.1")
	peRemote = netip.MustParseAddr("198.18.100.2")
	hostA    = netip.MustParseAddr("198.18.1.10") // behind this PE
	hostB    = netip.MustParseAddr("198.19.2.10") // behind the remote PE
	dcB      = netip.MustParsePrefix("198.19.2.0/24")
)

// testPE loads the programs with the test clock and configures them
// without attaching.
type testPE struct {
	*PE
	objs bpf.TunnelObjects
}

func loadTestPE(t *testing.T, cfg Config) *testPE {
	t.Helper()
	labtest.RequireRoot(t)
	spec, err := bpf.LoadTunnel()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Variables[bpf.TunnelVarTestHooks].Set(uint8(1)); err != nil {
		t.Fatal(err)
	}
	tp := &testPE{}
	if err := spec.LoadAndAssign(&tp.objs, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.objs.Close() })
	tp.PE = &PE{ns: netns.None(), maps: tp.objs.TunnelMaps, progs: tp.objs.TunnelPrograms}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := tp.write(cfg); err != nil {
		t.Fatal(err)
	}
	return tp
}

func (tp *testPE) setClock(t *testing.T, d time.Duration) {
	t.Helper()
	if err := tp.objs.TestNowNs.Set(uint64(d)); err != nil {
		t.Fatal(err)
	}
}

func (tp *testPE) stats(t *testing.T) Stats {
	t.Helper()
	s, err := tp.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func defaultConfig() Config {
	return Config{Local: peLocal, Routes: []Route{{Prefix: dcB, Remote: peRemote}}}
}

// run feeds one frame to a program and returns the verdict and the frame
// as the program left it.
func run(t *testing.T, prog *ebpf.Program, frame []byte, ctx bpf.SkBuff) (uint32, []byte, bpf.SkBuff) {
	t.Helper()
	out := make([]byte, len(frame)+256)
	var ctxOut bpf.SkBuff
	opts := &ebpf.RunOptions{Data: frame, DataOut: out, Context: ctx, ContextOut: &ctxOut}
	ret, err := prog.Run(opts)
	if err != nil {
		t.Fatalf("run %v: %v", prog, err)
	}
	return ret, opts.DataOut, ctxOut
}

// innerPkt is the packet a host sends: IPv4 (with options if asked) and
// UDP with a payload.
type innerPkt struct {
	src, dst netip.Addr
	dscp     uint8
	ecn      ECN
	df       bool
	options  int // bytes of IPv4 options (a multiple of 4)
	payload  int
	ttl      uint8
}

func (p innerPkt) layers() (*layers.IPv4, *layers.UDP, gopacket.Payload) {
	if !p.src.IsValid() {
		p.src = hostA
	}
	if !p.dst.IsValid() {
		p.dst = hostB
	}
	if p.ttl == 0 {
		p.ttl = 63
	}
	ip := &layers.IPv4{Version: 4, TOS: p.dscp<<2 | uint8(p.ecn), Id: 0x1234, TTL: p.ttl, Protocol: layers.IPProtocolUDP,
		SrcIP: net.IP(p.src.AsSlice()), DstIP: net.IP(p.dst.AsSlice())}
	if p.df {
		ip.Flags = layers.IPv4DontFragment
	}
	if p.options > 0 {
		// Record Route with room for the rest (RFC 791 type 7).
		data := make([]byte, p.options-2)
		data[0] = 4
		ip.Options = []layers.IPv4Option{{OptionType: 7, OptionLength: uint8(p.options), OptionData: data}}
	}
	udp := &layers.UDP{SrcPort: 0xc001, DstPort: 4791}
	udp.SetNetworkLayerForChecksum(ip)
	payload := make([]byte, p.payload)
	for i := range payload {
		payload[i] = byte(i)
	}
	return ip, udp, payload
}

var (
	macPE   = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	macNext = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
)

func serialize(t *testing.T, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

// frame is the inner packet on Ethernet, as the ingress PE sends it.
func (p innerPkt) frame(t *testing.T) []byte {
	ip, udp, pl := p.layers()
	return serialize(t, &layers.Ethernet{SrcMAC: macPE, DstMAC: macNext, EthernetType: layers.EthernetTypeIPv4}, ip, udp, pl)
}

// outerPkt is a tunnel packet arriving at the egress PE.
type outerPkt struct {
	src, dst netip.Addr
	dscp     uint8
	ecn      ECN
	options  int
	mf       bool
	inner    innerPkt
}

func (o outerPkt) frame(t *testing.T) []byte { return o.frameOpts(t, nil) }

// frameOpts is frame with the outer header's options given whole.
func (o outerPkt) frameOpts(t *testing.T, opts []layers.IPv4Option) []byte {
	if !o.src.IsValid() {
		o.src = peRemote
	}
	if !o.dst.IsValid() {
		o.dst = peLocal
	}
	outer := &layers.IPv4{Version: 4, TOS: o.dscp<<2 | uint8(o.ecn), TTL: 60, Protocol: layers.IPProtocolIPv4,
		SrcIP: net.IP(o.src.AsSlice()), DstIP: net.IP(o.dst.AsSlice()), Flags: layers.IPv4DontFragment}
	if o.mf {
		outer.Flags = layers.IPv4MoreFragments
	}
	if o.options > 0 {
		data := make([]byte, o.options-2)
		data[0] = 4
		outer.Options = []layers.IPv4Option{{OptionType: 7, OptionLength: uint8(o.options), OptionData: data}}
	}
	if opts != nil {
		outer.Options = opts
	}
	ip, udp, pl := o.inner.layers()
	return serialize(t, &layers.Ethernet{SrcMAC: macNext, DstMAC: macPE, EthernetType: layers.EthernetTypeIPv4}, outer, ip, udp, pl)
}

// ipv4Valid reports whether an IPv4 header's checksum verifies.
func ipv4Valid(h []byte) bool {
	ihl := int(h[0]&0xf) * 4
	var sum uint32
	for i := 0; i < ihl; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}

var codepoints = []ECN{NotECT, ECT1, ECT0, CE}

// TestDecapTable runs every cell of RFC 6040 §4.2's table through
// tunnel_decap in both modes, with and without IPv4 options in either
// header, and holds the result to Decapsulate: the inner codepoint (DSCP
// kept), the drop, the inner checksum, the cell counters and one event per
// unused cell per log interval.
func TestDecapTable(t *testing.T) {
	for _, two := range []bool{false, true} {
		for _, opts := range []struct{ outer, inner int }{{0, 0}, {8, 0}, {0, 12}, {40, 40}} {
			cfg := defaultConfig()
			cfg.TwoThreshold = two
			tp := loadTestPE(t, cfg)
			tp.setClock(t, time.Second)
			var wantCells [4][4]uint64
			var wantWarn, wantAlarm, wantDrop, wantLight, wantPackets uint64
			for _, in := range codepoints {
				for _, out := range codepoints {
					o := outerPkt{dscp: 46, ecn: out, options: opts.outer, inner: innerPkt{dscp: 26, ecn: in, options: opts.inner, payload: 100}}
					frame := o.frame(t)
					verdict, got, _ := run(t, tp.progs.TunnelDecap, frame, bpf.SkBuff{})
					want, drop, cell := Decapsulate(in, out, two)
					wantCells[in][out]++
					switch cell {
					case CellWarn:
						wantWarn++
					case CellAlarm:
						wantAlarm++
					}
					if two && out == ECT1 && in != NotECT {
						wantLight++
					}
					name := func() string {
						return "two_threshold=" + map[bool]string{false: "off", true: "on"}[two] + " inner " + in.String() + " outer " + out.String()
					}
					if drop {
						wantDrop++
						if verdict != verdictShot {
							t.Errorf("%s: verdict %#x, want drop", name(), verdict)
						}
						continue
					}
					wantPackets++
					if verdict != verdictNext {
						t.Errorf("%s: verdict %#x, want the packet passed on", name(), verdict)
						continue
					}
					// Ethernet, then the inner packet as sent but for its ECN.
					wantFrame := o.inner.frame(t)
					copy(wantFrame[0:12], frame[0:12])
					if len(got) != len(wantFrame) {
						t.Errorf("%s: %d bytes out, want %d", name(), len(got), len(wantFrame))
						continue
					}
					ip := got[14:]
					if ECN(ip[1]&3) != want || ip[1]>>2 != 26 {
						t.Errorf("%s: inner DS field %#x, want DSCP 26 and %v", name(), ip[1], want)
					}
					if !ipv4Valid(ip) {
						t.Errorf("%s: inner IPv4 checksum does not verify", name())
					}
					// All else as sent (the checksum aside).
					g, w := bytes.Clone(got), wantFrame
					g[15], w[15] = 0, 0
					g[24], g[25], w[24], w[25] = 0, 0, 0, 0
					if !bytes.Equal(g, w) {
						t.Errorf("%s: frame differs beyond the DS field:\n got %x\nwant %x", name(), g, w)
					}
				}
			}
			s := tp.stats(t).Decap
			if s.Cells != wantCells || s.Warn != wantWarn || s.Alarm != wantAlarm || s.Dropped != wantDrop || s.Light != wantLight || s.Packets != wantPackets {
				t.Errorf("two_threshold=%v options %+v: counters %+v, want cells %v warn %d alarm %d dropped %d light %d packets %d",
					two, opts, s, wantCells, wantWarn, wantAlarm, wantDrop, wantLight, wantPackets)
			}
			if s.Malformed+s.Spoofed+s.Errors+s.Passed+s.GSO != 0 {
				t.Errorf("counters %+v: want no malformed, spoofed, passed or failed packets", s)
			}
			// One event per unused cell (5 of them) within the interval.
			evs := drainEvents(t, tp)
			if len(evs) != 5 {
				t.Errorf("two_threshold=%v options %+v: %d events, want one per unused cell (5): %+v", two, opts, len(evs), evs)
			}
			for _, ev := range evs {
				want, drop, cell := Decapsulate(ev.Inner, ev.Outer, two)
				if cell != ev.Cell || drop != ev.Dropped || !drop && want != ev.Result || ev.OuterSrc != peRemote || ev.InnerDst != hostB {
					t.Errorf("event %+v: want cell %v, drop %v, result %v from %v to %v", ev, cell, drop, want, peRemote, hostB)
				}
			}
		}
	}
}

// drainEvents reads what the ring buffer holds now.
func drainEvents(t *testing.T, tp *testPE) []Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var evs []Event
	if err := tp.Events(ctx, func(ev Event) { evs = append(evs, ev) }); err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestDecapEventRateLimit: the same unused cell reports once per log
// interval however many packets hit it.
func TestDecapEventRateLimit(t *testing.T) {
	cfg := defaultConfig()
	cfg.LogInterval = 100 * time.Millisecond
	tp := loadTestPE(t, cfg)
	frame := outerPkt{ecn: CE, inner: innerPkt{ecn: NotECT, payload: 40}}.frame(t)
	for i, at := range []time.Duration{1000, 1010, 1050, 1099, 1100, 1150, 1250} {
		tp.setClock(t, at*time.Millisecond)
		if v, _, _ := run(t, tp.progs.TunnelDecap, frame, bpf.SkBuff{}); v != verdictShot {
			t.Fatalf("packet %d: verdict %#x, want drop (inner Not-ECT under CE)", i, v)
		}
	}
	evs := drainEvents(t, tp)
	// At 1000, 1100 and 1250 ms.
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3 (every 100 ms at most): %+v", len(evs), evs)
	}
	if s := tp.stats(t).Decap; s.Dropped != 7 || s.Alarm != 7 {
		t.Errorf("dropped %d, alarm %d: want 7 and 7", s.Dropped, s.Alarm)
	}
}

// TestEncap: RFC 6040 §4.1 in both modes for every inner codepoint, with and
// without inner options and DF: the outer header's fields and checksum,
// the inner packet untouched.
func TestEncap(t *testing.T) {
	for _, mode := range []EncapMode{Normal, Compat} {
		cfg := defaultConfig()
		cfg.ECN = mode
		cfg.TTL = 32
		tp := loadTestPE(t, cfg)
		var wantOuter [4]uint64
		for _, ecn := range codepoints {
			for _, p := range []innerPkt{{dscp: 26, ecn: ecn, payload: 200, df: true}, {dscp: 10, ecn: ecn, payload: 33, options: 16}} {
				inner := p.frame(t)
				verdict, got, _ := run(t, tp.progs.TunnelEncap, inner, bpf.SkBuff{})
				if verdict != verdictNext {
					t.Fatalf("%v %v: verdict %#x", mode, ecn, verdict)
				}
				if len(got) != len(inner)+OuterHeaderBytes {
					t.Fatalf("%v %v: %d bytes, want %d", mode, ecn, len(got), len(inner)+OuterHeaderBytes)
				}
				if !bytes.Equal(got[:14], inner[:14]) || !bytes.Equal(got[34:], inner[14:]) {
					t.Errorf("%v %v: Ethernet or inner packet changed", mode, ecn)
				}
				o := got[14:34]
				wantECN := Encapsulate(ecn, mode)
				wantOuter[wantECN]++
				if o[0] != 0x45 || o[1] != p.dscp<<2|uint8(wantECN) || o[8] != 32 || o[9] != 4 ||
					int(binary.BigEndian.Uint16(o[2:])) != len(inner)-14+20 ||
					!bytes.Equal(o[12:16], peLocal.AsSlice()) || !bytes.Equal(o[16:20], peRemote.AsSlice()) {
					t.Errorf("%v %v: outer header %x: want version 4, IHL 5, DS %#x, TTL 32, protocol 4, length %d, %v -> %v",
						mode, ecn, o, p.dscp<<2|uint8(wantECN), len(inner)-14+20, peLocal, peRemote)
				}
				if df := binary.BigEndian.Uint16(o[6:])&0x4000 != 0; df != p.df {
					t.Errorf("%v %v: outer DF %v, inner %v", mode, ecn, df, p.df)
				}
				if !ipv4Valid(o) {
					t.Errorf("%v %v: outer checksum does not verify", mode, ecn)
				}
			}
		}
		if s := tp.stats(t).Encap; s.OuterECN != wantOuter || s.Packets != 8 || s.Passed+s.Malformed+s.Errors+s.TooBig != 0 {
			t.Errorf("%v: counters %+v, want outer ECN %v over 8 packets", mode, s, wantOuter)
		}
	}
}

// TestEncapDecapRoundTrip: what one PE encapsulates the other decapsulates
// back into the packet sent, for every codepoint (no congestion on the way).
func TestEncapDecapRoundTrip(t *testing.T) {
	in := loadTestPE(t, defaultConfig())
	out := loadTestPE(t, Config{Local: peRemote, Routes: []Route{{Prefix: netip.MustParsePrefix("198.18.1.0/24"), Remote: peLocal}}})
	for _, ecn := range codepoints {
		p := innerPkt{dscp: 26, ecn: ecn, payload: 500, df: true}
		sent := p.frame(t)
		_, tunnelled, _ := run(t, in.progs.TunnelEncap, sent, bpf.SkBuff{})
		v, got, _ := run(t, out.progs.TunnelDecap, tunnelled, bpf.SkBuff{})
		if v != verdictNext || !bytes.Equal(got, sent) {
			t.Errorf("%v: verdict %#x, round trip changed the packet:\n got %x\nsent %x", ecn, v, got, sent)
		}
	}
}

// TestEncapPasses: what is not for a tunnel goes on untouched.
func TestEncapPasses(t *testing.T) {
	tp := loadTestPE(t, defaultConfig())
	arp := serialize(t, &layers.Ethernet{SrcMAC: macPE, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: macPE, SourceProtAddress: peLocal.AsSlice(),
			DstHwAddress: make([]byte, 6), DstProtAddress: peRemote.AsSlice()})
	other := innerPkt{dst: netip.MustParseAddr("198.18.7.7"), payload: 64}.frame(t)
	v6 := serialize(t, &layers.Ethernet{SrcMAC: macPE, DstMAC: macNext, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolNoNextHeader, HopLimit: 64,
			SrcIP: net.ParseIP("2001:db8::1"), DstIP: net.ParseIP("2001:db8::2")})
	for name, f := range map[string][]byte{"arp": arp, "no route": other, "ipv6": v6} {
		v, got, _ := run(t, tp.progs.TunnelEncap, f, bpf.SkBuff{})
		if v != verdictNext || !bytes.Equal(got, f) {
			t.Errorf("%s: verdict %#x, changed %v", name, v, !bytes.Equal(got, f))
		}
	}
	if s := tp.stats(t).Encap; s.Passed != 3 || s.Packets != 0 {
		t.Errorf("passed %d, encapsulated %d: want 3 and 0", s.Passed, s.Packets)
	}
}

// TestEncapTooBig: past the inner MTU (the device's less 20), a DF packet is
// answered with ICMP Fragmentation Needed carrying that MTU and quoting its
// header and 8 bytes; a packet without DF is dropped. Both are counted.
func TestEncapTooBig(t *testing.T) {
	cfg := defaultConfig()
	cfg.MTU = 1500
	tp := loadTestPE(t, cfg)
	fits := innerPkt{payload: 1500 - 20 - 20 - 8, df: true}.frame(t)
	if v, got, _ := run(t, tp.progs.TunnelEncap, fits, bpf.SkBuff{}); v != verdictNext || len(got) != len(fits)+20 {
		t.Fatalf("a 1480-byte packet: verdict %#x, %d bytes; want it tunnelled in 1500", v, len(got))
	}
	for _, opts := range []int{0, 24} {
		p := innerPkt{payload: 1500 - 20 - opts - 8 + 1, df: true, options: opts}
		big := p.frame(t)
		_, got, _ := run(t, tp.progs.TunnelEncap, big, bpf.SkBuff{})
		ihl := 20 + opts
		if len(got) != 14+20+8+ihl+8 {
			t.Fatalf("options %d: %d bytes back, want an ICMP error of %d", opts, len(got), 14+20+8+ihl+8)
		}
		ip, icmp := got[14:34], got[34:]
		if ip[9] != 1 || !bytes.Equal(ip[12:16], peLocal.AsSlice()) || !bytes.Equal(ip[16:20], hostA.AsSlice()) || !ipv4Valid(ip) {
			t.Errorf("options %d: ICMP's IP header %x: want protocol 1, %v -> %v, valid checksum", opts, ip, peLocal, hostA)
		}
		if icmp[0] != 3 || icmp[1] != 4 || binary.BigEndian.Uint16(icmp[6:]) != 1480 {
			t.Errorf("options %d: ICMP type %d code %d MTU %d, want 3, 4, 1480", opts, icmp[0], icmp[1], binary.BigEndian.Uint16(icmp[6:]))
		}
		if !bytes.Equal(icmp[8:], big[14:14+ihl+8]) {
			t.Errorf("options %d: the quote is not the header and 8 bytes", opts)
		}
		if checksum(icmp) != 0xffff {
			t.Errorf("options %d: ICMP checksum does not verify", opts)
		}
	}
	nodf := innerPkt{payload: 1500}.frame(t)
	if v, _, _ := run(t, tp.progs.TunnelEncap, nodf, bpf.SkBuff{}); v != verdictShot {
		t.Errorf("too big without DF: verdict %#x, want drop", v)
	}
	s := tp.stats(t).Encap
	if s.TooBig != 3 || s.ICMPSent+s.ICMPFailed != 2 || s.Packets != 1 {
		t.Errorf("counters %+v: want 3 too big, 2 ICMP answers (sent or unroutable here), 1 tunnelled", s)
	}
}

// checksum is the one's-complement sum of b, folded.
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

// TestDecapRejects: packets that are not ours pass, spoofed, malformed,
// fragmented and GSO tunnel packets are dropped and counted; truncation at
// every length never crashes.
func TestDecapRejects(t *testing.T) {
	tp := loadTestPE(t, defaultConfig())
	good := outerPkt{ecn: ECT0, inner: innerPkt{ecn: ECT0, payload: 64}}
	notOurs := outerPkt{dst: netip.MustParseAddr("198.18.100.9"), inner: innerPkt{payload: 64}}.frame(t)
	plain := innerPkt{src: hostB, dst: hostA, payload: 64}.frame(t)
	spoofed := outerPkt{src: netip.MustParseAddr("198.18.100.66"), inner: innerPkt{payload: 64}}.frame(t)
	frag := outerPkt{mf: true, inner: innerPkt{payload: 64}}.frame(t)
	// An inner header that says it is longer than what the outer carries.
	lying := good.frame(t)
	binary.BigEndian.PutUint16(lying[14+20+2:], 1400)
	notV4 := good.frame(t)
	notV4[14+20] = 0x65
	// Issue 28's packet: IHL 7 (Router Alert, then padding), TOS 0x6a,
	// DF, TTL 60, a 120-byte ECT(0) UDP 4791 packet inside; its outer
	// checksum one less than right.
	ra := outerPkt{dscp: 0x6a >> 2, ecn: ECN(0x6a & 3), inner: innerPkt{ecn: ECT0, payload: 120 - 28}}
	raFrame := ra.frameOpts(t, []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}},
		{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}})
	if raFrame[14]&0xf != 7 || !ipv4Valid(raFrame[14:]) {
		t.Fatalf("test frame: IHL %d, checksum valid %v", raFrame[14]&0xf, ipv4Valid(raFrame[14:]))
	}
	if v, _, _ := run(t, tp.progs.TunnelDecap, raFrame, bpf.SkBuff{}); v != verdictNext {
		t.Fatalf("the good Router Alert packet: verdict %#x, want decapsulated", v)
	}
	badSum := bytes.Clone(raFrame)
	binary.BigEndian.PutUint16(badSum[14+10:], binary.BigEndian.Uint16(raFrame[14+10:])-1)
	badSum20 := good.frame(t)
	badSum20[14+10] ^= 0x80

	cases := []struct {
		name    string
		frame   []byte
		ctx     bpf.SkBuff
		verdict uint32
	}{
		{"not for this PE", notOurs, bpf.SkBuff{}, verdictNext},
		{"not a tunnel packet", plain, bpf.SkBuff{}, verdictNext},
		{"spoofed outer source", spoofed, bpf.SkBuff{}, verdictShot},
		{"outer fragment", frag, bpf.SkBuff{}, verdictShot},
		{"inner length past the outer", lying, bpf.SkBuff{}, verdictShot},
		{"inner not IPv4", notV4, bpf.SkBuff{}, verdictShot},
		{"GSO", good.frame(t), bpf.SkBuff{GSOSegs: 2, GSOSize: 64}, verdictShot},
		{"outer checksum off by one, IHL 7", badSum, bpf.SkBuff{}, verdictShot},
		{"outer checksum wrong, IHL 5", badSum20, bpf.SkBuff{}, verdictShot},
	}
	for _, c := range cases {
		if v, _, _ := run(t, tp.progs.TunnelDecap, c.frame, c.ctx); v != c.verdict {
			t.Errorf("%s: verdict %#x, want %#x", c.name, v, c.verdict)
		}
	}
	s := tp.stats(t).Decap
	if s.Passed != 2 || s.Spoofed != 1 || s.Malformed != 3 || s.GSO != 1 || s.BadChecksum != 2 || s.Packets != 1 {
		t.Errorf("counters %+v: want 2 passed, 1 spoofed, 3 malformed, 1 GSO, 2 bad checksums, 1 decapsulated", s)
	}
	// Every truncation of a good tunnel packet: no crash, no packet
	// delivered with a header cut short.
	full := good.frame(t)
	// (BPF_PROG_RUN refuses IPv4 frames shorter than 34 bytes.)
	for n := 34; n < len(full); n++ {
		v, got, _ := run(t, tp.progs.TunnelDecap, full[:n], bpf.SkBuff{})
		if v == verdictNext && len(got) != n {
			t.Errorf("truncated to %d: decapsulated into %d bytes", n, len(got))
		}
	}
	for n := 34; n < 60; n++ {
		run(t, tp.progs.TunnelEncap, innerPkt{payload: 64}.frame(t)[:n], bpf.SkBuff{})
	}
	if s := tp.stats(t); s.Decap.Packets != 1 || s.Encap.Packets != 0 { // the Router Alert one above
		t.Errorf("a truncated packet was tunnelled or decapsulated: %+v", s)
	}
}

// wanCNP is a WAN port's CNP to this PE: from the egress PE, to UDP 4791
// from the marked flow's port, BTH opcode 0x81 with B and, when light, L.
func wanCNP(t *testing.T, src netip.Addr, light bool, byte4 byte) []byte {
	ip := &layers.IPv4{Version: 4, TOS: 48 << 2, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: net.IP(src.AsSlice()), DstIP: net.IP(peLocal.AsSlice())}
	udp := &layers.UDP{SrcPort: 0xc123, DstPort: 4791}
	udp.SetNetworkLayerForChecksum(ip)
	bth := make([]byte, 12+16+4)
	bth[0] = 0x81
	bth[4] = 0x40 | byte4
	if light {
		bth[4] |= 0x10
	}
	bth[5], bth[6], bth[7] = 0x00, 0x12, 0x34 // dest QP 0x1234
	return serialize(t, &layers.Ethernet{SrcMAC: macNext, DstMAC: macPE, EthernetType: layers.EthernetTypeIPv4}, ip, udp, gopacket.Payload(bth))
}

// TestWANCNP: a peer PE's CNP is counted by kind against its tunnel,
// reported and dropped; others pass on to the stack. A heavy one makes
// tunnel_encap mark CE inside ECN-capable packets into that tunnel for
// HeavyHold, and only then.
func TestWANCNP(t *testing.T) {
	cfg := defaultConfig()
	cfg.HeavyHold = time.Millisecond
	tp := loadTestPE(t, cfg)
	tp.setClock(t, 10*time.Second)
	cases := []struct {
		name    string
		frame   []byte
		verdict uint32
	}{
		{"light from the peer", wanCNP(t, peRemote, true, 0), verdictShot},
		{"heavy from the peer", wanCNP(t, peRemote, false, 0), verdictShot},
		{"from a stranger", wanCNP(t, netip.MustParseAddr("198.18.9.9"), true, 0), verdictNext},
		{"a PPFC notification", wanCNP(t, peRemote, false, 0x20), verdictNext},
		{"UDP to another port", innerPkt{src: peRemote, dst: peLocal, payload: 40}.frame(t), verdictNext},
	}
	cases[4].frame[14+20+2], cases[4].frame[14+20+3] = 0x12, 0x34 // not 4791
	for _, c := range cases {
		if v, _, _ := run(t, tp.progs.TunnelDecap, c.frame, bpf.SkBuff{}); v != c.verdict {
			t.Errorf("%s: verdict %#x, want %#x", c.name, v, c.verdict)
		}
	}
	s := tp.stats(t).Decap
	if s.CNPLight != 1 || s.CNPHeavy != 1 || s.CNPUnknown != 1 || s.Passed != 2 {
		t.Errorf("counters %+v: want 1 light, 1 heavy, 1 unknown, 2 passed", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var ns []Notification
	if err := tp.Notifications(ctx, func(n Notification) { ns = append(ns, n) }); err != nil {
		t.Fatal(err)
	}
	if len(ns) != 2 || !ns[0].Light || ns[1].Light || ns[0].Remote != peRemote || ns[0].DestQP != 0x1234 || ns[0].SourcePort != 0xc123 || ns[0].Time != 10*time.Second {
		t.Errorf("notifications %+v: want light then heavy from %v, QP 0x1234, port 0xc123, at 10s", ns, peRemote)
	}
	cong, err := tp.Congestion()
	if err != nil {
		t.Fatal(err)
	}
	if c := cong[peRemote]; c.LightCNPs != 1 || c.HeavyCNPs != 1 || c.HeavyUntil != 10*time.Second+time.Millisecond {
		t.Errorf("congestion %+v: want one of each, heavy until 10.001s", c)
	}

	// Within the hold: ECT(0) and ECT(1) leave with CE inside (and, in
	// normal mode, outside); Not-ECT untouched. After it: nothing marked.
	for _, at := range []struct {
		d    time.Duration
		mark bool
	}{{500 * time.Microsecond, true}, {1500 * time.Microsecond, false}} {
		tp.setClock(t, 10*time.Second+at.d)
		for _, ecn := range codepoints {
			p := innerPkt{dscp: 26, ecn: ecn, payload: 100, df: true}
			_, got, _ := run(t, tp.progs.TunnelEncap, p.frame(t), bpf.SkBuff{})
			want := ecn
			if at.mark && (ecn == ECT0 || ecn == ECT1) {
				want = CE
			}
			inner := got[34:]
			if ECN(inner[1]&3) != want || ECN(got[14+1]&3) != want || inner[1]>>2 != 26 || !ipv4Valid(inner) {
				t.Errorf("%v after the heavy CNP, %v: inner %v, outer %v (checksum ok %v); want %v",
					at.d, ecn, ECN(inner[1]&3), ECN(got[14+1]&3), ipv4Valid(inner), want)
			}
		}
	}
	if s := tp.stats(t).Encap; s.InnerCE != 2 {
		t.Errorf("inner CE marked %d, want 2", s.InnerCE)
	}
}
