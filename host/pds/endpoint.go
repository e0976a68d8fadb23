package pds

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
)

// Header sizes around the PDS header.
const (
	ipv4UDPLen  = 20 + 8
	ethernetLen = 14
	ecnMask     = 0x3
	ecnECT0     = 0x2
	ecnCE       = 0x3
	// ctrlDSCP is the class of ACKs, NACKs and control packets (the
	// lab's CNP class: not held behind data).
	ctrlDSCP = 48
)

// ipBytes is the IP packet size of a UDP payload of n bytes.
func ipBytes(n int) int { return n + ipv4UDPLen }

// maxDatagram is the largest UDP payload the endpoint builds or reads.
const maxDatagram = maxMTU

// Endpoint is a UET fabric endpoint (FEP) on one packet connection: the
// PDS Manager (PDC lookup and allocation, SYN establishment, RUD delivery,
// close), the CCC Manager and NSCC, as one transport on the engine.
type Endpoint struct {
	// neighborWarned: a failed pktio.NeighborResolver call was logged.
	// Guarded by mu.
	neighborWarned bool
	cfg            Config
	eng            *engine.Engine
	wire           *pktio.DelayConn // Config.Wires'; nil without
	clock          engine.Clock
	log            *slog.Logger
	local          netip.AddrPort
	port           uint16 // the peers' UET port: the conn's own
	dataTOS        uint8
	ctrlTOS        uint8
	verify         bool
	reqLen         int // a data packet's PDS header: RUD_REQ, or RUD_CC_REQ with credit
	// rcccParams are Config.RCCC's: the senders' credit and the pacer's.
	rcccParams rccc.Params

	mu          sync.Mutex
	initiators  map[uint16]*initiator // by spdcid
	byKey       map[PDCKey]*initiator // open (not closing) PDCs
	targets     map[targetKey]*target
	targetsByID map[uint16]*target
	nextID      uint16
	cccs        cccManager
	rxcccs      map[CCCKey]*rxCCC
	owed        []*target // ACKs owed at the end of the batch
	busyCCCs    int       // sender CCCs ACTIVE or READY
	// pacer is RCCC's credit pacer of this receiving endpoint, keyed by
	// the receiver CCC; grants is Advance's reused output.
	pacer       *rccc.Pacer[CCCKey]
	grants      []rccc.Grant[CCCKey]
	ctr         Counters
	nacksRx     map[uet.NackCode]uint64
	nacksTx     map[uet.NackCode]uint64
	transitions [numCCCStates][numCCCStates]uint64
	closed      bool
	house       *housekeeping
	// The engine's handles of the housekeeping and credit pacer flows.
	houseFlow, pacerFlow *engine.FlowHandle
	// houseNext is when housekeeping next runs (its Fill's answer), under
	// mu: a new target or receiver CCC wakes it only when nothing is
	// scheduled, so that thousands of SYNs do not each scan every target.
	houseNext time.Duration
}

// New starts an endpoint on cfg.Conn, which it owns from now on: Close
// stops the endpoint and closes the conn, and so does an error.
func New(cfg Config) (*Endpoint, error) {
	ep, err := newEndpoint(cfg)
	if err != nil {
		if cfg.Conn != nil {
			_ = cfg.Conn.Close()
		}
		return nil, err
	}
	ep.eng.Start()
	return ep, nil
}

// Open opens a UET host: its port, a pktio.EntropyConn on UDP 4793 of
// addr (port 0 means 4793) with opts, in the calling thread's network
// namespace, and an endpoint on it (cfg.Conn is this port). A
// *PortError is the port's.
func Open(addr netip.AddrPort, opts pktio.RoCEOptions, cfg Config) (*Endpoint, error) {
	if addr.Port() == 0 {
		addr = netip.AddrPortFrom(addr.Addr(), uet.Port)
	}
	if opts.BatchSize == 0 {
		// The conn's batches are the engine's (Config.BatchSize).
		opts.BatchSize = cfg.withDefaults().BatchSize
	}
	conn, err := pktio.ListenEntropy(addr, opts)
	if err != nil {
		return nil, &PortError{Addr: addr, Err: err}
	}
	cfg.Conn = conn
	return New(cfg)
}

