// Package engine is the transport engine of the host agent: the receive
// and transmit loops over one pktio.Conn that every fabric transport (RoCEv2
// RC in host/agent, UET's PDS) runs on. It owns what a NIC's transport
// block shares between its connections:
//
//   - the receive loop: batched reads, each datagram handed to the
//     transport's Receiver with its kernel arrival time, the replies of a
//     batch (ACKs, NAKs, CNPs) sent in one system call;
//   - the transmit loop: a round robin over the transport's Flows that
//     have work, each filling at most its burst per pass, batched writes,
//     and sleep on a Waker until the earliest flow deadline or a kick. A
//     pass visits only the flows that are due (kicked, their deadline
//     come, or waiting for the port's turn), so its cost follows the
//     packets sent, not the flows registered (sched.go);
//   - the port limiter: every flow together never sends faster than the
//     line rate (Config.PortRate);
//   - time: an injected Clock and Waker, so a transport runs on the real
//     clock (MonotonicClock, TimerWaker) or in fake time in unit tests
//     (FakeClock).
//
// Congestion control is not here: a flow paces itself with its controller
// (host/cc) and a Bucket, and tells the loop when it next has work.
package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Never is a deadline that does not come.
const Never = time.Duration(1<<63 - 1)

// Packet is one datagram a transport hands the engine: Buf[:N] goes to
// Addr from UDP source port SrcPort (0: the conn's) with TOS.
type Packet struct {
	Buf     []byte
	N       int
	TOS     uint8
	Addr    netip.AddrPort
	SrcPort uint16
}

// Flow is one sender of a transport (a RoCEv2 QP, a UET PDC): the transmit
// loop asks it for packets.
type Flow interface {
	// Fill writes into out what the flow may send at now (at most its
	// burst, less PortLimit.TurnSent: a turn the port's credit cut short
	// goes on), paced and within its window, charging each packet to
	// port (nil: no port limit) and stopping when port is not Ready. It returns
	// how many packets it wrote and when it next needs the loop: now for
	// more at once, Never for nothing until a kick (FlowHandle.Kick). A
	// flow the port turned away is asked again when the port has credit
	// and its turn comes: next is its own deadlines only (pacing, timers).
	Fill(now time.Duration, out []Packet, port *PortLimit) (n int, next time.Duration)
}

// Receiver is a transport's receive side.
type Receiver interface {
	// Receive handles one datagram that arrived at at (its kernel
	// timestamp on the engine's clock where the conn gives one); replies
	// go into out.
	Receive(at time.Duration, m *pktio.Message, out *Replies)
	// EndBatch runs after every datagram of a batch was received, before
	// the replies are sent (ACK coalescing: one ACK per flow per batch).
	EndBatch(out *Replies)
}

// Replies collects the packets the receive loop sends back for one batch.
type Replies struct {
	pkts    []Packet
	n       int
	overrun uint64
}

// NewReplies returns a reply batch over slots (tests; the engine makes its
// own).
func NewReplies(slots []Packet) *Replies { return &Replies{pkts: slots} }

// Next returns the next free slot, or nil when the batch is full: the
// reply is lost (counted in Stats.ReplyOverruns) and the peer recovers as
// from a loss.
func (r *Replies) Next() *Packet {
	if r.n == len(r.pkts) {
		r.overrun++
		return nil
	}
	p := &r.pkts[r.n]
	r.n++
	return p
}

// Packets returns the replies written so far.
func (r *Replies) Packets() []Packet { return r.pkts[:r.n] }

