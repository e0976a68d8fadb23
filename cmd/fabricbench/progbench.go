//go:build linux

package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// goalNsPerPacket is the per-packet budget of each port program.
const goalNsPerPacket = 100.0

// The stamp port_enqueue puts on a packet (bpf/port.c): enqueue time with
// the low 8 bits replaced by the magic 10101 and the class.
const (
	stampMagic = 0xA8
	stampClass = uint64(qdisc.ClassRoCE)
	// shapedPriorityBase is what a shaped port (HTB 1:10 + class) loads, so
	// the skb->priority store of the production path is included.
	shapedPriorityBase = 1<<16 | 0x10
	harnessFallthrough = 99 // harness return value when its tail call failed
	// The verdicts the port programs return on every measured path
	// (bpf/port.c): port_enqueue passes with TC_ACT_OK, port_dequeue with
	// TC_ACT_UNSPEC (TCX_NEXT) so a program after it at the peer's
	// ingress still runs; BPF_PROG_RUN reports -1 as a u32.
	tcActOK     = 0
	tcActUnspec = ^uint32(0)
	gib         = units.ByteSize(1 << 30)
	mib         = units.ByteSize(1 << 20)
)

// ProgRow is one line of the per-packet cost table.
type ProgRow struct {
	Program string `json:"program"`
	State   string `json:"state"`
	// Path is the branch of the program every measured run took.
	Path string `json:"path"`
	// Method is "repeat" (BPF_PROG_RUN repeat on one skb, kernel-timed) or
	// "harness-diff" (repeat through the restore-and-tail-call harness,
	// minus the harness with an empty program in the same trial).
	Method string `json:"method"`
	// NsPerPacket is the median over trials of the kernel-measured time per
	// run, as a plain BPF_PROG_RUN repeat reports it: the program plus the
	// run loop's floor (the empty program's time). For harness-diff rows it
	// is the paired difference plus that floor, so all rows compare.
	NsPerPacket float64 `json:"ns_per_packet"`
	// NetNs is NsPerPacket minus the floor: the program alone.
	NetNs   float64   `json:"net_ns_per_packet"`
	TrialNs []float64 `json:"trial_ns"`
	// Verified says what the counters show the runs did.
	Verified string  `json:"verified"`
	GoalNs   float64 `json:"goal_ns,omitempty"`
	Verdict  string  `json:"verdict"` // ok, over, or ref for reference rows
}

type benchEnv struct {
	repeat, trials int
	pkt            []byte
	empty          *ebpf.Program // return TC_ACT_OK
	slot           *ebpf.Map     // prog array the harness tail-calls slot 0 of
	harness        *ebpf.Program // stamps the current time (sojourn ~0)
	// aged are harnesses that stamp the packet as if enqueued that long
	// ago, by sojourn (the dequeue AQM rows).
	aged map[time.Duration]*ebpf.Program
}

func (e *benchEnv) Close() {
	for _, p := range e.aged {
		p.Close()
	}
	for _, c := range []interface{ Close() error }{e.harness, e.slot, e.empty} {
		if c != nil {
			c.Close()
		}
	}
}

// newBenchEnv loads the reference programs.
//
// The harness exists because BPF_PROG_RUN with repeat reuses one skb: a
// marked packet stays CE, and port_dequeue clears the stamp it consumes, so
// from the second repetition on those programs would take another branch.
// Every repetition the harness (1) rewrites the IPv4 header to the original
// bytes (ECT(0), original checksum) with bpf_skb_store_bytes, (2) stamps the
// skb exactly as port_enqueue does (bpf_skb_set_tstamp, monotonic clock,
// magic|class 3), and (3) tail-calls slot 0. Measuring the harness with the
// empty program in slot 0 in the same trial and subtracting leaves the cost
// of the slotted program on an ECT(0), stamped packet, with the production
// clock and random source (no TestHooks).
func newBenchEnv(repeat, trials int) (_ *benchEnv, err error) {
	e := &benchEnv{repeat: repeat, trials: trials, pkt: craftPacket(), aged: map[time.Duration]*ebpf.Program{}}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	e.empty, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "bench_empty", Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return nil, fmt.Errorf("load empty program: %w", err)
	}
	e.slot, err = ebpf.NewMap(&ebpf.MapSpec{Name: "bench_slot", Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("create prog array: %w", err)
	}
	e.harness, err = e.loadHarness(0)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// harnessAt returns the harness whose stamp is sojourn in the past: the
// packet it hands the slotted program has been queued that long, measured
// on the real monotonic clock (plus the time between the harness's and the
// program's clock reads, and up to 255 ns the stamp's low bits cost).
func (e *benchEnv) harnessAt(sojourn time.Duration) (*ebpf.Program, error) {
	if sojourn == 0 {
		return e.harness, nil
	}
	if p, ok := e.aged[sojourn]; ok {
		return p, nil
	}
	p, err := e.loadHarness(sojourn)
	if err != nil {
		return nil, err
	}
	e.aged[sojourn] = p
	return p, nil
}

func (e *benchEnv) loadHarness(sojourn time.Duration) (*ebpf.Program, error) {
	if sojourn < 0 || sojourn > time.Second {
		return nil, fmt.Errorf("harness sojourn %s out of 0..1s", sojourn)
	}
	hdr := e.pkt[ethHdrLen : ethHdrLen+ipv4HdrLen]
	insns := asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1)}
	for i := 0; i < ipv4HdrLen; i += 4 {
		w := int32(binary.LittleEndian.Uint32(hdr[i:]))
		insns = append(insns, asm.StoreImm(asm.RFP, int16(-24+i), int64(w), asm.Word))
	}
	mapLoad := asm.LoadMapPtr(asm.R2, 0)
	if err := mapLoad.AssociateMap(e.slot); err != nil {
		return nil, err
	}
	insns = append(insns,
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, ethHdrLen),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -24),
		asm.Mov.Imm(asm.R4, ipv4HdrLen),
		asm.Mov.Imm(asm.R5, 0),
		asm.FnSkbStoreBytes.Call(),
		asm.FnKtimeGetNs.Call(),
	)
	if sojourn > 0 {
		insns = append(insns, asm.Sub.Imm(asm.R0, int32(sojourn.Nanoseconds())))
	}
	insns = append(insns,
		asm.And.Imm(asm.R0, -256),
		asm.Or.Imm(asm.R0, int32(stampMagic|stampClass)),
		asm.Mov.Reg(asm.R2, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R3, 1), // BPF_SKB_CLOCK_MONOTONIC
		asm.FnSkbSetTstamp.Call(),
		asm.Mov.Reg(asm.R1, asm.R6),
		mapLoad,
		asm.Mov.Imm(asm.R3, 0),
		asm.FnTailCall.Call(),
		asm.Mov.Imm(asm.R0, harnessFallthrough),
		asm.Return(),
	)
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "bench_harness", Type: ebpf.SchedCLS, License: "Dual BSD/GPL", Instructions: insns,
	})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load harness: %+v", ve)
		}
		return nil, fmt.Errorf("load harness: %w", err)
	}
	return p, nil
}

