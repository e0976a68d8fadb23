//go:build linux

// Package labfile is a lab in one file: a YAML document that names the
// nodes (hosts, switches, tunnel PEs), the links between them (rate, delay,
// loss, MTU), the switch ports' AQM, the flows (RoCEv2 with DCQCN, UET with
// NSCC/RCCC) and what to report. Parse decodes and validates all of it
// before anything touches the kernel; Run builds the lab in network
// namespaces (host/lab), runs the flows (host/perf) at their start times,
// samples them and the ports, and tears everything down.
//
// Addressing is automatic, inside 198.18.0.0/15 only: link i (in file
// order) gets the /24 198.18.0.0 + 256·i (links 256 to 511 are
// 198.19.x.0/24), end a .1 and end b .2, unless the link pins a subnet of
// its own (the first and second addresses of that subnet). A link with
// delay or loss runs through a relay namespace of its own (so no delay or
// loss program shares a device with a switch port or a tunnel PE, as in
// lab.NewWAN): its subnet splits into two halves, a .1 ⇄ relay .2 in the
// first and relay .129 ⇄ b .130 in the second (for a /24). Routes come
// from the graph: every node routes every subnet it is not on over its
// shortest paths (hop count, never through a host), equal-cost next hops
// as one ECMP route hashed on the 5-tuple.
package labfile

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/cm"
	"github.com/fabriclab/fabriclab/host/conf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// Node kinds.
const (
	KindHost   = "host"   // runs flows; never forwards
	KindSwitch = "switch" // forwards; a link's rate puts a port on its device
	KindPE     = "pe"     // forwards; tunnels to its peer PE across the WAN
)

// Transports and congestion controls of a flow.
const (
	TransportRoCEv2 = "rocev2"
	TransportUET    = "uet"
	TransportTCP    = "tcp"
	CCDCQCN         = "dcqcn"
	CCNone          = "none"
	// CCDCTCP is a tcp flow's default: the kernel's dctcp where it is
	// built, else the project's BPF DCTCP (host/dctcp) registered for the
	// run.
	CCDCTCP = "dctcp"
)

// Defaults.
const (
	// DefaultDuration is how long a flow without size or duration runs.
	DefaultDuration = 3 * time.Second
	// DefaultInterval is the report interval: the live view's and the
	// flows' sampling.
	DefaultInterval = 500 * time.Millisecond
	// DefaultLinkMTU is a link's MTU without mtu.
	DefaultLinkMTU = 1500
	// DefaultUETBaseRTT is NSCC's base RTT in a lab: a round trip here is
	// the hosts' scheduling on shared cores more than the wire (see
	// netns-tests/uet_test.go, where 1 ms gave 99 % of the capacity).
	DefaultUETBaseRTT = time.Millisecond
	// RoCEAckTimeout is every RoCEv2 flow's local ACK timeout, 4.096 µs ×
	// 2^16 as the netns tests: a software host on two shared cores stalls
	// for tens of ms, and a timeout that fires then resends what was
	// never lost.
	RoCEAckTimeout = 4096 * time.Nanosecond << 16
	// MaxStart bounds a flow's start and a run's length.
	MaxStart = time.Hour
	// MaxCount bounds a flow's instances.
	MaxCount = 100000
	// MaxFlows bounds a file's flows, a workload's connections included
	// (htsim's all-to-all of 60 nodes is 3,540).
	MaxFlows = 10000
	// MaxRuns bounds a file's runs per variant.
	MaxRuns = 1000
	// DefaultSeed seeds the sizes drawn between size and size_max.
	DefaultSeed = 1
)

