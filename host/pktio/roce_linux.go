//go:build linux

package pktio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/roce"
)

const (
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8
	// rawHeaderLen holds the longest IP + UDP header RoCEConn builds.
	rawHeaderLen = ipv6HeaderLen + udpHeaderLen
	// rawTTL is the TTL / hop limit of every datagram (Linux's default).
	rawTTL = 64
	// ipv4DF is the Don't Fragment flag in the IPv4 flags/offset word.
	ipv4DF = 0x4000
	// maxRouteCache bounds the IPv6 route-source cache.
	maxRouteCache = 4096
	// receiveSendBufferBytes is the receive socket's send buffer: it never
	// sends.
	receiveSendBufferBytes = 8 << 10
)

// rawNeeds says what the raw send socket takes, for errors.
const rawNeeds = "CAP_NET_RAW (run as root, or grant the binary cap_net_raw,cap_net_admin,cap_bpf,cap_sys_admin)"

// RoCEConn is the host's RoCEv2 port as one agent sees it (Linux): a
// SteeredConn that sends each datagram with its own UDP source port and
// receives the packets of its block of QPNs on a UDP port (4791) shared
// with every other agent of the network namespace.
//
// Send: consecutive datagrams of a batch from one source port (a QP's
// packets) go through a UDP socket bound to that port, those to one
// destination with one TOS as one UDP GSO send (gso_linux.go: segment k
// gets IPv4 ID k and an ICRC for it; a real UDP checksum); the others
// through a raw socket (IPPROTO_RAW, so IP_HDRINCL / IPV6_HDRINCL) and
// sendmmsg, for which RoCEConn writes the IPv4 header (ID 0, DF, the
// Message's TOS, TTL 64; the kernel fills the checksum, the length and,
// from a wildcard address, the source) or the IPv6 header, and the UDP
// header: source port Message.SrcPort, checksum 0 over IPv4 (RoCEv2 and
// rxe send none), the full checksum over IPv6, where UDP requires one.
// RoCEOptions.SendPath SendRaw sends everything the raw way. Needs
// CAP_NET_RAW.
//
// Receive: a UDPConn bound to the wildcard address of the family on the
// port with SO_REUSEPORT (recvmmsg, IP_RECVTOS / IPV6_RECVTCLASS), whose
// reuseport group runs bpf/reuseport.c: a packet goes to the conn whose
// QPNBlock holds its BTH DestQP, whatever its source port. Every conn of
// the namespace binds the wildcard so that they all share one group; the
// address given to ListenRoCE is the source of what this conn sends.
// Joining the steering needs CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN.
//
// Headers, iovecs and sockaddrs are allocated once per conn: the steady
// state allocates nothing.
type RoCEConn struct {
	recv    *UDPConn
	local   netip.AddrPort // as given (the address may be a wildcard), the receive port
	src     netip.Addr     // source written in the headers; invalid: wildcard
	v6      bool
	batch   int
	sndbuf  int
	steer   *steering
	routeFD int // IPv6 wildcard: a UDP socket connected to learn route sources; -1 otherwise
	neigh   *neighbors

	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool

	wmu    sync.Mutex
	raw    pollFD                    // the raw socket; Precondition: wmu is held.
	w      sendState                 // Precondition: wmu is held.
	heads  [][rawHeaderLen]byte      // one IP + UDP header per datagram of a batch
	routes map[netip.Addr]netip.Addr // IPv6 wildcard: source per destination
	gso    *gsoSender                // nil: SendRaw; Precondition: wmu is held.

	datagramsSent atomic.Uint64
	bytesSent     atomic.Uint64
	sendErrors    atomic.Uint64
}

var _ SteeredConn = (*RoCEConn)(nil)

// ListenRoCE opens the host's RoCEv2 port for one agent: a raw socket to
// send from laddr's address, and the UDP socket on laddr's port (0 means
// roce.UDPPort, 4791) that receives this conn's block of QPNs. The family
// follows laddr's address; a wildcard (0.0.0.0, ::) leaves the source
// address to the route towards each destination.
//
// The sockets are created in the network namespace of the calling OS
// thread. Errors say which capability is missing.
func ListenRoCE(laddr netip.AddrPort, opts RoCEOptions) (*RoCEConn, error) {
	if !laddr.Addr().IsValid() {
		return nil, errors.New("pktio: listen roce: no local address (use 0.0.0.0 or :: for any)")
	}
	if laddr.Port() == 0 {
		laddr = netip.AddrPortFrom(laddr.Addr(), roce.UDPPort)
	}
	return listenRaw("roce", laddr, opts, true, true)
}

