//go:build linux

package lab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Bounds of MultipathSpec.
const (
	MinPaths = 2
	MaxPaths = 8
	// MaxMultipathSenders bounds MultipathSpec.Senders: sender i uses
	// 198.18.i.0/24, and leaf2 reaches them all through 198.18.0.0/18.
	MaxMultipathSenders = 63
)

// Multipath addressing (all inside 198.18.0.0/15).
var (
	mpSendersPrefix  = netip.MustParsePrefix("198.18.0.0/18") // s<i>: 198.18.i.0/24
	mpCrossPrefix    = netip.MustParsePrefix("198.18.64.0/24")
	mpReceiverPrefix = netip.MustParsePrefix("198.19.0.0/24")
)

const (
	mpUplinkBase   = 100 // leaf1–sp<j>: 198.18.(100+j).0/24
	mpDownlinkBase = 110 // sp<j>–leaf2: 198.18.(110+j).0/24
)

// MultipathSpec describes senders → leaf1 → Paths spines → leaf2 →
// receiver, with ECMP over the spines in both directions.
type MultipathSpec struct {
	// Paths is the number of spines, 2..MaxPaths.
	Paths int
	// Senders is the number of sender hosts behind leaf1. Optional: 0 is
	// 1; at most MaxMultipathSenders.
	Senders int
	// MTU applies to every link. Optional: 0 is 1500.
	MTU             int
	DisableOffloads bool
	// SenderSysctls apply to every sender (see DumbbellSpec).
	SenderSysctls map[string]string
	// PathRates[j] attaches a switch port (qdisc.Attach) at that rate to
	// path j's spine egress toward leaf2 (PathPorts[j]): the path's own
	// queue, ECN marking and counters. Optional: nil, a missing entry or 0
	// leaves the path a bare veth. At most Paths entries.
	PathRates []units.Rate
	// PortConfig returns path j's port configuration at its rate.
	// Optional: nil is qdisc.DefaultConfig(rate).
	PortConfig func(path int, rate units.Rate) qdisc.Config
	// PortOptions are every port's attach options; Dev, Netns, PeerDev
	// and PeerNetns are filled in. Optional.
	PortOptions qdisc.AttachOptions
	// CrossSpine adds a cross-traffic host x on spine CrossSpine (1-based:
	// path CrossSpine−1): what x sends to the receiver takes that path's
	// port only, beside the senders' share of it. Optional: 0 is none.
	CrossSpine int
}

// Multipath is a two-tier fabric: senders s1..sN on leaf1, spines
// sp1..spP, and the receiver r on leaf2. leaf1 routes the receiver's
// subnet over every spine with an ECMP route (one nexthop per spine) and
// leaf2 routes the senders' subnets back the same way; both hash on the
// 5-tuple (net.ipv4.fib_multipath_hash_policy = 1), so the UDP source port
// picks the path (path j is spine sp<j+1>), as an EV does in a fabric.
//
// Addressing: sender i is 198.18.i.2/24 on eth0 facing leaf1:h<i>
// 198.18.i.1; leaf1:sp<j> is 198.18.(100+j).1/24 facing sp<j>:l1 .2;
// sp<j>:l2 is 198.18.(110+j).1/24 facing leaf2:sp<j> .2; the receiver is
// 198.19.0.2/24 on eth0 facing leaf2:r0 198.19.0.1; the cross host x is
// 198.18.64.2/24 facing sp<c>:x0 198.18.64.1. Hosts route the lab ranges
// via their switch.
//
// Close detaches the ports, then closes the lab.
type Multipath struct {
	*Lab
	Senders      []*Node
	Leaf1, Leaf2 *Node
	Spines       []*Node // Spines[j] is sp<j+1>, path j
	Receiver     *Node
	Cross        *Node // x; nil without MultipathSpec.CrossSpine

	SenderAddrs  []netip.Addr
	ReceiverAddr netip.Addr
	CrossAddr    netip.Addr // zero without a cross host

	// Uplinks[j] is leaf1's egress into path j: leaf1:sp<j+1> ->
	// sp<j+1>:l1, where the ECMP choice shows.
	Uplinks []Port
	// PathPorts[j] is path j's switch egress port: sp<j+1>:l2 ->
	// leaf2:sp<j+1>.
	PathPorts []Port
	// Ports[j] is the port attached to PathPorts[j] (PathRates[j]), nil
	// where none is.
	Ports []*qdisc.Port

	closeOnce sync.Once
	closeErr  error
}

