//go:build linux

package pktio

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// DefaultUDPBufferBytes is UDPOptions.RecvBufferBytes and
	// SendBufferBytes when they are 0.
	DefaultUDPBufferBytes = 4 << 20
	// DefaultBatchSize is UDPOptions.BatchSize when it is 0.
	DefaultBatchSize = 64
	// MaxBatchSize bounds UDPOptions.BatchSize (the kernel's UIO_MAXIOV
	// caps one recvmmsg/sendmmsg at 1024 datagrams).
	MaxBatchSize = 1024

	// sockaddrLen holds a sockaddr_in6 (28 bytes) or a sockaddr_in (16).
	sockaddrLen = unix.SizeofSockaddrInet6
	// oobLen is the control buffer per datagram: on read a TOS / traffic
	// class cmsg (CMSG_SPACE(1) or CMSG_SPACE(4), 24 bytes), an
	// SO_RXQ_OVFL cmsg (24 bytes), an SO_TIMESTAMPNS cmsg (32 bytes) and
	// a UDP_GRO cmsg (24 bytes); on write one TOS cmsg. 128 leaves room.
	oobLen = 128

	// groBufBytes holds the largest datagram a UDP_GRO read returns: the
	// kernel coalesces at most 64 KiB (gro_max_size, UDP_GRO_CNT_MAX 64
	// segments) into one UDP datagram.
	groBufBytes = 1 << 16
)

// UDPConn is a Conn over an unconnected UDP socket (Linux). Reads and writes
// are batched with recvmmsg(2) and sendmmsg(2), issued as raw system calls
// through syscall.RawConn so the Go netpoller waits on EAGAIN and Close
// unblocks a pending read. All message headers, iovecs, sockaddrs and
// control buffers are allocated once per conn: the steady-state hot path
// allocates nothing.
//
// The socket sends with DF and IP ID 0 (IPv4, IP_PMTUDISC_DO, never
// connected) and without UDP GSO, see the package comment; it receives
// with UDP GRO if UDPOptions.GRO asks.
type UDPConn struct {
	conn       *net.UDPConn
	raw        syscall.RawConn
	local      netip.AddrPort
	v6         bool
	defaultTOS uint8
	batch      int
	rcvbuf     int
	sndbuf     int

	rmu sync.Mutex
	r   recvState // Precondition: rmu is held.
	gro *groState // nil without UDPOptions.GRO; Precondition: rmu is held.
	wmu sync.Mutex
	w   sendState // Precondition: wmu is held.

	datagramsSent     atomic.Uint64
	bytesSent         atomic.Uint64
	datagramsReceived atomic.Uint64
	bytesReceived     atomic.Uint64
	sendErrors        atomic.Uint64
	truncated         atomic.Uint64
	recvBufferDrops   atomic.Uint64
	groReads          atomic.Uint64
	groSegments       atomic.Uint64
}

var _ Conn = (*UDPConn)(nil)

// groState holds what one UDP_GRO recvmmsg read and ReadBatch has not yet
// handed out: the read's buffers and its datagrams, split, in order.
type groState struct {
	// area holds bufs: memory of its own (mmap), not Go's heap, so that
	// its pages are resident only once a read has filled them. From Go's
	// heap a conn's 4 MiB came back zeroed, every page touched, as soon
	// as a closed conn's area was reused: a lab of 448 flows, each with
	// its conns, peaked at 861 MB.
	area []byte
	bufs [][]byte // BatchSize buffers of groBufBytes, in area
	segs []groSeg // the datagrams of the last read
	next int      // segs[next:] are not handed out yet
}

// newGROState maps the buffers of batch coalesced reads.
func newGROState(batch int) (*groState, error) {
	area, err := unix.Mmap(-1, 0, batch*groBufBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("pktio: map %d GRO buffers: %w", batch, err)
	}
	g := &groState{area: area, bufs: make([][]byte, batch), segs: make([]groSeg, 0, batch)}
	for i := range g.bufs {
		g.bufs[i] = area[i*groBufBytes : (i+1)*groBufBytes : (i+1)*groBufBytes]
	}
	return g, nil
}