// Config configures an Engine.
type Config struct {
	// Conn is the port. Required.
	Conn pktio.Conn
	// Clock is the time flows see. Optional: a MonotonicClock.
	Clock Clock
	// Waker puts the transmit loop to sleep. Optional: a TimerWaker on
	// the monotonic clock; with a FakeClock, its NewWaker.
	Waker Waker
	// Logger gets send and receive errors. Optional: slog.Default().
	Logger *slog.Logger
	// BatchSize is the most packets per send/receive system call.
	// Optional: 0 means DefaultBatchSize(PortRate).
	BatchSize int
	// MaxPacket is the largest datagram a transport builds or receives.
	// Required.
	MaxPacket int
	// PortRate is the line rate all flows share. Optional: 0, no limit.
	PortRate units.Rate
	// PortBurst is the port limiter's depth in wire bytes. Optional: 0
	// means DefaultPortBurst.
	PortBurst int
	// PortCatchUp is the most lateness the transmit loop may make up for
	// when it wakes late for the port: a NIC's ring keeps transmitting
	// while the host is descheduled, so credit for the time lost is the
	// NIC's, not a burst. Optional: 0 means 500 µs (the pacer's).
	PortCatchUp time.Duration
	// Held, when set, gets the time the flows were held: from the moment
	// a flow could send (its deadline, or the kernel arrival time of the
	// datagram whose handling kicked the loop: an ACK or credit that
	// opened its window) to the pass of the transmit loop that sent it
	// (host/hostlost). It needs a Clock that converts to CLOCK_MONOTONIC
	// (MonotonicClocks). Optional: nil, not measured. A log a Meter made
	// (hostlost.Meter.HeldVia) also gets the receive loop's feedback waits
	// (hostlost.Log.Late).
	Held *hostlost.Log
	// HostQueue, when set, is the host queue in front of the switch port
	// (host/linkq): each batch is cut to its Room, and while it has none
	// the transmit loop waits HostQueuePoll at a time, so that packets
	// the host has not yet carried to the switch do not pile up past the
	// port's feedback (a NIC's BQL). Optional: not bounded.
	HostQueue HostQueue
}

// HostQueue is what the transmit loop needs of the host queue in front of
// the switch port.
type HostQueue interface {
	// Room is the bytes that may be sent now: 0 while the queue is full.
	Room() int
}

// HostQueuePoll is how long the transmit loop waits for a full host queue
// to drain before it looks again (a kick wakes it sooner).
const HostQueuePoll = 50 * time.Microsecond

// DefaultPortBurst is the port limiter's burst: 16 full 1 KB-MTU packets.
const DefaultPortBurst = 16 * 1100

// MaxBatchSize bounds Config.BatchSize.
const MaxBatchSize = 1024

// DefaultBatchSize is the batch for a port of this rate (0: no limit):
// 2 ms of it in 1500-byte packets, 8 to 64. An engine holds 3 batches
// plus one of packet slots (about 1 MB at 64 of 4 KB); a lab's hosts at
// tens of Mbit/s never fill more than a few, and a lab of hundreds of
// flows, each with its engines, peaked at 685 MB with 64.
func DefaultBatchSize(rate units.Rate) int {
	const least, most = 8, 64
	if rate <= 0 {
		return most
	}
	n := float64(rate) / 8 * 2e-3 / 1500
	return int(max(least, min(most, n)))
}

// Stats are the engine's own counters.
type Stats struct {
	// SendErrors counts datagrams a WriteBatch failed to send.
	SendErrors uint64
	// ReplyOverruns counts replies that did not fit in a batch's reply
	// slots.
	ReplyOverruns uint64
	// HostQueueWaits counts the transmit loop's waits for a full host
	// queue (Config.HostQueue).
	HostQueueWaits uint64
}

// Engine runs a transport's loops on one conn.
type Engine struct {
	cfg   Config
	conn  pktio.Conn
	clock Clock
	wake  Waker
	log   *slog.Logger
	rx    Receiver

	mu struct {
		sync.Mutex
		started, closed bool
		flows           []*FlowHandle // every flow added, in no order
	}
	// Kicks for the transmit loop (FlowHandle.Kick), and Kick's "every
	// flow".
	kickMu   sync.Mutex
	kicks    []*FlowHandle
	kickAll  atomic.Bool
	sched    sched      // the transmit loop's
	writeMu  sync.Mutex // one sendmmsg at a time on the shared socket
	closing  atomic.Bool
	wg       sync.WaitGroup
	sendErrs atomic.Uint64
	hqWaits  atomic.Uint64
	overruns atomic.Uint64
	rxBusy   atomic.Bool // the receive loop is handling a batch

	// Held time (Config.Held): the earliest kick since the transmit
	// loop's last pass, and the arrival of the datagram the receive loop
	// is handling (-1: none), on the engine's clock.
	held     *hostlost.Log
	late     *hostlost.Log // held.Late(): the receive loop's feedback waits
	mono     MonotonicClocks
	kickedAt atomic.Int64
	rxAt     atomic.Int64
}

