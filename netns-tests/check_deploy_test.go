package netnstests

import (
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/daemon"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/labfile"
)

// TestCheckDeployed runs seed 000's NP-off lab and its healthy baseline
// on "lab servers" (a fabriclabd per node, as TestVagrantLabInNamespaces
// deploys them) and judges each from the daemons' metrics alone
// over 2 s windows (daemon.Delta, daemon.ReadDeployed,
// File.DeployedResult), as fabriclab check -daemons does: the NP named silent for every flow of the one, no layer
// for the other once every flow's loop has run.
func TestCheckDeployed(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, "6.6")
	for _, tc := range []struct {
		file  string
		layer labfile.Layer
		kind  string
	}{
		{"np-off.yaml", labfile.LayerNP, labfile.CheckNPSilent},
		{"healthy.yaml", "", labfile.CheckOK},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := "../host/labfile/examples/three-layers/" + tc.file
			f, err := labfile.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			deployInNamespaces(t, path, "", func(l *lab.Lab, at string, _ deployCtl) {
				var last *labfile.CheckReport
				scrapeAll := func() map[string]daemon.Metrics {
					byNode := map[string]daemon.Metrics{}
					for _, n := range f.Nodes {
						byNode[n.Name] = scrape(t, l.Node(n.Name), at)
					}
					return byNode
				}
				// As fabriclab check -daemons: the counters of a 2 s window.
				judged := func() bool {
					byNode := scrapeAll()
					time.Sleep(2 * time.Second)
					for node, m := range scrapeAll() {
						byNode[node] = daemon.Delta(byNode[node], m)
					}
					d, err := daemon.ReadDeployed(f, "", byNode)
					if err != nil {
						t.Fatal(err)
					}
					res, err := f.DeployedResult("", d)
					if err != nil {
						t.Fatal(err)
					}
					last = res.Check
					for _, fc := range last.Flows {
						if fc.Kind == labfile.CheckIdle || fc.Kind == labfile.CheckNotJudged {
							return false // the flow's loop has not run yet
						}
					}
					return true
				}
				waitFor(t, 30*time.Second, "every flow's loop judged", judged)
				var b strings.Builder
				labfile.WriteCheck(&b, last)
				t.Log(b.String())
				for _, fc := range last.Flows {
					if fc.Layer != tc.layer || fc.Kind != tc.kind {
						t.Errorf("%s: %s %s, want %s %s", fc.Flow, fc.Layer, fc.Kind, tc.layer, tc.kind)
					}
				}
			})
		})
	}
}
