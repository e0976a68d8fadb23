package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/npbpf"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/rpbpf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// CCMode selects the sender's congestion control.
type CCMode string

const (
	CCNone  CCMode = "none"  // paced at QPConfig.RateCap (or unpaced), CNPs ignored
	CCDCQCN CCMode = "dcqcn" // paced at the DCQCN reaction point's Rc
)

// Op is the RDMA operation a stream posts.
type Op uint8

const (
	OpWrite Op = iota // RDMA WRITE into the peer's registered buffer
	OpSend            // SEND, placed in the peer's buffer as received
)

func (o Op) String() string {
	if o == OpSend {
		return "send"
	}
	return "write"
}

// ECN codepoints (RFC 3168 §5) and DSCPs (reference/roce-wire.md).
const (
	ecnMask = 0x3
	ecnECT0 = 0x2
	ecnCE   = 0x3

	DefaultDSCP    = 26 // traffic class 3, the common RoCE class
	DefaultCNPDSCP = 48 // priority 6: a CNP must not queue behind what it reports
)

// Path MTUs an RC QP may use (IBTA Vol. 1 §9.6: 256–4096 bytes of payload).
var validMTUs = [...]int{256, 512, 1024, 2048, 4096}

// QPConfig sets up one RC queue pair. Start from DefaultQPConfig.
type QPConfig struct {
	MTU  int   // path MTU: payload bytes per packet, 256|512|1024|2048|4096
	DSCP uint8 // data and ACKs, sent ECT(0)
	// CC is the congestion control of what this QP sends.
	CC    CCMode
	DCQCN dcqcn.Params // used when CC is CCDCQCN; DCQCN.LineRate is the line rate
	// RateCap paces a CCNone QP. Optional: 0 sends as fast as the window
	// and the CPU allow.
	RateCap units.Rate
	// NP makes this QP a DCQCN notification point for what it receives:
	// CE-marked packets turn into CNPs to the sender's QP, at most one per
	// CNPPeriod (min_time_between_cnps), sent with CNPDSCP.
	NP        bool
	CNPPeriod time.Duration
	CNPDSCP   uint8
	// Window is the number of packets the requester may have unacknowledged.
	Window int
	// InflightTime bounds what the requester has unacknowledged to the
	// bytes its rate (Rc, or RateCap) sends in this time, at least 2
	// packets, besides Window. A NIC that sends at Rc through a queue
	// that marks up to max_th holds about Rc·(base RTT + max_th/C) in
	// flight; set that here. It is a departure from firmware (a NIC has
	// no such bound): a software sender that falls behind its Rc (CPU,
	// scheduling) would otherwise catch up with a whole window at once,
	// and the queue would follow n × Window instead of DCQCN. Optional:
	// 0 means Window only; unpaced QPs use Window only.
	InflightTime time.Duration
	// AckReqEvery sets AckReq on every n-th packet (and always on a
	// message's last packet and when the window fills): the responder ACKs
	// only those, which coalesces ACKs.
	AckReqEvery int
	// AckTimeout is the requester's retransmission timeout (local ACK
	// timeout); RetryCount consecutive timeouts put the QP in error.
	AckTimeout time.Duration
	RetryCount int
	// MaxBurst is the most packets the pacer sends back to back.
	MaxBurst int
	// BufferBytes is the registered memory incoming WRITEs and SENDs land
	// in. Optional: 0 means 1 MiB.
	BufferBytes int
	// VerifyIncoming checks every placed payload against the peer's
	// Stream.Verify pattern (verify_errors).
	VerifyIncoming bool
	// PSN is the first PSN this QP sends. Optional: 0 draws one at random.
	PSN uint32
	// PKey is the QP's P_Key (IBTA Vol. 1 §10.9): what it sends carries it,
	// and a packet whose P_Key does not match it (roce.PKeyMatch) is
	// dropped and counted (pkey_violations), here and in the kernel NP and
	// RP. Optional: 0 means roce.DefaultPKey; a base (low 15 bits) of 0 is
	// the invalid P_Key and refused.
	PKey uint16
}

