//go:build linux

package labfile

import (
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pe"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/tcpflow"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// MaxWANPaths is the most WAN links a pe has: tunnel paths to its peer.
const MaxWANPaths = 2

// Side-channel TCP ports of the servers: RoCEv2's is perftest's; UET's
// server listens beside it, as one node may serve both.
const (
	RoCESidePort = perf.DefaultPort
	UETSidePort  = perf.DefaultPort + 1
	// TCPPort is the first tcp server's port on a node; a node serving
	// tcp with several congestion controls (the listener's, which the
	// receiver's ACKs follow) listens on the next ones.
	TCPPort = perf.DefaultPort + 2
)

// rocePacketOverhead is what a RoCEv2 packet adds to its payload MTU on
// the wire's IP MTU: IPv4, UDP, BTH, RETH, ICRC and up to 3 bytes of pad.
const rocePacketOverhead = 20 + 8 + roce.BTHLen + roce.RETHLen + roce.ICRCLen + 3

// Plan is what Run builds: the lab.Spec (nodes, veths, addresses, routes,
// ECMP included), the relays that hold the links' delay and loss, the
// switch ports, the tunnel PEs, the servers and every flow's perf client
// configuration.
type Plan struct {
	Spec    lab.Spec
	Links   []LinkPlan
	Relays  []RelayPlan
	Ports   []PortPlan
	PEs     []PEPlan
	Servers []ServerPlan
	Flows   []FlowPlan
	// Variants are the file's variants, each planned whole: the same
	// nodes, links, addresses and flows, its own ports and PEs.
	Variants []VariantPlan
	// Addrs is each node's address: the one on its first link, where its
	// flows' servers listen and its clients send from.
	Addrs map[string]netip.Addr
	// Deploy: the plan of machines (DeployPlan), not namespaces.
	Deploy bool
	// Timescale is the file's: the plan's rates and times are slowed by
	// it (a DeployPlan's are not: machines run the file's own fabric).
	Timescale units.Timescale
	// Interval is the report interval on the run's timeline.
	Interval time.Duration
}

// LinkPlan is a file link as built: its subnet and its two ends.
type LinkPlan struct {
	Subnet netip.Prefix
	A, B   lab.Endpoint
	// Relay is the relay node's name, or "" for a plain veth.
	Relay string
	// Delay and Loss are each end's netem in a DeployPlan (a relay holds
	// them in a Plan).
	Delay time.Duration
	Loss  float64
}

// RelayPlan is a forwarding namespace in the middle of a link with delay
// or loss, holding them on its two devices' egress: DevA toward the
// link's a end, DevB toward b.
type RelayPlan struct {
	Node       string
	DevA, DevB string
	Delay      time.Duration
	Loss       float64
}

// PortPlan is a switch egress port.
type PortPlan struct {
	Name              string // "switch:dev"
	Node, Dev         string
	PeerNode, PeerDev string
	Link              int // the file's link
	Config            qdisc.Config
	Watch             bool // shown live and in the plots
	// Limiter: a pe's rate limiter, on its WAN device, whose rate the
	// pe's agent sets.
	Limiter bool
	// NIC: a host's network card's queue (Fabric.NIC), not a switch's.
	NIC bool
}

// VariantPlan is a variant's plan.
type VariantPlan struct {
	Name string
	Plan *Plan
}

// PEPlan is a tunnel PE on a PE node's WAN device.
type PEPlan struct {
	Node, Dev string
	// Path is the tunnel path: the PE's Path-th WAN link (from 0).
	Path   int
	Config tunnel.Config
	// Unspill and Spill are, on path 0's PEs of a pair with more than one
	// path, both PEs' routes to the other data centre over path 1 only
	// (as built) and over every path (a reroute agent's spill).
	Unspill, Spill []lab.RouteSpec
	// Agent is the PE's agent, or nil; a rate agent's limiter is the
	// port on Dev (a PortPlan with Limiter).
	Agent *pe.Config
}

// ServerPlan is one perf server: one per node and transport, shared by
// the flows to it.
type ServerPlan struct {
	Node      string
	Transport string
	Addr      netip.AddrPort // the side channel; tcp's listener
	// CC is a tcp server's congestion control.
	CC string
	// LineRate and BaseRTT are a uet server's endpoint's, in the fabric's
	// terms (perf slows them by Timescale): its receiving NIC's rate (its
	// link's, else the lab's fastest) and the longest base_rtt of its
	// flows, where its RCCC credit pacer runs.
	LineRate units.Rate
	BaseRTT  time.Duration
	// TrimDSCP and TrimLastHopDSCP are the DSCPs of the packets the ports
	// on its flows' paths trim (pds.Config's): the port in front of the
	// receiver trims into TrimLastHopDSCP, any other into TrimDSCP.
	TrimDSCP, TrimLastHopDSCP uint8
	// Wires are a uet server's wires from its flows' senders, by their
	// addresses (Fabric.StoreAndForward), in the fabric's terms.
	Wires map[netip.Addr]pktio.Wire
	// Timescale is the plan's: perf slows the endpoint by it.
	Timescale units.Timescale
	// NP is a rocev2 server's notification point (Node.NP).
	NP string
	// SendPath is how its endpoint sends: pktio.SendRaw on a host with a
	// NIC (nicSendPath), else pktio.SendAuto.
	SendPath pktio.SendPath
}

// FlowPlan is a flow as run.
type FlowPlan struct {
	Flow *Flow
	// Index is the flow's place in the file (DrawSizes' stream).
	Index  int
	Server int // Plan.Servers index
	// Client is a rocev2 or uet flow's perf client.
	Client perf.ClientConfig
	// TCP is a tcp flow's connection.
	TCP *TCPPlan
	// PathMTU is the largest IP packet the flow's path carries (less
	// the tunnel's header where it crosses one).
	PathMTU int
	// Bottleneck is the slowest of the flow's line rate and the ports on
	// its path: its ideal rate alone.
	Bottleneck units.Rate
	// Crosses says the flow crosses a PE tunnel.
	Crosses bool
	// BaseRTT is the delay the links on its path add, both ways (the
	// longest of its ECMP branches): the ideal FCT's round trip.
	BaseRTT time.Duration
	// Start, Every and Pause are the flow's on the run's timeline: the
	// file's, slowed by the plan's Timescale (and scaled by a run's -t).
	Start, Every, Pause time.Duration
	// Ports are the Plan.Ports its data crosses (every ECMP branch), in
	// path order; LastPort is the one in front of the receiver, -1 if
	// none.
	Ports    []int
	LastPort int
	// Branches are Ports' ECMP groups (portsOn): ports of one group are
	// alternatives the flow's packets take one of.
	Branches []int
	// ReplyPorts are the Plan.Ports its replies (ACKs, CNPs, TCP's ACKs)
	// cross on their way back to the sender, in path order.
	ReplyPorts    []int
	ReplyBranches []int
	// Wire and ReplyWire are what its data's path and its replies' add
	// to each packet on a fabric with store_and_forward (zero without):
	// the hops' serialisation and the links' delay, slowed by the plan's
	// Timescale (the ideal FCT's); Client.Wires and the server's Wires
	// hold them in the fabric's terms.
	Wire, ReplyWire pktio.Wire
	// RelayHolds are the relay devices its data and its replies leave
	// by, each with how long after a packet leaves there the flow's
	// nearest port on its data path sees the effect (host/hostlost's
	// HeldVia: a relay that holds packets late starves the port then).
	RelayHolds []RelayHold
}

// RelayHold is a relay device on a flow's loop and the time from it to
// the flow's nearest port on its data path: 0 or the links between for
// data; for a reply, the rest of its way back to the sender and the
// data's way from there.
type RelayHold struct {
	Relay int // Plan.Relays index
	Dev   string
	Via   time.Duration
}

// edge is one veth of the graph.
type edge struct {
	node   [2]string
	dev    [2]string
	addr   [2]netip.Prefix
	mtu    int
	link   int  // the file's link
	wan    bool // inside a PE pair's WAN
	subnet netip.Prefix
}

func (e *edge) other(n string) int {
	if e.node[0] == n {
		return 1
	}
	return 0
}

// graph is the nodes (the file's and the relays) and their veths.
type graph struct {
	kind  map[string]string // relays are "relay"
	order []string
	edges []*edge
	adj   map[string][]*edge
}

func (g *graph) forwards(n string) bool { return g.kind[n] != KindHost }

func (g *graph) addNode(name, kind string) {
	g.kind[name] = kind
	g.order = append(g.order, name)
}

func (g *graph) addEdge(e *edge) {
	g.edges = append(g.edges, e)
	g.adj[e.node[0]] = append(g.adj[e.node[0]], e)
	g.adj[e.node[1]] = append(g.adj[e.node[1]], e)
}

// newPlan computes the plan of a file whose fields were checked. With
// deploy the file runs on machines, not namespaces (DeployPlan): a link
// with delay or loss is a plain link whose ends hold netem
// (LinkPlan.Delay, Loss), since a machine cannot grow a relay between its
// NIC and the next one.
func newPlan(f *File, deploy bool) (*Plan, error) {
	g := &graph{kind: map[string]string{}, adj: map[string][]*edge{}}
	for _, n := range f.Nodes {
		g.addNode(n.Name, n.Kind)
	}
	devs, err := f.deviceNames()
	if err != nil {
		return nil, err
	}
	subnets, err := f.subnets()
	if err != nil {
		return nil, err
	}
	if deploy && f.Fabric != nil && f.Fabric.StoreAndForward {
		return nil, conf.Errorf("fabric.store_and_forward", true, "namespaces only: machines' switches store and forward themselves, and fabriclabd's flows take no wires")
	}
	if deploy && f.Fabric != nil && f.Fabric.NIC {
		return nil, conf.Errorf("fabric.nic", true, "namespaces only: a machine's NIC is its own")
	}
	p := &Plan{Addrs: map[string]netip.Addr{}, Deploy: deploy}
	for i := range f.Links {
		l := &f.Links[i]
		a, _, _ := splitEnd(l.A)
		b, _, _ := splitEnd(l.B)
		mtu := l.MTU
		if mtu == 0 {
			mtu = DefaultLinkMTU
		}
		s := subnets[i]
		lp := LinkPlan{Subnet: s}
		if deploy {
			lp.Delay, lp.Loss = l.Delay, l.Loss
		}
		if !l.relayed() || deploy {
			e := &edge{node: [2]string{a, b}, dev: devs[i], addr: [2]netip.Prefix{nthHost(s, 1), nthHost(s, 2)}, mtu: mtu, link: i, subnet: s}
			g.addEdge(e)
			lp.A = lab.Endpoint{Node: a, Dev: e.dev[0], Addr: e.addr[0]}
			lp.B = lab.Endpoint{Node: b, Dev: e.dev[1], Addr: e.addr[1]}
		} else {
			r := fmt.Sprintf("%sl%d", relayPrefix, i)
			g.addNode(r, "relay")
			lo, hi := halves(s)
			// The relay's devices are named after the ends they face.
			ra, rb := relayDev(a, "a"), relayDev(b, "b")
			if ra == rb {
				ra, rb = "a", "b"
			}
			e1 := &edge{node: [2]string{a, r}, dev: [2]string{devs[i][0], ra}, addr: [2]netip.Prefix{nthHost(lo, 1), nthHost(lo, 2)}, mtu: mtu, link: i, subnet: lo}
			e2 := &edge{node: [2]string{r, b}, dev: [2]string{rb, devs[i][1]}, addr: [2]netip.Prefix{nthHost(hi, 1), nthHost(hi, 2)}, mtu: mtu, link: i, subnet: hi}
			g.addEdge(e1)
			g.addEdge(e2)
			p.Relays = append(p.Relays, RelayPlan{Node: r, DevA: ra, DevB: rb, Delay: l.Delay, Loss: l.Loss})
			lp.Relay = r
			lp.A = lab.Endpoint{Node: a, Dev: e1.dev[0], Addr: e1.addr[0]}
			lp.B = lab.Endpoint{Node: b, Dev: e2.dev[1], Addr: e2.addr[1]}
		}
		p.Links = append(p.Links, lp)
	}
	for _, e := range g.edges {
		for k := range 2 {
			if _, ok := p.Addrs[e.node[k]]; !ok {
				p.Addrs[e.node[k]] = e.addr[k].Addr()
			}
		}
	}
	pes, dcOf, err := f.tunnels(g)
	if err != nil {
		return nil, err
	}
	p.PEs = pes

	// Nodes: every one hashes ECMP on the 5-tuple, so an entropy value (a
	// UDP source port) picks the path; each with a hash seed of its own
	// where the kernel has one (6.11). With policy 1 a forwarded packet's
	// L4 hash, once computed, is reused at every hop and no seed enters
	// it: a fat tree's aggregation switch then sends everything its ToRs
	// hashed to it up to one core (each agg's bytes all on one of its two
	// cores, measured: polarization), which real switches' per-switch
	// seeds avoid. Policy 3 hashes the fields below afresh, seeded. Only
	// a fat tree makes two ECMP choices on a path; the other labs keep
	// policy 1, under which their tests' bounds were measured, but for a
	// reroute PE's: under policy 1 its spill takes the L4 hash RPS left
	// on the packet, which the boot's random key sets, so whether a
	// spill moved any flow depended on the boot (the WAN experiment's
	// four flows all stayed on path 1 on one boot, run after run).
	reroute := slices.ContainsFunc(p.PEs, func(pp PEPlan) bool { return pp.Agent != nil && pp.Agent.Mode == pe.Reroute })
	seeded := (f.Fabric != nil && f.Fabric.Kind == FabricFatTree || reroute) && hashSeedSysctl()
	for _, n := range g.order {
		ecmp := map[string]string{"net.ipv4.fib_multipath_hash_policy": "1"}
		if seeded {
			ecmp["net.ipv4.fib_multipath_hash_policy"] = "3"
			ecmp["net.ipv4.fib_multipath_hash_fields"] = fibHashFields
			ecmp[fibHashSeed] = strconv.FormatUint(uint64(nodeHashSeed(n)), 10)
		}
		p.Spec.Nodes = append(p.Spec.Nodes, lab.NodeSpec{Name: n, Forwarding: g.forwards(n), Sysctls: ecmp})
	}
	for _, e := range g.edges {
		// Offloads off everywhere: ports see wire-size packets, and a PE
		// refuses merged or unsegmented ones.
		p.Spec.Links = append(p.Spec.Links, lab.LinkSpec{
			A:   lab.Endpoint{Node: e.node[0], Dev: e.dev[0], Addr: e.addr[0]},
			B:   lab.Endpoint{Node: e.node[1], Dev: e.dev[1], Addr: e.addr[1]},
			MTU: e.mtu, DisableOffloads: true,
		})
	}
	p.Spec.Routes = g.routes(dcOf)
	for i := range p.Spec.Routes {
		rs := &p.Spec.Routes[i]
		rs.QuickAck = slices.ContainsFunc(f.Nodes, func(n Node) bool { return n.Name == rs.Node && n.QuickAck })
	}
	for _, pp := range p.PEs {
		for _, u := range pp.Unspill {
			for k, rs := range p.Spec.Routes {
				if rs.Node == u.Node && rs.Dst == u.Dst {
					p.Spec.Routes[k] = u
				}
			}
		}
	}

	if err := f.planPorts(g, p); err != nil {
		return nil, err
	}
	if err := f.planFlows(g, p, dcOf); err != nil {
		return nil, err
	}
	p.Interval = f.interval()
	if !deploy {
		if err := f.slow(p); err != nil {
			return nil, err
		}
	}
	// The ends of tcp flows negotiate ECN (RFC 3168) whatever their
	// congestion control: cubic and reno react to CE as to a loss. A
	// host with tcp_ecn: off does not.
	for i := range p.Spec.Nodes {
		n := &p.Spec.Nodes[i]
		if slices.ContainsFunc(p.Flows, func(fp FlowPlan) bool { return fp.TCP != nil && (fp.Flow.From == n.Name || fp.Flow.To == n.Name) }) {
			n.Sysctls = maps.Clone(n.Sysctls)
			n.Sysctls["net.ipv4.tcp_ecn"] = "1"
			if k := slices.IndexFunc(f.Nodes, func(fn Node) bool { return fn.Name == n.Name }); k >= 0 && f.Nodes[k].TCPECN == "off" {
				n.Sysctls["net.ipv4.tcp_ecn"] = "0"
			}
		}
	}
	return p, nil
}

// relayDev is a relay's device toward node: the node's name where it
// fits an interface name, else def.
func relayDev(node, def string) string {
	if lab.CheckDevName(node) == nil {
		return node
	}
	return def
}

// deviceNames names every link end: as written, or after the node at
// the other end, or eth<n>.
func (f *File) deviceNames() ([][2]string, error) {
	out := make([][2]string, len(f.Links))
	used := map[string]map[string]string{} // node -> dev -> field
	take := func(node, dev, field string) {
		if used[node] == nil {
			used[node] = map[string]string{}
		}
		used[node][dev] = field
	}
	for i, l := range f.Links {
		for k, raw := range []string{l.A, l.B} {
			node, dev, _ := splitEnd(raw)
			if dev == "" {
				continue
			}
			field := conf.Join(conf.Index("links", i), []string{"a", "b"}[k])
			if prev, dup := used[node][dev]; dup {
				return nil, conf.Errorf(field, raw, "device %s of %s is %s already", dev, node, prev)
			}
			take(node, dev, field)
			out[i][k] = dev
		}
	}
	for i, l := range f.Links {
		a, _, _ := splitEnd(l.A)
		b, _, _ := splitEnd(l.B)
		for k, pair := range [][2]string{{a, b}, {b, a}} {
			if out[i][k] != "" {
				continue
			}
			node, peer := pair[0], pair[1]
			dev := ""
			for n := 1; n < 100 && dev == ""; n++ {
				c := peer
				if n > 1 {
					c = peer + "-" + strconv.Itoa(n)
				}
				if _, dup := used[node][c]; lab.CheckDevName(c) == nil && !dup {
					dev = c
				}
			}
			for n := 0; dev == ""; n++ {
				if c := "eth" + strconv.Itoa(n); used[node][c] == "" {
					dev = c
				}
			}
			take(node, dev, conf.Index("links", i))
			out[i][k] = dev
		}
	}
	return out, nil
}

// subnets gives every link its subnet: the pinned one, or the next /24
// of 198.18.0.0/15 that no pinned subnet overlaps, in file order.
func (f *File) subnets() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, len(f.Links))
	next := 0
	for i, l := range f.Links {
		if l.Subnet.IsValid() {
			out[i] = l.Subnet
			continue
		}
		for ; ; next++ {
			if next >= MaxLinks {
				return nil, conf.Errorf(conf.Index("links", i), "", "no /24 of %s left for this link (the pinned subnets took the rest)", lab.AddrRange4)
			}
			c := nth24(next)
			if !slices.ContainsFunc(f.Links, func(o Link) bool { return o.Subnet.IsValid() && o.Subnet.Overlaps(c) }) {
				break
			}
		}
		out[i] = nth24(next)
		next++
	}
	return out, nil
}

