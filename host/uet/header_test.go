package uet

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// decodedTypes are the types this package encodes and decodes.
var decodedTypes = []Type{TypeRUDReq, TypeRODReq, TypeRUDCCReq, TypeRODCCReq, TypeAck, TypeAckCC, TypeNack, TypeCtrl}

// randomHeader returns a valid header of type t with every field random in
// its wire range and the fields of the variants the flags do not select
// zero (as DecodeHeader leaves them).
func randomHeader(r *rand.Rand, t Type) Header {
	flag := func() bool { return r.IntN(2) == 1 }
	u16 := func() uint16 { return uint16(r.Uint32()) }
	h := Header{Type: t}
	switch {
	case t.IsRequest():
		q := Request{
			Type: t, NextHeader: NextHeader(r.IntN(16)), Retx: flag(), AR: flag(), SYN: flag(),
			ClearPSNOffset: int16(u16()), PSN: r.Uint32(), SPDCID: u16(),
		}
		if q.SYN {
			q.UseRsvPDC, q.PSNOffset = flag(), u16()&PSNOffsetMask
		} else {
			q.DPDCID = u16()
		}
		if t.HasReqCC() {
			q.CCCID, q.CreditTarget = uint8(r.Uint32()), Credit(r.Uint32()&Units24Mask)
		}
		h.Request = q
	case t == TypeAck || t == TypeAckCC:
		a := Ack{
			Type: t, NextHeader: NextHeader(r.IntN(16)), M: flag(), Retx: flag(), Probe: flag(),
			Req: AckReq(r.IntN(4)), CACKPSN: r.Uint32(), SPDCID: u16(), DPDCID: u16(),
		}
		if a.Probe {
			a.ProbeOpaque = u16()
		} else {
			a.AckPSNOffset = int16(u16())
		}
		if t == TypeAckCC {
			c := AckCC{
				CCType: CCType(r.IntN(2)), CCFlags: uint8(r.IntN(16)), MPR: uint8(r.Uint32()),
				SACKPSNOffset: int16(u16()), SACKBitmap: r.Uint64(),
			}
			if c.CCType == CCNSCC {
				c.NSCC = NSCCState{
					ServiceTime: ServiceTime(u16()), RC: flag(), RcvCwndPend: uint8(r.IntN(128)),
					RcvdBytes: RcvdBytes(r.Uint32() & Units24Mask), OOOCount: u16(),
				}
			} else {
				c.Credit = CreditState{Credit: Credit(r.Uint32() & Units24Mask), OOOCount: u16()}
			}
			a.CC = c
		}
		h.Ack = a
	case t == TypeNack:
		h.Nack = Nack{
			NextHeader: NextHeader(r.IntN(16)), M: flag(), Retx: flag(), NT: flag(),
			Code: NackCode(r.Uint32()), VendorCode: uint8(r.Uint32()), NackPSN: r.Uint32(),
			SPDCID: u16(), DPDCID: u16(), MaxRecvPSNPlus1: r.Uint32(),
		}
	case t == TypeCtrl:
		c := Ctrl{
			CtrlType: CtrlType(r.IntN(16)), IsROD: flag(), Retx: flag(), AR: flag(), SYN: flag(),
			ProbeOpaque: u16(), PSN: r.Uint32(), SPDCID: u16(), Payload: r.Uint32(),
		}
		if c.SYN {
			c.UseRsvPDC, c.PSNOffset = flag(), u16()&PSNOffsetMask
		} else {
			c.DPDCID = u16()
		}
		h.Ctrl = c
	}
	return h
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, MaxHeaderLen+16)
	for _, typ := range decodedTypes {
		for range 2000 {
			h := randomHeader(r, typ)
			if err := h.Validate(); err != nil {
				t.Fatalf("random %s does not validate: %v\n%+v", typ, err, h)
			}
			n := h.Encode(buf)
			if n != typ.HeaderLen() || n != h.Len() {
				t.Fatalf("%s: Encode wrote %d bytes, HeaderLen %d, Len %d", typ, n, typ.HeaderLen(), h.Len())
			}
			var got Header
			m, err := DecodeHeader(buf[:n], &got)
			if err != nil || m != n {
				t.Fatalf("%s: DecodeHeader = %d, %v", typ, m, err)
			}
			if got != h {
				t.Fatalf("%s round trip\n got %+v\nwant %+v", typ, got, h)
			}
		}
	}
}

