package agent

import (
	"fmt"
	"github.com/fabriclab/fabriclab/host/pattern"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/roce"
)

// never is a deadline that does not come.
const never = engine.Never

// txPacket is one slot of a batch the engine sends.
type txPacket = engine.Packet

// fillLocked writes what the QP may send now into out: a due CNP, then data
// paced at Rc (or RateCap) and by the port's bucket (nil: no port limit),
// within the window, unless a PPFC stop paused the requester. It returns
// the packets written and when the QP next needs the transmit loop.
// Precondition: qp.mu is held.
func (qp *QP) fillLocked(now time.Duration, out []txPacket, port *engine.PortLimit) (n int, next time.Duration) {
	next = never
	if !qp.mu.connected || qp.mu.destroyed {
		return 0, next
	}
	// Notification point: a CNP held back by min_time_between_cnps.
	if np := qp.mu.resp.np; np != nil {
		if len(out) > 0 && np.Poll(now) {
			out[0].N = qp.buildCNPLocked(out[0].Buf)
			out[0].TOS = qp.cnpTOS
			n++
		}
		if due, ok := np.Next(); ok {
			next = min(next, due)
		}
	}
	r := &qp.mu.req
	// PPFC: a paused requester sends nothing, retransmissions included,
	// and its ACK timeout stands still (endPauseLocked). The kernel's
	// notifications first: they may pause it.
	qp.syncKernelPPFCLocked()
	if qp.ppfcPausedLocked(now) {
		return n, min(next, r.pausedUntil)
	}
	if !r.active || qp.mu.err != nil {
		return n, next
	}
	// Retransmission timeout: go back to the oldest unacknowledged packet.
	if r.una < r.max {
		// The responder owes an ACK only for a packet sent with AckReq.
		// While none is outstanding, the rest of a message waits for this
		// QP's turn at a port it shares (with thousands of QPs on a slow
		// lab port, a turn can come seconds apart): the QP waits on
		// itself, not on the fabric, and nothing is late.
		if r.ackReqSent <= r.una {
			r.lastProgress = max(r.lastProgress, now)
		}
		if now >= r.lastProgress+qp.cfg.AckTimeout {
			qp.mu.ctr.LocalAckTimeoutErr++
			r.retries++
			if r.retries > qp.cfg.RetryCount {
				qp.failLocked(fmt.Errorf("%d ACK timeouts of %v in a row (retry_count %d) at psn %#x",
					r.retries, qp.cfg.AckTimeout, qp.cfg.RetryCount, qp.psn(r.initPSN, r.una)))
				return n, next
			}
			r.nxt = r.una
			r.ackReqSent = r.una
			r.lastProgress = now
			qp.agent.resolveAgain(qp.mu.peer.Addr.Addr())
		}
	}
	var rate float64 // bytes per second; 0 = unpaced
	if r.rp != nil {
		qp.syncKernelCNPsLocked()
		r.rp.Advance(now)
		rate = float64(r.rp.Rc()) / 8
	} else if qp.cfg.RateCap > 0 {
		rate = float64(qp.cfg.RateCap) / 8
	}
	burst := float64(qp.cfg.MaxBurst * qp.wireBytes(qp.cfg.MTU, true))
	if rate > 0 {
		r.pace.Refill(now, rate, burst)
	}
	r.pace.Skip(now)
	portBlocked := false
	window := uint64(qp.cfg.Window)
	if qp.cfg.InflightTime > 0 && rate > 0 {
		// Rc·InflightTime in packets of this path MTU, at least 2.
		pkts := uint64(rate * qp.cfg.InflightTime.Seconds() / float64(qp.wireBytes(qp.cfg.MTU, false)))
		window = min(window, max(pkts, 2))
	}
	r.window = window
	// AckReq every AckReqEvery packets, or more often when that many take
	// over a quarter of the ACK timeout at this rate: a slow QP (Rc near
	// Rmin) would otherwise time out on packets it sent without one.
	r.ackEvery = uint64(qp.cfg.AckReqEvery)
	if rate > 0 {
		pktTime := float64(qp.wireBytes(qp.cfg.MTU, false)) / rate // s
		if k := uint64(qp.cfg.AckTimeout.Seconds() / 4 / pktTime); k < r.ackEvery {
			r.ackEvery = max(k, 1)
		}
	}
	// Paced, a QP sends at most MaxBurst packets back to back; unpaced it
	// fills the batch (fewer, larger sendmmsg calls).
	perPass := qp.cfg.MaxBurst
	if rate == 0 && port == nil {
		perPass = len(out)
	}
	sent := 0
	if port != nil {
		sent = port.TurnSent() // the rest of a turn the port cut short
	}
	for ; n < len(out) && sent < perPass; sent++ {
		if r.nxt >= r.limit {
			break // the stream end
		}
		if !r.windowOpen(window) {
			break // an ACK kicks the loop
		}
		if rate > 0 && !r.pace.Ready() {
			break
		}
		if port != nil && !port.Ready() {
			portBlocked = true
			break
		}
		p := &out[n]
		p.N = qp.buildDataLocked(p.Buf, r.nxt)
		p.TOS = qp.dataTOS
		wire := p.N + 14 + 8 + 20
		if qp.mu.local.Addr().Is6() {
			wire += 20
		}
		if rate > 0 {
			r.pace.Spend(wire)
		}
		if port != nil {
			port.Spend(wire)
		}
		if r.rp != nil {
			r.rp.OnTransmit(now, wire)
		}
		if r.nxt < r.max {
			qp.mu.ctr.RetransmitPackets++
		}
		if r.una == r.nxt && r.una == r.max {
			r.lastProgress = now // the timer starts with the first unacknowledged packet
		}
		r.nxt++
		r.max = max(r.max, r.nxt)
		qp.mu.ctr.TxPackets++
		qp.mu.ctr.TxBytes += uint64(p.N)
		n++
	}
	// The ACK timeout runs while an ACK is owed. While none is, the QP
	// has more to send and is in the engine's hands (its pacer's
	// deadline, the port's queue, or now: windowOpen lets a packet go
	// then): a timer of its own would only wake it to push the deadline
	// on, every AckTimeout while it waits for its turn (issue 28: 10,000
	// QPs sharing a port wait a second and more for theirs).
	if r.una < r.max && r.ackReqSent > r.una {
		next = min(next, r.lastProgress+qp.cfg.AckTimeout)
	}
	if r.nxt < r.limit && r.windowOpen(window) {
		switch {
		case rate > 0 && !r.pace.Ready():
			next = min(next, r.pace.Wait(now, rate, burst))
			if r.rp != nil {
				// An increase step may raise Rc before then (at Rmin a
				// burst can take seconds).
				next = min(next, max(r.rp.NextEvent(), now+1))
			}
		case portBlocked:
			// The engine asks again when the port has credit and the
			// QP's turn comes (engine.PortLimit.Ready).
		default:
			next = now // more to send right away
		}
	}
	return n, next
}

