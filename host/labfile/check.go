package labfile

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The three layers check (seed 000, "What can go wrong"): DCQCN's loop
// runs through the switch that marks (CP), the receiver that turns CE
// into CNPs (NP) and the sender that cuts its rate on a CNP (RP); "any one
// missing and the control loop is silent while PFC keeps firing". Check
// reads a run's counters along each rocev2 flow's path and names the
// first silent layer, citing the counters behind the verdict. It never
// guesses: a flow whose path saw no congestion is idle, not healthy.
//
// UET's NSCC loop has the same three layers (seed 004): the switch
// marks, the target echoes CE in its ACKs' M flag (the NP's part), and
// the source's NSCC cuts its window on an echo that comes with a queueing
// delay above its target (the RP's part); an echo under the target is
// left to load balancing by design (NSCC's quadrants, UET spec 3.6.13).

// Layer is a part of the loop a verdict names.
type Layer string

const (
	LayerCP   Layer = "cp"   // the switch ports on the data path: marking
	LayerPath Layer = "path" // DSCP and ECN between the sender and the receiver
	LayerNP   Layer = "np"   // the receiver: CE arrivals into CNPs
	LayerRP   Layer = "rp"   // the sender: CNPs into rate cuts
)

// Kinds of verdicts.
const (
	CheckOK        = "ok"         // every layer acted
	CheckIdle      = "idle"       // no congestion on the path: nothing to judge
	CheckNotJudged = "not-judged" // not a rocev2 DCQCN flow, or no counters
	// Path.
	CheckDSCPChanged = "dscp-changed" // the flow's packets left its class between two hops
	CheckECNCleared  = "ecn-cleared"  // ECT or CE lost between hops
	CheckNotECT      = "not-ect"      // the sender's packets arrive Not-ECT
	// CP.
	CheckNoMarks        = "no-marks"        // queue past the marking threshold, no CE
	CheckMarkingOff     = "marking-off"     // the class does not mark (ecn off)
	CheckThresholdsHigh = "thresholds-high" // PPFC or drops fire while marks are few
	// NP.
	CheckNPSilent       = "np-silent"        // CE arrives, no CNP sent
	CheckCNPClassShared = "cnp-class-shared" // CNPs queue with data on the way back
	CheckEchoSilent     = "echo-silent"      // UET: CE arrives at the target, no ACK echoes it
	// RP.
	CheckRPDisabled = "rp-disabled"  // CNPs arrive, none handled
	CheckCNPsLost   = "cnps-lost"    // CNPs sent, too few arrive
	CheckNSCCNoCuts = "nscc-no-cuts" // UET: echoes above NSCC's target delay, no decrease
)

// Thresholds of the verdicts that compare counts.
const (
	// MarksPerSafetyEvent: a hop whose class sent PPFC stops or dropped
	// packets must have marked at least this many packets per such event,
	// or its thresholds are too high: ECN "fires before PFC by design"
	// (seed 000), so a healthy class marks far more than it stops.
	MarksPerSafetyEvent = 10
	// CNPArrivalShare is the share of the CNPs sent that must reach the
	// sender (handled or ignored); fewer are lost on the way back.
	CNPArrivalShare = 0.5
	// FlowShare is the share of a flow's packets a hop's class must have
	// seen to count as the flow's: fewer, and the flow was not there.
	FlowShare = 0.5
	// MinCounted is the least a count must be for its absence elsewhere
	// to mean something: CE marks this flow's share of a class should
	// have had before "none arrived" is a verdict, CNPs sent before "too
	// few arrived" is (a live lab's CNPs in flight, a light flow's luck).
	MinCounted = 10
	// NSCCMinAboveTarget is the echoes NSCC must have taken with the
	// queueing delay above its target before no decrease is a verdict:
	// NSCC cuts only when its average delay passes the target, an
	// average of gain 0.0125 by default (nscc.Params.DelayAlpha), which
	// takes on the order of 2/0.0125 such ACKs to climb from far below.
	NSCCMinAboveTarget = 160
	// UnmarkedQueueBytes is where a class that does not mark (ecn off)
	// counts as congested: the seed's lowest typical min_th.
	UnmarkedQueueBytes = 50 * units.KiB
)

// CheckSchema is check.json's schema.
const CheckSchema = "fabriclab.check/1"

// CheckReport is Check's verdict on a run, one per flow.
type CheckReport struct {
	Schema string      `json:"schema"`
	Run    string      `json:"run"`
	Flows  []FlowCheck `json:"flows"`
}

// FlowCheck is one flow's verdict: Layer the silent layer ("" when the
// loop ran, was idle or was not judged), Kind what was found, Hop the
// port or the pair of ports it is at, Says the seed's words, Evidence the
// counters behind it.
type FlowCheck struct {
	Flow     string     `json:"flow"`
	Layer    Layer      `json:"layer,omitempty"`
	Kind     string     `json:"kind"`
	Hop      string     `json:"hop,omitempty"`
	Says     string     `json:"says"`
	Evidence []Evidence `json:"evidence"`
}

