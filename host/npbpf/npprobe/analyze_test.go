package npprobe

import (
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/fabriclab/fabriclab/host/roce"
)

func frame(t *testing.T, v6 bool, tos uint8, op roce.Opcode, qpn uint32, dport uint16) []byte {
	t.Helper()
	h := roce.Header{BTH: roce.BTH{Opcode: op, PKey: 0xffff, DestQP: qpn}}
	if op == roce.OpCNP {
		h = roce.CNPHeader(qpn, 0xffff)
	}
	body := make([]byte, roce.PacketLen(op, 0))
	roce.Build(body, &h, nil)
	eth := &layers.Ethernet{SrcMAC: []byte{2, 0, 0, 0, 0, 1}, DstMAC: []byte{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	udp := &layers.UDP{SrcPort: 0xc000, DstPort: layers.UDPPort(dport)}
	var ip gopacket.SerializableLayer
	if v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		i := &layers.IPv6{Version: 6, TrafficClass: tos, NextHeader: layers.IPProtocolUDP, HopLimit: 64,
			SrcIP: netip.MustParseAddr("2001:db8::1").AsSlice(), DstIP: netip.MustParseAddr("2001:db8::2").AsSlice()}
		_ = udp.SetNetworkLayerForChecksum(i)
		ip = i
	} else {
		i := &layers.IPv4{Version: 4, TOS: tos, TTL: 64, Protocol: layers.IPProtocolUDP,
			SrcIP: netip.MustParseAddr("198.18.0.1").AsSlice(), DstIP: netip.MustParseAddr("198.18.0.2").AsSlice()}
		_ = udp.SetNetworkLayerForChecksum(i)
		ip = i
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(body)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestAnalyze(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	var pkts []Packet
	add := func(us int, out bool, tos uint8, op roce.Opcode, qpn uint32) {
		p, ok := Decode(Frame{At: at(us), Out: out, Data: frame(t, us%2 == 1, tos, op, qpn, 4791)})
		if !ok {
			t.Fatalf("decode at %d µs", us)
		}
		pkts = append(pkts, p)
	}
	// QP 0x10 (peer 0x20): CE at 0, CNP at 3; CE at 10 and 20, CNP at 52.
	// QP 0x11 (peer 0x21): CE at 5, CNP at 9. Noise: ECT data, a CNP of
	// another QP, a CE of another QP.
	add(0, false, 0x6b, roce.OpRCWriteMiddle, 0x10)
	add(3, true, 0xc2, roce.OpCNP, 0x20)
	add(5, false, 0x6b, roce.OpRCWriteMiddle, 0x11)
	add(7, false, 0x6a, roce.OpRCWriteMiddle, 0x10)
	add(9, true, 0xc2, roce.OpCNP, 0x21)
	add(10, false, 0x6b, roce.OpRCWriteMiddle, 0x10)
	add(20, false, 0x6b, roce.OpRCWriteMiddle, 0x10)
	add(30, false, 0x6b, roce.OpRCWriteMiddle, 0x99)
	add(40, true, 0xc2, roce.OpCNP, 0x98)
	add(52, true, 0xc2, roce.OpCNP, 0x20)
	r := Analyze(pkts, map[uint32]uint32{0x10: 0x20, 0x11: 0x21})
	if r.CEIn != 4 || r.CNPOut != 3 || r.Unmatched != 0 {
		t.Errorf("CE %d CNP %d unmatched %d, want 4, 3, 0", r.CEIn, r.CNPOut, r.Unmatched)
	}
	want := []time.Duration{3 * time.Microsecond, 4 * time.Microsecond, 32 * time.Microsecond}
	if len(r.Latency) != 3 || r.Latency[0] != want[0] || r.Latency[1] != want[1] || r.Latency[2] != want[2] {
		t.Errorf("latency %v, want %v", r.Latency, want)
	}
	if s := r.Spacing[0x10]; len(s) != 1 || s[0] != 49*time.Microsecond {
		t.Errorf("spacing of 0x10 %v, want [49µs]", s)
	}
	if m, ok := r.MinSpacing(); !ok || m != 49*time.Microsecond {
		t.Errorf("min spacing %v %v", m, ok)
	}
	if p := Percentile(want, 0.5); p != 4*time.Microsecond {
		t.Errorf("p50 %v", p)
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, b := range [][]byte{
		frame(t, false, 0, roce.OpRCSendOnly, 1, 4792),
		frame(t, false, 0, roce.OpRCSendOnly, 1, 4791)[:40],
		{1, 2, 3},
	} {
		if _, ok := Decode(Frame{Data: b}); ok {
			t.Errorf("decoded %x", b)
		}
	}
}
