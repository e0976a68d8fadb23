//go:build linux

package lab

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/link"
)

// MaxSenders bounds DumbbellSpec.Senders: sender i uses 198.18.i.0/24 and
// 2001:db8:<i hex>::/64, and 2001:db8:ff::/64 belongs to the receiver.
const MaxSenders = 254

// DumbbellSpec describes N senders -> switch -> 1 receiver.
type DumbbellSpec struct {
	Senders         int // 1..MaxSenders
	MTU             int // 0 means 1500, applied to every link
	DisableOffloads bool
	IPv6            bool
	// SenderSysctls apply to every sender, e.g. net.ipv4.tcp_ecn=1. Not
	// net.ipv4.tcp_congestion_control: a namespace may only pick from the
	// host's allowed list (EPERM otherwise) and inherits the host default,
	// often bbr, which ignores ECN. Choose it per socket (iperf3 -C cubic).
	SenderSysctls map[string]string
	// SenderDelays[i] is the one-way delay added to packets leaving sender
	// i's eth0 (towards the switch), 0..link.MaxDelay, by a link.Delay. Optional:
	// nil, a missing entry or 0 means none. At most Senders entries.
	SenderDelays []time.Duration
}

// Port is a switch egress port: Dev in Node, whose veth peer is PeerDev in
// PeerNode. Attach the port emulation (qdisc/BPF) to Node/Dev.
type Port struct {
	Node     *Node
	Dev      string
	PeerNode *Node
	PeerDev  string
}

// Dumbbell is the main fabric topology: senders s1..sN each on their own
// switch port swp1..swpN, and the receiver r behind swp0, the bottleneck.
type Dumbbell struct {
	*Lab
	Senders          []*Node
	Switch, Receiver *Node

	SenderAddrs   []netip.Addr // SenderAddrs[i] belongs to Senders[i]
	ReceiverAddr  netip.Addr
	SenderAddrs6  []netip.Addr // nil unless IPv6
	ReceiverAddr6 netip.Addr   // zero unless IPv6

	Bottleneck  Port   // sw:swp0 -> r:eth0
	SenderPorts []Port // SenderPorts[i] is sw:swp<i+1> -> s<i+1>:eth0

	// Delays[i] delays what Senders[i] sends (DumbbellSpec.SenderDelays);
	// nil where no delay was asked for. The lab closes them.
	Delays []*link.Delay
}

// DumbbellTopology returns the Spec NewDumbbell builds, for callers that want
// to add nodes or routes before building.
func DumbbellTopology(ds DumbbellSpec) (Spec, error) {
	if ds.Senders < 1 || ds.Senders > MaxSenders {
		return Spec{}, fmt.Errorf("lab: %w: DumbbellSpec.Senders: %d outside 1..%d", ErrInvalidSpec, ds.Senders, MaxSenders)
	}
	if len(ds.SenderDelays) > ds.Senders {
		return Spec{}, specErr("DumbbellSpec.SenderDelays", "%d entries for %d senders (at most one per sender)", len(ds.SenderDelays), ds.Senders)
	}
	for i, d := range ds.SenderDelays {
		if d < 0 || d > link.MaxDelay {
			return Spec{}, specErr(fmt.Sprintf("DumbbellSpec.SenderDelays[%d]", i), "%v outside 0..%v", d, link.MaxDelay)
		}
	}
	var spec Spec
	for i := 1; i <= ds.Senders; i++ {
		spec.Nodes = append(spec.Nodes, NodeSpec{Name: fmt.Sprintf("s%d", i), Sysctls: ds.SenderSysctls})
	}
	spec.Nodes = append(spec.Nodes, NodeSpec{Name: "sw", Forwarding: true}, NodeSpec{Name: "r"})

	link := func(host, swDev string, v4 netip.Prefix, v6 netip.Prefix) {
		sw := Endpoint{Node: "sw", Dev: swDev, Addr: hostPrefix(v4, 1)}
		h := Endpoint{Node: host, Dev: "eth0", Addr: hostPrefix(v4, 2)}
		if ds.IPv6 {
			sw.Addr6, h.Addr6 = hostPrefix(v6, 1), hostPrefix(v6, 2)
		}
		spec.Links = append(spec.Links, LinkSpec{A: sw, B: h, MTU: ds.MTU, DisableOffloads: ds.DisableOffloads})
		spec.Routes = append(spec.Routes, RouteSpec{Node: host, Dst: labPrefix4, Via: sw.Addr.Addr()})
		if ds.IPv6 {
			spec.Routes = append(spec.Routes, RouteSpec{Node: host, Dst: labPrefix6, Via: sw.Addr6.Addr()})
		}
	}
	link("r", "swp0", netip.MustParsePrefix("198.19.0.0/24"), netip.MustParsePrefix("2001:db8:ff::/64"))
	for i := 1; i <= ds.Senders; i++ {
		link(fmt.Sprintf("s%d", i), fmt.Sprintf("swp%d", i),
			netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i), 0}), 24),
			netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(i)}), 64))
	}
	return spec, nil
}

