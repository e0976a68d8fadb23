//go:build !linux

package pktio

import "net/netip"

// RoCEConn is only implemented on Linux (raw sockets, SO_REUSEPORT with an
// sk_reuseport program).
type RoCEConn struct{ notLinux }

var _ SteeredConn = (*RoCEConn)(nil)

// ListenRoCE fails outside Linux.
func ListenRoCE(laddr netip.AddrPort, opts RoCEOptions) (*RoCEConn, error) {
	return nil, errNotLinux
}

func (c *RoCEConn) QPNBlock() (first, last uint32)        { return 0, 0 }
func (c *RoCEConn) SteeringStats() (SteeringStats, error) { return SteeringStats{}, errNotLinux }
func (c *RoCEConn) SetPPFCSources([]netip.Prefix) error   { return errNotLinux }
func (c *RoCEConn) GSOOff() error                         { return errNotLinux }

// EntropyConn is only implemented on Linux.
type EntropyConn struct{ notLinux }

var _ Conn = (*EntropyConn)(nil)

// ListenEntropy fails outside Linux.
func ListenEntropy(laddr netip.AddrPort, opts RoCEOptions) (*EntropyConn, error) {
	return nil, errNotLinux
}

func (e *EntropyConn) GSOOff() error { return errNotLinux }
