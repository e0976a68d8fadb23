//go:build linux

package lab

import (
	"fmt"
	"net/netip"
	"path"
	"strings"
)

const maxNodeName = 32

func specErr(field, format string, args ...any) error {
	return fmt.Errorf("lab: %w: %s: %s", ErrInvalidSpec, field, fmt.Sprintf(format, args...))
}

// validate checks the whole spec up front so a typo never leaves a half-built
// lab behind, and names the offending field.
func (s Spec) validate() error {
	if len(s.Nodes) == 0 {
		return specErr("Nodes", "at least one node is required")
	}
	nodes := make(map[string]int, len(s.Nodes))
	for i, n := range s.Nodes {
		f := fmt.Sprintf("Nodes[%d]", i)
		if err := validNodeName(n.Name); err != nil {
			return specErr(f+".Name", "%v", err)
		}
		if j, dup := nodes[n.Name]; dup {
			return specErr(f+".Name", "duplicate node name %q (also Nodes[%d])", n.Name, j)
		}
		nodes[n.Name] = i
		for k, v := range n.Sysctls {
			if _, err := sysctlPath(k); err != nil {
				return specErr(fmt.Sprintf("%s.Sysctls[%q]", f, k), "%v", err)
			}
			if strings.ContainsAny(v, "\n\x00") {
				return specErr(fmt.Sprintf("%s.Sysctls[%q]", f, k), "value contains a newline or NUL")
			}
		}
	}

	devs := map[string]map[string]string{} // node -> dev -> field
	addrs := map[netip.Addr]string{}       // address -> field
	addrNode := map[netip.Addr]string{}    // address -> node
	type subnet struct {
		node string
		p    netip.Prefix
	}
	var onLink []subnet
	// claim takes p, a host of within on node's link, for field: no
	// other end may use its address.
	claim := func(field, node string, p, within netip.Prefix) error {
		if err := validHostPrefix(p, within); err != nil {
			return specErr(field, "%v", err)
		}
		if prev, dup := addrs[p.Addr()]; dup {
			return specErr(field, "%s already used by %s", p.Addr(), prev)
		}
		addrs[p.Addr()] = field
		addrNode[p.Addr()] = node
		onLink = append(onLink, subnet{node, p.Masked()})
		return nil
	}
	for i, l := range s.Links {
		f := fmt.Sprintf("Links[%d]", i)
		for _, side := range []struct {
			name string
			ep   Endpoint
		}{{"A", l.A}, {"B", l.B}} {
			sf := f + "." + side.name
			ep := side.ep
			if _, ok := nodes[ep.Node]; !ok {
				return specErr(sf+".Node", "unknown node %q", ep.Node)
			}
			if err := validDevName(ep.Dev); err != nil {
				return specErr(sf+".Dev", "%v", err)
			}
			if devs[ep.Node] == nil {
				devs[ep.Node] = map[string]string{}
			}
			if prev, dup := devs[ep.Node][ep.Dev]; dup {
				return specErr(sf+".Dev", "device %q already used on node %q by %s", ep.Dev, ep.Node, prev)
			}
			devs[ep.Node][ep.Dev] = sf + ".Dev"

			if !ep.Addr.IsValid() {
				return specErr(sf+".Addr", "required (an IPv4 prefix inside %s)", labPrefix4)
			}
			if err := claim(sf+".Addr", ep.Node, ep.Addr, labPrefix4); err != nil {
				return err
			}
			for k, x := range ep.Extra {
				xf := fmt.Sprintf("%s.Extra[%d]", sf, k)
				if err := validHostPrefix(netip.PrefixFrom(x, ep.Addr.Bits()), labPrefix4); err != nil || !ep.Addr.Masked().Contains(x) {
					return specErr(xf, "%s: want a host address of %s", x, ep.Addr.Masked())
				}
				if prev, dup := addrs[x]; dup {
					return specErr(xf, "%s already used by %s", x, prev)
				}
				addrs[x] = xf
				addrNode[x] = ep.Node
			}

			if ep.Addr6.IsValid() {
				if err := claim(sf+".Addr6", ep.Node, ep.Addr6, labPrefix6); err != nil {
					return err
				}
			}
		}
		if l.A.Node == l.B.Node {
			return specErr(f+".B.Node", "both ends on node %q; a link joins two different nodes", l.A.Node)
		}
		if l.A.Addr.Masked() != l.B.Addr.Masked() {
			return specErr(f+".B.Addr", "%s is not in A's subnet %s", l.B.Addr, l.A.Addr.Masked())
		}
		if l.A.Addr6.IsValid() != l.B.Addr6.IsValid() {
			return specErr(f+".Addr6", "set on both ends or neither")
		}
		if l.A.Addr6.IsValid() && l.A.Addr6.Masked() != l.B.Addr6.Masked() {
			return specErr(f+".B.Addr6", "%s is not in A's subnet %s", l.B.Addr6, l.A.Addr6.Masked())
		}
		if l.MTU != 0 && (l.MTU < 68 || l.MTU > 65535) {
			return specErr(f+".MTU", "%d outside 68..65535 (0 means 1500)", l.MTU)
		}
		if l.A.Addr6.IsValid() && l.MTU != 0 && l.MTU < 1280 {
			return specErr(f+".MTU", "%d is below the IPv6 minimum 1280", l.MTU)
		}
		if l.TxQueueLen < 0 {
			return specErr(f+".TxQueueLen", "%d is negative (0 keeps the kernel default)", l.TxQueueLen)
		}
	}

	seen := map[string]int{}
	for i, r := range s.Routes {
		f := fmt.Sprintf("Routes[%d]", i)
		if _, ok := nodes[r.Node]; !ok {
			return specErr(f+".Node", "unknown node %q", r.Node)
		}
		if !r.Dst.IsValid() {
			return specErr(f+".Dst", "required")
		}
		want := labPrefix4
		if r.Dst.Addr().Is6() {
			want = labPrefix6
		}
		if r.Dst.Addr().Is4In6() || r.Dst.Bits() < want.Bits() || !want.Contains(r.Dst.Addr()) {
			return specErr(f+".Dst", "%s is not inside %s (labs never route elsewhere)", r.Dst, want)
		}
		if r.Dst != r.Dst.Masked() {
			return specErr(f+".Dst", "%s has host bits set; did you mean %s?", r.Dst, r.Dst.Masked())
		}
		if !r.Via.IsValid() {
			return specErr(f+".Via", "required")
		}
		gws := map[netip.Addr]bool{}
		for j, via := range append([]netip.Addr{r.Via}, r.Vias...) {
			vf := f + ".Via"
			if j > 0 {
				vf = fmt.Sprintf("%s.Vias[%d]", f, j-1)
			}
			if via.Is4() != r.Dst.Addr().Is4() {
				return specErr(vf, "%s is not the same address family as Dst %s", via, r.Dst)
			}
			if addrNode[via] == r.Node {
				return specErr(vf, "%s is node %q's own address (%s), not a gateway", via, r.Node, addrs[via])
			}
			if gws[via] {
				return specErr(vf, "%s is listed twice", via)
			}
			gws[via] = true
			reachable := false
			for _, s := range onLink {
				if s.node == r.Node && s.p.Contains(via) {
					reachable = true
					break
				}
			}
			if !reachable {
				return specErr(vf, "%s is not on any subnet of node %q", via, r.Node)
			}
		}
		key := r.Node + " " + r.Dst.String()
		if j, dup := seen[key]; dup {
			return specErr(f+".Dst", "duplicate of Routes[%d]", j)
		}
		seen[key] = i
	}
	return nil
}

