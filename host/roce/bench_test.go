package roce

import (
	"fmt"
	"net/netip"
	"testing"
)

func benchPacket(b *testing.B, payloadLen int) []byte {
	b.Helper()
	h := Header{BTH: BTH{Opcode: OpRCSendOnly, PKey: DefaultPKey, DestQP: 0x118, PSN: 1}}
	pkt := make([]byte, PacketLen(OpRCSendOnly, payloadLen))
	Build(pkt, &h, make([]byte, payloadLen))
	return pkt
}

// BenchmarkSealICRC1024: the CRC over the payload, and over a payload of
// zeros it need not read (SealICRCZeroTail).
func BenchmarkSealICRC1024(b *testing.B) {
	src := netip.MustParseAddrPort("10.0.17.1:49320")
	dst := netip.MustParseAddrPort("10.0.18.1:4791")
	for _, zeros := range []int{0, 1024} {
		b.Run(fmt.Sprintf("zeros=%d", zeros), func(b *testing.B) {
			pkt := benchPacket(b, 1024)
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			for b.Loop() {
				SealICRCZeroTail(src, dst, pkt, zeros)
			}
		})
	}
}

func BenchmarkVerifyICRC1024v6(b *testing.B) {
	src := netip.MustParseAddrPort("[2001:db8::1]:49152")
	dst := netip.MustParseAddrPort("[2001:db8::2]:4791")
	pkt := benchPacket(b, 1024)
	SealICRC(src, dst, pkt)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		if !VerifyICRC(src, dst, pkt) {
			b.Fatal("does not verify")
		}
	}
}

func BenchmarkICRCFromIPCNP(b *testing.B) {
	pkt := mustHex(b, vector1IP)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ICRCFromIP(pkt); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBuild1024(b *testing.B) {
	payload := make([]byte, 1024)
	buf := make([]byte, 2048)
	h := Header{BTH: BTH{Opcode: OpRCWriteFirst, PKey: DefaultPKey}, RETH: RETH{VA: 1, RKey: 2, DMALen: 4096}}
	b.ReportAllocs()
	for b.Loop() {
		Build(buf, &h, payload)
	}
}

func BenchmarkParse(b *testing.B) {
	buf := make([]byte, 2048)
	h := Header{BTH: BTH{Opcode: OpRCWriteFirst, PKey: DefaultPKey}, RETH: RETH{VA: 1, RKey: 2, DMALen: 4096}}
	n := Build(buf, &h, make([]byte, 1024))
	pkt := buf[:n]
	var out Header
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(pkt, &out); err != nil {
			b.Fatal(err)
		}
	}
}
