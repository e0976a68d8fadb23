//go:build linux

package lab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fabriclab/fabriclab/host/lab/link"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/enum"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
)

// Bounds of WANSpec.
const (
	// MaxWANSenders bounds WANSpec.Senders: sender i uses 198.18.i.0/24
	// inside DC1's 198.18.0.0/17, below leaf1's uplink subnet 198.18.64.0/24.
	MaxWANSenders = 63
	// MaxWANPaths is the number of cores with WANSpec.SecondPath.
	MaxWANPaths = 2
)

// WAN addressing (all inside 198.18.0.0/15). The DCs' prefixes are
// distinct /17s; the WAN subnets lie outside both, so a PE's tunnel route
// (a DC prefix) never covers the other PE's address.
var (
	wanDC1         = netip.MustParsePrefix("198.18.0.0/17")  // the senders, leaf1's link to pe1
	wanDC2         = netip.MustParsePrefix("198.19.0.0/17")  // the receiver, leaf2's link to pe2
	wanLeaf1Uplink = netip.MustParsePrefix("198.18.64.0/24") // leaf1:pe1 .1, pe1:lan .2
	wanLeaf2Uplink = netip.MustParsePrefix("198.19.64.0/24") // leaf2:pe2 .1, pe2:lan .2
	wanReceiver    = netip.MustParsePrefix("198.19.1.0/24")  // leaf2:r0 .1, r:eth0 .2
)

const (
	wanPE1SideBase = 200 // pe1:wan<k> 198.18.(200+k).1/24, f<k>:p .254
	wanPE2SideBase = 210 // c<k>:w2 198.18.(210+k).254/24, pe2:wan<k> .1
	wanFiberBase   = 220 // f<k>:c 198.18.(220+k).1/24, c<k>:w1 .254
	wanPEHost      = 1
	wanCoreHost    = 254
	wanFiberHost   = 1
)

// WANSpec describes two data centres joined across a WAN by a pair of
// tunnel PEs: senders s1..sN → leaf1 → pe1 ⇄ core c1 ⇄ pe2 → leaf2 →
// receiver r, and with SecondPath a second core c2 between the PEs.
type WANSpec struct {
	// Senders is the number of sender hosts behind leaf1. Optional: 0 is
	// 1; at most MaxWANSenders.
	Senders int
	// SecondPath adds core c2 between pe1:wan2 and pe2:wan2, with its own
	// PEs on those devices; the DC routes take it only after
	// WAN.SetRoute.
	SecondPath bool
	// WANDelay is the one-way delay of each core path in each direction:
	// forward at pe1's egress into the core (before the bottleneck port),
	// reverse at the core's egress toward pe1. Optional: 0 is none;
	// 0..link.MaxDelay. The delay forwarder carries about 100 kpps on
	// two cores (link.Delay): keep the ports' rates at a few hundred
	// Mbit/s at most.
	WANDelay time.Duration
	// CorePort is the bottleneck: a switch port (qdisc.Attach) on c1's
	// egress toward pe2, the only queue of the path. Required.
	CorePort qdisc.Config
	// SecondCorePort is the same on c2's egress toward pe2. Optional: nil
	// leaves it a bare veth. Only with SecondPath.
	SecondCorePort *qdisc.Config
	// PortOptions are every core port's attach options; Dev, Netns,
	// PeerDev and PeerNetns are filled in. Optional.
	PortOptions qdisc.AttachOptions
	// Tunnel is the PEs' configuration template: ECN (encapsulation mode),
	// TwoThreshold, TTL and LogInterval apply to every PE. Local, Routes,
	// Peers and MTU are filled in per device and must be left zero.
	Tunnel tunnel.Config
	// MTU applies to every link. Optional: 0 is 1500. The tunnel carries
	// MTU−20 (tunnel.OuterHeaderBytes): pe1 answers a larger DF packet
	// with ICMP Fragmentation Needed.
	MTU int
	// SenderSysctls apply to every sender (see DumbbellSpec).
	SenderSysctls map[string]string
}