// Encode refuses short buffers and types it does not encode.
func TestEncodeRefuses(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, typ := range decodedTypes {
		h := randomHeader(r, typ)
		if n := h.Encode(make([]byte, typ.HeaderLen()-1)); n != 0 {
			t.Errorf("%s: Encode into %d bytes wrote %d", typ, typ.HeaderLen()-1, n)
		}
		if n := Build(make([]byte, typ.HeaderLen()+2), &h, make([]byte, 3)); n != 0 {
			t.Errorf("%s: Build into a short buffer wrote %d", typ, n)
		}
	}
	for _, typ := range []Type{0, TypeTSS, TypeRUDIReq, TypeRUDIResp, TypeUUDReq, TypeAckCCX, TypeNackCCX, 15, 31, 200} {
		h := Header{Type: typ}
		if n := h.Encode(make([]byte, 64)); n != 0 || h.Len() != 0 {
			t.Errorf("%s: Encode wrote %d, Len %d", typ, n, h.Len())
		}
	}
	// A form whose Type is not the Header's, or not of its family.
	mis := []Header{
		{Type: TypeRUDReq, Request: Request{Type: TypeRODReq}},
		{Type: TypeAckCC, Ack: Ack{Type: TypeAck}},
	}
	for _, h := range mis {
		if n := h.Encode(make([]byte, 64)); n != 0 || h.Len() != 0 || !errors.Is(h.Validate(), ErrField) {
			t.Errorf("%+v: Encode %d, Len %d, Validate %v", h, n, h.Len(), h.Validate())
		}
	}
	if n := (&Request{Type: TypeAck}).Encode(make([]byte, 64)); n != 0 {
		t.Errorf("Request of type ACK encoded %d bytes", n)
	}
	if n := (&Ack{Type: TypeNack}).Encode(make([]byte, 64)); n != 0 {
		t.Errorf("Ack of type NACK encoded %d bytes", n)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		h   Header
		msg string
	}{
		{Header{Type: TypeTSS}, "not decoded by this package: TSS"},
		{Header{Type: 0}, "unknown PDS type: type 0"},
		{Header{Type: TypeAck, Ack: Ack{Type: TypeAck, NextHeader: 16}}, "next_header 16, at most 15 (4 bits)"},
		{Header{Type: TypeRUDReq, Request: Request{Type: TypeRUDReq, SYN: true, DPDCID: 3}}, "dpdcid 3 with SYN"},
		{Header{Type: TypeRUDReq, Request: Request{Type: TypeRUDReq, SYN: true, PSNOffset: 4096}}, "psn_offset 4096, at most 4095 (12 bits)"},
		{Header{Type: TypeRUDReq, Request: Request{Type: TypeRUDReq, PSNOffset: 1}}, "psn_offset 1 without SYN"},
		{Header{Type: TypeRUDReq, Request: Request{Type: TypeRUDReq, CCCID: 1}}, "ccc_id 1, credit_target 0 on a RUD_REQ"},
		{Header{Type: TypeRODCCReq, Request: Request{Type: TypeRODCCReq, CreditTarget: 1 << 24}}, "credit_target 16777216, at most 16777215"},
		{Header{Type: TypeAck, Ack: Ack{Type: TypeAck, Req: 4}}, "req 4, at most 3"},
		{Header{Type: TypeAck, Ack: Ack{Type: TypeAck, Probe: true, AckPSNOffset: -1}}, "ack_psn_offset -1 on a probe ACK"},
		{Header{Type: TypeAck, Ack: Ack{Type: TypeAck, ProbeOpaque: 7}}, "probe_opaque 0x7 without the probe flag"},
		{Header{Type: TypeAck, Ack: Ack{Type: TypeAck, CC: AckCC{MPR: 1}}}, "only ACK_CC carries them"},
		{Header{Type: TypeAckCC, Ack: Ack{Type: TypeAckCC, CC: AckCC{CCType: 2}}}, "cc_type 2, want 0 (NSCC) or 1 (CREDIT)"},
		{Header{Type: TypeAckCC, Ack: Ack{Type: TypeAckCC, CC: AckCC{CCFlags: 16}}}, "cc_flags 16, at most 15"},
		{Header{Type: TypeAckCC, Ack: Ack{Type: TypeAckCC, CC: AckCC{NSCC: NSCCState{RcvCwndPend: 128}}}}, "rcv_cwnd_pend 128, at most 127 (7 bits)"},
		{Header{Type: TypeAckCC, Ack: Ack{Type: TypeAckCC, CC: AckCC{NSCC: NSCCState{RcvdBytes: 1 << 24}}}}, "rcvd_bytes 16777216"},
		{Header{Type: TypeAckCC, Ack: Ack{Type: TypeAckCC, CC: AckCC{Credit: CreditState{OOOCount: 1}}}}, "CREDIT cc_state set on an NSCC ACK_CC"},
		{Header{Type: TypeAckCC, Ack: Ack{Type: TypeAckCC, CC: AckCC{CCType: CCCredit, Credit: CreditState{Credit: 1 << 24}}}}, "credit 16777216"},
		{Header{Type: TypeAckCC, Ack: Ack{Type: TypeAckCC, CC: AckCC{CCType: CCCredit, NSCC: NSCCState{RC: true}}}}, "NSCC cc_state set on a CREDIT ACK_CC"},
		{Header{Type: TypeNack, Nack: Nack{NextHeader: 20}}, "next_header 20"},
		{Header{Type: TypeCtrl, Ctrl: Ctrl{CtrlType: 16}}, "ctrl_type 16, at most 15"},
		{Header{Type: TypeCtrl, Ctrl: Ctrl{UseRsvPDC: true}}, "use_rsv_pdc true, psn_offset 0 without SYN"},
	} {
		err := c.h.Validate()
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: Validate = %v, want %q", c.h, err, c.msg)
		}
	}
}

