//go:build linux

package labfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabriclab/fabriclab/host/htsim"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// htsimExamples prefixes the side-by-side lab files.
const htsimExamples = "htsim-"

// TestHtsimExamples runs the side-by-side labs that have a fabric of
// their own (examples/htsim-permutation.yaml: 16 hosts on a leaf-spine
// of 4 spines; htsim-fattree.yaml: a fat tree of radix 4, 16 hosts and
// 20 switches, both with packets sprayed; htsim-fattree-os.yaml: the fat
// tree oversubscribed 2:1 at its ToRs, 14 switches; htsim-fattree-core.yaml:
// its core links at twice the rate, half as many, 18 switches), each
// with store-and-forward, NICs and NSCC with SLEEK on both sides (the
// variant htsim matches best: docs/collectives.md), once each, with
// -htsim pointing at no build: every flow completes with every byte
// verified, the matrix within its bound of ideal, few packets resent
// (htsim resends none; RACK, the lab's default, 50-75 a run), every
// switch's uplinks evenly used (busiest over mean at most maxUplinkSkew:
// one shared ECMP hash made each aggregation switch send everything up
// one of its two cores, 2.0), and htsim's topology, matrix and script
// written with the command that runs them. htsim-ring and
// htsim-alltoall are the collectives TestCollectives runs, on 4 spines.
//
// 10 quiet runs (2026-12-03): permutation 1.332-1.394 × ideal, fat tree
// 1.329-1.387, oversubscribed 2.147-2.400, faster cores 1.300-1.342, the
// host taking 10-24 % of the ports' time, 0-7 packets resent, busiest
// uplink at most 1.21 × its mean; 5 beside stress-ng --cpu 2 --cpu-load
// 50: 1.347-1.400, 1.333-1.380, 2.156-2.287, 1.326-1.359, host-lost
// 17-38 %, 0-22 resent. htsim over seeds 1-5: 1.362-1.421, 1.393-1.439,
// 2.113-2.176, 1.270-1.302. Before store-and-forward, NICs and SLEEK
// (RACK, 2026-12-02) the bounds were 1.7 and 2.7: permutation
// 1.202-1.312 with a bucket floor that let ports beat their wire, fat
// tree 1.477-1.561 at timescale 32, 27-51 packets resent.
func TestHtsimExamples(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, "6.6")
	for _, tc := range []struct {
		file, variant string
		ratio         float64
	}{
		{"htsim-permutation.yaml", "spray-sleek", htsimPermutationRatio},
		{"htsim-fattree.yaml", "spray-sleek", htsimFatTreeRatio},
		{"htsim-fattree-os.yaml", "nscc-sleek", htsimFatTreeOSRatio},
		{"htsim-fattree-core.yaml", "", htsimFatTreeRatio},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := Load(filepath.Join("examples", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var out string
			opts := func() RunOptions {
				out = t.TempDir()
				return RunOptions{Variant: tc.variant, OutDir: out, Htsim: &htsim.Runner{Dir: t.TempDir()}}
			}
			runMatrixExample(t, f, opts, func(res *Result, mr *MatrixResult, share float64) []string {
				var skews []string
				worst := 0.0
				for _, u := range mr.Uplinks {
					skews = append(skews, fmt.Sprintf("%s %.2f", u.Leaf, u.MostOverMean))
					worst = max(worst, u.MostOverMean)
				}
				var resent int
				for _, fl := range res.Flows {
					resent += int(fl.Retransmits)
				}
				t.Logf("completion %.3f × ideal, FCT/ideal p50 %.3f; uplinks busiest over mean: %s; %d packets resent; host-lost %.1f %% of the run",
					mr.All.CCTRatio, mr.FCTRatio.P50, strings.Join(skews, ", "), resent, 100*share)
				if len(mr.Uplinks) == 0 || worst > maxUplinkSkew {
					t.Errorf("uplinks %v: want every switch's busiest within %.2f of its mean", skews, maxUplinkSkew)
				}
				h := mr.Htsim
				if h == nil || !strings.Contains(h.Error, "no executable htsim_uec") || !strings.HasPrefix(h.Command, "htsim_uec -tm htsim.cm -topo htsim.topo -sender_cc_only") {
					t.Errorf("htsim: %+v", h)
				}
				for _, name := range []string{htsim.MatrixTopoFile, htsim.MatrixCMFile, htsim.MatrixScriptFile} {
					if _, err := os.Stat(filepath.Join(out, "htsim", name)); err != nil {
						t.Error(err)
					}
				}
				var failed []string
				if mr.All.CCTRatio > tc.ratio {
					failed = append(failed, fmt.Sprintf("completion %.3f × ideal (want ≤ %.2f)", mr.All.CCTRatio, tc.ratio))
				}
				// A stalled receiver's late ACKs read as loss to SLEEK too:
				// host-sensitive.
				if resent > htsimMaxResent {
					failed = append(failed, fmt.Sprintf("%d packets resent (want ≤ %d)", resent, htsimMaxResent))
				}
				return failed
			})
		})
	}
}

// The bounds of TestHtsimExamples.
const (
	htsimPermutationRatio = 1.55
	htsimFatTreeRatio     = 1.55
	htsimFatTreeOSRatio   = 2.6
	htsimMaxResent        = 30
	maxUplinkSkew         = 1.5
)