// WANRoute is which core the PEs route the other DC's prefix through.
type WANRoute int

const (
	// WANViaCore1 routes through c1 only: the default, and the only
	// choice without SecondPath.
	WANViaCore1 WANRoute = iota
	// WANViaCore2 routes through c2 only.
	WANViaCore2
	// WANViaBoth spreads flows over both cores by ECMP on the 5-tuple
	// (net.ipv4.fib_multipath_hash_policy = 1) of the inner packet. Each
	// direction hashes on its own: a flow's answers may take the other
	// core.
	WANViaBoth
)

var wanRouteNames = enum.Names{WANViaCore1: {"via c1"}, WANViaCore2: {"via c2"}, WANViaBoth: {"via c1 and c2 (ECMP)"}}

func (r WANRoute) String() string { return enum.String(r, wanRouteNames, "WANRoute") }

// WANPath is one core between the PEs, with what is attached along it.
type WANPath struct {
	Core *Node // c<k>
	// PE1Addr and PE2Addr are the PEs' addresses on this path: the
	// tunnel's outer source and destination.
	PE1Addr, PE2Addr netip.Addr
	// Fiber is f<k>, the router between pe1 and c<k> that holds the
	// path's delay in both directions, so that no delay link shares a
	// device with a PE or a port (their programs would order against
	// it).
	Fiber *Node
	// Uplink is pe1:wan<k> -> f<k>:p: the tunnel's encapsulation (and a
	// PE rate limiter, if one is attached there).
	Uplink Port
	// FiberOut is f<k>:c -> c<k>:w1: the forward delay.
	FiberOut Port
	// Downlink is c<k>:w2 -> pe2:wan<k>: the core port's device; the
	// port's departure hook and then PE2's decapsulation run at pe2:wan<k>
	// ingress.
	Downlink Port
	// Return is f<k>:p -> pe1:wan<k>: the reverse delay, which the core's
	// CNPs to pe1 cross too.
	Return Port
	// Port is the switch port on Downlink; nil on the second path without
	// WANSpec.SecondCorePort.
	Port *qdisc.Port
	// PE1 and PE2 are the tunnel PEs on pe1:wan<k> and pe2:wan<k>.
	PE1, PE2 *tunnel.PE
	// ForwardDelay (on FiberOut) and ReverseDelay (on Return) are nil
	// without WANSpec.WANDelay. The lab closes them.
	ForwardDelay, ReverseDelay *link.Delay

	k int // 1-based: c<k>, wan<k>
}

