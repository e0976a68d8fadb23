// Package agent is the host side of a RoCEv2 fabric: reliable-connected
// queue pairs over UDP 4791 with DCQCN, as a NIC runs them: the RoCEv2
// transport on the engine (host/engine). One Agent owns one engine, whose
// two goroutines (a receive loop and a paced transmit loop) serve any
// number of QPs; each QP is one of the engine's flows, its DCQCN reaction
// point a cc.RateController.
//
// The protocol core depends only on pktio.Conn, a Clock and a Waker: unit
// tests run two agents over an in-memory pipe, in fake time
// (engine.FakeClock), netns tests and the tools over pktio.RoCEConn.
//
// On the wire (roce-wire.md): every packet, data, ACK, NAK or CNP, goes to
// the peer's RoCEv2 port (4791), from the UDP source port of the QP that
// sends it (SourcePort, as rxe derives it), so each QP is one ECMP flow; a
// packet is accepted from any source port, and belongs to the QP its BTH
// DestQP names if it comes from that QP's peer IP address. On a
// pktio.SteeredConn the agent numbers its QPs from the conn's QPN block, so
// the QPNs of all agents of a host are distinct and the host's steering
// hands each packet to the agent that owns its DestQP.
//
// A PPFC notification (seed 003) from a switch pauses the requesters of
// the QPs whose peer is its congested destination (ppfc.go).
package agent

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/npbpf"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/rpbpf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// QPNs start above the special QP0/QP1 (IBTA 3.5.10: SMI and GSI).
const firstQPN = 0x11

// Source ports (rxe: drivers/infiniband/sw/rxe/rxe_qp.c, rxe_qp_init_req):
// RXE_ROCE_V2_SPORT 0xC000 plus a 14-bit hash of the QPN, the dynamic
// port range 0xC000..0xFFFF.
const (
	sourcePortBase = 0xC000
	sourcePortBits = 14
	// goldenRatio32 is include/linux/hash.h's GOLDEN_RATIO_32: hash_32(v,
	// bits) is (v * GOLDEN_RATIO_32) >> (32 - bits).
	goldenRatio32 = 0x61C88647
)

// SourcePort is the UDP source port of QP qpn's packets, rxe's
// 0xC000 + hash_32(qpn, 14): one per QP, spread over 0xC000..0xFFFF.
func SourcePort(qpn uint32) uint16 {
	return sourcePortBase + uint16((qpn*goldenRatio32)>>(32-sourcePortBits))
}

// maxPacket holds the largest packet: BTH, RETH, 4096 bytes, ICRC.
const maxPacket = roce.BTHLen + roce.RETHLen + roce.ImmDtLen + 4096 + roce.ICRCLen

