package perf

import (
	"encoding/json"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/rccc"
)

// Report is a run's result, shaped like iperf3's JSON (-J): start,
// intervals, end. RoCE adds QP numbers, the DCQCN settings, the reaction
// point's state per interval and the NIC counters (mlx5 names) of both
// ends. UET (protocol "UET") adds job IDs and PDCs, the CCC's window per
// interval and the endpoints' counters (end.uet).
type Report struct {
	Start     Start      `json:"start"`
	Intervals []Interval `json:"intervals"`
	End       End        `json:"end"`
	// Interrupted is set when the run was cut short (ctx done, SIGINT).
	Interrupted bool `json:"interrupted,omitempty"`
	// Error is why the run failed, if it did after it started.
	Error string `json:"error,omitempty"`
}

// Start describes the setup.
type Start struct {
	Connected    []Connected  `json:"connected"`
	Version      string       `json:"version"`
	SystemInfo   string       `json:"system_info,omitempty"`
	Timestamp    Timestamp    `json:"timestamp"`
	ConnectingTo ConnectingTo `json:"connecting_to"`
	TestStart    TestStart    `json:"test_start"`
}

// Connected is one QP pair: this end's QP and the server's, with the
// addresses their RoCE packets use.
type Connected struct {
	LocalHost   string `json:"local_host"`
	LocalPort   uint16 `json:"local_port"`  // UDP, where the QP receives
	SourcePort  uint16 `json:"source_port"` // UDP, what the QP sends from
	RemoteHost  string `json:"remote_host"`
	RemotePort  uint16 `json:"remote_port"` // UDP
	QPN         uint32 `json:"qpn"`
	RemoteQPN   uint32 `json:"remote_qpn"`
	PSN         uint32 `json:"psn"`
	RemotePSN   uint32 `json:"remote_psn"`
	RKey        uint32 `json:"rkey"`
	RemoteRKey  uint32 `json:"remote_rkey"`
	VAddr       uint64 `json:"vaddr"`
	RemoteVAddr uint64 `json:"remote_vaddr"`
	// UET: the stream's job and this end's PDC ID (its spdcid).
	JobID uint32 `json:"job_id,omitempty"`
	PDC   uint16 `json:"pdc,omitempty"`
}

// Timestamp is when the run started, as iperf3 prints it.
type Timestamp struct {
	Time     string `json:"time"`     // "Mon, 02 Jan 2006 15:04:05 GMT"
	TimeSecs int64  `json:"timesecs"` // Unix seconds
}

// ConnectingTo is the side channel's address.
type ConnectingTo struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// TestStart is the test's parameters, iperf3's fields first.
type TestStart struct {
	Protocol   string  `json:"protocol"` // "RoCEv2"
	NumStreams int     `json:"num_streams"`
	Blksize    int     `json:"blksize"`  // message bytes
	Omit       float64 `json:"omit"`     // seconds
	Duration   float64 `json:"duration"` // seconds; 0 with -n
	Bytes      uint64  `json:"bytes"`    // -n, 0 for a timed run
	Blocks     uint64  `json:"blocks"`   // messages over all QPs with -n
	Reverse    int     `json:"reverse"`  // always 0
	TOS        int     `json:"tos"`      // DSCP << 2 (packets are sent ECT(0))
	DSCP       int     `json:"dscp"`
	CNPDSCP    int     `json:"cnp_dscp"`
	MTU        int     `json:"mtu"`
	Op         string  `json:"op"`            // write | send
	CC         string  `json:"cc"`            // dcqcn | none
	Profile    string  `json:"dcqcn_profile"` // mlx5 | paper
	// DCQCN is every mlx5 knob's effective value, in the mlx5 unit
	// (Mbit/s, µs, bytes, …); DCQCNVariants the variant switches.
	DCQCN         map[string]json.Number `json:"dcqcn"`
	DCQCNVariants map[string]string      `json:"dcqcn_variants"`
	LineRateBps   uint64                 `json:"line_rate_bps"` // 0: unpaced (--cc none)
	Window        int                    `json:"window"`
	AckReqEvery   int                    `json:"ackreq_every"`
	MaxBurst      int                    `json:"max_burst"`
	AckTimeoutUs  float64                `json:"ack_timeout_us"`
	RetryCount    int                    `json:"retry_count"`
	Verify        bool                   `json:"verify"`
	Interval      float64                `json:"interval"` // seconds
	// RawForPorts are the devices of the sender's namespace with a port
	// attached, for which --send auto sent every packet raw (a GSO send
	// would be one packet to the port; qdisc.PortsHere).
	RawForPorts []string `json:"raw_for_ports,omitempty"`
	// BaseRTTUs is NSCC's configured base RTT (UET).
	BaseRTTUs float64 `json:"base_rtt_us,omitempty"`
	// LB is the entropy load balancer of every PDC (--lb: oblivious,
	// bitmap, reps, mixed; UET), LBSeed the seed of their draws; absent:
	// none, one EV per PDC.
	LB     string `json:"lb,omitempty"`
	LBSeed uint64 `json:"lb_seed,omitempty"`
	// Loss is the PDCs' loss inference (--loss: rack, sleek, none; UET).
	Loss string `json:"loss,omitempty"`
}

