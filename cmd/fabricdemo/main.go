// Command fabricdemo shows the DCQCN loop on a switch egress port with WRED
// ECN marking: N RoCEv2 senders share one port towards a receiver; the
// switch marks CE (CP), the receiver turns the marks into CNPs (NP), the
// senders cut and recover their rates (RP). Per-flow rates, CNPs and the
// queue are shown live, then summarised in a table and a PNG plot.
//
// It builds a dumbbell of network namespaces (s1..sN -> sw -> r), attaches a
// qdisc port (HTB at the port speed, eBPF marking on the real queue) to the
// switch's port towards the receiver, and runs one host/agent RoCE agent
// per namespace in this process: RC queue pairs writing with DSCP 26
// (class 3, "roce", ECT(0)), CNPs back with DSCP 48, the senders joining one
// after the other. -traffic uet runs Ultra Ethernet Transport instead: one
// host/pds endpoint per namespace, the senders in an incast through a
// 1-BDP port that trims, NSCC and/or RCCC (uet.go). -traffic tcp runs the
// earlier demo: one iperf3 TCP flow per sender, cubic with classic ECN.
// Everything is removed at exit, also on Ctrl-C.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/cmd/internal/completion"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/kernel"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/version"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2

	maxSenders = 32
	maxQPs     = 16    // per sender
	minKernel  = "6.6" // TCX

	trafficRoCE = "roce"
	trafficTCP  = "tcp"
	trafficUET  = "uet"
)

const usageText = `Usage: sudo fabricdemo [flags]

Shows the DCQCN loop: N RoCEv2 senders (RC queue pairs doing RDMA WRITEs to
one receiver, DCQCN rate control) through one switch egress port, all in
network namespaces of this machine, the hosts in this process. The port is
shaped to -rate; class 3 "roce" (DSCP 26) marks CE on seed 000's WRED curve
(min_th 50KB, max_th 1000KB, max_p 0.1, 2MB buffer), class 6 "cnp" (DSCP
48) is strict priority. The receiver answers CE marks with CNPs; each
sender cuts its rate Rc by α/2 per CNP and climbs back between them. The
senders join one after the other, each at the line rate. PPFC (seed 003)
keeps the port lossless when they join at once: a packet that takes class 3
to half its buffer stops its sender until the queue drains, a sender whose
pause ends before that is held again, and one that takes it to 7/16 of the
buffer is warned not to raise its rate meanwhile (an alarm; -ppfc).

DCQCN runs the paper's profile: its rate knobs scaled to -rate, its timers
stretched by the same factor (x80 at the default 500mbit, -stretch), which keeps every
byte quantity of the loop as on the paper's 40 Gbit/s fabric. Links are
9000-byte jumbo frames, RoCE MTU 4096.

Every second: per flow goodput, Rc, α, CNPs and retransmissions; the port's
queue, sojourn, CE marks and drops. At the end: a summary (goodput and share,
Jain fairness, utilization, np_cnp_sent/rp_cnp_handled/... , queue vs
min_th/max_th, observed vs configured marking, checks) and a PNG: per-flow
goodput and Rc, α and the queue over the run, and a 500 ms zoom sampled every
millisecond where each cut and recovery shows. Everything is removed at exit,
also on Ctrl-C.

-traffic uet runs Ultra Ethernet Transport instead: the senders start at
once (an incast) and write 64 KiB messages, verified at the receiver, over
UET endpoints (host/pds, UDP 4793, RUD) with the congestion control of -cc:
nscc (the sender's window, ECN and delay), rccc (the receiver's credit
pacer), both (the default: a packet leaves when both allow it) or none. The
port's class 3 holds one BDP at the base RTT of 1 ms (62 500 B at 500
Mbit/s), marks ECN from 0.2 to 0.8 of it, and trims what it cannot hold to
128 B (DSCP 9, strict class 7), which the receiver NACKs at once (-trim=false:
it drops instead). The senders send for -duration, or -bytes SIZE each (the
run ends when the last is acknowledged; -duration then bounds it). Every
second: per flow goodput, the window (cwnd) and bytes in flight, the credit,
the CCC states at the sender and the receiver, retransmissions and trim
NACKs; the port's queue, sojourn, marks, trims and drops. At the end: each
flow's FCT, the tail FCT over the ideal (all payload at the port's payload
capacity), Jain fairness, the queue's p50/p99, every byte verified, the
transport's and the port's counters, checks, and a PNG (demo-out/uet.png).

-traffic tcp runs the TCP demo: one iperf3 flow per sender, cubic with
classic ECN, through the same port.

-timescale k slows the whole fabric down k times (issue 26 §2): the port
runs at -rate/k, DCQCN's rate knobs over k and its timers times k, the
agents' and endpoints' timers times k, -duration, -stagger and -sample k
times as long; every byte (buffers, thresholds, messages) stays. The host's
stalls shrink k times beside the fabric's round trips. The live view and
the summary show the wire's rates and times (what the lab ran); -json has
the factor and the fabric's rate.

Every run meters what this shared machine took from the fabric
(host/hostlost): the time the port sat idle while an agent or endpoint of
this process held a flow it could have sent, and the time the port held
queued packets back while its link was free. The summary prints the
meter's line (host-starved: X % of the run, when over its budget) and the
utilization (UET: the tail FCT over the ideal) net of that time beside the
raw figure; -json has them too. iperf3's kernel TCP logs no held time: it
gets the port's idle and held-back time and the kernel's accounting.

Examples:
  fabricdemo                        3 senders, 20 s, plot in demo-out/dcqcn.png
  fabricdemo -senders 4 -qps 2      8 flows
  fabricdemo -senders 8 -stagger 0  8 senders at once: PPFC stops them
                                    before the buffer overflows (-ppfc off:
                                    it overflows)
  fabricdemo -stretch 1             the paper's own 55us timers at 1gbit: too
                                    fast to hold the queue, which overflows
  fabricdemo -profile mlx5          the ConnectX firmware defaults: α stays
                                    low at this packet rate and the queue
                                    overflows (the hint says why)
  fabricdemo -dcqcn rpg_ai_rate=2,rpg_time_reset=1100
                                    twice the additive increase, twice as
                                    often: a fuller queue that can overflow
  fabricdemo -traffic uet           3 UET senders, NSCC and RCCC, trimming
  fabricdemo -traffic uet -cc nscc -senders 8
                                    8 -> 1 (TestUETIncastTrim's incast),
                                    NSCC's window only
  fabricdemo -traffic uet -cc none  no CC: the queue sits at its buffer,
                                    trimming does all the work
  fabricdemo -traffic uet -trim=false -bytes 8mb
                                    8 MB each into a queue that drops
  fabricdemo -traffic tcp

fabricdemo completion prints a bash completion script: source <(fabricdemo completion).

Flags:
`

