//go:build linux

package pktio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
)

// UDP GSO (UDP_SEGMENT, Linux 4.18): a run of datagrams with one source
// port goes to that port's UDP socket, and each stretch of it with one
// destination, one TOS and one size (the last may be shorter) is one
// sendmsg of a single buffer that the kernel cuts into the datagrams. One
// system call, one route lookup, one socket pass and one skb carry up to
// roce.GSOSegments packets; the raw socket pays each of them per packet,
// and its route is allocated and freed per packet (an IP_HDRINCL flow is
// FLOWI_FLAG_KNOWN_NH, so it gets no cached route).
//
// Where the super-packet is cut decides what sees it whole: the device it
// leaves segments it (validate_xmit_skb) when the device lacks
// tx-udp-segmentation, so every veth of a lab has it off (host/lab) and a
// switch port downstream sees packets of the path MTU, as it does behind a
// NIC that segments in hardware (USO). A TC program or a qdisc on the
// sending host's own device runs before that cut and sees the super-packet
// as one: a port attached there (a two-namespace lab) wants SendRaw,
// which agent.SendPathHere picks for SendAuto (RoCEv2 hosts, UET
// endpoints) when the namespace has a pinned port (qdisc.PortsHere).
//
// The kernel numbers the IPv4 IDs of a send's segments 0, 1, 2 …
// (inet_gso_segment: an unconnected DF socket's send has ID 0), and the
// RoCEv2 ICRC covers the ID: the datagrams come sealed for ID 0, so segment
// k's ICRC is rewritten here for ID k (roce.ICRCIDDelta, CRC-32 being
// linear), from a copy, leaving the caller's buffers untouched. Receivers
// that see no IP header accept those IDs (roce.VerifyICRC). IPv6 has no ID;
// UET carries no ICRC. The UDP checksum is real (GSO refuses a socket
// without one): RoCEv2 over IPv4 allows it and the ICRC masks it.

const (
	// minGSORun is the shortest run of one source port sent through its
	// UDP socket; a lone datagram joins the raw socket's batch.
	minGSORun = 2
	// gsoSockets is how many UDP sockets the process's conns keep
	// together, one per source port in use: the hot ports'. A socket
	// used once a round of 10,000 flows is cold in the caches at every
	// send, and its run a sendmmsg of its own where the raw socket
	// carries 64 datagrams a call (issue 28's scale rows: a socket for
	// each of 10,000 ports, 1.73 × one QP's CPU a packet and 1.64 × one
	// PDC's; none at all, 1.31 and 1.03 ×; 128, as none at 10,000
	// flows, with GSO's 7–14 % kept at one flow).
	gsoSockets = 128
	// evictGSORun is the shortest run of a port without a socket, once
	// the budget is spent, for which a socket idle for gsoIdleEvict is
	// closed and one opened: opening costs some eight system calls, so a
	// shorter run goes raw with its neighbours.
	evictGSORun = 8
	// gsoIdleEvict is how long a socket must have been unused before it
	// gives way to another port once the budget is spent. Evicting the
	// least recently used one at once thrashes: with 10,000 QPs taking
	// turns, every run missed the 256 sockets there were and paid a
	// close and an open (issue 28's scale rows: 23 % of the client's CPU
	// at 10,000 QPs); the ports that hold sockets keep them.
	gsoIdleEvict = time.Second
	// gsoIdleClose is how long an unused socket stays open at all: the
	// ports of flows that ended give their descriptors back.
	gsoIdleClose = 30 * time.Second
	// maxGSOBytes is the most UDP payload of one GSO send: one IPv4
	// datagram's (IP total length 65535).
	maxGSOBytes = maxUDPPayload4
	// gsoRecvBufferBytes is the send sockets' receive buffer: nothing is
	// sent to their ports, and what comes is dropped.
	gsoRecvBufferBytes = 2048
)

// gsoBudget counts the GSO sockets the process's conns may still open.
type gsoBudget struct{ left atomic.Int64 }

// take reserves a socket, or says none is left.
func (b *gsoBudget) take() bool {
	if b.left.Add(-1) < 0 {
		b.left.Add(1)
		return false
	}
	return true
}

// give returns a closed socket's reservation.
func (b *gsoBudget) give() { b.left.Add(1) }

