package uet

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// SES wire vectors, assembled by hand from packet-uet.c's field table
// (dissect_ses_std_req, dissect_ses_resp and the hf_uet_ses_* masks;
// checked against xdp2's ses.h). The comment under each name spells out
// the bytes that pack more than one field.
var sesReqVectors = []struct {
	name string
	hex  string
	s    SESRequest
}{
	{
		// byte 0: rsvd 0 | WRITE 0x01; byte 1: version 1<<6 | HD 0x04 |
		// EOM 0x02 | SOM 0x01 = 0x47; pid_on_fep 0x123, resource_index
		// 0xfff; SOM: header_data at 32
		name: "WRITE/SOM/EOM/HD",
		hex: "01 47 1234 05 00abcd 0123 0fff" + "0000000000001000 deadbeef" +
			"0102030405060708 1122334455667788 00010000",
		s: SESRequest{
			Opcode: SESWrite, Version: 1, HD: true, EOM: true, SOM: true,
			MessageID: 0x1234, IndexGeneration: 5, JobID: 0xabcd, PIDOnFEP: 0x123, ResourceIndex: 0xfff,
			BufferOffset: 0x1000, Initiator: 0xdeadbeef, MemKeyMatchBits: 0x0102030405060708,
			HeaderData: 0x1122334455667788, RequestLength: 0x10000,
		},
	},
	{
		// SEND 0x05; DC 0x20 | Rel 0x08 = 0x28, neither SOM nor EOM: at
		// 32 rsvd 18 bits | payload_length 0x3fff (max), message_offset
		// 0x4000; job_id 0xffffff (max)
		name: "SEND/middle/DC/Rel",
		hex: "05 28 0007 00 ffffff 0fff 0000" + "0000000000000000 00000001" +
			"ffffffffffffffff 00003fff 00004000 00100000",
		s: SESRequest{
			Opcode: SESSend, DC: true, Rel: true,
			MessageID: 7, JobID: 0xffffff, PIDOnFEP: 0xfff,
			Initiator: 1, MemKeyMatchBits: 1<<64 - 1,
			PayloadLength: 0x3fff, MessageOffset: 0x4000, RequestLength: 0x100000,
		},
	},
	{
		// DEFERRABLE_RTR 0x0c; version 3<<6 | IE 0x10 | EOM 0x02 = 0xd2;
		// the mem_key slot carries the restart token; payload_length
		// 1024, message_offset 65536
		name: "DEFERRABLE_RTR/EOM/IE",
		hex: "0c d2 ffff ff 000001 0001 0800" + "8000000000000000 00000000" +
			"cafef00d12345678 00000400 00010000 00010400",
		s: SESRequest{
			Opcode: SESDeferrableRTR, Version: 3, IE: true, EOM: true,
			MessageID: 0xffff, IndexGeneration: 0xff, JobID: 1, PIDOnFEP: 1, ResourceIndex: 0x800,
			BufferOffset: 1 << 63, MemKeyMatchBits: 0xcafef00d12345678,
			PayloadLength: 1024, MessageOffset: 0x10000, RequestLength: 0x10400,
		},
	},
	{
		// opcode 0x3f (xdp2: extended), SOM without HD: header_data is
		// carried whatever HD says
		name: "0x3f/SOM without HD",
		hex: "3f 01 0000 00 000000 0000 0000" + "0000000000000000 00000000" +
			"0000000000000000 00000000000000ff 00000000",
		s: SESRequest{Opcode: 0x3f, SOM: true, HeaderData: 0xff},
	},
}

