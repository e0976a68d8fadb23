package npbpf

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/roce"
)

const (
	tcxNext   = ^uint32(0) // TC_ACT_UNSPEC as BPF_PROG_RUN returns it
	tcActShot = 2
	// tcActRedirect is np_egress's verdict on a CNP it built: once more
	// through the device's egress (bpf_redirect), sized anew for the qdisc.
	tcActRedirect = 7

	ecnNotECT = 0
	ecnECT0   = 2
	ecnCE     = 3
	dataDSCP  = 26
)

var (
	macSender   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	macReceiver = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	addrSender  = netip.MustParseAddr("198.18.0.1")
	addrRecv    = netip.MustParseAddr("198.18.0.2")
	addrSender6 = netip.MustParseAddr("2001:db8::1")
	addrRecv6   = netip.MustParseAddr("2001:db8::2")
)

func loadTest(tb testing.TB) *Objects {
	tb.Helper()
	labtest.RequireRoot(tb)
	o, err := load(LoadOptions{TestHooks: true}, true)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { o.Close() })
	return o
}

// dataPkt describes a RoCEv2 packet from the sender to the receiver.
type dataPkt struct {
	v6        bool
	ecn       uint8
	op        roce.Opcode
	destQP    uint32
	psn       uint32
	payload   int
	src, dst  netip.Addr // default: the sender and the receiver
	sport     uint16     // default 0xc001
	dport     uint16     // default 4791
	vlans     int
	ipOptions bool
	mf        bool   // IPv4 more fragments
	fragOff   uint16 // IPv4 fragment offset, 8-byte units
	tcp       bool   // TCP instead of UDP
	pkey      uint16 // default testPKey, testQP's
}

// testPKey is testQP's P_Key: a full member of partition 1.
const testPKey = 0x8001

// frame builds the packet with a correct ICRC (over the IP header as
// built).
func (p dataPkt) frame(tb testing.TB) []byte {
	tb.Helper()
	if p.dport == 0 {
		p.dport = roce.UDPPort
	}
	if p.sport == 0 {
		p.sport = 0xc001
	}
	if !p.src.IsValid() {
		p.src, p.dst = addrSender, addrRecv
		if p.v6 {
			p.src, p.dst = addrSender6, addrRecv6
		}
	}
	if p.pkey == 0 {
		p.pkey = testPKey
	}
	h := roce.Header{BTH: roce.BTH{Opcode: p.op, PKey: p.pkey, DestQP: p.destQP, PSN: p.psn}}
	if p.op.HasRETH() {
		h.RETH = roce.RETH{VA: 0x1000, RKey: 0x77, DMALen: uint32(p.payload)}
	}
	body := make([]byte, roce.PacketLen(p.op, p.payload))
	if roce.Build(body, &h, make([]byte, p.payload)) == 0 {
		tb.Fatalf("roce.Build %v with %d bytes failed", p.op, p.payload)
	}

	eth := &layers.Ethernet{SrcMAC: macSender, DstMAC: macReceiver}
	ls := []gopacket.SerializableLayer{eth}
	next := &eth.EthernetType
	for i := 0; i < p.vlans; i++ {
		*next = layers.EthernetTypeDot1Q
		v := &layers.Dot1Q{VLANIdentifier: uint16(100 + i), Priority: 3}
		ls = append(ls, v)
		next = &v.Type
	}
	tos := dataDSCP<<2 | p.ecn
	var l4 gopacket.SerializableLayer
	var net gopacket.NetworkLayer
	if p.v6 {
		*next = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, TrafficClass: tos, NextHeader: layers.IPProtocolUDP, HopLimit: 64,
			SrcIP: p.src.AsSlice(), DstIP: p.dst.AsSlice()}
		if p.tcp {
			ip.NextHeader = layers.IPProtocolTCP
		}
		net = ip
		ls = append(ls, ip)
	} else {
		*next = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TOS: tos, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
			SrcIP: p.src.AsSlice(), DstIP: p.dst.AsSlice()}
		if p.tcp {
			ip.Protocol = layers.IPProtocolTCP
		}
		if p.ipOptions {
			ip.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}} // router alert
		}
		if p.mf || p.fragOff != 0 {
			ip.Flags = 0
			if p.mf {
				ip.Flags = layers.IPv4MoreFragments
			}
			ip.FragOffset = p.fragOff
		}
		net = ip
		ls = append(ls, ip)
	}
	if p.tcp {
		t := &layers.TCP{SrcPort: layers.TCPPort(p.sport), DstPort: layers.TCPPort(p.dport), Window: 1000}
		_ = t.SetNetworkLayerForChecksum(net)
		l4 = t
	} else {
		u := &layers.UDP{SrcPort: layers.UDPPort(p.sport), DstPort: layers.UDPPort(p.dport)}
		_ = u.SetNetworkLayerForChecksum(net)
		l4 = u
	}
	ls = append(ls, l4, gopacket.Payload(body))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		tb.Fatal(err)
	}
	b := buf.Bytes()
	if !p.tcp && !p.mf && p.fragOff == 0 {
		l3 := 14 + 4*p.vlans
		icrc, err := roce.ICRCFromIP(b[l3:])
		if err != nil {
			tb.Fatalf("ICRC of the test packet: %v", err)
		}
		binary.LittleEndian.PutUint32(b[len(b)-roce.ICRCLen:], icrc)
	}
	return b
}