// CheckNodeName reports whether s is a valid node name (NodeSpec.Name).
func CheckNodeName(s string) error { return validNodeName(s) }

// CheckDevName reports whether s is a valid interface name
// (Endpoint.Dev).
func CheckDevName(s string) error { return validDevName(s) }

func validNodeName(s string) error {
	if s == "" {
		return fmt.Errorf("empty")
	}
	if len(s) > maxNodeName {
		return fmt.Errorf("%q longer than %d bytes", s, maxNodeName)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("%q: only [A-Za-z0-9_.-] allowed", s)
		}
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%q is not a valid name", s)
	}
	return nil
}

// validDevName mirrors the kernel's dev_valid_name.
func validDevName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty")
	case len(s) > 15:
		return fmt.Errorf("%q longer than 15 bytes (IFNAMSIZ)", s)
	case s == "." || s == "..":
		return fmt.Errorf("%q is not a valid interface name", s)
	case s == "lo":
		return fmt.Errorf("%q is the loopback device", s)
	case strings.ContainsAny(s, "/: \t\n\x00"):
		return fmt.Errorf("%q contains '/', ':' or whitespace", s)
	}
	return nil
}

// validHostPrefix accepts an interface address inside within: no host-zero or
// broadcast address (except on /31, /127-style point-to-point subnets).
func validHostPrefix(p, within netip.Prefix) error {
	a := p.Addr()
	if a.Is4In6() || a.Is4() != within.Addr().Is4() {
		return fmt.Errorf("%s: want an IPv%d prefix inside %s", p, map[bool]int{true: 4, false: 6}[within.Addr().Is4()], within)
	}
	if p.Bits() < within.Bits() || !within.Contains(a) {
		return fmt.Errorf("%s is not inside %s", p, within)
	}
	if p.Bits() >= a.BitLen()-1 {
		if p.Bits() == a.BitLen() {
			return fmt.Errorf("%s: a /%d has no on-link peer", p, p.Bits())
		}
		return nil
	}
	if a == p.Masked().Addr() {
		return fmt.Errorf("%s is the subnet address", p)
	}
	if a.Is4() {
		bcast := a.As4()
		host := 32 - p.Bits()
		v := uint32(bcast[0])<<24 | uint32(bcast[1])<<16 | uint32(bcast[2])<<8 | uint32(bcast[3])
		if v|(1<<host-1) == v {
			return fmt.Errorf("%s is the broadcast address", p)
		}
	}
	return nil
}

// sysctlPath maps a "net.*" key to its /proc/sys path. Only the net tree is
// namespaced; anything else would change the host.
func sysctlPath(key string) (string, error) {
	rel := key
	if !strings.Contains(key, "/") {
		rel = strings.ReplaceAll(key, ".", "/")
	}
	clean := path.Clean(rel)
	if !strings.HasPrefix(clean, "net/") || clean != rel || strings.Contains(rel, "..") {
		return "", fmt.Errorf("sysctl key %q: only net.* keys are per-namespace", key)
	}
	return "/proc/sys/" + clean, nil
}
