//go:build linux

package labfile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/fabriclab/fabriclab/host/htsim"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// HtsimRun is htsim's run of a lab's incast beside the lab's own
// (host/htsim, reference/htsim.md), or why there is none.
type HtsimRun struct {
	Result *htsim.Result `json:"result,omitempty"`
	// Error is one line: why htsim cannot run this lab, or how it failed.
	Error string `json:"error,omitempty"`
}

// HtsimScenario is the incast of the file (variant "": as written) as
// htsim runs it: its UET flows' senders, size, MTU, base RTT and
// congestion control, and the one port in front of their receiver, at
// the fabric's own rate (htsim has no timescale: its Scaled mapping, the
// default here, is its own slowing of its reference network to the lab's
// RTT), with the file's seed. htsim's round trip is the flows' base_rtt,
// all of it on its wire: links with delay may carry part of it in the lab
// too (the same for every flow, at most base_rtt), and should: a path
// whose wire is much shorter than base_rtt holds less in flight and
// hides NSCC's queueing delay (the examples' trimming incasts). A lab
// htsim cannot express gets an error of one line saying why.
func (f *File) HtsimScenario(variant string) (htsim.Scenario, error) {
	p, err := f.variantPlan(variant)
	if err != nil {
		return htsim.Scenario{}, err
	}
	return f.htsimScenario(p)
}

// variantPlan is the plan of a variant ("": the file as written).
func (f *File) variantPlan(variant string) (*Plan, error) {
	if f == nil || f.plan == nil {
		return nil, errors.New("labfile: needs a File from Load or Parse")
	}
	if variant == "" {
		return f.plan, nil
	}
	i := slices.Index(f.VariantNames(), variant)
	if i < 0 {
		return nil, fmt.Errorf("labfile: %s has no variant %q; its variants are %s", f.RunName(), variant, orList(f.VariantNames()))
	}
	return f.plan.Variants[i].Plan, nil
}

// errNoHtsim words why htsim cannot run a lab.
func errNoHtsim(format string, args ...any) error {
	return fmt.Errorf("htsim cannot run this lab: "+format, args...)
}

