package agent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/roce"
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
	n := buildAck(b, peer, local, qp.QPN(), psn, syn, 0)
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

// arrival turns a datagram's kernel timestamp into the agent's clock,
// bounded by maxRxAge, never later than the read.
func TestArrival(t *testing.T) {
	wall := time.Unix(1_800_000_000, 0)
	now := 5 * time.Second
	for _, c := range []struct {
		rx   time.Time
		want time.Duration
	}{
		{time.Time{}, now}, // no timestamp
		{wall.Add(-300 * time.Microsecond), now - 300*time.Microsecond}, // read 300 µs late
		{wall.Add(time.Millisecond), now},                               // clock stepped back
		{wall.Add(-time.Hour), now - maxRxAge},                          // stepped forward: bounded
	} {
		if got := arrival(now, wall, c.rx); got != c.want {
			t.Errorf("arrival(%v, rx %v before the read) = %v, want %v", now, wall.Sub(c.rx), got, c.want)
		}
	}
	if got := arrival(time.Millisecond, wall, wall.Add(-time.Second)); got != 0 {
		t.Errorf("an arrival before the agent's clock started = %v, want 0", got)
	}
}
