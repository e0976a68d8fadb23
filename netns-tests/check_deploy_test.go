package netnstests

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fabriclab/fabriclab/host/daemon"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/labfile"
)

// TestCheckDeployed runs seed 000's NP-off lab and its healthy baseline
// on "lab servers" (a fabriclabd per node, as TestVagrantLabInNamespaces
// deploys them) and judges each from the daemons' metrics alone
// over 2 s windows (daemon.JudgeDeployed), as fabriclab check -daemons
// does: the NP named silent for every flow of the one, no layer for the
// other once every flow's loop has run. Each sender's fabriclabd judges
// its own flows too (lab.check), reading its peers over the lab's
// network, and must say the same in /check and its metrics.
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
			// Each sender's daemon judges its own flows too (lab.check),
			// reading its peers at their lab addresses: on a link to it,
			// the address there; else the node's own (routed).
			senders := map[string]bool{}
			for _, fl := range f.Flows {
				senders[fl.From] = true
			}
			extra := func(node string, dp *labfile.Plan) (string, string) {
				if !senders[node] {
					return "0.0.0.0:9471", ""
				}
				var peers []string
				for _, n := range f.Nodes {
					if n.Name == node {
						continue
					}
					addr := dp.Addrs[n.Name]
					for _, ls := range dp.Spec.Links {
						if ls.A.Node == node && ls.B.Node == n.Name {
							addr = ls.B.Addr.Addr()
						} else if ls.B.Node == node && ls.A.Node == n.Name {
							addr = ls.A.Addr.Addr()
						}
					}
					peers = append(peers, fmt.Sprintf("%s: '%s:9471'", n.Name, addr))
				}
				return "0.0.0.0:9471", ", check: {window: 2s, daemons: {" + strings.Join(peers, ", ") + "}}"
			}
			deployInNamespacesWith(t, path, "", extra, func(l *lab.Lab, at string, _ deployCtl) {
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
					before := scrapeAll()
					time.Sleep(2 * time.Second)
					res, err := daemon.JudgeDeployed(f, "", before, scrapeAll())
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

				// The senders' daemons say the same of their own flows, in
				// /check and in their metrics.
				for node := range senders {
					// /check and /metrics of one evaluation: the same
					// evaluations count in both.
					var st daemon.CheckState
					var m map[string]*dto.MetricFamily
					waitFor(t, 30*time.Second, node+"'s lab check judging its flows", func() bool {
						_, body, err := httpGet(l.Node(node), at, "/check")
						if err != nil || json.Unmarshal(body, &st) != nil || st.Report == nil || len(st.Report.Flows) == 0 {
							return false
						}
						for _, fc := range st.Report.Flows {
							if fc.Kind == labfile.CheckIdle || fc.Kind == labfile.CheckNotJudged {
								return false
							}
						}
						m = scrape(t, l.Node(node), at)
						return metricValue(m, "fabriclab_check_evaluations_total", nil) == float64(st.Evaluations)
					})
					var b strings.Builder
					labfile.WriteCheck(&b, st.Report)
					t.Logf("%s's fabriclabd (evaluations %d, failures %d, scrape seconds %v):\n%s", node, st.Evaluations, st.Failures, st.ScrapeSeconds, b.String())
					for _, fc := range st.Report.Flows {
						if f.Flows[slices.IndexFunc(f.Flows, func(fl labfile.Flow) bool { return fl.Name == fc.Flow })].From != node {
							t.Errorf("%s's daemon judged %s, not its flow", node, fc.Flow)
						}
						if fc.Layer != tc.layer || fc.Kind != tc.kind {
							t.Errorf("%s's daemon: %s: %s %s, want %s %s", node, fc.Flow, fc.Layer, fc.Kind, tc.layer, tc.kind)
						}
						for _, layer := range []labfile.Layer{labfile.LayerCP, labfile.LayerPath, labfile.LayerNP, labfile.LayerRP} {
							want := map[string]string{"flow": fc.Flow, "layer": string(layer)}
							if v := metricValue(m, "fabriclab_check_layer_silent", want); v < 0 {
								t.Errorf("%s: no fabriclab_check_layer_silent%v", node, want)
							} else if (v == 1) != (layer == tc.layer) {
								t.Errorf("%s: fabriclab_check_layer_silent%v %v, want %v", node, want, v, layer == tc.layer)
							}
						}
					}
				}
			})
		})
	}
}

// metricValue is the value of name's series (a gauge or a counter) with
// labels want, -1 if none.
func metricValue(mf map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	if f := mf[name]; f != nil {
		for _, m := range f.Metric {
			switch {
			case !hasLabels(m, want):
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Counter != nil:
				return m.Counter.GetValue()
			}
		}
	}
	return -1
}