// PathCounters are one path's interface counters: what leaf1's ECMP put on
// it and what left its spine toward leaf2 (cross traffic included; with a
// port, after the port's drops). Link counters include the odd ARP frame.
type PathCounters struct {
	UplinkPackets, UplinkBytes uint64 // transmitted by leaf1:sp<j+1>
	EgressPackets, EgressBytes uint64 // transmitted by sp<j+1>:l2
	EgressDropped              uint64 // dropped on transmit by sp<j+1>:l2
}

// Sub returns c − prev, the counts between two readings.
func (c PathCounters) Sub(prev PathCounters) PathCounters {
	return PathCounters{
		UplinkPackets: c.UplinkPackets - prev.UplinkPackets,
		UplinkBytes:   c.UplinkBytes - prev.UplinkBytes,
		EgressPackets: c.EgressPackets - prev.EgressPackets,
		EgressBytes:   c.EgressBytes - prev.EgressBytes,
		EgressDropped: c.EgressDropped - prev.EgressDropped,
	}
}

func (ms MultipathSpec) senders() int { return max(ms.Senders, 1) }

func (ms MultipathSpec) portConfig(path int, rate units.Rate) qdisc.Config {
	if ms.PortConfig != nil {
		return ms.PortConfig(path, rate)
	}
	return qdisc.DefaultConfig(rate)
}

func (ms MultipathSpec) validate() error {
	if ms.Paths < MinPaths || ms.Paths > MaxPaths {
		return specErr("MultipathSpec.Paths", "%d outside %d..%d", ms.Paths, MinPaths, MaxPaths)
	}
	if ms.Senders < 0 || ms.Senders > MaxMultipathSenders {
		return specErr("MultipathSpec.Senders", "%d outside 0..%d (0 is 1)", ms.Senders, MaxMultipathSenders)
	}
	if len(ms.PathRates) > ms.Paths {
		return specErr("MultipathSpec.PathRates", "%d entries for %d paths (at most one per path)", len(ms.PathRates), ms.Paths)
	}
	for j, r := range ms.PathRates {
		if r == 0 {
			continue
		}
		cfg := ms.portConfig(j, r)
		if err := cfg.Validate(); err != nil {
			return specErr(fmt.Sprintf("MultipathSpec.PathRates[%d]", j), "port at %s: %v", r, err)
		}
	}
	if ms.CrossSpine < 0 || ms.CrossSpine > ms.Paths {
		return specErr("MultipathSpec.CrossSpine", "%d outside 0..%d (a spine, 1-based; 0 is none)", ms.CrossSpine, ms.Paths)
	}
	return nil
}

func subnet24(third byte) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, third, 0}), 24)
}

