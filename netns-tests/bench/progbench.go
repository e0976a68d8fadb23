//go:build linux

package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/fabriclab/fabriclab/bpf"
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
	gib                = units.ByteSize(1 << 30)
	mib                = units.ByteSize(1 << 20)
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
	harness        *ebpf.Program
}

func (e *benchEnv) Close() {
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
	e := &benchEnv{repeat: repeat, trials: trials, pkt: craftPacket()}
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
	e.harness, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "bench_harness", Type: ebpf.SchedCLS, License: "Dual BSD/GPL", Instructions: insns,
	})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load harness: %+v", ve)
		}
		return nil, fmt.Errorf("load harness: %w", err)
	}
	return e, nil
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
	// check verifies from the counters that every run took path.
	check func(d delta) (string, error)
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

func wred(minTh, maxTh, limit units.ByteSize, maxP float64) qdisc.ClassConfig {
	return qdisc.ClassConfig{Name: "roce", ECN: qdisc.ECNWRED, MinThBytes: minTh, MaxThBytes: maxTh, LimitBytes: limit, MaxP: maxP}
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
			program: "port_dequeue", state: "stamped packet",
			path: "valid stamp: clear it, backlog -= len, sojourn histogram (stamped each run)", prog: dequeueProg,
			backlog: 1 << 40, harness: true,
			check: func(d delta) (string, error) {
				if d.dequeued == 0 || d.unstamped != 0 {
					return "", fmt.Errorf("stamped path not taken: %d dequeued, %d unstamped", d.dequeued, d.unstamped)
				}
				return fmt.Sprintf("%s runs, all stamped", si(d.dequeued)), nil
			},
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
	var emptyNs []float64
	for range trials {
		d, ret, err := e.bench(e.empty, nil)
		if err != nil {
			return nil, fmt.Errorf("empty program: %w", err)
		}
		if ret != 0 {
			return nil, fmt.Errorf("empty program returned %d", ret)
		}
		emptyNs = append(emptyNs, float64(d.Nanoseconds()))
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
	var ktimeNs []float64
	for range trials {
		d, _, err := e.bench(ktime, nil)
		if err != nil {
			return nil, fmt.Errorf("ktime program: %w", err)
		}
		ktimeNs = append(ktimeNs, float64(d.Nanoseconds()))
	}
	rows = append(rows, ProgRow{Program: "reference", State: "bpf_ktime_get_ns", Path: "one clock read (part of every enqueue)",
		Method: "repeat", NsPerPacket: median(ktimeNs), NetNs: median(ktimeNs) - floor, TrialNs: ktimeNs, Verified: "returned 0", Verdict: "ref"})

	// Reference 3: the harness around the empty program (what harness-diff
	// rows subtract).
	if err := e.slot.Put(uint32(0), e.empty); err != nil {
		return nil, fmt.Errorf("fill prog array: %w", err)
	}
	var harnessNs []float64
	for range trials {
		d, ret, err := e.bench(e.harness, nil)
		if err != nil {
			return nil, fmt.Errorf("harness: %w", err)
		}
		if ret != 0 {
			return nil, fmt.Errorf("harness returned %d: tail call failed", ret)
		}
		harnessNs = append(harnessNs, float64(d.Nanoseconds()))
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
	return rows, nil
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

	var restoreErr error
	restore := func() {
		st := bpf.PortClassState{BacklogBytes: c.backlog, BacklogPackets: c.backlog / benchFrameLen}
		if err := o.ClassQueue.Put(uint32(qdisc.ClassRoCE), &st); err != nil {
			restoreErr = fmt.Errorf("set backlog: %w", err)
		}
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
		restore()
		if !c.harness {
			d, ret, err := e.bench(prog, restore)
			if err != nil {
				return ProgRow{}, err
			}
			if ret != 0 {
				return ProgRow{}, fmt.Errorf("returned %d, want TC_ACT_OK", ret)
			}
			trialNs = append(trialNs, float64(d.Nanoseconds()))
			continue
		}
		// Paired: the harness alone, then the harness with the program.
		if err := e.slot.Put(uint32(0), e.empty); err != nil {
			return ProgRow{}, err
		}
		d0, _, err := e.bench(e.harness, nil)
		if err != nil {
			return ProgRow{}, err
		}
		if err := e.slot.Put(uint32(0), prog); err != nil {
			return ProgRow{}, fmt.Errorf("put %s in prog array: %w", c.program, err)
		}
		d1, ret, err := e.bench(e.harness, restore)
		if err != nil {
			return ProgRow{}, err
		}
		if ret == harnessFallthrough {
			return ProgRow{}, errors.New("harness tail call into the program failed")
		}
		if ret != 0 {
			return ProgRow{}, fmt.Errorf("returned %d, want TC_ACT_OK", ret)
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
	verified, err := c.check(diff(before, after))
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
