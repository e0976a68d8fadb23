package netnstests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/qdisc"
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
