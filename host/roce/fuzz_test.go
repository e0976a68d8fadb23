package roce

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// fuzzSeeds returns the test vectors' UDP payloads and one built packet of
// every known opcode.
func fuzzSeeds(tb testing.TB) [][]byte {
	v1 := append(mustHex(tb, vector1IP)[ipv4HdrTest+udpHdrTest:], mustHex(tb, vector1ICRCWire)...)
	v2 := mustHex(tb, vector2Pkt)[ipv4HdrTest+udpHdrTest:]
	v6 := append(mustHex(tb, vector6IP)[ipv6HdrTest+udpHdrTest:], 0, 0, 0, 0)
	seeds := [][]byte{v1, v2, v6}
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range opcodeCases {
		h := randomHeader(r, c.op)
		plen := r.IntN(9)
		b := make([]byte, PacketLen(c.op, plen))
		Build(b, &h, bytes.Repeat([]byte{byte(plen)}, plen))
		seeds = append(seeds, b)
	}
	return seeds
}

// maskReserved clears the bits of an encoded header that are reserved, so a
// decoded-and-re-encoded header compares equal to its input.
func maskReserved(b []byte, op Opcode) {
	b[bthOffECN] &^= bthByte4Rsvd
	b[bthOffAck] &^= bthByte8Rsvd
	if op.HasDETH() {
		b[BTHLen+4] = 0 // DETH reserved byte
	}
	if op == OpCNP {
		clear(b[BTHLen : BTHLen+CNPReservedLen])
	}
}

// checkReencode re-encodes h and compares it with the n header bytes of in.
func checkReencode(t *testing.T, in []byte, h *Header, n int) {
	t.Helper()
	if n != h.Len() {
		t.Fatalf("decoded %d bytes, Len() = %d", n, h.Len())
	}
	out := make([]byte, n)
	if m := h.Encode(out); m != n {
		t.Fatalf("Encode wrote %d of %d bytes", m, n)
	}
	want := bytes.Clone(in[:n])
	maskReserved(want, h.BTH.Opcode)
	if !bytes.Equal(out, want) {
		t.Fatalf("re-encoded\n %x\nwant\n %x", out, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Header
		p, err := Parse(data, &h)
		if err != nil {
			if p != nil {
				t.Fatal("payload returned with an error")
			}
			return
		}
		n := h.Len()
		if len(p) != len(data)-n-int(h.BTH.PadCount)-ICRCLen {
			t.Fatalf("payload %d bytes of %d (headers %d, pad %d)", len(p), len(data), n, h.BTH.PadCount)
		}
		if len(p) > 0 && &p[0] != &data[n] {
			t.Fatal("payload is not a subslice at the end of the headers")
		}
		checkReencode(t, data, &h, n)
		// Rebuilding from the parsed parts reproduces the packet up to
		// reserved bits, pad contents and ICRC whenever the pad is the
		// canonical one for the payload length.
		if h.BTH.PadCount == PadFor(len(p)) {
			out := make([]byte, len(data))
			h2 := h
			if m := Build(out, &h2, p); m != len(data) {
				t.Fatalf("Build = %d, want %d", m, len(data))
			}
			if h2 != h || !bytes.Equal(out[n:n+len(p)], p) {
				t.Fatal("Build does not reproduce the parsed packet")
			}
		}
	})
}

func FuzzDecodeHeader(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Header
		n, err := DecodeHeader(data, &h)
		if err != nil {
			if n != 0 {
				t.Fatalf("%d bytes consumed with error %v", n, err)
			}
			return
		}
		if n > len(data) {
			t.Fatalf("consumed %d of %d bytes", n, len(data))
		}
		checkReencode(t, data, &h, n)
	})
}

