//go:build linux

// Command wanexp is the WAN lab's experiment (issue 13 §5, seed 001): RoCEv2
// senders under DCQCN in one data centre, a receiver in another, IP-in-IP
// tunnel PEs across a WAN with 5 ms each way, and three ways to handle the
// WAN port's congestion — (a) RFC 6040 and one CE threshold, end-to-end
// DCQCN only; (b) two thresholds with the ingress PE cutting the tunnel's
// rate on the port's light CNPs; (c) two thresholds with the PE spreading
// the tunnel over a second core. `make wan-experiment` runs it; -help
// lists the flags.
//
// The privileged part (this file, run.go) builds the labs, runs the
// traffic and samples the ports; the numbers are made in the pure files
// (schemes.go, report.go, plot.go), which are unit-tested without root.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/kernel"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type experiment struct {
	o   *options
	out io.Writer
}

func (x *experiment) printf(format string, a ...any) { fmt.Fprintf(x.out, format, a...) }

// Report is everything wanexp.json holds.
type Report struct {
	Time      time.Time `json:"time"`
	Kernel    string    `json:"kernel"`
	CPUs      int       `json:"cpus"`
	LoadStart string    `json:"load_start"`
	LoadEnd   string    `json:"load_end"`
	Setup     Setup     `json:"setup"`
	Schemes   []Result  `json:"runs"`
	Summary   []Summary `json:"summary"`
	Goals     []Goal    `json:"goals"`
}

// Setup is the experiment's settings.
type Setup struct {
	Senders       int      `json:"senders"`
	CoreRateMbps  float64  `json:"core_rate_mbps"`
	PERateMbps    float64  `json:"pe_rate_mbps"`
	OneWayDelayMs float64  `json:"one_way_delay_ms"`
	DurationS     float64  `json:"duration_s"`
	Runs          int      `json:"runs"`
	T1            uint64   `json:"t1_bytes"`
	T2            uint64   `json:"t2_bytes"`
	T2Max         uint64   `json:"t2_max_bytes"`
	ShortBytes    uint64   `json:"short_bytes"`
	ShortEveryMs  float64  `json:"short_every_ms"`
	SampleUs      float64  `json:"sample_us"`
	SenderRTTMs   float64  `json:"sender_dcqcn_timers_ms"`
	InflightMs    float64  `json:"qp_inflight_ms"`
	Schemes       []string `json:"schemes"`
	Describe      []string `json:"describe"`
	// Timescale slowed the fabric (units.Timescale): the lab ran every
	// rate over it and every time times it; the report is the fabric's.
	Timescale float64 `json:"timescale"`
}

func run(args []string, stdout, stderr io.Writer) int {
	o, code := parseFlags(args, stdout, stderr)
	if o == nil {
		return code
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "wanexp: needs root to create network namespaces, load eBPF and change qdiscs (sudo make wan-experiment)")
		return exitFail
	}
	ctx, cancel, interrupt := lab.CatchInterrupts(context.Background(), "wanexp", "tearing down", stderr)
	defer cancel()
	defer interrupt.Stop()
	x := &experiment{o: o, out: stdout}
	err := x.run(ctx)
	if sig := interrupt.Signal(); sig != nil {
		return lab.SignalExitCode(sig)
	}
	if err != nil {
		fmt.Fprintf(stderr, "wanexp: %v\n", err)
		return exitFail
	}
	return exitOK
}