var sesRespVectors = []struct {
	name string
	hex  string
	r    SESResponse
}{
	{
		// list 0 | RESPONSE 0x01; version 0 | OK 0x01
		name: "RESPONSE/OK",
		hex:  "01 01 1234 05 00abcd 00001000",
		r: SESResponse{Opcode: SESRespResponse, ReturnCode: SESRCOK,
			MessageID: 0x1234, IndexGeneration: 5, JobID: 0xabcd, ModifiedLength: 0x1000},
	},
	{
		// list 1<<6 | DEFAULT_RESPONSE 0 = 0x40; version 2<<6 | NO_MATCH
		// 0x05 = 0x85
		name: "DEFAULT_RESPONSE/overflow/NO_MATCH",
		hex:  "40 85 ffff ff ffffff ffffffff",
		r: SESResponse{List: 1, Opcode: SESRespDefault, Version: 2, ReturnCode: SESRCNoMatch,
			MessageID: 0xffff, IndexGeneration: 0xff, JobID: 0xffffff, ModifiedLength: 1<<32 - 1},
	},
	{
		// list 3<<6 | NO_RESPONSE 0x03 = 0xc3; version 3<<6 |
		// INITIATOR_ERR 0x23 = 0xe3
		name: "NO_RESPONSE/INITIATOR_ERR",
		hex:  "c3 e3 0001 00 000002 00000000",
		r: SESResponse{List: 3, Opcode: SESRespNoResponse, Version: 3, ReturnCode: SESRCInitiatorErr,
			MessageID: 1, JobID: 2},
	},
	{
		// RESPONSE_W_DATA 0x02 in a RESP, return code 0x3e (xdp2:
		// extended): decoded as they are
		name: "RESPONSE_W_DATA/0x3e",
		hex:  "02 3e 0000 00 000000 00000000",
		r:    SESResponse{Opcode: SESRespWithData, ReturnCode: 0x3e},
	},
}

// sesReservedVectors are REQ_STD headers with reserved bits set; canonical
// is how host/uet re-encodes them. RESP has no reserved bits.
var sesReservedVectors = []struct {
	name, hex, canonical string
}{
	// byte 0's top 2 bits, the top nibbles of pid_on_fep and
	// resource_index, and (SOM clear) the 18 bits above payload_length.
	{"REQ_STD reserved", "c1 00 0000 00 000000 f001 f002 0000000000000000 00000000 0000000000000000 ffffc003 00000004 00000000",
		"01 00 0000 00 000000 0001 0002 0000000000000000 00000000 0000000000000000 00000003 00000004 00000000"},
	// With SOM the slot is header_data: all 64 bits are the field.
	{"REQ_STD SOM", "41 01 0000 00 000000 0000 0000 0000000000000000 00000000 0000000000000000 ffffc00300000004 00000000",
		"01 01 0000 00 000000 0000 0000 0000000000000000 00000000 0000000000000000 ffffc00300000004 00000000"},
}

func TestSESVectors(t *testing.T) {
	data := []byte("data")
	for _, v := range sesReqVectors {
		t.Run("REQ_STD/"+v.name, func(t *testing.T) {
			wire := mustHex(t, v.hex)
			if len(wire) != SESStdLen {
				t.Fatalf("vector is %d bytes, want %d", len(wire), SESStdLen)
			}
			var s SESRequest
			n, err := DecodeSESRequest(append(bytes.Clone(wire), data...), &s)
			if err != nil || n != SESStdLen {
				t.Fatalf("DecodeSESRequest = %d, %v", n, err)
			}
			if s != v.s {
				t.Fatalf("decoded\n %+v\nwant\n %+v", s, v.s)
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("decoded header does not validate: %v", err)
			}
			out := make([]byte, SESStdLen+8)
			if n := v.s.Encode(out); !bytes.Equal(out[:n], wire) {
				t.Fatalf("Encode\n %x\nwant\n %x", out[:n], wire)
			}
			// Behind a RUD_REQ with next header REQ_STD, through Build and Parse.
			h := Header{Type: TypeRUDReq, Request: Request{Type: TypeRUDReq, NextHeader: NextHeaderReqStd, PSN: 9}}
			checkBehind(t, &h, wire, data, func(p []byte) (int, error) {
				var got SESRequest
				n, err := DecodeSESRequest(p, &got)
				if err == nil && got != v.s {
					t.Fatalf("behind PDS: decoded %+v", got)
				}
				return n, err
			})
		})
	}
	for _, v := range sesRespVectors {
		t.Run("RESP/"+v.name, func(t *testing.T) {
			wire := mustHex(t, v.hex)
			if len(wire) != SESRespLen {
				t.Fatalf("vector is %d bytes, want %d", len(wire), SESRespLen)
			}
			var r SESResponse
			n, err := DecodeSESResponse(append(bytes.Clone(wire), data...), &r)
			if err != nil || n != SESRespLen {
				t.Fatalf("DecodeSESResponse = %d, %v", n, err)
			}
			if r != v.r {
				t.Fatalf("decoded\n %+v\nwant\n %+v", r, v.r)
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("decoded header does not validate: %v", err)
			}
			out := make([]byte, SESRespLen+8)
			if n := v.r.Encode(out); !bytes.Equal(out[:n], wire) {
				t.Fatalf("Encode\n %x\nwant\n %x", out[:n], wire)
			}
			// Behind an ACK with next header RESP.
			h := Header{Type: TypeAck, Ack: Ack{Type: TypeAck, NextHeader: NextHeaderRsp, CACKPSN: 9}}
			checkBehind(t, &h, wire, data, func(p []byte) (int, error) {
				var got SESResponse
				n, err := DecodeSESResponse(p, &got)
				if err == nil && got != v.r {
					t.Fatalf("behind PDS: decoded %+v", got)
				}
				return n, err
			})
		})
	}
}