type options struct {
	traffic  string // trafficRoCE, trafficTCP or trafficUET
	senders  int
	qps      int // RoCE: queue pairs per sender
	rate     units.Rate
	duration time.Duration
	stagger  time.Duration
	// RoCE: the DCQCN profile, the -dcqcn overrides in order, and the
	// resulting parameters (profile, then the demo's settings, then the
	// overrides).
	profile string
	stretch float64 // -stretch; 0 until parsed means auto
	knobs   knobList
	params  dcqcn.Params
	wred    string // -wred as given, "" for the traffic's default curve
	ppfc    string // -ppfc as given: auto, off or xoff=SIZE,xon=SIZE
	mtu     int
	sample  time.Duration
	// Where to write the plot (RoCE) and the JSON summary; "" for none.
	plotPath string
	jsonPath string
	legacy   bool
	np       string  // where the receiver's NP runs: npKernel or npAgent
	rp       string  // where the senders' RPs take their CNPs: rpKernel or rpAgent
	cpuShare float64 // the CPU share measured for the default -rate; 0: -rate given
	// UET: the senders' congestion control, trimming at the port, and
	// the bytes each sends (0: messages until -duration).
	cc    pds.CCMode
	trim  bool
	bytes units.ByteSize
	// timescale slows the fabric (units.Timescale): the fields above are
	// the fabric's, onWire gives what the lab runs.
	timescale units.Timescale
}

// onWire is o on the fabric slowed by its time scale: the port's rate
// over k, DCQCN's parameters slowed, the run's times k times as long.
func (o *options) onWire() *options {
	w := *o
	k := o.timescale
	w.rate = k.Rate(o.rate)
	w.duration, w.stagger, w.sample = k.Time(o.duration), k.Time(o.stagger), k.Time(o.sample)
	w.params = o.params.Slowed(k)
	return &w
}

// knobList collects -dcqcn name=value[,name=value...] in order.
type knobList []string

func (k *knobList) String() string { return strings.Join(*k, ",") }

