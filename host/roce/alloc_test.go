package roce

import (
	"net/netip"
	"testing"
	"time"
)

func TestZeroAllocs(t *testing.T) {
	src4 := netip.MustParseAddrPort("10.0.17.1:49320")
	dst4 := netip.MustParseAddrPort("10.0.18.1:4791")
	src6 := netip.MustParseAddrPort("[2001:db8::1]:49152")
	dst6 := netip.MustParseAddrPort("[2001:db8::2]:4791")
	payload := make([]byte, 1024)
	buf := make([]byte, 2048)
	h := Header{
		BTH:  BTH{Opcode: OpRCWriteOnlyImm, PKey: DefaultPKey, DestQP: 0x118, PSN: 42, AckReq: true},
		RETH: RETH{VA: 0x1000, RKey: 7, DMALen: 1024},
		Imm:  0xdeadbeef,
	}
	n := Build(buf, &h, payload)
	pkt := buf[:n]
	SealICRC(src4, dst4, pkt)
	seg := append([]byte(nil), pkt...)
	le.PutUint32(seg[len(seg)-ICRCLen:], le.Uint32(seg[len(seg)-ICRCLen:])^ICRCIDDelta(len(seg), 7))
	v1 := mustHex(t, vector1IP)
	v6 := mustHex(t, vector6IP)
	ppfc := PPFC{Dest: dst4.Addr(), Action: PPFCStop, Port: 3, Pause: time.Millisecond, PSN: 9}
	ppfcPkt := make([]byte, PPFCLen)
	if _, err := BuildPPFC(ppfcPkt, src4, dst4, &ppfc); err != nil {
		t.Fatal(err)
	}
	var ppfcOut PPFC
	var out Header
	var sink uint32
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"Encode", func() { h.Encode(buf) }},
		{"DecodeHeader", func() { _, _ = DecodeHeader(pkt, &out) }},
		{"Build", func() { Build(buf, &h, payload) }},
		{"Parse", func() { _, _ = Parse(pkt, &out) }},
		{"SealICRC/v4", func() { SealICRC(src4, dst4, pkt) }},
		{"SealICRC/v6", func() { SealICRC(src6, dst6, pkt) }},
		{"VerifyICRC", func() { _ = VerifyICRC(src4, dst4, pkt) }},
		// A GSO segment's ID: the cached table of the length (the first
		// call, AllocsPerRun's warm-up, builds it).
		{"VerifyICRC/segment", func() { _ = VerifyICRC(src4, dst4, seg) }},
		{"ICRCIDDelta", func() { sink ^= ICRCIDDelta(len(pkt), 5) }},
		{"ICRCFromIP/v4", func() { sink, _ = ICRCFromIP(v1) }},
		{"ICRCFromIP/v6", func() { sink, _ = ICRCFromIP(v6) }},
		{"AppendPPFC", func() { _, _ = AppendPPFC(buf[:0], &ppfc) }},
		{"BuildPPFC", func() { _, _ = BuildPPFC(buf, src4, dst4, &ppfc) }},
		{"ParsePPFC", func() { _ = ParsePPFC(ppfcPkt, &ppfcOut) }},
		{"PSN", func() { sink += PSNAdd(sink, 1) + uint32(PSNDiff(sink, 3)) }},
	} {
		if a := testing.AllocsPerRun(1000, c.f); a != 0 {
			t.Errorf("%s: %v allocations per run, want 0", c.name, a)
		}
	}
	_ = sink
}
