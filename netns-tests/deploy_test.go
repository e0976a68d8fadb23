package netnstests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/qdisc"
	dto "github.com/prometheus/client_model/go"
)

// TestVagrantLabInNamespaces runs the Vagrant lab's provisioning and
// daemons where this machine can: a namespace per VM, the lab file's
// devices as veths. Each "VM" gets `fabriclab plan LAB -node N -apply`
// (addresses, routes, forwarding) and a fabriclabd running its node of
// the file (lab: {file, node}). The flows deliver across the switch's
// virtual-queue ports (lab.yaml) and across the PEs' tunnel (lab-wan.yaml),
// and SIGTERM leaves nothing attached. The files' rates are scaled from
// 1 Gbit/s to 200 Mbit/s, which two shared cores carry; the WAN's 5 ms
// is left out (it is netem in a VM, and this kernel has no netem).
func TestVagrantLabInNamespaces(t *testing.T) {
	labtest.RequireRoot(t)
	t.Run("lab", func(t *testing.T) {
		deployInNamespaces(t, "../vagrant/lab.yaml", func(l *lab.Lab, at string) {
			// The hosts' flows cross the switch's ports.
			waitFor(t, 15*time.Second, "h1's RoCEv2 flow and h2's UET flow deliver", func() bool {
				q, _ := value(scrape(t, l.Node("h1"), at), "fabriclab_qp_acked_bytes_total", map[string]string{"flow": "h1-h2"})
				u, _ := value(scrape(t, l.Node("h1"), at), "fabriclab_uet_rx_payload_bytes_total", nil)
				// h2's UET flow, per sender PDC.
				s, _ := value(scrape(t, l.Node("h2"), at), "fabriclab_pdc_bytes_acked_total", map[string]string{"flow": "h2-h1"})
				return q > 1e6 && u > 1e6 && s > 1e6
			})
			sw := scrape(t, l.Node("sw"), at)
			for _, dev := range []string{"eth1", "eth2"} {
				if v, _ := value(sw, "fabriclab_port_dequeued_packets_total", map[string]string{"port": dev, "class": "3"}); v < 100 {
					t.Errorf("the switch's port %s sent %v packets of class 3", dev, v)
				}
			}
		})
	})
	t.Run("lab-wan", func(t *testing.T) {
		deployInNamespaces(t, "../vagrant/lab-wan.yaml", func(l *lab.Lab, at string) {
			waitFor(t, 15*time.Second, "h1's RoCEv2 flow delivers across the tunnel", func() bool {
				q, _ := value(scrape(t, l.Node("h1"), at), "fabriclab_qp_acked_bytes_total", map[string]string{"flow": "h1-h2"})
				return q > 1e6
			})
			enc, _ := value(scrape(t, l.Node("pe1"), at), "fabriclab_tunnel_encap_packets_total", map[string]string{"dev": "eth2"})
			dec, _ := value(scrape(t, l.Node("pe2"), at), "fabriclab_tunnel_decap_packets_total", map[string]string{"dev": "eth2"})
			if enc < 100 || dec < 100 {
				t.Errorf("the tunnel: pe1 encapsulated %v packets, pe2 decapsulated %v", enc, dec)
			}
		})
	})
}

// deployTCPLab is a lab file with tcp flows and series, deployed: h1's
// DCTCP flow and h2's cubic flow cross the switch's marking port to each
// other's tcp servers, which the receivers' fabriclabd run; h1 sends a
// series of short DCTCP flows, h2 a series of RoCEv2 requests on a grid.
const deployTCPLab = `name: tcp-deploy
nodes:
  - {name: h1, kind: host}
  - {name: sw, kind: switch}
  - {name: h2, kind: host}
links:
  - {a: h1:eth1, b: sw:eth1, rate: 1gbit}
  - {a: sw:eth2, b: h2:eth1, rate: 1gbit}
ports:
  - {port: sw:eth2, tc: ["0:step:k=30kb"]}
  - {port: sw:eth1, tc: ["0:step:k=30kb"]}
flows:
  - {name: h1-h2, from: h1, to: h2, transport: tcp, size: 4mb}
  - {name: h2-h1, from: h2, to: h1, transport: tcp, cc: cubic, size: 2mb}
  - {name: h1-short, from: h1, to: h2, transport: tcp, size: 10kb, size_max: 100kb, count: 20, pause: 10ms}
  - {name: h2-rpc, from: h2, to: h1, size: 20kb, size_max: 60kb, count: 10, every: 100ms, line_rate: 1gbit}
`

