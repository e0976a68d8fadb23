package htsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/cm"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// LeafSpine is a two-tier leaf-spine in the lab's terms: Hosts spread in
// order over Leaves, every leaf linked to every one of Spines.
type LeafSpine struct {
	Hosts  int `json:"hosts"`
	Leaves int `json:"leaves"`
	Spines int `json:"spines"`
	// HostRate is a host's link; SpineRate a leaf-spine link. htsim's
	// fat tree runs every link at one rate: a SpineRate of B × HostRate
	// is a bundle of B links of HostRate (its topology's Bundle).
	HostRate  units.Rate `json:"host_rate"`
	SpineRate units.Rate `json:"spine_rate"`
	// Delay is every link's one-way delay (htsim's Downlink_Latency_ns).
	Delay time.Duration `json:"delay"`
}

// FatTreeFabric is a three-tier fat tree in the lab's terms: Pods pods of K/2
// ToRs (K/2 hosts each) and K/2 aggregation switches, (K/2)² cores, every
// link at Rate. Oversubscription (optional: 1) divides K/2: each pod then
// has K/(2·Oversubscription) aggregation switches and the tree
// (K/2)²/Oversubscription cores, each ToR as many uplinks (htsim's Tier 0
// Oversubscribed and Radix_Up).
type FatTreeFabric struct {
	K                int           `json:"k"`
	Pods             int           `json:"pods"`
	Rate             units.Rate    `json:"rate"`
	Delay            time.Duration `json:"delay"`
	Oversubscription int           `json:"oversubscription,omitempty"`
	// CoreRate is the aggregation-core links' rate, r × Rate with r
	// dividing K/2: each aggregation switch has K/(2r) of them (htsim's
	// Tier 2 Downlink_speed_Gbps and Tier 1 Radix_Up). Optional: Rate.
	CoreRate units.Rate `json:"core_rate,omitempty"`
}

// os is the tree's oversubscription, 1 when not given.
func (ft *FatTreeFabric) os() int { return max(ft.Oversubscription, 1) }

// coreSpeedup is CoreRate over Rate, 1 when not given.
func (ft *FatTreeFabric) coreSpeedup() int {
	if ft.CoreRate == 0 || ft.Rate == 0 {
		return 1
	}
	return int(ft.CoreRate / ft.Rate)
}

// Hosts is the fat tree's hosts.
func (ft *FatTreeFabric) Hosts() int { return ft.Pods * ft.K * ft.K / 4 }

// MatrixScenario is a connection matrix run on a leaf-spine or a fat
// tree, in the lab's terms: the workload of a lab file (host/labfile) as
// htsim_uec runs it.
type MatrixScenario struct {
	// Matrix is the workload; its node i is fabric host HostOf[i].
	Matrix *cm.Matrix `json:"-"`
	// HostOf maps the matrix's nodes onto the fabric's hosts. Optional:
	// node i is host i.
	HostOf []int `json:"host_of,omitempty"`
	// Fabric is a leaf-spine; FatTree, when set, a fat tree instead.
	Fabric  LeafSpine      `json:"fabric"`
	FatTree *FatTreeFabric `json:"fat_tree,omitempty"`
	// MTUBytes is the IP packet; htsim's packet is 14 bytes more (its
	// 64-byte header leaves MTUBytes + 14 − 64 of payload).
	MTUBytes int `json:"mtu"`
	// PortQueue is every switch port's queue: htsim has one for all.
	PortQueue
	// TrimBytes is what a trimmed packet keeps of its IP packet; 0: no
	// trimming (a full queue drops).
	TrimBytes units.ByteSize `json:"trim_bytes,omitempty"`
	// CC is NSCC, RCCC or both.
	CC pds.CCMode `json:"cc"`
	// LB is the senders' entropy load balancer; 0 (none) is one entropy
	// per flow, so that ECMP hashes each flow onto one path as the lab's
	// routes do.
	LB lb.Kind `json:"lb,omitempty"`
	// SLEEK turns on htsim's SLEEK loss recovery (-sleek), the lab's
	// pds.LossSLEEK; htsim runs it with NSCC only.
	SLEEK bool `json:"sleek,omitempty"`
	// TargetQDelay is NSCC's target_qdelay in the lab's time (htsim's
	// -target_q_delay). Optional: 0, htsim derives it from its fabric's
	// unloaded round trip.
	TargetQDelay time.Duration `json:"target_qdelay,omitempty"`
	// Seed seeds htsim's random numbers.
	Seed int `json:"seed"`
	// Scale is lab time per htsim time: htsim runs every rate Scale
	// times faster and every delay Scale times shorter, so that every
	// size, queue and flow in bytes and packets stays. Optional: 0 is
	// the least power of ten that puts the host rate at 10 Gbit/s or
	// more, in whole Gbit/s (htsim's topology file reads whole Gbit/s).
	Scale float64 `json:"scale,omitempty"`
}