// release unmaps the buffers; the caller holds the read lock, so no read
// is in them, and the conn is closed, so none will be.
func (g *groState) release() {
	if g.area == nil {
		return
	}
	clear(g.segs[:cap(g.segs)])
	g.segs, g.next, g.bufs = g.segs[:0], 0, nil
	_ = unix.Munmap(g.area)
	g.area = nil
}

// groSeg is one datagram of a coalesced read.
type groSeg struct {
	b         []byte // in a bufs[i]
	addr      netip.AddrPort
	tos       uint8
	rx        time.Time
	truncated bool // the read was cut short (MSG_TRUNC): its last datagram lost its tail
	coalesced bool // one of a run of several
}

// fixedSourcePort marks UDPConn for FixedSourcePort.
func (c *UDPConn) fixedSourcePort() {}

// recvState is the per-conn recvmmsg state, reused by every ReadBatch.
type recvState struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names [][sockaddrLen]byte
	oob   []byte
	fn    func(fd uintptr) bool // r.recv, bound once so calls do not allocate
	count int                   // in: datagrams to ask for
	n     int                   // out: datagrams received
	errno syscall.Errno         // out: the error of the call, 0 if none
}

// sendState is the per-conn sendmmsg state, reused by every WriteBatch.
type sendState struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec // grows to the most buffers of one batch
	names [][sockaddrLen]byte
	oob   []byte
	sizes []int // datagram lengths, for stats and errors
	used  int   // iovecs filled by the last prepareWrite
	fn    func(fd uintptr) bool
	count int           // in: datagrams prepared
	off   int           // out: datagrams sent
	errno syscall.Errno // out: why hdrs[off] was not sent, 0 if none
}

