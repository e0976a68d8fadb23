package uet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// fuzzSeeds returns the wire vectors, the reserved-bit and rejected ones,
// and one random packet of every decoded type.
func fuzzSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, v := range vectors {
		seeds = append(seeds, mustHex(tb, v.hex))
	}
	for _, v := range reservedVectors {
		seeds = append(seeds, mustHex(tb, v.hex))
	}
	for _, v := range rejectedVectors {
		seeds = append(seeds, mustHex(tb, v.hex))
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, typ := range decodedTypes {
		h := randomHeader(r, typ)
		b := make([]byte, h.Len()+3)
		seeds = append(seeds, b[:Build(b, &h, []byte{1, 2, 3})])
	}
	return seeds
}

// FuzzParse: Parse never panics; what it accepts validates, re-encodes to
// its input up to the reserved bits, and parses again to the same header
// (parse → encode → parse is stable).
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
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrUnknownType) &&
				!errors.Is(err, ErrUnsupportedType) && !errors.Is(err, ErrCCType) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		n := h.Len()
		if n == 0 || n != h.Type.HeaderLen() || len(p) != len(data)-n {
			t.Fatalf("%s: Len %d, payload %d of %d bytes", h.Type, n, len(p), len(data))
		}
		if len(p) > 0 && &p[0] != &data[n] {
			t.Fatal("payload is not the subslice after the header")
		}
		if err := h.Validate(); err != nil {
			t.Fatalf("parsed header does not validate: %v\n%+v", err, h)
		}
		out := make([]byte, n)
		if m := h.Encode(out); m != n {
			t.Fatalf("Encode wrote %d of %d bytes", m, n)
		}
		if want := canonical(data[:n]); !bytes.Equal(out, want) {
			t.Fatalf("re-encoded\n %x\nwant\n %x", out, want)
		}
		var h2 Header
		if m, err := DecodeHeader(out, &h2); err != nil || m != n || h2 != h {
			t.Fatalf("re-parsed %+v, %d, %v\nwant %+v", h2, m, err, h)
		}
		dg := make([]byte, len(data))
		if m := Build(dg, &h, p); m != len(data) || !bytes.Equal(dg[n:], p) {
			t.Fatalf("Build = %d", m)
		}
	})
}

// canonical clears the reserved bits of an accepted header, independently
// of the encoder: the flag bits each form reserves, the SYN slot's 3
// reserved bits, the CREDIT cc_state's 24 reserved bits.
func canonical(in []byte) []byte {
	b := bytes.Clone(in)
	typ := Type(b[0] >> 3)
	flags := b[1] & prologueFlagsMask
	var rsvd byte
	switch {
	case typ.IsRequest():
		rsvd = reservedRequestFlags
	case typ == TypeAck || typ == TypeAckCC:
		rsvd = reservedAckFlags
	case typ == TypeNack:
		rsvd = reservedNackFlags
	case typ == TypeCtrl:
		rsvd = reservedCtrlFlags
	}
	b[1] &^= rsvd
	if (typ.IsRequest() || typ == TypeCtrl) && flags&FlagSYN != 0 {
		b[offDPDCID] &^= 0x70
	}
	if typ == TypeAckCC && CCType(b[offCCType]>>4) == CCCredit {
		clear(b[offCCState+3 : offCCState+6])
	}
	return b
}

