//go:build linux

package labfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
)

// exampleRun caps each example's timeline: four of them stay well within
// a minute.
const exampleRun = 2 * time.Second

// exampleRuns are the examples that run longer: the WAN's DCQCN, with its
// timers at a 10 ms RTT, takes a second to settle; ecnsharp.yaml's two
// queues part only after the flows' start, which both schemes mark
// alike (measured, step-tail against ecnsharp, mean wait ratio: in 2 s
// quiet 0.64–0.73, and 0.80 once in CI with 9.7 % host-lost; in 4 s
// quiet 0.51–0.68 with up to 11 % lost, beside stress-ng --cpu 2
// --cpu-load 50 0.70–0.74 with 14–19 % lost).
var exampleRuns = map[string]time.Duration{"wan-experiment.yaml": 4 * time.Second, "ecnsharp.yaml": 4 * time.Second}

// TestExamplesRun runs every file of examples/ in namespaces (but the
// htsim-* side-by-side labs, TestHtsimExamples', and the collectives,
// TestCollectives'), each in exampleRun, and checks the numbers: every
// flow delivered without
// failing, goodput within sane bounds of its bottleneck, the ports'
// counters adding up at rest (enqueued = dequeued + dropped + backlog),
// the marking ports marking under congestion, and nothing of the run
// left behind (namespaces, ports, PEs, pins).
func TestExamplesRun(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, "6.6") // TCX: delay links and PEs
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		if strings.HasPrefix(name, htsimExamples) {
			continue // TestHtsimExamples: their comparisons take minutes
		}
		if isCollectiveExample(name) {
			continue // TestCollectives holds their matrices to numbers
		}
		t.Run(name, func(t *testing.T) {
			f, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			before := pinned(t)
			out := t.TempDir()
			if len(f.Variants) > 0 {
				runComparison(t, name, f, out)
				if after := pinned(t); !slices.Equal(before, after) {
					t.Errorf("pins before the runs %v, after %v", before, after)
				}
				return
			}
			res, err := Run(context.Background(), f, RunOptions{Duration: exampleRun, OutDir: out})
			if res == nil {
				t.Fatalf("Run: %v", err)
			}
			for _, fr := range res.Flows {
				fr.Report = nil // keep the log short
				t.Logf("%s: %d bytes in %.2fs, %.1f Mbit/s, FCT %.3fs (%.2f × ideal), CNPs %d/%d, ECN echoes %d, retransmits %d, %s %s",
					fr.Name, fr.Bytes, fr.Seconds, fr.GoodputBps/1e6, fr.FCTS, fr.FCTRatio, fr.CNPSent, fr.CNPHandled, fr.ECNEchoes, fr.Retransmits, fr.State, fr.Error)
			}
			for _, p := range res.Ports {
				t.Logf("port %s: %d packets, %.2f%% marked, %d dropped, p99 sojourn < %.0f µs, max backlog %d B, queue p50 %.0f B p99 %.0f B (%d samples)",
					p.Name, p.EnqueuedPackets, 100*p.MarkedFraction, p.DroppedPackets, p.SojournP99US, p.MaxBacklogBytes, p.QueueP50Bytes, p.QueueP99Bytes, p.QueueSamples)
				checkPortQueue(t, &p)
			}
			if err != nil {
				t.Errorf("Run: %v", err)
			}
			for _, g := range res.Goals { // findings at this length, not checks
				t.Logf("goal %s: evaluated %v, met %v: %s", g.Goal, g.Evaluated, g.Met, g.Text)
			}
			judgeExample(t, name, f, res, func() *Result {
				res, _ := Run(context.Background(), f, RunOptions{Duration: exampleRun, OutDir: t.TempDir()})
				return res
			})
			noNamespacesLeft(t, res.RunID)
			if after := pinned(t); !slices.Equal(before, after) {
				t.Errorf("pins before the run %v, after %v", before, after)
			}
			want := []string{"result.json", "goodput.png", "ports.png"}
			if res.DCQCN != nil {
				want = append(want, "dcqcn.png", "dcqcn.csv")
			}
			for _, want := range want {
				if _, err := os.Stat(filepath.Join(out, want)); err != nil {
					t.Errorf("output: %v", err)
				}
			}
		})
	}
}

// checkDCQCNTrace checks a run's DCQCN trace: every rocev2 flow traced,
// each with Rc within (0, its line rate] and α within [0, 1] while it
// ran, a reading every few ms.
func checkDCQCNTrace(t checker, res *Result) {
	t.Helper()
	tr := res.DCQCN
	if tr == nil || len(tr.Flows) != len(res.Flows) || len(tr.Samples) < 100 {
		t.Errorf("DCQCN trace %v: want every flow, every 3 ms", tr)
		return
	}
	for i, name := range tr.Flows {
		ran := 0
		for _, s := range tr.Samples {
			if s.RcBps[i] == 0 {
				continue
			}
			ran++
			if s.RcBps[i] > 10_000_000_000 || s.Alpha[i] < 0 || s.Alpha[i] > 1 {
				t.Errorf("%s at t=%.3fs: Rc %d b/s, α %v", name, s.T, s.RcBps[i], s.Alpha[i])
				return
			}
		}
		if ran < len(tr.Samples)/4 {
			t.Errorf("%s: Rc in %d of %d readings, want a quarter at least", name, ran, len(tr.Samples))
		}
	}
}

