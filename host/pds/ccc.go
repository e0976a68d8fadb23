package pds

import (
	"math"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/enum"
)

// CCCState is a Congestion Control Context's state (seed 004; uet.md "CCC
// states", the spec's update_state()).
type CCCState uint8

const (
	// CCCIdle: no backlog, no retransmission waiting, nothing in flight.
	// A CCC is created IDLE and freed at IDLE once no PDC uses it.
	CCCIdle CCCState = iota
	// CCCActive: configured, with data to send, not (yet) allowed to.
	CCCActive
	// CCCReady: allowed to send (on the scheduler's ready list).
	CCCReady
	// CCCPending: nothing left to send, waiting for ACKs.
	CCCPending
	// cccFreed is the pseudo-state a freed CCC goes to (transition counts
	// and traces only).
	cccFreed
	numCCCStates
)

var cccStateNames = enum.Names{CCCIdle: {"IDLE"}, CCCActive: {"ACTIVE"}, CCCReady: {"READY"}, CCCPending: {"PENDING"}, cccFreed: {"FREED"}}

func (s CCCState) String() string { return enum.String(s, cccStateNames, "CCCState") }

// MarshalText writes the state's name (JSON).
func (s CCCState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name.
func (s *CCCState) UnmarshalText(b []byte) error {
	return enum.Unmarshal(s, b, cccStateNames, "pds: ccc state")
}

// CCCKey names a CCC: one per {source FEP, destination FEP, traffic class}
// (uet.md "Roles": the assumed key), shared by the PDCs of that pair.
type CCCKey struct {
	Src, Dst netip.Addr
	TC       uint8
}

// CCCTransition is one state change of a CCC, as a trace shows it.
type CCCTransition struct {
	At       time.Duration `json:"at_ns"`
	CCC      uint32        `json:"ccc"` // the CCC's serial number on this endpoint
	Key      CCCKey        `json:"-"`
	From, To CCCState
	// PDCs is how many PDCs use the CCC at the transition.
	PDCs int `json:"pdcs"`
}

// ccc is the sender's Congestion Control Context: the window (NSCC) every
// PDC to one destination in one traffic class shares, the bytes they have
// in flight together, and the state machine. It is the engine's flow: its
// Fill sends for its PDCs, round robin. Guarded by the endpoint's mu.
type ccc struct {
	ep     *Endpoint
	flow   *engine.FlowHandle // the CCC in the engine's round robin
	sched  pdcSched           // its PDCs' timers and backlog flags
	serial uint32
	key    CCCKey
	state  CCCState
	wnd    cc.WindowController
	// credit is RCCC's credit from the receiver (CC rccc or both), nil
	// otherwise.
	credit *rccc.Sender
	// id is the CCC's ccc_id on the wire; a credit resync takes the next
	// one.
	id          uint8
	creditReqAt time.Duration // last CTRL CREDIT_REQ
	creditAt    time.Duration // last packet that carried a target, or credit that came
	creditReqs  uint64        // CREDIT_REQs sent
	creditWait  uint8         // CREDIT_REQs in a row without credit: the backoff
	askNow      bool          // new credit left the CCC short with nothing in flight: ask at once
	grantAt     time.Duration // last new credit
	grantGap    time.Duration // smoothed time between new credits (1/8 gain)

	inFlight int // wire bytes sent, neither acknowledged nor taken as lost
	pdcs     []*initiator
	rr       int // round robin position in pdcs
	// turn is the PDC whose turn it is, with turnLeft bytes of its
	// quantum (pdcQuantum) still to send.
	turn     *initiator
	turnLeft int
	freed    bool
}

// canSend is the CCC's can_send for a full packet (uet.md): NSCC's
// in-flight + MTU ≤ cwnd, and RCCC's credit > 0.
func (c *ccc) canSend(size int) bool {
	return c.wnd.CanSend(c.inFlight, size) && (c.credit == nil || c.credit.CanSend())
}

// cccID is the CCC's ccc_id on the wire (RUD_CC_REQ; the high byte of a
// CTRL CREDIT or CREDIT_REQ payload): the low 8 bits of its serial at
// first, the next one after each credit resync, so that a receiver tells
// a new incarnation of a CCC's credit from the old one (both ends' credit
// counts start at 0 with it).
func (c *ccc) cccID() uint8 { return c.id }

// demand is what the CCC asks its receiver's pacer for (rccc.Sender.Target):
// its PDCs' new and retransmit backlogs in wire bytes, NSCC's window when
// it runs beside, the sending endpoint's CCCs with data waiting.
func (c *ccc) demand() cc.CreditDemand {
	d := cc.CreditDemand{ActiveSources: max(c.ep.busyCCCs, 1)}
	for _, p := range c.pdcs {
		nb, rb := p.backlogBytes()
		d.Backlog = min(d.Backlog+nb, maxBacklog)
		d.RetxBacklog = min(d.RetxBacklog+rb, maxBacklog)
	}
	if c.ep.cfg.CC.window() {
		d.Window = c.wnd.Window()
	}
	return d
}

// maxBacklog caps a backlog in bytes (a stream without end): far above any
// MaxWnd, the most a target asks for.
const maxBacklog = 1 << 30

// backlog reports whether any PDC has new data or a retransmission
// waiting.
func (c *ccc) backlog() (newData, retx bool) {
	c.countFlags()
	return c.sched.nNew > 0, c.sched.nRetx > 0
}

// update is the spec's update_state(), run after every event (uet.md):
//
//	backlog = 0, waiting retransmits = 0, in-flight = 0  → IDLE
//	backlog = 0, waiting retransmits = 0, in-flight > 0  → PENDING
//	data (new or retransmit) while IDLE or PENDING       → ACTIVE
//	ACTIVE and can_send                                  → READY
//	READY and not can_send                               → ACTIVE
//
// A transition to READY and back in one call is counted as both.
func (c *ccc) update(now time.Duration) {
	newData, retx := c.backlog()
	switch {
	case !newData && !retx && c.inFlight == 0:
		c.set(now, CCCIdle)
		return
	case !newData && !retx:
		c.set(now, CCCPending)
		return
	}
	if c.state == CCCIdle || c.state == CCCPending {
		c.set(now, CCCActive)
	}
	can := c.canSend(c.ep.cfg.MTU)
	switch {
	case c.state == CCCActive && can:
		c.set(now, CCCReady)
	case c.state == CCCReady && !can:
		c.set(now, CCCActive)
	}
}

func (c *ccc) set(now time.Duration, to CCCState) {
	if c.state == to {
		return
	}
	from := c.state
	c.state = to
	if busy(from) != busy(to) {
		if busy(to) {
			c.ep.busyCCCs++
		} else {
			c.ep.busyCCCs--
			c.grantAt = 0 // the time between grants counts while busy only
		}
	}
	c.ep.cccTransition(now, c, from, to)
	// What the CCC may send and its PDCs' timers changed: the transmit
	// loop visits only the flows it is told of (engine's sched).
	c.kick()
}

// busy reports whether a CCC in state s has data waiting to go out (the
// sender NIC's active sources, rccc's CreditDemand.ActiveSources).
func busy(s CCCState) bool { return s == CCCActive || s == CCCReady }

// cccManager holds the sender's CCCs (the CMS's CCC Manager, seed 004).
type cccManager struct {
	byKey  map[CCCKey]*ccc
	serial uint32
}

// get returns the CCC for key, creating it (IDLE, then initialised with
// the window controller) if there is none; ok is false when the limit of
// CCCs is reached.
func (m *cccManager) get(ep *Endpoint, now time.Duration, key CCCKey) (c *ccc, ok bool) {
	if c = m.byKey[key]; c != nil {
		return c, true
	}
	if len(m.byKey) >= ep.cfg.MaxCCCs {
		return nil, false
	}
	m.serial++
	c = &ccc{ep: ep, serial: m.serial, id: uint8(m.serial), key: key, state: CCCIdle, wnd: openWindow{}}
	if ep.cfg.CC.window() {
		c.wnd = ep.cfg.NewWindow(now)
	}
	if ep.cfg.CC.credit() {
		c.credit = rccc.NewSender(ep.rcccParams, now)
	}
	m.byKey[key] = c
	ep.cccCreated(now, c)
	c.flow = ep.eng.AddFlow(c)
	return c, true
}

// release frees c if it is IDLE and no PDC uses it.
func (m *cccManager) release(now time.Duration, c *ccc) {
	if c.freed || c.state != CCCIdle || len(c.pdcs) > 0 {
		return
	}
	c.freed = true
	delete(m.byKey, c.key)
	c.ep.eng.RemoveFlow(c.flow)
	c.ep.cccTransition(now, c, CCCIdle, cccFreed)
}

// burst is the most packets a CCC sends per pass of the engine's round
// robin (NSCC has no pacer: the ACK clock and the port limiter pace it).
const burst = 8

// pdcQuantum is how many bytes a PDC may send in one turn of its CCC's
// round robin while it is ready (a deficit round robin's quantum): a
// target's ACK then covers a turn's packets (htsim's sink coalesces up
// to 16 KiB, AckBytes' default) and the turn leaves from one EV port in
// one GSO run. A packet a turn cost an ACK a packet and a send a packet
// once thousands of PDCs shared the CCC (docs/measured.md, scale).
const pdcQuantum = 16 << 10

// ackSample is one ACK as the CCC's window takes it.
type ackSample struct {
	newly    int
	rtt      time.Duration
	rttOK    bool
	ecn      bool
	inFlight int
	pend     uint8 // NSCC rcv_cwnd_pend
	rc       bool  // NSCC rc
	nsccCC   bool  // the ACK_CC carried NSCC's cc_state
	credit   uet.Credit
	creditOK bool // the ACK_CC carried a CREDIT cc_state
}

// ackCCTaker is a window controller that reads an ACK_CC's NSCC cc_state
// (nscc.Controller.OnAckCC).
type ackCCTaker interface {
	OnAckCC(now time.Duration, s cc.AckSample, st nscc.AckCCState)
}

// nackTaker reads a NACK's reason and RTT (nscc.Controller.OnNackSample).
type nackTaker interface {
	OnNackSample(now time.Duration, n nscc.NackSample)
}

func (c *ccc) onAck(now time.Duration, s ackSample) {
	cs := cc.AckSample{NewlyAcked: s.newly, RTT: s.rtt, RTTValid: s.rttOK, ECN: s.ecn, InFlight: s.inFlight}
	if c.credit != nil {
		// The first answer ends speculation; an ACK_CC CREDIT repeats the
		// receiver's cumulative grants (rccc's doc, "Wiring in a PDS").
		c.credit.OnAck(now)
		if s.creditOK {
			c.takeCredit(now, s.credit)
		}
	}
	if t, ok := c.wnd.(ackCCTaker); ok && s.nsccCC {
		t.OnAckCC(now, cs, nscc.AckCCState{RcvCwndPend: s.pend, RestoreCwnd: s.rc})
	} else {
		c.wnd.OnAck(now, cs)
	}
	before := c.state
	c.update(now)
	if c.needsCreditRequest() {
		c.kick() // the transmit loop asks for credit
	}
	if c.state == CCCReady && before != CCCReady {
		// The ACK opened a window the transmit loop was blocked on; a
		// CCC already READY has its loop running or timed (a kick is a
		// timerfd write: not one per ACK).
		c.kick()
	}
}

func (c *ccc) onNack(now time.Duration, n nscc.NackSample) {
	if t, ok := c.wnd.(nackTaker); ok {
		t.OnNackSample(now, n)
	} else {
		c.wnd.OnNack(now, n.Size)
	}
	c.update(now)
}

// Fill implements engine.Flow: the CCC's PDCs send, round robin, what the
// window lets go: retransmissions first, then new data; each PDC's
// timers (RTO, close) run.
func (c *ccc) Fill(now time.Duration, out []engine.Packet, port *engine.PortLimit) (n int, next time.Duration) {
	ep := c.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	next = engine.Never
	if c.freed {
		return 0, next
	}
	c.wnd.Advance(now)
	n += c.runTimers(now, out[n:])
	windowFull, portFull := false, false
	// A PDC picked when the window or the port turns it away keeps its
	// turn (the round robin goes back): it once lost it, so under a window
	// of a packet or two, with the ACK clock alternating full and open,
	// every other PDC never sent (TestCCCRoundRobinFullWindow). The pick
	// comes first so that the port is asked only with a packet to send.
	sent := 0
	if port != nil {
		sent = port.TurnSent() // the rest of a turn the port cut short
	}
	for ; n < len(out) && sent < burst; sent++ {
		rr, turn, left := c.rr, c.turn, c.turnLeft
		p := c.pick(now)
		if p == nil {
			break
		}
		if !c.canSend(ep.cfg.MTU) {
			c.rr, c.turn, c.turnLeft, windowFull = rr, turn, left, true // an ACK kicks the loop
			break
		}
		if port != nil && !port.Ready() {
			c.rr, c.turn, c.turnLeft, portFull = rr, turn, left, true
			break
		}
		size := p.fill(now, &out[n])
		if size == 0 {
			break
		}
		n++
		c.turnLeft -= size
		c.inFlight += size
		if port != nil {
			port.Spend(size + ethernetLen)
		}
	}
	if k, due := c.creditRequest(now, out[n:]); due != engine.Never {
		n += k
		next = min(next, due)
	}
	c.update(now)
	switch {
	case portFull:
		// The engine asks again when the port has credit and the CCC's
		// turn comes (engine.PortLimit.Ready).
	case !windowFull && c.readyPDC(now):
		next = now
	}
	next = min(next, c.nextTimer(now))
	if len(c.pdcs) == 0 {
		ep.cccs.release(now, c)
	}
	return n, next
}

// creditRequest sends a CTRL CREDIT_REQ when the CCC has data waiting, no
// credit, and nothing in flight whose request carries a target (rccc's
// doc; htsim sendRTS): at once, then once per ProbeTimeout while that
// lasts, so that a lost request or grant is asked again. It returns the
// packets written and when to look again (engine.Never: no need).
func (c *ccc) creditRequest(now time.Duration, out []engine.Packet) (n int, due time.Duration) {
	if c.credit == nil || c.credit.CanSend() || c.inFlight > 0 || len(c.pdcs) == 0 {
		return 0, engine.Never
	}
	if newData, retx := c.backlog(); !newData && !retx {
		return 0, engine.Never
	}
	// At once when no request carried a target yet, or when new credit
	// left the CCC short; else after creditRequestInterval without
	// credit.
	every := c.creditRequestInterval()
	if (c.creditReqs > 0 || c.credit.Stats().SentBytes > 0) && !c.askNow {
		if due := max(c.creditAt, c.creditReqAt) + every; now < due {
			return 0, due
		}
	}
	if len(out) == 0 {
		return 0, now
	}
	p := c.pdcs[0]
	h := uet.Header{Type: uet.TypeCtrl, Ctrl: uet.Ctrl{
		CtrlType: uet.CtrlCreditReq, PSN: p.psn(p.nxt), SPDCID: p.id,
		Payload: creditPayload(c.cccID(), uet.Credit(c.credit.Target(c.demand()))),
	}}
	if p.established {
		h.Ctrl.DPDCID = p.peerID
	}
	pkt := &out[0]
	pkt.N = h.Encode(pkt.Buf)
	pkt.TOS = c.ep.ctrlTOS
	pkt.Addr = netip.AddrPortFrom(c.key.Dst, c.ep.port)
	pkt.SrcPort = p.ev
	c.creditReqAt = now
	c.askNow = false
	c.creditReqs++
	c.creditWait++
	c.ep.ctr.CreditRequestsSent++
	c.ep.ctr.TxPackets++
	c.ep.ctr.TxBytes += uint64(pkt.N)
	return 1, now + c.creditRequestInterval()
}

// creditRequestInterval is how long a CCC waits for credit before it asks
// (again): a probe timeout, or twice the usual time between its grants if
// longer (a pacer that serves many sources grants each one rarely, and
// its next grant is on the way), doubled for each request in a row that
// brought nothing, up to 64 times, and at most the RTO.
func (c *ccc) creditRequestInterval() time.Duration {
	return min(max(c.ep.cfg.ProbeTimeout, 2*c.grantGap)<<min(c.creditWait, 6), c.ep.cfg.RTO)
}

// needsCreditRequest reports whether the CCC waits for credit with nothing
// in flight: only a CREDIT_REQ gets it going.
func (c *ccc) needsCreditRequest() bool {
	return c.credit != nil && !c.credit.CanSend() && c.inFlight == 0 && c.state == CCCActive
}

// creditPayload is a CTRL CREDIT or CREDIT_REQ payload: the 24-bit
// cumulative credit (or credit target) under the CCC's 8-bit ccc_id, the
// layout of a *_CC_REQ's ccc_id and credit_target word (this lab's
// choice: the control payload's layout is not public).
func creditPayload(cccID uint8, credit uet.Credit) uint32 {
	return uint32(cccID)<<24 | uint32(credit)&uet.Units24Mask
}

// splitCreditPayload reads a creditPayload.
func splitCreditPayload(v uint32) (cccID uint8, credit uet.Credit) {
	return uint8(v >> 24), uet.Credit(v & uet.Units24Mask)
}

// onCredit is a CTRL CREDIT from the receiver of the CCC: its cumulative
// grant.
func (c *ccc) onCredit(now time.Duration, credit uet.Credit) {
	c.takeCredit(now, credit)
	before := c.state
	c.update(now)
	if c.state == CCCReady && before != CCCReady {
		c.kick()
	}
}

// takeCredit gives the CCC's RCCC the receiver's cumulative credit; new
// credit ends the CREDIT_REQ backoff (a repeated count does not).
func (c *ccc) takeCredit(now time.Duration, credit uet.Credit) {
	before := c.credit.Received()
	if rccc.Ahead(uint64(before), credit) < 0 && !c.credit.CanSend() && c.inFlight == 0 {
		c.resyncCredit(now)
		return
	}
	c.credit.OnCredit(now, uint32(credit))
	if c.credit.Received() != before {
		if !c.credit.CanSend() && c.inFlight == 0 {
			// The grant covered the last target but not the debt the
			// packets after it ran up (a target asks for a share of what
			// is lacking): no packet is left to carry a new target.
			c.askNow = true
			c.kick()
		}
		if c.grantAt > 0 {
			gap := now - c.grantAt
			if c.grantGap == 0 {
				c.grantGap = gap
			} else {
				c.grantGap += (gap - c.grantGap) / 8
			}
		}
		c.creditAt, c.grantAt, c.creditWait = now, now, 0
	}
}

// resyncCredit starts the CCC's credit over under the next ccc_id: a
// receiver that counts behind the CCC while it waits with nothing in
// flight has lost its side (it freed its CCC, the source started again
// from 0, and its grants read as old). The next request's new ccc_id
// makes the receiver start its source over too, and the CCC starts
// speculating again.
func (c *ccc) resyncCredit(now time.Duration) {
	c.credit = rccc.NewSender(c.ep.rcccParams, now)
	c.id++
	c.creditWait, c.grantAt, c.creditReqs = 0, 0, 0
	c.ep.ctr.CreditResyncs++
	before := c.state
	c.update(now)
	if c.state == CCCReady && before != CCCReady {
		c.kick()
	}
}

// openWindow is the window of a CCC without NSCC (CC rccc or none): it
// holds nothing back.
type openWindow struct{}

var _ cc.WindowController = openWindow{}

func (openWindow) Window() int                             { return math.MaxInt32 }
func (openWindow) CanSend(inFlight, size int) bool         { return true }
func (openWindow) OnAck(now time.Duration, s cc.AckSample) {}
func (openWindow) OnNack(now time.Duration, size int)      {}
func (openWindow) OnLoss(now time.Duration, size int)      {}
func (openWindow) Advance(now time.Duration)               {}
func (openWindow) NextEvent() time.Duration                { return engine.Never }

// pick returns the PDC with something to send whose turn it is: the one
// holding the turn while it has quantum left, else the next, round robin.
func (c *ccc) pick(now time.Duration) *initiator {
	if c.turn != nil && c.turnLeft > 0 && c.turn.ready(now) {
		return c.turn
	}
	c.turn = nil
	for range c.pdcs {
		p := c.pdcs[c.rr%len(c.pdcs)]
		c.rr++
		if p.ready(now) {
			c.turn, c.turnLeft = p, pdcQuantum
			return p
		}
	}
	return nil
}

func (c *ccc) readyPDC(now time.Duration) bool {
	for _, p := range c.pdcs {
		if p.ready(now) {
			return true
		}
	}
	return false
}

// CCCInfo is a sender CCC as CCCs reports it.
type CCCInfo struct {
	Key      CCCKey   `json:"-"`
	Src      string   `json:"src"`
	Dst      string   `json:"dst"`
	TC       uint8    `json:"tc"`
	State    CCCState `json:"state"`
	Window   int      `json:"cwnd"`      // bytes
	InFlight int      `json:"in_flight"` // bytes
	PDCs     int      `json:"pdcs"`
	// NSCC is the window controller's counters when it is NSCC.
	NSCC *nscc.Stats `json:"nscc,omitempty"`
	// Credit is RCCC's state in modes rccc and both.
	Credit *CreditInfo `json:"rccc,omitempty"`
}

// CreditInfo is a sender CCC's RCCC credit.
type CreditInfo struct {
	Credit      int  `json:"credit"` // bytes; 0 or less: waiting for a grant
	Speculating bool `json:"speculating"`
	// Received is the receiver's cumulative credit as far as accepted
	// (256-byte units mod 2^24, as the wire carries it).
	Received       uet.Credit `json:"received"`
	CreditRequests uint64     `json:"credit_requests"` // CTRL CREDIT_REQ sent
	rccc.SenderStats
}

// CCCs returns the sender CCCs.
func (ep *Endpoint) CCCs() []CCCInfo {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	out := make([]CCCInfo, 0, len(ep.cccs.byKey))
	for _, c := range ep.cccs.byKey {
		ci := CCCInfo{Key: c.key, Src: c.key.Src.String(), Dst: c.key.Dst.String(), TC: c.key.TC, State: c.state,
			Window: c.wnd.Window(), InFlight: c.inFlight, PDCs: len(c.pdcs)}
		if n, ok := c.wnd.(*nscc.Controller); ok {
			st := n.Stats()
			ci.NSCC = &st
		}
		if cs := c.credit; cs != nil {
			ci.Credit = &CreditInfo{Credit: cs.Credit(), Speculating: cs.Speculating(), Received: cs.Received(),
				CreditRequests: c.creditReqs, SenderStats: cs.Stats()}
			if !c.ep.cfg.CC.window() {
				ci.Window = 0
			}
		}
		out = append(out, ci)
	}
	return out
}
