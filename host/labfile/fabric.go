//go:build linux

package labfile

import (
	"fmt"
	"math"
	"time"

	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Fabric is a generated two-tier leaf-spine (htsim's -tiers 2) or
// three-tier fat tree (htsim's -tiers 3). A leaf-spine has Hosts
// hosts h0, h1, ... spread in order over Leaves leaves leaf1, leaf2, ...,
// each leaf linked to every one of Spines spines sp1, sp2, .... Every
// switch port runs at its tier's rate with its tier's port settings;
// leaf-to-leaf traffic spreads over the spines by ECMP (the lab's routes
// hash on the 5-tuple, so a flow's entropy picks its spine). A fat tree
// of radix K has Pods pods, each of K/2 top-of-rack switches tor1, tor2,
// ... (K/2 hosts each) and K/2 aggregation switches agg1, agg2, ...
// (every ToR of the pod linked to every one), and (K/2)² core switches
// core1, core2, ...: core c is linked to the (c/(K/2))-th aggregation
// switch of every pod; every link runs at HostRate, but with a CoreRate
// of r × HostRate the aggregation-core links run at it, and the same
// capacity takes r times fewer of them: an aggregation switch has K/(2r)
// core links, the tree (K/2)²/r cores (htsim's Tier 2
// Downlink_speed_Gbps). A fat tree's
// Oversubscription (a whole number dividing K/2, htsim's Tier 0
// Oversubscribed) leaves each pod K/(2·Oversubscription) aggregation
// switches and the tree K²/(4·Oversubscription) cores: a ToR then has
// that many times fewer uplinks than hosts. Its nodes, links and ports
// come before the file's own.
type Fabric struct {
	// Kind is "leaf-spine" or "fat-tree".
	Kind   string `yaml:"kind"`
	Hosts  int    `yaml:"hosts"`
	Leaves int    `yaml:"leaves"`
	Spines int    `yaml:"spines"`
	// K is a fat tree's switch radix (even) and Pods its pods (1..K;
	// optional: K). Hosts is then Pods × (K/2)² (optional).
	K    int `yaml:"k"`
	Pods int `yaml:"pods"`
	// HostRate is a leaf's ports toward its hosts (and the hosts' own
	// line rate); SpineRate a leaf's ports toward the spines and the
	// spines' ports toward the leaves. Optional: SpineRate is what makes
	// Oversubscription, HostRate without that.
	HostRate  units.Rate `yaml:"host_rate"`
	SpineRate units.Rate `yaml:"spine_rate"`
	// CoreRate is a fat tree's aggregation-core links: a whole multiple
	// r of HostRate, r dividing K/2. Optional: HostRate. (A ToR's uplinks
	// stay at HostRate: htsim ties their count to its radix.)
	CoreRate units.Rate `yaml:"core_rate"`
	// Oversubscription is a leaf's host capacity over its spine
	// capacity (htsim's -os): 1 is a full-bisection fabric. Optional: 1;
	// give it or SpineRate. In a fat tree, a ToR's hosts over its
	// uplinks: a whole number dividing K/2.
	Oversubscription float64 `yaml:"oversubscription"`
	// Delay is each link's one-way delay (htsim's -hop_latency).
	// Optional.
	Delay time.Duration `yaml:"delay"`
	// StoreAndForward makes every hop receive a packet whole before it
	// sends it on, as a switch and htsim's queues do: the lab's ports
	// (a veth, an HTB class) pass a packet that finds them idle at once.
	// What is missing is the same for every packet at every hop, its
	// serialisation, so each UET endpoint adds it for its path, with the
	// links' Delay, to what it receives (pktio.Wire; the links then need
	// no netem). A flow's base_rtt then defaults to the fabric's
	// unloaded round trip (UnloadedRTT), the flows' ideal FCTs count the
	// hops' serialisation, and every flow must be uet: RoCEv2's NP and
	// RP and TCP run in the kernel, before any wire. Optional: false.
	StoreAndForward bool `yaml:"store_and_forward"`
	// NIC puts a port at HostRate on each host's link, its network
	// card's queue, as htsim's UecNIC: the host's packets leave one at a
	// time at its line rate, and an ACK or other control packet (DSCP 48)
	// goes first but waits for the data packet being sent (strict
	// priority, not pre-emptive); nothing is marked there. Without it a
	// host's ACKs never wait behind its own data. Every flow must be uet
	// (RoCEv2's NP and RP and the link queue run on the host's device),
	// and namespaces only. Optional: false.
	NIC bool `yaml:"nic"`
	// MTU is every link's. Optional: DefaultLinkMTU.
	MTU int `yaml:"mtu"`
	// Down, Up and Spine are the port settings of each tier (tc and dscp
	// values): a leaf's ports toward its hosts, toward the spines, and
	// the spines' ports; in a fat tree the ToRs' ports toward their
	// hosts, every port toward a higher tier, and every other port
	// toward a lower tier. Optional: qdisc's defaults at the rate.
	Down  *Port `yaml:"down"`
	Up    *Port `yaml:"up"`
	Spine *Port `yaml:"spine"`
}

// The Fabric kinds: a two-tier leaf-spine and a three-tier fat tree.
const (
	FabricLeafSpine = "leaf-spine"
	FabricFatTree   = "fat-tree"
)

// Fabric bounds: the hosts a two-core machine's namespaces carry (a
// fat tree of radix 4 has 20 switches).
const (
	maxFabricHosts    = 64
	maxFabricSwitches = 24
	maxFatTreeK       = 8
)

// expandFabric adds the fabric's nodes, links and ports ahead of the
// file's own, once.
func (f *File) expandFabric() error {
	fb := f.Fabric
	if fb == nil || f.fabricDone {
		return nil
	}
	const p = "fabric"
	fp := func(field string) string { return conf.Join(p, field) }
	if fb.Kind == FabricFatTree {
		return f.expandFatTree()
	}
	switch {
	case fb.Kind != FabricLeafSpine:
		return conf.Errorf(fp("kind"), fb.Kind, "want %s or %s", FabricLeafSpine, FabricFatTree)
	case fb.K != 0 || fb.Pods != 0:
		return conf.Errorf(fp("k"), fb.K, "k and pods are a fat tree's (kind %s)", FabricFatTree)
	case fb.Hosts < 2 || fb.Hosts > maxFabricHosts:
		return conf.Errorf(fp("hosts"), fb.Hosts, "want 2..%d", maxFabricHosts)
	case fb.Leaves < 1 || fb.Leaves > maxFabricSwitches:
		return conf.Errorf(fp("leaves"), fb.Leaves, "want 1..%d", maxFabricSwitches)
	case fb.Hosts%fb.Leaves != 0:
		return conf.Errorf(fp("leaves"), fb.Leaves, "must divide hosts %d: every leaf has as many hosts", fb.Hosts)
	case fb.Spines < 0 || fb.Spines > maxFabricSwitches || fb.Leaves > 1 && fb.Spines < 1:
		return conf.Errorf(fp("spines"), fb.Spines, "want 1..%d (0 only with one leaf)", maxFabricSwitches)
	case fb.HostRate <= 0:
		return conf.Errorf(fp("host_rate"), fb.HostRate, "required: the leaves' ports toward the hosts")
	case fb.Oversubscription < 0 || fb.Oversubscription > 64:
		return conf.Errorf(fp("oversubscription"), fb.Oversubscription, "want 1..64 (1: full bisection)")
	case fb.SpineRate < 0:
		return conf.Errorf(fp("spine_rate"), fb.SpineRate, "want a rate")
	case fb.CoreRate != 0:
		return conf.Errorf(fp("core_rate"), fb.CoreRate, "a fat tree's (kind %s); a leaf-spine's uplinks take spine_rate", FabricFatTree)
	case fb.SpineRate != 0 && fb.Oversubscription != 0:
		return conf.Errorf(fp("oversubscription"), fb.Oversubscription, "give spine_rate or oversubscription, not both")
	}
	perLeaf := fb.Hosts / fb.Leaves
	spineRate := fb.spineRate()
	var b fabricParts
	for h := range fb.Hosts {
		b.node(fmt.Sprintf("h%d", h), KindHost)
	}
	for l := range fb.Leaves {
		b.node(fmt.Sprintf("leaf%d", l+1), KindSwitch)
	}
	for s := range fb.Spines {
		b.node(fmt.Sprintf("sp%d", s+1), KindSwitch)
	}
	for h := range fb.Hosts {
		leaf := fmt.Sprintf("leaf%d", h/perLeaf+1)
		b.hostLink(fb, fmt.Sprintf("h%d", h), leaf)
		b.port(fb.Down, fmt.Sprintf("%s:h%d", leaf, h))
	}
	for l := range fb.Leaves {
		for s := range fb.Spines {
			b.uplink(fb, fmt.Sprintf("leaf%d", l+1), fmt.Sprintf("sp%d", s+1), spineRate)
		}
	}
	b.prepend(f)
	return nil
}

// fabricParts gathers a fabric's nodes, links and ports.
type fabricParts struct {
	nodes []Node
	links []Link
	ports []Port
}

func (b *fabricParts) node(name, kind string) {
	b.nodes = append(b.nodes, Node{Name: name, Kind: kind})
}

func (b *fabricParts) link(fb *Fabric, a, z string, rate units.Rate) {
	d := fb.Delay
	if fb.StoreAndForward {
		d = 0 // the endpoints' wires carry it
	}
	b.links = append(b.links, Link{A: a, B: z, Rate: rate, Delay: d, MTU: fb.MTU})
}

// hostLink links a host to its leaf or ToR at HostRate; with NIC the
// host's end gets a port too (planPorts).
func (b *fabricParts) hostLink(fb *Fabric, host, sw string) {
	b.link(fb, host, sw, fb.HostRate)
	b.links[len(b.links)-1].nic = fb.NIC
}

// longestPath is the rates of the links of the fabric's longest path
// between hosts, in order (validated, expanded): host, leaf, spine, leaf,
// host; in a fat tree host, ToR, aggregation, core, aggregation, ToR,
// host.
func (fb *Fabric) longestPath() []units.Rate {
	h := fb.HostRate
	if fb.Kind == FabricFatTree {
		switch ft := fb.fatTree(); {
		case ft.Pods > 1:
			return []units.Rate{h, h, fb.coreRate(), fb.coreRate(), h, h}
		case ft.Half > 1:
			return []units.Rate{h, h, h, h}
		}
		return []units.Rate{h, h}
	}
	if fb.Leaves > 1 {
		return []units.Rate{h, fb.spineRate(), fb.spineRate(), h}
	}
	return []units.Rate{h, h}
}

// uetAckBytes is a UET ACK's UDP payload (ACK_CC and its SES response):
// what the wire back carries.
const uetAckBytes = uet.PrologueLen + uet.AckCCLen + uet.SESRespLen

// udpIPBytes is an IPv4 UDP datagram's headers: an mtu-byte packet
// carries mtu − udpIPBytes of UDP payload.
const udpIPBytes = 20 + 8

// UnloadedRTT is the round trip of a UET packet of mtu bytes (IP) and
// its ACK over the fabric's longest path, every hop storing and
// forwarding: the spec's config_base_rtt (htsim's
// network_max_unloaded_rtt), in the fabric's time.
func (fb *Fabric) UnloadedRTT(mtu int) time.Duration {
	rates := fb.longestPath()
	var ns float64
	for _, r := range rates {
		ns += float64(mtu-udpIPBytes+uetAckBytes+2*pktio.WireOverhead4) * 8e9 / float64(r)
	}
	return time.Duration(ns) + 2*time.Duration(len(rates))*fb.Delay
}

// port gives port name the tier's settings, if the tier has any.
func (b *fabricParts) port(tier *Port, name string) {
	if tier != nil {
		q := *tier
		q.Port = name
		b.ports = append(b.ports, q)
	}
}

// uplink links a lower-tier switch to a higher-tier one: its port up
// takes fb.Up's settings, the other's port down fb.Spine's.
func (b *fabricParts) uplink(fb *Fabric, lower, upper string, rate units.Rate) {
	b.link(fb, lower, upper, rate)
	b.port(fb.Up, lower+":"+upper)
	b.port(fb.Spine, upper+":"+lower)
}

// prepend puts the fabric ahead of the file's own nodes, links and ports.
func (b *fabricParts) prepend(f *File) {
	f.Nodes = append(b.nodes, f.Nodes...)
	f.Links = append(b.links, f.Links...)
	f.Ports = append(b.ports, f.Ports...)
	f.fabricDone = true
}

// expandFatTree adds a fat tree's nodes, links and ports (Fabric).
func (f *File) expandFatTree() error {
	fb := f.Fabric
	const p = "fabric"
	fp := func(field string) string { return conf.Join(p, field) }
	if fb.Pods == 0 {
		fb.Pods = fb.K
	}
	half := fb.K / 2
	switch {
	case fb.K < 4 || fb.K > maxFatTreeK || fb.K%2 != 0:
		return conf.Errorf(fp("k"), fb.K, "want an even radix, 4..%d", maxFatTreeK)
	case fb.Pods < 1 || fb.Pods > fb.K:
		return conf.Errorf(fp("pods"), fb.Pods, "want 1..k (%d)", fb.K)
	case fb.Hosts != 0 && fb.Hosts != fb.Pods*half*half:
		return conf.Errorf(fp("hosts"), fb.Hosts, "a fat tree of radix %d with %d pods has %d hosts (pods × (k/2)²): give that or nothing", fb.K, fb.Pods, fb.Pods*half*half)
	case fb.Pods*half*half > maxFabricHosts:
		return conf.Errorf(fp("pods"), fb.Pods, "at most %d hosts: pods × (k/2)² is %d", maxFabricHosts, fb.Pods*half*half)
	case fb.Leaves != 0 || fb.Spines != 0:
		return conf.Errorf(fp("leaves"), fb.Leaves, "leaves and spines are a leaf-spine's; a fat tree has k and pods")
	case fb.HostRate <= 0:
		return conf.Errorf(fp("host_rate"), fb.HostRate, "required: every link's rate")
	case fb.SpineRate != 0:
		return conf.Errorf(fp("spine_rate"), fb.SpineRate, "a fat tree's ToR uplinks run at host_rate (htsim's fat tree ties their count to the ToR's radix); give oversubscription, or core_rate for the aggregation-core links")
	case fb.CoreRate < 0 || fb.CoreRate != 0 && (fb.CoreRate%fb.HostRate != 0 || half%int(fb.CoreRate/fb.HostRate) != 0):
		return conf.Errorf(fp("core_rate"), fb.CoreRate, "a whole multiple r of host_rate (%s) with r dividing k/2 (%d): an aggregation switch's k/2 links' worth in k/(2r) links", fb.HostRate, half)
	case fb.Oversubscription != 0 && (fb.Oversubscription < 1 || fb.Oversubscription != math.Trunc(fb.Oversubscription) || half%int(fb.Oversubscription) != 0):
		return conf.Errorf(fp("oversubscription"), fb.Oversubscription, "a fat tree's is a whole number dividing k/2 (%d): a ToR's hosts over its uplinks", half)
	}
	ft := fb.fatTree()
	switch {
	case ft.Switches() > maxFabricSwitches:
		return conf.Errorf(fp("pods"), fb.Pods, "at most %d switches: %d ToRs, %d aggregation and %d core switches", maxFabricSwitches, ft.ToRs(), ft.Aggs(), ft.Cores())
	}
	fb.Hosts = ft.Hosts()
	var b fabricParts
	for h := range fb.Hosts {
		b.node(fmt.Sprintf("h%d", h), KindHost)
	}
	for _, tier := range []struct {
		name string
		n    int
	}{{"tor", ft.ToRs()}, {"agg", ft.Aggs()}, {"core", ft.Cores()}} {
		for i := range tier.n {
			b.node(fmt.Sprintf("%s%d", tier.name, i+1), KindSwitch)
		}
	}
	for h := range fb.Hosts {
		tor := ft.ToROf(h)
		b.hostLink(fb, fmt.Sprintf("h%d", h), tor)
		b.port(fb.Down, fmt.Sprintf("%s:h%d", tor, h))
	}
	for _, sw := range ft.Uplinks()[:ft.ToRs()] {
		for _, agg := range sw.Up {
			b.uplink(fb, sw.Name, agg, fb.HostRate)
		}
	}
	// Core by core, as Uplinks wires them.
	for c := range ft.Cores() {
		for pod := range ft.Pods {
			b.uplink(fb, fmt.Sprintf("agg%d", pod*ft.AggsPerPod+c/ft.CoreUp+1), fmt.Sprintf("core%d", c+1), fb.coreRate())
		}
	}
	b.prepend(f)
	return nil
}

// fatTreeShape is a fat tree's switches and their wiring: Pods pods of
// Half ToRs (Half hosts each) and AggsPerPod aggregation switches, every
// ToR of a pod linked to each of its pod's; aggregation switch a of every
// pod linked to cores a·CoreUp+1 .. a·CoreUp+CoreUp (CoreUp is Half, or
// fewer faster links).
type fatTreeShape struct {
	Pods, Half, AggsPerPod, CoreUp int
}

// fatTree is fb's shape (kind fat-tree, validated).
func (fb *Fabric) fatTree() fatTreeShape {
	os := max(int(fb.Oversubscription), 1)
	return fatTreeShape{Pods: fb.Pods, Half: fb.K / 2, AggsPerPod: fb.K / 2 / os, CoreUp: fb.K / 2 / int(fb.coreRate()/fb.HostRate)}
}

// coreRate is a fat tree's aggregation-core links' rate.
func (fb *Fabric) coreRate() units.Rate {
	if fb.CoreRate != 0 {
		return fb.CoreRate
	}
	return fb.HostRate
}

func (t fatTreeShape) Hosts() int    { return t.Pods * t.Half * t.Half }
func (t fatTreeShape) ToRs() int     { return t.Pods * t.Half }
func (t fatTreeShape) Aggs() int     { return t.Pods * t.AggsPerPod }
func (t fatTreeShape) Cores() int    { return t.AggsPerPod * t.CoreUp }
func (t fatTreeShape) Switches() int { return t.ToRs() + t.Aggs() + t.Cores() }

// ToROf is host h's ToR.
func (t fatTreeShape) ToROf(h int) string { return fmt.Sprintf("tor%d", h/t.Half+1) }

// fabricSwitch is a switch and the switches its uplinks go to, in order.
type fabricSwitch struct {
	Name string
	Up   []string
}

// Uplinks is every ToR and then every aggregation switch, each with the
// switches above it.
func (t fatTreeShape) Uplinks() []fabricSwitch {
	var out []fabricSwitch
	for pod := range t.Pods {
		for r := range t.Half {
			s := fabricSwitch{Name: fmt.Sprintf("tor%d", pod*t.Half+r+1)}
			for a := range t.AggsPerPod {
				s.Up = append(s.Up, fmt.Sprintf("agg%d", pod*t.AggsPerPod+a+1))
			}
			out = append(out, s)
		}
	}
	for pod := range t.Pods {
		for a := range t.AggsPerPod {
			s := fabricSwitch{Name: fmt.Sprintf("agg%d", pod*t.AggsPerPod+a+1)}
			for c := range t.CoreUp {
				s.Up = append(s.Up, fmt.Sprintf("core%d", a*t.CoreUp+c+1))
			}
			out = append(out, s)
		}
	}
	return out
}
