//go:build linux

package labfile

import (
	"fmt"
	"time"

	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Fabric is a generated two-tier leaf-spine (htsim's -tiers 2): Hosts
// hosts h0, h1, ... spread in order over Leaves leaves leaf1, leaf2, ...,
// each leaf linked to every one of Spines spines sp1, sp2, .... Every
// switch port runs at its tier's rate with its tier's port settings;
// leaf-to-leaf traffic spreads over the spines by ECMP (the lab's routes
// hash on the 5-tuple, so a flow's entropy picks its spine). Its nodes,
// links and ports come before the file's own.
type Fabric struct {
	// Kind is "leaf-spine".
	Kind   string `yaml:"kind"`
	Hosts  int    `yaml:"hosts"`
	Leaves int    `yaml:"leaves"`
	Spines int    `yaml:"spines"`
	// HostRate is a leaf's ports toward its hosts (and the hosts' own
	// line rate); SpineRate a leaf's ports toward the spines and the
	// spines' ports toward the leaves. Optional: SpineRate is what makes
	// Oversubscription, HostRate without that.
	HostRate  units.Rate `yaml:"host_rate"`
	SpineRate units.Rate `yaml:"spine_rate"`
	// Oversubscription is a leaf's host capacity over its spine
	// capacity (htsim's -os): 1 is a full-bisection fabric. Optional: 1;
	// give it or SpineRate.
	Oversubscription float64 `yaml:"oversubscription"`
	// Delay is each link's one-way delay (htsim's -hop_latency).
	// Optional.
	Delay time.Duration `yaml:"delay"`
	// MTU is every link's. Optional: DefaultLinkMTU.
	MTU int `yaml:"mtu"`
	// Down, Up and Spine are the port settings of each tier (tc and dscp
	// values): a leaf's ports toward its hosts, toward the spines, and
	// the spines' ports. Optional: qdisc's defaults at the rate.
	Down  *Port `yaml:"down"`
	Up    *Port `yaml:"up"`
	Spine *Port `yaml:"spine"`
}

// FabricLeafSpine is Fabric.Kind of a two-tier leaf-spine.
const FabricLeafSpine = "leaf-spine"

// Fabric bounds: the hosts a two-core machine's namespaces carry.
const (
	maxFabricHosts    = 64
	maxFabricSwitches = 16
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
	switch {
	case fb.Kind != FabricLeafSpine:
		return conf.Errorf(fp("kind"), fb.Kind, "want %s (a three-tier fat tree is not built yet)", FabricLeafSpine)
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
	case fb.SpineRate != 0 && fb.Oversubscription != 0:
		return conf.Errorf(fp("oversubscription"), fb.Oversubscription, "give spine_rate or oversubscription, not both")
	}
	perLeaf := fb.Hosts / fb.Leaves
	spineRate := fb.SpineRate
	if spineRate == 0 && fb.Spines > 0 {
		os := fb.Oversubscription
		if os == 0 {
			os = 1
		}
		spineRate = units.Rate(float64(fb.HostRate) * float64(perLeaf) / (os * float64(fb.Spines)))
	}
	var nodes []Node
	var links []Link
	var ports []Port
	port := func(tier *Port, name string) {
		if tier != nil {
			q := *tier
			q.Port = name
			ports = append(ports, q)
		}
	}
	for h := range fb.Hosts {
		nodes = append(nodes, Node{Name: fmt.Sprintf("h%d", h), Kind: KindHost})
	}
	for l := range fb.Leaves {
		nodes = append(nodes, Node{Name: fmt.Sprintf("leaf%d", l+1), Kind: KindSwitch})
	}
	for s := range fb.Spines {
		nodes = append(nodes, Node{Name: fmt.Sprintf("sp%d", s+1), Kind: KindSwitch})
	}
	for h := range fb.Hosts {
		leaf := fmt.Sprintf("leaf%d", h/perLeaf+1)
		links = append(links, Link{A: fmt.Sprintf("h%d", h), B: leaf, Rate: fb.HostRate, Delay: fb.Delay, MTU: fb.MTU})
		port(fb.Down, fmt.Sprintf("%s:h%d", leaf, h))
	}
	for l := range fb.Leaves {
		for s := range fb.Spines {
			leaf, sp := fmt.Sprintf("leaf%d", l+1), fmt.Sprintf("sp%d", s+1)
			links = append(links, Link{A: leaf, B: sp, Rate: spineRate, Delay: fb.Delay, MTU: fb.MTU})
			port(fb.Up, leaf+":"+sp)
			port(fb.Spine, sp+":"+leaf)
		}
	}
	f.Nodes = append(nodes, f.Nodes...)
	f.Links = append(links, f.Links...)
	f.Ports = append(ports, f.Ports...)
	f.fabricDone = true
	return nil
}