func FuzzICRCFromIP(f *testing.F) {
	v2 := mustHex(f, vector2Pkt)
	f.Add(mustHex(f, vector1IP))
	f.Add(v2)
	f.Add(v2[:len(v2)-ICRCLen])
	f.Add(mustHex(f, vector6IP))
	id0 := bytes.Clone(v2) // as ICRCv4 reconstructs it: ID 0, DF
	id0[ipv4OffID], id0[ipv4OffID+1] = 0, 0
	f.Add(id0)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		got, err := ICRCFromIP(pkt)
		if err != nil {
			return
		}
		// Where the packet is exactly what ICRCv4/ICRCv6 reconstruct, they
		// must agree with it.
		var src, dst netip.Addr
		var ipLen, total int
		switch pkt[0] >> ipVersionShift {
		case ipVersion4:
			if pkt[0] != 0x45 || binary.BigEndian.Uint32(pkt[ipv4OffID:]) != ipv4FlagDF {
				return
			}
			ipLen, total = ipv4HdrLen, int(binary.BigEndian.Uint16(pkt[ipv4OffTotalLen:]))
			src = netip.AddrFrom4([4]byte(pkt[ipv4OffSrc:]))
			dst = netip.AddrFrom4([4]byte(pkt[ipv4OffDst:]))
		case ipVersion6:
			ipLen = ipv6HdrLen
			total = ipv6HdrLen + int(binary.BigEndian.Uint16(pkt[ipv6OffPayLen:]))
			src = netip.AddrFrom16([16]byte(pkt[ipv6OffSrc:]))
			dst = netip.AddrFrom16([16]byte(pkt[ipv6OffDst:]))
			if src.Is4In6() {
				return // ICRC would take it for IPv4
			}
		}
		udp := pkt[ipLen:]
		if int(binary.BigEndian.Uint16(udp[udpOffLen:])) != total-ipLen {
			return
		}
		sp := netip.AddrPortFrom(src, binary.BigEndian.Uint16(udp[udpOffSrcPort:]))
		dp := netip.AddrPortFrom(dst, binary.BigEndian.Uint16(udp[udpOffDstPort:]))
		payload := append(bytes.Clone(udp[udpHdrLen:total-ipLen-ICRCLen]), 0, 0, 0, 0)
		if r := ICRC(sp, dp, payload); r != got {
			t.Fatalf("ICRC %#08x, ICRCFromIP %#08x", r, got)
		}
	})
}

// ppfcCanonical is what AppendPPFC writes for the PPFC in b (PPFCLen
// bytes): the fields ParsePPFC ignores at their sent values, ICRC zero.
func ppfcCanonical(b []byte) []byte {
	c := bytes.Clone(b)
	c[bthOffFlags] = 0
	c[bthOffPKey], c[bthOffPKey+1] = 0xFF, 0xFF
	c[bthOffECN] = bthPPFC
	c[5], c[6], c[7] = 0, 0, 0 // DestQP
	c[bthOffAck] = 0
	c[ppfcOffFlagsPT] = 0
	c[ppfcOffFlagsPT+1] &= ppfcPTMask
	c[ppfcOffReserved], c[ppfcOffReserved+1] = 0, 0
	clear(c[PPFCLen-ICRCLen:])
	return c
}

func FuzzPPFC(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s) // CNPs and the rest: never a PPFC
	}
	f.Add(append(mustHex(f, ppfcVector4), mustHex(f, ppfcVector4ICRCWire)...))
	f.Add(append(mustHex(f, ppfcVector6), mustHex(f, ppfcVector6ICRCWire)...))
	r := rand.New(rand.NewPCG(9, 10))
	for range 8 {
		p := randomPPFC(r)
		b, _ := AppendPPFC(nil, &p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p PPFC
		if err := ParsePPFC(data, &p); err != nil {
			return
		}
		if len(data) != PPFCLen {
			t.Fatalf("accepted %d bytes", len(data))
		}
		// What ParsePPFC accepts, AppendPPFC writes back, up to the
		// ignored fields and the ICRC, and parses to the same PPFC.
		out, err := AppendPPFC(nil, &p)
		if err != nil {
			t.Fatalf("AppendPPFC(%+v): %v", p, err)
		}
		if want := ppfcCanonical(data); !bytes.Equal(out, want) {
			t.Fatalf("re-encoded\n %x\nwant\n %x", out, want)
		}
		var p2 PPFC
		if err := ParsePPFC(out, &p2); err != nil || p2 != p {
			t.Fatalf("re-parsed %+v, %v; want %+v", p2, err, p)
		}
		// The generic parser, which the agent runs first, accepts it and
		// says it is one.
		var h Header
		if _, err := Parse(data, &h); err != nil || !h.BTH.IsPPFC() {
			t.Fatalf("Parse: %+v, %v", h.BTH, err)
		}
	})
}

// FuzzSealICRCZeroTail: for any UDP payload whose last zeros bytes before
// the ICRC are zero, SealICRCZeroTail writes SealICRC's ICRC.
func FuzzSealICRCZeroTail(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, uint16(len(s)/2), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, zeros uint16, v4 bool) {
		src, dst := netip.MustParseAddrPort("198.18.0.1:49152"), netip.MustParseAddrPort("198.18.0.2:4791")
		if !v4 {
			src, dst = netip.MustParseAddrPort("[2001:db8::1]:49152"), netip.MustParseAddrPort("[2001:db8::2]:4791")
		}
		want := bytes.Clone(in)
		z := min(int(zeros), max(0, len(want)-ICRCLen-BTHLen))
		clear(want[max(0, len(want)-ICRCLen-z):max(0, len(want)-ICRCLen)])
		got := bytes.Clone(want)
		SealICRC(src, dst, want)
		SealICRCZeroTail(src, dst, got, int(zeros))
		if !bytes.Equal(got, want) {
			t.Fatalf("%d zeros before the ICRC of %d bytes: %x, SealICRC's %x", zeros, len(in), got, want)
		}
	})
}
