package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

const usageText = `Usage: sudo go run ./netns-tests/experiment [flags]     (or: sudo make experiment)

The testbed experiment of ECN# (seed 002, sections 2.3, 5.2 and 5.4) on a
namespace dumbbell: senders s1..sN reach the receiver through one switch
port (HTB at -rate, eBPF marking). Sender i's packets get a one-way delay
(-delays), so the base RTTs differ about 3x. Long flows (DCTCP in BPF by
default, -cc cubic for classic ECN) keep the port busy; short flows (3-60
KB, one at a time per sender) measure the flow completion time; then
incast rounds of synchronized query flows measure the query completion
time and drops. The base RTTs are measured first; every scheme's
parameters come from them (aqm.Tune: lambda 1 for the instantaneous
thresholds, the congestion control's lambda for the persistent target).
Each scheme runs -runs times on the port's class 3, the schemes
interleaved: step-Tail (K from the p90 RTT), step-AVG (K from the mean
RTT), CoDel, TCN and ECN#.

-timescale k slows the whole fabric down k times (issue 26 §2): the port
and the DCQCN senders run at -rate/k, the delays, the AQM times, the run's
durations and the sampling take k times as long, every byte (buffer,
thresholds, flow sizes) stays. The flags and the report are the fabric's
(-rate, -delays, -measure, the FCTs and the queue in µs); the run takes k
times its -warmup + -measure. The host's stalls (a VM that stops a CPU
for a millisecond) shrink k times beside the fabric's round trips. Every
run meters what the host took from the port (host/hostlost) and prints
it beside the results, with utilization and FCTs net of it.

Output: a table of means with 95% confidence intervals on the terminal,
-out/experiment.json, -out/queue.png (the queue over time, first run) and
-out/fct.png (the short flows' FCT CDF). It reports whether ECN# met the
goals; it exits non-zero only on errors.

Flags:
`

// schemeNames are the schemes in the order they run, as -schemes spells them.
var schemeNames = []string{"wred", "step-tail", "step-avg", "codel", "tcn", "ecnsharp", "two-threshold"}

// The schemes a transport runs unless -schemes says otherwise: DCQCN's own
// probabilistic marking (WRED) is its baseline (seed 002 §5.4).
var (
	tcpSchemes  = []string{"step-tail", "step-avg", "codel", "tcn", "ecnsharp"}
	roceSchemes = []string{"wred", "step-tail", "codel", "tcn", "ecnsharp"}
)

// schemeList is -schemes, or the transport's default.
func (o *options) schemeList() []string {
	switch {
	case len(o.schemes) > 0:
		return o.schemes
	case o.transport == transportRoCE:
		return roceSchemes
	}
	return tcpSchemes
}

// The transports.
const (
	transportTCP  = "tcp"
	transportRoCE = "roce"
)

// congestion is what the long flows run: the TCP congestion control, or
// DCQCN.
func (o *options) congestion() string {
	if o.transport == transportRoCE {
		return "dcqcn"
	}
	return o.cc
}

type options struct {
	rate          units.Rate
	delays        []time.Duration // one-way delay of sender i; len = number of senders
	longPerSender int
	warmup        time.Duration
	measure       time.Duration
	cooldown      time.Duration
	sampleEvery   time.Duration
	shortGap      time.Duration // mean pause between a sender's short flows
	shortFlows    int           // bound on short flows per sender and scheme
	shortMinBytes units.ByteSize
	shortMaxBytes units.ByteSize
	pings         int
	limit         units.ByteSize // 0: 4 x K_tail, at least minLimit
	lambda        float64
	pstLambda     float64       // 0: the congestion control's (pstLambdaFor)
	cc            string        // the TCP flows' congestion control: dctcp or cubic
	transport     string        // tcp or roce
	sharp         sharpOverride // ECN♯ parameters set by flag instead of aqm.Tune
	seed          uint64
	schemes       []string
	outDir        string
	runs          int           // repetitions of every scheme, interleaved
	incastRounds  int           // incast rounds per scheme run; 0: none
	incastFlows   int           // query flows per round, over the senders in turn
	incastGap     time.Duration // pause between rounds
	// quickAck turns the receiver's delayed ACKs off (the route's
	// quickack): seed 002's ns-3 runs ACK every packet.
	quickAck bool
	// timescale slows the fabric (units.Timescale): every field above is
	// the fabric's; wire and wireRate give what the lab runs.
	timescale units.Timescale
}