// FuzzEncode builds a header of any type from fuzzed field values, in or
// out of range. Encode never panics; what it writes parses (unless the
// cc_type is one Parse rejects) to a header that validates and re-encodes
// to the same bytes; and a header that validates comes back unchanged.
func FuzzEncode(f *testing.F) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, typ := range decodedTypes {
		f.Add(uint8(typ), r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64())
	}
	f.Add(uint8(TypeAckCC), uint64(0), uint64(0), uint64(0), uint64(2)<<56) // cc_type 2
	f.Fuzz(func(t *testing.T, typ uint8, w0, w1, w2, w3 uint64) {
		h := headerFromWords(Type(typ), w0, w1, w2, w3)
		buf := make([]byte, MaxHeaderLen+1)
		n := h.Encode(buf)
		if n == 0 {
			if h.Len() != 0 {
				t.Fatalf("%s: Encode wrote nothing, Len %d", h.Type, h.Len())
			}
			return
		}
		if n != h.Len() {
			t.Fatalf("%s: Encode wrote %d, Len %d", h.Type, n, h.Len())
		}
		var got Header
		if _, err := DecodeHeader(buf[:n], &got); err != nil {
			if errors.Is(err, ErrCCType) && h.Ack.CC.CCType > CCCredit {
				return
			}
			t.Fatalf("%s: encoded header does not parse: %v", h.Type, err)
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("parsed header does not validate: %v", err)
		}
		again := make([]byte, n)
		if got.Encode(again); !bytes.Equal(again, buf[:n]) {
			t.Fatalf("re-encoded\n %x\nwant\n %x", again, buf[:n])
		}
		if h.Validate() == nil && got != onlySelected(h) {
			t.Fatalf("valid header round trip\n got %+v\nwant %+v", got, h)
		}
	})
}

// headerFromWords fills every field of the form typ selects from four
// fuzzed words, without regard to wire ranges or variants.
func headerFromWords(typ Type, w0, w1, w2, w3 uint64) Header {
	var raw [32]byte
	binary.BigEndian.PutUint64(raw[0:], w0)
	binary.BigEndian.PutUint64(raw[8:], w1)
	binary.BigEndian.PutUint64(raw[16:], w2)
	binary.BigEndian.PutUint64(raw[24:], w3)
	u8 := func(i int) uint8 { return raw[i] }
	u16 := func(i int) uint16 { return binary.BigEndian.Uint16(raw[i:]) }
	u32 := func(i int) uint32 { return binary.BigEndian.Uint32(raw[i:]) }
	bit := func(i int) bool { return w3>>i&1 == 1 }
	h := Header{Type: typ}
	h.Request = Request{
		Type: typ, NextHeader: NextHeader(u8(0)), Retx: bit(0), AR: bit(1), SYN: bit(2),
		ClearPSNOffset: int16(u16(1)), PSN: u32(3), SPDCID: u16(7), DPDCID: u16(9),
		UseRsvPDC: bit(3), PSNOffset: u16(11), CCCID: u8(13), CreditTarget: Credit(u32(14)),
	}
	h.Ack = Ack{
		Type: typ, NextHeader: NextHeader(u8(0)), M: bit(4), Retx: bit(0), Probe: bit(5),
		Req: AckReq(u8(18)), AckPSNOffset: int16(u16(1)), ProbeOpaque: u16(19), CACKPSN: u32(3),
		SPDCID: u16(7), DPDCID: u16(9),
		CC: AckCC{
			CCType: CCType(u8(24)), CCFlags: u8(21), MPR: u8(22), SACKPSNOffset: int16(u16(11)),
			SACKBitmap: w1 ^ w2,
			NSCC: NSCCState{ServiceTime: ServiceTime(u16(25)), RC: bit(6), RcvCwndPend: u8(27),
				RcvdBytes: RcvdBytes(u32(28)), OOOCount: u16(13)},
			Credit: CreditState{Credit: Credit(u32(15)), OOOCount: u16(23)},
		},
	}
	h.Nack = Nack{
		NextHeader: NextHeader(u8(0)), M: bit(4), Retx: bit(0), NT: bit(7), Code: NackCode(u8(13)),
		VendorCode: u8(18), NackPSN: u32(3), SPDCID: u16(7), DPDCID: u16(9), MaxRecvPSNPlus1: u32(14),
	}
	h.Ctrl = Ctrl{
		CtrlType: CtrlType(u8(0)), IsROD: bit(8), Retx: bit(0), AR: bit(1), SYN: bit(2),
		ProbeOpaque: u16(19), PSN: u32(3), SPDCID: u16(7), DPDCID: u16(9), UseRsvPDC: bit(3),
		PSNOffset: u16(11), Payload: u32(14),
	}
	// Narrow some fields to their variant now and then, so that valid
	// headers come up often.
	if bit(9) {
		h = narrow(h)
	}
	return h
}