// WAN is the DC-interconnect topology of issue 13 §5.
//
// Addressing: DC1 is 198.18.0.0/17: sender i is 198.18.i.2/24 on eth0
// facing leaf1:h<i> 198.18.i.1, and leaf1:pe1 198.18.64.1/24 faces pe1:lan
// .2. DC2 is 198.19.0.0/17: the receiver is 198.19.1.2/24 on eth0 facing
// leaf2:r0 .1, and leaf2:pe2 198.19.64.1/24 faces pe2:lan .2. Path k
// (1-based) is pe1:wan<k> 198.18.(200+k).1/24 facing the fiber f<k>:p
// .254, f<k>:c 198.18.(220+k).1/24 facing c<k>:w1 .254, and c<k>:w2
// 198.18.(210+k).254/24 facing pe2:wan<k> .1.
//
// Routing: hosts and leaves route the other DC via their PE. Each PE routes
// its own DC via its leaf, the other PE's WAN subnets via the next hop of
// the same path, and the other DC's prefix via path 1 (SetRoute changes
// that). A tunnel PE on every PE WAN device encapsulates what is routed to
// the other DC to the other PE's address on that path and decapsulates what
// comes back, so fibers and cores carry only PE-to-PE packets: they know
// the PEs' WAN subnets and nothing else, and could not forward a DC packet.
//
// The fiber f<k> holds the path's one-way delay in both directions (its
// egress toward the core and toward pe1), so no delay link shares a device
// with a PE, a port or a port's notifications: a delay is the first
// program at its hook and would otherwise hold packets before them, ahead
// of the port's queue. (A CNP clone a port sends through a delayed device
// was also lost there, until the delay link kept packets' marks and
// Ethernet headers across its TUN: bpf/delay.c.) The core port's CNPs to pe1 cross the
// reverse delay like any packet. At pe2:wan<k> ingress the decapsulation
// (TCX tail) runs after the core port's departure hook, which sees the
// packet as it was queued.
//
// Close detaches the PEs and the ports, then closes the lab (and the delay
// links with it).
type WAN struct {
	*Lab
	Senders  []*Node
	Leaf1    *Node
	PE1Node  *Node // pe1
	PE2Node  *Node // pe2
	Leaf2    *Node
	Receiver *Node

	SenderAddrs  []netip.Addr
	ReceiverAddr netip.Addr
	// DC1 and DC2 are the prefixes the PEs tunnel: 198.18.0.0/17 and
	// 198.19.0.0/17.
	DC1, DC2 netip.Prefix

	// Paths[0] is through c1, Paths[1] through c2 (SecondPath).
	Paths []*WANPath

	// CorePort, PE1 and PE2 are Paths[0]'s: the bottleneck and the PEs
	// on it.
	CorePort *qdisc.Port
	PE1, PE2 *tunnel.PE

	mu        sync.Mutex
	route     WANRoute
	closeOnce sync.Once
	closeErr  error
}

func (ws WANSpec) senders() int { return max(ws.Senders, 1) }

func (ws WANSpec) paths() int {
	if ws.SecondPath {
		return MaxWANPaths
	}
	return 1
}

func (ws WANSpec) validate() error {
	if ws.Senders < 0 || ws.Senders > MaxWANSenders {
		return specErr("WANSpec.Senders", "%d outside 0..%d (0 is 1)", ws.Senders, MaxWANSenders)
	}
	if ws.WANDelay < 0 || ws.WANDelay > link.MaxDelay {
		return specErr("WANSpec.WANDelay", "%v outside 0..%v", ws.WANDelay, link.MaxDelay)
	}
	if err := ws.CorePort.Validate(); err != nil {
		return specErr("WANSpec.CorePort", "%v", err)
	}
	if ws.SecondCorePort != nil {
		if !ws.SecondPath {
			return specErr("WANSpec.SecondCorePort", "set without SecondPath")
		}
		if err := ws.SecondCorePort.Validate(); err != nil {
			return specErr("WANSpec.SecondCorePort", "%v", err)
		}
	}
	t := ws.Tunnel
	if t.Local.IsValid() || len(t.Routes) > 0 || len(t.Peers) > 0 || t.MTU != 0 {
		return specErr("WANSpec.Tunnel", "local (%v), routes (%d), peers (%d) and mtu (%d) are filled in per PE; leave them zero",
			t.Local, len(t.Routes), len(t.Peers), t.MTU)
	}
	// The rest of the template through a PE's configuration.
	cfg := ws.peConfig(wanPEAddr(1, wanPE1SideBase), wanPEAddr(1, wanPE2SideBase), wanDC2)
	if err := cfg.Validate(); err != nil {
		return specErr("WANSpec.Tunnel", "%v", err)
	}
	return nil
}

// peConfig is the PE configuration at local, tunnelling dst to remote.
func (ws WANSpec) peConfig(local, remote netip.Addr, dst netip.Prefix) tunnel.Config {
	cfg := ws.Tunnel
	cfg.Local = local
	cfg.Routes = []tunnel.Route{{Prefix: dst, Remote: remote}}
	return cfg
}

// wanSubnet is path k's WAN subnet on one side (base wanPE1SideBase or
// wanPE2SideBase).
func wanSubnet(k, base int) netip.Prefix {
	return subnet24(byte(base + k))
}