// setAmount sets what the test sends: bytes in messages of msgBytes, or
// for a timed test (bytes 0) d.
func (ts *TestStart) setAmount(bytes uint64, msgBytes int, d time.Duration) {
	if bytes > 0 {
		ts.Bytes = bytes
		ts.Blocks = ceilDiv(bytes, uint64(msgBytes))
		return
	}
	ts.Duration = d.Seconds()
}

// Interval is one report interval: every QP and their sum.
type Interval struct {
	Streams []IntervalStream `json:"streams"`
	Sum     IntervalSum      `json:"sum"`
}

// IntervalStream is one QP over one interval. Rc, Rt and α are the
// reaction point's state at the interval's end; the counters are what
// happened during the interval.
type IntervalStream struct {
	ID            uint32  `json:"id"` // the client's QPN
	Start         float64 `json:"start"`
	End           float64 `json:"end"`
	Seconds       float64 `json:"seconds"`
	Bytes         uint64  `json:"bytes"`           // payload acknowledged
	BitsPerSecond float64 `json:"bits_per_second"` // goodput
	Omitted       bool    `json:"omitted"`
	Sender        bool    `json:"sender"`
	// Rc and Rt in bit/s (--cc none: the pacing cap, 0 unpaced), α of 1.
	RcBps       uint64  `json:"rc_bps"`
	RtBps       uint64  `json:"rt_bps"`
	Alpha       float64 `json:"alpha"`
	CNPHandled  uint64  `json:"cnp_handled"`
	CNPIgnored  uint64  `json:"cnp_ignored"`
	Retransmits uint64  `json:"retransmits"` // packets sent again (go-back-N)
	TxPackets   uint64  `json:"tx_packets"`
	// UET: the CCC's window and bytes in flight at the interval's end
	// (one CCC for all the streams to the server); at the server, the
	// CE-marked and duplicate packets of the interval.
	CwndBytes     uint64 `json:"cwnd,omitempty"`
	InFlightBytes uint64 `json:"in_flight,omitempty"`
	// CreditBytes is the CCC's RCCC credit at the interval's end (0 or
	// less: waiting for a grant); absent without RCCC (--cc nscc, none).
	CreditBytes *int   `json:"credit,omitempty"`
	CEReceived  uint64 `json:"ce_received,omitempty"`
	Duplicates  uint64 `json:"duplicates,omitempty"`
}