// checkBehind builds h | ses | data, parses it and decodes the SES header
// from the payload Parse returns.
func checkBehind(t *testing.T, h *Header, ses, data []byte, decode func([]byte) (int, error)) {
	t.Helper()
	dg := make([]byte, 64+len(ses)+len(data))
	n := Build(dg, h, append(bytes.Clone(ses), data...))
	var got Header
	p, err := Parse(dg[:n], &got)
	if err != nil || got.NextHeader() != h.NextHeader() {
		t.Fatalf("Parse: %v, next header %s", err, got.NextHeader())
	}
	m, err := decode(p)
	if err != nil || m != len(ses) || !bytes.Equal(p[m:], data) {
		t.Fatalf("SES after PDS: %d, %v; data %q", m, err, p[m:])
	}
}

// Values the vectors' fields imply.
func TestSESVectorDerived(t *testing.T) {
	rtr := sesReqVectors[2].s
	if inBuf, inKey := rtr.Opcode.RestartToken(); inBuf || !inKey {
		t.Errorf("DEFERRABLE_RTR restart token in buffer_offset %t, mem_key %t", inBuf, inKey)
	}
	if inBuf, inKey := SESDeferrableTSend.RestartToken(); !inBuf || inKey {
		t.Errorf("DEFERRABLE_TSEND restart token in buffer_offset %t, mem_key %t", inBuf, inKey)
	}
	if inBuf, inKey := SESWrite.RestartToken(); inBuf || inKey {
		t.Error("WRITE carries a restart token")
	}
	for _, v := range sesRespVectors {
		if want := v.r.Opcode != SESRespWithData; v.r.Opcode.NoData() != want {
			t.Errorf("%s: NoData %t", v.r.Opcode, !want)
		}
	}
}