// bench runs prog repeat times on the packet and returns the kernel's time
// per run. reset runs before a retry after EINTR (the state is restored).
func (e *benchEnv) bench(prog *ebpf.Program, reset func()) (time.Duration, uint32, error) {
	ret, d, err := prog.Benchmark(e.pkt, e.repeat, reset)
	return d, ret, err
}

// counters are the class-3 and port counters summed over CPUs.
type counters struct {
	class qdisc.ClassStats
	port  qdisc.PortCounters
}

func readCounters(o *qdisc.Objects) (counters, error) {
	s, err := o.Stats(nil)
	if err != nil {
		return counters{}, err
	}
	return counters{class: s.Classes[qdisc.ClassRoCE], port: s.Port}, nil
}

// delta is after - before for the fields the checks use.
type delta struct {
	enqueued, dequeued, marked, dropped, arrivedECT0, arrivedCE, unaccounted, unstamped, malformed uint64
	// The dequeue AQMs' verdicts: CE marks by the instantaneous (TCN, ECN♯)
	// and the persistent (ECN♯, CoDel) condition, and drops.
	insMarks, pstMarks, aqmDropped uint64
	// lightMarked are two-threshold's ECT(0) -> ECT(1) marks (seed 001).
	lightMarked uint64
	// primed is how many of the dequeued packets were the cases' primer
	// runs (not timed, all passed).
	primed uint64
	// aqm is the class's AQM state after the last trial.
	aqm bpf.PortAqmState
	// stalled counts the runs whose measured sojourn landed in a log2
	// bucket above the one the harness stamped for: something (an
	// interrupt, the hypervisor) stopped the CPU between the harness's
	// clock read and port_dequeue's. stallFrom is where those buckets begin.
	stalled   uint64
	stallFrom time.Duration
	sojourn   qdisc.SojournHistogram
}

func diff(a, b counters) delta {
	return delta{
		enqueued:    b.class.EnqueuedPackets - a.class.EnqueuedPackets,
		dequeued:    b.class.DequeuedPackets - a.class.DequeuedPackets,
		marked:      b.class.CEMarked() - a.class.CEMarked(),
		dropped:     b.class.DroppedPackets() - a.class.DroppedPackets(),
		arrivedECT0: b.class.ArrivedECT0 - a.class.ArrivedECT0,
		arrivedCE:   b.class.ArrivedCE - a.class.ArrivedCE,
		unaccounted: b.port.UnaccountedPackets - a.port.UnaccountedPackets,
		unstamped:   b.port.DequeueUnstampedPackets - a.port.DequeueUnstampedPackets,
		malformed:   b.port.MalformedPackets - a.port.MalformedPackets,
		lightMarked: b.class.LightMarked - a.class.LightMarked,
		insMarks:    b.class.AQMInsMarks - a.class.AQMInsMarks,
		pstMarks:    b.class.AQMPstMarks - a.class.AQMPstMarks,
		aqmDropped:  b.class.AQMDroppedPackets - a.class.AQMDroppedPackets,
		sojourn:     histDiff(a.class.Sojourn, b.class.Sojourn),
	}
}

func histDiff(a, b qdisc.SojournHistogram) qdisc.SojournHistogram {
	var d qdisc.SojournHistogram
	for i := range d {
		d[i] = b[i] - a[i]
	}
	return d
}

// countStalled sets d.stalled and d.stallFrom for packets stamped sojourn
// ago: the stamp puts them at sojourn plus at most 255 ns plus the few ns
// between the two clock reads, so past the bucket of sojourn + 1 µs they
// were held up.
func (d *delta) countStalled(sojourn time.Duration) {
	b := bits.Len64(uint64(sojourn+time.Microsecond)) - 1
	d.stallFrom = time.Duration(uint64(1) << (b + 1))
	d.stalled = 0
	for i := b + 1; i < len(d.sojourn); i++ {
		d.stalled += d.sojourn[i]
	}
}

// progCase is one measured program state.
type progCase struct {
	program, state, path string
	prog                 func(o *qdisc.Objects) *ebpf.Program
	mode                 qdisc.QueueMode
	class                qdisc.ClassConfig
	portRate             units.Rate
	backlog              uint64 // class-3 backlog at the start of every trial
	harness              bool
	// sojourn is how long ago the harness stamps the packet as enqueued
	// (dequeue AQM rows): port_dequeue measures it on the real clock.
	sojourn time.Duration
	// resetAQM zeroes the class's AQM state before every timed run, as the
	// loader does when a class's AQM settings change.
	resetAQM bool
	// primeWait, after the reset: one untimed primer run through the
	// harness (same sojourn), then a sleep of primeWait, so the timed run
	// starts with the queue above target for that long.
	primeWait time.Duration
	// check verifies from the counters that every run took path.
	check func(d delta) (string, error)
}

// wantVerdict is the TC verdict c's program returns on its measured path.
func (c progCase) wantVerdict() uint32 {
	if c.program == "port_dequeue" {
		return tcActUnspec
	}
	return tcActOK
}

// verdictName names a TC verdict for errors.
func verdictName(v uint32) string {
	switch v {
	case tcActOK:
		return "TC_ACT_OK"
	case tcActUnspec:
		return "TC_ACT_UNSPEC"
	}
	return fmt.Sprint(int32(v))
}

func enqueueProg(o *qdisc.Objects) *ebpf.Program { return o.PortEnqueue }
func dequeueProg(o *qdisc.Objects) *ebpf.Program { return o.PortDequeue }

