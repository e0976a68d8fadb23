package netnstests

import (
	"errors"
	"math"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/lab/link"
	"github.com/fabriclab/fabriclab/qdisc"
)

// TC verdicts of drop_udp as BPF_PROG_RUN returns them.
const (
	tcNext = math.MaxUint32 // TC_ACT_UNSPEC (-1): pass on
	tcShot = 2              // TC_ACT_SHOT: dropped
)

// lossPkt describes a crafted frame for the drop program.
type lossPkt struct {
	v6       bool
	tcp      bool
	dport    uint16
	vlans    int
	ipOpts   bool   // IPv4 with 4 bytes of options (IHL 6)
	fragOff  uint16 // IPv4 fragment offset, 8-byte units
	truncate int    // keep only this many bytes (0: all)
}

func craftLoss(t *testing.T, p lossPkt) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	ls := []gopacket.SerializableLayer{eth}
	next := layers.EthernetTypeIPv4
	if p.v6 {
		next = layers.EthernetTypeIPv6
	}
	switch p.vlans {
	case 0:
		eth.EthernetType = next
	case 1:
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: 10, Type: next})
	case 2:
		eth.EthernetType = layers.EthernetTypeQinQ
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: 20, Type: layers.EthernetTypeDot1Q}, &layers.Dot1Q{VLANIdentifier: 10, Type: next})
	}
	proto := layers.IPProtocolUDP
	if p.tcp {
		proto = layers.IPProtocolTCP
	}
	var nl gopacket.NetworkLayer
	if p.v6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto,
			SrcIP: net.ParseIP("2001:db8:1::2"), DstIP: net.ParseIP("2001:db8:ff::2")}
		ls, nl = append(ls, ip), ip
	} else {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, Flags: layers.IPv4DontFragment, FragOffset: p.fragOff,
			SrcIP: net.IPv4(198, 18, 1, 2), DstIP: net.IPv4(198, 19, 0, 2)}
		if p.fragOff != 0 {
			ip.Flags = 0
		}
		if p.ipOpts {
			ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}} // NOP NOP NOP EOL
		}
		ls, nl = append(ls, ip), ip
	}
	if p.tcp {
		tcp := &layers.TCP{SrcPort: 40000, DstPort: layers.TCPPort(p.dport), Window: 1000}
		_ = tcp.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tcp)
	} else {
		udp := &layers.UDP{SrcPort: 4791, DstPort: layers.UDPPort(p.dport)}
		_ = udp.SetNetworkLayerForChecksum(nl)
		ls = append(ls, udp)
	}
	ls = append(ls, gopacket.Payload(make([]byte, 40)))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if p.truncate > 0 {
		b = b[:p.truncate]
	}
	return b
}

// loadDropTest loads drop_udp with the random draw taken from test_rand.
func loadDropTest(t *testing.T, testHooks bool) *bpf.DropObjects {
	t.Helper()
	labtest.RequireRoot(t)
	spec, err := bpf.LoadDrop()
	if err != nil {
		t.Fatal(err)
	}
	if testHooks {
		if err := spec.Variables[bpf.DropVarTestHooks].Set(uint8(1)); err != nil {
			t.Fatal(err)
		}
	}
	var objs bpf.DropObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("load: %+v", ve)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	return &objs
}

func dropStats(t *testing.T, objs *bpf.DropObjects) bpf.DropDropStats {
	t.Helper()
	var per []bpf.DropDropStats
	if err := objs.DropCounters.Lookup(uint32(0), &per); err != nil {
		t.Fatal(err)
	}
	var s bpf.DropDropStats
	for _, c := range per {
		s.Packets += c.Packets
		s.Candidates += c.Candidates
		s.Dropped += c.Dropped
		s.DroppedBytes += c.DroppedBytes
		s.Other += c.Other
		s.Malformed += c.Malformed
	}
	return s
}

