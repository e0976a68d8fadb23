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

// CreditDemand is what a sender asks its receiver for credit with (uet.md
// "RCCC"; htsim UecSrc::computePullTarget).
type CreditDemand struct {
	// Backlog is the new bytes waiting to be sent (after the packet just
	// sent).
	Backlog int
	// RetxBacklog is the bytes waiting to be retransmitted.
	RetxBacklog int
	// Window is the congestion window of a window controller that runs
	// beside the credits (NSCC's cwnd): the target is at most Window + MTU.
	// Optional: 0, no window.
	Window int
	// ActiveSources is how many sources (CCCs) the sending NIC has waiting
	// to transmit, this one included: each asks for its share of what it
	// lacks (htsim: UecNIC::activeSources, the sources queued at the
	// sender's NIC). Optional: 0 or 1, no division.
	ActiveSources int
}

// CreditSource is a sender's credit from its receiver (RCCC): bytes the
// receiver allowed, granted by its pacer, plus the speculative credit a
// sender starts with.
type CreditSource interface {
	// Credit is the bytes the sender may still send; 0 or less once a
	// packet overspent it (the debt is paid from the next grants).
	Credit() int
	// CanSend reports whether a packet of any size may leave: credit > 0.
	CanSend() bool
	// OnCredit takes the receiver's cumulative credit count received at
	// now, as carried on the wire: 24 bits of 256-byte units (an ACK_CC
	// CREDIT cc_state's credit, a CTRL CREDIT's payload). A value not
	// ahead of the last one (duplicate, reordered) adds nothing.
	OnCredit(now time.Duration, cumulative uint32)
	// OnAck and OnNack take an ACK or a NACK received at now: the first
	// response from the receiver ends speculative credit.
	OnAck(now time.Duration)
	OnNack(now time.Duration)
	// OnTransmit spends bytes sent at now.
	OnTransmit(now time.Duration, bytes int)
	// Target is the cumulative credit target for demand d, as a request
	// carries it (*_CC_REQ credit_target, CTRL CREDIT_REQ payload): 24 bits
	// of 256-byte units. Call it after OnTransmit of the packet it rides
	// on.
	Target(d CreditDemand) uint32
}
