//go:build linux

package labfile

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/link"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/linkq"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pe"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/tcpflow"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Bounds of the schema.
const (
	// MaxLinks is the number of /24s in 198.18.0.0/15.
	MaxLinks = 512
	// MinLinkMTU and MaxLinkMTU bound a link's MTU (lab.LinkSpec's).
	MinLinkMTU = 68
	MaxLinkMTU = 65535
	// maxPinnedBits: a pinned subnet needs two host addresses, four with
	// a relay (two halves).
	maxPinnedBits      = 30
	maxPinnedRelayBits = 29
	// relayPrefix starts the names of the relay nodes the lab adds;
	// node names may not start with it.
	relayPrefix = "_"
)

var (
	kinds      = []string{KindHost, KindSwitch, KindPE}
	transports = []string{TransportRoCEv2, TransportUET, TransportTCP}
	roceCCs    = []string{CCDCQCN, CCNone}
	roceMTUs   = []int{256, 512, 1024, 2048, 4096}
)

// validate checks the file and computes its plan. It returns the first
// bad field as a *conf.Error.
func (f *File) validate() error {
	if f.Duration == 0 {
		f.Duration = DefaultDuration
	}
	if f.Duration < time.Millisecond || f.Duration > MaxStart {
		return conf.Errorf("duration", units.FormatDuration(f.Duration), "want 1ms..1h (default %s)", units.FormatDuration(DefaultDuration))
	}
	if err := f.expandFabric(); err != nil {
		return err
	}
	if len(f.Nodes) == 0 {
		return conf.Errorf("nodes", "", "want at least one node")
	}
	byName := map[string]int{}
	for i := range f.Nodes {
		n := &f.Nodes[i]
		p := conf.Index("nodes", i)
		if err := lab.CheckNodeName(n.Name); err != nil {
			return conf.Errorf(conf.Join(p, "name"), n.Name, "%v", err)
		}
		if strings.HasPrefix(n.Name, relayPrefix) {
			return conf.Errorf(conf.Join(p, "name"), n.Name, "names starting with %q are the relays the lab adds for delay and loss", relayPrefix)
		}
		if j, dup := byName[n.Name]; dup {
			return conf.Errorf(conf.Join(p, "name"), n.Name, "given twice (also nodes[%d])", j)
		}
		byName[n.Name] = i
		if !slices.Contains(kinds, n.Kind) {
			return conf.Errorf(conf.Join(p, "kind"), n.Kind, "want %s", orList(kinds))
		}
		if err := checkPEFields(p, n.Name, n.Kind, n.Decap, n.Agent); err != nil {
			return err
		}
		if q := n.HostQueue; q != nil {
			if n.Kind != KindHost {
				return conf.Errorf(conf.Join(p, "host_queue"), q.String(), "only a host's senders; %s is a %s", n.Name, n.Kind)
			}
			if *q != 0 && (*q < minHostQueue || *q > maxHostQueue) {
				return conf.Errorf(conf.Join(p, "host_queue"), q.String(), "want 0 (off) or %v..%v", minHostQueue, maxHostQueue)
			}
		}
		if n.TCPECN != "" {
			if n.Kind != KindHost {
				return conf.Errorf(conf.Join(p, "tcp_ecn"), n.TCPECN, "only a host's TCP connections; %s is a %s", n.Name, n.Kind)
			}
			if n.TCPECN != "on" && n.TCPECN != "off" {
				return conf.Errorf(conf.Join(p, "tcp_ecn"), n.TCPECN, "want on or off")
			}
		}
		if n.QuickAck && n.Kind != KindHost {
			return conf.Errorf(conf.Join(p, "quickack"), "true", "only a host's TCP ACKs; %s is a %s", n.Name, n.Kind)
		}
		if n.NP != "" {
			if n.Kind != KindHost {
				return conf.Errorf(conf.Join(p, "np"), n.NP, "only a host receives flows; %s is a %s", n.Name, n.Kind)
			}
			if n.NP != perf.NPKernel && n.NP != perf.NPAgent && n.NP != perf.NPOff {
				return conf.Errorf(conf.Join(p, "np"), n.NP, "want %s, %s or %s", perf.NPKernel, perf.NPAgent, perf.NPOff)
			}
		}
	}
	for i := range f.Nodes {
		n := &f.Nodes[i]
		p := conf.Join(conf.Index("nodes", i), "peer")
		if n.Kind != KindPE {
			if n.Peer != "" {
				return conf.Errorf(p, n.Peer, "only a pe has a peer; %s is a %s", n.Name, n.Kind)
			}
			continue
		}
		j, ok := byName[n.Peer]
		switch {
		case n.Peer == "":
			return conf.Errorf(p, "", "a pe needs its peer: the other pe of its tunnel")
		case !ok:
			return conf.Errorf(p, n.Peer, "no such node; nodes are %s", nodeNames(f.Nodes))
		case n.Peer == n.Name:
			return conf.Errorf(p, n.Peer, "a pe's peer is another pe, not itself")
		case f.Nodes[j].Kind != KindPE:
			return conf.Errorf(p, n.Peer, "is a %s; a pe's peer is a pe", f.Nodes[j].Kind)
		case f.Nodes[j].Peer != n.Name:
			return conf.Errorf(p, n.Peer, "%s's peer is %q; the two pes of a tunnel name each other", n.Peer, f.Nodes[j].Peer)
		}
	}

	if len(f.Links) > MaxLinks {
		return conf.Errorf("links", len(f.Links), "at most %d links (the /24s of 198.18.0.0/15)", MaxLinks)
	}
	for i := range f.Links {
		if err := f.checkLink(i, byName); err != nil {
			return err
		}
	}
	if err := f.checkReport(); err != nil {
		return err
	}
	if err := f.expandWorkload(byName); err != nil {
		return err
	}
	if len(f.Flows) > MaxFlows {
		return conf.Errorf("flows", len(f.Flows), "at most %d flows", MaxFlows)
	}
	for i := range f.Flows {
		if err := f.checkFlow(i, byName); err != nil {
			return err
		}
	}
	if err := f.checkVariants(); err != nil {
		return err
	}
	if err := checkTimescale(f.Timescale); err != nil {
		return err
	}
	if err := f.checkTune(); err != nil {
		return err
	}
	return f.planAll()
}

