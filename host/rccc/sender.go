package rccc

import (
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/uet"
)

var _ cc.CreditSource = (*Sender)(nil)

// SenderStats are a Sender's counters.
type SenderStats struct {
	Credits          uint64 `json:"credits"`           // cumulative values taken (OnCredit)
	DuplicateCredits uint64 `json:"duplicate_credits"` // equal to the last accepted: nothing new
	StaleCredits     uint64 `json:"stale_credits"`     // behind the last accepted (reordered): ignored
	// CreditBytes is the credit the receiver granted, as the cumulative
	// values advanced; ClampedBytes the part of it lost to the MaxWnd
	// ceiling.
	CreditBytes  uint64 `json:"credit_bytes"`
	ClampedBytes uint64 `json:"clamped_bytes"`
	SentBytes    uint64 `json:"sent_bytes"`
	// SpeculativeBytes were sent on speculative credit; UnusedSpeculative
	// is the speculative credit left when speculation ended.
	SpeculativeBytes  uint64 `json:"speculative_bytes"`
	UnusedSpeculative uint64 `json:"unused_speculative_bytes"`
	// Overdrawn counts packets sent with no credit (a caller that did not
	// ask CanSend).
	Overdrawn uint64 `json:"overdrawn"`
}

// Sender is RCCC at a sender's CCC (htsim UecSrc with _receiver_based_cc):
// the credit it may spend, the speculative credit it starts with, and the
// cumulative credit target its requests carry. It is a cc.CreditSource and
// a pure state machine with no timer: nothing in it depends on the now the
// methods take. Not safe for concurrent use.
//
// Credit is bytes and may fall below zero: a packet may leave while any
// credit is left (htsim can_send_RCCC: credit > 0) and takes its whole
// size, and the debt is paid from the next grants.
type Sender struct {
	p           Params
	maxWnd      int
	credit      int
	speculating bool
	// pull is the receiver's cumulative credit as far as accepted, in
	// 256-byte units, unwrapped (htsim _pull); it starts at 0, as the
	// receiver's count does.
	pull  uint64
	stats SenderStats
}

// NewSender returns the RCCC state of a sender CCC created at now: credit
// = SpeculativeBytes and speculating (htsim startConnection), nothing
// received. It panics if p.Validate fails; validate configuration first.
func NewSender(p Params, now time.Duration) *Sender {
	if err := p.Validate(); err != nil {
		panic(err)
	}
	return &Sender{p: p, maxWnd: p.MaxWndBytes(), credit: p.SpeculativeBytes, speculating: true}
}

// Params returns the parameters s was made with.
func (s *Sender) Params() Params { return s.p }

// MaxWnd is the most credit s holds and the most it asks for beyond it.
func (s *Sender) MaxWnd() int { return s.maxWnd }

// Credit is the bytes s may still send; 0 or less after a packet
// overspent it.
func (s *Sender) Credit() int { return s.credit }

// CanSend reports whether a packet of any size may leave: credit > 0
// (uet.md: RCCC.CanSend; htsim can_send_RCCC).
func (s *Sender) CanSend() bool { return s.credit > 0 }

// Speculating reports whether s still spends speculative credit: nothing
// came back from the receiver yet (htsim marks such packets DATA_SPEC).
func (s *Sender) Speculating() bool { return s.speculating }

// Received is the receiver's cumulative credit as far as s accepted it,
// as the wire carries it.
func (s *Sender) Received() uet.Credit { return uet.Credit(s.pull & uet.Units24Mask) }

// Stats returns the counters.
func (s *Sender) Stats() SenderStats { return s.stats }

// OnAck takes an ACK received at now: the first ends speculation (htsim
// processAck → stopSpeculating). An ACK_CC with a CREDIT cc_state is
// OnAck, then OnCredit of its credit.
func (s *Sender) OnAck(now time.Duration) { s.stopSpeculating() }

// OnNack takes a NACK received at now: the first response ends
// speculation as an ACK does (htsim processNack).
func (s *Sender) OnNack(now time.Duration) { s.stopSpeculating() }

// stopSpeculating is htsim stopSpeculating: once the receiver has
// answered, the speculative credit left is dropped (a debt is kept): from
// now on only granted credit is spent.
func (s *Sender) stopSpeculating() {
	if !s.speculating {
		return
	}
	s.speculating = false
	if s.credit > 0 {
		s.stats.UnusedSpeculative += uint64(s.credit)
		s.credit = 0
	}
}

// OnCredit takes the receiver's cumulative credit received at now, 24 bits
// of 256-byte units as the wire carries it (htsim processPull, handlePull).
// It ends speculation; a value ahead of the last accepted one adds the
// difference to the credit, which never exceeds MaxWnd (htsim: the
// configured maxwnd); a duplicate or an older (reordered) value adds
// nothing. Bits above the 24 are ignored.
func (s *Sender) OnCredit(now time.Duration, cumulative uint32) {
	s.stopSpeculating()
	s.stats.Credits++
	d := Ahead(s.pull, uet.Credit(cumulative))
	switch {
	case d == 0:
		s.stats.DuplicateCredits++
		return
	case d < 0:
		s.stats.StaleCredits++
		return
	}
	s.pull += uint64(d)
	bytes := int(d) * uet.ByteUnit
	s.stats.CreditBytes += uint64(bytes)
	s.credit += bytes
	if s.credit > s.maxWnd {
		s.stats.ClampedBytes += uint64(s.credit - s.maxWnd)
		s.credit = s.maxWnd
	}
}

// OnTransmit spends a packet of bytes sent at now (htsim spendCredit):
// its whole size, whatever credit was left.
func (s *Sender) OnTransmit(now time.Duration, bytes int) {
	bytes = max(bytes, 0)
	if s.credit <= 0 {
		s.stats.Overdrawn++
	}
	if s.speculating {
		s.stats.SpeculativeBytes += uint64(bytes)
	}
	s.stats.SentBytes += uint64(bytes)
	s.credit -= bytes
}

// Target returns the cumulative credit target for demand d, 24 bits of
// 256-byte units as credit_target carries it (htsim computePullTarget,
// uet.md "RCCC"):
//
//	want = min(backlog + retransmit backlog, cwnd + MTU, MaxWnd) − credit
//	while speculating with new data, want ≥ MTU
//	want /= active sources at the sending NIC (integer division), if > 1
//	target = received + ⌈want / 256⌉
//
// The target counts from the credit received so far: a sender asks for
// what it lacks beyond what it holds, and a target not ahead of what the
// receiver granted asks for nothing. Call it after OnTransmit of the
// packet that carries it, with the backlog without that packet.
func (s *Sender) Target(d cc.CreditDemand) uint32 {
	want := int64(max(d.Backlog, 0)) + int64(max(d.RetxBacklog, 0))
	if d.Window > 0 {
		want = min(want, int64(d.Window)+int64(s.p.MTUBytes))
	}
	want = min(want, int64(s.maxWnd))
	want -= int64(s.credit)
	if s.speculating && want < int64(s.p.MTUBytes) && d.Backlog > 0 {
		// htsim: "always request at least an MTU of credit if we have a
		// backlog ... Saves our bacon for short transfers".
		want = int64(s.p.MTUBytes)
	}
	if d.ActiveSources > 1 {
		want /= int64(d.ActiveSources)
	}
	return uint32(s.pull+uint64(ceilUnits(want))) & uet.Units24Mask
}