// IntervalSum adds up the streams of one interval; RcBps is the sum of
// the QPs' rates.
type IntervalSum struct {
	Start         float64 `json:"start"`
	End           float64 `json:"end"`
	Seconds       float64 `json:"seconds"`
	Bytes         uint64  `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Omitted       bool    `json:"omitted"`
	Sender        bool    `json:"sender"`
	RcBps         uint64  `json:"rc_bps"`
	CNPHandled    uint64  `json:"cnp_handled"`
	CNPIgnored    uint64  `json:"cnp_ignored"`
	Retransmits   uint64  `json:"retransmits"`
	TxPackets     uint64  `json:"tx_packets"`
	CwndBytes     uint64  `json:"cwnd,omitempty"`      // UET
	InFlightBytes uint64  `json:"in_flight,omitempty"` // UET
	CreditBytes   *int    `json:"credit,omitempty"`    // UET, RCCC
	CEReceived    uint64  `json:"ce_received,omitempty"`
	Duplicates    uint64  `json:"duplicates,omitempty"`
}

// End is the summary: per QP, summed, the counters of both ends and the
// CPU time.
type End struct {
	Streams     []EndStream `json:"streams"`
	SumSent     Sum         `json:"sum_sent"`
	SumReceived Sum         `json:"sum_received"`
	Counters    EndCounters `json:"counters"`
	CPU         CPU         `json:"cpu_utilization_percent"`
	// Perftest is ib_write_bw's summary row (with --perftest).
	Perftest *Perftest `json:"perftest,omitempty"`
	// UET is a UET run's transport counters.
	UET *UETEnd `json:"uet,omitempty"`
}

// startSums starts both sums over span.
func (e *End) startSums(span Sum) {
	e.SumSent, e.SumReceived = span, span
	e.SumSent.Sender = true
}

// addStream sets the rates of a stream's two sides (a server knows only
// the receiver's), appends them and adds their bytes and messages to the
// sums (retransmissions are the transport's to add: UET counts them per
// endpoint).
func (e *End) addStream(snd, rcv StreamSummary) {
	snd.setRate()
	rcv.setRate()
	e.Streams = append(e.Streams, EndStream{Sender: snd, Receiver: rcv})
	e.SumSent.Bytes += snd.Bytes
	e.SumSent.Messages += snd.Messages
	e.SumReceived.Bytes += rcv.Bytes
	e.SumReceived.Messages += rcv.Messages
}

// setSumRates sets the sums' rates.
func (e *End) setSumRates() {
	e.SumSent.setRate()
	e.SumReceived.setRate()
}

// UETEnd is what a UET run counted: the client endpoint's totals and CCCs,
// the receiver per stream, and with --trace-ccc the CCC transitions; in
// the server's report, the server endpoint's totals and side channel.
type UETEnd struct {
	Client *pds.Counters `json:"client,omitempty"`
	// CCCs are the client's sender CCCs at the end of the run.
	CCCs []UETCCC `json:"cccs,omitempty"`
	// Receiver is per stream, from the server's PDCs (null: the server's
	// counters did not arrive).
	Receiver []UETReceiverStats `json:"receiver"`
	// Server is the server's endpoint and side channel since it started
	// (the server's own report).
	Server *UETServerAgent `json:"server,omitempty"`
	// RxCCCs are the server's receiver CCCs of the session's client at
	// its finish, with their source at the credit pacer when the client
	// asks for credit (the server's own report).
	RxCCCs []pds.RxCCCInfo `json:"rx_cccs,omitempty"`
	// Trace is every CCC transition (--trace-ccc, JSON; at most 65536,
	// the rest counted in TraceDropped with those the endpoint's trace
	// could not hand over).
	Trace        []CCCEvent `json:"ccc_trace,omitempty"`
	TraceDropped uint64     `json:"ccc_trace_dropped,omitempty"`
}

// verifyErrors adds up the receiver's verify errors.
func (u *UETEnd) verifyErrors() uint64 {
	var n uint64
	for _, s := range u.Receiver {
		n += s.VerifyErrors
	}
	return n
}

// UETServerAgent is a UET server's endpoint since it started (every PDC
// and drop: malformed, unknown_pdc, unsupported, NACKs sent by code) and
// its side channel.
type UETServerAgent struct {
	pds.Counters
	// Pacer is the endpoint's RCCC credit pacer: the sources it serves
	// now, what it granted since the start.
	Pacer       rccc.PacerStats `json:"pacer"`
	SideChannel UETServerStats  `json:"side_channel"`
}

// UETCCC is a sender CCC (pds.CCCInfo): the window every PDC to one
// destination in one traffic class shares.
type UETCCC struct {
	Src           string      `json:"src"`
	Dst           string      `json:"dst"`
	TC            uint8       `json:"tc"`
	State         string      `json:"state"` // IDLE, ACTIVE, READY, PENDING
	CwndBytes     int         `json:"cwnd"`
	InFlightBytes int         `json:"in_flight"`
	PDCs          int         `json:"pdcs"`
	NSCC          *nscc.Stats `json:"nscc,omitempty"` // NSCC's counters
	// RCCC is the CCC's credit (--cc rccc or both): bytes it may send,
	// speculating, CREDIT_REQs sent and rccc.SenderStats.
	RCCC *pds.CreditInfo `json:"rccc,omitempty"`
}

func uetCCCs(cs []pds.CCCInfo) []UETCCC {
	out := make([]UETCCC, 0, len(cs))
	for _, c := range cs {
		out = append(out, UETCCC{Src: c.Src, Dst: c.Dst, TC: c.TC, State: c.State.String(),
			CwndBytes: c.Window, InFlightBytes: c.InFlight, PDCs: c.PDCs, NSCC: c.NSCC, RCCC: c.Credit})
	}
	return out
}

// CCCEvent is one CCC transition as --trace-ccc shows it.
type CCCEvent struct {
	Time float64 `json:"time"` // seconds since the run's start
	CCC  uint32  `json:"ccc"`  // the CCC's serial on the client endpoint
	From string  `json:"from"`
	To   string  `json:"to"`
	PDCs int     `json:"pdcs"` // PDCs using it at the transition
	Src  string  `json:"src"`
	Dst  string  `json:"dst"`
	TC   uint8   `json:"tc"`
}

// EndStream is one QP pair's summary.
type EndStream struct {
	Sender   StreamSummary `json:"sender"`
	Receiver StreamSummary `json:"receiver"`
}

// StreamSummary is one side of a QP pair after the warm-up: bytes
// acknowledged (sender) or placed (receiver), and that side's counters
// over the whole run under their mlx5 names.
type StreamSummary struct {
	ID    uint32 `json:"id"`               // the client's QPN (UET: the stream's number), on both sides
	QPN   uint32 `json:"qpn"`              // this side's QPN
	JobID uint32 `json:"job_id,omitempty"` // UET
	Sum
	agent.Counters
}

// Sum is one side's totals over [Start, End] (seconds since the test's
// start): a stream's, or added up over all QPs.
type Sum struct {
	Start         float64 `json:"start"`
	End           float64 `json:"end"`
	Seconds       float64 `json:"seconds"`
	Bytes         uint64  `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Messages      uint64  `json:"messages"`
	Retransmits   uint64  `json:"retransmits"`
	Sender        bool    `json:"sender"`
}

