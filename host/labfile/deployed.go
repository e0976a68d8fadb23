package labfile

import (
	"fmt"
	"net/netip"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/qdisc"
)

// Deployed is what the lab servers running a file report (fabriclab plan
// -apply, a fabriclabd per node): each port's counters by its name
// (switch:dev), and each rocev2 flow's QP counters summed, at its sender
// and at its receiver, by flow name. host/daemon reads it from their
// metrics.
type Deployed struct {
	Ports     map[string]*qdisc.Stats
	Senders   map[string]agent.Counters
	Receivers map[string]agent.Counters
}

// DeployedFlow is where a deployed rocev2 flow's counters are: its sender
// node (its QPs carry the flow's name) and its receiver node's server,
// whose QPs have the sender's address for peer.
type DeployedFlow struct {
	Name, From, To string
	Sender         netip.Addr
	Server         netip.AddrPort
}

// DeployedFlows lists the variant's rocev2 flows as the lab servers run
// them ("": the file as written).
func (f *File) DeployedFlows(variant string) ([]DeployedFlow, []PortPlan, error) {
	p, err := f.deployedPlan(variant)
	if err != nil {
		return nil, nil, err
	}
	var out []DeployedFlow
	for i := range p.Flows {
		fp := &p.Flows[i]
		if fp.Flow.Transport != TransportRoCEv2 {
			continue
		}
		sp := &p.Servers[fp.Server]
		out = append(out, DeployedFlow{Name: fp.Flow.Name, From: fp.Flow.From, To: fp.Flow.To, Sender: p.Addrs[fp.Flow.From], Server: sp.Addr})
	}
	return out, p.Ports, nil
}

func (f *File) deployedPlan(variant string) (*Plan, error) {
	if len(f.Nodes) == 0 {
		return nil, fmt.Errorf("labfile: %s has no nodes", f.RunName())
	}
	d, err := f.DeployVariant(f.Nodes[0].Name, variant)
	if err != nil {
		return nil, err
	}
	return d.Plan, nil
}

// FlowDeployed is the state of a flow of DeployedResult: its counters are
// the lab servers' daemons'.
const FlowDeployed = "deployed"

// DeployedResult is a Result Check judges, of a file running on lab
// servers: the ports and rocev2 flows of its variant's plan with the
// counters d holds. A port or flow d lacks is left without counters (the
// check says so for the flows that cross it).
func (f *File) DeployedResult(variant string, d Deployed) (*Result, error) {
	p, err := f.deployedPlan(variant)
	if err != nil {
		return nil, err
	}
	res := &Result{Schema: ResultSchema, Name: f.RunName(), File: f.Path, Variant: variant, RunID: "deployed", Timescale: p.Timescale.K()}
	for i := range p.Ports {
		pp := &p.Ports[i]
		pr := PortResult{Name: pp.Name, Node: pp.Node, Dev: pp.Dev, RateBps: uint64(pp.Config.Rate), Watched: pp.Watch, Config: &pp.Config}
		if st := d.Ports[pp.Name]; st != nil {
			pr.fill(st)
		} else {
			pr.Error = "no counters from " + pp.Node
		}
		res.Ports = append(res.Ports, pr)
	}
	for i := range p.Flows {
		fp := &p.Flows[i]
		fl := fp.Flow
		out := FlowResult{Name: fl.Name, Group: fl.Group, From: fl.From, To: fl.To, Transport: fl.Transport, CC: fl.CC, State: FlowDeployed}
		p.fillPath(&out, fp)
		if fl.Transport == TransportRoCEv2 {
			snd, rcv := d.Senders[fl.Name], d.Receivers[fl.Name]
			out.TxPackets, out.CNPHandled, out.CNPIgnored = snd.TxPackets, snd.RPCNPHandled, snd.RPCNPIgnored
			out.CEArrived, out.CNPSent = rcv.NPECNMarkedRoCEPackets, rcv.NPCNPSent
			out.Bytes = snd.AckedBytes
		}
		res.Flows = append(res.Flows, out)
	}
	res.Check = Check(res)
	return res, nil
}