func wanPEAddr(k, base int) netip.Addr   { return hostPrefix(wanSubnet(k, base), wanPEHost).Addr() }
func wanCoreAddr(k, base int) netip.Addr { return hostPrefix(wanSubnet(k, base), wanCoreHost).Addr() }

// WANTopology returns the Spec NewWAN builds: nodes, links and routes,
// without the delay links, ports and PEs it attaches afterwards.
func WANTopology(ws WANSpec) (Spec, error) {
	if err := ws.validate(); err != nil {
		return Spec{}, err
	}
	ecmp := map[string]string{"net.ipv4.fib_multipath_hash_policy": "1"} // L4: the 5-tuple
	var spec Spec
	for i := 1; i <= ws.senders(); i++ {
		spec.Nodes = append(spec.Nodes, NodeSpec{Name: fmt.Sprintf("s%d", i), Sysctls: ws.SenderSysctls})
	}
	spec.Nodes = append(spec.Nodes,
		NodeSpec{Name: "leaf1", Forwarding: true},
		NodeSpec{Name: "pe1", Forwarding: true, Sysctls: ecmp})
	for k := 1; k <= ws.paths(); k++ {
		spec.Nodes = append(spec.Nodes, NodeSpec{Name: fmt.Sprintf("f%d", k), Forwarding: true},
			NodeSpec{Name: fmt.Sprintf("c%d", k), Forwarding: true})
	}
	spec.Nodes = append(spec.Nodes,
		NodeSpec{Name: "pe2", Forwarding: true, Sysctls: ecmp},
		NodeSpec{Name: "leaf2", Forwarding: true},
		NodeSpec{Name: "r"})

	addLink := func(a, b Endpoint, wan bool) {
		// WAN devices carry PEs, which refuse merged or unsegmented
		// packets, and a port, whose peer must not merge them either.
		spec.Links = append(spec.Links, LinkSpec{A: a, B: b, MTU: ws.MTU, DisableOffloads: wan})
	}
	route := func(node string, dst netip.Prefix, via netip.Addr) {
		spec.Routes = append(spec.Routes, RouteSpec{Node: node, Dst: dst, Via: via})
	}

	// DC1.
	for i := 1; i <= ws.senders(); i++ {
		p := subnet24(byte(i))
		name := fmt.Sprintf("s%d", i)
		addLink(Endpoint{Node: "leaf1", Dev: fmt.Sprintf("h%d", i), Addr: hostPrefix(p, 1)},
			Endpoint{Node: name, Dev: "eth0", Addr: hostPrefix(p, 2)}, false)
		route(name, wanDC2, hostPrefix(p, 1).Addr())
	}
	addLink(Endpoint{Node: "leaf1", Dev: "pe1", Addr: hostPrefix(wanLeaf1Uplink, 1)},
		Endpoint{Node: "pe1", Dev: "lan", Addr: hostPrefix(wanLeaf1Uplink, 2)}, false)
	route("leaf1", wanDC2, hostPrefix(wanLeaf1Uplink, 2).Addr())
	route("pe1", wanDC1, hostPrefix(wanLeaf1Uplink, 1).Addr())

	// DC2.
	addLink(Endpoint{Node: "leaf2", Dev: "r0", Addr: hostPrefix(wanReceiver, 1)},
		Endpoint{Node: "r", Dev: "eth0", Addr: hostPrefix(wanReceiver, 2)}, false)
	route("r", wanDC1, hostPrefix(wanReceiver, 1).Addr())
	addLink(Endpoint{Node: "leaf2", Dev: "pe2", Addr: hostPrefix(wanLeaf2Uplink, 1)},
		Endpoint{Node: "pe2", Dev: "lan", Addr: hostPrefix(wanLeaf2Uplink, 2)}, false)
	route("leaf2", wanDC1, hostPrefix(wanLeaf2Uplink, 2).Addr())
	route("pe2", wanDC2, hostPrefix(wanLeaf2Uplink, 1).Addr())

	// The WAN: pe1 - f<k> (the fiber, its delay) - c<k> - pe2. The cores
	// and fibers know the PEs' WAN subnets and nothing else.
	for k := 1; k <= ws.paths(); k++ {
		f, c, wan := fmt.Sprintf("f%d", k), fmt.Sprintf("c%d", k), fmt.Sprintf("wan%d", k)
		s1, s2, sf := wanSubnet(k, wanPE1SideBase), wanSubnet(k, wanPE2SideBase), wanSubnet(k, wanFiberBase)
		addLink(Endpoint{Node: "pe1", Dev: wan, Addr: hostPrefix(s1, wanPEHost)},
			Endpoint{Node: f, Dev: "p", Addr: hostPrefix(s1, wanCoreHost)}, true)
		addLink(Endpoint{Node: f, Dev: "c", Addr: hostPrefix(sf, wanFiberHost)},
			Endpoint{Node: c, Dev: "w1", Addr: hostPrefix(sf, wanCoreHost)}, true)
		addLink(Endpoint{Node: c, Dev: "w2", Addr: hostPrefix(s2, wanCoreHost)},
			Endpoint{Node: "pe2", Dev: wan, Addr: hostPrefix(s2, wanPEHost)}, true)
		route("pe1", s2, wanCoreAddr(k, wanPE1SideBase))
		route("pe2", s1, wanCoreAddr(k, wanPE2SideBase))
		route(f, s2, hostPrefix(sf, wanCoreHost).Addr())
		route(c, s1, hostPrefix(sf, wanFiberHost).Addr())
	}
	// The DC prefixes through c1 (WANViaCore1).
	route("pe1", wanDC2, wanCoreAddr(1, wanPE1SideBase))
	route("pe2", wanDC1, wanCoreAddr(1, wanPE2SideBase))
	return spec, nil
}

