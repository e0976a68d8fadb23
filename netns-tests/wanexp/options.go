package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/link"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

const usageText = `Usage: sudo go run ./netns-tests/wanexp [flags]     (or: sudo make wan-experiment)

The WAN experiment of issue 13 section 5 (seed 001, the two-threshold ECN
draft): RoCEv2 senders s1..sN under DCQCN in DC1 -> leaf1 -> PE1 => fiber
(-delay each way) => core c1 (the bottleneck port, -rate) => PE2 -> leaf2
-> the receiver in DC2, IP-in-IP with RFC 6040 between the PEs. Each
sender runs a long queue pair at the core's rate (so the WAN congests);
sender s1 also posts a short WRITE (-short-bytes) every -short-every, timed
from the post to its ACK. Schemes, each in a fresh lab, interleaved per run:

  rfc6040  (a) one CE threshold at the WAN port (DCQCN's RED curve from t2
           to t2-max), RFC 6040 normal mode, end-to-end DCQCN only
  pe-rate  (b) two thresholds (ECT(1) from t1, the same CE curve from t2),
           the port sends CNPs to PE1, PE1's agent cuts the tunnel's rate
           (a port on PE1's WAN device at -pe-rate, whose buffer marks CE
           on the same curve, so the senders hear of it end to end)
  reroute  (c) two thresholds, a second core c2 (the same port), PE1's
           agent spreads the tunnel over both cores (ECMP) on a light CNP

-timescale k slows the whole fabric down k times (issue 26 §2): the ports,
the PE's limiter and the DCQCN senders run at their rates over k, the WAN
delay, the timers, the run and the sampling take k times as long, every
byte (thresholds, buffers, WRITEs) stays. The flags and the report are the
fabric's; the run takes k times -duration. Every run meters what the host
took from the ports (host/hostlost) and prints it beside the results, the
core's utilization and the short WRITEs' FCTs net of it.

Output: the table (mean +- 95% CI over -runs), the goals of (b) against
(a), -out/wanexp.json and -out/wan-queue.png, -out/wan-fct.png. It exits
non-zero only on errors.

Flags:
`

type options struct {
	runs          int
	schemes       []string
	senders       int
	rate          units.Rate
	peRate        units.Rate
	peMinRate     units.Rate
	delay         time.Duration
	duration      time.Duration
	t1, t2, t2Max units.ByteSize
	lightP        float64
	heavyP        float64
	notify        time.Duration
	limit         units.ByteSize
	shortBytes    units.ByteSize
	shortEvery    time.Duration
	sampleEvery   time.Duration
	senderRTT     time.Duration
	outDir        string
	// timescale slows the fabric (units.Timescale): every field above is
	// the fabric's; wire gives what the lab runs.
	timescale units.Timescale
}

// wire is a fabric time d on the slowed fabric: the wall time it takes.
func (o *options) wire(d time.Duration) time.Duration { return o.timescale.Time(d) }

func defaultOptions() options {
	return options{
		runs:     5,
		schemes:  slices.Clone(schemeNames),
		senders:  3,
		rate:     100 * units.Mbit,
		delay:    5 * time.Millisecond,
		duration: 4 * time.Second,
		// The WAN's BDP at 100 Mbit/s and 10 ms is 125 KB (see docs/experiments.md);
		// t1, t2-max and p1, p2 follow portctl tune's two-threshold rule
		// (t1 = t2/2, t2-max = 2 t2, p1 = 1, p2 = 0.2).
		t1:          45 * units.KiB,
		t2:          90 * units.KiB,
		t2Max:       180 * units.KiB,
		lightP:      1,
		heavyP:      0.2,
		notify:      time.Millisecond,
		limit:       4 * units.MiB,
		shortBytes:  64 * units.KiB,
		shortEvery:  100 * time.Millisecond,
		sampleEvery: time.Millisecond,
		outDir:      "wanexp-out",
	}
}

type rateFlag struct{ r *units.Rate }