func pct(n, of uint64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

func checkEnqueue(wantMarkAll, wantMarkNone bool) func(d delta) (string, error) {
	return func(d delta) (string, error) {
		if d.enqueued == 0 {
			return "", errors.New("the program never reached the class (0 enqueued)")
		}
		if d.dropped != 0 || d.unaccounted != 0 || d.malformed != 0 {
			return "", fmt.Errorf("unexpected path: %d dropped, %d unaccounted, %d malformed of %d", d.dropped, d.unaccounted, d.malformed, d.enqueued)
		}
		if d.arrivedCE != 0 && (wantMarkAll || !wantMarkNone) {
			return "", fmt.Errorf("%d of %d runs saw an already-CE packet", d.arrivedCE, d.enqueued)
		}
		if wantMarkAll && d.marked != d.enqueued {
			return "", fmt.Errorf("marked %d of %d, want all", d.marked, d.enqueued)
		}
		if wantMarkNone && d.marked != 0 {
			return "", fmt.Errorf("marked %d of %d, want none", d.marked, d.enqueued)
		}
		return fmt.Sprintf("%s runs, %.1f%% marked", si(d.enqueued), pct(d.marked, d.enqueued)), nil
	}
}

// checkLight is checkEnqueue for a two-threshold class between T1 and T2:
// no CE, some but not all ECT(0) packets light-marked ECT(1).
func checkLight(d delta) (string, error) {
	if _, err := checkEnqueue(false, true)(d); err != nil {
		return "", err
	}
	if d.lightMarked == 0 || d.lightMarked == d.enqueued {
		return "", fmt.Errorf("light-marked %d of %d, want some", d.lightMarked, d.enqueued)
	}
	return fmt.Sprintf("%s runs, %.1f%% light-marked ECT(1)", si(d.enqueued), pct(d.lightMarked, d.enqueued)), nil
}

// want is how many of the timed runs a dequeue AQM row expects to mark.
type want int

const (
	markNone want = iota
	markSome      // at least one, not all
	markAll
)

// check compares n marks of runs with w. A stalled run (see delta) took
// longer than intended and may be marked where the others are not: markNone
// accepts up to stalled marks.
func (w want) check(what string, n, runs, stalled uint64) error {
	switch {
	case w == markNone && n > stalled:
		return fmt.Errorf("%d of %d runs marked by the %s condition, want none (%d runs stalled)", n, runs, what, stalled)
	case w == markAll && n != runs:
		return fmt.Errorf("%d of %d runs marked by the %s condition, want all", n, runs, what)
	case w == markSome && (n == 0 || n >= runs):
		return fmt.Errorf("%d of %d runs marked by the %s condition, want some but not all", n, runs, what)
	}
	return nil
}

// checkDequeueAQM verifies a dequeue AQM row from the class counters: every
// run stamped, none dropped, every CE mark made by the AQM and split between
// its instantaneous and persistent conditions as ins and pst say, and the
// state machine left in the marking state or not (marking).
func checkDequeueAQM(ins, pst want, marking bool) func(d delta) (string, error) {
	return func(d delta) (string, error) {
		if d.dequeued == 0 || d.unstamped != 0 || d.malformed != 0 {
			return "", fmt.Errorf("stamped path not taken: %d dequeued, %d unstamped, %d malformed", d.dequeued, d.unstamped, d.malformed)
		}
		if d.aqmDropped != 0 {
			return "", fmt.Errorf("%d runs dropped by the AQM (the packet is ECT(0))", d.aqmDropped)
		}
		if d.marked != d.insMarks+d.pstMarks {
			return "", fmt.Errorf("%d CE marks, %d by the AQM's conditions", d.marked, d.insMarks+d.pstMarks)
		}
		runs := d.dequeued - d.primed
		if err := ins.check("instantaneous", d.insMarks, runs, d.stalled); err != nil {
			return "", err
		}
		// The persistent condition's first mark comes on the first timed
		// run. If the host stalled that run past ins_target, the
		// instantaneous condition marks it and the counters book it there
		// (ins wins), though the state machine counted it: with one trial
		// (the smoke) that leaves no persistent mark at all. The state's
		// count says whether it decided to mark; the stalled runs say why.
		masked := pst == markSome && d.pstMarks == 0 && marking && d.aqm.Marking != 0 &&
			d.aqm.Count >= 1 && d.insMarks > 0 && d.insMarks <= d.stalled
		if !masked {
			if err := pst.check("persistent", d.pstMarks, runs, d.stalled); err != nil {
				return "", err
			}
		}
		if (d.aqm.Marking != 0) != marking {
			return "", fmt.Errorf("AQM state marking=%d after the run, want %v", d.aqm.Marking, marking)
		}
		out := fmt.Sprintf("%s runs", si(runs))
		switch {
		case d.insMarks == 0 && d.pstMarks == 0:
			out += ", none marked"
		case d.pstMarks == 0:
			out += fmt.Sprintf(", %.1f%% marked (ins)", pct(d.insMarks, runs))
		case d.insMarks == 0:
			out += fmt.Sprintf(", %d = %.3f%% marked (pst)", d.pstMarks, pct(d.pstMarks, runs))
		default:
			out += fmt.Sprintf(", %.1f%% ins + %.3f%% pst marked", pct(d.insMarks, runs), pct(d.pstMarks, runs))
		}
		if marking {
			out += fmt.Sprintf(", ends marking, count %d", d.aqm.Count)
		}
		if d.stalled > 0 {
			var stray uint64
			if ins == markNone {
				stray += d.insMarks
			}
			if pst == markNone {
				stray += d.pstMarks
			}
			out += fmt.Sprintf("; %d stalled (sojourn >= %s), %d stray marks", d.stalled, units.FormatDuration(d.stallFrom), stray)
		}
		if masked {
			out += fmt.Sprintf("; HOST-DISTORTED: the persistent condition's %d mark(s) (state count) fell on stalled runs the instantaneous condition marked", d.aqm.Count)
		}
		return out, nil
	}
}

func wred(minTh, maxTh, limit units.ByteSize, maxP float64) qdisc.ClassConfig {
	return qdisc.ClassConfig{Name: "roce", ECN: qdisc.ECNWRED, MinThBytes: minTh, MaxThBytes: maxTh, LimitBytes: limit, MaxP: maxP}
}

// Dequeue AQM settings of the rows below. The packet's sojourn is set by
// the harness (stamp = now - sojourn), so the rows run on the production
// clock: time advances between repetitions as in a real queue, and the
// state machines move on their own schedule during a timed run.
const (
	tcnTarget = 100 * time.Microsecond

	codelTarget   = 50 * time.Microsecond
	codelInterval = time.Millisecond

	sharpInsTarget = 200 * time.Microsecond
	sharpInsMax    = 600 * time.Microsecond // probabilistic curve: p = 0.5 at 400 µs
	sharpPstTarget = 50 * time.Microsecond
	// Algorithm 1's schedule (next += interval/count) accelerates
	// exponentially: the count-th mark comes about interval·(ln count +
	// 0.58) into the episode, and once interval/count is shorter than a
	// repetition, next falls behind the clock for good and every packet is
	// marked (5 ms did that ~50 ms into a 70 ms timed run here). 20 ms
	// keeps timed runs of up to ~200 ms on schedule: a few dozen marks.
	sharpPstInterval = 20 * time.Millisecond
	// The sqrt law's marks come at about 2·interval·√count: a shorter
	// interval, so that enough of the marks (and their square roots) fall
	// in a timed run to weigh in the mean.
	sharpSqrtInterval = 200 * time.Microsecond
	// The rows that must not enter the persistent state: the longest
	// pst_interval allowed, far beyond a trial (its state is reset before
	// every timed run).
	sharpNoPst = 4 * time.Second
	// primeSlack is added to a primer's wait past the interval.
	primeSlack = 200 * time.Microsecond
)

func tcn() qdisc.ClassConfig {
	return qdisc.ClassConfig{Name: "roce", ECN: qdisc.ECNTCN, LimitBytes: 4 * gib, InsTarget: tcnTarget}
}

func codel() qdisc.ClassConfig {
	return qdisc.ClassConfig{Name: "roce", ECN: qdisc.ECNCoDel, LimitBytes: 4 * gib, Target: codelTarget, Interval: codelInterval}
}

func ecnSharp(pstInterval time.Duration) qdisc.ClassConfig {
	return qdisc.ClassConfig{Name: "roce", ECN: qdisc.ECNSharp, LimitBytes: 4 * gib,
		InsTarget: sharpInsTarget, PstTarget: sharpPstTarget, PstInterval: pstInterval}
}

// progCases lists the measured states. Limits and thresholds leave room for
// the backlog growing by benchFrameLen every enqueue repetition (up to
// maxRepeat), so each state holds over a whole trial.
func progCases() []progCase {
	limit := units.ByteSize(4 * gib)
	return []progCase{
		{
			program: "port_enqueue", state: "(a) below min_th",
			path: "WRED class, backlog < min_th: pass", prog: enqueueProg,
			class: wred(3*gib, limit, limit, 0.1), check: checkEnqueue(false, true),
		},
		{
			program: "port_enqueue", state: "(a) below min_th, cross-check",
			path: "same as (a), through the harness: validates the subtraction", prog: enqueueProg,
			class: wred(3*gib, limit, limit, 0.1), harness: true, check: checkEnqueue(false, true),
		},
		{
			program: "port_enqueue", state: "(b) WRED region",
			path: "min_th < backlog < max_th, p≈0.5: draw, mark ~half (ECT(0) each run)", prog: enqueueProg,
			class: wred(mib, limit-mib, limit, 1.0), backlog: uint64(2 * gib), harness: true,
			check: checkEnqueue(false, false),
		},
		{
			program: "port_enqueue", state: "(c) step, above K",
			path: "backlog > K: mark ECT(0) -> CE, checksum fix (ECT(0) each run)", prog: enqueueProg,
			class:   qdisc.ClassConfig{Name: "roce", ECN: qdisc.ECNStep, MinThBytes: mib, LimitBytes: limit},
			backlog: uint64(2 * mib), harness: true, check: checkEnqueue(true, false),
		},
		{
			program: "port_enqueue", state: "(d) virtual queue",
			path: "QueueVirtual 10 Gbit/s: spin lock, drain, WRED below min_th: pass", prog: enqueueProg,
			mode: qdisc.QueueVirtual, portRate: 10 * units.Gbit,
			class: wred(3*gib, limit, limit, 0.1), backlog: uint64(mib), check: checkEnqueue(false, true),
		},
		{
			program: "port_enqueue", state: "(e) two-threshold, light region",
			path: "T1 < backlog < T2, p≈0.5: draw, ECT(0) -> ECT(1) ~half, checksum fix (ECT(0) each run)", prog: enqueueProg,
			class: qdisc.ClassConfig{Name: "roce", ECN: qdisc.ECNTwoThreshold, LimitBytes: limit,
				TwoThreshold: qdisc.TwoThreshold{T1Bytes: mib, T2Bytes: 3 * gib, T2MaxBytes: limit, LightMaxP: 1, HeavyMaxP: 0.2}},
			backlog: uint64(3*gib/2 + mib/2), harness: true, check: checkLight,
		},
		{
			program: "port_dequeue", state: "stamped packet",
			path: "valid stamp: clear it, backlog -= len, sojourn histogram (stamped each run); class wred: no dequeue AQM", prog: dequeueProg,
			backlog: 1 << 40, harness: true,
			check: func(d delta) (string, error) {
				if d.dequeued == 0 || d.unstamped != 0 {
					return "", fmt.Errorf("stamped path not taken: %d dequeued, %d unstamped", d.dequeued, d.unstamped)
				}
				return fmt.Sprintf("%s runs, all stamped", si(d.dequeued)), nil
			},
		},
		// The dequeue AQMs. Every row goes through the harness (the packet
		// is ECT(0) and freshly stamped each repetition) with a backlog of
		// 1 TB, so CoDel's one-MTU rule never holds, and the real clock.
		{
			// Each repetition: sojourn 50 µs <= 100 µs: pass.
			program: "port_dequeue", state: "tcn, below threshold",
			path: "TCN ins_target 100µs, sojourn 50µs: compare, pass", prog: dequeueProg,
			class: tcn(), backlog: 1 << 40, harness: true, sojourn: tcnTarget / 2,
			check: checkDequeueAQM(markNone, markNone, false),
		},
		{
			// Each repetition: sojourn 200 µs > 100 µs: mark ECT(0) -> CE.
			program: "port_dequeue", state: "tcn, above threshold",
			path: "TCN ins_target 100µs, sojourn 200µs: mark every packet", prog: dequeueProg,
			class: tcn(), backlog: 1 << 40, harness: true, sojourn: 2 * tcnTarget,
			check: checkDequeueAQM(markAll, markNone, false),
		},
		{
			// Each repetition: sojourn 20 µs < target: spin lock,
			// first_above = 0, not marking: pass.
			program: "port_dequeue", state: "codel, below target",
			path: "CoDel target 50µs interval 1ms, sojourn 20µs: lock, reset first_above, pass", prog: dequeueProg,
			class: codel(), backlog: 1 << 40, harness: true, sojourn: 20 * time.Microsecond, resetAQM: true,
			check: checkDequeueAQM(markNone, markNone, false),
		},
		{
			// Primed before every timed run: state zeroed, one packet
			// with sojourn 100 µs > target sets first_above = now + interval, then a sleep past it. The
			// first timed repetition enters the marking state (count 1,
			// mark); every later one finds ok_to_drop and, unless the
			// clock has passed next (control law next += interval/√count),
			// passes. Marks come at about 2·interval·√count, so a ~30 ms
			// run marks a few hundred packets and passes the rest.
			program: "port_dequeue", state: "codel, marking state",
			path: "CoDel, sojourn 100µs held past interval: in marking state, mark on the control-law schedule, pass otherwise", prog: dequeueProg,
			class: codel(), backlog: 1 << 40, harness: true, sojourn: 2 * codelTarget,
			resetAQM: true, primeWait: codelInterval + primeSlack,
			check: checkDequeueAQM(markNone, markSome, true),
		},
		{
			// Each repetition: sojourn 20 µs: not above ins_target, below
			// pst_target: lock, first_above = 0, not marking: pass.
			program: "port_dequeue", state: "ecnsharp, below pst_target",
			path: "ECN♯ ins 200µs pst 50µs/20ms, sojourn 20µs: ins no, lock, reset first_above, pass", prog: dequeueProg,
			class: ecnSharp(sharpPstInterval), backlog: 1 << 40, harness: true, sojourn: 20 * time.Microsecond, resetAQM: true,
			check: checkDequeueAQM(markNone, markNone, false),
		},
		{
			// Each repetition: sojourn 400 µs > ins_target: mark. The
			// persistent side runs too (it sets first_above on the first
			// repetition) but with pst_interval 4 s and its state reset
			// before every timed run it never detects a standing queue.
			program: "port_dequeue", state: "ecnsharp, above ins_target",
			path: "ECN♯ ins 200µs (cut-off), sojourn 400µs: mark every packet; persistent state tracked, never detected (pst_interval 4s)", prog: dequeueProg,
			class: ecnSharp(sharpNoPst), backlog: 1 << 40, harness: true, sojourn: 2 * sharpInsTarget, resetAQM: true,
			check: checkDequeueAQM(markAll, markNone, false),
		},
		{
			// Primed before every timed run: state zeroed, one packet
			// with sojourn 100 µs (between pst_target and ins_target)
			// sets first_above = now, then a sleep past pst_interval. The
			// first timed repetition detects the standing queue, enters
			// the marking state (count 1, mark, next = now + interval);
			// every later one is detected and, unless the clock has
			// passed next (next += interval/count), passes.
			program: "port_dequeue", state: "ecnsharp, persistent state",
			path: "ECN♯ pst 50µs/20ms, sojourn 100µs held past pst_interval: in marking state, mark on Algorithm 1's schedule, pass otherwise", prog: dequeueProg,
			class: ecnSharp(sharpPstInterval), backlog: 1 << 40, harness: true, sojourn: 100 * time.Microsecond,
			resetAQM: true, primeWait: sharpPstInterval + primeSlack,
			check: checkDequeueAQM(markNone, markSome, true),
		},
		{
			// Each repetition: sojourn 400 µs, half-way between Kmin 200 µs
			// and Kmax 600 µs with max_p 1: one random draw, mark with
			// p = 0.5. Persistent side as in "above ins_target".
			program: "port_dequeue", state: "ecnsharp, probabilistic curve",
			path: "ECN♯ ins 200..600µs max_p 1, sojourn 400µs: random draw, mark ~half; persistent never detected", prog: dequeueProg,
			class: func() qdisc.ClassConfig {
				c := ecnSharp(sharpNoPst)
				c.InsMax, c.MaxP = sharpInsMax, 1
				return c
			}(), backlog: 1 << 40, harness: true, sojourn: 2 * sharpInsTarget, resetAQM: true,
			check: checkDequeueAQM(markSome, markNone, false),
		},
		{
			// As "persistent state" with the sqrt law: a marking
			// repetition computes next = now + interval/√count (a 32-step
			// integer square root and a division); the others compare
			// and pass.
			program: "port_dequeue", state: "ecnsharp, sqrt law",
			path: "ECN♯ pst 50µs/200µs sqrt_law, sojourn 100µs held past pst_interval: in marking state, mark at now+interval/√count, pass otherwise", prog: dequeueProg,
			class: func() qdisc.ClassConfig {
				c := ecnSharp(sharpSqrtInterval)
				c.SqrtLaw = true
				return c
			}(), backlog: 1 << 40, harness: true, sojourn: 100 * time.Microsecond,
			resetAQM: true, primeWait: sharpSqrtInterval + primeSlack,
			check: checkDequeueAQM(markNone, markSome, true),
		},
		{
			program: "port_dequeue", state: "unstamped packet",
			path: "no stamp (foreign packet): count and pass", prog: dequeueProg,
			check: func(d delta) (string, error) {
				if d.unstamped == 0 || d.dequeued != 0 {
					return "", fmt.Errorf("unstamped path not taken: %d dequeued, %d unstamped", d.dequeued, d.unstamped)
				}
				return fmt.Sprintf("%s runs, all unstamped", si(d.unstamped)), nil
			},
		},
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// runProgBench measures the reference rows and every case.
func runProgBench(repeat, trials int) ([]ProgRow, error) {
	// One OS thread, so the per-trial pair runs on one CPU as far as the
	// scheduler allows.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	e, err := newBenchEnv(repeat, trials)
	if err != nil {
		return nil, err
	}
	defer e.Close()

	var rows []ProgRow
	// Reference 1: the empty program, the floor of BPF_PROG_RUN dispatch.
	emptyNs, err := e.trialsOf(e.empty, "empty program", "")
	if err != nil {
		return nil, err
	}
	floor := median(emptyNs)
	rows = append(rows, ProgRow{Program: "reference", State: "empty program", Path: "return TC_ACT_OK: run-loop floor",
		Method: "repeat", NsPerPacket: floor, TrialNs: emptyNs, Verified: "returned 0", Verdict: "ref"})

	// Reference 2: one bpf_ktime_get_ns call, which the enqueue path and the
	// harness make once per packet; its cost depends on the clocksource.
	ktime, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "bench_ktime", Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.FnKtimeGetNs.Call(), asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return nil, fmt.Errorf("load ktime program: %w", err)
	}
	defer ktime.Close()
	ktimeNs, err := e.trialsOf(ktime, "ktime program", "")
	if err != nil {
		return nil, err
	}
	rows = append(rows, ProgRow{Program: "reference", State: "bpf_ktime_get_ns", Path: "one clock read (part of every enqueue)",
		Method: "repeat", NsPerPacket: median(ktimeNs), NetNs: median(ktimeNs) - floor, TrialNs: ktimeNs, Verified: "returned 0", Verdict: "ref"})

	// Reference 3: a bpf_spin_lock pair on an array value, which the
	// virtual queue and the codel and ecnsharp state take once per packet.
	lockNs, err := e.benchSpinLock()
	if err != nil {
		return nil, err
	}
	rows = append(rows, ProgRow{Program: "reference", State: "bpf_spin_lock pair",
		Path: "array lookup, lock, unlock (virtual queue, codel, ecnsharp state)", Method: "repeat",
		NsPerPacket: median(lockNs), NetNs: median(lockNs) - floor, TrialNs: lockNs, Verified: "returned 0", Verdict: "ref"})

	// Reference 4: the harness around the empty program (what harness-diff
	// rows subtract).
	if err := e.slot.Put(uint32(0), e.empty); err != nil {
		return nil, fmt.Errorf("fill prog array: %w", err)
	}
	harnessNs, err := e.trialsOf(e.harness, "harness", ": tail call failed")
	if err != nil {
		return nil, err
	}
	rows = append(rows, ProgRow{Program: "reference", State: "harness -> empty",
		Path: "restore IPv4 header, stamp, tail call (subtracted below)", Method: "repeat",
		NsPerPacket: median(harnessNs), NetNs: median(harnessNs) - floor, TrialNs: harnessNs,
		Verified: "tail call taken", Verdict: "ref"})

	for _, c := range progCases() {
		row, err := e.runCase(c, floor)
		if err != nil {
			return rows, fmt.Errorf("%s %s: %w", c.program, c.state, err)
		}
		rows = append(rows, row)
	}
	xrows, err := runXmitInSitu(trials)
	rows = append(rows, xrows...)
	if err != nil {
		return rows, fmt.Errorf("xmit hook in situ: %w", err)
	}
	return rows, nil
}

// benchSpinLock times a program that looks up a one-element array whose
// value holds a bpf_spin_lock, takes the lock and releases it.
func (e *benchEnv) benchSpinLock() ([]float64, error) {
	u32 := &btf.Int{Name: "__u32", Size: 4}
	lock := &btf.Struct{Name: "bpf_spin_lock", Size: 4, Members: []btf.Member{{Name: "val", Type: u32}}}
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "bench_lock", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1,
		Key: u32,
		Value: &btf.Struct{Name: "bench_locked", Size: 8, Members: []btf.Member{
			{Name: "lock", Type: lock}, {Name: "v", Type: u32, Offset: 32},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("create spin-lock map: %w", err)
	}
	defer m.Close()
	mapLoad := asm.LoadMapPtr(asm.R1, 0)
	if err := mapLoad.AssociateMap(m); err != nil {
		return nil, err
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "bench_lock", Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			mapLoad,
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Reg(asm.R6, asm.R0),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.FnSpinLock.Call(),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.FnSpinUnlock.Call(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
	})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load spin-lock program: %+v", ve)
		}
		return nil, fmt.Errorf("load spin-lock program: %w", err)
	}
	defer p.Close()
	return e.trialsOf(p, "spin-lock program", "")
}

// trialsOf is each trial's time of a reference program that returns 0;
// what names it in errors, and why says what another return means.
func (e *benchEnv) trialsOf(prog *ebpf.Program, what, why string) ([]float64, error) {
	var ns []float64
	for range e.trials {
		d, ret, err := e.bench(prog, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if ret != 0 {
			return nil, fmt.Errorf("%s returned %d%s", what, ret, why)
		}
		ns = append(ns, float64(d.Nanoseconds()))
	}
	return ns, nil
}

func (e *benchEnv) runCase(c progCase, floor float64) (ProgRow, error) {
	rate := c.portRate
	if rate == 0 {
		rate = 100 * units.Gbit
	}
	cfg := qdisc.DefaultConfig(rate)
	if c.class.LimitBytes != 0 {
		cfg.Classes[qdisc.ClassRoCE] = c.class
	}
	base := uint32(shapedPriorityBase)
	if c.mode == qdisc.QueueVirtual {
		base = 0 // virtual-queue ports never install HTB
	}
	o, err := qdisc.LoadObjects(cfg, c.mode, base, qdisc.LoadOptions{})
	if err != nil {
		return ProgRow{}, err
	}
	defer o.Close()
	prog := c.prog(o)
	harness, err := e.harnessAt(c.sojourn)
	if err != nil {
		return ProgRow{}, err
	}

	var restoreErr error
	var primed uint64
	restore := func() {
		st := bpf.PortClassState{BacklogBytes: c.backlog, BacklogPackets: c.backlog / benchFrameLen}
		if err := o.ClassQueue.Put(uint32(qdisc.ClassRoCE), &st); err != nil {
			restoreErr = fmt.Errorf("set backlog: %w", err)
		}
		if !c.resetAQM {
			return
		}
		if err := o.ClassAqm.Update(uint32(qdisc.ClassRoCE), &bpf.PortAqmState{}, ebpf.UpdateLock); err != nil {
			restoreErr = fmt.Errorf("reset aqm state: %w", err)
			return
		}
		if c.primeWait == 0 {
			return
		}
		// The slot holds the program here (see below).
		ret, err := harness.Run(&ebpf.RunOptions{Data: e.pkt})
		if err == nil && ret != c.wantVerdict() {
			err = fmt.Errorf("returned %s, want %s", verdictName(ret), verdictName(c.wantVerdict()))
		}
		if err != nil {
			restoreErr = fmt.Errorf("primer run: %w", err)
			return
		}
		primed++
		time.Sleep(c.primeWait)
	}
	if c.primeWait > 0 && !(c.harness && c.resetAQM) {
		return ProgRow{}, errors.New("primeWait needs harness and resetAQM")
	}
	before, err := readCounters(o)
	if err != nil {
		return ProgRow{}, err
	}
	method := "repeat"
	if c.harness {
		method = "harness-diff"
	}
	var trialNs []float64
	for range e.trials {
		if !c.harness {
			restore()
			d, ret, err := e.bench(prog, restore)
			if err != nil {
				return ProgRow{}, err
			}
			if ret != c.wantVerdict() {
				return ProgRow{}, fmt.Errorf("returned %s, want %s", verdictName(ret), verdictName(c.wantVerdict()))
			}
			trialNs = append(trialNs, float64(d.Nanoseconds()))
			continue
		}
		// Paired: the harness alone, then the harness with the program,
		// right after restoring (and priming) the state.
		if err := e.slot.Put(uint32(0), e.empty); err != nil {
			return ProgRow{}, err
		}
		d0, _, err := e.bench(harness, nil)
		if err != nil {
			return ProgRow{}, err
		}
		if err := e.slot.Put(uint32(0), prog); err != nil {
			return ProgRow{}, fmt.Errorf("put %s in prog array: %w", c.program, err)
		}
		restore()
		if restoreErr != nil {
			return ProgRow{}, restoreErr
		}
		d1, ret, err := e.bench(harness, restore)
		if err != nil {
			return ProgRow{}, err
		}
		if ret == harnessFallthrough {
			return ProgRow{}, errors.New("harness tail call into the program failed")
		}
		if ret != c.wantVerdict() {
			return ProgRow{}, fmt.Errorf("returned %s, want %s", verdictName(ret), verdictName(c.wantVerdict()))
		}
		trialNs = append(trialNs, float64(d1.Nanoseconds()-d0.Nanoseconds())+floor)
	}
	if restoreErr != nil {
		return ProgRow{}, restoreErr
	}
	after, err := readCounters(o)
	if err != nil {
		return ProgRow{}, err
	}
	dl := diff(before, after)
	dl.primed = primed
	dl.countStalled(c.sojourn)
	if err := o.ClassAqm.LookupWithFlags(uint32(qdisc.ClassRoCE), &dl.aqm, ebpf.LookupLock); err != nil {
		return ProgRow{}, fmt.Errorf("read aqm state: %w", err)
	}
	verified, err := c.check(dl)
	if err != nil {
		return ProgRow{}, fmt.Errorf("path check: %w", err)
	}
	ns := median(trialNs)
	verdict := "ok"
	if ns-floor >= goalNsPerPacket {
		verdict = "over"
	}
	return ProgRow{Program: c.program, State: c.state, Path: c.path, Method: method,
		NsPerPacket: ns, NetNs: ns - floor, TrialNs: trialNs, Verified: verified, GoalNs: goalNsPerPacket, Verdict: verdict}, nil
}

// si prints a count with a k/M suffix.
func si(n uint64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// The xmit hook (port_xmit, a tp_btf program) cannot run under BPF_PROG_RUN,
// so its rows are taken in situ: a port on a veth pair carries paced UDP,
// and the kernel's own per-program statistics (BPF_ENABLE_STATS: run time
// and run count, two sched_clock reads around each run) give the cost per
// run. An empty tp_btf program on the same tracepoint is the floor those
// statistics add; net = value - floor. The tracepoint's dispatch (the
// static call into the BPF probe, the recursion check) is outside them and
// is estimated apart from a sender's CPU time with 64 empty programs on the
// tracepoint against none.
const (
	inSituRate    = 500 * units.Mbit
	inSituPayload = 1400
	// inSituDispatchProgs is how many empty programs the dispatch estimate
	// attaches at once: enough to rise above the sender's noise.
	inSituDispatchProgs = 64
)

// inSituSend is how long each in-situ trial sends (-smoke: 1 s).
var inSituSend = 2 * time.Second

// progStat is a program's kernel statistics at one moment.
type progStat struct{ runs, ns uint64 }

func statOf(p *ebpf.Program) (progStat, error) {
	s, err := p.Stats()
	if err != nil {
		return progStat{}, err
	}
	return progStat{runs: s.RunCount, ns: uint64(s.Runtime)}, nil
}

func (a progStat) sub(b progStat) progStat { return progStat{a.runs - b.runs, a.ns - b.ns} }

func (a progStat) perRun() float64 {
	if a.runs == 0 {
		return 0
	}
	return float64(a.ns) / float64(a.runs)
}

// emptyTracing loads a tp_btf program on net_dev_start_xmit that returns 0.
func emptyTracing() (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "bench_tp_empty", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: "net_dev_start_xmit",
		License: "Dual BSD/GPL", Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return nil, fmt.Errorf("load empty tp_btf program: %w", err)
	}
	return p, nil
}

// udpSink receives and discards UDP in b until closed.
func udpSink(b *lab.Node) (*net.UDPConn, error) {
	var conn *net.UDPConn
	if err := b.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: addrB.Addr().AsSlice()})
		return err
	}); err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
		}
	}()
	return conn, nil
}

