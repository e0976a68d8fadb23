package pds

import (
	"math"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pattern"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
)

// targetKey names a PDC at its destination: the source FEP and the
// source's PDC ID.
type targetKey struct {
	Src    netip.Addr
	SPDCID uint16
}

// rxMsg is a message being reassembled.
type rxMsg struct {
	size int
	got  int
	bad  bool // a packet failed the payload check
}

// target is a PDC at its destination: which PSNs arrived, the ACK owed,
// the messages being reassembled. Guarded by the endpoint's mu.
type target struct {
	ep    *Endpoint
	key   targetKey
	id    uint16 // this end's PDC ID (the ACK's spdcid)
	start uint32 // PSN of index 0
	cack  uint64 // every index below arrived
	hi    uint64 // highest index arrived + 1
	rcvd  [maxPDCWindow]bool
	ccc   *rxCCC

	rcvdBytes uint64 // UDP payload bytes, cumulative (ACK_CC rcvd_bytes)
	ooo       uint64 // packets that arrived out of order
	held      int    // of them, those above cack now (ACK_CC ooo_count)

	ackOwed       bool
	ackIdx        uint64        // the packet the owed ACK answers
	ackArrival    time.Duration // its arrival (service time)
	ackCE         bool          // a CE-marked packet since the last ACK
	ackEV         uint16        // the EV to answer on
	bytesSinceAck int
	lastActive    time.Duration

	msgs  map[uint16]*rxMsg
	jobID uint32 // from the SES headers
	stats TargetStats
}

// TargetStats are one target PDC's counters.
type TargetStats struct {
	Src    netip.Addr `json:"src"`
	SPDCID uint16     `json:"spdcid"` // the source's PDC ID
	PDC    uint16     `json:"pdc"`    // this end's
	JobID  uint32     `json:"job_id"`
	Received
	Trimmed uint64 `json:"trimmed"`
}

// Received is what a target took in: messages placed (and their bytes),
// payloads that failed the check (with verify), packets taken again or
// out of order, and packets that arrived with CE.
type Received struct {
	Messages     uint64 `json:"messages"`
	MessageBytes uint64 `json:"message_bytes"`
	VerifyErrors uint64 `json:"verify_errors"`
	Duplicates   uint64 `json:"duplicates"`
	OutOfOrder   uint64 `json:"out_of_order"`
	CEReceived   uint64 `json:"ce_received"`
}

// Add adds o's counts to r's.
func (r *Received) Add(o Received) {
	r.Messages += o.Messages
	r.MessageBytes += o.MessageBytes
	r.VerifyErrors += o.VerifyErrors
	r.Duplicates += o.Duplicates
	r.OutOfOrder += o.OutOfOrder
	r.CEReceived += o.CEReceived
}

// Targets returns the counters of the live target PDCs.
func (ep *Endpoint) Targets() []TargetStats {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	out := make([]TargetStats, 0, len(ep.targets))
	for _, t := range ep.targets {
		s := t.stats
		s.Src, s.SPDCID, s.PDC, s.JobID, s.OutOfOrder = t.key.Src, t.key.SPDCID, t.id, t.jobID, t.ooo
		out = append(out, s)
	}
	return out
}

func (t *target) psn(idx uint64) uint32 { return t.start + uint32(idx) }

// ackPSNOffset is the owed ACK's ack_psn_offset: the packet it answers
// (ackIdx) from the cumulative PSN (index cack-1), signed (uet.md, Linux's
// s16). It is negative when that packet is below the cumulative PSN: a
// retransmission that filled a hole, an answer to a probe for a PSN
// already acknowledged. An offset the field cannot hold names the
// cumulative PSN instead, which arrived too: the source then takes no RTT
// sample from an ACK it cannot match.
func (t *target) ackPSNOffset() int16 {
	d := int64(t.ackIdx - (t.cack - 1)) // indices: no PSN wrap
	if d < math.MinInt16 || d > math.MaxInt16 {
		return 0
	}
	return int16(d)
}