// Evidence is a counter a verdict cites: where (a port's class, the
// receiver, the sender), its name and value.
type Evidence struct {
	Where   string `json:"where"`
	Counter string `json:"counter"`
	Value   uint64 `json:"value"`
}

func (e Evidence) String() string { return fmt.Sprintf("%s %s %d", e.Where, e.Counter, e.Value) }

// Silent lists the layers a verdict names, once each, in loop order.
func (c *CheckReport) Silent() []Layer {
	var out []Layer
	for _, l := range []Layer{LayerCP, LayerPath, LayerNP, LayerRP} {
		for _, f := range c.Flows {
			if f.Layer == l {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// Check judges each rocev2 and uet flow of a run (seed 000's three
// layers; NSCC's for uet).
func Check(res *Result) *CheckReport {
	rep := &CheckReport{Schema: CheckSchema, Run: res.RunID}
	ports := map[string]*PortResult{}
	for i := range res.Ports {
		ports[res.Ports[i].Name] = &res.Ports[i]
	}
	for i := range res.Flows {
		rep.Flows = append(rep.Flows, checkFlow(&res.Flows[i], ports))
	}
	return rep
}

// hopView is a port's class on a flow's data path.
type hopView struct {
	name  string // port and class, for evidence
	port  string
	cfg   *qdisc.ClassConfig
	st    *qdisc.ClassStats
	class int
	rate  units.Rate // the class's drain rate
	// branch is the hop's ECMP group (FlowHop.Branch), 0 for none;
	// group is, for one, the sum of the class's arrivals over the
	// group's hops: the flow's packets cross one of them.
	branch int
	group  qdisc.ClassStats
	// leastMarked is, for a hop of an ECMP group, the fewest marks of
	// the group's ports.
	leastMarked uint64
}

func (h *hopView) arrivals() uint64 { return arrived(h.st) }

// arrivedAt is the class's stats the path layer judges: the hop's own,
// or its ECMP group's sum.
func (h *hopView) arrivedAt() *qdisc.ClassStats {
	if h.branch != 0 {
		return &h.group
	}
	return h.st
}

// arrived is a class's arrivals, every ECN codepoint.
func arrived(cs *qdisc.ClassStats) uint64 {
	return cs.ArrivedNotECT + cs.ArrivedECT0 + cs.ArrivedECT1 + cs.ArrivedCE
}

// busiestOther is the port's class, other than the flow's, that took the
// most packets.
func (h *hopView) busiestOther(ports map[string]*PortResult) (class int, n uint64) {
	pr := ports[h.port]
	for c := range pr.Stats.Classes {
		if a := arrived(&pr.Stats.Classes[c]); c != h.class && a > n {
			class, n = c, a
		}
	}
	return class, n
}

func (h *hopView) safety() uint64 { return h.st.PPFCStopsSent + h.st.DroppedPackets() }

// queueBytes is the most the class held: its maximum backlog, or where a
// window of counters has none (daemon.Delta), the bytes its p99 sojourn
// takes to drain.
func (h *hopView) queueBytes() uint64 {
	if h.st.MaxBacklogBytes > 0 {
		return h.st.MaxBacklogBytes
	}
	return uint64(h.st.Sojourn.Quantile(0.99).Seconds() * float64(h.rate) / 8)
}

// queueEv cites queueBytes by what it is.
func (h *hopView) queueEv() Evidence {
	if h.st.MaxBacklogBytes > 0 {
		return Evidence{h.name, "max_backlog_bytes", h.st.MaxBacklogBytes}
	}
	return Evidence{h.name, "sojourn_p99_as_bytes", h.queueBytes()}
}

// congested says the class's queue went past where its marking starts.
func (h *hopView) congested() bool {
	c := h.cfg
	switch c.ECN {
	case qdisc.ECNStep, qdisc.ECNWRED:
		// Past min_th, and long enough that the configured probability
		// expects marks: a brief excursion under WRED's low early
		// probability may rightly mark nothing.
		e, ok := h.expectedMarks()
		return h.queueBytes() > uint64(c.MinThBytes) && (!ok || e >= MinExpectedMarks)
	case qdisc.ECNTwoThreshold:
		return h.queueBytes() > uint64(c.TwoThreshold.T1Bytes)
	case qdisc.ECNTCN, qdisc.ECNCoDel, qdisc.ECNSharp:
		target := c.InsTarget
		if c.ECN == qdisc.ECNCoDel {
			target = c.Target
		}
		if c.QueueSignal {
			return h.queueBytes() > uint64(c.InsTargetBytes)
		}
		return target > 0 && h.st.Sojourn.Quantile(0.99) > target
	}
	// ecn off: the limit or PPFC is all there is.
	return h.safety() > 0 || h.queueBytes() > uint64(UnmarkedQueueBytes)
}

// MinExpectedMarks is the marks a step or WRED class's configured
// probability must expect, over the backlog its ECN-capable arrivals
// found, before marking none says its marking is broken: with 5
// expected, none happens by chance under 1 % of the time (e^-5).
const MinExpectedMarks = 5

// expectedMarks is the fewest marks the class's configuration expects
// for the backlog its ECN-capable arrivals found (qdisc.MarkingCurve:
// each bin's arrivals at its lowest configured probability); ok is false
// without a curve.
func (h *hopView) expectedMarks() (e float64, ok bool) {
	if h.st.Curve.BinBytes == 0 {
		return 0, false
	}
	for _, r := range h.st.Curve.Compare(h.cfg) {
		e += float64(r.Arrivals) * r.ConfLo
	}
	return e, true
}

func (h *hopView) threshold() string {
	c := h.cfg
	switch c.ECN {
	case qdisc.ECNStep, qdisc.ECNWRED:
		return "min_th " + c.MinThBytes.String()
	case qdisc.ECNTwoThreshold:
		return "t1 " + c.TwoThreshold.T1Bytes.String()
	case qdisc.ECNCoDel:
		return "target " + c.Target.String()
	}
	if c.QueueSignal {
		return "ins_target " + c.InsTargetBytes.String()
	}
	return "ins_target " + c.InsTarget.String()
}

// loop is the congestion loop a flow's counters are judged against.
type loop int

const (
	loopNone  loop = iota
	loopDCQCN      // rocev2, cc dcqcn: CNPs
	loopNSCC       // uet, cc nscc or both: ECN echoes in ACKs
	loopTCP        // tcp: ECE echoes, the kernel's reductions
)

func loopOf(f *FlowResult) loop {
	switch {
	case f.Transport == TransportRoCEv2 && (f.CC == "" || f.CC == CCDCQCN):
		return loopDCQCN
	case f.Transport == TransportUET && (f.CC == "" || f.CC == "nscc" || f.CC == "both"):
		return loopNSCC
	case f.Transport == TransportTCP:
		return loopTCP
	}
	return loopNone
}

func checkFlow(f *FlowResult, ports map[string]*PortResult) FlowCheck {
	fc := FlowCheck{Flow: f.Name, Kind: CheckNotJudged}
	lp := loopOf(f)
	switch {
	case lp == loopNone && f.Transport == TransportUET:
		fc.Says = fmt.Sprintf("a uet flow with cc %s: ECN drives no window there (RCCC's credit, or none); the check judges NSCC's loop", ccName(f.CC))
		return fc
	case lp == loopNone:
		fc.Says = fmt.Sprintf("a %s flow with cc %s: the check judges rocev2 flows under DCQCN, uet flows under NSCC and tcp flows", f.Transport, ccName(f.CC))
		return fc
	case f.State == FlowDeployed && lp != loopDCQCN:
		// The daemons count a uet flow per PDC and a tcp flow per
		// finished connection: neither adds up to a window's volume the
		// ports' counters can be set against.
		fc.Says = fmt.Sprintf("a %s flow on lab servers: the daemons' counters judge rocev2 flows; judge this one in namespaces (fabriclab check FILE)", f.Transport)
		return fc
	case lp == loopNSCC && f.TxPackets == 0:
		fc.Says = "no packet counts from the flow's source: nothing to judge its path by"
		return fc
	case lp == loopNSCC && f.NoTargetCounts:
		fc.Says = "the target's counters did not arrive: its CE arrivals are unknown"
		return fc
	case lp == loopTCP && f.Bytes == 0:
		fc.Says = "no bytes delivered, or no counters from the flow's sender: nothing to judge its path by"
		return fc
	}
	var hops []hopView
	for _, h := range f.Path {
		pr := ports[h.Port]
		if pr == nil || pr.Stats == nil || pr.Config == nil || h.Class >= len(pr.Stats.Classes) {
			fc.Says = fmt.Sprintf("no counters for port %s", h.Port)
			return fc
		}
		rate := pr.Config.Classes[h.Class].Rate
		if rate == 0 {
			rate = pr.Config.Rate
		}
		hops = append(hops, hopView{name: fmt.Sprintf("%s class %d", h.Port, h.Class), port: h.Port,
			cfg: &pr.Config.Classes[h.Class], st: &pr.Stats.Classes[h.Class], class: h.Class, rate: rate, branch: h.Branch})
	}
	// An ECMP group's hops are judged on their sum (arrivedAt).
	for i := range hops {
		hops[i].leastMarked = hops[i].st.CEMarked()
		for j := range hops {
			if b := hops[i].branch; b != 0 && hops[j].branch == b {
				hops[i].leastMarked = min(hops[i].leastMarked, hops[j].st.CEMarked())
			}
			if b := hops[i].branch; b != 0 && hops[j].branch == b {
				g, st := &hops[i].group, hops[j].st
				g.ArrivedNotECT += st.ArrivedNotECT
				g.ArrivedECT0 += st.ArrivedECT0
				g.ArrivedECT1 += st.ArrivedECT1
				g.ArrivedCE += st.ArrivedCE
				g.EnqueuedBytes += st.EnqueuedBytes
				g.CEMarkedECT0 += st.CEMarkedECT0
				g.CEMarkedECT1 += st.CEMarkedECT1
			}
		}
	}
	if len(hops) == 0 {
		fc.Says = "the flow crosses no port of the lab: no switch to mark"
		return fc
	}
	sent := f.TxPackets
	vol := flowVolume{packets: sent}
	if lp == loopTCP {
		// TCP's counts are segments and bytes; a port's are what the
		// hosts' stacks hand it (GSO runs): the flow is compared with a
		// class in bytes, and its share of a class's packets is its
		// share of the bytes.
		vol = flowVolume{bytes: f.Bytes}
	}
	recv := Evidence{"receiver " + f.To, "np_ecn_marked_roce_packets", f.CEArrived}
	ceIn := f.CEArrived
	if lp == loopNSCC {
		recv, ceIn = Evidence{"target " + f.To, "ce_received", f.CEReceived}, f.CEReceived
	}
	cnps := Evidence{"receiver " + f.To, "np_cnp_sent", f.CNPSent}
	handled := Evidence{"sender " + f.From, "rp_cnp_handled", f.CNPHandled}
	ignored := Evidence{"sender " + f.From, "rp_cnp_ignored", f.CNPIgnored}
	silent := func(l Layer, kind, hop, says string, ev ...Evidence) FlowCheck {
		fc.Layer, fc.Kind, fc.Hop, fc.Says, fc.Evidence = l, kind, hop, says, ev
		return fc
	}

	// The path: each hop's class must have seen the flow's packets, ECN-capable.
	sentEv := Evidence{"sender " + f.From, "tx_packets", sent}
	if lp == loopTCP {
		sentEv = Evidence{"sender " + f.From, "bytes", f.Bytes}
	}
	for i := range hops {
		h := &hops[i]
		from := "the sender " + f.From
		if i > 0 {
			from = hops[i-1].port
		}
		between := from + " → " + h.port
		at := h.arrivedAt()
		if h.branch != 0 {
			between = from + " → " + h.port + " or its ECMP alternatives"
		}
		if vol.notThere(at) {
			ev := []Evidence{sentEv, {h.name, "arrived_packets", h.arrivals()}}
			if lp == loopTCP {
				ev[1] = Evidence{h.name, "arrived_bytes", arrivedBytes(at)}
			}
			// Where the packets went instead, and a remark on the way.
			if c, n := h.busiestOther(ports); n > 0 {
				ev = append(ev, Evidence{fmt.Sprintf("%s class %d", h.port, c), "arrived_packets", n})
			}
			if i > 0 && hops[i-1].st.RemarkedPackets > 0 {
				ev = append(ev, Evidence{hops[i-1].name, "remarked_packets", hops[i-1].st.RemarkedPackets})
			}
			return silent(LayerPath, CheckDSCPChanged, between,
				fmt.Sprintf("DSCP not preserved: the flow sent DSCP %d, which %s puts in class %d, but that class saw fewer packets than the flow alone sent: its DSCP was rewritten between %s and %s (seed 000: always trust DSCP end to end)", f.DSCP, h.port, h.class, from, h.port),
				ev...)
		}
		ect := at.ArrivedECT0 + at.ArrivedECT1 + at.ArrivedCE
		// Not-ECT arrivals of the flow's size, and too few ECN-capable
		// ones to be its own (another sender's Not-ECT traffic in the
		// class is not the flow's).
		// Most of its connections: one whose SYN was lost and resent
		// without ECN (tcp_ecn_fallback) is not the sender's setting.
		if lp == loopTCP && i == 0 && f.NoECN > 0 && float64(f.NoECN) >= FlowShare*float64(max(f.TCPConns, 1)) {
			return silent(LayerPath, CheckNotECT, between,
				fmt.Sprintf("ECN not set by the sender: %d of the flow's %d connections negotiated no ECN, so their packets leave Not-ECT and no switch can mark them (the sender's or receiver's net.ipv4.tcp_ecn, or a middlebox that strips the handshake's ECN flags)", f.NoECN, max(f.TCPConns, f.NoECN)),
				Evidence{"sender " + f.From, "no_ecn", uint64(f.NoECN)}, Evidence{h.name, "arrived_not_ect", h.st.ArrivedNotECT})
		}
		if sent > 0 && float64(at.ArrivedNotECT) >= FlowShare*float64(sent) && float64(ect) < FlowShare*float64(sent) {
			if i == 0 {
				return silent(LayerPath, CheckNotECT, between,
					fmt.Sprintf("ECN not set by the sender: %s's class %d saw the flow's packets arrive Not-ECT, so no switch can mark them", h.port, h.class),
					sentEv, Evidence{h.name, "arrived_not_ect", h.st.ArrivedNotECT})
			}
			return silent(LayerPath, CheckECNCleared, between,
				fmt.Sprintf("ECN cleared between hops: the flow's packets reached %s ECN-capable and %s Not-ECT", from, h.port),
				Evidence{hops[i-1].name, "arrived_ect", hops[i-1].st.ArrivedECT0 + hops[i-1].st.ArrivedECT1 + hops[i-1].st.ArrivedCE},
				Evidence{h.name, "arrived_not_ect", h.st.ArrivedNotECT})
		}
	}

	// The switch: marks where the queue built.
	var marks, safety uint64
	var marked *hopView
	var markEv []Evidence
	congested := false
	for i := range hops {
		h := &hops[i]
		marks += h.st.CEMarked()
		safety += h.safety()
		// The hop whose marks the flow's share is read from: one it
		// surely crossed (not an ECMP alternative) if any marked.
		if h.st.CEMarked() > 0 && (marked == nil || marked.branch != 0 || h.branch == 0) {
			marked = h
		}
		congested = congested || h.congested() || h.safety() > 0
		markEv = append(markEv, Evidence{h.name, "ce_marked", h.st.CEMarked()})
	}
	if !congested && marks == 0 {
		fc.Kind = CheckIdle
		fc.Says = "no congestion on the path: no queue past its marking threshold, no mark, stop or drop; nothing to judge"
		fc.Evidence = markEv
		return fc
	}
	if marks == 0 {
		h := &hops[0]
		for i := range hops {
			if hops[i].congested() {
				h = &hops[i]
				break
			}
		}
		for i := range hops {
			if hops[i].safety() > 0 {
				return fewMarks(&hops[i], silent)
			}
		}
		ev := []Evidence{{h.name, "ce_marked", 0}, h.queueEv(),
			{h.name, "arrived_ect0", h.st.ArrivedECT0}}
		if h.cfg.ECN == qdisc.ECNOff {
			return silent(LayerCP, CheckMarkingOff, h.port,
				fmt.Sprintf("%s's class %d does not mark (ecn off) while its queue builds: the switch layer is off", h.port, h.class), ev...)
		}
		return silent(LayerCP, CheckNoMarks, h.port,
			fmt.Sprintf("WRED misconfigured: %s's class %d queued past its %s and marked nothing", h.port, h.class, h.threshold()), ev...)
	}

	// What the safety net did meanwhile: the seed's "silent while PFC
	// keeps firing".
	var safetyEv []Evidence
	for i := range hops {
		if h := &hops[i]; h.safety() > 0 {
			safetyEv = append(safetyEv, Evidence{h.name, "ppfc_stops_sent", h.st.PPFCStopsSent}, Evidence{h.name, "dropped_packets", h.st.DroppedPackets()})
		}
	}

	// The receiver: CE in, CNPs out. The class's marks are every flow's:
	// this flow's share of them (its packets over the hop's arrivals)
	// must be enough for none arriving to say something.
	// The flow's share of the marks, at most all of them: of its hop's,
	// or for an ECMP group, which port it crossed the counters do not say,
	// of the least marked port's (an absence of echoes then means
	// something only if every port it may have crossed marked enough).
	share := float64(marked.st.CEMarked()) * min(vol.fraction(marked.st), 1)
	if marked.branch != 0 {
		share = float64(marked.leastMarked) * min(vol.fraction(&marked.group)*float64(groupSize(hops, marked.branch)), 1)
	}
	if lp == loopTCP {
		return checkTCP(f, hops, marks, share, marked, markEv, safetyEv, sentEv, silent)
	}
	if ceIn == 0 && share < MinCounted {
		// Too few marks of its own for an absence to say anything of
		// the loop; but a safety net that fired while the switch
		// marked next to nothing is the switch's verdict (a stray mark
		// of wred-high.yaml made it idle in a starved run).
		if v, ok := beforeSafetyNet(hops, silent); !ok {
			return v
		}
		fc.Kind = CheckIdle
		fc.Says = fmt.Sprintf("%d packets marked CE at %s, about %.1f of them this flow's (its %d packets of %d arrivals): too few for none arriving to say anything",
			marked.st.CEMarked(), marked.port, share, sent, marked.arrivals())
		fc.Evidence = append(markEv, recv, sentEv)
		return fc
	}
	if ceIn == 0 {
		return silent(LayerPath, CheckECNCleared, marked.port+" → the receiver "+f.To,
			fmt.Sprintf("marks at the switch, none arriving: %d packets marked CE on the path, the receiver counted none: a hop after %s cleared ECN", marks, marked.port),
			append(markEv, recv)...)
	}
	if lp == loopNSCC {
		return checkNSCC(f, hops, marks, markEv, recv, safetyEv, silent)
	}
	if f.CNPSent == 0 {
		says := "marks at the switch, CE arriving, no CNPs: the receiver's NP is disabled"
		if f.NP == "off" {
			says += " (np: off at " + f.To + ")"
		}
		return silent(LayerNP, CheckNPSilent, "receiver "+f.To, says, append(append(markEv, recv, cnps), safetyEv...)...)
	}

	// The sender: CNPs in, cuts made.
	arrived := f.CNPHandled + f.CNPIgnored
	if f.CNPHandled == 0 && f.CNPIgnored > 0 {
		says := "CNPs sent and arriving, none handled: the sender's RP is disabled"
		if f.RP == "off" {
			says += " (rp: off on " + f.From + ")"
		}
		return silent(LayerRP, CheckRPDisabled, "sender "+f.From, says, append([]Evidence{recv, cnps, handled, ignored}, safetyEv...)...)
	}
	if f.CNPSent >= MinCounted && float64(arrived) < CNPArrivalShare*float64(f.CNPSent) {
		ev := []Evidence{cnps, handled, ignored}
		for _, h := range f.ReplyPath {
			if pr := ports[h.Port]; pr != nil && pr.Stats != nil && h.CNPClass < len(pr.Stats.Classes) {
				ev = append(ev, Evidence{fmt.Sprintf("%s class %d", h.Port, h.CNPClass), "dropped_packets", pr.Stats.Classes[h.CNPClass].DroppedPackets()})
			}
		}
		return silent(LayerRP, CheckCNPsLost, f.To+" → "+f.From,
			fmt.Sprintf("CNPs sent, %d of %d reached the sender's RP: lost on the way back or from a peer it does not know", arrived, f.CNPSent), ev...)
	}
	// The loop runs; do its CNPs queue behind data on the way back?
	// "CNPs usually travel on their own DSCP / priority, so the 'slow
	// down' message never gets stuck in the queue behind the very traffic
	// it's reporting on. A CNP that arrives late is a CNP that didn't
	// help." (seed 000)
	for _, h := range f.ReplyPath {
		pr := ports[h.Port]
		if f.CNPDSCP == 0 || h.CNPClass != h.Class || pr == nil || pr.Stats == nil || h.CNPClass >= len(pr.Stats.Classes) {
			continue
		}
		cs := &pr.Stats.Classes[h.CNPClass]
		where := fmt.Sprintf("%s class %d", h.Port, h.CNPClass)
		mean, p99 := cs.MeanSojourn(), cs.Sojourn.Quantile(0.99)
		return silent(LayerNP, CheckCNPClassShared, h.Port,
			fmt.Sprintf("the CNP class is the data class: the NP's CNPs leave on DSCP %d, which %s queues in class %d with the flows' data (DSCP %d); there they wait behind the traffic (mean %v, p99 %s) and a CNP that arrives late did not help: give CNPs their own DSCP and a strict class (48, class 6)",
				f.CNPDSCP, h.Port, h.CNPClass, f.DSCP, mean.Round(time.Microsecond), units.FormatBound(p99)),
			Evidence{"receiver " + f.To, "cnp_dscp", uint64(f.CNPDSCP)}, Evidence{where, "mean_sojourn_us", uint64(mean / time.Microsecond)},
			Evidence{where, "sojourn_p99_us", uint64(p99 / time.Microsecond)}, Evidence{where, "dequeued_packets", cs.DequeuedPackets}, cnps)
	}
	if v, ok := beforeSafetyNet(hops, silent); !ok {
		return v
	}
	fc.Kind = CheckOK
	fc.Says = fmt.Sprintf("the three layers act: %d marked on the path, %d CE arrived, %d CNPs sent, %d handled", marks, f.CEArrived, f.CNPSent, f.CNPHandled)
	fc.Evidence = append(markEv, recv, cnps, handled, ignored)
	if safety > 0 {
		fc.Says += fmt.Sprintf("; the safety net fired %d times (PPFC stops and drops)", safety)
	}
	return fc
}

// silentFunc makes a verdict that names a silent layer.
type silentFunc func(l Layer, kind, hop, says string, ev ...Evidence) FlowCheck

// beforeSafetyNet asks, of a loop that runs, whether ECN acts before the
// safety net on every hop; ok false with the verdict where it does not.
func beforeSafetyNet(hops []hopView, silent silentFunc) (FlowCheck, bool) {
	for i := range hops {
		if h := &hops[i]; h.safety() > 0 && h.st.CEMarked() < MarksPerSafetyEvent*h.safety() {
			return fewMarks(h, silent), false
		}
	}
	return FlowCheck{}, true
}

// groupSize is how many ports ECMP group b has on the path.
func groupSize(hops []hopView, b int) int {
	n := 0
	for i := range hops {
		if hops[i].branch == b {
			n++
		}
	}
	return n
}

// flowVolume is what a flow sent, in packets (rocev2, uet) or bytes (tcp).
type flowVolume struct{ packets, bytes uint64 }

// notThere says a class saw less than FlowShare of the flow: the flow's
// packets did not cross it in that class.
func (v flowVolume) notThere(cs *qdisc.ClassStats) bool {
	if v.bytes > 0 {
		return float64(arrivedBytes(cs)) < FlowShare*float64(v.bytes)
	}
	return v.packets > 0 && float64(arrived(cs)) < FlowShare*float64(v.packets)
}

// fraction is the flow's share of a class's arrivals.
func (v flowVolume) fraction(cs *qdisc.ClassStats) float64 {
	if v.bytes > 0 {
		return float64(v.bytes) / float64(max(arrivedBytes(cs), 1))
	}
	return float64(v.packets) / float64(max(arrived(cs), 1))
}

// arrivedBytes is what reached a class (enqueued counts every packet
// offered to it, dropped or not).
func arrivedBytes(cs *qdisc.ClassStats) uint64 { return cs.EnqueuedBytes }

// checkTCP judges a tcp flow's loop past the switch: the receiver's stack
// echoes CE (ECE, or DCTCP's exact echo) and the sender's counts the
// segments delivered CE-marked (tcpi_delivered_ce). What the sender's
// congestion control does with them (cubic halves cwnd once per round
// trip, DCTCP by α/2) is the kernel's, not counted: the verdict says so.
func checkTCP(f *FlowResult, hops []hopView, marks uint64, share float64, marked *hopView, markEv, safetyEv []Evidence, sentEv Evidence, silent silentFunc) FlowCheck {
	echoed := Evidence{"sender " + f.From, "delivered_ce", f.DeliveredCE}
	if f.DeliveredCE == 0 {
		if share < MinCounted {
			if v, ok := beforeSafetyNet(hops, silent); !ok {
				return v
			}
			return FlowCheck{Flow: f.Name, Kind: CheckIdle, Evidence: append(markEv, echoed, sentEv),
				Says: fmt.Sprintf("%d packets marked CE at %s, about %.1f of them this flow's (its share of the class's bytes): too few for no echo to say anything", marked.st.CEMarked(), marked.port, share)}
		}
		return silent(LayerNP, CheckEchoSilent, "receiver "+f.To,
			fmt.Sprintf("marks at the switch (about %.0f of them this flow's), none echoed back: the sender counted no segment delivered CE-marked, so the receiver's stack did not echo CE (ECE) or a hop after %s cleared it", share, marked.port),
			append(append(markEv, echoed, sentEv), safetyEv...)...)
	}
	if v, ok := beforeSafetyNet(hops, silent); !ok {
		return v
	}
	cc := f.KernelCC
	if cc == "" {
		cc = ccName(f.CC)
	}
	says := fmt.Sprintf("the switch marks and the receiver echoes: %d marked on the path, %d segments came back CE-echoed; the sender's reductions are its kernel's (%s), not counted", marks, f.DeliveredCE, cc)
	var safety uint64
	for i := range hops {
		safety += hops[i].safety()
	}
	if safety > 0 {
		says += fmt.Sprintf("; the safety net fired %d times (PPFC stops and drops)", safety)
	}
	return FlowCheck{Flow: f.Name, Kind: CheckOK, Says: says, Evidence: append(markEv, echoed, sentEv)}
}

// checkNSCC judges a uet flow's loop past the switch: CE arriving at the
// target must come back echoed in ACKs (the M flag), and echoes with the
// queueing delay above NSCC's target must cut the window (UET spec
// 3.6.13: multiplicative decrease, at most once per base RTT, or a quick
// adapt). Echoes under the target change nothing by design.
func checkNSCC(f *FlowResult, hops []hopView, marks uint64, markEv []Evidence, recv Evidence, safetyEv []Evidence, silent silentFunc) FlowCheck {
	echoes := Evidence{"source " + f.From, "ecn_echoes", f.ECNEchoes}
	above := Evidence{"source " + f.From, "nscc_ecn_above_target_acks", f.NSCCECNAboveTarget}
	below := Evidence{"source " + f.From, "nscc_ecn_below_target_acks", f.NSCCECNBelowTarget}
	cuts := Evidence{"source " + f.From, "nscc_decreases", f.NSCCDecreases}
	adapts := Evidence{"source " + f.From, "nscc_quick_adapts", f.NSCCQuickAdapts}
	if f.ECNEchoes == 0 {
		if f.CEReceived < MinCounted {
			if v, ok := beforeSafetyNet(hops, silent); !ok {
				return v
			}
			return FlowCheck{Flow: f.Name, Kind: CheckIdle, Evidence: append(markEv, recv, echoes),
				Says: fmt.Sprintf("%d CE arrivals at the target and no echo: too few for the missing echoes to say anything", f.CEReceived)}
		}
		says := fmt.Sprintf("marks at the switch, CE arriving at the target, no ACK echoing it (M flag): the source's NSCC hears nothing of the marks (%d CE in, 0 echoes)", f.CEReceived)
		if f.NP == "off" {
			says += " (np: off at " + f.To + ")"
		}
		return silent(LayerNP, CheckEchoSilent, "target "+f.To, says,
			append(append(markEv, recv, echoes), safetyEv...)...)
	}
	if f.NSCCECNAboveTarget >= NSCCMinAboveTarget && f.NSCCDecreases+f.NSCCQuickAdapts == 0 {
		return silent(LayerRP, CheckNSCCNoCuts, "source "+f.From,
			fmt.Sprintf("ECN echoes with the queueing delay above NSCC's target, and the window never cut: the source's NSCC does not react (%d such echoes, 0 decreases)", f.NSCCECNAboveTarget),
			append([]Evidence{recv, echoes, above, cuts, adapts}, safetyEv...)...)
	}
	if v, ok := beforeSafetyNet(hops, silent); !ok {
		return v
	}
	says := fmt.Sprintf("the three layers act: %d marked on the path, %d CE at the target, %d echoed, %d decreases and %d quick adapts",
		marks, f.CEReceived, f.ECNEchoes, f.NSCCDecreases, f.NSCCQuickAdapts)
	if f.NSCCDecreases+f.NSCCQuickAdapts == 0 {
		says = fmt.Sprintf("the switch marks and the target echoes (%d marked, %d CE at the target, %d echoed); NSCC cut nothing because the echoes came with the queueing delay under its target (%d under, %d over): left to load balancing by design",
			marks, f.CEReceived, f.ECNEchoes, f.NSCCECNBelowTarget, f.NSCCECNAboveTarget)
	}
	var safety uint64
	for i := range hops {
		safety += hops[i].safety()
	}
	if safety > 0 {
		says += fmt.Sprintf("; the safety net fired %d times (PPFC stops and drops)", safety)
	}
	return FlowCheck{Flow: f.Name, Kind: CheckOK, Says: says, Evidence: append(markEv, recv, echoes, above, below, cuts, adapts)}
}

// fewMarks is the verdict on a hop where PPFC or drops fired while ECN
// marked fewer than MarksPerSafetyEvent packets per stop or drop.
func fewMarks(h *hopView, silent silentFunc) FlowCheck {
	ev := []Evidence{{h.name, "ce_marked", h.st.CEMarked()}, {h.name, "ppfc_stops_sent", h.st.PPFCStopsSent},
		{h.name, "dropped_packets", h.st.DroppedPackets()}, h.queueEv()}
	if h.cfg.ECN == qdisc.ECNOff {
		return silent(LayerCP, CheckMarkingOff, h.port,
			fmt.Sprintf("%s's class %d does not mark (ecn off): PPFC or drops are all the flow hears, and DCQCN nothing", h.port, h.class), ev...)
	}
	marked := "nothing"
	if n := h.st.CEMarked(); n > 0 {
		marked = fmt.Sprintf("%d packets (fewer than %d per stop or drop)", n, MarksPerSafetyEvent)
	}
	return silent(LayerCP, CheckThresholdsHigh, h.port,
		fmt.Sprintf("thresholds too high: at %s the safety net fired (%d PPFC stops and drops) while ECN marked %s, %s: ECN is not acting before PFC, tune min_th down so DCQCN gets early warnings",
			h.port, h.safety(), marked, h.threshold()), ev...)
}

func ccName(cc string) string {
	if cc == "" {
		return "default"
	}
	return cc
}

// WriteCheck prints the verdicts for people: a line per flow, and the
// counters behind each.
func WriteCheck(w io.Writer, c *CheckReport) {
	fmt.Fprintf(w, "three layers (seed 000): %s\n", c.summary())
	// Many flows (a workload's matrix): the verdicts that say something;
	// every one is in check.json.
	quiet := 0
	for _, f := range c.Flows {
		if len(c.Flows) > maxCheckFlowsShown && (f.Kind == CheckIdle || f.Kind == CheckOK) {
			quiet++
			continue
		}
		layer := "-"
		if f.Layer != "" {
			layer = strings.ToUpper(string(f.Layer))
		}
		fmt.Fprintf(w, "  %-12s %-5s %-16s %s\n", f.Flow, layer, f.Kind, f.Says)
		for _, e := range f.Evidence {
			fmt.Fprintf(w, "  %-12s %-5s %-16s   %s\n", "", "", "", e)
		}
	}
	if quiet > 0 {
		fmt.Fprintf(w, "  (%d of the %d flows ok or idle, not listed)\n", quiet, len(c.Flows))
	}
}

// maxCheckFlowsShown is how many flows' verdicts WriteCheck lists in
// full; past it, only the silent ones.
const maxCheckFlowsShown = 16

func (c *CheckReport) summary() string {
	silent := c.Silent()
	if len(silent) == 0 {
		n := 0
		for _, f := range c.Flows {
			if f.Kind == CheckOK {
				n++
			}
		}
		return fmt.Sprintf("no layer silent (%d of %d flows judged ok)", n, len(c.Flows))
	}
	var s []string
	for _, l := range silent {
		s = append(s, strings.ToUpper(string(l)))
	}
	return "silent: " + strings.Join(s, ", ")
}

// judges says the run has a flow Check judges.
func (res *Result) judges() bool {
	for i := range res.Flows {
		if loopOf(&res.Flows[i]) != loopNone {
			return true
		}
	}
	return false
}

// ReadResult reads a run's result.json (Result.write): a file of another
// schema, such as a comparison's, is refused by name.
func ReadResult(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if res.Schema != ResultSchema {
		return nil, fmt.Errorf("%s: schema %q: want %q (a run's result.json; a comparison's runs each have one in VARIANT/runN)", path, res.Schema, ResultSchema)
	}
	return &res, nil
}