// narrow zeroes the fields h's flags and type do not select and masks the
// rest to their wire width: the header Encode would write.
func narrow(h Header) Header {
	q := &h.Request
	q.NextHeader &= maxNibble
	if q.SYN {
		q.DPDCID, q.PSNOffset = 0, q.PSNOffset&PSNOffsetMask
	} else {
		q.UseRsvPDC, q.PSNOffset = false, 0
	}
	if q.Type.HasReqCC() {
		q.CreditTarget &= Units24Mask
	} else {
		q.CCCID, q.CreditTarget = 0, 0
	}
	a := &h.Ack
	a.NextHeader &= maxNibble
	a.Req &= 3
	if a.Probe {
		a.AckPSNOffset = 0
	} else {
		a.ProbeOpaque = 0
	}
	c := &a.CC
	c.CCType &= 1
	c.CCFlags &= 0xF
	if c.CCType == CCNSCC {
		c.NSCC.RcvCwndPend &= RcvCwndPendMask
		c.NSCC.RcvdBytes &= Units24Mask
		c.Credit = CreditState{}
	} else {
		c.Credit.Credit &= Units24Mask
		c.NSCC = NSCCState{}
	}
	if a.Type != TypeAckCC {
		a.CC = AckCC{}
	}
	h.Nack.NextHeader &= maxNibble
	k := &h.Ctrl
	k.CtrlType &= maxNibble
	if k.SYN {
		k.DPDCID, k.PSNOffset = 0, k.PSNOffset&PSNOffsetMask
	} else {
		k.UseRsvPDC, k.PSNOffset = false, 0
	}
	return onlySelected(h)
}

// onlySelected zeroes the forms h.Type does not select, as Parse leaves
// them.
func onlySelected(h Header) Header {
	switch {
	case h.Type.IsRequest():
		h.Ack, h.Nack, h.Ctrl = Ack{}, Nack{}, Ctrl{}
	case h.Type == TypeAck || h.Type == TypeAckCC:
		h.Request, h.Nack, h.Ctrl = Request{}, Nack{}, Ctrl{}
	case h.Type == TypeNack:
		h.Request, h.Ack, h.Ctrl = Request{}, Ack{}, Ctrl{}
	case h.Type == TypeCtrl:
		h.Request, h.Ack, h.Nack = Request{}, Ack{}, Nack{}
	}
	return h
}

// FuzzUnits: the conversions never panic, round down within one unit and
// compare cumulative counts across the 2^24 wrap.
func FuzzUnits(f *testing.F) {
	f.Add(uint64(0), uint64(0), int64(0))
	f.Add(uint64(1<<32-1), uint64(300), int64(80*time.Microsecond))
	f.Add(uint64(1<<40), uint64(1<<32-256), int64(-1))
	f.Fuzz(func(t *testing.T, total, delta uint64, d int64) {
		delta %= 1<<32 - ByteUnit // Since sees less than one 2^24-unit wrap
		got := RcvdBytesOf(total + delta).Since(RcvdBytesOf(total))
		if got+ByteUnit <= delta || got >= delta+ByteUnit {
			t.Fatalf("RcvdBytes: %d bytes after %d counted as %d", delta, total, got)
		}
		if c := CreditOf(total + delta).Since(CreditOf(total)); c != got {
			t.Fatalf("Credit.Since %d, RcvdBytes.Since %d", c, got)
		}
		if b := RcvdBytesOf(total).Bytes(); b > total%(1<<32) || total%(1<<32)-b >= ByteUnit {
			t.Fatalf("RcvdBytesOf(%d).Bytes() = %d", total, b)
		}
		dur := time.Duration(d)
		st := ServiceTimeOf(dur)
		switch back := st.Duration(); {
		case dur <= 0:
			if st != 0 {
				t.Fatalf("ServiceTimeOf(%v) = %d", dur, st)
			}
		case st == MaxServiceTime:
			if dur < back {
				t.Fatalf("ServiceTimeOf(%v) saturated early", dur)
			}
		case back > dur || dur-back >= ServiceTimeUnit:
			t.Fatalf("ServiceTimeOf(%v) = %d (%v)", dur, st, back)
		}
	})
}

