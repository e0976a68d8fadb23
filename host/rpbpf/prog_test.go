package rpbpf

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/npbpf/npprobe"
	"github.com/fabriclab/fabriclab/host/roce"
)

const tcxNext = ^uint32(0) // TC_ACT_UNSPEC as BPF_PROG_RUN returns it

var (
	macSender   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	macReceiver = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	// The RP's QP sends from addrSender; the NP answers from addrRecv.
	addrSender  = netip.MustParseAddr("198.18.0.1")
	addrRecv    = netip.MustParseAddr("198.18.0.2")
	addrSender6 = netip.MustParseAddr("2001:db8::1")
	addrRecv6   = netip.MustParseAddr("2001:db8::2")
)

func loadTest(tb testing.TB) *Objects {
	tb.Helper()
	labtest.RequireRoot(tb)
	o, err := Load(LoadOptions{TestHooks: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { o.Close() })
	return o
}

// cnp builds the CNP the NP at from sends to the QP qpn at to, with an
// oracle that shares no code with the program (npprobe: gopacket and
// host/roce).
func cnp(tb testing.TB, from, to netip.Addr, qpn uint32) []byte {
	tb.Helper()
	f, err := npprobe.CNPSpec{Local: from, Peer: to, SrcPort: 0xc0de, PeerQPN: qpn, PKey: roce.DefaultPKey, DSCP: 48,
		DataSrc: macSender, DataDst: macReceiver}.Frame()
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// run hands frame to rp_ingress at nowNs; the program passes everything.
func run(tb testing.TB, o *Objects, nowNs uint64, frame []byte) {
	tb.Helper()
	if err := o.SetClock(nowNs); err != nil {
		tb.Fatal(err)
	}
	ret, err := o.program().Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		tb.Fatal(err)
	}
	if ret != tcxNext {
		tb.Fatalf("rp_ingress returned %d, want TC_ACT_UNSPEC: it passes every packet", int32(ret))
	}
}

func stats(tb testing.TB, o *Objects) Stats {
	tb.Helper()
	s, err := o.Stats()
	if err != nil {
		tb.Fatal(err)
	}
	sum := s.NotRoCE + s.Truncated + s.GRORuns + s.IPOptions + s.NotCNP + s.PPFC + s.Malformed + s.UnknownQP + s.PKeyViolations + s.ICRCErrors + s.Counted + s.PPFCCounted
	if sum != s.Packets {
		tb.Errorf("stats %+v: causes add up to %d, packets %d", s, sum, s.Packets)
	}
	return s
}

func TestCountsCNPsWithArrivalTimes(t *testing.T) {
	o := loadTest(t)
	const qpn = 0x10002
	c, err := o.AddQP(QPContext{QPN: qpn, Local: addrSender, Peer: addrRecv})
	if err != nil {
		t.Fatal(err)
	}
	f := cnp(t, addrRecv, addrSender, qpn)
	// A switch on the way rewrites DSCP/ECN and the TTL (and so the IPv4
	// checksum): the ICRC masks them.
	hop := append([]byte(nil), f...)
	hop[14+1] |= 0x3 // CE
	hop[14+8]--      // TTL
	hop[14+10], hop[14+11] = 0, 0

	for i, fr := range [][]byte{f, hop} {
		run(t, o, uint64(1000+i*50), fr)
	}
	if got := c.Counted(); got != 2 {
		t.Fatalf("Counted %d, want 2", got)
	}
	for i, want := range []uint64{1000, 1050} {
		if ns, ok := c.Arrival(uint64(i)); !ok || ns != want {
			t.Errorf("Arrival(%d) = %d, %v; want %d, true", i, ns, ok, want)
		}
	}
	// The ring keeps the last Ring times.
	for i := 2; i < 2+Ring+1; i++ {
		run(t, o, uint64(1000+i*50), f)
	}
	n := c.Counted()
	if n != 2+Ring+1 {
		t.Fatalf("Counted %d, want %d", n, 2+Ring+1)
	}
	for i := range n {
		ns, ok := c.Arrival(i)
		if want := n-i <= Ring; ok != want {
			t.Errorf("Arrival(%d) ok = %v, want %v (%d counted, ring %d)", i, ok, want, n, Ring)
		}
		if ok && ns != 1000+i*50 {
			t.Errorf("Arrival(%d) = %d, want %d", i, ns, 1000+i*50)
		}
	}
	if s := stats(t, o); s.Counted != n || s.Packets != n {
		t.Errorf("stats %+v, want %d counted", s, n)
	}
}

// TestGRORunLeftToAgent: a run of CNPs a device coalesced (GRO) is one
// sk_buff behind one IP header; rp_ingress counts none of it (gro_runs),
// so the agent, which gets them marked Coalesced, takes every one.
func TestGRORunLeftToAgent(t *testing.T) {
	o := loadTest(t)
	const qpn = 0x10002
	c, err := o.AddQP(QPContext{QPN: qpn, Local: addrSender, Peer: addrRecv})
	if err != nil {
		t.Fatal(err)
	}
	f := cnp(t, addrRecv, addrSender, qpn)
	const l3, udp = 14, 14 + 20
	gro := append(append([]byte(nil), f...), f[udp+8:]...)
	binary.BigEndian.PutUint16(gro[l3+2:], uint16(len(gro)-l3))
	binary.BigEndian.PutUint16(gro[udp+4:], uint16(len(gro)-udp))
	if err := o.SetClock(1000); err != nil {
		t.Fatal(err)
	}
	ret, err := o.program().Run(&ebpf.RunOptions{Data: gro,
		Context: bpf.SkBuff{GSOSegs: 2, GSOSize: uint32(len(f) - udp - 8)}})
	if err != nil || ret != tcxNext {
		t.Fatalf("rp_ingress: %d, %v; want TC_ACT_UNSPEC", int32(ret), err)
	}
	if got := c.Counted(); got != 0 {
		t.Errorf("Counted %d, want 0: the run is the agent's", got)
	}
	if s := stats(t, o); s.GRORuns != 1 || s.Packets != 1 {
		t.Errorf("stats %+v, want 1 GRO run", s)
	}
	// The same CNP alone is the kernel's.
	run(t, o, 2000, f)
	if got := c.Counted(); got != 1 {
		t.Errorf("Counted %d after a lone CNP, want 1", got)
	}
}

func TestIPv6(t *testing.T) {
	o := loadTest(t)
	c, err := o.AddQP(QPContext{QPN: 7, Local: addrSender6, Peer: addrRecv6})
	if err != nil {
		t.Fatal(err)
	}
	run(t, o, 5, cnp(t, addrRecv6, addrSender6, 7))
	if c.Counted() != 1 {
		t.Fatalf("IPv6 CNP not counted: %+v", stats(t, o))
	}
}

func TestNotCounted(t *testing.T) {
	o := loadTest(t)
	const qpn = 0x10002
	c, err := o.AddQP(QPContext{QPN: qpn, Local: addrSender, Peer: addrRecv})
	if err != nil {
		t.Fatal(err)
	}
	good := cnp(t, addrRecv, addrSender, qpn)
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	const udpOff = 14 + 20
	const bthOff = udpOff + 8
	for _, tc := range []struct {
		name  string
		frame []byte
		want  func(s Stats) uint64
	}{
		{"unknown qp", cnp(t, addrRecv, addrSender, qpn+1), func(s Stats) uint64 { return s.UnknownQP }},
		{"wrong peer", cnp(t, netip.MustParseAddr("198.18.0.9"), addrSender, qpn), func(s Stats) uint64 { return s.UnknownQP }},
		{"other family", cnp(t, addrRecv6, addrSender6, qpn), func(s Stats) uint64 { return s.UnknownQP }},
		{"bad icrc", mod(func(b []byte) []byte { b[bthOff+12+3] ^= 1; return b }), func(s Stats) uint64 { return s.ICRCErrors }},
		// A CNP with the P bit is a PPFC notification 8 bytes short.
		{"ppfc", mod(func(b []byte) []byte { b[bthOff+4] |= 0x20; return b }), func(s Stats) uint64 { return s.Malformed }},
		{"not a cnp", mod(func(b []byte) []byte { b[bthOff] = 0x11; return b }), func(s Stats) uint64 { return s.NotCNP }},
		{"other port", mod(func(b []byte) []byte { b[udpOff+2], b[udpOff+3] = 0x12, 0xb8; return b }), func(s Stats) uint64 { return s.NotRoCE }},
		{"long", mod(func(b []byte) []byte {
			b = append(b, 0, 0, 0, 0)
			b[14+3] += 4     // IPv4 total length
			b[udpOff+5] += 4 // UDP length
			return b
		}), func(s Stats) uint64 { return s.Malformed }},
		{"truncated", good[:bthOff+6], func(s Stats) uint64 { return s.Truncated }},
		// Issue 28: a correct ICRC does not make a bad BTH a CNP.
		{"tver 1", resealed(t, mod(func(b []byte) []byte { b[bthOff+1] = 0x01; return b })), func(s Stats) uint64 { return s.Malformed }},
		{"padcnt 3", resealed(t, mod(func(b []byte) []byte { b[bthOff+1] = 0x30; return b })), func(s Stats) uint64 { return s.Malformed }},
		{"other partition", resealed(t, mod(func(b []byte) []byte { b[bthOff+2], b[bthOff+3] = 0x80, 0x01; return b })), func(s Stats) uint64 { return s.PKeyViolations }},
		{"not ip", mod(func(b []byte) []byte { b[12], b[13] = 0x88, 0xcc; return b[:20] }), func(s Stats) uint64 { return s.NotRoCE }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.want(stats(t, o))
			run(t, o, 1, tc.frame)
			if got := tc.want(stats(t, o)); got != before+1 {
				t.Errorf("counter %d -> %d, want +1 (stats %+v)", before, got, stats(t, o))
			}
			if c.Counted() != 0 {
				t.Errorf("counted as the QP's CNP")
			}
		})
	}
}