// windowOpen reports whether the window lets another packet go. A full
// window waits for an ACK, which comes only for a packet with AckReq; the
// window shrinks with Rc, so it can fill up with packets sent without one
// (after a go-back-N too, when the AckReq packets sent before it are owed
// nothing): then one more goes, asking.
func (r *requester) windowOpen(window uint64) bool {
	return r.nxt-r.una < window || (r.ackReqSent <= r.una && r.nxt > r.una)
}

// buildDataLocked writes packet idx of the stream into b: opcode by its
// place in the message (IBTA 9.5: FIRST/MIDDLE/LAST or ONLY), RETH on a
// WRITE's first packet, AckReq on a message's last packet, every
// AckReqEvery packets and when the window fills.
// Precondition: qp.mu is held.
func (qp *QP) buildDataLocked(b []byte, idx uint64) int {
	r := &qp.mu.req
	s := &r.stream
	mtu := qp.cfg.MTU
	msg, k := idx/r.ppm, idx%r.ppm
	off := int(k) * mtu
	plen := min(mtu, s.MessageBytes-off)
	last := k == r.ppm-1

	var h roce.Header
	h.BTH.PKey = qp.pkey()
	h.BTH.DestQP = qp.mu.peer.QPN
	h.BTH.PSN = qp.psn(r.initPSN, idx)
	h.BTH.AckReq = last || (idx+1)%r.ackEvery == 0 ||
		idx+1-r.una >= r.window || idx+1 == r.limit
	if h.BTH.AckReq {
		r.ackReqSent = max(r.ackReqSent, idx+1)
	}
	write := s.Op == OpWrite
	switch {
	case r.ppm == 1 && write:
		h.BTH.Opcode = roce.OpRCWriteOnly
	case r.ppm == 1:
		h.BTH.Opcode = roce.OpRCSendOnly
	case k == 0 && write:
		h.BTH.Opcode = roce.OpRCWriteFirst
	case k == 0:
		h.BTH.Opcode = roce.OpRCSendFirst
	case last && write:
		h.BTH.Opcode = roce.OpRCWriteLast
	case last:
		h.BTH.Opcode = roce.OpRCSendLast
	case write:
		h.BTH.Opcode = roce.OpRCWriteMiddle
	default:
		h.BTH.Opcode = roce.OpRCSendMiddle
	}
	if h.BTH.Opcode.HasRETH() {
		h.RETH.VA = qp.mu.peer.VA + (msg%r.slots)*uint64(s.MessageBytes)
		h.RETH.RKey = qp.mu.peer.RKey
		h.RETH.DMALen = uint32(s.MessageBytes)
	}
	hl := h.Len()
	payload := b[hl : hl+plen]
	n := 0
	if s.Verify {
		pattern.Fill(payload, qp.qpn, msg, off)
		n = roce.Build(b, &h, payload) // payload aliases b: Build's copy is in place
		roce.SealICRC(qp.mu.local, qp.mu.peer.Addr, b[:n])
	} else {
		clear(payload)
		n = roce.Build(b, &h, payload)
		roce.SealICRCZeroTail(qp.mu.local, qp.mu.peer.Addr, b[:n], plen+int(roce.PadFor(plen))) // zeros and zero pad
	}
	return n
}

