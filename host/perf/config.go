// Package perf is roceperf, an iperf3-style RoCEv2 and Ultra Ethernet
// traffic tool, as a library: the command (cmd/roceperf), the tests, the
// benchmarks and the demo all run it in-process.
//
// A server (Listen/Serve) owns one RoCE agent on UDP 4791 and a TCP side
// channel (18515, perftest's port). A client (RunClient) opens its own
// agent, also on UDP 4791, sets up -P queue pairs over the side channel (as
// perftest does: each end learns the other's QPN, PSN, R_Key and virtual
// address), posts a stream of RDMA WRITEs or SENDs on every QP for -t
// seconds or -n bytes, samples goodput and the DCQCN reaction point every
// -i, then fetches the server's counters and prints iperf3-like text or an
// iperf3-shaped JSON report (Report).
//
// Goodput is acknowledged payload: bytes the responder placed in order and
// acknowledged, per QP. The server's QPs are DCQCN notification points:
// CE-marked packets turn into CNPs, at most one per min_time_between_cnps.
//
// With Transport TransportUET the same client and server run Ultra
// Ethernet Transport (host/pds) instead: one pds.Endpoint per end on UDP
// 4793, a PDC per stream (each its own JobID) sharing the CCC (NSCC) to the
// server, and a side channel of its own on the same TCP port (uet_side.go).
package perf

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/host/version"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Version is roceperf's version, printed by -V and in the JSON report:
// the project's.
const Version = version.Version

// Defaults and limits.
const (
	DefaultPort         = 18515        // side channel, perftest's port
	DefaultUDPPort      = roce.UDPPort // RoCEv2 (IANA)
	DefaultQPs          = 1
	MaxQPs              = 16384
	DefaultDuration     = 10 * time.Second
	MaxDuration         = 24 * time.Hour
	DefaultMessageBytes = 64 << 10
	MaxMessageBytes     = 16 << 20
	DefaultMTU          = 1024
	// DefaultLineRate is the line rate a DCQCN run assumes when LineRate is
	// 0: the reaction point starts at it and the profile's rate knobs are
	// scaled to it.
	DefaultLineRate = 10 * units.Gbit
	MaxLineRate     = 1 * units.Tbit
	DefaultInterval = time.Second
	MinInterval     = 10 * time.Millisecond
	MaxInterval     = 60 * time.Second
	MaxOmit         = 60 * time.Second
	// MaxServerMemory bounds what one session makes the server register:
	// -P × max(4 × -l, 64 KiB).
	MaxServerMemory = 2 << 30
	// DialTimeout bounds the side-channel setup.
	DialTimeout = 10 * time.Second
)

// Transports (--transport): RoCEv2 RC queue pairs (host/agent, DCQCN), or
// Ultra Ethernet Transport's PDS (host/pds, NSCC).
const (
	TransportRoCEv2 = "rocev2"
	TransportUET    = "uet"
)

// UET's bounds as roceperf takes them: --mtu is the IP packet size of a
// full data packet (pds.Config.MTU's range), --base-rtt NSCC's configured
// base RTT (pds.Config.BaseRTT's).
const (
	MinUETMTU     = 512
	MaxUETMTU     = 9000
	MinUETBaseRTT = time.Microsecond
	MaxUETBaseRTT = time.Second
)