// runComparison runs a file with variants, each once in exampleRun, and
// checks every run and the comparison.
func runComparison(t *testing.T, name string, f *File, out string) {
	full := map[string]*Result{}
	d := exampleRun
	if e, ok := exampleRuns[name]; ok {
		d = e
	}
	c, err := Compare(context.Background(), f, CompareOptions{RunOptions: RunOptions{Duration: d, OutDir: out}, Runs: 1,
		OnRun: func(v string, _ int, res *Result, _ error) { full[v] = res }})
	if c == nil {
		t.Fatalf("Compare: %v", err)
	}
	if err != nil && !errors.Is(err, ErrFlowsFailed) {
		t.Errorf("Compare: %v", err)
	} else if err != nil {
		t.Logf("Compare: %v (checkExample judges the failed flows)", err)
	}
	if len(c.RunResults) != len(f.Variants) {
		t.Fatalf("%d runs for %d variants", len(c.RunResults), len(f.Variants))
	}
	// Goals are findings, not checks: each is evaluated, met or not.
	if len(c.Goals) != len(f.Goals) {
		t.Errorf("%d goals checked of the file's %d", len(c.Goals), len(f.Goals))
	}
	for _, g := range c.Goals {
		t.Logf("goal %s: evaluated %v, met %v: %s", g.Goal, g.Evaluated, g.Met, g.Text)
		if !g.Evaluated {
			t.Errorf("goal %s not evaluated: %s", g.Goal, g.Text)
		}
	}
	for _, rs := range c.RunResults {
		res := full[rs.Variant]
		if res == nil {
			t.Errorf("%s: no result: %s", rs.Variant, rs.Error)
			continue
		}
		res.Variant = rs.Variant
		for _, fr := range res.Flows {
			line := fmt.Sprintf("%s %s: %d bytes, %.1f Mbit/s, retransmits %d, CE echoed %d, %s %s", rs.Variant, fr.Name, fr.Bytes, fr.GoodputBps/1e6, fr.Retransmits, fr.DeliveredCE, fr.State, fr.Error)
			if s := fr.Series; s != nil {
				line += fmt.Sprintf(", %d/%d instances, FCT/ideal p50 %.2f p99 %.2f", s.Completed, s.Count, s.FCTRatio.P50, s.FCTRatio.P99)
			}
			t.Log(line)
		}
		for _, p := range res.Ports {
			t.Logf("%s port %s: util %.1f%%, mean wait %.0f µs, %.2f%% marked, %d dropped, queue p99 %.0f B", rs.Variant, p.Name, 100*p.Utilization, p.MeanSojournUS, 100*p.MarkedFraction, p.DroppedPackets, p.QueueP99Bytes)
			checkPortQueue(t, &p)
		}
		checkTuned(t, f, rs.Variant, res)
		t.Run(rs.Variant, func(t *testing.T) {
			judgeExample(t, name, f, res, func() *Result {
				res, _ := Run(context.Background(), f, RunOptions{Variant: rs.Variant, Duration: d, OutDir: t.TempDir()})
				if res != nil {
					res.Variant = rs.Variant
				}
				return res
			})
		})
		noNamespacesLeft(t, rs.RunID)
		for _, want := range []string{"result.json", "ports.png"} {
			if _, err := os.Stat(filepath.Join(rs.Dir, want)); err != nil {
				t.Errorf("output: %v", err)
			}
		}
	}
	want := []string{"result.json"}
	if slices.ContainsFunc(f.Flows, func(fl Flow) bool { return fl.Count > 1 }) {
		want = append(want, "fct.png") // the series' FCT/ideal
	}
	for _, w := range want {
		if _, err := os.Stat(filepath.Join(out, w)); err != nil {
			t.Errorf("output: %v", err)
		}
	}
	var buf bytes.Buffer
	c.WriteSummary(&buf)
	t.Log(buf.String())
	wait, lost := map[string]float64{}, map[string]float64{}
	for _, v := range c.Summary {
		if len(v.Ports) > 0 {
			wait[v.Name] = v.Ports[0].MeanSojournUS.Mean
		}
		lost[v.Name] = v.HostLostShare.Max
	}
	switch name {
	case "ecnsharp.yaml":
		// Seed 002 §5.2: ECN♯ keeps the queue well below step-Tail's,
		// whose K is the p90 RTT's (measured: 940 µs against 2.4 ms).
		// One pair's ratio spreads (0.43–0.70 quiet, 0.86 once in CI):
		// a pair that misses runs again and the bound judges the mean
		// waits of every pair the host did not starve, up to
		// labtest.StarvedAttempts pairs, each logged. A starved pair (host-lost
		// over waitCompareBudget) moves both queues and is not pooled.
		var pooledE, pooledS float64
		pooled := 0
		for attempt := 1; ; attempt++ {
			starved := starvedVariants(c, waitCompareBudget, "step-tail", "ecnsharp")
			t.Logf("run %d: mean wait: ECN♯ %.0f µs, step-Tail %.0f µs; host-lost ECN♯ %.1f %%, step-Tail %.1f %% (pooled under %.0f %%)", attempt, wait["ecnsharp"], wait["step-tail"], 100*lost["ecnsharp"], 100*lost["step-tail"], 100*waitCompareBudget)
			if starved == "" {
				pooled++
				pooledE += wait["ecnsharp"]
				pooledS += wait["step-tail"]
			} else {
				t.Logf("run %d: the host starved %s: not pooled", attempt, starved)
			}
			msg := "no pair pooled"
			if pooled > 0 {
				msg = fmt.Sprintf("mean wait over %d pair(s): ECN♯ %.0f µs, step-Tail %.0f µs; want ECN♯ below 0.8 × step-Tail's", pooled, pooledE/float64(pooled), pooledS/float64(pooled))
			}
			if pooled > 0 && pooledE < 0.8*pooledS {
				t.Log(msg)
				break
			}
			if attempt == labtest.StarvedAttempts {
				if pooled == 0 {
					t.Logf("HOST-DISTORTED, not judged: the host starved each of %d pairs", attempt)
				} else {
					t.Error(msg)
				}
				break
			}
			t.Logf("%s: running both again", msg)
			pair, err := Compare(context.Background(), f, CompareOptions{RunOptions: RunOptions{Duration: d, OutDir: t.TempDir()}, Runs: 1,
				Variants: []string{"step-tail", "ecnsharp"}})
			if pair == nil {
				t.Fatalf("Compare: %v", err)
			}
			for _, v := range pair.Summary {
				if len(v.Ports) > 0 {
					wait[v.Name] = v.Ports[0].MeanSojournUS.Mean
				}
				lost[v.Name] = v.HostLostShare.Max
			}
			c = pair
		}
	case "wan-experiment.yaml":
		// Issue 13 §5: the PE's rate cut moves the queue off the WAN port
		// (measured: 0.9 ms against 5.4 ms of mean wait).
		if !(wait["pe-rate"] < 0.5*wait["rfc6040"]) {
			t.Errorf("WAN port's mean wait: pe-rate %.0f µs, rfc6040 %.0f µs; want pe-rate below half", wait["pe-rate"], wait["rfc6040"])
		}
	case "uet-incast-deep.yaml", "uet-incast-trim.yaml", "uet-incast-trim-16.yaml":
		// Each variant's incast summary (its numbers: checkExample and
		// TestUETIncastDeepTimescale).
		for _, v := range c.Summary {
			if len(v.Incasts) != 1 || v.Incasts[0].TailRatio.N != 1 {
				t.Errorf("%s: incasts %+v: want one, with its tail", v.Name, v.Incasts)
			}
		}
	default:
		t.Errorf("no numbers to check for the comparison %s: add them here", name)
	}
}

