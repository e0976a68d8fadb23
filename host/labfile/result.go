//go:build linux

package labfile

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pe"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The schemas of result.json: a run's (Result) and a comparison's. The
// number goes up when a field changes meaning or goes away; a field added
// keeps it.
const (
	ResultSchema     = "fabriclab.result/1"
	ComparisonSchema = "fabriclab.comparison/1"
)

// Result is what a run measured; result.json is it.
type Result struct {
	// Schema is ResultSchema: which of the two a result.json is, and its
	// version.
	Schema string `json:"schema"`
	Name   string `json:"name"`
	File   string `json:"file"`
	RunID  string `json:"run_id"` // the namespaces' prefix
	// Variant and Run: which of a comparison's runs this is.
	Variant string    `json:"variant,omitempty"`
	Run     int       `json:"run,omitempty"`
	Start   time.Time `json:"start"`
	// Seconds is from the run's start to the last flow's end.
	Seconds float64 `json:"seconds"`
	// TimelineScale is what RunOptions.Duration multiplied the flows'
	// starts and timed durations by (1: as written).
	TimelineScale float64 `json:"timeline_scale"`
	// Timescale is the file's (File.Timescale): the fabric ran this many
	// times slower. The result's times and rates are as measured, on the
	// wall clock; FCT/ideal, utilization and queues in BDPs are the
	// fabric's own.
	Timescale float64 `json:"timescale"`
	// Interrupted: the run's context was cancelled (Ctrl-C).
	Interrupted bool         `json:"interrupted,omitempty"`
	Links       []LinkResult `json:"links"`
	Flows       []FlowResult `json:"flows"`
	Ports       []PortResult `json:"ports"`
	PEs         []PEResult   `json:"pes,omitempty"`
	// HostDrops are each host's UDP receive-buffer drops during the run
	// (RoCEv2's and UET's packets lost in the receiving host, not the
	// network); SoftnetDrops the machine's per-CPU input backlog drops
	// (every namespace's, and any other process's).
	HostDrops    []HostDrops `json:"host_drops"`
	SoftnetDrops uint64      `json:"softnet_drops"`
	// HostQueues are the hosts' bounded host queues (Node.HostQueue): the
	// bytes on their links the switch had not yet received.
	HostQueues []HostQueueResult `json:"host_queues,omitempty"`
	// Servers are the servers' agents: what they dropped before a QP or
	// PDC (malformed, bad ICRC, unknown QP, wrong peer) and the replies
	// they could not send (send errors, reply-batch overruns); a UET
	// server's RCCC pacer too.
	Servers []ServerResult `json:"servers,omitempty"`
	// Tune is the RTTs the ports' tuned thresholds came from and their
	// values (File.Tune).
	Tune *TuneValues `json:"tune,omitempty"`
	// HostLost is what the host took from the run: the time a port the
	// flows cross sat idle while a sender was held, and each flow's share.
	HostLost *HostLost `json:"host_lost,omitempty"`
	// Incasts are the groups of sized flows that share a port (at least
	// two, one instance each): tail and mean FCT over the group's ideal,
	// the port's queue in BDPs while they ran.
	Incasts []IncastResult `json:"incasts,omitempty"`
	// Htsim is htsim's run of the same incast (RunOptions.Htsim), or why
	// there is none.
	Htsim *HtsimRun `json:"htsim,omitempty"`
	// DCQCN is the rocev2 flows' Rc and α every 3 ms × timescale (at
	// most maxTracedFlows flows); dcqcn.png plots it and dcqcn.csv
	// holds it (thousands of rows: not in result.json).
	DCQCN *DCQCNTrace `json:"-"`
	// E2EReactionMS is the RoCEv2 senders' end-to-end reaction: from the
	// first queue past its CE threshold at a port the flows cross to the
	// first DCQCN rate cut, resolved to the queue sampler's 3 ms ×
	// timescale (runner.e2eReaction); 0: none.
	E2EReactionMS float64 `json:"e2e_reaction_ms,omitempty"`
	// Fairness is the timed flows' Jain index while all of them ran.
	Fairness *Fairness `json:"fairness,omitempty"`
	// Check is seed 000's three layers, judged per rocev2 flow from the
	// counters along its path (Check); nil without rocev2 flows.
	Check *CheckReport `json:"check,omitempty"`
	// Matrix is the workload's collectives' completion times; nil
	// without a workload.
	Matrix *MatrixResult `json:"matrix,omitempty"`
	// Goals are the file's goals this run decides alone (File.Goals: of
	// its variant, without than), reported, not enforced.
	Goals []GoalResult `json:"goals,omitempty"`
	// Samples are the live view's, one per report interval.
	Samples []Sample `json:"samples"`
	// Files are what the run wrote besides result.json (the plots).
	Files []string `json:"files,omitempty"`
}

// LinkResult is a file link's addresses.
type LinkResult struct {
	A      string `json:"a"` // node:dev
	B      string `json:"b"`
	Subnet string `json:"subnet"`
	AAddr  string `json:"a_addr"`
	BAddr  string `json:"b_addr"`
	Relay  string `json:"relay,omitempty"`
	// Delays are the relay's delay links, a host queue of their own: one
	// per direction, on the relay's device toward each end.
	Delays []DelayResult `json:"delays,omitempty"`
}

// DelayResult is a delay link's counters (host/lab/link.DelayStats).
type DelayResult struct {
	Dev     string `json:"dev"` // relay:dev
	Packets uint64 `json:"packets"`
	// Dropped sums the forwarder's drops (queue full, oversize, write
	// errors), the TUN queue's and the kernel's.
	Dropped uint64 `json:"dropped"`
	MaxHeld int    `json:"max_held"`
	// LatenessP99US bounds the 99th percentile of how late a packet left
	// (a factor-of-two bucket), LatenessMaxUS the worst.
	LatenessP99US float64 `json:"lateness_p99_us"`
	LatenessMaxUS float64 `json:"lateness_max_us"`
	// Error says the link stopped delaying (its TUN was deleted); the
	// packets it took since are in Dropped.
	Error string `json:"error,omitempty"`
}

func delayResult(rd relayDelay) DelayResult {
	st := rd.d.Stats()
	r := DelayResult{Dev: rd.relay + ":" + rd.dev, Packets: st.Packets, Dropped: st.Dropped + st.TunDropped + st.KernelDropped + st.LostTunGone,
		MaxHeld: st.MaxHeld, LatenessP99US: float64(st.LatenessQuantile(0.99)) / 1e3, LatenessMaxUS: float64(st.LatenessMax) / 1e3}
	if err := rd.d.Err(); err != nil {
		r.Error = err.Error()
	}
	return r
}