// PortError is the UET port that did not open.
type PortError struct {
	Addr netip.AddrPort
	Err  error
}

func (e *PortError) Error() string { return fmt.Sprintf("UET port %s: %v", e.Addr, e.Err) }

func (e *PortError) Unwrap() error { return e.Err }

func newEndpoint(cfg Config) (*Endpoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.NewWindow == nil {
		// The lab's round trip is the hosts' scheduling more than the
		// wire (nscc.LabParams).
		p := cfg.nsccParams()
		cfg.NewWindow = func(now time.Duration) cc.WindowController { return nscc.New(p, now) }
	}
	ep := &Endpoint{
		cfg:         cfg,
		log:         cfg.Logger,
		local:       cfg.Conn.LocalAddr(),
		port:        cfg.Conn.LocalAddr().Port(),
		dataTOS:     cfg.DSCP<<2 | ecnECT0,
		ctrlTOS:     ctrlDSCP<<2 | ecnECT0,
		verify:      cfg.Verify,
		reqLen:      uet.RequestLen,
		rcccParams:  cfg.rcccParams(),
		initiators:  make(map[uint16]*initiator),
		byKey:       make(map[PDCKey]*initiator),
		targets:     make(map[targetKey]*target),
		targetsByID: make(map[uint16]*target),
		rxcccs:      make(map[CCCKey]*rxCCC),
		cccs:        cccManager{byKey: make(map[CCCKey]*ccc)},
	}
	if cfg.CC.credit() {
		ep.reqLen = uet.RequestCCLen
	}
	ep.ctr.Transitions = make(map[string]uint64)
	// PDC IDs start at a random point, unless given: a restarted
	// endpoint does not reuse the IDs its peers still hold state for.
	ep.nextID = uint16(randomPSN())
	if cfg.FirstPDCID != 0 {
		ep.nextID = cfg.FirstPDCID - 1 // allocID counts up first
	}
	ep.nacksRx = make(map[uet.NackCode]uint64)
	ep.nacksTx = make(map[uet.NackCode]uint64)
	if len(cfg.Wires) > 0 {
		w, err := engine.NewTimerWaker()
		if err != nil {
			return nil, fmt.Errorf("pds: wires: %w", err)
		}
		dc, err := pktio.NewDelayConn(cfg.Conn, cfg.Wires, maxDatagram, cfg.BatchSize, 0, w)
		if err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("pds: %w", err)
		}
		cfg.Conn = dc
		ep.cfg.Conn = dc
		ep.wire = dc
	}
	eng, err := engine.New(engine.Config{Conn: cfg.Conn, Clock: cfg.Clock, Waker: cfg.Waker, Logger: cfg.Logger,
		BatchSize: cfg.BatchSize, MaxPacket: maxDatagram, PortRate: cfg.LinkRate, PortBurst: 4 * (cfg.MTU + ethernetLen), PortCatchUp: cfg.PortCatchUp, Held: cfg.Held, HostQueue: cfg.HostQueue}, (*endpointRx)(ep))
	if err != nil {
		if ep.wire != nil {
			_ = ep.wire.Close() // its reader and timerfd; New closes the conn beneath
		}
		return nil, fmt.Errorf("pds: %w", err)
	}
	ep.eng = eng
	ep.clock = eng.Clock()
	ep.house = &housekeeping{ep: ep}
	ep.houseFlow = eng.AddFlow(ep.house)
	ep.pacer = rccc.NewPacer[CCCKey](ep.rcccParams, ep.clock.Now())
	ep.pacerFlow = eng.AddFlow((*pacerFlow)(ep))
	return ep, nil
}

// LocalAddr is the endpoint's address and UET port.
func (ep *Endpoint) LocalAddr() netip.AddrPort { return ep.local }