// TestDeployTCPAndSeries: a lab file's tcp flows and series on lab
// servers: each receiver's fabriclabd serves them (one tcp server per
// congestion control), each sender's runs its flow again and again
// through the switch's virtual-queue port, which marks; DCTCP's CE is
// echoed; every run delivers its size. A series runs its count (sized
// from the file's seed, every slot or pause apart), and each delivered
// instance is in the flow's FCT and FCT/ideal histograms.
func TestDeployTCPAndSeries(t *testing.T) {
	labtest.RequireRoot(t)
	path := filepath.Join(t.TempDir(), "tcp.yaml")
	if err := os.WriteFile(path, []byte(deployTCPLab), 0o644); err != nil {
		t.Fatal(err)
	}
	deployInNamespaces(t, path, func(l *lab.Lab, at string) {
		for _, c := range []struct{ from, flow string }{{"h1", "h1-h2"}, {"h2", "h2-h1"}} {
			waitFor(t, 20*time.Second, c.flow+" delivers twice", func() bool {
				mf := scrape(t, l.Node(c.from), at)
				runs, _ := value(mf, "fabriclab_flow_runs_total", map[string]string{"flow": c.flow})
				fails, _ := value(mf, "fabriclab_flow_failures_total", map[string]string{"flow": c.flow})
				return runs-fails >= 2
			})
		}
		m1, m2 := scrape(t, l.Node("h1"), at), scrape(t, l.Node("h2"), at)
		flow := func(mf map[string]*dto.MetricFamily, name, metric string) float64 {
			v, _ := value(mf, metric, map[string]string{"flow": name})
			return v
		}
		for _, c := range []struct {
			mf   map[string]*dto.MetricFamily
			name string
			size float64
		}{{m1, "h1-h2", 4 << 20}, {m2, "h2-h1", 2 << 20}} {
			runs, fails, bytes := flow(c.mf, c.name, "fabriclab_flow_runs_total"), flow(c.mf, c.name, "fabriclab_flow_failures_total"), flow(c.mf, c.name, "fabriclab_flow_received_bytes_total")
			t.Logf("%s: %v runs, %v failed, %v bytes, last at %.0f Mbit/s, %v CE echoed, %v without ECN", c.name, runs, fails, bytes,
				flow(c.mf, c.name, "fabriclab_flow_last_bits_per_second")/1e6, flow(c.mf, c.name, "fabriclab_flow_tcp_delivered_ce_total"),
				flow(c.mf, c.name, "fabriclab_flow_tcp_no_ecn_runs_total"))
			// The daemons start together: a first run may find the
			// receiver's server not yet listening (refused, counted,
			// run again a second later); none fails after.
			if fails > 1 || runs-fails < 1 || bytes != (runs-fails)*c.size || flow(c.mf, c.name, "fabriclab_flow_tcp_no_ecn_runs_total") != 0 {
				t.Errorf("%s: %v runs (%v failed) delivered %v bytes (want %v each), every one with ECN", c.name, runs, fails, bytes, c.size)
			}
		}
		// The receivers' servers: h2 serves dctcp, h1 cubic.
		if v, _ := value(m2, "fabriclab_tcp_server_connections_total", nil); v < 2 {
			t.Errorf("h2's tcp server accepted %v connections, h1's flow delivered at least twice", v)
		}
		// The series: a cycle each, every instance's FCT observed.
		for _, c := range []struct{ from, flow string }{{"h1", "h1-short"}, {"h2", "h2-rpc"}} {
			count := map[string]float64{"h1-short": 20, "h2-rpc": 10}[c.flow]
			labels := map[string]string{"flow": c.flow}
			waitFor(t, 20*time.Second, c.flow+" runs a whole series", func() bool {
				v, _ := value(scrape(t, l.Node(c.from), at), "fabriclab_flow_runs_total", labels)
				return v >= count+1
			})
			mf := scrape(t, l.Node(c.from), at)
			runs, _ := value(mf, "fabriclab_flow_runs_total", labels)
			fails, _ := value(mf, "fabriclab_flow_failures_total", labels)
			fcts, _ := value(mf, "fabriclab_flow_fct_seconds", labels)
			ratios, _ := value(mf, "fabriclab_flow_fct_ideal_ratio", labels)
			late, _ := value(mf, "fabriclab_flow_late_runs_total", labels)
			t.Logf("%s: %v runs, %v failed, %v FCTs (mean %.2f ms), %v FCT/ideal (mean %.2f), %v late", c.flow, runs, fails,
				fcts, 1e3*histMean(mf, "fabriclab_flow_fct_seconds", labels), ratios, histMean(mf, "fabriclab_flow_fct_ideal_ratio", labels), late)
			if fails > 1 || fcts != runs-fails || ratios != fcts {
				t.Errorf("%s: %v runs (%v failed): %v FCTs and %v ratios observed, want one per delivered run", c.flow, runs, fails, fcts, ratios)
			}
		}
		// h1's DCTCP runs through the marking port see CE echoed. Only
		// those after the switch's daemon attached its ports: a host's
		// flows start with its own daemon, and on a busy machine the
		// switch's programs load later (its earlier runs crossed a plain
		// forwarder at veth speed, unmarked).
		m1 = scrape(t, l.Node("h1"), at)
		runs0, ce0 := flow(m1, "h1-h2", "fabriclab_flow_runs_total"), flow(m1, "h1-h2", "fabriclab_flow_tcp_delivered_ce_total")
		waitFor(t, 10*time.Second, "h1-h2 runs twice more", func() bool {
			return flow(scrape(t, l.Node("h1"), at), "h1-h2", "fabriclab_flow_runs_total") >= runs0+2
		})
		m1 = scrape(t, l.Node("h1"), at)
		if ce := flow(m1, "h1-h2", "fabriclab_flow_tcp_delivered_ce_total") - ce0; ce == 0 {
			t.Errorf("h1's DCTCP flow had no CE echoed through the marking port in its last runs (%v Mbit/s)", flow(m1, "h1-h2", "fabriclab_flow_last_bits_per_second")/1e6)
		}
		sw := scrape(t, l.Node("sw"), at)
		if v, _ := value(sw, "fabriclab_port_ce_marked_ect0_total", map[string]string{"port": "eth2", "class": "0"}); v == 0 {
			t.Errorf("the switch's port toward h2 marked nothing")
		}
	})
}