func (k *knobList) Set(v string) error {
	for _, kv := range strings.Split(v, ",") {
		kv = strings.TrimSpace(kv)
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return fmt.Errorf("want name=value, e.g. rpg_ai_rate=2 (knobs: %s)", strings.Join(dcqcn.KnobNames(), ", "))
		}
		*k = append(*k, kv)
	}
	return nil
}

// seconds is a flag that takes "20", "20s" or "1m" and keeps whole seconds
// (iperf3 -t is an integer).
type seconds struct{ d *time.Duration }

func (s seconds) String() string {
	if s.d == nil {
		return ""
	}
	return s.d.String()
}

func (s seconds) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		n, aerr := strconv.Atoi(v)
		if aerr != nil {
			return fmt.Errorf("want seconds like 20 or 20s")
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 || d%time.Second != 0 {
		return fmt.Errorf("want a whole, positive number of seconds")
	}
	*s.d = d
	return nil
}

func parseFlags(args []string, stdout, stderr io.Writer) (*options, int) {
	o := &options{traffic: trafficRoCE, senders: 3, qps: 1, rate: defaultRate, duration: 20 * time.Second, stagger: 3 * time.Second,
		profile: defaultProfile, mtu: 4096, sample: 10 * time.Millisecond, plotPath: defaultPlot}
	fs := flag.NewFlagSet("fabricdemo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.traffic, "traffic", o.traffic, "`kind` of traffic: roce (RoCEv2 with DCQCN), uet (Ultra Ethernet Transport, NSCC/RCCC, an incast into a port that trims) or tcp (iperf3, cubic + classic ECN)")
	fs.IntVar(&o.senders, "senders", o.senders, "number of senders (1-32)")
	fs.IntVar(&o.qps, "qps", o.qps, "roce: queue pairs per sender, each a flow (1-16)")
	fs.Var(&o.rate, "rate", "port `speed`, tc units (100mbit, 1gbit, ...); default: 500mbit, or 250mbit when other load holds the CPUs")
	fs.Var(seconds{&o.duration}, "duration", "`seconds` of traffic, from the first flow's start to the end")
	fs.Var(seconds{&o.stagger}, "stagger", "`seconds` between sender starts (shortened if the run is too short); not with uet, whose senders start at once")
	fs.StringVar(&o.profile, "profile", o.profile, "roce: DCQCN `profile`, paper or mlx5 (host/dcqcn), rate knobs scaled to -rate")
	fs.Func("stretch", "roce: stretch the profile's timers (rpg_time_reset, dce_tcp_rtt, min_time_between_cnps, rate_reduce_monitor_period) by this `factor`; auto: the profile's reference line rate / -rate (40 for paper, 25 for mlx5 at 1gbit); 1: the profile's own timers (default auto)",
		func(v string) error {
			if v == "auto" {
				o.stretch = 0
				return nil
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0.01 || f > 10000 {
				return fmt.Errorf("want auto or a factor from 0.01 to 10000")
			}
			o.stretch = f
			return nil
		})
	fs.Var(&o.knobs, "dcqcn", "roce: set a DCQCN knob by its mlx5 `name=value` (repeat, or comma-separate); e.g. rpg_ai_rate=2 (Mbit/s), rpg_time_reset=100 (us)")
	fs.StringVar(&o.wred, "wred", "", "class 3 marking `curve` and buffer in portctl's --tc grammar without the class: min=SIZE,max=SIZE,p=PROB,limit=SIZE, any of them, or another mode (2t:t1=SIZE,t2=SIZE,p1=PROB,t2-max=SIZE,p2=PROB) (default min=50kb,max=1000kb,p=0.1,limit=2mb, seed 000's; uet: 0.2 and 0.8 BDP, p=1, limit 1 BDP)")
	fs.StringVar(&o.ppfc, "ppfc", ppfcAuto, "roce: PPFC on class 3 (seed 003): `xoff=SIZE,xon=SIZE[,alarm=SIZE]`, auto (xoff at half the buffer, xon at 3/4 of xoff, alarm halfway between) or off")
	fs.IntVar(&o.mtu, "mtu", o.mtu, "roce: path MTU, payload `bytes` per packet: 256, 512, 1024, 2048 or 4096 (the lab's links are 9000-byte jumbo)")
	fs.DurationVar(&o.sample, "sample", o.sample, "roce, uet: sampling `period` of the senders' state (Rc and α; cwnd and credit) and the queue for the plot (1ms-1s)")
	fs.StringVar(&o.plotPath, "plot", o.plotPath, "roce, uet: write the PNG plot to this `file` (\"\" for none; default demo-out/dcqcn.png, uet: demo-out/uet.png)")
	ccName := "both"
	fs.StringVar(&ccName, "cc", ccName, "uet: the senders' congestion `control`: nscc (window), rccc (receiver credit), both or none")
	o.trim = true
	fs.BoolVar(&o.trim, "trim", o.trim, "uet: the port trims what its class 3 buffer cannot hold (-trim=false: it drops)")
	fs.Var(&o.bytes, "bytes", "uet: each sender writes this `size` (tc units, whole 64 KiB messages) and the run ends when all are acknowledged, within -duration; default: messages until -duration")
	fs.StringVar(&o.jsonPath, "json", "", "also write the summary and the samples as JSON to this `file`")
	fs.BoolVar(&o.legacy, "legacy", false, "attach with clsact + cls_bpf instead of TCX")
	fs.Var(&o.timescale, "timescale", "slow the whole fabric `k` times (1-1000): the port, DCQCN's rate knobs and the senders at -rate/k, every timer and -duration, -stagger and -sample k times as long, bytes as they are (default 1)")
	fs.StringVar(&o.rp, "rp", rpKernel, "roce: where each sender's reaction point takes its CNPs: kernel (eBPF on its device, host/rpbpf: Rc cut from a CNP's arrival on) or agent (its receive loop)")
	fs.StringVar(&o.np, "np", npKernel, "roce: where the receiver turns CE marks into CNPs: kernel (eBPF on its device, host/npbpf) or agent (its receive loop)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.BoolVar(showVersion, "V", false, "print the version and exit")
	fs.Usage = func() {} // flag errors get a one-line hint below instead
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			fmt.Fprintf(stdout, "\nDCQCN knobs (-dcqcn): %s\nvariant switches: %s\n",
				strings.Join(dcqcn.KnobNames(), ", "), strings.Join(dcqcn.VariantNames(), ", "))
			return nil, exitOK
		}
		fmt.Fprintln(stderr, "see fabricdemo -help")
		return nil, exitUsage
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.Line("fabricdemo"))
		return nil, exitOK
	}
	bad := func(format string, a ...any) (*options, int) {
		fmt.Fprintf(stderr, "fabricdemo: "+format+"\n", a...)
		return nil, exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["rate"] {
		o.cpuShare = cpuShare()
		o.rate = autoRate(o.cpuShare)
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q (see -help)", fs.Arg(0))
	case o.traffic != trafficRoCE && o.traffic != trafficTCP && o.traffic != trafficUET:
		return bad("-traffic %q: want roce, tcp or uet", o.traffic)
	case o.senders < 1 || o.senders > maxSenders:
		return bad("-senders %d: want 1 to %d", o.senders, maxSenders)
	case o.qps < 1 || o.qps > maxQPs:
		return bad("-qps %d: want 1 to %d", o.qps, maxQPs)
	case o.rate < units.Mbit || o.timescale.Rate(o.rate) < units.Mbit:
		return bad("-rate %s (%s on the wire at -timescale %s): want at least 1mbit on the wire", o.rate, o.timescale.Rate(o.rate), o.timescale)
	case o.duration < 2*time.Second:
		return bad("-duration %s: want at least 2s", o.duration)
	case !slices.Contains([]int{256, 512, 1024, 2048, 4096}, o.mtu):
		return bad("-mtu %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
	case o.np != npKernel && o.np != npAgent:
		return bad("-np %q: want kernel or agent", o.np)
	case o.rp != rpKernel && o.rp != rpAgent:
		return bad("-rp %q: want kernel or agent", o.rp)
	case o.sample < time.Millisecond || o.sample > time.Second:
		return bad("-sample %s: want 1ms to 1s", o.sample)
	}
	if o.traffic != trafficUET {
		var uetOnly []string
		for _, f := range []string{"cc", "trim", "bytes"} {
			if set[f] {
				uetOnly = append(uetOnly, "-"+f)
			}
		}
		if len(uetOnly) > 0 {
			return bad("%s: only with -traffic uet", strings.Join(uetOnly, ", "))
		}
	}
	if o.traffic != trafficRoCE {
		var roceOnly []string
		for _, f := range []string{"qps", "profile", "stretch", "dcqcn", "mtu", "sample", "plot", "ppfc", "np", "rp"} {
			if set[f] && (o.traffic == trafficTCP || f != "sample" && f != "plot") {
				roceOnly = append(roceOnly, "-"+f)
			}
		}
		if len(roceOnly) > 0 {
			return bad("%s: only with -traffic roce", strings.Join(roceOnly, ", "))
		}
	}
	if o.traffic == trafficUET && set["stagger"] {
		return bad("-stagger: not with -traffic uet, an incast (the senders start at once)")
	}
	switch o.traffic {
	case trafficTCP:
		o.plotPath = ""
	case trafficUET:
		mode, err := pds.ParseCCMode(ccName)
		if err != nil {
			return bad("-cc %s: want %s", ccName, strings.Join(pds.CCModeNames(), ", "))
		}
		o.cc, o.stagger = mode, 0
		if !set["plot"] {
			o.plotPath = defaultUETPlot
		}
		if o.bytes > maxUETBytes {
			return bad("-bytes %s: want at most %s per sender", o.bytes, maxUETBytes)
		}
	}
	cc := qdisc.DefaultConfig(o.rate).Classes[qdisc.ClassRoCE]
	if o.traffic == trafficUET {
		cc = uetClass(o.rate, o.trim)
	}
	if o.wred != "" {
		if err := applyWRED(&cc, o.wred); err != nil {
			return bad("-wred %s: %v", o.wred, err)
		}
	}
	if o.traffic == trafficRoCE {
		if err := applyPPFC(&cc, o.ppfc); err != nil {
			return bad("-ppfc %s: %v", o.ppfc, err)
		}
	}
	if o.traffic == trafficRoCE {
		p, f, err := demoParams(o.profile, o.rate, o.stretch, o.knobs)
		if err != nil {
			return bad("%v", err)
		}
		o.params, o.stretch = p, f
	}
	o.stagger = fitStagger(o.senders, o.duration, o.stagger)
	return o, exitOK
}

// demoParams is the DCQCN profile scaled to the line rate, its timers
// stretched by stretch (0: auto), then the user's -dcqcn overrides. It
// returns the factor used.
func demoParams(profile string, rate units.Rate, stretch float64, knobs []string) (dcqcn.Params, float64, error) {
	p, err := dcqcn.Profile(profile, rate)
	if err != nil {
		return p, 0, fmt.Errorf("-profile %s: want %s", profile, strings.Join(dcqcn.ProfileNames(), " or "))
	}
	if stretch == 0 {
		stretch = autoStretch(profile, rate)
	}
	stretchTimers(&p, stretch)
	// A software sender can fall behind its Rc (CPU); the lab keeps Rc
	// from growing meanwhile (-dcqcn rate_validation=0: firmware's rule).
	p.RateValidation = demoRateValidation
	for _, kv := range knobs {
		name, value, _ := strings.Cut(kv, "=")
		if err := p.Set(name, value); err != nil {
			return p, 0, fmt.Errorf("-dcqcn %s: %w", kv, err)
		}
	}
	if err := p.Validate(); err != nil {
		return p, 0, fmt.Errorf("DCQCN settings (-profile %s, -stretch %g, -dcqcn): %w", profile, stretch, err)
	}
	return p, stretch, nil
}

// defaultRate is the port speed: what this lab's 2-core reference VM
// carries with its senders, port and receiver sharing the CPUs, with
// margin (one unpaced flow reaches 2.9-7 Gbit/s there; at 1 Gbit/s the
// senders fell behind their Rc).
const defaultRate = 500 * units.Mbit

// busyRate is the port speed when this process gets less than
// minShareForDefault of the CPUs (lab.CPUShare): beside stress-ng on one
// of 2 cores (share about 0.6) the demo's hosts could not hold 500 Mbit/s.
const (
	busyRate           = 250 * units.Mbit
	minShareForDefault = 0.85
)

// cpuShare measures the share of the CPUs this process gets; tests
// replace it.
var cpuShare = func() float64 { return lab.CPUShare(300 * time.Millisecond) }

// autoRate is the port speed when -rate is not given.
func autoRate(share float64) units.Rate {
	if share >= minShareForDefault {
		return defaultRate
	}
	return busyRate
}

// Where the receiver's notification point runs (-np), and where the
// senders' reaction points take their CNPs (-rp).
const (
	npKernel = "kernel"
	npAgent  = "agent"
	rpKernel = "kernel"
	rpAgent  = "agent"
)

// demoRateValidation is the lab's rate_validation (dcqcn.Params): an
// increase step needs the QP to have sent 75 % of Rc since the last one.
const demoRateValidation = 75

// autoStretch is the profile's reference line rate over the port's: the
// profiles scale their rate knobs by rate/reference, and stretching the
// timers by the inverse keeps every byte quantity of the loop (queue
// thresholds, the byte counter, what a sender sends between two timer
// events) as at the reference speed. Never below 1.
func autoStretch(profile string, rate units.Rate) float64 {
	ref := dcqcn.PaperLineRate
	if profile == "mlx5" {
		ref = dcqcn.MLX5RefLineRate
	}
	return max(1, float64(ref)/float64(rate))
}

// maxTimerKnob is the mlx5 bound of rpg_time_reset and dce_tcp_rtt.
const maxTimerKnob = 131071 * time.Microsecond

// stretchTimers multiplies the loop's timers by f: the increase timer
// (rpg_time_reset), the α timer (dce_tcp_rtt), the NP's CNP spacing
// (min_time_between_cnps) and the RP's CNP coalescing
// (rate_reduce_monitor_period), rounded to the microsecond (the knobs'
// unit).
func stretchTimers(p *dcqcn.Params, f float64) {
	if f == 1 {
		return
	}
	scale := func(d time.Duration, limit time.Duration) time.Duration {
		v := time.Duration(float64(d) * f).Round(time.Microsecond)
		if d > 0 && v < time.Microsecond {
			v = time.Microsecond
		}
		return min(v, limit)
	}
	p.RPGTimeReset = scale(p.RPGTimeReset, maxTimerKnob)
	p.DCETCPRTT = scale(p.DCETCPRTT, maxTimerKnob)
	p.MinTimeBetweenCNPs = scale(p.MinTimeBetweenCNPs, time.Hour)
	p.RateReduceMonitorPeriod = scale(p.RateReduceMonitorPeriod, time.Hour)
}

// applyWRED applies -wred to class 3: items of portctl's --tc grammar
// without the class ("min=SIZE,max=SIZE,p=PROB,limit=SIZE", any of them;
// or another mode with its settings, "2t:t1=...") through qdisc's one
// parser, and checks the result.
func applyWRED(cc *qdisc.ClassConfig, spec string) error {
	return applyClassSpec(cc, spec)
}

// applyClassSpec applies --tc items to class 3 as cc, in a default port.
func applyClassSpec(cc *qdisc.ClassConfig, items string) error {
	s, err := qdisc.ParseTC(fmt.Sprintf("%d:%s", qdisc.ClassRoCE, items))
	if err != nil {
		return err
	}
	cfg := qdisc.DefaultConfig(units.Gbit)
	cfg.Classes[qdisc.ClassRoCE] = *cc
	if err := s.Apply(&cfg); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	*cc = cfg.Classes[qdisc.ClassRoCE]
	return nil
}

const ppfcAuto = "auto"

// applyPPFC sets class 3's PPFC thresholds from "xoff=SIZE,xon=SIZE[,alarm=SIZE]",
// "off" or "auto": xoff at half the buffer, so the other half holds what the
// senders have on the way when they stop; xon at 3/4 of xoff, so a pause
// ending on its own (at xon/2) still leaves the port 3/8 of xoff to send
// while the senders restart; alarm halfway between xon and xoff, so the
// senders stop raising their rates while the queue is still an eighth of
// xoff short of it.
func applyPPFC(cc *qdisc.ClassConfig, spec string) error {
	switch spec {
	case "off":
		cc.XoffBytes, cc.XonBytes, cc.AlarmBytes = 0, 0, 0
		return nil
	case ppfcAuto:
		cc.XoffBytes = cc.LimitBytes / 2
		cc.XonBytes = cc.XoffBytes * 3 / 4
		cc.AlarmBytes = (cc.XonBytes + cc.XoffBytes) / 2
	default:
		// The --tc grammar reads the values; -ppfc takes only its keys,
		// and both thresholds.
		seen := map[string]bool{}
		for _, kv := range strings.Split(spec, ",") {
			k, _, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || (k != "xoff" && k != "xon" && k != "alarm") {
				return fmt.Errorf("%q: want xoff=SIZE,xon=SIZE[,alarm=SIZE], auto or off", kv)
			}
			seen[k] = true
		}
		if !seen["xoff"] || !seen["xon"] {
			return errors.New("want both xoff=SIZE and xon=SIZE")
		}
		if !seen["alarm"] {
			spec += ",alarm=0"
		}
		return applyClassSpec(cc, spec)
	}
	cfg := qdisc.DefaultConfig(units.Gbit)
	cfg.Classes[qdisc.ClassRoCE] = *cc
	return cfg.Validate()
}

// fitStagger shortens the gap between flow starts so that the last flow still
// shares the port with all the others for a third of the run.
func fitStagger(senders int, duration, want time.Duration) time.Duration {
	if senders < 2 {
		return want
	}
	room := (duration - duration/3) / time.Duration(senders-1)
	room -= room % time.Second
	return min(want, room)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "completion" {
		c := completion.Command{Tool: "fabricdemo", Words: completion.Flags(completion.Help(run, "-h"))}
		return completion.Write(c, args[1:], stdout, stderr)
	}
	o, code := parseFlags(args, stdout, stderr)
	if o == nil {
		return code
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "fabricdemo: needs root to create network namespaces, load eBPF and change qdiscs: run it with sudo (sudo make demo)")
		return exitFail
	}

	// Our own signal handling: stop the traffic, clean up, exit 130/143.
	ctx, cancel, interrupt := lab.CatchInterrupts(context.Background(), "fabricdemo", "cleaning up", stderr)
	defer cancel()
	defer interrupt.Stop()
	signalled := interrupt.Signal

	d := &demo{o: o, out: stdout}
	err := d.run(ctx)
	if cerr := d.cleanup(); cerr != nil {
		fmt.Fprintf(stderr, "fabricdemo: cleanup: %v\n", cerr)
		if err == nil {
			err = cerr
		}
	}
	if sig := signalled(); sig != nil {
		return lab.SignalExitCode(sig)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fabricdemo: %v\n", err)
		return exitFail
	}
	return exitOK
}

// demo is one run: the lab, the port and what was measured.
type demo struct {
	o        *options
	out      io.Writer
	dumbbell *lab.Dumbbell
	port     *qdisc.Port
	cfg      qdisc.Config
	// closers stop what the run started in the lab (RoCE agents), before
	// the port and the namespaces go.
	closers []func() error
	// meter measures what the host took from the run (hostlost.go);
	// stopFeed stops the port's feed into it.
	meter    *hostlost.Meter
	stopFeed func() error
	// w is the options on the wire (options.onWire): the rate the port
	// runs, the times the run takes. cfg is the port on the wire.
	w *options
}

func (d *demo) printf(format string, a ...any) { fmt.Fprintf(d.out, format, a...) }

// settledStats waits up to 2 s for class 3 to drain and its counters to
// meet their invariant, and returns the port's stats at rest.
func (d *demo) settledStats() (qdisc.Stats, error) {
	st, err := d.port.Stats()
	for deadline := time.Now().Add(2 * time.Second); err == nil && time.Now().Before(deadline); {
		c := &st.Classes[qdisc.ClassRoCE]
		if c.BacklogPackets == 0 && c.CheckInvariant() == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
		st, err = d.port.Stats()
	}
	return st, err
}

// writeOutputs writes the run's plot (with plot, when -plot names a file
// and the traffic has one) and its JSON summary rep (when -json does),
// and says where.
func (d *demo) writeOutputs(o *options, plot func(path string) error, rep any) error {
	if o.plotPath != "" && plot != nil {
		if dir := filepath.Dir(o.plotPath); dir != "." {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("-plot %s: %w", o.plotPath, err)
			}
		}
		if err := plot(o.plotPath); err != nil {
			return fmt.Errorf("-plot %s: %w", o.plotPath, err)
		}
		d.printf("plot written to %s\n", o.plotPath)
	}
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(o.jsonPath, append(b, '\n'), 0o644)
		}
		if err != nil {
			return fmt.Errorf("write -json %s: %w", o.jsonPath, err)
		}
		d.printf("summary written to %s\n", o.jsonPath)
	}
	return nil
}

