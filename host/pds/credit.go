package pds

import (
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
)

// RCCC at the receiver (rccc's doc, "Wiring in a PDS"): every receiving
// endpoint runs a credit pacer, keyed by its receiver CCCs. A source joins
// with the first credit target its data packets (RUD_CC_REQ) or a CTRL
// CREDIT_REQ carry; the pacer's grants leave as CTRL CREDIT at once, and
// ACK_CCs repeat the last one (sendAck). The sender side lives in ccc.go.

// onCreditTarget takes a sender CCC's credit target (a RUD_CC_REQ's, or a
// CREDIT_REQ's payload) under its ccc_id, and sends the grants due now.
func (ep *Endpoint) onCreditTarget(now time.Duration, c *rxCCC, cccID uint8, target uet.Credit, out *engine.Replies) {
	c.lastActive = now
	if c.credit && c.cccID != cccID {
		// A new incarnation of the sender's CCC: its counts start at 0
		// again, and so must the source's at the pacer.
		ep.pacer.Remove(c.key)
		c.ackCreditSet = false
		ep.ctr.CreditSourcesReset++
	}
	c.credit, c.cccID = true, cccID
	// A sender asks for at most MaxWnd beyond what it holds: a target
	// further ahead of what was granted is spoofed or broken, and would
	// draw the pacer's grants for nothing.
	granted, _ := ep.pacer.Granted(c.key)
	if most := ep.maxTargetAhead(); rccc.Ahead(uint64(granted), target) > most {
		target = uet.Credit((uint32(granted) + uint32(most)) & uet.Units24Mask)
		ep.ctr.CreditTargetsCapped++
	}
	idle := ep.pacer.NextEvent() == rccc.Never
	ep.pacer.OnTarget(now, c.key, target)
	ep.grantsDue(now, out.Next)
	if idle && ep.pacer.NextEvent() != rccc.Never {
		ep.pacerFlow.Kick() // the pacer flow's next grant
	}
}

// maxTargetAhead is the most 256-byte units a credit target may be
// ahead of the source's grants: MaxWnd and the MTU a speculating sender
// adds, twice over (a sender's debt).
func (ep *Endpoint) maxTargetAhead() int32 {
	p := ep.rcccParams
	return int32(2 * (p.MaxWndBytes() + p.MTUBytes) / uet.ByteUnit)
}

// onCreditRequest is a CTRL CREDIT_REQ: a source with data, no credit and
// nothing in flight. Its target goes to the pacer, and a CTRL CREDIT
// answers at once with what the source was granted so far (a lost grant
// is recovered).
func (ep *Endpoint) onCreditRequest(now time.Duration, m *pktio.Message, ctl *uet.Ctrl, out *engine.Replies) {
	ep.ctr.CreditRequestsReceived++
	c := ep.rxCCCOf(now, m.Addr.Addr())
	if c == nil {
		return // counted (ccc_refused); the source asks again
	}
	if c.last == nil {
		c.ev = m.Addr.Port()
	}
	if t := ep.targets[targetKey{Src: m.Addr.Addr(), SPDCID: ctl.SPDCID}]; t != nil && t.ccc == c {
		t.lastActive = now // a source waiting for credit is not idle
	}
	id, target := splitCreditPayload(ctl.Payload)
	ep.onCreditTarget(now, c, id, target, out)
	if g, ok := ep.pacer.Granted(c.key); ok {
		if p := out.Next(); p != nil {
			ep.buildCredit(c, g, p)
		}
	}
}

// onCreditGrant is a CTRL CREDIT at the sender: the receiver's cumulative
// credit for the CCC of that receiver, if the ccc_id is the CCC's own.
func (ep *Endpoint) onCreditGrant(now time.Duration, m *pktio.Message, ctl *uet.Ctrl) {
	ep.ctr.CreditsReceived++
	c := ep.cccs.byKey[CCCKey{Src: ep.local.Addr(), Dst: m.Addr.Addr(), TC: ep.cfg.DSCP}]
	id, credit := splitCreditPayload(ctl.Payload)
	if c == nil || c.credit == nil || id != c.cccID() {
		ep.ctr.StaleCredits++ // for a CCC gone, or an earlier incarnation
		return
	}
	c.onCredit(now, credit)
}