// runProg runs prog once on data and returns the verdict and the packet
// as the program left it.
func runProg(tb testing.TB, prog *ebpf.Program, data []byte, mark uint32) (uint32, []byte) {
	tb.Helper()
	out := make([]byte, len(data)+256)
	opts := &ebpf.RunOptions{Data: data, DataOut: out, Context: bpf.SkBuff{Mark: mark}}
	ret, err := prog.Run(opts)
	if err != nil {
		tb.Fatalf("prog run: %v", err)
	}
	return ret, opts.DataOut
}

func stats(tb testing.TB, o *Objects) Stats {
	tb.Helper()
	s, err := o.Stats()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func counters(tb testing.TB, o *Objects, qpn uint32) NPCounters {
	tb.Helper()
	c, err := o.Counters(qpn)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func redirects(tb testing.TB, o *Objects) uint64 {
	tb.Helper()
	n, err := o.Redirects()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func setClock(tb testing.TB, o *Objects, ns uint64) {
	tb.Helper()
	if err := o.SetClock(ns); err != nil {
		tb.Fatal(err)
	}
}

func addQP(tb testing.TB, o *Objects, c QPContext) {
	tb.Helper()
	if err := o.AddQP(c); err != nil {
		tb.Fatal(err)
	}
}

// testQP is the receiver's QP 0x000123 with the sender's QP 0x000456.
func testQP(v6 bool, n uint64) QPContext {
	c := QPContext{QPN: 0x123, PeerQPN: 0x456, Local: addrRecv, Peer: addrSender, SrcPort: 0xc0de,
		PKey: testPKey, MinTimeBetweenCNPs: timeNs(n)}
	if v6 {
		c.Local, c.Peer = addrRecv6, addrSender6
	}
	return c
}

// The transmit hook's test doubles (np_xmit_test).

// setXmitHook tells np_egress whether np_xmit is attached.
func setXmitHook(tb testing.TB, o *Objects, on bool) {
	tb.Helper()
	var v uint8
	if on {
		v = 1
	}
	if err := o.objs.XmitHook.Set(v); err != nil {
		tb.Fatal(err)
	}
}

// setTestSkb names the kernel sk_buff and device np_egress records for the
// next CNP, and np_xmit_test transmits.
func setTestSkb(tb testing.TB, o *Objects, skb, dev uint64) {
	tb.Helper()
	if err := o.objs.TestSkb.Set(skb); err != nil {
		tb.Fatal(err)
	}
	if err := o.objs.TestDev.Set(dev); err != nil {
		tb.Fatal(err)
	}
}

// setQdiscHolds makes the simulated clone come back built by np_egress and
// held by a qdisc: the CNP waits for np_xmit_test.
func setQdiscHolds(tb testing.TB, o *Objects, on bool) {
	tb.Helper()
	var v uint8
	if on {
		v = 1
	}
	if err := o.objs.TestQdiscHolds.Set(v); err != nil {
		tb.Fatal(err)
	}
}

// transmit runs np_xmit_test: a packet with mark transmits the test skb.
func transmit(tb testing.TB, o *Objects, mark uint32) {
	tb.Helper()
	runProg(tb, o.xmitTest, dataPkt{op: roce.OpCNP, destQP: 1}.frame(tb), mark)
}

// qpState reads the QP's map entry, under its lock.
func qpState(tb testing.TB, o *Objects, qpn uint32) bpfQP {
	tb.Helper()
	var q bpfQP
	if err := o.objs.NpQps.LookupWithFlags(qpn, &q, ebpf.LookupLock); err != nil {
		tb.Fatal(err)
	}
	return q
}