// nth24 is the n-th /24 of 198.18.0.0/15.
func nth24(n int) netip.Prefix {
	base := lab.AddrRange4.Addr().As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(n)<<8
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), 0}), 24)
}

// nthHost is address n of subnet s, with s's length.
func nthHost(s netip.Prefix, n uint32) netip.Prefix {
	b := s.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += n
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), s.Bits())
}

// halves splits s into its two halves.
func halves(s netip.Prefix) (lo, hi netip.Prefix) {
	lo = netip.PrefixFrom(s.Masked().Addr(), s.Bits()+1)
	size := uint32(1) << (32 - s.Bits() - 1)
	return lo, netip.PrefixFrom(nthHost(lo, size).Addr(), s.Bits()+1)
}

// dist is the hop count from every node to the edge's subnet over
// forwarding nodes: the edge's ends are 0; a node one hop from a
// forwarding node at d is d+1. Hosts are never crossed.
func (g *graph) dist(target *edge) map[string]int {
	d := map[string]int{target.node[0]: 0, target.node[1]: 0}
	queue := []string{target.node[0], target.node[1]}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		if !g.forwards(x) {
			continue
		}
		for _, e := range g.adj[x] {
			y := e.node[e.other(x)]
			if _, seen := d[y]; !seen {
				d[y] = d[x] + 1
				queue = append(queue, y)
			}
		}
	}
	return d
}