// checkTimescale checks a timescale's range.
func checkTimescale(k units.Timescale) error {
	if err := k.Validate(); err != nil {
		return conf.Errorf("timescale", k, "want 1..%d (the fabric k times slower; default 1)", units.MaxTimescale)
	}
	return nil
}

// planAll computes the plan of a checked file and of each variant.
func (f *File) planAll() error {
	if f.Tune != nil {
		// The nominal values come from the flows' paths: plan without
		// the specs that name them first.
		f.tuned, f.tunePass = nil, true
		p0, err := newPlan(f, false)
		f.tunePass = false
		if err != nil {
			return err
		}
		if f.tuned, err = f.nominalTune(p0); err != nil {
			return err
		}
	}
	p, err := newPlan(f, false)
	if err != nil {
		return err
	}
	for i := range f.Variants {
		vf, err := f.withVariant(i)
		if err != nil {
			return err
		}
		vp, err := newPlan(vf, false)
		if err != nil {
			var ce *conf.Error
			if errors.As(err, &ce) {
				ce.Allowed += fmt.Sprintf(" (in variant %s)", f.Variants[i].Name)
			}
			return err
		}
		p.Variants = append(p.Variants, VariantPlan{Name: f.Variants[i].Name, Plan: vp})
	}
	f.plan = p
	return f.checkGoals(p)
}

// withVariant is a copy of the file with variant i's node overrides
// applied, whose plan applies its ports.
func (f *File) withVariant(i int) (*File, error) {
	byName := map[string]int{}
	for j, n := range f.Nodes {
		byName[n.Name] = j
	}
	v := &f.Variants[i]
	vf := *f
	vf.Nodes = slices.Clone(f.Nodes)
	vf.variant, vf.variantIndex = v, i
	seen := map[string]int{}
	for j, o := range v.Nodes {
		p := conf.Index(conf.Join(conf.Index("variants", i), "nodes"), j)
		k, ok := byName[o.Name]
		switch {
		case !ok:
			return nil, conf.Errorf(conf.Join(p, "name"), o.Name, "no such node; nodes are %s", nodeNames(f.Nodes))
		case f.Nodes[k].Kind != KindPE:
			return nil, conf.Errorf(conf.Join(p, "name"), o.Name, "is a %s; a variant changes pes (decap, agent)", f.Nodes[k].Kind)
		}
		if prev, dup := seen[o.Name]; dup {
			return nil, conf.Errorf(conf.Join(p, "name"), o.Name, "given twice (also variants[%d].nodes[%d])", i, prev)
		}
		seen[o.Name] = j
		if err := checkPEFields(p, o.Name, KindPE, o.Decap, o.Agent); err != nil {
			return nil, err
		}
		n := &vf.Nodes[k]
		if o.Decap != "" {
			n.Decap = o.Decap
		}
		if o.Agent != nil {
			n.Agent = o.Agent
			if o.Agent.Mode == "none" {
				n.Agent = nil
			}
		}
	}
	if len(v.Flows) > 0 {
		vf.Flows = slices.Clone(f.Flows)
		if err := overrideFlows(conf.Join(conf.Index("variants", i), "flows"), v.Flows, vf.Flows); err != nil {
			return nil, err
		}
	}
	return &vf, nil
}

