package uet

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Wire vectors assembled by hand from the field tables of uet.md (checked
// against packet-uet.c and xdp2's pds.h); the comment under each name
// spells out the prologue: type<<11 | next header (or control type)<<7 |
// flags.
var vectors = []struct {
	name string
	hex  string
	h    Header
}{
	{
		// 2<<11 | 3<<7 | AR 0x08 = 0x1188; clear_psn_offset −3
		name: "RUD_REQ",
		hex:  "1188 fffd 00001000 0102 0304",
		h: Header{Type: TypeRUDReq, Request: Request{
			Type: TypeRUDReq, NextHeader: NextHeaderReqStd, AR: true,
			ClearPSNOffset: -3, PSN: 0x1000, SPDCID: 0x0102, DPDCID: 0x0304,
		}},
	},
	{
		// 3<<11 | 1<<7 | Retx 0x10 | SYN 0x04 = 0x1894; SYN slot
		// use_rsv_pdc 1, psn_offset 5 = 0x8005: start PSN 256
		name: "ROD_REQ/SYN",
		hex:  "1894 0000 00000105 0007 8005",
		h: Header{Type: TypeRODReq, Request: Request{
			Type: TypeRODReq, NextHeader: NextHeaderReqSmall, Retx: true, SYN: true,
			PSN: 0x105, SPDCID: 7, UseRsvPDC: true, PSNOffset: 5,
		}},
	},
	{
		// 13<<11 | 3<<7 = 0x6980; ccc_id 0x2a, credit_target 0x012345;
		// clear PSN wraps to 0
		name: "RUD_CC_REQ",
		hex:  "6980 0010 fffffff0 abcd 1234 2a012345",
		h: Header{Type: TypeRUDCCReq, Request: Request{
			Type: TypeRUDCCReq, NextHeader: NextHeaderReqStd,
			ClearPSNOffset: 16, PSN: 0xfffffff0, SPDCID: 0xabcd, DPDCID: 0x1234,
			CCCID: 0x2a, CreditTarget: 0x012345,
		}},
	},
	{
		// 14<<11 | AR 0x08 | SYN 0x04 = 0x700c; psn_offset 0xfff (max),
		// use_rsv_pdc 0; credit_target 0xffffff (max)
		name: "ROD_CC_REQ/SYN",
		hex:  "700c 0000 00000fff 0001 0fff 01ffffff",
		h: Header{Type: TypeRODCCReq, Request: Request{
			Type: TypeRODCCReq, AR: true, SYN: true,
			PSN: 0xfff, SPDCID: 1, PSNOffset: 0xfff, CCCID: 1, CreditTarget: 0xffffff,
		}},
	},
	{
		// 7<<11 | M 0x20 | req CLEAR 1<<1 = 0x3822; ack_psn_offset +2
		name: "ACK",
		hex:  "3822 0002 00000064 0304 0102",
		h: Header{Type: TypeAck, Ack: Ack{
			Type: TypeAck, M: true, Req: AckReqClear,
			AckPSNOffset: 2, CACKPSN: 100, SPDCID: 0x0304, DPDCID: 0x0102,
		}},
	},
	{
		// 7<<11 | Retx 0x10 | P 0x08 = 0x3818; probe_opaque 0xbeef
		name: "ACK/probe",
		hex:  "3818 beef 00000010 0002 0001",
		h: Header{Type: TypeAck, Ack: Ack{
			Type: TypeAck, Retx: true, Probe: true,
			ProbeOpaque: 0xbeef, CACKPSN: 16, SPDCID: 2, DPDCID: 1,
		}},
	},
	{
		// 8<<11 | 4<<7 | M 0x20 = 0x4220; cc_type 0 | cc_flags 0, mpr 64,
		// sack_psn_offset −64; cc_state: service_time 625 (80 µs), rc 1 |
		// rcv_cwnd_pend 64 = 0xc0, rcvd_bytes 16 (4096 B), ooo_count 3
		name: "ACK_CC/NSCC",
		hex: "4220 0000 01020304 0011 0022" +
			"00 40 ffc0 8000000000000001" + "0271 c0 000010 0003",
		h: Header{Type: TypeAckCC, Ack: Ack{
			Type: TypeAckCC, NextHeader: NextHeaderRsp, M: true,
			CACKPSN: 0x01020304, SPDCID: 0x11, DPDCID: 0x22,
			CC: AckCC{
				CCType: CCNSCC, MPR: 64, SACKPSNOffset: -64, SACKBitmap: 1<<63 | 1,
				NSCC: NSCCState{ServiceTime: 625, RC: true, RcvCwndPend: 64, RcvdBytes: 16, OOOCount: 3},
			},
		}},
	},
	{
		// 8<<11 = 0x4000; cc_type 1 | cc_flags 0 = 0x10, mpr 8; cc_state:
		// credit 0xabcdef | reserved 0 | ooo_count 0x0102
		name: "ACK_CC/CREDIT",
		hex: "4000 0005 0000ffff 0100 0200" +
			"10 08 0000 00000000000000ff" + "abcdef 000000 0102",
		h: Header{Type: TypeAckCC, Ack: Ack{
			Type: TypeAckCC, AckPSNOffset: 5, CACKPSN: 0xffff, SPDCID: 0x100, DPDCID: 0x200,
			CC: AckCC{
				CCType: CCCredit, MPR: 8, SACKBitmap: 0xff,
				Credit: CreditState{Credit: 0xabcdef, OOOCount: 0x0102},
			},
		}},
	},
	{
		// 8<<11 | P 0x08 | req CLOSE 2<<1 = 0x400c; cc_flags 0xf carried
		name: "ACK_CC/probe/cc_flags",
		hex: "400c 1234 00000001 0001 0002" +
			"0f 00 0001 0000000000000002" + "ffff 7f ffffff ffff",
		h: Header{Type: TypeAckCC, Ack: Ack{
			Type: TypeAckCC, Probe: true, Req: AckReqClose,
			ProbeOpaque: 0x1234, CACKPSN: 1, SPDCID: 1, DPDCID: 2,
			CC: AckCC{
				CCType: CCNSCC, CCFlags: 0xf, SACKPSNOffset: 1, SACKBitmap: 2,
				NSCC: NSCCState{ServiceTime: 0xffff, RcvCwndPend: 0x7f, RcvdBytes: 0xffffff, OOOCount: 0xffff},
			},
		}},
	},
	{
		// 10<<11 | M 0x20 | Retx 0x10 = 0x5030; code TRIMMED, max
		// received PSN + 1 = 0x205
		name: "NACK/TRIMMED",
		hex:  "5030 01 00 00000200 0102 0304 00000205",
		h: Header{Type: TypeNack, Nack: Nack{
			M: true, Retx: true, Code: NackTrimmed,
			NackPSN: 0x200, SPDCID: 0x0102, DPDCID: 0x0304, MaxRecvPSNPlus1: 0x205,
		}},
	},
	{
		// 10<<11 | NT 0x08 = 0x5008: a RUDI NACK, nack_psn is the pkt_id
		name: "NACK/NT/NO_CCC_AVAIL",
		hex:  "5008 05 7f deadbeef 0000 0000 00000000",
		h: Header{Type: TypeNack, Nack: Nack{
			NT: true, Code: NackNoCCCAvail, VendorCode: 0x7f, NackPSN: 0xdeadbeef,
		}},
	},
	{
		// 11<<11 | CREDIT 7<<7 | isROD 0x20 = 0x5ba0
		name: "CTRL/CREDIT",
		hex:  "5ba0 0000 00000010 0005 0006 00001000",
		h: Header{Type: TypeCtrl, Ctrl: Ctrl{
			CtrlType: CtrlCredit, IsROD: true, PSN: 16, SPDCID: 5, DPDCID: 6, Payload: 0x1000,
		}},
	},
	{
		// 11<<11 | CREDIT_REQ 8<<7 | AR 0x08 = 0x5c08
		name: "CTRL/CREDIT_REQ",
		hex:  "5c08 0000 00000001 0001 0002 00000040",
		h: Header{Type: TypeCtrl, Ctrl: Ctrl{
			CtrlType: CtrlCreditReq, AR: true, PSN: 1, SPDCID: 1, DPDCID: 2, Payload: 0x40,
		}},
	},
	{
		// 11<<11 | NEGOTIATION 9<<7 | SYN 0x04 = 0x5c84; SYN slot
		// use_rsv_pdc 1 | psn_offset 0x20 = 0x8020
		name: "CTRL/NEGOTIATION/SYN",
		hex:  "5c84 0000 00000020 0009 8020 00000000",
		h: Header{Type: TypeCtrl, Ctrl: Ctrl{
			CtrlType: CtrlNegotiation, SYN: true, PSN: 0x20, SPDCID: 9, UseRsvPDC: true, PSNOffset: 0x20,
		}},
	},
	{
		// 11<<11 | PROBE 6<<7 | Retx 0x10 = 0x5b10
		name: "CTRL/PROBE",
		hex:  "5b10 beef 00000010 0001 0002 00000000",
		h: Header{Type: TypeCtrl, Ctrl: Ctrl{
			CtrlType: CtrlProbe, Retx: true, ProbeOpaque: 0xbeef, PSN: 16, SPDCID: 1, DPDCID: 2,
		}},
	},
}

func mustHex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		tb.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func TestVectors(t *testing.T) {
	payload := []byte("SES header and data")
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			wire := mustHex(t, v.hex)
			if len(wire) != v.h.Type.HeaderLen() {
				t.Fatalf("vector is %d bytes, %s header is %d", len(wire), v.h.Type, v.h.Type.HeaderLen())
			}
			// Wire to struct.
			var h Header
			p, err := Parse(append(bytes.Clone(wire), payload...), &h)
			if err != nil {
				t.Fatal(err)
			}
			if h != v.h {
				t.Fatalf("decoded\n %+v\nwant\n %+v", h, v.h)
			}
			if !bytes.Equal(p, payload) {
				t.Fatalf("payload %q, want %q", p, payload)
			}
			if err := h.Validate(); err != nil {
				t.Fatalf("decoded header does not validate: %v", err)
			}
			// Struct to wire, through Header and through the form.
			out := make([]byte, MaxHeaderLen+8)
			if n := v.h.Encode(out); !bytes.Equal(out[:n], wire) {
				t.Fatalf("Header.Encode\n %x\nwant\n %x", out[:n], wire)
			}
			var n int
			switch {
			case v.h.Type.IsRequest():
				n = v.h.Request.Encode(out)
			case v.h.Type == TypeAck || v.h.Type == TypeAckCC:
				n = v.h.Ack.Encode(out)
			case v.h.Type == TypeNack:
				n = v.h.Nack.Encode(out)
			case v.h.Type == TypeCtrl:
				n = v.h.Ctrl.Encode(out)
			}
			if !bytes.Equal(out[:n], wire) {
				t.Fatalf("form Encode\n %x\nwant\n %x", out[:n], wire)
			}
			// Whole datagram.
			dg := make([]byte, len(wire)+len(payload))
			if m := Build(dg, &v.h, payload); m != len(dg) || !bytes.Equal(dg, append(wire, payload...)) {
				t.Fatalf("Build = %d\n %x", m, dg[:m])
			}
		})
	}
}

