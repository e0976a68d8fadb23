//go:build linux

package labfile

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// rocev2Flow is the examples' flow template; uetFlow replaces it in
// TestCollectives' UET cases.
const (
	rocev2Flow = "flow: {transport: rocev2, cc: dcqcn, verify: true}"
	uetFlow    = "flow: {transport: uet, cc: %s, mtu: 4096, base_rtt: 1ms, verify: true}"
)

// triggerLatency bounds the time from a flow's last acknowledged byte to
// the first byte of the flows its trigger starts: the host's wake-ups
// of the finishing flow and the started one (measured 0.9-3.7 ms quiet,
// 8.1 ms once in a run the host took 22 % of; 5.2-7.0 ms beside
// stress-ng, 42 %). It catches a trigger that waits for a poll or a
// timer (tens of ms), not the host; every run logs its figure.
const triggerLatency = 15 * time.Millisecond

// collectiveCases are TestCollectives' runs of the collective examples
// (TestExamplesRun leaves these files to it).
var collectiveCases = []struct {
	name, file, cc string // cc "": the file's rocev2/dcqcn
	ratio          float64
}{
	{"ring/dcqcn", "allreduce-ring.yaml", "", 1.2},
	{"alltoall/dcqcn", "alltoall.yaml", "", 1.7},
	{"ring/rccc", "allreduce-ring.yaml", "rccc", 1.25},
	{"alltoall/nscc", "alltoall.yaml", "nscc", 1.75},
}

// isCollectiveExample says TestCollectives runs the example name.
func isCollectiveExample(name string) bool {
	for _, tc := range collectiveCases {
		if tc.file == name {
			return true
		}
	}
	return false
}

// TestCollectives (issue 29): htsim's ring all-reduce and serial
// all-to-all over 8 hosts of a leaf-spine (examples/allreduce-ring.yaml,
// alltoall.yaml), with RoCEv2/DCQCN and with UET (RCCC, NSCC): every
// flow completes with every byte verified, nothing is lost anywhere,
// every triggered flow starts after the flow that fires its trigger has
// its last byte acknowledged and within triggerLatency of it, and the
// collective's completion time is within its bound of its ideal (the
// triggers replayed over each flow's FCT alone at its bottleneck, as if
// no two flows ever met). The ring's chains stay in step (10 quiet and
// 5 loaded runs: 1.03-1.19 with DCQCN, twice 1.27-1.31 in runs the
// host starved; 1.06-1.11 with RCCC); the serial all-to-all's drift
// apart, so that two or three senders meet at one receiver and ECMP
// puts three leaf-crossing flows on one spine (1.20-1.61 with DCQCN,
// 1.06-1.40 with NSCC, its flows' FCT/ideal p99 2.0-2.5):
// the fabric's doing, not the host's (the replay over the measured FCTs
// is within 0.03 of it, in most runs 0.01). A run that misses a bound
// runs again only when the host starved it, each logged. Those figures
// predate the ports' burst floor going (2026-12-02). Since, on a machine
// whose host takes more (an old build's ring/dcqcn measured 1.66-1.84 on
// it, host-lost 31-43 %), 10 quiet runs: ring/dcqcn 1.30-2.02 (host-lost
// 23-49 %, every run unjudged, the host starving all 3 tries), alltoall/
// dcqcn 1.34-1.60 (25-33 %), ring/rccc 1.12-1.23 (51-74 %), alltoall/nscc
// 1.13-1.46 (23-34 %), trigger latency at most 10.6 ms; 5 beside
// stress-ng --cpu 2 --cpu-load 50: 1.35-2.42, 1.39-1.59, 1.25-1.47,
// 1.29-1.61, host-lost 30-83 %, both rings unjudged every run, trigger
// latency at most 19.6 ms (in starved runs). Both files have run at
// timescale 16 since (host-lost 4-13 % quiet), every run judged: 10
// quiet runs ring/dcqcn 1.032-1.186, alltoall/dcqcn 1.356-1.600,
// ring/rccc 1.064-1.070, alltoall/nscc 1.058-1.485, none run again,
// trigger latency at most 5.8 ms; 5 beside stress-ng 1.036-1.496 (6 of
// the ring/dcqcn tries at 1.22-1.50, host-lost 8-11 %, run again),
// 1.332-1.587, 1.072-1.080, 1.209-1.409, at most 11.2 ms.
// docs/collectives.md.
func TestCollectives(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, "6.6") // TCX: the kernel NP and RP
	for _, tc := range collectiveCases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("examples", tc.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.cc != "" {
				if !bytes.Contains(data, []byte(rocev2Flow)) {
					t.Fatalf("%s has no %q to replace", path, rocev2Flow)
				}
				data = bytes.Replace(data, []byte(rocev2Flow), []byte(fmt.Sprintf(uetFlow, tc.cc)), 1)
			}
			f, err := Parse(path, data)
			if err != nil {
				t.Fatal(err)
			}
			m := f.Matrix()
			runMatrixExample(t, f, func() RunOptions { return RunOptions{OutDir: "-"} }, func(res *Result, mr *MatrixResult, share float64) []string {
				t.Logf("%s: %d of %d flows completed; completion %.1f ms, ideal %.1f ms (%.3f ×), over the measured FCTs %.1f ms (%.3f ×); FCT/ideal p50 %.3f p99 %.3f; setup p50 %.1f ms; host-lost %.1f %% of the run",
					tc.name, mr.Completed, mr.Connections, 1e3*mr.All.CCTS, 1e3*mr.All.IdealCCTS, mr.All.CCTRatio, 1e3*mr.All.ReplayCCTS, mr.All.ReplayRatio,
					mr.FCTRatio.P50, mr.FCTRatio.P99, 1e3*mr.SetupS.P50, 100*share)
				if lost := res.Lost(); lost != 0 {
					t.Errorf("lost %d (ports, host backlogs, sockets, resends): want none; %s", lost, strings.Join(res.LostBy(), "; "))
				}
				// Triggers: a flow whose sender done fires a trigger
				// starts the flows it targets.
				byConn := map[int]*FlowResult{}
				for i := range res.Flows {
					if c := res.Flows[i].Conn; c > 0 {
						byConn[c-1] = &res.Flows[i]
					}
				}
				var worst time.Duration
				for i, c := range m.Conns {
					if c.Trigger == 0 {
						continue
					}
					for j, a := range m.Conns {
						if a.SendDone != c.Trigger {
							continue
						}
						fa, fc := byConn[j], byConn[i]
						aEnd := time.Duration((fa.StartS + fa.FCTS) * float64(time.Second))
						cStart := time.Duration(fc.StartS * float64(time.Second))
						if cStart < aEnd {
							t.Errorf("%s started at %v, before %s's last byte at %v", fc.Name, cStart, fa.Name, aEnd)
						}
						worst = max(worst, cStart-aEnd)
					}
				}
				t.Logf("trigger latency: at most %v", worst)
				var missed []string
				if worst > triggerLatency {
					missed = append(missed, fmt.Sprintf("trigger latency %v (want ≤ %v)", worst, triggerLatency))
				}
				if mr.All.CCTRatio > tc.ratio {
					missed = append(missed, fmt.Sprintf("completion %.3f × ideal (want ≤ %.2f)", mr.All.CCTRatio, tc.ratio))
				}
				return missed
			})
		})
	}
}