// MultipathTopology returns the Spec NewMultipath builds (without its ECMP
// routes, which a Spec cannot express and NewMultipath adds).
func MultipathTopology(ms MultipathSpec) (Spec, error) {
	if err := ms.validate(); err != nil {
		return Spec{}, err
	}
	ecmp := map[string]string{"net.ipv4.fib_multipath_hash_policy": "1"} // L4: the 5-tuple
	var spec Spec
	for i := 1; i <= ms.senders(); i++ {
		spec.Nodes = append(spec.Nodes, NodeSpec{Name: fmt.Sprintf("s%d", i), Sysctls: ms.SenderSysctls})
	}
	spec.Nodes = append(spec.Nodes, NodeSpec{Name: "leaf1", Forwarding: true, Sysctls: ecmp})
	for j := 1; j <= ms.Paths; j++ {
		spec.Nodes = append(spec.Nodes, NodeSpec{Name: fmt.Sprintf("sp%d", j), Forwarding: true})
	}
	spec.Nodes = append(spec.Nodes, NodeSpec{Name: "leaf2", Forwarding: true, Sysctls: ecmp}, NodeSpec{Name: "r"})
	if ms.CrossSpine > 0 {
		spec.Nodes = append(spec.Nodes, NodeSpec{Name: "x", Sysctls: ms.SenderSysctls})
	}

	link := func(a Endpoint, b Endpoint) {
		spec.Links = append(spec.Links, LinkSpec{A: a, B: b, MTU: ms.MTU, DisableOffloads: ms.DisableOffloads})
	}
	route := func(node string, dst netip.Prefix, via netip.Prefix) {
		spec.Routes = append(spec.Routes, RouteSpec{Node: node, Dst: dst, Via: via.Addr()})
	}
	// Links[0]: the receiver, then the senders, the spines' two sides and
	// the cross host; newMultipathFrom reads them back in this order.
	sw, h := hostPrefix(mpReceiverPrefix, 1), hostPrefix(mpReceiverPrefix, 2)
	link(Endpoint{Node: "leaf2", Dev: "r0", Addr: sw}, Endpoint{Node: "r", Dev: "eth0", Addr: h})
	route("r", labPrefix4, sw)
	for i := 1; i <= ms.senders(); i++ {
		p := subnet24(byte(i))
		sw, h := hostPrefix(p, 1), hostPrefix(p, 2)
		name := fmt.Sprintf("s%d", i)
		link(Endpoint{Node: "leaf1", Dev: fmt.Sprintf("h%d", i), Addr: sw}, Endpoint{Node: name, Dev: "eth0", Addr: h})
		route(name, labPrefix4, sw)
	}
	for j := 1; j <= ms.Paths; j++ {
		sp := fmt.Sprintf("sp%d", j)
		up, down := subnet24(byte(mpUplinkBase+j)), subnet24(byte(mpDownlinkBase+j))
		link(Endpoint{Node: "leaf1", Dev: sp, Addr: hostPrefix(up, 1)}, Endpoint{Node: sp, Dev: "l1", Addr: hostPrefix(up, 2)})
		link(Endpoint{Node: sp, Dev: "l2", Addr: hostPrefix(down, 1)}, Endpoint{Node: "leaf2", Dev: sp, Addr: hostPrefix(down, 2)})
		route(sp, mpReceiverPrefix, hostPrefix(down, 2))
		route(sp, mpSendersPrefix, hostPrefix(up, 1))
	}
	if c := ms.CrossSpine; c > 0 {
		sp := fmt.Sprintf("sp%d", c)
		sw, h := hostPrefix(mpCrossPrefix, 1), hostPrefix(mpCrossPrefix, 2)
		link(Endpoint{Node: sp, Dev: "x0", Addr: sw}, Endpoint{Node: "x", Dev: "eth0", Addr: h})
		route("x", labPrefix4, sw)
		route("leaf2", mpCrossPrefix, hostPrefix(subnet24(byte(mpDownlinkBase+c)), 1))
	}
	return spec, nil
}

// NewMultipath builds the fabric, adds the ECMP routes and attaches the
// ports of MultipathSpec.PathRates. On error nothing is left behind.
func NewMultipath(ms MultipathSpec) (*Multipath, error) { return multipathShape.build(ms) }

// NewMultipathT is NewMultipath that fails tb on error and closes in
// tb.Cleanup (ports first, then the lab).
func NewMultipathT(tb TB, ms MultipathSpec) *Multipath {
	tb.Helper()
	return multipathShape.buildT(tb, ms)
}

var multipathShape = shape[MultipathSpec, *Multipath]{name: "Multipath", topology: MultipathTopology,
	from: newMultipathFrom, detach: (*Multipath).closePorts}

func newMultipathFrom(lab *Lab, ms MultipathSpec) (*Multipath, error) {
	m := &Multipath{
		Lab:          lab,
		Leaf1:        lab.Node("leaf1"),
		Leaf2:        lab.Node("leaf2"),
		Receiver:     lab.Node("r"),
		ReceiverAddr: hostPrefix(mpReceiverPrefix, 2).Addr(),
		Ports:        make([]*qdisc.Port, ms.Paths),
	}
	for i := 1; i <= ms.senders(); i++ {
		m.Senders = append(m.Senders, lab.Node(fmt.Sprintf("s%d", i)))
		m.SenderAddrs = append(m.SenderAddrs, hostPrefix(subnet24(byte(i)), 2).Addr())
	}
	var toReceiver, toSenders []netip.Addr
	for j := 1; j <= ms.Paths; j++ {
		sp := lab.Node(fmt.Sprintf("sp%d", j))
		m.Spines = append(m.Spines, sp)
		m.Uplinks = append(m.Uplinks, Port{Node: m.Leaf1, Dev: sp.Name, PeerNode: sp, PeerDev: "l1"})
		m.PathPorts = append(m.PathPorts, Port{Node: sp, Dev: "l2", PeerNode: m.Leaf2, PeerDev: sp.Name})
		toReceiver = append(toReceiver, hostPrefix(subnet24(byte(mpUplinkBase+j)), 2).Addr())
		toSenders = append(toSenders, hostPrefix(subnet24(byte(mpDownlinkBase+j)), 1).Addr())
	}
	if ms.CrossSpine > 0 {
		m.Cross = lab.Node("x")
		m.CrossAddr = hostPrefix(mpCrossPrefix, 2).Addr()
	}
	if err := addECMP(m.Leaf1, mpReceiverPrefix, m.Spines, toReceiver); err != nil {
		return nil, err
	}
	if err := addECMP(m.Leaf2, mpSendersPrefix, m.Spines, toSenders); err != nil {
		return nil, err
	}
	for j, rate := range ms.PathRates {
		if rate == 0 {
			continue
		}
		pp := m.PathPorts[j]
		opts := ms.PortOptions
		opts.Dev, opts.Netns = pp.Dev, pp.Node.NetnsName
		opts.PeerDev, opts.PeerNetns = pp.PeerDev, pp.PeerNode.NetnsName
		p, err := qdisc.Attach(ms.portConfig(j, rate), opts)
		if err != nil {
			err = fmt.Errorf("lab: multipath: port on path %d (%s:%s, %s): %w", j, pp.Node.Name, pp.Dev, rate, err)
			return nil, errors.Join(err, m.closePorts())
		}
		m.Ports[j] = p
	}
	return m, nil
}