// resealed gives an IPv4 CNP frame (from addrRecv to addrSender) a correct
// ICRC again after a test changed it.
func resealed(tb testing.TB, f []byte) []byte {
	tb.Helper()
	const udpOff = 14 + 20
	src := netip.AddrPortFrom(addrRecv, binary.BigEndian.Uint16(f[udpOff:]))
	dst := netip.AddrPortFrom(addrSender, roce.UDPPort)
	roce.SealICRC(src, dst, f[udpOff+8:])
	return f
}

// TestPKey: a CNP counts when its P_Key matches the QP's (IBTA Vol. 1
// §10.9.3: the same base, one of the two a full member).
func TestPKey(t *testing.T) {
	o := loadTest(t)
	const qpn = 0x33
	c, err := o.AddQP(QPContext{QPN: qpn, Local: addrSender, Peer: addrRecv, PKey: 0x0123})
	if err != nil {
		t.Fatal(err)
	}
	const bthOff = 14 + 20 + 8
	for i, v := range []struct {
		pkey    uint16
		counted bool
	}{{0x8123, true}, {0x0123, false}, {0xFFFF, false}, {0x8124, false}, {0x8000, false}} {
		f := cnp(t, addrRecv, addrSender, qpn)
		binary.BigEndian.PutUint16(f[bthOff+2:], v.pkey)
		before := c.Counted()
		run(t, o, uint64(i), resealed(t, f))
		if got := c.Counted() > before; got != v.counted {
			t.Errorf("P_Key %#04x against the QP's 0x0123: counted %v, want %v", v.pkey, got, v.counted)
		}
	}
	if _, err := o.AddQP(QPContext{QPN: 0x34, Local: addrSender, Peer: addrRecv, PKey: 0x8000}); err == nil {
		t.Error("AddQP with the invalid P_Key 0x8000: no error")
	}
}

