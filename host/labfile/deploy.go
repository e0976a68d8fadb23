//go:build linux

package labfile

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/host/lab"
)

// Deployment is one node of a file on a machine of its own (a lab server,
// a Vagrant VM): what the machine's network needs (Apply) and what its
// fabriclabd runs (host/daemon's lab mode). Its plan is the file's
// DeployPlan: the same addresses and routes as in namespaces, but links
// with delay or loss carry netem at both ends instead of a relay.
type Deployment struct {
	Node Node
	// Variant is the variant deployed ("": the file as written).
	Variant string
	Plan    *Plan
	// Seed draws the series' sizes (DrawSizes): the file's, as its first
	// run in namespaces draws them.
	Seed    uint64
	Servers []ServerPlan // on this node
	Ports   []PortPlan   // on this node's devices
	// PEs are the tunnel PEs on this node's devices. An agent's limiter
	// is one of Ports (Limiter); a reroute agent moves this node's
	// routes alone (OwnRoutes): its peer's return path stays on path 1.
	PEs   []PEPlan    // on this node's devices
	Flows []FlowPlan  // leaving this node
	Netem []NetemPlan // on this node's devices
}

// OwnRoutes are the routes of rs on node.
func OwnRoutes(rs []lab.RouteSpec, node string) []lab.RouteSpec {
	var out []lab.RouteSpec
	for _, r := range rs {
		if r.Node == node {
			out = append(out, r)
		}
	}
	return out
}

// NetemPlan is a device's netem: the link's delay and loss, each way.
type NetemPlan struct {
	Dev   string
	Delay time.Duration
	Loss  float64
}

// DeployPlan plans the file for machines instead of namespaces.
func (f *File) DeployPlan() (*Plan, error) { return newPlan(f, true) }

// Deploy is node's share of the file's DeployPlan.
func (f *File) Deploy(node string) (*Deployment, error) { return f.DeployVariant(node, "") }

// DeployVariant is node's share of a variant's plan for machines: the
// file with the variant's pes and ports ("": the file as written).
func (f *File) DeployVariant(node, variant string) (*Deployment, error) {
	i := slices.IndexFunc(f.Nodes, func(n Node) bool { return n.Name == node })
	if i < 0 {
		names := make([]string, len(f.Nodes))
		for k, n := range f.Nodes {
			names[k] = n.Name
		}
		return nil, conf.Errorf("node", node, "not a node of %s (nodes: %v)", f.Path, names)
	}
	df := f
	if variant != "" {
		k := slices.IndexFunc(f.Variants, func(v Variant) bool { return v.Name == variant })
		if k < 0 {
			names := f.VariantNames()
			if len(names) == 0 {
				return nil, conf.Errorf("variant", variant, "%s has no variants", f.Path)
			}
			return nil, conf.Errorf("variant", variant, "not a variant of %s (variants: %v)", f.Path, names)
		}
		var err error
		if df, err = f.withVariant(k); err != nil {
			return nil, err
		}
	}
	p, err := newPlan(df, true)
	if err != nil {
		return nil, err
	}
	d := &Deployment{Node: df.Nodes[i], Variant: variant, Plan: p, Seed: f.Seed}
	for _, s := range p.Servers {
		if s.Node == node {
			d.Servers = append(d.Servers, s)
		}
	}
	for _, po := range p.Ports {
		if po.Node == node {
			d.Ports = append(d.Ports, po)
		}
	}
	for _, pe := range p.PEs {
		if pe.Node == node {
			d.PEs = append(d.PEs, pe)
		}
	}
	for _, fl := range p.Flows {
		if fl.Flow.From == node {
			d.Flows = append(d.Flows, fl)
		}
	}
	for _, l := range p.Links {
		if l.Delay == 0 && l.Loss == 0 {
			continue
		}
		for _, ep := range []lab.Endpoint{l.A, l.B} {
			if ep.Node == node {
				d.Netem = append(d.Netem, NetemPlan{Dev: ep.Dev, Delay: l.Delay, Loss: l.Loss})
			}
		}
	}
	return d, nil
}

// Apply configures the calling thread's namespace as this node: its
// devices' addresses, MTU and offloads, forwarding, routes (lab.ApplyNode)
// and netem for delay and loss. For a lab machine: it changes the real
// network of the namespace it runs in.
func (d *Deployment) Apply() error {
	if err := lab.ApplyNode(d.Plan.Spec, d.Node.Name); err != nil {
		return err
	}
	if len(d.Netem) == 0 {
		return nil
	}
	h, err := netlink.NewHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	for _, n := range d.Netem {
		l, err := h.LinkByName(n.Dev)
		if err != nil {
			return fmt.Errorf("netem on %s: %w", n.Dev, err)
		}
		q := netlink.NewNetem(netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xfe, 0), Parent: netlink.HANDLE_ROOT},
			netlink.NetemQdiscAttrs{Latency: uint32(n.Delay.Microseconds()), Loss: float32(n.Loss * 100), Limit: 100000})
		if err := h.QdiscReplace(q); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("netem on %s (delay %v, loss %g): this kernel has no netem (sch_netem): %w", n.Dev, n.Delay, n.Loss, err)
			}
			return fmt.Errorf("netem on %s (delay %v, loss %g): %w", n.Dev, n.Delay, n.Loss, err)
		}
	}
	return nil
}