// udpBlast sends paced (rate > 0) or unpaced UDP from a to dst for d and
// returns the datagrams sent. Unpaced, it runs pinned to cpu.
func udpBlast(a *lab.Node, dst *net.UDPAddr, rate units.Rate, d time.Duration, cpu int) (int, error) {
	var conn *net.UDPConn
	if err := a.Do(func() error {
		var err error
		conn, err = net.DialUDP("udp4", nil, dst)
		return err
	}); err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := ipv4.NewConn(conn).SetTOS(26<<2 | 2); err != nil { // RoCE class, ECT(0)
		return 0, err
	}
	buf := make([]byte, inSituPayload)
	sent := 0
	start := time.Now()
	if rate == 0 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var old, set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			return 0, err
		}
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return 0, err
		}
		defer unix.SchedSetaffinity(0, &old)
		for time.Since(start) < d {
			for range 64 {
				if _, err := conn.Write(buf); err == nil {
					sent++
				}
			}
		}
		return sent, nil
	}
	perSec := rate.BytesPerSecond() / float64(inSituPayload+42)
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	for now := range tick.C {
		el := now.Sub(start)
		if el >= d {
			break
		}
		for due := int(el.Seconds()*perSec) - sent; due > 0; due-- {
			if _, err := conn.Write(buf); err != nil && !errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.ECONNREFUSED) {
				return sent, err
			}
			sent++
		}
	}
	return sent, nil
}