func TestSESNames(t *testing.T) {
	ops := []string{"NO_OP", "WRITE", "READ", "ATOMIC", "FETCHING_ATOMIC", "SEND", "RENDEZVOUS_SEND",
		"DATAGRAM_SEND", "DEFERRABLE_SEND", "TAGGED_SEND", "RENDEZVOUS_TSEND", "DEFERRABLE_TSEND",
		"DEFERRABLE_RTR", "TSEND_ATOMIC", "TSEND_FETCH_ATOMIC", "MSG_ERROR"}
	resp := []string{"DEFAULT_RESPONSE", "RESPONSE", "RESPONSE_W_DATA", "NO_RESPONSE"}
	rcs := []string{"NULL", "OK", "BAD_GENERATION", "DISABLED", "DISABLED_GEN", "NO_MATCH",
		"UNSUPPORTED_OP", "UNSUPPORTED_SIZE", "AT_INVALID", "AT_PERM", "AT_ATS_ERROR", "AT_NO_TRANS",
		"AT_OUT_OF_RANGE", "HOST_POISONED", "HOST_UNSUCCESS_CMPL", "AMO_UNSUPPORTED_OP",
		"AMO_UNSUPPORTED_DT", "AMO_UNSUPPORTED_SIZE", "AMO_UNALIGNED", "AMO_FP_NAN", "AMO_FP_UNDERFLOW",
		"AMO_FP_OVERFLOW", "AMO_FP_INEXACT", "PERM_VIOLATION", "OP_VIOLATION", "BAD_INDEX", "BAD_PID",
		"BAD_JOB_ID", "BAD_MKEY", "BAD_ADDR", "CANCELLED", "UNDELIVERABLE", "UNCOR", "UNCOR_TRNSNT",
		"TOO_LONG", "INITIATOR_ERR", "DROPPED"}
	want := func(names []string, v int) (string, bool) {
		if v < len(names) {
			return names[v], true
		}
		return fmt.Sprintf("0x%02x", v), false
	}
	for v := range 256 {
		if n, k := want(ops, v); SESOpcode(v).String() != n || SESOpcode(v).Known() != k {
			t.Errorf("SESOpcode(%#x) = %q known %t, want %q", v, SESOpcode(v), SESOpcode(v).Known(), n)
		}
		if n, k := want(resp, v); SESRespOpcode(v).String() != n || SESRespOpcode(v).Known() != k {
			t.Errorf("SESRespOpcode(%#x) = %q known %t, want %q", v, SESRespOpcode(v), SESRespOpcode(v).Known(), n)
		}
		if n, k := want(rcs, v); SESReturnCode(v).String() != n || SESReturnCode(v).Known() != k {
			t.Errorf("SESReturnCode(%#x) = %q known %t, want %q", v, SESReturnCode(v), SESReturnCode(v).Known(), n)
		}
	}
	// The constants are packet-uet.c's values.
	for _, c := range []struct {
		got, want uint8
	}{
		{uint8(SESWrite), 0x01}, {uint8(SESSend), 0x05}, {uint8(SESTaggedSend), 0x09},
		{uint8(SESMsgError), 0x0f}, {uint8(SESRespNoResponse), 0x03}, {uint8(SESRCDropped), 0x24},
	} {
		if c.got != c.want {
			t.Errorf("constant %#x, want %#x", c.got, c.want)
		}
	}
}

// Reserved bits are ignored when read and written as zero.
func TestSESReservedIgnored(t *testing.T) {
	for _, c := range sesReservedVectors {
		in, want := mustHex(t, c.hex), mustHex(t, c.canonical)
		var s, sc SESRequest
		if _, err := DecodeSESRequest(in, &s); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if _, err := DecodeSESRequest(want, &sc); err != nil || s != sc {
			t.Fatalf("%s: decoded %+v, canonical form decodes to %+v (%v)", c.name, s, sc, err)
		}
		out := make([]byte, SESStdLen)
		if s.Encode(out); !bytes.Equal(out, want) {
			t.Fatalf("%s: re-encoded %x, want %x", c.name, out, want)
		}
		if !bytes.Equal(canonicalSESRequest(in), want) {
			t.Fatalf("%s: the fuzz target's canonical form differs", c.name)
		}
	}
}

// A short buffer is the only thing the SES decoders reject; the header is
// left as it was.
func TestSESTruncated(t *testing.T) {
	full := mustHex(t, sesReqVectors[0].hex)
	for n := range SESStdLen {
		s := sesReqVectors[1].s
		m, err := DecodeSESRequest(full[:n], &s)
		msg := fmt.Sprintf("%d bytes, the SES standard request header (REQ_STD) needs 44", n)
		if m != 0 || !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), msg) || s != sesReqVectors[1].s {
			t.Errorf("REQ_STD of %d bytes: %d, %v, %+v", n, m, err, s)
		}
	}
	resp := mustHex(t, sesRespVectors[0].hex)
	for n := range SESRespLen {
		r := sesRespVectors[1].r
		m, err := DecodeSESResponse(resp[:n], &r)
		msg := fmt.Sprintf("%d bytes, the SES response header (RESP) needs 12", n)
		if m != 0 || !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), msg) || r != sesRespVectors[1].r {
			t.Errorf("RESP of %d bytes: %d, %v, %+v", n, m, err, r)
		}
	}
	var s SESRequest
	var r SESResponse
	if s.Encode(make([]byte, SESStdLen-1)) != 0 || r.Encode(make([]byte, SESRespLen-1)) != 0 {
		t.Error("Encode wrote into a short buffer")
	}
	if s.Len() != SESStdLen || r.Len() != SESRespLen {
		t.Error("Len")
	}
}