// grantsDue runs the pacer to now and writes a CTRL CREDIT per source it
// granted to into the slots next gives (nil: no more room). Credit is
// cumulative, so only a source's last grant of the pass is sent, and one
// that finds no slot is carried by the next grant or ACK_CC.
func (ep *Endpoint) grantsDue(now time.Duration, next func() *engine.Packet) int {
	ep.grants = ep.pacer.Advance(now, ep.grants[:0])
	n := 0
	for i, g := range ep.grants {
		last := true
		for _, h := range ep.grants[i+1:] {
			if h.Key == g.Key {
				last = false
				break
			}
		}
		c := ep.rxcccs[g.Key]
		if !last || c == nil {
			continue
		}
		p := next()
		if p == nil {
			ep.ctr.CreditsUnsent++
			continue
		}
		ep.buildCredit(c, g.Credit, p)
		n++
	}
	return n
}

// buildCredit writes a CTRL CREDIT with the cumulative credit g to the
// source of c, on the PDC that last heard from it.
func (ep *Endpoint) buildCredit(c *rxCCC, g uet.Credit, p *engine.Packet) {
	h := uet.Header{Type: uet.TypeCtrl, Ctrl: uet.Ctrl{CtrlType: uet.CtrlCredit, Payload: creditPayload(c.cccID, g)}}
	if t := c.last; t != nil {
		h.Ctrl.SPDCID, h.Ctrl.DPDCID, h.Ctrl.PSN = t.id, t.key.SPDCID, t.psn(t.cack)
	}
	p.N = h.Encode(p.Buf)
	p.TOS = ep.ctrlTOS
	p.Addr = netip.AddrPortFrom(c.key.Src, ep.port)
	p.SrcPort = c.ev
	ep.ctr.CreditsSent++
	ep.ctr.TxPackets++
	ep.ctr.TxBytes += uint64(p.N)
}

// pacerFlow is the endpoint's credit pacer as an engine flow: it sends the
// grants on the pacer's schedule.
type pacerFlow Endpoint

// Fill implements engine.Flow.
func (f *pacerFlow) Fill(now time.Duration, out []engine.Packet, _ *engine.PortLimit) (int, time.Duration) {
	ep := (*Endpoint)(f)
	ep.mu.Lock()
	defer ep.mu.Unlock()
	i := 0
	n := ep.grantsDue(now, func() *engine.Packet {
		if i == len(out) {
			return nil
		}
		i++
		return &out[i-1]
	})
	next := ep.pacer.NextEvent()
	if next == rccc.Never {
		next = engine.Never
	}
	return n, next
}

// RxCCCInfo is a receiver CCC as RxCCCs reports it.
type RxCCCInfo struct {
	Key  CCCKey `json:"-"`
	Src  string `json:"src"`
	Dst  string `json:"dst"`
	TC   uint8  `json:"tc"`
	PDCs int    `json:"pdcs"`
	// Source is the CCC's source at the credit pacer (its state
	// satisfied, active or slow_pull; target and granted bytes), when the
	// sender asks for credit.
	Source *rccc.SourceStats `json:"rccc,omitempty"`
}

// RxCCCs returns the receiver CCCs.
func (ep *Endpoint) RxCCCs() []RxCCCInfo {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	out := make([]RxCCCInfo, 0, len(ep.rxcccs))
	for _, c := range ep.rxcccs {
		ri := RxCCCInfo{Key: c.key, Src: c.key.Src.String(), Dst: c.key.Dst.String(), TC: c.key.TC, PDCs: c.pdcs}
		if st, ok := ep.pacer.Source(c.key); ok {
			ri.Source = &st
		}
		out = append(out, ri)
	}
	return out
}

// PacerStats returns the counters of the endpoint's credit pacer.
func (ep *Endpoint) PacerStats() rccc.PacerStats {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.pacer.Stats()
}