// listenRaw opens a raw send socket and a UDP receive socket on laddr's
// port: the wildcard's, in the namespace's QPN steering (steered), or
// laddr's own address, alone. icrc: the datagrams are RoCEv2, whose ICRC a
// GSO send must rewrite per segment.
func listenRaw(kind string, laddr netip.AddrPort, opts RoCEOptions, steered, icrc bool) (_ *RoCEConn, err error) {
	addr := laddr.Addr().Unmap()
	port := laddr.Port()
	laddr = netip.AddrPortFrom(addr, port)
	batch := opts.BatchSize
	if batch == 0 {
		batch = DefaultBatchSize
	}
	if batch < 1 || batch > MaxBatchSize {
		return nil, fmt.Errorf("pktio: listen %s %s: BatchSize %d out of range 1..%d", kind, laddr, opts.BatchSize, MaxBatchSize)
	}
	sndbuf := opts.SendBufferBytes
	if sndbuf == 0 {
		sndbuf = DefaultUDPBufferBytes
	}
	if sndbuf < 0 || opts.RecvBufferBytes < 0 {
		return nil, fmt.Errorf("pktio: listen %s %s: buffer sizes must not be negative (RecvBufferBytes %d, SendBufferBytes %d)", kind, laddr, opts.RecvBufferBytes, opts.SendBufferBytes)
	}
	if opts.SendPath != SendAuto && opts.SendPath != SendRaw {
		return nil, fmt.Errorf("pktio: listen %s %s: SendPath %d: want SendAuto (%d) or SendRaw (%d)", kind, laddr, opts.SendPath, SendAuto, SendRaw)
	}
	v6 := addr.Is6()
	c := &RoCEConn{local: laddr, v6: v6, batch: batch, routeFD: -1, raw: pollFD{fd: -1}}
	c.raw.closed = &c.closed
	if !addr.IsUnspecified() {
		c.src = addr
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := c.openRaw(sndbuf); err != nil {
		return nil, fmt.Errorf("pktio: listen %s %s: %w", kind, laddr, err)
	}
	recvAddr := laddr
	if steered {
		recvAddr = netip.AddrPortFrom(netip.IPv4Unspecified(), port)
		if v6 {
			recvAddr = netip.AddrPortFrom(netip.IPv6Unspecified(), port)
		}
	}
	c.recv, err = ListenUDP(recvAddr, UDPOptions{
		RecvBufferBytes: opts.RecvBufferBytes,
		SendBufferBytes: receiveSendBufferBytes,
		BatchSize:       batch,
		ReusePort:       steered,
		// Every socket of the reuseport group alike: GRO picks one by
		// hash, without the steering program.
		GRO: true,
	})
	if err != nil {
		return nil, err
	}
	var steerErr error
	if steered {
		if err := c.recv.raw.Control(func(fd uintptr) { c.steer, steerErr = joinSteering(int(fd)) }); err != nil {
			return nil, fmt.Errorf("pktio: listen %s %s: %w", kind, laddr, err)
		}
	}
	if steerErr != nil {
		if errors.Is(steerErr, unix.EPERM) {
			return nil, fmt.Errorf("pktio: listen %s %s: QPN steering needs %s: %w", kind, laddr, steerNeeds, steerErr)
		}
		return nil, fmt.Errorf("pktio: listen %s %s: QPN steering: %w", kind, laddr, steerErr)
	}
	if v6 && !c.src.IsValid() {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("pktio: listen %s %s: route socket: %w", kind, laddr, err)
		}
		c.routeFD = fd
		c.routes = make(map[netip.Addr]netip.Addr)
	}
	if c.neigh, err = newNeighbors(); err != nil {
		return nil, fmt.Errorf("pktio: listen %s %s: %w", kind, laddr, err)
	}
	c.w.init(batch)
	c.heads = make([][rawHeaderLen]byte, batch)
	if opts.SendPath == SendAuto {
		if c.gso, err = newGSOSender(v6, c.src, c.sndbuf, batch, icrc, port, &c.closed); err != nil {
			return nil, fmt.Errorf("pktio: listen %s %s: %w", kind, laddr, err)
		}
	}
	return c, nil
}