// waitCompareBudget is the host-lost share above which ecnsharp.yaml's
// two queues are not compared. The relays' delay links (user space)
// hold the TCP flows' packets late in every run, so the port loses
// some of its time even on a quiet machine, and a starved port's
// step-Tail queue sinks below its K while ECN♯'s holds its target.
// Measured (fabriclab run ecnsharp.yaml -runs 2 -variants
// step-tail,ecnsharp): quiet 3.9–7.4 % lost, wait ratio 0.60–0.62;
// beside stress-ng --cpu 2 --cpu-load 50, 13–19 % lost, ratio 0.74
// (0.70–0.81 in earlier runs).
const waitCompareBudget = 0.10

// starvedVariants names the variants of c among names with a run the
// host took more than budget of, with their shares ("" if none).
func starvedVariants(c *Comparison, budget float64, names ...string) string {
	var out []string
	for _, v := range c.Summary {
		if slices.Contains(names, v.Name) && v.HostLostShare.N > 0 && v.HostLostShare.Max > budget {
			out = append(out, fmt.Sprintf("%s (%.1f %%)", v.Name, 100*v.HostLostShare.Mean))
		}
	}
	return strings.Join(out, ", ")
}

// checker is what checkExample needs of a test: a *testing.T, or an
// exampleChecks that collects one run's failures.
type checker interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// exampleChecks is a test whose Errorf collects one run's host-sensitive
// failures for labtest.RetryStarved.
type exampleChecks struct {
	*testing.T
	c *labtest.Checks
}

func (c exampleChecks) Errorf(format string, args ...any) { c.c.Errorf(format, args...) }

// hostReport is res's host-lost report, nil when none was measured.
func hostReport(res *Result) *hostlost.Report {
	if res == nil || res.HostLost == nil {
		return nil
	}
	return &res.HostLost.Report
}

// judgeExample checks res under labtest.RetryStarved: a run the host
// starved whose checks failed runs again (rerun).
func judgeExample(t *testing.T, name string, f *File, res *Result, rerun func() *Result) {
	t.Helper()
	labtest.RetryStarved(t, func(attempt int, c *labtest.Checks) *hostlost.Report {
		if attempt > 1 {
			if res = rerun(); res == nil {
				t.Fatalf("run %d: no result", attempt)
			}
		}
		checkExample(exampleChecks{T: t, c: c}, name, f, res)
		return hostReport(res)
	})
}

