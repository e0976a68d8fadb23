package pktio

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Wire is what a path adds to a datagram that the lab's devices do not:
// its links' propagation and, at every hop, the datagram's serialisation
// before the next hop may start on it (store-and-forward). A veth hands a
// packet on at once and an HTB class releases a packet at the start of its
// transmission, so a lab port forwards a packet that finds it idle at
// once, where a switch (and htsim's queues) receives it whole first. Under
// load the ports space packets at their rates either way; what is missing
// is the same per packet and hop, so it can be added once, at the end of
// the path (DelayConn).
type Wire struct {
	// Latency is the path's propagation: its links' delays summed.
	Latency time.Duration
	// NsPerByte is a byte's serialisation summed over the path's hops
	// (Σ 8/rate), in nanoseconds.
	NsPerByte float64
	// Overhead is what every hop serialises beyond the UDP payload:
	// WireOverhead4 or WireOverhead6.
	Overhead int
}

// The bytes a hop serialises around a UDP payload: UDP, IP and Ethernet
// headers (the ports' and htsim's packet; no preamble or FCS).
const (
	WireOverhead4 = 8 + 20 + 14
	WireOverhead6 = 8 + 40 + 14
)

// MaxWireDelay bounds a Wire's delay of the largest datagram: what a lab
// slowed by its timescale may ask (a 9000-byte packet over six hops at
// 100 kbit/s takes 4.3 s).
const MaxWireDelay = 10 * time.Second

// Delay is the wire's time for a UDP payload of n bytes.
func (w Wire) Delay(n int) time.Duration {
	return w.Latency + time.Duration(float64(n+w.Overhead)*w.NsPerByte)
}

// Slowed is w on a fabric k times slower (units.Timescale's factor):
// its latency and each byte's serialisation k times longer.
func (w Wire) Slowed(k float64) Wire {
	if k == 1 {
		return w
	}
	w.Latency = time.Duration(math.Round(float64(w.Latency) * k))
	w.NsPerByte *= k
	return w
}

// Validate names a field out of its range.
func (w Wire) Validate() error {
	switch {
	case w.Latency < 0 || w.Latency > MaxWireDelay:
		return fmt.Errorf("wire latency %v: must be 0..%v", w.Latency, MaxWireDelay)
	case math.IsNaN(w.NsPerByte) || w.NsPerByte < 0 || w.Delay(maxUDPPayload6) > MaxWireDelay:
		return fmt.Errorf("wire ns_per_byte %g: must be >= 0 and keep a datagram's delay within %v", w.NsPerByte, MaxWireDelay)
	case w.Overhead < 0 || w.Overhead > 256:
		return fmt.Errorf("wire overhead %d: must be 0..256 bytes", w.Overhead)
	}
	return nil
}

// DefaultDelayHeld bounds the datagrams a DelayConn holds: a window's
// worth of 4 KB packets for a few hundred flows.
const DefaultDelayHeld = 1 << 16

// DelayStats are a DelayConn's counters.
type DelayStats struct {
	// Delayed counts datagrams held for their wire, Passed those from a
	// source without one.
	Delayed, Passed uint64
	// Dropped counts datagrams that found MaxHeld held (a wire that
	// holds more than its window: a bug of the lab, or a flood).
	Dropped uint64
	// Held is what it holds now, MaxHeld the most it held at once.
	Held, MaxHeld int
	// Late is the time the delayed datagrams reached ReadBatch after they
	// were due, summed; LateMax the most (the host's, not the wire's).
	Late, LateMax time.Duration
}

// DelayConn is a Conn whose received datagrams reach ReadBatch their
// source's Wire delay after the kernel received them (Message.RxTime
// then says when the wire delivered them), in the order they arrived from
// each source: a wire does not reorder. A datagram from a source without a
// Wire comes at once. Writes go straight to the conn beneath.
type DelayConn struct {
	c       Conn
	wires   map[netip.Addr]Wire
	maxHeld int
	size    int
	wake    Waker         // ReadBatch's sleep; kicked by an arrival
	stopped chan struct{} // the reader returned
	bufs    sync.Pool

	mu struct {
		sync.Mutex
		held   heldHeap
		last   map[netip.Addr]time.Time // each source's latest due time
		seq    uint64
		err    error // the conn's, for the next ReadBatch
		closed bool
		st     DelayStats
	}
}

