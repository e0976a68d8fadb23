package npbpf

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/npbpf/npprobe"
	"github.com/fabriclab/fabriclab/host/roce"
)

func timeNs(n uint64) time.Duration { return time.Duration(n) }

// cnpSpec is what the CNP for c must carry, in answer to a packet from
// macSender to macReceiver.
func cnpSpec(c QPContext) npprobe.CNPSpec {
	s := npprobe.CNPSpec{Local: c.Local, Peer: c.Peer, SrcPort: c.SrcPort, PeerQPN: c.PeerQPN, PKey: c.PKey, DSCP: c.CNPDSCP,
		DataSrc: macSender, DataDst: macReceiver}
	if s.PKey == 0 {
		s.PKey = roce.DefaultPKey
	}
	if s.DSCP == 0 {
		s.DSCP = DefaultCNPDSCP
	}
	return s
}

// expectedCNP is the CNP frame built by the oracle (gopacket and
// host/roce, nothing of np.c).
func expectedCNP(tb testing.TB, c QPContext) []byte {
	tb.Helper()
	b, err := cnpSpec(c).Frame()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestICRCVectors runs the BPF ICRC routine on roce-wire.md's two vectors.
func TestICRCVectors(t *testing.T) {
	o := loadTest(t)
	for _, v := range []struct {
		name, ip, icrc string
	}{
		{"ConnectX-4 Lx CNP",
			"45c2003c718c4000401191610a0011010a001201000012b700280000" + "8100ffff4000011800000000" + "00000000000000000000000000000000",
			"82fd002a"},
		{"UC SEND_ONLY, PadCnt 2",
			"45010040047840004011b4d5c0a80007c0a80007c00012b7002caca22460ffff000000d300cf1710" + "4630818be28935d90e9a95505401be885e500000",
			"78f353f3"},
	} {
		t.Run(v.name, func(t *testing.T) {
			ip, _ := hex.DecodeString(v.ip)
			want, _ := hex.DecodeString(v.icrc)
			frame := append(append([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00}, ip...), 0, 0, 0, 0)
			ret, out := runProg(t, o.icrcTest, frame, 0)
			if ret != tcxNext {
				t.Fatalf("np_icrc_test returned %d", int32(ret))
			}
			if got := out[len(out)-4:]; !bytes.Equal(got, want) {
				t.Errorf("ICRC %x, want %x", got, want)
			}
		})
	}
}

// TestCNPBytes turns clones of data packets into CNPs and checks every
// byte against a CNP built with gopacket and host/roce, and the ICRC with
// host/roce's verification.
func TestCNPBytes(t *testing.T) {
	o := loadTest(t)
	for _, v6 := range []bool{false, true} {
		c := testQP(v6, 0)
		addQP(t, o, c)
		for _, p := range []dataPkt{
			{op: roce.OpRCSendOnly, payload: 0},        // 58/78 bytes: the CNP is longer
			{op: roce.OpRCSendLast, payload: 13},       // pad 3
			{op: roce.OpRCWriteFirst, payload: 1024},   // RETH
			{op: roce.OpRCWriteOnlyImm, payload: 3000}, // BPF_PROG_RUN takes less than a page
		} {
			p.v6, p.ecn, p.destQP = v6, ecnCE, c.QPN
			t.Run(fmt.Sprintf("v6=%v/%v/%d", v6, p.op, p.payload), func(t *testing.T) {
				setClock(t, o, 777)
				data := p.frame(t)
				ret, out := runProg(t, o.objs.Egress, data, o.Mark())
				if ret != tcActRedirect {
					t.Fatalf("np_egress returned %d, want TC_ACT_REDIRECT", int32(ret))
				}
				want := expectedCNP(t, c)
				wantLen := CNPLenIPv4
				if v6 {
					wantLen = CNPLenIPv6
				}
				if len(want) != wantLen {
					t.Fatalf("reference CNP is %d bytes, want %d", len(want), wantLen)
				}
				if !bytes.Equal(out, want) {
					t.Fatalf("CNP differs from the reference\n got %x\nwant %x", out, want)
				}
				checkCNP(t, out, c)
				var v bpfQP
				if err := o.objs.NpQps.Lookup(c.QPN, &v); err != nil {
					t.Fatal(err)
				}
				if v.LastCnpNs != 777 {
					t.Errorf("last CNP time %d after np_egress at 777", v.LastCnpNs)
				}
			})
		}
		if err := o.RemoveQP(c.QPN); err != nil {
			t.Fatal(err)
		}
	}
	s := stats(t, o)
	if s.EgressClones != 8 || s.EgressBuilt != 8 || s.EgressDropped != 0 {
		t.Errorf("egress counters %+v, want 8 clones built", s)
	}
}

// checkCNP decodes a CNP with host/roce and checks its headers and ICRC.
func checkCNP(tb testing.TB, frame []byte, c QPContext) {
	tb.Helper()
	if err := npprobe.CheckCNP(frame, cnpSpec(c)); err != nil {
		tb.Error(err)
	}
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if udp == nil {
		tb.Fatalf("no UDP in %x", frame)
	}
	if udp.DstPort != roce.UDPPort || uint16(udp.SrcPort) != c.SrcPort || udp.Length != 40 {
		tb.Errorf("UDP %d -> %d length %d, want %d -> 4791 length 40", udp.SrcPort, udp.DstPort, udp.Length, c.SrcPort)
	}
	var src, dst netip.Addr
	var tos uint8
	if ip, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
		tos = ip.TOS
		if ip.Length != 60 || ip.Id != 0 || ip.Flags != layers.IPv4DontFragment || ip.TTL != 64 || !ipv4ChecksumOK(frame[14:34]) {
			tb.Errorf("IPv4 length %d id %d flags %v ttl %d checksum ok %v", ip.Length, ip.Id, ip.Flags, ip.TTL, ipv4ChecksumOK(frame[14:34]))
		}
		if udp.Checksum != 0 {
			tb.Errorf("IPv4 UDP checksum %#x, want 0", udp.Checksum)
		}
	} else if ip, ok := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
		tos = ip.TrafficClass
		if ip.Length != 40 || ip.HopLimit != 64 || ip.FlowLabel != 0 {
			tb.Errorf("IPv6 payload length %d hop limit %d flow label %#x", ip.Length, ip.HopLimit, ip.FlowLabel)
		}
		if udp.Checksum == 0 {
			tb.Error("IPv6 UDP checksum 0")
		}
	}
	if src != c.Local || dst != c.Peer {
		tb.Errorf("CNP %v -> %v, want %v -> %v", src, dst, c.Local, c.Peer)
	}
	dscp := c.CNPDSCP
	if dscp == 0 {
		dscp = DefaultCNPDSCP
	}
	if tos != dscp<<2|ecnECT0 {
		tb.Errorf("TOS %#x, want DSCP %d ECT(0)", tos, dscp)
	}
	var h roce.Header
	if _, err := roce.Parse(udp.Payload, &h); err != nil {
		tb.Fatalf("roce.Parse: %v", err)
	}
	pkey := c.PKey
	if pkey == 0 {
		pkey = roce.DefaultPKey
	}
	if want := roce.CNPHeader(c.PeerQPN, pkey); h != want {
		tb.Errorf("BTH %+v, want %+v", h.BTH, want.BTH)
	}
	if !bytes.Equal(udp.Payload[roce.BTHLen:roce.BTHLen+roce.CNPReservedLen], make([]byte, roce.CNPReservedLen)) {
		tb.Errorf("reserved bytes %x", udp.Payload[roce.BTHLen:])
	}
	if !roce.VerifyICRC(netip.AddrPortFrom(src, uint16(udp.SrcPort)), netip.AddrPortFrom(dst, uint16(udp.DstPort)), udp.Payload) {
		tb.Error("roce.VerifyICRC: the CNP's ICRC does not verify")
	}
	icrc, err := roce.ICRCFromIP(frame[14:])
	if err != nil || icrc != binary.LittleEndian.Uint32(frame[len(frame)-4:]) {
		tb.Errorf("roce.ICRCFromIP = %#x, %v; on the wire %x", icrc, err, frame[len(frame)-4:])
	}
}

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