// rxCCC is the destination's CCC of a {source, destination, TC}: the
// contexts the receiver counts against its limit, and RCCC's receiving
// side: the source at the endpoint's pacer.
type rxCCC struct {
	key        CCCKey
	pdcs       int
	lastActive time.Duration
	// credit: the source asked for credit (a credit target came), under
	// the sender CCC's ccc_id cccID.
	credit bool
	cccID  uint8
	// ackCredit is the credit the last ACK_CC with a CREDIT cc_state
	// carried (ackCreditSet: one did).
	ackCredit    uet.Credit
	ackCreditSet bool
	// last is the target PDC that last heard from the source, and ev the
	// entropy value it came with: where CTRL CREDITs go.
	last *target
	ev   uint16
	// dataGap is the smoothed time between the source's turns, a turn
	// being its data packets in a row for one PDC (the source's CCC
	// serves its PDCs in turn, a quantum each): with pdcs PDCs one PDC
	// hears from its source every pdcs × dataGap (targetExpiry). It is
	// measured over windows of at least gapWindow (winStart, winTurns):
	// packets come in bursts (a batch, a GSO run), and a per-packet
	// average taken after a burst said a tenth of the real gap, so that
	// targets were freed between their turns after all.
	dataGap  time.Duration
	winStart time.Duration
	winTurns int
	// turnBytes is what the last PDC has sent since its turn began.
	turnBytes int
}

// beginsTurn says a data packet of size bytes for t begins a turn of the
// source's CCC, and counts it: another PDC's than the last packet's, or
// one past the last turn's quantum (a lone busy PDC takes a turn every
// pdcQuantum bytes too, so its idle neighbours' expiry stays the idle
// timeout's, not their count × a whole gap window).
func (c *rxCCC) beginsTurn(t *target, size int) bool {
	turn := c.last != t || c.turnBytes >= pdcQuantum
	if turn {
		c.turnBytes = 0
	}
	c.turnBytes += size
	return turn
}

// noteData counts a data packet from the source into dataGap; turn says
// it begins a turn (its PDC is not the last packet's).
func (c *rxCCC) noteData(now, gapWindow time.Duration, turn bool) {
	if c.winStart == 0 {
		c.winStart = now
	}
	if turn {
		c.winTurns++
	}
	if d := now - c.winStart; d >= gapWindow {
		sample := d / time.Duration(max(c.winTurns, 1))
		if c.dataGap == 0 {
			c.dataGap = sample
		} else {
			c.dataGap += (sample - c.dataGap) / 4
		}
		c.winStart, c.winTurns = now, 0
	}
}

// turnsBeforeExpiry is how many of its turns a target PDC may miss before
// housekeeping frees it: a source's CCC serves its PDCs in turn, so with
// thousands sharing its rate a PDC's turn comes every pdcs × dataGap,
// past any fixed idle timeout (10,000 PDCs at 400 Mbit/s: ~0.3 s), and a
// target freeing it between its packets costs a NACK and a SYN a turn.
const turnsBeforeExpiry = 4

// targetExpiry is how long target t may go without a packet: twice the
// idle timeout, the source's retries with a message in progress, or
// turnsBeforeExpiry of its turns in its source's round, the longest.
func (ep *Endpoint) targetExpiry(t *target) time.Duration {
	e := 2 * ep.cfg.IdleTimeout
	if len(t.msgs) > 0 {
		e = max(e, ep.cfg.RTO*time.Duration(ep.cfg.MaxRetries))
	}
	// The turn is bounded before it is multiplied (no overflow), and the
	// bound does not cut the idle timeout's own expiry.
	turn := maxIdleTimeout
	if n := time.Duration(t.ccc.pdcs) * turnsBeforeExpiry; n > 0 && t.ccc.dataGap < maxIdleTimeout/n {
		turn = t.ccc.dataGap * n
	}
	return max(e, turn)
}