// DefaultQPConfig returns the defaults: MTU 1024, DSCP 26, no congestion
// control, NP on with mlx5's 4 µs, window 512, AckReq every 32 packets,
// bursts of at most 8 packets, a 67 ms ACK timeout (IB local ACK timeout
// 14, 4.096 µs·2^14, what mlx5 QPs are commonly given: a software agent on
// a loaded 2-core machine can stall for tens of milliseconds) and 7 retries.
func DefaultQPConfig() QPConfig {
	return QPConfig{
		MTU:         1024,
		DSCP:        DefaultDSCP,
		CC:          CCNone,
		NP:          true,
		CNPPeriod:   4 * time.Microsecond,
		CNPDSCP:     DefaultCNPDSCP,
		Window:      512,
		AckReqEvery: 32,
		AckTimeout:  4096 * time.Nanosecond << 14,
		RetryCount:  7,
		MaxBurst:    8,
		BufferBytes: 1 << 20,
	}
}

// ConfigError is a QPConfig field Validate refuses. Detail, without the
// package's name, is what a server tells a client it refuses.
type ConfigError struct {
	Field string // as a session request names it: "mtu", "dscp", ...
	Value string
	Must  string
}

func (e *ConfigError) Error() string { return "agent: " + e.Detail() }

// Detail is "dscp 64: must be 0..63".
func (e *ConfigError) Detail() string { return e.Field + " " + e.Value + ": " + e.Must }

func qpErr(field, value, must string, args ...any) error {
	return &ConfigError{Field: field, Value: value, Must: fmt.Sprintf(must, args...)}
}