// Clock is the endpoint's clock.
func (ep *Endpoint) Clock() engine.Clock { return ep.clock }

// kick wakes the transmit loop for the CCC alone.
func (c *ccc) kick() {
	if c.flow != nil { // nil while the CCC is being made
		c.flow.Kick()
	}
}

// Close stops the loops and closes the conn; unfinished Senders end in
// error.
func (ep *Endpoint) Close() error {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return nil
	}
	ep.closed = true
	ep.mu.Unlock()
	err := ep.eng.Close()
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for _, p := range ep.initiators {
		for _, s := range p.senders {
			s.finish(errors.New("pds: endpoint closed"))
		}
	}
	return err
}

// Start sends s to the FEP dst (its address; the port is UET's) on the
// PDC of {s.JobID, dst, the endpoint's traffic class, RUD}, opening it
// (and the CCC of dst) on first use.
func (ep *Endpoint) Start(dst netip.Addr, s Stream) (*Sender, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	dst = dst.Unmap()
	if !dst.IsValid() || dst.IsUnspecified() || dst.Is4() != ep.local.Addr().Unmap().Is4() && ep.local.Addr().IsValid() && !ep.local.Addr().IsUnspecified() {
		return nil, fmt.Errorf("pds: destination %v: must be a unicast address of the endpoint's family", dst)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return nil, errors.New("pds: endpoint closed")
	}
	now := ep.clock.Now()
	key := PDCKey{JobID: s.JobID, Dst: dst, TC: ep.cfg.DSCP, Mode: ModeRUD}
	p := ep.byKey[key]
	if p != nil && (p.closing || p.err != nil) {
		// Closing on idle: a new PDC takes the new work.
		delete(ep.byKey, key)
		p = nil
	}
	if p == nil {
		var err error
		if p, err = ep.newInitiator(now, key); err != nil {
			return nil, err
		}
	}
	snd := &Sender{pdc: p, s: s, done: make(chan struct{})}
	p.senders = append(p.senders, snd)
	p.touch()
	p.lastActive = now
	p.ccc.update(now)
	p.ccc.kick()
	return snd, nil
}

// newInitiator is the PDS Manager's allocation of a PDC on first use: its
// CCC from the CCC Manager (created IDLE, initialised with NSCC), a PDC
// ID, a random start PSN, an entropy value.
func (ep *Endpoint) newInitiator(now time.Duration, key PDCKey) (*initiator, error) {
	if ep.pdcCount() >= ep.cfg.MaxPDCs {
		ep.ctr.PDCRefused++
		return nil, fmt.Errorf("pds: max_pdcs %d reached", ep.cfg.MaxPDCs)
	}
	ck := CCCKey{Src: ep.local.Addr(), Dst: key.Dst, TC: key.TC}
	if ep.cccs.byKey[ck] == nil && ep.cccCount() >= ep.cfg.MaxCCCs {
		ep.ctr.CCCRefused++
		return nil, fmt.Errorf("pds: max_cccs %d reached", ep.cfg.MaxCCCs)
	}
	id, ok := ep.allocID()
	if !ok {
		return nil, fmt.Errorf("pds: no free PDC ID")
	}
	c, _ := ep.cccs.get(ep, now, ck)
	p := &initiator{ep: ep, key: key, id: id, ccc: c, start: randomPSN(), ring: make([]txRec, initialRing),
		ev: entropy(id), lastActive: now}
	if ep.cfg.NewBalancer != nil {
		p.lb = ep.cfg.NewBalancer(id)
	}
	ep.initiators[id] = p
	ep.byKey[key] = p
	c.pdcs = append(c.pdcs, p)
	p.touch()
	ep.ctr.PDCsOpened++
	return p, nil
}

// entropy is a PDC's entropy value, the UDP source port of its packets:
// one per PDC in the dynamic range (part 2 spreads a PDC over many).
func entropy(id uint16) uint16 { return 0xC000 | uint16(uint32(id)*0x9E37)&0x3FFF }