// Values derived from the vectors' fields.
func TestVectorDerived(t *testing.T) {
	get := func(name string) Header {
		for _, v := range vectors {
			if v.name == name {
				return v.h
			}
		}
		t.Fatalf("no vector %s", name)
		return Header{}
	}
	rud, syn, cc := get("RUD_REQ"), get("ROD_REQ/SYN"), get("RUD_CC_REQ")
	ack, nscc, credit := get("ACK"), get("ACK_CC/NSCC"), get("ACK_CC/CREDIT")
	ctrlSyn := get("CTRL/NEGOTIATION/SYN")
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"RUD_REQ clear PSN", rud.Request.ClearPSN(), uint32(0x1000 - 3)},
		{"SYN start PSN", syn.Request.StartPSN(), uint32(0x100)},
		{"CC clear PSN wraps", cc.Request.ClearPSN(), uint32(0)},
		{"credit_target bytes", cc.Request.CreditTarget.Bytes(), uint64(0x012345 * 256)},
		{"ACK PSN", ack.Ack.AckPSN(), uint32(102)},
		{"SACK base", nscc.Ack.SACKBase(), uint32(0x01020304 - 64)},
		{"service time", nscc.Ack.CC.NSCC.ServiceTime.Duration(), 80 * time.Microsecond},
		{"rcvd bytes", nscc.Ack.CC.NSCC.RcvdBytes.Bytes(), uint64(4096)},
		{"credit bytes", credit.Ack.CC.Credit.Credit.Bytes(), uint64(0xabcdef * 256)},
		{"CTRL SYN start PSN", ctrlSyn.Ctrl.StartPSN(), uint32(0)},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