// overrideFlows applies a variant's flow overrides (at field) to flows.
func overrideFlows(field string, os []FlowOverride, flows []Flow) error {
	by := map[string]int{} // flow -> override
	for i, o := range os {
		p := conf.Index(field, i)
		var match []int
		switch {
		case (o.Name == "") == (o.Group == ""):
			return conf.Errorf(p, "", "give name (one flow) or group (its flows), not both or neither")
		case o.Name != "":
			if j := slices.IndexFunc(flows, func(fl Flow) bool { return fl.Name == o.Name }); j >= 0 {
				match = append(match, j)
			} else {
				return conf.Errorf(conf.Join(p, "name"), o.Name, "no such flow")
			}
		default:
			for j := range flows {
				if flows[j].Group == o.Group {
					match = append(match, j)
				}
			}
			if len(match) == 0 {
				return conf.Errorf(conf.Join(p, "group"), o.Group, "no flow is in this group")
			}
		}
		for _, j := range match {
			fl := &flows[j]
			if prev, dup := by[fl.Name]; dup {
				return conf.Errorf(p, "", "flow %s is given twice (also %s)", fl.Name, conf.Index(field, prev))
			}
			by[fl.Name] = i
			if o.CC == "" && o.LB == "" && o.Loss == "" {
				return conf.Errorf(p, "", "give cc, lb, loss or some of them: what the variant changes")
			}
			if o.Loss != "" {
				if fl.Transport != TransportUET {
					return conf.Errorf(conf.Join(p, "loss"), o.Loss, "flow %s is %s: loss is uet's", fl.Name, fl.Transport)
				}
				if _, err := pds.ParseLossInference(o.Loss); err != nil {
					return conf.Errorf(conf.Join(p, "loss"), o.Loss, "want %s", orList(pds.LossInferenceNames()))
				}
				fl.Loss = o.Loss
			}
			if o.LB != "" {
				if fl.Transport != TransportUET {
					return conf.Errorf(conf.Join(p, "lb"), o.LB, "flow %s is %s: lb is uet's", fl.Name, fl.Transport)
				}
				if _, err := lb.ParseKind(o.LB); err != nil && o.LB != "none" {
					return conf.Errorf(conf.Join(p, "lb"), o.LB, "want none, %s", orList(kindNames()))
				}
				fl.LB = o.LB
			}
			if o.CC != "" {
				if err := checkCC(fl.Transport, o.CC); err != nil {
					return conf.Errorf(conf.Join(p, "cc"), o.CC, "flow %s: %s", fl.Name, err.Allowed)
				}
				fl.CC = o.CC
				if fl.CC == CCDCQCN && fl.Profile == "" {
					fl.Profile = dcqcn.DefaultProfile
				}
			}
			if !lossFits(fl) {
				return conf.Errorf(p, "", "flow %s: loss sleek with cc %s: SLEEK's threshold is 1.5 congestion windows (cc nscc or both)", fl.Name, fl.CC)
			}
		}
	}
	return nil
}

// checkCC checks a congestion control for a transport; the error's
// Allowed says what is.
func checkCC(transport, cc string) *conf.Error {
	switch transport {
	case TransportTCP:
		if err := tcpflow.CheckCC(cc); err != nil {
			return conf.Errorf("cc", cc, "%v", err)
		}
	case TransportUET:
		if _, err := pds.ParseCCMode(cc); err != nil {
			return conf.Errorf("cc", cc, "want %s with transport uet", orList(pds.CCModeNames()))
		}
	default:
		if !slices.Contains(roceCCs, cc) {
			return conf.Errorf("cc", cc, "want %s with transport rocev2", orList(roceCCs))
		}
	}
	return nil
}

// checkPEFields checks a node's decap and agent (at path p).
func checkPEFields(p, name, kind, decap string, a *PEAgent) error {
	if kind != KindPE {
		if decap != "" {
			return conf.Errorf(conf.Join(p, "decap"), decap, "only a pe decapsulates; %s is a %s", name, kind)
		}
		if a != nil {
			return conf.Errorf(conf.Join(p, "agent"), "", "only a pe has an agent; %s is a %s", name, kind)
		}
		return nil
	}
	if decap != "" && decap != DecapRFC6040 && decap != DecapTwoThreshold {
		return conf.Errorf(conf.Join(p, "decap"), decap, "want %s or %s (default %s)", DecapRFC6040, DecapTwoThreshold, DecapRFC6040)
	}
	if a == nil {
		return nil
	}
	ap := conf.Join(p, "agent")
	switch a.Mode {
	case "none", "observe":
	case "rate":
		if a.LineRate == 0 {
			return conf.Errorf(conf.Join(ap, "line_rate"), "", "required with mode rate: the limiter's rate, where the agent starts")
		}
		if a.LineRate < qdisc.MinRate {
			return conf.Errorf(conf.Join(ap, "line_rate"), a.LineRate, "want at least %s (a port's minimum)", qdisc.MinRate)
		}
		if a.MinRate != 0 && (a.MinRate < qdisc.MinRate || a.MinRate >= a.LineRate) {
			return conf.Errorf(conf.Join(ap, "min_rate"), a.MinRate, "want %s..%s, below line_rate (default line_rate / 10)", qdisc.MinRate, a.LineRate)
		}
	case "reroute":
	default:
		return conf.Errorf(conf.Join(ap, "mode"), a.Mode, "want none, observe, rate or reroute")
	}
	if a.Mode != "rate" {
		for _, f := range []struct {
			field string
			set   bool
		}{{"line_rate", a.LineRate != 0}, {"min_rate", a.MinRate != 0}} {
			if f.set {
				return conf.Errorf(conf.Join(ap, f.field), "", "only with mode rate (the limiter's)")
			}
		}
	}
	if a.RTT < 0 || a.RTT > 10*time.Second {
		return conf.Errorf(conf.Join(ap, "rtt"), units.FormatDuration(a.RTT), "want 0..10s (default: twice the WAN links' delay)")
	}
	return nil
}