func (f *File) htsimScenario(p *Plan) (htsim.Scenario, error) {
	var s htsim.Scenario
	if len(p.Flows) == 0 {
		return s, errNoHtsim("it has no flows")
	}
	first := &p.Flows[0]
	for i := range p.Flows {
		fp := &p.Flows[i]
		fl, c := fp.Flow, &fp.Client
		var why string
		switch {
		case fl.Transport != TransportUET:
			why = fmt.Sprintf("flow %s is %s; htsim runs UET", fl.Name, fl.Transport)
		case fl.Size == 0:
			why = fmt.Sprintf("flow %s is timed; htsim's flows are sized", fl.Name)
		case fl.Count != 1 || fl.SizeMax != 0:
			why = fmt.Sprintf("flow %s is a series; htsim runs one flow per sender", fl.Name)
		case fl.CC == CCNone:
			why = fmt.Sprintf("flow %s has cc none; htsim runs nscc, rccc or both", fl.Name)
		case c.QPs > 1:
			why = fmt.Sprintf("flow %s has %d streams; htsim runs one per sender", fl.Name, c.QPs)
		case c.LB != 0:
			why = fmt.Sprintf("flow %s balances over entropies (lb %s); the mapping is one path per sender", fl.Name, c.LB)
		case fl.To != first.Flow.To:
			why = fmt.Sprintf("flows %s and %s go to %s and %s; htsim runs an N → 1 incast", first.Flow.Name, fl.Name, first.Flow.To, fl.To)
		case fl.Size != first.Flow.Size:
			why = fmt.Sprintf("flows %s and %s differ in size (%s, %s); htsim's senders send the same", first.Flow.Name, fl.Name, first.Flow.Size, fl.Size)
		case fp.Start != first.Start:
			why = fmt.Sprintf("flows %s and %s start at different times; htsim starts every sender at once", first.Flow.Name, fl.Name)
		case fl.CC != first.Flow.CC:
			why = fmt.Sprintf("flows %s and %s run %s and %s; htsim runs one congestion control", first.Flow.Name, fl.Name, first.Flow.CC, fl.CC)
		case !maps.Equal(fl.Knobs, first.Flow.Knobs):
			why = fmt.Sprintf("flows %s and %s differ in NSCC's knobs; htsim runs one set", first.Flow.Name, fl.Name)
		case c.MTU != first.Client.MTU || c.BaseRTT != first.Client.BaseRTT:
			why = fmt.Sprintf("flows %s and %s differ in mtu or base_rtt; htsim has one of each", first.Flow.Name, fl.Name)
		case len(fp.Ports) != 1 || fp.Ports[0] != first.Ports[0]:
			why = fmt.Sprintf("flow %s crosses %d ports; the mapping has one, in front of the receiver, that every flow shares", fl.Name, len(fp.Ports))
		case fp.BaseRTT != first.BaseRTT:
			why = fmt.Sprintf("flows %s and %s's paths have %v and %v of link delay; htsim's senders share one round trip",
				first.Flow.Name, fl.Name, c.Timescale.Fabric(first.BaseRTT), c.Timescale.Fabric(fp.BaseRTT))
		case c.Timescale.Fabric(fp.BaseRTT) > c.BaseRTT:
			why = fmt.Sprintf("flow %s's path has %v of link delay, over its base_rtt %v: htsim's round trip is base_rtt, its wire included",
				fl.Name, c.Timescale.Fabric(fp.BaseRTT), c.BaseRTT)
		}
		if why != "" {
			return s, errNoHtsim("%s", why)
		}
	}
	for i, l := range f.Links {
		if l.Loss > 0 {
			return s, errNoHtsim("links[%d] drops %g of the packets; htsim's links lose none", i, l.Loss)
		}
	}
	po := &p.Ports[first.Ports[0]]
	if po.Limiter {
		return s, errNoHtsim("the flows' port %s is a pe agent's limiter", po.Name)
	}
	rate := f.Links[po.Link].Rate // the fabric's: htsim has no timescale
	for _, fp := range p.Flows {
		if lr := fp.Client.LineRate; lr != rate {
			return s, errNoHtsim("the senders' line rate (%s's %s) is not the port's %s; htsim's links run at one rate", fp.Flow.Name, lr, rate)
		}
	}
	class := po.Config.DSCPClass[first.Client.DSCP]
	cc := &po.Config.Classes[class]
	s = htsim.Scenario{Senders: len(p.Flows), FlowBytes: first.Flow.Size, Rate: rate, MTUBytes: first.Client.MTU,
		BaseRTT: first.Client.BaseRTT, PortQueue: htsim.PortQueue{LimitBytes: cc.LimitBytes}, Trim: cc.TrimBytes > 0, TrimBytes: cc.TrimBytes,
		CC: first.Client.UETCC, Seed: int(f.Seed), Mapping: htsim.Scaled}
	for _, k := range SortedKnobs(first.Flow.Knobs) {
		if k.Name != "target_qdelay" {
			return s, errNoHtsim("flow %s sets NSCC's %s; htsim takes a flag for target_qdelay alone", first.Flow.Name, k)
		}
		s.TargetQDelay, _ = units.ParseDuration(k.Value) // checked
	}
	switch {
	case cc.ECN == qdisc.ECNWRED && cc.MaxP == 1:
		s.MinThBytes, s.MaxThBytes = cc.MinThBytes, cc.MaxThBytes
	case cc.ECN == qdisc.ECNWRED:
		return s, errNoHtsim("port %s's class %d marks with WRED up to p %g at max_th; htsim's marking rises to 1 there (p=1 maps)", po.Name, class, cc.MaxP)
	case cc.ECN == qdisc.ECNStep:
		s.MinThBytes, s.MaxThBytes = cc.MinThBytes, cc.MinThBytes
	default:
		return s, errNoHtsim("port %s's class %d marks with %s; htsim marks between two thresholds (wred with p=1, or step)", po.Name, class, cc.ECN)
	}
	if err := s.Validate(); err != nil {
		return s, errNoHtsim("%s", oneLine(err))
	}
	return s, nil
}

// runHtsim runs the incast of a plan in htsim, or says why not.
func (f *File) runHtsim(ctx context.Context, p *Plan, r *htsim.Runner) *HtsimRun {
	s, err := f.htsimScenario(p)
	if err != nil {
		return &HtsimRun{Error: err.Error()}
	}
	res, err := r.Run(ctx, s)
	if err != nil {
		return &HtsimRun{Error: oneLine(err)}
	}
	return &HtsimRun{Result: &res}
}

// line is htsim's row beside the lab's incast: its ratios over its
// own ideal (the same definition at its own header size), its queue, its
// trims.
func (h *HtsimRun) line() string {
	if h == nil {
		return ""
	}
	if h.Result == nil {
		return h.Error
	}
	r := h.Result
	s := &r.Plan.Scenario
	return fmt.Sprintf("htsim (%s, seed %d, %s): tail %.3f × ideal, mean %.3f; queue p50 %.2f p99 %.2f BDP; %d trimmed, %d retransmits",
		s.Mapping, s.Seed, s.CC, r.TailOverIdeal, r.MeanOverIdeal, r.Queue.P50BDPs, r.Queue.P99BDPs, r.Counters.NACKs, r.Counters.Retransmits)
}