// onRequest is a data packet: establish the PDC on SYN, record the PSN,
// check and place the payload, owe or send the ACK.
func (ep *Endpoint) onRequest(now time.Duration, m *pktio.Message, r *uet.Request, rest []byte, out *engine.Replies) {
	src := m.Addr.Addr()
	key := targetKey{Src: src, SPDCID: r.SPDCID}
	t := ep.targets[key]
	if t != nil && r.SYN && r.StartPSN() != t.start {
		// A new incarnation of the source's PDC ID (the source restarted
		// and numbers its PDCs again): the old state is stale.
		if t.ackOwed {
			ep.dropOwed(t)
		}
		ep.freeTarget(t)
		ep.ctr.TargetPDCsReplaced++
		t = nil
	}
	if t == nil {
		if !r.SYN {
			// The PDC is gone here (idle timeout, or never was): the
			// source must establish it again.
			ep.ctr.UnknownPDC++
			ep.sendNack(out, m, uet.NackInvDPDCID, r.PSN, 0, r.SPDCID, 0)
			return
		}
		var code uet.NackCode
		if t, code = ep.newTarget(now, key, r); t == nil {
			ep.sendNack(out, m, code, r.PSN, 0, r.SPDCID, 0)
			return
		}
	} else if !r.SYN && r.DPDCID != t.id {
		ep.ctr.UnknownPDC++
		ep.sendNack(out, m, uet.NackInvDPDCID, r.PSN, t.id, r.SPDCID, 0)
		return
	}
	turn := t.ccc.beginsTurn(t, m.N)
	t.ccc.last, t.ccc.ev = t, m.Addr.Port()
	if r.Type.HasReqCC() {
		// Every RUD_CC_REQ carries the sender CCC's credit target, also a
		// duplicate or a trimmed one (the headers survive a trim).
		ep.onCreditTarget(now, t.ccc, r.CCCID, r.CreditTarget, out)
	}
	var ses sesHeader
	n, err := ses.decode(rest)
	if err != nil {
		ep.ctr.Malformed++
		return
	}
	pay := rest[n:]
	t.lastActive = now
	t.ccc.noteData(now, ep.cfg.IdleTimeout/houseQuantum, turn)
	off := int64(int32(r.PSN - t.psn(t.cack)))
	if code, trimmed := ep.trimmed(m, &ses, pay); trimmed {
		// A switch cut the packet to its headers instead of dropping it:
		// NACK at once so the source resends without waiting for a
		// timeout (uet.md; the source's NSCC takes the NACK's reason).
		ep.ctr.TrimmedReceived++
		t.stats.Trimmed++
		if off >= 0 && off < maxPDCWindow && !t.rcvd[(t.cack+uint64(off))%maxPDCWindow] {
			ep.sendNack(out, m, code, r.PSN, t.id, r.SPDCID, t.psn(t.hi))
		} else {
			ep.ctr.TrimmedDuplicates++
		}
		return
	}
	switch {
	case off < 0 || t.rcvd[(t.cack+uint64(off))%maxPDCWindow] && off < maxPDCWindow:
		ep.ctr.Duplicates++
		t.stats.Duplicates++
		t.owe(now, t.cack-1, m, m.TOS&ecnMask == ecnCE && !ep.cfg.NoECNEcho)
		return
	case off >= maxPDCWindow:
		ep.ctr.OutOfWindow++
		ep.sendNack(out, m, uet.NackPSNOORWindow, r.PSN, t.id, r.SPDCID, t.psn(t.hi))
		return
	}
	idx := t.cack + uint64(off)
	t.rcvd[idx%maxPDCWindow] = true
	if off > 0 {
		t.ooo++
		t.held++
	}
	t.hi = max(t.hi, idx+1)
	t.rcvdBytes += uint64(m.N)
	for t.cack < t.hi && t.rcvd[t.cack%maxPDCWindow] {
		t.rcvd[t.cack%maxPDCWindow] = false
		if t.cack != idx {
			t.held-- // held above the old cumulative point
		}
		t.cack++
	}
	ep.ctr.RxDataPackets++
	ep.deliver(t, &ses, pay)
	ce := m.TOS&ecnMask == ecnCE
	if ce {
		ep.ctr.CEReceived++
		t.stats.CEReceived++
		ce = !ep.cfg.NoECNEcho
	}
	t.owe(now, idx, m, ce)
	t.bytesSinceAck += m.N
	// At once on CE (uet.md: the sink ACKs at once on CE), on an ACK
	// request, or when AckBytes arrived; else at the end of the batch.
	if ce || r.AR || t.bytesSinceAck >= ep.cfg.AckBytes {
		ep.sendAck(now, t, out, uet.AckReqNone)
	}
}