// openRaw opens the raw send socket, bound to the source address when
// there is one (which checks that it is local).
func (c *RoCEConn) openRaw(sndbuf int) error {
	family := unix.AF_INET
	if c.v6 {
		family = unix.AF_INET6
	}
	// IPPROTO_RAW implies IP_HDRINCL (IPv4) and IPV6_HDRINCL (IPv6), and
	// such a socket receives nothing.
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("the raw send socket needs %s: %w", rawNeeds, err)
		}
		return fmt.Errorf("raw socket: %w", err)
	}
	fail := func(what string, err error) error {
		unix.Close(fd)
		return fmt.Errorf("raw socket %s: %w", what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndbuf); err != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sndbuf); err != nil {
			return fail(fmt.Sprintf("SO_SNDBUF=%d", sndbuf), err)
		}
	}
	if c.src.IsValid() {
		var sa unix.Sockaddr
		if c.v6 {
			sa = &unix.SockaddrInet6{Addr: c.src.As16()}
		} else {
			sa = &unix.SockaddrInet4{Addr: c.src.As4()}
		}
		if err := unix.Bind(fd, sa); err != nil {
			unix.Close(fd)
			return err // EADDRNOTAVAIL: not an address of this host
		}
	}
	c.sndbuf, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	// Not in the netpoller (pollFD): a full send buffer is waited out in
	// poll(2).
	c.raw.fd = fd
	return nil
}

// ReadBatch reads up to min(len(msgs), BatchSize) datagrams of this conn's
// QPNs, from any source port; see UDPConn.ReadBatch.
func (c *RoCEConn) ReadBatch(msgs []Message) (int, error) { return c.recv.ReadBatch(msgs) }

