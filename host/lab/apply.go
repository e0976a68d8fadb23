//go:build linux

package lab

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
)

// ApplyNode configures the calling thread's network namespace as node's
// share of spec, on devices that already exist: a lab server or VM whose
// NICs are the spec's links (the Vagrant lab). It sets each of node's
// link devices' MTU, address (replacing what is there), offloads and
// state, the node's sysctls and forwarding, and its routes (replacing
// routes to the same destinations). It never deletes anything, and it
// refuses a spec that fails validation. Unlike Build it touches the real
// namespace it runs in: call it on a lab machine, never in a test's root
// namespace.
func ApplyNode(spec Spec, node string) error {
	if err := spec.validate(); err != nil {
		return err
	}
	var ns *NodeSpec
	for i := range spec.Nodes {
		if spec.Nodes[i].Name == node {
			ns = &spec.Nodes[i]
		}
	}
	if ns == nil {
		return fmt.Errorf("lab: %w: no node %q", ErrInvalidSpec, node)
	}
	h, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("lab: netlink: %w", err)
	}
	defer h.Close()
	sysctl := func(k, v string) error {
		p, err := sysctlPath(k)
		if err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(v), 0); err != nil {
			return fmt.Errorf("lab: sysctl %s=%s: %w", k, v, err)
		}
		return nil
	}
	kv := [][2]string{{"net.ipv4.conf.all.rp_filter", "0"}, {"net.ipv4.conf.default.rp_filter", "0"}}
	if ns.Forwarding {
		kv = append(kv, [2]string{"net.ipv4.ip_forward", "1"})
	}
	for _, k := range sortedKeys(ns.Sysctls) {
		kv = append(kv, [2]string{k, ns.Sysctls[k]})
	}
	for _, p := range kv {
		if err := sysctl(p[0], p[1]); err != nil {
			return err
		}
	}
	for i, ls := range spec.Links {
		for _, ep := range []Endpoint{ls.A, ls.B} {
			if ep.Node != node {
				continue
			}
			if err := applyEndpoint(h, ls, ep); err != nil {
				return fmt.Errorf("lab: Links[%d] %s:%s: %w", i, ep.Node, ep.Dev, err)
			}
			// The device's own rp_filter wins over all's when higher.
			if err := sysctl("net/ipv4/conf/"+ep.Dev+"/rp_filter", "0"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	for i, rs := range spec.Routes {
		if rs.Node != node {
			continue
		}
		if err := routeVia(h, rs.Dst, spec.hops(rs), rs.QuickAck); err != nil {
			return fmt.Errorf("lab: Routes[%d] (%s via %s): %w", i, rs.Dst, strings.Join(addrStrings(rs), ", "), err)
		}
	}
	return nil
}

func applyEndpoint(h *netlink.Handle, ls LinkSpec, ep Endpoint) error {
	l, err := h.LinkByName(ep.Dev)
	if err != nil {
		return fmt.Errorf("no such device here (%w): name the machine's NIC in the lab file", err)
	}
	mtu := ls.MTU
	if mtu == 0 {
		mtu = 1500
	}
	if l.Attrs().MTU != mtu {
		if err := h.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("set mtu %d: %w", mtu, err)
		}
	}
	if err := h.AddrReplace(l, &netlink.Addr{IPNet: prefixToIPNet(ep.Addr)}); err != nil {
		return fmt.Errorf("address %s: %w", ep.Addr, err)
	}
	if ls.DisableOffloads {
		if err := SetOffloads(ep.Dev, false); err != nil {
			return err
		}
	}
	return h.LinkSetUp(l)
}

func addrStrings(rs RouteSpec) []string {
	out := []string{rs.Via.String()}
	for _, v := range rs.Vias {
		out = append(out, v.String())
	}
	return out
}

// ApplyRoute replaces one of spec's routes in the calling thread's
// namespace, as ApplyNode installs it: Lab.ReplaceRoute for a machine of
// its own (a reroute agent on a lab server moving its own routes).
func ApplyRoute(spec Spec, rs RouteSpec) error {
	hops := spec.hops(rs)
	if len(hops) != 1+len(rs.Vias) {
		return fmt.Errorf("lab: ApplyRoute: %s: a next hop of %s via %s is on none of its links", rs.Node, rs.Dst, strings.Join(addrStrings(rs), ", "))
	}
	h, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("lab: netlink: %w", err)
	}
	defer h.Close()
	if err := routeVia(h, rs.Dst, hops, rs.QuickAck); err != nil {
		return fmt.Errorf("lab: route %s via %s: %w", rs.Dst, strings.Join(addrStrings(rs), ", "), err)
	}
	return nil
}