// nextHops are n's equal-cost next hops toward the subnet whose
// distances d gives: the edges to forwarding neighbours one hop closer.
func (g *graph) nextHops(n string, d map[string]int) []*edge {
	dn, ok := d[n]
	if !ok || dn == 0 {
		return nil
	}
	var out []*edge
	for _, e := range g.adj[n] {
		y := e.node[e.other(n)]
		if dy, ok := d[y]; ok && dy == dn-1 && g.forwards(y) {
			out = append(out, e)
		}
	}
	return out
}

// routes computes every node's route to every subnet it is not on. The
// nodes inside a PE pair's WAN learn only the WAN's subnets: what they
// carry between the PEs is tunnelled (as lab.NewWAN's cores).
func (g *graph) routes(dcOf map[string]string) []lab.RouteSpec {
	var out []lab.RouteSpec
	for _, t := range g.edges {
		d := g.dist(t)
		for _, n := range g.order {
			if dcOf[n] == "wan" && !t.wan {
				continue
			}
			hops := g.nextHops(n, d)
			if len(hops) == 0 {
				continue
			}
			rs := lab.RouteSpec{Node: n, Dst: t.subnet}
			for i, e := range hops {
				gw := e.addr[e.other(n)].Addr()
				if i == 0 {
					rs.Via = gw
				} else {
					rs.Vias = append(rs.Vias, gw)
				}
			}
			out = append(out, rs)
		}
	}
	return out
}