// TestCNPFieldsFromQP: the DSCP, P_Key and source port come from the QP
// context, including their defaults and a source port of 0.
func TestCNPFieldsFromQP(t *testing.T) {
	o := loadTest(t)
	for i, c := range []QPContext{
		{QPN: 1, PeerQPN: 0xffffff, Local: addrRecv, Peer: addrSender, CNPDSCP: 63, PKey: 0x7fff, SrcPort: 0},
		{QPN: 0xffffff, PeerQPN: 1, Local: addrRecv6, Peer: addrSender6, CNPDSCP: 0, PKey: 0, SrcPort: 65535},
		{QPN: 0x800000, PeerQPN: 0x123456, Local: netip.MustParseAddr("198.19.255.254"), Peer: netip.MustParseAddr("198.18.0.9"), CNPDSCP: 46, SrcPort: 0xc000},
	} {
		addQP(t, o, c)
		p := dataPkt{v6: c.Local.Is6(), ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 256, destQP: c.QPN, src: c.Peer, dst: c.Local}
		ret, out := runProg(t, o.objs.Egress, p.frame(t), o.Mark())
		if ret != tcActRedirect {
			t.Fatalf("case %d: np_egress returned %d", i, int32(ret))
		}
		if want := expectedCNP(t, c); !bytes.Equal(out, want) {
			t.Errorf("case %d: CNP differs\n got %x\nwant %x", i, out, want)
		}
		checkCNP(t, out, c)
	}
}