// runXmitInSitu measures the xmit hook and the peer hook on real traffic.
func runXmitInSitu(trials int) ([]ProgRow, error) {
	l, err := pairLab(0)
	if err != nil {
		return nil, err
	}
	defer closeLab(l)
	a, b := l.Node("a"), l.Node("b")
	sink, err := udpSink(b)
	if err != nil {
		return nil, err
	}
	defer sink.Close()
	dst := sink.LocalAddr().(*net.UDPAddr)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enable BPF run-time statistics: %w", err)
	}
	defer stats.Close()

	empty, err := emptyTracing()
	if err != nil {
		return nil, err
	}
	defer empty.Close()
	el, err := link.AttachTracing(link.TracingOptions{Program: empty})
	if err != nil {
		return nil, fmt.Errorf("attach empty tp_btf program: %w", err)
	}
	defer el.Close()
	// A port loaded for a device that does not exist: every run of its
	// port_xmit is the filter alone, what other devices' packets cost.
	cfg := qdisc.DefaultConfig(inSituRate * 2)
	other, err := qdisc.LoadObjects(cfg, qdisc.QueueVeth, 0, qdisc.LoadOptions{Xmit: &qdisc.XmitTarget{Ifindex: 1 << 30, NetnsIno: 1}})
	if err != nil {
		return nil, err
	}
	defer other.Close()
	if err := other.XmitErr(); err != nil {
		return nil, err
	}
	ol, err := link.AttachTracing(link.TracingOptions{Program: other.PortXmit})
	if err != nil {
		return nil, fmt.Errorf("attach filtered port_xmit: %w", err)
	}
	defer ol.Close()

	type sample struct {
		floor, filtered, xmit, enqueue, dequeue, fallback []float64
		entered                                           uint64
	}
	var s sample
	for trial := range trials {
		for _, dep := range []qdisc.DepartureHook{qdisc.DepartXmit, qdisc.DepartPeerIngress} {
			progress("xmit hook in situ, trial %d/%d: departure %s, %s UDP for %s", trial+1, trials, dep, inSituRate, inSituSend)
			// Its own program: a tail-called port_xmit has no statistics of
			// its own (the dispatcher's include it).
			port, err := qdisc.Attach(cfg, qdisc.AttachOptions{Dev: devA, Netns: a.NetnsName, PeerDev: devB, PeerNetns: b.NetnsName, Departure: dep, XmitOwnProgram: true})
			if err != nil {
				return nil, fmt.Errorf("attach port (%s): %w", dep, err)
			}
			progs, err := portProgramsOf(port)
			if err != nil {
				port.Close()
				return nil, err
			}
			all := append([]*ebpf.Program{empty, other.PortXmit}, progs...)
			before := make([]progStat, len(all))
			for i, p := range all {
				if before[i], err = statOf(p); err != nil {
					port.Close()
					return nil, err
				}
			}
			st0, err := port.Stats()
			if err == nil {
				_, err = udpBlast(a, dst, inSituRate, inSituSend, 0)
			}
			time.Sleep(100 * time.Millisecond)
			var st1 qdisc.Stats
			if err == nil {
				st1, err = port.Stats()
			}
			d := make([]progStat, len(all))
			for i, p := range all {
				if err != nil {
					break
				}
				var now progStat
				now, err = statOf(p)
				d[i] = now.sub(before[i])
			}
			if cerr := port.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, err
			}
			// progs: enqueue, dequeue[, xmit, host_drop]
			s.floor = append(s.floor, d[0].perRun())
			s.filtered = append(s.filtered, d[1].perRun())
			s.enqueue = append(s.enqueue, d[2].perRun())
			if dep == qdisc.DepartPeerIngress {
				s.fallback = append(s.fallback, d[3].perRun())
				continue
			}
			s.dequeue = append(s.dequeue, d[3].perRun())
			t0, t1 := st0.Total(), st1.Total()
			full := t1.Host.EnteredPackets - t0.Host.EnteredPackets
			x := d[4]
			if full == 0 || x.runs < full {
				return nil, fmt.Errorf("port_xmit ran %d times for %d departures", x.runs, full)
			}
			// Runs for other devices (the sender's own transmissions,
			// other namespaces) take the filtered path.
			filteredNs := float64(x.runs-full) * d[1].perRun()
			s.xmit = append(s.xmit, (float64(x.ns)-filteredNs)/float64(full))
			s.entered += full
		}
	}
	floor := median(s.floor)
	row := func(program, state, path string, ns []float64, verified string, ref bool) ProgRow {
		// In situ a run also pays cold caches and cache lines the
		// other CPU writes, which BPF_PROG_RUN's hot loop does not: the
		// 100 ns goal is BPF_PROG_RUN's, so these rows have none, and
		// port_enqueue's in-situ row is their yardstick.
		r := ProgRow{Program: program, State: state, Path: path, Method: "bpf_stats in situ", NsPerPacket: median(ns), TrialNs: ns, Verified: verified, Verdict: "ref"}
		if !ref {
			r.NetNs = r.NsPerPacket - floor
		}
		return r
	}
	rows := []ProgRow{
		row("reference", "empty tp_btf (stats floor)", "net_dev_start_xmit -> return 0: what BPF_ENABLE_STATS adds per run", s.floor, "every device's transmissions", true),
		row("port_xmit", "other device (filtered)", "ifindex/netns compare, return: paid by every other device's transmission", s.filtered, "a port loaded for a device that does not exist", false),
		row("port_xmit", "departure at xmit", "claim the handoff slot (CAS), backlog -= len, sojourn histogram, host queue += len (step class: no dequeue AQM)", s.xmit,
			fmt.Sprintf("%s departures, filtered runs taken out", si(s.entered)), false),
		row("port_dequeue", "handoff (xmit hook on)", "stamp, handoff slot, host wait histogram, host queue -= len, parse, apply verdict, release the slot (CAS)", s.dequeue, "every departure handed over", false),
		row("port_dequeue", "peer-ingress fallback", "stamp, backlog -= len, sojourn histogram, parse (the pre-xmit-hook path)", s.fallback, "departure peer-ingress", false),
		row("port_enqueue", "in situ, below min_th", "WRED class below min_th: classify, stamp, claim backlog (compare with row (a))", s.enqueue, "the same traffic", false),
	}
	stats.Close() // the dispatch estimate runs without them
	disp, err := dispatchCost(a, dst, trials)
	if err != nil {
		return rows, err
	}
	rows = append(rows, disp)
	return rows, nil
}

