//go:build linux

// Command experiment runs the testbed experiment of ECN♯ (seed 002 §2.3,
// §5.1–5.2; issue #3 §5) on a namespace dumbbell and compares step-Tail,
// step-AVG, CoDel, TCN and ECN♯ on the bottleneck port: queue, utilization,
// short-flow FCT, drops and marks. `make experiment` runs it; -help lists
// the flags.
//
// The privileged part (this file, lab.go, traffic.go) builds the lab, runs
// the traffic and samples the port; the numbers are made in the pure files
// (metrics.go, result.go, report.go, plot.go), which are unit-tested
// without root.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/dctcp"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/kernel"
	"github.com/fabriclab/fabriclab/netns-tests/internal/rocelab"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) (code int) {
	o, code := parseFlags(args, stdout, stderr)
	if o == nil {
		return code
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "experiment: needs root to create network namespaces, load eBPF and change qdiscs (sudo make experiment)")
		return exitFail
	}

	// Our own signal handling: stop the traffic, clean up, exit 130/143.
	ctx, cancel, interrupt := lab.CatchInterrupts(context.Background(), "experiment", "tearing down", stderr)
	defer cancel()
	defer interrupt.Stop()

	e := &experiment{o: o, out: stdout}
	// Deferred, so that a panic in this goroutine still tears the lab
	// down; goroutines of ours recover their panics into errors (group).
	defer func() {
		if cerr := e.cleanup(); cerr != nil {
			fmt.Fprintf(stderr, "experiment: cleanup: %v\n", cerr)
			if code == exitOK {
				code = exitFail
			}
		}
		if sig := interrupt.Signal(); sig != nil {
			code = lab.SignalExitCode(sig)
		}
	}()
	if err := e.run(ctx); err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(stderr, "experiment: %v\n", err)
		}
		return exitFail
	}
	return exitOK
}

// experiment is one run: the lab, the port, the servers in the receiver.
type experiment struct {
	o    *options
	out  io.Writer
	lab  *lab.Dumbbell
	port *qdisc.Port
	cfg  qdisc.Config
	srv  *servers
	// dctcp is DCTCP registered for this run (-cc dctcp); cc is the name
	// every socket sets with TCP_CONGESTION.
	dctcp *dctcp.Registration
	cc    string
	// roce is the agents of a -transport roce scheme run, roceInflight
	// their QPs' in-flight time on the fabric.
	roce         *rocelab.Hosts
	roceInflight time.Duration
}

func (e *experiment) printf(format string, a ...any) { fmt.Fprintf(e.out, format, a...) }

// cleanup stops the servers, detaches the port and removes the namespaces
// (which kills anything still running in them), then checks none is left.
func (e *experiment) cleanup() error {
	var errs []error
	if e.srv != nil {
		e.srv.close()
	}
	if err := e.stopRoCE(); err != nil {
		errs = append(errs, err)
	}
	if e.dctcp != nil {
		if err := e.dctcp.Close(); err != nil {
			errs = append(errs, fmt.Errorf("unregister %s: %w", e.dctcp.Name(), err))
		}
	}
	if e.port != nil {
		if err := e.port.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach port: %w", err))
		}
	}
	if e.lab != nil {
		id := e.lab.RunID()
		if err := e.lab.Close(); err != nil {
			errs = append(errs, fmt.Errorf("remove lab: %w", err))
		}
		if left, _ := lab.LiveNamespaces(id + "-"); len(left) > 0 {
			errs = append(errs, fmt.Errorf("namespaces left behind: %s (ip netns del them)", strings.Join(left, " ")))
		} else {
			e.printf("cleanup: port detached, namespaces %s-* removed\n", id)
		}
	}
	return errors.Join(errs...)
}