// ListenUDP opens an unconnected UDP socket bound to laddr. The address
// family follows laddr: an IPv4 address (including 0.0.0.0) gives an AF_INET
// socket, an IPv6 address (including ::) an IPV6_V6ONLY AF_INET6 socket.
// Port 0 binds an ephemeral port (RoCEv2 clients carry ECMP entropy in the
// UDP source port); LocalAddr reports it.
//
// The socket is created in the network namespace of the calling OS thread.
func ListenUDP(laddr netip.AddrPort, opts UDPOptions) (*UDPConn, error) {
	if !laddr.Addr().IsValid() {
		return nil, fmt.Errorf("pktio: listen udp: no local address (use 0.0.0.0:port or [::]:port for any)")
	}
	addr := laddr.Addr().Unmap()
	laddr = netip.AddrPortFrom(addr, laddr.Port())
	batch := opts.BatchSize
	if batch == 0 {
		batch = DefaultBatchSize
	}
	if batch < 1 || batch > MaxBatchSize {
		return nil, fmt.Errorf("pktio: listen udp %s: BatchSize %d out of range 1..%d", laddr, opts.BatchSize, MaxBatchSize)
	}
	rcvbuf, sndbuf := opts.RecvBufferBytes, opts.SendBufferBytes
	if rcvbuf == 0 {
		rcvbuf = DefaultUDPBufferBytes
	}
	if sndbuf == 0 {
		sndbuf = DefaultUDPBufferBytes
	}
	if rcvbuf < 0 || sndbuf < 0 {
		return nil, fmt.Errorf("pktio: listen udp %s: buffer sizes must not be negative (RecvBufferBytes %d, SendBufferBytes %d)", laddr, opts.RecvBufferBytes, opts.SendBufferBytes)
	}
	v6 := addr.Is6()
	network := "udp4"
	if v6 {
		network = "udp6" // net sets IPV6_V6ONLY for "udp6"; setOptions does it again
	}

	var optErr error
	lc := net.ListenConfig{
		Control: func(_, _ string, rc syscall.RawConn) error {
			if err := rc.Control(func(fd uintptr) {
				optErr = setOptions(int(fd), v6, opts.DefaultTOS, rcvbuf, sndbuf, opts.ReusePort, opts.GRO)
			}); err != nil {
				return err
			}
			return optErr
		},
	}
	pc, err := lc.ListenPacket(context.Background(), network, laddr.String())
	if err != nil {
		if optErr != nil {
			return nil, fmt.Errorf("pktio: listen udp %s: %w", laddr, optErr)
		}
		// Strip net's "listen udp4 …: bind:" wrapping down to the errno, so
		// the message reads "pktio: listen udp 198.18.0.1:4791: address
		// already in use" and errors.Is(err, syscall.EADDRINUSE) holds.
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return nil, fmt.Errorf("pktio: listen udp %s: %w", laddr, errno)
		}
		return nil, fmt.Errorf("pktio: listen udp %s: %w", laddr, err)
	}
	uc := pc.(*net.UDPConn)
	raw, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("pktio: listen udp %s: %w", laddr, err)
	}
	c := &UDPConn{
		conn:       uc,
		raw:        raw,
		v6:         v6,
		defaultTOS: opts.DefaultTOS,
		batch:      batch,
	}
	if la, ok := uc.LocalAddr().(*net.UDPAddr); ok {
		ap := la.AddrPort()
		c.local = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	_ = raw.Control(func(fd uintptr) {
		c.rcvbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		c.sndbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	c.r.init(batch)
	c.w.init(batch)
	if opts.GRO {
		if c.gro, err = newGROState(batch); err != nil {
			uc.Close()
			return nil, err
		}
	}
	return c, nil
}

// setOptions sets the socket options before bind.
func setOptions(fd int, v6 bool, tos uint8, rcvbuf, sndbuf int, reusePort, gro bool) error {
	type opt struct {
		name         string
		level, opt   int
		value        int
		fallback     int // option to try when this one fails, 0 for none
		fallbackName string
	}
	opts := []opt{
		{"SO_RCVBUFFORCE", unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf, unix.SO_RCVBUF, "SO_RCVBUF"},
		{"SO_SNDBUFFORCE", unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndbuf, unix.SO_SNDBUF, "SO_SNDBUF"},
		// Kernel drop count with each datagram (UDPStats.RecvBufferDrops).
		{"SO_RXQ_OVFL", unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1, 0, ""},
		// Each datagram's arrival time (Message.RxTime): a batch read
		// late must not make its packets look simultaneous.
		{"SO_TIMESTAMPNS", unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1, 0, ""},
	}
	if reusePort {
		opts = append(opts, opt{"SO_REUSEPORT", unix.SOL_SOCKET, unix.SO_REUSEPORT, 1, 0, ""})
	}
	if gro {
		opts = append(opts, opt{"UDP_GRO", unix.SOL_UDP, unix.UDP_GRO, 1, 0, ""})
	}
	if v6 {
		opts = append(opts,
			opt{"IPV6_V6ONLY", unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1, 0, ""},
			// No local fragmentation: a datagram over the path MTU fails
			// with EMSGSIZE instead of leaving as fragments.
			opt{"IPV6_MTU_DISCOVER", unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, 0, ""},
			opt{"IPV6_TCLASS", unix.IPPROTO_IPV6, unix.IPV6_TCLASS, int(tos), 0, ""},
			opt{"IPV6_RECVTCLASS", unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, 0, ""},
		)
	} else {
		opts = append(opts,
			// DF on every datagram; on an unconnected socket the kernel then
			// sends IP ID 0 (ip_select_ident_segs), which the ICRC assumes.
			opt{"IP_MTU_DISCOVER", unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, 0, ""},
			opt{"IP_TOS", unix.IPPROTO_IP, unix.IP_TOS, int(tos), 0, ""},
			opt{"IP_RECVTOS", unix.IPPROTO_IP, unix.IP_RECVTOS, 1, 0, ""},
		)
	}
	for _, o := range opts {
		err := unix.SetsockoptInt(fd, o.level, o.opt, o.value)
		if err != nil && o.fallback != 0 {
			if err = unix.SetsockoptInt(fd, o.level, o.fallback, o.value); err != nil {
				return fmt.Errorf("setsockopt %s=%d: %w", o.fallbackName, o.value, err)
			}
		}
		if err != nil {
			return fmt.Errorf("setsockopt %s=%d: %w", o.name, o.value, err)
		}
	}
	return nil
}

func (r *recvState) init(batch int) {
	r.hdrs = make([]unix.Mmsghdr, batch)
	r.iovs = make([]unix.Iovec, batch)
	r.names = make([][sockaddrLen]byte, batch)
	r.oob = make([]byte, batch*oobLen)
	for i := range r.hdrs {
		h := &r.hdrs[i].Hdr
		h.Name = &r.names[i][0]
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		h.Control = &r.oob[i*oobLen]
	}
	r.fn = r.recv
}

// recv runs recvmmsg, never blocking; false asks the netpoller to wait
// until the socket is readable.
//
// recvmmsg and sendmmsg go through RawSyscall with MSG_DONTWAIT, as
// gVisor's rawfile does: a Syscall announces itself to the runtime, which
// wakes its sysmon thread when the process had gone idle (a futex wake on
// the first call after every sleep of a paced sender) and hands the P to
// another thread when the call runs long (the veth runs the receiver's
// softirq inside the sender's call). Neither call can block, so neither is
// needed: a paced UET client at 10,000 PDCs spent 9-13 % of its CPU
// waking sysmon, and one RoCEv2 QP's client half its CPU per packet
// (issue 28's scale rows).
func (r *recvState) recv(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.count), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			r.n, r.errno = int(n), 0
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			r.n, r.errno = 0, e
			return true
		}
	}
}

