package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/fabriclab/fabriclab/host/roce"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

var usage = fmt.Sprintf(`Usage: roceperf [-s|-c host] [options]
       roceperf [-h|--help] [-V|--version]
       roceperf completion      (bash: source <(roceperf completion))

RoCEv2 traffic like iperf3: a server terminates RC queue pairs on UDP 4791,
a client streams RDMA WRITEs or SENDs on them with DCQCN congestion control.
QPs are set up over a TCP side channel (port 18515, like perftest). Needs
root: CAP_NET_RAW for the raw socket RoCE packets leave by, CAP_BPF,
CAP_NET_ADMIN and CAP_SYS_ADMIN for the steering that shares UDP 4791
between the agents of a network namespace.

With --transport uet both ends run Ultra Ethernet Transport instead: a UET
endpoint (PDS, RUD, NSCC) on UDP 4793 of one address, each stream a PDC of
its own job, all streams sharing the congestion control context (CCC) to
the server. A UET server serves UET clients only (a RoCEv2 server on the
same address needs another -p). Needs CAP_NET_RAW.

Server or client:
  --transport rocev2|uet    RoCEv2 queue pairs (default) or UET PDCs; both
                            ends must use the same
  -p, --port N              side-channel TCP port (default 18515)
  --udp-port N              RoCEv2 UDP port RoCE packets arrive on (default
                            4791, shared by every agent of the host; each QP
                            sends from its own source port: the ECMP entropy)
  -B, --bind ADDR           bind to this address
  --send auto|raw           how packets leave: runs of one source port (a
                            QP's) as UDP GSO sends, the rest through a raw
                            socket (auto, the default; all raw where a port
                            is attached in this namespace, which would see a
                            GSO send as one packet), or all through the raw
                            socket (raw)
  --ppfc-sources LIST       (RoCEv2) the switches that may pause this end's
                            QPs with PPFC notifications, comma-separated IP
                            prefixes or addresses (default: any); the host's
                            steering drops the others (ppfc_ignored_source)
  --ppfc-max-pause TIME     (RoCEv2) the longest pause a PPFC stop puts on
                            this end's QPs, 1us..1s, wall-clock (default
                            65.535ms, the field's longest; a bare number is ms)
  --ppfc-watchdog TIME|off  (RoCEv2) a QP paused stop after stop this long
                            sends again and obeys no stop for as long, the
                            max pause..10s (default max(200ms, 2 x the max
                            pause), as a switch's PFC watchdog)
  -i, --interval SECONDS    seconds between reports (default 1, 0 = none)
  -J, --json                JSON output (one report at the end)
  --logfile FILE            send output to FILE (appended)
  -d, --debug               debug logging
  --timescale K             slow the fabric K times, 1..1000 (default 1): the
                            line rate over K; DCQCN's timers, the in-flight
                            time, the ACK timeout, NSCC's base RTT and UET's
                            timers times K (a UET server: its credit pacer
                            and timers; a RoCEv2 server's CNP period is the
                            client's); -t, -i and -O stay wall-clock
  -V, --version             print the version and exit
  -h, --help                print this text and exit
Server:
  -s, --server              run as the server (with --transport uet, -B is
                            required: UET's UDP 4793 is opened per address)
  -1, --one-off             serve one client, then exit
  --np kernel|agent|off     where CE marks turn into CNPs: an eBPF program on
                            the devices holding -B (default kernel where it
                            attaches, else agent) or the server's agent;
                            off counts CE and sends no CNP (mlx5's
                            roce_np/enable 0); with --transport uet, off
                            alone: the target echoes no CE in its ACKs
  --pkey P                  (RoCEv2) the P_Key of this end's QPs, 0x0001..
                            0xffff but 0x8000 (default 0xffff); a packet of
                            another partition is dropped (pkey_violations),
                            by the agent and the kernel NP and RP alike
  --trim-dscp N, --trim-lasthop-dscp N  (--transport uet) DSCP 0..63 of
                            packets a port trimmed (--tc trim,trim-dscp=N):
                            NACKed TRIMMED / TRIMMED_LASTHOP (default 0: none)
Client:
  -c, --client HOST         run as a client of the server at HOST[:PORT]
  -t, --time SECONDS        time to transmit (default 10)
  -n, --bytes N[KMG]        bytes to transmit over all QPs instead of -t
                            (K, M, G = 1024-based; rounded up to messages)
  -P, --parallel N          queue pairs (default 1, at most 16384; --transport uet: 4096 streams)
  -l, --length N[KMG]       message size (default 64K, at most 16M)
  --mtu N                   path MTU: 256, 512, 1024 (default), 2048, 4096
  --op write|send           RDMA WRITE (default) or SEND
  -b, --bitrate N[kmg]      line rate of the emulated NIC, bits/s (1000-based;
                            or 10gbit): with --cc dcqcn the start rate, the
                            profile is scaled to it (default 10G); with
                            --cc none the pacing cap (default unpaced); the
                            -P QPs share it, as a NIC's QPs share the port
  --cc dcqcn|none           congestion control (default dcqcn)
  --dcqcn-profile lab|mlx5|paper  DCQCN profile (default lab: the paper's loop with timers for
                            this lab's ms round trips, host/dcqcn.LabParams;
                            mlx5: the NIC firmware's µs timers)
  --rp kernel|agent|off     where the DCQCN reaction point takes its CNPs: an
                            eBPF program on the devices holding -B, Rc cut
                            from a CNP's arrival on (default kernel where it
                            attaches, else agent) or the client's agent; off
                            sends at the line rate, CNPs counted as ignored
                            (mlx5's roce_rp/enable 0)
  --dcqcn NAME=VALUE        set a DCQCN knob by its mlx5 name, repeatable;
                            "--dcqcn help" lists them with their values
  --dscp N                  DSCP of data and ACKs (default 26)
  --cnp-dscp N              DSCP of the server's CNPs (default 48)
  --show-nic IF             print the DCQCN profile, knobs, --dscp and
                            --cnp-dscp as settings of an NVIDIA ConnectX NIC
                            IF (a sh script: mlnx_qos, /sys/class/net/IF/ecn)
                            and exit; needs no server
  -O, --omit SECONDS        omit the first SECONDS from the summary
  --verify                  the server checks every byte against a pattern
  --perftest                also print perftest's (ib_write_bw) preamble and
                            result table
  --window N                packets in flight per QP (default %d)
  --inflight TIME           also bound each QP's bytes in flight to Rc x TIME,
                            e.g. base RTT + max_th/C of the bottleneck (default
                            0: the window only; a departure from firmware)
  --ack-every N             ask for an ACK every N packets (default %d)
  --burst N                 packets paced back to back (default %d)
  --timeout TIME            ACK timeout (default %v; a bare number is ms)
  --retry N                 ACK timeouts in a row before a QP fails (default %d)
Client, --transport uet (-t -n -P -l -i -O -J -B --dscp --verify as above;
-P streams, one PDC and job each; the RoCEv2-only flags --udp-port --op
--dcqcn-profile --dcqcn --rp --cnp-dscp --perftest --window --inflight
--ack-every --burst --timeout --retry are refused):
  --mtu N                   IP packet size of a full data packet, 512..9000
                            (default %d); at most the path's MTU
  -b, --bitrate N[kmg]      the endpoint's line rate: its port limiter and
                            NSCC's BDP (default %s)
  --cc nscc|rccc|both|none  the sender's congestion control: NSCC's window
                            (default), RCCC's receiver credit, both (a packet
                            needs both), or none (the PDC window and the
                            line only); the server needs no flag: it grants
                            credit to any client that asks
  --base-rtt TIME           NSCC's base RTT (default %v)
  --rto TIME                each PDC's retransmission timeout (default %v):
                            longer than the deepest queue on the path
  --loss rack|sleek|none    how a PDC takes a packet for lost before its RTO:
                            RACK on the SACKs (default), htsim's SLEEK on the
                            target's out-of-order count (--cc nscc or both),
                            or none (NACKs, probes and the RTO only)
  --nscc NAME=VALUE         set an NSCC knob by its spec name, repeatable
                            (target_qdelay, qa_threshold, gamma, max_wnd, ...)
  --trace-ccc               print every CCC transition with its time (-J:
                            end.uet.ccc_trace)
  --lb oblivious|bitmap|reps|mixed  spread each PDC over 128 EVs with this
                            load balancer (default none: one EV per PDC)

Examples:
  roceperf -s -B 198.18.0.1
  roceperf -c 198.18.0.1 -t 10 -P 4 -b 1g
  roceperf -c 198.18.0.1 -n 1G --verify --perftest
  roceperf -c 198.18.0.1 --dcqcn-profile paper --dcqcn rpg_ai_rate=10 -J
  roceperf -s -B 198.18.0.1 --transport uet
  roceperf -c 198.18.0.1 --transport uet -t 10 -P 2 --verify
  roceperf -c 198.18.0.1 --transport uet -n 1G --cc rccc
`, qpDefaults.Window, qpDefaults.AckReqEvery, qpDefaults.MaxBurst, qpDefaults.AckTimeout, qpDefaults.RetryCount,
	uetDefaults.MTU, uetDefaults.LinkRate, uetDefaults.BaseRTT, uetDefaults.RTO)