// setRate sets BitsPerSecond from Bytes over Seconds.
func (s *Sum) setRate() { s.BitsPerSecond = rate(s.Bytes, s.Seconds) }

// EndCounters are the raw counters: the client agent's totals and the
// server's per QP (from the side channel's finish).
type EndCounters struct {
	Client agent.AgentCounters `json:"client"`
	Server []agent.QPReport    `json:"server"`
	// ClientUDP is the client's socket: what it moved and what the kernel
	// dropped for it (a full receive buffer loses ACKs and CNPs).
	ClientUDP UDPStats `json:"client_udp"`
	// ServerAgent is the server's whole agent since it started, in the
	// server's own report (roceperf -s): a client's report has none.
	ServerAgent *ServerAgent `json:"server_agent,omitempty"`
}

// ServerAgent is what a server's agent counted since it started, its
// sessions' QPs and every drop before a QP (malformed, icrc_errors,
// unknown_qp, wrong_peer, unsupported_opcode, send_errors, ppfc_*), with
// its socket, the host's steering and the side channel's sessions
// (refused ones by cause).
type ServerAgent struct {
	agent.AgentCounters
	UDP UDPStats `json:"udp"`
	// Steering is the host's, since its first agent; nil where the conn
	// has none.
	Steering    *pktio.SteeringStats `json:"steering,omitempty"`
	SideChannel agent.ServerStats    `json:"side_channel"`
}

