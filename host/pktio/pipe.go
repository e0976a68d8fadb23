package pktio

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
)

const (
	// DefaultPipeDepth is PipeOptions.Depth when it is 0.
	DefaultPipeDepth = 4096
	// maxUDPPayload4 and maxUDPPayload6 are the largest UDP payloads in an
	// IPv4 (65535 − 20 − 8) and an IPv6 (65535 − 8) packet.
	maxUDPPayload4 = 65507
	maxUDPPayload6 = 65527
	// pipeBufBytes is the least capacity of a pipe datagram buffer, so that
	// buffers of MTU-sized datagrams are recycled whatever their size.
	pipeBufBytes = 2048
)

// Default pipe endpoint addresses (198.18.0.0/15, RFC 2544 benchmarking).
var (
	DefaultPipeA = netip.MustParseAddrPort("198.18.0.1:4791")
	DefaultPipeB = netip.MustParseAddrPort("198.18.0.2:4791")
)

// PipeOptions configures NewPipe. The zero value is valid.
type PipeOptions struct {
	// A and B are the two endpoints' addresses. Optional: defaults
	// DefaultPipeA and DefaultPipeB. A datagram is delivered to the peer
	// only if it is addressed to the peer's address (otherwise it is lost,
	// PipeStats.NoRouteDropped), and it arrives from the writer's address,
	// with the Message's SrcPort if it names one.
	A, B netip.AddrPort
	// Depth is the number of datagrams queued per direction before tail
	// drop (PipeStats.QueueFullDropped). Optional: 0 means DefaultPipeDepth.
	Depth int
	// MaxDatagramBytes makes writes of larger datagrams fail with an error
	// wrapping syscall.EMSGSIZE, as a DF socket does over a smaller path MTU.
	// Optional: 0 means the largest UDP payload (65507 bytes from an IPv4
	// address, 65527 from IPv6).
	MaxDatagramBytes int
	// Filter, if set, is called for every datagram in flight (from is its
	// source as the receiver will see it), on the copy
	// the receiver will read: m.Buffers[0] holds the datagram (m.N bytes),
	// m.Addr is the destination the writer gave, m.TOS the TOS it was sent
	// with. The filter may change the bytes, the TOS and the length (tests mark CE with
	// m.TOS |= 3), and set m.Coalesced (as if a device had coalesced the
	// datagram into a run); other changes to m are ignored. Returning true drops the
	// datagram (PipeStats.FilterDropped). Lowering m.N cuts the datagram
	// to its first m.N bytes (a switch that trims). Optional.
	//
	// It runs on the writing goroutine, so it must be safe for concurrent
	// use when both ends (or several goroutines) write.
	Filter func(from netip.AddrPort, m *Message) (drop bool)
}

// RandomLoss is a PipeOptions.Filter that drops each datagram with
// probability p, drawn from a generator seeded by seed (the same losses
// on every run of a fake-time test); Dropped counts what it dropped.
type RandomLoss struct {
	mu      sync.Mutex
	rng     *rand.Rand
	p       float64
	dropped int
}

// NewRandomLoss returns a RandomLoss of probability p.
func NewRandomLoss(p float64, seed1, seed2 uint64) *RandomLoss {
	return &RandomLoss{rng: rand.New(rand.NewPCG(seed1, seed2)), p: p}
}

// Filter implements PipeOptions.Filter.
func (l *RandomLoss) Filter(netip.AddrPort, *Message) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rng.Float64() < l.p {
		l.dropped++
		return true
	}
	return false
}

// Dropped is how many datagrams Filter dropped.
func (l *RandomLoss) Dropped() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// PipeStats counts what a PipeConn moved. Counters only grow.
type PipeStats struct {
	// DatagramsSent and BytesSent count datagrams WriteBatch accepted,
	// whatever became of them on the way.
	DatagramsSent uint64
	BytesSent     uint64
	// SendErrors counts datagrams WriteBatch refused (no destination,
	// larger than MaxDatagramBytes).
	SendErrors        uint64
	DatagramsReceived uint64
	BytesReceived     uint64 // bytes stored, truncated datagrams count their stored part
	Truncated         uint64 // datagrams received longer than their buffer

	// Of the datagrams this end sent, those its peer will never read:
	FilterDropped     uint64 // PipeOptions.Filter returned true
	QueueFullDropped  uint64 // tail drop: the peer's queue held Depth datagrams
	PeerClosedDropped uint64 // the peer was closed
	NoRouteDropped    uint64 // addressed to someone other than the peer
}

// Dropped is the number of datagrams this end sent that were lost.
func (s PipeStats) Dropped() uint64 {
	return s.FilterDropped + s.QueueFullDropped + s.PeerClosedDropped + s.NoRouteDropped
}

