//go:build !linux

package pktio

import (
	"net/netip"
	"time"
)

// RoCEConn is only implemented on Linux (raw sockets, SO_REUSEPORT with an
// sk_reuseport program).
type RoCEConn struct{}

var _ SteeredConn = (*RoCEConn)(nil)

// ListenRoCE fails outside Linux.
func ListenRoCE(laddr netip.AddrPort, opts RoCEOptions) (*RoCEConn, error) {
	return nil, errNotLinux
}

func (c *RoCEConn) ReadBatch(msgs []Message) (int, error)  { return 0, errNotLinux }
func (c *RoCEConn) WriteBatch(msgs []Message) (int, error) { return 0, errNotLinux }
func (c *RoCEConn) LocalAddr() netip.AddrPort              { return netip.AddrPort{} }
func (c *RoCEConn) QPNBlock() (first, last uint32)         { return 0, 0 }
func (c *RoCEConn) SteeringStats() (SteeringStats, error)  { return SteeringStats{}, errNotLinux }
func (c *RoCEConn) SetPPFCSources([]netip.Prefix) error    { return errNotLinux }
func (c *RoCEConn) Close() error                           { return errNotLinux }
func (c *RoCEConn) SetReadDeadline(t time.Time) error      { return errNotLinux }
func (c *RoCEConn) BufferBytes() (recv, send int)          { return 0, 0 }
func (c *RoCEConn) Stats() UDPStats                        { return UDPStats{} }

// EntropyConn is only implemented on Linux.
type EntropyConn struct{}

var _ Conn = (*EntropyConn)(nil)

// ListenEntropy fails outside Linux.
func ListenEntropy(laddr netip.AddrPort, opts RoCEOptions) (*EntropyConn, error) {
	return nil, errNotLinux
}

func (e *EntropyConn) ReadBatch(msgs []Message) (int, error)  { return 0, errNotLinux }
func (e *EntropyConn) WriteBatch(msgs []Message) (int, error) { return 0, errNotLinux }
func (e *EntropyConn) LocalAddr() netip.AddrPort              { return netip.AddrPort{} }
func (e *EntropyConn) Close() error                           { return errNotLinux }
func (e *EntropyConn) SetReadDeadline(t time.Time) error      { return errNotLinux }
func (e *EntropyConn) Stats() UDPStats                        { return UDPStats{} }
func (c *RoCEConn) GSOOff() error                             { return errNotLinux }
func (e *EntropyConn) GSOOff() error                          { return errNotLinux }