// checkAgent checks what pe.New will: a rate agent's reaction point (its
// timers at the RTT, its least rate) and a limiter that can be set there.
func checkAgent(c *pe.Config) error {
	if c.Mode != pe.RateLimit {
		return nil
	}
	minRate := c.MinRate
	if minRate == 0 {
		minRate = c.LineRate / 10
	}
	if minRate < qdisc.MinRate {
		return fmt.Errorf("min_rate %s (default line_rate / 10): want at least %s, the limiter port's minimum", minRate, qdisc.MinRate)
	}
	rtt := c.RTT
	if rtt == 0 {
		return fmt.Errorf("rtt: the pes' path has no delay to default it from; give rtt (over 1ms, the reaction point's min_time_between_cnps, up to 131ms)")
	}
	if err := pe.WANParams(c.LineRate, minRate, rtt).Validate(); err != nil {
		return fmt.Errorf("rtt %s (default: twice the delay between the pes) gives the reaction point %v", units.FormatDuration(rtt), err)
	}
	return nil
}

// config is the agent's host/pe configuration; wanRTT is the default RTT.
func (a *PEAgent) config(wanRTT time.Duration) *pe.Config {
	if a == nil || a.Mode == "none" {
		return nil
	}
	c := &pe.Config{Mode: pe.Observe, RTT: a.RTT}
	switch a.Mode {
	case "rate":
		c.Mode, c.LineRate, c.MinRate = pe.RateLimit, a.LineRate, a.MinRate
	case "reroute":
		c.Mode = pe.Reroute
	}
	if c.RTT == 0 && wanRTT > 0 {
		c.RTT = wanRTT
	}
	return c
}

// checkLink checks links[i] on its own.
func (f *File) checkLink(i int, byName map[string]int) error {
	l := &f.Links[i]
	p := conf.Index("links", i)
	var ends [2]string
	for k, raw := range []string{l.A, l.B} {
		fp := conf.Join(p, []string{"a", "b"}[k])
		node, dev, err := splitEnd(raw)
		if err != nil {
			return conf.Errorf(fp, raw, "%v", err)
		}
		if _, ok := byName[node]; !ok {
			return conf.Errorf(fp, raw, "no such node; nodes are %s", nodeNames(f.Nodes))
		}
		if dev != "" {
			if err := lab.CheckDevName(dev); err != nil {
				return conf.Errorf(fp, raw, "device: %v", err)
			}
		}
		ends[k] = node
	}
	if ends[0] == ends[1] {
		return conf.Errorf(conf.Join(p, "b"), l.B, "a link joins two different nodes (a is %s too)", ends[0])
	}
	if l.Rate != 0 {
		if f.kind(ends[0]) != KindSwitch && f.kind(ends[1]) != KindSwitch {
			return conf.Errorf(conf.Join(p, "rate"), l.Rate, "a rate is a switch port's, at the switch end(s); neither %s nor %s is a switch", ends[0], ends[1])
		}
		if l.Rate < qdisc.MinRate {
			return conf.Errorf(conf.Join(p, "rate"), l.Rate, "want at least %s (a port's minimum), or none", qdisc.MinRate)
		}
	}
	if l.Delay < 0 || l.Delay > link.MaxDelay {
		return conf.Errorf(conf.Join(p, "delay"), units.FormatDuration(l.Delay), "want 0..%s", units.FormatDuration(link.MaxDelay))
	}
	if l.Loss < 0 || l.Loss > 1 {
		return conf.Errorf(conf.Join(p, "loss"), l.Loss, "want a fraction 0..1 (0.01 drops 1 %%)")
	}
	if l.MTU != 0 && (l.MTU < MinLinkMTU || l.MTU > MaxLinkMTU) {
		return conf.Errorf(conf.Join(p, "mtu"), l.MTU, "want %d..%d (default %d)", MinLinkMTU, MaxLinkMTU, DefaultLinkMTU)
	}
	if s := l.Subnet; s.IsValid() {
		fp := conf.Join(p, "subnet")
		maxBits := maxPinnedBits
		if l.relayed() {
			maxBits = maxPinnedRelayBits
		}
		switch {
		case !s.Addr().Is4() || !lab.AddrRange4.Contains(s.Addr()) || s.Bits() < lab.AddrRange4.Bits():
			return conf.Errorf(fp, s, "want an IPv4 subnet inside %s", lab.AddrRange4)
		case s != s.Masked():
			return conf.Errorf(fp, s, "host bits set; did you mean %s?", s.Masked())
		case s.Bits() > maxBits:
			return conf.Errorf(fp, s, "want a /%d or shorter (two addresses per side%s)", maxBits, map[bool]string{true: ", two sides with a relay for delay or loss", false: ""}[l.relayed()])
		}
		for j := range i {
			if o := f.Links[j].Subnet; o.IsValid() && o.Overlaps(s) {
				return conf.Errorf(fp, s, "overlaps links[%d].subnet %s", j, o)
			}
		}
	}
	return nil
}