// PipeConn is one end of an in-memory datagram pipe (NewPipe), a Conn for
// unit tests: no root, no sockets, no goroutines of its own.
//
// WriteBatch copies each datagram (the concatenated Buffers) as the kernel
// would, runs the filter on the copy and queues it for the peer, dropping it
// if the peer's queue is full. Writes never block.
//
// Close semantics follow UDP: Close of one end makes its own ReadBatch
// (pending or later) and WriteBatch return net.ErrClosed; the peer is not
// told. The peer can still read what was queued for it, and its writes to
// the closed end succeed but are lost (PipeStats.PeerClosedDropped), like
// datagrams to a closed UDP port.
type PipeConn struct {
	p      *pipe
	local  netip.AddrPort
	peer   *PipeConn
	in     chan pipeDatagram // datagrams for this end
	closed chan struct{}
	once   sync.Once

	datagramsSent     atomic.Uint64
	bytesSent         atomic.Uint64
	sendErrors        atomic.Uint64
	datagramsReceived atomic.Uint64
	bytesReceived     atomic.Uint64
	truncated         atomic.Uint64
	filterDropped     atomic.Uint64
	queueFullDropped  atomic.Uint64
	peerClosedDropped atomic.Uint64
	noRouteDropped    atomic.Uint64
	// readerBusy: the reader took datagrams and has not come back for
	// more (ReaderBusy).
	readerBusy atomic.Bool
}

var _ Conn = (*PipeConn)(nil)

// ReaderBusy reports whether this end's reader holds datagrams: set before
// a ReadBatch counts what it took, cleared when the reader calls ReadBatch
// again. A fake-time driver that sees nothing in flight and no reader busy
// knows every datagram sent was handled, with no gap between the two
// (engine.Engine.ReceiveIdle).
func (c *PipeConn) ReaderBusy() bool { return c.readerBusy.Load() }

// pipe is what the two ends share.
type pipe struct {
	filter   func(from netip.AddrPort, m *Message) bool
	maxBytes int // 0: by address family
	free     chan []byte
	scratch  sync.Pool // *filterScratch
}

type pipeDatagram struct {
	buf       []byte // the datagram, owned by the queue until read
	from      netip.AddrPort
	tos       uint8
	coalesced bool
}

// filterScratch is the Message handed to the filter, pooled so a filtered
// pipe does not allocate per datagram.
type filterScratch struct {
	m    Message
	bufs [1][]byte
}

// NewPipe returns the two connected ends of an in-memory datagram pipe.
// It panics if opts.Depth or opts.MaxDatagramBytes is negative.
func NewPipe(opts PipeOptions) (a, b *PipeConn) {
	if opts.Depth < 0 {
		panic(fmt.Sprintf("pktio: NewPipe: Depth %d must not be negative", opts.Depth))
	}
	if opts.MaxDatagramBytes < 0 {
		panic(fmt.Sprintf("pktio: NewPipe: MaxDatagramBytes %d must not be negative", opts.MaxDatagramBytes))
	}
	depth := opts.Depth
	if depth == 0 {
		depth = DefaultPipeDepth
	}
	addrA, addrB := opts.A, opts.B
	if !addrA.IsValid() {
		addrA = DefaultPipeA
	}
	if !addrB.IsValid() {
		addrB = DefaultPipeB
	}
	p := &pipe{
		filter:   opts.Filter,
		maxBytes: opts.MaxDatagramBytes,
		free:     make(chan []byte, 2*depth),
	}
	p.scratch.New = func() any { return new(filterScratch) }
	a = &PipeConn{p: p, local: unmapAddrPort(addrA), in: make(chan pipeDatagram, depth), closed: make(chan struct{})}
	b = &PipeConn{p: p, local: unmapAddrPort(addrB), in: make(chan pipeDatagram, depth), closed: make(chan struct{})}
	a.peer, b.peer = b, a
	return a, b
}

func unmapAddrPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

func (p *pipe) getBuf(size int) []byte {
	select {
	case b := <-p.free:
		if cap(b) >= size {
			return b[:size]
		}
	default:
	}
	return make([]byte, size, max(size, pipeBufBytes))
}

func (p *pipe) putBuf(b []byte) {
	select {
	case p.free <- b[:0]:
	default:
	}
}

// maxDatagram is the largest datagram an end at from may write.
func (p *pipe) maxDatagram(from netip.AddrPort) int {
	if p.maxBytes > 0 {
		return p.maxBytes
	}
	if from.Addr().Is4() {
		return maxUDPPayload4
	}
	return maxUDPPayload6
}

