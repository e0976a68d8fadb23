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
// 20 switches, both with packets sprayed, variant spray;
// htsim-fattree-os.yaml: the fat tree oversubscribed 2:1 at its ToRs,
// 14 switches, NSCC spraying; htsim-fattree-core.yaml: its core links
// at twice the rate, half as many, 18 switches) once each, with -htsim
// pointing at no
// build: every flow completes with every byte verified, the matrix
// within its bound of ideal, every switch's uplinks evenly used
// (busiest over mean at most maxUplinkSkew: one shared ECMP hash made
// each aggregation switch send everything up one of its two cores,
// 2.0), and htsim's topology, matrix and script written with the
// command that runs them. htsim-ring and htsim-alltoall are the
// collectives TestCollectives runs, on 4 spines. 10 quiet runs
// (timescale 16 then, the oversubscribed tree 8; 2026-12-02, ports with a
// bucket floor of 6 KB, which let them beat their wire after idle):
// permutation 1.202-1.312 × ideal, fat tree 1.322-1.406, oversubscribed
// 2.259-2.393, faster cores 1.233-1.339, the host taking 16-52 % of the
// ports' time, 27-51 packets resent, busiest uplink at most 1.26 × its
// mean; 5 beside stress-ng --cpu 2 --cpu-load 50: 1.261-1.342,
// 1.382-1.460, 2.292-2.438, 1.294-1.354, host-lost 19-49 %, skew at most
// 1.19. Without the floor (f766131, 2026-12-02), 10 quiet runs:
// permutation 1.403-1.449, fat tree 1.546-1.648, oversubscribed
// 2.400-2.502, faster cores 1.387-1.468, host-lost 15-43 %; 5 beside
// stress-ng: 1.438-1.546, 1.612-1.679, 2.482-2.567, 1.468-1.560,
// host-lost 20-57 % (htsim: 1.362-1.421, 1.393-1.439 and 2.113-2.176
// over seeds 1-5). The fat tree's bound, 1.7, is close under load; a run
// past it is judged only when the host did not starve it, and the host
// starved every one of these (past its 2 % budget). The fat tree at
// timescale 32 (2026-12-02, eb031ee's tree and the file's new
// timescale): 10 quiet runs 1.477-1.561, host-lost 7-12 %, 31-46
// resent, skew at most 1.22; 5 beside stress-ng 1.488-1.554, host-lost
// 11-14 %, skew at most 1.19.
func TestHtsimExamples(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, "6.6")
	for _, tc := range []struct {
		file, variant string
		ratio         float64
	}{
		{"htsim-permutation.yaml", "spray", htsimPermutationRatio},
		{"htsim-fattree.yaml", "spray", htsimFatTreeRatio},
		{"htsim-fattree-os.yaml", "nscc", htsimFatTreeOSRatio},
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
				if mr.All.CCTRatio > tc.ratio {
					return []string{fmt.Sprintf("completion %.3f × ideal (want ≤ %.2f)", mr.All.CCTRatio, tc.ratio)}
				}
				return nil
			})
		})
	}
}

// The bounds of TestHtsimExamples.
const (
	htsimPermutationRatio = 1.7
	htsimFatTreeRatio     = 1.7
	htsimFatTreeOSRatio   = 2.7
	maxUplinkSkew         = 1.5
)
