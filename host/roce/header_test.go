package roce

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// randomHeader fills every field of a Header for op with random values in
// their wire ranges, leaving the extension headers op does not carry zero
// (as DecodeHeader leaves them).
func randomHeader(r *rand.Rand, op Opcode) Header {
	h := Header{BTH: BTH{
		Opcode:   op,
		SE:       r.IntN(2) == 1,
		MigReq:   r.IntN(2) == 1,
		PadCount: uint8(r.IntN(MaxPadCount + 1)),
		PKey:     uint16(r.Uint32()),
		FECN:     r.IntN(2) == 1,
		BECN:     r.IntN(2) == 1,
		PPFC:     r.IntN(2) == 1,
		DestQP:   r.Uint32() & QPNMask,
		AckReq:   r.IntN(2) == 1,
		PSN:      r.Uint32() & PSNMask,
	}}
	if op.HasRETH() {
		h.RETH = RETH{VA: r.Uint64(), RKey: r.Uint32(), DMALen: r.Uint32()}
	}
	if op.HasAETH() {
		h.AETH = AETH{Syndrome: Syndrome(r.Uint32()), MSN: r.Uint32() & MSNMask}
	}
	if op.HasImm() {
		h.Imm = r.Uint32()
	}
	if op.HasDETH() {
		h.DETH = DETH{QKey: r.Uint32(), SrcQP: r.Uint32() & QPNMask}
	}
	if op.HasAtomicETH() {
		h.Atomic = AtomicETH{VA: r.Uint64(), RKey: r.Uint32(), SwapOrAdd: r.Uint64(), Compare: r.Uint64()}
	}
	if op.HasAtomicAckETH() {
		h.AtomicAck = r.Uint64()
	}
	return h
}

func TestHeaderRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range opcodeCases {
		for range 200 {
			h := randomHeader(r, c.op)
			buf := make([]byte, 64)
			n := h.Encode(buf)
			if n != c.hdrLen {
				t.Fatalf("%s: Encode wrote %d bytes, want %d", c.name, n, c.hdrLen)
			}
			var got Header
			m, err := DecodeHeader(buf[:n], &got)
			if err != nil {
				t.Fatalf("%s: DecodeHeader: %v", c.name, err)
			}
			if m != n || got != h {
				t.Fatalf("%s: round trip\n got %+v (%d bytes)\nwant %+v (%d bytes)", c.name, got, m, h, n)
			}
			if _, err := DecodeHeader(buf[:n-1], &got); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s: DecodeHeader of %d of %d bytes: %v, want ErrTruncated", c.name, n-1, n, err)
			}
			if h.Encode(buf[:n-1]) != 0 {
				t.Fatalf("%s: Encode into %d bytes succeeded", c.name, n-1)
			}
		}
	}
}

func TestBTHLayout(t *testing.T) {
	// Every field at its roce-wire.md §BTH position.
	h := Header{BTH: BTH{
		Opcode: OpRCSendOnly, SE: true, MigReq: true, PadCount: 3, PKey: 0x1234,
		FECN: true, BECN: true, PPFC: true, DestQP: 0xABCDEF, AckReq: true, PSN: 0x123456,
	}}
	var b [BTHLen]byte
	if h.Encode(b[:]) != BTHLen {
		t.Fatal("Encode failed")
	}
	want := mustHex(t, "04f01234e0abcdef80123456")
	if !bytes.Equal(b[:], want) {
		t.Fatalf("BTH = %x, want %x", b, want)
	}
	// Out-of-range values are truncated to their field widths.
	h.BTH = BTH{Opcode: OpRCSendOnly, PadCount: 0xFF, DestQP: 0xFF000001, PSN: 0xFF000002}
	h.Encode(b[:])
	if want := mustHex(t, "04300000000000010000000"+"2"); !bytes.Equal(b[:], want) {
		t.Fatalf("BTH = %x, want %x", b, want)
	}
}