func TestRemoveAndReuse(t *testing.T) {
	o := loadTest(t)
	qc := QPContext{QPN: 0x20001, Local: addrSender, Peer: addrRecv}
	c, err := o.AddQP(qc)
	if err != nil {
		t.Fatal(err)
	}
	f := cnp(t, addrRecv, addrSender, qc.QPN)
	run(t, o, 1, f)
	if err := o.RemoveQP(qc.QPN); err != nil {
		t.Fatal(err)
	}
	run(t, o, 2, f)
	if c.Counted() != 1 {
		t.Errorf("a removed QP's counter moved: %d", c.Counted())
	}
	if err := o.RemoveQP(qc.QPN); err == nil {
		t.Error("removing twice: no error")
	}
	c2, err := o.AddQP(qc) // the same slot again: a fresh count
	if err != nil {
		t.Fatal(err)
	}
	run(t, o, 3, f)
	if c2.Counted() != 1 {
		t.Errorf("re-added QP counted %d, want 1", c2.Counted())
	}
	if ns, ok := c2.Arrival(0); !ok || ns != 3 {
		t.Errorf("Arrival(0) = %d, %v; want 3", ns, ok)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []QPContext{
		{QPN: 0, Local: addrSender, Peer: addrRecv},
		{QPN: 1 << 24, Local: addrSender, Peer: addrRecv},
		{QPN: 1, Local: netip.IPv4Unspecified(), Peer: addrRecv},
		{QPN: 1, Local: addrSender},
		{QPN: 1, Local: addrSender, Peer: addrRecv6},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func TestClosedCounterReadsZero(t *testing.T) {
	o := loadTest(t)
	c, err := o.AddQP(QPContext{QPN: 1, Local: addrSender, Peer: addrRecv})
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	if c.Counted() != 0 {
		t.Error("a closed counter moved")
	}
	if _, err := o.AddQP(QPContext{QPN: 2, Local: addrSender, Peer: addrRecv}); err == nil {
		t.Error("AddQP after Close: no error")
	}
}

// FuzzIngress: whatever the frame, the program passes it and counts it
// once, by one cause.
func FuzzIngress(f *testing.F) {
	o := loadTest(f)
	if _, err := o.AddQP(QPContext{QPN: 0x10002, Local: addrSender, Peer: addrRecv}); err != nil {
		f.Fatal(err)
	}
	good := cnp(f, addrRecv, addrSender, 0x10002)
	f.Add(good)
	f.Add(cnp(f, addrRecv6, addrSender6, 0x10002))
	f.Add(good[:40])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 14 || len(b) > 1500 {
			return // BPF_PROG_RUN wants an Ethernet header; MTU-sized
		}
		before := stats(t, o)
		if _, err := o.program().Run(&ebpf.RunOptions{Data: b}); err != nil {
			return // BPF_PROG_RUN refuses an IP ethertype without the IP header
		}
		if after := stats(t, o); after.Packets != before.Packets+1 {
			t.Fatalf("packets %d -> %d", before.Packets, after.Packets)
		}
	})
}

// ppfcFrame builds the PPFC notification a switch port at from sends to
// the traffic source to, naming dest congested, with gopacket and
// roce.BuildPPFC (no code shared with the program).
func ppfcFrame(tb testing.TB, from, to, dest netip.Addr, p roce.PPFC) []byte {
	tb.Helper()
	p.Dest = dest
	const sport = 0xc0fc
	payload := make([]byte, roce.PPFCLen)
	if _, err := roce.BuildPPFC(payload, netip.AddrPortFrom(from, sport), netip.AddrPortFrom(to, roce.UDPPort), &p); err != nil {
		tb.Fatal(err)
	}
	eth := &layers.Ethernet{SrcMAC: macReceiver, DstMAC: macSender}
	udp := &layers.UDP{SrcPort: sport, DstPort: roce.UDPPort}
	var ip gopacket.SerializableLayer
	if from.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, Flags: layers.IPv4DontFragment, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: from.AsSlice(), DstIP: to.AsSlice()}
		_ = udp.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolUDP, HopLimit: 64, SrcIP: from.AsSlice(), DstIP: to.AsSlice()}
		_ = udp.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, gopacket.Payload(payload)); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestPPFCIntake: a PPFC notification toward a QP's peer is recorded in