// Every NACK code UE 1.0.1 defines, on one NACK, with its name.
func TestNackCodeVectors(t *testing.T) {
	names := map[NackCode]string{
		0x01: "TRIMMED", 0x02: "TRIMMED_LASTHOP", 0x03: "TRIMMED_ACK", 0x04: "NO_PDC_AVAIL",
		0x05: "NO_CCC_AVAIL", 0x06: "NO_BITMAP", 0x07: "NO_PKT_BUFFER", 0x08: "NO_GTD_DEL_AVAIL",
		0x09: "NO_SES_MSG_AVAIL", 0x0a: "NO_RESOURCE", 0x0b: "PSN_OOR_WINDOW", 0x0d: "ROD_OOO",
		0x0e: "INV_DPDCID", 0x0f: "PDC_HDR_MISMATCH", 0x10: "CLOSING", 0x11: "CLOSING_IN_ERR",
		0x12: "PKT_NOT_RCVD", 0x13: "GTD_DEL_RESP_UNAVAIL", 0x14: "ACK_WITH_DATA", 0x15: "INVALID_SYN",
		0x16: "PDC_MODE_MISMATCH", 0x17: "NEW_START_PSN", 0x18: "RCVD_SES_PROCG", 0x19: "UNEXP_EVENT",
		0x1a: "RCVR_INFER_LOSS", 0xfd: "EXP_NACK_NORMAL", 0xfe: "EXP_NACK_ERR", 0xff: "EXP_NACK_FATAL",
	}
	for c := range 256 {
		code := NackCode(c)
		want, known := names[code]
		if !known {
			want = fmt.Sprintf("0x%02x", c)
		}
		if code.String() != want || code.Known() != known {
			t.Errorf("NackCode(%#02x): %q known %t, want %q known %t", c, code, code.Known(), want, known)
		}
		// 10<<11 = 0x5000, no flags.
		wire := mustHex(t, fmt.Sprintf("5000 %02x 00 00000001 0002 0003 00000002", c))
		var h Header
		if _, err := Parse(wire, &h); err != nil || h.Nack.Code != code {
			t.Fatalf("code %#02x: decoded %s, %v", c, h.Nack.Code, err)
		}
		out := make([]byte, NackLen)
		if h.Nack.Encode(out); !bytes.Equal(out, wire) {
			t.Fatalf("code %#02x: encoded %x, want %x", c, out, wire)
		}
	}
}

