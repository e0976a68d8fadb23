//go:build linux

package pktio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Why a RoCEv2 QP died after a 200 ms link flap (issue 28): when a veth
// comes back up, its peer's carrier comes on at once but the peer's qdisc
// is activated later, by the linkwatch work (linkwatch_do_dev ->
// dev_activate). Until then the device transmits through noop_qdisc,
// which drops. The first packet after the flap creates a neighbour entry
// and sends an ARP request; its reply, sent in that window, is dropped
// (the peer's TX dropped counter goes up by one), and the entry stays
// INCOMPLETE until neigh_timer_handler sends the next request after
// retrans_time_ms, 1 s by default. A QP with mlx5's 67 ms ACK timeout and
// 7 retries gives up after 470 ms. A NIC rides through because its QP
// holds the peer's MAC address (resolved once, at RTR); a software agent
// sends through the kernel's neighbour table.
//
// neighbors lets a sender that sees its peer go silent restart the
// resolution at once: an entry stuck INCOMPLETE (or FAILED) is deleted,
// so the next packet sends a new request.
type neighbors struct {
	h *netlink.Handle // opened in the conn's network namespace

	mu   sync.Mutex
	last map[netip.Addr]time.Time // per destination, the last look
}

// neighborMinInterval spaces the looks at one destination: many QPs to one
// peer time out together.
const neighborMinInterval = 10 * time.Millisecond

// newNeighbors opens a route netlink handle in the calling thread's
// network namespace, the conn's.
func newNeighbors() (*neighbors, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("route netlink: %w", err)
	}
	return &neighbors{h: h, last: make(map[netip.Addr]time.Time)}, nil
}

func (n *neighbors) close() {
	if n != nil {
		n.h.Close()
	}
}

// resolveAgain deletes the neighbour entry of the next hop towards dst if
// it is INCOMPLETE or FAILED; it reports whether it did. Deleting needs
// CAP_NET_ADMIN.
func (n *neighbors) resolveAgain(dst netip.Addr) (bool, error) {
	dst = dst.Unmap()
	n.mu.Lock()
	if t, ok := n.last[dst]; ok && time.Since(t) < neighborMinInterval {
		n.mu.Unlock()
		return false, nil
	}
	if len(n.last) >= maxRouteCache {
		clear(n.last)
	}
	n.last[dst] = time.Now()
	n.mu.Unlock()

	routes, err := n.h.RouteGet(net.IP(dst.AsSlice()))
	if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
		return false, nil // the link is down: no entry to restart yet
	}
	if err != nil {
		return false, fmt.Errorf("route to %v: %w", dst, err)
	}
	if len(routes) == 0 {
		return false, nil
	}
	hop := dst
	if gw, ok := netip.AddrFromSlice(routes[0].Gw); ok && gw.IsValid() {
		hop = gw.Unmap()
	}
	family := netlink.FAMILY_V4
	if hop.Is6() {
		family = netlink.FAMILY_V6
	}
	entries, err := n.h.NeighList(routes[0].LinkIndex, family)
	if err != nil {
		return false, fmt.Errorf("neighbours of link %d: %w", routes[0].LinkIndex, err)
	}
	for i := range entries {
		e := &entries[i]
		a, ok := netip.AddrFromSlice(e.IP)
		if !ok || a.Unmap() != hop || e.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) == 0 {
			continue
		}
		if err := n.h.NeighDel(e); err != nil {
			return false, fmt.Errorf("delete the unresolved neighbour %v: %w", hop, err)
		}
		return true, nil
	}
	return false, nil
}