// runMatrixExample runs f (with opts' options, fresh each run) under
// labtest.RetryStarved: each run leaves no namespace behind and completes
// its whole matrix, every flow verifying its bytes; check logs the run and
// returns what it missed (share: the host's part of the run), which a run
// the host starved may miss and run again.
func runMatrixExample(t *testing.T, f *File, opts func() RunOptions, check func(res *Result, mr *MatrixResult, share float64) []string) {
	t.Helper()
	for _, fl := range f.Flows {
		if !fl.Verify {
			t.Fatalf("flow %s does not verify its bytes", fl.Name)
		}
	}
	conns := len(f.Matrix().Conns)
	labtest.RetryStarved(t, func(_ int, c *labtest.Checks) *hostlost.Report {
		res := runChecked(t, f, opts())
		mr := res.Matrix
		if mr == nil || mr.Connections != conns {
			t.Fatalf("matrix result %+v, want %d connections", mr, conns)
		}
		if mr.Completed != conns || res.Failed() != 0 {
			for _, fl := range res.Flows {
				if fl.Error != "" {
					t.Errorf("flow %s: %s", fl.Name, fl.Error)
				}
			}
			t.Fatalf("%d of %d flows completed, %d failed", mr.Completed, conns, res.Failed())
		}
		share := 0.0
		if h := res.HostLost; h != nil {
			share = h.Share
		}
		for _, m := range check(res, mr, share) {
			c.Errorf("%s", m)
		}
		return hostReport(res)
	})
}

// runChecked runs f: a run with no result fails the test, an error is
// one, and so is a namespace of the run left behind.
func runChecked(t *testing.T, f *File, opts RunOptions) *Result {
	t.Helper()
	res, err := Run(context.Background(), f, opts)
	if res == nil {
		t.Fatalf("Run: %v", err)
	}
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	noNamespacesLeft(t, res.RunID)
	return res
}

// noNamespacesLeft fails the test if a namespace of run runID is still
// up (this run's only: another process's lab may be).
func noNamespacesLeft(t *testing.T, runID string) {
	t.Helper()
	if left, err := lab.LiveNamespaces(runID + "-"); runID == "" || err != nil || len(left) > 0 {
		t.Errorf("namespaces of run %q left behind: %v %v", runID, left, err)
	}
}
