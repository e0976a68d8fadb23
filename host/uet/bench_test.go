package uet

import (
	"math/rand/v2"
	"testing"
)

func BenchmarkParse(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, typ := range decodedTypes {
		h := randomHeader(r, typ)
		pkt := make([]byte, h.Len()+1024)
		Build(pkt, &h, make([]byte, 1024))
		b.Run(typ.String(), func(b *testing.B) {
			var out Header
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(pkt, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	r := rand.New(rand.NewPCG(11, 12))
	buf := make([]byte, MaxHeaderLen)
	for _, typ := range decodedTypes {
		h := randomHeader(r, typ)
		b.Run(typ.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if h.Encode(buf) == 0 {
					b.Fatal("Encode wrote nothing")
				}
			}
		})
	}
}

// BenchmarkBuild1024 builds a RUD_CC_REQ datagram with 1024 bytes of
// payload, as a sender does per packet.
func BenchmarkBuild1024(b *testing.B) {
	h := Header{Type: TypeRUDCCReq, Request: Request{
		Type: TypeRUDCCReq, NextHeader: NextHeaderReqStd, PSN: 1, SPDCID: 2, DPDCID: 3,
		CCCID: 1, CreditTarget: CreditOf(1 << 20),
	}}
	payload := make([]byte, 1024)
	buf := make([]byte, 2048)
	b.SetBytes(int64(h.Len() + len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		h.Request.PSN++
		if Build(buf, &h, payload) == 0 {
			b.Fatal("Build wrote nothing")
		}
	}
}

// BenchmarkSES decodes and encodes the SES headers a data packet (REQ_STD)
// and its acknowledgement (RESP) carry.
func BenchmarkSES(b *testing.B) {
	r := rand.New(rand.NewPCG(25, 26))
	s, q := randomSESRequest(r), randomSESResponse(r)
	req, resp := make([]byte, SESStdLen+1024), make([]byte, SESRespLen)
	s.Encode(req)
	q.Encode(resp)
	b.Run("DecodeSESRequest", func(b *testing.B) {
		var out SESRequest
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeSESRequest(req, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeSESResponse", func(b *testing.B) {
		var out SESResponse
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeSESResponse(resp, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	buf := make([]byte, SESStdLen)
	b.Run("SESRequest.Encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.MessageID++
			if s.Encode(buf) == 0 {
				b.Fatal("Encode wrote nothing")
			}
		}
	})
	b.Run("SESResponse.Encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if q.Encode(buf) == 0 {
				b.Fatal("Encode wrote nothing")
			}
		}
	})
}