// gsoSocketBudget is the process's: gsoSockets.
var gsoSocketBudget = sync.OnceValue(func() *gsoBudget {
	b := &gsoBudget{}
	b.left.Store(gsoSockets)
	return b
})

// gsoSocket is the UDP socket of one source port, in its conn's list
// from the most recently used to the least.
type gsoSocket struct {
	pollFD
	port       uint16
	usedAt     time.Duration // the conn's clock at the last use
	prev, next *gsoSocket
}

// gsoSender sends runs of datagrams with UDP GSO, for one conn.
// Precondition for every method: the conn's write lock is held.
type gsoSender struct {
	v6     bool
	src    netip.Addr // the sockets' bound address; invalid: the wildcard
	sndbuf int
	// icrc: the datagrams are RoCEv2 over IPv4, sealed for ID 0.
	icrc bool
	// recvPort is the conn's receive port, bound by its receive socket:
	// datagrams from it go raw.
	recvPort uint16
	closed   *atomic.Bool
	ns       netnsRef // where the conn lives: its sockets are made there

	socks map[uint16]*gsoSocket // nil value: the port could not be bound
	lru   gsoSocket             // the list's sentinel: next is the most recent
	nopen int                   // sockets in the list
	// budget is the process's (tests give a conn its own); idleEvict and
	// idleClose are gsoIdleEvict and gsoIdleClose (tests shorten them).
	budget               *gsoBudget
	idleEvict, idleClose time.Duration
	epoch                time.Time     // the clock's zero
	now                  time.Duration // since epoch, from begin
	// off is why GSO was turned off for the conn (the kernel refused
	// it); nil while it is on.
	off error

	// w holds the messages of one sendmmsg, each a GSO send (or one
	// datagram): its oob a TOS and a UDP_SEGMENT cmsg per message, its
	// sizes the bytes of each.
	w      sendState
	icrcs  [][roce.ICRCLen]byte // the ICRC of segment k for ID k, per datagram of the call
	counts []int                // datagrams per message

	gsoDatagrams, gsoSends atomic.Uint64
}

// newGSOSender returns the GSO sender of a conn made in the calling
// thread's network namespace.
func newGSOSender(v6 bool, src netip.Addr, sndbuf, batch int, icrc bool, recvPort uint16, closed *atomic.Bool) (*gsoSender, error) {
	ns, err := threadNetns()
	if err != nil {
		return nil, err
	}
	g := &gsoSender{
		v6: v6, src: src, sndbuf: sndbuf, icrc: icrc && !v6, recvPort: recvPort, closed: closed, ns: ns,
		socks:  make(map[uint16]*gsoSocket),
		budget: gsoSocketBudget(), idleEvict: gsoIdleEvict, idleClose: gsoIdleClose,
		epoch:  time.Now(),
		icrcs:  make([][roce.ICRCLen]byte, batch*roce.GSOSegments),
		counts: make([]int, batch),
	}
	g.w.init(batch)
	g.lru.prev, g.lru.next = &g.lru, &g.lru
	return g, nil
}

// begin starts a write: it reads the clock once for the write's runs and
// closes the sockets unused for idleClose.
func (g *gsoSender) begin() {
	g.now = time.Since(g.epoch)
	for s := g.lru.prev; s != &g.lru && g.now-s.usedAt >= g.idleClose; s = g.lru.prev {
		g.drop(s)
	}
}

// wants says a run of n datagrams from sport should go through its UDP
// socket: it has one, or one is cheap to open (the budget has room, or
// the run is long enough to pay for one and a socket has been idle long
// enough to give way).
func (g *gsoSender) wants(sport uint16, n int) bool {
	if n < minGSORun {
		return false
	}
	if s, ok := g.socks[sport]; ok {
		return s != nil
	}
	return g.budget.left.Load() > 0 || n >= evictGSORun && g.idle() != nil
}

// idle is the least recently used socket if it has been unused for
// idleEvict, else nil.
func (g *gsoSender) idle() *gsoSocket {
	if s := g.lru.prev; s != &g.lru && g.now-s.usedAt >= g.idleEvict {
		return s
	}
	return nil
}

