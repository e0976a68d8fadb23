//go:build linux

package labfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/cm"
	"github.com/fabriclab/fabriclab/host/htsim"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// HtsimMatrixRun is htsim's run of a lab's workload matrix beside the
// lab's own (RunOptions.Htsim), or why there is none.
type HtsimMatrixRun struct {
	// Error is one line: why htsim cannot run this lab, or how it
	// failed. Files and Command are still there when htsim's build is
	// missing: the run can be made by hand.
	Error string `json:"error,omitempty"`
	// Dir holds htsim's files (htsim.topo, htsim.cm, run-htsim.sh,
	// htsim.out); Command runs htsim_uec there.
	Dir     string `json:"dir,omitempty"`
	Command string `json:"command,omitempty"`
	// Mapping is what does not map one to one, in words.
	Mapping []string `json:"mapping,omitempty"`
	// Scenario is what htsim ran, and its derived settings.
	Plan *htsim.MatrixPlan `json:"plan,omitempty"`
	// All and Groups are htsim's collectives, as MatrixResult's; its
	// times are on the lab's run timeline (htsim's × Plan.Scale × the
	// lab's timescale), its ideal htsim's own (IdealFCT).
	All    CollectiveResult   `json:"all"`
	Groups []CollectiveResult `json:"groups,omitempty"`
	// FCTRatio is htsim's flows' FCT over its ideal; FlowFCTRatio each
	// connection's, in matrix order (0: did not finish).
	FCTRatio     stats.Dist `json:"fct_ratio"`
	FlowFCTRatio []float64  `json:"flow_fct_ratio,omitempty"`
	Finished     int        `json:"finished"`
	// Counters are htsim's totals (its trims are its NACKs).
	Counters htsim.Counters `json:"counters"`
	WallS    float64        `json:"wall_s"`
}

// HtsimMatrixScenario is the file's workload matrix (variant "": as
// written) as htsim_uec runs it: the leaf-spine of its fabric, its
// flows' MTU, congestion control and load balancing, the port settings
// of the class its flows use on every switch port they cross (htsim has
// one queue for every port), its seed. The second value lists what does
// not map one to one. A lab htsim cannot express gets an error of one
// line saying why.
func (f *File) HtsimMatrixScenario(variant string) (htsim.MatrixScenario, []string, error) {
	p, err := f.variantPlan(variant)
	if err != nil {
		return htsim.MatrixScenario{}, nil, err
	}
	return f.htsimMatrixScenario(p)
}