// WriteBatch sends msgs in order, each to its Message.Addr from its
// Message.SrcPort (0: LocalAddr's port) with its Message.TOS: a run of
// datagrams from one source port through that port's UDP socket in GSO
// sends of up to roce.GSOSegments datagrams, the rest through the raw
// socket, BatchSize datagrams per sendmmsg. It returns how many were sent;
// if fewer than len(msgs), err says why msgs[n] failed (a datagram over the
// path MTU wraps syscall.EMSGSIZE: DF is set) and msgs[n+1:] were not tried.
func (c *RoCEConn) WriteBatch(msgs []Message) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	if c.gso == nil || c.gso.off != nil {
		return writeBatches(msgs, c.batch, c.prepareWrite, c.sendPrepared, &c.sendErrors)
	}
	c.gso.begin()
	sent := 0
	gsoRun := func(msgs []Message) int {
		if run := c.sourcePortRun(msgs); c.gso.wants(c.srcPort(&msgs[0]), run) {
			return run
		}
		return 0
	}
	for sent < len(msgs) {
		rest := msgs[sent:]
		if run := gsoRun(rest); run > 0 {
			n, fallback, err := c.gso.write(rest[:run], c.local.Port(), &c.datagramsSent, &c.bytesSent)
			sent += n
			if err != nil {
				c.sendErrors.Add(1)
				return sent, err
			}
			if fallback {
				n, err := writeBatches(rest[n:run], c.batch, c.prepareWrite, c.sendPrepared, &c.sendErrors)
				sent += n
				if err != nil {
					return sent, err
				}
			}
			continue
		}
		// Raw: up to the next run GSO takes, a run at a time.
		end := c.sourcePortRun(rest)
		for end < len(rest) && gsoRun(rest[end:]) == 0 {
			end += c.sourcePortRun(rest[end:])
		}
		n, err := writeBatches(rest[:end], c.batch, c.prepareWrite, c.sendPrepared, &c.sendErrors)
		sent += n
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// sourcePortRun is how many datagrams at the head of msgs share the first
// one's source port.
func (c *RoCEConn) sourcePortRun(msgs []Message) int {
	p := c.srcPort(&msgs[0])
	n := 1
	for n < len(msgs) && c.srcPort(&msgs[n]) == p {
		n++
	}
	return n
}

// srcPort is m's source port: its SrcPort, 0 being the conn's.
func (c *RoCEConn) srcPort(m *Message) uint16 {
	if m.SrcPort == 0 {
		return c.local.Port()
	}
	return m.SrcPort
}

// prepareWrite builds the headers, sockaddrs and iovecs of msgs (at most
// BatchSize) and returns how many it prepared; err says why msgs[k] could
// not be. Precondition: wmu is held.
func (c *RoCEConn) prepareWrite(msgs []Message) (k int, err error) {
	w := &c.w
	w.reserve(msgs, 1) // one header iovec each
	j := 0
	maxPayload := maxUDPPayload4
	if c.v6 {
		maxPayload = maxUDPPayload6
	}
	for i := range msgs {
		m := &msgs[i]
		size := datagramLen(m)
		w.sizes[i] = size
		if size > maxPayload {
			return i, fmt.Errorf("pktio: write %d-byte datagram to %s: %w (largest %d)", size, m.Addr, syscall.EMSGSIZE, maxPayload)
		}
		dst := netip.AddrPortFrom(m.Addr.Addr().Unmap(), m.Addr.Port())
		// The port of a raw socket's sockaddr is not a UDP port (IPv6 reads
		// it as the protocol): 0.
		namelen, err := putSockaddr(&w.names[i], netip.AddrPortFrom(dst.Addr(), 0), c.v6)
		if err != nil {
			return i, fmt.Errorf("pktio: write %d-byte datagram to %s: %w", size, m.Addr, err)
		}
		sport := m.SrcPort
		if sport == 0 {
			sport = c.local.Port()
		}
		hl, err := c.putHeaders(&c.heads[i], m, dst, sport, size)
		if err != nil {
			return i, fmt.Errorf("pktio: write %d-byte datagram to %s: %w", size, m.Addr, err)
		}
		h := &w.hdrs[i]
		h.Len = 0
		h.Hdr.Namelen = namelen
		w.iovs[j].Base = &c.heads[i][0]
		w.iovs[j].SetLen(hl)
		putBuffers(w.iovs[j+1:], m.Buffers)
		h.Hdr.Iov = &w.iovs[j]
		h.Hdr.SetIovlen(1 + len(m.Buffers))
		h.Hdr.Control = nil
		h.Hdr.SetControllen(0)
		j += 1 + len(m.Buffers)
		w.used = j
	}
	return len(msgs), nil
}

// putHeaders writes the IP and UDP headers of m into b and returns their
// length. Precondition: wmu is held.
func (c *RoCEConn) putHeaders(b *[rawHeaderLen]byte, m *Message, dst netip.AddrPort, sport uint16, size int) (int, error) {
	udpLen := udpHeaderLen + size
	if !c.v6 {
		h := b[:ipv4HeaderLen+udpHeaderLen]
		h[0] = 4<<4 | ipv4HeaderLen/4
		h[1] = m.TOS
		binary.BigEndian.PutUint16(h[2:4], uint16(ipv4HeaderLen+udpLen)) // the kernel writes it too
		binary.BigEndian.PutUint16(h[4:6], 0)                            // ID 0: covered by the ICRC
		binary.BigEndian.PutUint16(h[6:8], ipv4DF)
		h[8] = rawTTL
		h[9] = unix.IPPROTO_UDP
		binary.BigEndian.PutUint16(h[10:12], 0) // the kernel fills the checksum
		if c.src.IsValid() {
			a := c.src.As4()
			copy(h[12:16], a[:])
		} else {
			clear(h[12:16]) // the kernel fills the route's source
		}
		a := dst.Addr().As4()
		copy(h[16:20], a[:])
		u := h[ipv4HeaderLen:]
		binary.BigEndian.PutUint16(u[0:2], sport)
		binary.BigEndian.PutUint16(u[2:4], dst.Port())
		binary.BigEndian.PutUint16(u[4:6], uint16(udpLen))
		binary.BigEndian.PutUint16(u[6:8], 0) // no checksum (RoCEv2: the ICRC covers the payload)
		return len(h), nil
	}
	src := c.src
	if !src.IsValid() {
		var err error
		if src, err = c.routeSource(dst.Addr()); err != nil {
			return 0, err
		}
	}
	h := b[:]
	// Version 6, traffic class, flow label 0.
	binary.BigEndian.PutUint32(h[0:4], 6<<28|uint32(m.TOS)<<20)
	binary.BigEndian.PutUint16(h[4:6], uint16(udpLen))
	h[6] = unix.IPPROTO_UDP
	h[7] = rawTTL
	s16, d16 := src.As16(), dst.Addr().As16()
	copy(h[8:24], s16[:])
	copy(h[24:40], d16[:])
	u := h[ipv6HeaderLen:]
	binary.BigEndian.PutUint16(u[0:2], sport)
	binary.BigEndian.PutUint16(u[2:4], dst.Port())
	binary.BigEndian.PutUint16(u[4:6], uint16(udpLen))
	binary.BigEndian.PutUint16(u[6:8], 0)
	binary.BigEndian.PutUint16(u[6:8], udp6Checksum(h[8:24], h[24:40], u[:udpHeaderLen], m.Buffers))
	return len(h), nil
}

// routeSource is the source address of the route to dst (IPv6 from a
// wildcard), cached. Precondition: wmu is held.
func (c *RoCEConn) routeSource(dst netip.Addr) (netip.Addr, error) {
	if s, ok := c.routes[dst]; ok {
		return s, nil
	}
	var sa [sockaddrLen]byte
	n, err := putSockaddr(&sa, netip.AddrPortFrom(dst, 9), true)
	if err != nil {
		return netip.Addr{}, err
	}
	// A UDP connect sends nothing; it picks the route and its source.
	if _, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(c.routeFD), uintptr(unsafe.Pointer(&sa[0])), uintptr(n)); e != 0 {
		return netip.Addr{}, fmt.Errorf("no route: %w", e)
	}
	local, err := unix.Getsockname(c.routeFD)
	if err != nil {
		return netip.Addr{}, err
	}
	s6, ok := local.(*unix.SockaddrInet6)
	if !ok {
		return netip.Addr{}, errors.New("no IPv6 source address")
	}
	src := netip.AddrFrom16(s6.Addr)
	if len(c.routes) >= maxRouteCache {
		clear(c.routes)
	}
	c.routes[dst] = src
	return src, nil
}