// socket returns the UDP socket bound to sport, opening it on first use,
// or nil when the port cannot be bound or no socket can be had (its
// datagrams go raw).
func (g *gsoSender) socket(sport uint16) (*gsoSocket, error) {
	if s, ok := g.socks[sport]; ok {
		if s != nil {
			s.usedAt = g.now
			g.unlink(s)
			g.push(s)
		}
		return s, nil
	}
	if sport == g.recvPort || sport == 0 {
		g.socks[sport] = nil
		return nil, nil
	}
	if !g.budget.take() {
		s := g.idle()
		if s == nil {
			return nil, nil // the budget went to another conn meanwhile
		}
		g.drop(s)
		if !g.budget.take() {
			return nil, nil
		}
	}
	fd, err := g.open(sport)
	if err != nil {
		g.budget.give()
	}
	switch {
	case errors.Is(err, unix.EADDRINUSE) || errors.Is(err, unix.EACCES):
		// Another socket holds the port without SO_REUSEPORT.
		g.socks[sport] = nil
		return nil, nil
	case err != nil:
		return nil, err
	}
	s := &gsoSocket{pollFD: pollFD{fd: fd, closed: g.closed}, port: sport, usedAt: g.now}
	g.socks[sport] = s
	g.push(s)
	return s, nil
}

// push puts s at the list's head.
func (g *gsoSender) push(s *gsoSocket) {
	s.prev, s.next = &g.lru, g.lru.next
	g.lru.next.prev = s
	g.lru.next = s
	g.nopen++
}

// unlink takes s out of the list.
func (g *gsoSender) unlink(s *gsoSocket) {
	s.prev.next, s.next.prev = s.next, s.prev
	s.prev, s.next = nil, nil
	g.nopen--
}

// drop closes s and forgets its port.
func (g *gsoSender) drop(s *gsoSocket) {
	g.unlink(s)
	unix.Close(s.fd)
	delete(g.socks, s.port)
	g.budget.give()
}

// netnsRef is a network namespace: an open fd of it and its identity.
type netnsRef struct {
	fd       int
	dev, ino uint64
}

// threadNetnsPath is the calling thread's network namespace.
const threadNetnsPath = "/proc/thread-self/ns/net"

// threadNetns opens the calling thread's network namespace.
func threadNetns() (netnsRef, error) {
	fd, err := unix.Open(threadNetnsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return netnsRef{fd: -1}, fmt.Errorf("open %s: %w", threadNetnsPath, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return netnsRef{fd: -1}, fmt.Errorf("stat %s: %w", threadNetnsPath, err)
	}
	return netnsRef{fd: fd, dev: st.Dev, ino: st.Ino}, nil
}

// open makes the UDP socket of sport in the conn's network namespace,
// which the thread that writes need not be in (a process that opened
// conns in several namespaces): then a thread of its own enters the
// namespace to make it.
func (g *gsoSender) open(sport uint16) (int, error) {
	runtime.LockOSThread()
	var st unix.Stat_t
	err := unix.Stat(threadNetnsPath, &st)
	if err == nil && st.Dev == g.ns.dev && st.Ino == g.ns.ino {
		fd, err := g.openHere(sport)
		runtime.UnlockOSThread()
		return fd, err
	}
	runtime.UnlockOSThread()
	fd := -1
	err = nsexec.Do(netns.NsHandle(g.ns.fd), func() (err error) {
		fd, err = g.openHere(sport)
		return err
	})
	if err != nil && fd >= 0 {
		// Made, but the thread could not leave the namespace.
		unix.Close(fd)
		fd = -1
	}
	return fd, err
}

// openHere makes the UDP socket of sport in the calling thread's namespace: bound to it (SO_REUSEPORT, so that
// the conns of a namespace whose QPs hash to one port all bind it), DF
// (IPv4 ID 0 for a send, as the raw path; IPv6 fragments nothing), no
// automatic IPv6 flow label (the raw path sends 0), a receive buffer that
// holds next to nothing.
func (g *gsoSender) openHere(sport uint16) (int, error) {
	family := unix.AF_INET
	if g.v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("gso socket: %w", err)
	}
	type opt struct {
		name       string
		level, opt int
		value      int
	}
	opts := []opt{
		{"SO_REUSEPORT", unix.SOL_SOCKET, unix.SO_REUSEPORT, 1},
		{"SO_RCVBUF", unix.SOL_SOCKET, unix.SO_RCVBUF, gsoRecvBufferBytes},
	}
	if g.v6 {
		opts = append(opts,
			opt{"IPV6_V6ONLY", unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1},
			opt{"IPV6_MTU_DISCOVER", unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO},
			opt{"IPV6_AUTOFLOWLABEL", unix.IPPROTO_IPV6, unix.IPV6_AUTOFLOWLABEL, 0})
	} else {
		opts = append(opts, opt{"IP_MTU_DISCOVER", unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO})
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.value); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("gso socket setsockopt %s=%d: %w", o.name, o.value, err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, g.sndbuf); err != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, g.sndbuf); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("gso socket setsockopt SO_SNDBUF=%d: %w", g.sndbuf, err)
		}
	}
	var sa unix.Sockaddr
	if g.v6 {
		a := &unix.SockaddrInet6{Port: int(sport)}
		if g.src.IsValid() {
			a.Addr = g.src.As16()
		}
		sa = a
	} else {
		a := &unix.SockaddrInet4{Port: int(sport)}
		if g.src.IsValid() {
			a.Addr = g.src.As4()
		}
		sa = a
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("gso socket bind port %d: %w", sport, err)
	}
	return fd, nil
}