// NewDumbbell builds the dumbbell. Addressing: sender i (1-based) is
// 198.18.i.2/24 on eth0 facing sw:swp<i> 198.18.i.1; the receiver is
// 198.19.0.2/24 on eth0 facing sw:swp0 198.19.0.1. With IPv6, 2001:db8:<i>::/64
// and 2001:db8:ff::/64 likewise. Hosts route the lab ranges via the switch.
func NewDumbbell(ds DumbbellSpec) (*Dumbbell, error) { return dumbbellShape.build(ds) }

// NewDumbbellT is NewDumbbell that fails tb on error and closes in tb.Cleanup.
func NewDumbbellT(tb TB, ds DumbbellSpec) *Dumbbell {
	tb.Helper()
	return dumbbellShape.buildT(tb, ds)
}

var dumbbellShape = shape[DumbbellSpec, *Dumbbell]{name: "Dumbbell", topology: DumbbellTopology, from: newDumbbellFrom}

func newDumbbellFrom(lab *Lab, ds DumbbellSpec) (*Dumbbell, error) {
	spec := lab.spec
	d := &Dumbbell{Lab: lab, Switch: lab.Node("sw"), Receiver: lab.Node("r")}
	port := func(l LinkSpec) Port {
		return Port{Node: lab.Node(l.A.Node), Dev: l.A.Dev, PeerNode: lab.Node(l.B.Node), PeerDev: l.B.Dev}
	}
	d.Bottleneck = port(spec.Links[0])
	d.ReceiverAddr = spec.Links[0].B.Addr.Addr()
	if ds.IPv6 {
		d.ReceiverAddr6 = spec.Links[0].B.Addr6.Addr()
	}
	for _, l := range spec.Links[1:] {
		d.Senders = append(d.Senders, lab.Node(l.B.Node))
		d.SenderPorts = append(d.SenderPorts, port(l))
		d.SenderAddrs = append(d.SenderAddrs, l.B.Addr.Addr())
		if ds.IPv6 {
			d.SenderAddrs6 = append(d.SenderAddrs6, l.B.Addr6.Addr())
		}
	}
	if ds.SenderDelays != nil {
		d.Delays = make([]*link.Delay, len(d.Senders))
		for i, delay := range ds.SenderDelays {
			if delay == 0 {
				continue
			}
			dl, err := d.Senders[i].AddDelay(d.SenderPorts[i].PeerDev, link.DelaySpec{Delay: delay})
			if err != nil {
				return nil, fmt.Errorf("lab: DumbbellSpec.SenderDelays[%d]: %w", i, err)
			}
			d.Delays[i] = dl
		}
	}
	return d, nil
}

// hostPrefix returns host number h inside subnet p, keeping p's length.
func hostPrefix(p netip.Prefix, h byte) netip.Prefix {
	b := p.Masked().Addr().AsSlice()
	b[len(b)-1] |= h
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, p.Bits())
}