func TestSESValidate(t *testing.T) {
	for _, c := range []struct {
		s   SESRequest
		msg string
	}{
		{SESRequest{Opcode: 64}, "REQ_STD opcode 64, at most 63 (6 bits)"},
		{SESRequest{Version: 4}, "REQ_STD version 4, at most 3 (2 bits)"},
		{SESRequest{JobID: 1 << 24}, "REQ_STD job_id 16777216, at most 16777215 (24 bits)"},
		{SESRequest{PIDOnFEP: 4096}, "REQ_STD pid_on_fep 4096, at most 4095 (12 bits)"},
		{SESRequest{ResourceIndex: 4096}, "REQ_STD resource_index 4096, at most 4095 (12 bits)"},
		{SESRequest{SOM: true, PayloadLength: 1}, "REQ_STD payload_length 1, message_offset 0 with SOM: the slot carries header_data"},
		{SESRequest{SOM: true, MessageOffset: 2}, "message_offset 2 with SOM"},
		{SESRequest{HD: true, HeaderData: 0xab}, "REQ_STD header_data 0xab without SOM: the slot carries payload_length and message_offset"},
		{SESRequest{PayloadLength: 0x4000}, "REQ_STD payload_length 16384, at most 16383 (14 bits)"},
	} {
		err := c.s.Validate()
		if !errors.Is(err, ErrField) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: Validate = %v, want %q", c.s, err, c.msg)
		}
	}
	for _, c := range []struct {
		r   SESResponse
		msg string
	}{
		{SESResponse{List: 4}, "RESP list 4, at most 3 (2 bits)"},
		{SESResponse{Opcode: 64}, "RESP opcode 64, at most 63 (6 bits)"},
		{SESResponse{Version: 4}, "RESP version 4, at most 3 (2 bits)"},
		{SESResponse{ReturnCode: 64}, "RESP return_code 64, at most 63 (6 bits)"},
		{SESResponse{JobID: 1 << 24}, "RESP job_id 16777216, at most 16777215 (24 bits)"},
	} {
		err := c.r.Validate()
		if !errors.Is(err, ErrField) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: Validate = %v, want %q", c.r, err, c.msg)
		}
	}
	// Flags in any combination, reserved and vendor opcodes are valid.
	ok := []SESRequest{{HD: true}, {HD: true, EOM: true}, {Opcode: 0x30, Version: 3}, {SOM: true, HeaderData: 1}}
	for _, s := range ok {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	if err := (&SESResponse{Opcode: 0x3f, ReturnCode: 0x3f, List: 3, Version: 3}).Validate(); err != nil {
		t.Error(err)
	}
}

// randomSESRequest returns a valid REQ_STD with every field random in its
// wire range and the fields of the variant SOM does not select zero.
func randomSESRequest(r *rand.Rand) SESRequest {
	flag := func() bool { return r.IntN(2) == 1 }
	s := SESRequest{
		Opcode: SESOpcode(r.IntN(64)), Version: uint8(r.IntN(4)),
		DC: flag(), IE: flag(), Rel: flag(), HD: flag(), EOM: flag(), SOM: flag(),
		MessageID: uint16(r.Uint32()), IndexGeneration: uint8(r.Uint32()), JobID: r.Uint32() & MaxJobID,
		PIDOnFEP: uint16(r.IntN(MaxPIDOnFEP + 1)), ResourceIndex: uint16(r.IntN(MaxResourceIndex + 1)),
		BufferOffset: r.Uint64(), Initiator: r.Uint32(), MemKeyMatchBits: r.Uint64(), RequestLength: r.Uint32(),
	}
	if s.SOM {
		s.HeaderData = r.Uint64()
	} else {
		s.PayloadLength, s.MessageOffset = uint16(r.IntN(MaxSESPayloadLength+1)), r.Uint32()
	}
	return s
}