// the pair's slot, for every QP of the pair, with its arrival, source,
// action and pause; what the agent would refuse is not.
func TestPPFCIntake(t *testing.T) {
	o := loadTest(t)
	sw := netip.MustParseAddr("198.18.0.254")
	a, err := o.AddQP(QPContext{QPN: 0x21, Local: addrSender, Peer: addrRecv})
	if err != nil {
		t.Fatal(err)
	}
	stop := ppfcFrame(t, sw, addrSender, addrRecv, roce.PPFC{Action: roce.PPFCStop, Pause: 1500 * time.Microsecond, PSN: 7})
	run(t, o, 1000, stop)
	// A second QP of the pair sees what came after it connected.
	b, err := o.AddQP(QPContext{QPN: 0x22, Local: addrSender, Peer: addrRecv})
	if err != nil {
		t.Fatal(err)
	}
	run(t, o, 2000, ppfcFrame(t, sw, addrSender, addrRecv, roce.PPFC{Action: roce.PPFCResume, PSN: 8}))
	if a.PPFCCounted() != 2 || b.PPFCCounted() != 1 {
		t.Fatalf("counted %d and %d, want 2 and 1: %+v", a.PPFCCounted(), b.PPFCCounted(), stats(t, o))
	}
	want := PPFCEvent{AtNs: 1000, Source: sw, Action: roce.PPFCStop, Pause: 1500 * time.Microsecond, PSN: 7}
	if e, ok := a.PPFCEvent(0); !ok || e != want {
		t.Errorf("event 0: %+v %v, want %+v", e, ok, want)
	}
	want = PPFCEvent{AtNs: 2000, Source: sw, Action: roce.PPFCResume, PSN: 8}
	if e, ok := b.PPFCEvent(0); !ok || e != want {
		t.Errorf("second QP's event 0: %+v %v, want %+v", e, ok, want)
	}
	if a.Counted() != 0 {
		t.Errorf("a PPFC notification counted as a CNP")
	}
	const udpOff, bthOff = 14 + 20, 14 + 20 + 8
	reseal := func(f []byte) []byte {
		roce.SealICRC(netip.AddrPortFrom(sw, 0xc0fc), netip.AddrPortFrom(addrSender, roce.UDPPort), f[udpOff+8:])
		return f
	}
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), stop...)) }
	for _, tc := range []struct {
		name  string
		frame []byte
		want  func(s Stats) uint64
	}{
		{"other destination", ppfcFrame(t, sw, addrSender, netip.MustParseAddr("198.18.0.9"), roce.PPFC{}), func(s Stats) uint64 { return s.PPFC }},
		{"to another address", ppfcFrame(t, sw, netip.MustParseAddr("198.18.0.3"), addrRecv, roce.PPFC{}), func(s Stats) uint64 { return s.PPFC }},
		{"bad icrc", mod(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), func(s Stats) uint64 { return s.ICRCErrors }},
		{"tver 1", reseal(mod(func(b []byte) []byte { b[bthOff+1] = 0x01; return b })), func(s Stats) uint64 { return s.Malformed }},
		{"long", mod(func(b []byte) []byte {
			b = append(b, 0, 0, 0, 0)
			b[14+3] += 4
			b[udpOff+5] += 4
			return b
		}), func(s Stats) uint64 { return s.Malformed }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.want(stats(t, o))
			run(t, o, 3000, tc.frame)
			if got := tc.want(stats(t, o)); got != before+1 {
				t.Errorf("counter %d -> %d, want +1 (stats %+v)", before, got, stats(t, o))
			}
			if a.PPFCCounted() != 2 {
				t.Errorf("recorded: %d", a.PPFCCounted())
			}
		})
	}
	// IPv6, and the pair leaves with its last QP.
	c6, err := o.AddQP(QPContext{QPN: 0x23, Local: addrSender6, Peer: addrRecv6})
	if err != nil {
		t.Fatal(err)
	}
	run(t, o, 4000, ppfcFrame(t, netip.MustParseAddr("2001:db8::fe"), addrSender6, addrRecv6, roce.PPFC{Action: roce.PPFCAlarm, Pause: time.Millisecond}))
	if e, ok := c6.PPFCEvent(0); c6.PPFCCounted() != 1 || !ok || e.Action != roce.PPFCAlarm || e.Source != netip.MustParseAddr("2001:db8::fe") {
		t.Errorf("IPv6: counted %d, event %+v %v", c6.PPFCCounted(), e, ok)
	}
	for _, q := range []uint32{0x21, 0x22} {
		if err := o.RemoveQP(q); err != nil {
			t.Fatal(err)
		}
	}
	before := stats(t, o).PPFC
	run(t, o, 5000, stop)
	if got := stats(t, o).PPFC; got != before+1 {
		t.Errorf("after the pair's QPs left: PPFC %d -> %d, want +1 (the agent's)", before, got)
	}
	if len(o.pairs) != 1 || len(o.freePair) != MaxPairs-1 {
		t.Errorf("%d pairs held, %d free; want the IPv6 one", len(o.pairs), len(o.freePair))
	}
}