// Matrix bounds: htsim has more room; these keep a run to seconds.
const (
	maxMatrixHosts = 1024
	maxMatrixConns = 100_000
)

// Validate checks the scenario, and that htsim's fat tree can be this
// leaf-spine. The error joins a *FieldError per problem.
func (s *MatrixScenario) Validate() error {
	var errs []error
	bad := func(field string, v any, allowed string, args ...any) {
		errs = append(errs, fieldErr(field, v, allowed, args...))
	}
	fb := &s.Fabric
	if ft := s.FatTree; ft != nil {
		// Checked as its hosts on ToRs at one rate, and on its own.
		fb = s.leafSpine()
		if ft.K < 4 || ft.K%2 != 0 || ft.Pods < 1 || ft.Pods > ft.K {
			bad("fat_tree", fmt.Sprintf("k %d, pods %d", ft.K, ft.Pods), "an even k of 4 or more and 1 to k pods")
		}
		if ft.Oversubscription < 0 || ft.K >= 4 && (ft.K/2)%ft.os() != 0 {
			bad("fat_tree.oversubscription", ft.Oversubscription, "a whole number dividing k/2 (%d)", ft.K/2)
		}
		if ft.CoreRate != 0 && (ft.Rate <= 0 || ft.CoreRate%ft.Rate != 0 || ft.CoreRate < ft.Rate || ft.K >= 4 && (ft.K/2)%ft.coreSpeedup() != 0) {
			bad("fat_tree.core_rate", ft.CoreRate, "a whole multiple r of the rate (%s), r dividing k/2 (%d)", ft.Rate, ft.K/2)
		}
		if s.Fabric != (LeafSpine{}) {
			bad("fabric", "a leaf-spine", "empty with fat_tree: one fabric")
		}
	}
	switch {
	case s.Matrix == nil:
		bad("matrix", "none", "a connection matrix")
	case len(s.Matrix.Conns) == 0 || len(s.Matrix.Conns) > maxMatrixConns:
		bad("matrix", fmt.Sprintf("%d connections", len(s.Matrix.Conns)), "1 to %d connections", maxMatrixConns)
	}
	switch {
	case fb.Hosts < 2 || fb.Hosts > maxMatrixHosts:
		bad("fabric.hosts", fb.Hosts, "2 to %d", maxMatrixHosts)
	case fb.Leaves < 2 || fb.Hosts%fb.Leaves != 0 || fb.Hosts < 2:
		bad("fabric.leaves", fb.Leaves, "at least 2, dividing hosts (%d): htsim's leaf-spine has two tiers", fb.Hosts)
	case fb.Spines < 1:
		bad("fabric.spines", fb.Spines, "at least 1")
	case fb.HostRate < units.Mbit:
		bad("fabric.host_rate", fb.HostRate, "at least 1mbit")
	case fb.SpineRate%fb.HostRate != 0 || fb.SpineRate == 0:
		bad("fabric.spine_rate", fb.SpineRate, "a whole multiple of host_rate (%s): htsim's links run at one rate, a faster link is a bundle of them", fb.HostRate)
	case fb.Delay < 0 || fb.Delay > maxTime:
		bad("fabric.delay", fb.Delay, "0 to %v", maxTime)
	default:
		perLeaf, bundle := fb.Hosts/fb.Leaves, int(fb.SpineRate/fb.HostRate)
		// fat_tree_topology.cpp: a ToR's radix down over its radix up
		// is its oversubscription, a whole number.
		if up := fb.Spines * bundle; perLeaf%up != 0 {
			bad("fabric.spines", fb.Spines, "such that a leaf's %d hosts are a whole multiple of its %d uplinks of host_rate (%d spines × %d): htsim's oversubscription is a whole radix ratio",
				perLeaf, up, fb.Spines, bundle)
		}
	}
	if s.Matrix != nil && len(s.HostOf) != 0 && len(s.HostOf) != s.Matrix.Nodes {
		bad("host_of", len(s.HostOf), "one host per matrix node (%d)", s.Matrix.Nodes)
	}
	for i, h := range s.HostOf {
		if h < 0 || h >= fb.Hosts {
			bad(fmt.Sprintf("host_of[%d]", i), h, "0 to %d", fb.Hosts-1)
		}
	}
	if s.Matrix != nil && len(s.HostOf) == 0 && s.Matrix.Nodes > fb.Hosts {
		bad("matrix", fmt.Sprintf("%d nodes", s.Matrix.Nodes), "at most the fabric's %d hosts", fb.Hosts)
	}
	mtuOK := s.MTUBytes >= MinMTUBytes && s.MTUBytes <= MaxMTUBytes
	if !mtuOK {
		bad("mtu", s.MTUBytes, "%d to %d (bytes of IP packet)", MinMTUBytes, MaxMTUBytes)
	}
	s.PortQueue.validate(bad, s.MTUBytes+ethernetBytes, mtuOK)
	if s.TrimBytes != 0 && mtuOK {
		if lo := units.ByteSize(minTrimWireBytes - ethernetBytes); s.TrimBytes < lo || s.TrimBytes > units.ByteSize(s.MTUBytes) {
			bad("trim_bytes", s.TrimBytes, "0 (no trimming) or %s to mtu (%db)", lo, s.MTUBytes)
		}
	}
	if s.CC != pds.CCNSCC && s.CC != pds.CCRCCC && s.CC != pds.CCBoth {
		bad("cc", s.CC, "nscc, rccc or both")
	} else if s.SLEEK && s.CC == pds.CCRCCC {
		bad("sleek", s.SLEEK, "false with cc rccc: htsim runs SLEEK only with NSCC (its sender CC)")
	}
	if s.TargetQDelay < 0 || s.TargetQDelay > time.Second {
		bad("target_qdelay", s.TargetQDelay, "0 (htsim's own) to 1s")
	} else if s.TargetQDelay > 0 && s.CC == pds.CCRCCC {
		bad("target_qdelay", s.TargetQDelay, "0 with cc rccc: it is NSCC's")
	}
	if s.Scale < 0 || s.Scale > 1e6 {
		bad("scale", s.Scale, "0 (chosen) to 1e6")
	}
	return errors.Join(errs...)
}