// FlowResult is one flow's outcome.
type FlowResult struct {
	Name      string  `json:"name"`
	Group     string  `json:"group"`
	From      string  `json:"from"`
	To        string  `json:"to"`
	Transport string  `json:"transport"`
	CC        string  `json:"cc"`
	StartS    float64 `json:"start_s"` // as run (scaled)
	// Conn is the flow's connection in the workload's matrix, 1 up (0
	// for a flow of its own).
	Conn int `json:"conn,omitempty"`
	// SizeBytes is the flow's size; 0 for a timed flow.
	SizeBytes uint64 `json:"size_bytes,omitempty"`
	// Bytes is the payload acknowledged, Seconds the time it took
	// (for a sized flow its FCT), GoodputBps their ratio.
	Bytes      uint64  `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	GoodputBps float64 `json:"goodput_bps"`
	// BottleneckBps is the slowest of the flow's line rate and the ports
	// on its path; IdealFCTS the size at that rate plus the path's base
	// RTT (its links' delays, both ways); FCTRatio FCT/ideal.
	BottleneckBps uint64  `json:"bottleneck_bps"`
	FCTS          float64 `json:"fct_s,omitempty"`
	IdealFCTS     float64 `json:"ideal_fct_s,omitempty"`
	FCTRatio      float64 `json:"fct_ratio,omitempty"`
	// Wire is a uet flow's sender's wire from its server (its ACKs;
	// Fabric.StoreAndForward), its last instance's.
	Wire *WireResult `json:"wire,omitempty"`
	// DSCP is the code point of the flow's data and ACKs, CNPDSCP of its
	// CNPs (rocev2). Path are the ports its data crosses and ReplyPath
	// those its replies cross back, in path order, each with the class
	// the code point takes there (the port's dscp map): where
	// Check reads the loop's counters.
	DSCP      int       `json:"dscp"`
	CNPDSCP   int       `json:"cnp_dscp,omitempty"`
	Path      []FlowHop `json:"path,omitempty"`
	ReplyPath []FlowHop `json:"reply_path,omitempty"`
	// NP and RP are where a rocev2 flow's notification and reaction
	// points ran, or off (Node.NP, Flow.RP; "" the default, kernel).
	NP string `json:"np,omitempty"`
	RP string `json:"rp,omitempty"`
	// RoCEv2 (mlx5 names): CE-marked packets the receiver got, CNPs its
	// NP sent, CNPs the sender's RP handled and ignored (within a cut's
	// window, or all of them with rp off), packets resent by go-back-N,
	// ACK timeouts.
	TxPackets          uint64 `json:"tx_packets,omitempty"` // the sender's
	CEArrived          uint64 `json:"np_ecn_marked_roce_packets,omitempty"`
	CNPSent            uint64 `json:"np_cnp_sent,omitempty"`
	CNPHandled         uint64 `json:"rp_cnp_handled,omitempty"`
	CNPIgnored         uint64 `json:"rp_cnp_ignored,omitempty"`
	LocalAckTimeoutErr uint64 `json:"local_ack_timeout_err,omitempty"`
	// OutOfSequence counts packets the receiver took out of sequence
	// (each a NAK and a go-back-N), PacketSeqErr the NAKs the sender got.
	OutOfSequence uint64 `json:"out_of_sequence,omitempty"`
	PacketSeqErr  uint64 `json:"packet_seq_err,omitempty"`
	// PPFC at the sender (host/agent counters): stops and holds obeyed,
	// the time paused, and the notifications obeyed from the kernel's
	// intake at their arrival (rp: kernel) and lost there to a burst.
	PPFCPauses     uint64 `json:"ppfc_pauses,omitempty"`
	PPFCPausedNs   uint64 `json:"ppfc_paused_ns,omitempty"`
	PPFCKernel     uint64 `json:"ppfc_kernel,omitempty"`
	PPFCKernelLost uint64 `json:"ppfc_kernel_lost,omitempty"`
	// UET: CE-marked packets the target got, ACKs with ECN echoed (M),
	// the echoes NSCC took with the queueing delay above and under its
	// target, its multiplicative decreases and quick adapts, timeouts;
	// TxPackets is the source's packets; Retransmits is both transports'.
	CEReceived uint64 `json:"ce_received,omitempty"`
	// NoTargetCounts: an instance's target counters did not arrive
	// (the server's side channel), so CEReceived is short.
	NoTargetCounts     bool   `json:"no_target_counts,omitempty"`
	ECNEchoes          uint64 `json:"ecn_echoes,omitempty"`
	NSCCECNAboveTarget uint64 `json:"nscc_ecn_above_target_acks,omitempty"`
	NSCCECNBelowTarget uint64 `json:"nscc_ecn_below_target_acks,omitempty"`
	NSCCDecreases      uint64 `json:"nscc_decreases,omitempty"`
	NSCCQuickAdapts    uint64 `json:"nscc_quick_adapts,omitempty"`
	Timeouts           uint64 `json:"timeouts,omitempty"`
	Retransmits        uint64 `json:"retransmits"`
	// UET: the losses the sources inferred (pds.Counters.InferredLosses)
	// and the duplicates their targets reported (needless resends).
	InferredLosses      uint64 `json:"inferred_losses,omitempty"`
	SpuriousRetransmits uint64 `json:"spurious_retransmits,omitempty"`
	// TCP: the kernel's name of the congestion control, segments whose
	// ACKs echoed CE (tcpi_delivered_ce), connections without ECN.
	KernelCC    string `json:"kernel_cc,omitempty"`
	DeliveredCE uint64 `json:"delivered_ce,omitempty"`
	NoECN       int    `json:"no_ecn,omitempty"`
	TCPConns    int    `json:"tcp_conns,omitempty"` // connections that delivered
	State       string `json:"state"`
	Error       string `json:"error,omitempty"`
	// Series is a flow with count above 1: every instance and their FCTs.
	// Bytes then sums the instances, Seconds spans them, GoodputBps is
	// Bytes over the time instances ran.
	Series *SeriesResult `json:"series,omitempty"`
	// Report is perf's full report (iperf3's shape) of a single flow.
	Report *perf.Report `json:"report,omitempty"`
}

// FlowHop is a port on a flow's way and the classes its packets take
// there: Class its data's (or, on the reply path, its ACKs'), CNPClass
// its CNPs' (rocev2, reply path).
type FlowHop struct {
	Port     string `json:"port"` // switch:dev
	Class    int    `json:"class"`
	CNPClass int    `json:"cnp_class,omitempty"`
	// Branch groups ECMP alternatives: hops of one group (from 1) are
	// ports at one distance from the receiver, one of which each packet
	// crosses; 0 is a hop every packet crosses.
	Branch int `json:"branch,omitempty"`
}

// SeriesResult is a flow's instances.
type SeriesResult struct {
	Count int `json:"count"`
	// EveryS is the flow's every (as written; 0 with pause): instance k of
	// every flow with the same every and start is round k.
	EveryS    float64 `json:"every_s,omitempty"`
	Completed int     `json:"completed"`
	Failed    int     `json:"failed"`
	// NotRun were never started (the run was cut or a failure stopped it).
	NotRun int `json:"not_run,omitempty"`
	// Late started after their every slot: the previous instance ran over.
	Late int `json:"late,omitempty"`
	// FCTS is the completed instances' FCTs (seconds), FCTRatio their
	// FCT over ideal (the size at the flow's bottleneck rate plus the
	// path's base RTT).
	FCTS      stats.Dist       `json:"fct_s"`
	FCTRatio  stats.Dist       `json:"fct_ratio"`
	Instances []InstanceResult `json:"instances"`
}

// InstanceResult is one instance of a series.
type InstanceResult struct {
	// StartS is when the instance started (its connection or QP setup
	// first), EndS when it returned; Seconds is its data's time, the last
	// Seconds before EndS (for a sized instance its FCT).
	StartS    float64 `json:"start_s"`
	EndS      float64 `json:"end_s"`
	SizeBytes uint64  `json:"size_bytes,omitempty"`
	Bytes     uint64  `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	FCTS      float64 `json:"fct_s,omitempty"`
	IdealFCTS float64 `json:"ideal_fct_s,omitempty"`
	FCTRatio  float64 `json:"fct_ratio,omitempty"`
	// StarvedS is the host-lost time inside the instance's data span and
	// FCTRatioNet its FCT over the ideal extended by it (HostLost).
	StarvedS    float64 `json:"starved_s,omitempty"`
	FCTRatioNet float64 `json:"fct_ratio_net,omitempty"`
	Late        bool    `json:"late,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// PortResult is one switch port's counters after the run, at rest.
type PortResult struct {
	Name    string `json:"name"` // switch:dev
	Node    string `json:"node"`
	Dev     string `json:"dev"`
	RateBps uint64 `json:"rate_bps"`
	Watched bool   `json:"watched"`
	// Totals over the classes.
	EnqueuedPackets uint64 `json:"enqueued_packets"`
	DequeuedPackets uint64 `json:"dequeued_packets"`
	DroppedPackets  uint64 `json:"dropped_packets"`
	BacklogPackets  uint64 `json:"backlog_packets"`
	TrimmedPackets  uint64 `json:"trimmed_packets,omitempty"`
	CEMarked        uint64 `json:"ce_marked"`
	// MarkedFraction is CE marks over ECN-capable arrivals.
	MarkedFraction float64 `json:"marked_fraction"`
	// SojournP99 bounds the 99th percentile of the queueing delay (the
	// histogram bucket's upper edge, see qdisc.SojournHistogram).
	SojournP99US float64 `json:"sojourn_p99_us"`
	// MaxBacklogBytes is the largest class backlog seen.
	MaxBacklogBytes uint64 `json:"max_backlog_bytes"`
	// QueueMeanBytes, QueueP50Bytes and QueueP99Bytes are the backlog of
	// the class the flows take here, sampled every 3 ms (× timescale)
	// over the same span as Utilization; QueueSamples how many samples
	// (0: none, the port carries no flow).
	QueueMeanBytes float64 `json:"queue_mean_bytes,omitempty"`
	QueueP50Bytes  float64 `json:"queue_p50_bytes,omitempty"`
	QueueP99Bytes  float64 `json:"queue_p99_bytes,omitempty"`
	QueueSamples   int     `json:"queue_samples,omitempty"`
	// queue is every sample of the run, for queues.png.
	queue []queueSample
	// InvariantError is set when enqueued ≠ dequeued + dropped + backlog
	// (qdisc.ClassStats.CheckInvariant) in some class at rest.
	// HostDroppedPackets and HostMeanWaitUS are the host queue's, between
	// the port's departure and the peer's ingress (qdisc.HostQueueStats):
	// the kernel's, not the port's.
	HostDroppedPackets uint64  `json:"host_dropped_packets"`
	HostMeanWaitUS     float64 `json:"host_mean_wait_us"`
	// QdiscDroppedPackets are the kernel qdisc's own drops (HTB's
	// leaves), which the port's programs do not see.
	QdiscDroppedPackets uint64 `json:"qdisc_dropped_packets"`
	// Utilization is the bits the port sent over its rate × the time: from
	// the run's start to the last timed flow's end (the load the file
	// keeps up), or the whole run without timed flows. MeanSojournUS is the
	// mean queueing delay of what it sent.
	Utilization    float64 `json:"utilization"`
	MeanSojournUS  float64 `json:"mean_sojourn_us"`
	InvariantError string  `json:"invariant_error,omitempty"`
	Error          string  `json:"error,omitempty"`
	// Stats are the port's counters per class and Config its settings
	// (nil in a comparison's summary of runs).
	Stats  *qdisc.Stats  `json:"stats,omitempty"`
	Config *qdisc.Config `json:"config,omitempty"`
	// Curves are the observed marking curves of the classes that mark
	// on the backlog (WRED, step, two-threshold) and saw ECN-capable
	// packets, against the configured ones.
	Curves []ClassCurve `json:"marking_curves,omitempty"`
}

// ClassCurve is one class's marking curve, observed against configured.
type ClassCurve struct {
	Class int    `json:"class"`
	Mode  string `json:"mode"` // the configured curve, as portctl prints it
	// Rows are the bins that saw ECN-capable arrivals; Judged how many
	// of them are not AtLimit, Matched how many are within the
	// configured curve.
	Rows    []qdisc.CurveRow `json:"rows"`
	Judged  int              `json:"judged"`
	Matched int              `json:"matched"`
}

// curves compares each class's observed curve with cfg's.
func curves(st *qdisc.Stats, cfg *qdisc.Config) []ClassCurve {
	var out []ClassCurve
	for i := range st.Classes {
		if i >= len(cfg.Classes) {
			break
		}
		cc := &cfg.Classes[i]
		rows := st.Classes[i].Curve.Compare(cc)
		if len(rows) == 0 || cc.ECN == qdisc.ECNOff {
			continue
		}
		c := ClassCurve{Class: i, Mode: cc.ECNText(), Rows: rows}
		for _, r := range rows {
			if r.Match {
				c.Matched++
			}
			if !r.AtLimit {
				c.Judged++
			}
		}
		out = append(out, c)
	}
	return out
}

// ServerResult is a rocev2 server's agent's drops over the run.
type ServerResult struct {
	Node string `json:"node"`
	// Transport is the server's: rocev2 or uet. A UET server counts
	// malformed packets, send errors and reply overruns; the other
	// fields are RoCEv2's.
	Transport  string `json:"transport"`
	Malformed  uint64 `json:"malformed"`
	ICRCErrors uint64 `json:"icrc_errors"`
	UnknownQP  uint64 `json:"unknown_qp"`
	WrongPeer  uint64 `json:"wrong_peer"`
	// PKeyViolations: packets of another partition (P_Key).
	PKeyViolations uint64 `json:"pkey_violations"`
	SendErrors     uint64 `json:"send_errors"`
	ReplyOverruns  uint64 `json:"reply_overruns"`
	// Pacer is a UET server's RCCC credit pacer (nil where it granted
	// nothing): its grants and the slow pulls among them, the credit's
	// bytes, the schedule it caught up or lost. Set beside htsim's pull
	// counts: its slow pulls are where htsim's RCCC loses time
	// (docs/collectives.md).
	Pacer *rccc.PacerStats `json:"pacer,omitempty"`
	// Wire is a UET server's wires (Fabric.StoreAndForward): the data
	// it held for them, dropped past what they hold, and how late the
	// host handed it over.
	Wire *WireResult `json:"wire,omitempty"`
}

// WireResult is what an endpoint's wires held (pds.Counters' Wire*).
type WireResult struct {
	Delayed uint64 `json:"delayed"`
	Dropped uint64 `json:"dropped"`
	MaxHeld int    `json:"max_held"`
	// LateMeanS and LateMaxS: after their wire, the host's.
	LateMeanS float64 `json:"late_mean_s"`
	LateMaxS  float64 `json:"late_max_s"`
}

// wireResult is c's wires, nil without.
func wireResult(c *pds.Counters) *WireResult {
	if c == nil || c.WireDelayed == 0 && c.WireDropped == 0 {
		return nil
	}
	w := &WireResult{Delayed: c.WireDelayed, Dropped: c.WireDropped, MaxHeld: c.WireMaxHeld, LateMaxS: c.WireLateMax.Seconds()}
	if c.WireDelayed > 0 {
		w.LateMeanS = c.WireLate.Seconds() / float64(c.WireDelayed)
	}
	return w
}

// Dropped sums them.
func (s *ServerResult) Dropped() uint64 {
	var wire uint64
	if s.Wire != nil {
		wire = s.Wire.Dropped
	}
	return s.Malformed + s.ICRCErrors + s.UnknownQP + s.WrongPeer + s.PKeyViolations + s.SendErrors + s.ReplyOverruns + wire
}

// HostDrops is a host's drops outside the network.
type HostDrops struct {
	Node            string `json:"node"`
	UDPRcvbufErrors uint64 `json:"udp_rcvbuf_errors"`
}

// PEResult is a tunnel PE's counters and its agent's work after the run.
type PEResult struct {
	Node  string `json:"node"`
	Dev   string `json:"dev"`
	Path  int    `json:"path"` // the tunnel path, from 0
	Decap string `json:"decap"`
	// Agent is the agent's mode ("" without one); AgentStats what it did,
	// ReactionP50MS/P99MS the time from a light CNP's arrival to the
	// limiter's change in place.
	Agent         string    `json:"agent,omitempty"`
	AgentStats    *pe.Stats `json:"agent_stats,omitempty"`
	ReactionP50MS float64   `json:"reaction_p50_ms,omitempty"`
	ReactionP99MS float64   `json:"reaction_p99_ms,omitempty"`
	// FirstReactionMS is the PE's reaction to the onset of congestion:
	// from the lab's first light WAN CNP, stamped in BPF as a port sent
	// it, to the agent's first change in place (both CLOCK_MONOTONIC;
	// as measured, like every time here). 0: no light CNP, or no change.
	FirstReactionMS float64      `json:"first_reaction_ms,omitempty"`
	Tunnel          tunnel.Stats `json:"tunnel"`
	// AgentFailed: the agent stopped before the run's end (Error says
	// why); the run fails with ErrAgentFailed.
	AgentFailed bool   `json:"agent_failed,omitempty"`
	Error       string `json:"error,omitempty"`
}

// peResult reads PE i.
func (r *runner) peResult(i int, pp *PEPlan) PEResult {
	out := PEResult{Node: pp.Node, Dev: pp.Dev, Path: pp.Path, Decap: DecapRFC6040}
	if pp.Config.TwoThreshold {
		out.Decap = DecapTwoThreshold
	}
	var errs []string
	if st, err := r.pes[i].Stats(); err != nil {
		errs = append(errs, err.Error())
	} else {
		out.Tunnel = st
	}
	for _, a := range r.agents {
		if a.node != pp.Node || a.dev != pp.Dev {
			continue
		}
		select {
		case <-a.done: // before teardown: it died
			out.AgentFailed = true
			errs = append(errs, fmt.Sprintf("agent stopped during the run: %v", a.err))
		default:
		}
		st := a.ag.Stats()
		out.Agent, out.AgentStats = pp.Agent.Mode.String(), &st
		var ms []float64
		for _, d := range st.Reaction {
			ms = append(ms, float64(d)/1e6)
		}
		d := stats.Summarize(ms)
		out.ReactionP50MS, out.ReactionP99MS = d.P50, d.P99
		if light := r.firstLightCNP(); light > 0 && st.FirstAction > light {
			out.FirstReactionMS = float64(st.FirstAction-light) / 1e6
		}
		st.Reaction = nil // summed up above
		if err := a.ag.Err(); err != nil {
			errs = append(errs, "agent: "+err.Error())
		}
	}
	out.Error = strings.Join(errs, "; ")
	return out
}

// firstLightCNP is when any port of the lab sent its first light WAN
// CNP (CLOCK_MONOTONIC; 0: none): the onset of light congestion as a
// tunnel's ingress PE learns of it.
func (r *runner) firstLightCNP() time.Duration {
	var first time.Duration
	for _, p := range r.ports {
		for c := range qdisc.ClassID(qdisc.NumClasses) {
			light, _, err := p.FirstWANCNP(c)
			if err == nil && light > 0 && (first == 0 || light < first) {
				first = light
			}
		}
	}
	return first
}

// Sample is one report interval: every flow and every watched port.
type Sample struct {
	T     float64      `json:"t"` // seconds since the run's start
	Flows []FlowSample `json:"flows"`
	Ports []PortSample `json:"ports"`
}

// FlowSample is a flow over the sample's interval: its goodput over the
// same window as the ports' rates; Rc and cwnd as of its last report.
type FlowSample struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Instances of a series done so far.
	Instances  int     `json:"instances,omitempty"`
	GoodputBps float64 `json:"goodput_bps"`
	// RcBps is RoCEv2 DCQCN's rate (the sum over the flow's QPs),
	// CwndBytes UET NSCC's window.
	RcBps uint64 `json:"rc_bps,omitempty"`
	// Alpha is DCQCN's α, the mean over the flow's QPs.
	Alpha       float64 `json:"alpha,omitempty"`
	CwndBytes   uint64  `json:"cwnd,omitempty"`
	CNPs        uint64  `json:"cnps,omitempty"`
	Retransmits uint64  `json:"retransmits,omitempty"`
}

// PortSample is a watched port: its backlog now, and what it sent,
// marked and dropped since the last sample.
type PortSample struct {
	Name           string  `json:"name"`
	BacklogBytes   uint64  `json:"backlog_bytes"`
	DequeuedBps    float64 `json:"dequeued_bps"`
	CEMarks        uint64  `json:"ce_marks"`
	DroppedPackets uint64  `json:"dropped_packets"`
}

// Lost counts what the run lost anywhere: the ports' drops (their own,
// the kernel qdisc's and the host queues' behind them), the relays' delay
// links' drops, the hosts' socket and per-CPU backlog drops, and the
// flows' resends (a loss the counters above missed still costs one).
// Trimmed packets are not lost: the receiver learns of them. A lossless
// run has 0.
func (res *Result) Lost() uint64 {
	n := res.SoftnetDrops
	for _, p := range res.Ports {
		n += p.DroppedPackets + p.QdiscDroppedPackets + p.HostDroppedPackets
	}
	for _, l := range res.Links {
		for _, d := range l.Delays {
			n += d.Dropped
		}
	}
	for _, h := range res.HostDrops {
		n += h.UDPRcvbufErrors
	}
	for _, f := range res.Flows {
		n += f.Retransmits
	}
	return n
}

// LostBy names where what Lost counts was lost, one entry a place
// (port, link, host, flow), for a test's message.
func (res *Result) LostBy() []string {
	var out []string
	if res.SoftnetDrops != 0 {
		out = append(out, fmt.Sprintf("per-CPU backlogs: %d dropped", res.SoftnetDrops))
	}
	for _, p := range res.Ports {
		if n := p.DroppedPackets + p.QdiscDroppedPackets + p.HostDroppedPackets; n != 0 {
			out = append(out, fmt.Sprintf("port %s: %d dropped (%d by the port, %d by the kernel qdisc, %d by the host queue)",
				p.Name, n, p.DroppedPackets, p.QdiscDroppedPackets, p.HostDroppedPackets))
		}
	}
	for _, l := range res.Links {
		for _, d := range l.Delays {
			if d.Dropped != 0 {
				out = append(out, fmt.Sprintf("link %s-%s: %d dropped by its delay", l.A, l.B, d.Dropped))
			}
		}
	}
	for _, h := range res.HostDrops {
		if h.UDPRcvbufErrors != 0 {
			out = append(out, fmt.Sprintf("node %s: %d UDP receive buffer errors", h.Node, h.UDPRcvbufErrors))
		}
	}
	for _, f := range res.Flows {
		if f.Retransmits != 0 {
			out = append(out, fmt.Sprintf("flow %s: %d resent (%d timeouts, %d inferred losses, %d reported needless)",
				f.Name, f.Retransmits, f.Timeouts, f.InferredLosses, f.SpuriousRetransmits))
		}
	}
	return out
}

// CNPs are the CNPs the rocev2 flows' receivers sent, and how many of
// them no sender handled or ignored (0: every CNP arrived); ok is false
// without a rocev2 flow.
func (res *Result) CNPs() (sent, unanswered uint64, ok bool) {
	for _, f := range res.Flows {
		if f.Transport != TransportRoCEv2 {
			continue
		}
		ok = true
		sent += f.CNPSent
		if got := f.CNPHandled + f.CNPIgnored; f.CNPSent > got {
			unanswered += f.CNPSent - got
		}
	}
	return sent, unanswered, ok
}

// Failed is the number of flows that failed.
func (res *Result) Failed() int {
	n := 0
	for _, f := range res.Flows {
		if f.Error != "" {
			n++
		}
	}
	return n
}

func (r *runner) newResult() *Result {
	res := &Result{Schema: ResultSchema, Name: r.f.RunName(), File: r.f.Path, RunID: r.lab.RunID(), TimelineScale: r.scale, Timescale: r.p.Timescale.K()}
	for _, lp := range r.p.Links {
		res.Links = append(res.Links, LinkResult{
			A: lp.A.Node + ":" + lp.A.Dev, B: lp.B.Node + ":" + lp.B.Dev, Subnet: lp.Subnet.String(),
			AAddr: lp.A.Addr.String(), BAddr: lp.B.Addr.String(), Relay: lp.Relay,
		})
	}
	return res
}

// flowResult sums a flow's instances up.
func flowResult(fr *flowRun) FlowResult {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	fl, fp := fr.plan.Flow, fr.plan
	out := FlowResult{Name: fl.Name, Group: fl.Group, From: fl.From, To: fl.To, Transport: fl.Transport, CC: fl.CC,
		StartS: fr.start.Seconds(), Conn: fl.conn, BottleneckBps: uint64(fp.Bottleneck), State: fr.state}
	if len(fr.instances) == 0 {
		out.Error = "not started"
		return out
	}
	ins := make([]InstanceResult, len(fr.instances))
	var firstErr string
	failed := 0
	for k := range fr.instances {
		ins[k] = fr.plan.instanceResult(&fr.instances[k], &out)
		if ins[k].Error != "" {
			failed++
			if firstErr == "" {
				firstErr = ins[k].Error
			}
		}
	}
	if fl.Count <= 1 {
		in := ins[0]
		out.SizeBytes, out.Bytes, out.Seconds = in.SizeBytes, in.Bytes, in.Seconds
		out.FCTS, out.IdealFCTS, out.FCTRatio = in.FCTS, in.IdealFCTS, in.FCTRatio
		if out.Seconds > 0 {
			out.GoodputBps = float64(out.Bytes) * 8 / out.Seconds
		}
		out.Report = fr.instances[0].report
		out.Error = in.Error
		if out.Error == "" && out.Bytes == 0 {
			out.Error = "delivered nothing"
		}
		return out
	}
	// A series: its totals, the FCTs' distribution, every instance.
	s := &SeriesResult{Count: fl.Count, EveryS: fl.Every.Seconds(), Instances: ins}
	var fcts, ratios []float64
	var busy float64
	for _, in := range ins {
		out.Bytes += in.Bytes
		busy += in.Seconds
		if in.Late {
			s.Late++
		}
		if in.Error != "" {
			continue
		}
		s.Completed++
		fcts = append(fcts, in.FCTS)
		if in.FCTRatio > 0 {
			ratios = append(ratios, in.FCTRatio)
		}
	}
	s.Failed = len(ins) - s.Completed
	s.NotRun = fl.Count - len(ins)
	s.FCTS, s.FCTRatio = stats.Summarize(fcts), stats.Summarize(ratios)
	out.Series = s
	out.Seconds = ins[len(ins)-1].EndS - ins[0].StartS
	if busy > 0 {
		out.GoodputBps = float64(out.Bytes) * 8 / busy
	}
	switch {
	case failed > 0:
		out.Error = fmt.Sprintf("%d of %d instances failed; the first: %s", failed, fl.Count, firstErr)
	case s.NotRun > 0:
		out.Error = fmt.Sprintf("%d of %d instances did not run", s.NotRun, fl.Count)
	}
	return out
}

// instanceResult is one instance's outcome; its counters add to out's.
func (fp *FlowPlan) instanceResult(ir *instanceRun, out *FlowResult) InstanceResult {
	in := InstanceResult{StartS: ir.start.Seconds(), EndS: ir.end.Seconds(), SizeBytes: ir.size, Late: ir.late}
	if ir.err != nil {
		in.Error = ir.err.Error()
	}
	complete := func() {
		if ir.size != 0 && in.Bytes >= ir.size && in.Error == "" {
			in.FCTS = in.Seconds
			in.IdealFCTS = fp.IdealFCT(ir.size).Seconds()
			if in.IdealFCTS > 0 {
				in.FCTRatio = in.FCTS / in.IdealFCTS
			}
		}
	}
	if t := ir.tcp; t != nil {
		in.Bytes, in.Seconds = t.Delivered, t.Elapsed.Seconds()
		out.Retransmits += t.Retransmits
		out.DeliveredCE += t.DeliveredCE
		if t.CC != "" {
			out.KernelCC = t.CC
		}
		if t.Delivered > 0 {
			out.TCPConns++
			if !t.ECN {
				out.NoECN++
			}
		}
		complete()
		return in
	}
	r := ir.report
	if r == nil {
		if in.Error == "" {
			in.Error = "no report"
		}
		return in
	}
	e := &r.End
	in.Bytes, in.Seconds = e.SumSent.Bytes, e.SumSent.Seconds
	retx := e.SumSent.Retransmits
	defer func() { out.Retransmits += retx }()
	complete()
	if fp.Flow.Transport == TransportUET {
		if u := e.UET; u != nil {
			if c := u.Client; c != nil {
				if w := wireResult(c); w != nil {
					out.Wire = w
				}
				out.TxPackets += c.TxPackets
				out.ECNEchoes += c.ECNEchoes
				out.Timeouts += c.Timeouts
				out.InferredLosses += c.InferredLosses
				out.SpuriousRetransmits += c.SpuriousRetransmits
				retx = c.Retransmits
			}
			for _, c := range u.CCCs {
				if n := c.NSCC; n != nil {
					out.NSCCDecreases += n.Decreases
					out.NSCCQuickAdapts += n.QuickAdapts
					out.NSCCECNAboveTarget += n.ECNAboveTargetAcks
					out.NSCCECNBelowTarget += n.ECNBelowTargetAcks
				}
			}
			for _, r := range u.Receiver {
				out.CEReceived += r.CEReceived
			}
			if u.Receiver == nil {
				out.NoTargetCounts = true
			}
		}
	} else {
		for _, s := range e.Streams {
			out.CNPHandled += s.Sender.RPCNPHandled
			out.CNPIgnored += s.Sender.RPCNPIgnored
			out.LocalAckTimeoutErr += s.Sender.LocalAckTimeoutErr
			out.PacketSeqErr += s.Sender.PacketSeqErr
			out.PPFCPauses += s.Sender.PPFCPauses + s.Sender.PPFCHolds
			out.PPFCPausedNs += s.Sender.PPFCPausedNs
			out.PPFCKernel += s.Sender.PPFCKernel
			out.PPFCKernelLost += s.Sender.PPFCKernelLost
			out.CNPSent += s.Receiver.NPCNPSent
			out.CEArrived += s.Receiver.NPECNMarkedRoCEPackets
			out.TxPackets += s.Sender.TxPackets
			out.OutOfSequence += s.Receiver.OutOfSequence
		}
	}
	return in
}

// fill sums a port's stats up.
func (pr *PortResult) fill(st *qdisc.Stats) {
	pr.Stats = st
	t := st.Total()
	pr.MeanSojournUS = float64(t.MeanSojourn()) / 1e3
	pr.HostDroppedPackets, pr.HostMeanWaitUS = t.Host.DroppedPackets, float64(t.Host.MeanWait())/1e3
	pr.EnqueuedPackets, pr.DequeuedPackets = t.EnqueuedPackets, t.DequeuedPackets
	pr.DroppedPackets, pr.BacklogPackets, pr.TrimmedPackets = t.DroppedPackets(), t.BacklogPackets, t.TrimmedPackets
	pr.CEMarked = t.CEMarked()
	if ect := t.ArrivedECT0 + t.ArrivedECT1; ect > 0 {
		pr.MarkedFraction = float64(pr.CEMarked) / float64(ect)
	}
	pr.SojournP99US = float64(t.Sojourn.Quantile(0.99)) / 1e3
	var errs []string
	for i := range st.Classes {
		c := &st.Classes[i]
		pr.MaxBacklogBytes = max(pr.MaxBacklogBytes, c.MaxBacklogBytes)
		if err := c.CheckInvariant(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	pr.InvariantError = strings.Join(errs, "; ")
}

// write puts result.json and the plots in dir.
func (res *Result) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files, perr := res.plot(dir)
	if res.DCQCN != nil {
		path := filepath.Join(dir, "dcqcn.csv")
		if err := res.DCQCN.writeCSV(path); err != nil {
			return err
		}
		files = append(files, path)
	}
	res.Files = files
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return perr
}

// writeLoop prints the DCQCN loop end to end, with rocev2 flows: the
// ports' CE marks, the receivers' CNPs (np_cnp_sent), the senders'
// handled and ignored ones, and the RC error counters (mlx5 names).
func (res *Result) writeLoop(w io.Writer) {
	sent, unanswered, ok := res.CNPs()
	if !ok {
		return
	}
	var ce, handled, ignored, retx, ooo, seqErr, timeouts uint64
	for _, p := range res.Ports {
		ce += p.CEMarked
	}
	for _, f := range res.Flows {
		if f.Transport == TransportRoCEv2 {
			handled, ignored, retx = handled+f.CNPHandled, ignored+f.CNPIgnored, retx+f.Retransmits
			ooo, seqErr, timeouts = ooo+f.OutOfSequence, seqErr+f.PacketSeqErr, timeouts+f.LocalAckTimeoutErr
		}
	}
	verdict := "every CNP arrived"
	if unanswered > 0 {
		verdict = fmt.Sprintf("%d CNPs never arrived", unanswered)
	}
	fmt.Fprintf(w, "DCQCN loop: %d CE marks at the ports -> np_cnp_sent %d -> rp_cnp_handled %d + rp_cnp_ignored %d (%s); RC: %d resent, out_of_sequence %d, packet_seq_err %d, local_ack_timeout_err %d\n",
		ce, sent, handled, ignored, verdict, retx, ooo, seqErr, timeouts)
	var pauses, pausedNs, kernel, kernelLost uint64
	for _, f := range res.Flows {
		pauses, pausedNs = pauses+f.PPFCPauses, pausedNs+f.PPFCPausedNs
		kernel, kernelLost = kernel+f.PPFCKernel, kernelLost+f.PPFCKernelLost
	}
	if pauses+kernel > 0 {
		fmt.Fprintf(w, "PPFC at the senders: %d stops and holds obeyed, %.1f ms paused in all; %d notifications obeyed from their arrival (the kernel's intake), %d lost to a burst there\n",
			pauses, float64(pausedNs)/1e6, kernel, kernelLost)
	}
}

// writeDetails prints what the port table has no room for: the
// utilization net of the time the host took from the port, its trims,
// the PPFC notifications it sent, and its marking curves against the
// configured.
func (p *PortResult) writeDetails(w io.Writer, hl *HostLost) {
	if hl != nil && hl.Wall > 0 {
		for _, pr := range hl.Ports {
			if pr.Name == p.Name && pr.Starved > 0 && pr.Starved < hl.Wall {
				fmt.Fprintf(w, "%s: utilization %.1f%%, %.1f%% net of the %.0f ms the host took from it\n", p.Name, 100*p.Utilization,
					100*p.Utilization*float64(hl.Wall)/float64(hl.Wall-pr.Starved), float64(pr.Starved)/1e6)
			}
		}
	}
	if p.TrimmedPackets > 0 && p.EnqueuedPackets > 0 {
		fmt.Fprintf(w, "%s: trimmed %d packets (%s of the arrivals) instead of dropping them\n", p.Name, p.TrimmedPackets,
			pct(float64(p.TrimmedPackets)/float64(p.EnqueuedPackets)))
	}
	if p.Stats != nil {
		var t qdisc.ClassStats
		for i := range p.Stats.Classes {
			c := &p.Stats.Classes[i]
			t.PPFCStopsSent += c.PPFCStopsSent
			t.PPFCHoldsSent += c.PPFCHoldsSent
			t.PPFCResumesSent += c.PPFCResumesSent
			t.PPFCAlarmsSent += c.PPFCAlarmsSent
			t.PPFCStopsCoalesced += c.PPFCStopsCoalesced
			t.PPFCHoldsCoalesced += c.PPFCHoldsCoalesced
			t.PPFCAlarmsCoalesced += c.PPFCAlarmsCoalesced
		}
		if t.PPFCStopsSent+t.PPFCHoldsSent+t.PPFCResumesSent+t.PPFCAlarmsSent > 0 {
			fmt.Fprintf(w, "%s: PPFC sent %d stops, %d holds, %d resumes, %d alarms (coalesced: %d stops, %d holds, %d alarms)\n", p.Name,
				t.PPFCStopsSent, t.PPFCHoldsSent, t.PPFCResumesSent, t.PPFCAlarmsSent, t.PPFCStopsCoalesced, t.PPFCHoldsCoalesced, t.PPFCAlarmsCoalesced)
		}
	}
	for _, c := range p.Curves {
		fmt.Fprintf(w, "%s: class %d marking curve, observed vs configured (%s): %d of %d bins within\n", p.Name, c.Class, c.Mode, c.Matched, c.Judged)
		fmt.Fprintf(w, "  %-17s %12s %10s %10s  %s\n", "backlog found KB", "ECT arrivals", "CE marks", "observed", "configured")
		for _, r := range c.Rows {
			conf := pct(r.ConfLo)
			if r.ConfHi != r.ConfLo {
				conf += " - " + pct(r.ConfHi)
			}
			verdict := "ok"
			switch {
			case r.AtLimit:
				verdict = "near the limit: not judged"
			case !r.Match:
				verdict = "MISMATCH"
			}
			fmt.Fprintf(w, "  %7.0f - %7.0f %12d %10d %10s  %-17s %s\n", float64(r.LoBytes)/1024, float64(r.HiBytes)/1024, r.Arrivals, r.Marks, pct(r.Observed), conf, verdict)
		}
	}
}

// pct prints a fraction as a percentage with about 3 significant digits.
func pct(f float64) string {
	switch v := 100 * f; {
	case v == 0:
		return "0%"
	case v < 0.1:
		return fmt.Sprintf("%.3f%%", v)
	case v < 10:
		return fmt.Sprintf("%.2f%%", v)
	default:
		return fmt.Sprintf("%.1f%%", v)
	}
}

// WriteSample prints a sample as the live view's lines: one per flow,
// one per watched port.
func WriteSample(w io.Writer, s *Sample) {
	fmt.Fprintf(w, "t=%5.1fs", s.T)
	for _, f := range s.Flows {
		switch f.State {
		case stateRunning:
			fmt.Fprintf(w, "  %s %s", f.Name, mbps(f.GoodputBps))
			switch {
			case f.RcBps > 0:
				fmt.Fprintf(w, " (Rc %s, α %.3f)", mbps(float64(f.RcBps)), f.Alpha)
			case f.CwndBytes > 0:
				fmt.Fprintf(w, " (cwnd %s)", kb(f.CwndBytes))
			}
		default:
			fmt.Fprintf(w, "  %s %s", f.Name, f.State)
		}
	}
	fmt.Fprintln(w)
	for _, p := range s.Ports {
		fmt.Fprintf(w, "         port %s: %s out, backlog %s, %d CE, %d dropped\n", p.Name, mbps(p.DequeuedBps), kb(p.BacklogBytes), p.CEMarks, p.DroppedPackets)
	}
}

// WriteSummary prints the result's tables: flows, then ports.
func (res *Result) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "\n%s (run %s), %.1f s", res.Name, res.RunID, res.Seconds)
	if res.Timescale != 1 {
		fmt.Fprintf(w, ", timescale %g (the fabric %g times slower; times as measured)", res.Timescale, res.Timescale)
	}
	if res.TimelineScale != 1 {
		fmt.Fprintf(w, ", timeline scaled by %.3g", res.TimelineScale)
	}
	if res.Interrupted {
		fmt.Fprint(w, ", interrupted")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-12s %-10s %10s %12s %9s %9s %7s  %s\n", "flow", "transport", "bytes", "goodput", "FCT", "FCT/ideal", "retx", "congestion control")
	if slices.ContainsFunc(res.Flows, func(f FlowResult) bool { return f.Series != nil }) {
		fmt.Fprintf(w, "%-12s (a series: FCT and FCT/ideal are its instances' p50/p99)\n", "")
	}
	matrixShown := 0
	for _, f := range res.Flows {
		if f.Conn > 0 {
			// A matrix's flows are in result.json; its collectives below.
			if matrixShown++; matrixShown > maxMatrixFlowsShown {
				continue
			}
		}
		fct, ratio := "-", "-"
		switch {
		case f.FCTS > 0:
			fct, ratio = fmt.Sprintf("%.3fs", f.FCTS), fmt.Sprintf("%.2f", f.FCTRatio)
		case f.Series != nil && f.Series.Completed > 0:
			// A series: median and p99 of its instances.
			fct = fmt.Sprintf("%.0f/%.0fms", 1e3*f.Series.FCTS.P50, 1e3*f.Series.FCTS.P99)
			ratio = fmt.Sprintf("%.1f/%.1f", f.Series.FCTRatio.P50, f.Series.FCTRatio.P99)
		}
		cc := f.CC
		switch f.Transport {
		case TransportUET:
			cc += fmt.Sprintf(": %d ECN echoes, %d decreases, %d timeouts", f.ECNEchoes, f.NSCCDecreases, f.Timeouts)
		case TransportTCP:
			cc += fmt.Sprintf(" (%s): %d segments CE-echoed", f.KernelCC, f.DeliveredCE)
			if f.NoECN > 0 {
				cc += fmt.Sprintf(", %d connections without ECN", f.NoECN)
			}
		default:
			cc += fmt.Sprintf(": %d CNPs sent, %d handled, %d ACK timeouts", f.CNPSent, f.CNPHandled, f.LocalAckTimeoutErr)
		}
		if s := f.Series; s != nil {
			cc += fmt.Sprintf("; %d of %d instances done", s.Completed, s.Count)
			if s.Late > 0 {
				cc += fmt.Sprintf(", %d late", s.Late)
			}
		}
		fmt.Fprintf(w, "%-12s %-10s %10s %12s %9s %9s %7d  %s\n", f.Name, f.Transport, perf.FormatBytes(float64(f.Bytes)), mbps(f.GoodputBps), fct, ratio, f.Retransmits, cc)
		if f.Error != "" {
			fmt.Fprintf(w, "%-12s FAILED: %s\n", "", f.Error)
		}
	}
	fmt.Fprintf(w, "%-16s %10s %7s %10s %9s %8s %10s %12s\n", "port", "rate", "util", "packets", "marked", "drops", "p99 wait", "max backlog")
	for _, p := range res.Ports {
		if p.Error != "" {
			fmt.Fprintf(w, "%-16s error: %s\n", p.Name, p.Error)
			continue
		}
		wait := "-" // no sojourn sampled
		if p.SojournP99US > 0 {
			wait = units.FormatBound(time.Duration(p.SojournP99US * 1e3))
		}
		fmt.Fprintf(w, "%-16s %10s %6.1f%% %10d %8.2f%% %8d %10s %12s\n", p.Name, units.Rate(p.RateBps), 100*p.Utilization, p.EnqueuedPackets, 100*p.MarkedFraction,
			p.DroppedPackets, wait, kb(p.MaxBacklogBytes))
		if p.InvariantError != "" {
			fmt.Fprintf(w, "%-16s counters do not add up: %s\n", "", p.InvariantError)
		}
	}
	for _, p := range res.Ports {
		if p.Watched && p.Error == "" {
			p.writeDetails(w, res.HostLost)
		}
	}
	res.writeLoop(w)
	writeIncasts(w, res.Incasts, res.Htsim)
	if l := res.HostLost.line(); l != "" {
		fmt.Fprintln(w, l)
	}
	for _, sv := range res.Servers {
		if n := sv.Dropped(); n > 0 {
			fmt.Fprintf(w, "the %s server on %s dropped %d packets before a QP or PDC or replies it could not send: %+v\n", sv.Transport, sv.Node, n, sv)
		}
	}
	for _, h := range res.HostDrops {
		if h.UDPRcvbufErrors > 0 {
			fmt.Fprintf(w, "host %s dropped %d datagrams: its UDP receive buffer was full (a host queue, not the network)\n", h.Node, h.UDPRcvbufErrors)
		}
	}
	if res.SoftnetDrops > 0 {
		fmt.Fprintf(w, "the kernel dropped %d packets from full per-CPU input backlogs (netdev_max_backlog)\n", res.SoftnetDrops)
	}
	writeHostQueues(w, res.HostQueues)
	for _, l := range res.Links {
		for _, d := range l.Delays {
			switch {
			case d.Error != "":
				fmt.Fprintf(w, "delay link %s broke: %s\n", d.Dev, d.Error)
			case d.Dropped > 0:
				fmt.Fprintf(w, "delay link %s dropped %d of %d packets (a host queue: lower the rates)\n", d.Dev, d.Dropped, d.Packets+d.Dropped)
			}
		}
	}
	if f := res.Fairness; f != nil {
		fmt.Fprintf(w, "fairness: Jain %.3f over the timed flows while all ran, t=%.1f-%.1fs:", f.Jain, f.FromS, f.ToS)
		for i, n := range f.Flows {
			fmt.Fprintf(w, " %s %.1f", n, f.GoodputBps[i]/1e6)
		}
		fmt.Fprintln(w, " Mbit/s")
	}
	if matrixShown > maxMatrixFlowsShown {
		fmt.Fprintf(w, "… %d more of the matrix's flows in result.json\n", matrixShown-maxMatrixFlowsShown)
	}
	if res.Matrix != nil {
		res.Matrix.write(w)
	}
	if c := res.Check; c != nil {
		WriteCheck(w, c)
	}
	if res.E2EReactionMS > 0 {
		fmt.Fprintf(w, "end-to-end reaction %.1f ms: a queue past its CE threshold to the first DCQCN cut (sampled every %v)\n",
			res.E2EReactionMS, time.Duration(res.Timescale*float64(incastSample)))
	}
	for _, p := range res.PEs {
		d := &p.Tunnel.Decap
		fmt.Fprintf(w, "pe %s:%s (%s): %d encapsulated, %d decapsulated, %d light marks kept outside, CNPs from the WAN: %d light, %d heavy",
			p.Node, p.Dev, p.Decap, p.Tunnel.Encap.Packets, d.Packets, d.Light, d.CNPLight, d.CNPHeavy)
		if a := p.AgentStats; a != nil {
			fmt.Fprintf(w, "; agent %s: %d rate changes", p.Agent, a.RateUpdates)
			if a.RateUpdates > 0 {
				fmt.Fprintf(w, ", least rate %s, reaction p50 %.2f ms", a.MinRate, p.ReactionP50MS)
			}
			if p.FirstReactionMS > 0 {
				fmt.Fprintf(w, ", first light CNP to first change %.2f ms", p.FirstReactionMS)
			}
		}
		fmt.Fprintln(w)
		if p.Error != "" {
			fmt.Fprintf(w, "%-16s error: %s\n", "", p.Error)
		}
	}
	writeGoals(w, res.Goals)
	for _, f := range res.Files {
		fmt.Fprintf(w, "wrote %s\n", f)
	}
}

func mbps(bps float64) string { return fmt.Sprintf("%.1f Mbit/s", bps/1e6) }

func kb(b uint64) string { return fmt.Sprintf("%.1f KB", float64(b)/1e3) }

// HostQueueResult is one host's host queue: the bytes its senders had on
// its links that the switch had not yet received (host/linkq).
type HostQueueResult struct {
	Host       string `json:"host"`
	LimitBytes int    `json:"limit_bytes"`
	// MaxBytes is the most a link of the host held when a packet reached
	// the switch (it may pass the limit by what other senders of the host
	// and the kernel sent).
	MaxBytes uint64 `json:"max_bytes"`
	// WrittenOff counts the times a full queue saw nothing arrive for
	// linkq.StuckAfter and its bytes were taken as lost on the way.
	WrittenOff uint64 `json:"written_off,omitempty"`
}

// writeHostQueues prints the hosts' host queues on one line.
func writeHostQueues(w io.Writer, hq []HostQueueResult) {
	if len(hq) == 0 {
		return
	}
	parts := make([]string, len(hq))
	var off uint64
	for i, h := range hq {
		parts[i] = fmt.Sprintf("%s max %.1f KiB of %s", h.Host, float64(h.MaxBytes)/1024, units.ByteSize(h.LimitBytes))
		off += h.WrittenOff
	}
	line := "host queues (sent, not yet at the switch; rocev2 and uet senders wait at the bound): " + strings.Join(parts, ", ")
	if off > 0 {
		line += fmt.Sprintf("; %d times written off as lost on the way", off)
	}
	fmt.Fprintln(w, line)
}

// fillPath says where the flow's packets went: its code points, the
// classes they take at each port of its data and reply paths, and where
// its DCQCN roles ran.
func (p *Plan) fillPath(out *FlowResult, fp *FlowPlan) {
	var data, cnp uint8
	switch fp.Flow.Transport {
	case TransportTCP:
		data = uint8(fp.Flow.DSCP)
	default:
		data, cnp = fp.Client.DSCPs()
	}
	out.DSCP, out.CNPDSCP = int(data), int(cnp)
	switch fp.Flow.Transport {
	case TransportRoCEv2:
		out.NP, out.RP = p.Servers[fp.Server].NP, fp.Flow.RP
	case TransportUET:
		out.NP = p.Servers[fp.Server].NP
	}
	class := func(j int, d uint8) int { return int(p.Ports[j].Config.DSCPClass[d&(qdisc.NumDSCP-1)]) }
	for i, j := range fp.Ports {
		out.Path = append(out.Path, FlowHop{Port: p.Ports[j].Name, Class: class(j, data), Branch: fp.Branches[i]})
	}
	for i, j := range fp.ReplyPorts {
		h := FlowHop{Port: p.Ports[j].Name, Class: class(j, data), Branch: fp.ReplyBranches[i]}
		if cnp != 0 {
			h.CNPClass = class(j, cnp)
		}
		out.ReplyPath = append(out.ReplyPath, h)
	}
}