func (ep *Endpoint) pdcCount() int { return len(ep.initiators) + len(ep.targets) }
func (ep *Endpoint) cccCount() int { return len(ep.cccs.byKey) + len(ep.rxcccs) }

// allocID returns a PDC ID no live PDC of this endpoint has (1..65535).
func (ep *Endpoint) allocID() (uint16, bool) {
	for range 1 << 16 {
		ep.nextID++
		if ep.nextID == 0 {
			continue
		}
		if ep.initiators[ep.nextID] == nil && ep.targetsByID[ep.nextID] == nil {
			return ep.nextID, true
		}
	}
	return 0, false
}

func (ep *Endpoint) cccCreated(now time.Duration, c *ccc) {
	ep.ctr.CCCsCreated++
	ep.record(CCCTransition{At: now, CCC: c.serial, Key: c.key, From: cccFreed, To: CCCIdle, PDCs: len(c.pdcs)})
}

// cccTransition counts and traces a transition. The trace stamps it with
// the clock when the state changed (an ACK's event time is its arrival,
// earlier than a transmit pass that ran meanwhile).
func (ep *Endpoint) cccTransition(_ time.Duration, c *ccc, from, to CCCState) {
	now := ep.clock.Now()
	ep.transitions[from][to]++
	ep.ctr.Transitions[from.String()+"->"+to.String()]++
	if to == cccFreed {
		ep.ctr.CCCsFreed++
	}
	ep.record(CCCTransition{At: now, CCC: c.serial, Key: c.key, From: from, To: to, PDCs: len(c.pdcs)})
}

func (ep *Endpoint) record(t CCCTransition) {
	if ep.cfg.Trace != nil {
		ep.cfg.Trace(t)
	}
}

// endpointRx is the endpoint as the engine's receive loop sees it.
type endpointRx Endpoint

// Receive implements engine.Receiver: one UET datagram.
func (r *endpointRx) Receive(at time.Duration, m *pktio.Message, out *engine.Replies) {
	ep := (*Endpoint)(r)
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.ctr.RxPackets++
	ep.ctr.RxBytes += uint64(m.N)
	if m.Truncated {
		ep.ctr.Malformed++
		return
	}
	var h uet.Header
	rest, err := uet.Parse(m.Buffers[0][:m.N], &h)
	if err != nil {
		ep.ctr.Malformed++
		return
	}
	switch {
	case h.Type.IsRequest():
		if h.Type != uet.TypeRUDReq && h.Type != uet.TypeRUDCCReq {
			ep.ctr.Unsupported++ // ROD and the CC forms: not served here
			ep.sendNack(out, m, uet.NackPDCModeMismatch, h.Request.PSN, 0, h.Request.SPDCID, 0)
			return
		}
		ep.onRequest(at, m, &h.Request, rest, out)
	case h.Type == uet.TypeAck || h.Type == uet.TypeAckCC:
		p := ep.initiators[h.Ack.DPDCID]
		if p == nil || p.closed || p.key.Dst != m.Addr.Addr() {
			ep.ctr.UnknownPDC++
			return
		}
		p.onAck(at, &h.Ack)
	case h.Type == uet.TypeNack:
		p := ep.initiators[h.Nack.DPDCID]
		if p == nil || p.closed || p.key.Dst != m.Addr.Addr() {
			ep.ctr.UnknownPDC++
			return
		}
		p.onNack(at, &h.Nack)
	case h.Type == uet.TypeCtrl && h.Ctrl.CtrlType == uet.CtrlCloseCmd:
		ep.onClose(at, m, &h.Ctrl, out)
	case h.Type == uet.TypeCtrl && h.Ctrl.CtrlType == uet.CtrlAckReq:
		ep.onProbe(at, m, &h.Ctrl, out)
	case h.Type == uet.TypeCtrl && h.Ctrl.CtrlType == uet.CtrlCredit:
		ep.onCreditGrant(at, m, &h.Ctrl)
	case h.Type == uet.TypeCtrl && h.Ctrl.CtrlType == uet.CtrlCreditReq:
		ep.onCreditRequest(at, m, &h.Ctrl, out)
	default:
		ep.ctr.Unsupported++
	}
}

