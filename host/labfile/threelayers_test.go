//go:build linux

package labfile

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fabriclab/fabriclab/host/lab"
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
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := Load(filepath.Join("examples", "three-layers", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			for attempt := 1; ; attempt++ {
				res, err := Run(context.Background(), f, RunOptions{OutDir: "-"})
				if res == nil {
					t.Fatalf("Run: %v", err)
				}
				if err != nil {
					t.Errorf("Run: %v", err)
				}
				if left, err := lab.LiveNamespaces(res.RunID + "-"); err != nil || len(left) > 0 {
					t.Errorf("namespaces of run %s left behind: %v %v", res.RunID, left, err)
				}
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
				if h == nil || !h.HostStarved || attempt == exampleAttempts {
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
