package agent

import (
	"encoding/binary"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
)

// FuzzReceive drives one agent's receive path with a sequence of packets
// against a QP that is sending (issue 15 §5): garbage, and packets built
// from fuzzed header fields, from the QP's peer or a stranger, with a good
// or a bad ICRC, between which the clock moves and the transmit loop runs.
// Whatever arrives, the agent must not panic, and every datagram must be
// accounted for exactly once: dropped under one cause, taken by a QP
// (rx_packets), or taken as a PPFC notification.
//
// Each step of the input is 16 bytes: kind, flags, opcode, AETH syndrome,
// PSN offset (int16) from the first unacknowledged packet, DestQP choice,
// clock step (µs), pause µs (PPFC) and payload length; then garbage bytes
// follow a garbage step.
func FuzzReceive(f *testing.F) {
	step := func(kind, flags, op, syn byte, psnOff int16, qp, clock byte, pause uint16, plen byte) []byte {
		b := make([]byte, 16)
		b[0], b[1], b[2], b[3] = kind, flags, op, syn
		binary.BigEndian.PutUint16(b[4:], uint16(psnOff))
		b[6], b[7] = qp, clock
		binary.BigEndian.PutUint16(b[8:], pause)
		b[10] = plen
		return b
	}
	cat := func(s ...[]byte) []byte {
		var out []byte
		for _, b := range s {
			out = append(out, b...)
		}
		return out
	}
	ack := byte(roce.OpRCAck)
	f.Add(cat(step(1, 0, ack, 0x1F, 3, 0, 10, 0, 0)))                                   // a good ACK
	f.Add(cat(step(1, 0, ack, 0x62, 2, 0, 10, 0, 0)))                                   // remote access error NAK, outstanding
	f.Add(cat(step(1, 0, ack, 0x62, -5000, 0, 10, 0, 0)))                               // the same for an old PSN
	f.Add(cat(step(1, 2, ack, 0x62, 2, 0, 1, 0, 0), step(1, 1, ack, 0, 4, 0, 1, 0, 0))) // stranger, bad ICRC
	f.Add(cat(step(1, 0, byte(roce.OpCNP), 0, 0, 0, 1, 0, 0)))                          // a CNP
	f.Add(cat(step(2, 0, 0, 0, 0, 0, 1, 500, 0), step(2, 0, 1, 0, 0, 0, 1, 0, 0)))      // PPFC stop, resume
	f.Add(cat(step(1, 0, byte(roce.OpRCWriteOnly), 0, 0, 0, 1, 0, 64)))                 // a request to a requester
	f.Add(cat(step(0, 0, 0, 0, 0, 0, 1, 0, 20), []byte("0123456789abcdefghij")))
	f.Fuzz(func(t *testing.T, in []byte) {
		l, qp := newFuzzLab(t)
		stranger := netip.MustParseAddrPort("198.18.7.7:4791")
		delivered := uint64(0)
		for len(in) >= 16 && delivered < 256 {
			s := in[:16]
			in = in[16:]
			from := peerX
			if s[1]&2 != 0 {
				from = stranger
			}
			var b []byte
			switch s[0] % 3 {
			case 0: // garbage
				n := min(int(s[10]), len(in))
				b, in = in[:n], in[n:]
			case 1: // a RoCE packet from fuzzed fields
				op := roce.Opcode(s[2])
				if op.HeaderLen() == 0 {
					op = roce.OpRCAck
				}
				qp.mu.Lock()
				psn := roce.PSNAdd(qp.psn(qp.mu.req.initPSN, qp.mu.req.una), int(int16(binary.BigEndian.Uint16(s[4:]))))
				qp.mu.Unlock()
				dest := qp.QPN()
				if s[6]&1 != 0 {
					dest = uint32(s[6]) << 8
				}
				h := roce.Header{BTH: roce.BTH{Opcode: op, PKey: 0xFFFF, DestQP: dest, PSN: psn, BECN: op == roce.OpCNP},
					AETH: roce.AETH{Syndrome: roce.Syndrome(s[3])}}
				payload := make([]byte, int(s[10])%(qp.cfg.MTU+1))
				b = make([]byte, roce.PacketLen(op, len(payload)))
				b = b[:roce.Build(b, &h, payload)]
				roce.SealICRC(from, l.local, b)
			case 2: // a PPFC notification about the peer
				p := roce.PPFC{Dest: peerX.Addr(), Action: roce.PPFCAction(s[2] & 3), Port: 1,
					Pause: time.Duration(binary.BigEndian.Uint16(s[8:])) * time.Microsecond, PSN: uint32(s[4])}
				b = make([]byte, roce.PPFCLen)
				if _, err := roce.BuildPPFC(b, from, l.local, &p); err != nil {
					t.Fatal(err)
				}
			}
			if s[1]&1 != 0 && len(b) > 0 {
				b[len(b)-1] ^= 0x5A // a bad ICRC (or other garbage)
			}
			l.deliver(from, s[1]&0xFC, b)
			delivered++
			l.clock.Advance(time.Duration(s[7]) * time.Microsecond)
			l.tx(qp)
		}
		c := l.a.Counters()
		var ppfc uint64
		for i := range l.a.ppfc.received {
			ppfc += l.a.ppfc.received[i].Load()
		}
		// unsupported_opcode is a subset of rx_packets: the QP took the
		// packet, then found it had no use for it.
		got := c.Malformed + c.ICRCErrors + c.UnknownQP + c.WrongPeer + c.PKeyViolations + c.RxPackets + ppfc
		if got != delivered {
			t.Fatalf("%d datagrams delivered, %d accounted for: %+v, ppfc %d", delivered, got, c, ppfc)
		}
	})
}

// newFuzzLab is a ppfcLab made small for the fuzzer's thousands of runs per
// second: a short pipe, few slots, a 64 KiB buffer; qp sends to peerX.
func newFuzzLab(t *testing.T) (*ppfcLab, *QP) {
	t.Helper()
	l, qp := newSoloLab(t, 0)
	if err := qp.Start(Stream{Op: OpWrite, MessageBytes: 4096}); err != nil {
		t.Fatal(err)
	}
	l.tx(qp)
	return l, qp
}

// newSoloLab is one agent without its loops on a fake clock, and one QP
// of P_Key pkey (0: the default) connected to peerX: a 16-packet window,
// AckReq every 4, a 64 KiB buffer.
func newSoloLab(t *testing.T, pkey uint16) (*ppfcLab, *QP) {
	t.Helper()
	pa, _ := pktio.NewPipe(pktio.PipeOptions{Depth: 16})
	clock := engine.NewFakeClock(0)
	a, err := newAgent(Config{Conn: pa, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	slots, _ := newSlots(16)
	rslots, _ := newSlots(8)
	l := &ppfcLab{t: t, a: a, clock: clock, local: pa.LocalAddr(), slots: slots, rslots: rslots}
	cfg := DefaultQPConfig()
	cfg.Window, cfg.AckReqEvery, cfg.AckTimeout, cfg.BufferBytes, cfg.PKey = 16, 4, time.Millisecond, 64<<10, pkey
	qp, err := a.CreateQP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Connect(l.local, Endpoint{Addr: peerX, QPN: 0x100, Len: 64 << 10, MTU: cfg.MTU}); err != nil {
		t.Fatal(err)
	}
	return l, qp
}