func TestTypeNames(t *testing.T) {
	want := map[Type]string{
		1: "TSS", 2: "RUD_REQ", 3: "ROD_REQ", 4: "RUDI_REQ", 5: "RUDI_RESP", 6: "UUD_REQ", 7: "ACK",
		8: "ACK_CC", 9: "ACK_CCX", 10: "NACK", 11: "CTRL", 12: "NACK_CCX", 13: "RUD_CC_REQ", 14: "ROD_CC_REQ",
	}
	for v := range 256 {
		typ := Type(v)
		name, known := want[typ]
		if !known {
			name = "0x" + hex2(v)
		}
		if typ.String() != name || typ.Known() != known {
			t.Errorf("Type(%d) = %q known %t, want %q known %t", v, typ, typ.Known(), name, known)
		}
	}
	for _, c := range []struct{ got, want string }{
		{NextHeaderNone.String(), "NO_SES"}, {NextHeaderReqStd.String(), "REQ_STD"},
		{NextHeaderRspDataSmall.String(), "RESP_DATA_SMALL"}, {NextHeader(7).String(), "0x7"},
		{CtrlNoop.String(), "NOOP"}, {CtrlCredit.String(), "CREDIT"}, {CtrlCreditReq.String(), "CREDIT_REQ"},
		{CtrlNegotiation.String(), "NEGOTIATION"}, {CtrlType(10).String(), "0xa"},
		{AckReqClose.String(), "CLOSE"}, {AckReq(3).String(), "RESERVED"},
		{CCNSCC.String(), "NSCC"}, {CCCredit.String(), "CREDIT"}, {CCType(2).String(), "0x2"},
	} {
		if c.got != c.want {
			t.Errorf("String() = %q, want %q", c.got, c.want)
		}
	}
}

func hex2(v int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>4], digits[v&15]})
}