// deployInNamespaces provisions the lab file's nodes, each in a namespace
// of its own, runs check on them and stops the daemons.
func deployInNamespaces(t *testing.T, path string, check func(l *lab.Lab, at string)) {
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(src), "1gbit", "200mbit")
	text = strings.ReplaceAll(text, "delay: 5ms, ", "")
	file := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := labfile.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := f.DeployPlan()
	if err != nil {
		t.Fatal(err)
	}
	// The "VMs": their NICs exist (the veths), nothing else; plan -apply
	// does the rest, as provision.sh does in a VM.
	spec := dp.Spec
	spec.Routes = nil
	for i := range spec.Nodes {
		spec.Nodes[i].Forwarding = false
	}
	l := lab.BuildT(t, spec)

	bins := t.TempDir()
	for _, cmd := range []string{"fabriclab", "fabriclabd"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(bins, cmd), "github.com/fabriclab/fabriclab/cmd/"+cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", cmd, err, out)
		}
	}
	nsenter := func(n *lab.Node, args ...string) *exec.Cmd {
		return exec.Command("nsenter", append([]string{"--net=" + filepath.Join(lab.NetnsDir, n.NetnsName)}, args...)...)
	}
	for _, n := range f.Nodes {
		out, err := nsenter(l.Node(n.Name), filepath.Join(bins, "fabriclab"), "plan", file, "-node", n.Name, "-apply").CombinedOutput()
		if err != nil {
			t.Fatalf("fabriclab plan -node %s -apply: %v\n%s", n.Name, err, out)
		}
		t.Logf("%s", out)
	}
	for _, n := range f.Nodes {
		want := map[bool]string{true: "0", false: "1"}[n.Kind == labfile.KindHost]
		if v, err := l.Node(n.Name).ReadSysctl("net.ipv4.ip_forward"); err != nil || v != want {
			t.Fatalf("%s (%s) has ip_forward %q after plan -apply (%v), want %s", n.Name, n.Kind, v, err, want)
		}
	}

	// A fabriclabd per node, as the provisioning writes it.
	type daemonProc struct {
		cmd    *exec.Cmd
		exited chan error
		logs   *lockedBuilder
	}
	procs := map[string]*daemonProc{}
	for _, n := range f.Nodes {
		conf := filepath.Join(t.TempDir(), "fabriclabd.yaml")
		text := "log: {level: info}\nmetrics: {listen: \"127.0.0.1:9471\"}\ndrain_timeout: 10s\nlab: {file: " + file + ", node: " + n.Name + "}\n"
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		p := &daemonProc{cmd: nsenter(l.Node(n.Name), filepath.Join(bins, "fabriclabd"), "-config", conf), exited: make(chan error, 1), logs: &lockedBuilder{}}
		p.cmd.Stderr = p.logs
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.exited <- p.cmd.Wait() }()
		procs[n.Name] = p
	}
	t.Cleanup(func() {
		for name, p := range procs {
			if p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Signal(syscall.SIGKILL)
				<-p.exited
				for _, dev := range []string{"eth1", "eth2"} {
					_ = qdisc.Forget(l.Node(name).NetnsName, dev)
				}
			}
			if t.Failed() {
				t.Logf("fabriclabd %s:\n%s", name, p.logs.String())
			}
		}
		_ = os.RemoveAll(filepath.Join(filepath.Dir(qdisc.MetaRoot), "fabriclabd"))
	})
	const at = "127.0.0.1:9471" // each node's own loopback
	for name := range procs {
		waitFor(t, 30*time.Second, name+"'s fabriclabd healthy", func() bool {
			h, err := healthz(l.Node(name), at)
			return err == nil && h.Status == "ok"
		})
	}

	check(l, at)

	// Stop: every daemon drains and detaches.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.exited:
			if err != nil {
				t.Errorf("fabriclabd %s exited with %v", name, err)
			}
		case <-ctx.Done():
			t.Fatalf("fabriclabd %s still running 30 s after SIGTERM", name)
		}
	}
	for _, n := range f.Nodes {
		for _, dev := range []string{"eth1", "eth2"} {
			if p, err := qdisc.Open(l.Node(n.Name).NetnsName, dev); err == nil {
				p.Release()
				t.Errorf("%s:%s still has a port after its daemon stopped", n.Name, dev)
			}
		}
	}
}

// histMean is the mean of the histogram name's series with labels.
func histMean(mf map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f, ok := mf[name]
	if !ok {
		return 0
	}
	var n uint64
	var sum float64
	for _, m := range f.Metric {
		if h := m.Histogram; h != nil && hasLabels(m, labels) {
			n += h.GetSampleCount()
			sum += h.GetSampleSum()
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		if !slices.ContainsFunc(m.Label, func(lp *dto.LabelPair) bool { return lp.GetName() == k && lp.GetValue() == v }) {
			return false
		}
	}
	return true
}