// tunnels finds each PE pair's WAN and data centres and configures the
// PEs: each tunnels the other side's data-centre subnets to the other
// PE's WAN address. dcOf maps nodes to "wan" or the PE whose data
// centre they are in.
func (f *File) tunnels(g *graph) ([]PEPlan, map[string]string, error) {
	dcOf := map[string]string{}
	var out []PEPlan
	done := map[string]bool{}
	for i, n := range f.Nodes {
		if n.Kind != KindPE || done[n.Name] {
			continue
		}
		done[n.Name], done[n.Peer] = true, true
		pair := [2]string{n.Name, n.Peer}
		comps := g.components(pair)
		side := map[string]string{} // node -> pe name or "wan"
		for _, c := range comps {
			touches := [2]bool{}
			for _, m := range c {
				for _, e := range g.adj[m] {
					for k, pn := range pair {
						if e.node[e.other(m)] == pn {
							touches[k] = true
						}
					}
				}
			}
			tag := ""
			switch {
			case touches[0] && touches[1]:
				tag = "wan"
			case touches[0]:
				tag = pair[0]
			case touches[1]:
				tag = pair[1]
			}
			for _, m := range c {
				if tag != "" {
					side[m] = tag
				}
			}
		}
		// The WAN devices of each PE (its links into the WAN, in file
		// order: the k-th of each PE make tunnel path k), and the subnets
		// behind each.
		var wanEdges [2][]*edge
		behind := [2][]netip.Prefix{}
		for k, pn := range pair {
			field := conf.Join(conf.Index("nodes", peIndex(f, pn, i)), "kind")
			for _, e := range g.adj[pn] {
				if y := e.node[e.other(pn)]; y == pair[1-k] || side[y] == "wan" {
					wanEdges[k] = append(wanEdges[k], e)
				}
			}
			if len(wanEdges[k]) == 0 {
				return nil, nil, conf.Errorf(field, KindPE, "%s has no path to its peer %s that avoids both data centres; link them through a WAN", pn, pair[1-k])
			}
		}
		if n0, n1 := len(wanEdges[0]), len(wanEdges[1]); n0 != n1 || n0 > MaxWANPaths {
			return nil, nil, conf.Errorf(conf.Join(conf.Index("nodes", i), "kind"), KindPE, "%s has %d WAN links and %s %d; the k-th WAN links of the two pes make tunnel path k: give them as many, at most %d", pair[0], n0, pair[1], n1, MaxWANPaths)
		}
		isWAN := map[*edge]bool{}
		for _, es := range wanEdges {
			for _, e := range es {
				isWAN[e] = true
			}
		}
		for _, e := range g.edges {
			t0, t1 := sideOf(side, pair, e.node[0]), sideOf(side, pair, e.node[1])
			switch {
			case isWAN[e] || t0 == "wan" || t1 == "wan":
				e.wan = true
			case t0 == pair[0] || t1 == pair[0]:
				behind[0] = append(behind[0], e.subnet)
			case t0 == pair[1] || t1 == pair[1]:
				behind[1] = append(behind[1], e.subnet)
			}
		}
		for k, pn := range pair {
			if len(behind[k]) == 0 {
				return nil, nil, conf.Errorf(conf.Join(conf.Index("nodes", peIndex(f, pn, i)), "kind"), KindPE, "%s has no data centre behind it: link it to a switch or host on the side away from %s", pn, pair[1-k])
			}
		}
		// With more than one path, both pes route the other data centre
		// over path 1; a reroute agent spreads it over all (ECMP) and back.
		var unspill, spill []lab.RouteSpec
		if len(wanEdges[0]) > 1 {
			for k, pn := range pair {
				var gws []netip.Addr
				for _, e := range wanEdges[k] {
					gws = append(gws, e.addr[e.other(pn)].Addr())
				}
				for _, s := range behind[1-k] {
					unspill = append(unspill, lab.RouteSpec{Node: pn, Dst: s, Via: gws[0]})
					spill = append(spill, lab.RouteSpec{Node: pn, Dst: s, Via: gws[0], Vias: gws[1:]})
				}
			}
		}
		for k, pn := range pair {
			ni := peIndex(f, pn, i)
			node := &f.Nodes[ni]
			for j, we := range wanEdges[k] {
				pw := wanEdges[1-k][j]
				cfg := tunnel.Config{Local: we.addr[1-we.other(pn)].Addr(), TwoThreshold: node.Decap == DecapTwoThreshold}
				remote := pw.addr[1-pw.other(pair[1-k])].Addr()
				for _, s := range behind[1-k] {
					cfg.Routes = append(cfg.Routes, tunnel.Route{Prefix: s, Remote: remote})
				}
				if err := cfg.Validate(); err != nil {
					return nil, nil, conf.Errorf(conf.Join(conf.Index("nodes", ni), "kind"), KindPE, "the tunnel: %v", err)
				}
				pp := PEPlan{Node: pn, Dev: we.dev[1-we.other(pn)], Path: j, Config: cfg}
				if j == 0 {
					pp.Unspill, pp.Spill = unspill, spill
				}
				if a := node.Agent; a != nil && j == 0 {
					// The default RTT: there and back between this pair's
					// WAN devices on path 1.
					var wanRTT time.Duration
					if path, ok := g.path(pn, remote); ok {
						wanRTT = 2 * f.pathDelay(path, pn)
					}
					pp.Agent = a.config(wanRTT)
					if pp.Agent != nil && pp.Agent.Mode == pe.Reroute && len(wanEdges[k]) < 2 {
						return nil, nil, conf.Errorf(conf.Join(conf.Join(conf.Index("nodes", ni), "agent"), "mode"), a.Mode, "reroute spreads the tunnel over a second WAN path: link %s and %s into the WAN twice (the k-th WAN links make path k)", pair[0], pair[1])
					}
					if err := checkAgent(pp.Agent); err != nil {
						return nil, nil, conf.Errorf(conf.Join(conf.Index("nodes", ni), "agent"), "", "%s", oneLine(err))
					}
				}
				out = append(out, pp)
			}
		}
		maps.Copy(dcOf, side)
	}
	return out, dcOf, nil
}

func sideOf(side map[string]string, pair [2]string, n string) string {
	if n == pair[0] || n == pair[1] {
		return n
	}
	return side[n]
}

func peIndex(f *File, name string, def int) int {
	for i, n := range f.Nodes {
		if n.Name == name {
			return i
		}
	}
	return def
}

