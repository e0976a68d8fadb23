package roce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net/netip"
	"slices"
	"testing"
)

func TestICRCSeed(t *testing.T) {
	// rxe_icrc.c starts its raw CRC state at 0xdebb20e3, the state after
	// the 8 leading 0xFF bytes.
	if ^icrcSeed != 0xdebb20e3 {
		t.Fatalf("seed state %#08x, want 0xdebb20e3", ^icrcSeed)
	}
}

func TestICRCVector1(t *testing.T) {
	pkt := mustHex(t, vector1IP)
	got, err := ICRCFromIP(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if got != vector1ICRC {
		t.Fatalf("ICRC %#08x, want %#08x", got, vector1ICRC)
	}
	var wire [ICRCLen]byte
	binary.LittleEndian.PutUint32(wire[:], got)
	if want := mustHex(t, vector1ICRCWire); !bytes.Equal(wire[:], want) {
		t.Fatalf("on the wire %x, want %x", wire, want)
	}
}

func TestICRCVector2(t *testing.T) {
	pkt := mustHex(t, vector2Pkt)
	got, err := ICRCFromIP(pkt[:len(pkt)-ICRCLen])
	if err != nil {
		t.Fatal(err)
	}
	if want := binary.LittleEndian.Uint32(mustHex(t, vector2ICRCWire)); got != want {
		t.Fatalf("ICRC %#08x, want %#08x", got, want)
	}
	// The trailing ICRC (or Ethernet padding) beyond the IP length is ignored.
	if got2, err := ICRCFromIP(append(pkt, 0, 0, 0, 0)); err != nil || got2 != got {
		t.Fatalf("with trailer: %#08x %v", got2, err)
	}
	// The reconstruction of ICRCv4 uses ID 0; this packet has ID 0x0478, so
	// it must differ, while the same packet with ID 0 must agree.
	src := netip.AddrPortFrom(netip.MustParseAddr("192.168.0.7"), 0xc000)
	dst := netip.AddrPortFrom(netip.MustParseAddr("192.168.0.7"), UDPPort)
	udp := pkt[ipv4HdrTest+udpHdrTest:]
	if ICRCv4(src, dst, udp) == got || VerifyICRC(src, dst, udp) {
		t.Fatal("ICRCv4 ignores the IP ID")
	}
	pkt[4], pkt[5] = 0, 0
	id0, err := ICRCFromIP(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if v4 := ICRCv4(src, dst, udp); v4 != id0 {
		t.Fatalf("ICRCv4 %#08x, ICRCFromIP with ID 0 %#08x", v4, id0)
	}
}

func TestICRCVector6(t *testing.T) {
	pkt := mustHex(t, vector6IP)
	got, err := ICRCFromIP(pkt)
	if err != nil || got != vector6ICRC {
		t.Fatalf("ICRCFromIP = %#08x, %v; want %#08x", got, err, vector6ICRC)
	}
	src := netip.AddrPortFrom(netip.MustParseAddr("2001:db8::1"), 0xc000)
	dst := netip.AddrPortFrom(netip.MustParseAddr("2001:db8::2"), UDPPort)
	udp := append(pkt[ipv6HdrTest+udpHdrTest:], 0, 0, 0, 0)
	if v6 := ICRCv6(src, dst, udp); v6 != vector6ICRC {
		t.Fatalf("ICRCv6 = %#08x, want %#08x", v6, vector6ICRC)
	}
	if ICRC(src, dst, udp) != vector6ICRC {
		t.Fatal("ICRC does not dispatch to ICRCv6")
	}
	SealICRC(src, dst, udp)
	if !VerifyICRC(src, dst, udp) || binary.LittleEndian.Uint32(udp[len(udp)-ICRCLen:]) != vector6ICRC {
		t.Fatalf("Seal/Verify: %x", udp)
	}
}

// synthIPv4 wraps a UDP payload in the IPv4/UDP headers Linux sends from an
// unconnected socket with IP_PMTUDISC_DO (ID 0, DF), with the given
// mutable fields.
func synthIPv4(src, dst netip.AddrPort, tos, ttl byte, udpCsum uint16, udpPayload []byte) []byte {
	udpLen := udpHdrTest + len(udpPayload)
	p := make([]byte, ipv4HdrTest+udpLen)
	p[0] = 0x45
	p[1] = tos
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	binary.BigEndian.PutUint16(p[6:], 0x4000)
	p[8] = ttl
	p[9] = 17
	binary.BigEndian.PutUint16(p[10:], 0x1234) // not a real checksum: masked
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	binary.BigEndian.PutUint16(p[20:], src.Port())
	binary.BigEndian.PutUint16(p[22:], dst.Port())
	binary.BigEndian.PutUint16(p[24:], uint16(udpLen))
	binary.BigEndian.PutUint16(p[26:], udpCsum)
	copy(p[28:], udpPayload)
	return p
}

func TestICRCv4MatchesFromIP(t *testing.T) {
	src := netip.MustParseAddrPort("10.0.17.1:49320")
	dst := netip.MustParseAddrPort("10.0.18.1:4791")
	for _, c := range opcodeCases {
		for plen := range 6 {
			h := Header{BTH: BTH{Opcode: c.op, PKey: DefaultPKey, DestQP: 0x11, PSN: 0x123, FECN: true}}
			b := make([]byte, PacketLen(c.op, plen))
			Build(b, &h, bytes.Repeat([]byte{0xA5}, plen))
			SealICRC(src, dst, b)
			if !VerifyICRC(src, dst, b) {
				t.Fatalf("%s/%d: sealed packet does not verify", c.name, plen)
			}
			want := binary.LittleEndian.Uint32(b[len(b)-ICRCLen:])
			// Masked fields: TOS, TTL, IP checksum, UDP checksum, BTH byte 4.
			for _, m := range []struct {
				tos, ttl byte
				csum     uint16
				byte4    byte
			}{{0x02, 64, 0, 0x80}, {0xC2, 1, 0xFFFF, 0x40}, {0x68, 255, 0x1234, 0x3F}} {
				b[bthOffECN] = m.byte4
				ip := synthIPv4(src, dst, m.tos, m.ttl, m.csum, b)
				got, err := ICRCFromIP(ip[:len(ip)-ICRCLen])
				if err != nil || got != want {
					t.Fatalf("%s/%d: ICRCFromIP %#08x %v, ICRCv4 %#08x", c.name, plen, got, err, want)
				}
				if !VerifyICRC(src, dst, b) {
					t.Fatalf("%s/%d: BTH byte 4 %#02x changed the ICRC", c.name, plen, m.byte4)
				}
			}
			// Covered fields: PKey, addresses, ports, payload.
			b[bthOffPKey] ^= 1
			if VerifyICRC(src, dst, b) {
				t.Fatalf("%s/%d: P_Key not covered", c.name, plen)
			}
			b[bthOffPKey] ^= 1
			if VerifyICRC(dst, src, b) || VerifyICRC(src, netip.AddrPortFrom(dst.Addr(), 4792), b) {
				t.Fatalf("%s/%d: addresses/ports not covered", c.name, plen)
			}
		}
	}
}

func TestICRCMappedAddresses(t *testing.T) {
	src4 := netip.MustParseAddrPort("10.0.0.1:1000")
	dst4 := netip.MustParseAddrPort("10.0.0.2:4791")
	src46 := netip.AddrPortFrom(netip.AddrFrom16(src4.Addr().As16()), src4.Port())
	dst46 := netip.AddrPortFrom(netip.AddrFrom16(dst4.Addr().As16()), dst4.Port())
	b := make([]byte, PacketLen(OpRCSendOnly, 8))
	h := Header{BTH: BTH{Opcode: OpRCSendOnly}}
	Build(b, &h, []byte("abcdefgh"))
	if ICRC(src4, dst4, b) != ICRC(src46, dst46, b) || ICRC(src46, dst46, b) != ICRCv4(src4, dst4, b) {
		t.Fatal("4-in-6 addresses not unmapped")
	}
	if ICRCv4(netip.MustParseAddrPort("[2001:db8::1]:1"), dst4, b) != 0 {
		t.Fatal("ICRCv4 with an IPv6 source")
	}
	var zero netip.AddrPort
	_ = ICRC(zero, zero, b) // must not panic
	_ = ICRCv4(zero, zero, b)
	_ = ICRCv6(zero, zero, b)
}

func TestICRCShortPayloads(t *testing.T) {
	src := netip.MustParseAddrPort("10.0.0.1:1000")
	dst := netip.MustParseAddrPort("10.0.0.2:4791")
	for n := range BTHLen + ICRCLen {
		b := make([]byte, n)
		_ = ICRC(src, dst, b)
		SealICRC(src, dst, b)
		if VerifyICRC(src, dst, b) {
			t.Errorf("%d-byte payload verifies", n)
		}
	}
}

func TestICRCUsesIEEE(t *testing.T) {
	// The ICRC of vector 1 is plain zlib CRC-32 over the masked bytes.
	pkt := mustHex(t, vector1IP)
	m := append(bytes.Repeat([]byte{0xFF}, 8), pkt...)
	for _, i := range []int{1, 8, 10, 11, 26, 27, 32} { // TOS TTL csum csum udpcsum udpcsum BTH[4]
		m[8+i] = 0xFF
	}
	if crc32.ChecksumIEEE(m) != vector1ICRC {
		t.Fatal("masking in the test is wrong")
	}
}

func TestICRCFromIPErrors(t *testing.T) {
	v4 := mustHex(t, vector1IP)
	v6 := mustHex(t, vector6IP)
	mut := func(b []byte, f func([]byte)) []byte {
		c := append([]byte(nil), b...)
		f(c)
		return c
	}
	for _, c := range []struct {
		name string
		pkt  []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"version 5", mut(v4, func(b []byte) { b[0] = 0x55 }), ErrNotIP},
		{"IHL 4", mut(v4, func(b []byte) { b[0] = 0x44 }), ErrNotIP},
		{"TCP", mut(v4, func(b []byte) { b[9] = 6 }), ErrNotUDP},
		{"MF", mut(v4, func(b []byte) { b[6] = 0x20 }), ErrFragment},
		{"frag offset", mut(v4, func(b []byte) { b[7] = 1 }), ErrFragment},
		{"v4 header cut", v4[:19], ErrTruncated},
		{"v4 body cut", v4[:len(v4)-1], ErrTruncated},
		{"v4 total length too small", mut(v4, func(b []byte) { b[3] = 20 + 8 + 12 + 3 }), ErrTruncated},
		{"IHL beyond packet", mut(v4, func(b []byte) { b[0] = 0x4F }), ErrTruncated},
		{"v6 header cut", v6[:39], ErrTruncated},
		{"v6 body cut", v6[:len(v6)-1], ErrTruncated},
		{"v6 ext header", mut(v6, func(b []byte) { b[6] = 0 }), ErrNotUDP},
		{"v6 jumbo", mut(v6, func(b []byte) { b[4], b[5] = 0, 0 }), ErrTruncated},
	} {
		if _, err := ICRCFromIP(c.pkt); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// IPv4 options are covered as sent.
	opt := append(append(append([]byte(nil), v4[:20]...), 1, 1, 1, 0), v4[20:]...) // NOP NOP NOP EOL
	opt[0] = 0x46
	binary.BigEndian.PutUint16(opt[2:], binary.BigEndian.Uint16(opt[2:])+4)
	got, err := ICRCFromIP(opt)
	if err != nil {
		t.Fatal(err)
	}
	m := append(bytes.Repeat([]byte{0xFF}, 8), opt...)
	for _, i := range []int{1, 8, 10, 11, 24 + 6, 24 + 7, 24 + 8 + 4} {
		m[8+i] = 0xFF
	}
	if want := crc32.ChecksumIEEE(m); got != want {
		t.Fatalf("with options %#08x, want %#08x", got, want)
	}
}

// TestSealICRCZeroTail: a payload of zeros sealed without reading it gets
// the ICRC SealICRC computes over it, for every length the cache holds and
// beyond it, over IPv4 and IPv6, with and without a RETH.
func TestSealICRCZeroTail(t *testing.T) {
	pairs := [][2]netip.AddrPort{
		{netip.MustParseAddrPort("198.18.0.1:49320"), netip.MustParseAddrPort("198.18.0.2:4791")},
		{netip.MustParseAddrPort("[2001:db8::1]:49152"), netip.MustParseAddrPort("[2001:db8::2]:4791")},
	}
	lengths := []int{0, 1, 15, 16, 63, 64, 65, 255, 1024, 4096, 4097, 9000}
	for i := range maxZeroLengths + 8 { // past the cache's bound
		lengths = append(lengths, 100+i)
	}
	for _, op := range []Opcode{OpRCWriteFirst, OpRCWriteMiddle, OpRCSendOnly} {
		for _, pr := range pairs {
			for _, n := range lengths {
				h := Header{BTH: BTH{Opcode: op, PKey: DefaultPKey, DestQP: 0x118, PSN: uint32(n)}}
				if op.HasRETH() {
					h.RETH = RETH{VA: 0x1000, RKey: 7, DMALen: uint32(n)}
				}
				want := make([]byte, PacketLen(op, n))
				Build(want, &h, make([]byte, n))
				got := slices.Clone(want)
				SealICRC(pr[0], pr[1], want)
				SealICRCZeroTail(pr[0], pr[1], got, n)
				if !slices.Equal(got, want) {
					t.Fatalf("%v %v, %d zero bytes: ICRC %x, SealICRC's %x", op, pr[0].Addr(), n,
						got[len(got)-ICRCLen:], want[len(want)-ICRCLen:])
				}
				// A zero count past the payload cannot reach the BTH.
				if op.HasRETH() {
					continue
				}
				SealICRCZeroTail(pr[0], pr[1], got, len(got))
				if !slices.Equal(got, want) {
					t.Fatalf("%v, %d zeros claimed over %d bytes: ICRC changed", op, len(got), n)
				}
			}
		}
	}
}