// Config configures an Agent.
type Config struct {
	// Conn is the agent's port: a pktio.RoCEConn (or a pipe in tests).
	// Required. On a pktio.SteeredConn the agent's QPNs come from the
	// conn's block; on a conn with a fixed source port (pktio.UDPConn)
	// every QP sends from that port instead of its own.
	Conn pktio.Conn
	// Clock is the time the DCQCN state machines see. Optional: monotonic.
	Clock engine.Clock
	// KernelNs reads the kernel's clock, the one the offloads stamp their
	// events with (bpf_ktime_get_ns), to age them onto Clock. Optional:
	// CLOCK_MONOTONIC; tests give one that stands still with Clock.
	KernelNs func() uint64
	// Waker puts the transmit loop to sleep. Optional: the engine's
	// (a timerfd; with an engine.FakeClock, the clock's own).
	Waker engine.Waker
	// Logger gets QP errors. Optional: slog.Default().
	Logger *slog.Logger
	// Held gets the time the agent's QPs were held (engine.Config.Held;
	// host/hostlost). Optional: not measured.
	Held *hostlost.Log
	// HostQueue bounds the host queue in front of the switch port
	// (engine.Config.HostQueue; host/linkq). Optional: not bounded.
	HostQueue engine.HostQueue
	// BatchSize is the most packets per send/receive system call.
	// Optional: 0 means engine.DefaultBatchSize(PortRate).
	BatchSize int
	// PortRate is the NIC's line rate, shared by all QPs: whatever their
	// Rc, together they never send faster (wire bytes, as the pacer
	// counts). Optional: 0 means no port limit.
	PortRate units.Rate
	// SkipICRCCheck accepts packets whatever their ICRC. The check
	// reconstructs the IP header with IP ID 0 (what the agent sends, and
	// Linux from a DF socket), so a peer that sends other IDs needs it off.
	SkipICRCCheck bool
	// NPOffload is the notification point in the kernel (host/npbpf): a
	// QP with QPConfig.NP is added to it when it connects, and the
	// kernel, not this agent, answers its CE packets with CNPs and counts
	// np_ecn_marked_roce_packets and np_cnp_sent (QP.Counters reads them
	// back). Optional: nil runs the NP in the agent.
	NPOffload npbpf.NPOffload
	// RPOffload is the reaction point's CNP intake in the kernel
	// (host/rpbpf): a DCQCN QP is added to it when it connects, and its
	// RP is cut from the CNPs the kernel counted, at their arrival on the
	// device, before each pacing decision, instead of when this agent's
	// receive loop reads them (which then only counts them,
	// rp_cnp_agent_read). Optional: nil runs the RP on the CNPs this
	// agent receives.
	RPOffload rpbpf.Offload
	// Trace, if set, sees every CE arrival, CNP sent and CNP handled, from
	// the agent's loops (keep it short). Benchmarks time the DCQCN loop
	// with it.
	Trace func(Event)
	// PPFCSources are the switches allowed to pause this agent's QPs with
	// PPFC notifications (seed 003); a notification from elsewhere is
	// counted (ppfc_ignored_source) and ignored. Optional: empty accepts
	// them from any source.
	PPFCSources []netip.Prefix
	// PPFCMaxPause bounds every pause a PPFC stop starts or extends; a stop
	// whose Pause Duration is 0 ("until resume") pauses this long, so a
	// lost resume cannot stall a QP forever. Optional: 0 means
	// roce.MaxPPFCPause (65.535 ms), the longest the field carries.
	PPFCMaxPause time.Duration
	// PPFCWatchdog ends a pause storm: a QP that stop after stop (or hold)
	// has been paused without a break for this long sends again, and
	// obeys no stop or hold for as long again (ppfc_watchdog_trips,
	// ppfc_watchdog_ignored); resumes, alarms and DCQCN still act. A
	// switch's PFC watchdog does the same for a PFC storm (SONiC pfcwd:
	// detection and restoration 200 ms by default). Optional: 0 means
	// max(DefaultPPFCWatchdog, 2 × PPFCMaxPause); negative turns it off.
	PPFCWatchdog time.Duration
}

// DefaultPPFCWatchdog is Config.PPFCWatchdog's default, pfcwd's.
const DefaultPPFCWatchdog = 200 * time.Millisecond

// MaxPPFCMaxPause bounds Config.PPFCMaxPause: a requester paused longer
// than a second is a fabric that needs fixing, not a pause.
const MaxPPFCMaxPause = time.Second

// MaxPPFCWatchdog bounds Config.PPFCWatchdog.
const MaxPPFCWatchdog = 10 * time.Second

// EventKind says what an Event records.
type EventKind uint8

const (
	EventCEReceived EventKind = iota + 1 // NP: a CE-marked packet arrived
	EventCNPSent                         // NP: a CNP left
	EventCNPHandled                      // RP: a CNP arrived (RcAfter < RcBefore if it cut)
)