// TestEgressLeavesOtherPackets: np_egress touches only packets with its
// mark, passes a CNP that crosses it again, and drops a marked packet it
// cannot turn into a CNP rather than send it as data.
func TestEgressLeavesOtherPackets(t *testing.T) {
	o := loadTest(t)
	c := testQP(false, 0)
	addQP(t, o, c)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 512, destQP: c.QPN}
	cnp := expectedCNP(t, c)
	for _, tc := range []struct {
		name string
		data []byte
		mark uint32
		ret  uint32
	}{
		{"unmarked CE packet", ce.frame(t), 0, tcxNext},
		{"another mark", ce.frame(t), o.Mark() ^ 1, tcxNext},
		{"marked CNP (built already: its second pass)", cnp, o.Mark(), tcxNext},
		{"marked, unknown QP", dataPkt{ecn: ecnCE, op: roce.OpRCSendOnly, destQP: 0x999}.frame(t), o.Mark(), tcActShot},
		{"marked, not RoCE", dataPkt{ecn: ecnCE, op: roce.OpRCSendOnly, destQP: c.QPN, dport: 4792}.frame(t), o.Mark(), tcActShot},
		{"marked, VLAN", dataPkt{ecn: ecnCE, op: roce.OpRCSendOnly, destQP: c.QPN, vlans: 1}.frame(t), o.Mark(), tcActShot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ret, out := runProg(t, o.objs.Egress, tc.data, tc.mark)
			if ret != tc.ret {
				t.Fatalf("verdict %d, want %d", int32(ret), int32(tc.ret))
			}
			if tc.ret == tcxNext && !bytes.Equal(out, tc.data) {
				t.Errorf("packet changed")
			}
		})
	}
	if s := stats(t, o); s.EgressClones != 4 || s.EgressDropped != 3 || s.EgressBuilt != 0 {
		t.Errorf("egress counters clones %d built %d dropped %d, want 4, 0, 3", s.EgressClones, s.EgressBuilt, s.EgressDropped)
	}
}

// statsDelta lists the Stats fields that changed, by their JSON names.
func statsDelta(before, after Stats) map[string]uint64 {
	d := map[string]uint64{}
	b, a := reflect.ValueOf(before), reflect.ValueOf(after)
	for i := 0; i < a.NumField(); i++ {
		if n := a.Field(i).Uint() - b.Field(i).Uint(); n != 0 {
			d[a.Type().Field(i).Tag.Get("json")] = n
		}
	}
	return d
}

// TestIngressAnswersCE: a CE-marked RC request for a known QP, IPv4 and
// IPv6, is answered once; the packet itself passes untouched with its mark.
func TestIngressAnswersCE(t *testing.T) {
	o := loadTest(t)
	for _, v6 := range []bool{false, true} {
		c := testQP(v6, 0)
		if v6 {
			c.QPN = 0x124
		}
		addQP(t, o, c)
		for op := roce.OpRCSendFirst; op <= roce.OpRCWriteOnlyImm; op++ {
			data := dataPkt{v6: v6, ecn: ecnCE, op: op, payload: 100, destQP: c.QPN}.frame(t)
			r0, s0 := redirects(t, o), stats(t, o)
			out := make([]byte, len(data)+256)
			var ctxOut bpf.SkBuff
			ret, err := o.objs.Ingress.Run(&ebpf.RunOptions{Data: data, DataOut: out, Context: bpf.SkBuff{Mark: 42}, ContextOut: &ctxOut})
			if err != nil {
				t.Fatal(err)
			}
			out = out[:min(len(out), len(data))]
			if ret != tcxNext || !bytes.Equal(out, data) || ctxOut.Mark != 42 {
				t.Errorf("v6=%v %v: verdict %d, packet unchanged %v, mark %d (want TC_ACT_UNSPEC, true, 42)",
					v6, op, int32(ret), bytes.Equal(out, data), ctxOut.Mark)
			}
			if n := redirects(t, o) - r0; n != 1 {
				t.Errorf("v6=%v %v: %d CNPs, want 1", v6, op, n)
			}
			if d, want := statsDelta(s0, stats(t, o)), map[string]uint64{"packets": 1, "ce": 1, "cnp_sent": 1}; !reflect.DeepEqual(d, want) {
				t.Errorf("v6=%v %v: stats changed by %v, want %v", v6, op, d, want)
			}
		}
		n := uint64(roce.OpRCWriteOnlyImm) + 1
		if got, want := counters(t, o, c.QPN), (NPCounters{NPECNMarkedRoCEPackets: n, NPCNPSent: n}); got != want {
			t.Errorf("v6=%v: counters %+v, want %+v", v6, got, want)
		}
	}
}