// File is a decoded and validated lab file.
type File struct {
	// Name labels the run. Optional: the file's base name.
	Name string `yaml:"name"`
	// Duration is how long flows without size or duration run. Optional:
	// DefaultDuration.
	Duration time.Duration `yaml:"duration"`
	Nodes    []Node        `yaml:"nodes"`
	Links    []Link        `yaml:"links"`
	Ports    []Port        `yaml:"ports"`
	Flows    []Flow        `yaml:"flows"`
	Report   Report        `yaml:"report"`
	// Variants compare port configurations on the same lab and traffic:
	// every run runs each variant in turn (interleaved, so a drift of the
	// machine spreads over all of them). Optional: one run of the file
	// as written.
	Variants []Variant `yaml:"variants"`
	// Goals are what the variants are compared to show, checked on the
	// comparison's summary and reported (Goal). Optional.
	Goals []Goal `yaml:"goals"`
	// Runs is how many times each variant runs. Optional: 1.
	Runs int `yaml:"runs"`
	// Seed seeds the sizes flows draw between size and size_max; run k
	// uses Seed + k - 1, the same for every variant. Optional:
	// DefaultSeed.
	Seed uint64 `yaml:"seed"`
	// Timescale runs the whole fabric k times slower (units.Timescale),
	// so that the host's stalls shrink k times beside its round trips:
	// every rate the plan derives over k (ports, links, line rates, PE
	// agents), every time times k (link delays, AQM times, DCQCN's and
	// NSCC's parameters, RTO and ACK timeouts, flow starts, durations,
	// every and pause, the report interval); sizes, limits and thresholds
	// stay in bytes. A run's times are wall-clock as measured; its
	// dimensionless figures (FCT/ideal, utilization, queue in BDPs) are
	// the fabric's. What does not slow: the host's own costs and the
	// kernel's timers (a tcp flow's RTO and delayed ACKs). Optional: 1.
	Timescale units.Timescale `yaml:"timescale"`
	// Tune derives the ports' thresholds from the flows' base RTTs,
	// measured before the flows (or nominal): tc specs name them as
	// $k_tail, $ins_target, ... Optional.
	Tune *Tune `yaml:"tune"`
	// Workload adds a flow per connection of an htsim connection matrix
	// (a .cm file or one generated), run with its start times and
	// triggers. Optional.
	Workload *Workload `yaml:"workload"`
	// Fabric generates a leaf-spine's hosts, switches, links and ports,
	// before the file's own nodes, links and ports. Optional.
	Fabric *Fabric `yaml:"fabric"`
	// fabricDone says Fabric is in Nodes, Links and Ports.
	fabricDone bool
	// matrix is the Workload's, its connection i the flow matrixFirst+i.
	matrix      *cm.Matrix
	matrixFirst int

	// Path is the file's name as given to Load or Parse.
	Path string `yaml:"-"`
	// data is the file's text, for the lines of errors found later
	// (SetTimescale).
	data []byte
	// plan is the topology Parse computed.
	plan *Plan
	// variant is set on the copy of the file a variant is planned from.
	variant      *Variant
	variantIndex int
	// tuned are the values tc specs' $names stand for: the nominal ones,
	// or a run's measured ones (planTuned); tunePass plans without the
	// specs that name them (the plan the nominal values come from).
	tuned    *TuneValues
	tunePass bool
}