// sendPrepared sends the first k prepared datagrams and returns how many
// went out. Precondition: wmu is held.
func (c *RoCEConn) sendPrepared(k int) (int, error) {
	n, err := c.w.sendmmsg(&c.raw, k, &c.datagramsSent, &c.bytesSent)
	if err == nil && c.w.errno != 0 {
		// The raw socket's sockaddr carries no port: name the host.
		dst := parseSockaddr(&c.w.names[n])
		err = fmt.Errorf("pktio: write %d-byte datagram to %s: %w", c.w.sizes[n], dst.Addr(), c.w.errno)
	}
	return n, err
}

// ResolveAgain implements NeighborResolver: the kernel's neighbour entry
// of the next hop towards dst, if stuck unresolved, is deleted so that the
// next packet there starts a new resolution at once.
func (c *RoCEConn) ResolveAgain(dst netip.Addr) (bool, error) {
	if c.closed.Load() {
		return false, net.ErrClosed
	}
	return c.neigh.resolveAgain(dst)
}

// LocalAddr is the address given to ListenRoCE (possibly a wildcard) with
// the port this conn receives on.
func (c *RoCEConn) LocalAddr() netip.AddrPort { return c.local }

// QPNBlock is the QPNs the namespace's steering hands to this conn.
func (c *RoCEConn) QPNBlock() (first, last uint32) { return c.steer.qpnBlock() }

// EntropyConn is a Conn for a transport whose UDP source port is a
// per-packet entropy value (Ultra Ethernet's EV, uet.md "Entropy"): it
// sends each datagram from its Message.SrcPort as RoCEConn does (runs of
// one EV in UDP GSO sends, with nothing to rewrite, UET having no ICRC;
// the rest through a raw socket with IP ID 0, DF, per-datagram TOS;
// CAP_NET_RAW), and receives on one UDP socket bound to its own address
// and port, shared with no one.
type EntropyConn struct{ c *RoCEConn }

var _ Conn = (*EntropyConn)(nil)

// ListenEntropy opens laddr (a unicast address; port required, e.g. UET's
// 4793) for one endpoint.
func ListenEntropy(laddr netip.AddrPort, opts RoCEOptions) (*EntropyConn, error) {
	a := laddr.Addr().Unmap()
	switch {
	case !a.IsValid() || a.IsUnspecified():
		return nil, fmt.Errorf("pktio: listen entropy %v: needs a unicast local address", laddr)
	case laddr.Port() == 0:
		return nil, fmt.Errorf("pktio: listen entropy %v: needs a port", laddr)
	}
	c, err := listenRaw("entropy", laddr, opts, false, false)
	if err != nil {
		return nil, err
	}
	return &EntropyConn{c: c}, nil
}

// ReadBatch implements Conn.
func (e *EntropyConn) ReadBatch(msgs []Message) (int, error) { return e.c.ReadBatch(msgs) }