// New returns an engine for receiver rx; Start runs its loops.
func New(cfg Config, rx Receiver) (*Engine, error) {
	switch {
	case cfg.Conn == nil:
		return nil, errors.New("engine: Config.Conn is required")
	case rx == nil:
		return nil, errors.New("engine: a Receiver is required")
	case cfg.MaxPacket <= 0:
		return nil, fmt.Errorf("engine: max_packet %d: must be > 0", cfg.MaxPacket)
	case cfg.PortBurst < 0:
		return nil, fmt.Errorf("engine: port_burst %d: must be >= 0", cfg.PortBurst)
	case cfg.PortCatchUp < 0 || cfg.PortCatchUp > time.Second:
		return nil, fmt.Errorf("engine: port_catch_up %v: must be 0..1s", cfg.PortCatchUp)
	}
	if _, ok := cfg.Clock.(MonotonicClocks); cfg.Held != nil && cfg.Clock != nil && !ok {
		return nil, fmt.Errorf("engine: held time needs a clock on CLOCK_MONOTONIC (a MonotonicClock), not %T", cfg.Clock)
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultBatchSize(cfg.PortRate)
	}
	if cfg.BatchSize < 1 || cfg.BatchSize > MaxBatchSize {
		return nil, fmt.Errorf("engine: batch size %d: must be 1..%d", cfg.BatchSize, MaxBatchSize)
	}
	if cfg.PortBurst == 0 {
		cfg.PortBurst = DefaultPortBurst
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = NewMonotonicClock()
	}
	if cfg.Waker == nil {
		if fc, ok := cfg.Clock.(*FakeClock); ok {
			cfg.Waker = fc.NewWaker()
		} else {
			w, err := NewTimerWaker()
			if err != nil {
				return nil, err
			}
			cfg.Waker = w
		}
	}
	e := &Engine{cfg: cfg, conn: cfg.Conn, clock: cfg.Clock, wake: cfg.Waker, log: cfg.Logger, rx: rx}
	if cfg.Held != nil {
		e.held = cfg.Held
		e.late = cfg.Held.Late()
		e.mono = cfg.Clock.(MonotonicClocks)
		e.kickedAt.Store(int64(Never))
		e.rxAt.Store(-1)
	}
	return e, nil
}

// Start runs the receive and transmit loops.
func (e *Engine) Start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.started || e.mu.closed {
		return
	}
	e.mu.started = true
	e.wg.Add(2)
	go e.rxLoop()
	go e.txLoop()
}

// Clock returns the engine's clock.
func (e *Engine) Clock() Clock { return e.clock }

// Conn returns the engine's conn.
func (e *Engine) Conn() pktio.Conn { return e.conn }

// Closing reports whether Close has begun.
func (e *Engine) Closing() bool { return e.closing.Load() }

// Kick wakes the transmit loop for every flow: something that may concern
// any of them changed. It costs a visit of every flow; a transport that
// knows which flow has work kicks its FlowHandle.
func (e *Engine) Kick() {
	e.kickAll.Store(true)
	e.woke()
}

// woke records a kick's time for the held-time measure and wakes the
// transmit loop. A kick from the handling of a received datagram dates
// from its arrival.
func (e *Engine) woke() {
	if e.held != nil {
		at := e.rxAt.Load()
		if at < 0 {
			at = int64(e.clock.Now())
		}
		for {
			old := e.kickedAt.Load()
			if at >= old || e.kickedAt.CompareAndSwap(old, at) {
				break
			}
		}
	}
	e.wake.Kick()
}

// FlowHandle is a flow's place in the engine, from AddFlow.
type FlowHandle struct {
	e       *Engine
	f       Flow
	kicked  atomic.Bool // in the engine's kick list
	removed atomic.Bool
	idx     int // in e.mu.flows, under e.mu
	// The transmit loop's (sched).
	inRun, inPort bool
	// cutSent: the port turned the flow away in the middle of its turn,
	// after cutSent packets; it keeps the head of the port's queue for
	// the rest.
	cutSent int
	timer   Deadline // in sched.timers
}

func (h *FlowHandle) timerDeadline() *Deadline { return &h.timer }

