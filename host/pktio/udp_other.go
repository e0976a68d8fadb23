//go:build !linux

package pktio

import (
	"errors"
	"net/netip"
	"time"
)

// UDPConn is only implemented on Linux (recvmmsg/sendmmsg, IP_RECVTOS).
type UDPConn struct{}

var _ Conn = (*UDPConn)(nil)

var errNotLinux = errors.New("pktio: UDPConn needs Linux")

// ListenUDP fails outside Linux.
func ListenUDP(laddr netip.AddrPort, opts UDPOptions) (*UDPConn, error) {
	return nil, errNotLinux
}

func (c *UDPConn) ReadBatch(msgs []Message) (int, error)  { return 0, errNotLinux }
func (c *UDPConn) WriteBatch(msgs []Message) (int, error) { return 0, errNotLinux }
func (c *UDPConn) LocalAddr() netip.AddrPort              { return netip.AddrPort{} }
func (c *UDPConn) Close() error                           { return errNotLinux }
func (c *UDPConn) SetReadDeadline(t time.Time) error      { return errNotLinux }
func (c *UDPConn) BufferBytes() (recv, send int)          { return 0, 0 }
func (c *UDPConn) Stats() UDPStats                        { return UDPStats{} }