// Node is one network namespace.
type Node struct {
	Name string `yaml:"name"`
	// Kind is host, switch or pe.
	Kind string `yaml:"kind"`
	// Peer is a pe's other PE, the tunnel's far end. Required for a pe,
	// refused on others.
	Peer string `yaml:"peer"`
	// Decap is a pe's decapsulation: rfc6040 (the default, RFC 6040
	// normal mode) or two-threshold (seed 001: an outer ECT(1), the WAN
	// port's light mark, is not copied inside).
	Decap string `yaml:"decap"`
	// Agent is a pe's agent (host/pe), which reacts to the WAN ports'
	// congestion notifications. Optional: none.
	Agent *PEAgent `yaml:"agent"`
	// QuickAck turns a host's delayed ACKs off (its routes' quickack,
	// RTAX_QUICKACK): its TCP ACKs every segment, as seed 002's ns-3
	// runs. Optional: off (Linux delays ACKs up to 40 ms).
	QuickAck bool `yaml:"quickack"`
	// NP is where a host's rocev2 server turns CE marks into CNPs:
	// kernel (host/npbpf, where it attaches, else the agent with a
	// warning), agent (its receive loop; roceperf --np), or off (mlx5's
	// roce_np/enable 0: CE counted, no CNP sent; seed 000's
	// misconfiguration). Optional: kernel.
	NP string `yaml:"np"`
	// TCPECN is whether a host's TCP connections negotiate ECN (RFC
	// 3168; net.ipv4.tcp_ecn 1 or 0): off makes a host whose packets
	// leave Not-ECT, seed 000's "ECN not set by the sender". Optional: on.
	TCPECN string `yaml:"tcp_ecn"`
	// HostQueue bounds a host's host queue: the bytes its rocev2 and uet
	// senders have on their links that the switch has not yet received
	// (host/linkq). On this VM they wait in the kernel's backlog for
	// softirq work the host can hold off for tens of ms, then reach the
	// port in a burst, past PPFC and CNPs; a NIC bounds its own (BQL).
	// 0 turns the bound off. Optional: linkq.DefaultLimit (128 KB).
	HostQueue *units.ByteSize `yaml:"host_queue"`
}

// PE decapsulation modes.
const (
	DecapRFC6040      = "rfc6040"
	DecapTwoThreshold = "two-threshold"
)

// PEAgent is a tunnel PE's agent (host/pe.Config).
type PEAgent struct {
	// Mode is observe (count the notifications), rate (cut the tunnel's
	// rate on a light CNP: a limiter port on the PE's first WAN device,
	// "pe:dev" in ports, driven by a DCQCN reaction point at the WAN's
	// RTT) or reroute (spread the tunnel over every WAN path on a light
	// CNP, back to path 1 when they stop: a pe linked into the WAN twice).
	Mode string `yaml:"mode"`
	// LineRate is the limiter's rate, where the agent starts and
	// recovers to. Required with rate.
	LineRate units.Rate `yaml:"line_rate"`
	// MinRate is the least rate a cut reaches. Optional: line_rate / 10.
	MinRate units.Rate `yaml:"min_rate"`
	// RTT is the WAN's round trip: the reaction point's timers, and
	// light CNPs within it of a cut are coalesced. Optional: twice the
	// delay of the links between the two PEs.
	RTT time.Duration `yaml:"rtt"`
}

// NodeOverride changes a pe's decap or agent in a variant.
type NodeOverride struct {
	Name  string   `yaml:"name"`
	Decap string   `yaml:"decap"`
	Agent *PEAgent `yaml:"agent"`
}

// Link is a veth pair between two nodes. A and B are "node" or
// "node:dev"; a device not named is named after the node at the other
// end (sw1's device toward h1 is h1), or eth<n> when that does not fit.
type Link struct {
	A string `yaml:"a"`
	B string `yaml:"b"`
	// Rate puts a switch egress port at that rate on the device of each
	// end that is a switch. Optional: 0 is no port.
	Rate units.Rate `yaml:"rate"`
	// Delay is the one-way delay of each direction. Optional.
	Delay time.Duration `yaml:"delay"`
	// Loss is the fraction of the flows' datagrams (RoCEv2's UDP 4791 and
	// UET's 4793) dropped in each direction, 0..1. Optional.
	Loss float64 `yaml:"loss"`
	// MTU of both ends. Optional: DefaultLinkMTU.
	MTU int `yaml:"mtu"`
	// Subnet pins the link's subnet inside 198.18.0.0/15 (at most a /30;
	// a /29 with delay or loss). Optional: the link's automatic /24.
	Subnet netip.Prefix `yaml:"subnet"`
	// nic: a fabric's host link whose host end is a port too
	// (Fabric.NIC).
	nic bool
}