// Kick wakes the transmit loop for this flow: it has something to send,
// or its deadline moved.
func (h *FlowHandle) Kick() {
	if !h.kicked.Swap(true) {
		h.e.kickMu.Lock()
		h.e.kicks = append(h.e.kicks, h)
		h.e.kickMu.Unlock()
	}
	h.e.woke()
}

// AddFlow puts f in the transmit loop's round robin; the loop asks it at
// once.
func (e *Engine) AddFlow(f Flow) *FlowHandle {
	h := &FlowHandle{e: e, f: f}
	e.mu.Lock()
	h.idx = len(e.mu.flows)
	e.mu.flows = append(e.mu.flows, h)
	e.mu.Unlock()
	h.Kick()
	return h
}

// RemoveFlow takes the flow out of the round robin; the loop may still be
// inside its Fill.
func (e *Engine) RemoveFlow(h *FlowHandle) {
	if h == nil || h.removed.Swap(true) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	last := len(e.mu.flows) - 1
	moved := e.mu.flows[last]
	e.mu.flows[h.idx], moved.idx = moved, h.idx
	e.mu.flows[last] = nil
	e.mu.flows = e.mu.flows[:last]
}

// Flows is how many flows the round robin holds.
func (e *Engine) Flows() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.mu.flows)
}

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	return Stats{SendErrors: e.sendErrs.Load(), ReplyOverruns: e.overruns.Load(), HostQueueWaits: e.hqWaits.Load()}
}

// Close stops both loops and closes the conn and the waker.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return nil
	}
	e.mu.closed = true
	e.mu.Unlock()
	e.closing.Store(true)
	err := e.conn.Close()
	e.wake.Kick()
	e.wg.Wait()
	_ = e.wake.Close()
	return err
}

// NewSlots returns n packet slots of MaxPacket bytes and their messages.
func (e *Engine) NewSlots(n int) ([]Packet, []pktio.Message) {
	return NewSlots(n, e.cfg.MaxPacket)
}

// NewSlots returns n packet slots of size bytes each and n messages.
func NewSlots(n, size int) ([]Packet, []pktio.Message) {
	pkts := make([]Packet, n)
	msgs := make([]pktio.Message, n)
	for i := range pkts {
		pkts[i].Buf = make([]byte, size)
		msgs[i].Buffers = make([][]byte, 1)
	}
	return pkts, msgs
}

// send writes pkts in one batch.
func (e *Engine) send(msgs []pktio.Message, pkts []Packet) {
	if len(pkts) == 0 {
		return
	}
	for i := range pkts {
		p := &pkts[i]
		msgs[i].Buffers[0] = p.Buf[:p.N]
		msgs[i].TOS = p.TOS
		msgs[i].Addr = p.Addr
		msgs[i].SrcPort = p.SrcPort
	}
	e.writeMu.Lock()
	sent, err := e.conn.WriteBatch(msgs[:len(pkts)])
	e.writeMu.Unlock()
	if err != nil && !e.closing.Load() {
		e.sendErrs.Add(uint64(len(pkts) - sent))
		e.log.Debug("send batch", "err", err, "sent", sent, "of", len(pkts))
	}
}

// txLoop sends what the flows fill, paced, in batches; it sleeps on the
// waker until the earliest flow deadline or a kick.
func (e *Engine) txLoop() {
	defer e.wg.Done()
	pkts, msgs := e.NewSlots(e.cfg.BatchSize)
	var port *PortLimit
	if e.cfg.PortRate > 0 {
		port = NewPortLimit(e.clock.Now(), e.cfg.PortRate, e.cfg.PortBurst, e.cfg.PortCatchUp)
	}
	due := Never // the previous pass's deadline: flows could send from then
	for !e.closing.Load() {
		batch := pkts
		if hq := e.cfg.HostQueue; hq != nil {
			room := hq.Room()
			if room <= 0 {
				e.hqWaits.Add(1)
				if err := e.wake.Sleep(HostQueuePoll); err != nil {
					return
				}
				continue
			}
			batch = pkts[:max(1, min(len(pkts), room/e.cfg.MaxPacket))]
		}
		now := e.clock.Now()
		ready := due
		if e.held != nil {
			ready = min(ready, time.Duration(e.kickedAt.Swap(int64(Never))))
		}
		n, next := e.fill(now, batch, port)
		if n > 0 && ready < now && e.held != nil {
			e.held.Add(e.mono.Monotonic(ready), e.mono.Monotonic(now))
		}
		due = next
		e.send(msgs, pkts[:n])
		if n > 0 || next <= now {
			continue
		}
		wait := time.Duration(-1)
		if next != Never {
			wait = next - e.clock.Now()
			if wait <= 0 {
				continue
			}
		}
		if err := e.wake.Sleep(wait); err != nil {
			return
		}
	}
}

