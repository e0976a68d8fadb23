//go:build linux

package labfile

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// TestThreeLayers runs seed 000's labs (examples/three-layers) and holds
// Check to naming exactly the broken layer in each, for every flow, and
// none in the healthy baseline. A run whose verdict misses runs again
// only when the host starved it (HostLost), each logged.
func TestThreeLayers(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, "6.6") // TCX: the kernel NP and RP
	for _, tc := range []struct {
		file  string
		layer Layer
		kind  string
	}{
		{"healthy.yaml", "", CheckOK},
		{"np-off.yaml", LayerNP, CheckNPSilent},
		{"rp-off.yaml", LayerRP, CheckRPDisabled},
		{"wred-high.yaml", LayerCP, CheckThresholdsHigh},
		{"dscp-bleached.yaml", LayerPath, CheckDSCPChanged},
		{"cnp-class.yaml", LayerNP, CheckCNPClassShared},
		{"uet-healthy.yaml", "", CheckOK},
		{"uet-np-off.yaml", LayerNP, CheckEchoSilent},
		{"tcp-healthy.yaml", "", CheckOK},
		{"tcp-no-ecn.yaml", LayerPath, CheckNotECT},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := Load(filepath.Join("examples", "three-layers", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			for attempt := 1; ; attempt++ {
				res := runChecked(t, f, RunOptions{OutDir: "-"})
				c := res.Check
				if c == nil || len(c.Flows) != len(f.Flows) {
					t.Fatalf("check: %+v", c)
				}
				missed := 0
				for _, fc := range c.Flows {
					t.Logf("%s: %s %s at %q: %s; %v", fc.Flow, fc.Layer, fc.Kind, fc.Hop, fc.Says, fc.Evidence)
					if fc.Layer != tc.layer || fc.Kind != tc.kind {
						missed++
					}
				}
				if missed == 0 {
					return
				}
				h := res.HostLost
				if h == nil || !h.HostStarved || attempt == labtest.StarvedAttempts {
					share := 0.0
					if h != nil {
						share = h.Share
					}
					t.Fatalf("%d of %d flows not judged %s %s (host-lost %.1f %% of the run)", missed, len(c.Flows), tc.layer, tc.kind, 100*share)
				}
				t.Logf("run %d missed; the host starved it (%.1f %% of the run, budget %.1f %%): running again", attempt, 100*h.Share, 100*h.Budget)
			}
		})
	}
}

// TestTuneAndVerify runs seed 000's tune-and-verify lab once per variant,
// in 4 s: the DCQCN table compares Kmin 80 KB with 150 KB, and the three
// layers' check finds none silent in either (both are healthy labs).
func TestTuneAndVerify(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, "6.6")
	f, err := Load(filepath.Join("examples", "three-layers", "tune-and-verify.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compare(context.Background(), f, CompareOptions{RunOptions: RunOptions{Duration: 4 * time.Second, OutDir: "-"}, Runs: 1})
	if c == nil {
		t.Fatalf("Compare: %v", err)
	}
	if err != nil {
		t.Errorf("Compare: %v", err)
	}
	var b bytes.Buffer
	c.WriteSummary(&b)
	t.Log(b.String())
	for _, want := range []string{"CNPs handled", "vs kmin-150kb"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	for _, v := range c.Summary {
		if v.Runs != 1 || len(v.Ports) != 1 || v.Ports[0].CEMarked.Mean == 0 || v.CNPsHandled.Mean == 0 {
			t.Errorf("%s: %d runs, ports %+v, CNPs handled %+v: want a run that marked and cut", v.Name, v.Runs, v.Ports, v.CNPsHandled)
		}
		if len(v.Silent) > 0 {
			t.Errorf("%s: the check found layers silent in a healthy lab: %v", v.Name, v.Silent)
		}
	}
}