// Port overrides one switch port's configuration, with the spellings of
// portctl's options, applied to qdisc.DefaultConfig at the link's rate.
type Port struct {
	// Port is "switch:dev", the device of a link with a rate.
	Port string `yaml:"port"`
	// TC are --tc values: "3:wred:min=50kb,max=1mb,p=0.1".
	TC []string `yaml:"tc"`
	// DSCP are --dscp values: "26=3", "24-31=3".
	DSCP []string `yaml:"dscp"`
	// DefaultClass is --default-class: the class of non-IP frames.
	DefaultClass string `yaml:"default_class"`
}

// Variant is one configuration of a comparison: the file's ports with
// these applied on top (a --tc spec changes what it names, the rest of
// the class stays), and its pes' decap and agents.
type Variant struct {
	Name  string `yaml:"name"`
	Ports []Port `yaml:"ports"`
	// Nodes change pes' decap and agent (the rest of the node stays).
	Nodes []NodeOverride `yaml:"nodes"`
	// Flows change flows' congestion control and load balancing (the
	// rest of the flow stays): the same traffic under NSCC, RCCC or
	// both, on one path or sprayed.
	Flows []FlowOverride `yaml:"flows"`
}

// FlowOverride changes the congestion control or the load balancer of
// one flow (name) or of every flow of a group in a variant.
type FlowOverride struct {
	Name  string `yaml:"name"`
	Group string `yaml:"group"`
	// CC is as a flow's cc, for its transport. Optional when LB is
	// given: the flow's own.
	CC string `yaml:"cc"`
	// LB is as a uet flow's lb (none: one entropy). Optional: the
	// flow's own.
	LB string `yaml:"lb"`
	// Loss is as a uet flow's loss. Optional: the flow's own.
	Loss string `yaml:"loss"`
}

