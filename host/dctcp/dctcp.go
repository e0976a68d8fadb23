// Package dctcp is DCTCP (RFC 8257) for the lab's TCP flows: a congestion
// control written in BPF (bpf/dctcp.c) that this package registers with the
// kernel as a tcp_congestion_ops struct_ops map, so that any socket in any
// namespace picks it with TCP_CONGESTION (the lab's kernel has no DCTCP
// module), and the pure-Go reference of its rules, which the tests replay
// the BPF program's trace through, window for window.
//
// The reference follows Linux's arithmetic (net/ipv4/tcp_dctcp.c), the
// same the BPF program uses: α in 1/1024, counted in packets. Every rule
// names the section of RFC 8257 it comes from.
package dctcp

import (
	"fmt"
)

// Alpha is DCTCP's α, the estimated fraction of marked packets, in 1/1024
// (Linux's DCTCP_MAX_ALPHA = 1024 is 1.0).
type Alpha uint32

// MaxAlpha is α = 1.
const MaxAlpha Alpha = 1024

// Float is α as a fraction.
func (a Alpha) Float() float64 { return float64(a) / float64(MaxAlpha) }

func (a Alpha) String() string { return fmt.Sprintf("%.4f", a.Float()) }

// Params are DCTCP's knobs, under Linux's module parameter names.
type Params struct {
	// ShiftG is dctcp_shift_g: the gain g = 1/2^ShiftG (RFC 8257 §4.2
	// recommends 1/16: 4). Range 0-10.
	ShiftG uint32
	// AlphaOnInit is dctcp_alpha_on_init: α when a connection starts
	// (Linux: 1024, α = 1: the first marks cut hard). Range 0-1024.
	AlphaOnInit Alpha
}

// DefaultParams are Linux's defaults: g = 1/16, α starts at 1.
func DefaultParams() Params { return Params{ShiftG: 4, AlphaOnInit: MaxAlpha} }

// Validate reports the first knob out of its range, by name.
func (p Params) Validate() error {
	if p.ShiftG > 10 {
		return fmt.Errorf("dctcp: dctcp_shift_g %d out of range [0, 10] (g = 1/2^shift_g)", p.ShiftG)
	}
	if p.AlphaOnInit > MaxAlpha {
		return fmt.Errorf("dctcp: dctcp_alpha_on_init %d out of range [0, %d] (1024 is α = 1)", p.AlphaOnInit, MaxAlpha)
	}
	return nil
}

// UpdateAlpha is α at the end of an observation window in which delivered
// packets were acknowledged, deliveredCE of them with ECE (RFC 8257 §3.3:
// α ← (1 − g)·α + g·F, F = deliveredCE / delivered), in Linux's integer
// form: α −= α >> ShiftG, or all of α once that shift is 0 (so α decays to
// exactly 0 instead of sticking at 15/1024), then α += (deliveredCE <<
// (10 − ShiftG)) / delivered, capped at 1.
func UpdateAlpha(p Params, a Alpha, delivered, deliveredCE uint32) Alpha {
	dec := a >> p.ShiftG
	if dec == 0 {
		dec = a
	}
	a -= dec
	if deliveredCE != 0 {
		a += Alpha((deliveredCE << (10 - p.ShiftG)) / max(delivered, 1))
		a = min(a, MaxAlpha)
	}
	return a
}

// SSThresh is the slow-start threshold after a window with ECE (RFC 8257
// §3.3: cwnd × (1 − α/2)), in packets, at least 2.
func SSThresh(cwnd uint32, a Alpha) uint32 {
	return max(cwnd-(cwnd*uint32(a))>>11, 2)
}

// LossSSThresh is the threshold after a loss (RFC 8257 §3.4: as Reno,
// cwnd/2), at least 2.
func LossSSThresh(cwnd uint32) uint32 { return max(cwnd>>1, 2) }

// SenderSnapshot is what the sender's TCP stack knows at an ACK: the
// sequence space and its delivered counts (tcp_sock's snd_una, snd_nxt,
// delivered and delivered_ce, in packets).
type SenderSnapshot struct {
	SndUna, SndNxt         uint32
	Delivered, DeliveredCE uint32
}

// Window is one observation window that ended.
type Window struct {
	Delivered, DeliveredCE uint32 // in the window
	AlphaBefore, Alpha     Alpha
}

