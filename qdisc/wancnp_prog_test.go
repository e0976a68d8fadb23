package qdisc

import (
	"errors"
	"math"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
)

// WAN CNPs (seed 001; bpf/port_wancnp.h wan_cnp) under BPF_PROG_RUN, on the PPFC
// rig: the tunnel-ingress PE is the PPFC rig's IPv4 source (198.18.1.2), behind the rig's veth.

var wanEgressPE = netip.MustParseAddr("198.19.200.1")

// craftTunnelled is a RoCEv2 packet (UDP from 0xc0de to 4791, destination
// QP 0x00abcd) inside IP-in-IP from the ingress PE (198.18.1.2) to the
// egress PE, the outer header with DSCP 26 and ECT(0).
func craftTunnelled(tb testing.TB) []byte {
	tb.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		EthernetType: layers.EthernetTypeIPv4}
	outer := &layers.IPv4{Version: 4, IHL: 5, TOS: 26<<2 | ect0, TTL: 64, Protocol: layers.IPProtocolIPv4,
		SrcIP: ppfcV4.source.Addr().AsSlice(), DstIP: wanEgressPE.AsSlice()}
	inner := &layers.IPv4{Version: 4, IHL: 5, TOS: 26<<2 | ect0, TTL: 63, Protocol: layers.IPProtocolUDP,
		SrcIP: net.IPv4(198, 18, 7, 2), DstIP: net.IPv4(198, 19, 1, 2)}
	udp := &layers.UDP{SrcPort: 0xc0de, DstPort: 4791}
	udp.SetNetworkLayerForChecksum(inner)
	bth := make([]byte, 12+1000+4)
	bth[0] = 0x0a // RC RDMA WRITE ONLY
	bth[5], bth[6], bth[7] = 0x00, 0xab, 0xcd
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, outer, inner, udp, gopacket.Payload(bth)); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// wanCNPSeen is a CNP the rig's veth sent.
type wanCNPSeen struct {
	src, dst   netip.Addr
	sport      uint16
	destQP     uint32
	light      bool
	icrcOK     bool
	dscp, ecn  uint8
	frameBytes int
}

func (r *ppfcRig) wanCNPs() []wanCNPSeen {
	r.tb.Helper()
	var out []wanCNPSeen
	buf := make([]byte, 2048)
	for {
		n, _, err := unix.Recvfrom(r.sock, buf, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) {
			return out
		}
		if err != nil {
			r.tb.Fatal(err)
		}
		p := gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil || udp.DstPort != roce.UDPPort {
			continue
		}
		pl := udp.Payload
		if len(pl) != 12+16+4 || pl[0] != 0x81 {
			r.tb.Errorf("not a CNP: % x", pl)
			continue
		}
		src, _ := netip.AddrFromSlice(ip.SrcIP)
		dst, _ := netip.AddrFromSlice(ip.DstIP)
		out = append(out, wanCNPSeen{
			src: src, dst: dst, sport: uint16(udp.SrcPort),
			destQP: uint32(pl[5])<<16 | uint32(pl[6])<<8 | uint32(pl[7]),
			light:  pl[4]&0x10 != 0,
			icrcOK: roce.VerifyICRC(netip.AddrPortFrom(src, uint16(udp.SrcPort)), netip.AddrPortFrom(dst, roce.UDPPort), pl),
			dscp:   ip.TOS >> 2, ecn: ip.TOS & 3, frameBytes: n,
		})
	}
}

func (r *ppfcRig) enqueueDraw(now time.Duration, backlog uint64, draw uint32, pkt []byte) {
	r.tb.Helper()
	r.at(now, backlog)
	if err := r.o.SetRandom(draw); err != nil {
		r.tb.Fatal(err)
	}
	err := nsexec.Do(r.ns, func() error {
		res, err := r.o.PortEnqueue.Run(&ebpf.RunOptions{Data: pkt, Context: bpf.SkBuff{IngressIfidx: 1}})
		if err == nil && res != tcActOK {
			err = errors.New("port_enqueue did not pass the packet")
		}
		return err
	})
	if err != nil {
		r.tb.Fatal(err)
	}
}