// Flow is one perf client run (host/perf RunClient), or one TCP
// connection, from From to a server on To; with count, a series of them.
type Flow struct {
	// Name labels the flow. Optional: f<n>, its place in the file.
	Name string `yaml:"name"`
	// Group pools flows in a comparison's summary: their goodput summed,
	// their series' FCTs together. Optional: the flow alone.
	Group string `yaml:"group"`
	From  string `yaml:"from"`
	To    string `yaml:"to"`
	// Transport is rocev2 (the default), uet or tcp.
	Transport string `yaml:"transport"`
	// CC is rocev2's dcqcn (the default) or none; uet's nscc (the
	// default), rccc, both or none; tcp's dctcp (the default) or any
	// congestion control the kernel has (cubic, reno, ...).
	CC string `yaml:"cc"`
	// Profile is the DCQCN profile (dcqcn.ProfileNames). Optional:
	// dcqcn.DefaultProfile.
	Profile string `yaml:"profile"`
	// Knobs set DCQCN's knobs by their mlx5 names after the profile
	// ({rpg_time_reset: 300}), or a uet flow's NSCC knobs by the spec's
	// names (cc nscc or both; roceperf --nscc): {target_qdelay: 4ms,
	// max_wnd: 1.5}, in the fabric's time.
	Knobs map[string]string `yaml:"knobs"`
	// QPs (rocev2) or Streams (uet): parallel QPs or PDCs. Optional: 1.
	QPs     int `yaml:"qps"`
	Streams int `yaml:"streams"`
	// Size is the payload to deliver; the flow ends when it is
	// acknowledged. Optional: without it the flow runs for Duration.
	Size units.ByteSize `yaml:"size"`
	// SizeMax draws each instance's size uniformly from size..size_max
	// (seeded: the file's seed, the run and the flow). Optional.
	SizeMax units.ByteSize `yaml:"size_max"`
	// Count runs the flow that many times, one instance after another:
	// short flows for FCTs, or, with the same every on several senders,
	// incast rounds. Needs size. Optional: 1.
	Count int `yaml:"count"`
	// Every starts instance k at start + k·every (an instance still
	// running delays the next, counted as late). Optional.
	Every time.Duration `yaml:"every"`
	// Pause starts each instance that long after the previous one ends.
	// Optional: 0, back to back; not with every.
	Pause time.Duration `yaml:"pause"`
	// Duration of a flow without size. Optional: the file's duration.
	Duration time.Duration `yaml:"duration"`
	// Start is the flow's start, from the run's. Optional: 0.
	Start time.Duration `yaml:"start"`
	// LineRate is the sender NIC's rate (DCQCN starts at it; with cc none
	// it caps the flow; UET's port rate and BDP). Optional: the rate of
	// the sender's link, else the fastest link rate of the lab, else
	// perf's default.
	LineRate units.Rate `yaml:"line_rate"`
	// MessageSize is each message (RDMA WRITE, UET message). Optional:
	// 64 KiB.
	MessageSize units.ByteSize `yaml:"message_size"`
	// MTU is rocev2's path MTU (256..4096, a power of two) or uet's full
	// data packet's IP size (512..9000). Optional: the largest that fits
	// the path.
	MTU int `yaml:"mtu"`
	// LB is uet's entropy load balancer: oblivious, bitmap, reps, mixed.
	// Optional: none, one entropy value per PDC.
	LB string `yaml:"lb"`
	// Inflight bounds each rocev2 QP's bytes in flight to Rc × inflight
	// (roceperf --inflight; a lab setting: a host here has no NIC's
	// window). Optional: perf's default.
	Inflight time.Duration `yaml:"inflight"`
	// BaseRTT is NSCC's base RTT (uet). Optional: DefaultUETBaseRTT.
	BaseRTT time.Duration `yaml:"base_rtt"`
	// RTO is each PDC's retransmission timeout (uet; roceperf --rto),
	// in the fabric's time (slowed by the timescale): longer than the
	// deepest queue the flow crosses, or a packet still queued is sent
	// again. Optional: pds's 10 ms.
	RTO time.Duration `yaml:"rto"`
	// Loss is how each PDC takes a packet for lost before its RTO (uet;
	// roceperf --loss): rack (RFC 8985 over the SACKs), sleek (htsim's
	// -sleek: the target's out-of-order count past 1.5 windows; cc nscc
	// or both) or none (NACKs, probes and the RTO). Optional: rack.
	Loss string `yaml:"loss"`
	// PPFCMaxPause bounds every pause a PPFC stop puts on the flow's QPs
	// (roceperf --ppfc-max-pause; rocev2). Optional: the Pause Duration
	// field's longest, 65.535 ms.
	PPFCMaxPause time.Duration `yaml:"ppfc_max_pause"`
	// PPFCWatchdog ends a pause storm on the flow's QPs (roceperf
	// --ppfc-watchdog; rocev2): a duration, or off. Optional:
	// max(200 ms, 2 × the max pause).
	PPFCWatchdog Watchdog `yaml:"ppfc_watchdog"`
	// RP is where a rocev2 flow's DCQCN reaction point takes its CNPs:
	// kernel (host/rpbpf: Rc is cut from a CNP's arrival on the device,
	// where it attaches, else the agent with a warning), agent (the
	// sender's receive loop; roceperf --rp), or off (mlx5's
	// roce_rp/enable 0: the QPs send at the line rate and ignore CNPs;
	// seed 000's misconfiguration). Optional: kernel.
	RP string `yaml:"rp"`
	// Verify checks every payload byte at the server.
	Verify bool `yaml:"verify"`
	// DSCP of a tcp flow's packets, which picks the port's class (as
	// the ports' dscp maps). Optional: 0.
	DSCP int `yaml:"dscp"`

	// conn is the flow's connection in the file's Workload matrix, 1 up;
	// 0 for a flow of its own.
	conn int
}

// Watchdog is a flow's ppfc_watchdog: a duration, or "off" (negative).
type Watchdog time.Duration

// UnmarshalText reads a duration like 200ms, or off.
func (w *Watchdog) UnmarshalText(b []byte) error {
	if string(b) == "off" {
		*w = -1
		return nil
	}
	d, err := units.ParseDuration(string(b))
	if err != nil || d <= 0 {
		return fmt.Errorf("%s: want a duration like 200ms, or off", b)
	}
	*w = Watchdog(d)
	return nil
}

