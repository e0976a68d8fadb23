package pds

import (
	"fmt"
	"math/bits"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pattern"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/enum"
)

// Mode is a PDC's delivery mode. This endpoint runs RUD (reliable,
// unordered delivery).
type Mode uint8

// Delivery modes.
const (
	ModeRUD Mode = iota + 1
)

var modeNames = enum.Names{ModeRUD: {"RUD"}}

func (m Mode) String() string { return enum.String(m, modeNames, "Mode") }

// PDCKey is what the PDS Manager looks a PDC up by (seed 004): {JobID,
// destination FEP, traffic class, delivery mode}.
type PDCKey struct {
	JobID uint32
	Dst   netip.Addr
	TC    uint8
	Mode  Mode
}

// Loss inference is RACK (RFC 8985) unless Config.Loss says otherwise
// (loss.go): a packet is lost when one sent after it was delivered and it
// has been outstanding longer than that packet's RTT plus the reordering
// window reo_wnd.
const (
	// dupThresh is RFC 8985's DupThresh (§6.2 Step 4): a PDC that has
	// seen no reordering and has this many packets SACKed beyond its
	// oldest takes a reordering window of 0, as fast as the DupAck rule
	// on a path that does not reorder.
	dupThresh = 3
	// reoWndRounds is how many round trips without a duplicate it takes
	// before the reordering window may shrink (RFC 8985's
	// reo_wnd_persist of 16).
	reoWndRounds = 16
)

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
	synBase   uint64 // the index a SYN's psn_offset counts from: 0, or base when the target forgot the PDC
	base, nxt uint64 // oldest unacknowledged index, next new index
	hiAcked   uint64 // highest acknowledged index + 1
	// ring holds the records of [base, nxt) at idx mod its length, a power
	// of two that grows with the window up to maxPDCWindow: 10,000 PDCs of
	// a packet or two each would otherwise hold 400 MB of records that
	// the garbage collector scans.
	ring  []txRec
	retxQ []uint64

	lastProgress time.Duration // last new acknowledgement, or first send after none was outstanding
	lastProbe    time.Duration // last CTRL ACK_REQ
	srtt         time.Duration // smoothed RTT (RFC 6298's 1/8 gain), 0 before a sample
	holdUntil    time.Duration // after a refusal: send nothing before
	retries      int
	lastActive   time.Duration

	// RACK (RFC 8985 §6.2): the most recently sent packet that was
	// delivered (send time, index) and its RTT; the minimum RTT; the
	// packets SACKed in [base, nxt); the reordering timer the transmit
	// loop was last told of.
	rackXmit  time.Duration
	rackIdx   uint64
	rackRTT   time.Duration
	rackSet   bool
	minRTT    time.Duration
	minRTTSet bool
	sacked    int
	rackArmed time.Duration
	// The reordering window: reordering seen (§6.2 Step 3), the window
	// in doublings of its step (reoShift), the round trip of the last
	// doubling (until base passes dsackRound), and over the round trips
	// since (rounds, ending at roundEnd) whether a duplicate came and
	// the largest reordering measured (roundsLate).
	reorderingSeen bool
	reoShift       uint
	dsackRound     uint64
	roundEnd       uint64
	rounds         int
	roundsDSACK    bool
	roundsLate     time.Duration
	// SLEEK (loss.go): in loss recovery until base reaches recoveryEnd;
	// the index after the last packet it took for lost.
	recovering  bool
	recoveryEnd uint64
	rtxHigh     uint64
	// probeOut: a CTRL ACK_REQ for probeIdx awaits its answer, an ACK
	// that may look like a duplicate's.
	probeOut bool
	probeIdx uint64

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

	// The CCC's schedule (pdcsched.go): in its lists since the last touch,
	// the backlog flags it counted, and the deadline its timers last
	// returned (its place in the CCC's timer heap).
	timerDirty, flagDirty   bool
	countedNew, countedRetx bool
	engine.Deadline
}

// rec is index idx's record; only [base, nxt) are kept.
func (p *initiator) rec(idx uint64) *txRec { return &p.ring[idx&uint64(len(p.ring)-1)] }

// initialRing is a new PDC's ring: a power of two.
const initialRing = 16