// closeSockets closes every socket.
func (g *gsoSender) closeSockets() {
	for s := g.lru.next; s != &g.lru; s = g.lru.next {
		g.drop(s)
	}
	clear(g.socks)
}

// close releases the sockets and the namespace.
func (g *gsoSender) close() {
	g.closeSockets()
	if g.ns.fd >= 0 {
		unix.Close(g.ns.fd)
		g.ns.fd = -1
	}
}

// gsoRefused says what a GSO send's errno means: the kernel or the route's
// device cannot do UDP GSO at all (no UDP_SEGMENT: ENOPROTOOPT, EOPNOTSUPP;
// no checksum offload on the device: EIO), so it is off for the conn for
// good; or this send could not be one (EINVAL: a segment over the path
// MTU, which the raw socket then reports as EMSGSIZE), so its datagrams go
// raw.
func gsoRefused(e syscall.Errno) (refused, forGood bool) {
	switch e {
	case unix.EIO, unix.ENOPROTOOPT, unix.EOPNOTSUPP:
		return true, true
	case unix.EINVAL:
		return true, false
	}
	return false, false
}

// write sends msgs, which share one source port (SrcPort, 0 being port),
// and returns how many went, counted in datagrams and bytes; with fallback
// set the caller sends msgs[n:] through the raw socket (the port cannot be
// bound, or GSO was just turned off), and err is nil.
func (g *gsoSender) write(msgs []Message, port uint16, datagrams, bytes *atomic.Uint64) (n int, fallback bool, err error) {
	sport := msgs[0].SrcPort
	if sport == 0 {
		sport = port
	}
	s, err := g.socket(sport)
	if err != nil {
		return 0, false, fmt.Errorf("pktio: write %d-byte datagram from port %d: %w", datagramLen(&msgs[0]), sport, err)
	}
	if s == nil {
		return 0, true, nil
	}
	for n < len(msgs) {
		k, prepErr := g.prepare(msgs[n:])
		var messages atomic.Uint64
		sent, err := g.w.sendmmsg(&s.pollFD, k, &messages, bytes)
		for _, c := range g.counts[:sent] {
			n += c
			datagrams.Add(uint64(c))
			if c > 1 {
				g.gsoSends.Add(1)
				g.gsoDatagrams.Add(uint64(c))
			}
		}
		if err != nil {
			return n, false, err
		}
		if e := g.w.errno; e != 0 {
			if refused, forGood := gsoRefused(e); refused && g.counts[sent] > 1 {
				if forGood {
					g.off = fmt.Errorf("a %d-segment UDP GSO send from port %d was refused: %w", g.counts[sent], sport, e)
					g.closeSockets()
				}
				return n, true, nil
			}
			m := &msgs[n]
			return n, false, fmt.Errorf("pktio: write %d-byte datagram to %s: %w", datagramLen(m), m.Addr, e)
		}
		if prepErr != nil {
			return n, false, prepErr
		}
	}
	return n, false, nil
}