// NewWAN builds the WAN lab and attaches, in this order, the delay links,
// the core ports and the tunnel PEs. On error nothing is left behind.
func NewWAN(ws WANSpec) (*WAN, error) { return wanShape.build(ws) }

// NewWANT is NewWAN that fails tb on error and closes in tb.Cleanup (PEs
// and ports first, then the lab).
func NewWANT(tb TB, ws WANSpec) *WAN {
	tb.Helper()
	return wanShape.buildT(tb, ws)
}

var wanShape = shape[WANSpec, *WAN]{name: "WAN", topology: WANTopology, from: newWANFrom, detach: (*WAN).detach}

// newWANFrom attaches everything to a built lab. On error it detaches what
// it attached; the caller closes the lab (and the delay links with it).
func newWANFrom(lab *Lab, ws WANSpec) (*WAN, error) {
	w := &WAN{
		Lab:          lab,
		Leaf1:        lab.Node("leaf1"),
		PE1Node:      lab.Node("pe1"),
		PE2Node:      lab.Node("pe2"),
		Leaf2:        lab.Node("leaf2"),
		Receiver:     lab.Node("r"),
		ReceiverAddr: hostPrefix(wanReceiver, 2).Addr(),
		DC1:          wanDC1,
		DC2:          wanDC2,
	}
	for i := 1; i <= ws.senders(); i++ {
		w.Senders = append(w.Senders, lab.Node(fmt.Sprintf("s%d", i)))
		w.SenderAddrs = append(w.SenderAddrs, hostPrefix(subnet24(byte(i)), 2).Addr())
	}
	for k := 1; k <= ws.paths(); k++ {
		c := lab.Node(fmt.Sprintf("c%d", k))
		f := lab.Node(fmt.Sprintf("f%d", k))
		wan := fmt.Sprintf("wan%d", k)
		w.Paths = append(w.Paths, &WANPath{
			k:        k,
			Core:     c,
			Fiber:    f,
			PE1Addr:  wanPEAddr(k, wanPE1SideBase),
			PE2Addr:  wanPEAddr(k, wanPE2SideBase),
			Uplink:   Port{Node: w.PE1Node, Dev: wan, PeerNode: f, PeerDev: "p"},
			FiberOut: Port{Node: f, Dev: "c", PeerNode: c, PeerDev: "w1"},
			Downlink: Port{Node: c, Dev: "w2", PeerNode: w.PE2Node, PeerDev: wan},
			Return:   Port{Node: f, Dev: "p", PeerNode: w.PE1Node, PeerDev: wan},
		})
	}
	if err := w.attach(ws); err != nil {
		return nil, errors.Join(err, w.detach())
	}
	w.CorePort, w.PE1, w.PE2 = w.Paths[0].Port, w.Paths[0].PE1, w.Paths[0].PE2
	return w, nil
}