func (w *sendState) init(batch int) {
	w.hdrs = make([]unix.Mmsghdr, batch)
	w.names = make([][sockaddrLen]byte, batch)
	w.oob = make([]byte, batch*oobLen)
	w.sizes = make([]int, batch)
	w.iovs = make([]unix.Iovec, 4*batch)
	for i := range w.hdrs {
		w.hdrs[i].Hdr.Name = &w.names[i][0]
	}
	w.fn = w.send
}

// reserve starts a batch of msgs: it sizes the iovecs for their buffers
// plus extra per message. It runs before any header points into the array:
// growing it later would leave earlier headers pointing at the old one.
func (w *sendState) reserve(msgs []Message, extra int) {
	total := extra * len(msgs)
	for i := range msgs {
		total += len(msgs[i].Buffers)
	}
	if total > len(w.iovs) {
		w.iovs = make([]unix.Iovec, max(total, 2*len(w.iovs)))
	}
	w.used = 0
}

// putBuffers points iovs at bufs, one each.
func putBuffers(iovs []unix.Iovec, bufs [][]byte) {
	for x, b := range bufs {
		iovs[x].Base = unsafe.SliceData(b)
		iovs[x].SetLen(len(b))
	}
}

// send runs sendmmsg until every prepared datagram is sent or one fails.
// sendmmsg returns a short count when a later datagram fails, and that
// datagram's error on the next call.
func (w *sendState) send(fd uintptr) bool {
	for w.off < w.count {
		n, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[w.off])), uintptr(w.count-w.off), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			if n == 0 { // not expected from Linux; do not spin
				w.errno = unix.EIO
				return true
			}
			w.off += int(n)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			w.errno = e
			return true
		}
	}
	return true
}

// ReadBatch blocks until at least one datagram arrives and reads up to
// min(len(msgs), BatchSize) datagrams with one recvmmsg. Each msgs[i] needs
// Buffers[0]; the buffers are handed to the kernel, so they escape to the
// heap. Returns net.ErrClosed after Close, os.ErrDeadlineExceeded (wrapped)
// after a SetReadDeadline passes.
func (c *UDPConn) ReadBatch(msgs []Message) (int, error) {
	k := min(len(msgs), c.batch)
	if k == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.gro != nil {
		return c.readGRO(msgs[:k])
	}
	r := &c.r
	for i := range k {
		if len(msgs[i].Buffers) == 0 {
			return 0, fmt.Errorf("pktio: read batch: msgs[%d] has no buffer", i)
		}
		b := msgs[i].Buffers[0]
		r.iovs[i].Base = unsafe.SliceData(b)
		r.iovs[i].SetLen(len(b))
		h := &r.hdrs[i]
		h.Hdr.Namelen = sockaddrLen
		h.Hdr.SetControllen(oobLen)
		h.Hdr.Flags = 0
		h.Len = 0
	}
	r.count = k
	err := c.raw.Read(r.fn)
	clear(r.iovs[:k]) // do not keep the caller's buffers alive
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return 0, net.ErrClosed
		}
		return 0, fmt.Errorf("pktio: read batch: %w", err)
	}
	if r.errno != 0 {
		return 0, fmt.Errorf("pktio: read batch: recvmmsg: %w", r.errno)
	}
	var bytes, truncated uint64
	for i := range r.n {
		h := &r.hdrs[i]
		m := &msgs[i]
		m.N = int(h.Len)
		m.Truncated = h.Hdr.Flags&unix.MSG_TRUNC != 0
		m.Coalesced = false
		m.Addr = parseSockaddr(&r.names[i])
		off := i * oobLen
		var drops uint32
		m.TOS, drops, m.RxTime, _ = parseCmsgs(r.oob[off : off+min(int(h.Hdr.Controllen), oobLen)])
		if drops > 0 && uint64(drops) > c.recvBufferDrops.Load() {
			// Cumulative sk_drops; reads are serialised by rmu.
			c.recvBufferDrops.Store(uint64(drops))
		}
		bytes += uint64(m.N)
		if m.Truncated {
			truncated++
		}
	}
	c.datagramsReceived.Add(uint64(r.n))
	c.bytesReceived.Add(bytes)
	if truncated > 0 {
		c.truncated.Add(truncated)
	}
	return r.n, nil
}