func (e *experiment) run(ctx context.Context) error {
	o := e.o
	rep := &Report{Time: time.Now().UTC(), Kernel: kernelRelease(), CPUs: runtime.NumCPU(), LoadStart: loadAvg()}
	if err := e.setup(ctx); err != nil {
		return err
	}
	rps, err := e.lab.SteerRx(ctx)
	if err != nil {
		return err
	}
	rep.RTT, err = e.measureRTT(ctx)
	if err != nil {
		return err
	}
	tune, err := tuneFrom(&rep.RTT, o.rate, o.lambda, o.pstLambdaFor())
	if err != nil {
		return err
	}
	rep.Tune = tune
	limit := o.limit
	if limit == 0 {
		limit = autoLimit(tune.KTailBytes)
		if o.transport == transportRoCE && o.incastRounds > 0 {
			// RoCE fabrics are lossless (PFC): the class holds an incast
			// round, whose queue pairs start at the line rate (DCQCN has
			// no slow start), on top of the long flows' queue.
			limit = max(limit, 4*tune.KTailBytes+units.ByteSize(o.incastFlows)*o.shortMaxBytes)
		}
	}
	rep.Setup = e.setupReport(limit, rps)
	list, err := schemes(o.schemeList(), tune, limit, o.sharp, o.transport == transportRoCE)
	if err != nil {
		return err
	}
	if o.transport == transportRoCE {
		// A QP keeps in flight what its Rc sends in a base RTT plus the
		// time K_tail takes to drain (the RoCE tests' InflightTime rule).
		e.roceInflight = fromUs(rep.RTT.PooledUs.P90) + time.Duration(float64(tune.KTailBytes)*8/float64(o.rate)*1e9)
	}
	renderParams(e.out, rep)

	// Every run replays its own seeded flows, the same for every scheme;
	// the schemes take turns within a run, so a drift of the machine
	// spreads over all of them.
	var failed []string
	total := o.runs * len(list)
	for run := 1; run <= o.runs; run++ {
		seed := o.seed + uint64(run-1)
		sizes, gaps := shortFlowSizes(seed, o.senders(), o.shortFlows, o.shortMinBytes, o.shortMaxBytes, o.shortGap)
		var incast [][]int
		if o.incastRounds > 0 {
			incast = incastSizes(seed, o.incastRounds, o.incastFlows, o.shortMinBytes, o.shortMaxBytes)
		}
		for i, s := range list {
			e.printf("[%d/%d] run %d %-9s %s: ", (run-1)*len(list)+i+1, total, run, s.Label, s.Params.describe(o.rate))
			r, err := e.runScheme(ctx, s, sizes, gaps, incast)
			if ctx.Err() != nil {
				e.printf(" interrupted\n")
				return ctx.Err()
			}
			if err != nil {
				e.printf("FAILED: %v\n", err)
				r = Result{Scheme: s, Describe: s.Params.describe(o.rate), Error: err.Error()}
				failed = append(failed, fmt.Sprintf("%s (run %d)", s.Label, run))
			} else {
				e.printf("%s\n", runLine(&r))
			}
			if r.HostLost != nil {
				e.printf("    %s\n", r.HostLost)
			}
			r.Run = run
			rep.Schemes = append(rep.Schemes, r)
		}
	}
	rep.LoadEnd = loadAvg()
	rep.DelayLinks = e.delayReports()
	rep.Summary = summarizeRuns(list, rep.Schemes, o.rate)
	rep.Goals = checkGoals(rep.Schemes, o.transport)
	rep.Notes = reportNotes(rep)

	e.printf("\n")
	renderTable(e.out, rep)
	renderFlows(e.out, rep)
	renderDelays(e.out, rep.DelayLinks)
	renderGoals(e.out, rep.Goals)
	for _, n := range rep.Notes {
		e.printf("note: %s\n", n)
	}
	files, err := writeOutputs(o.outDir, rep)
	if err != nil {
		return err
	}
	e.printf("wrote %s\n", strings.Join(files, ", "))
	if len(failed) > 0 {
		return fmt.Errorf("schemes failed: %s", strings.Join(failed, ", "))
	}
	for _, d := range rep.DelayLinks {
		if d.Error != "" {
			return fmt.Errorf("the delay link of %s broke: %s", d.Sender, d.Error)
		}
	}
	return nil
}