func (w *WAN) attach(ws WANSpec) error {
	// Delay links first, on the fibers' devices (see WAN).
	if ws.WANDelay > 0 {
		ds := link.DelaySpec{Delay: ws.WANDelay}
		for k, p := range w.Paths {
			var err error
			if p.ForwardDelay, err = p.FiberOut.Node.AddDelay(p.FiberOut.Dev, ds); err != nil {
				return fmt.Errorf("lab: WAN: forward delay of path %d (%s:%s): %w", k+1, p.FiberOut.Node.Name, p.FiberOut.Dev, err)
			}
			if p.ReverseDelay, err = p.Return.Node.AddDelay(p.Return.Dev, ds); err != nil {
				return fmt.Errorf("lab: WAN: reverse delay of path %d (%s:%s): %w", k+1, p.Return.Node.Name, p.Return.Dev, err)
			}
		}
	}
	// Then the ports: their departure hooks go before the PEs'
	// decapsulation at the peer's ingress.
	for k, p := range w.Paths {
		cfg := &ws.CorePort
		if k > 0 {
			cfg = ws.SecondCorePort
		}
		if cfg == nil {
			continue
		}
		d := p.Downlink
		opts := ws.PortOptions
		opts.Dev, opts.Netns = d.Dev, d.Node.NetnsName
		opts.PeerDev, opts.PeerNetns = d.PeerDev, d.PeerNode.NetnsName
		port, err := qdisc.Attach(*cfg, opts)
		if err != nil {
			return fmt.Errorf("lab: WAN: core port of path %d (%s:%s, %s): %w", k+1, d.Node.Name, d.Dev, cfg.Rate, err)
		}
		p.Port = port
	}
	for k, p := range w.Paths {
		var err error
		pe1 := ws.peConfig(p.PE1Addr, p.PE2Addr, wanDC2)
		if p.PE1, err = tunnel.Attach(w.PE1Node.NetnsName, p.Uplink.Dev, pe1, tunnel.AttachOptions{}); err != nil {
			return fmt.Errorf("lab: WAN: tunnel PE on %s:%s (path %d): %w", w.PE1Node.Name, p.Uplink.Dev, k+1, err)
		}
		pe2 := ws.peConfig(p.PE2Addr, p.PE1Addr, wanDC1)
		if p.PE2, err = tunnel.Attach(w.PE2Node.NetnsName, p.Downlink.PeerDev, pe2, tunnel.AttachOptions{}); err != nil {
			return fmt.Errorf("lab: WAN: tunnel PE on %s:%s (path %d): %w", w.PE2Node.Name, p.Downlink.PeerDev, k+1, err)
		}
	}
	return nil
}

// Route returns the routing SetRoute set last (WANViaCore1 at first).
func (w *WAN) Route() WANRoute {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.route
}