// ServerConfig configures a server.
type ServerConfig struct {
	// Bind is the address to listen on. Optional: the zero Addr listens on
	// every IPv4 address (0.0.0.0); "::" listens on every IPv6 address.
	Bind    netip.Addr
	Port    int  // side-channel TCP port. Optional: 0 means 18515.
	UDPPort int  // RoCEv2 UDP port. Optional: 0 means 4791.
	OneOff  bool // -1: serve one session, then Serve returns
	// Logger gets session errors. Optional: a logger that discards.
	Logger *slog.Logger
	Out    io.Writer // human text (or JSON) output. Optional: nil prints nothing.
	JSON   bool      // one JSON report per session on Out instead of text
	// Interval is how often the server prints what each QP received.
	// Optional: 0 means 1 s; negative means no interval lines.
	Interval time.Duration
	// NP is where CE marks turn into CNPs (--np): NPKernel, the eBPF
	// program on the host's devices (host/npbpf), or NPAgent, the
	// server's receive loop, or NPOff (CE counted, no CNPs sent; with
	// transport uet, the one value: the target echoes no CE).
	// Optional: "" means kernel where it attaches, else the agent (with a
	// warning).
	NP string
	// Limits bound what clients may make the server hold (QPs, registered
	// memory, sessions, connections, request size, timeouts). Optional:
	// zero fields take agent's defaults (agent.ServerLimits).
	Limits agent.ServerLimits
	// SendPath (--send) is how the server's port sends: UDP GSO for runs
	// of one source port (pktio.SendAuto) or the raw socket always
	// (pktio.SendRaw). Optional: pktio.SendAuto.
	SendPath pktio.SendPath

	// Transport is TransportRoCEv2 (also "") or TransportUET: a UET server
	// (ListenUET) serves UET sessions only, on Bind's UDP 4793 (Bind is
	// then required, a unicast address, unless UETConn is given); UDPPort
	// and NP are RoCEv2's.
	Transport string
	// UETLimits bound what UET clients may make the server hold.
	// Optional: zero fields take the defaults (UETLimits).
	UETLimits UETLimits
	// UETConn is the UET endpoint's port. Optional: nil opens UDP 4793 on
	// Bind (pktio.ListenEntropy). Tests pass one end of a pktio pipe; the
	// server closes it.
	UETConn pktio.Conn
	// TrimDSCP and TrimLastHopDSCP (--trim-dscp, --trim-lasthop-dscp) are
	// the code points of packets a switch port trimmed (pds.Config's
	// fields of those names): the UET server answers them with NACK
	// TRIMMED, or TRIMMED_LASTHOP for the second. UET only; 0 means none.
	TrimDSCP, TrimLastHopDSCP uint8
	// LineRate and BaseRTT are a UET server endpoint's line rate and base
	// RTT: its RCCC credit pacer grants 0.99 of that line (pds.Config's
	// LinkRate and BaseRTT). UET only. Optional: pds's defaults.
	LineRate units.Rate
	BaseRTT  time.Duration
	// Wires are the store-and-forward and propagation of the paths from
	// each client address that the lab's devices do not model
	// (pds.Config.Wires), in the fabric's terms (Timescale slows them).
	// UET only. Optional: none.
	Wires map[netip.Addr]pktio.Wire

	// Timescale slows the fabric the server runs on (units.Timescale): a
	// UET endpoint's line rate over k, its base RTT, RTO and probe timeout
	// times k (pds.Config.Slowed). A RoCEv2 server's QPs take their CNP
	// period from the client's request, which the client's Timescale
	// slows. Optional: 1.
	Timescale units.Timescale
	// Held gets the time the server's replies (ACKs, CNPs, credit) were
	// held by its host (engine.Config.Held). Optional: not measured.
	Held *hostlost.Log
	// PKey (--pkey) is the P_Key of the server's QPs (agent.QPConfig.PKey):
	// a client's packets of another partition are dropped. RoCEv2 only.
	// Optional: 0 means roce.DefaultPKey.
	PKey uint16
	// PPFCSources (--ppfc-sources) are the switches allowed to pause the
	// server's QPs with PPFC notifications (agent.Config.PPFCSources; the
	// host's steering drops the others). RoCEv2 only. Optional: any.
	PPFCSources []netip.Prefix
	// PPFCMaxPause (--ppfc-max-pause) and PPFCWatchdog (--ppfc-watchdog)
	// bound the pauses PPFC notifications put on the server's QPs
	// (agent.Config's, with their defaults); a negative PPFCWatchdog
	// turns the watchdog off. RoCEv2 only. Optional.
	PPFCMaxPause time.Duration
	PPFCWatchdog time.Duration
}

// Where the notification point runs (ServerConfig.NP), and where the
// reaction point takes its CNPs (ClientConfig.RP).
const (
	NPKernel = "kernel"
	NPAgent  = "agent"
	RPKernel = "kernel"
	RPAgent  = "agent"
	// NPOff and RPOff turn the role off, as mlx5's roce_np/enable and
	// roce_rp/enable 0 do (seed 000's "NIC ECN disabled"): the server's
	// QPs count CE arrivals and send no CNPs; the client's DCQCN QPs send
	// at the line rate and count the CNPs they get as ignored.
	NPOff = "off"
	RPOff = "off"
)