// readGRO is ReadBatch on a UDP_GRO socket: it hands out the datagrams of
// the last read first, and reads again (one recvmmsg into the conn's 64 KiB
// buffers) only when none is left. A datagram longer than its msgs buffer
// is cut, Truncated, like an ordinary read's.
// Precondition: rmu is held; len(msgs) >= 1.
func (c *UDPConn) readGRO(msgs []Message) (int, error) {
	g := c.gro
	if g.area == nil {
		return 0, net.ErrClosed
	}
	if g.next == len(g.segs) {
		if err := c.fillGRO(); err != nil {
			return 0, err
		}
	}
	n := 0
	var bytes, truncated uint64
	for n < len(msgs) && g.next < len(g.segs) {
		s := &g.segs[g.next]
		m := &msgs[n]
		if len(m.Buffers) == 0 {
			return n, fmt.Errorf("pktio: read batch: msgs[%d] has no buffer", n)
		}
		m.N = copy(m.Buffers[0], s.b)
		m.Truncated = s.truncated || m.N < len(s.b)
		m.Addr, m.TOS, m.RxTime, m.Coalesced = s.addr, s.tos, s.rx, s.coalesced
		bytes += uint64(m.N)
		if m.Truncated {
			truncated++
		}
		g.segs[g.next] = groSeg{} // do not keep a read's buffer reachable from a stale entry
		g.next++
		n++
	}
	// Bytes as stored in msgs, like an ordinary read's.
	c.bytesReceived.Add(bytes)
	if truncated > 0 {
		c.truncated.Add(truncated)
	}
	return n, nil
}

// fillGRO reads one batch of (possibly coalesced) datagrams into the GRO
// buffers and splits them into g.segs.
// Precondition: rmu is held; every earlier datagram was handed out.
func (c *UDPConn) fillGRO() error {
	g, r := c.gro, &c.r
	g.segs, g.next = g.segs[:0], 0
	for i := range g.bufs {
		r.iovs[i].Base = unsafe.SliceData(g.bufs[i])
		r.iovs[i].SetLen(groBufBytes)
		h := &r.hdrs[i]
		h.Hdr.Namelen = sockaddrLen
		h.Hdr.SetControllen(oobLen)
		h.Hdr.Flags = 0
		h.Len = 0
	}
	r.count = len(g.bufs)
	if err := c.raw.Read(r.fn); err != nil {
		if errors.Is(err, net.ErrClosed) {
			return net.ErrClosed
		}
		return fmt.Errorf("pktio: read batch: %w", err)
	}
	if r.errno != 0 {
		return fmt.Errorf("pktio: read batch: recvmmsg: %w", r.errno)
	}
	var reads, coalesced uint64
	for i := range r.n {
		h := &r.hdrs[i]
		off := i * oobLen
		tos, drops, rx, gsoSize := parseCmsgs(r.oob[off : off+min(int(h.Hdr.Controllen), oobLen)])
		if drops > 0 && uint64(drops) > c.recvBufferDrops.Load() {
			c.recvBufferDrops.Store(uint64(drops))
		}
		addr := parseSockaddr(&r.names[i])
		data := g.bufs[i][:min(int(h.Len), groBufBytes)]
		first := len(g.segs)
		for {
			var seg []byte
			seg, data = nextGROSegment(data, gsoSize)
			g.segs = append(g.segs, groSeg{b: seg, addr: addr, tos: tos, rx: rx})
			if len(data) == 0 {
				break
			}
		}
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			g.segs[len(g.segs)-1].truncated = true
		}
		// The UDP_GRO control message comes exactly with an sk_buff the
		// device coalesced (skb_is_gso), what a TC program saw as one.
		if gsoSize > 0 {
			reads++
			coalesced += uint64(len(g.segs) - first)
			for j := first; j < len(g.segs); j++ {
				g.segs[j].coalesced = true
			}
		}
	}
	c.datagramsReceived.Add(uint64(len(g.segs)))
	if reads > 0 {
		c.groReads.Add(reads)
		c.groSegments.Add(coalesced)
	}
	return nil
}