// WriteBatch implements Conn: each datagram from its own SrcPort (0: the
// conn's port).
func (e *EntropyConn) WriteBatch(msgs []Message) (int, error) { return e.c.WriteBatch(msgs) }

// LocalAddr implements Conn.
func (e *EntropyConn) LocalAddr() netip.AddrPort { return e.c.LocalAddr() }

// ResolveAgain implements NeighborResolver (RoCEConn.ResolveAgain).
func (e *EntropyConn) ResolveAgain(dst netip.Addr) (bool, error) { return e.c.ResolveAgain(dst) }

// Close implements Conn.
func (e *EntropyConn) Close() error { return e.c.Close() }

// SetReadDeadline: see RoCEConn.SetReadDeadline.
func (e *EntropyConn) SetReadDeadline(t time.Time) error { return e.c.SetReadDeadline(t) }

// Stats returns the counters (see RoCEConn.Stats).
func (e *EntropyConn) Stats() UDPStats { return e.c.Stats() }

// GSOOff: see RoCEConn.GSOOff.
func (e *EntropyConn) GSOOff() error { return e.c.GSOOff() }

// SteeringStats reads the namespace's steering counters.
func (c *RoCEConn) SteeringStats() (SteeringStats, error) { return c.steer.readStats() }

// SetPPFCSources lets only sources in prefixes pause this conn's agent with
// PPFC notifications (seed 003): the steering drops a notification for
// this conn from any other source before it reaches the socket
// (SteeringStats.PPFCIgnoredSource). None: from any source, as after
// ListenRoCE. A conn without steering takes no prefixes.
func (c *RoCEConn) SetPPFCSources(prefixes []netip.Prefix) error {
	if c.steer == nil {
		if len(prefixes) == 0 {
			return nil
		}
		return errors.New("pktio: PPFC sources: this conn is not steered")
	}
	if err := c.steer.setPPFCSources(prefixes); err != nil {
		return fmt.Errorf("pktio: %w", err)
	}
	return nil
}

// Close closes both sockets (the receive socket leaves the steering) and
// unblocks a pending ReadBatch (net.ErrClosed). Closing twice returns
// net.ErrClosed.
func (c *RoCEConn) Close() error {
	err := net.ErrClosed
	c.closeOnce.Do(func() {
		var errs []error
		c.closed.Store(true) // a WriteBatch waiting in poll(2) returns within pollWaitMillis
		if c.recv != nil {
			errs = append(errs, c.recv.Close())
		}
		c.wmu.Lock()
		if c.raw.fd >= 0 {
			errs = append(errs, unix.Close(c.raw.fd))
			c.raw.fd = -1
		}
		if c.gso != nil {
			c.gso.close()
		}
		if c.routeFD >= 0 {
			unix.Close(c.routeFD)
			c.routeFD = -1
		}
		c.wmu.Unlock()
		c.steer.close()
		c.neigh.close()
		err = errors.Join(errs...)
	})
	return err
}

// SetReadDeadline makes a blocked or future ReadBatch fail with
// os.ErrDeadlineExceeded once t passes; the zero t means no deadline.
func (c *RoCEConn) SetReadDeadline(t time.Time) error { return c.recv.SetReadDeadline(t) }

// BufferBytes reports the receive socket's and the raw socket's buffers as
// the kernel granted them (see UDPConn.BufferBytes).
func (c *RoCEConn) BufferBytes() (recv, send int) {
	r, _ := c.recv.BufferBytes()
	return r, c.sndbuf
}

// Stats returns the counters: sent by the raw socket, received by the UDP
// socket. Safe to call concurrently with I/O.
func (c *RoCEConn) Stats() UDPStats {
	s := c.recv.Stats()
	s.DatagramsSent = c.datagramsSent.Load()
	s.BytesSent = c.bytesSent.Load()
	s.SendErrors = c.sendErrors.Load()
	if g := c.gso; g != nil {
		s.GSODatagrams, s.GSOSends = g.gsoDatagrams.Load(), g.gsoSends.Load()
	}
	return s
}

// GSOOff says why UDP GSO is off for this conn: nil while it is on,
// errGSOOff under SendRaw, else the kernel's refusal. Safe to call
// concurrently with I/O.
func (c *RoCEConn) GSOOff() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.gso == nil {
		return errGSOOff
	}
	return c.gso.off
}

// errGSOOff is GSOOff's answer under SendRaw.
var errGSOOff = errors.New("pktio: UDP GSO off (SendRaw)")