// TestIngressPassesUntouched: everything but a CE-marked RC request to a
// known QP passes untouched, gets no CNP and is counted once.
func TestIngressPassesUntouched(t *testing.T) {
	o := loadTest(t)
	c, c6 := testQP(false, 0), testQP(true, 0)
	c6.QPN = 0x124
	addQP(t, o, c)
	addQP(t, o, c6)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}
	full := ce.frame(t)
	short := func(n int) []byte { return full[:n] }
	udpTooShort := dataPkt{ecn: ecnCE, op: roce.OpRCSendOnly, destQP: c.QPN}.frame(t)
	udpTooShort = udpTooShort[:len(udpTooShort)-roce.ICRCLen] // UDP length 20: no room for the ICRC
	binary.BigEndian.PutUint16(udpTooShort[14+2:], uint16(len(udpTooShort)-14))
	binary.BigEndian.PutUint16(udpTooShort[14+20+4:], 8+roce.BTHLen)
	arp := append([]byte{}, full[:12]...)
	arp = append(arp, 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	with := func(f func(*dataPkt)) []byte { p := ce; f(&p); return p.frame(t) }
	// flagsByte sets BTH byte 1 (SE, M, PadCnt, TVer) of an IPv4 frame.
	flagsByte := func(f []byte, v byte) []byte { f[14+20+8+1] = v; return f }
	// A WRITE_FIRST whose UDP length ends inside its RETH, BTH and ICRC
	// still covered.
	noRETH := dataPkt{ecn: ecnCE, op: roce.OpRCWriteFirst, destQP: c.QPN}.frame(t)
	noRETH = noRETH[:14+20+8+roce.BTHLen+roce.ICRCLen]
	binary.BigEndian.PutUint16(noRETH[14+2:], uint16(len(noRETH)-14))
	binary.BigEndian.PutUint16(noRETH[14+20+4:], 8+roce.BTHLen+roce.ICRCLen)

	for _, tc := range []struct {
		name string
		data []byte
		stat string
	}{
		{"not CE: ECT(0)", with(func(p *dataPkt) { p.ecn = ecnECT0 }), "not_ce"},
		{"not CE: Not-ECT", with(func(p *dataPkt) { p.ecn = ecnNotECT }), "not_ce"},
		{"not CE: IPv6 ECT(0)", with(func(p *dataPkt) { p.v6, p.ecn, p.destQP = true, ecnECT0, c6.QPN }), "not_ce"},
		{"ARP", arp, "not_roce"},
		{"UDP to another port", with(func(p *dataPkt) { p.dport = 4792 }), "not_roce"},
		{"TCP to 4791", with(func(p *dataPkt) { p.tcp = true }), "not_roce"},
		{"later IPv4 fragment", with(func(p *dataPkt) { p.fragOff = 185 }), "not_roce"},
		{"first IPv4 fragment", with(func(p *dataPkt) { p.mf = true }), "fragment"},
		{"IPv4 options", with(func(p *dataPkt) { p.ipOptions = true }), "ip_options"},
		{"one VLAN tag", with(func(p *dataPkt) { p.vlans = 1 }), "vlan"},
		{"QinQ", with(func(p *dataPkt) { p.vlans = 2; p.v6 = true; p.destQP = c6.QPN }), "vlan"},
		{"unknown QP", with(func(p *dataPkt) { p.destQP = 0x999 }), "unknown_qp"},
		{"known QP from another address", with(func(p *dataPkt) { p.src = netip.MustParseAddr("198.18.0.3"); p.dst = addrRecv }), "unknown_qp"},
		{"known QP to another address", with(func(p *dataPkt) { p.src = addrSender; p.dst = netip.MustParseAddr("198.18.0.4") }), "unknown_qp"},
		{"IPv4 QPN in an IPv6 packet", with(func(p *dataPkt) { p.v6 = true }), "unknown_qp"},
		{"RC ACKNOWLEDGE", with(func(p *dataPkt) { p.op, p.payload = roce.OpRCAck, 0 }), "not_request"},
		{"RC READ REQUEST", with(func(p *dataPkt) { p.op, p.payload = roce.OpRCReadRequest, 0 }), "not_request"},
		{"RC READ RESPONSE", with(func(p *dataPkt) { p.op = roce.OpRCReadResponseMiddle }), "not_request"},
		{"UC SEND_ONLY", with(func(p *dataPkt) { p.op = roce.OpUCSendOnly }), "not_request"},
		{"UD SEND_ONLY", with(func(p *dataPkt) { p.op = roce.OpUDSendOnly }), "not_request"},
		{"CNP", with(func(p *dataPkt) { p.op, p.payload = roce.OpCNP, 0 }), "not_request"},
		// BPF_PROG_RUN refuses a frame whose ethertype is IP without a
		// whole IP header; behind a VLAN tag it takes one.
		{"truncated: Ethernet only", with(func(p *dataPkt) { p.vlans = 1 })[:18], "truncated"},
		{"truncated: in the IPv4 header", with(func(p *dataPkt) { p.vlans = 1 })[:18+10], "truncated"},
		{"truncated: in the IPv6 header", with(func(p *dataPkt) { p.vlans = 1; p.v6 = true })[:18+30], "truncated"},
		{"truncated: in the UDP header", short(14 + 20 + 4), "truncated"},
		{"truncated: in the BTH", short(14 + 20 + 8 + 6), "truncated"},
		{"truncated: in the IPv6 BTH", with(func(p *dataPkt) { p.v6 = true })[:14+40+8+11], "truncated"},
		{"UDP length without room for the ICRC", udpTooShort, "truncated"},
		{"VLAN tag cut short", with(func(p *dataPkt) { p.vlans = 1 })[:16], "truncated"},
		// The BTH rules the agent applies too (bpf/roce_check.h).
		{"TVer 1", flagsByte(with(func(p *dataPkt) {}), 0x01), "malformed"},
		{"PadCnt 3 without a payload", flagsByte(with(func(p *dataPkt) { p.op, p.payload = roce.OpRCSendOnly, 0 }), 0x30), "malformed"},
		{"WRITE_FIRST without room for its RETH", noRETH, "malformed"},
		{"another partition", with(func(p *dataPkt) { p.pkey = 0x8002 }), "pkey_violations"},
		{"a limited member of another partition", with(func(p *dataPkt) { p.pkey = 0x7fff }), "pkey_violations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r0, s0 := redirects(t, o), stats(t, o)
			ret, out := runProg(t, o.objs.Ingress, tc.data, 0)
			if ret != tcxNext {
				t.Errorf("verdict %d, want TC_ACT_UNSPEC", int32(ret))
			}
			if !bytes.Equal(out, tc.data) {
				t.Errorf("packet changed")
			}
			if n := redirects(t, o) - r0; n != 0 {
				t.Errorf("%d CNPs, want none", n)
			}
			if d, want := statsDelta(s0, stats(t, o)), map[string]uint64{"packets": 1, tc.stat: 1}; !reflect.DeepEqual(d, want) {
				t.Errorf("stats changed by %v, want %v", d, want)
			}
		})
	}
	for _, q := range []uint32{c.QPN, c6.QPN} {
		if got := counters(t, o, q); got != (NPCounters{}) {
			t.Errorf("qp %#x counters %+v, want zero", q, got)
		}
	}
}