// ReadBatch blocks until a datagram is queued for this end or it is closed,
// then fills msgs[:n] with the datagrams queued, at most len(msgs). Each
// msgs[i] needs Buffers[0].
func (c *PipeConn) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	for i := range msgs {
		if len(msgs[i].Buffers) == 0 {
			return 0, fmt.Errorf("pktio: read batch: msgs[%d] has no buffer", i)
		}
	}
	var d pipeDatagram
	c.readerBusy.Store(false) // back for more: the last batch is handled
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	select {
	case d = <-c.in:
	case <-c.closed:
		return 0, net.ErrClosed
	}
	c.readerBusy.Store(true)
	n := 0
	var bytes, truncated uint64
	for {
		m := &msgs[n]
		m.N = copy(m.Buffers[0], d.buf)
		m.Truncated = m.N < len(d.buf)
		m.Addr = d.from
		m.TOS = d.tos
		m.Coalesced = d.coalesced
		c.p.putBuf(d.buf)
		bytes += uint64(m.N)
		if m.Truncated {
			truncated++
		}
		n++
		if n == len(msgs) {
			break
		}
		select {
		case d = <-c.in:
			continue
		default:
		}
		break
	}
	c.datagramsReceived.Add(uint64(n))
	c.bytesReceived.Add(bytes)
	if truncated > 0 {
		c.truncated.Add(truncated)
	}
	return n, nil
}

// WriteBatch copies msgs in order into the peer's queue. It never blocks:
// datagrams that find the queue full are dropped, as are those the filter
// drops, those not addressed to the peer and those for a closed peer; they
// all count as sent (and in the matching PipeStats drop counter). It fails
// only for this end closed (net.ErrClosed), a message without a
// destination, or a datagram larger than MaxDatagramBytes (wrapping
// syscall.EMSGSIZE); msgs[n+1:] are then not tried.
func (c *PipeConn) WriteBatch(msgs []Message) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	var sent, bytes, filtered, full, peerClosed, noRoute uint64
	defer func() {
		c.datagramsSent.Add(sent)
		c.bytesSent.Add(bytes)
		c.filterDropped.Add(filtered)
		c.queueFullDropped.Add(full)
		c.peerClosedDropped.Add(peerClosed)
		c.noRouteDropped.Add(noRoute)
	}()
	maxSize := c.p.maxDatagram(c.local)
	for i := range msgs {
		m := &msgs[i]
		size := datagramLen(m)
		if !m.Addr.IsValid() {
			c.sendErrors.Add(1)
			return i, fmt.Errorf("pktio: write %d-byte datagram: %w", size, errNoDestination)
		}
		if size > maxSize {
			c.sendErrors.Add(1)
			return i, fmt.Errorf("pktio: write %d-byte datagram to %s: %w (largest %d)", size, m.Addr, syscall.EMSGSIZE, maxSize)
		}
		sent++
		bytes += uint64(size)
		if unmapAddrPort(m.Addr) != c.peer.local {
			noRoute++
			continue
		}
		buf := c.p.getBuf(size)
		off := 0
		for _, b := range m.Buffers {
			off += copy(buf[off:], b)
		}
		from := c.local
		if m.SrcPort != 0 {
			from = netip.AddrPortFrom(from.Addr(), m.SrcPort)
		}
		d := pipeDatagram{buf: buf, from: from, tos: m.TOS}
		if c.p.filter != nil {
			s := c.p.scratch.Get().(*filterScratch)
			s.bufs[0] = buf
			s.m = Message{Buffers: s.bufs[:], N: size, Addr: m.Addr, SrcPort: from.Port(), TOS: m.TOS}
			drop := c.p.filter(from, &s.m)
			d.tos, d.coalesced = s.m.TOS, s.m.Coalesced
			if s.m.N >= 0 && s.m.N < len(d.buf) {
				d.buf = d.buf[:s.m.N]
			}
			s.m, s.bufs[0] = Message{}, nil
			c.p.scratch.Put(s)
			if drop {
				filtered++
				c.p.putBuf(buf)
				continue
			}
		}
		select {
		case <-c.peer.closed:
			peerClosed++
			c.p.putBuf(buf)
			continue
		default:
		}
		select {
		case c.peer.in <- d:
		default:
			full++
			c.p.putBuf(buf)
		}
	}
	return len(msgs), nil
}

// LocalAddr is this end's address (PipeOptions.A or B).
func (c *PipeConn) LocalAddr() netip.AddrPort { return c.local }

// Close closes this end: a pending and every later ReadBatch and
// WriteBatch return net.ErrClosed. Closing twice returns net.ErrClosed.
func (c *PipeConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		close(c.closed)
		err = nil
	})
	return err
}

// Stats returns the counters. Safe to call concurrently with I/O.
func (c *PipeConn) Stats() PipeStats {
	return PipeStats{
		DatagramsSent:     c.datagramsSent.Load(),
		BytesSent:         c.bytesSent.Load(),
		SendErrors:        c.sendErrors.Load(),
		DatagramsReceived: c.datagramsReceived.Load(),
		BytesReceived:     c.bytesReceived.Load(),
		Truncated:         c.truncated.Load(),
		FilterDropped:     c.filterDropped.Load(),
		QueueFullDropped:  c.queueFullDropped.Load(),
		PeerClosedDropped: c.peerClosedDropped.Load(),
		NoRouteDropped:    c.noRouteDropped.Load(),
	}
}