// makeRoom grows the ring, if it is full, to take index nxt.
func (p *initiator) makeRoom() {
	if p.nxt-p.base < uint64(len(p.ring)) {
		return
	}
	ring := make([]txRec, min(2*len(p.ring), maxPDCWindow))
	for idx := p.base; idx < p.nxt; idx++ {
		ring[idx&uint64(len(ring)-1)] = *p.rec(idx)
	}
	p.ring = ring
}

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
	return p.established || p.nxt-p.synBase < maxSynPackets
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
		p.touch()
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
		p.makeRoom()
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
	p.touch()
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
		h.Request.PSNOffset = uint16(idx - p.synBase) // < maxSynPackets
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
	p.sacked++ // until base passes it
	if p.probeOut && idx == p.probeIdx {
		p.probeOut = false // the probe's answer acknowledged it
	}
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
	p.touch()
	return int(r.size), true
}

// onAck is an ACK or ACK_CC for this PDC, from its destination.
func (p *initiator) onAck(now time.Duration, a *uet.Ack) {
	ep := p.ep
	p.touch()       // before update() reads its flags
	defer p.touch() // and what changed after
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
	if ai, ok := p.idxOf(a.AckPSN()); ok && ai >= p.base && ai < p.nxt {
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
			if !p.minRTTSet || sample.rtt < p.minRTT {
				p.minRTT, p.minRTTSet = sample.rtt, true // RACK.min_RTT (§6.2 Step 1)
			}
		}
	}
	dup := p.reportsDuplicate(a, cack)
	// Every packet newly acknowledged updates RACK (§6.2 Steps 2-3)
	// against fack, the highest index acknowledged before this ACK.
	newly := 0
	fack := p.hiAcked
	for ; p.base < cack; p.base++ {
		if r := p.rec(p.base); !r.acked {
			p.rackDelivered(now, p.base, r, fack)
			newly += p.ack(now, p.base)
		}
		p.sacked--
	}
	p.hiAcked = max(p.hiAcked, p.base)
	if a.Type == uet.TypeAckCC {
		if sb, ok := p.idxOf(a.SACKBase()); ok {
			bm := a.CC.SACKBitmap
			for i := uint64(0); bm != 0 && i < 64; i++ {
				if bm&1 != 0 {
					if idx := sb + i; idx >= p.base && idx < p.nxt {
						if r := p.rec(idx); !r.acked {
							p.rackDelivered(now, idx, r, fack)
							newly += p.ack(now, idx)
						}
						p.hiAcked = max(p.hiAcked, idx+1)
					}
				}
				bm >>= 1
			}
		}
	}
	if dup {
		p.onDuplicate()
	}
	p.endRound()
	if ep.cfg.Loss == LossSLEEK && a.Type == uet.TypeAckCC {
		ooo := a.CC.NSCC.OOOCount
		if a.CC.CCType == uet.CCCredit {
			ooo = a.CC.Credit.OOOCount
		}
		q := len(p.retxQ)
		if p.sleek(int(ooo)); len(p.retxQ) > q {
			p.ccc.kick()
		}
	}
	// RACK's loss detection on every ACK (§6.2 Step 5); the timer for
	// what is not yet due runs from the CCC's Fill (timers).
	if due := p.rackDetectLoss(now); due < p.rackArmed || p.rackArmed == 0 {
		p.rackArmed = due
		p.ccc.kick()
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

// sentAfter is RFC 8985's RACK_sent_after: packet (t1, i1) went after
// (t2, i2), by send time, then index.
func sentAfter(t1 time.Duration, i1 uint64, t2 time.Duration, i2 uint64) bool {
	return t1 > t2 || t1 == t2 && i1 > i2
}

// rackDelivered is RFC 8985 §6.2 Steps 2 and 3 for packet idx, newly
// acknowledged: it becomes RACK's most recently delivered packet if it
// went after the one there; never retransmitted and below fack it was
// reordered, and how long it came after RACK's RTT is the reordering a
// window must cover (measured for the window's decrease).
func (p *initiator) rackDelivered(now time.Duration, idx uint64, r *txRec, fack uint64) {
	if r.retx > 0 && p.minRTTSet && now-r.sentAt < p.minRTT {
		// Acknowledged sooner after its retransmission than any round
		// trip takes: the ACK is the original's (Step 2).
		return
	}
	if r.retx == 0 && idx < fack {
		p.reorderingSeen = true
		if p.rackSet && sentAfter(p.rackXmit, p.rackIdx, r.sentAt, idx) {
			p.roundsLate = max(p.roundsLate, now-r.sentAt-p.rackRTT)
		}
	}
	if !p.rackSet || sentAfter(r.sentAt, idx, p.rackXmit, p.rackIdx) {
		p.rackXmit, p.rackIdx, p.rackRTT, p.rackSet = r.sentAt, idx, now-r.sentAt, true
	}
}

// reportsDuplicate reports whether ACK a answers a packet the target had
// already: the target answers a duplicate with an ACK of its cumulative
// PSN (ack_psn = cack_psn), so such an ACK that moves no cumulative point
// is one, unless it is older than an ACK already taken (its SACK bitmap
// reaches less far) or the answer to a probe or a close. It is this
// PDS's DSACK (RFC 2883), which RFC 8985 §6.2 Step 4 grows reo_wnd on: a
// retransmission that was not needed, the original being late, not lost.
func (p *initiator) reportsDuplicate(a *uet.Ack, cack uint64) bool {
	if a.Probe || a.Req != uet.AckReqNone || a.AckPSN() != a.CACKPSN || cack != p.base || cack == 0 {
		return false
	}
	top := cack // the index after the highest one a acknowledges
	if a.Type == uet.TypeAckCC && a.CC.SACKBitmap != 0 {
		if sb, ok := p.idxOf(a.SACKBase()); ok {
			top = sb + 64 - uint64(bits.LeadingZeros64(a.CC.SACKBitmap))
		}
	}
	if top < p.hiAcked {
		return false
	}
	if p.probeOut {
		// The target answers a probe for a PSN it lacks with an ACK of
		// its cumulative PSN too.
		p.probeOut = false
		return false
	}
	return true
}

// onDuplicate takes a duplicate the target reported: reordering is seen,
// and the reordering window doubles, once per round trip (RFC 8985 §6.2
// Step 4 adds min_RTT/4 per round trip with DSACK; doubling reaches a
// sprayed PDC's path skew, many min RTTs, in a few round trips).
func (p *initiator) onDuplicate() {
	p.ep.ctr.SpuriousRetransmits++
	p.reorderingSeen = true
	p.roundsDSACK = true
	if p.base < p.dsackRound {
		return
	}
	p.dsackRound = p.nxt
	if p.reoStep()<<p.reoShift < p.reoWndMax() {
		p.reoShift++
	}
}

// endRound counts round trips (one ends when base passes the next index
// of its start, RFC 8985's dsack_round): after reoWndRounds of them
// without a duplicate, and with the reordering measured under half the
// window, the window halves (RFC 8985 resets it after 16 recoveries
// without DSACK; a PDC that sprays reorders all the time, and a window
// it still needs is kept).
func (p *initiator) endRound() {
	if p.base < p.roundEnd {
		return
	}
	p.roundEnd = p.nxt
	if p.rounds++; p.rounds < reoWndRounds {
		return
	}
	if !p.roundsDSACK && p.reoShift > 0 && 2*p.roundsLate < p.reoStep()<<p.reoShift {
		p.reoShift--
	}
	p.rounds, p.roundsDSACK, p.roundsLate = 0, false, 0
}

// reoStep is the reordering window's unit: min_RTT/4 (RFC 8985 §6.2
// Step 4), and at least one full packet's time at the line rate (a fake
// or loopback path's min RTT is next to nothing).
func (p *initiator) reoStep() time.Duration {
	ep := p.ep
	pkt := time.Duration(float64(ep.cfg.MTU+ethernetLen) * 8 / float64(ep.cfg.LinkRate) * float64(time.Second))
	return max(p.minRTT/4, pkt)
}

// reoWndMax bounds the reordering window: half the RTO. RFC 8985 bounds
// it by SRTT, but the paths a sprayed PDC takes can differ by more than
// its mean RTT, and SRTT never learns the slow paths' RTT while their
// packets are taken for lost.
func (p *initiator) reoWndMax() time.Duration { return p.ep.cfg.RTO / 2 }

// reoWnd is RACK.reo_wnd (RFC 8985 §6.2 Step 4): 0 while the PDC has no
// balancer and has seen no reordering and dupThresh packets are SACKed;
// else its step doubled reoShift times, at most reoWndMax. A PDC with a
// balancer sprays its packets over paths of different delays: it expects
// reordering from the start.
func (p *initiator) reoWnd() time.Duration {
	if p.lb == nil && !p.reorderingSeen && p.sacked >= dupThresh {
		return 0
	}
	return min(p.reoStep()<<p.reoShift, p.reoWndMax())
}

// rackDetectLoss is RFC 8985 §6.2 Step 5 and §6.3 (the reordering
// timer): a packet sent before RACK's most recently delivered one and
// outstanding longer than its RTT plus reo_wnd is lost (an inferred loss:
// NSCC's OnLoss). It returns when the next of the others would be (the
// RFC arms the timer for the last; the earliest costs nothing here).
func (p *initiator) rackDetectLoss(now time.Duration) (next time.Duration) {
	next = engine.Never
	if !p.rackSet || p.ep.cfg.Loss != LossRACK {
		return next
	}
	wnd := p.reoWnd()
	for idx := p.base; idx < p.nxt; idx++ {
		r := p.rec(idx)
		if r.acked || r.lost {
			continue
		}
		if !sentAfter(p.rackXmit, p.rackIdx, r.sentAt, idx) {
			if r.retx == 0 {
				break // every later index went after it
			}
			continue
		}
		if due := r.sentAt + p.rackRTT + wnd; now < due {
			next = min(next, due)
			continue
		}
		if sz, ok := p.markLost(idx); ok {
			p.ep.ctr.InferredLosses++
			p.ccc.wnd.OnLoss(now, sz)
		}
	}
	return next
}

// onNack is a NACK for this PDC.
func (p *initiator) onNack(now time.Duration, n *uet.Nack) {
	p.touch()       // before update() reads its flags
	defer p.touch() // and what changed after
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
		// The target's new PDC starts at the oldest unacknowledged PSN:
		// what came before it was delivered (the SYNs' psn_offsets count
		// from there, or they would point before the target's window).
		p.synBase = p.base
		for idx := p.base; idx < p.nxt; idx++ {
			p.markLost(idx)
		}
		p.holdUntil = now + ep.cfg.RTO
		p.retries++
		if p.retries > ep.cfg.MaxRetries {
			p.fail(now, fmt.Errorf("pds: pdc %d to %v: %d refusals in a row, last %v", p.id, p.key.Dst, p.retries, n.Code))
		}
		p.ccc.kick()
		return
	}
	idx, ok := p.idxOf(n.NackPSN)
	if !ok || idx >= p.nxt {
		ep.ctr.InvalidAckPSN++
		return
	}
	if n.Code == uet.NackPSNOORWindow {
		// The target's window does not reach the PSN: the two ends
		// disagree on the PDC's PSNs, which resending at once does not
		// mend. Resend after an RTO, and fail after MaxRetries of them.
		p.retries++
		if p.retries > ep.cfg.MaxRetries {
			p.fail(now, fmt.Errorf("pds: pdc %d to %v: %d PSN_OOR_WINDOW NACKs in a row at psn %#x", p.id, p.key.Dst, p.retries, n.NackPSN))
			return
		}
		p.holdUntil = max(p.holdUntil, now+ep.cfg.RTO)
	}
	r := &txRec{acked: true} // below base: acknowledged, its record gone
	if idx >= p.base {
		r = p.rec(idx)
	}
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
	p.ccc.kick()
}