// ClientConfig configures a client run. Zero values mean the defaults
// noted, except Interval and Omit, where 0 is meaningful: DefaultClientConfig
// returns the command's defaults (Interval 1 s) ready to adjust.
type ClientConfig struct {
	// Server is the server's side channel, "host:port" or "host" (port
	// 18515). Required.
	Server string
	// Bind is the local address RoCE packets and the side channel leave
	// from. Optional: the route to the server picks it, and the server
	// answers to the side channel's source address.
	Bind netip.Addr
	// UDPPort is the local UDP port the server's ACKs and CNPs go to.
	// Optional: 0 means 4791, which every agent of the host shares (each
	// QP sends from its own source port: RoCEv2's ECMP entropy).
	UDPPort int
	QPs     int // -P, queue pairs. 0 means 1.
	// Duration is how long the streams run (-t), after Omit. 0 means 10 s.
	// Ignored when Bytes is set.
	Duration time.Duration
	// Bytes (-n) is the payload to deliver over all QPs: rounded up to
	// whole messages, dealt out as evenly as possible over the QPs; the run
	// ends when all of them are acknowledged. 0 means a timed run.
	Bytes        uint64
	MessageBytes int      // -l, bytes per message. 0 means 65536.
	MTU          int      // --mtu, path MTU. 0 means 1024.
	Op           agent.Op // --op: RDMA WRITE (the zero value) or SEND
	// LineRate (-b) is the emulated NIC's line rate. With CC none it caps
	// each QP's rate (0: unpaced). With DCQCN the reaction point starts at
	// it and the profile's rate knobs are scaled to it; 0 means 10 Gbit/s.
	// It is also the port's rate: the -P QPs share it, as a NIC's QPs
	// share the port (agent.Config.PortRate).
	LineRate units.Rate
	CC       agent.CCMode // --cc: dcqcn (also the zero value) or none
	Profile  string       // a dcqcn profile; "" is dcqcn.DefaultProfile
	// RP is where the reaction point takes its CNPs (--rp): RPKernel, the
	// eBPF program on the host's devices (host/rpbpf: Rc is cut from a
	// CNP's arrival on the device on), or RPAgent, the client's receive
	// loop, or RPOff (no reaction: the QPs send at the line rate).
	// Optional: "" means kernel where it attaches, else the agent (with a
	// warning). DCQCN only.
	RP string
	// Knobs are set on the profile in order (dcqcn.New). cnp_dscp given
	// here overrides CNPDSCP.
	Knobs []cc.Knob
	// DSCP marks data and ACKs; 0 means 26. CNPDSCP marks the server's
	// CNPs; 0 means 48. (DSCP 0 itself cannot be chosen.)
	DSCP, CNPDSCP uint8
	// PKey (--pkey) is the P_Key of the client's QPs (agent.QPConfig.PKey);
	// the server's must match it. Optional: 0 means roce.DefaultPKey.
	PKey uint16
	// PPFCSources (--ppfc-sources) are the switches allowed to pause the
	// client's QPs with PPFC notifications (agent.Config.PPFCSources; the
	// host's steering drops the others). Optional: any.
	PPFCSources []netip.Prefix
	// PPFCMaxPause (--ppfc-max-pause) bounds every pause a PPFC stop puts
	// on the client's QPs, and PPFCWatchdog (--ppfc-watchdog) ends a pause
	// storm (agent.Config's, with their defaults: 65.535 ms, and
	// max(200 ms, 2 × PPFCMaxPause)); a negative PPFCWatchdog turns the
	// watchdog off. Optional.
	PPFCMaxPause time.Duration
	PPFCWatchdog time.Duration
	// Interval is the report interval (-i); 0 means no interval reports.
	Interval time.Duration
	// Omit (-O) is a warm-up excluded from the summary; the run lasts
	// Omit + Duration.
	Omit time.Duration
	// Verify fills every message with a pattern the server checks byte for
	// byte; mismatches (verify_errors) make RunClient fail after the report.
	Verify bool
	// Advanced RC settings; 0 means agent.DefaultQPConfig's value (window
	// 512 packets, AckReq every 32, burst 4, ACK timeout 16 ms, 7 retries).
	Window int // --window, packets unacknowledged at most
	// InflightTime (--inflight) bounds each QP's unacknowledged bytes to
	// Rc·InflightTime (agent.QPConfig.InflightTime); 0 means Window only.
	InflightTime time.Duration
	AckReqEvery  int           // --ack-every, AckReq on every n-th packet
	MaxBurst     int           // --burst, packets paced back to back
	AckTimeout   time.Duration // --timeout, local ACK timeout
	RetryCount   int           // --retry, timeouts in a row before the QP fails
	// OnInterval, if set, is called with each interval report as it is
	// taken, from RunClient's goroutine (keep it short).
	OnInterval func(Interval)
	// Logger gets agent warnings. Optional: a logger that discards.
	Logger *slog.Logger
	// Out gets the human text output as the run goes (nil prints nothing).
	Out io.Writer
	// JSON writes the JSON report to Out at the end instead of text.
	JSON bool
	// Perftest also prints the QP address preamble and the ib_write_bw
	// summary table (text), or adds end.perftest (JSON).
	Perftest bool

	// Transport (--transport) is TransportRoCEv2 (also "") or
	// TransportUET. With UET, QPs is the number of streams (each a PDC of
	// its own JobID, all sharing the CCC to the server), MTU is the IP
	// packet size of a full data packet (MinUETMTU..MaxUETMTU, 0: 4096),
	// LineRate is the endpoint's port rate and NSCC's BDP (0: 1 Gbit/s),
	// DSCP the data's class, UETCC the congestion control; the RoCEv2-only
	// fields (UDPPort, Op, CC, Profile, RP, Knobs, CNPDSCP, Window,
	// InflightTime, AckReqEvery, MaxBurst, AckTimeout, RetryCount,
	// Perftest) are not used.
	Transport string
	// BaseRTT (--base-rtt) is NSCC's configured base RTT. UET only;
	// 0 means pds's default (100 µs).
	BaseRTT time.Duration
	// RTO (--rto) is each PDC's retransmission timeout (pds.Config.RTO):
	// it must outlast the deepest queue on the path, or a packet still
	// queued is sent again. UET only; 0 means pds's default (10 ms).
	RTO time.Duration
	// Loss (--loss) is how each PDC infers a loss before its RTO
	// (pds.Config.Loss): RACK (the default), SLEEK (needs a window: cc
	// nscc or both) or none. UET only.
	Loss pds.LossInference
	// TraceCCC (--trace-ccc) prints every CCC transition with its time as
	// the run goes (text), or lists them in end.uet.ccc_trace (JSON). UET
	// only.
	TraceCCC bool
	// LB (--lb) is each PDC's entropy load balancer (host/lb), which
	// spreads its packets over lb.DefaultParams' EVs. UET only; 0 means
	// none, one EV per PDC.
	LB lb.Kind
	// LBSeed seeds the balancers: PDC p's draws from a PCG of (LBSeed, p).
	// Optional: 0 draws a seed per run.
	LBSeed uint64
	// UETCC (--cc with --transport uet) is the congestion control of the
	// client's sender CCCs (pds.Config.CC): NSCC's window (the zero
	// value), RCCC's receiver credit, both, or none. It is the sender's
	// mode: the server needs none (its endpoint grants credit to any
	// source that asks for it). UET only.
	UETCC pds.CCMode
	// UETConn is the UET endpoint's port. Optional: nil opens UDP 4793 on
	// Bind, or on the address the route to the server picks
	// (pktio.ListenEntropy). Tests pass one end of a pktio pipe; RunClient
	// closes it.
	UETConn pktio.Conn
	// SendPath (--send) is how the client's port sends (RoCEv2 and UET):
	// UDP GSO for runs of one source port (pktio.SendAuto) or the raw
	// socket always (pktio.SendRaw). Optional: pktio.SendAuto.
	SendPath pktio.SendPath
	// NSCCKnobs are set with nscc.Params.Set on nscc.LabParams of the
	// line rate, base RTT and MTU, in order. UET only.
	NSCCKnobs []cc.Knob

	// OnAgent and OnEndpoint, if set, are called once with the run's RoCE
	// agent or UET endpoint as soon as it exists, for live counters (the
	// daemon's metrics). They must not keep it past RunClient's return.
	OnAgent    func(*agent.Agent)
	OnEndpoint func(*pds.Endpoint)
	// OnSenders, if set, is called once with a UET run's senders (one
	// PDC per stream) once they have started.
	OnSenders func([]*pds.Sender)
	// OnData, if set, is called once as the streams start, either
	// transport, with a function that returns the payload bytes
	// acknowledged so far, callable from any goroutine until RunClient
	// returns: a live view reads it on its own clock, where OnInterval's
	// reports run a whole interval behind.
	OnData func(acked func() uint64)
	// StartGate, if set, holds a run's streams after its setup (a
	// rocev2 run's agent, side channel and QPs; a uet run's endpoint and
	// session) until it closes: a run set up ahead starts its data at
	// once when told (an htsim trigger; a uet PDC's SYN rides its first
	// packets then). If ctx ends first RunClient returns ctx's cause.
	StartGate <-chan struct{}
	// OnReady, if set with StartGate, is called once the run is set up,
	// as it starts to wait for the gate.
	OnReady func()
	// OnFinished, if set, is called once when a run's streams have
	// ended without error (every byte acknowledged, or the time up),
	// before the server's counters are fetched.
	OnFinished func()

	// Wires are the store-and-forward and propagation of the path from
	// the server that the lab's devices do not model (pds.Config.Wires),
	// by the server's address, in the fabric's terms (Timescale slows
	// them). UET only. Optional: none.
	Wires map[netip.Addr]pktio.Wire
	// FirstPDCID is the endpoint's first PDC ID (pds.Config.FirstPDCID).
	// UET only. Optional: 0 means a random one.
	FirstPDCID uint16

	// Timescale slows the fabric the client runs on (units.Timescale): the
	// line rate over k; DCQCN's parameters after its profile and knobs
	// (dcqcn.Params.Slowed), the in-flight time and ACK timeout, or NSCC's
	// base RTT and the UET endpoint's timers (pds.Config.Slowed), times k.
	// Duration, Interval and Omit stay wall-clock: the run's own. Optional:
	// 1.
	Timescale units.Timescale
	// Held gets the time the client's flows were held by its host
	// (engine.Config.Held). Optional: not measured.
	Held *hostlost.Log
	// HostQueue bounds the host queue between the client's host and the
	// switch port (engine.Config.HostQueue; host/linkq). Optional: not
	// bounded.
	HostQueue engine.HostQueue
}