// Sender is DCTCP's sender state for one connection (what the BPF program
// keeps in icsk_ca_priv).
type Sender struct {
	p                            Params
	alpha                        Alpha
	nextSeq                      uint32
	oldDelivered, oldDeliveredCE uint32
	lossCwnd                     uint32
}

// NewSender starts a connection's state at s (DCTCP's init).
func NewSender(p Params, s SenderSnapshot) *Sender {
	x := &Sender{p: p, alpha: min(p.AlphaOnInit, MaxAlpha)}
	x.reset(s)
	return x
}

func (x *Sender) reset(s SenderSnapshot) {
	x.nextSeq = s.SndNxt
	x.oldDelivered = s.Delivered
	x.oldDeliveredCE = s.DeliveredCE
}

// Alpha is α now.
func (x *Sender) Alpha() Alpha { return x.alpha }

// OnAck takes the state after an ACK (DCTCP's in_ack_event). The window
// ends when snd_una reaches the snd_nxt it began at (about one round trip,
// RFC 8257 §3.3): then α moves and the next window begins.
func (x *Sender) OnAck(s SenderSnapshot) (Window, bool) {
	if before(s.SndUna, x.nextSeq) {
		return Window{}, false
	}
	w := Window{Delivered: s.Delivered - x.oldDelivered, DeliveredCE: s.DeliveredCE - x.oldDeliveredCE, AlphaBefore: x.alpha}
	x.alpha = UpdateAlpha(x.p, x.alpha, w.Delivered, w.DeliveredCE)
	w.Alpha = x.alpha
	x.reset(s)
	return w, true
}

// SSThresh is the cut on an ECE, once per window (the stack's CWR calls
// it); it remembers cwnd for an undo.
func (x *Sender) SSThresh(cwnd uint32) uint32 {
	x.lossCwnd = cwnd
	return SSThresh(cwnd, x.alpha)
}

// OnLoss is the cut on entering Recovery or on an RTO.
func (x *Sender) OnLoss(cwnd uint32) uint32 {
	x.lossCwnd = cwnd
	return LossSSThresh(cwnd)
}

// UndoCwnd is the window a spurious cut is undone to.
func (x *Sender) UndoCwnd(cwnd uint32) uint32 { return max(cwnd, x.lossCwnd) }

// before is RFC 1982 serial order on TCP sequence numbers.
func before(a, b uint32) bool { return int32(a-b) < 0 }

// ReceiverAction is what the receiver does for one data segment (RFC 8257
// §3.2).
type ReceiverAction struct {
	// FlushDelayedAck: an ACK was being delayed for the segments before
	// this one, which had the other CE state: it is sent first, for
	// FlushAckSeq, with ECE = FlushECE (the old state).
	FlushDelayedAck bool
	FlushAckSeq     uint32
	FlushECE        bool
	// AckNow: the CE state changed, so this segment is ACKed at once.
	AckNow bool
	// ECE is the flag the receiver's ACKs carry from now on.
	ECE bool
}

// Receiver is the receiver's CE state machine: ECE on an ACK says the
// segments it covers were CE-marked, and the state changes ACK at once so
// that no ACK covers segments of both states.
type Receiver struct {
	ceState     bool
	priorRcvNxt uint32
}

// NewReceiver starts at rcvNxt with the non-CE state.
func NewReceiver(rcvNxt uint32) *Receiver { return &Receiver{priorRcvNxt: rcvNxt} }

// OnSegment takes a data segment with ECT or CE (the stack's
// CA_EVENT_ECN_IS_CE or _NO_CE): ce says it was marked, rcvNxt is the
// receiver's rcv_nxt when the stack checks the segment's ECN field (before
// its data counts), and ackTimerPending that an ACK was being delayed
// then. The delayed ACK it flushes is for the rcv_nxt of the previous
// such event, as Linux's tcp_dctcp.h.
func (r *Receiver) OnSegment(ce bool, rcvNxt uint32, ackTimerPending bool) ReceiverAction {
	var a ReceiverAction
	if r.ceState != ce {
		if ackTimerPending {
			a.FlushDelayedAck, a.FlushAckSeq, a.FlushECE = true, r.priorRcvNxt, r.ceState
		}
		a.AckNow = true
	}
	r.priorRcvNxt = rcvNxt
	r.ceState = ce
	a.ECE = ce
	return a
}