// canonicalSESRequest clears the reserved bits of a REQ_STD, independently
// of the encoder: the 2 bits above the opcode, the 4 above pid_on_fep and
// resource_index, and without SOM the 18 above payload_length.
func canonicalSESRequest(in []byte) []byte {
	b := bytes.Clone(in[:SESStdLen])
	b[0] &= 0x3F
	b[8] &= 0x0F
	b[10] &= 0x0F
	if b[1]&0x01 == 0 { // SOM
		b[32], b[33] = 0, 0
		b[34] &= 0x3F
	}
	return b
}

// FuzzSES: the SES decoders never panic; what they accept validates,
// re-encodes to the input up to the reserved bits and decodes again to the
// same header (decode → encode → decode is stable); what they reject is
// shorter than the header and leaves it untouched. The same bytes, read as
// field values in or out of range, encode without panic to a header that
// decodes, validates and re-encodes to the same bytes, and a header that
// validates comes back unchanged.
func FuzzSES(f *testing.F) {
	for _, v := range sesReqVectors {
		f.Add(mustHex(f, v.hex))
	}
	for _, v := range sesRespVectors {
		f.Add(mustHex(f, v.hex))
	}
	for _, v := range sesReservedVectors {
		f.Add(mustHex(f, v.hex))
	}
	r := rand.New(rand.NewPCG(23, 24))
	for range 4 {
		s := randomSESRequest(r)
		b := make([]byte, SESStdLen)
		s.Encode(b)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x01, 0x47, 0x12})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Decode → encode → decode.
		keep := SESRequest{MessageID: 0x5a5a}
		s := keep
		n, err := DecodeSESRequest(data, &s)
		switch {
		case err != nil:
			if !errors.Is(err, ErrTruncated) || len(data) >= SESStdLen || n != 0 || s != keep {
				t.Fatalf("REQ_STD of %d bytes: %d, %v, %+v", len(data), n, err, s)
			}
		default:
			if n != SESStdLen {
				t.Fatalf("DecodeSESRequest = %d", n)
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("decoded REQ_STD does not validate: %v\n%+v", err, s)
			}
			out := make([]byte, SESStdLen)
			if s.Encode(out); !bytes.Equal(out, canonicalSESRequest(data)) {
				t.Fatalf("re-encoded\n %x\nwant\n %x", out, canonicalSESRequest(data))
			}
			var s2 SESRequest
			if _, err := DecodeSESRequest(out, &s2); err != nil || s2 != s {
				t.Fatalf("re-decoded %+v, %v\nwant %+v", s2, err, s)
			}
		}
		keepR := SESResponse{MessageID: 0x5a5a}
		q := keepR
		n, err = DecodeSESResponse(data, &q)
		switch {
		case err != nil:
			if !errors.Is(err, ErrTruncated) || len(data) >= SESRespLen || n != 0 || q != keepR {
				t.Fatalf("RESP of %d bytes: %d, %v, %+v", len(data), n, err, q)
			}
		default:
			if n != SESRespLen {
				t.Fatalf("DecodeSESResponse = %d", n)
			}
			if err := q.Validate(); err != nil {
				t.Fatalf("decoded RESP does not validate: %v\n%+v", err, q)
			}
			out := make([]byte, SESRespLen)
			if q.Encode(out); !bytes.Equal(out, data[:SESRespLen]) { // RESP has no reserved bits
				t.Fatalf("re-encoded\n %x\nwant\n %x", out, data[:SESRespLen])
			}
			var q2 SESResponse
			if _, err := DecodeSESResponse(out, &q2); err != nil || q2 != q {
				t.Fatalf("re-decoded %+v, %v\nwant %+v", q2, err, q)
			}
		}
		// Field values from the bytes, in or out of range.
		s, q = sesFromBytes(data)
		buf := make([]byte, SESStdLen)
		if s.Encode(buf) != SESStdLen {
			t.Fatal("Encode wrote nothing")
		}
		var got SESRequest
		if _, err := DecodeSESRequest(buf, &got); err != nil || got.Validate() != nil {
			t.Fatalf("encoded REQ_STD decodes to %+v, %v", got, err)
		}
		again := make([]byte, SESStdLen)
		if got.Encode(again); !bytes.Equal(again, buf) {
			t.Fatalf("re-encoded\n %x\nwant\n %x", again, buf)
		}
		if s.Validate() == nil && got != s {
			t.Fatalf("valid REQ_STD round trip\n got %+v\nwant %+v", got, s)
		}
		bufR := make([]byte, SESRespLen)
		if q.Encode(bufR) != SESRespLen {
			t.Fatal("Encode wrote nothing")
		}
		var gotR SESResponse
		if _, err := DecodeSESResponse(bufR, &gotR); err != nil || gotR.Validate() != nil {
			t.Fatalf("encoded RESP decodes to %+v, %v", gotR, err)
		}
		if q.Validate() == nil && gotR != q {
			t.Fatalf("valid RESP round trip\n got %+v\nwant %+v", gotR, q)
		}
	})
}