// isUET reports whether the run is Ultra Ethernet's.
func (c *ClientConfig) isUET() bool { return c.Transport == TransportUET }

// DefaultUETClientConfig returns the command-line defaults of a bare
// "roceperf -c HOST --transport uet".
func DefaultUETClientConfig(server string) ClientConfig {
	c := DefaultClientConfig(server)
	d := pds.DefaultConfig()
	c.Transport = TransportUET
	c.MTU = d.MTU
	c.LineRate = d.LinkRate
	c.BaseRTT = d.BaseRTT
	c.DSCP = d.DSCP
	return c
}

// DefaultClientConfig returns the command-line defaults: what a bare
// "roceperf -c HOST" runs.
func DefaultClientConfig(server string) ClientConfig {
	qc := agent.DefaultQPConfig()
	return ClientConfig{
		Server:       server,
		QPs:          DefaultQPs,
		Duration:     DefaultDuration,
		MessageBytes: DefaultMessageBytes,
		MTU:          DefaultMTU,
		Op:           agent.OpWrite,
		CC:           agent.CCDCQCN,
		Profile:      dcqcn.DefaultProfile,
		DSCP:         agent.DefaultDSCP,
		CNPDSCP:      agent.DefaultCNPDSCP,
		Interval:     DefaultInterval,
		Window:       qc.Window,
		AckReqEvery:  qc.AckReqEvery,
		MaxBurst:     qc.MaxBurst,
		AckTimeout:   qc.AckTimeout,
		RetryCount:   qc.RetryCount,
	}
}