// runErrors is a run's outcome: flows that failed, a counter invariant
// the port broke.
func runErrors(failedFlows, flows int, invariant string) error {
	var errs []error
	if failedFlows > 0 {
		errs = append(errs, fmt.Errorf("%d of %d flows failed", failedFlows, flows))
	}
	if invariant != "" {
		errs = append(errs, fmt.Errorf("counter invariant violated: %s", invariant))
	}
	return errors.Join(errs...)
}

// cleanup stops the agents, detaches the port and removes the namespaces,
// then checks that none is left.
func (d *demo) cleanup() error {
	var errs []error
	if err := d.closeMeter(); err != nil {
		errs = append(errs, err)
	}
	for _, c := range slices.Backward(d.closers) {
		if err := c(); err != nil {
			errs = append(errs, err)
		}
	}
	d.closers = nil
	if d.port != nil {
		if err := d.port.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach port: %w", err))
		}
	}
	if d.dumbbell != nil {
		id := d.dumbbell.RunID()
		if err := d.dumbbell.Close(); err != nil {
			errs = append(errs, fmt.Errorf("remove lab: %w", err))
		}
		left, _ := lab.LiveNamespaces(id + "-")
		if len(left) > 0 {
			errs = append(errs, fmt.Errorf("namespaces left behind: %s (ip netns del them)", strings.Join(left, " ")))
		} else {
			d.printf("cleanup: port detached, namespaces %s-* removed\n", id)
		}
	}
	return errors.Join(errs...)
}

