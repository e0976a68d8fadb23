package bpf

import "net/netip"

// QPAddrs are a QP's addresses as np.c's and rp.c's QP entries hold them:
// the IP version (NP_FAMILY_*, RP_FAMILY_*: 4 or 6) and the local and
// peer address, an IPv4 one in the first four bytes. IPv4-mapped IPv6
// addresses count as IPv4, as the packets carry them.
func QPAddrs(local, peer netip.Addr) (family uint8, l, p [16]byte) {
	local, peer = local.Unmap(), peer.Unmap()
	if local.Is4() {
		l4, p4 := local.As4(), peer.As4()
		copy(l[:], l4[:])
		copy(p[:], p4[:])
		return 4, l, p
	}
	return 6, local.As16(), peer.As16()
}