// UDPStats are a pktio.RoCEConn's counters (pktio.UDPStats).
type UDPStats struct {
	DatagramsSent     uint64 `json:"datagrams_sent"`
	BytesSent         uint64 `json:"bytes_sent"`
	DatagramsReceived uint64 `json:"datagrams_received"`
	BytesReceived     uint64 `json:"bytes_received"`
	SendErrors        uint64 `json:"send_errors"`
	Truncated         uint64 `json:"truncated"`
	RecvBufferDrops   uint64 `json:"recv_buffer_drops"`
	// GROSegments of DatagramsReceived came in GROReads coalesced reads
	// (a device with GRO on).
	GROReads    uint64 `json:"gro_reads"`
	GROSegments uint64 `json:"gro_segments"`
	// GSODatagrams of DatagramsSent left in GSOSends UDP GSO sends.
	GSODatagrams uint64 `json:"gso_datagrams"`
	GSOSends     uint64 `json:"gso_sends"`
}

func udpStats(s pktio.UDPStats) UDPStats { return UDPStats(s) }

// CPU is this process's CPU time over the run (getrusage), as a share of
// one CPU's wall time, like iperf3. In-process servers count too.
type CPU struct {
	HostTotal  float64 `json:"host_total"`
	HostUser   float64 `json:"host_user"`
	HostSystem float64 `json:"host_system"`
}

// Perftest is ib_write_bw's result row: MB are 2^20 bytes, as perftest's.
type Perftest struct {
	Bytes       int     `json:"bytes"`      // message size
	Iterations  uint64  `json:"iterations"` // messages acknowledged
	BWPeakMBps  float64 `json:"bw_peak_mb_sec"`
	BWAvgMBps   float64 `json:"bw_average_mb_sec"`
	MsgRateMpps float64 `json:"msg_rate_mpps"`
}

// serverSum is the receiving side of the sum, from the server's counters.
func (e *End) totals() (sent, recv agent.Counters) {
	for _, s := range e.Streams {
		sent.Add(&s.Sender.Counters)
		recv.Add(&s.Receiver.Counters)
	}
	return sent, recv
}

// iperfTime is the layout of iperf3's start.timestamp.time.
const iperfTime = "Mon, 02 Jan 2006 15:04:05 GMT"

// newStart is a report's start section as of t: the tool, the system and
// the time, as iperf3 writes them.
func newStart(t time.Time) Start {
	return Start{
		Version:    "roceperf " + Version,
		SystemInfo: systemInfo(),
		Timestamp:  Timestamp{Time: t.UTC().Format(iperfTime), TimeSecs: t.Unix()},
	}
}

// newServerReport is a server's report of a session that started at t0:
// its intervals (an empty list, not null, without any) and its test.
func newServerReport(t0 time.Time, intervals []Interval, ts TestStart) *Report {
	if intervals == nil {
		intervals = []Interval{}
	}
	r := &Report{Intervals: intervals, Start: newStart(t0)}
	r.Start.TestStart = ts
	return r
}