// TestRoCELossProgram checks drop_udp through BPF_PROG_RUN: which frames
// are candidates, the decision against the random draw at both ends of the
// probability and at its boundary, and the counters.
func TestRoCELossProgram(t *testing.T) {
	objs := loadDropTest(t, true)
	setPPM := func(ppm uint32) {
		t.Helper()
		if err := objs.DropCfg.Put(uint32(0), ppm); err != nil {
			t.Fatal(err)
		}
	}
	setRand := func(r uint32) {
		t.Helper()
		if err := objs.TestRand.Set(r); err != nil {
			t.Fatal(err)
		}
	}
	// 1 % = 10000 ppm drops when draw·10^6/2^32 < 10000, i.e. draw below
	// 10000·2^32/10^6 = 42949672.96.
	const onePct = 10000
	const boundary = 42949672
	roce := lossPkt{dport: 4791}
	cases := []struct {
		name  string
		pkt   lossPkt
		ppm   uint32
		rand  uint32
		want  uint32
		class string // which counter moves: candidate, other, malformed
	}{
		{"roce-ppm0-draw0", roce, 0, 0, tcNext, "candidate"},
		{"roce-always-drawmax", roce, 1000000, math.MaxUint32, tcShot, "candidate"},
		{"roce-1pct-below", roce, onePct, boundary, tcShot, "candidate"},
		{"roce-1pct-at", roce, onePct, boundary + 1, tcNext, "candidate"},
		{"roce-ipv6", lossPkt{v6: true, dport: 4791}, 1000000, 0, tcShot, "candidate"},
		{"roce-vlan", lossPkt{vlans: 1, dport: 4791}, 1000000, 0, tcShot, "candidate"},
		{"roce-qinq", lossPkt{vlans: 2, dport: 4791}, 1000000, 0, tcShot, "candidate"},
		{"roce-ip-options", lossPkt{ipOpts: true, dport: 4791}, 1000000, 0, tcShot, "candidate"},
		{"udp-other-port", lossPkt{dport: 4792}, 1000000, 0, tcNext, "other"},
		{"tcp-4791", lossPkt{tcp: true, dport: 4791}, 1000000, 0, tcNext, "other"},
		{"ipv4-later-fragment", lossPkt{dport: 4791, fragOff: 185}, 1000000, 0, tcNext, "other"},
		{"ipv6-tcp", lossPkt{v6: true, tcp: true, dport: 4791}, 1000000, 0, tcNext, "other"},
		// 14 Ethernet + 20 IPv4 + 2: the UDP destination port is cut.
		{"truncated-udp", lossPkt{dport: 4791, truncate: 36}, 1000000, 0, tcNext, "malformed"},
		// BPF_PROG_RUN refuses IP frames shorter than an IP header: cut
		// them behind a VLAN tag, which it does not look through.
		{"truncated-ip", lossPkt{vlans: 1, dport: 4791, truncate: 14 + 4 + 12}, 1000000, 0, tcNext, "malformed"},
		{"truncated-ipv6", lossPkt{v6: true, vlans: 1, dport: 4791, truncate: 14 + 4 + 30}, 1000000, 0, tcNext, "malformed"},
		{"truncated-ipv6-udp", lossPkt{v6: true, dport: 4791, truncate: 14 + 40 + 3}, 1000000, 0, tcNext, "malformed"},
		{"truncated-vlan", lossPkt{vlans: 1, dport: 4791, truncate: 16}, 1000000, 0, tcNext, "malformed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			setPPM(tc.ppm)
			setRand(tc.rand)
			pkt := craftLoss(t, tc.pkt)
			before := dropStats(t, objs)
			ret, err := objs.DropUdp.Run(&ebpf.RunOptions{Data: pkt})
			if err != nil {
				t.Fatal(err)
			}
			after := dropStats(t, objs)
			if ret != tc.want {
				t.Errorf("verdict %d, want %d", int32(ret), int32(tc.want))
			}
			d := bpf.DropDropStats{
				Packets: after.Packets - before.Packets, Candidates: after.Candidates - before.Candidates,
				Dropped: after.Dropped - before.Dropped, DroppedBytes: after.DroppedBytes - before.DroppedBytes,
				Other: after.Other - before.Other, Malformed: after.Malformed - before.Malformed,
			}
			want := bpf.DropDropStats{Packets: 1}
			switch tc.class {
			case "candidate":
				want.Candidates = 1
			case "other":
				want.Other = 1
			case "malformed":
				want.Malformed = 1
			}
			if tc.want == tcShot {
				want.Dropped, want.DroppedBytes = 1, uint64(len(pkt))
			}
			if d != want {
				t.Errorf("counters moved by %+v, want %+v", d, want)
			}
		})
	}

	// A non-IP frame (ARP) passes as "other".
	t.Run("arp", func(t *testing.T) {
		setPPM(1000000)
		arp := make([]byte, 42)
		copy(arp[12:], []byte{0x08, 0x06})
		ret, err := objs.DropUdp.Run(&ebpf.RunOptions{Data: arp})
		if err != nil {
			t.Fatal(err)
		}
		if ret != tcNext {
			t.Errorf("ARP: verdict %d, want pass", int32(ret))
		}
	})
}

// TestRoCELossProgramRandom runs drop_udp with bpf_get_prandom_u32 at 1 %
// on 200000 candidates: the dropped share is within 5 standard deviations
// (±0.11 %) of 1 %.
func TestRoCELossProgramRandom(t *testing.T) {
	objs := loadDropTest(t, false)
	if err := objs.DropCfg.Put(uint32(0), uint32(10000)); err != nil {
		t.Fatal(err)
	}
	const n = 200000
	pkt := craftLoss(t, lossPkt{dport: 4791})
	if _, err := objs.DropUdp.Run(&ebpf.RunOptions{Data: pkt, Repeat: n}); err != nil {
		t.Fatal(err)
	}
	s := dropStats(t, objs)
	if s.Candidates != n || s.Packets != n {
		t.Fatalf("saw %d packets, %d candidates, want %d", s.Packets, s.Candidates, n)
	}
	const p = 0.01
	frac := float64(s.Dropped) / n
	sigma := math.Sqrt(p * (1 - p) / n)
	t.Logf("dropped %d of %d candidates: %.4f%% (1%% ± %.4f%% at 5σ)", s.Dropped, n, 100*frac, 500*sigma)
	if math.Abs(frac-p) > 5*sigma {
		t.Errorf("dropped %.4f%% of candidates, want 1%% ± %.4f%%", 100*frac, 500*sigma)
	}
}