// MatrixPlan is a MatrixScenario as htsim_uec runs it. Times ending in
// Ps are htsim's (picoseconds), the lab's divided by Scale.
type MatrixPlan struct {
	Scenario MatrixScenario `json:"scenario"`
	// Scale is lab time per htsim time.
	Scale float64 `json:"scale"`
	// LinkGbps is every link's rate in htsim; Bundle the links of a
	// leaf-spine pair.
	LinkGbps int `json:"link_gbps"`
	Bundle   int `json:"bundle"`
	// LatencyNs is every link's latency in htsim, at least 1 ns (htsim
	// refuses 0).
	LatencyNs int64 `json:"latency_ns"`
	// WireMTUBytes is htsim's packet; PayloadBytes its mss.
	WireMTUBytes int `json:"wire_mtu_bytes"`
	PayloadBytes int `json:"payload_bytes"`
	// QueuePackets, MinThPackets and MaxThPackets are -q and -ecn.
	QueuePackets int64 `json:"queue_packets"`
	MinThPackets int64 `json:"min_th_packets"`
	MaxThPackets int64 `json:"max_th_packets"`
	// TrimWireBytes is -trimsize; 0: -disable_trim.
	TrimWireBytes int `json:"trim_wire_bytes,omitempty"`
	// SACKThresholdBytes is the receiver's ACK coalescing: an ACK per
	// packet without trimming (the lab's target ACKs every receive
	// batch), htsim's default with it.
	SACKThresholdBytes int64 `json:"sack_threshold_bytes"`
	// Paths is -paths: the entropies a sender spreads over.
	Paths int `json:"paths"`
	// EndPs is when htsim stops.
	EndPs int64 `json:"end_ps"`

	hostOf []int
}

