// Package pktio is batched datagram I/O for RoCEv2 over UDP behind a small
// interface, Conn, in the manner of wireguard-go's conn.Bind: the protocol
// core (the RoCE agent) is written against Conn only, and runs
//
//   - over real UDP sockets (UDPConn, Linux: recvmmsg/sendmmsg on a
//     non-blocking socket driven by the Go netpoller), and
//   - over an in-memory pipe (NewPipe) in unit tests: no root, no sockets,
//     with a per-datagram filter to drop packets or mark them CE.
//
// What RoCEv2 needs from the socket (reference/kernel.md, "UDP sockets and
// the IP ID"; reference/roce-wire.md, "ICRC"): the ICRC covers the IPv4
// Identification field, so a user-space sender must know the ID the kernel
// puts on the wire. An unconnected UDP socket with IP_MTU_DISCOVER =
// IP_PMTUDISC_DO sends DF packets with ID 0, which is what UDPConn does. It
// never connects its socket (a connected socket numbers its packets) and
// never uses UDP GSO (UDP_SEGMENT), which gives the segments of one send
// IDs 0, 1, 2…. The TOS byte (DSCP and ECN) is masked in the ICRC, so it
// is set per datagram.
//
// UDPOptions.GRO (UDP_GRO; RoCEConn's receive socket always) takes a run
// of datagrams of one flow that the device coalesced (GRO: a veth with gro
// and rx-udp-gro-forwarding on, lab.Node.SetReceiveCoalescing) as one
// buffer, and ReadBatch hands its datagrams out one by one, marked
// Message.Coalesced: the stack below the socket, and a TC program there,
// ran once for the run. A device that does not coalesce changes nothing.
//
// UDPConn sends every datagram from its own port. RoCEv2 wants more
// (roce-wire.md, "Encapsulation"): destination port 4791 on every packet,
// data, ACK, NAK and CNP alike, and a UDP source port per QP for ECMP
// entropy. RoCEConn does that: a run of datagrams from one source port (a
// QP's packets) leaves through a UDP socket bound to that port in UDP GSO
// sends, each segment's ICRC rewritten for the ID the kernel gives it
// (gso_linux.go); the rest through a raw socket, with IP and UDP headers
// built here (ID 0 and DF as before). It receives on UDP 4791 shared with
// every other agent of the host through SO_REUSEPORT, an eBPF program
// handing each packet to the agent that owns its destination QP
// (SteeredConn).
package pktio

import (
	"errors"
	"net/netip"
	"time"
)

var errNoDestination = errors.New("no destination address")

// Message is one datagram.
type Message struct {
	// Buffers holds the datagram.
	// Write: the datagram is the concatenation of Buffers (an iovec: e.g.
	// headers, payload from the application buffer, pad and ICRC).
	// Read: the datagram is received into Buffers[0]; the other buffers are
	// ignored.
	Buffers [][]byte
	// N is, on read, the number of bytes of the datagram stored in
	// Buffers[0] (at most len(Buffers[0]); see Truncated). Ignored on write.
	N int
	// Addr is, on write, the destination and, on read, the source. IPv4
	// addresses are plain 4-byte netip.Addr, never IPv4-mapped IPv6.
	Addr netip.AddrPort
	// SrcPort is, on write, the UDP source port (RoCEv2 carries a QP's
	// entropy in it); 0 means LocalAddr's port. A Conn that cannot choose
	// it (UDPConn, see FixedSourcePort) fails a datagram whose SrcPort is
	// another port. Ignored on read: Addr holds the source.
	SrcPort uint16
	// TOS is the IPv4 TOS / IPv6 traffic class byte (DSCP<<2 | ECN).
	// Write: the datagram goes out with it. Read: the datagram arrived with
	// it (after any ECN marking on the way).
	TOS uint8
	// Truncated is set on read when the datagram was longer than
	// Buffers[0]; the excess was discarded.
	Truncated bool
	// Coalesced is set on read when the datagram came in a run the device
	// coalesced (UDP GRO: one sk_buff of several datagrams of one flow, all
	// with one TOS and RxTime). A TC program saw the run as one packet
	// (bpf/rp.c leaves such runs to the agent).
	Coalesced bool
	// RxTime is, on read, when the kernel received the datagram
	// (SO_TIMESTAMPNS, the wall clock); zero from a Conn without it.
	RxTime time.Time
}

// Conn is a datagram endpoint that moves batches of Messages.
//
// One ReadBatch and one WriteBatch may run concurrently with each other and
// with Close; concurrent calls of the same method are serialised.
type Conn interface {
	// ReadBatch blocks until at least one datagram has arrived and fills
	// msgs[:n] with up to len(msgs) datagrams. After Close it returns
	// net.ErrClosed.
	ReadBatch(msgs []Message) (n int, err error)
	// WriteBatch sends msgs in order and returns how many were sent. If
	// n < len(msgs), err says why msgs[n] was not sent, and msgs[n+1:] were
	// not tried.
	WriteBatch(msgs []Message) (n int, err error)
	// LocalAddr is the address the endpoint is bound to.
	LocalAddr() netip.AddrPort
	// Close releases the endpoint and unblocks a pending ReadBatch, which
	// then returns net.ErrClosed.
	Close() error
}

// SteeredConn is a Conn that shares its UDP port with the other RoCEv2
// agents of the host (network namespace) and receives only the packets
// whose BTH DestQP falls in its block of QP numbers (RoCEConn): an agent on
// it numbers its QPs from that block, which no other agent of the host uses.
type SteeredConn interface {
	Conn
	// QPNBlock is the inclusive range of QPNs this Conn receives.
	QPNBlock() (first, last uint32)
}

// NeighborResolver is a Conn whose sends go through the kernel's neighbour
// table (RoCEConn). A transport whose peer went silent asks it to restart
// the resolution of the peer's link-layer address: after a link flap, the
// kernel can hold an entry unresolved for a second (its ARP retransmit
// time), longer than a QP's retries last. A NIC's QP holds the peer's MAC
// address and never waits for that.
type NeighborResolver interface {
	// ResolveAgain deletes the neighbour entry of the next hop towards dst
	// if it is stuck unresolved (INCOMPLETE or FAILED), so that the next
	// packet there sends a new request at once; it reports whether it
	// did. Calls for one destination less than 10 ms apart do nothing.
	ResolveAgain(dst netip.Addr) (bool, error)
}

// FixedSourcePort reports whether c sends every datagram from its
// LocalAddr port whatever Message.SrcPort says (UDPConn, whose socket is
// bound to one port). RoCEConn and PipeConn honour SrcPort.
func FixedSourcePort(c Conn) bool {
	_, ok := c.(interface{ fixedSourcePort() })
	return ok
}

// errSourcePort is UDPConn's error for a SrcPort other than its own.
var errSourcePort = errors.New("a UDP socket sends from its bound port only (use a RoCEConn for per-datagram source ports)")

// datagramLen is the length of the datagram m describes on write.
func datagramLen(m *Message) int {
	n := 0
	for _, b := range m.Buffers {
		n += len(b)
	}
	return n
}
