package daemon

import (
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/qdisc"
)

// fakeLab serves the counters the daemons of three-layers/np-off.yaml's
// nodes would export, growing by one step at each scrape of a node: s1
// and s2 send, sw's port to r marks, r's server counts CE and sends
// cnpPerStep CNPs a step per flow.
type fakeLab struct {
	t          *testing.T
	f          *labfile.File
	flows      []labfile.DeployedFlow
	ports      []labfile.PortPlan
	cnpPerStep uint64

	mu    sync.Mutex
	steps map[string]uint64
}

func (l *fakeLab) step(node string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps[node]++
	return l.steps[node]
}

// emit is node's metrics at its next step.
func (l *fakeLab) emit(node string) emitFunc {
	return func(e *emitter) {
		k := l.step(node)
		for _, pp := range l.ports {
			if pp.Node != node {
				continue
			}
			// Both flows' packets, ECN-capable; a tenth marked; a queue
			// past min_th (5 ms at 500 Mbit/s: 312 KB).
			cs := qdisc.ClassStats{Class: 3, EnqueuedPackets: 2000 * k, ArrivedECT0: 1800 * k, ArrivedCE: 200 * k, CEMarkedECT0: 200 * k,
				DequeuedPackets: 2000 * k, SojournSamples: 2000 * k, SojournSum: time.Duration(k) * 2000 * 5 * time.Millisecond}
			cs.Sojourn[22] = 2000 * k // 2^22 ns: 4.2 ms
			lv := []string{describePort(PortConfig{Dev: pp.Dev}), "3", ""}
			e.fields("port", cs, []string{"port", "class", "name"}, lv)
			e.sojourn(&cs, []string{"port", "class", "name"}, lv)
		}
		for i, fl := range l.flows {
			qpn := "0x" + string(rune('a'+i))
			if fl.From == node {
				ol, ov := owner("flow", fl.Name)
				e.fields("qp", agent.Counters{TxPackets: 1000 * k, RPCNPHandled: l.cnpPerStep * k},
					append(ol, "qpn", "peer", "peer_qpn"), append(ov, qpn, fl.Server.Addr().String(), "0x99"))
			}
			if fl.To == node {
				server := (ServerConfig{Transport: labfile.TransportRoCEv2, Bind: fl.Server.Addr(), Port: int(fl.Server.Port())}).name()
				ol, ov := owner("server", server)
				e.fields("qp", agent.Counters{NPECNMarkedRoCEPackets: 100 * k, NPCNPSent: l.cnpPerStep * k},
					append(ol, "qpn", "peer", "peer_qpn"), append(ov, "0x99", fl.Sender.String(), qpn))
			}
		}
	}
}

func (l *fakeLab) serve(node string) *httptest.Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(l.emit(node))
	s := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	l.t.Cleanup(s.Close)
	return s
}

// TestLabCheck: a daemon's lab check reads its own counters in-process and
// its peers' over HTTP, judges each window's difference and exports the
// verdict of the flows it sends: np-silent where r sends no CNP, ok where
// it does; a peer gone is a failed evaluation whose verdicts are dropped.
func TestLabCheck(t *testing.T) {
	f, err := labfile.Load("../labfile/examples/three-layers/np-off.yaml")
	if err != nil {
		t.Fatal(err)
	}
	flows, ports, err := f.DeployedFlows("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		cnpPerStep uint64
		layer      labfile.Layer
		kind       string
	}{
		{"np-off", 0, labfile.LayerNP, labfile.CheckNPSilent},
		{"healthy", 40, "", labfile.CheckOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &fakeLab{t: t, f: f, flows: flows, ports: ports, cnpPerStep: tc.cnpPerStep, steps: map[string]uint64{}}
			own := prometheus.NewRegistry()
			own.MustRegister(l.emit("s1"))
			peers := map[string]*httptest.Server{}
			lc := LabCheck{Daemons: map[string]string{}}
			for _, n := range []string{"s2", "sw", "r"} {
				peers[n] = l.serve(n)
				lc.Daemons[n] = strings.TrimPrefix(peers[n].URL, "http://")
			}
			if err := lc.validate(f, "s1"); err != nil {
				t.Fatal(err)
			}
			lc.Window = 50 * time.Millisecond // below the configurable least, for the test's time
			c := newChecker(lc, f, "s1", "", own)
			c.client.Timeout = 5 * time.Second // not the window's half: a loaded machine's scrape
			go c.run()
			defer func() { c.close(); c.wait() }()
			waitState := func(what string, ok func(CheckState) bool) CheckState {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for {
					st := c.State()
					if ok(st) {
						return st
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: last state %+v", what, st)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			st := waitState("a verdict", func(st CheckState) bool { return st.Report != nil })
			if len(st.Report.Flows) != 1 || st.Report.Flows[0].Flow != "f1" {
				t.Fatalf("flows judged %+v, want f1 alone (s1's own)", st.Report.Flows)
			}
			fc := st.Report.Flows[0]
			t.Logf("f1: %s %s: %s %v", fc.Layer, fc.Kind, fc.Says, fc.Evidence)
			if fc.Layer != tc.layer || fc.Kind != tc.kind {
				t.Errorf("f1: %s %s (%s), want %s %s", fc.Layer, fc.Kind, fc.Says, tc.layer, tc.kind)
			}
			m := scrapeOf(t, func(e *emitter) { checkMetrics(e, c) })
			want := map[string]string{"flow": "f1", "layer": string(tc.layer), "kind": tc.kind}
			if v, ok := sum(m, "fabriclab_check_verdict", want); !ok || v != 1 {
				t.Errorf("fabriclab_check_verdict%v %v %v, want 1", want, v, ok)
			}
			for _, layer := range []labfile.Layer{labfile.LayerCP, labfile.LayerPath, labfile.LayerNP, labfile.LayerRP} {
				v, ok := sum(m, "fabriclab_check_layer_silent", map[string]string{"flow": "f1", "layer": string(layer)})
				if !ok || v != b2f(layer == tc.layer) {
					t.Errorf("fabriclab_check_layer_silent{layer=%s} %v %v", layer, v, ok)
				}
			}
			// The evidence is the window's: a step's CE at r for f1.
			if v, ok := sum(m, "fabriclab_check_evidence", map[string]string{"flow": "f1", "where": "receiver r", "counter": "np_ecn_marked_roce_packets"}); !ok || v != 100 {
				t.Errorf("evidence np_ecn_marked_roce_packets %v %v, want 100 (one window's)", v, ok)
			}

			// A peer gone: the window is not judged, nothing stale stays.
			peers["r"].Close()
			failed := c.State().Failures
			st = waitState("a failed evaluation", func(st CheckState) bool { return st.Failures > failed && st.Report == nil })
			if !strings.Contains(st.Error, "node r") {
				t.Errorf("error %q, want it to name node r", st.Error)
			}
			m = scrapeOf(t, func(e *emitter) { checkMetrics(e, c) })
			if _, ok := m["fabriclab_check_verdict"]; ok {
				t.Error("verdicts exported after a failed evaluation")
			}
			if v, _ := sum(m, "fabriclab_check_last_evaluation_successful", nil); v != 0 {
				t.Errorf("last_evaluation_successful %v, want 0", v)
			}
		})
	}
}