// event is one packet of a QP at a time.
type event struct {
	qp  int
	at  time.Duration
	ce  bool
	v6  bool
	cnp bool // the reference's decision
}

// TestCoalescingMatchesGoNP drives the ingress program and host/dcqcn's NP
// with the same random packets of three QPs (different N, one IPv6) and
// compares every decision: a CE gets a CNP iff NP.OnCE says so, any other
// packet sends the pending CNP iff NP.Poll says so.
func TestCoalescingMatchesGoNP(t *testing.T) {
	o := loadTest(t)
	ns := []time.Duration{50 * time.Microsecond, 4 * time.Microsecond, time.Millisecond}
	var qps []QPContext
	var ref []*dcqcn.NP
	for i, n := range ns {
		c := testQP(i == 2, uint64(n))
		c.QPN, c.PeerQPN = uint32(0x200+i), uint32(0x300+i)
		addQP(t, o, c)
		qps = append(qps, c)
		ref = append(ref, dcqcn.NewNP(n))
	}
	frames := make([][2][]byte, len(qps)) // [qp][ce]
	for i, c := range qps {
		for ce := 0; ce < 2; ce++ {
			e := uint8(ecnECT0)
			if ce == 1 {
				e = ecnCE
			}
			frames[i][ce] = dataPkt{v6: c.Local.Is6(), ecn: e, op: roce.OpRCWriteMiddle, payload: 256, destQP: c.QPN}.frame(t)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Duration(5 * time.Second) // a boot-time clock, far from 0
	var sent, held [3]uint64
	for i := 0; i < 20000; i++ {
		// Gaps from 0 (same instant) to 2 ms, mostly around N.
		switch rng.IntN(4) {
		case 0:
		case 1:
			now += time.Duration(rng.Int64N(int64(5 * time.Microsecond)))
		case 2:
			now += time.Duration(rng.Int64N(int64(60 * time.Microsecond)))
		default:
			now += time.Duration(rng.Int64N(int64(2 * time.Millisecond)))
		}
		q := rng.IntN(len(qps))
		ce := rng.IntN(3) > 0
		want := false
		if ce {
			want = ref[q].OnCE(now)
		} else {
			_, pending := ref[q].Next()
			want = ref[q].Poll(now)
			if want && pending {
				held[q]++
			}
		}
		if want {
			sent[q]++
		}
		setClock(t, o, uint64(now))
		r0 := redirects(t, o)
		ceIdx := 0
		if ce {
			ceIdx = 1
		}
		runProg(t, o.objs.Ingress, frames[q][ceIdx], 0)
		if got := redirects(t, o) - r0; got != map[bool]uint64{false: 0, true: 1}[want] {
			t.Fatalf("event %d (qp %d, N %v, at %v, ce %v): %d CNPs, the reference sends %v",
				i, q, ns[q], now, ce, got, want)
		}
	}
	for q, c := range qps {
		st := ref[q].Stats()
		got := counters(t, o, c.QPN)
		if got.NPECNMarkedRoCEPackets != st.CEPackets || got.NPCNPSent != st.CNPsSent || got.NPCNPHeldSent != held[q] ||
			got.NPCNPCoalesced != st.CEPackets-(st.CNPsSent-held[q]) {
			t.Errorf("qp %d: counters %+v; reference CE %d CNP %d held %d", q, got, st.CEPackets, st.CNPsSent, held[q])
		}
		t.Logf("qp %d (N %v): %d CE, %d CNPs (%d held back, then sent), %d coalesced", q, ns[q], got.NPECNMarkedRoCEPackets,
			got.NPCNPSent, got.NPCNPHeldSent, got.NPCNPCoalesced)
	}
}

// TestBackToBackCE: two CEs at the same instant give one CNP; with N = 0
// every CE gets one.
func TestBackToBackCE(t *testing.T) {
	o := loadTest(t)
	c := testQP(false, uint64(4*time.Microsecond))
	c0 := testQP(false, 0)
	c0.QPN = 0x321
	addQP(t, o, c)
	addQP(t, o, c0)
	setClock(t, o, 1e9)
	for _, q := range []QPContext{c, c0} {
		data := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 1024, destQP: q.QPN}.frame(t)
		r0 := redirects(t, o)
		runProg(t, o.objs.Ingress, data, 0)
		runProg(t, o.objs.Ingress, data, 0)
		want := uint64(1)
		if q.MinTimeBetweenCNPs == 0 {
			want = 2
		}
		if n := redirects(t, o) - r0; n != want {
			t.Errorf("N %v: two CEs at once gave %d CNPs, want %d", q.MinTimeBetweenCNPs, n, want)
		}
	}
	if got := counters(t, o, c.QPN); got != (NPCounters{NPECNMarkedRoCEPackets: 2, NPCNPSent: 1, NPCNPCoalesced: 1}) {
		t.Errorf("counters %+v", got)
	}
}

// TestHeldCNP walks the pending CNP: a CE within N is held back, a packet
// before N does not send it, the first packet at N does, once.
func TestHeldCNP(t *testing.T) {
	o := loadTest(t)
	const n = 50_000
	c := testQP(false, n)
	addQP(t, o, c)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 1024, destQP: c.QPN}.frame(t)
	ect := dataPkt{ecn: ecnECT0, op: roce.OpRCWriteMiddle, payload: 1024, destQP: c.QPN}.frame(t)
	t0 := uint64(3e9)
	for i, step := range []struct {
		at   uint64
		data []byte
		cnp  bool
	}{
		{t0, ce, true},
		{t0 + 10_000, ect, false},     // nothing pending
		{t0 + 20_000, ce, false},      // within N: held back
		{t0 + 30_000, ce, false},      // still within N
		{t0 + n - 1, ect, false},      // N not reached
		{t0 + n, ect, true},           // N reached: the held CNP
		{t0 + n + 1, ect, false},      // sent already
		{t0 + 2*n + 5, ect, false},    // nothing pending
		{t0 + 2*n + 6, ce, true},      // N after the held CNP: at once
		{t0 + 3*n + 6 - 1, ce, false}, // held
		{t0 + 3*n + 6, ce, true},      // a CE at N sends (and covers the held one)
		{t0 + 5*n, ect, false},
	} {
		setClock(t, o, step.at)
		r0 := redirects(t, o)
		runProg(t, o.objs.Ingress, step.data, 0)
		if got := redirects(t, o) - r0; (got == 1) != step.cnp || got > 1 {
			t.Errorf("step %d at t0+%d: %d CNPs, want %v", i, step.at-t0, got, step.cnp)
		}
	}
	if got := counters(t, o, c.QPN); got != (NPCounters{NPECNMarkedRoCEPackets: 6, NPCNPSent: 4, NPCNPCoalesced: 3, NPCNPHeldSent: 1}) {
		t.Errorf("counters %+v", got)
	}
}

