package pds

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pattern"
	"github.com/fabriclab/fabriclab/host/uet"
)

// Mode is a PDC's delivery mode. This endpoint runs RUD (reliable,
// unordered delivery).
type Mode uint8

// Delivery modes.
const (
	ModeRUD Mode = iota + 1
)

func (m Mode) String() string {
	if m == ModeRUD {
		return "RUD"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// PDCKey is what the PDS Manager looks a PDC up by (seed 004): {JobID,
// destination FEP, traffic class, delivery mode}.
type PDCKey struct {
	JobID uint32
	Dst   netip.Addr
	TC    uint8
	Mode  Mode
}

// dupThresh is the number of packets acknowledged beyond an
// unacknowledged one, all sent after it, that makes it lost (TCP's
// duplicate-ACK threshold; UET's SACK inference).
const dupThresh = 3

// maxCloseTries bounds the CLOSE_CMDs an initiator sends before it frees
// the PDC without an answer.
const maxCloseTries = 3

// txRec is one PSN of an initiator PDC.
type txRec struct {
	sentAt time.Duration
	msg    *txMsg
	off    uint32 // offset in the message
	n      uint16 // payload bytes
	size   int32  // IP packet bytes in flight
	retx   uint8
	ev     uint16 // the entropy value it last went with
	acked  bool
	lost   bool // taken as lost: out of flight, waiting in retxQ
}

// txMsg is one message in flight on a PDC.
type txMsg struct {
	s       *Sender
	id      uint16 // SES message_id
	size    int
	unacked int // payload bytes not yet acknowledged
}

// initiator is a PDC at its source: PSNs, the packets in flight, the
// retransmissions waiting, the messages of its Senders. Guarded by the
// endpoint's mu.
type initiator struct {
	ep          *Endpoint
	key         PDCKey
	id          uint16 // spdcid
	peerID      uint16 // dpdcid, once established
	established bool
	ccc         *ccc
	ev          uint16      // entropy value (the UDP source port) without a balancer
	lb          lb.Balancer // the EV of each packet, if set
	fbIdx       uint64      // the packet whose ACK feedback went to lb (fbSet)
	fbSet       bool

	start     uint32 // PSN of index 0
	base, nxt uint64 // oldest unacknowledged index, next new index
	hiAcked   uint64 // highest acknowledged index + 1
	ring      []txRec
	retxQ     []uint64

	lastProgress time.Duration // last new acknowledgement, or first send after none was outstanding
	lastProbe    time.Duration // last CTRL ACK_REQ
	srtt         time.Duration // smoothed RTT (RFC 6298's 1/8 gain), 0 before a sample
	holdUntil    time.Duration // after a refusal: send nothing before
	retries      int
	lastActive   time.Duration

	senders []*Sender
	rr      int
	cur     *txMsg
	curOff  int
	msgSeq  uint16

	closing    bool
	closeAt    time.Duration // last CLOSE_CMD
	closeTries int
	closed     bool
	err        error
}

func (p *initiator) rec(idx uint64) *txRec { return &p.ring[idx%maxPDCWindow] }

func (p *initiator) psn(idx uint64) uint32 { return p.start + uint32(idx) }

// idxOf maps a PSN near the PDC's window to its index; ok is false for one
// outside [base-maxPDCWindow, nxt].
func (p *initiator) idxOf(psn uint32) (idx uint64, ok bool) {
	d := int64(int32(psn - p.psn(p.base)))
	i := int64(p.base) + d
	if i < 0 || i > int64(p.nxt) || d < -maxPDCWindow {
		return 0, false
	}
	return uint64(i), true
}

// seed is the payload pattern's seed of this PDC's messages: what the
// target knows of the source (its JobID and PDC ID).
func seed(jobID uint32, spdcid uint16) uint32 { return jobID<<16 ^ uint32(spdcid) }

// hasNewData reports whether a Sender has a message not yet packetized.
func (p *initiator) hasNewData() bool {
	if p.closed || p.err != nil {
		return false
	}
	if p.cur != nil {
		return true
	}
	for _, s := range p.senders {
		if s.wantsMore() {
			return true
		}
	}
	return false
}

// canSendNew reports whether the PSN window takes a new packet: at most
// maxPDCWindow outstanding, and before the PDC is established no more
// PSNs than the SYN form's psn_offset reaches.
func (p *initiator) canSendNew() bool {
	if p.nxt-p.base >= maxPDCWindow-1 {
		return false
	}
	return p.established || p.nxt < maxSynPackets
}

// ready reports whether the PDC has a packet to send now (window aside).
func (p *initiator) ready(now time.Duration) bool {
	if p.closed || p.err != nil || now < p.holdUntil {
		return false
	}
	return p.firstRetx() || (p.canSendNew() && p.hasNewData())
}

// firstRetx drops the acknowledged heads of retxQ and reports whether a
// retransmission waits.
func (p *initiator) firstRetx() bool {
	for len(p.retxQ) > 0 {
		idx := p.retxQ[0]
		if idx >= p.base && !p.rec(idx).acked {
			return true
		}
		p.retxQ = p.retxQ[1:]
	}
	return false
}

// nextMessage picks the next message to packetize, round robin over the
// Senders.
func (p *initiator) nextMessage() *txMsg {
	for range p.senders {
		s := p.senders[p.rr%len(p.senders)]
		p.rr++
		if s.wantsMore() {
			s.queued++
			p.msgSeq++
			return &txMsg{s: s, id: p.msgSeq, size: s.s.MessageBytes, unacked: s.s.MessageBytes}
		}
	}
	return nil
}

// payloadMax is the payload bytes of a full packet.
func (ep *Endpoint) payloadMax() int { return ep.cfg.MTU - ipv4UDPLen - ep.reqLen - sesLen }

// packetOverhead is the wire bytes of a data packet besides its payload.
func (ep *Endpoint) packetOverhead() int { return ethernetLen + ipv4UDPLen + ep.reqLen + sesLen }

// fill writes the PDC's next packet into pkt: a retransmission first, else
// new data. It returns the IP packet bytes charged to the window (0:
// nothing).
func (p *initiator) fill(now time.Duration, pkt *engine.Packet) int {
	ep := p.ep
	var idx uint64
	retx := false
	if p.firstRetx() {
		idx = p.retxQ[0]
		p.retxQ = p.retxQ[1:]
		retx = true
	} else {
		if !p.canSendNew() {
			return 0
		}
		if p.cur == nil {
			if p.cur = p.nextMessage(); p.cur == nil {
				return 0
			}
			p.curOff = 0
		}
		idx = p.nxt
		n := min(ep.payloadMax(), p.cur.size-p.curOff)
		*p.rec(idx) = txRec{msg: p.cur, off: uint32(p.curOff), n: uint16(n)}
		p.curOff += n
		if p.curOff >= p.cur.size {
			p.cur = nil
		}
		p.nxt++
	}
	r := p.rec(idx)
	size := p.build(now, idx, r, retx, pkt)
	if retx {
		r.retx++
		r.lost = false
		ep.ctr.Retransmits++
	}
	if p.base == p.nxt-1 && !retx || p.outstanding() == 1 {
		p.lastProgress = now // the timer starts with the first unacknowledged packet
	}
	r.sentAt = now
	r.size = int32(size)
	p.lastActive = now
	return size
}

// outstanding counts packets sent and not acknowledged (lost ones too).
func (p *initiator) outstanding() uint64 { return p.nxt - p.base }

// build encodes PSN idx into pkt and returns its IP packet bytes (what
// the window counts).
func (p *initiator) build(now time.Duration, idx uint64, r *txRec, retx bool, pkt *engine.Packet) int {
	ep := p.ep
	m := r.msg
	eom := int(r.off)+int(r.n) >= m.size
	typ := uet.TypeRUDReq
	if p.ccc.credit != nil {
		typ = uet.TypeRUDCCReq
	}
	h := uet.Header{Type: typ, Request: uet.Request{
		Type:       typ,
		NextHeader: uet.NextHeaderReqStd,
		Retx:       retx,
		AR:         eom || retx,
		SYN:        !p.established,
		PSN:        p.psn(idx),
		SPDCID:     p.id,
	}}
	// Everything before base is acknowledged: the target may clear it.
	clear := int64(p.base) - 1 - int64(idx)
	h.Request.ClearPSNOffset = int16(max(clear, -1<<15))
	if p.established {
		h.Request.DPDCID = p.peerID
	} else {
		h.Request.PSNOffset = uint16(idx) // idx < maxSynPackets
	}
	if c := p.ccc; c.credit != nil {
		// RCCC: spend the packet's wire bytes, then ask for what the
		// CCC lacks after it (rccc's doc, "Wiring in a PDS").
		c.credit.OnTransmit(now, ipBytes(uet.RequestCCLen+sesLen+int(r.n))+ethernetLen)
		h.Request.CCCID = c.cccID()
		h.Request.CreditTarget = uet.Credit(c.credit.Target(c.demand()))
		c.creditAt = now
	}
	ses := sesHeader{jobID: p.key.JobID, msgID: m.id, offset: r.off, n: int(r.n), length: uint32(m.size), som: r.off == 0, eom: eom}
	b := pkt.Buf
	hn := h.Encode(b)
	sn := ses.encode(b[hn:])
	pay := b[hn+sn : hn+sn+int(r.n)]
	if m.s.s.Verify {
		pattern.Fill(pay, seed(p.key.JobID, p.id), uint64(m.id), int(r.off))
	}
	pkt.N = hn + sn + int(r.n)
	pkt.TOS = ep.dataTOS
	pkt.Addr = netip.AddrPortFrom(p.key.Dst, ep.port)
	r.ev = p.ev
	if p.lb != nil {
		r.ev = p.lb.Next(now) // every packet, retransmissions too (htsim)
	}
	pkt.SrcPort = r.ev
	ep.ctr.TxPackets++
	ep.ctr.TxBytes += uint64(pkt.N)
	return ipBytes(pkt.N)
}

// backlogBytes is what the PDC has waiting, in wire bytes (IP packet and
// Ethernet header per packet): new data (capped at maxBacklog; a stream
// without end has that) and retransmissions.
func (p *initiator) backlogBytes() (newBytes, retxBytes int) {
	ep := p.ep
	payload := 0
	if p.hasNewData() {
		if p.cur != nil {
			payload = p.cur.size - p.curOff
		}
		for _, s := range p.senders {
			switch {
			case !s.wantsMore():
			case s.s.Messages == 0:
				payload = maxBacklog
			default:
				payload += int(min(s.s.Messages-s.queued, maxBacklog)) * s.s.MessageBytes
			}
			if payload >= maxBacklog {
				payload = maxBacklog
				break
			}
		}
	}
	if payload > 0 {
		pm := ep.payloadMax()
		pkts := (payload + pm - 1) / pm
		newBytes = min(payload+pkts*(ep.packetOverhead()), maxBacklog)
	}
	for _, idx := range p.retxQ {
		if r := p.rec(idx); idx >= p.base && !r.acked {
			retxBytes += int(r.size) + ethernetLen
		}
	}
	return newBytes, retxBytes
}

// ack takes index idx as acknowledged and returns its bytes (0 if it was
// already).
func (p *initiator) ack(now time.Duration, idx uint64) int {
	r := p.rec(idx)
	if r.acked {
		return 0
	}
	r.acked = true
	if p.lb != nil && !(p.fbSet && idx == p.fbIdx) && r.sentAt > 0 {
		// The others this ACK covers came back clean: the target ACKs at
		// once on CE, so a CE-marked packet triggers its own ACK. (htsim
		// hears one EV per ACK; with 4 packets per ACK REPS then finds
		// too few clean EVs to recycle.)
		p.lb.Feedback(now, r.ev, lb.PathGood)
	}
	if !r.lost {
		p.ccc.inFlight -= int(r.size)
	}
	m := r.msg
	m.unacked -= int(r.n)
	s := m.s
	s.ackedBytes += uint64(r.n)
	if m.unacked == 0 {
		s.messageAcked()
	}
	return int(r.size)
}

// markLost takes a packet out of flight and queues its retransmission.
func (p *initiator) markLost(idx uint64) (size int, ok bool) {
	r := p.rec(idx)
	if r.acked || r.lost || idx < p.base || idx >= p.nxt {
		return 0, false
	}
	r.lost = true
	p.ccc.inFlight -= int(r.size)
	p.retxQ = append(p.retxQ, idx)
	return int(r.size), true
}

// onAck is an ACK or ACK_CC for this PDC, from its destination.
func (p *initiator) onAck(now time.Duration, a *uet.Ack) {
	ep := p.ep
	if !p.established {
		p.established = true
		p.peerID = a.SPDCID
	}
	cack, ok := p.idxOf(a.CACKPSN + 1) // the first PSN not cumulatively acknowledged
	if !ok {
		ep.ctr.InvalidAckPSN++
		return
	}
	// The RTT sample first, before the ring moves: the packet the ACK
	// answers, if it went once (a retransmission's sample is ambiguous).
	var sample struct {
		rtt time.Duration
		ok  bool
	}
	if ai, ok := p.idxOf(a.AckPSN()); ok && ai < p.nxt && ai+maxPDCWindow > p.nxt {
		if r := p.rec(ai); p.lb != nil && !r.acked && r.sentAt > 0 {
			// The path the packet that triggered the ACK took (htsim
			// processEv): clean, or CE-marked on the way (M).
			p.lb.Feedback(now, r.ev, lb.AckFeedback(a.M))
			p.fbIdx, p.fbSet = ai, true
		}
		if r := p.rec(ai); r.retx == 0 && !r.acked && r.sentAt > 0 {
			st := time.Duration(0)
			if a.Type == uet.TypeAckCC && a.CC.CCType == uet.CCNSCC {
				st = a.CC.NSCC.ServiceTime.Duration()
			}
			sample.rtt, sample.ok = max(now-r.sentAt-st, 0), true
			if p.srtt == 0 {
				p.srtt = sample.rtt
			} else {
				p.srtt += (sample.rtt - p.srtt) / 8
			}
		}
	}
	newly := 0
	// The last sent of the newly acknowledged packets (send time, then
	// PSN): a packet sent before it and still unacknowledged is overtaken.
	var hiSent time.Duration
	var hiIdx uint64
	later := func(idx uint64, r *txRec) {
		if r.sentAt > hiSent || r.sentAt == hiSent && idx > hiIdx {
			hiSent, hiIdx = r.sentAt, idx
		}
	}
	for ; p.base < cack; p.base++ {
		r := p.rec(p.base)
		if !r.acked {
			later(p.base, r)
		}
		newly += p.ack(now, p.base)
	}
	p.hiAcked = max(p.hiAcked, p.base)
	if a.Type == uet.TypeAckCC {
		if sb, ok := p.idxOf(a.SACKBase()); ok {
			bm := a.CC.SACKBitmap
			for i := uint64(0); bm != 0 && i < 64; i++ {
				if bm&1 != 0 {
					if idx := sb + i; idx >= p.base && idx < p.nxt {
						if r := p.rec(idx); !r.acked {
							later(idx, r)
							newly += p.ack(now, idx)
						}
						p.hiAcked = max(p.hiAcked, idx+1)
					}
				}
				bm >>= 1
			}
		}
	}
	// SACK loss inference: a packet with dupThresh packets acknowledged
	// beyond it, sent after it, is lost (inferred loss, uet.md NSCC).
	lost := 0
	if p.hiAcked >= dupThresh {
		for idx := p.base; idx+dupThresh < p.hiAcked+1 && idx < p.base+64; idx++ {
			if r := p.rec(idx); !r.acked && !r.lost && (r.sentAt < hiSent || r.sentAt == hiSent && idx < hiIdx) {
				if sz, ok := p.markLost(idx); ok {
					lost++
					ep.ctr.InferredLosses++
					p.ccc.wnd.OnLoss(now, sz)
				}
			}
		}
	}
	if newly > 0 {
		p.lastProgress = now
		p.retries = 0
		p.lastActive = now
	}
	p.fbSet = false
	ep.ctr.AcksReceived++
	if a.M {
		ep.ctr.ECNEchoes++
	}
	s := ackSample{newly: newly, rtt: sample.rtt, rttOK: sample.ok, ecn: a.M, inFlight: p.ccc.inFlight}
	if a.Type == uet.TypeAckCC {
		switch a.CC.CCType {
		case uet.CCNSCC:
			s.nsccCC, s.pend, s.rc = true, a.CC.NSCC.RcvCwndPend, a.CC.NSCC.RC
		case uet.CCCredit:
			s.creditOK, s.credit = true, a.CC.Credit.Credit
		}
	}
	p.ccc.onAck(now, s)
	if a.Req == uet.AckReqClose && p.closing {
		p.free(now)
	}
}

// onNack is a NACK for this PDC.
func (p *initiator) onNack(now time.Duration, n *uet.Nack) {
	ep := p.ep
	ep.nacksRx[n.Code]++
	if p.ccc.credit != nil {
		p.ccc.credit.OnNack(now) // the first answer ends speculation
	}
	switch n.Code {
	case uet.NackNoPDCAvail, uet.NackNoCCCAvail, uet.NackInvDPDCID:
		// The destination refused the PDC or no longer knows it: start
		// over with a SYN after a timeout.
		p.established = false
		for idx := p.base; idx < p.nxt; idx++ {
			p.markLost(idx)
		}
		p.holdUntil = now + ep.cfg.RTO
		p.retries++
		if p.retries > ep.cfg.MaxRetries {
			p.fail(now, fmt.Errorf("pds: pdc %d to %v: %d refusals in a row, last %v", p.id, p.key.Dst, p.retries, n.Code))
		}
		ep.kick()
		return
	}
	idx, ok := p.idxOf(n.NackPSN)
	if !ok || idx >= p.nxt {
		ep.ctr.InvalidAckPSN++
		return
	}
	r := p.rec(idx)
	ns := nscc.NackSample{Size: int(r.size), Reason: nscc.NackOther, InFlight: p.ccc.inFlight}
	switch n.Code {
	case uet.NackTrimmed:
		ns.Reason = nscc.NackTrimmed
	case uet.NackTrimmedLastHop:
		ns.Reason = nscc.NackTrimmedLastHop
	}
	if r.retx == 0 && r.sentAt > 0 {
		ns.RTT, ns.RTTValid = now-r.sentAt, true
	}
	if p.lb != nil && r.sentAt > 0 {
		switch n.Code {
		case uet.NackTrimmed:
			p.lb.Feedback(now, r.ev, lb.PathNack) // cut in the fabric: the path is congested
		case uet.NackTrimmedLastHop:
			p.lb.Feedback(now, r.ev, lb.AckFeedback(n.M)) // cut at the receiver's port: the path was fine
		}
	}
	if sz, ok := p.markLost(idx); ok {
		ns.InFlight = p.ccc.inFlight
		if n.Code == uet.NackPktNotRcvd {
			// The answer to a probe: the packet was lost (inferred loss).
			ep.ctr.InferredLosses++
			p.ccc.wnd.OnLoss(now, sz)
			p.ccc.update(now)
		} else {
			p.ccc.onNack(now, ns)
		}
	}
	ep.kick()
}

// timers runs the RTO and the close; it returns when they next need the
// loop.
func (p *initiator) timers(now time.Duration, out []engine.Packet) (n int, next time.Duration) {
	ep := p.ep
	next = engine.Never
	if p.closed || p.err != nil {
		return 0, next
	}
	if p.base < p.nxt {
		deadline := p.lastProgress + ep.cfg.RTO
		if now >= deadline {
			p.retries++
			ep.ctr.Timeouts++
			if p.lb != nil {
				p.lb.Feedback(now, p.rec(p.base).ev, lb.PathTimeout)
			}
			if p.retries > ep.cfg.MaxRetries {
				p.fail(now, fmt.Errorf("pds: pdc %d to %v: %d timeouts of %v in a row at psn %#x", p.id, p.key.Dst, p.retries, ep.cfg.RTO, p.psn(p.base)))
				return 0, next
			}
			for idx := p.base; idx < p.nxt; idx++ {
				if sz, ok := p.markLost(idx); ok {
					p.ccc.wnd.OnLoss(now, sz)
				}
			}
			p.lastProgress = now
			deadline = now + ep.cfg.RTO
		}
		next = min(next, deadline)
		// The probe: no ACK for the probe timeout with packets in flight.
		if oldest, ok := p.oldestInFlight(); ok && p.established {
			pto := p.probeTimeout()
			due := max(p.lastProgress, p.lastProbe) + pto
			if now >= due && len(out) > n {
				p.buildProbe(now, oldest, &out[n])
				n++
				due = now + pto
			}
			next = min(next, due)
		}
	}
	if p.closing {
		if now >= p.closeAt+ep.cfg.RTO {
			if p.closeTries >= maxCloseTries || !p.established {
				p.free(now)
				return 0, engine.Never
			}
			if len(out) > 0 {
				p.buildClose(now, &out[0])
				n = 1
			}
		}
		return n, min(next, p.closeAt+ep.cfg.RTO)
	}
	// Idle: nothing to send or acknowledge since lastActive.
	if p.base == p.nxt && !p.hasNewData() && len(p.retxQ) == 0 {
		if now >= p.lastActive+ep.cfg.IdleTimeout {
			p.closing = true
			if !p.established {
				p.free(now)
				return 0, engine.Never
			}
			if len(out) > 0 {
				p.buildClose(now, &out[0])
				n = 1
			}
			return n, p.closeAt + ep.cfg.RTO
		}
		next = min(next, p.lastActive+ep.cfg.IdleTimeout)
	}
	return n, next
}

// probeTimeout is Config.ProbeTimeout, or twice the smoothed RTT when that
// is longer (TCP's tail loss probe, RFC 8985 §7.2): a queue that delays
// every ACK must not turn every round trip into a probe.
func (p *initiator) probeTimeout() time.Duration {
	return max(p.ep.cfg.ProbeTimeout, 2*p.srtt)
}

// oldestInFlight is the first index sent and neither acknowledged nor
// taken as lost.
func (p *initiator) oldestInFlight() (uint64, bool) {
	for idx := p.base; idx < p.nxt; idx++ {
		if r := p.rec(idx); !r.acked && !r.lost {
			return idx, true
		}
	}
	return 0, false
}

// buildProbe writes a CTRL ACK_REQ for index idx, on the data's class and
// entropy value: behind the data on its path.
func (p *initiator) buildProbe(now time.Duration, idx uint64, pkt *engine.Packet) {
	ep := p.ep
	h := uet.Header{Type: uet.TypeCtrl, Ctrl: uet.Ctrl{
		CtrlType: uet.CtrlAckReq, AR: true, PSN: p.psn(idx), SPDCID: p.id, DPDCID: p.peerID,
	}}
	pkt.N = h.Encode(pkt.Buf)
	pkt.TOS = ep.dataTOS
	pkt.Addr = netip.AddrPortFrom(p.key.Dst, ep.port)
	pkt.SrcPort = p.rec(idx).ev // behind the packet on its path
	p.lastProbe = now
	ep.ctr.ProbesSent++
	ep.ctr.TxPackets++
	ep.ctr.TxBytes += uint64(pkt.N)
}

// buildClose writes a CLOSE_CMD (with an ACK request) to the target.
func (p *initiator) buildClose(now time.Duration, pkt *engine.Packet) {
	ep := p.ep
	h := uet.Header{Type: uet.TypeCtrl, Ctrl: uet.Ctrl{
		CtrlType: uet.CtrlCloseCmd, AR: true, PSN: p.psn(p.nxt), SPDCID: p.id, DPDCID: p.peerID,
	}}
	pkt.N = h.Encode(pkt.Buf)
	pkt.TOS = ep.dataTOS
	pkt.Addr = netip.AddrPortFrom(p.key.Dst, ep.port)
	pkt.SrcPort = p.ev
	p.closeAt = now
	p.closeTries++
	ep.ctr.ClosesSent++
	ep.ctr.TxPackets++
	ep.ctr.TxBytes += uint64(pkt.N)
}

// fail puts the PDC and its Senders in error and frees it.
func (p *initiator) fail(now time.Duration, err error) {
	p.err = err
	p.ep.ctr.PDCErrors++
	for _, s := range p.senders {
		s.finish(err)
	}
	p.free(now)
}

// free forgets the PDC; its CCC is freed once idle and unused.
func (p *initiator) free(now time.Duration) {
	if p.closed {
		return
	}
	p.closed = true
	ep := p.ep
	for idx := p.base; idx < p.nxt; idx++ {
		if r := p.rec(idx); !r.acked && !r.lost {
			p.ccc.inFlight -= int(r.size)
		}
	}
	for _, s := range p.senders {
		s.finish(fmt.Errorf("pds: pdc %d to %v closed", p.id, p.key.Dst))
	}
	delete(ep.initiators, p.id)
	if ep.byKey[p.key] == p {
		delete(ep.byKey, p.key)
	}
	c := p.ccc
	for i, q := range c.pdcs {
		if q == p {
			c.pdcs = append(c.pdcs[:i], c.pdcs[i+1:]...)
			break
		}
	}
	ep.ctr.PDCsClosed++
	c.update(now)
	ep.cccs.release(now, c)
}