func (f *File) htsimMatrixScenario(p *Plan) (htsim.MatrixScenario, []string, error) {
	var s htsim.MatrixScenario
	m := f.matrix
	fb := f.Fabric
	switch {
	case m == nil:
		return s, nil, errNoHtsim("it has no workload matrix")
	case fb == nil:
		return s, nil, errNoHtsim("its matrix runs on nodes of its own; htsim's is a fabric (fabric: {kind: leaf-spine, ...})")
	case fb.Kind == FabricLeafSpine && fb.Leaves < 2:
		return s, nil, errNoHtsim("its fabric has one leaf; htsim's fat tree has two tiers at least")
	}
	if len(p.Flows) != len(m.Conns) {
		return s, nil, errNoHtsim("it has %d flows besides its matrix; htsim runs the matrix alone", len(p.Flows)-len(m.Conns))
	}
	var notes []string
	first := &p.Flows[f.matrixFirst]
	hostOf := make([]int, m.Nodes)
	for i, c := range m.Conns {
		fp := &p.Flows[f.matrixFirst+i]
		fl, cl := fp.Flow, &fp.Client
		var why string
		switch {
		case fl.Transport == TransportRoCEv2:
			why = fmt.Sprintf("flow %s is rocev2: htsim_roce (snapshot 40ccb05) cannot run a matrix on a leaf-spine: with -topo it zeroes every queue (main_roce.cpp never sets their size after loading the file: \"Missing queue_up for tier 0\"), and its DCQCN's events multiply (a ring all-reduce over 8 hosts: 104 of 120 flows by 334 µs of its time, then 5 minutes of wall time without another)", fl.Name)
		case fl.Transport != TransportUET:
			why = fmt.Sprintf("flow %s is %s; htsim_uec runs UET", fl.Name, fl.Transport)
		case fl.CC == CCNone:
			why = fmt.Sprintf("flow %s has cc none; htsim runs nscc, rccc or both", fl.Name)
		case cl.QPs > 1:
			why = fmt.Sprintf("flow %s has %d streams; htsim runs one per connection", fl.Name, cl.QPs)
		case cl.UETCC != first.Client.UETCC || cl.LB != first.Client.LB || cl.Loss != first.Client.Loss:
			why = fmt.Sprintf("flows %s and %s differ in cc, lb or loss; htsim runs one of each", first.Flow.Name, fl.Name)
		case !maps.Equal(fl.Knobs, first.Flow.Knobs):
			why = fmt.Sprintf("flows %s and %s differ in NSCC's knobs; htsim runs one set", first.Flow.Name, fl.Name)
		case cl.MTU != first.Client.MTU:
			why = fmt.Sprintf("flows %s and %s send packets of different sizes (mtu %d, %d); htsim has one", first.Flow.Name, fl.Name, first.Client.MTU, cl.MTU)
		case cl.LineRate != 0 && cl.LineRate != fb.HostRate:
			why = fmt.Sprintf("flow %s sends at %s, not its host's %s; htsim's hosts send at their link's rate", fl.Name, cl.LineRate, fb.HostRate)
		}
		if why != "" {
			return s, nil, errNoHtsim("%s", why)
		}
		for _, e := range []struct {
			node int
			name string
		}{{c.Src, fl.From}, {c.Dst, fl.To}} {
			h, ok := fabricHost(e.name, fb.Hosts)
			if !ok {
				return s, nil, errNoHtsim("flow %s's host %s is not one of the fabric's (h0 to h%d)", fl.Name, e.name, fb.Hosts-1)
			}
			hostOf[e.node] = h
		}
	}
	for i, l := range f.Links {
		if l.Loss > 0 {
			return s, nil, errNoHtsim("links[%d] drops %g of the packets; htsim's links lose none", i, l.Loss)
		}
	}
	// One class config on every port the matrix crosses: htsim has one
	// queue size and one pair of ECN thresholds for every switch port.
	var cc *qdisc.ClassConfig
	var ccPort string
	for i := range m.Conns {
		fp := &p.Flows[f.matrixFirst+i]
		for _, pi := range fp.Ports {
			po := &p.Ports[pi]
			if po.NIC {
				continue // htsim's UecNIC
			}
			c := &po.Config.Classes[po.Config.DSCPClass[fp.Client.DSCP]]
			switch {
			case cc == nil:
				cc, ccPort = c, po.Name
			case c.LimitBytes != cc.LimitBytes || c.ECN != cc.ECN || c.MinThBytes != cc.MinThBytes || c.MaxThBytes != cc.MaxThBytes ||
				c.MaxP != cc.MaxP || c.TrimBytes != cc.TrimBytes:
				return s, nil, errNoHtsim("ports %s and %s queue the matrix's class differently (limit, ecn or trim); htsim has one queue setting for every port", ccPort, po.Name)
			}
		}
	}
	if cc == nil {
		return s, nil, errNoHtsim("its flows cross no switch port")
	}
	s = htsim.MatrixScenario{
		Matrix: m, HostOf: hostOf,
		// The flows' packets, not their paths' MTU: a UET flow sends
		// 4096-byte packets on a 9000-byte path unless it says mtu, and
		// htsim's store-and-forward and credit grants go by its packet.
		MTUBytes:  first.Client.MTU,
		PortQueue: htsim.PortQueue{LimitBytes: cc.LimitBytes}, TrimBytes: cc.TrimBytes,
		CC: first.Client.UETCC, LB: first.Client.LB, Seed: int(f.Seed),
		SLEEK: first.Client.Loss == pds.LossSLEEK,
	}
	var others []string
	for _, k := range SortedKnobs(first.Flow.Knobs) {
		if k.Name == "target_qdelay" {
			s.TargetQDelay, _ = units.ParseDuration(k.Value) // checked
			continue
		}
		others = append(others, k.String())
	}
	if fb.Kind == FabricFatTree {
		s.FatTree = &htsim.FatTreeFabric{K: fb.K, Pods: fb.Pods, Rate: fb.HostRate, Delay: fb.Delay, Oversubscription: int(fb.Oversubscription), CoreRate: fb.CoreRate}
	} else {
		s.Fabric = htsim.LeafSpine{Hosts: fb.Hosts, Leaves: fb.Leaves, Spines: fb.Spines, HostRate: fb.HostRate,
			SpineRate: fb.spineRate(), Delay: fb.Delay}
	}
	switch {
	case cc.ECN == qdisc.ECNWRED && cc.MaxP >= 1:
		s.MinThBytes, s.MaxThBytes = cc.MinThBytes, cc.MaxThBytes
	case cc.ECN == qdisc.ECNWRED:
		// htsim's marking rises linearly to 1 at its max: the same slope
		// puts its max at min_th + (max_th − min_th)/max_p.
		hi := units.ByteSize(math.Round(float64(cc.MinThBytes) + float64(cc.MaxThBytes-cc.MinThBytes)/cc.MaxP))
		s.MinThBytes, s.MaxThBytes = cc.MinThBytes, min(hi, cc.LimitBytes)
		notes = append(notes, fmt.Sprintf("WRED %s–%s with max_p %g: htsim's marking rises to 1 at its max, set to %s for the same slope (capped at the limit); past max_th the lab marks every packet, htsim goes on rising",
			cc.MinThBytes, cc.MaxThBytes, cc.MaxP, s.MaxThBytes))
	case cc.ECN == qdisc.ECNStep:
		s.MinThBytes, s.MaxThBytes = cc.MinThBytes, cc.MinThBytes
	case cc.ECN == qdisc.ECNOff:
		s.MinThBytes, s.MaxThBytes = cc.LimitBytes, cc.LimitBytes
		notes = append(notes, "ECN off: htsim marks only a full queue (both thresholds at the limit)")
	default:
		return s, nil, errNoHtsim("port %s marks with %s; htsim marks between two thresholds (wred or step)", ccPort, cc.ECN)
	}
	ideal := "ideal: each flow's bytes at its bottleneck plus its links' delay both ways (the lab's); htsim's adds what its store-and-forward takes alone on the fabric (the last packet serialised again at each further hop, the ACK at each hop): the lab's ports send a packet that finds them idle at once (fabric store_and_forward: true adds it in the endpoints)"
	if fb.StoreAndForward {
		ideal = "store-and-forward: htsim's queues serialise every packet at every hop; the lab's ports pass a packet that finds them idle at once, and its endpoints add each hop's serialisation and delay to what they receive (fabric store_and_forward), so both ideals count it"
	}
	notes = append(notes,
		"time: htsim runs every rate faster and every delay shorter by one factor (its plan's scale), so that bytes, packets, queues and BDPs stay; its times are shown on the lab's timeline",
		ideal,
		"the fabric: htsim builds its own fat tree of the same shape (its topology file); which spine or core each flow or packet takes is its own draw, as the lab's kernel hash is the lab's",
		"marking: htsim marks at dequeue on the queue the leaving packet leaves; the lab at enqueue on the backlog an arrival finds",
		"the host: htsim has none (no scheduling delay, no trigger latency); the lab's figures carry this machine's")
	if fb.NIC {
		notes = append(notes, "NICs: each host's is a port at its line rate in the lab (fabric nic), htsim's UecNIC: a host's ACKs wait for the data packet it is sending (htsim serves control 10:1 over data, the lab's port strictly)")
	} else {
		notes = append(notes, "NICs: htsim's UecNIC sends a host's packets one at a time, its ACKs after the data packet being sent; the lab's hosts have no port (fabric nic: true gives them one), so a host's ACKs never wait behind its own data")
	}
	if b := s.Fabric.SpineRate / max(s.Fabric.HostRate, 1); b > 1 {
		notes = append(notes, fmt.Sprintf("spine links: htsim runs every link at one rate, so a %s leaf-spine link is a bundle of %d links of %s; ECMP puts a flow on one of them (at most %s), where the lab's one link carries it at %s",
			s.Fabric.SpineRate, b, s.Fabric.HostRate, s.Fabric.HostRate, s.Fabric.SpineRate))
	}
	if cc.TrimBytes == 0 {
		notes = append(notes, "ACKs: an ACK per packet (-sack_threshold one packet), as the lab's target ACKs every receive batch; htsim's default coalesces 16 KiB")
	}
	if s.CC == pds.CCRCCC || s.CC == pds.CCBoth {
		notes = append(notes, "RCCC: htsim turns ECN off on the leaves' ports toward the hosts; the lab's ports mark in every mode",
			// Found with an htsim instrumented for the purpose (docs/collectives.md).
			"RCCC's slow pulls: htsim's pull pacer queues a sink whose target is met in its idle list again while it is still there (UecPullPacer::doNextEvent), so it sends that sink slow pulls over and over; each holds the pacer for a grant's time (4 MSS) and the sender drops their credit above MaxWnd (half of all credit granted in the 8-host ring all-reduce). The lab's pacer keeps a source in one queue (host/rccc): htsim is the slower wherever a receiver's flows often have their targets met (docs/collectives.md: 6-16 % of an 8-host ring all-reduce's or all-to-all's completion)")
	}
	hp, err := htsim.NewMatrixPlan(s)
	if err != nil {
		return s, nil, errNoHtsim("%s", oneLine(err))
	}
	rto := first.Client.RTO
	if rto == 0 {
		rto = pds.DefaultConfig().RTO
	}
	if hrto := hp.MinRTO(); rto < hrto {
		notes = append(notes, fmt.Sprintf("RTO: the lab's PDCs resend after %s, htsim's after %s (its min RTO: 15 µs of its time and 6 drains of a full queue, on the lab's timeline): a packet queued longer than %s is sent again in the lab only (the flows' rto sets the lab's)",
			units.FormatDuration(rto), units.FormatDuration(hrto.Round(time.Microsecond)), units.FormatDuration(rto)))
	}
	switch first.Client.Loss {
	case pds.LossRACK:
		if s.LB != 0 {
			notes = append(notes, "loss inference: the lab's PDCs take a packet for lost when later ones on other paths are acknowledged first and it is past its reordering window (RACK, RFC 8985, a window that grows as they learn the paths' skew); htsim's, without -sleek, wait for a NACK or the RTO. Spraying over paths of unequal queues, the lab resends packets still queued on the slower path (result.json's spurious_retransmits); the flows' loss: none or sleek runs both sides alike")
		}
	case pds.LossSLEEK:
		notes = append(notes, "loss inference: SLEEK on both sides (-sleek; the flows' loss: sleek): recovery past 1.5 windows of packets held out of order at the target. htsim's SLEEK also probes base_rtt + target_qdelay after an ACK and enters recovery when a probe's answer comes back with little queueing; the lab's PDCs probe the oldest packet after the probe timeout (500 µs slowed, or 2 SRTT) and resend it on NACK PKT_NOT_RCVD")
	case pds.LossNone:
		notes = append(notes, "loss inference: none on both sides (htsim without -sleek): a hole waits for a NACK or the RTO; the lab's PDCs also probe the oldest packet when no ACK came for the probe timeout, which htsim without -sleek does not")
	}
	if s.TargetQDelay > 0 {
		notes = append(notes, fmt.Sprintf("NSCC's target_qdelay: the flows' %s on both sides (-target_q_delay)", units.FormatDuration(s.TargetQDelay)))
	}
	if len(others) > 0 {
		notes = append(notes, fmt.Sprintf("NSCC's knobs %s are the lab's flows' alone: htsim derives its own from its fabric's unloaded round trip", strings.Join(others, " ")))
	}
	if hp.Oversubscription() > 1 && s.CC == pds.CCRCCC {
		notes = append(notes, "RCCC on an oversubscribed fabric: htsim adds its receiver's oversubscribed CC (main_uec.cpp's OversubscribedCC: an ECN-driven cut of each receiver's credit rate, down to 0.9 / oversubscription of its line); the lab has none")
	}
	return s, notes, nil
}