// withDefaults fills the zero values that mean a default.
func (c ClientConfig) withDefaults() ClientConfig {
	qc := agent.DefaultQPConfig()
	c.QPs = cmp.Or(c.QPs, DefaultQPs)
	c.MessageBytes = cmp.Or(c.MessageBytes, DefaultMessageBytes)
	if c.isUET() {
		d := pds.DefaultConfig()
		c.MTU = cmp.Or(c.MTU, d.MTU)
		c.LineRate = cmp.Or(c.LineRate, d.LinkRate)
		c.BaseRTT = cmp.Or(c.BaseRTT, d.BaseRTT)
	}
	c.MTU = cmp.Or(c.MTU, DefaultMTU)
	c.Window = cmp.Or(c.Window, qc.Window)
	c.AckReqEvery = cmp.Or(c.AckReqEvery, min(qc.AckReqEvery, c.Window))
	c.MaxBurst = cmp.Or(c.MaxBurst, qc.MaxBurst)
	c.RetryCount = cmp.Or(c.RetryCount, qc.RetryCount)
	c.Duration = cmp.Or(c.Duration, DefaultDuration)
	c.AckTimeout = cmp.Or(c.AckTimeout, qc.AckTimeout)
	c.CC = cmp.Or(c.CC, agent.CCDCQCN)
	c.Profile = cmp.Or(c.Profile, dcqcn.DefaultProfile)
	c.DSCP = cmp.Or(c.DSCP, agent.DefaultDSCP)
	c.CNPDSCP = cmp.Or(c.CNPDSCP, agent.DefaultCNPDSCP)
	if c.Logger == nil {
		c.Logger = discardLogger()
	}
	return c
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Validate checks every field; the first bad one is a *ConfigError with
// its field, its value and the allowed range: "qps 20000: must be 1..16384".
func (c ClientConfig) Validate() error {
	if strings.TrimSpace(c.Server) == "" {
		return &ConfigError{Field: FieldServer, Must: "required: no server given"}
	}
	if _, _, err := splitServer(c.Server); err != nil {
		return err
	}
	switch c.Transport {
	case "", TransportRoCEv2:
	case TransportUET:
		return c.validateUET()
	default:
		return configErr(FieldTransport, c.Transport, "rocev2 or uet")
	}
	c = c.withDefaults()
	if err := c.validateTest(); err != nil {
		return err
	}
	switch {
	case c.RP != "" && c.RP != RPKernel && c.RP != RPAgent && c.RP != RPOff:
		return configErr(FieldRP, c.RP, "kernel, agent or off")
	case c.UDPPort < 0 || c.UDPPort > 65535:
		return configErr(FieldUDPPort, c.UDPPort, "0..65535 (0: 4791)")
	case c.QPs < 1 || c.QPs > MaxQPs:
		return configErr(FieldQPs, c.QPs, "1..%d", MaxQPs)
	case !validMTU(c.MTU):
		return configErr(FieldMTU, c.MTU, "256, 512, 1024, 2048 or 4096")
	case c.Op != agent.OpWrite && c.Op != agent.OpSend:
		return configErr(FieldOp, int(c.Op), "write or send")
	case c.LineRate > MaxLineRate || (c.LineRate != 0 && c.LineRate < units.Kbit):
		return configErr(FieldLineRate, c.LineRate, "1kbit..1tbit, or 0 (cc none: unpaced; dcqcn: 10gbit)")
	case c.CC != agent.CCDCQCN && c.CC != agent.CCNone:
		return configErr(FieldCC, c.CC, "dcqcn or none")
	case c.CNPDSCP > 63:
		return configErr(FieldCNPDSCP, c.CNPDSCP, "1..63")
	case c.PKey != 0 && !roce.ValidPKey(c.PKey):
		return configErr(FieldPKey, fmt.Sprintf("%#04x", c.PKey), "0x0001..0xffff, but not 0x8000 (the invalid P_Key)")
	case CheckPPFC(c.PPFCSources, c.PPFCMaxPause, c.PPFCWatchdog) != nil:
		return CheckPPFC(c.PPFCSources, c.PPFCMaxPause, c.PPFCWatchdog)
	case c.Window < 1 || c.Window > 1<<20:
		return configErr(FieldWindow, c.Window, "1..%d packets", 1<<20)
	case c.InflightTime < 0 || c.InflightTime > time.Second:
		return configErr(FieldInflight, c.InflightTime, "0..1s")
	case len(c.Wires) > 0:
		return configErr(FieldWires, len(c.Wires), wiresRoCEMust)
	case c.AckReqEvery < 1 || c.AckReqEvery > c.Window:
		return configErr(FieldAckEvery, c.AckReqEvery, "1..%d packets (the window)", c.Window)
	case c.MaxBurst < 1 || c.MaxBurst > 256:
		return configErr(FieldBurst, c.MaxBurst, "1..256 packets")
	case c.AckTimeout < 10*time.Microsecond || c.AckTimeout > time.Minute:
		return configErr(FieldTimeout, c.AckTimeout, "10us..1m")
	case c.RetryCount < 0 || c.RetryCount > 1000:
		return configErr(FieldRetry, c.RetryCount, "0..1000")
	case c.Timescale.Validate() != nil:
		return configErr(FieldTimescale, c.Timescale, "1..%d", units.MaxTimescale)
	}
	if _, err := dcqcn.Profile(c.Profile, DefaultLineRate); err != nil {
		return configErr(FieldProfile, c.Profile, "%s", strings.Join(dcqcn.ProfileNames(), " or "))
	}
	if mem := uint64(c.QPs) * uint64(agent.SessionBufferBytes(c.MessageBytes)); mem > MaxServerMemory {
		return &ConfigError{Field: FieldQPs, Value: strconv.Itoa(c.QPs), With: []Setting{{FieldMessageSize, strconv.Itoa(c.MessageBytes)}},
			Must: fmt.Sprintf("the server would register %s (a buffer of max(4 messages, 64K) per QP); at most 2 GiB", FormatBytes(float64(mem)))}
	}
	if err := c.checkMessagesPerFlow("QP"); err != nil {
		return err
	}
	if _, err := c.dcqcnParams(); err != nil {
		return err
	}
	return nil
}

// validateTest checks what both transports take alike: the test's length,
// its messages, DSCP and reports.
func (c *ClientConfig) validateTest() error {
	switch {
	case c.Duration < time.Millisecond || c.Duration > MaxDuration:
		return configErr(FieldDuration, seconds(c.Duration), "0.001..%g seconds", MaxDuration.Seconds())
	case c.MessageBytes < 1 || c.MessageBytes > MaxMessageBytes:
		return configErr(FieldMessageSize, c.MessageBytes, "1..%d bytes (16M)", MaxMessageBytes)
	case c.DSCP > 63:
		return configErr(FieldDSCP, c.DSCP, "1..63")
	case c.Interval != 0 && (c.Interval < MinInterval || c.Interval > MaxInterval):
		return configErr(FieldInterval, seconds(c.Interval), "0 (no interval reports) or %g..%g seconds", MinInterval.Seconds(), MaxInterval.Seconds())
	case c.Omit < 0 || c.Omit > MaxOmit:
		return configErr(FieldOmit, seconds(c.Omit), "0..%g seconds", MaxOmit.Seconds())
	}
	return nil
}

func validMTU(m int) bool {
	switch m {
	case 256, 512, 1024, 2048, 4096:
		return true
	}
	return false
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

// seconds prints d as iperf3's flags take it.
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// effectiveLineRate is the line rate the DCQCN profile is scaled to.
func (c ClientConfig) effectiveLineRate() units.Rate {
	if c.LineRate == 0 {
		return DefaultLineRate
	}
	return c.LineRate
}

// DSCPs are the code points the client's flow carries: data and ACKs,
// and the server's CNPs (RoCEv2, a cnp_dscp knob included; 0 for UET).
func (c ClientConfig) DSCPs() (data, cnp uint8) {
	c = c.withDefaults()
	if c.Transport == TransportUET {
		return c.DSCP, 0
	}
	if p, err := c.dcqcnParams(); err == nil {
		return c.DSCP, p.CNPDSCP
	}
	return c.DSCP, c.CNPDSCP
}

// DCQCNParams are the DCQCN parameters a run of c's QPs takes: its
// profile at its line rate with its knobs (cnp_dscp from CNPDSCP unless
// a knob sets it). Errors are ConfigErrors (FieldProfile, FieldKnobs).
func (c ClientConfig) DCQCNParams() (dcqcn.Params, error) {
	return c.withDefaults().dcqcnParams()
}

// dcqcnParams builds the profile at the effective line rate and applies
// the knobs; CNPDSCP goes into cnp_dscp unless a knob sets it. c has its
// defaults filled.
func (c ClientConfig) dcqcnParams() (dcqcn.Params, error) {
	knobs := append([]cc.Knob{{Name: "cnp_dscp", Value: strconv.Itoa(int(c.CNPDSCP))}}, c.Knobs...)
	p, err := dcqcn.New(c.Profile, c.effectiveLineRate(), knobs...)
	if err == nil {
		return p, nil
	}
	var ke *dcqcn.KnobError
	if errors.As(err, &ke) && ke.Profile {
		return p, configErr(FieldProfile, c.Profile, "%s", strings.Join(dcqcn.ProfileNames(), " or "))
	}
	return p, &ConfigError{Field: FieldKnobs, Cause: err}
}

// splitServer splits "host:port" or "host" (port 18515); IPv6 literals may
// come bare ("::1") or bracketed ("[::1]:18515").
func splitServer(s string) (host string, port int, err error) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.String(), DefaultPort, nil
	}
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		if !strings.Contains(s, ":") {
			return s, DefaultPort, nil
		}
		return "", 0, &ConfigError{Field: FieldServer, Value: s, Must: "want host or host:port"}
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, configErr(FieldPort, p, "1..65535")
	}
	if h == "" {
		return "", 0, &ConfigError{Field: FieldServer, Value: s, Must: "no host"}
	}
	return h, n, nil
}