// checkExample holds each example to its numbers.
func checkExample(t checker, name string, f *File, res *Result) {
	t.Helper()
	var total float64
	for i, fr := range res.Flows {
		fp := &f.Plan().Flows[i]
		// A tcp series may lose one instance in fifty to a connection
		// reset (once in about 40 runs of 1,050, cause not found): it is
		// counted and out of the FCTs, as make experiment does.
		s := fr.Series
		tolerated := fp.TCP != nil && s != nil && s.NotRun == 0 && s.Failed <= max(1, s.Count/50)
		switch {
		case fr.Bytes == 0 || (fr.Error != "" && !tolerated):
			t.Errorf("%s: %d bytes, error %q", fr.Name, fr.Bytes, fr.Error)
		case fr.Error != "":
			t.Logf("%s: %s (tolerated: a tcp series)", fr.Name, fr.Error)
		}
		// Goodput is payload: never above the sender's line rate (a tcp
		// flow's, the bottleneck's).
		line := fp.Client.LineRate
		if fp.TCP != nil {
			line = fp.Bottleneck
		}
		if fr.GoodputBps > 1.02*float64(line) {
			t.Errorf("%s: %.1f Mbit/s above its line rate %s", fr.Name, fr.GoodputBps/1e6, line)
		}
		if s != nil && !tolerated && (s.Completed != s.Count || s.Failed != 0) {
			t.Errorf("%s: %d of %d instances completed, %d failed", fr.Name, s.Completed, s.Count, s.Failed)
		}
		if fp.TCP != nil && fr.NoECN > 0 {
			t.Errorf("%s: %d connections without ECN", fr.Name, fr.NoECN)
		}
		if fr.SizeBytes > 0 && fr.Bytes < fr.SizeBytes {
			t.Errorf("%s: %d of %d bytes", fr.Name, fr.Bytes, fr.SizeBytes)
		}
		total += fr.GoodputBps
	}
	for _, p := range res.Ports {
		if p.Error != "" || p.InvariantError != "" {
			t.Errorf("port %s: %s%s", p.Name, p.Error, p.InvariantError)
		}
		if p.BacklogPackets != 0 {
			t.Errorf("port %s: %d packets still queued at rest", p.Name, p.BacklogPackets)
		}
	}
	port := func(n string) PortResult {
		for _, p := range res.Ports {
			if p.Name == n {
				return p
			}
		}
		t.Fatalf("no port %s", n)
		return PortResult{}
	}
	const mbit = 1e6
	switch name {
	case "dumbbell.yaml":
		// Two flows through 200 Mbit/s: each gets a share, neither more
		// than the port; the WRED port marks.
		for _, fr := range res.Flows {
			if fr.GoodputBps < 30*mbit || fr.GoodputBps > 200*mbit {
				t.Errorf("%s: %.1f Mbit/s, want 30..200", fr.Name, fr.GoodputBps/mbit)
			}
			if fr.CNPHandled == 0 {
				t.Errorf("%s: no CNP handled under congestion", fr.Name)
			}
		}
		if p := port("sw1:r1"); p.CEMarked == 0 {
			t.Errorf("sw1:r1 marked nothing")
		}
		checkLiveView(t, res)
	case "demo.yaml":
		// The demo's three senders through 500 Mbit/s: each gets a share
		// and reacts to CNPs; the WRED port marks and, with DCQCN, holds
		// the queue below its 2 MB without a drop.
		for _, fr := range res.Flows {
			if fr.GoodputBps < 40*mbit || fr.GoodputBps > 500*mbit {
				t.Errorf("%s: %.1f Mbit/s, want 40..500", fr.Name, fr.GoodputBps/mbit)
			}
			if fr.CNPHandled == 0 {
				t.Errorf("%s: no CNP handled under congestion", fr.Name)
			}
		}
		if p := port("sw:r"); p.CEMarked == 0 || p.DroppedPackets != 0 {
			t.Errorf("sw:r: %d marks, %d drops; want marks and no drop", p.CEMarked, p.DroppedPackets)
		}
		// Lossless (PPFC): the senders obey a stop from its arrival on
		// their device (bpf/rp.c), and what they handed the kernel but
		// the switch has not yet received stays within their host queue
		// (host_queue, host/linkq), so a host stall cannot carry a burst
		// past the port's xoff. Before both, 4 of 10 20 s demo runs lost
		// 187-499 packets; with them, 7 of 7 quiet runs lost none, one
		// under 4.3 s of CPU steal lost 242. A run the host starved gets
		// another (judgeExample).
		if n := res.Lost(); n != 0 {
			msg := fmt.Sprintf("%d packets lost in a lossless demo (%s)", n, strings.Join(res.LostBy(), "; "))
			if h := res.HostLost; h != nil {
				msg += fmt.Sprintf(" (the senders' feedback waited up to %v, host-lost %.1f %%)", h.FeedbackAgeMax, 100*h.Share)
			}
			t.Errorf("%s", msg)
		}
		for _, hq := range res.HostQueues {
			if hq.WrittenOff != 0 {
				t.Errorf("host queue of %s written off %d times: a packet the kernel dropped between host and switch", hq.Host, hq.WrittenOff)
			}
		}
		if len(res.HostQueues) != 4 {
			t.Errorf("host queues %+v: want the four hosts'", res.HostQueues)
		}
		// The marking curve follows WRED's (a bin may miss by chance:
		// each is a 3σ test).
		if p := port("sw:r"); len(p.Curves) != 1 || p.Curves[0].Class != 3 || p.Curves[0].Matched < p.Curves[0].Judged-1 {
			t.Errorf("sw:r marking curves %+v: want class 3's, within WRED's in all bins but one", p.Curves)
		}
		checkDCQCNTrace(t, res)
	case "demo-tcp.yaml":
		// Cubic with classic ECN through the demo's WRED port: each
		// connection gets a share, the port marks and drops nothing.
		for _, fr := range res.Flows {
			if fr.GoodputBps < 40*mbit || fr.GoodputBps > 500*mbit || fr.DeliveredCE == 0 {
				t.Errorf("%s: %.1f Mbit/s, %d CE echoed; want 40..500 and echoes", fr.Name, fr.GoodputBps/mbit, fr.DeliveredCE)
			}
		}
		if p := port("sw:r"); p.CEMarked == 0 || p.DroppedPackets != 0 {
			t.Errorf("sw:r: %d marks, %d drops; want marks and no drop", p.CEMarked, p.DroppedPackets)
		}
	case "demo-uet.yaml":
		// Three UET senders at once into a 125 Mbit/s port (timescale 4)
		// that holds one BDP: each gets a share, verified; the port marks
		// and trims instead of dropping.
		for _, fr := range res.Flows {
			if fr.GoodputBps < 10*mbit || fr.GoodputBps > 125*mbit {
				t.Errorf("%s: %.1f Mbit/s, want 10..125", fr.Name, fr.GoodputBps/mbit)
			}
		}
		if p := port("sw:r"); p.CEMarked == 0 || p.DroppedPackets != 0 {
			t.Errorf("sw:r: %d marks, %d drops; want marks and no drop (trimming replaces loss)", p.CEMarked, p.DroppedPackets)
		}
		// WRED from 0.2 to 0.8 BDP, p 1: the curve followed in all its
		// bins but two (each a 3σ test, 32 of them in one BDP).
		if p := port("sw:r"); len(p.Curves) != 1 || p.Curves[0].Matched < p.Curves[0].Judged-2 {
			t.Errorf("sw:r marking curves %+v: want class 3's, within WRED's in all bins but two", p.Curves)
		}
	case "incast.yaml":
		// 16 MB through 200 Mbit/s: the tail within 2 × the ideal of all
		// of it, nothing dropped in the deep buffer, marks.
		var tail float64
		for _, fr := range res.Flows {
			tail = max(tail, fr.FCTS)
		}
		ideal := float64(4*4<<20*8) / (200 * mbit)
		if tail == 0 || tail > 2*ideal {
			t.Errorf("tail FCT %.3fs, want ≤ 2 × %.3fs", tail, ideal)
		}
		if p := port("sw1:r1"); p.CEMarked == 0 || p.DroppedPackets != 0 {
			t.Errorf("sw1:r1: %d marks, %d drops; want marks and no drop", p.CEMarked, p.DroppedPackets)
		}
	case "multipath.yaml":
		// Sprayed over two 100 Mbit/s spines: well above one path's rate.
		if total < 130*mbit || total > 204*mbit {
			t.Errorf("%.1f Mbit/s over two 100 Mbit/s paths, want 130..204", total/mbit)
		}
		for _, n := range []string{"sp1:leaf2", "sp2:leaf2"} {
			if p := port(n); p.DequeuedPackets < 1000 {
				t.Errorf("%s carried %d packets: the spray missed it", n, p.DequeuedPackets)
			}
		}
	case "wan.yaml":
		// Two 16 MB flows across the tunnel and 3 ms: both done, together
		// at most the core port's rate.
		if total < 60*mbit {
			t.Errorf("%.1f Mbit/s in all across the WAN, want ≥ 60", total/mbit)
		}
		for _, fr := range res.Flows {
			if fr.GoodputBps > 200*mbit {
				t.Errorf("%s: %.1f Mbit/s above the core port's 200", fr.Name, fr.GoodputBps/mbit)
			}
		}
	case "wan-experiment.yaml":
		// RoCEv2 across the WAN is lossless: no drop at a port, in a host
		// queue or a delay link, nothing resent but a reroute's
		// reordering (and the ACK timeouts it can cause); the WAN port busy.
		for _, p := range res.Ports {
			if p.DroppedPackets != 0 || p.HostDroppedPackets != 0 || p.QdiscDroppedPackets != 0 {
				t.Errorf("port %s: %d dropped, %d in the host queue, %d by the qdisc", p.Name, p.DroppedPackets, p.HostDroppedPackets, p.QdiscDroppedPackets)
			}
		}
		for _, sv := range res.Servers {
			// Under reroute a reordered packet can arrive after its
			// short flow's QP is gone: counted as unknown_qp, not lost.
			if res.Variant == "reroute" {
				sv.UnknownQP = 0
			}
			if sv.Dropped() != 0 {
				t.Errorf("the rocev2 server on %s dropped: %+v", sv.Node, sv)
			}
		}
		for _, h := range res.HostDrops {
			if h.UDPRcvbufErrors != 0 {
				t.Errorf("host %s: %d datagrams dropped at its UDP receive buffer", h.Node, h.UDPRcvbufErrors)
			}
		}
		if res.SoftnetDrops != 0 {
			t.Errorf("%d packets dropped from the per-CPU input backlogs", res.SoftnetDrops)
		}
		for _, l := range res.Links {
			for _, d := range l.Delays {
				t.Logf("delay link %s: %d packets, %d dropped, max held %d, late p99 < %.0f µs, max %.0f µs", d.Dev, d.Packets, d.Dropped, d.MaxHeld, d.LatenessP99US, d.LatenessMaxUS)
				if d.Dropped != 0 {
					t.Errorf("delay link %s dropped %d packets", d.Dev, d.Dropped)
				}
			}
		}
		for _, fr := range res.Flows {
			// Moving a QP between paths reorders it (RoCE's go-back-N
			// resends on an out-of-sequence packet): a reroute's resends
			// are that, with nothing lost and no ACK timeout.
			// A go-back-N whose resent packet is reordered again waits for
			// the ACK timeout (the responder NAKs a sequence error once).
			reordered := res.Variant == "reroute" && fr.OutOfSequence > 0
			if !reordered && (fr.Retransmits != 0 || fr.LocalAckTimeoutErr != 0) {
				t.Errorf("%s: %d resent, %d ACK timeouts, %d out of sequence", fr.Name, fr.Retransmits, fr.LocalAckTimeoutErr, fr.OutOfSequence)
			}
		}
		// The PE's cuts cost the WAN some throughput: (a) kept the port
		// 91-95 % busy, (b) 78-88 % (this VM, 4 s runs).
		if p, want := port("core:pe2"), map[string]float64{"rfc6040": 0.8, "pe-rate": 0.6, "reroute": 0.4}[res.Variant]; p.Utilization < want {
			t.Errorf("core:pe2: utilization %.1f%%, want ≥ %.0f%%", 100*p.Utilization, 100*want)
		}
		pes := map[string]PEResult{}
		for _, p := range res.PEs {
			if _, ok := pes[p.Node]; !ok {
				pes[p.Node] = p // path 1's: the agent's
			}
			if p.Error != "" {
				t.Errorf("pe %s: %s", p.Node, p.Error)
			}
		}
		switch res.Variant {
		case "rfc6040":
			if p := port("core:pe2"); p.CEMarked == 0 {
				t.Errorf("core:pe2 marked nothing")
			}
			if a := pes["pe1"].AgentStats; a == nil || a.LightCNPs != 0 {
				t.Errorf("pe1's agent: %+v; want observing, no light CNP from one threshold", a)
			}
		case "pe-rate":
			// The port's light CNPs reached pe1, whose agent cut the
			// limiter's rate; pe2 kept the light marks out of the inner
			// header.
			if a := pes["pe1"].AgentStats; a == nil || a.LightCNPs == 0 || a.RateUpdates == 0 || a.MinRate >= 150e6 {
				t.Errorf("pe1's agent: %+v; want light CNPs and rate cuts", a)
			}
			if d := pes["pe2"].Tunnel.Decap; d.Light == 0 {
				t.Errorf("pe2 decapsulated no light mark: %+v", d)
			}
			port("pe1:core")
		case "reroute":
			// pe1's agent spread the tunnel over the second core on the
			// light CNPs: core2 carried a share.
			if a := pes["pe1"].AgentStats; a == nil || a.LightCNPs == 0 || a.Spills == 0 {
				t.Errorf("pe1's agent: %+v; want light CNPs and spills", a)
			}
			if p := port("core2:pe2"); p.DequeuedPackets < 1000 {
				t.Errorf("core2:pe2 carried %d packets: the reroute missed it", p.DequeuedPackets)
			}
		}
	case "ecnsharp.yaml":
		// DCTCP keeps the 200 Mbit/s port busy and reacts to the marks;
		// the short flows and queries all completed (above).
		// Measured 99-100 % idle; beside stress-ng --cpu 1 the senders
		// share one core and step-AVG's small K lets the queue run dry:
		// 72-84 %.
		p := port("sw:r")
		if p.Utilization < 0.6 || p.CEMarked == 0 {
			t.Errorf("sw:r: utilization %.1f%%, %d marks; want ≥ 60%% and marks", 100*p.Utilization, p.CEMarked)
		}
		for _, fr := range res.Flows {
			if fr.Group == "long" && fr.DeliveredCE == 0 {
				t.Errorf("%s: no CE echoed to a long DCTCP flow", fr.Name)
			}
		}
	case "uet-incast-deep.yaml", "uet-incast-trim.yaml", "uet-incast-trim-16.yaml":
		// Every byte delivered (above), into one incast whose tail, net
		// of the host-lost time, stays within 1.5 × the ideal (a bound
		// for a loaded machine: the measured ranges are in docs/labfiles.md);
		// the deep queue drops nothing, the 1-BDP one trims under NSCC.
		if len(res.Incasts) != 1 {
			t.Fatalf("incasts %+v: want one", res.Incasts)
		}
		ic := res.Incasts[0]
		t.Logf("incast: tail %.3f, mean %.3f × ideal %.3fs (net %.3f, %.3f); queue p50 %.2f p99 %.2f BDP; %d trimmed, %d dropped; %s",
			ic.TailRatio, ic.MeanRatio, ic.IdealS, ic.TailRatioNet, ic.MeanRatioNet, ic.QueueP50BDPs, ic.QueueP99BDPs, ic.Trimmed, ic.Dropped, res.HostLost.line())
		if ic.Error != "" || ic.TailRatioNet > 1.5 {
			t.Errorf("incast: tail %.3f × ideal, %.3f net of the host: want ≤ 1.5 net %s", ic.TailRatio, ic.TailRatioNet, ic.Error)
		}
		if name == "uet-incast-deep.yaml" && ic.Dropped != 0 {
			t.Errorf("the deep queue dropped %d packets", ic.Dropped)
		}
		if name != "uet-incast-deep.yaml" && res.Variant == "nscc" && ic.Trimmed == 0 {
			t.Errorf("the 1-BDP queue trimmed nothing under NSCC")
		}
	case "roce-incast.yaml":
		// Every byte delivered (above) through the WRED queue, PPFC
		// keeping it lossless; DCQCN engaged (marks, CNPs sent and
		// handled). DCQCN from line rate cuts deep and climbs back on
		// its timers, so the port idles: measured tail 1.2-2.4 × ideal
		// (3 runs, host-starved ones), mean 1.0-1.1; 2.5 net bounds it.
		if len(res.Incasts) != 1 {
			t.Fatalf("incasts %+v: want one", res.Incasts)
		}
		ic := res.Incasts[0]
		var sent, handled uint64
		for _, fr := range res.Flows {
			sent, handled = sent+fr.CNPSent, handled+fr.CNPHandled
		}
		t.Logf("incast: tail %.3f, mean %.3f × ideal %.3fs (net %.3f, %.3f); queue p50 %.0f p99 %.0f KiB; CNPs %d sent, %d handled; %s",
			ic.TailRatio, ic.MeanRatio, ic.IdealS, ic.TailRatioNet, ic.MeanRatioNet, ic.QueueP50Bytes/1024, ic.QueueP99Bytes/1024, sent, handled, res.HostLost.line())
		if ic.Error != "" || ic.TailRatioNet > 2.5 {
			t.Errorf("incast: tail %.3f × ideal, %.3f net of the host: want ≤ 2.5 net %s", ic.TailRatio, ic.TailRatioNet, ic.Error)
		}
		if p := port("sw:r"); p.DroppedPackets != 0 || p.HostDroppedPackets != 0 || p.QdiscDroppedPackets != 0 || p.CEMarked == 0 || sent == 0 || handled == 0 {
			t.Errorf("sw:r: %d dropped (%d in its host queue, %d by the qdisc), %d marked; CNPs %d sent, %d handled: want no drop, marks and CNPs",
				p.DroppedPackets, p.HostDroppedPackets, p.QdiscDroppedPackets, p.CEMarked, sent, handled)
		}
		var retx uint64
		for _, fr := range res.Flows {
			retx += fr.Retransmits
		}
		if retx != 0 || res.SoftnetDrops != 0 {
			t.Errorf("lossless incast: %d retransmits, %d per-CPU backlog drops", retx, res.SoftnetDrops)
		}
	default:
		// Fatalf, not Errorf: a starving host must not excuse a missing check.
		t.Fatalf("no numbers to check for %s: add them here", name)
	}
}