// NewMatrixPlan validates s and derives how htsim runs it.
func NewMatrixPlan(s MatrixScenario) (MatrixPlan, error) {
	if err := s.Validate(); err != nil {
		return MatrixPlan{}, err
	}
	fb := s.leafSpine()
	p := MatrixPlan{Scenario: s, Scale: s.Scale, Bundle: int(fb.SpineRate / fb.HostRate)}
	if p.Scale == 0 {
		p.Scale = 1
		for float64(fb.HostRate)*p.Scale < 10e9 || math.Mod(float64(fb.HostRate)*p.Scale, 1e9) != 0 {
			p.Scale *= 10
			if p.Scale > 1e6 {
				return MatrixPlan{}, fieldErr("fabric.host_rate", fb.HostRate, "a rate that some power of ten up to 1e6 makes whole Gbit/s")
			}
		}
	}
	gbps := float64(fb.HostRate) * p.Scale / 1e9
	if gbps != math.Trunc(gbps) || gbps < 1 {
		return MatrixPlan{}, fieldErr("scale", s.Scale, "such that host_rate (%s) × scale is a whole Gbit/s (htsim's topology file)", fb.HostRate)
	}
	p.LinkGbps = int(gbps)
	p.LatencyNs = max(int64(math.Round(float64(fb.Delay)/p.Scale)), 1)
	p.WireMTUBytes = s.MTUBytes + ethernetBytes
	p.PayloadBytes = p.WireMTUBytes - headerBytes
	mtu := p.WireMTUBytes
	p.QueuePackets, p.MinThPackets, p.MaxThPackets = s.PortQueue.packets(mtu)
	p.SACKThresholdBytes = int64(DefaultSACKThresholdBytes)
	if s.TrimBytes != 0 {
		p.TrimWireBytes = int(s.TrimBytes) + ethernetBytes
	} else {
		p.SACKThresholdBytes = int64(mtu)
	}
	p.Paths = 1
	if s.LB != 0 {
		p.Paths = lb.DefaultEVs
	}
	p.hostOf = s.HostOf
	if len(p.hostOf) == 0 {
		p.hostOf = make([]int, s.Matrix.Nodes)
		for i := range p.hostOf {
			p.hostOf[i] = i
		}
	}
	// Room for the flows one after another at the host rate, each with
	// four of htsim's minimum RTOs (15 µs + 6 drains of a full queue);
	// a run that ends first is run again, 8 times as long.
	var bytes float64
	var last time.Duration
	for _, c := range s.Matrix.Conns {
		bytes += float64(c.Size)
		last = max(last, p.htsimStart(c.Start))
	}
	psPerByte := 8e12 / (gbps * 1e9)
	p.EndPs = int64(2*bytes*float64(mtu)/float64(p.PayloadBytes)*psPerByte+4*p.minRTOPs()+1e9) + last.Nanoseconds()*1e3
	return p, nil
}

// htsimStart is a start on the lab's fabric in htsim's time: over Scale,
// rounded to the whole microsecond htsim's reader keeps.
func (p *MatrixPlan) htsimStart(d time.Duration) time.Duration {
	return time.Duration(math.Round(float64(d)/p.Scale/1e3)) * time.Microsecond
}

// minRTOPs is htsim_uec's minimum RTO in its picoseconds: 15 µs and 6
// drains of a full queue at the link rate (main_uec.cpp).
func (p *MatrixPlan) minRTOPs() float64 {
	return 15e6 + float64(p.QueuePackets*int64(p.WireMTUBytes))*6*8e12/(float64(p.LinkGbps)*1e9)
}

// Oversubscription is the ToRs' (leaves') Oversubscribed in the
// topology file: hosts per uplink.
func (p *MatrixPlan) Oversubscription() int {
	if ft := p.Scenario.FatTree; ft != nil {
		return ft.os()
	}
	fb := &p.Scenario.Fabric
	return max(fb.Hosts/fb.Leaves/(fb.Spines*p.Bundle), 1)
}

// MinRTO is htsim's minimum RTO on the lab's timeline.
func (p *MatrixPlan) MinRTO() time.Duration {
	return time.Duration(p.minRTOPs() / 1e3 * p.Scale)
}

// leafSpine is the scenario's leaf-spine, or its fat tree's hosts,
// rate and delay as one.
func (s *MatrixScenario) leafSpine() *LeafSpine {
	if ft := s.FatTree; ft != nil {
		return &LeafSpine{Hosts: ft.Hosts(), Leaves: ft.Pods * ft.K / 2, Spines: 1, HostRate: ft.Rate, SpineRate: ft.Rate, Delay: ft.Delay}
	}
	return &s.Fabric
}