// KnobHelp lists every DCQCN knob with its value in the profile at the
// line rate (0: 10 Gbit/s), then the variant switches, as --dcqcn help
// prints them.
func KnobHelp(profile string, lineRate units.Rate) (string, error) {
	if lineRate == 0 {
		lineRate = DefaultLineRate
	}
	if profile == "" {
		profile = dcqcn.DefaultProfile
	}
	p, err := dcqcn.Profile(profile, lineRate)
	if err != nil {
		return "", configErr(FieldProfile, profile, "%s", strings.Join(dcqcn.ProfileNames(), " or "))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "DCQCN knobs of profile %s at line rate %s (set with --dcqcn name=value;\n", profile, lineRate)
	b.WriteString("rates in Mbit/s, times in µs, or with a unit: 40mbit, 55us):\n")
	for _, n := range dcqcn.KnobNames() {
		v, _ := p.Get(n)
		fmt.Fprintf(&b, "  %-30s %s\n", n, v)
	}
	b.WriteString("variant switches:\n")
	for _, n := range dcqcn.VariantNames() {
		v, _ := p.Get(n)
		fmt.Fprintf(&b, "  %-30s %s\n", n, v)
	}
	return b.String(), nil
}

// wiresRoCEMust is why a RoCEv2 client or server takes no wires.
const wiresRoCEMust = "none with transport rocev2: a wire delays what a UET endpoint receives (its NP and RP run in the kernel)"