// nextGROSegment splits the next datagram off a coalesced read, whose
// datagrams are gsoSize bytes each but the last (the kernel coalesces only
// such runs): gsoSize bytes, or all of data when gsoSize is 0 (no UDP_GRO
// control message: one datagram) or not below len(data). An empty read is
// one empty datagram.
func nextGROSegment(data []byte, gsoSize int) (seg, rest []byte) {
	if gsoSize <= 0 || gsoSize >= len(data) {
		return data, nil
	}
	return data[:gsoSize], data[gsoSize:]
}

// WriteBatch sends msgs in order, BatchSize datagrams per sendmmsg, each to
// its Message.Addr with its Message.TOS (a per-datagram IP_TOS /
// IPV6_TCLASS control message when it differs from UDPOptions.DefaultTOS).
// It returns how many were sent; if that is less than len(msgs), err says
// why msgs[n] failed (e.g. wrapping syscall.EMSGSIZE for a datagram larger
// than the path MTU: DF is set, nothing is fragmented) and msgs[n+1:] were
// not tried.
func (c *UDPConn) WriteBatch(msgs []Message) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return writeBatches(msgs, c.batch, c.prepareWrite, c.sendPrepared, &c.sendErrors)
}

// writeBatches sends msgs in chunks of at most batch: prepare builds a
// chunk's system-call state (k datagrams, err for the one it stopped at),
// send makes the call. A failed call counts in sendErrors. It returns how
// many were sent and why the next one was not.
func writeBatches(msgs []Message, batch int, prepare func([]Message) (int, error), send func(int) (int, error), sendErrors *atomic.Uint64) (int, error) {
	sent := 0
	for sent < len(msgs) {
		chunk := msgs[sent:min(len(msgs), sent+batch)]
		k, prepErr := prepare(chunk)
		n, sendErr := send(k)
		if sendErr == nil && n == k && prepErr != nil {
			sendErr = prepErr
		}
		if sendErr != nil {
			sent += n
			sendErrors.Add(1)
			if errors.Is(sendErr, net.ErrClosed) {
				return sent, net.ErrClosed
			}
			return sent, sendErr
		}
		sent += k
	}
	return sent, nil
}

// prepareWrite fills the send state for msgs (at most BatchSize) and returns
// how many it prepared; err says why msgs[k] could not be.
// Precondition: wmu is held.
func (c *UDPConn) prepareWrite(msgs []Message) (k int, err error) {
	w := &c.w
	w.reserve(msgs, 0)
	j := 0
	for i := range msgs {
		m := &msgs[i]
		w.sizes[i] = datagramLen(m)
		if m.SrcPort != 0 && m.SrcPort != c.local.Port() {
			return i, fmt.Errorf("pktio: write %d-byte datagram from port %d: %w", w.sizes[i], m.SrcPort, errSourcePort)
		}
		namelen, err := putSockaddr(&w.names[i], m.Addr, c.v6)
		if err != nil {
			return i, fmt.Errorf("pktio: write %d-byte datagram to %s: %w", w.sizes[i], m.Addr, err)
		}
		h := &w.hdrs[i]
		h.Len = 0
		h.Hdr.Namelen = namelen
		h.Hdr.Iov = nil
		if nb := len(m.Buffers); nb > 0 {
			putBuffers(w.iovs[j:], m.Buffers)
			h.Hdr.Iov = &w.iovs[j]
			j += nb
		}
		h.Hdr.SetIovlen(len(m.Buffers))
		w.used = j
		if m.TOS != c.defaultTOS {
			off := i * oobLen
			h.Hdr.Control = &w.oob[off]
			h.Hdr.SetControllen(putTOSCmsg(w.oob[off:off+oobLen], c.v6, m.TOS))
		} else {
			h.Hdr.Control = nil
			h.Hdr.SetControllen(0)
		}
	}
	return len(msgs), nil
}