// Validate checks every field and names the first bad one (*ConfigError,
// or DCQCN's refusal).
func (c *QPConfig) Validate() error {
	okMTU := false
	for _, m := range validMTUs {
		okMTU = okMTU || c.MTU == m
	}
	switch {
	case !okMTU:
		return qpErr("mtu", fmt.Sprintf("%d", c.MTU), "must be one of 256, 512, 1024, 2048, 4096")
	case c.DSCP > 63:
		return qpErr("dscp", fmt.Sprintf("%d", c.DSCP), "must be 0..63")
	case c.CNPDSCP > 63:
		return qpErr("cnp_dscp", fmt.Sprintf("%d", c.CNPDSCP), "must be 0..63")
	case c.CC != CCNone && c.CC != CCDCQCN:
		return qpErr("cc", fmt.Sprintf("%q", c.CC), "must be none or dcqcn")
	case c.NP && (c.CNPPeriod < 0 || c.CNPPeriod > time.Second):
		return qpErr("min_time_between_cnps", fmt.Sprintf("%v", c.CNPPeriod), "must be 0..1s")
	case c.Window < 1 || c.Window > 1<<20:
		return qpErr("window", fmt.Sprintf("%d", c.Window), "must be 1..%d packets", 1<<20)
	case c.InflightTime < 0 || c.InflightTime > time.Second:
		return qpErr("inflight_time", fmt.Sprintf("%v", c.InflightTime), "must be 0..1s")
	case c.AckReqEvery < 1 || c.AckReqEvery > c.Window:
		return qpErr("ackreq_every", fmt.Sprintf("%d", c.AckReqEvery), "must be 1..window (%d)", c.Window)
	case c.AckTimeout < 10*time.Microsecond || c.AckTimeout > time.Minute:
		return qpErr("ack_timeout", fmt.Sprintf("%v", c.AckTimeout), "must be 10us..1m")
	case c.RetryCount < 0 || c.RetryCount > 1000:
		return qpErr("retry_count", fmt.Sprintf("%d", c.RetryCount), "must be 0..1000")
	case c.MaxBurst < 1 || c.MaxBurst > 256:
		return qpErr("max_burst", fmt.Sprintf("%d", c.MaxBurst), "must be 1..256 packets")
	case c.BufferBytes < 0 || c.BufferBytes > 1<<31:
		return qpErr("buffer", fmt.Sprintf("%d", c.BufferBytes), "must be 0..%d bytes", 1<<31)
	case c.PSN > roce.PSNMask:
		return qpErr("psn", fmt.Sprintf("%#x", c.PSN), "must be 0..0xffffff")
	case c.PKey != 0 && !roce.ValidPKey(c.PKey):
		return qpErr("pkey", fmt.Sprintf("%#04x", c.PKey), "must have a base (low 15 bits) of 1..0x7fff")
	}
	if c.CC == CCDCQCN {
		if err := c.DCQCN.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// pkey is the P_Key the QP sends and accepts.
func (qp *QP) pkey() uint16 {
	if qp.cfg.PKey == 0 {
		return roce.DefaultPKey
	}
	return qp.cfg.PKey
}

// Endpoint is what the side channel exchanges about a QP, as perftest
// prints it: "QPN 0x... PSN 0x... RKey 0x... VAddr 0x...".
type Endpoint struct {
	Addr netip.AddrPort `json:"addr"` // IP and UDP port the QP receives on
	QPN  uint32         `json:"qpn"`
	PSN  uint32         `json:"psn"`   // first PSN it sends
	RKey uint32         `json:"rkey"`  // R_Key of its registered buffer
	VA   uint64         `json:"vaddr"` // virtual address of that buffer
	Len  uint64         `json:"len"`   // its length
	MTU  int            `json:"mtu"`
}

// Stream is a run of equal-size messages a requester posts back to back.
type Stream struct {
	Op           Op
	MessageBytes int    // 1..2^31 bytes
	Messages     uint64 // Optional: 0 posts until Stop.
	// Verify fills every message with a pattern of (QPN, message number,
	// offset) the responder checks (QPConfig.VerifyIncoming).
	Verify bool
}

// QP errors.
var (
	ErrQPError     = errors.New("qp in error state")
	ErrNotReady    = errors.New("qp not connected")
	ErrQPDestroyed = errors.New("qp destroyed")
)

// QP is an RC queue pair: a requester (what it sends) and a responder (what
// it receives) on one QPN. Its state changes under mu, from the agent's
// transmit and receive loops and from the API.
type QP struct {
	agent *Agent
	qpn   uint32
	cfg   QPConfig

	dataTOS, cnpTOS uint8

	// Registered memory, fixed at creation.
	buf  []byte
	rkey uint32
	va   uint64

	mu struct {
		sync.Mutex
		connected, destroyed bool
		npOffloaded          bool           // the kernel NP answers this QP's CE packets
		rpOffloaded          bool           // the kernel counts this QP's CNPs (req.kCNPs)
		local                netip.AddrPort // for the ICRC
		peer                 Endpoint
		err                  error
		ctr                  Counters
		req                  requester
		resp                 responder
	}
	done     chan struct{} // closed once the stream is finished or in error
	doneOnce sync.Once
	flow     *engine.FlowHandle // the QP in the engine's round robin
}

type requester struct {
	initPSN uint32
	stream  Stream
	active  bool // a stream was started
	stopped bool
	ppm     uint64 // packets per message
	limit   uint64 // packets to send in all; max while unlimited
	slots   uint64 // message slots in the peer's buffer
	// Packet indices since the first PSN (64-bit, so wrap is only in the
	// 24-bit PSN): everything below una is acknowledged, nxt is sent next,
	// max is one past the highest ever sent (below it is a retransmission).
	una, nxt, max uint64
	// window is the packets the requester may have unacknowledged now:
	// Window, or less under InflightTime.
	window uint64
	// ackEvery is AckReqEvery, or less at a low rate.
	ackEvery uint64
	// ackReqSent is one past the highest packet sent with AckReq since
	// the last go-back-N: the responder owes an ACK while it is above
	// una. Going back drops it to una: the responder discards what
	// follows the packet it expects, AckReq packets included, so none
	// beyond una is owed an ACK until one is resent.
	ackReqSent   uint64
	lastProgress time.Duration
	retries      int
	// PPFC: paused from pausedSince until pausedUntil (ppfc.go).
	paused                   bool
	pausedSince, pausedUntil time.Duration
	// releasedUntil: the PPFC watchdog released the QP from a pause
	// storm; it obeys no stop or hold until then (ppfc.go).
	releasedUntil time.Duration
	// Pacer at Rc (or RateCap), MaxBurst packets deep.
	pace engine.Bucket
	rp   *dcqcn.RP
	// The RP's CNP intake in the kernel (Config.RPOffload): the CNPs it
	// counted up to kApplied ran through rp; kLast is the last one's
	// arrival on the agent's clock.
	kCNPs    rpbpf.CNPCounter
	kApplied uint64
	kLast    time.Duration
	// PPFC notifications the kernel took toward the peer (kCNPs): those
	// up to kPPFCApplied were obeyed, the last at kPPFCLast.
	kPPFCApplied uint64
	kPPFCLast    time.Duration
}

type responder struct {
	initPSN uint32 // the peer's first PSN
	nxt     uint64 // expected packet index (ePSN = initPSN + nxt)
	nakSent bool   // one NAK per sequence error (IBTA 9.7.5.2.2)
	// The message being placed: its buffer cursor and end, its offset.
	inMsg       bool
	cursor, end int
	msgOff      int
	msn         uint32 // messages completed, 24 bits in the AETH
	msgs        uint64
	sendCursor  int // where the next SEND lands
	ackPending  bool
	np          *dcqcn.NP
}

// QPN returns the queue pair number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Config returns the configuration the QP was created with.
func (qp *QP) Config() QPConfig { return qp.cfg }

// Buffer is the QP's registered memory. Incoming data lands here while the
// QP runs: read it after Done or when no peer is writing.
func (qp *QP) Buffer() []byte { return qp.buf }

// Endpoint describes this QP for the peer; Addr is left for the caller,
// which knows the address the peer reaches it on.
func (qp *QP) Endpoint() Endpoint {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return Endpoint{
		QPN:  qp.qpn,
		PSN:  qp.mu.req.initPSN,
		RKey: qp.rkey,
		VA:   qp.va,
		Len:  uint64(len(qp.buf)),
		MTU:  qp.cfg.MTU,
	}
}

// Connect moves the QP to ready-to-send (RTR/RTS in IBTA terms) towards
// peer. local is the address the peer sends to, as the peer sees it: the
// ICRC covers both addresses.
func (qp *QP) Connect(local netip.AddrPort, peer Endpoint) error {
	if err := checkPeer(local, qp.cfg.MTU, peer); err != nil {
		return fmt.Errorf("agent: qp %#x: %w", qp.qpn, err)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.mu.destroyed {
		return ErrQPDestroyed
	}
	if qp.mu.connected {
		return fmt.Errorf("agent: qp %#x: already connected", qp.qpn)
	}
	peer.Addr = netip.AddrPortFrom(peer.Addr.Addr().Unmap(), peer.Addr.Port())
	// The QP sends from its own UDP source port (Agent.localPort).
	qp.mu.local = netip.AddrPortFrom(local.Addr().Unmap(), qp.agent.localPort(qp.qpn))
	if off := qp.agent.cfg.NPOffload; off != nil && qp.cfg.NP {
		err := off.AddQP(npbpf.QPContext{
			QPN: qp.qpn, PeerQPN: peer.QPN,
			Local: qp.mu.local.Addr(), Peer: peer.Addr.Addr(),
			SrcPort: qp.mu.local.Port(), PKey: qp.pkey(),
			CNPDSCP: qp.cfg.CNPDSCP, MinTimeBetweenCNPs: qp.cfg.CNPPeriod,
		})
		if err != nil {
			return fmt.Errorf("agent: qp %#x: kernel np: %w", qp.qpn, err)
		}
		qp.mu.npOffloaded = true
		qp.mu.resp.np = nil // one NP per QP, or each CE would get two CNPs
	}
	if off := qp.agent.cfg.RPOffload; off != nil && qp.cfg.CC == CCDCQCN {
		c, err := off.AddQP(rpbpf.QPContext{QPN: qp.qpn, Local: qp.mu.local.Addr(), Peer: peer.Addr.Addr(), PKey: qp.pkey()})
		if err != nil {
			if qp.mu.npOffloaded {
				_ = qp.agent.cfg.NPOffload.RemoveQP(qp.qpn)
				qp.mu.npOffloaded = false
			}
			return fmt.Errorf("agent: qp %#x: kernel rp: %w", qp.qpn, err)
		}
		qp.mu.req.kCNPs = c
		qp.mu.rpOffloaded = true
	}
	qp.mu.peer = peer
	qp.mu.resp.initPSN = peer.PSN
	qp.mu.connected = true
	return nil
}

// checkPeer is what Connect requires of a peer, for a QP of this path
// MTU: the side-channel server checks a request's endpoints with it before
// it creates any QP.
func checkPeer(local netip.AddrPort, mtu int, peer Endpoint) error {
	switch {
	case !local.IsValid() || !peer.Addr.IsValid():
		return fmt.Errorf("connect needs both addresses (local %v, peer %v)", local, peer.Addr)
	case local.Addr().Unmap().Is4() != peer.Addr.Addr().Unmap().Is4():
		return fmt.Errorf("local %v and peer %v are different IP families", local, peer.Addr)
	case peer.QPN == 0 || peer.QPN > roce.PSNMask:
		return fmt.Errorf("peer qpn %#x: must be 1..0xffffff", peer.QPN)
	case peer.PSN > roce.PSNMask:
		return fmt.Errorf("peer psn %#x: must be 0..0xffffff", peer.PSN)
	case peer.MTU != 0 && peer.MTU != mtu:
		return fmt.Errorf("path mtu %d here, %d at the peer: both ends must agree", mtu, peer.MTU)
	}
	return nil
}

// Start posts a stream of messages to the connected peer.
func (qp *QP) Start(s Stream) error {
	if s.MessageBytes < 1 || s.MessageBytes > 1<<31 {
		return fmt.Errorf("agent: message size %d: must be 1..%d bytes", s.MessageBytes, 1<<31)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	r := &qp.mu.req
	switch {
	case qp.mu.destroyed:
		return ErrQPDestroyed
	case !qp.mu.connected:
		return ErrNotReady
	case r.active:
		return fmt.Errorf("agent: qp %#x: a stream is already running", qp.qpn)
	case s.Op == OpWrite && uint64(s.MessageBytes) > qp.mu.peer.Len:
		return fmt.Errorf("agent: qp %#x: message size %d exceeds the peer's buffer (%d bytes)", qp.qpn, s.MessageBytes, qp.mu.peer.Len)
	}
	r.stream = s
	r.active = true
	r.ppm = uint64((s.MessageBytes + qp.cfg.MTU - 1) / qp.cfg.MTU)
	r.limit = ^uint64(0)
	r.window = uint64(qp.cfg.Window)
	r.ackEvery = uint64(qp.cfg.AckReqEvery)
	if s.Messages > 0 {
		r.limit = s.Messages * r.ppm
	}
	r.slots = 1
	if qp.mu.peer.Len > 0 {
		r.slots = max(qp.mu.peer.Len/uint64(s.MessageBytes), 1)
	}
	now := qp.agent.clock.Now()
	r.lastProgress = now
	r.pace = engine.NewBucket(now, float64(qp.cfg.MaxBurst*qp.wireBytes(qp.cfg.MTU, true)))
	if qp.cfg.CC == CCDCQCN {
		r.rp = dcqcn.NewRP(qp.cfg.DCQCN, now)
		if r.kCNPs != nil {
			// CNPs before the stream had no RP to cut (as in the agent).
			r.kApplied, r.kLast = r.kCNPs.Counted(), now
		}
	}
	qp.syncKernelPPFCLocked() // a pause that arrived before the stream holds
	qp.kick()
	return nil
}

// Stop ends the stream after the message in progress; Done closes once
// everything sent is acknowledged.
func (qp *QP) Stop() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	r := &qp.mu.req
	if !r.active || r.stopped {
		return
	}
	r.stopped = true
	// Finish the message the highest sent packet belongs to.
	end := (r.max + r.ppm - 1) / r.ppm * r.ppm
	r.limit = min(r.limit, end)
	qp.checkDoneLocked()
	qp.kick()
}

// Done is closed when the stream has been acknowledged in full, or the QP
// went to error (Err says which).
func (qp *QP) Done() <-chan struct{} { return qp.done }

// Err returns why the QP is in error, nil otherwise.
func (qp *QP) Err() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.mu.err
}

// Counters returns a snapshot of the QP's counters.
func (qp *QP) Counters() Counters {
	qp.mu.Lock()
	c, offloaded := qp.mu.ctr, qp.mu.npOffloaded && !qp.mu.destroyed
	qp.mu.Unlock()
	if offloaded {
		if k, err := qp.agent.cfg.NPOffload.Counters(qp.qpn); err == nil {
			c.NPECNMarkedRoCEPackets, c.NPCNPSent = k.NPECNMarkedRoCEPackets, k.NPCNPSent
		}
	}
	return c
}

// Peer is the connected peer's address and QPN (zero before Connect).
func (qp *QP) Peer() Endpoint {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.mu.peer
}

// NPOffloaded reports whether the kernel NP answers this QP's CE packets.
func (qp *QP) NPOffloaded() bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.mu.npOffloaded
}

// CCState is the reaction point's state at one instant.
type CCState struct {
	Rc, Rt units.Rate
	Alpha  float64
	Stats  dcqcn.RPStats
}

// CC returns the reaction point state (ok false without DCQCN).
func (qp *QP) CC() (CCState, bool) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	rp := qp.mu.req.rp
	if rp == nil {
		return CCState{}, false
	}
	now := qp.agent.clock.Now()
	qp.syncKernelCNPsLocked()
	rp.Advance(now)
	return CCState{Rc: rp.Rc(), Rt: rp.Rt(), Alpha: rp.Alpha(), Stats: rp.Stats()}, true
}