// components are the connected components of the graph without the
// nodes in cut.
func (g *graph) components(cut [2]string) [][]string {
	seen := map[string]bool{cut[0]: true, cut[1]: true}
	var out [][]string
	for _, start := range g.order {
		if seen[start] {
			continue
		}
		seen[start] = true
		c := []string{start}
		for i := 0; i < len(c); i++ {
			for _, e := range g.adj[c[i]] {
				y := e.node[e.other(c[i])]
				if !seen[y] {
					seen[y] = true
					c = append(c, y)
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// nicConfig is a host's NIC as a port (Fabric.NIC): qdisc's classes at
// the line rate, control packets first, nothing marked, and room for
// whatever the host's windows send at once.
func nicConfig(rate units.Rate) qdisc.Config {
	c := qdisc.DefaultConfig(rate)
	c.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "data", LimitBytes: nicLimit, FlowQueues: nicFlowQueues}
	return c
}

// nicSendPath is how a host's endpoints send: each datagram on its own
// (pktio.SendRaw) when the host has a NIC, which then takes its packets
// one by one, as htsim's UecNIC does. A UDP GSO send would enter the NIC's
// queue as one super-packet that the device cuts up only as it sends it:
// the port's accounting counted one packet in and its datagrams out (its
// backlog ran below zero and every packet after was dropped at the limit:
// ECMP flows failed), and its flow queues would take a whole run a turn.
func (f *File) nicSendPath(host string) pktio.SendPath {
	for _, l := range f.Links {
		if l.nic && (l.A == host || l.B == host) {
			return pktio.SendRaw
		}
	}
	return pktio.SendAuto
}

// nicFlowQueues is a NIC port's data queues: its flows served a packet
// each in turn, as htsim's UecNIC serves its sources (a host's PDCs have
// consecutive IDs, so up to this many flows of a host never share one).
const nicFlowQueues = 64

// nicLimit is a NIC port's data class: more than any lab's windows
// hold, so a host's own queue never drops.
const nicLimit = 16 * units.MiB

// planPorts puts a port on every switch end of a link with a rate and
// applies the ports: overrides.
func (f *File) planPorts(g *graph, p *Plan) error {
	byName := map[string]int{}
	for i, l := range f.Links {
		if l.Rate == 0 {
			continue
		}
		lp := p.Links[i]
		for k, ep := range []lab.Endpoint{lp.A, lp.B} {
			nic := l.nic && g.kind[ep.Node] == KindHost
			if g.kind[ep.Node] != KindSwitch && !nic {
				continue
			}
			// The peer is the other end, or the relay in between.
			other := []lab.Endpoint{lp.B, lp.A}[k]
			peer := other.Node
			peerDev := other.Dev
			if lp.Relay != "" {
				peer = lp.Relay
				peerDev = map[int]string{0: p.relay(lp.Relay).DevA, 1: p.relay(lp.Relay).DevB}[k]
			}
			name := ep.Node + ":" + ep.Dev
			byName[name] = len(p.Ports)
			cfg := qdisc.DefaultConfig(l.Rate)
			if nic {
				cfg = nicConfig(l.Rate)
			}
			p.Ports = append(p.Ports, PortPlan{Name: name, Node: ep.Node, Dev: ep.Dev, PeerNode: peer, PeerDev: peerDev, Link: i,
				Config: cfg, Watch: len(f.Report.Watch) == 0, NIC: nic})
		}
	}
	// A rate agent's limiter: a port on its pe's WAN device.
	for _, pp := range p.PEs {
		if pp.Agent == nil || pp.Agent.Mode != pe.RateLimit {
			continue
		}
		for _, e := range g.adj[pp.Node] {
			k := 1 - e.other(pp.Node)
			if e.dev[k] != pp.Dev {
				continue
			}
			name := pp.Node + ":" + pp.Dev
			byName[name] = len(p.Ports)
			p.Ports = append(p.Ports, PortPlan{Name: name, Node: pp.Node, Dev: pp.Dev, PeerNode: e.node[1-k], PeerDev: e.dev[1-k], Link: e.link,
				Config: qdisc.DefaultConfig(pp.Agent.LineRate), Watch: len(f.Report.Watch) == 0, Limiter: true})
		}
	}
	configs := make([]qdisc.Config, len(p.Ports))
	for i := range p.Ports {
		configs[i] = p.Ports[i].Config
	}
	if err := f.editPorts("ports", f.Ports, byName, p, configs); err != nil {
		return err
	}
	if v := f.variant; v != nil {
		if err := f.editPorts(conf.Join(conf.Index("variants", f.variantIndex), "ports"), v.Ports, byName, p, configs); err != nil {
			return err
		}
	}
	for i := range p.Ports {
		p.Ports[i].Config = configs[i]
	}
	for i, w := range f.Report.Watch {
		j, ok := byName[w]
		if !ok {
			return conf.Errorf(conf.Index("report.watch", i), w, "no switch port there; ports are %s", p.portNames())
		}
		p.Ports[j].Watch = true
	}
	return nil
}

// editPorts applies ports (at field) to configs, Plan.Ports' order.
func (f *File) editPorts(field string, ports []Port, byName map[string]int, p *Plan, configs []qdisc.Config) error {
	seen := map[string]int{}
	for i, po := range ports {
		fp := conf.Index(field, i)
		j, ok := byName[po.Port]
		if !ok {
			return conf.Errorf(conf.Join(fp, "port"), po.Port, "no switch port there; ports are the switch ends of links with a rate: %s", p.portNames())
		}
		if prev, dup := seen[po.Port]; dup {
			return conf.Errorf(conf.Join(fp, "port"), po.Port, "given twice (also %s[%d])", field, prev)
		}
		seen[po.Port] = i
		tcs := make([]string, 0, len(po.TC))
		for k, raw := range po.TC {
			field := conf.Index(conf.Join(fp, "tc"), k)
			if f.tunePass && strings.Contains(raw, "$") {
				continue
			}
			spec, err := f.expandTuned(field, raw)
			if err != nil {
				return err
			}
			if _, err := qdisc.ParseTC(spec); err != nil {
				if spec != raw {
					return conf.Errorf(field, raw, "as %s: %s", spec, trimOpt(err.Error(), "--tc "+spec))
				}
				return conf.Errorf(field, raw, "%s", trimOpt(err.Error(), "--tc "+raw))
			}
			tcs = append(tcs, spec)
		}
		for k, raw := range po.DSCP {
			if _, err := qdisc.ParseDSCPSpec(raw); err != nil {
				return conf.Errorf(conf.Index(conf.Join(fp, "dscp"), k), raw, "%s", trimOpt(err.Error(), "--dscp "+raw))
			}
		}
		ed, err := qdisc.ParseEdits(tcs, po.DSCP, po.DefaultClass)
		if err != nil {
			return conf.Errorf(conf.Join(fp, "default_class"), po.DefaultClass, "%s", trimOpt(err.Error(), "--default-class "+po.DefaultClass))
		}
		if err := ed.Apply(&configs[j]); err != nil {
			return conf.Errorf(fp, po.Port, "the port at %s: %s", configs[j].Rate, oneLine(err))
		}
	}
	return nil
}

func (p *Plan) relay(name string) RelayPlan {
	for _, r := range p.Relays {
		if r.Node == name {
			return r
		}
	}
	return RelayPlan{}
}

func (p *Plan) portNames() string {
	if len(p.Ports) == 0 {
		return "(none: no link has a rate at a switch)"
	}
	names := make([]string, len(p.Ports))
	for i, po := range p.Ports {
		names[i] = po.Name
	}
	return orList(names)
}

// senderAddr gives a sender of host its own address on the link of
// its address (Plan.Addrs): the prefix's last unused one, downwards.
func (p *Plan) senderAddr(host string) (netip.Addr, error) {
	addr := p.Addrs[host]
	for k := range p.Spec.Links {
		for _, ep := range []*lab.Endpoint{&p.Spec.Links[k].A, &p.Spec.Links[k].B} {
			if ep.Node != host || ep.Addr.Addr() != addr {
				continue
			}
			pre := ep.Addr.Masked()
			size := uint32(1) << (32 - pre.Bits())
			// The prefix's last host address, less those taken.
			n := size - 2 - uint32(len(ep.Extra))
			if n <= 2 { // .1 and .2 are the link's ends
				return netip.Addr{}, fmt.Errorf("no room on %s for another sender's address (%d taken): a UET sender needs an address of its own when its host serves UET or sends more than one flow", pre, len(ep.Extra))
			}
			x := nthHost(pre, n).Addr()
			ep.Extra = append(ep.Extra, x)
			return x, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no link of its address %s", host, addr)
}

// planFlows checks that every flow's hosts are connected, picks its
// defaults from its path and builds its perf configuration and server.
func (f *File) planFlows(g *graph, p *Plan, dcOf map[string]string) error {
	servers := map[[2]string]int{}
	uetUsers := map[string]string{} // node -> flow using its UET endpoint
	var maxRate units.Rate
	for _, l := range f.Links {
		maxRate = max(maxRate, l.Rate)
	}
	// A host that serves UET and sends it, or sends more than one UET
	// flow, gives each of its senders an address of its own on its link
	// (one UET endpoint per address: pktio.ListenEntropy); in
	// namespaces only: a lab server's addresses are its own.
	uetServes, uetSends := map[string]int{}, map[string]int{}
	for _, fl := range f.Flows {
		if fl.Transport == TransportUET {
			uetServes[fl.To]++
			uetSends[fl.From]++
		}
	}
	ownAddr := func(fl *Flow) bool {
		return !p.Deploy && fl.Transport == TransportUET && (uetServes[fl.From] > 0 || uetSends[fl.From] > 1)
	}
	for i := range f.Flows {
		fl := &f.Flows[i]
		fp := func(field string) string { return conf.Join(conf.Index("flows", i), field) }
		uet := fl.Transport == TransportUET
		if uet && !ownAddr(fl) {
			// One UET endpoint per address (UDP 4793, pktio.ListenEntropy):
			// a host sends one UET flow, and serves or sends, not both.
			for _, role := range []struct{ node, field, as string }{{fl.From, "from", "send"}, {fl.To, "to", "serve"}} {
				key := role.node + "/" + role.as
				other := role.node + "/" + map[string]string{"send": "serve", "serve": "send"}[role.as]
				if prev, ok := uetUsers[other]; ok {
					return conf.Errorf(fp(role.field), role.node, "%s is a uet %s in %s already: a host has one uet endpoint (UDP 4793), which serves or sends", role.node, map[string]string{"send": "server", "serve": "sender"}[role.as], prev)
				}
				if prev, ok := uetUsers[key]; ok && role.as == "send" {
					return conf.Errorf(fp(role.field), role.node, "%s sends uet in %s already: a host has one uet endpoint (UDP 4793); give that flow more streams", role.node, prev)
				}
				uetUsers[key] = fl.Name
			}
		}
		to := p.Addrs[fl.To]
		from := p.Addrs[fl.From]
		if !to.IsValid() || !from.IsValid() {
			return conf.Errorf(fp("to"), fl.To, "%s and %s are not connected: a host needs a link", fl.From, fl.To)
		}
		if ownAddr(fl) {
			var err error
			if from, err = p.senderAddr(fl.From); err != nil {
				return conf.Errorf(fp("from"), fl.From, "%v", err)
			}
		}
		path, ok := g.path(fl.From, to)
		if !ok {
			return conf.Errorf(fp("to"), fl.To, "no path from %s to %s (routes never cross a host)", fl.From, fl.To)
		}
		fpn := FlowPlan{Flow: fl, Index: i, Crosses: dcOf[fl.From] != "" && dcOf[fl.To] != "" && dcOf[fl.From] != dcOf[fl.To],
			Start: fl.Start, Every: fl.Every, Pause: fl.Pause, LastPort: -1}
		fpn.PathMTU = MaxLinkMTU
		lineRate := fl.LineRate
		if lineRate == 0 {
			if r := f.Links[g.adj[fl.From][0].link].Rate; r != 0 {
				lineRate = r
			} else {
				lineRate = maxRate
			}
		}
		fpn.Bottleneck = lineRate
		for _, h := range path {
			mtu := h.e.mtu
			if h.e.wan && fpn.Crosses {
				mtu -= tunnel.OuterHeaderBytes
			}
			fpn.PathMTU = min(fpn.PathMTU, mtu)
		}
		fpn.Ports, fpn.Branches = p.portsOn(g, path, to)
		for _, j := range fpn.Ports {
			if r := p.Ports[j].Config.Rate; fpn.Bottleneck == 0 || r < fpn.Bottleneck {
				fpn.Bottleneck = r
			}
		}
		if n := len(fpn.Ports); n > 0 {
			fpn.LastPort = fpn.Ports[n-1]
		}
		if back, ok := g.path(fl.To, from); ok {
			fpn.ReplyPorts, fpn.ReplyBranches = p.portsOn(g, back, from)
		}
		fpn.BaseRTT = 2 * f.pathDelay(path, fl.From)
		if fb := f.Fabric; fb != nil && fb.StoreAndForward {
			fpn.Wire = f.wireOn(path, fl.From)
			if back, ok := g.path(fl.To, from); ok {
				fpn.ReplyWire = f.wireOn(back, fl.To)
			}
		}
		fpn.RelayHolds = f.relayHolds(p, path, fl.From, fpn.Ports)
		if fl.Transport == TransportTCP {
			si := f.tcpServer(p, servers, fl, to)
			fpn.Server = si
			fpn.TCP = &TCPPlan{Server: p.Servers[si].Addr, Bind: from, CC: fl.CC, DSCP: fl.DSCP,
				Size: uint64(fl.Size), WriteBytes: int(fl.MessageSize), Duration: fl.Duration}
			if fl.Size == 0 && fpn.TCP.Duration == 0 {
				fpn.TCP.Duration = f.Duration
			}
			if fpn.TCP.WriteBytes == 0 {
				fpn.TCP.WriteBytes = tcpflow.DefaultWrite
			}
			p.Flows = append(p.Flows, fpn)
			continue
		}
		mtu := fl.MTU
		if uet {
			if mtu == 0 {
				mtu = min(4096, fpn.PathMTU)
			}
			if mtu > fpn.PathMTU || mtu < perf.MinUETMTU {
				return conf.Errorf(fp("mtu"), mtu, "the path from %s to %s carries IP packets up to %d bytes%s; want %d..%d", fl.From, fl.To, fpn.PathMTU, tunnelNote(fpn.Crosses), perf.MinUETMTU, min(fpn.PathMTU, perf.MaxUETMTU))
			}
		} else {
			if mtu == 0 {
				for _, m := range slices.Backward(roceMTUs) {
					if m+rocePacketOverhead <= fpn.PathMTU {
						mtu = m
						break
					}
				}
			}
			if mtu == 0 || mtu+rocePacketOverhead > fpn.PathMTU {
				return conf.Errorf(fp("mtu"), mtu, "the path from %s to %s carries IP packets up to %d bytes%s: a RoCEv2 MTU m needs m + %d; raise the links' mtu", fl.From, fl.To, fpn.PathMTU, tunnelNote(fpn.Crosses), rocePacketOverhead)
			}
		}

		key := [2]string{fl.To, fl.Transport}
		si, ok := servers[key]
		if !ok {
			port := RoCESidePort
			if uet {
				port = UETSidePort
			}
			si = len(p.Servers)
			servers[key] = si
			sp := ServerPlan{Node: fl.To, Transport: fl.Transport, Addr: netip.AddrPortFrom(to, uint16(port)), SendPath: f.nicSendPath(fl.To)}
			if i := slices.IndexFunc(f.Nodes, func(n Node) bool { return n.Name == fl.To }); i >= 0 {
				// kernel and agent place RoCEv2's NP; off holds for UET's
				// target too (no CE echoed).
				if np := f.Nodes[i].NP; fl.Transport == TransportRoCEv2 || (uet && np == perf.NPOff) {
					sp.NP = np
				}
			}
			if uet {
				// The receiving NIC's rate, as a sender's line rate
				// defaults: its credit pacer grants 0.99 of it.
				sp.LineRate = f.Links[g.adj[fl.To][0].link].Rate
				if sp.LineRate == 0 {
					sp.LineRate = maxRate
				}
			}
			p.Servers = append(p.Servers, sp)
		}
		fpn.Server = si
		c, err := f.clientConfig(fl, p.Servers[si].Addr.String(), from, mtu, lineRate)
		if err != nil {
			return conf.Errorf(conf.Index("flows", i), fl.Name, "%v", err)
		}
		fpn.Client = c
		fpn.Client.SendPath = f.nicSendPath(fl.From)
		if uet {
			sp := &p.Servers[si]
			sp.BaseRTT = max(sp.BaseRTT, fl.BaseRTT)
			if fpn.wired() {
				// Each end's wire is the path from the other.
				fpn.Client.Wires = map[netip.Addr]pktio.Wire{to: fpn.ReplyWire}
				if sp.Wires == nil {
					sp.Wires = map[netip.Addr]pktio.Wire{}
				}
				sp.Wires[from] = fpn.Wire
				// NSCC's base_rtt may fall to the flow's own path's round
				// trip, as htsim's falls to the least it measures, and no
				// lower: the host's jitter only adds to a sample.
				if !slices.ContainsFunc(fpn.Client.NSCCKnobs, func(k cc.Knob) bool { return k.Name == "base_rtt_floor" }) {
					rtt := fpn.Wire.Delay(c.MTU-udpIPBytes) + fpn.ReplyWire.Delay(uetAckBytes)
					fpn.Client.NSCCKnobs = append([]cc.Knob{{Name: "base_rtt_floor", Value: min(rtt, c.BaseRTT).String()}}, fpn.Client.NSCCKnobs...)
				}
			}
			trims, err := p.trimDSCPs(&fpn, sp, c.DSCP)
			if err != nil {
				return conf.Errorf(fp("to"), fl.To, "%v", err)
			}
			if trims {
				// What pds runs for an endpoint told the trimmed DSCPs
				// (nscc.Params.Trimming: tq 0.75 × base RTT); perf's
				// client says it with NSCC's knobs.
				// The flow's own knobs after these: a target_qdelay it
				// sets wins.
				n := nscc.LabParams(c.LineRate, c.BaseRTT, c.MTU).Trimming()
				fpn.Client.NSCCKnobs = append([]cc.Knob{{Name: "target_qdelay", Value: units.FormatDuration(n.TargetQDelay)}, {Name: "qa_threshold", Value: units.FormatDuration(n.QAThreshold)}}, c.NSCCKnobs...)
				if err := fpn.Client.Validate(); err != nil {
					return conf.Errorf(conf.Index("flows", i), fl.Name, "%v", err)
				}
			}
		}
		if fpn.Bottleneck == 0 {
			fpn.Bottleneck = c.LineRate // no rate in the lab: perf's default
		}
		p.Flows = append(p.Flows, fpn)
	}
	return nil
}

// trimDSCPs gives the flow's server the DSCPs of the trimmed packets it
// may receive (pds.Config's): the port in front of the receiver trims
// into TrimLastHopDSCP, any other port on the path into TrimDSCP; the
// receiver tells the two apart by their DSCP only. dscp is the flow's
// data's; trims says a port on its path trims it.
func (p *Plan) trimDSCPs(fp *FlowPlan, sp *ServerPlan, dscp uint8) (trims bool, err error) {
	by := map[uint8]string{}
	for _, j := range fp.Ports {
		po := &p.Ports[j]
		cc := &po.Config.Classes[po.Config.DSCPClass[dscp]]
		if cc.TrimBytes == 0 {
			continue
		}
		trims = true
		d := uint8(cc.TrimDSCP)
		field, what := &sp.TrimDSCP, "trim"
		if j == fp.LastPort {
			field, what = &sp.TrimLastHopDSCP, "last-hop trim"
		}
		if *field != 0 && *field != d {
			return trims, fmt.Errorf("port %s trims into DSCP %d, but %s's receiver already takes %d as its %s DSCP: give the ports before the last hop one trim-dscp", po.Name, d, sp.Node, *field, what)
		}
		*field = d
		if prev, ok := by[d]; ok && prev != what {
			return trims, fmt.Errorf("port %s trims into DSCP %d as another port on the path does: the receiver tells the last hop's trims by their DSCP; give the ports before it another trim-dscp", po.Name, d)
		}
		by[d] = what
	}
	if sp.TrimDSCP != 0 && sp.TrimDSCP == sp.TrimLastHopDSCP {
		return trims, fmt.Errorf("the ports in front of %s and before it both trim into DSCP %d: the receiver tells the last hop's trims by their DSCP; give the others another trim-dscp", sp.Node, sp.TrimDSCP)
	}
	return trims, nil
}

// tcpServer is the tcp server on the flow's receiver with its congestion
// control, added when it is the first.
func (f *File) tcpServer(p *Plan, servers map[[2]string]int, fl *Flow, to netip.Addr) int {
	key := [2]string{fl.To, TransportTCP + "/" + fl.CC}
	if si, ok := servers[key]; ok {
		return si
	}
	n := 0
	for _, sp := range p.Servers {
		if sp.Node == fl.To && sp.Transport == TransportTCP {
			n++
		}
	}
	si := len(p.Servers)
	servers[key] = si
	p.Servers = append(p.Servers, ServerPlan{Node: fl.To, Transport: TransportTCP, CC: fl.CC, Addr: netip.AddrPortFrom(to, uint16(TCPPort+n))})
	return si
}

// pathDelay is the one-way delay of the path's slowest branch from n: a
// link's delay counts once (half on each side of its relay; a deploy
// plan's link, whose netem delays both ends' egress, whole).
func (f *File) pathDelay(path []hop, n string) time.Duration {
	return slowest(path, n, func(e *edge) time.Duration {
		d := f.Links[e.link].Delay
		if strings.HasPrefix(e.node[0], relayPrefix) || strings.HasPrefix(e.node[1], relayPrefix) {
			d /= 2 // the link's two halves; a deploy plan's netem is per end
		}
		return d
	}, func(a, b time.Duration) time.Duration { return a + b }, func(a, b time.Duration) bool { return a > b })
}

// wireOn is the wire of the path's slowest branch from n (pktio.Wire):
// every hop's serialisation of a byte at its link's rate and, on a
// fabric with store_and_forward, its links' delay, which the fabric's
// links leave to the wire.
func (f *File) wireOn(path []hop, n string) pktio.Wire {
	var hopDelay time.Duration
	if f.Fabric != nil && f.Fabric.StoreAndForward {
		hopDelay = f.Fabric.Delay
	}
	w := slowest(path, n, func(e *edge) pktio.Wire {
		w := pktio.Wire{Latency: hopDelay}
		if r := f.Links[e.link].Rate; r > 0 {
			w.NsPerByte = 8e9 / float64(r)
		}
		return w
	}, func(a, b pktio.Wire) pktio.Wire {
		a.Latency += b.Latency
		a.NsPerByte += b.NsPerByte
		return a
	}, func(a, b pktio.Wire) bool {
		return a.NsPerByte > b.NsPerByte || a.NsPerByte == b.NsPerByte && a.Latency > b.Latency
	})
	w.Overhead = pktio.WireOverhead4
	return w
}

// slowest is the worst of path's branches from n: each hop's value
// (step) summed along a branch (add), the branches compared by worse.
func slowest[T any](path []hop, n string, step func(*edge) T, add func(a, b T) T, worse func(a, b T) bool) T {
	from := map[string][]*edge{}
	for _, h := range path {
		from[h.from] = append(from[h.from], h.e)
	}
	memo := map[string]T{}
	var walk func(string, int) T
	walk = func(x string, depth int) T {
		if v, ok := memo[x]; ok || depth > len(path) {
			return v
		}
		var worst T
		for i, e := range from[x] {
			v := step(e)
			if next := e.node[e.other(x)]; next != x {
				v = add(v, walk(next, depth+1))
			}
			if i == 0 || worse(v, worst) {
				worst = v
			}
		}
		memo[x] = worst
		return worst
	}
	return walk(n, 0)
}

// relayHolds are the relay devices on the loop of a flow from n along
// path whose data crosses ports, with the time from each to the nearest
// of them (FlowPlan.RelayHolds). Times are a packet's along the path's
// slowest branch from n, a relay's delay counted as it releases the
// packet; a reply takes the data's path back, so the loop is twice the
// one-way delay.
func (f *File) relayHolds(p *Plan, path []hop, n string, ports []int) []RelayHold {
	if len(ports) == 0 {
		return nil
	}
	relay := map[string]int{}
	for i, r := range p.Relays {
		relay[r.Node] = i
	}
	// Hops are in breadth-first order from n: a node's arrival time is
	// final before its own hops are read.
	at := map[string]time.Duration{n: 0}
	var oneWay time.Duration
	type out struct {
		relay int
		dev   string
		sent  time.Duration // the data's release there
	}
	var outs []out
	for _, h := range path {
		t := at[h.from]
		if i, ok := relay[h.from]; ok {
			t += p.Relays[i].Delay
			dev := h.e.dev[1-h.e.other(h.from)]
			if !slices.ContainsFunc(outs, func(o out) bool { return o.relay == i && o.dev == dev }) {
				outs = append(outs, out{i, dev, t})
			}
		}
		next := h.e.node[h.e.other(h.from)]
		at[next] = max(at[next], t)
		oneWay = max(oneWay, at[next])
	}
	loop := 2 * oneWay
	// via is the way around the loop from a packet's release at pos to
	// the nearest port.
	via := func(pos time.Duration) time.Duration {
		best := time.Duration(-1)
		for _, j := range ports {
			d := at[p.Ports[j].Node] - pos
			if loop > 0 {
				d = ((d % loop) + loop) % loop
			}
			if best < 0 || d < best {
				best = max(d, 0)
			}
		}
		return best
	}
	var holds []RelayHold
	for _, o := range outs {
		r := p.Relays[o.relay]
		back := r.DevA
		if o.dev == r.DevA {
			back = r.DevB
		}
		// A reply reaches the relay on its way back at loop − sent and
		// leaves it a delay later: loop − (sent − delay).
		holds = append(holds,
			RelayHold{Relay: o.relay, Dev: o.dev, Via: via(o.sent)},
			RelayHold{Relay: o.relay, Dev: back, Via: via(loop - (o.sent - r.Delay))})
	}
	return holds
}

func tunnelNote(crosses bool) string {
	if crosses {
		return fmt.Sprintf(" (the tunnel takes %d)", tunnel.OuterHeaderBytes)
	}
	return ""
}

// clientConfig is the flow's perf client, checked by perf itself.
func (f *File) clientConfig(fl *Flow, server string, from netip.Addr, mtu int, lineRate units.Rate) (perf.ClientConfig, error) {
	var c perf.ClientConfig
	streams := max(fl.QPs, fl.Streams, 1)
	if fl.Transport == TransportUET {
		c = perf.DefaultUETClientConfig(server)
		cc, _ := pds.ParseCCMode(fl.CC)
		c.UETCC = cc
		if fl.LB != "" && fl.LB != "none" {
			c.LB, _ = lb.ParseKind(fl.LB)
		}
		c.BaseRTT, c.RTO = fl.BaseRTT, fl.RTO
		c.NSCCKnobs = SortedKnobs(fl.Knobs)
		if fl.Loss != "" {
			c.Loss, _ = pds.ParseLossInference(fl.Loss) // checked
		}
	} else {
		c = perf.DefaultClientConfig(server)
		c.CC = agent.CCMode(fl.CC)
		if fl.CC == CCDCQCN {
			c.Profile = fl.Profile
		}
		c.Knobs = SortedKnobs(fl.Knobs)
		c.AckTimeout = RoCEAckTimeout
		if fl.Inflight != 0 {
			c.InflightTime = fl.Inflight
		}
		c.PPFCMaxPause, c.PPFCWatchdog = fl.PPFCMaxPause, time.Duration(fl.PPFCWatchdog)
		c.RP = fl.RP
	}
	c.Bind = from
	c.QPs = streams
	c.MTU = mtu
	if lineRate != 0 {
		c.LineRate = lineRate
	}
	if fl.MessageSize != 0 {
		c.MessageBytes = int(fl.MessageSize)
	}
	if fl.Size != 0 {
		c.Bytes = uint64(fl.Size)
	} else {
		c.Duration = fl.Duration
		if c.Duration == 0 {
			c.Duration = f.Duration
		}
	}
	c.Interval = f.interval()
	c.Verify = fl.Verify
	return c, c.Validate()
}

// hop is one step of a path: leaving node from over edge e.
type hop struct {
	from string
	e    *edge
}

// hopsTo is every node's hop count to the subnet of the host address
// dst (g.dist of its link).
func (g *graph) hopsTo(dst netip.Addr) map[string]int {
	for _, e := range g.edges {
		if e.subnet.Contains(dst) {
			return g.dist(e)
		}
	}
	return nil
}

// path is every edge the routes may take from node n to the host
// address dst (all equal-cost branches), ending with dst's own link.
// portsOn is the ports a path toward dst leaves by (every ECMP branch),
// the farthest from dst first.
//
// branches gives each port its ECMP branch group: ports as far from dst
// as another port of the path are alternatives, one of which each packet
// crosses; they share a group number from 1 (0: a port every packet
// crosses).
func (p *Plan) portsOn(g *graph, path []hop, dst netip.Addr) (ports, branches []int) {
	for _, h := range path {
		for j, po := range p.Ports {
			if po.Node == h.from && po.Dev == h.e.dev[1-h.e.other(h.from)] && !slices.Contains(ports, j) {
				ports = append(ports, j)
			}
		}
	}
	hops := g.hopsTo(dst)
	dist := func(j int) int { return hops[p.Ports[j].Node] }
	slices.SortStableFunc(ports, func(a, b int) int { return dist(b) - dist(a) })
	branches = make([]int, len(ports))
	group := 0
	for i := range ports {
		switch {
		case i > 0 && dist(ports[i]) == dist(ports[i-1]):
			if branches[i-1] == 0 {
				group++
				branches[i-1] = group
			}
			branches[i] = branches[i-1]
		}
	}
	return ports, branches
}

func (g *graph) path(n string, dst netip.Addr) ([]hop, bool) {
	var target *edge
	for _, e := range g.edges {
		if e.subnet.Contains(dst) {
			target = e
		}
	}
	if target == nil {
		return nil, false
	}
	if target.node[0] == n || target.node[1] == n {
		return []hop{{n, target}}, true
	}
	d := g.dist(target)
	if _, ok := d[n]; !ok {
		return nil, false
	}
	var out []hop
	seen := map[string]bool{}
	frontier := []string{n}
	for len(frontier) > 0 {
		x := frontier[0]
		frontier = frontier[1:]
		if seen[x] {
			continue
		}
		seen[x] = true
		if d[x] == 0 {
			out = append(out, hop{x, target})
			continue
		}
		for _, e := range g.nextHops(x, d) {
			out = append(out, hop{x, e})
			frontier = append(frontier, e.node[e.other(x)])
		}
	}
	return out, true
}

// trimOpt drops a qdisc parser's repetition of the option and value.
func trimOpt(msg, prefix string) string {
	if len(msg) > len(prefix)+2 && msg[:len(prefix)] == prefix && msg[len(prefix):len(prefix)+2] == ": " {
		return msg[len(prefix)+2:]
	}
	return msg
}

// oneLine joins a multi-line error.
func oneLine(err error) string {
	b := []byte(err.Error())
	for i, c := range b {
		if c == '\n' {
			b[i] = ';'
		}
	}
	return string(b)
}

// fibHashSeed is the sysctl of a namespace's ECMP hash seed (Linux 6.11).
const fibHashSeed = "net.ipv4.fib_multipath_hash_seed"

// fibHashFields is the 5-tuple for policy 3 (ip-sysctl.rst: source and
// destination IP 0x3, IP protocol 0x4, source and destination port
// 0x30).
const fibHashFields = "0x0037"

// hashSeedSysctl says the running kernel has fibHashSeed.
func hashSeedSysctl() bool {
	_, err := os.Stat("/proc/sys/" + strings.ReplaceAll(fibHashSeed, ".", "/"))
	return err == nil
}

// nodeHashSeed is a node's ECMP hash seed: from its name, never 0 (the
// kernel's shared random seed).
func nodeHashSeed(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32() | 1
}