// ppfcSourcesMust says what a PPFC source must be, for errors.
const ppfcSourcesMust = "IP prefixes or addresses, e.g. 198.18.1.1/32 (IPv4 written as IPv4, not IPv4-mapped)"

// badPPFCSource is the first of ps agent.Config.PPFCSources refuses, as
// text; "" if none.
func badPPFCSource(ps []netip.Prefix) string {
	for _, p := range ps {
		if !p.IsValid() || p.Addr().Is4In6() {
			return p.String()
		}
	}
	return ""
}

// CheckPPFC checks an end's PPFC settings as agent.New will, and says
// which is wrong with a *ConfigError: the sources (no IPv4-mapped
// address), the max pause 0 (the field's longest) or
// 1µs..agent.MaxPPFCMaxPause, the watchdog 0 (its default), negative
// (off) or the max pause..agent.MaxPPFCWatchdog.
func CheckPPFC(sources []netip.Prefix, maxPause, watchdog time.Duration) error {
	if bad := badPPFCSource(sources); bad != "" {
		return configErr(FieldPPFCSources, bad, ppfcSourcesMust)
	}
	if maxPause != 0 && (maxPause < time.Microsecond || maxPause > agent.MaxPPFCMaxPause) {
		return configErr(FieldPPFCMaxPause, maxPause, "0 (the Pause Duration field's longest, %v) or 1µs..%v", roce.MaxPPFCPause, agent.MaxPPFCMaxPause)
	}
	floor := maxPause
	if floor == 0 {
		floor = roce.MaxPPFCPause
	}
	if watchdog > 0 && (watchdog < floor || watchdog > agent.MaxPPFCWatchdog) {
		return configErr(FieldPPFCWatchdog, watchdog, "0 (max(%v, 2 × the max pause)), off, or the max pause (%v)..%v", agent.DefaultPPFCWatchdog, floor, agent.MaxPPFCWatchdog)
	}
	return nil
}