var (
	qpDefaults  = agent.DefaultQPConfig()
	uetDefaults = pds.DefaultConfig()
)

type action int

const (
	actionRun action = iota
	actionHelp
	actionVersion
	actionKnobHelp
	actionShowNIC
)

// options is the parsed command line.
type options struct {
	action  action
	server  *perf.ServerConfig // nil: client
	client  perf.ClientConfig
	logfile string
	debug   bool
	nicDev  string // --show-nic
}

// repeated collects a repeatable flag.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

// clientOnly are the flags a server refuses, as iperf3 does.
var clientOnly = []string{"t", "time", "n", "bytes", "P", "parallel", "l", "length", "mtu", "op", "b", "bitrate",
	"cc", "dcqcn-profile", "dcqcn", "rp", "dscp", "cnp-dscp", "O", "omit", "verify", "perftest",
	"window", "inflight", "ack-every", "burst", "timeout", "retry", "base-rtt", "rto", "loss", "trace-ccc", "lb", "nscc"}

// rocev2Only are the flags --transport uet refuses; uetOnly those
// --transport rocev2 refuses.
var (
	rocev2Only = []string{"udp-port", "op", "dcqcn-profile", "dcqcn", "rp", "pkey", "cnp-dscp", "perftest",
		"window", "inflight", "ack-every", "burst", "timeout", "retry", "ppfc-sources", "ppfc-max-pause", "ppfc-watchdog", "show-nic"}
	uetOnly = []string{"base-rtt", "rto", "loss", "nscc", "trace-ccc", "lb", "trim-dscp", "trim-lasthop-dscp"}
)

