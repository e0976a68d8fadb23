package agent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// nak delivers a NAK (or ACK) with syndrome syn for PSN index k of qp's
// stream, from its peer (the spoofer who knows the peer's address).
func (l *ppfcLab) nak(qp *QP, k uint64, syn roce.Syndrome) {
	l.t.Helper()
	qp.mu.Lock()
	psn := qp.psn(qp.mu.req.initPSN, k)
	peer, local := qp.mu.peer.Addr, netip.AddrPortFrom(qp.mu.local.Addr(), roce.UDPPort)
	qp.mu.Unlock()
	b := make([]byte, 64)
	n := buildAck(b, peer, local, roce.DefaultPKey, qp.QPN(), psn, syn, 0)
	l.deliver(peer, 0, b[:n])
}

// An ACK or NAK whose PSN the requester never sent is dropped and counted,
// never fatal; a NAK for a packet still outstanding is the responder's and
// acts (IBA 9.7.5.2.6; issue 15: one spoofed NAK killed a QP).
func TestAckPSNValidated(t *testing.T) {
	l := newPPFCLab(t, nil)
	qp := l.qp(peerX)
	l.wantTx(qp, 16, time.Millisecond) // the window: packets 0..15 outstanding; the ACK timer
	rae := roce.NAKSyndrome(roce.NAKRemoteAccessError)
	inv := roce.NAKSyndrome(roce.NAKInvalidRequest)

	// Beyond what was sent: dropped, counted, the QP runs on.
	l.nak(qp, 16, rae)
	l.nak(qp, 1000, inv)
	l.nak(qp, 40, roce.NAKSyndrome(roce.NAKPSNSequenceError))
	l.nak(qp, 16, roce.ACKSyndrome(roce.CreditsUnlimited))
	c := qp.Counters()
	if c.InvalidAckPSN != 4 || c.RemoteAccessErr != 0 || c.InvalidRequest != 0 || c.PacketSeqErr != 0 || c.AckedBytes != 0 {
		t.Fatalf("after 4 ACK/NAKs beyond the sent PSNs: %+v", c)
	}
	if err := qp.Err(); err != nil {
		t.Fatalf("QP failed on a NAK for a packet never sent: %v", err)
	}

	// An ACK for packets 0..7 acts; a NAK for one of them afterwards is
	// for a packet already acknowledged: dropped.
	l.nak(qp, 7, roce.ACKSyndrome(roce.CreditsUnlimited))
	l.nak(qp, 3, rae)
	c = qp.Counters()
	if c.AckedBytes != 8*uint64(qp.cfg.MTU) || c.InvalidAckPSN != 5 || qp.Err() != nil {
		t.Fatalf("after ACK 7 and a NAK for 3: acked %d B, invalid %d, err %v", c.AckedBytes, c.InvalidAckPSN, qp.Err())
	}
	// A stale ACK (below una) is a duplicate, not an attack: no count.
	l.nak(qp, 2, roce.ACKSyndrome(roce.CreditsUnlimited))
	if c = qp.Counters(); c.InvalidAckPSN != 5 {
		t.Fatalf("a duplicate ACK counted as invalid: %d", c.InvalidAckPSN)
	}

	// A remote access error for an outstanding packet is genuine: error.
	l.nak(qp, 9, rae)
	if c = qp.Counters(); c.RemoteAccessErr != 1 || qp.Err() == nil {
		t.Fatalf("a remote access error NAK for outstanding PSN 9: remote_access_err %d, err %v", c.RemoteAccessErr, qp.Err())
	}
}

// A batch of CNPs read at once acts as they arrived (issue 15 §4): with
// mlx5's profile (one cut per rate_reduce_monitor_period, 4 µs), 100 CNPs
// 5 µs apart cut 100 times when each carries its arrival time, once when
// the whole batch takes the time it was read.
func TestCNPFloodArrivalTimes(t *testing.T) {
	for _, c := range []struct {
		name    string
		spread  bool
		minCuts uint64
		maxCuts uint64
	}{
		{"arrival times", true, 95, 100},
		{"read time", false, 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newPPFCLab(t, nil)
			cfg := DefaultQPConfig()
			cfg.CC = CCDCQCN
			cfg.DCQCN = dcqcn.MLX5Params(units.Gbit)
			qp, err := l.a.CreateQP(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := qp.Connect(l.local, Endpoint{Addr: peerX, QPN: 0x100, Len: 1 << 20, MTU: cfg.MTU}); err != nil {
				t.Fatal(err)
			}
			if err := qp.Start(Stream{Op: OpWrite, MessageBytes: 4096}); err != nil {
				t.Fatal(err)
			}
			l.clock.Set(time.Second)
			l.tx(qp)
			h := roce.CNPHeader(qp.QPN(), 0xFFFF)
			b := make([]byte, roce.PacketLen(roce.OpCNP, 0))
			b = b[:roce.Build(b, &h, nil)]
			roce.SealICRC(peerX, netip.AddrPortFrom(qp.mu.local.Addr(), roce.UDPPort), b)
			// 100 CNPs arrive 5 µs apart; the loop reads them 1 ms after
			// the last.
			wall := time.Unix(1_800_000_000, 0)
			l.clock.Advance(500*time.Microsecond + time.Millisecond)
			now := l.clock.Now()
			rs := newReplies(l.rslots)
			before := qp.Counters()
			for i := range 100 {
				rx := wall.Add(-time.Millisecond - time.Duration(99-i)*5*time.Microsecond)
				if !c.spread {
					rx = time.Time{}
				}
				m := pktio.Message{Buffers: [][]byte{b}, N: len(b), Addr: peerX, TOS: 0xC0, RxTime: rx}
				var hd roce.Header
				l.a.receive(engine.Arrival(now, wall, m.RxTime), &m, &hd, rs)
			}
			after := qp.Counters()
			cuts := after.RPCNPHandled - before.RPCNPHandled
			if got := cuts + after.RPCNPIgnored - before.RPCNPIgnored; got != 100 {
				t.Fatalf("%d of 100 CNPs reached the RP", got)
			}
			t.Logf("%d of 100 CNPs 5 µs apart cut the rate", cuts)
			if cuts < c.minCuts || cuts > c.maxCuts {
				t.Errorf("%d CNPs cut the rate, want %d..%d", cuts, c.minCuts, c.maxCuts)
			}
		})
	}
}