// SetRoute replaces the PEs' routes to the other DC, in both directions:
// pe1's route to DC2 and pe2's route to DC1. Each PE device tunnels to the
// other PE's address on its own path, so the route alone picks the core; a
// packet already past the PE keeps its path. On error the two PEs may
// disagree; Route still reports the last routing set in full.
func (w *WAN) SetRoute(r WANRoute) error {
	var paths []*WANPath
	switch r {
	case WANViaCore1:
		paths = w.Paths[:1]
	case WANViaCore2, WANViaBoth:
		if len(w.Paths) < 2 {
			return fmt.Errorf("lab: WAN: SetRoute(%v): the lab has no second path (WANSpec.SecondPath)", r)
		}
		paths = w.Paths[1:2]
		if r == WANViaBoth {
			paths = w.Paths[:2]
		}
	default:
		return fmt.Errorf("lab: WAN: SetRoute(%d): want WANViaCore1, WANViaCore2 or WANViaBoth", int(r))
	}
	var pe1Hops, pe2Hops []wanHop
	for _, p := range paths {
		pe1Hops = append(pe1Hops, wanHop{dev: p.Uplink.Dev, gw: wanCoreAddr(p.k, wanPE1SideBase)})
		pe2Hops = append(pe2Hops, wanHop{dev: p.Downlink.PeerDev, gw: wanCoreAddr(p.k, wanPE2SideBase)})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.PE1Node.routeVia(w.DC2, pe1Hops, false); err != nil {
		return fmt.Errorf("lab: WAN: SetRoute(%v): pe1: %w", r, err)
	}
	if err := w.PE2Node.routeVia(w.DC1, pe2Hops, false); err != nil {
		return fmt.Errorf("lab: WAN: SetRoute(%v): pe2: %w", r, err)
	}
	w.route = r
	return nil
}

// wanHop is a PE's nexthop into a core: out of dev, to the core's address
// gw.
type wanHop struct {
	dev string
	gw  netip.Addr
}

// routeVia replaces n's route to dst by one over hops (ECMP when more than
// one).
func (n *Node) routeVia(dst netip.Prefix, hops []wanHop, quickAck bool) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return ErrClosed
	}
	return routeVia(n.nl, dst, hops, quickAck)
}

// routeVia replaces h's route to dst by one over hops, with delayed ACKs
// off if quickAck (RouteSpec.QuickAck).
func routeVia(h *netlink.Handle, dst netip.Prefix, hops []wanHop, quickAck bool) error {
	var nh []*netlink.NexthopInfo
	for _, hp := range hops {
		l, err := h.LinkByName(hp.dev)
		if err != nil {
			return fmt.Errorf("link %s: %w", hp.dev, err)
		}
		nh = append(nh, &netlink.NexthopInfo{LinkIndex: l.Attrs().Index, Gw: net.IP(hp.gw.AsSlice())})
	}
	rt := &netlink.Route{Dst: prefixToIPNet(dst)}
	if quickAck {
		rt.QuickACK = 1
	}
	if len(nh) == 1 {
		rt.LinkIndex, rt.Gw = nh[0].LinkIndex, nh[0].Gw
	} else {
		rt.MultiPath = nh
	}
	if err := h.RouteReplace(rt); err != nil {
		return fmt.Errorf("replace route %s: %w", dst, err)
	}
	return nil
}

// Close detaches the PEs and the ports and closes the lab. It is
// idempotent.
func (w *WAN) Close() error {
	return errors.Join(w.detach(), w.Lab.Close())
}

// detach closes the PEs, then the ports, once.
func (w *WAN) detach() error {
	w.closeOnce.Do(func() {
		var errs []error
		for k := len(w.Paths) - 1; k >= 0; k-- {
			p := w.Paths[k]
			for _, pe := range []*tunnel.PE{p.PE2, p.PE1} {
				if pe != nil {
					if err := pe.Close(); err != nil {
						errs = append(errs, fmt.Errorf("tunnel PE of path %d: %w", k+1, err))
					}
				}
			}
		}
		for k := len(w.Paths) - 1; k >= 0; k-- {
			if p := w.Paths[k].Port; p != nil {
				if err := p.Close(); err != nil {
					errs = append(errs, fmt.Errorf("core port of path %d: %w", k+1, err))
				}
			}
		}
		w.closeErr = errors.Join(errs...)
	})
	return w.closeErr
}
