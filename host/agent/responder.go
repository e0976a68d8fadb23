package agent

import (
	"github.com/fabriclab/fabriclab/host/pattern"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"

	"github.com/fabriclab/fabriclab/host/roce"
)

// replies collects what the receive loop sends back for one batch: NAKs and
// CNPs as they happen, ACKs once per QP at the end of the batch (ACK
// coalescing: one ACK covers every AckReq packet of the batch).
type replies struct {
	out    *engine.Replies
	ackQPs []*QP
}

func newReplies(slots []txPacket) *replies { return &replies{out: engine.NewReplies(slots)} }

// next is the next reply slot, nil if the batch is full (the peer recovers
// by timeout; the engine counts it).
func (rs *replies) next() *txPacket { return rs.out.Next() }

// onCELocked is the notification point (reference/dcqcn.md §NP): every
// CE-marked packet counts, and turns into a CNP to the sender's QP unless
// one went out less than min_time_between_cnps ago.
// Precondition: qp.mu is held.
func (qp *QP) onCELocked(now time.Duration, rs *replies) {
	if t := qp.agent.cfg.Trace; t != nil {
		t(Event{Kind: EventCEReceived, QPN: qp.qpn, At: now})
	}
	if qp.mu.npOffloaded {
		return // the kernel NP counted it and answers it
	}
	qp.mu.ctr.NPECNMarkedRoCEPackets++
	np := qp.mu.resp.np
	if np == nil {
		return
	}
	_, wasPending := np.Next()
	if !np.OnCE(now) {
		if !wasPending {
			qp.kick() // newly pending: the transmit loop sends it when due
		}
		return
	}
	if p := rs.next(); p != nil {
		p.N = qp.buildCNPLocked(p.Buf)
		p.TOS = qp.cnpTOS
		p.Addr, p.SrcPort = qp.peerAddr(), qp.sourcePort()
	}
}