// relayed reports whether the link runs through a relay (delay, loss).
func (l *Link) relayed() bool { return l.Delay > 0 || l.Loss > 0 }

// checkReport checks report but watch, which needs the ports.
func (f *File) checkReport() error {
	iv := f.Report.Interval
	if iv != 0 && (iv < perf.MinInterval || iv > perf.MaxInterval) {
		return conf.Errorf("report.interval", units.FormatDuration(iv), "want %s..%s (default %s)",
			units.FormatDuration(perf.MinInterval), units.FormatDuration(perf.MaxInterval), units.FormatDuration(DefaultInterval))
	}
	return nil
}

// checkVariants checks the comparison's fields on their own (their ports
// are checked with the plan's) and fills runs and seed.
func (f *File) checkVariants() error {
	if f.Runs == 0 {
		f.Runs = 1
	}
	if f.Runs < 1 || f.Runs > MaxRuns {
		return conf.Errorf("runs", f.Runs, "want 1..%d (default 1)", MaxRuns)
	}
	if f.Seed == 0 {
		f.Seed = DefaultSeed
	}
	for i := range f.Variants {
		v := &f.Variants[i]
		p := conf.Join(conf.Index("variants", i), "name")
		if err := lab.CheckNodeName(v.Name); err != nil {
			return conf.Errorf(p, v.Name, "%v", err)
		}
		for j := range i {
			if f.Variants[j].Name == v.Name {
				return conf.Errorf(p, v.Name, "given twice (also variants[%d])", j)
			}
		}
	}
	return nil
}

// VariantNames are the variants in file order.
func (f *File) VariantNames() []string {
	out := make([]string, len(f.Variants))
	for i, v := range f.Variants {
		out[i] = v.Name
	}
	return out
}