// EndBatch implements engine.Receiver: the coalesced ACKs of the batch.
func (r *endpointRx) EndBatch(out *engine.Replies) {
	ep := (*Endpoint)(r)
	ep.mu.Lock()
	defer ep.mu.Unlock()
	now := ep.clock.Now()
	for _, t := range ep.owed {
		if t.ackOwed {
			ep.sendAck(now, t, out, uet.AckReqNone)
		}
	}
	ep.owed = ep.owed[:0]
}

// housekeeping is a flow that sends nothing: it frees target PDCs the
// source stopped talking to (a lost CLOSE_CMD, a source gone) after
// targetExpiry: twice the idle timeout, or longer with a message in
// progress or many PDCs from the same source.
type housekeeping struct{ ep *Endpoint }

// houseQuantum divides the idle timeout into housekeeping's least wait:
// it scans every target, so it wakes at most houseQuantum times per idle
// period, not at each of thousands of targets' deadlines.
const houseQuantum = 8

// Fill implements engine.Flow.
func (h *housekeeping) Fill(now time.Duration, _ []engine.Packet, _ *engine.PortLimit) (int, time.Duration) {
	ep := h.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	idle := 2 * ep.cfg.IdleTimeout
	next := engine.Never
	for _, c := range ep.rxcccs {
		// A receiver CCC a CREDIT_REQ made and no PDC followed.
		if c.pdcs == 0 {
			if now >= c.lastActive+idle {
				ep.freeRxCCC(c)
				continue
			}
			next = min(next, c.lastActive+idle)
		}
	}
	// A target with a message in progress waits for its source as long as
	// the source retries before it gives the PDC up: freed sooner, the
	// rest of the message would open a new PDC and neither would count the
	// message received (TestManyPDCsLossy).
	for _, t := range ep.targets {
		expiry := ep.targetExpiry(t)
		if len(t.msgs) > 0 {
			// The message's end does not wake housekeeping: look again.
			next = min(next, now+idle)
		}
		if now >= t.lastActive+expiry {
			if t.ackOwed {
				ep.dropOwed(t)
			}
			ep.freeTarget(t)
			ep.ctr.TargetPDCsExpired++
			continue
		}
		next = min(next, t.lastActive+expiry)
	}
	if next != engine.Never {
		next = max(next, now+ep.cfg.IdleTimeout/houseQuantum)
	}
	ep.houseNext = next
	return 0, next
}

// wakeHousekeeping has housekeeping look at a new target or receiver CCC,
// unless it will anyway: a scheduled scan frees the newcomer then, at
// most its own expiry late. Precondition: ep.mu is held.
func (ep *Endpoint) wakeHousekeeping() {
	if ep.houseNext == engine.Never {
		ep.houseNext = 0 // once: the Fill sets it
		ep.houseFlow.Kick()
	}
}

// resolveAgain is called on a PDC's timeout: if the conn sends through the
// kernel's neighbour table (pktio.NeighborResolver) and holds dst's
// link-layer address unresolved, the resolution restarts now, not at the
// kernel's next ARP retransmit up to a second away, past the PDC's
// retries (host/pktio's neighbor_linux.go: the linkwatch race after a link
// flap). Precondition: ep.mu is held.
func (ep *Endpoint) resolveAgain(dst netip.Addr) {
	nr, ok := ep.cfg.Conn.(pktio.NeighborResolver)
	if !ok {
		return
	}
	did, err := nr.ResolveAgain(dst)
	switch {
	case err != nil && !ep.neighborWarned:
		ep.neighborWarned = true
		ep.log.Warn("cannot restart the resolution of a silent peer's link-layer address", "peer", dst, "err", err)
	case did:
		ep.ctr.NeighborResolves++
	}
}