func (x *experiment) run(ctx context.Context) error {
	o := x.o
	setup := o.setup()
	var list []Scheme
	for _, n := range o.schemes {
		sc, err := setup.scheme(n)
		if err != nil {
			return err
		}
		list = append(list, sc)
	}
	rep := &Report{Time: time.Now().UTC(), Kernel: kernelRelease(), CPUs: runtime.NumCPU(), LoadStart: loadAvg(),
		Setup: Setup{Senders: o.senders, CoreRateMbps: mbps(float64(o.rate)), PERateMbps: mbps(float64(o.peRate)),
			OneWayDelayMs: msOf(o.delay), DurationS: o.duration.Seconds(), Runs: o.runs,
			T1: uint64(o.t1), T2: uint64(o.t2), T2Max: uint64(o.t2Max), ShortBytes: uint64(o.shortBytes),
			ShortEveryMs: msOf(o.shortEvery), SampleUs: float64(o.sampleEvery) / 1e3, SenderRTTMs: msOf(o.senderRTT),
			InflightMs: msOf(o.inflight()), Schemes: o.schemes, Timescale: o.timescale.K()}}
	x.printf("WAN: %d senders at %s each -> PE1 => %v each way => core %s => PE2 -> receiver; thresholds t1 %s, t2 %s, t2-max %s\n",
		o.senders, o.rate, o.delay, o.rate, o.t1, o.t2, o.t2Max)
	x.printf("senders: DCQCN lab profile, timers at %v, in flight <= Rc x %v; short WRITEs of %s every %v from s1; %v per run\n",
		o.senderRTT, o.inflight(), o.shortBytes, o.shortEvery, o.duration)
	if k := o.timescale; k.K() != 1 {
		x.printf("scale: the fabric runs %sx slower (-timescale): the core at %s, every time %sx as long, bytes as they are; the report is the fabric's\n",
			k, k.Rate(o.rate), k)
	}
	for _, sc := range list {
		d := sc.describe()
		rep.Setup.Describe = append(rep.Setup.Describe, d)
		x.printf("  %-9s %s\n", sc.Name, d)
	}
	var failed []string
	total := o.runs * len(list)
	for run := 1; run <= o.runs; run++ {
		for i, sc := range list {
			x.printf("[%d/%d] run %d %-8s: ", (run-1)*len(list)+i+1, total, run, sc.Name)
			r, err := x.runScheme(ctx, sc, run)
			if ctx.Err() != nil {
				x.printf("interrupted\n")
				return ctx.Err()
			}
			if err != nil {
				x.printf("FAILED: %v\n", err)
				r = Result{Scheme: sc.Name, Label: sc.Label, Run: run, Error: err.Error()}
				failed = append(failed, fmt.Sprintf("%s (run %d)", sc.Name, run))
			} else {
				x.printf("WAN queue p50 %.1f p99 %.1f KB, util %.1f%%, lost %d (hosts %d), resent %d, PE reaction %s, e2e %s, FCT p99 %.0f µs\n",
					r.CoreQueueKB.P50, r.CoreQueueKB.P99, r.CoreUtil, r.Drops.Lost(), r.Drops.HostLost(), r.Drops.Retransmits,
					ptrMs(r.PEReactionMs), ptrMs(r.E2EReactionMs), r.ShortFCTUs.P99)
			}
			if l := r.hostLine(); l != "" {
				x.printf("    %s\n", l)
			}
			rep.Schemes = append(rep.Schemes, r)
		}
	}
	rep.LoadEnd = loadAvg()
	rep.Summary = summarize(o.schemes, rep.Schemes)
	rep.Goals = checkGoals(rep.Schemes, o.delay)
	x.printf("\n")
	renderTable(x.out, rep.Summary)
	x.printf("\n")
	renderGoals(x.out, rep.Goals)
	x.printf("load average %s at start, %s at end\n", rep.LoadStart, rep.LoadEnd)
	files, err := writeOutputs(o.outDir, rep)
	if err != nil {
		return err
	}
	x.printf("wrote %s\n", strings.Join(files, ", "))
	if len(failed) > 0 {
		return fmt.Errorf("runs failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

func ptrMs(p *float64) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf("%.1f ms", *p)
}

func mbps(bps float64) float64     { return bps / 1e6 }
func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writeOutputs writes wanexp.json and the plots; it returns the files.
func writeOutputs(dir string, r *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("-out %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return nil, fmt.Errorf("encode wanexp.json: %w", err)
	}
	js := filepath.Join(dir, "wanexp.json")
	if err := os.WriteFile(js, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	files := []string{js}
	q := filepath.Join(dir, "wan-queue.png")
	if err := writeQueuePlot(q, r); err != nil {
		return files, err
	}
	files = append(files, q)
	f := filepath.Join(dir, "wan-fct.png")
	if err := writeFCTPlot(f, r); err != nil {
		return files, err
	}
	return append(files, f), nil
}

func kernelRelease() string {
	rel, err := kernel.Release()
	if err != nil {
		return "unknown"
	}
	return rel
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