// sesFromBytes fills every field of a REQ_STD and a RESP from data (zero
// padded), without regard to wire ranges or the SOM variant; every other
// time it narrows them to what Encode writes, so that valid headers come up
// often.
func sesFromBytes(data []byte) (SESRequest, SESResponse) {
	var raw [48]byte
	copy(raw[:], data)
	u16 := func(i int) uint16 { return binary.BigEndian.Uint16(raw[i:]) }
	u32 := func(i int) uint32 { return binary.BigEndian.Uint32(raw[i:]) }
	u64 := func(i int) uint64 { return binary.BigEndian.Uint64(raw[i:]) }
	bit := func(i int) bool { return raw[47]>>i&1 == 1 }
	s := SESRequest{
		Opcode: SESOpcode(raw[0]), Version: raw[1], DC: bit(0), IE: bit(1), Rel: bit(2), HD: bit(3),
		EOM: bit(4), SOM: bit(5), MessageID: u16(2), IndexGeneration: raw[4], JobID: u32(4),
		PIDOnFEP: u16(8), ResourceIndex: u16(10), BufferOffset: u64(12), Initiator: u32(20),
		MemKeyMatchBits: u64(24), HeaderData: u64(32), PayloadLength: u16(34), MessageOffset: u32(36),
		RequestLength: u32(40),
	}
	q := SESResponse{
		List: raw[0], Opcode: SESRespOpcode(raw[1]), Version: raw[44], ReturnCode: SESReturnCode(raw[45]),
		MessageID: u16(2), IndexGeneration: raw[4], JobID: u32(4), ModifiedLength: u32(8),
	}
	if bit(6) {
		s.Opcode &= 0x3F
		s.Version &= 3
		s.JobID &= MaxJobID
		s.PIDOnFEP &= MaxPIDOnFEP
		s.ResourceIndex &= MaxResourceIndex
		s.PayloadLength &= MaxSESPayloadLength
		if s.SOM {
			s.PayloadLength, s.MessageOffset = 0, 0
		} else {
			s.HeaderData = 0
		}
		q.List &= 3
		q.Opcode &= 0x3F
		q.Version &= 3
		q.ReturnCode &= 0x3F
		q.JobID &= MaxJobID
	}
	return s, q
}