// Report says what a run reports.
type Report struct {
	// Interval is the live view's period. Optional: DefaultInterval.
	Interval time.Duration `yaml:"interval"`
	// Output is the directory for result.json and the plots. Optional:
	// fabriclab-out/<name>.
	Output string `yaml:"output"`
	// Watch are the ports ("switch:dev") the live view and the plots
	// show. Optional: every port.
	Watch []string `yaml:"watch"`
}

// Load reads and validates the lab file at path.
func Load(path string) (*File, error) { return loadWith(path, nil) }

// Parse decodes and validates a lab file; name is the file's name in
// errors. Every error names the file and line, the field path
// ("flows[1].from"), the value and what is allowed.
func Parse(name string, data []byte) (*File, error) { return parse(name, data, nil) }

// LoadCM is Load with the workload's matrix read from the .cm file at
// cmPath (fabriclab run -cm): the file gives the fabric and, in its
// workload, the hosts and the flows' settings; a generator it names is
// replaced.
func LoadCM(path, cmPath string) (*File, error) {
	return loadWith(path, func(f *File) error {
		abs, err := filepath.Abs(cmPath)
		if err != nil {
			return err
		}
		w := &Workload{}
		if f.Workload != nil {
			w.Hosts, w.Flow = f.Workload.Hosts, f.Workload.Flow
		}
		w.CM = abs
		f.Workload = w
		return nil
	})
}

// loadWith reads the lab file at path and parses it.
func loadWith(path string, edit func(*File) error) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parse(path, data, edit)
}

// parse decodes a lab file, lets edit (optional) change it as decoded,
// and validates it.
func parse(name string, data []byte, edit func(*File) error) (*File, error) {
	f := &File{}
	if err := conf.Decode(name, data, f); err != nil {
		return nil, err
	}
	if edit != nil {
		if err := edit(f); err != nil {
			return nil, err
		}
	}
	f.Path, f.data = name, data
	if err := f.validate(); err != nil {
		return nil, conf.Locate(name, data, err)
	}
	return f, nil
}

// SetTimescale replaces the file's timescale with k (fabriclab run
// -timescale) and plans the file again; on error the file keeps its plan.
func (f *File) SetTimescale(k units.Timescale) error {
	old, oldTuned := f.Timescale, f.tuned
	f.Timescale = k
	err := checkTimescale(k)
	if err == nil {
		err = f.planAll()
	}
	if err == nil {
		return nil
	}
	f.Timescale, f.tuned = old, oldTuned
	if ce := (*conf.Error)(nil); errors.As(err, &ce) && ce.Path == "timescale" {
		ce.File = f.Path // the value given here, not a line of the file
		return err
	}
	return conf.Locate(f.Path, f.data, err)
}

// Plan is the topology Parse computed: addresses, routes, ports, PEs and
// the flows' perf configurations.
func (f *File) Plan() *Plan { return f.plan }

// RunName is Name, or the file's base name without its extension.
func (f *File) RunName() string {
	if f.Name != "" {
		return f.Name
	}
	base := filepath.Base(f.Path)
	if base == "." || base == "/" || base == "" {
		return "lab"
	}
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// OutputDir is Report.Output, or fabriclab-out/<RunName>.
func (f *File) OutputDir() string {
	if f.Report.Output != "" {
		return f.Report.Output
	}
	return filepath.Join("fabriclab-out", f.RunName())
}

// interval is the report interval with its default, as written (the
// plan's Interval is the run's, slowed).
func (f *File) interval() time.Duration {
	if f.Report.Interval == 0 {
		return DefaultInterval
	}
	return f.Report.Interval
}

// String names a flow in messages.
func (fl *Flow) String() string { return fmt.Sprintf("%s (%s → %s)", fl.Name, fl.From, fl.To) }