// delayReports reads the senders' delay links; the lateness is the
// fabric's (the wall's over -timescale), as the delays.
func (e *experiment) delayReports() []DelayReport {
	var out []DelayReport
	k := e.o.timescale
	for i, d := range e.lab.Delays {
		if d == nil {
			continue
		}
		st := d.Stats()
		r := DelayReport{
			Sender: e.lab.Senders[i].Name, DelayUs: us(e.o.delays[i]), Packets: st.Packets,
			Dropped: st.Dropped + st.TunDropped + st.KernelDropped + st.LostTunGone, MaxHeld: st.MaxHeld,
			LatenessMeanUs: us(k.Fabric(st.LatenessMean)), LatenessP99Us: us(k.Fabric(st.LatenessQuantile(0.99))), LatenessMaxUs: us(k.Fabric(st.LatenessMax)),
		}
		if err := d.Err(); err != nil {
			r.Error = err.Error()
		}
		out = append(out, r)
	}
	return out
}

// reportNotes are the caveats a reader of the numbers must know.
func reportNotes(r *Report) []string {
	notes := []string{fmt.Sprintf("load average %s at start, %s at end: the 2 cores may be shared with other work, so numbers vary between runs", orNA(r.LoadStart, "?"), orNA(r.LoadEnd, "?"))}
	var late, dropped []string
	for _, d := range r.DelayLinks {
		if d.LatenessP99Us > 0.1*d.DelayUs {
			late = append(late, fmt.Sprintf("%s p99 < %.0f µs, max %.0f µs", d.Sender, d.LatenessP99Us, d.LatenessMaxUs))
		}
		if d.Dropped > 0 {
			dropped = append(dropped, fmt.Sprintf("%s %d of %d", d.Sender, d.Dropped, d.Packets+d.Dropped))
		}
	}
	if len(late) > 0 {
		notes = append(notes, "the delay links released packets late ("+strings.Join(late, "; ")+"): base RTTs jitter by that much, which adds to FCT tails")
	}
	if len(dropped) > 0 {
		notes = append(notes, "the delay links dropped packets ("+strings.Join(dropped, "; ")+"): lower -rate")
	}
	for _, s := range r.Schemes {
		noECN, other := 0, 0
		for _, f := range s.Long {
			if !f.ECN {
				noECN++
			}
			if want := r.Setup.CongestionName; r.Setup.Transport != transportRoCE && f.Congestion != want {
				other++
			}
		}
		if noECN > 0 || other > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d long flows without ECN, %d not %s", s.Label, noECN, other, r.Setup.CongestionName))
		}
		if s.ShortFailed > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d short flows failed (timeout or error) and are not in the FCTs", s.Label, s.ShortFailed))
		}
	}
	return notes
}

// writeOutputs writes experiment.json and, if any scheme has the samples,
// queue.png and fct.png; it returns the files written.
func writeOutputs(dir string, r *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("-out %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return nil, fmt.Errorf("encode experiment.json: %w", err)
	}
	js := filepath.Join(dir, "experiment.json")
	if err := os.WriteFile(js, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	files := []string{js}
	if slices.ContainsFunc(r.Schemes, func(s Result) bool { return s.Error == "" && len(s.Series.MeanBytes) > 0 }) {
		png := filepath.Join(dir, "queue.png")
		if err := writePlot(png, r); err != nil {
			return files, err
		}
		files = append(files, png)
	}
	if slices.ContainsFunc(r.Schemes, func(s Result) bool { return s.Error == "" && len(s.ShortFCTsUs) > 0 }) {
		png := filepath.Join(dir, "fct.png")
		if err := writeFCTPlot(png, r); err != nil {
			return files, err
		}
		files = append(files, png)
	}
	return files, nil
}

// group runs goroutines and keeps the first error; a panic in one becomes
// an error and cancels the run instead of killing the process before the
// lab is torn down.
type group struct {
	wg     sync.WaitGroup
	cancel context.CancelFunc
	mu     struct {
		sync.Mutex
		err error
	}
}

func (g *group) Go(fn func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer func() {
			if v := recover(); v != nil {
				g.fail(fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
			}
		}()
		if err := fn(); err != nil {
			g.fail(err)
		}
	}()
}

func (g *group) fail(err error) {
	g.mu.Lock()
	if g.mu.err == nil {
		g.mu.err = err
	}
	g.mu.Unlock()
	if g.cancel != nil {
		g.cancel()
	}
}

// Wait waits for every goroutine and returns the first error.
func (g *group) Wait() error {
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.err
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