// pinned lists what ports and PEs have pinned or recorded: a run pins
// nothing, so the lists must not change.
func pinned(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{qdisc.MetaRoot, qdisc.PinRoot, tunnel.MetaRoot} {
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, e := range ents {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// incastDeepTailBound bounds the tail FCT / ideal, net of the host-lost
// time, of uet-incast-deep.yaml's nscc variant at timescale 4: htsim's
// tail in the same setting (1.003–1.004 over seeds 1–5, reference/
// htsim.md) plus the netns incasts' margin of 0.03 (htsimMargin).
// Measured on this VM, 8 runs with 2–24 % of each run host-lost: net
// 0.993–1.010 (raw 1.026–1.355).
const incastDeepTailBound = 1.034

// TestUETIncastDeepTimescale: uet-incast-deep.yaml's nscc variant at
// timescale 4 — netns-tests' TestUETIncast, slowed four times — delivers
// every byte, verified; loses nothing anywhere (the port and its host
// queue, the qdisc, the hosts' receive buffers, the machine's input
// backlogs); and ends its tail, net of the time the host took from the
// port, within incastDeepTailBound × the ideal. The bound is judged by
// labtest.RetryStarved: a run the host starved that misses it runs again.
// Subtracting the host-lost time does not undo all of a starved run's
// distortion: a run 7.5 % host-lost here was 1.050 net (CI saw 1.054 and
// 1.048 at 10.5 % and 15.5 %, the hypervisor stealing a third of the
// CPUs); runs under 2 % were 1.001-1.019.
func TestUETIncastDeepTimescale(t *testing.T) {
	labtest.RequireRoot(t)
	f, err := Load("examples/uet-incast-deep.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetTimescale(4); err != nil {
		t.Fatal(err)
	}
	labtest.RetryStarved(t, func(_ int, c *labtest.Checks) *hostlost.Report {
		res, ic := runIncastDeep(t, f)
		if ic.TailRatioNet > incastDeepTailBound {
			c.Errorf("tail %.3f × ideal (%.3f net of the host's %.1f ms): want ≤ %.3f net", ic.TailRatio, ic.TailRatioNet, 1e3*ic.StarvedS, incastDeepTailBound)
		}
		return hostReport(res)
	})
}

// runIncastDeep runs f's nscc variant once, checks that it delivered
// everything and lost nothing, and returns its result and incast.
func runIncastDeep(t *testing.T, f *File) (*Result, IncastResult) {
	t.Helper()
	res, err := Run(context.Background(), f, RunOptions{Variant: "nscc", OutDir: t.TempDir()})
	if res == nil {
		t.Fatalf("Run: %v", err)
	}
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if res.Timescale != 4 {
		t.Errorf("result at timescale %v", res.Timescale)
	}
	var retx, timeouts uint64
	for _, fr := range res.Flows {
		retx, timeouts = retx+fr.Retransmits, timeouts+fr.Timeouts
		if fr.Error != "" || fr.Bytes != 2<<20 {
			t.Errorf("%s: %d of %d bytes, %s", fr.Name, fr.Bytes, 2<<20, fr.Error)
		}
	}
	for _, p := range res.Ports {
		if p.DroppedPackets != 0 || p.HostDroppedPackets != 0 || p.QdiscDroppedPackets != 0 || p.InvariantError != "" {
			t.Errorf("port %s: %d dropped, %d in its host queue, %d by the qdisc; %s", p.Name, p.DroppedPackets, p.HostDroppedPackets, p.QdiscDroppedPackets, p.InvariantError)
		}
	}
	for _, h := range res.HostDrops {
		if h.UDPRcvbufErrors != 0 {
			t.Errorf("host %s dropped %d datagrams at its receive buffer", h.Node, h.UDPRcvbufErrors)
		}
	}
	if res.SoftnetDrops != 0 {
		t.Errorf("%d packets dropped from the per-CPU input backlogs", res.SoftnetDrops)
	}
	h := res.HostLost
	if h == nil || h.Wall == 0 {
		t.Fatalf("host-lost time not measured: %+v", h)
	}
	t.Log(h.line())
	if len(res.Incasts) != 1 || res.Incasts[0].Error != "" {
		t.Fatalf("incasts %+v: want one that completed", res.Incasts)
	}
	ic := res.Incasts[0]
	t.Logf("incast: tail %.3f × ideal %.3f s, mean %.3f; net of %.1f ms host-lost %.3f, %.3f; queue p50 %.2f p99 %.2f BDP (%d samples); %d retransmits, %d timeouts",
		ic.TailRatio, ic.IdealS, ic.MeanRatio, 1e3*ic.StarvedS, ic.TailRatioNet, ic.MeanRatioNet, ic.QueueP50BDPs, ic.QueueP99BDPs, ic.QueueSamples, retx, timeouts)
	return res, ic
}

// checkLiveView: each live sample's flows add up to what the port sent in
// the same window (their acknowledged bytes lag it by a round trip). It ran
// an interval behind: f1 0.0 Mbit/s at t=0.5 s beside a port already
// sending 186. Samples where a flow changed state are skipped (it ran part
// of the window); so are ones with the port under 50 Mbit/s.
func checkLiveView(t checker, res *Result) {
	t.Helper()
	const mbit = 1e6
	checked := 0
	var prev *Sample
	for i := range res.Samples {
		s := &res.Samples[i]
		steady := len(s.Ports) == 1
		for j, f := range s.Flows {
			was := stateWaiting
			if prev != nil && j < len(prev.Flows) {
				was = prev.Flows[j].State
			}
			if f.State != was && !(prev == nil && f.State == stateRunning) {
				steady = false
			}
		}
		prev = s
		if !steady || s.Ports[0].DequeuedBps < 50*mbit {
			continue
		}
		var sum float64
		for _, f := range s.Flows {
			sum += f.GoodputBps
		}
		checked++
		out := s.Ports[0].DequeuedBps
		t.Logf("live view t=%.1fs: flows %.1f Mbit/s, port %.1f out", s.T, sum/mbit, out/mbit)
		if math.Abs(sum-out) > 0.2*out {
			t.Errorf("live view at t=%.1fs: the flows' goodput %.1f Mbit/s, the port's %.1f out: want within 20 %%", s.T, sum/mbit, out/mbit)
		}
	}
	if checked == 0 {
		t.Errorf("live view: no sample with the port sending and no flow starting or ending")
	}
}

// checkPortQueue: a loaded port has its queue sampled, and no percentile
// above the largest backlog its counters saw.
func checkPortQueue(t *testing.T, p *PortResult) {
	t.Helper()
	if p.Utilization > 0.5 && p.QueueSamples == 0 {
		t.Errorf("port %s: %.0f %% utilized, no queue samples", p.Name, 100*p.Utilization)
	}
	if p.QueueP50Bytes > p.QueueP99Bytes || p.QueueP99Bytes > float64(p.MaxBacklogBytes) {
		t.Errorf("port %s: queue p50 %.0f B, p99 %.0f B, max backlog %d B: want p50 <= p99 <= max", p.Name, p.QueueP50Bytes, p.QueueP99Bytes, p.MaxBacklogBytes)
	}
}

// checkTuned checks a run of a file with a tune block measured its
// senders' RTTs: each at least its path's delays both ways, lost at most
// a tenth of its probes, and the values derived from them.
func checkTuned(t *testing.T, f *File, variant string, res *Result) {
	t.Helper()
	if f.Tune == nil || f.Tune.RTT != TuneMeasured {
		return
	}
	tv := res.Tune
	if tv == nil || tv.Source != TuneMeasured {
		t.Errorf("%s: tune %+v: want the measured RTTs", variant, tv)
		return
	}
	t.Logf("%s: %s", variant, tv.TuneText())
	for _, s := range tv.RTTs {
		wire := s.NominalUS - float64(NominalHostRTT)/1e3
		if s.RTTUS.N+s.Lost != f.Tune.Probes || s.Lost > f.Tune.Probes/10 || s.RTTUS.Min < wire {
			t.Errorf("%s: %s's RTT to %s: %d samples, %d lost, min %.0f µs: want %d probes, at most a tenth lost, none below the wire's %.0f µs",
				variant, s.From, s.To, s.RTTUS.N, s.Lost, s.RTTUS.Min, f.Tune.Probes, wire)
		}
	}
	if want := fmt.Sprintf("%db", uint64(tv.Out.KTailBytes)); tv.Values["k_tail"] != want || tv.Out.KTailBytes == 0 {
		t.Errorf("%s: $k_tail %q, want %q", variant, tv.Values["k_tail"], want)
	}
}