// Progress reports the requester's position: packets acknowledged and sent.
func (qp *QP) Progress() (acked, sent uint64) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.mu.req.una, qp.mu.req.max
}

func (qp *QP) failLocked(err error) {
	if qp.mu.err == nil {
		qp.mu.err = fmt.Errorf("agent: qp %#x: %w: %w", qp.qpn, ErrQPError, err)
		qp.agent.log.Warn("qp error", "qpn", qp.qpn, "err", err)
	}
	qp.doneOnce.Do(func() { close(qp.done) })
}

// checkDoneLocked closes done once a bounded stream is acknowledged.
// Precondition: qp.mu is held.
func (qp *QP) checkDoneLocked() {
	r := &qp.mu.req
	if r.active && r.limit != ^uint64(0) && r.una >= r.limit {
		qp.doneOnce.Do(func() { close(qp.done) })
	}
}

func (qp *QP) psn(base uint32, idx uint64) uint32 {
	return uint32((uint64(base) + idx) & roce.PSNMask)
}

// wireBytes is what one packet costs on the port: Ethernet, IP, UDP, the
// RoCE headers, payload and ICRC. The pacer and Rc count these.
func (qp *QP) wireBytes(payload int, reth bool) int {
	n := 14 + 8 + roce.BTHLen + payload + (-payload & 3) + roce.ICRCLen
	if reth {
		n += roce.RETHLen
	}
	if qp.mu.local.Addr().Is6() {
		return n + 40
	}
	return n + 20
}