func (f rateFlag) String() string {
	if f.r == nil {
		return ""
	}
	return f.r.String()
}
func (f rateFlag) Set(v string) error {
	r, err := units.ParseRate(v)
	if err != nil {
		return err
	}
	*f.r = r
	return nil
}

type sizeFlag struct{ b *units.ByteSize }

func (f sizeFlag) String() string {
	if f.b == nil {
		return ""
	}
	return f.b.String()
}
func (f sizeFlag) Set(v string) error {
	b, err := units.ParseSize(v)
	if err != nil {
		return err
	}
	*f.b = b
	return nil
}

type listFlag struct{ s *[]string }

func (f listFlag) String() string {
	if f.s == nil {
		return ""
	}
	return strings.Join(*f.s, ",")
}
func (f listFlag) Set(v string) error {
	var out []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(schemeNames, n) {
			return fmt.Errorf("scheme %q: want %s", n, strings.Join(schemeNames, ", "))
		}
		out = append(out, n)
	}
	*f.s = out
	return nil
}

// parseFlags returns the options, or nil and the exit code.
func parseFlags(args []string, stdout, stderr io.Writer) (*options, int) {
	o := defaultOptions()
	fs := flag.NewFlagSet("wanexp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	fs.IntVar(&o.runs, "runs", o.runs, "runs of every scheme")
	fs.Var(listFlag{&o.schemes}, "schemes", "schemes to run, comma-separated: "+strings.Join(schemeNames, ","))
	fs.IntVar(&o.senders, "senders", o.senders, "senders in DC1, one long queue pair each at the core's rate")
	fs.Var(rateFlag{&o.rate}, "rate", "the WAN core port's rate (the bottleneck), and each sender's DCQCN line rate")
	fs.Var(rateFlag{&o.peRate}, "pe-rate", "PE1's tunnel line rate in (b), the rate its limiter starts at (default 1.5x -rate)")
	fs.Var(rateFlag{&o.peMinRate}, "pe-min-rate", "the least rate PE1's agent cuts the tunnel to in (b) (default the agent's, -pe-rate/10)")
	fs.DurationVar(&o.delay, "delay", o.delay, "one-way WAN delay each way")
	fs.DurationVar(&o.duration, "duration", o.duration, "traffic time per scheme and run, from the long flows' start")
	fs.Var(sizeFlag{&o.t1}, "t1", "light threshold (ECT(1) from here)")
	fs.Var(sizeFlag{&o.t2}, "t2", "CE threshold (the single threshold of (a))")
	fs.Var(sizeFlag{&o.t2Max}, "t2-max", "CE on every packet from here")
	fs.Float64Var(&o.lightP, "p1", o.lightP, "ECT(1) probability at t2")
	fs.Float64Var(&o.heavyP, "p2", o.heavyP, "CE probability at t2-max")
	fs.DurationVar(&o.notify, "notify", o.notify, "the WAN port's least interval between CNPs to PE1")
	fs.Var(sizeFlag{&o.limit}, "limit", "every RoCE class's buffer (core ports and PE1's)")
	fs.Var(sizeFlag{&o.shortBytes}, "short-bytes", "size of a short WRITE")
	fs.DurationVar(&o.shortEvery, "short-every", o.shortEvery, "a short WRITE from s1 this often (0: none)")
	fs.DurationVar(&o.sampleEvery, "sample", o.sampleEvery, "queue and reaction sampling period")
	fs.DurationVar(&o.senderRTT, "sender-rtt", o.senderRTT, "the senders' DCQCN timers (rate increase T, alpha K) (default the WAN RTT, 2x -delay)")
	fs.StringVar(&o.outDir, "out", o.outDir, "output directory")
	fs.Var(&o.timescale, "timescale", "slow the fabric `k` times (1-1000): rates over k, times (the WAN delay, timers, -duration, sampling) times k, bytes as they are; the flags and the report stay the fabric's (default 1)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitOK
		}
		return nil, exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "wanexp: unexpected arguments %q\n", fs.Args())
		return nil, exitUsage
	}
	if o.peRate == 0 {
		o.peRate = o.rate * 3 / 2
	}
	if o.senderRTT == 0 {
		o.senderRTT = 2 * o.delay
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "wanexp: %v\n", err)
		return nil, exitUsage
	}
	_ = stdout
	return &o, exitOK
}