// TestRedirectError: a failed clone is counted and leaves the CNP pending
// for a later packet.
func TestRedirectError(t *testing.T) {
	o := loadTest(t)
	c := testQP(false, 1000)
	addQP(t, o, c)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCSendOnly, payload: 8, destQP: c.QPN}.frame(t)
	ect := dataPkt{ecn: ecnECT0, op: roce.OpRCSendOnly, payload: 8, destQP: c.QPN}.frame(t)
	if err := o.SetRedirectError(int32(syscall.ENOMEM)); err != nil {
		t.Fatal(err)
	}
	setClock(t, o, 1e9)
	runProg(t, o.objs.Ingress, ce, 0)
	if err := o.SetRedirectError(0); err != nil {
		t.Fatal(err)
	}
	setClock(t, o, 1e9+1000)
	r0 := redirects(t, o)
	runProg(t, o.objs.Ingress, ect, 0)
	if redirects(t, o)-r0 != 1 {
		t.Error("the pending CNP did not leave with the next packet")
	}
	if got := counters(t, o, c.QPN); got != (NPCounters{NPECNMarkedRoCEPackets: 1, NPCNPSent: 1, NPCNPHeldSent: 1, NPCNPErrors: 1}) {
		t.Errorf("counters %+v", got)
	}
	if s := stats(t, o); s.RedirectErrors != 1 {
		t.Errorf("stats redirect_errors %d, want 1", s.RedirectErrors)
	}
}