// After a NAK sends the requester back, the window can shrink (Rc cut,
// InflightTime) below what it has resent so far without an AckReq among
// those packets. The AckReq it sent before going back is no longer
// outstanding: it must send one more packet, asking, or time out; never
// wait for an ACK nobody owes it (TestRoCELossGoBackN stalled so: 76
// packets outstanding, no ACK timeout in 30 s).
func TestNAKThenWindowShrinks(t *testing.T) {
	l := newPPFCLab(t, nil)
	cfg := DefaultQPConfig()
	cfg.Window, cfg.AckReqEvery, cfg.AckTimeout, cfg.MaxBurst = 16, 16, time.Millisecond, 3
	qp, err := l.a.CreateQP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Connect(l.local, Endpoint{Addr: peerX, QPN: 0x100, Len: 1 << 30, MTU: cfg.MTU}); err != nil {
		t.Fatal(err)
	}
	if err := qp.Start(Stream{Op: OpWrite, MessageBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	// Unpaced: the whole window, packets 0..15, the last one asking.
	if n, _ := l.tx(qp); n != 16 {
		t.Fatalf("sent %d packets, want the window of 16", n)
	}
	// The responder expects packet 4: go back to it.
	l.nak(qp, 4, roce.NAKSyndrome(roce.NAKPSNSequenceError))
	// Paced now: one burst (4, 5, 6, ...), none asking.
	qp.mu.Lock()
	qp.cfg.RateCap = 10 * units.Gbit
	qp.mu.Unlock()
	resent, _ := l.tx(qp)
	if resent < 3 || resent > 11 {
		t.Fatalf("resent %d packets, want a burst of about 3", resent)
	}
	// The window shrinks below the 3 outstanding.
	qp.mu.Lock()
	qp.cfg.Window = 2
	qp.mu.Unlock()
	after := 0
	for range 5 {
		l.clock.Set(l.clock.Now() + cfg.AckTimeout)
		n, _ := l.tx(qp)
		after += n
	}
	if c := qp.Counters(); c.LocalAckTimeoutErr == 0 && after == 0 {
		t.Fatalf("for 5 ACK timeouts' time after the window shrank: no timeout, no packet sent: the requester waits for an ACK nobody owes it")
	}
}

// TestAckTimerRunsWhileOwed: a QP whose turn at the port ends before it
// sent an AckReq owes nothing to wait for: it returns no deadline (the
// engine's port queue brings it back), not the ACK timeout, which woke
// each of 10,000 QPs every 67 ms while they waited a second for their
// turn (issue 28). Its wait is no timeout; once it has sent an AckReq
// the timer runs.
func TestAckTimerRunsWhileOwed(t *testing.T) {
	l := newPPFCLab(t, nil)
	cfg := DefaultQPConfig()
	cfg.AckReqEvery, cfg.AckTimeout = 32, time.Millisecond
	qp, err := l.a.CreateQP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Connect(l.local, Endpoint{Addr: peerX, QPN: 0x100, Len: 1 << 30, MTU: cfg.MTU}); err != nil {
		t.Fatal(err)
	}
	if err := qp.Start(Stream{Op: OpWrite, MessageBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	fill := func(now time.Duration, port *engine.PortLimit) (int, time.Duration) {
		qp.mu.Lock()
		defer qp.mu.Unlock()
		return qp.fillLocked(now, l.slots, port)
	}
	// The port has credit for about three packets.
	n, next := fill(0, engine.NewPortLimit(0, 8*units.Mbit, 3000, 0))
	if n < 1 || n >= 32 || next != never {
		t.Fatalf("turn cut by the port after %d packets, none asking: next %v; want no deadline", n, next)
	}
	// Asked again while the port is dry (a kick: a CNP to send, a
	// PPFC notification): still no deadline.
	dry := func(now time.Duration) *engine.PortLimit {
		p := engine.NewPortLimit(now, 8*units.Mbit, 1, 0)
		p.Spend(2000)
		return p
	}
	if m, next := fill(cfg.AckTimeout/2, dry(cfg.AckTimeout/2)); m != 0 || next != never {
		t.Fatalf("asked again, the port dry, %d packets sent, none asking: %d packets, next %v; want none, no deadline", n, m, next)
	}
	// Its next turn comes 10 ACK timeouts later: no timeout; it sends
	// on to the AckReq of packet 31, and then its timer runs.
	now := 10 * cfg.AckTimeout
	port := engine.NewPortLimit(now, 8*units.Gbit, 1<<20, 0)
	sent := n
	for sent < 32 {
		n, next = fill(now, port)
		if n == 0 {
			t.Fatalf("sent %d packets, then none", sent)
		}
		sent += n
	}
	if c := qp.Counters(); c.LocalAckTimeoutErr != 0 {
		t.Fatalf("%d ACK timeouts while the QP waited for its turn owing nothing", c.LocalAckTimeoutErr)
	}
	if n, next = fill(now, dry(now)); n != 0 || next != now+cfg.AckTimeout {
		t.Fatalf("after the AckReq of packet 31, the port dry: %d packets, next %v; want none, and the ACK timeout at %v", n, next, now+cfg.AckTimeout)
	}
}