// hops is how many links a packet crosses from host a to host b.
func (p *MatrixPlan) hops(a, b int) int {
	if ft := p.Scenario.FatTree; ft != nil {
		perToR, perPod := ft.K/2, ft.K*ft.K/4
		switch {
		case a/perToR == b/perToR:
			return 2
		case a/perPod == b/perPod:
			return 4
		}
		return 6
	}
	fb := &p.Scenario.Fabric
	if perLeaf := fb.Hosts / fb.Leaves; a/perLeaf == b/perLeaf {
		return 2
	}
	return 4
}

// Host is the htsim host of matrix node n.
func (p *MatrixPlan) Host(n int) int { return p.hostOf[n] }

// Topology is htsim's topology file (-topo) for the leaf-spine: tier 0
// the leaves (radix down: their hosts; up: their uplinks), tier 1 the
// spines (radix down: their links to the leaves, in bundles).
func (p *MatrixPlan) Topology() string {
	if ft := p.Scenario.FatTree; ft != nil {
		half := ft.K / 2
		var b strings.Builder
		fmt.Fprintf(&b, "Nodes %d\nTiers 3\nPodsize %d\n\n", ft.Hosts(), half*half)
		// A ToR's uplinks are its hosts over the oversubscription; an
		// aggregation switch has one to each of the ToRs below and K/2
		// above (htsim derives the aggregation and core switches from
		// these).
		// Faster core links (CoreRate) are fewer: an aggregation switch's
		// radix up shrinks by the speedup, its tier's capacity stays.
		r := ft.coreSpeedup()
		ups, oss := []int{half / ft.os(), half / r}, []int{ft.os(), 1}
		for tier, down := range []int{half, half, ft.Pods} {
			gbps := p.LinkGbps
			if tier == 2 {
				gbps *= r
			}
			fmt.Fprintf(&b, "Tier %d\nDownlink_speed_Gbps %d\nRadix_Down %d\n", tier, gbps, down)
			if tier < 2 {
				fmt.Fprintf(&b, "Radix_Up %d\nOversubscribed %d\n", ups[tier], oss[tier])
			}
			fmt.Fprintf(&b, "Downlink_Latency_ns %d\nSwitch_Latency_ns 0\n", p.LatencyNs)
			if tier < 2 {
				b.WriteString("\n")
			}
		}
		return b.String()
	}
	fb := &p.Scenario.Fabric
	perLeaf := fb.Hosts / fb.Leaves
	up := fb.Spines * p.Bundle
	var b strings.Builder
	fmt.Fprintf(&b, "Nodes %d\nTiers 2\nPodsize %d\n\n", fb.Hosts, fb.Hosts)
	fmt.Fprintf(&b, "Tier 0\nDownlink_speed_Gbps %d\nRadix_Down %d\nRadix_Up %d\nOversubscribed %d\nDownlink_Latency_ns %d\nSwitch_Latency_ns 0\n\n",
		p.LinkGbps, perLeaf, up, perLeaf/up, p.LatencyNs)
	fmt.Fprintf(&b, "Tier 1\nDownlink_speed_Gbps %d\nRadix_Down %d\n", p.LinkGbps, fb.Leaves*p.Bundle)
	if p.Bundle > 1 {
		fmt.Fprintf(&b, "Bundle %d\n", p.Bundle)
	}
	fmt.Fprintf(&b, "Downlink_Latency_ns %d\nSwitch_Latency_ns 0\n", p.LatencyNs)
	return b.String()
}

// ConnectionMatrix is the .cm htsim reads: the scenario's matrix on the
// fabric's hosts, connection i with id i+1 (htsim prints the id with
// each flow's start and finish), every start in htsim's time (the lab's
// over Scale, to htsim's whole microsecond), every trigger as it is.
func (p *MatrixPlan) ConnectionMatrix() string {
	m := *p.Scenario.Matrix
	m.Nodes = p.Scenario.leafSpine().Hosts
	m.Conns = slices.Clone(m.Conns)
	for i := range m.Conns {
		c := &m.Conns[i]
		c.ID, c.Src, c.Dst = i+1, p.hostOf[c.Src], p.hostOf[c.Dst]
		c.HasPrio = false
		c.Start = p.htsimStart(c.Start)
	}
	var b strings.Builder
	_, _ = m.WriteTo(&b)
	return b.String()
}