// wire is a fabric time d on the slowed fabric: the wall time it takes.
func (o *options) wire(d time.Duration) time.Duration { return o.timescale.Time(d) }

// wireRate is the port's rate on the slowed fabric.
func (o *options) wireRate() units.Rate { return o.timescale.Rate(o.rate) }

func defaultOptions() options {
	return options{
		rate: 200 * units.Mbit,
		// The veth path itself adds about 0.1 ms of RTT here: these give
		// base RTTs of about 0.5, 1 and 1.5 ms, a 3x spread (seed 002 §2.3).
		delays:        []time.Duration{400 * time.Microsecond, 900 * time.Microsecond, 1400 * time.Microsecond},
		longPerSender: 2,
		warmup:        2 * time.Second,
		measure:       8 * time.Second,
		cooldown:      time.Second,
		sampleEvery:   time.Millisecond,
		shortGap:      20 * time.Millisecond,
		shortFlows:    2000,
		shortMinBytes: 3 * units.KiB,
		shortMaxBytes: 60 * units.KiB,
		pings:         50,
		lambda:        1,
		cc:            ccDCTCP,
		transport:     transportTCP,
		seed:          1,
		schemes:       nil, // the transport's (schemeList)
		outDir:        "experiment-out",
		runs:          5,
		incastRounds:  5,
		incastFlows:   8,
		incastGap:     200 * time.Millisecond,
	}
}

// durationList is a flag of comma-separated tc-style durations.
type durationList struct{ d *[]time.Duration }

func (l durationList) String() string {
	if l.d == nil {
		return ""
	}
	s := make([]string, len(*l.d))
	for i, d := range *l.d {
		s[i] = units.FormatDuration(d)
	}
	return strings.Join(s, ",")
}

func (l durationList) Set(v string) error {
	var out []time.Duration
	for f := range strings.SplitSeq(v, ",") {
		d, err := units.ParseDuration(f)
		if err != nil {
			return err
		}
		out = append(out, d)
	}
	*l.d = out
	return nil
}

// durationFlag takes Go ("2s") or tc ("500ms", "100us") spelling.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return units.FormatDuration(*f.d)
}