// Event is one DCQCN event at one QP.
type Event struct {
	Kind EventKind
	QPN  uint32
	// At is when it happened, on the agent's Clock: for CEReceived the
	// packet's arrival (its kernel timestamp where the conn gives one), for
	// CNPSent when the CNP was handed to the conn, for CNPHandled when the
	// RP applied it (Arrived: when the CNP arrived). With the RP's intake
	// in the kernel (Config.RPOffload), a CNPHandled's At and Arrived are
	// the CNP's arrival on the device, from when Rc is cut for every
	// pacing decision, and Synced is when the QP read it from the kernel.
	At, Arrived       time.Duration
	Synced            time.Duration
	RcBefore, RcAfter units.Rate
	// Kernel: the RP took this CNP from the kernel's count.
	Kernel bool
}

// Agent terminates RoCEv2 RC traffic on one packet connection.
type Agent struct {
	cfg   Config
	conn  pktio.Conn
	clock engine.Clock
	log   *slog.Logger
	eng   *engine.Engine
	rx    agentRx

	// QPNs: qpnFirst..qpnLast, the conn's block on a SteeredConn.
	qpnFirst, qpnLast uint32
	// fixedPort: the conn sends every packet from its own port, so QPs
	// have no source port of their own.
	fixedPort bool
	// recvPort is the port packets arrive on, the destination port of
	// their ICRC.
	recvPort uint16

	mu struct {
		sync.Mutex
		free   []uint32 // QPNs to reuse
		next   uint32
		closed bool
	}
	qps atomic.Pointer[qpTable] // index qpn-qpnFirst; written under mu

	drops agentDrops
	ppfc  agentPPFC
	// neighborWarned: a failed pktio.NeighborResolver call was logged.
	neighborWarned atomic.Bool
}

// New starts an agent on cfg.Conn. Close stops it (and closes the Conn).
func New(cfg Config) (*Agent, error) {
	a, err := newAgent(cfg)
	if err != nil {
		return nil, err
	}
	a.eng.Start()
	return a, nil
}

