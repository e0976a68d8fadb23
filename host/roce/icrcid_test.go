package roce

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// ipv4RoCE returns a whole IPv4 packet (ID id, DF) carrying udp from src to
// dst, as the kernel sends it.
func ipv4RoCE(src, dst netip.AddrPort, id uint16, udp []byte) []byte {
	pkt := make([]byte, ipv4HdrTest+udpHdrTest+len(udp))
	pkt[0] = 0x45
	pkt[1] = 0x6a // TOS: masked
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	binary.BigEndian.PutUint16(pkt[4:], id)
	binary.BigEndian.PutUint16(pkt[6:], ipv4FlagDF)
	pkt[8], pkt[9] = 61, ipProtoUDP
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(pkt[12:], s[:])
	copy(pkt[16:], d[:])
	u := pkt[ipv4HdrTest:]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpHdrTest+len(udp)))
	binary.BigEndian.PutUint16(u[6:], 0xbeef) // masked
	copy(u[udpHdrTest:], udp)
	return pkt
}

// TestICRCIDDelta: the ICRC of a packet with IP ID k, computed from its
// whole IP header, is its ID-0 ICRC changed by ICRCIDDelta, for every
// length the agent sends and IDs in and beyond a GSO send's.
func TestICRCIDDelta(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := netip.MustParseAddrPort("198.18.0.1:49320")
	dst := netip.MustParseAddrPort("198.18.0.2:4791")
	for _, n := range []int{BTHLen + ICRCLen, 20, 32, 301, 1040, 1056, 4112, 8972} {
		udp := make([]byte, n)
		for i := range udp {
			udp[i] = byte(rng.Uint32())
		}
		id0 := ICRCv4(src, dst, udp)
		for _, id := range []uint16{0, 1, 2, 3, 31, 63, 64, 0x0478, 0xffff} {
			want, err := ICRCFromIP(ipv4RoCE(src, dst, id, udp))
			if err != nil {
				t.Fatal(err)
			}
			if got := id0 ^ ICRCIDDelta(n, id); got != want {
				t.Errorf("len %d ID %#x: ICRC(ID 0) ^ delta = %#08x, want %#08x", n, id, got, want)
			}
		}
	}
}

// TestVerifyICRCSegments: VerifyICRC accepts the IDs a GSO send gives its
// segments (0..GSOSegments-1) and no other, and still catches corruption.
func TestVerifyICRCSegments(t *testing.T) {
	src := netip.MustParseAddrPort("198.18.0.1:49320")
	dst := netip.MustParseAddrPort("198.18.0.2:4791")
	h := Header{BTH: BTH{Opcode: OpRCWriteMiddle, PKey: DefaultPKey, DestQP: 0x10001, PSN: 7}}
	buf := make([]byte, 2048)
	n := Build(buf, &h, make([]byte, 1024))
	udp := buf[:n]
	SealICRC(src, dst, udp)
	seal0 := le.Uint32(udp[n-ICRCLen:])
	for id := range 70 {
		le.PutUint32(udp[n-ICRCLen:], seal0^ICRCIDDelta(n, uint16(id)))
		if got, want := VerifyICRC(src, dst, udp), id < GSOSegments; got != want {
			t.Errorf("ID %d: VerifyICRC %v, want %v", id, got, want)
		}
		udp[40] ^= 1 // a flipped payload bit fails whatever the ID
		if VerifyICRC(src, dst, udp) {
			t.Errorf("ID %d: a corrupted payload verifies", id)
		}
		udp[40] ^= 1
	}
	// IPv6 has no ID: only the exact ICRC verifies.
	src6 := netip.MustParseAddrPort("[2001:db8::1]:49320")
	dst6 := netip.MustParseAddrPort("[2001:db8::2]:4791")
	SealICRC(src6, dst6, udp)
	le.PutUint32(udp[n-ICRCLen:], le.Uint32(udp[n-ICRCLen:])^ICRCIDDelta(n, 1))
	if VerifyICRC(src6, dst6, udp) {
		t.Error("IPv6: an ICRC changed by an ID delta verifies")
	}
}