func (f durationFlag) Set(v string) error {
	d, err := units.ParseDuration(v)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

type schemeList struct{ s *[]string }

func (l schemeList) String() string {
	if l.s == nil {
		return ""
	}
	return strings.Join(*l.s, ",")
}

func (l schemeList) Set(v string) error {
	var out []string
	for f := range strings.SplitSeq(v, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if !slices.Contains(schemeNames, f) {
			return fmt.Errorf("unknown scheme %q: want some of %s", f, strings.Join(schemeNames, ","))
		}
		if slices.Contains(out, f) {
			return fmt.Errorf("scheme %q given twice", f)
		}
		out = append(out, f)
	}
	// Run in the canonical order whatever order they were given in.
	slices.SortFunc(out, func(a, b string) int { return slices.Index(schemeNames, a) - slices.Index(schemeNames, b) })
	*l.s = out
	return nil
}

// Bounds of the flags: every loop of the tool is bounded by them.
const (
	maxSenders       = 16
	maxLongPerSender = 8
	maxMeasure       = 10 * time.Minute
	maxDelay         = 50 * time.Millisecond
	maxShortFlows    = 100000
	minLimit         = 128 * units.KiB
	maxRuns          = 30
	maxIncastFlows   = 256
)

func parseFlags(args []string, stdout, stderr io.Writer) (*options, int) {
	o := defaultOptions()
	fs := flag.NewFlagSet("experiment", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&o.rate, "rate", "bottleneck port `speed`, tc units (keep below the delay link's capacity)")
	fs.Var(durationList{&o.delays}, "delays", "one-way `delay`s added at each sender, comma-separated; their count is the number of senders (the veth path adds ~0.1 ms of RTT)")
	fs.IntVar(&o.longPerSender, "long", o.longPerSender, "long TCP flows per sender")
	fs.Var(durationFlag{&o.warmup}, "warmup", "`time` per scheme before measuring (long flows leave slow start)")
	fs.Var(durationFlag{&o.measure}, "measure", "measured `time` per scheme")
	fs.Var(durationFlag{&o.cooldown}, "cooldown", "longest `time` to wait for the queue to drain between schemes")
	fs.Var(durationFlag{&o.sampleEvery}, "sample", "backlog sampling `interval`")
	fs.Var(durationFlag{&o.shortGap}, "short-gap", "mean pause `time` between a sender's short flows (exponential, seeded)")
	fs.IntVar(&o.shortFlows, "short-flows", o.shortFlows, "at most this many short flows per sender and scheme")
	fs.Var(&o.shortMinBytes, "short-min", "smallest short flow, tc `size` (1024-based)")
	fs.Var(&o.shortMaxBytes, "short-max", "largest short flow, tc `size`")
	fs.IntVar(&o.pings, "pings", o.pings, "RTT probes per sender before the runs")
	fs.Var(&o.limit, "limit", "class buffer, tc `size`; 0 = 4 x K_tail, at least 128kb")
	fs.StringVar(&o.transport, "transport", o.transport, "`transport` of the flows: tcp, or roce (RC queue pairs of the host agent under DCQCN, seed 002 §3.5: ECN♯ with the probabilistic instantaneous curve)")
	fs.StringVar(&o.cc, "cc", o.cc, "`congestion control` of every TCP flow, both ends: dctcp (DCTCP in BPF, host/dctcp; seed 002's setting) or cubic (classic ECN)")
	fs.Float64Var(&o.lambda, "lambda", o.lambda, "λ of the instantaneous thresholds: K = λ·C·RTT, ins_target and TCN's = λ·RTT (1: today's practice, the seed's testbed, also with DCTCP)")
	fs.Float64Var(&o.pstLambda, "pst-lambda", o.pstLambda, "λ of the persistent target: pst_target and CoDel's target = λ·RTT_avg (0: the congestion control's, 0.17 for DCTCP, -lambda for cubic)")
	fs.Var(durationFlag{&o.sharp.InsTarget}, "sharp-ins-target", "ECN♯ ins_target `time` instead of aqm.Tune's λ·RTT_p90 (sensitivity runs)")
	fs.Var(durationFlag{&o.sharp.PstTarget}, "sharp-pst-target", "ECN♯ pst_target `time` instead of aqm.Tune's λ·RTT_avg")
	fs.Var(durationFlag{&o.sharp.PstInterval}, "sharp-pst-interval", "ECN♯ pst_interval `time` instead of aqm.Tune's RTT_p90")
	fs.BoolVar(&o.sharp.SqrtLaw, "sharp-sqrt", false, "ECN♯'s persistent marks at pst_interval/sqrt(count), CoDel's law as the authors' ns-3 code, instead of Algorithm 1's pst_interval/count")
	fs.BoolVar(&o.quickAck, "quickack", false, "no delayed ACKs at the receiver (its route's quickack): an ACK per packet, as seed 002's ns-3 runs")
	fs.Uint64Var(&o.seed, "seed", o.seed, "seed of the short-flow sizes and gaps (same sequence for every scheme)")
	fs.Var(schemeList{&o.schemes}, "schemes", "`list` of schemes to run: "+strings.Join(schemeNames, ",")+" (default: tcp "+strings.Join(tcpSchemes, ",")+"; roce "+strings.Join(roceSchemes, ",")+")")
	fs.StringVar(&o.outDir, "out", o.outDir, "`directory` for experiment.json, queue.png and fct.png")
	fs.IntVar(&o.runs, "runs", o.runs, "`runs` of every scheme (interleaved); the report gives means and 95% confidence intervals")
	fs.IntVar(&o.incastRounds, "incast-rounds", o.incastRounds, "incast `rounds` after each measured window (seed 002 §5.4); 0 = none")
	fs.IntVar(&o.incastFlows, "incast-flows", o.incastFlows, "query `flows` per incast round, released at once, spread over the senders; sizes as the short flows")
	fs.Var(durationFlag{&o.incastGap}, "incast-gap", "pause `time` between incast rounds")
	fs.Var(&o.timescale, "timescale", "slow the fabric `k` times (1-1000): rates over k, times (delays, AQM targets, durations, sampling) times k, bytes as they are; the flags and the report stay the fabric's (default 1)")
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, exitOK
		}
		fmt.Fprintln(stderr, "see experiment -help")
		return nil, exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "experiment: unexpected argument %q (see -help)\n", fs.Arg(0))
		return nil, exitUsage
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "experiment: %v\n", err)
		return nil, exitUsage
	}
	return &o, exitOK
}