// newAgent is New without the loops: tests run receive and fillLocked
// themselves, on a clock of their own.
func newAgent(cfg Config) (*Agent, error) {
	if cfg.Conn == nil {
		return nil, errors.New("agent: Config.Conn is required")
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = engine.DefaultBatchSize(cfg.PortRate)
	}
	if cfg.BatchSize < 1 || cfg.BatchSize > engine.MaxBatchSize {
		return nil, fmt.Errorf("agent: batch size %d: must be 1..%d", cfg.BatchSize, engine.MaxBatchSize)
	}
	if cfg.Clock == nil {
		cfg.Clock = engine.NewMonotonicClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for i, p := range cfg.PPFCSources {
		switch {
		case !p.IsValid():
			return nil, fmt.Errorf("agent: ppfc_sources[%d] %v: not a valid prefix", i, p)
		case p.Addr().Is4In6():
			// Sources are compared unmapped, as 4-byte addresses.
			return nil, fmt.Errorf("agent: ppfc_sources[%d] %v: IPv4-mapped, never matches: write the IPv4 prefix", i, p)
		}
	}
	// The host's steering drops notifications from elsewhere before they
	// reach the socket (pktio.RoCEConn): a storm from a non-switch costs
	// no wake-up, copy or ICRC check. The agent checks again.
	if f, ok := cfg.Conn.(interface{ SetPPFCSources([]netip.Prefix) error }); ok {
		if err := f.SetPPFCSources(cfg.PPFCSources); err != nil {
			return nil, fmt.Errorf("agent: ppfc_sources: %w", err)
		}
	}
	if cfg.PPFCMaxPause == 0 {
		cfg.PPFCMaxPause = roce.MaxPPFCPause
	}
	if cfg.PPFCMaxPause < time.Microsecond || cfg.PPFCMaxPause > MaxPPFCMaxPause {
		return nil, fmt.Errorf("agent: ppfc_max_pause %v: must be 1us..%v", cfg.PPFCMaxPause, MaxPPFCMaxPause)
	}
	if cfg.PPFCWatchdog == 0 {
		cfg.PPFCWatchdog = max(DefaultPPFCWatchdog, 2*cfg.PPFCMaxPause)
	}
	if cfg.PPFCWatchdog > 0 && (cfg.PPFCWatchdog < cfg.PPFCMaxPause || cfg.PPFCWatchdog > MaxPPFCWatchdog) {
		return nil, fmt.Errorf("agent: ppfc_watchdog %v: must be ppfc_max_pause (%v)..%v, or negative (off)", cfg.PPFCWatchdog, cfg.PPFCMaxPause, MaxPPFCWatchdog)
	}
	if cfg.KernelNs == nil {
		cfg.KernelNs = monotonicNs
	}
	a := &Agent{cfg: cfg, conn: cfg.Conn, clock: cfg.Clock, log: cfg.Logger,
		qpnFirst: firstQPN, qpnLast: roce.PSNMask, // QPNs are 24 bits, like PSNs
		fixedPort: pktio.FixedSourcePort(cfg.Conn),
		recvPort:  cfg.Conn.LocalAddr().Port(),
	}
	if sc, ok := cfg.Conn.(pktio.SteeredConn); ok {
		first, last := sc.QPNBlock()
		a.qpnFirst, a.qpnLast = max(first, firstQPN), min(last, roce.PSNMask)
		if a.qpnFirst > a.qpnLast {
			return nil, fmt.Errorf("agent: the conn's QPN block %#x..%#x holds no usable QPN", first, last)
		}
	}
	a.rx.a = a
	eng, err := engine.New(engine.Config{Conn: cfg.Conn, Clock: cfg.Clock, Waker: cfg.Waker, Logger: cfg.Logger,
		BatchSize: cfg.BatchSize, MaxPacket: maxPacket, PortRate: cfg.PortRate, Held: cfg.Held, HostQueue: cfg.HostQueue}, &a.rx)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.eng = eng
	a.mu.next = a.qpnFirst
	a.qps.Store(&qpTable{})
	return a, nil
}

// qpTable finds a QP by number without a lock: the receive loop's lookup
// of every packet. It grows by chunks, so that setting a QP copies at most
// the chunks' list, not every QP: a copy of the whole table on each
// create and destroy made 10,000 QPs' setup and teardown quadratic (issue
// 28's scale rows: 9 % of the client's CPU).
type qpTable struct {
	chunks []*[qpChunk]atomic.Pointer[QP]
}

const qpChunk = 256

// get is the QP at index i, or nil.
func (t *qpTable) get(i int) *QP {
	if i < 0 || i/qpChunk >= len(t.chunks) {
		return nil
	}
	return t.chunks[i/qpChunk][i%qpChunk].Load()
}

// setQP puts qp (nil: none) at index i (a.mu held).
func (a *Agent) setQP(i int, qp *QP) {
	t := a.qps.Load()
	if c := i / qpChunk; c >= len(t.chunks) {
		nt := &qpTable{chunks: slices.Clone(t.chunks)}
		for len(nt.chunks) <= c {
			nt.chunks = append(nt.chunks, new([qpChunk]atomic.Pointer[QP]))
		}
		a.qps.Store(nt)
		t = nt
	}
	t.chunks[i/qpChunk][i%qpChunk].Store(qp)
}

// liveQPs yields every QP in the table.
func (a *Agent) liveQPs() iter.Seq[*QP] {
	return func(yield func(*QP) bool) {
		for _, c := range a.qps.Load().chunks {
			for i := range c {
				if qp := c[i].Load(); qp != nil && !yield(qp) {
					return
				}
			}
		}
	}
}

// Clock returns the agent's clock.
func (a *Agent) Clock() engine.Clock { return a.clock }

// LocalAddr is the packet connection's address.
func (a *Agent) LocalAddr() netip.AddrPort { return a.conn.LocalAddr() }

// Close stops both loops, closes the connection and puts every QP in error.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.mu.closed {
		a.mu.Unlock()
		return nil
	}
	a.mu.closed = true
	a.mu.Unlock()
	err := a.eng.Close()
	for qp := range a.liveQPs() {
		qp.mu.Lock()
		if qp.mu.err == nil {
			qp.mu.err = fmt.Errorf("agent: qp %#x: %w: agent closed", qp.qpn, ErrQPError)
		}
		qp.doneOnce.Do(func() { close(qp.done) })
		qp.mu.Unlock()
	}
	return err
}