// trimmed reports whether data packet m was trimmed by a switch, and the
// NACK code that answers it.
func (ep *Endpoint) trimmed(m *pktio.Message, s *sesHeader, pay []byte) (uet.NackCode, bool) {
	switch dscp := m.TOS >> 2; {
	case dscp == ep.cfg.TrimLastHopDSCP && dscp != 0:
		return uet.NackTrimmedLastHop, true
	case dscp == ep.cfg.TrimDSCP && dscp != 0,
		s.n >= 0 && len(pay) < s.n:
		return uet.NackTrimmed, true
	}
	return 0, false
}

// owe records that an ACK for index idx is due.
func (t *target) owe(now time.Duration, idx uint64, m *pktio.Message, ce bool) {
	if !t.ackOwed {
		t.ackOwed = true
		t.ep.owed = append(t.ep.owed, t)
	}
	t.ackIdx, t.ackArrival, t.ackEV = idx, now, m.Addr.Port()
	t.ackCE = t.ackCE || ce
}

// deliver checks a packet's payload and advances its message.
func (ep *Endpoint) deliver(t *target, s *sesHeader, pay []byte) {
	if len(pay) == 0 && s.length > 0 {
		ep.ctr.Malformed++
		return
	}
	msg := t.msgs[s.msgID]
	if msg == nil {
		msg = &rxMsg{size: int(s.length)}
		t.msgs[s.msgID] = msg
	}
	if s.n >= 0 && s.n != len(pay) || uint64(s.offset)+uint64(len(pay)) > uint64(msg.size) {
		ep.ctr.Malformed++
		return
	}
	if ep.verify && !pattern.Match(pay, seed(s.jobID, t.key.SPDCID), uint64(s.msgID), int(s.offset)) {
		msg.bad = true
	}
	msg.got += len(pay)
	t.jobID = s.jobID
	ep.ctr.RxPayloadBytes += uint64(len(pay))
	if msg.got >= msg.size {
		ep.ctr.MessagesReceived++
		ep.ctr.MessageBytesReceived += uint64(msg.size)
		t.stats.Messages++
		t.stats.MessageBytes += uint64(msg.size)
		if msg.bad {
			ep.ctr.VerifyErrors++
			t.stats.VerifyErrors++
		}
		delete(t.msgs, s.msgID)
	}
}

// newTarget establishes a PDC on a SYN, or returns the NACK code that
// refuses it.
func (ep *Endpoint) newTarget(now time.Duration, key targetKey, r *uet.Request) (*target, uet.NackCode) {
	if ep.pdcCount() >= ep.cfg.MaxPDCs {
		ep.ctr.PDCRefused++
		return nil, uet.NackNoPDCAvail
	}
	c := ep.rxCCCOf(now, key.Src)
	if c == nil {
		return nil, uet.NackNoCCCAvail
	}
	id, ok := ep.allocID()
	if !ok {
		ep.ctr.PDCRefused++
		return nil, uet.NackNoPDCAvail
	}
	c.pdcs++
	t := &target{ep: ep, key: key, id: id, start: r.StartPSN(), ccc: c, lastActive: now, msgs: make(map[uint16]*rxMsg)}
	ep.targets[key] = t
	ep.targetsByID[id] = t
	ep.ctr.TargetPDCsOpened++
	ep.wakeHousekeeping()
	return t, 0
}

// freeTarget forgets t; its CCC goes with its last PDC.
func (ep *Endpoint) freeTarget(t *target) {
	delete(ep.targets, t.key)
	delete(ep.targetsByID, t.id)
	ep.ctr.TargetPDCsClosed++
	if t.ccc.last == t {
		t.ccc.last = nil
	}
	if t.ccc.pdcs--; t.ccc.pdcs == 0 {
		ep.freeRxCCC(t.ccc)
	}
}