// onRequestLocked is the RC responder for SEND and RDMA WRITE packets
// (IBTA Vol. 1 §9.7.4–9.7.5): in-order packets are placed and ACKed when
// they ask, a duplicate is re-ACKed (duplicate_request), a packet past the
// expected PSN gets one PSN-sequence NAK per gap (out_of_sequence).
// Precondition: qp.mu is held.
func (qp *QP) onRequestLocked(now time.Duration, h *roce.Header, payload []byte, rs *replies) {
	s := &qp.mu.resp
	d := roce.PSNDiff(h.BTH.PSN, qp.psn(s.initPSN, s.nxt))
	switch {
	case d < 0:
		qp.mu.ctr.DuplicateRequest++
		qp.wantAckLocked(rs)
		return
	case d > 0:
		qp.mu.ctr.OutOfSequence++
		if !s.nakSent {
			s.nakSent = true
			qp.sendAckLocked(rs, qp.psn(s.initPSN, s.nxt), roce.NAKSyndrome(roce.NAKPSNSequenceError))
		}
		return
	}
	op := h.BTH.Opcode
	mtu := qp.cfg.MTU
	var first, last bool
	switch op {
	case roce.OpRCWriteFirst, roce.OpRCSendFirst:
		first = true
	case roce.OpRCWriteOnly, roce.OpRCWriteOnlyImm, roce.OpRCSendOnly, roce.OpRCSendOnlyImm:
		first, last = true, true
	case roce.OpRCWriteLast, roce.OpRCWriteLastImm, roce.OpRCSendLast, roce.OpRCSendLastImm:
		last = true
	}
	// IBTA 9.7.5.1.3 length rules: FIRST and MIDDLE carry exactly one MTU,
	// LAST and ONLY at most one; MIDDLE/LAST continue a message.
	if (!last && len(payload) != mtu) || len(payload) > mtu || first == s.inMsg {
		qp.mu.ctr.InvalidRequest++
		qp.sendAckLocked(rs, qp.psn(s.initPSN, s.nxt), roce.NAKSyndrome(roce.NAKInvalidRequest))
		return
	}
	if first {
		size := len(qp.buf)
		if h.BTH.Opcode.HasRETH() {
			// R_Key and bounds (IBTA 9.7.5.1.5): a bad one is a remote
			// access error.
			off := h.RETH.VA - qp.va
			if h.RETH.RKey != qp.rkey || h.RETH.VA < qp.va || off > uint64(size) || uint64(h.RETH.DMALen) > uint64(size)-off {
				qp.mu.ctr.RemoteAccessErr++
				qp.sendAckLocked(rs, qp.psn(s.initPSN, s.nxt), roce.NAKSyndrome(roce.NAKRemoteAccessError))
				return
			}
			s.cursor, s.end = int(off), int(off)+int(h.RETH.DMALen)
		} else {
			// SEND lands where the last one ended; it wraps to the start
			// when a full MTU would not fit.
			if s.sendCursor+mtu > size {
				s.sendCursor = 0
			}
			s.cursor, s.end = s.sendCursor, size
		}
		s.msgOff = 0
	}
	if len(payload) > s.end-s.cursor {
		if h.BTH.Opcode.HasRETH() || !isSend(op) {
			qp.mu.ctr.InvalidRequest++ // longer than the RETH said
			qp.sendAckLocked(rs, qp.psn(s.initPSN, s.nxt), roce.NAKSyndrome(roce.NAKInvalidRequest))
			s.inMsg = false
			return
		}
		s.cursor = 0 // a SEND longer than the buffer wraps (the tool's receive ring)
	}
	dst := qp.buf[s.cursor : s.cursor+len(payload)]
	copy(dst, payload)
	if qp.cfg.VerifyIncoming && !pattern.Match(dst, qp.mu.peer.QPN, s.msgs, s.msgOff) {
		qp.mu.ctr.VerifyErrors++
	}
	s.cursor += len(payload)
	s.msgOff += len(payload)
	s.inMsg = !last
	s.nakSent = false
	s.nxt++
	qp.mu.ctr.RecvBytes += uint64(len(payload))
	if last {
		s.msgs++
		s.msn = (s.msn + 1) & roce.PSNMask
		qp.mu.ctr.RecvMessages++
		if isSend(op) {
			s.sendCursor = s.cursor
		}
	}
	if h.BTH.AckReq {
		qp.wantAckLocked(rs)
	}
}

func isSend(op roce.Opcode) bool { return op <= roce.OpRCSendOnlyImm }

// wantAckLocked asks for one ACK of this QP at the end of the batch.
// Precondition: qp.mu is held.
func (qp *QP) wantAckLocked(rs *replies) {
	if !qp.mu.resp.ackPending {
		qp.mu.resp.ackPending = true
		rs.ackQPs = append(rs.ackQPs, qp)
	}
}

// flushAckLocked writes the coalesced ACK: its PSN is the last packet
// received in order, its MSN the messages completed.
// Precondition: qp.mu is held.
func (qp *QP) flushAckLocked(rs *replies) {
	s := &qp.mu.resp
	s.ackPending = false
	qp.sendAckLocked(rs, qp.psn(s.initPSN, s.nxt-1), roce.ACKSyndrome(0x1F))
}

// Precondition: qp.mu is held.
func (qp *QP) sendAckLocked(rs *replies, psn uint32, syn roce.Syndrome) {
	p := rs.next()
	if p == nil {
		return
	}
	p.N = buildAck(p.Buf, qp.mu.local, qp.mu.peer.Addr, qp.pkey(), qp.mu.peer.QPN, psn, syn, qp.mu.resp.msn)
	p.TOS = qp.dataTOS
	p.Addr, p.SrcPort = qp.peerAddr(), qp.sourcePort()
	qp.mu.ctr.TxPackets++
	qp.mu.ctr.TxBytes += uint64(p.N)
}