// TestPPFCRingOverrun: a QP that reads less often than every PPFCRing
// notifications gets the older ones as gone, the newer ones whole.
func TestPPFCRingOverrun(t *testing.T) {
	o := loadTest(t)
	sw := netip.MustParseAddr("198.18.0.254")
	a, err := o.AddQP(QPContext{QPN: 0x31, Local: addrSender, Peer: addrRecv})
	if err != nil {
		t.Fatal(err)
	}
	for i := range PPFCRing + 3 {
		run(t, o, uint64(100*(i+1)), ppfcFrame(t, sw, addrSender, addrRecv, roce.PPFC{Action: roce.PPFCStop, Pause: time.Millisecond, PSN: uint32(i)}))
	}
	if a.PPFCCounted() != PPFCRing+3 {
		t.Fatalf("counted %d", a.PPFCCounted())
	}
	for i := range uint64(PPFCRing + 3) {
		e, ok := a.PPFCEvent(i)
		if gone := i < 3; ok == gone || (ok && (e.PSN != uint32(i) || e.AtNs != 100*(i+1))) {
			t.Errorf("event %d: %+v %v", i, e, ok)
		}
	}
}

// TestSizedSlots: LoadOptions.QPs sizes the slots to a page of them (32):
// the 32nd QP is counted in its slot like the first, the 33rd is refused
// with the option named, and a removed QP's slot serves the next.
func TestSizedSlots(t *testing.T) {
	labtest.RequireRoot(t)
	o, err := Load(LoadOptions{TestHooks: true, QPs: 3, Pairs: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var last CNPCounter
	for i := range 32 {
		if last, err = o.AddQP(QPContext{QPN: uint32(0x100 + i), Local: addrSender, Peer: addrRecv}); err != nil {
			t.Fatalf("QP %d of 32: %v", i+1, err)
		}
	}
	// One window each, as long as the map.
	if len(o.cnps.windows) != 1 || len(o.cnps.windows[0]) != 32*slotBytes ||
		len(o.ppfc.windows) != 1 || len(o.ppfc.windows[0]) != 16*ppfcSlotBytes {
		t.Fatalf("mapped %d and %d windows of slots, want one of %d and one of %d bytes",
			len(o.cnps.windows), len(o.ppfc.windows), 32*slotBytes, 16*ppfcSlotBytes)
	}
	run(t, o, 7, cnp(t, addrRecv, addrSender, 0x100+31))
	if got := last.Counted(); got != 1 {
		t.Errorf("the 32nd QP counted %d CNPs, want 1", got)
	}
	_, err = o.AddQP(QPContext{QPN: 0x200, Local: addrSender, Peer: addrRecv})
	if err == nil || !strings.Contains(err.Error(), "all 32 slots in use (LoadOptions.QPs)") {
		t.Errorf("the 33rd QP: %v, want all 32 slots in use", err)
	}
	if err := o.RemoveQP(0x100); err != nil {
		t.Fatal(err)
	}
	if _, err := o.AddQP(QPContext{QPN: 0x200, Local: addrSender, Peer: addrRecv}); err != nil {
		t.Errorf("a QP after one was removed: %v", err)
	}
	if got := slotsFor(0, slotBytes, MaxQPs); got != MaxQPs {
		t.Errorf("slotsFor(0) = %d, want MaxQPs", got)
	}
	if got := slotsFor(MaxQPs+1, slotBytes, MaxQPs); got != MaxQPs {
		t.Errorf("slotsFor(MaxQPs+1) = %d, want MaxQPs", got)
	}
}

// mappedBytes is what o has mapped of rp_cnps and rp_ppfc.
func mappedBytes(o *Objects) (cnps, ppfc int) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	for _, w := range o.cnps.windows {
		cnps += len(w)
	}
	for _, w := range o.ppfc.windows {
		ppfc += len(w)
	}
	return cnps, ppfc
}

// TestSlotWindows: at MaxQPs, the slots are mapped a window (16 pages) at
// a time as QPs take them: one QP maps 64 KiB of rp_cnps and 64 KiB of
// rp_ppfc (4 KiB pages), not 3 MiB; the 513th QP maps the second window of
// rp_cnps, and its CNPs are counted there; Close unmaps both.
func TestSlotWindows(t *testing.T) {
	o := loadTest(t)
	window := windowPages * os.Getpagesize()
	n := window/slotBytes + 1 // the first QP of the second window
	if c, p := mappedBytes(o); c != 0 || p != 0 {
		t.Fatalf("loaded with no QP: %d and %d bytes mapped, want 0", c, p)
	}
	var last CNPCounter
	var err error
	for i := range n {
		if last, err = o.AddQP(QPContext{QPN: uint32(0x100 + i), Local: addrSender, Peer: addrRecv}); err != nil {
			t.Fatalf("QP %d of %d: %v", i+1, n, err)
		}
		if i == 0 {
			if c, p := mappedBytes(o); c != window || p != window {
				t.Fatalf("one QP: %d and %d bytes mapped, want %d each", c, p, window)
			}
		}
	}
	if c, p := mappedBytes(o); c != 2*window || p != window {
		t.Fatalf("%d QPs of one pair: %d and %d bytes mapped, want %d and %d", n, c, p, 2*window, window)
	}
	run(t, o, 9, cnp(t, addrRecv, addrSender, uint32(0x100+n-1)))
	if got := last.Counted(); got != 1 {
		t.Errorf("QP %d counted %d CNPs, want 1", n, got)
	}
	if ns, ok := last.Arrival(0); !ok || ns != 9 {
		t.Errorf("QP %d's Arrival(0) = %d, %v; want 9", n, ns, ok)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if c, p := mappedBytes(o); c != 0 || p != 0 {
		t.Errorf("closed: %d and %d bytes mapped, want 0", c, p)
	}
}