// randomSESResponse returns a RESP with every field random in its wire
// range.
func randomSESResponse(r *rand.Rand) SESResponse {
	return SESResponse{
		List: uint8(r.IntN(4)), Opcode: SESRespOpcode(r.IntN(64)), Version: uint8(r.IntN(4)),
		ReturnCode: SESReturnCode(r.IntN(64)), MessageID: uint16(r.Uint32()), IndexGeneration: uint8(r.Uint32()),
		JobID: r.Uint32() & MaxJobID, ModifiedLength: r.Uint32(),
	}
}

func TestSESRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	buf := make([]byte, SESStdLen+4)
	for range 5000 {
		s := randomSESRequest(r)
		if err := s.Validate(); err != nil {
			t.Fatalf("random REQ_STD does not validate: %v\n%+v", err, s)
		}
		if n := s.Encode(buf); n != SESStdLen {
			t.Fatalf("Encode wrote %d", n)
		}
		var got SESRequest
		if n, err := DecodeSESRequest(buf, &got); err != nil || n != SESStdLen || got != s {
			t.Fatalf("round trip %d, %v\n got %+v\nwant %+v", n, err, got, s)
		}
		q := randomSESResponse(r)
		if err := q.Validate(); err != nil {
			t.Fatalf("random RESP does not validate: %v\n%+v", err, q)
		}
		if n := q.Encode(buf); n != SESRespLen {
			t.Fatalf("Encode wrote %d", n)
		}
		var gotR SESResponse
		if n, err := DecodeSESResponse(buf, &gotR); err != nil || n != SESRespLen || gotR != q {
			t.Fatalf("round trip %d, %v\n got %+v\nwant %+v", n, err, gotR, q)
		}
	}
}

// Encode truncates what Validate reports, and writes nothing outside the
// header's bytes.
func TestSESEncodeTruncates(t *testing.T) {
	s := SESRequest{Opcode: 0xff, Version: 0xff, JobID: 0xffffffff, PIDOnFEP: 0xffff, ResourceIndex: 0xffff,
		PayloadLength: 0xffff}
	buf := bytes.Repeat([]byte{0xaa}, SESStdLen+1)
	s.Encode(buf)
	want := mustHex(t, "3f c0 0000 00 ffffff 0fff 0fff 0000000000000000 00000000 0000000000000000 00003fff 00000000 00000000")
	if !bytes.Equal(buf[:SESStdLen], want) || buf[SESStdLen] != 0xaa {
		t.Fatalf("encoded %x", buf)
	}
	r := SESResponse{List: 0xff, Opcode: 0xff, Version: 0xff, ReturnCode: 0xff, JobID: 0xffffffff}
	buf = bytes.Repeat([]byte{0xaa}, SESRespLen+1)
	r.Encode(buf)
	if want := mustHex(t, "ff ff 0000 00 ffffff 00000000"); !bytes.Equal(buf[:SESRespLen], want) || buf[SESRespLen] != 0xaa {
		t.Fatalf("encoded %x", buf)
	}
}

func TestHeaderNextHeader(t *testing.T) {
	for _, c := range []struct {
		h    Header
		want NextHeader
	}{
		{Header{Type: TypeRODCCReq, Request: Request{Type: TypeRODCCReq, NextHeader: NextHeaderReqStd}}, NextHeaderReqStd},
		{Header{Type: TypeAckCC, Ack: Ack{Type: TypeAckCC, NextHeader: NextHeaderRsp}}, NextHeaderRsp},
		{Header{Type: TypeNack, Nack: Nack{NextHeader: NextHeaderRspData}}, NextHeaderRspData},
		{Header{Type: TypeCtrl, Ctrl: Ctrl{CtrlType: CtrlAckReq}}, NextHeaderNone},
		{Header{Type: TypeUUDReq}, NextHeaderNone},
	} {
		if got := c.h.NextHeader(); got != c.want {
			t.Errorf("%s: NextHeader %s, want %s", c.h.Type, got, c.want)
		}
	}
}
