//go:build !linux

package pktio

import (
	"errors"
	"net/netip"
	"time"
)

// UDPConn is only implemented on Linux (recvmmsg/sendmmsg, IP_RECVTOS).
type UDPConn struct{ notLinux }

var _ Conn = (*UDPConn)(nil)

var errNotLinux = errors.New("pktio: UDPConn needs Linux")

// ListenUDP fails outside Linux.
func ListenUDP(laddr netip.AddrPort, opts UDPOptions) (*UDPConn, error) {
	return nil, errNotLinux
}

// notLinux is the methods the connections share outside Linux: each fails
// or reads zero.
type notLinux struct{}

func (notLinux) ReadBatch(msgs []Message) (int, error)  { return 0, errNotLinux }
func (notLinux) WriteBatch(msgs []Message) (int, error) { return 0, errNotLinux }
func (notLinux) LocalAddr() netip.AddrPort              { return netip.AddrPort{} }
func (notLinux) Close() error                           { return errNotLinux }
func (notLinux) SetReadDeadline(t time.Time) error      { return errNotLinux }
func (notLinux) BufferBytes() (recv, send int)          { return 0, 0 }
func (notLinux) Stats() UDPStats                        { return UDPStats{} }