// prepare builds up to BatchSize messages from msgs, each one GSO send (or
// one datagram), and returns how many; err says why the datagram after them
// cannot be sent.
func (g *gsoSender) prepare(msgs []Message) (k int, err error) {
	w := &g.w
	maxPayload := maxUDPPayload4
	if g.v6 {
		maxPayload = maxUDPPayload6
	}
	w.reserve(msgs, 1) // one ICRC iovec each at most
	j, d := 0, 0       // iovecs used, datagrams taken
	for k < len(w.hdrs) && d < len(msgs) && d < len(g.icrcs) {
		first := &msgs[d]
		size := datagramLen(first)
		if size > maxPayload {
			return k, fmt.Errorf("pktio: write %d-byte datagram to %s: %w (largest %d)", size, first.Addr, syscall.EMSGSIZE, maxPayload)
		}
		namelen, err := putSockaddr(&w.names[k], first.Addr, g.v6)
		if err != nil {
			return k, fmt.Errorf("pktio: write %d-byte datagram to %s: %w", size, first.Addr, err)
		}
		segs := 1
		if size > 0 {
			segs = min(roce.GSOSegments, maxGSOBytes/size, len(msgs)-d, len(g.icrcs)-d)
		}
		// The segments: the first's destination, TOS and size, the last
		// one possibly shorter; each whose ICRC can be rewritten.
		c, bytes := 1, size
		for c < segs {
			m := &msgs[d+c]
			l := datagramLen(m)
			if m.Addr != first.Addr || m.TOS != first.TOS || l > size || l == 0 || !g.canSeal(m) {
				break
			}
			c++
			bytes += l
			if l < size {
				break
			}
		}
		h := &w.hdrs[k]
		h.Len = 0
		h.Hdr.Namelen = namelen
		h.Hdr.Iov = &w.iovs[j]
		start := j
		for x := range c {
			j += g.putIovecs(w.iovs[j:], &msgs[d+x], x, d+x)
		}
		h.Hdr.SetIovlen(j - start)
		w.used = j
		oob := w.oob[k*oobLen : (k+1)*oobLen]
		l := putTOSCmsg(oob, g.v6, first.TOS)
		if c > 1 {
			l += putSegmentCmsg(oob[l:], size)
		}
		h.Hdr.Control = &oob[0]
		h.Hdr.SetControllen(l)
		g.counts[k] = c
		w.sizes[k] = bytes
		d += c
		k++
	}
	return k, nil
}

// canSeal reports whether m can follow the first datagram of a send: a
// RoCEv2 datagram's ICRC must be in its last buffer, to be replaced.
func (g *gsoSender) canSeal(m *Message) bool {
	if !g.icrc {
		return true
	}
	nb := len(m.Buffers)
	return nb > 0 && len(m.Buffers[nb-1]) >= roce.ICRCLen && datagramLen(m) >= roce.BTHLen+roce.ICRCLen
}

// putIovecs points iov at m, segment x of its send and datagram i of the
// call, and returns how many it used: its buffers, the last one without
// its ICRC followed by the ICRC for ID x when the conn seals.
func (g *gsoSender) putIovecs(iov []unix.Iovec, m *Message, x, i int) int {
	nb := len(m.Buffers)
	for y, b := range m.Buffers {
		if y == nb-1 && x > 0 && g.icrc {
			b = b[:len(b)-roce.ICRCLen]
		}
		iov[y].Base = unsafe.SliceData(b)
		iov[y].SetLen(len(b))
	}
	if x == 0 || !g.icrc {
		return nb
	}
	last := m.Buffers[nb-1]
	sealed := binary.LittleEndian.Uint32(last[len(last)-roce.ICRCLen:])
	binary.LittleEndian.PutUint32(g.icrcs[i][:], sealed^roce.ICRCIDDelta(datagramLen(m), uint16(x)))
	iov[nb].Base = &g.icrcs[i][0]
	iov[nb].SetLen(roce.ICRCLen)
	return nb + 1
}

// putSegmentCmsg writes a UDP_SEGMENT control message (the segment size, a
// u16) and returns its space.
func putSegmentCmsg(b []byte, size int) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(size))
	return unix.CmsgSpace(2)
}