// heldDatagram is a datagram on its wire.
type heldDatagram struct {
	due       time.Time
	seq       uint64
	buf       *[]byte
	n         int
	addr      netip.AddrPort
	tos       uint8
	truncated bool
	coalesced bool
}

// heldHeap orders held datagrams by due time, then arrival.
type heldHeap []heldDatagram

func (h heldHeap) Len() int { return len(h) }
func (h heldHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h heldHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)   { *h = append(*h, x.(heldDatagram)) }
func (h *heldHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = heldDatagram{}
	*h = old[:len(old)-1]
	return x
}

// Waker is what ReadBatch sleeps on until the next datagram is due or
// one arrives (engine.Waker; the engine's TimerWaker, a timerfd: Go's
// own timers wake a sleeping runtime through epoll_wait's millisecond
// timeout, which made a wire's datagrams 2 ms late at the 99th
// percentile in a lab of 8 hosts). A Kick before a Sleep makes that
// Sleep return at once.
type Waker interface {
	// Sleep returns after d (d < 0: never) or a Kick.
	Sleep(d time.Duration) error
	Kick()
	Close() error
}

// NewDelayConn returns c with each source's wire (by source address) in
// front of its reads, holding at most maxHeld datagrams (0:
// DefaultDelayHeld) of at most maxDatagram bytes; on success it owns c
// and wake (nil: Go's timers, a millisecond coarse). batch is how many
// datagrams it reads from c at once.
func NewDelayConn(c Conn, wires map[netip.Addr]Wire, maxDatagram, batch, maxHeld int, wake Waker) (*DelayConn, error) {
	switch {
	case c == nil:
		return nil, errors.New("pktio: delay conn: a conn is required")
	case maxDatagram < 1 || maxDatagram > maxUDPPayload6:
		return nil, fmt.Errorf("pktio: delay conn: max datagram %d: must be 1..%d", maxDatagram, maxUDPPayload6)
	case batch < 1 || batch > 1024:
		return nil, fmt.Errorf("pktio: delay conn: batch %d: must be 1..1024", batch)
	case maxHeld < 0:
		return nil, fmt.Errorf("pktio: delay conn: max held %d: must be >= 0", maxHeld)
	}
	for a, w := range wires {
		if err := w.Validate(); err != nil {
			return nil, fmt.Errorf("pktio: delay conn: from %v: %w", a, err)
		}
	}
	if maxHeld == 0 {
		maxHeld = DefaultDelayHeld
	}
	if wake == nil {
		wake = newTimerWaker()
	}
	d := &DelayConn{c: c, wires: wires, maxHeld: maxHeld, size: maxDatagram, wake: wake, stopped: make(chan struct{})}
	d.bufs.New = func() any { b := make([]byte, maxDatagram); return &b }
	d.mu.last = make(map[netip.Addr]time.Time)
	go d.read(batch)
	return d, nil
}

// read moves what c receives onto the wires until c fails for good.
func (d *DelayConn) read(batch int) {
	defer close(d.stopped)
	defer d.wake.Kick()
	msgs := make([]Message, batch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, d.size)}
	}
	for {
		n, err := d.c.ReadBatch(msgs)
		now := time.Now()
		d.mu.Lock()
		if err != nil {
			d.mu.err = err
			closed := d.mu.closed || errors.Is(err, net.ErrClosed)
			d.mu.Unlock()
			if closed {
				return
			}
			d.wake.Kick()
			time.Sleep(time.Millisecond) // do not spin on a persistent error
			continue
		}
		for i := range n {
			d.hold(&msgs[i], now)
		}
		d.mu.Unlock()
		d.wake.Kick()
	}
}