func (d *demo) run(ctx context.Context) error {
	o := d.o
	d.w = o.onWire()
	tcp := o.traffic == trafficTCP
	if tcp {
		if err := ensureIperf3(ctx, d.out, exec.LookPath, runLoud(d.out)); err != nil {
			return err
		}
	}
	rel := kernelRelease()
	if kernelAtLeast(rel, minKernel) {
		d.printf("kernel %s: TCX available (>= %s)\n", rel, minKernel)
	} else {
		d.printf("kernel %s: no TCX (< %s): the port falls back to clsact + cls_bpf\n", rel, minKernel)
	}

	spec := lab.DumbbellSpec{Senders: o.senders, DisableOffloads: true}
	if tcp {
		// Congestion control is chosen per socket (iperf3 -C): a namespace
		// may only default to what the host allows
		// (tcp_allowed_congestion_control), and hosts often default to
		// bbr, which ignores ECN.
		spec.SenderSysctls = map[string]string{"net.ipv4.tcp_ecn": "1"}
	} else {
		// Jumbo frames, as RoCE fabrics run: MTU 4096 packets fit, and
		// 1 Gbit/s is 30 kpps instead of 115 at MTU 1024.
		spec.MTU = roceLinkMTU
	}
	dumbbell, err := lab.NewDumbbell(spec)
	if err != nil {
		return fmt.Errorf("build the lab: %w", err)
	}
	d.dumbbell = dumbbell
	if ctx.Err() != nil {
		return ctx.Err()
	}
	b := dumbbell.Bottleneck
	// The fabric's port, then slowed: the buffer, thresholds and BDP in
	// bytes are the fabric's.
	d.cfg = qdisc.DefaultConfig(o.rate)
	if o.traffic == trafficUET {
		d.cfg.Classes[qdisc.ClassRoCE] = uetClass(o.rate, o.trim)
	}
	if o.wred != "" {
		if err := applyWRED(&d.cfg.Classes[qdisc.ClassRoCE], o.wred); err != nil {
			return fmt.Errorf("-wred %s: %w", o.wred, err)
		}
	}
	if o.traffic == trafficRoCE {
		if err := applyPPFC(&d.cfg.Classes[qdisc.ClassRoCE], o.ppfc); err != nil {
			return fmt.Errorf("-ppfc %s: %w", o.ppfc, err)
		}
	}
	d.cfg = d.cfg.Slowed(o.timescale)
	port, err := qdisc.Attach(d.cfg, qdisc.AttachOptions{
		Dev: b.Dev, Netns: b.Node.NetnsName, PeerDev: b.PeerDev, PeerNetns: b.PeerNode.NetnsName, Legacy: o.legacy,
	})
	if err != nil {
		return fmt.Errorf("attach the port to %s:%s: %w", b.Node.Name, b.Dev, err)
	}
	d.port = port
	if err := d.openMeter(); err != nil {
		return err
	}
	rps, err := d.dumbbell.SteerRx(ctx)
	if err != nil {
		return err
	}
	if tcp {
		d.tcpIntro(rps)
		return d.tcpTraffic(ctx)
	}
	if o.traffic == trafficUET {
		return d.uetRun(ctx, rps)
	}
	return d.roceRun(ctx, rps)
}

// kernelRelease is the running kernel's release, for the reports.
func kernelRelease() string {
	rel, err := kernel.Release()
	if err != nil {
		return "unknown"
	}
	return rel
}

// kernelAtLeast compares the major.minor of a release like "6.18.44-foo"
// with want ("6.6"). An unparsable release counts as new enough: the port
// falls back by itself if TCX is missing.
func kernelAtLeast(release, want string) bool {
	have, err := kernel.ParseVersion(release)
	if err != nil {
		return true
	}
	w, err := kernel.ParseVersion(want)
	return err != nil || have.AtLeast(w)
}