// sendPrepared sends the first k prepared datagrams and returns how many
// went out. Precondition: wmu is held.
func (c *UDPConn) sendPrepared(k int) (int, error) {
	n, err := c.w.sendmmsg(c.raw, k, &c.datagramsSent, &c.bytesSent)
	if err == nil && c.w.errno != 0 {
		err = fmt.Errorf("pktio: write %d-byte datagram to %s: %w", c.w.sizes[n], c.destination(n), c.w.errno)
	}
	return n, err
}

// rawWriter is the write side of a syscall.RawConn (or a pollFD): f is
// called until it returns true, waiting for the socket to be writable in
// between.
type rawWriter interface {
	Write(f func(fd uintptr) bool) error
}

// sendmmsg makes one sendmmsg of the first k prepared datagrams on raw, counts
// what went out and returns how many did. A datagram the kernel refused
// leaves its errno in w.errno (at index n) for the owner to name; a failed
// call is the error. Precondition: the owner's write lock is held.
func (w *sendState) sendmmsg(raw rawWriter, k int, datagrams, bytes *atomic.Uint64) (int, error) {
	if k == 0 {
		return 0, nil
	}
	w.count, w.off, w.errno = k, 0, 0
	err := raw.Write(w.fn)
	n := w.off
	clear(w.iovs[:w.used]) // do not keep the caller's buffers alive
	var sum uint64
	for _, s := range w.sizes[:n] {
		sum += uint64(s)
	}
	datagrams.Add(uint64(n))
	bytes.Add(sum)
	if err != nil {
		if errors.Is(err, os.ErrClosed) || errors.Is(err, net.ErrClosed) {
			return n, net.ErrClosed
		}
		return n, fmt.Errorf("pktio: write batch: %w", err)
	}
	return n, nil
}

// destination decodes the sockaddr of prepared datagram i, for errors.
// Precondition: wmu is held.
func (c *UDPConn) destination(i int) netip.AddrPort {
	return parseSockaddr(&c.w.names[i])
}

// LocalAddr is the bound address, with the port the kernel chose for port 0.
func (c *UDPConn) LocalAddr() netip.AddrPort { return c.local }

// Close closes the socket and unblocks a pending ReadBatch (net.ErrClosed).
func (c *UDPConn) Close() error {
	err := c.conn.Close()
	if c.gro != nil {
		// A read in progress ends with the socket; then the buffers go.
		c.rmu.Lock()
		c.gro.release()
		c.rmu.Unlock()
	}
	return err
}

// SetReadDeadline makes a blocked or future ReadBatch fail with
// os.ErrDeadlineExceeded once t passes; the zero t means no deadline.
func (c *UDPConn) SetReadDeadline(t time.Time) error { return c.conn.SetReadDeadline(t) }

// BufferBytes reports the receive and send buffers the kernel granted
// (SO_RCVBUF / SO_SNDBUF as read back: twice the size asked for, the kernel
// reserving half for its bookkeeping, or capped by rmem_max / wmem_max when
// SO_*BUFFORCE was not permitted).
func (c *UDPConn) BufferBytes() (recv, send int) { return c.rcvbuf, c.sndbuf }

// Stats returns the counters. Safe to call concurrently with I/O.
func (c *UDPConn) Stats() UDPStats {
	return UDPStats{
		DatagramsSent:     c.datagramsSent.Load(),
		BytesSent:         c.bytesSent.Load(),
		DatagramsReceived: c.datagramsReceived.Load(),
		BytesReceived:     c.bytesReceived.Load(),
		SendErrors:        c.sendErrors.Load(),
		Truncated:         c.truncated.Load(),
		RecvBufferDrops:   c.recvBufferDrops.Load(),
		GROReads:          c.groReads.Load(),
		GROSegments:       c.groSegments.Load(),
	}
}