// rxCCCOf returns the receiver CCC of the source src, creating it if
// there is none; nil when the limit of CCCs is reached.
func (ep *Endpoint) rxCCCOf(now time.Duration, src netip.Addr) *rxCCC {
	ck := CCCKey{Src: src, Dst: ep.local.Addr(), TC: ep.cfg.DSCP}
	c := ep.rxcccs[ck]
	if c == nil {
		if ep.cccCount() >= ep.cfg.MaxCCCs {
			ep.ctr.CCCRefused++
			return nil
		}
		c = &rxCCC{key: ck}
		ep.rxcccs[ck] = c
		ep.ctr.RxCCCsCreated++
		ep.wakeHousekeeping() // it frees the CCC if no PDC follows
	}
	c.lastActive = now
	return c
}

// freeRxCCC forgets c, and its source at the pacer: the sender's CCC is
// gone or going, and a new one counts its credit from 0.
func (ep *Endpoint) freeRxCCC(c *rxCCC) {
	delete(ep.rxcccs, c.key)
	ep.ctr.RxCCCsFreed++
	if c.credit {
		ep.pacer.Remove(c.key)
	}
}

// sendAck writes the ACK_CC t owes: cumulative PSN, the PSN it answers,
// a SACK bitmap of the 64 PSNs after the first missing one, and NSCC's
// cc_state (service time, rcvd_bytes, ooo_count).
func (ep *Endpoint) sendAck(now time.Duration, t *target, out *engine.Replies, req uet.AckReq) {
	t.ackOwed = false
	p := out.Next()
	if p == nil {
		return
	}
	cackPSN := t.psn(t.cack) - 1
	var bm uint64
	for i := uint64(0); i < 64 && t.cack+1+i < t.hi; i++ {
		if t.rcvd[(t.cack+1+i)%maxPDCWindow] {
			bm |= 1 << i
		}
	}
	h := uet.Header{Type: uet.TypeAckCC, Ack: uet.Ack{
		Type:         uet.TypeAckCC,
		M:            t.ackCE,
		Req:          req,
		AckPSNOffset: t.ackPSNOffset(),
		CACKPSN:      cackPSN,
		SPDCID:       t.id,
		DPDCID:       t.key.SPDCID,
		CC: uet.AckCC{
			CCType:        uet.CCNSCC,
			MPR:           uint8(min(maxPDCWindow, 255)),
			SACKPSNOffset: 2, // the bitmap starts after the first missing PSN
			SACKBitmap:    bm,
			NSCC: uet.NSCCState{
				ServiceTime: uet.ServiceTimeOf(max(ep.clock.Now()-t.ackArrival, 0)),
				RcvdBytes:   uet.RcvdBytesOf(t.rcvdBytes),
				OOOCount:    uint16(min(t.held, 0xFFFF)),
			},
		},
	}}
	if c := t.ccc; c != nil && c.credit {
		// RCCC: the ACK_CC repeats the cumulative credit when it moved
		// since the last ACK_CC that carried it and the source is out of
		// the pacer's round robin (its last grant: a lost CTRL CREDIT is
		// repaired by the next one while grants go on); NSCC's cc_state
		// otherwise (rccc's doc, "Wiring in a PDS").
		if g, ok := ep.pacer.Granted(c.key); ok && (!c.ackCreditSet || g != c.ackCredit) {
			if st, _ := ep.pacer.Source(c.key); st.State != rccc.SourceActive {
				h.Ack.CC.CCType = uet.CCCredit
				h.Ack.CC.NSCC = uet.NSCCState{}
				h.Ack.CC.Credit = uet.CreditState{Credit: g, OOOCount: uint16(min(t.held, 0xFFFF))}
				c.ackCredit, c.ackCreditSet = g, true
				ep.ctr.CreditAcksSent++
			}
		}
	}
	p.N = h.Encode(p.Buf)
	p.TOS = ep.ctrlTOS
	p.Addr = netip.AddrPortFrom(t.key.Src, ep.port)
	p.SrcPort = t.ackEV
	t.ackCE = false
	t.bytesSinceAck = 0
	ep.ctr.AcksSent++
	ep.ctr.TxPackets++
	ep.ctr.TxBytes += uint64(p.N)
}