// timers runs the RTO and the close; it returns when they next need the
// loop.
func (p *initiator) timers(now time.Duration, out []engine.Packet) (n int, next time.Duration) {
	ep := p.ep
	next = engine.Never
	p.rackArmed = next
	if p.closed || p.err != nil {
		return 0, next
	}
	if p.base < p.nxt {
		deadline := p.lastProgress + ep.cfg.RTO
		if _, flying := p.oldestInFlight(); now >= deadline && !flying && len(p.retxQ) > 0 {
			// Everything outstanding is already taken as lost and waits
			// to be resent (for credit, or the window): there is nothing
			// on the wire to time out.
			p.lastProgress = now
			deadline = now + ep.cfg.RTO
		}
		if now >= deadline {
			p.retries++
			ep.ctr.Timeouts++
			ep.resolveAgain(p.key.Dst)
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
		p.rackArmed = p.rackDetectLoss(now)
		next = min(next, p.rackArmed)
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
	p.probeOut, p.probeIdx = true, idx
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
	p.ccc.forget(p)
	for _, s := range p.senders {
		s.finish(fmt.Errorf("pds: pdc %d to %v closed", p.id, p.key.Dst))
	}
	delete(ep.initiators, p.id)
	if ep.byKey[p.key] == p {
		delete(ep.byKey, p.key)
	}
	c := p.ccc
	if c.turn == p {
		c.turn = nil
	}
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