// checkFlow checks flows[i] on its own and fills its defaults.
func (f *File) checkFlow(i int, byName map[string]int) error {
	fl := &f.Flows[i]
	p := conf.Index("flows", i)
	fp := func(field string) string { return conf.Join(p, field) }
	if fl.Name == "" {
		fl.Name = fmt.Sprintf("f%d", i+1)
	}
	if err := lab.CheckNodeName(fl.Name); err != nil {
		return conf.Errorf(fp("name"), fl.Name, "%v", err)
	}
	for j := range i {
		if f.Flows[j].Name == fl.Name {
			return conf.Errorf(fp("name"), fl.Name, "given twice (also flows[%d])", j)
		}
	}
	if fl.Group == "" {
		fl.Group = fl.Name
	}
	if err := lab.CheckNodeName(fl.Group); err != nil {
		return conf.Errorf(fp("group"), fl.Group, "%v", err)
	}
	for _, end := range []struct{ field, node string }{{"from", fl.From}, {"to", fl.To}} {
		j, ok := byName[end.node]
		switch {
		case end.node == "":
			return conf.Errorf(fp(end.field), "", "required: a host")
		case !ok:
			return conf.Errorf(fp(end.field), end.node, "no such node; nodes are %s", nodeNames(f.Nodes))
		case f.Nodes[j].Kind != KindHost:
			return conf.Errorf(fp(end.field), end.node, "is a %s; flows run between hosts (%s)", f.Nodes[j].Kind, f.hostNames())
		}
	}
	if fl.From == fl.To {
		return conf.Errorf(fp("to"), fl.To, "a flow goes to another host than its sender")
	}
	if fl.Transport == "" {
		fl.Transport = TransportRoCEv2
	}
	if f.Fabric != nil && f.Fabric.StoreAndForward && fl.Transport != TransportUET {
		return conf.Errorf(fp("transport"), fl.Transport, "uet on a fabric with store_and_forward: the endpoints add the hops' store-and-forward to what they receive, and RoCEv2's NP and RP and TCP run in the kernel, before it")
	}
	if f.Fabric != nil && f.Fabric.NIC && fl.Transport != TransportUET {
		return conf.Errorf(fp("transport"), fl.Transport, "uet on a fabric with nic: a host's port would sit on the device where RoCEv2's NP and RP and the host's link queue already run")
	}
	if !slices.Contains(transports, fl.Transport) {
		return conf.Errorf(fp("transport"), fl.Transport, "want %s", orList(transports))
	}
	uet := fl.Transport == TransportUET
	tcp := fl.Transport == TransportTCP
	only := func(field string, set bool, what string) error {
		if set {
			return conf.Errorf(fp(field), "", "%s only; this flow is %s/%s", what, fl.Transport, fl.CC)
		}
		return nil
	}
	if !tcp && fl.DSCP != 0 {
		return conf.Errorf(fp("dscp"), fl.DSCP, "tcp only: rocev2 and uet mark their own DSCPs")
	}
	if tcp {
		if fl.CC == "" {
			fl.CC = CCDCTCP
		}
		if err := tcpflow.CheckCC(fl.CC); err != nil {
			return conf.Errorf(fp("cc"), fl.CC, "%v", err)
		}
		for _, o := range []struct {
			field string
			set   bool
		}{{"profile", fl.Profile != ""}, {"knobs", len(fl.Knobs) > 0}, {"qps", fl.QPs != 0}, {"streams", fl.Streams != 0},
			{"lb", fl.LB != ""}, {"base_rtt", fl.BaseRTT != 0}, {"rto", fl.RTO != 0}, {"loss", fl.Loss != ""}, {"mtu", fl.MTU != 0}, {"verify", fl.Verify}, {"inflight", fl.Inflight != 0},
			{"line_rate", fl.LineRate != 0}, {"ppfc_max_pause", fl.PPFCMaxPause != 0}, {"ppfc_watchdog", fl.PPFCWatchdog != 0}, {"rp", fl.RP != ""}} {
			if o.set {
				return conf.Errorf(fp(o.field), "", "not for a tcp flow (one kernel connection: the kernel paces it, the links' MTUs set its segments)")
			}
		}
		if fl.DSCP < 0 || fl.DSCP > 63 {
			return conf.Errorf(fp("dscp"), fl.DSCP, "want 0..63")
		}
	} else if uet {
		if fl.CC == "" {
			fl.CC = pds.CCNSCC.String()
		}
		if _, err := pds.ParseCCMode(fl.CC); err != nil {
			return conf.Errorf(fp("cc"), fl.CC, "want %s with transport uet", orList(pds.CCModeNames()))
		}
		for _, o := range []struct {
			field string
			set   bool
		}{{"profile", fl.Profile != ""}, {"qps", fl.QPs != 0}, {"inflight", fl.Inflight != 0},
			{"ppfc_max_pause", fl.PPFCMaxPause != 0}, {"ppfc_watchdog", fl.PPFCWatchdog != 0}, {"rp", fl.RP != ""}} {
			if err := only(o.field, o.set, "rocev2"); err != nil {
				if o.field == "qps" {
					return conf.Errorf(fp("qps"), fl.QPs, "a uet flow has streams, not qps")
				}
				return err
			}
		}
		if fl.LB != "" && fl.LB != "none" {
			if _, err := lb.ParseKind(fl.LB); err != nil {
				return conf.Errorf(fp("lb"), fl.LB, "want none, %s", orList(kindNames()))
			}
		}
		if fl.BaseRTT == 0 {
			fl.BaseRTT = DefaultUETBaseRTT
			if fb := f.Fabric; fb != nil && fb.StoreAndForward {
				mtu := fl.MTU
				if mtu == 0 {
					mtu = min(4096, cmp.Or(fb.MTU, DefaultLinkMTU))
				}
				fl.BaseRTT = fb.UnloadedRTT(mtu)
			}
		}
		if fl.BaseRTT < perf.MinUETBaseRTT || fl.BaseRTT > perf.MaxUETBaseRTT {
			return conf.Errorf(fp("base_rtt"), units.FormatDuration(fl.BaseRTT), "want %s..%s (default %s)",
				units.FormatDuration(perf.MinUETBaseRTT), units.FormatDuration(perf.MaxUETBaseRTT), units.FormatDuration(DefaultUETBaseRTT))
		}
		if err := checkNSCCKnobs(fl, fp); err != nil {
			return err
		}
		if fl.RTO != 0 && (fl.RTO < pds.MinRTO || fl.RTO > pds.MaxRTO) {
			return conf.Errorf(fp("rto"), units.FormatDuration(fl.RTO), "want %s..%s (default 10ms)",
				units.FormatDuration(pds.MinRTO), units.FormatDuration(pds.MaxRTO))
		}
		if fl.Loss != "" {
			switch _, err := pds.ParseLossInference(fl.Loss); {
			case err != nil:
				return conf.Errorf(fp("loss"), fl.Loss, "want %s (default rack)", orList(pds.LossInferenceNames()))
			case !lossFits(fl):
				return conf.Errorf(fp("loss"), fl.Loss, "SLEEK's threshold is 1.5 congestion windows: cc nscc or both, not %s", fl.CC)
			}
		}
	} else {
		if fl.CC == "" {
			fl.CC = CCDCQCN
		}
		if !slices.Contains(roceCCs, fl.CC) {
			return conf.Errorf(fp("cc"), fl.CC, "want %s with transport rocev2", orList(roceCCs))
		}
		if fl.Streams != 0 {
			return conf.Errorf(fp("streams"), fl.Streams, "a rocev2 flow has qps, not streams")
		}
		for _, o := range []struct {
			field string
			set   bool
		}{{"lb", fl.LB != ""}, {"base_rtt", fl.BaseRTT != 0}, {"rto", fl.RTO != 0}, {"loss", fl.Loss != ""}} {
			if err := only(o.field, o.set, "uet"); err != nil {
				return err
			}
		}
		if fl.CC == CCDCQCN {
			if fl.Profile == "" {
				fl.Profile = dcqcn.DefaultProfile
			}
			if !slices.Contains(dcqcn.ProfileNames(), fl.Profile) {
				return conf.Errorf(fp("profile"), fl.Profile, "want %s", orList(dcqcn.ProfileNames()))
			}
			if fl.RP != "" && fl.RP != perf.RPKernel && fl.RP != perf.RPAgent && fl.RP != perf.RPOff {
				return conf.Errorf(fp("rp"), fl.RP, "want %s, %s or %s", perf.RPKernel, perf.RPAgent, perf.RPOff)
			}
		} else {
			if err := only("rp", fl.RP != "", "dcqcn"); err != nil {
				return err
			}
			if err := only("profile", fl.Profile != "", "dcqcn"); err != nil {
				return err
			}
			if err := only("knobs", len(fl.Knobs) > 0, "dcqcn"); err != nil {
				return err
			}
		}
	}
	streams, most, field := max(fl.QPs, fl.Streams), perf.MaxQPs, "qps"
	if uet {
		most, field = perf.MaxUETStreams, "streams"
	}
	if streams < 0 || streams > most {
		return conf.Errorf(fp(field), streams, "want 1..%d (default 1)", most)
	}
	if fl.Size != 0 && fl.Duration != 0 {
		return conf.Errorf(fp("duration"), units.FormatDuration(fl.Duration), "give size or duration, not both (size %s)", fl.Size)
	}
	if fl.Duration != 0 && (fl.Duration < time.Millisecond || fl.Duration > MaxStart) {
		return conf.Errorf(fp("duration"), units.FormatDuration(fl.Duration), "want 1ms..1h (default: the file's duration, %s)", units.FormatDuration(f.Duration))
	}
	if fl.Start < 0 || fl.Start > MaxStart {
		return conf.Errorf(fp("start"), units.FormatDuration(fl.Start), "want 0..1h from the run's start")
	}
	if err := f.checkSeries(fl, fp); err != nil {
		return err
	}
	if fl.LineRate != 0 && (fl.LineRate < units.Kbit || fl.LineRate > perf.MaxLineRate) {
		return conf.Errorf(fp("line_rate"), fl.LineRate, "want 1kbit..%s", perf.MaxLineRate)
	}
	if fl.MessageSize > perf.MaxMessageBytes {
		return conf.Errorf(fp("message_size"), fl.MessageSize, "want 1b..%s (default 64kb)", units.ByteSize(perf.MaxMessageBytes))
	}
	if fl.MTU != 0 {
		if uet && (fl.MTU < perf.MinUETMTU || fl.MTU > perf.MaxUETMTU) {
			return conf.Errorf(fp("mtu"), fl.MTU, "want %d..%d with transport uet (a full data packet's IP size)", perf.MinUETMTU, perf.MaxUETMTU)
		}
		if !uet && !slices.Contains(roceMTUs, fl.MTU) {
			return conf.Errorf(fp("mtu"), fl.MTU, "want 256, 512, 1024, 2048 or 4096 with transport rocev2")
		}
	}
	if fl.CC == CCDCQCN {
		// Every knob by its name, at the line rate DCQCN will scale to.
		rate := fl.LineRate
		if rate == 0 {
			rate = perf.DefaultLineRate
		}
		if _, err := dcqcn.New(fl.Profile, rate, SortedKnobs(fl.Knobs)...); err != nil {
			return DCQCNError(fp("profile"), fp("knobs"), err)
		}
	}
	return nil
}