// fabricHost is the index of a fabric host named hK.
func fabricHost(name string, hosts int) (int, bool) {
	k, err := strconv.Atoi(strings.TrimPrefix(name, "h"))
	if err != nil || !strings.HasPrefix(name, "h") || k < 0 || k >= hosts || name != "h"+strconv.Itoa(k) {
		return 0, false
	}
	return k, true
}

// spineRate is a leaf-spine link's rate: SpineRate, else what makes
// Oversubscription.
func (fb *Fabric) spineRate() units.Rate {
	if fb.SpineRate != 0 || fb.Spines == 0 {
		return fb.SpineRate
	}
	os := fb.Oversubscription
	if os == 0 {
		os = 1
	}
	return units.Rate(float64(fb.HostRate) * float64(fb.Hosts/fb.Leaves) / (os * float64(fb.Spines)))
}

// runHtsimMatrix runs the plan's matrix in htsim, its files in dir (""
// a temporary directory), and sums it as the lab's is summed. Run n of a
// comparison (from 1) seeds htsim with the file's seed + n − 1, so that
// the runs show htsim's spread from its random choices (ECMP, marking)
// beside the lab's.
func (f *File) runHtsimMatrix(ctx context.Context, p *Plan, r *htsim.Runner, dir string, run int) *HtsimMatrixRun {
	s, notes, err := f.htsimMatrixScenario(p)
	if err != nil {
		return &HtsimMatrixRun{Error: err.Error()}
	}
	s.Seed += max(run, 1) - 1
	rn := *r
	rn.WorkDir = dir
	res, err := rn.RunMatrix(ctx, s)
	h := &HtsimMatrixRun{Dir: dir, Command: res.Command, Mapping: notes}
	if res.Command != "" {
		h.Plan = &res.Plan
	}
	if err != nil {
		h.Error = oneLine(err)
		var missing *htsim.MissingBinaryError
		if errors.As(err, &missing) && dir != "" {
			h.Error += fmt.Sprintf("; its files are in %s: run %s there with $%s set", dir, htsim.MatrixScriptFile, htsim.EnvDir)
		}
		return h
	}
	h.Finished, h.Counters, h.WallS = res.Finished(), res.Counters, res.Wall.Seconds()
	if base := p.Flows[f.matrixFirst].Client.BaseRTT; base > 0 && res.UnloadedRTT > 0 {
		if q := float64(base) / float64(res.UnloadedRTT); q < 0.9 || q > 1.1 {
			h.Mapping = append(h.Mapping, fmt.Sprintf("NSCC's base RTT: the lab's flows take base_rtt %v; htsim its fabric's unloaded round trip, %v at the lab's rates (store-and-forward included)",
				base, res.UnloadedRTT.Round(time.Microsecond)))
		}
	}
	lab := func(d time.Duration) time.Duration { return p.Timescale.Time(d) }
	n := len(res.Flows)
	start, end := make([]time.Duration, n), make([]time.Duration, n)
	var ratios []float64
	h.FlowFCTRatio = make([]float64, n)
	for i, fl := range res.Flows {
		start[i], end[i] = lab(fl.Start), lab(fl.End)
		if fl.Done {
			if ideal := res.Plan.IdealFCT(i); ideal > 0 {
				h.FlowFCTRatio[i] = float64(fl.End-fl.Start) / float64(ideal)
				ratios = append(ratios, h.FlowFCTRatio[i])
			}
		}
	}
	h.FCTRatio = stats.Summarize(ratios)
	ideal := func(i int) (time.Duration, time.Duration) {
		d := lab(res.Plan.IdealFCT(i))
		return d, d
	}
	h.All, h.Groups = collectives(f.matrix, start, end, h.Finished == n, ideal, nil)
	return h
}

