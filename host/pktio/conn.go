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
// never uses UDP GSO (UDP_SEGMENT), which would give the segments of one
// send IDs 1, 2, 3… and break the ICRC; nor UDP GRO (UDP_GRO), which would
// hand several datagrams over in one buffer for no gain over recvmmsg. The
// TOS byte (DSCP and ECN) is masked in the ICRC, so it is set per datagram.
package pktio

import (
	"errors"
	"net/netip"
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
	// TOS is the IPv4 TOS / IPv6 traffic class byte (DSCP<<2 | ECN).
	// Write: the datagram goes out with it. Read: the datagram arrived with
	// it (after any ECN marking on the way).
	TOS uint8
	// Truncated is set on read when the datagram was longer than
	// Buffers[0]; the excess was discarded.
	Truncated bool
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

// datagramLen is the length of the datagram m describes on write.
func datagramLen(m *Message) int {
	n := 0
	for _, b := range m.Buffers {
		n += len(b)
	}
	return n
}