var (
	errIPv6ToIPv4Socket = errors.New("IPv6 destination on an IPv4 socket")
	errIPv4ToIPv6Socket = errors.New("IPv4 destination on an IPv6 socket (IPV6_V6ONLY)")
)

// putSockaddr encodes ap as the sockaddr of the socket's family (v6: an
// AF_INET6 socket) and returns its length.
func putSockaddr(b *[sockaddrLen]byte, ap netip.AddrPort, v6 bool) (uint32, error) {
	a := ap.Addr()
	if !a.IsValid() {
		return 0, errNoDestination
	}
	if !v6 {
		a = a.Unmap()
		if !a.Is4() {
			return 0, errIPv6ToIPv4Socket
		}
		binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:4], ap.Port())
		a4 := a.As4()
		copy(b[4:8], a4[:])
		clear(b[8:16])
		return unix.SizeofSockaddrInet4, nil
	}
	if a.Is4() {
		return 0, errIPv4ToIPv6Socket
	}
	var scope uint32
	if zone := a.Zone(); zone != "" {
		if id, err := strconv.ParseUint(zone, 10, 32); err == nil {
			scope = uint32(id)
		} else if ifi, err := net.InterfaceByName(zone); err == nil {
			scope = uint32(ifi.Index)
		} else {
			return 0, fmt.Errorf("zone %q: %w", zone, err)
		}
	}
	binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET6)
	binary.BigEndian.PutUint16(b[2:4], ap.Port())
	clear(b[4:8]) // flow info: let the kernel choose the flow label
	a16 := a.As16()
	copy(b[8:24], a16[:])
	binary.NativeEndian.PutUint32(b[24:28], scope)
	return unix.SizeofSockaddrInet6, nil
}

// parseSockaddr decodes a sockaddr_in or sockaddr_in6 written by the kernel.
// IPv6 link-local sources get their scope as a numeric zone (the only case
// that allocates).
func parseSockaddr(b *[sockaddrLen]byte) netip.AddrPort {
	port := binary.BigEndian.Uint16(b[2:4])
	switch binary.NativeEndian.Uint16(b[0:2]) {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port)
	case unix.AF_INET6:
		a := netip.AddrFrom16([16]byte(b[8:24]))
		if scope := binary.NativeEndian.Uint32(b[24:28]); scope != 0 {
			a = a.WithZone(strconv.FormatUint(uint64(scope), 10))
		}
		return netip.AddrPortFrom(a, port)
	}
	return netip.AddrPort{}
}

// putTOSCmsg writes an IP_TOS (IPv4) or IPV6_TCLASS (IPv6) control message
// carrying tos as an int (both accept an int; IP_TOS also a byte) and
// returns its space.
func putTOSCmsg(b []byte, v6 bool, tos uint8) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	if v6 {
		h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	} else {
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	}
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], uint32(tos))
	return unix.CmsgSpace(4)
}

// parseCmsgs walks the control messages of one received datagram without
// allocating: the TOS (IP_TOS, one byte, from IP_RECVTOS) or traffic class
// (IPV6_TCLASS, an int, from IPV6_RECVTCLASS), the kernel drop count
// (SO_RXQ_OVFL, a uint32, present only once it is non-zero), the arrival
// time (SCM_TIMESTAMPNS, a struct timespec of two 64-bit words) and, for a
// coalesced read, the size of its datagrams (UDP_GRO, an int; 0 if absent).
func parseCmsgs(b []byte) (tos uint8, drops uint32, rx time.Time, gsoSize int) {
	hdrLen := unix.CmsgLen(0)
	for len(b) >= hdrLen {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < hdrLen || l > len(b) {
			break
		}
		data := b[hdrLen:l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			tos = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			tos = uint8(binary.NativeEndian.Uint32(data))
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
			drops = binary.NativeEndian.Uint32(data)
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && len(data) >= 16:
			rx = time.Unix(int64(binary.NativeEndian.Uint64(data)), int64(binary.NativeEndian.Uint64(data[8:])))
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			gsoSize = int(binary.NativeEndian.Uint32(data))
		}
		next := unix.CmsgSpace(l - hdrLen)
		if next >= len(b) {
			break
		}
		b = b[next:]
	}
	return tos, drops, rx, gsoSize
}