// buildCNPLocked writes a CNP to the peer's QP (Annex A17.9.3).
// Precondition: qp.mu is held.
func (qp *QP) buildCNPLocked(b []byte) int {
	h := roce.CNPHeader(qp.mu.peer.QPN, qp.pkey())
	n := roce.Build(b, &h, nil)
	roce.SealICRC(qp.mu.local, qp.mu.peer.Addr, b[:n])
	qp.mu.ctr.NPCNPSent++
	qp.mu.ctr.TxPackets++
	qp.mu.ctr.TxBytes += uint64(n)
	if t := qp.agent.cfg.Trace; t != nil {
		t(Event{Kind: EventCNPSent, QPN: qp.qpn, At: qp.agent.clock.Now()})
	}
	return n
}

// onAckLocked handles an ACKNOWLEDGE: an ACK moves una, a PSN sequence NAK
// goes back to the PSN it names (go-back-N, IBTA 9.7.5.1.4), other NAKs put
// the QP in error.
// Precondition: qp.mu is held.
func (qp *QP) onAckLocked(now time.Duration, h *roce.Header) {
	r := &qp.mu.req
	if !r.active {
		return
	}
	d := roce.PSNDiff(h.BTH.PSN, qp.psn(r.initPSN, r.una))
	// outstanding: the PSN names a packet sent and not yet acknowledged.
	outstanding := d >= 0 && r.una+uint64(d) < r.max
	syn := h.AETH.Syndrome
	switch {
	case syn.IsACK():
		// The ACK's PSN is the last packet it covers.
		if d < 0 {
			return // stale: a duplicate, or overtaken by a later one
		}
		if !outstanding {
			qp.mu.ctr.InvalidAckPSN++ // for a packet never sent
			return
		}
		qp.advanceLocked(now, r.una+uint64(d)+1)
	case syn.IsNAK() && syn.NAKCode() == roce.NAKPSNSequenceError:
		// The NAK's PSN is the one the responder expects: all before it
		// arrived. It may be the next packet to send (r.max).
		if d < 0 || r.una+uint64(d) > r.max {
			qp.mu.ctr.InvalidAckPSN++
			return
		}
		qp.mu.ctr.PacketSeqErr++
		qp.advanceLocked(now, r.una+uint64(d))
		r.nxt = r.una
		r.ackReqSent = r.una
		qp.kick()
	case syn.IsNAK() && !outstanding:
		// A fatal NAK names the request that failed (IBA 9.7.5.2.6): one
		// for anything else is not from the responder of this QP.
		qp.mu.ctr.InvalidAckPSN++
	case syn.IsNAK() && syn.NAKCode() == roce.NAKRemoteAccessError:
		qp.mu.ctr.RemoteAccessErr++
		qp.failLocked(fmt.Errorf("remote access error NAK at psn %#x", h.BTH.PSN))
	case syn.IsNAK():
		qp.mu.ctr.InvalidRequest++
		qp.failLocked(fmt.Errorf("NAK %v at psn %#x", syn, h.BTH.PSN))
	default: // RNR NAK: this responder never sends one; wait for the timeout
	}
}

