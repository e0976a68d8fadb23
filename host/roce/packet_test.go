package roce

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestPacketLen(t *testing.T) {
	for _, c := range []struct {
		op   Opcode
		n    int
		want int
	}{
		{OpRCSendOnly, 0, 16}, {OpRCSendOnly, 1, 20}, {OpRCSendOnly, 3, 20}, {OpRCSendOnly, 4, 20},
		{OpRCSendOnly, 1024, 12 + 1024 + 4}, {OpRCWriteOnlyImm, 5, 32 + 5 + 3 + 4},
		{OpRCAck, 0, 20}, {OpCNP, 0, 32}, {Opcode(0x3f), 0, 0}, {OpRCSendOnly, -1, 0},
	} {
		if got := PacketLen(c.op, c.n); got != c.want {
			t.Errorf("PacketLen(%s, %d) = %d, want %d", c.op, c.n, got, c.want)
		}
	}
}

func TestBuildParse(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 2048)
	for _, c := range opcodeCases {
		for plen := range 9 {
			payload := make([]byte, plen)
			for i := range payload {
				payload[i] = byte(r.Uint32())
			}
			h := randomHeader(r, c.op)
			for i := range buf {
				buf[i] = 0xEE // Build must overwrite pad and ICRC
			}
			n := Build(buf, &h, payload)
			if n != PacketLen(c.op, plen) {
				t.Fatalf("%s/%d: Build = %d, want %d", c.name, plen, n, PacketLen(c.op, plen))
			}
			if int(h.BTH.PadCount) != (4-plen%4)%4 {
				t.Fatalf("%s/%d: PadCount %d", c.name, plen, h.BTH.PadCount)
			}
			pkt := buf[:n]
			if !bytes.Equal(pkt[n-ICRCLen-int(h.BTH.PadCount):], make([]byte, ICRCLen+int(h.BTH.PadCount))) {
				t.Fatalf("%s/%d: pad and ICRC not zero: %x", c.name, plen, pkt)
			}
			if (n-ICRCLen-c.hdrLen)%4 != 0 {
				t.Fatalf("%s/%d: padded payload not 4-byte aligned", c.name, plen)
			}
			var got Header
			p, err := Parse(pkt, &got)
			if c.op == OpCNP && !h.BTH.PPFC && plen > 0 {
				if !errors.Is(err, ErrCNPLength) {
					t.Fatalf("%s/%d: Parse of a CNP with a payload: %v, want ErrCNPLength", c.name, plen, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s/%d: Parse: %v", c.name, plen, err)
			}
			if got != h || !bytes.Equal(p, payload) {
				t.Fatalf("%s/%d: Parse\n got %+v %x\nwant %+v %x", c.name, plen, got, p, h, payload)
			}
			if cap(p) != len(p) {
				t.Fatalf("%s/%d: payload capacity %d reaches past the pad", c.name, plen, cap(p))
			}
			if plen > 0 && &p[0] != &pkt[c.hdrLen] {
				t.Fatalf("%s/%d: payload is a copy", c.name, plen)
			}
			if Build(buf[:n-1], &h, payload) != 0 {
				t.Fatalf("%s/%d: Build into %d bytes succeeded", c.name, plen, n-1)
			}
		}
	}
	h := Header{BTH: BTH{Opcode: 0x3f}}
	if Build(buf, &h, nil) != 0 {
		t.Error("Build with unknown opcode succeeded")
	}
}

func TestParseVector2(t *testing.T) {
	pkt := mustHex(t, vector2Pkt)
	udp := pkt[ipv4HdrTest+udpHdrTest:]
	var h Header
	p, err := Parse(udp, &h)
	if err != nil {
		t.Fatal(err)
	}
	// 24 60 ffff 00 0000d3 00 cf1710: UC SEND_ONLY, M set, PadCnt 2.
	want := BTH{Opcode: OpUCSendOnly, MigReq: true, PadCount: 2, PKey: DefaultPKey, DestQP: 0xd3, PSN: 0xcf1710}
	if h.BTH != want {
		t.Fatalf("BTH %+v, want %+v", h.BTH, want)
	}
	if wantP := mustHex(t, "4630818be28935d90e9a95505401be885e50"); !bytes.Equal(p, wantP) {
		t.Fatalf("payload %x, want %x", p, wantP)
	}
	// Re-building the same header and payload gives the same bytes, up to
	// the ICRC.
	out := make([]byte, len(udp))
	n := Build(out, &h, p)
	if n != len(udp) || !bytes.Equal(out[:n-ICRCLen], udp[:len(udp)-ICRCLen]) {
		t.Fatalf("Build = %x, want %x", out[:n], udp)
	}
}

func TestParseErrors(t *testing.T) {
	var h Header
	// Truncated at every length: below headers+ICRC it is ErrTruncated;
	// above, the payload just gets shorter until the pad no longer fits.
	b := make([]byte, 64)
	hdr := Header{BTH: BTH{Opcode: OpRCWriteOnly}, RETH: RETH{VA: 1, RKey: 2, DMALen: 9}}
	full := Build(b, &hdr, []byte("123456789")) // 28 + 9 + 3 pad + 4
	for n := range full {
		_, err := Parse(b[:n], &h)
		switch {
		case n < OpRCWriteOnly.HeaderLen()+ICRCLen:
			if !errors.Is(err, ErrTruncated) {
				t.Errorf("%d bytes: %v, want ErrTruncated", n, err)
			}
		case n < OpRCWriteOnly.HeaderLen()+ICRCLen+3:
			if !errors.Is(err, ErrPad) {
				t.Errorf("%d bytes: %v, want ErrPad", n, err)
			}
		default:
			if err != nil {
				t.Errorf("%d bytes: %v", n, err)
			}
		}
	}
	// Bad TVer.
	pkt := append([]byte(nil), b[:full]...)
	pkt[1] |= 0x01
	if _, err := Parse(pkt, &h); !errors.Is(err, ErrVersion) {
		t.Errorf("TVer 1: %v, want ErrVersion", err)
	}
	// Unknown opcodes.
	for _, op := range []byte{0x15, 0x2c, 0x40, 0x60, 0x66, 0x80, 0x82, 0xff} {
		pkt := append([]byte(nil), b[:full]...)
		pkt[0] = op
		if _, err := Parse(pkt, &h); !errors.Is(err, ErrUnknownOpcode) {
			t.Errorf("opcode %#02x: %v, want ErrUnknownOpcode", op, err)
		}
	}
	// Pad larger than the payload: an ACK carries none.
	ack := make([]byte, PacketLen(OpRCAck, 0))
	ah := Header{BTH: BTH{Opcode: OpRCAck}}
	Build(ack, &ah, nil)
	for pad := 1; pad <= MaxPadCount; pad++ {
		ack[1] = byte(pad) << 4
		if _, err := Parse(ack, &h); !errors.Is(err, ErrPad) {
			t.Errorf("ACK with PadCnt %d: %v, want ErrPad", pad, err)
		}
	}
}

func TestCNP(t *testing.T) {
	h := CNPHeader(0x000118, DefaultPKey)
	b := make([]byte, 64)
	n := Build(b, &h, nil)
	if n != 32 || PacketLen(OpCNP, 0) != BTHLen+CNPReservedLen+ICRCLen {
		t.Fatalf("CNP UDP payload %d bytes, want 32", n)
	}
	// Test vector 1 (ConnectX-4 Lx): BTH and 16 zero reserved bytes.
	want := mustHex(t, vector1IP)[ipv4HdrTest+udpHdrTest:]
	if !bytes.Equal(b[:n-ICRCLen], want) {
		t.Fatalf("CNP = %x, want %x", b[:n-ICRCLen], want)
	}
	if !h.BTH.BECN || h.BTH.FECN || h.BTH.AckReq || h.BTH.PSN != 0 || h.BTH.Opcode != OpCNP {
		t.Fatalf("CNP BTH %+v", h.BTH)
	}
	var got Header
	if p, err := Parse(b[:n], &got); err != nil || len(p) != 0 || got != h {
		t.Fatalf("Parse CNP: %+v %x %v", got, p, err)
	}
	if CNPHeader(0xFF000001, 1).BTH.DestQP != 1 {
		t.Error("CNPHeader does not mask DestQP to 24 bits")
	}
}

// TestPKeyMatch: IBTA Vol. 1 §10.9.3 — the same base, not 0, and at least
// one full member.
func TestPKeyMatch(t *testing.T) {
	for _, c := range []struct {
		packet, qp uint16
		want       bool
	}{
		{0xFFFF, 0xFFFF, true},
		{0x7FFF, 0xFFFF, true},  // a limited member to a full one
		{0xFFFF, 0x7FFF, true},  // a full member to a limited one
		{0x7FFF, 0x7FFF, false}, // two limited members never talk
		{0x8123, 0x8124, false}, // other partitions
		{0x8000, 0x8000, false}, // the invalid P_Key
		{0x0000, 0x8000, false},
		{0x8001, 0xFFFF, false},
	} {
		if got := PKeyMatch(c.packet, c.qp); got != c.want {
			t.Errorf("PKeyMatch(%#04x, %#04x) = %v, want %v", c.packet, c.qp, got, c.want)
		}
	}
	if ValidPKey(0x8000) || ValidPKey(0) || !ValidPKey(0x0001) || !ValidPKey(0xFFFF) {
		t.Error("ValidPKey: the invalid P_Key is base 0, every other key valid")
	}
}