// addECMP adds dst via one nexthop per spine on node: the device named
// after the spine, gateway gws[j].
func addECMP(n *Node, dst netip.Prefix, spines []*Node, gws []netip.Addr) error {
	hops := make([]*netlink.NexthopInfo, len(spines))
	for j, sp := range spines {
		l, err := n.nl.LinkByName(sp.Name)
		if err != nil {
			return fmt.Errorf("lab: multipath: %s: link %s: %w", n.Name, sp.Name, err)
		}
		hops[j] = &netlink.NexthopInfo{LinkIndex: l.Attrs().Index, Gw: net.IP(gws[j].AsSlice())}
	}
	if err := n.nl.RouteAdd(&netlink.Route{Dst: prefixToIPNet(dst), MultiPath: hops}); err != nil {
		return fmt.Errorf("lab: multipath: %s: ECMP route %s over %d spines: %w", n.Name, dst, len(spines), err)
	}
	return nil
}

// Paths is the number of paths (spines).
func (m *Multipath) Paths() int { return len(m.Spines) }

// PathCounters reads every path's interface counters; PathCounters()[j]
// is path j. Take two readings and Sub them to count what a test sent.
func (m *Multipath) PathCounters() ([]PathCounters, error) {
	out := make([]PathCounters, len(m.Spines))
	for j := range m.Spines {
		up, err := linkStats(m.Uplinks[j])
		if err != nil {
			return nil, err
		}
		eg, err := linkStats(m.PathPorts[j])
		if err != nil {
			return nil, err
		}
		out[j] = PathCounters{
			UplinkPackets: up.TxPackets, UplinkBytes: up.TxBytes,
			EgressPackets: eg.TxPackets, EgressBytes: eg.TxBytes, EgressDropped: eg.TxDropped,
		}
	}
	return out, nil
}

func linkStats(p Port) (*netlink.LinkStatistics, error) {
	var st *netlink.LinkStatistics
	err := func() error {
		p.Node.mu.RLock()
		defer p.Node.mu.RUnlock()
		if p.Node.closed {
			return ErrClosed
		}
		l, err := p.Node.nl.LinkByName(p.Dev)
		if err != nil {
			return err
		}
		if st = l.Attrs().Statistics; st == nil {
			return errors.New("no statistics")
		}
		return nil
	}()
	if err != nil {
		return nil, fmt.Errorf("lab: multipath: counters of %s:%s: %w", p.Node.Name, p.Dev, err)
	}
	return st, nil
}

// PortStats reads the port stats of every path; nil where a path has no
// port.
func (m *Multipath) PortStats() ([]*qdisc.Stats, error) {
	out := make([]*qdisc.Stats, len(m.Ports))
	for j, p := range m.Ports {
		if p == nil {
			continue
		}
		s, err := p.Stats()
		if err != nil {
			return nil, fmt.Errorf("lab: multipath: port of path %d: %w", j, err)
		}
		out[j] = &s
	}
	return out, nil
}

// Close detaches the ports and closes the lab. It is idempotent.
func (m *Multipath) Close() error {
	return errors.Join(m.closePorts(), m.Lab.Close())
}

// closePorts detaches every port, once.
func (m *Multipath) closePorts() error {
	m.closeOnce.Do(func() {
		var errs []error
		for j := len(m.Ports) - 1; j >= 0; j-- {
			if p := m.Ports[j]; p != nil {
				if err := p.Close(); err != nil {
					errs = append(errs, fmt.Errorf("port of path %d: %w", j, err))
				}
			}
		}
		m.closeErr = errors.Join(errs...)
	})
	return m.closeErr
}