// portProgramsOf lists an attached port's programs: enqueue, dequeue, then
// xmit and host_drop when attached.
func portProgramsOf(port *qdisc.Port) ([]*ebpf.Program, error) {
	pp := port.Programs()
	out := []*ebpf.Program{pp.PortEnqueue, pp.PortDequeue}
	if port.Info().Departure == qdisc.DepartXmit {
		out = append(out, pp.PortXmit, pp.PortHostDrop)
	}
	for _, p := range out {
		if p == nil {
			return nil, errors.New("port program not loaded")
		}
	}
	return out, nil
}

// dispatchCost estimates what a tp_btf program on net_dev_start_xmit costs a
// transmission beyond its own run time: an unpaced sender pinned to one CPU
// (the veth delivers on the same CPU, so its rate is that CPU's cost per
// packet) with 64 empty programs attached against none, interleaved.
func dispatchCost(a *lab.Node, dst *net.UDPAddr, trials int) (ProgRow, error) {
	cpu := runtime.NumCPU() - 1
	var with, without []float64
	for trial := range trials * 2 {
		k := 0
		if trial%2 == 1 {
			k = inSituDispatchProgs
		}
		progress("tracepoint dispatch, round %d/%d: %d empty programs", trial+1, trials*2, k)
		var links []link.Link
		var progs []*ebpf.Program
		var err error
		for range k {
			var p *ebpf.Program
			if p, err = emptyTracing(); err != nil {
				break
			}
			progs = append(progs, p)
			var l link.Link
			if l, err = link.AttachTracing(link.TracingOptions{Program: p}); err != nil {
				break
			}
			links = append(links, l)
		}
		var n int
		if err == nil {
			n, err = udpBlast(a, dst, 0, time.Second, cpu)
		}
		for _, l := range links {
			l.Close()
		}
		for _, p := range progs {
			p.Close()
		}
		if err != nil {
			return ProgRow{}, err
		}
		ns := 1e9 / float64(n)
		if k == 0 {
			without = append(without, ns)
		} else {
			with = append(with, ns)
		}
	}
	per := (median(with) - median(without)) / inSituDispatchProgs
	return ProgRow{Program: "reference", State: "tp_btf dispatch + empty run",
		Path: fmt.Sprintf("unpaced UDP a->b pinned to CPU %d: (ns/pkt with %d empty programs - without) / %d; without: %.0f ns/pkt",
			cpu, inSituDispatchProgs, inSituDispatchProgs, median(without)),
		Method: "sender CPU", NsPerPacket: per, TrialNs: append(without, with...),
		Verified: fmt.Sprintf("%d rounds each, stats off", trials), Verdict: "ref"}, nil
}