// MatrixArgs are htsim_uec's arguments for the plan, its files named
// topo and cm, stopping at endPs.
func (p *MatrixPlan) MatrixArgs(topo, cmFile string, endPs int64) []string {
	s := &p.Scenario
	a := append([]string{"-tm", cmFile, "-topo", topo}, ccFlags(s.CC)...)
	itoa := func(v int64) string { return strconv.FormatInt(v, 10) }
	a = append(a,
		"-linkspeed", strconv.Itoa(p.LinkGbps*1000),
		"-mtu", strconv.Itoa(p.WireMTUBytes),
	)
	a = append(a, queueFlags(p.QueuePackets, p.MinThPackets, p.MaxThPackets, p.TrimWireBytes)...)
	if p.SACKThresholdBytes != int64(DefaultSACKThresholdBytes) {
		a = append(a, "-sack_threshold", itoa(p.SACKThresholdBytes))
	}
	if s.LB != 0 {
		a = append(a, "-load_balancing_algo", s.LB.String())
	}
	if s.SLEEK {
		a = append(a, "-sleek")
	}
	if s.TargetQDelay > 0 {
		a = append(a, "-target_q_delay", micros(int64(math.Round(float64(s.TargetQDelay)*1e3/p.Scale))))
	}
	return append(a,
		"-paths", strconv.Itoa(p.Paths),
		"-end", itoa((endPs+999_999)/1e6), // whole µs, rounded up
		"-seed", strconv.Itoa(s.Seed),
	)
}

// IdealFCT is connection i's ideal in htsim, in the lab's time: the
// lab's ideal (its bytes at the link rate, the links' latency both ways)
// and what htsim's store-and-forward adds to it alone on an idle fabric:
// its last packet serialised again at every further hop of its path (2
// links within a leaf, 4 across) and the ACK at every hop. The lab's
// ports send a packet that finds them idle at once; htsim's queues
// serialise every packet at every hop.
func (p *MatrixPlan) IdealFCT(i int) time.Duration {
	c := p.Scenario.Matrix.Conns[i]
	hops := p.hops(p.hostOf[c.Src], p.hostOf[c.Dst])
	psPerByte := 8e12 / (float64(p.LinkGbps) * 1e9)
	last := float64(min(c.Size, uint64(p.PayloadBytes)) + headerBytes)
	ps := (float64(c.Size)+float64(hops-1)*last+float64(hops)*headerBytes)*psPerByte + float64(2*hops)*float64(p.LatencyNs)*1e3
	return time.Duration(ps * p.Scale / 1e3)
}

// MatrixFlow is one connection as htsim ran it, in the lab's time.
type MatrixFlow struct {
	Conn  int           `json:"conn"` // the matrix's connection index
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
	Done  bool          `json:"done"`
}

// MatrixResult is htsim's run of a matrix.
type MatrixResult struct {
	Plan MatrixPlan `json:"plan"`
	// Command is the run's command line (in Dir, with its files).
	Command string `json:"command"`
	// Flows are the connections in matrix order.
	Flows []MatrixFlow `json:"flows"`
	// UnloadedRTT is htsim's network_max_unloaded_rtt, in the lab's time.
	UnloadedRTT time.Duration `json:"unloaded_rtt"`
	Counters    Counters      `json:"counters"`
	Wall        time.Duration `json:"wall"`
}