func TestDecodeHeaderErrors(t *testing.T) {
	var h Header
	for n := range BTHLen {
		if _, err := DecodeHeader(make([]byte, n), &h); !errors.Is(err, ErrTruncated) {
			t.Errorf("%d bytes: %v, want ErrTruncated", n, err)
		}
	}
	b := mustHex(t, "04000000000000000000000000")
	for tver := 1; tver <= 0xF; tver++ {
		b[1] = byte(tver)
		if _, err := DecodeHeader(b, &h); !errors.Is(err, ErrVersion) {
			t.Errorf("TVer %d: %v, want ErrVersion", tver, err)
		}
	}
	b[1] = 0
	b[0] = 0x3f
	_, err := DecodeHeader(b, &h)
	if !errors.Is(err, ErrUnknownOpcode) {
		t.Errorf("opcode 0x3f: %v, want ErrUnknownOpcode", err)
	}
	if err != nil && err.Error() != "roce: unknown opcode: 0x3f" {
		t.Errorf("error text %q", err)
	}
}

func TestDecodeHeaderIgnoresReserved(t *testing.T) {
	// Reserved bits of BTH bytes 4 and 8, the DETH reserved byte and the CNP
	// reserved field are ignored on receive. Byte 4's 0x20 is the PPFC
	// draft's P bit, decoded.
	b := mustHex(t, "64000000"+"3f000001"+"7f000002"+"11111111"+"ff000003")
	var h Header
	n, err := DecodeHeader(b, &h)
	if err != nil || n != OpUDSendOnly.HeaderLen() {
		t.Fatalf("DecodeHeader: %d, %v", n, err)
	}
	want := Header{
		BTH:  BTH{Opcode: OpUDSendOnly, PPFC: true, DestQP: 1, PSN: 2},
		DETH: DETH{QKey: 0x11111111, SrcQP: 3},
	}
	if h != want {
		t.Fatalf("got %+v, want %+v", h, want)
	}
	cnp := mustHex(t, "81000000"+"00000005"+"00000000") // then 16 non-zero reserved bytes
	cnp = append(cnp, bytes.Repeat([]byte{0xAA}, CNPReservedLen)...)
	if n, err := DecodeHeader(cnp, &h); err != nil || n != 28 || h.BTH.DestQP != 5 {
		t.Fatalf("CNP with non-zero reserved: %d, %v, %+v", n, err, h)
	}
}

func TestDecodeHeaderClearsUnusedFields(t *testing.T) {
	h := Header{RETH: RETH{VA: 1}, AETH: AETH{MSN: 2}, Imm: 3, DETH: DETH{QKey: 4}, AtomicAck: 5}
	if _, err := DecodeHeader(make([]byte, BTHLen), &h); err != nil {
		t.Fatal(err)
	}
	if h != (Header{}) {
		t.Fatalf("stale fields after decoding RC_SEND_FIRST: %+v", h)
	}
}

