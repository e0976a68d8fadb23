package uet

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestZeroAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	payload := make([]byte, 1024)
	buf := make([]byte, 2048)
	var out Header
	var sink uint64
	type fn struct {
		name string
		f    func()
	}
	var cases []fn
	for _, typ := range decodedTypes {
		h := randomHeader(r, typ)
		pkt := make([]byte, h.Len()+len(payload))
		Build(pkt, &h, payload)
		cases = append(cases,
			fn{"Parse/" + typ.String(), func() { _, _ = Parse(pkt, &out) }},
			fn{"DecodeHeader/" + typ.String(), func() { _, _ = DecodeHeader(pkt, &out) }},
			fn{"Header.Encode/" + typ.String(), func() { h.Encode(buf) }},
			fn{"Build/" + typ.String(), func() { Build(buf, &h, payload) }},
			fn{"Validate/" + typ.String(), func() { _ = h.Validate() }},
			fn{"Type.String/" + typ.String(), func() { sink += uint64(len(typ.String())) }},
		)
	}
	q := randomHeader(r, TypeRUDCCReq).Request
	a := randomHeader(r, TypeAckCC).Ack
	n := randomHeader(r, TypeNack).Nack
	c := randomHeader(r, TypeCtrl).Ctrl
	sreq, sresp := randomSESRequest(r), randomSESResponse(r)
	sesReq := make([]byte, SESStdLen+len(payload))
	sreq.Encode(sesReq)
	sesResp := make([]byte, SESRespLen+len(payload))
	sresp.Encode(sesResp)
	var outReq SESRequest
	var outResp SESResponse
	cases = append(cases,
		fn{"DecodeSESRequest", func() { _, _ = DecodeSESRequest(sesReq, &outReq) }},
		fn{"DecodeSESResponse", func() { _, _ = DecodeSESResponse(sesResp, &outResp) }},
		fn{"SESRequest.Encode", func() { sreq.Encode(buf) }},
		fn{"SESResponse.Encode", func() { sresp.Encode(buf) }},
		fn{"SESRequest.Validate", func() { _ = sreq.Validate() }},
		fn{"SESResponse.Validate", func() { _ = sresp.Validate() }},
		fn{"Header.NextHeader", func() { sink += uint64(q.NextHeader) }},
		fn{"SES names", func() {
			sink += uint64(len(SESWrite.String()) + len(SESRespNoResponse.String()) + len(SESRCNoMatch.String()))
		}},
	)
	cases = append(cases,
		fn{"Request.Encode", func() { q.Encode(buf) }},
		fn{"Ack.Encode", func() { a.Encode(buf) }},
		fn{"Nack.Encode", func() { n.Encode(buf) }},
		fn{"Ctrl.Encode", func() { c.Encode(buf) }},
		fn{"NackCode.String", func() { sink += uint64(len(NackNoCCCAvail.String())) }},
		fn{"units", func() {
			sink += RcvdBytesOf(sink).Since(3) + CreditOf(sink).Bytes() +
				uint64(ServiceTimeOf(time.Duration(sink)).Duration())
		}},
	)
	for _, c := range cases {
		if allocs := testing.AllocsPerRun(1000, c.f); allocs != 0 {
			t.Errorf("%s: %v allocations per run, want 0", c.name, allocs)
		}
	}
	_ = sink
}