// kick wakes the transmit loop for every QP (a PPFC resume may concern
// any of them).
func (a *Agent) kick() { a.eng.Kick() }

// kick wakes the transmit loop for the QP alone.
func (qp *QP) kick() { qp.flow.Kick() }

// CreateQP creates a queue pair with its registered buffer; Connect it to
// a peer before starting a stream.
func (a *Agent) CreateQP(cfg QPConfig) (*QP, error) {
	if cfg.BufferBytes == 0 {
		cfg.BufferBytes = 1 << 20
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	qp := &QP{
		agent:   a,
		cfg:     cfg,
		dataTOS: cfg.DSCP<<2 | ecnECT0,
		cnpTOS:  cfg.CNPDSCP<<2 | ecnECT0,
		buf:     make([]byte, cfg.BufferBytes),
		done:    make(chan struct{}),
	}
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	qp.rkey = binary.LittleEndian.Uint32(rnd[0:])
	// A virtual address that looks like one, page aligned.
	qp.va = 0x7f0000000000 | uint64(binary.LittleEndian.Uint32(rnd[4:]))<<12
	qp.mu.req.initPSN = cfg.PSN
	if cfg.PSN == 0 {
		qp.mu.req.initPSN = binary.LittleEndian.Uint32(rnd[8:]) & roce.PSNMask
	}
	if cfg.NP {
		qp.mu.resp.np = dcqcn.NewNP(cfg.CNPPeriod)
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.closed {
		return nil, errors.New("agent: closed")
	}
	if k := len(a.mu.free); k > 0 {
		qp.qpn = a.mu.free[k-1]
		a.mu.free = a.mu.free[:k-1]
	} else {
		if a.mu.next > a.qpnLast {
			return nil, fmt.Errorf("agent: out of QP numbers (all %d of %#x..%#x in use)", a.qpnLast-a.qpnFirst+1, a.qpnFirst, a.qpnLast)
		}
		qp.qpn = a.mu.next
		a.mu.next++
	}
	// In the round robin before the receive loop can find it: a packet
	// for it may kick it.
	qp.flow = a.eng.AddFlow(&qpFlow{qp: qp})
	a.setQP(int(qp.qpn-a.qpnFirst), qp)
	return qp, nil
}

// Destroy removes the QP; its counters stay in the agent's totals.
func (qp *QP) Destroy() {
	a := qp.agent
	qp.mu.Lock()
	if qp.mu.destroyed {
		qp.mu.Unlock()
		return
	}
	qp.mu.destroyed = true
	offloaded := qp.mu.npOffloaded
	if qp.mu.rpOffloaded {
		// The RP catches up on what the kernel counted; then it forgets
		// the QP.
		qp.syncKernelCNPsLocked()
		qp.mu.req.kCNPs = nil
		qp.mu.rpOffloaded = false
		if err := a.cfg.RPOffload.RemoveQP(qp.qpn); err != nil {
			a.log.Warn("kernel rp: remove qp", "qpn", qp.qpn, "err", err)
		}
	}
	qp.mu.Unlock()
	var npc *npbpf.NPCounters
	if offloaded {
		// The kernel's counters join the totals; then it forgets the QP.
		if c, err := a.cfg.NPOffload.Counters(qp.qpn); err == nil {
			npc = &c
		}
		if err := a.cfg.NPOffload.RemoveQP(qp.qpn); err != nil {
			a.log.Warn("kernel np: remove qp", "qpn", qp.qpn, "err", err)
		}
	}
	qp.mu.Lock()
	ctr := qp.mu.ctr
	if npc != nil {
		ctr.NPECNMarkedRoCEPackets, ctr.NPCNPSent = npc.NPECNMarkedRoCEPackets, npc.NPCNPSent
	}
	if qp.mu.err == nil {
		qp.mu.err = fmt.Errorf("agent: qp %#x: %w", qp.qpn, ErrQPDestroyed)
	}
	qp.doneOnce.Do(func() { close(qp.done) })
	qp.mu.Unlock()

	a.eng.RemoveFlow(qp.flow)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drops.gone.Add(&ctr)
	a.setQP(int(qp.qpn-a.qpnFirst), nil)
	a.mu.free = append(a.mu.free, qp.qpn)
}

// QP returns the live QP with this number, or nil.
func (a *Agent) QP(qpn uint32) *QP {
	return a.qps.Load().get(int(qpn) - int(a.qpnFirst))
}

// QPs returns the live QPs.
func (a *Agent) QPs() []*QP {
	return slices.Collect(a.liveQPs())
}

// Counters sums every QP's counters (destroyed ones included) and adds the
// agent's own drops.
func (a *Agent) Counters() AgentCounters {
	var c AgentCounters
	a.mu.Lock()
	c.Counters = a.drops.gone
	a.mu.Unlock()
	for _, qp := range a.QPs() {
		qc := qp.Counters()
		c.Add(&qc)
	}
	c.Malformed = a.drops.malformed.Load()
	c.ICRCErrors = a.drops.icrc.Load()
	c.UnknownQP = a.drops.unknownQP.Load()
	c.WrongPeer = a.drops.wrongPeer.Load()
	c.PKeyViolations = a.drops.pkey.Load()
	c.NeighborResolves = a.drops.neighbor.Load()
	c.Unsupported = a.drops.unsupported.Load()
	es := a.eng.Stats()
	c.SendErrors, c.ReplyOverruns = es.SendErrors, es.ReplyOverruns
	c.PPFCReceivedStop = a.ppfc.received[roce.PPFCStop].Load()
	c.PPFCReceivedResume = a.ppfc.received[roce.PPFCResume].Load()
	c.PPFCReceivedAlarm = a.ppfc.received[roce.PPFCAlarm].Load()
	c.PPFCReceivedHold = a.ppfc.received[roce.PPFCHold].Load()
	c.PPFCIgnoredSource = a.ppfc.ignoredSource.Load()
	c.PPFCIgnoredDestination = a.ppfc.ignoredDestination.Load()
	return c
}

// peerAddr is read without the lock: it is set once by Connect, before
// any packet of this QP is built.
func (qp *QP) peerAddr() netip.AddrPort { return qp.mu.peer.Addr }

// sourcePort is the port the QP's packets leave from; read without the
// lock like peerAddr.
func (qp *QP) sourcePort() uint16 { return qp.mu.local.Port() }

// SourcePort is the UDP source port of the QP's packets once it is
// connected (0 before): SourcePort(QPN), or the conn's own port on a conn
// with a fixed one.
func (qp *QP) SourcePort() uint16 {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.mu.local.Port()
}

// localPort is what Connect makes the QP's source port: its own
// (SourcePort), or the conn's when the conn has only one.
func (a *Agent) localPort(qpn uint32) uint16 {
	if a.fixedPort {
		return a.conn.LocalAddr().Port()
	}
	return SourcePort(qpn)
}

func newSlots(n int) ([]txPacket, []pktio.Message) { return engine.NewSlots(n, maxPacket) }

// qpFlow is a QP as the engine's transmit loop sees it.
type qpFlow struct{ qp *QP }

// Fill implements engine.Flow: fillLocked under the QP's lock, each packet
// addressed to the peer from the QP's source port.
func (f *qpFlow) Fill(now time.Duration, out []engine.Packet, port *engine.PortLimit) (int, time.Duration) {
	qp := f.qp
	qp.mu.Lock()
	n, next := qp.fillLocked(now, out, port)
	qp.mu.Unlock()
	for i := range out[:n] {
		out[i].Addr, out[i].SrcPort = qp.peerAddr(), qp.sourcePort()
	}
	return n, next
}

// agentRx is the agent as the engine's receive loop sees it; its fields
// belong to that loop.
type agentRx struct {
	a  *Agent
	h  roce.Header
	rs replies
}

// Receive implements engine.Receiver.
func (r *agentRx) Receive(at time.Duration, m *pktio.Message, out *engine.Replies) {
	r.rs.out = out
	r.a.receive(at, m, &r.h, &r.rs)
}

// EndBatch implements engine.Receiver: the coalesced ACKs of the batch.
func (r *agentRx) EndBatch(out *engine.Replies) {
	r.rs.out = out
	for _, qp := range r.rs.ackQPs {
		qp.mu.Lock()
		qp.flushAckLocked(&r.rs)
		qp.mu.Unlock()
	}
	r.rs.ackQPs = r.rs.ackQPs[:0]
}

// resolveAgain is called on a QP's ACK timeout: if the port sends through
// the kernel's neighbour table (pktio.NeighborResolver) and holds peer's
// link-layer address unresolved, the resolution restarts now rather than
// at the kernel's next ARP retransmit, up to a second away, when the QP
// would have spent its retries (issue 28: a 200 ms link flap killed a
// QP). A NIC's QP holds the peer's MAC address and never waits for it.
func (a *Agent) resolveAgain(peer netip.Addr) {
	nr, ok := a.conn.(pktio.NeighborResolver)
	if !ok {
		return
	}
	did, err := nr.ResolveAgain(peer)
	switch {
	case err != nil:
		if a.neighborWarned.CompareAndSwap(false, true) {
			a.log.Warn("cannot restart the resolution of a silent peer's link-layer address", "peer", peer, "err", err)
		}
	case did:
		a.drops.neighbor.Add(1)
	}
}

// receive checks one datagram and hands it to its QP, or a PPFC
// notification to receivePPFC. A malformed packet is counted and dropped.
func (a *Agent) receive(now time.Duration, m *pktio.Message, h *roce.Header, rs *replies) {
	if m.Truncated {
		a.drops.malformed.Add(1)
		return
	}
	b := m.Buffers[0][:m.N]
	payload, err := roce.Parse(b, h)
	if err != nil {
		a.drops.malformed.Add(1)
		return
	}
	if h.BTH.IsPPFC() {
		a.receivePPFC(now, m, b) // for the host, not a QP: its DestQP is 0
		return
	}
	qp := a.QP(h.BTH.DestQP)
	if qp == nil {
		a.drops.unknownQP.Add(1)
		return
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if !qp.mu.connected || qp.mu.destroyed {
		a.drops.unknownQP.Add(1)
		return
	}
	// An RC QP takes packets from its peer only (rxe's check_addr), from
	// whatever source port: the peer's QP chooses it.
	if m.Addr.Addr().Unmap().WithZone("") != qp.mu.peer.Addr.Addr().WithZone("") {
		a.drops.wrongPeer.Add(1)
		return
	}
	// IBTA Vol. 1 §10.9.3, as rxe: a QP drops what is not of its
	// partition; the kernel NP and RP drop the same (bpf/roce_check.h).
	if !roce.PKeyMatch(h.BTH.PKey, qp.pkey()) {
		a.drops.pkey.Add(1)
		return
	}
	// The ICRC covers the packet's own addresses and ports: its source, and
	// this QP's address on the port it arrived on.
	dst := netip.AddrPortFrom(qp.mu.local.Addr(), a.recvPort)
	if !a.cfg.SkipICRCCheck && !roce.VerifyICRC(m.Addr, dst, b) {
		a.drops.icrc.Add(1)
		return
	}
	qp.mu.ctr.RxPackets++
	qp.mu.ctr.RxBytes += uint64(m.N)
	op := h.BTH.Opcode
	switch {
	case op == roce.OpCNP:
		qp.onCNPLocked(now, m.Coalesced)
	case op == roce.OpRCAck:
		qp.onAckLocked(now, h)
	case op <= roce.OpRCWriteOnlyImm:
		if m.TOS&ecnMask == ecnCE {
			qp.onCELocked(now, rs)
		}
		qp.onRequestLocked(now, h, payload, rs)
	default:
		a.drops.unsupported.Add(1)
	}
}