func TestSyndrome(t *testing.T) {
	for _, c := range []struct {
		s             Syndrome
		want          uint8
		ack, nak, rnr bool
		str           string
	}{
		{ACKSyndrome(0), 0x00, true, false, false, "ACK(credits=0)"},
		{ACKSyndrome(5), 0x05, true, false, false, "ACK(credits=5)"},
		{ACKSyndrome(CreditsUnlimited), 0x1F, true, false, false, "ACK(unlimited)"},
		{ACKSyndrome(0xFF), 0x1F, true, false, false, "ACK(unlimited)"},
		{RNRNAKSyndrome(14), 0x2E, false, false, true, "RNR_NAK(timer=14)"},
		{NAKSyndrome(NAKPSNSequenceError), 0x60, false, true, false, "NAK(PSN_SEQUENCE_ERROR)"},
		{NAKSyndrome(NAKInvalidRequest), 0x61, false, true, false, "NAK(INVALID_REQUEST)"},
		{NAKSyndrome(NAKRemoteAccessError), 0x62, false, true, false, "NAK(REMOTE_ACCESS_ERROR)"},
		{NAKSyndrome(NAKRemoteOperationalError), 0x63, false, true, false, "NAK(REMOTE_OPERATIONAL_ERROR)"},
		{NAKSyndrome(NAKInvalidRDRequest), 0x64, false, true, false, "NAK(INVALID_RD_REQUEST)"},
		{NAKSyndrome(7), 0x67, false, true, false, "NAK(NAK_CODE_7)"},
		{Syndrome(0x40), 0x40, false, false, false, "RESERVED(0x40)"},
		{Syndrome(0x80), 0x80, false, false, false, "RESERVED(0x80)"},
	} {
		if uint8(c.s) != c.want || c.s.IsACK() != c.ack || c.s.IsNAK() != c.nak || c.s.IsRNRNAK() != c.rnr {
			t.Errorf("%s: %#02x ack %v nak %v rnr %v, want %#02x %v %v %v",
				c.str, uint8(c.s), c.s.IsACK(), c.s.IsNAK(), c.s.IsRNRNAK(), c.want, c.ack, c.nak, c.rnr)
		}
		if got := c.s.String(); got != c.str {
			t.Errorf("%#02x.String() = %q, want %q", uint8(c.s), got, c.str)
		}
	}
	if ACKSyndrome(9).Credits() != 9 || NAKSyndrome(NAKRemoteAccessError).NAKCode() != NAKRemoteAccessError ||
		RNRNAKSyndrome(31).RNRTimer() != 31 {
		t.Error("syndrome field accessors")
	}
	// AETH on the wire: syndrome byte then 24-bit MSN.
	h := Header{BTH: BTH{Opcode: OpRCAck, PSN: 7}, AETH: AETH{Syndrome: NAKSyndrome(NAKPSNSequenceError), MSN: 0x1ABCDEF}}
	var b [16]byte
	h.Encode(b[:])
	if want := mustHex(t, "60abcdef"); !bytes.Equal(b[BTHLen:], want) {
		t.Errorf("AETH = %x, want %x", b[BTHLen:], want)
	}
}

func TestPSN(t *testing.T) {
	for _, c := range []struct {
		psn  uint32
		n    int
		want uint32
	}{
		{0xFFFFFF, 1, 0}, {0, -1, 0xFFFFFF}, {5, 10, 15}, {0xFFFFF0, 0x20, 0x10},
		{0, 1 << 24, 0}, {0x123456, -(1 << 24), 0x123456}, {0xFFFFFFFF, 0, 0xFFFFFF},
	} {
		if got := PSNAdd(c.psn, c.n); got != c.want {
			t.Errorf("PSNAdd(%#x, %d) = %#x, want %#x", c.psn, c.n, got, c.want)
		}
	}
	for _, c := range []struct {
		a, b uint32
		want int32
	}{
		{0, 0xFFFFFF, 1}, {0xFFFFFF, 0, -1}, {10, 3, 7}, {3, 10, -7},
		{0x800000, 0, -0x800000}, {0x7FFFFF, 0, 0x7FFFFF}, {0, 0x800000, -0x800000},
		{0x000005, 0xFFFFFB, 10},
	} {
		if got := PSNDiff(c.a, c.b); got != c.want {
			t.Errorf("PSNDiff(%#x, %#x) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		a := r.Uint32() & PSNMask
		n := r.IntN(1<<23) - 1<<22
		if got := PSNDiff(PSNAdd(a, n), a); got != int32(n) {
			t.Fatalf("PSNDiff(PSNAdd(%#x, %d), %#x) = %d", a, n, a, got)
		}
	}
	if !PSNLess(0xFFFFFF, 0) || PSNLess(0, 0xFFFFFF) || PSNLess(4, 4) {
		t.Error("PSNLess")
	}
}