// reservedVectors have reserved bits set; canonical is how host/uet
// re-encodes them (reserved bits zero).
var reservedVectors = []struct {
	name, hex, canonical string
}{
	// RUD_REQ with AR and every reserved flag bit (0x63).
	{"request flags", "106b 0000 00000001 0002 0003", "1008 0000 00000001 0002 0003"},
	// ROD_REQ SYN slot with its 3 reserved bits set: 0xf005.
	{"SYN slot", "1804 0000 00000105 0007 f005", "1804 0000 00000105 0007 8005"},
	// ACK with the reserved flags 0x41.
	{"ACK flags", "3841 0000 00000001 0002 0003", "3800 0000 00000001 0002 0003"},
	// NACK with the reserved flags 0x47.
	{"NACK flags", "5047 01 00 00000001 0002 0003 00000000", "5000 01 00 00000001 0002 0003 00000000"},
	// CTRL with the reserved flags 0x43 (0x20 is isROD).
	{"CTRL flags", "5843 0000 00000001 0002 0003 00000000", "5800 0000 00000001 0002 0003 00000000"},
	// CTRL SYN slot reserved bits.
	{"CTRL SYN slot", "5804 0000 00000001 0002 7001 00000000", "5804 0000 00000001 0002 0001 00000000"},
	// ACK_CC CREDIT with its 24 reserved bits set.
	{"CREDIT reserved", "4000 0000 00000001 0002 0003 10 00 0000 0000000000000000 000001 ffffff 0002",
		"4000 0000 00000001 0002 0003 10 00 0000 0000000000000000 000001 000000 0002"},
}