// TestWANCNPFromPort: a two-threshold class with notify sends a CNP to the
// ingress PE for a marked tunnelled packet: from the egress PE, from the
// inner flow's port, with its destination QP, BECN and L for light, DSCP
// 48, a valid ICRC; one per PE and kind per interval; an unmarked packet
// or one outside a tunnel sends none.
func TestWANCNPFromPort(t *testing.T) {
	cc := twoThresholdClass()
	cc.TwoThreshold.NotifyInterval = time.Millisecond
	r := newPPFCRig(t, cc, QueueVeth, ppfcV4)
	pkt := craftTunnelled(t)
	const t0 = 10 * time.Second

	// Light region, draw 0: ECT(1) and a light CNP.
	r.enqueueDraw(t0, 200_000, 0, pkt)
	got := r.wanCNPs()
	if len(got) != 1 {
		t.Fatalf("light mark: %d CNPs, want 1", len(got))
	}
	c := got[0]
	if c.src != wanEgressPE || c.dst != ppfcV4.source.Addr() || c.sport != 0xc0de || c.destQP != 0xabcd || !c.light ||
		!c.icrcOK || c.dscp != uint8(DSCPCNP) || c.ecn != 0 || c.frameBytes != 74 {
		t.Errorf("light CNP %+v: want %v -> %v from port 0xc0de, QP 0xabcd, L, DSCP %d Not-ECT, ICRC ok, 74 bytes",
			c, wanEgressPE, ppfcV4.source.Addr(), DSCPCNP)
	}
	// Within the interval: coalesced. A heavy one is a kind of its own.
	r.enqueueDraw(t0+500*time.Microsecond, 200_000, 0, pkt)
	if n := len(r.wanCNPs()); n != 0 {
		t.Errorf("a light mark 0.5 ms later sent %d CNPs, want 0 (coalesced)", n)
	}
	r.enqueueDraw(t0+600*time.Microsecond, 600_000, math.MaxUint32, pkt)
	got = r.wanCNPs()
	if len(got) != 1 || got[0].light || !got[0].icrcOK {
		t.Fatalf("heavy mark: CNPs %+v, want one without L", got)
	}
	// After the interval, light again.
	r.enqueueDraw(t0+1100*time.Microsecond, 200_000, 0, pkt)
	if got = r.wanCNPs(); len(got) != 1 || !got[0].light {
		t.Errorf("a light mark 1.1 ms after the first: CNPs %+v, want one light", got)
	}
	// No mark, no CNP; a marked packet outside a tunnel, none either.
	r.enqueueDraw(t0+5*time.Millisecond, 50_000, 0, pkt)
	plain := craft(t, pktSpec{dscp: uint8(DSCPRoCE), ecn: ect0, payload: 1000})
	r.enqueueDraw(t0+6*time.Millisecond, 600_000, math.MaxUint32, plain)
	if n := len(r.wanCNPs()); n != 0 {
		t.Errorf("an unmarked tunnelled packet and a marked plain one sent %d CNPs, want 0", n)
	}
	var qs bpf.PortClassState
	if err := r.o.ClassQueue.Lookup(uint32(ClassRoCE), &qs); err != nil {
		t.Fatal(err)
	}
	if qs.WanCnpFirstLightNs != uint64(t0) || qs.WanCnpFirstHeavyNs != uint64(t0+600*time.Microsecond) {
		t.Errorf("first CNPs at %d (light) and %d (heavy), want %d and %d", qs.WanCnpFirstLightNs, qs.WanCnpFirstHeavyNs, t0, t0+600*time.Microsecond)
	}
	s, err := r.o.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := s.Classes[ClassRoCE]
	if cs.WANCNPLightSent != 2 || cs.WANCNPHeavySent != 1 || cs.WANCNPCoalesced != 1 || s.Port.WANCNPFailed != 0 {
		t.Errorf("counters light %d heavy %d coalesced %d failed %d: want 2, 1, 1, 0",
			cs.WANCNPLightSent, cs.WANCNPHeavySent, cs.WANCNPCoalesced, s.Port.WANCNPFailed)
	}
}