// TestSpacingFromEgress: N counts from when the CNP left np_egress, not
// from the decision, so a CNP delayed on its way out pushes the next one
// back.
func TestSpacingFromEgress(t *testing.T) {
	o := loadTest(t)
	const n = 10_000
	c := testQP(false, n)
	addQP(t, o, c)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	t0 := uint64(2e9)
	setClock(t, o, t0)
	runProg(t, o.objs.Ingress, ce, 0) // decided at t0
	setClock(t, o, t0+3000)
	if ret, _ := runProg(t, o.objs.Egress, ce, o.Mark()); ret != tcActRedirect { // left at t0+3 µs
		t.Fatalf("np_egress returned %d", int32(ret))
	}
	r0 := redirects(t, o)
	setClock(t, o, t0+n) // N after the decision, 7 µs after the CNP left
	runProg(t, o.objs.Ingress, ce, 0)
	if redirects(t, o) != r0 {
		t.Error("a CNP N after the decision but within N of the previous CNP leaving")
	}
	setClock(t, o, t0+3000+n)
	runProg(t, o.objs.Ingress, ce, 0)
	if redirects(t, o) != r0+1 {
		t.Error("no CNP N after the previous one left")
	}
}

// TestInflight: while a CNP of the QP is between its decision and
// np_egress (on another CPU), a CE gets none of its own; it is pending, and
// leaves with the first packet N after the in-flight CNP left.
func TestInflight(t *testing.T) {
	o := loadTest(t)
	const n = 10_000
	c := testQP(false, n)
	addQP(t, o, c)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	ect := dataPkt{ecn: ecnECT0, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	setInflight := func(v uint8, lastNs uint64) {
		t.Helper()
		var q bpfQP
		if err := o.objs.NpQps.LookupWithFlags(c.QPN, &q, ebpf.LookupLock); err != nil {
			t.Fatal(err)
		}
		q.Inflight, q.SentAny, q.LastCnpNs = v, 1, lastNs
		if err := o.objs.NpQps.Update(c.QPN, &q, ebpf.UpdateLock); err != nil {
			t.Fatal(err)
		}
	}
	t0 := uint64(4e9)
	setInflight(1, t0) // decided at t0 on another CPU, not out yet
	setClock(t, o, t0+5*n)
	r0 := redirects(t, o)
	runProg(t, o.objs.Ingress, ce, 0)
	if redirects(t, o) != r0 {
		t.Fatal("a CNP while another is in flight")
	}
	setClock(t, o, t0+5*n+100) // the in-flight CNP leaves
	if ret, _ := runProg(t, o.objs.Egress, ce, o.Mark()); ret != tcActRedirect {
		t.Fatal("np_egress failed")
	}
	setInflight(0, t0+5*n+100)
	setClock(t, o, t0+6*n+99)
	runProg(t, o.objs.Ingress, ect, 0)
	if redirects(t, o) != r0 {
		t.Fatal("the pending CNP left less than N after the in-flight one")
	}
	setClock(t, o, t0+6*n+100)
	runProg(t, o.objs.Ingress, ect, 0)
	if redirects(t, o) != r0+1 {
		t.Fatal("the pending CNP did not leave N after the in-flight one")
	}
	if got := counters(t, o, c.QPN); got.NPCNPCoalesced != 1 || got.NPCNPHeldSent != 1 {
		t.Errorf("counters %+v", got)
	}
}

// TestMinSpacing: np_egress keeps the least time between two CNPs leaving.
func TestMinSpacing(t *testing.T) {
	o := loadTest(t)
	c := testQP(false, 0)
	addQP(t, o, c)
	ce := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 64, destQP: c.QPN}.frame(t)
	for i, at := range []uint64{1e9, 1e9 + 7000, 1e9 + 9000, 1e9 + 20000} {
		setClock(t, o, at)
		runProg(t, o.objs.Egress, ce, o.Mark())
		want := []time.Duration{0, 7 * time.Microsecond, 2 * time.Microsecond, 2 * time.Microsecond}[i]
		if got := counters(t, o, c.QPN).MinCNPSpacing; got != want {
			t.Errorf("after CNP %d: min spacing %v, want %v", i, got, want)
		}
	}
}

