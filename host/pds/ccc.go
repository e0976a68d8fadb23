package pds

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/nscc"
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

var cccStateNames = [numCCCStates]string{"IDLE", "ACTIVE", "READY", "PENDING", "FREED"}

func (s CCCState) String() string {
	if s < numCCCStates {
		return cccStateNames[s]
	}
	return fmt.Sprintf("CCCState(%d)", uint8(s))
}

// MarshalText writes the state's name (JSON).
func (s CCCState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name.
func (s *CCCState) UnmarshalText(b []byte) error {
	for i, n := range cccStateNames {
		if n == string(b) {
			*s = CCCState(i)
			return nil
		}
	}
	return fmt.Errorf("pds: ccc state %q: want one of %v", b, cccStateNames)
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
	serial uint32
	key    CCCKey
	state  CCCState
	wnd    cc.WindowController

	inFlight int // wire bytes sent, neither acknowledged nor taken as lost
	pdcs     []*initiator
	rr       int // round robin position in pdcs
	freed    bool
}

// canSend is NSCC.CanSend for a full packet (uet.md: in-flight + MTU ≤
// cwnd).
func (c *ccc) canSend(size int) bool { return c.wnd.CanSend(c.inFlight, size) }

// backlog reports whether any PDC has new data or a retransmission
// waiting.
func (c *ccc) backlog() (newData, retx bool) {
	for _, p := range c.pdcs {
		if p.hasNewData() {
			newData = true
		}
		if len(p.retxQ) > 0 {
			retx = true
		}
	}
	return newData, retx
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
	c.ep.cccTransition(now, c, from, to)
}

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
	c = &ccc{ep: ep, serial: m.serial, key: key, state: CCCIdle, wnd: ep.cfg.NewWindow(now)}
	m.byKey[key] = c
	ep.cccCreated(now, c)
	ep.eng.AddFlow(c)
	return c, true
}

// release frees c if it is IDLE and no PDC uses it.
func (m *cccManager) release(now time.Duration, c *ccc) {
	if c.freed || c.state != CCCIdle || len(c.pdcs) > 0 {
		return
	}
	c.freed = true
	delete(m.byKey, c.key)
	c.ep.eng.RemoveFlow(c)
	c.ep.cccTransition(now, c, CCCIdle, cccFreed)
}

// burst is the most packets a CCC sends per pass of the engine's round
// robin (NSCC has no pacer: the ACK clock and the port limiter pace it).
const burst = 8

// ackSample is one ACK as the CCC's window takes it.
type ackSample struct {
	newly    int
	rtt      time.Duration
	rttOK    bool
	ecn      bool
	inFlight int
	pend     uint8 // NSCC rcv_cwnd_pend
	rc       bool  // NSCC rc
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
	if t, ok := c.wnd.(ackCCTaker); ok {
		t.OnAckCC(now, cs, nscc.AckCCState{RcvCwndPend: s.pend, RestoreCwnd: s.rc})
	} else {
		c.wnd.OnAck(now, cs)
	}
	before := c.state
	c.update(now)
	if c.state == CCCReady && before != CCCReady {
		// The ACK opened a window the transmit loop was blocked on; a
		// CCC already READY has its loop running or timed (a kick is a
		// timerfd write: not one per ACK).
		c.ep.kick()
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
	for i := 0; i < len(c.pdcs); i++ {
		p := c.pdcs[i]
		k, due := p.timers(now, out[n:])
		n += k
		next = min(next, due)
		if p.closed {
			i-- // free took it out of c.pdcs
		}
	}
	windowFull, portFull := false, false
	for sent := 0; n < len(out) && sent < burst; sent++ {
		p := c.pick(now)
		if p == nil {
			break
		}
		if !c.canSend(ep.cfg.MTU) {
			windowFull = true // an ACK kicks the loop
			break
		}
		if port != nil && !port.Ready() {
			portFull = true
			break
		}
		size := p.fill(now, &out[n])
		if size == 0 {
			break
		}
		n++
		c.inFlight += size
		if port != nil {
			port.Spend(size + ethernetLen)
		}
	}
	c.update(now)
	switch {
	case portFull:
		next = min(next, port.NextWake(now))
	case !windowFull && c.readyPDC(now):
		next = now
	}
	for _, p := range c.pdcs {
		if p.holdUntil > now {
			next = min(next, p.holdUntil)
		}
	}
	if len(c.pdcs) == 0 {
		ep.cccs.release(now, c)
	}
	return n, next
}

// pick returns the next PDC with something to send, round robin.
func (c *ccc) pick(now time.Duration) *initiator {
	for range c.pdcs {
		p := c.pdcs[c.rr%len(c.pdcs)]
		c.rr++
		if p.ready(now) {
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
		out = append(out, ci)
	}
	return out
}