func (o *options) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if err := o.timescale.Validate(); err != nil {
		bad("-timescale: %v", err)
		o.timescale = 1 // the wall-time bounds below need a valid one
	}
	// The wall-time bounds hold on the slowed fabric: at -timescale k a
	// -measure of 100ms takes k times that.
	wall := func(d time.Duration) string {
		if o.timescale.K() == 1 {
			return units.FormatDuration(d)
		}
		return fmt.Sprintf("%s, %s at -timescale %s", units.FormatDuration(d), units.FormatDuration(o.wire(d)), o.timescale)
	}
	if o.rate < units.Mbit || o.rate > 100*units.Gbit || o.wireRate() > 10*units.Gbit || o.wireRate() < units.Mbit {
		bad("-rate (%s, %s on the wire) must be 1mbit to 100gbit, and 1mbit to 10gbit on the wire (-rate / -timescale)", o.rate, o.wireRate())
	}
	if len(o.delays) < 1 || len(o.delays) > maxSenders {
		bad("-delays: %d senders, want 1 to %d", len(o.delays), maxSenders)
	}
	for i, d := range o.delays {
		if d < 0 || o.wire(d) > maxDelay {
			bad("-delays: sender %d's delay (%s) must take 0 to %s", i+1, wall(d), units.FormatDuration(maxDelay))
		}
	}
	if o.longPerSender < 0 || o.longPerSender > maxLongPerSender {
		bad("-long (%d) must be 0 to %d", o.longPerSender, maxLongPerSender)
	}
	if o.warmup < 0 || o.wire(o.warmup) > time.Minute {
		bad("-warmup (%s) must take 0 to 1m", wall(o.warmup))
	}
	if o.wire(o.measure) < time.Second || o.wire(o.measure) > maxMeasure {
		bad("-measure (%s) must take 1s to %s", wall(o.measure), maxMeasure)
	}
	if o.cooldown < 0 || o.cooldown > time.Minute {
		bad("-cooldown (%s) must be 0 to 1m", o.cooldown)
	}
	if o.wire(o.sampleEvery) < 100*time.Microsecond || o.wire(o.sampleEvery) > time.Second {
		bad("-sample (%s) must take 100us to 1s", wall(o.sampleEvery))
	}
	if o.shortGap < 0 || o.shortGap > 10*time.Second {
		bad("-short-gap (%s) must be 0 to 10s", units.FormatDuration(o.shortGap))
	}
	if o.shortFlows < 0 || o.shortFlows > maxShortFlows {
		bad("-short-flows (%d) must be 0 to %d", o.shortFlows, maxShortFlows)
	}
	if o.shortMinBytes < 1 || o.shortMinBytes > o.shortMaxBytes || o.shortMaxBytes > 16*units.MiB {
		bad("short flow sizes: want 1b <= -short-min (%s) <= -short-max (%s) <= 16mb", o.shortMinBytes, o.shortMaxBytes)
	}
	if o.pings < 5 || o.pings > 10000 {
		bad("-pings (%d) must be 5 to 10000", o.pings)
	}
	if o.limit != 0 && (o.limit < 16*units.KiB || o.limit > 1<<30) {
		bad("-limit (%s) must be 0 (auto) or 16kb to 1gb", o.limit)
	}
	if !(o.lambda > 0 && o.lambda <= 10) {
		bad("-lambda (%g) must be in (0, 10]", o.lambda)
	}
	if !(o.pstLambda >= 0 && o.pstLambda <= 10) {
		bad("-pst-lambda (%g) must be 0 (the congestion control's) or in (0, 10]", o.pstLambda)
	}
	if o.transport != transportTCP && o.transport != transportRoCE {
		bad("-transport (%q) must be tcp or roce", o.transport)
	}
	if !slices.Contains(ccNames, o.cc) {
		bad("-cc (%q) must be one of %s", o.cc, strings.Join(ccNames, ", "))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"-sharp-ins-target", o.sharp.InsTarget}, {"-sharp-pst-target", o.sharp.PstTarget}, {"-sharp-pst-interval", o.sharp.PstInterval}} {
		if f.d < 0 || f.d > time.Second {
			bad("%s (%s) must be 0 (from aqm.Tune) to 1s", f.name, units.FormatDuration(f.d))
		}
	}
	if o.runs < 1 || o.runs > maxRuns {
		bad("-runs (%d) must be 1 to %d", o.runs, maxRuns)
	}
	if o.incastRounds < 0 || o.incastRounds > 100 {
		bad("-incast-rounds (%d) must be 0 to 100", o.incastRounds)
	}
	if o.incastRounds > 0 && (o.incastFlows < 1 || o.incastFlows > maxIncastFlows) {
		bad("-incast-flows (%d) must be 1 to %d", o.incastFlows, maxIncastFlows)
	}
	if o.incastGap < 0 || o.incastGap > 10*time.Second {
		bad("-incast-gap (%s) must be 0 to 10s", units.FormatDuration(o.incastGap))
	}

	if o.outDir == "" {
		bad("-out must name a directory")
	}
	return errors.Join(errs...)
}

// The congestion controls the TCP flows may run.
const (
	ccDCTCP = "dctcp"
	ccCubic = "cubic"
)

var ccNames = []string{ccDCTCP, ccCubic}

// dctcpLambda is λ for DCTCP (seed 002 §2.1, after the DCTCP analysis: a
// window cut by α/2 needs a queue of about 0.17·C·RTT).
const dctcpLambda = 0.17

// pstLambdaFor is the persistent target's λ: -pst-lambda, or the
// congestion control's (§3.4: "λ is determined by the transport").
func (o *options) pstLambdaFor() float64 {
	switch {
	case o.pstLambda > 0:
		return o.pstLambda
	case o.cc == ccDCTCP || o.transport == transportRoCE:
		// DCQCN cuts Rc by α/2 per notification, as DCTCP its window.
		return dctcpLambda
	}
	return o.lambda
}

// senders is the number of senders, one per delay.
func (o *options) senders() int { return len(o.delays) }

// perScheme is how long one scheme takes at most on the wall clock,
// without the drain wait.
func (o *options) perScheme() time.Duration {
	return o.wire(o.warmup + o.measure + time.Duration(o.incastRounds)*(o.incastGap+shortTimeout))
}