// sendNack answers the packet m with a NACK.
func (ep *Endpoint) sendNack(out *engine.Replies, m *pktio.Message, code uet.NackCode, psn uint32, spdcid, dpdcid uint16, maxPlus1 uint32) {
	ep.nacksTx[code]++
	p := out.Next()
	if p == nil {
		return
	}
	h := uet.Header{Type: uet.TypeNack, Nack: uet.Nack{
		M: m.TOS&ecnMask == ecnCE && !ep.cfg.NoECNEcho, Code: code, NackPSN: psn, SPDCID: spdcid, DPDCID: dpdcid, MaxRecvPSNPlus1: maxPlus1,
	}}
	p.N = h.Encode(p.Buf)
	p.TOS = ep.ctrlTOS
	p.Addr = netip.AddrPortFrom(m.Addr.Addr(), ep.port)
	p.SrcPort = m.Addr.Port()
	ep.ctr.TxPackets++
	ep.ctr.TxBytes += uint64(p.N)
}

// onClose is a CLOSE_CMD: the target frees the PDC and answers with an
// ACK whose req is CLOSE (also for a PDC it no longer knows: the source
// may have missed the first answer).
func (ep *Endpoint) onClose(now time.Duration, m *pktio.Message, c *uet.Ctrl, out *engine.Replies) {
	key := targetKey{Src: m.Addr.Addr(), SPDCID: c.SPDCID}
	t := ep.targets[key]
	ep.ctr.ClosesReceived++
	if t == nil {
		t = &target{ep: ep, key: key, start: c.PSN, cack: 0, hi: 0}
		t.ackIdx, t.ackEV = 0, m.Addr.Port()
		ep.sendAck(now, t, out, uet.AckReqClose)
		return
	}
	t.ackEV, t.ackArrival = m.Addr.Port(), now
	if t.ackOwed {
		// The owed ACK goes with this one.
		ep.dropOwed(t)
	}
	ep.sendAck(now, t, out, uet.AckReqClose)
	ep.freeTarget(t)
}

func (ep *Endpoint) dropOwed(t *target) {
	for i, o := range ep.owed {
		if o == t {
			ep.owed = append(ep.owed[:i], ep.owed[i+1:]...)
			break
		}
	}
	t.ackOwed = false
}

// onProbe is a CTRL ACK_REQ: the target answers with its ACK, and with
// NACK PKT_NOT_RCVD if the PSN asked about never arrived (the probe came
// behind it on its path, so it is lost).
func (ep *Endpoint) onProbe(now time.Duration, m *pktio.Message, c *uet.Ctrl, out *engine.Replies) {
	ep.ctr.ProbesReceived++
	t := ep.targets[targetKey{Src: m.Addr.Addr(), SPDCID: c.SPDCID}]
	if t == nil || c.DPDCID != t.id {
		ep.ctr.UnknownPDC++
		ep.sendNack(out, m, uet.NackInvDPDCID, c.PSN, 0, c.SPDCID, 0)
		return
	}
	t.lastActive = now
	t.ackEV, t.ackArrival = m.Addr.Port(), now
	if t.ackOwed {
		ep.dropOwed(t)
	}
	off := int64(int32(c.PSN - t.psn(t.cack)))
	// Below the cumulative PSN it arrived, unless it is before the PDC's
	// first PSN: never sent.
	got := off < 0 && -off <= int64(t.cack) ||
		off >= 0 && off < maxPDCWindow && t.rcvd[(t.cack+uint64(off))%maxPDCWindow]
	if got {
		t.ackIdx = t.cack + uint64(off)
	} else {
		t.ackIdx = t.cack - 1
	}
	ep.sendAck(now, t, out, uet.AckReqNone)
	if !got {
		ep.sendNack(out, m, uet.NackPktNotRcvd, c.PSN, t.id, c.SPDCID, t.psn(t.hi))
	}
}