// TestConcurrentCE runs CE packets of one QP on every CPU at one instant:
// exactly one CNP, and no count lost.
func TestConcurrentCE(t *testing.T) {
	o := loadTest(t)
	c := testQP(false, uint64(time.Millisecond))
	addQP(t, o, c)
	setClock(t, o, 1e9)
	data := dataPkt{ecn: ecnCE, op: roce.OpRCWriteMiddle, payload: 1024, destQP: c.QPN}.frame(t)
	const workers, repeat = 4, 20000
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]byte, len(data)+64)
			if _, err := o.objs.Ingress.Run(&ebpf.RunOptions{Data: data, DataOut: out, Repeat: repeat}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := redirects(t, o); n != 1 {
		t.Errorf("%d CNPs, want 1", n)
	}
	want := NPCounters{NPECNMarkedRoCEPackets: workers * repeat, NPCNPSent: 1, NPCNPCoalesced: workers*repeat - 1}
	if got := counters(t, o, c.QPN); got != want {
		t.Errorf("counters %+v, want %+v", got, want)
	}
}

func TestAddRemoveQP(t *testing.T) {
	o := loadTest(t)
	c := testQP(false, 0)
	addQP(t, o, c)
	if err := o.AddQP(c); err == nil {
		t.Error("adding a QPN twice succeeded")
	}
	if err := o.RemoveQP(c.QPN); err != nil {
		t.Fatal(err)
	}
	if err := o.RemoveQP(c.QPN); !errors.Is(err, ErrUnknownQP) {
		t.Errorf("removing an unknown QPN: %v, want ErrUnknownQP", err)
	}
	if _, err := o.Counters(c.QPN); !errors.Is(err, ErrUnknownQP) {
		t.Errorf("counters of an unknown QPN: %v, want ErrUnknownQP", err)
	}
	// Re-added: a fresh state.
	addQP(t, o, c)
	setClock(t, o, 1e9)
	runProg(t, o.objs.Ingress, dataPkt{ecn: ecnCE, op: roce.OpRCSendOnly, destQP: c.QPN}.frame(t), 0)
	if got := counters(t, o, c.QPN); got.NPCNPSent != 1 {
		t.Errorf("counters %+v after one CE", got)
	}
}