// parseMatrixOutput reads htsim_uec's lines "Flow Uec_S_D flowId ID …
// starting at T" and "… finished at T" (T in µs) for the plan's n
// connections (id i+1 is connection i), and its counters.
func (p *MatrixPlan) parseMatrixOutput(text []byte) (MatrixResult, error) {
	n := len(p.Scenario.Matrix.Conns)
	res := MatrixResult{Flows: make([]MatrixFlow, n)}
	started := make([]bool, n)
	for i := range res.Flows {
		res.Flows[i].Conn = i
	}
	lab := func(us float64) time.Duration { return time.Duration(us * 1e3 * p.Scale) }
	for line := range strings.SplitSeq(string(text), "\n") {
		line = strings.TrimLeft(line, ".|")
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "network_max_unloaded_rtt":
			if v, err := strconv.ParseFloat(f[1], 64); err == nil {
				res.UnloadedRTT = lab(v)
			}
		case len(f) >= 1 && f[0] == "New:":
			c, err := parseCounters(f)
			if err != nil {
				return res, err
			}
			res.Counters = c
		case len(f) >= 7 && f[0] == "Flow" && strings.HasPrefix(f[1], "Uec_") && f[2] == "flowId":
			id, err := strconv.Atoi(f[3])
			if err != nil || id < 1 || id > n {
				return res, fmt.Errorf("htsim output: %q: flow id %q: want 1 to %d", line, f[3], n)
			}
			var at int
			for k := 4; k+2 < len(f); k++ {
				if (f[k] == "starting" || f[k] == "finished") && f[k+1] == "at" {
					at = k
					break
				}
			}
			if at == 0 {
				continue
			}
			us, err := strconv.ParseFloat(f[at+2], 64)
			if err != nil {
				return res, fmt.Errorf("htsim output: %q: %v", line, err)
			}
			fl := &res.Flows[id-1]
			if f[at] == "starting" {
				fl.Start, started[id-1] = lab(us), true
			} else {
				fl.End, fl.Done = lab(us), true
			}
		}
	}
	for i, fl := range res.Flows {
		if fl.Done && !started[i] {
			return res, fmt.Errorf("htsim output: flow id %d finished and never started", i+1)
		}
	}
	return res, nil
}

// Finished is how many flows finished.
func (r *MatrixResult) Finished() int {
	n := 0
	for _, f := range r.Flows {
		if f.Done {
			n++
		}
	}
	return n
}

// The files of a matrix run, in its directory.
const (
	MatrixTopoFile   = "htsim.topo"
	MatrixCMFile     = "htsim.cm"
	MatrixOutFile    = "htsim.out"
	MatrixScriptFile = "run-htsim.sh"
)

// WriteFiles writes the plan's topology, matrix and a script that runs
// htsim_uec on them (from $HTSIM, htsim's build directory) into dir, and
// returns the command line, to run in dir.
func (p *MatrixPlan) WriteFiles(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, MatrixTopoFile), []byte(p.Topology()), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, MatrixCMFile), []byte(p.ConnectionMatrix()), 0o644); err != nil {
		return "", err
	}
	cmd := "htsim_uec " + strings.Join(p.MatrixArgs(MatrixTopoFile, MatrixCMFile, p.EndPs), " ")
	script := "#!/bin/sh\n# htsim's run of the lab's matrix (fabriclab run -htsim): run it in this\n# directory with HTSIM set to htsim's build directory.\nset -e\ncd \"$(dirname \"$0\")\"\n\"${HTSIM:?set HTSIM to htsim's build directory}/datacenter/htsim_uec\" " +
		strings.Join(p.MatrixArgs(MatrixTopoFile, MatrixCMFile, p.EndPs), " ") + " > " + MatrixOutFile + "\n"
	if err := os.WriteFile(filepath.Join(dir, MatrixScriptFile), []byte(script), 0o755); err != nil {
		return "", err
	}
	return cmd, nil
}

// RunMatrix runs s in htsim_uec and reads every flow's start and finish.
// Without a build at r.Dir the error is a *MissingBinaryError (the files
// are written to r.WorkDir all the same, when it is set); a bad scenario's
// joins *FieldErrors; a run whose flows do not all finish, even 8 times
// as long, is an *IncompleteError.
func (r Runner) RunMatrix(ctx context.Context, s MatrixScenario) (MatrixResult, error) {
	p, err := NewMatrixPlan(s)
	if err != nil {
		return MatrixResult{}, err
	}
	work, done, err := r.workDir()
	if err != nil {
		return MatrixResult{}, err
	}
	defer done()
	command, err := p.WriteFiles(work)
	if err != nil {
		return MatrixResult{}, err
	}
	bin, err := locateUEC(r.Dir)
	if err != nil {
		return MatrixResult{Plan: p, Command: command}, err
	}
	start := time.Now()
	var res MatrixResult
	err = untilFinished(&p.EndPs, func() (int, int, error) {
		stdout, err := runIn(ctx, work, MatrixOutFile, bin, p.MatrixArgs(MatrixTopoFile, MatrixCMFile, p.EndPs)...)
		if err != nil {
			res = MatrixResult{Plan: p, Command: command}
			return 0, 0, err
		}
		res, err = p.parseMatrixOutput(stdout)
		res.Plan, res.Command = p, command
		return res.Finished(), len(res.Flows), err
	})
	if err == nil {
		res.Wall = time.Since(start)
	}
	return res, err
}