// checkNSCCKnobs checks a uet flow's knobs as NSCC's (perf's nsccParams
// applies them to the same defaults), each named by its field.
func checkNSCCKnobs(fl *Flow, fp func(string) string) error {
	if len(fl.Knobs) == 0 {
		return nil
	}
	if m, _ := pds.ParseCCMode(fl.CC); m != pds.CCNSCC && m != pds.CCBoth {
		return conf.Errorf(fp("knobs"), "", "NSCC's knobs: cc nscc or both, not %s", fl.CC)
	}
	rate := fl.LineRate
	if rate == 0 {
		rate = perf.DefaultLineRate
	}
	mtu := fl.MTU
	if mtu == 0 {
		mtu = pds.DefaultConfig().MTU
	}
	p := nscc.LabParams(rate, fl.BaseRTT, mtu)
	for _, k := range SortedKnobs(fl.Knobs) {
		if err := p.Set(k.Name, k.Value); err != nil {
			return conf.Errorf(fp("knobs."+k.Name), k.Value, "%v", err)
		}
	}
	return nil
}

// checkSeries checks count, every, pause and size_max.
func (f *File) checkSeries(fl *Flow, fp func(string) string) error {
	if fl.Count == 0 {
		fl.Count = 1
	}
	if fl.Count < 1 || fl.Count > MaxCount {
		return conf.Errorf(fp("count"), fl.Count, "want 1..%d (default 1)", MaxCount)
	}
	if fl.Count > 1 && fl.Size == 0 {
		return conf.Errorf(fp("count"), fl.Count, "a series of instances needs size (each instance's FCT is measured)")
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"every", fl.Every}, {"pause", fl.Pause}} {
		if d.v == 0 {
			continue
		}
		if fl.Count == 1 {
			return conf.Errorf(fp(d.field), units.FormatDuration(d.v), "only with count above 1")
		}
		if d.v < 0 || d.v > MaxStart {
			return conf.Errorf(fp(d.field), units.FormatDuration(d.v), "want 0..1h")
		}
	}
	if fl.Every != 0 && fl.Pause != 0 {
		return conf.Errorf(fp("pause"), units.FormatDuration(fl.Pause), "give every or pause, not both (every %s)", units.FormatDuration(fl.Every))
	}
	if fl.SizeMax != 0 {
		if fl.Size == 0 {
			return conf.Errorf(fp("size_max"), fl.SizeMax, "needs size: sizes are drawn from size..size_max")
		}
		if fl.SizeMax <= fl.Size {
			return conf.Errorf(fp("size_max"), fl.SizeMax, "must be above size (%s)", fl.Size)
		}
	}
	return nil
}