// hold puts m on its source's wire; under d.mu.
func (d *DelayConn) hold(m *Message, now time.Time) {
	st := &d.mu.st
	if len(d.mu.held) >= d.maxHeld {
		st.Dropped++
		return
	}
	due := m.RxTime
	if due.IsZero() || due.After(now) {
		due = now
	}
	src := m.Addr.Addr()
	if w, ok := d.wires[src]; ok {
		st.Delayed++
		due = due.Add(w.Delay(m.N))
		if last := d.mu.last[src]; due.Before(last) {
			due = last
		}
		d.mu.last[src] = due
	} else {
		st.Passed++
	}
	buf := d.bufs.Get().(*[]byte)
	n := copy(*buf, m.Buffers[0][:m.N])
	d.mu.seq++
	heap.Push(&d.mu.held, heldDatagram{due: due, seq: d.mu.seq, buf: buf, n: n, addr: m.Addr, tos: m.TOS,
		truncated: m.Truncated, coalesced: m.Coalesced})
	st.Held = len(d.mu.held)
	st.MaxHeld = max(st.MaxHeld, st.Held)
}

// ReadBatch implements Conn: it blocks until a held datagram is due.
func (d *DelayConn) ReadBatch(msgs []Message) (int, error) {
	for {
		d.mu.Lock()
		if d.mu.closed {
			d.mu.Unlock()
			return 0, net.ErrClosed
		}
		now := time.Now()
		n := 0
		for n < len(msgs) && len(d.mu.held) > 0 && !d.mu.held[0].due.After(now) {
			h := heap.Pop(&d.mu.held).(heldDatagram)
			m := &msgs[n]
			k := copy(m.Buffers[0], (*h.buf)[:h.n])
			m.N, m.Addr, m.TOS, m.RxTime = k, h.addr, h.tos, h.due
			m.Truncated, m.Coalesced = h.truncated || k < h.n, h.coalesced
			d.bufs.Put(h.buf)
			n++
			late := now.Sub(h.due)
			d.mu.st.Late += late
			d.mu.st.LateMax = max(d.mu.st.LateMax, late)
		}
		d.mu.st.Held = len(d.mu.held)
		err := d.mu.err
		if n == 0 && err != nil {
			d.mu.err = nil
		}
		wait := time.Duration(-1)
		if len(d.mu.held) > 0 {
			wait = d.mu.held[0].due.Sub(now)
		}
		d.mu.Unlock()
		switch {
		case n > 0:
			return n, nil
		case err != nil:
			return 0, err
		}
		select {
		case <-d.stopped:
			// The conn failed for good: what is held still comes.
			if wait < 0 {
				return 0, net.ErrClosed
			}
		default:
		}
		if err := d.wake.Sleep(wait); err != nil {
			return 0, net.ErrClosed
		}
	}
}

// WriteBatch implements Conn: straight to the conn beneath.
func (d *DelayConn) WriteBatch(msgs []Message) (int, error) { return d.c.WriteBatch(msgs) }

// LocalAddr implements Conn.
func (d *DelayConn) LocalAddr() netip.AddrPort { return d.c.LocalAddr() }

// ResolveAgain implements NeighborResolver when the conn beneath does.
func (d *DelayConn) ResolveAgain(dst netip.Addr) (bool, error) {
	if nr, ok := d.c.(NeighborResolver); ok {
		return nr.ResolveAgain(dst)
	}
	return false, nil
}

// Close implements Conn: it closes the conn beneath and drops what is
// held.
func (d *DelayConn) Close() error {
	d.mu.Lock()
	if d.mu.closed {
		d.mu.Unlock()
		return nil
	}
	d.mu.closed = true
	for _, h := range d.mu.held {
		d.bufs.Put(h.buf)
	}
	d.mu.held = nil
	d.mu.Unlock()
	err := d.c.Close()
	<-d.stopped
	_ = d.wake.Close()
	return err
}

// timerWaker is a Waker on Go's timers.
type timerWaker struct {
	kick  chan struct{}
	timer *time.Timer
}

func newTimerWaker() *timerWaker {
	w := &timerWaker{kick: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
	w.timer.Stop()
	return w
}

func (w *timerWaker) Kick() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *timerWaker) Sleep(d time.Duration) error {
	if d < 0 {
		<-w.kick
		return nil
	}
	w.timer.Reset(d)
	select {
	case <-w.kick:
		w.timer.Stop()
	case <-w.timer.C:
	}
	return nil
}

func (w *timerWaker) Close() error { return nil }

// Stats returns the counters.
func (d *DelayConn) Stats() DelayStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.st
}