// ParsePPFCSource reads one PPFC source as a user writes it: an IP prefix,
// or an address (its own host prefix); masked, zone-free.
func ParsePPFCSource(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q: want an IP prefix or address, e.g. 198.18.1.1 or 198.19.0.0/24", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return p.Masked(), nil
}

// PPFCSource is a PPFC source in a configuration file: ParsePPFCSource's
// spelling.
type PPFCSource netip.Prefix

// UnmarshalText reads a prefix or an address.
func (s *PPFCSource) UnmarshalText(b []byte) error {
	p, err := ParsePPFCSource(string(b))
	*s = PPFCSource(p)
	return err
}

// PPFCPrefixes are ss as prefixes (nil for none).
func PPFCPrefixes(ss []PPFCSource) []netip.Prefix {
	if len(ss) == 0 {
		return nil
	}
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.Prefix(s)
	}
	return out
}

// checkMessagesPerFlow refuses a sized run with fewer messages than QPs
// (UET: streams), each of which must carry one; flow names them.
func (c ClientConfig) checkMessagesPerFlow(flow string) error {
	if c.Bytes == 0 {
		return nil
	}
	if msgs := ceilDiv(c.Bytes, uint64(c.MessageBytes)); msgs < uint64(c.QPs) {
		return &ConfigError{Field: FieldSize, Value: strconv.FormatUint(c.Bytes, 10),
			With: []Setting{{FieldMessageSize, strconv.Itoa(c.MessageBytes)}, {FieldQPs, strconv.Itoa(c.QPs)}},
			Must: fmt.Sprintf("%d message(s) cannot keep every %s busy: need at least one message per %s", msgs, flow, flow)}
	}
	return nil
}
