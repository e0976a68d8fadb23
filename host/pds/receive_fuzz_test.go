package pds

import (
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/uet"
)

// FuzzReceive: whatever arrives, the endpoint counts it, drops it or takes
// it, and never panics; a live PDC on each side (an initiator with packets
// in flight, a target) gives spoofed ACKs, NACKs and data somewhere to go.
// mode picks the sender's congestion control (its low 2 bits, a CCMode),
// so that credit, credit requests and credit targets reach an RCCC CCC.
func FuzzReceive(f *testing.F) {
	// Seeds: a SYN data packet, an ACK_CC, a NACK, a CTRL probe; a
	// RUD_CC_REQ, an ACK_CC CREDIT, a CTRL CREDIT and a CREDIT_REQ.
	var h uet.Header
	buf := make([]byte, 256)
	h = uet.Header{Type: uet.TypeRUDReq, Request: uet.Request{Type: uet.TypeRUDReq, NextHeader: uet.NextHeaderReqStd, SYN: true, PSN: 100, SPDCID: 1, PSNOffset: 0}}
	n := h.Encode(buf)
	ses := uet.SESRequest{Opcode: uet.SESWrite, SOM: true, EOM: true, MessageID: 1, RequestLength: 8}
	n += ses.Encode(buf[n:])
	f.Add(append([]byte(nil), append(buf[:n], make([]byte, 8)...)...), uint8(0), uint8(0))
	h = uet.Header{Type: uet.TypeAckCC, Ack: uet.Ack{Type: uet.TypeAckCC, CACKPSN: 5, SPDCID: 3, DPDCID: 1, CC: uet.AckCC{SACKPSNOffset: 2, SACKBitmap: 0xF0}}}
	f.Add(append([]byte(nil), buf[:h.Encode(buf)]...), uint8(3), uint8(0))
	h = uet.Header{Type: uet.TypeNack, Nack: uet.Nack{Code: uet.NackTrimmed, NackPSN: 7, DPDCID: 1}}
	f.Add(append([]byte(nil), buf[:h.Encode(buf)]...), uint8(0), uint8(0))
	h = uet.Header{Type: uet.TypeCtrl, Ctrl: uet.Ctrl{CtrlType: uet.CtrlAckReq, PSN: 3, SPDCID: 1}}
	f.Add(append([]byte(nil), buf[:h.Encode(buf)]...), uint8(0), uint8(0))
	h = uet.Header{Type: uet.TypeRUDCCReq, Request: uet.Request{Type: uet.TypeRUDCCReq, NextHeader: uet.NextHeaderReqStd, SYN: true, PSN: 100, SPDCID: 1, CCCID: 1, CreditTarget: 64}}
	n = h.Encode(buf)
	n += ses.Encode(buf[n:])
	f.Add(append([]byte(nil), append(buf[:n], make([]byte, 8)...)...), uint8(0), uint8(CCRCCC))
	h = uet.Header{Type: uet.TypeAckCC, Ack: uet.Ack{Type: uet.TypeAckCC, CACKPSN: 5, SPDCID: 3, DPDCID: 1, CC: uet.AckCC{CCType: uet.CCCredit, Credit: uet.CreditState{Credit: 80}}}}
	f.Add(append([]byte(nil), buf[:h.Encode(buf)]...), uint8(0), uint8(CCBoth))
	h = uet.Header{Type: uet.TypeCtrl, Ctrl: uet.Ctrl{CtrlType: uet.CtrlCredit, Payload: creditPayload(1, 100)}}
	f.Add(append([]byte(nil), buf[:h.Encode(buf)]...), uint8(0), uint8(CCRCCC))
	h = uet.Header{Type: uet.TypeCtrl, Ctrl: uet.Ctrl{CtrlType: uet.CtrlCreditReq, Payload: creditPayload(2, 300)}}
	f.Add(append([]byte(nil), buf[:h.Encode(buf)]...), uint8(0), uint8(CCRCCC))
	f.Fuzz(func(t *testing.T, b []byte, tos, mode uint8) {
		pa, _ := pktio.NewPipe(pktio.PipeOptions{A: addrA, B: addrB})
		cfg := DefaultConfig()
		cfg.Conn, cfg.Clock, cfg.Verify = pa, engine.NewFakeClock(time.Millisecond), true
		cfg.CC = CCMode(mode % uint8(numCCModes))
		ep, err := newEndpoint(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		if _, err := ep.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 100_000, Messages: 1, Verify: true}); err != nil {
			t.Fatal(err)
		}
		// Put packets in flight (the loops do not run).
		slots, _ := engine.NewSlots(16, maxDatagram)
		for _, c := range ep.cccs.byKey {
			c.Fill(time.Millisecond, slots, nil)
		}
		rx := (*endpointRx)(ep)
		rs, _ := engine.NewSlots(8, maxDatagram)
		out := engine.NewReplies(rs)
		m := pktio.Message{Buffers: [][]byte{b}, N: len(b), Addr: addrB, TOS: tos}
		rx.Receive(2*time.Millisecond, &m, out)
		rx.EndBatch(out)
		c := ep.Counters()
		if c.RxPackets != 1 {
			t.Fatalf("rx_packets %d", c.RxPackets)
		}
	})
}