// writeHtsimMatrix prints htsim's run beside the lab's matrix.
func (h *HtsimMatrixRun) write(w io.Writer, lab *MatrixResult) {
	if h == nil {
		return
	}
	fmt.Fprintf(w, "\nhtsim beside the lab (%s)\n", orDefault(h.Dir, "htsim's files in a temporary directory"))
	if h.Error != "" {
		fmt.Fprintf(w, "  %s\n", h.Error)
		if h.Command != "" {
			fmt.Fprintf(w, "  command: %s\n", h.Command)
		}
		return
	}
	pl := h.Plan
	fmt.Fprintf(w, "  %s; %d of %d flows finished in %.2f s of wall time; %d trimmed, %d retransmits\n",
		h.Command, h.Finished, len(h.FlowFCTRatio), h.WallS, h.Counters.NACKs, h.Counters.Retransmits)
	if h.Counters.Pulls > 0 {
		fmt.Fprintf(w, "  htsim's receivers sent %d pulls (RCCC credit), the lab's %d grants\n", h.Counters.Pulls, lab.creditGrants())
	}
	fmt.Fprintf(w, "  htsim runs %g× faster: %d Gbit/s links (bundles of %d to the spines), %d ns a link, %d-packet queues, ECN %d–%d packets\n",
		pl.Scale, pl.LinkGbps, pl.Bundle, pl.LatencyNs, pl.QueuePackets, pl.MinThPackets, pl.MaxThPackets)
	fmt.Fprintf(w, "  %-10s %6s  %12s %12s  %8s %8s  %7s\n", "", "flows", "lab ms", "htsim ms", "lab ×", "htsim ×", "ratio")
	row := func(name string, l, hs CollectiveResult) {
		ratio := "-"
		if l.CCTRatio > 0 && hs.CCTRatio > 0 {
			ratio = fmt.Sprintf("%.3f", l.CCTRatio/hs.CCTRatio)
		}
		fmt.Fprintf(w, "  %-10s %6d  %12.3f %12.3f  %8.3f %8.3f  %7s\n", name, l.Flows, 1e3*l.CCTS, 1e3*hs.CCTS, l.CCTRatio, hs.CCTRatio, ratio)
	}
	row("all", lab.All, h.All)
	for i, g := range h.Groups {
		if i == 8 || i >= len(lab.Groups) {
			fmt.Fprintf(w, "  … %d more groups in result.json\n", len(h.Groups)-i)
			break
		}
		row(fmt.Sprintf("group %d", i+1), lab.Groups[i], g)
	}
	if lab.FCTRatio.N > 0 && h.FCTRatio.N > 0 {
		fmt.Fprintf(w, "  flows' FCT/ideal p50 / p99 / max: lab %.3f / %.3f / %.3f, htsim %.3f / %.3f / %.3f\n",
			lab.FCTRatio.P50, lab.FCTRatio.P99, lab.FCTRatio.Max, h.FCTRatio.P50, h.FCTRatio.P99, h.FCTRatio.Max)
	}
	fmt.Fprintf(w, "  (× is completion over each side's ideal; ratio is the lab's × over htsim's)\n")
	for _, n := range h.Mapping {
		fmt.Fprintf(w, "  - %s\n", n)
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// collectives sums a matrix's flows (start and end on one timeline;
// complete when every flow ended) into the whole matrix's completion
// and each group's, against the ideal replayed over ideal (each flow's
// send and receive durations) and, when measured is not nil, against the
// replay over measured FCTs.
func collectives(m *cm.Matrix, start, end []time.Duration, complete bool, ideal, measured func(i int) (time.Duration, time.Duration)) (CollectiveResult, []CollectiveResult) {
	n := len(m.Conns)
	idealStart, idealEnd, err := m.Replay(ideal)
	if err != nil {
		return CollectiveResult{Flows: n}, nil
	}
	var netStart, netEnd []time.Duration
	if measured != nil {
		netStart, netEnd, _ = m.Replay(measured)
	}
	collective := func(idx []int) CollectiveResult {
		c := CollectiveResult{Flows: len(idx)}
		var s0, e1, i0, i1, n0, n1 time.Duration = -1, 0, -1, 0, -1, 0
		for _, i := range idx {
			if s0 < 0 || start[i] < s0 {
				s0 = start[i]
			}
			e1 = max(e1, end[i])
			if i0 < 0 || idealStart[i] < i0 {
				i0 = idealStart[i]
			}
			i1 = max(i1, idealEnd[i])
			if netEnd != nil {
				if n0 < 0 || netStart[i] < n0 {
					n0 = netStart[i]
				}
				n1 = max(n1, netEnd[i])
			}
		}
		if !complete {
			return c
		}
		c.StartS, c.EndS, c.CCTS = s0.Seconds(), e1.Seconds(), (e1 - s0).Seconds()
		c.IdealCCTS = (i1 - i0).Seconds()
		if c.IdealCCTS > 0 {
			c.CCTRatio = c.CCTS / c.IdealCCTS
		}
		if netEnd != nil {
			c.ReplayCCTS = (n1 - n0).Seconds()
			if c.IdealCCTS > 0 {
				c.ReplayRatio = c.ReplayCCTS / c.IdealCCTS
			}
		}
		return c
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	var groups []CollectiveResult
	if gs := m.Groups(); len(gs) > 1 && len(gs) < n {
		for _, g := range gs {
			groups = append(groups, collective(g))
		}
	}
	return collective(all), groups
}