func versionLine() string {
	return fmt.Sprintf("roceperf %s (fabriclab; %s %s/%s; side-channel protocol %d)",
		perf.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, agent.ProtocolVersion)
}

// parseArgs turns the command line into options. Errors are one line
// naming the flag, the value and what it must be.
func parseArgs(args []string) (*options, error) {
	fs := flag.NewFlagSet("roceperf", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	str := func(def string, names ...string) *string {
		p := new(string)
		for _, n := range names {
			fs.StringVar(p, n, def, "")
		}
		return p
	}
	boolean := func(names ...string) *bool {
		p := new(bool)
		for _, n := range names {
			fs.BoolVar(p, n, false, "")
		}
		return p
	}
	var (
		server   = boolean("s", "server")
		client   = str("", "c", "client")
		port     = str("", "p", "port")
		udpPort  = str("", "udp-port")
		bind     = str("", "B", "bind")
		interval = str("1", "i", "interval")
		jsonOut  = boolean("J", "json")
		logfile  = str("", "logfile")
		debug    = boolean("d", "debug")
		version  = boolean("V", "v", "version")
		help     = boolean("h", "help")
		oneOff   = boolean("1", "one-off")
		npMode   = str("", "np")
		rpMode   = str("", "rp")
		dur      = str("10", "t", "time")
		nbytes   = str("", "n", "bytes")
		parallel = str("1", "P", "parallel")
		length   = str("64K", "l", "length")
		mtu      = str("1024", "mtu")
		op       = str("write", "op")
		bitrate  = str("", "b", "bitrate")
		ccName   = str("", "cc") // dcqcn (RoCEv2) or nscc (UET)
		profile  = str(dcqcn.DefaultProfile, "dcqcn-profile")
		dscp     = str(strconv.Itoa(agent.DefaultDSCP), "dscp")
		cnpDSCP  = str(strconv.Itoa(agent.DefaultCNPDSCP), "cnp-dscp")
		omit     = str("0", "O", "omit")
		verify   = boolean("verify")
		perftest = boolean("perftest")
		window   = str("", "window")
		inflight = str("", "inflight")
		ackEvery = str("", "ack-every")
		burst    = str("", "burst")
		timeout  = str("", "timeout")
		retry    = str("", "retry")
		tport    = str(perf.TransportRoCEv2, "transport")
		baseRTT  = str("", "base-rtt")
		rto      = str("", "rto")
		lossInf  = str("", "loss")
		traceCCC = boolean("trace-ccc")
		lbKind   = str("", "lb")
		trimDSCP = str("", "trim-dscp")
		trimLast = str("", "trim-lasthop-dscp")
		tscale   = str("", "timescale")
		sendPath = str("auto", "send")
		pkeyFlag = str("", "pkey")
		ppfcSrc  = str("", "ppfc-sources")
		ppfcMax  = str("", "ppfc-max-pause")
		ppfcWd   = str("", "ppfc-watchdog")
		showNIC  = str("", "show-nic")
		knobs    repeated
		nsccKnob repeated
	)
	fs.Var(&knobs, "dcqcn", "")
	fs.Var(&nsccKnob, "nscc", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &options{action: actionHelp}, nil
		}
		return nil, fmt.Errorf("roceperf: %v (roceperf -h for help)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("roceperf: unexpected argument %q (roceperf -h for help)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	spelled := func(names ...string) string { // the spelling the user typed
		for _, n := range names {
			if set[n] {
				return dash(n)
			}
		}
		return dash(names[0])
	}
	o := &options{logfile: *logfile, debug: *debug}
	switch {
	case *help:
		o.action = actionHelp
		return o, nil
	case *version:
		o.action = actionVersion
		return o, nil
	}

	// The transport, and the flags only the other one takes.
	uetRun := false
	switch *tport {
	case perf.TransportRoCEv2:
		for _, n := range uetOnly {
			if set[n] {
				return nil, fmt.Errorf("roceperf: %s: a UET option (--transport uet)", dash(n))
			}
		}
	case perf.TransportUET:
		uetRun = true
		for _, n := range rocev2Only {
			if set[n] {
				return nil, fmt.Errorf("roceperf: %s: a RoCEv2 option, not for --transport uet", flagValue(fs, n))
			}
		}
		if set["np"] && *npMode != perf.NPOff {
			return nil, fmt.Errorf("roceperf: --np %s: places RoCEv2's NP; --transport uet takes only --np off (the target echoes no CE)", *npMode)
		}
	default:
		return nil, mustBe("--transport", *tport, "rocev2 or uet")
	}

	// Shared settings.
	var err error
	c := perf.DefaultClientConfig(*client)
	if uetRun {
		c = perf.DefaultUETClientConfig(*client)
	}
	if c.Interval, err = seconds(spelled("i", "interval"), *interval, 0, perf.MaxInterval); err != nil {
		return nil, err
	}
	if c.Interval != 0 && c.Interval < perf.MinInterval {
		return nil, mustBe(spelled("i", "interval"), *interval, "0 (no interval reports) or %g..%g seconds", perf.MinInterval.Seconds(), perf.MaxInterval.Seconds())
	}
	c.JSON = *jsonOut
	var bindAddr netip.Addr
	if *bind != "" {
		if bindAddr, err = netip.ParseAddr(*bind); err != nil {
			return nil, mustBe(spelled("B", "bind"), *bind, "an IP address of this host")
		}
	}
	send, err := pktio.ParseSendPath(*sendPath)
	if err != nil {
		return nil, mustBe("--send", *sendPath, "auto or raw")
	}
	c.SendPath = send
	portN, udpN := 0, 0
	if *port != "" {
		if portN, err = intIn(spelled("p", "port"), *port, 1, 65535); err != nil {
			return nil, err
		}
	}
	if *udpPort != "" {
		if udpN, err = intIn("--udp-port", *udpPort, 0, 65535); err != nil {
			return nil, err
		}
	}
	if set["show-nic"] {
		if *server {
			return nil, errors.New("roceperf: --show-nic prints a sender's NIC settings: drop -s")
		}
		o.action, o.nicDev = actionShowNIC, *showNIC
	}
	for _, k := range knobs {
		if k == "help" {
			o.action = actionKnobHelp
		}
	}
	var timescale units.Timescale
	if *tscale != "" {
		v, perr := strconv.ParseFloat(strings.TrimSpace(*tscale), 64)
		if timescale = units.Timescale(v); perr != nil || v == 0 || timescale.Validate() != nil {
			return nil, mustBe("--timescale", *tscale, "1..%d (a fabric K times slower)", units.MaxTimescale)
		}
	}

	switch {
	case *server && *client != "":
		return nil, errors.New("roceperf: -s and -c: run either a server (-s) or a client (-c HOST), not both")
	case o.action == actionKnobHelp, o.action == actionShowNIC:
	case !*server && *client == "":
		return nil, errors.New("roceperf: give -s to run a server or -c HOST to run a client (roceperf -h for help)")
	case *server:
		for _, n := range clientOnly {
			if set[n] {
				return nil, fmt.Errorf("roceperf: %s is a client option; a server takes -B, -p, --udp-port, --send, --np, --pkey, --ppfc-sources, --ppfc-max-pause, --ppfc-watchdog, -1, -i, -J, --logfile, --timescale", dash(n))
			}
		}
		if set["udp-port"] && udpN == 0 {
			return nil, mustBe("--udp-port", *udpPort, "1..65535")
		}
		if *npMode != "" && *npMode != perf.NPKernel && *npMode != perf.NPAgent && *npMode != perf.NPOff {
			return nil, mustBe("--np", *npMode, "kernel, agent or off")
		}
		if uetRun && (!bindAddr.IsValid() || bindAddr.IsUnspecified() || bindAddr.IsMulticast()) {
			return nil, errors.New("roceperf: -s --transport uet: give -B ADDR, a unicast address of this host (UET's UDP 4793 is opened per address)")
		}
		pk, err := parsePKey(*pkeyFlag)
		if err != nil {
			return nil, err
		}
		srcs, err := parsePPFCSources(*ppfcSrc)
		if err != nil {
			return nil, err
		}
		maxPause, watchdog, err := parsePPFCLimits(*ppfcMax, *ppfcWd)
		if err != nil {
			return nil, err
		}
		o.server = &perf.ServerConfig{Bind: bindAddr, Port: portN, UDPPort: udpN, OneOff: *oneOff, JSON: *jsonOut, Interval: c.Interval, NP: *npMode,
			SendPath: send, Timescale: timescale, PKey: pk, PPFCSources: srcs, PPFCMaxPause: maxPause, PPFCWatchdog: watchdog}
		for _, t := range []struct {
			name string
			s    *string
			p    *uint8
		}{{"--trim-dscp", trimDSCP, &o.server.TrimDSCP}, {"--trim-lasthop-dscp", trimLast, &o.server.TrimLastHopDSCP}} {
			if *t.s == "" {
				continue
			}
			v, err := intIn(t.name, *t.s, 0, 63)
			if err != nil {
				return nil, err
			}
			if v != 0 && v == int(uetDefaults.DSCP) {
				return nil, mustBe(t.name, *t.s, "0..63 and not %d (the data's DSCP)", uetDefaults.DSCP)
			}
			*t.p = uint8(v)
		}
		if uetRun {
			o.server.Transport = perf.TransportUET
		}
		if c.Interval == 0 {
			o.server.Interval = -1
		}
		return o, nil
	}
	if *oneOff {
		return nil, errors.New("roceperf: -1 is a server option")
	}
	if *npMode != "" {
		return nil, errors.New("roceperf: --np is a server option")
	}
	for _, n := range []string{"trim-dscp", "trim-lasthop-dscp"} {
		if set[n] {
			return nil, fmt.Errorf("roceperf: --%s is a server option (the receiver NACKs trimmed packets)", n)
		}
	}

	// Client settings.
	if *client != "" {
		c.Server = serverAddr(*client, portN, set["p"] || set["port"])
	}
	c.Bind, c.UDPPort = bindAddr, udpN
	c.Timescale = timescale
	c.Verify, c.Perftest = *verify, *perftest
	if c.Duration, err = seconds(spelled("t", "time"), *dur, time.Millisecond, perf.MaxDuration); err != nil {
		return nil, err
	}
	if *nbytes != "" {
		v, perr := perf.ParseBytes(*nbytes)
		if perr != nil || v == 0 {
			return nil, mustBe(spelled("n", "bytes"), *nbytes, "a byte count > 0 with an optional K, M, G suffix (1024-based)")
		}
		c.Bytes = v
	}
	if c.QPs, err = intIn(spelled("P", "parallel"), *parallel, 1, perf.MaxQPs); err != nil {
		return nil, err
	}
	l, perr := perf.ParseBytes(*length)
	if perr != nil || l < 1 || l > perf.MaxMessageBytes {
		return nil, mustBe(spelled("l", "length"), *length, "1..16M bytes")
	}
	c.MessageBytes = int(l)
	switch {
	case uetRun && set["mtu"]:
		if c.MTU, err = intIn("--mtu", *mtu, perf.MinUETMTU, perf.MaxUETMTU); err != nil {
			return nil, err
		}
	case uetRun: // pds's default, not RoCEv2's
	default:
		if c.MTU, err = intIn("--mtu", *mtu, 256, 4096); err != nil {
			return nil, err
		}
		if c.MTU&(c.MTU-1) != 0 {
			return nil, mustBe("--mtu", *mtu, "256, 512, 1024, 2048 or 4096")
		}
	}
	switch *op {
	case "write":
		c.Op = agent.OpWrite
	case "send":
		c.Op = agent.OpSend
	default:
		return nil, mustBe("--op", *op, "write or send")
	}
	// --cc is the transport's: DCQCN or none (RoCEv2), a pds.CCMode (UET).
	switch {
	case uetRun && set["cc"]:
		m, perr := pds.ParseCCMode(*ccName)
		if perr != nil {
			hint := ""
			if *ccName == "dcqcn" {
				hint = " (dcqcn is RoCEv2's)"
			}
			return nil, mustBe("--cc", *ccName, "%s with --transport uet%s", uetCCNames(), hint)
		}
		c.UETCC = m
	case uetRun: // pds's default, NSCC
	case *ccName == "dcqcn" || !set["cc"]:
		c.CC = agent.CCDCQCN
	case *ccName == "none":
		c.CC = agent.CCNone
	default:
		hint := ""
		if _, perr := pds.ParseCCMode(*ccName); perr == nil {
			hint = fmt.Sprintf(" (%s is --transport uet's)", *ccName)
		}
		return nil, mustBe("--cc", *ccName, "dcqcn or none%s", hint)
	}
	if *bitrate != "" {
		r, perr := perf.ParseBitrate(*bitrate)
		amb := (*units.AmbiguousRateError)(nil)
		switch {
		case errors.As(perr, &amb): // it names its own fix
			return nil, fmt.Errorf("roceperf: %s %s: %w", spelled("b", "bitrate"), *bitrate, perr)
		case uetRun && (perr != nil || r < units.Kbit || r > perf.MaxLineRate):
			return nil, mustBe(spelled("b", "bitrate"), *bitrate, "1k..1t bits/s (k, m, g, t 1000-based, or 10gbit) with --transport uet")
		case perr != nil || (r != 0 && r < units.Kbit) || r > perf.MaxLineRate:
			return nil, mustBe(spelled("b", "bitrate"), *bitrate, "1k..1t bits/s (k, m, g, t 1000-based, or 10gbit), or 0 (--cc none: unpaced)")
		}
		c.LineRate = r
	}
	if *baseRTT != "" {
		d, perr := units.ParseDuration(*baseRTT)
		if perr != nil || d < perf.MinUETBaseRTT || d > perf.MaxUETBaseRTT {
			return nil, mustBe("--base-rtt", *baseRTT, "1us..1s (e.g. 100us)")
		}
		c.BaseRTT = d
	}
	if *rto != "" {
		d, perr := units.ParseDuration(*rto)
		if perr != nil || d < pds.MinRTO || d > pds.MaxRTO {
			return nil, mustBe("--rto", *rto, "%v..%v (e.g. 50ms)", pds.MinRTO, pds.MaxRTO)
		}
		c.RTO = d
	}
	if *lossInf != "" {
		l, perr := pds.ParseLossInference(*lossInf)
		if perr != nil {
			return nil, mustBe("--loss", *lossInf, "%s", strings.Join(pds.LossInferenceNames(), ", "))
		}
		c.Loss = l
	}
	c.TraceCCC = *traceCCC
	if set["lb"] && !strings.EqualFold(*lbKind, "none") {
		k, perr := lb.ParseKind(*lbKind)
		if perr != nil {
			return nil, mustBe("--lb", *lbKind, "none, oblivious, bitmap, reps or mixed")
		}
		c.LB = k
	}
	c.Profile = *profile
	c.RP = *rpMode
	if o.action == actionKnobHelp {
		o.client = c
		return o, nil
	}
	for _, kv := range knobs {
		k, perr := cc.ParseKnob(kv)
		if perr != nil {
			return nil, mustBe("--dcqcn", kv, "name=value (--dcqcn help lists the knobs)")
		}
		c.Knobs = append(c.Knobs, k)
	}
	for _, kv := range nsccKnob {
		k, perr := cc.ParseKnob(kv)
		if perr != nil {
			return nil, mustBe("--nscc", kv, "name=value (knobs: %s)", strings.Join(nscc.KnobNames(), ", "))
		}
		c.NSCCKnobs = append(c.NSCCKnobs, k)
	}
	d, err := intIn("--dscp", *dscp, 1, 63)
	if err != nil {
		return nil, err
	}
	c.DSCP = uint8(d)
	if d, err = intIn("--cnp-dscp", *cnpDSCP, 1, 63); err != nil {
		return nil, err
	}
	c.CNPDSCP = uint8(d)
	if o.action == actionShowNIC {
		switch {
		case c.CC == agent.CCNone:
			return nil, errors.New("roceperf: --show-nic prints DCQCN's settings: not with --cc none")
		case set["timescale"]:
			return nil, errors.New("roceperf: --show-nic: a NIC runs unscaled: drop --timescale")
		}
		o.client = c
		return o, nil
	}
	if c.PKey, err = parsePKey(*pkeyFlag); err != nil {
		return nil, err
	}
	if c.PPFCSources, err = parsePPFCSources(*ppfcSrc); err != nil {
		return nil, err
	}
	if c.PPFCMaxPause, c.PPFCWatchdog, err = parsePPFCLimits(*ppfcMax, *ppfcWd); err != nil {
		return nil, err
	}
	if c.Omit, err = seconds(spelled("O", "omit"), *omit, 0, perf.MaxOmit); err != nil {
		return nil, err
	}
	if *window != "" {
		if c.Window, err = intIn("--window", *window, 1, 1<<20); err != nil {
			return nil, err
		}
		c.AckReqEvery = min(c.AckReqEvery, c.Window)
	}
	if *inflight != "" {
		d, perr := units.ParseDuration(*inflight)
		if perr != nil || d < 0 || d > time.Second {
			return nil, mustBe("--inflight", *inflight, "0..1s (e.g. 10ms)")
		}
		c.InflightTime = d
	}
	if *ackEvery != "" {
		if c.AckReqEvery, err = intIn("--ack-every", *ackEvery, 1, c.Window); err != nil {
			return nil, err
		}
	}
	if *burst != "" {
		if c.MaxBurst, err = intIn("--burst", *burst, 1, 256); err != nil {
			return nil, err
		}
	}
	if *timeout != "" {
		t := *timeout
		if _, err := strconv.ParseFloat(t, 64); err == nil {
			t += "ms" // a bare number is milliseconds, as iperf3's timeouts
		}
		d, perr := units.ParseDuration(t)
		if perr != nil || d < 10*time.Microsecond || d > time.Minute {
			return nil, mustBe("--timeout", *timeout, "10us..1m (a bare number is ms)")
		}
		c.AckTimeout = d
	}
	if *retry != "" {
		if c.RetryCount, err = intIn("--retry", *retry, 0, 1000); err != nil {
			return nil, err
		}
	}
	if err := c.Validate(); err != nil {
		return nil, perfErr(err)
	}
	o.client = c
	return o, nil
}

// uetCCNames is the --cc values of --transport uet: "nscc, rccc, both or
// none".
func uetCCNames() string {
	n := pds.CCModeNames()
	return strings.Join(n[:len(n)-1], ", ") + " or " + n[len(n)-1]
}

// flagValue is a flag as the user gave it: "--cc none", or "--perftest"
// for a switch.
func flagValue(fs *flag.FlagSet, name string) string {
	f := fs.Lookup(name)
	if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
		return dash(name)
	}
	return dash(name) + " " + f.Value.String()
}

// serverAddr joins -c HOST with -p PORT; HOST may carry its own port.
func serverAddr(host string, port int, portSet bool) string {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if port == 0 {
			port = perf.DefaultPort
		}
		return netip.AddrPortFrom(a, uint16(port)).String()
	}
	if _, _, err := net.SplitHostPort(host); err == nil && !portSet {
		return host
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if port == 0 {
		port = perf.DefaultPort
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func dash(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func mustBe(flagName, value, must string, args ...any) error {
	return fmt.Errorf("roceperf: %s %s: must be %s", flagName, value, fmt.Sprintf(must, args...))
}

// parsePKey reads --pkey: "" is the default (0), else a P_Key in C syntax
// (0xffff, 65535) that is not the invalid P_Key.
func parsePKey(s string) (uint16, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(strings.TrimSpace(s), 0, 16)
	if err != nil || !roce.ValidPKey(uint16(v)) {
		return 0, mustBe("--pkey", s, "0x0001..0xffff, but not 0x8000 (the invalid P_Key)")
	}
	return uint16(v), nil
}

// parsePPFCSources reads --ppfc-sources: comma-separated IP prefixes or
// addresses (an address is its own /32 or /128); "" is none (any source).
func parsePPFCSources(s string) ([]netip.Prefix, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		p, err := perf.ParsePPFCSource(f)
		if err != nil {
			return nil, mustBe("--ppfc-sources", s, "comma-separated IP prefixes or addresses, e.g. 198.18.1.1,198.19.0.0/24")
		}
		if p.Addr().Is4In6() {
			return nil, mustBe("--ppfc-sources", f, "written as IPv4, not IPv4-mapped (%s)", p.Addr().Unmap())
		}
		out = append(out, p)
	}
	return out, nil
}

func intIn(flagName, s string, lo, hi int) (int, error) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < lo || v > hi {
		return 0, mustBe(flagName, s, "%d..%d", lo, hi)
	}
	return v, nil
}

func seconds(flagName, s string, lo, hi time.Duration) (time.Duration, error) {
	d, err := perf.ParseSeconds(s)
	if err != nil || d < lo || d > hi {
		return 0, mustBe(flagName, s, "%g..%g seconds", lo.Seconds(), hi.Seconds())
	}
	return d, nil
}

// parsePPFCLimits reads --ppfc-max-pause and --ppfc-watchdog (a bare
// number is ms, as --timeout; the watchdog also "off"); "" leaves the
// default (0). Their ranges are perf's to check.
func parsePPFCLimits(maxPause, watchdog string) (time.Duration, time.Duration, error) {
	dur := func(name, s string) (time.Duration, error) {
		if s == "" {
			return 0, nil
		}
		t := s
		if _, err := strconv.ParseFloat(t, 64); err == nil {
			t += "ms"
		}
		d, err := units.ParseDuration(t)
		if err != nil || d < 0 {
			return 0, mustBe(name, s, "a time such as 10ms (a bare number is ms)")
		}
		return d, nil
	}
	mp, err := dur("--ppfc-max-pause", maxPause)
	if err != nil {
		return 0, 0, err
	}
	if watchdog == "off" {
		return mp, -1, nil
	}
	wd, err := dur("--ppfc-watchdog", watchdog)
	if err != nil {
		return 0, 0, mustBe("--ppfc-watchdog", watchdog, "a time such as 200ms (a bare number is ms), or off")
	}
	return mp, wd, nil
}