// fill fills pkts with passes of the round robin while a pass adds
// packets and a flow can send more at once (next is now), so that one
// send carries what would otherwise take a system call per pass: with a
// burst of 8 a flow that may send 64 packets now fills one batch, and the
// conn can send a run of one source port as one GSO send. What a flow
// sends and when does not change, only how many system calls carry it.
func (e *Engine) fill(now time.Duration, pkts []Packet, port *PortLimit) (n int, next time.Duration) {
	for {
		k, due := e.pass(now, pkts[n:], port)
		n, next = n+k, due
		if k == 0 || n == len(pkts) || next > now {
			return n, next
		}
		now = e.clock.Now()
	}
}

// rxLoop reads batches, hands each datagram to the receiver and sends the
// replies of the batch in one system call.
func (e *Engine) rxLoop() {
	defer e.wg.Done()
	in := make([]pktio.Message, e.cfg.BatchSize)
	for i := range in {
		in[i].Buffers = [][]byte{make([]byte, e.cfg.MaxPacket+64)}
	}
	rpkts, rmsgs := e.NewSlots(2*e.cfg.BatchSize + 1)
	rs := &Replies{pkts: rpkts}
	// Kernel timestamps are wall-clock times: in fake time they mean
	// nothing.
	_, fake := e.clock.(*FakeClock)
	for {
		n, err := e.conn.ReadBatch(in)
		if err != nil {
			if e.closing.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			e.log.Warn("receive", "err", err)
			time.Sleep(time.Millisecond) // do not spin on a persistent error
			continue
		}
		e.rxBusy.Store(true)
		now, wall := e.clock.Now(), time.Now()
		rs.n, rs.overrun = 0, 0
		oldest := now
		for i := range n {
			at := now
			if !fake {
				at = Arrival(now, wall, in[i].RxTime)
			}
			oldest = min(oldest, at)
			if e.held != nil {
				e.rxAt.Store(int64(at))
			}
			e.rx.Receive(at, &in[i], rs)
		}
		if e.held != nil {
			e.rxAt.Store(-1)
		}
		if e.late != nil && oldest < now {
			// The batch's feedback reached the controller this late.
			e.late.Add(e.mono.Monotonic(oldest), e.mono.Monotonic(now))
		}
		e.rx.EndBatch(rs)
		if rs.overrun > 0 {
			e.overruns.Add(rs.overrun)
		}
		e.send(rmsgs, rs.pkts[:rs.n])
		e.rxBusy.Store(false)
	}
}

// ReceiveIdle reports whether the receive loop is between batches (fake
// time: a driver advances the clock only when nothing is in hand). Over a
// conn that knows when its reader holds datagrams (pktio.PipeConn) that
// counts too: the loop's own flag is set only after the read returns, and
// a driver that looked in that gap, with the datagrams already counted
// received, could jump the clock past a batch in hand.
func (e *Engine) ReceiveIdle() bool {
	if b, ok := e.conn.(interface{ ReaderBusy() bool }); ok && b.ReaderBusy() {
		return false
	}
	return !e.rxBusy.Load()
}

// MaxArrivalAge bounds how far back a datagram's kernel timestamp may move
// its arrival: a wall clock stepped by NTP must not make a packet look
// ancient.
const MaxArrivalAge = 100 * time.Millisecond

// Arrival is when a datagram read at now (the engine's clock; wall on the
// wall clock) arrived: its kernel timestamp, when the conn gives one. A
// batch the loop reads late then acts as its packets arrived, spread in
// time, not all at once (a flood of CNPs sharing one batch timestamp cut
// the rate once per batch).
func Arrival(now time.Duration, wall, rx time.Time) time.Duration {
	if rx.IsZero() {
		return now
	}
	age := wall.Sub(rx)
	if age <= 0 {
		return now
	}
	return max(now-min(age, MaxArrivalAge), 0)
}