// advanceLocked acknowledges every packet below una.
// Precondition: qp.mu is held.
func (qp *QP) advanceLocked(now time.Duration, una uint64) {
	r := &qp.mu.req
	if una <= r.una {
		return
	}
	// Payload bytes acknowledged: whole messages plus the parts of the
	// first and last ones.
	qp.mu.ctr.AckedBytes += qp.payloadBelow(una) - qp.payloadBelow(r.una)
	qp.mu.ctr.AckedMessages = una / r.ppm
	wasBlocked := r.nxt-r.una >= r.window
	r.una = una
	r.nxt = max(r.nxt, una)
	r.lastProgress = now
	r.retries = 0
	if wasBlocked {
		qp.kick()
	}
	qp.checkDoneLocked()
}

// payloadBelow is the payload carried by packets [0, idx) of the stream.
func (qp *QP) payloadBelow(idx uint64) uint64 {
	r := &qp.mu.req
	msgs, k := idx/r.ppm, idx%r.ppm
	return msgs*uint64(r.stream.MessageBytes) + k*uint64(qp.cfg.MTU)
}

// onCNPLocked is the reaction point's input (rp_cnp_handled/ignored).
// Precondition: qp.mu is held.
func (qp *QP) onCNPLocked(now time.Duration, coalesced bool) {
	r := &qp.mu.req
	if r.kCNPs != nil {
		qp.syncKernelCNPsLocked()
		if !coalesced {
			// The kernel took it at its arrival on the device: caught up.
			qp.mu.ctr.RPCNPAgentRead++
			return
		}
		// bpf/rp.c leaves a run the device coalesced (GRO) to the agent:
		// this CNP is the agent's, after the kernel's in time.
		now = max(now, r.kLast)
		r.kLast = now
	}
	if r.rp == nil {
		qp.mu.ctr.RPCNPIgnored++
		return
	}
	r.rp.Advance(now)
	before := r.rp.Rc()
	if r.rp.OnCNP(now) {
		qp.mu.ctr.RPCNPHandled++
	} else {
		qp.mu.ctr.RPCNPIgnored++
	}
	if t := qp.agent.cfg.Trace; t != nil {
		t(Event{Kind: EventCNPHandled, QPN: qp.qpn, At: max(qp.agent.clock.Now(), now), Arrived: now, RcBefore: before, RcAfter: r.rp.Rc()})
	}
}

// buildAck writes an ACK or NAK.
func buildAck(b []byte, local, peer netip.AddrPort, pkey uint16, destQP, psn uint32, syn roce.Syndrome, msn uint32) int {
	var h roce.Header
	h.BTH.Opcode = roce.OpRCAck
	h.BTH.PKey = pkey
	h.BTH.DestQP = destQP
	h.BTH.PSN = psn
	h.AETH.Syndrome = syn
	h.AETH.MSN = msn & roce.PSNMask
	n := roce.Build(b, &h, nil)
	roce.SealICRC(local, peer, b[:n])
	return n
}