// maxOfferedRate keeps the delay forwarder (about 100 kpps on 2 cores)
// well below its capacity: the senders' line rates add up before the
// first cut.
const maxOfferedRate = 1 * units.Gbit

func (o *options) validate() error {
	var errs []error
	if err := o.timescale.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("-timescale: %w", err))
		o.timescale = 1 // the wall-time bounds below need a valid one
	}
	k := o.timescale
	// wall is a fabric time and, slowed, what it takes.
	wall := func(d time.Duration) string {
		if k.K() == 1 {
			return d.String()
		}
		return fmt.Sprintf("%v, %v at -timescale %s", d, o.wire(d), k)
	}
	if o.runs < 1 || o.runs > 30 {
		errs = append(errs, fmt.Errorf("-runs (%d): want 1..30", o.runs))
	}
	if o.senders < 1 || o.senders > lab.MaxWANSenders {
		errs = append(errs, fmt.Errorf("-senders (%d): want 1..%d", o.senders, lab.MaxWANSenders))
	}
	if o.rate <= 0 || units.Rate(o.senders)*k.Rate(o.rate) > maxOfferedRate {
		errs = append(errs, fmt.Errorf("-rate (%s, %s on the wire) x -senders (%d): want above 0 and at most %s offered on the wire (the delay link's capacity)", o.rate, k.Rate(o.rate), o.senders, maxOfferedRate))
	}
	if o.peRate <= o.rate {
		errs = append(errs, fmt.Errorf("-pe-rate (%s): want above -rate (%s), so that the core is the bottleneck until the PE acts", o.peRate, o.rate))
	}
	if o.peMinRate < 0 || o.peMinRate > o.peRate {
		errs = append(errs, fmt.Errorf("-pe-min-rate (%s): want 0 (the agent's default) to -pe-rate (%s)", o.peMinRate, o.peRate))
	}
	if o.delay <= 0 || o.wire(o.delay) > link.MaxDelay {
		errs = append(errs, fmt.Errorf("-delay (%s): want above 0, taking at most %v", wall(o.delay), link.MaxDelay))
	}
	if o.wire(o.duration) < 500*time.Millisecond || o.wire(o.duration) > 5*time.Minute {
		errs = append(errs, fmt.Errorf("-duration (%s): want it to take 500ms..5m", wall(o.duration)))
	}
	if !(o.t1 > 0 && o.t1 < o.t2 && o.t2 < o.t2Max && o.t2Max <= o.limit) {
		errs = append(errs, fmt.Errorf("-t1 (%s) < -t2 (%s) < -t2-max (%s) <= -limit (%s): want that order", o.t1, o.t2, o.t2Max, o.limit))
	}
	if o.wire(o.sampleEvery) < 100*time.Microsecond || o.wire(o.sampleEvery) > 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("-sample (%s): want it to take 100µs..100ms", wall(o.sampleEvery)))
	}
	if o.shortEvery < 0 {
		errs = append(errs, fmt.Errorf("-short-every (%v): want 0 (none) or more", o.shortEvery))
	}
	if o.shortBytes <= 0 || o.shortBytes > 16*units.MiB {
		errs = append(errs, fmt.Errorf("-short-bytes (%s): want 1B..16MiB", o.shortBytes))
	}
	if len(o.schemes) == 0 {
		errs = append(errs, errors.New("-schemes: want at least one"))
	}
	return errors.Join(errs...)
}

// setup is what every scheme shares.
func (o *options) setup() schemeSetup {
	return schemeSetup{coreRate: o.rate, peRate: o.peRate, peMinRate: o.peMinRate, wanRTT: 2 * o.delay, limit: o.limit,
		th: Thresholds{T1: o.t1, T2: o.t2, T2Max: o.t2Max, LightMaxP: o.lightP, HeavyMaxP: o.heavyP, Notify: o.notify}}
}