// Reserved bits are ignored when read and written as zero.
func TestReservedIgnored(t *testing.T) {
	for _, c := range reservedVectors {
		in, want := mustHex(t, c.hex), mustHex(t, c.canonical)
		var h, hc Header
		if _, err := DecodeHeader(in, &h); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if _, err := DecodeHeader(want, &hc); err != nil || h != hc {
			t.Fatalf("%s: decoded %+v, canonical form decodes to %+v (%v)", c.name, h, hc, err)
		}
		out := make([]byte, len(want))
		if n := h.Encode(out); n != len(want) || !bytes.Equal(out, want) {
			t.Fatalf("%s: re-encoded %x, want %x", c.name, out[:n], want)
		}
	}
}

// rejectedVectors are UDP payloads Parse rejects, with the error and a
// part of its message.
var rejectedVectors = []struct {
	name, hex string
	want      error
	msg       string
}{
	{"empty", "", ErrTruncated, "0 bytes, the PDS prologue needs 2"},
	{"1 byte", "11", ErrTruncated, "1 bytes, the PDS prologue needs 2"},
	{"type 0", "0000 0000 00000000 0000 0000", ErrUnknownType, "type 0"},
	{"type 15", "7800 0000 00000000 0000 0000", ErrUnknownType, "type 15"},
	{"type 31", "f800", ErrUnknownType, "type 31"},
	{"TSS", "0800 0000 00000000 0000 0000", ErrUnsupportedType, "TSS"},
	{"RUDI_REQ", "2000 0000 00000000", ErrUnsupportedType, "RUDI_REQ"},
	{"UUD_REQ", "3000 0000", ErrUnsupportedType, "UUD_REQ"},
	{"ACK_CCX", "4800 0000 00000000 0000 0000", ErrUnsupportedType, "ACK_CCX"},
	{"NACK_CCX", "6000 0000 00000000 0000 0000", ErrUnsupportedType, "NACK_CCX"},
	{"RUD_REQ short", "1000 0000 00000000 0000 00", ErrTruncated, "11 bytes, RUD_REQ needs 12"},
	{"RUD_CC_REQ short", "6800 0000 00000000 0000 0000", ErrTruncated, "12 bytes, RUD_CC_REQ needs 16"},
	{"ACK_CC short", "4000 0000 00000000 0000 0000 00", ErrTruncated, "13 bytes, ACK_CC needs 32"},
	{"NACK short", "5000 01 00 00000000 0000 0000", ErrTruncated, "12 bytes, NACK needs 16"},
	{"CTRL short", "5800", ErrTruncated, "2 bytes, CTRL needs 16"},
	{"ACK_CC cc_type 2", "4000 0000 00000000 0000 0000 20 00 0000 0000000000000000 0000000000000000", ErrCCType, "cc_type 2"},
}

func TestRejected(t *testing.T) {
	for _, c := range rejectedVectors {
		var h Header
		h.Type = TypeRUDReq
		keep := h
		p, err := Parse(mustHex(t, c.hex), &h)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want %v with %q", c.name, err, c.want, c.msg)
		}
		if p != nil || h != keep {
			t.Errorf("%s: payload %x, header %+v changed on error", c.name, p, h)
		}
	}
}