// TestRoCELossGoBackN drops 1 % of the RoCE packets a sender sends
// (bpf/drop.c where its link enters the switch, before the switch port)
// under a verified stream of a fixed size: RC's go-back-N must deliver
// every byte intact, exercising NAKs, out-of-sequence arrivals and
// retransmissions. The drop sits at the switch's ingress, where the
// packets are the wire's: at the sender's own egress it would see a UDP
// GSO send (pktio) whole, before the device cuts it.
func TestRoCELossGoBackN(t *testing.T) {
	roceSize(t)
	b := newRoCEBed(t, 1, rocePortConfig())
	const fraction = 0.01
	in := b.d.SenderPorts[0]
	loss := in.Node.AddLossT(t, in.Dev, link.LossSpec{Fraction: fraction, Ingress: true})
	p := roceParams(t)
	f := b.dial(t, 0, senderQPConfig(p), true)
	const messages = 512 // 32 MiB: about 8200 packets, 82 drops expected
	want := uint64(messages * roceMsgBytes)
	start := time.Now()
	f.start(t, messages, true)
	select {
	case <-f.qp.Done():
	case <-time.After(30 * time.Second):
		acked, sent := f.qp.Progress()
		t.Fatalf("stream not done after 30 s: acked %d of %d packets sent; %+v", acked, sent, f.qp.Counters())
	}
	if err := f.qp.Err(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	cli, srv := f.qp.Counters(), f.peer.Counters()
	ls, err := loss.Stats()
	if err != nil {
		t.Fatal(err)
	}
	pc := settle(t, b.port).Classes[qdisc.ClassRoCE]
	t.Logf("%d MiB verified in %v (%.0f Mbit/s goodput)", want>>20, elapsed.Round(time.Millisecond), float64(want)*8/elapsed.Seconds()/1e6)
	t.Logf("loss link: %d candidates, %d dropped (%.3f%%), %d other, %d malformed", ls.Candidates, ls.Dropped, 100*ls.Fraction(), ls.Other, ls.Malformed)
	t.Logf("sender:   tx %d packets, retransmitted %d, packet_seq_err (NAKs) %d, local_ack_timeout_err %d, acked %d B",
		cli.TxPackets, cli.RetransmitPackets, cli.PacketSeqErr, cli.LocalAckTimeoutErr, cli.AckedBytes)
	t.Logf("receiver: rx %d packets, out_of_sequence %d, duplicate_request %d, received %d B, verify_errors %d",
		srv.RxPackets, srv.OutOfSequence, srv.DuplicateRequest, srv.RecvBytes, srv.VerifyErrors)
	t.Logf("port: %d packets dequeued, %d dropped, %d CE marked", pc.DequeuedPackets, pc.DroppedPackets(), pc.CEMarked())

	if srv.RecvBytes != want || cli.AckedBytes != want || srv.RecvMessages != messages {
		t.Errorf("received %d B (%d messages), acked %d B; want %d B in %d messages", srv.RecvBytes, srv.RecvMessages, cli.AckedBytes, want, messages)
	}
	if srv.VerifyErrors != 0 {
		t.Errorf("%d packets failed the content check", srv.VerifyErrors)
	}
	if cli.RetransmitPackets == 0 || srv.OutOfSequence == 0 || cli.PacketSeqErr == 0 {
		t.Errorf("go-back-N not exercised: %d retransmitted, %d out of sequence, %d NAKs", cli.RetransmitPackets, srv.OutOfSequence, cli.PacketSeqErr)
	}
	// Every packet the sender sent went through the loss link: the
	// candidates are exactly its data packets.
	if ls.Candidates != cli.TxPackets {
		t.Errorf("loss link saw %d RoCE packets, the sender sent %d", ls.Candidates, cli.TxPackets)
	}
	if srv.RxPackets != cli.TxPackets-ls.Dropped-pc.DroppedPackets() {
		t.Errorf("receiver got %d packets: sent %d - dropped %d by the loss link - %d by the port", srv.RxPackets, cli.TxPackets, ls.Dropped, pc.DroppedPackets())
	}
	// About 8200 candidates at p = 1 %: σ ≈ 0.11 %; 0.5–1.5 % is over 4σ.
	if f := ls.Fraction(); f < 0.005 || f > 0.015 {
		t.Errorf("measured loss %.3f%%, want 0.5–1.5%%", 100*f)
	}
}