// splitEnd splits a link end "node" or "node:dev".
func splitEnd(s string) (node, dev string, err error) {
	node, dev, hasDev := strings.Cut(s, ":")
	switch {
	case s == "":
		return "", "", fmt.Errorf("required: a node, or node:device")
	case node == "":
		return "", "", fmt.Errorf("want node or node:device")
	case hasDev && dev == "":
		return "", "", fmt.Errorf("empty device after ':'; want node or node:device")
	}
	return node, dev, nil
}

func (f *File) kind(node string) string {
	for _, n := range f.Nodes {
		if n.Name == node {
			return n.Kind
		}
	}
	return ""
}

func (f *File) hostNames() string {
	var out []string
	for _, n := range f.Nodes {
		if n.Kind == KindHost {
			out = append(out, n.Name)
		}
	}
	if len(out) == 0 {
		return "the file has none"
	}
	return "hosts are " + strings.Join(out, ", ")
}

func nodeNames(ns []Node) string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	return strings.Join(out, ", ")
}

func kindNames() []string {
	out := make([]string, len(lb.Kinds))
	for i, k := range lb.Kinds {
		out[i] = k.String()
	}
	return out
}

// orList words choices as "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// SortedKnobs are a YAML map of knobs (DCQCN's, NSCC's) in name order: a map's order
// is Go's, and a knob set later may depend on one set before it.
func SortedKnobs(m map[string]string) []cc.Knob {
	out := make([]cc.Knob, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, cc.Knob{Name: k, Value: m[k]})
	}
	return out
}

// DCQCNError is dcqcn.New's refusal at its YAML key: the profile's at
// profilePath, a knob's under knobsPath (the first, if several).
func DCQCNError(profilePath, knobsPath string, err error) error {
	kes := dcqcn.KnobErrors(err)
	if len(kes) == 0 {
		return conf.Errorf(knobsPath, "", "%v", err)
	}
	ke := kes[0]
	switch {
	case ke.Profile:
		return conf.Errorf(profilePath, ke.Value, "%s", ke.Reason)
	case ke.Unknown:
		return conf.Errorf(conf.Key(knobsPath, ke.Knob), "", "unknown knob (%s)", ke.Reason)
	case ke.Knob == "":
		return conf.Errorf(knobsPath, ke.Value, "%s", ke.Reason)
	}
	return conf.Errorf(conf.Key(knobsPath, ke.Knob), ke.Value, "%s", ke.Reason)
}

// A host's host_queue bound: at least a jumbo frame (a sender must get one
// packet out), at most a backlog's worth (1,000 packets of 64 KB would be
// no bound at all).
const (
	minHostQueue = 9 * units.KiB
	maxHostQueue = 64 * units.MiB
)

// HostQueueLimit is a host's host-queue bound (Node.HostQueue).
type HostQueueLimit struct {
	Host  string
	Limit units.ByteSize
}

// HostQueues are the bounds on the hosts' host queues, in the file's
// order: every host's but those a file turns off (host_queue: 0).
func (f *File) HostQueues() []HostQueueLimit {
	var out []HostQueueLimit
	for _, n := range f.Nodes {
		if n.Kind != KindHost {
			continue
		}
		lim := units.ByteSize(linkq.DefaultLimit)
		if n.HostQueue != nil {
			lim = *n.HostQueue
		}
		if lim > 0 {
			out = append(out, HostQueueLimit{Host: n.Name, Limit: lim})
		}
	}
	return out
}

// lossFits reports whether a uet flow's loss inference runs under its cc
// (pds.LossInference.Fits); an unset or unknown one is not this check's.
func lossFits(fl *Flow) bool {
	l, err := pds.ParseLossInference(fl.Loss)
	if err != nil {
		return true
	}
	cc, err := pds.ParseCCMode(fl.CC)
	return err != nil || l.Fits(cc)
}
