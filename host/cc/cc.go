// Package cc holds the congestion-control interfaces the transport engine
// drives, one per kind of controller a fabric transport runs at a sender:
//
//   - RateController: a rate the sender paces at, cut by congestion
//     notifications (DCQCN's reaction point, host/dcqcn);
//   - WindowController: a window of bytes in flight, moved by ACKs that echo
//     ECN and carry delay (UET's NSCC, uet.md "NSCC");
//   - CreditSource: bytes the receiver allowed, granted in credits (UET's
//     RCCC, uet.md "RCCC").
//
// Implementations are pure state machines in the manner of quic-go's
// congestion package: no goroutine, no timer, no clock read; every event
// method takes now, a monotonic time.Duration since an arbitrary epoch, and
// NextEvent tells the caller's scheduler when to call Advance. Each
// implementation asserts itself, e.g. var _ cc.RateController = (*RP)(nil).
package cc

import (
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// RateController paces a sender (DCQCN's RP: Rc).
type RateController interface {
	// Rate is the rate the sender may send at now (call Advance first).
	Rate() units.Rate
	// OnNotification takes one congestion notification (a RoCEv2 CNP) that
	// arrived at now; handled reports whether it changed the state.
	OnNotification(now time.Duration) (handled bool)
	// OnTransmit counts bytes sent at now (byte-counter increases).
	OnTransmit(now time.Duration, bytes int)
	// Advance runs the timers due by now.
	Advance(now time.Duration)
	// NextEvent is when Advance next has something to do.
	NextEvent() time.Duration
}

// AckSample is what one ACK tells a window controller.
type AckSample struct {
	// NewlyAcked is the number of bytes this ACK acknowledged for the first
	// time.
	NewlyAcked int
	// RTT is the round trip of the packet the ACK answers; valid only if
	// RTTValid (not a retransmission that leaves the sample ambiguous).
	RTT      time.Duration
	RTTValid bool
	// ECN: the receiver echoed a CE mark (UET's M flag).
	ECN bool
	// InFlight is the bytes in flight after this ACK.
	InFlight int
}

// WindowController bounds a sender's bytes in flight (NSCC: cwnd).
type WindowController interface {
	// Window is the congestion window in bytes.
	Window() int
	// CanSend reports whether a packet of size bytes may leave with
	// inFlight bytes already in flight.
	CanSend(inFlight, size int) bool
	// OnAck takes one ACK received at now.
	OnAck(now time.Duration, s AckSample)
	// OnNack takes a NACK (a trimmed or refused packet of size bytes)
	// received at now.
	OnNack(now time.Duration, size int)
	// OnLoss takes a loss the sender inferred (a timeout) of size bytes.
	OnLoss(now time.Duration, size int)
	// Advance runs the timers due by now.
	Advance(now time.Duration)
	// NextEvent is when Advance next has something to do.
	NextEvent() time.Duration
}

// CreditSource is the receiver's grant of bytes to a sender (RCCC).
type CreditSource interface {
	// Credit is the bytes the sender may still send.
	Credit() int
	// OnCredit takes a grant received at now: the receiver's cumulative
	// credit count, as carried on the wire.
	OnCredit(now time.Duration, cumulative uint32)
	// OnTransmit spends bytes sent at now.
	OnTransmit(now time.Duration, bytes int)
	// Target is the credit the sender asks for with backlog bytes waiting.
	Target(backlog int) uint32
}
