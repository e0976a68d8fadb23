package netnstests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fabriclab/fabriclab/host/daemon"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// daemonLab is a lab server d running fabriclabd and a client c, joined by
// one veth: d's eth0 carries a virtual-queue port (what a NIC gets).
type daemonLab struct {
	*lab.Lab
	d, c         *lab.Node
	dAddr, cAddr netip.Addr
	dir, conf    string
	cmd          *exec.Cmd
	exited       chan error
	logs         *lockedBuilder
	// mNode and mAddr are where the tests reach the daemon's HTTP
	// endpoint from: c, over the link, unless a test moves it.
	mNode *lab.Node
	mAddr string
}

const daemonMetrics = "198.18.10.1:9471"

func newDaemonLab(t *testing.T) *daemonLab {
	labtest.RequireRoot(t)
	l := lab.BuildT(t, lab.Spec{
		Nodes: []lab.NodeSpec{{Name: "d"}, {Name: "c"}},
		Links: []lab.LinkSpec{{
			A:               lab.Endpoint{Node: "d", Dev: "eth0", Addr: netip.MustParsePrefix("198.18.10.1/24")},
			B:               lab.Endpoint{Node: "c", Dev: "eth0", Addr: netip.MustParsePrefix("198.18.10.2/24")},
			DisableOffloads: true,
			MTU:             9000, // UET's full data packet is 4096 bytes
		}},
	})
	dl := &daemonLab{Lab: l, d: l.Node("d"), c: l.Node("c"),
		dAddr: netip.MustParseAddr("198.18.10.1"), cAddr: netip.MustParseAddr("198.18.10.2"),
		dir: t.TempDir(), logs: &lockedBuilder{}}
	dl.mNode, dl.mAddr = dl.c, daemonMetrics
	dl.conf = filepath.Join(dl.dir, "fabriclabd.yaml")
	return dl
}

// buildDaemon builds cmd/fabriclabd once per test binary.
func buildDaemon(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fabriclabd")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fabriclab/fabriclab/cmd/fabriclabd").CombinedOutput()
	if err != nil {
		t.Fatalf("go build fabriclabd: %v\n%s", err, out)
	}
	return bin
}

func (dl *daemonLab) writeConfig(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(dl.conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// start runs fabriclabd in d and waits for /healthz.
func (dl *daemonLab) start(t *testing.T, bin string) {
	t.Helper()
	// nsenter, not ip netns exec: the daemon must share this mount
	// namespace's bpffs, where it pins its port for portctl (as under
	// systemd's NetworkNamespacePath=). It execs: the pid is the daemon's.
	dl.cmd = exec.Command("nsenter", "--net="+filepath.Join(lab.NetnsDir, dl.d.NetnsName), bin, "-config", dl.conf)
	dl.cmd.Stderr = dl.logs
	if err := dl.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dl.exited = make(chan error, 1)
	go func() { dl.exited <- dl.cmd.Wait() }()
	t.Cleanup(func() {
		if dl.cmd.ProcessState == nil {
			_ = dl.cmd.Process.Signal(syscall.SIGKILL)
			<-dl.exited
			// What a killed daemon left: its port and ownership mark.
			if err := qdisc.Forget(dl.d.NetnsName, "eth0"); err != nil {
				t.Errorf("detach the killed daemon's port: %v", err)
			}
			if mark, err := daemon.OwnershipMark(daemon.PortConfig{Netns: dl.d.NetnsName, Dev: "eth0"}); err == nil {
				_ = os.Remove(mark)
			}
		}
		if t.Failed() {
			t.Logf("fabriclabd log:\n%s", dl.logs.String())
		}
	})
	// Loading the port's and the NP's programs takes the verifier a few
	// seconds on a busy 2-core machine.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if h, err := dl.health(); err == nil && h.Status == "ok" {
			return
		}
		select {
		case err := <-dl.exited:
			dl.exited <- err
			t.Fatalf("fabriclabd exited at start: %v\n%s", err, dl.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("fabriclabd not healthy after 30 s\n%s", dl.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// httpGet fetches path from a daemon's HTTP endpoint at addr, from
// inside n (a plain HTTP/1.0 exchange on a socket made in n).
func httpGet(n *lab.Node, addr, path string) (*http.Response, []byte, error) {
	var resp *http.Response
	var body []byte
	err := n.Do(func() error {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: fabriclabd\r\nAccept: text/plain\r\n\r\n", path)
		resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		body, err = io.ReadAll(resp.Body)
		return err
	})
	return resp, body, err
}

// healthz reads a daemon's /healthz.
func healthz(n *lab.Node, addr string) (daemon.Health, error) {
	var h daemon.Health
	_, body, err := httpGet(n, addr, "/healthz")
	if err != nil {
		return h, err
	}
	return h, json.Unmarshal(body, &h)
}

// scrape reads a daemon's /metrics.
func scrape(t *testing.T, n *lab.Node, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	_, body, err := httpGet(n, addr, "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	return mf
}

func (dl *daemonLab) health() (daemon.Health, error) { return healthz(dl.mNode, dl.mAddr) }

func (dl *daemonLab) metrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	return scrape(t, dl.mNode, dl.mAddr)
}

// lockedBuilder collects a child's stderr for the test's log.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// value is the sum of the metric's series whose labels include want.
func value(mf map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := mf[name]
	if !ok {
		return 0, false
	}
	var sum float64
	found := false
next:
	for _, m := range f.Metric {
		for k, v := range want {
			hit := false
			for _, lp := range m.Label {
				if lp.GetName() == k && lp.GetValue() == v {
					hit = true
				}
			}
			if !hit {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil: // its count
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, found
}

func (dl *daemonLab) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := dl.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// waitExit waits for the daemon to exit cleanly after SIGTERM (its drain).
func (dl *daemonLab) waitExit(t *testing.T) {
	t.Helper()
	select {
	case err := <-dl.exited:
		if err != nil {
			t.Errorf("fabriclabd exited with %v after SIGTERM", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("fabriclabd still running 15 s after SIGTERM")
	}
}

// runClient runs a roceperf client in c against the daemon.
func (dl *daemonLab) runClient(ctx context.Context, cfg perf.ClientConfig) (*perf.Report, error) {
	var r *perf.Report
	err := dl.c.Do(func() error {
		var err error
		r, err = perf.RunClient(ctx, cfg)
		return err
	})
	return r, err
}

const daemonConfig = `
log: {level: debug}
metrics: {listen: "198.18.10.1:9471"}
drain_timeout: 20s
servers:
  - {transport: rocev2, bind: 198.18.10.1, port: 18515}
  - {transport: uet, bind: 198.18.10.1, port: 18516}
profiles:
  dcqcn:
    gentle: {base: mlx5, knobs: {rpg_time_reset: 300}}
ports:
  - dev: eth0
    mode: virtual
    rate: 200mbit
    tc: ["3:wred:min=30kb,max=200kb,p=0.2"]
flows:
  - name: to-c
    server: 198.18.10.2:18600
    line_rate: 300mbit
    dcqcn: gentle
    duration: 40s
`

// serveFlows runs a roceperf server in c (198.18.10.2:18600, RoCEv2 on
// 4791) for the daemon's flows, as another lab server would, until the
// test ends.
func (dl *daemonLab) serveFlows(t *testing.T) {
	t.Helper()
	var srv *perf.Server
	if err := dl.c.Do(func() error {
		var err error
		srv, err = perf.Listen(perf.ServerConfig{Bind: dl.cAddr, Port: 18600, UDPPort: 4791, Interval: -1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	go srv.Serve(sctx)
	t.Cleanup(func() { scancel(); srv.Close() })
}

// TestDaemon runs fabriclabd in a namespace: it serves roceperf clients
// over RoCEv2 and UET, its metrics match the clients' reports, a reload
// keeps a running flow and session and retunes the port live, a bad
// reload is refused with the field named, and SIGTERM drains a session in
// progress, detaches the port and leaves nothing behind.
func TestDaemon(t *testing.T) {
	dl := newDaemonLab(t)
	bin := buildDaemon(t)

	dl.serveFlows(t)

	dl.writeConfig(t, daemonConfig)
	dl.start(t, bin)

	// 1. A RoCEv2 client, exactly as against roceperf -s.
	ctx := context.Background()
	rc := perf.DefaultClientConfig(dl.dAddr.String())
	rc.Bytes, rc.LineRate, rc.QPs, rc.Interval = 4<<20, 150_000_000, 2, 0
	r, err := dl.runClient(ctx, rc)
	if err != nil {
		t.Fatalf("rocev2 client: %v", err)
	}
	var recv, ce, cnps uint64
	for _, q := range r.End.Counters.Server {
		recv += q.Counters.RecvBytes
		ce += q.Counters.NPECNMarkedRoCEPackets
		cnps += q.Counters.NPCNPSent
	}
	if recv != 4<<20 {
		t.Fatalf("the server placed %d bytes, want %d", recv, 4<<20)
	}
	mf := dl.metrics(t)
	srvLabel := map[string]string{"server": "rocev2/198.18.10.1:18515"}
	for _, c := range []struct {
		name string
		want uint64
	}{
		{"fabriclab_rocev2_received_bytes_total", recv},
		{"fabriclab_rocev2_np_ecn_marked_roce_packets_total", ce},
		{"fabriclab_rocev2_np_cnp_sent_total", cnps},
	} {
		got, ok := value(mf, c.name, srvLabel)
		if !ok || uint64(got) != c.want {
			t.Errorf("%s = %v (found %v), the client's report says %d", c.name, got, ok, c.want)
		}
	}
	t.Logf("rocev2 session: %d bytes, %d CE, %d CNPs; metrics agree", recv, ce, cnps)

	// 2. A UET client.
	uc := perf.DefaultUETClientConfig(dl.dAddr.String() + ":18516")
	uc.Bytes, uc.LineRate, uc.QPs, uc.Interval = 4<<20, 300_000_000, 2, 0
	ur, err := dl.runClient(ctx, uc)
	if err != nil {
		t.Fatalf("uet client: %v", err)
	}
	var uetBytes uint64
	for _, s := range ur.End.UET.Receiver {
		uetBytes += s.MessageBytes
	}
	mf = dl.metrics(t)
	if got, _ := value(mf, "fabriclab_uet_rx_payload_bytes_total", map[string]string{"server": "uet/198.18.10.1:18516"}); uint64(got) != uetBytes || uetBytes != 4<<20 {
		t.Errorf("fabriclab_uet_rx_payload_bytes_total = %v, the client's report says %d (want %d)", got, uetBytes, 4<<20)
	}

	// 3. The flow to c runs; the port counts its traffic.
	waitFor(t, 5*time.Second, "the flow's QP acknowledges bytes", func() bool {
		v, _ := value(dl.metrics(t), "fabriclab_qp_acked_bytes_total", map[string]string{"flow": "to-c"})
		return v > 1e6
	})
	mf = dl.metrics(t)
	lintMetrics(t, mf)
	qpn := seriesLabel(mf, "fabriclab_qp_acked_bytes_total", "flow", "to-c", "qpn")
	acked0, _ := value(mf, "fabriclab_qp_acked_bytes_total", map[string]string{"flow": "to-c"})
	enq0, _ := value(mf, "fabriclab_port_enqueued_packets_total", map[string]string{"port": "eth0", "class": "3"})
	if enq0 == 0 {
		t.Fatal("the port counted no RoCE packets in class 3")
	}
	// The machine's xmit dispatcher, with any port (machine-wide: this
	// port is a virtual-queue one, which the dispatcher does not carry,
	// and other processes' ports count too; TestRootLifecycle checks the
	// values).
	if att, ok := value(mf, "fabriclab_xmit_dispatcher_attached", nil); !ok || (att != 0 && att != 1) {
		t.Errorf("fabriclab_xmit_dispatcher_attached = %v (present %v), want 0 or 1", att, ok)
	}
	for _, kind := range []string{"port", "np"} {
		if _, ok := value(mf, "fabriclab_xmit_dispatcher_slots", map[string]string{"kind": kind}); !ok {
			t.Errorf("no fabriclab_xmit_dispatcher_slots{kind=%q}", kind)
		}
	}
	// The flow (300 Mbit/s into the 200 Mbit/s port) is marked, and its
	// QPs react to c's CNPs.
	waitFor(t, 5*time.Second, "CNPs handled by the flow", func() bool {
		v, _ := value(dl.metrics(t), "fabriclab_qp_rp_cnp_handled_total", map[string]string{"flow": "to-c"})
		return v > 0
	})
	mf = dl.metrics(t)
	marks, _ := value(mf, "fabriclab_port_ce_marked_ect0_total", map[string]string{"port": "eth0", "class": "3"})
	cnpsIn, _ := value(mf, "fabriclab_qp_rp_cnp_handled_total", map[string]string{"flow": "to-c"})
	if marks == 0 {
		t.Errorf("the congested port marked nothing")
	}
	t.Logf("port: %v CE marks; flow: %v CNPs handled", marks, cnpsIn)

	// 4. Reload during a client session: the port's AQM changes live,
	// a flow is added, the running flow and the session go on.
	sess := make(chan error, 1)
	go func() {
		c := rc
		c.Bytes, c.Duration = 0, 3*time.Second
		_, err := dl.runClient(ctx, c)
		sess <- err
	}()
	time.Sleep(500 * time.Millisecond)
	dl.writeConfig(t, strings.Replace(daemonConfig, "p=0.2", "p=0.5", 1)+`  - name: uet-to-c
    transport: uet
    server: 198.18.10.2:18601
    line_rate: 300mbit
    size: 1MB
    start: 30s
`)
	dl.signal(t, syscall.SIGHUP)
	waitFor(t, 5*time.Second, "generation 2", func() bool { h, _ := dl.health(); return h.Generation == 2 })
	if err := <-sess; err != nil {
		t.Errorf("a session across the reload failed: %v", err)
	}
	cfg, err := qdisc.Open(dl.d.NetnsName, "eth0")
	if err != nil {
		t.Fatalf("portctl's view of the daemon's port: %v", err)
	}
	qc, err := cfg.Config()
	cfg.Release()
	if err != nil || qc.Classes[3].MaxP != 0.5 {
		t.Errorf("after the reload class 3 max_p = %v (%v), want 0.5", qc.Classes[3].MaxP, err)
	}
	mf = dl.metrics(t)
	if q := seriesLabel(mf, "fabriclab_qp_acked_bytes_total", "flow", "to-c", "qpn"); q != qpn {
		t.Errorf("the flow's QP changed across the reload: %s -> %s (restarted)", qpn, q)
	}
	if a, _ := value(mf, "fabriclab_qp_acked_bytes_total", map[string]string{"flow": "to-c"}); a <= acked0 {
		t.Errorf("the flow's acked bytes went %v -> %v across the reload", acked0, a)
	}
	if e, _ := value(mf, "fabriclab_port_enqueued_packets_total", map[string]string{"port": "eth0", "class": "3"}); e < enq0 {
		t.Errorf("the port's counters went back across the reload: %v -> %v", enq0, e)
	}

	// 5. A bad reload is refused with the field named; everything runs on.
	dl.writeConfig(t, strings.Replace(daemonConfig, "rate: 200mbit", "rate: 200mbps-ish", 1))
	dl.signal(t, syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the refusal", func() bool { h, _ := dl.health(); return h.ReloadsFailed == 1 })
	h, _ := dl.health()
	if !strings.Contains(h.LastReloadError, "ports[0].rate") || !strings.Contains(h.LastReloadError, "200mbps-ish") || h.Generation != 2 || h.Status != "ok" {
		t.Errorf("after a bad reload: %+v", h)
	}
	if v, _ := value(dl.metrics(t), "fabriclab_config_last_reload_successful", nil); v != 0 {
		t.Errorf("fabriclab_config_last_reload_successful = %v after a refused reload", v)
	}
	t.Logf("refused: %s", h.LastReloadError)

	// 6. SIGTERM drains: a session in progress completes, then the daemon
	// detaches its port and exits 0.
	go func() {
		c := rc
		c.Bytes, c.Duration = 0, 2*time.Second
		_, err := dl.runClient(ctx, c)
		sess <- err
	}()
	time.Sleep(500 * time.Millisecond)
	dl.signal(t, syscall.SIGTERM)
	if err := <-sess; err != nil {
		t.Errorf("a session in progress at SIGTERM failed: %v", err)
	}
	dl.waitExit(t)
	if !strings.Contains(dl.logs.String(), `"msg":"drained"`) {
		t.Errorf("no drained line in the JSON log")
	}
	// Leftovers: no port, no pins, no ownership mark.
	if p, err := qdisc.Open(dl.d.NetnsName, "eth0"); err == nil {
		p.Release()
		t.Error("the port is still attached after the daemon exited")
	}
	mark, err := daemon.OwnershipMark(daemon.PortConfig{Netns: dl.d.NetnsName, Dev: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mark); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ownership mark %s left (%v)", mark, err)
	}
}

func seriesLabel(mf map[string]*dto.MetricFamily, name, key, val, want string) string {
	f, ok := mf[name]
	if !ok {
		return ""
	}
	for _, m := range f.Metric {
		hit, out := false, ""
		for _, lp := range m.Label {
			if lp.GetName() == key && lp.GetValue() == val {
				hit = true
			}
			if lp.GetName() == want {
				out = lp.GetValue()
			}
		}
		if hit {
			return out
		}
	}
	return ""
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDaemonUnderIPNetnsExec: under ip netns exec, whose fresh /sys hides
// the system's bpffs, the daemon would pin its port where portctl --netns
// never looks (`open pinned map port_cfg: no such file or directory`). It
// refuses instead, saying how to start it, and leaves no port behind.
func TestDaemonUnderIPNetnsExec(t *testing.T) {
	dl := newDaemonLab(t)
	bin := buildDaemon(t)
	dl.writeConfig(t, daemonConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", dl.d.NetnsName, bin, "-config", dl.conf).CombinedOutput()
	t.Logf("fabriclabd under ip netns exec: %v\n%s", err, out)
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "nsenter --net=/run/netns/NAME") {
		t.Fatalf("want a refusal that names nsenter, at once")
	}
	if p, err := qdisc.Open(dl.d.NetnsName, "eth0"); err == nil {
		_ = p.Close()
		t.Errorf("a port is attached to eth0 after the refusal")
	}
}

// lintMetrics: a live scrape passes promtool check metrics' lint, and its
// label values are neither spaced nor empty (but the owner pair's).
func lintMetrics(t *testing.T, mf map[string]*dto.MetricFamily) {
	t.Helper()
	var mfs []*dto.MetricFamily
	for _, m := range mf {
		mfs = append(mfs, m)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for name, m := range mf {
		for _, s := range m.GetMetric() {
			for _, l := range s.GetLabel() {
				// A series is a server's or a flow's: the other owner
				// label is empty, which PromQL reads as absent.
				owner := l.GetName() == "server" || l.GetName() == "flow"
				if v := l.GetValue(); v == "" && !owner || strings.ContainsAny(v, " \t") {
					t.Errorf("%s{%s=%q}: an empty or spaced label value", name, l.GetName(), v)
				}
			}
		}
	}
}

// TestDaemonKilled: a fabriclabd killed with SIGKILL leaves its port
// attached and its ownership mark. A daemon next door (another namespace,
// the same device name, a port portctl attached) must not take that mark
// for its own: it refuses to start rather than detach portctl's port.
// Restarted, the killed daemon detaches its own leftover, attaches afresh,
// and on SIGTERM leaves nothing behind.
func TestDaemonKilled(t *testing.T) {
	dl := newDaemonLab(t)
	bin := buildDaemon(t)
	dl.writeConfig(t, "metrics: {listen: \""+daemonMetrics+"\"}\nports:\n  - {dev: eth0, mode: virtual, rate: 200mbit}\n")
	dl.start(t, bin)
	if err := dl.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-dl.exited
	mark, err := daemon.OwnershipMark(daemon.PortConfig{Netns: dl.d.NetnsName, Dev: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the killed daemon's ownership mark: %v", err)
	}
	left, err := qdisc.Open(dl.d.NetnsName, "eth0")
	if err != nil {
		t.Fatalf("the killed daemon's port: %v", err)
	}
	left.Release()

	// Next door: portctl's port on c's eth0, and a daemon for that eth0.
	pc, err := qdisc.Attach(qdisc.DefaultConfig(units.Gbit), qdisc.AttachOptions{Dev: "eth0", Netns: dl.c.NetnsName, Pin: true})
	if err != nil {
		t.Fatal(err)
	}
	pc.Release()
	t.Cleanup(func() { _ = qdisc.Forget(dl.c.NetnsName, "eth0") })
	nextConf := filepath.Join(t.TempDir(), "fabriclabd.yaml")
	if err := os.WriteFile(nextConf, []byte("metrics: {listen: \"198.18.10.2:9471\"}\nports:\n  - {dev: eth0, mode: virtual, rate: 200mbit}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := exec.CommandContext(ctx, "nsenter", "--net="+filepath.Join(lab.NetnsDir, dl.c.NetnsName), bin, "-config", nextConf)
	out, err := next.CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "already attached") || strings.Contains(string(out), "left attached by an earlier") {
		t.Fatalf("the daemon next door: %v (context %v), want it to refuse portctl's port:\n%s", err, ctx.Err(), out)
	}
	if p, err := qdisc.Open(dl.c.NetnsName, "eth0"); err != nil {
		t.Fatalf("portctl's port next door is gone: %v", err)
	} else {
		p.Release()
	}

	// The killed daemon, restarted, takes its own port back.
	dl.start(t, bin)
	if !strings.Contains(dl.logs.String(), "left attached by an earlier fabriclabd") {
		t.Errorf("the restarted daemon did not detach its leftover port")
	}
	dl.signal(t, syscall.SIGTERM)
	dl.waitExit(t)
	if _, err := os.Stat(mark); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ownership mark %s left after SIGTERM (%v)", mark, err)
	}
	if p, err := qdisc.Open(dl.d.NetnsName, "eth0"); err == nil {
		p.Release()
		t.Error("the port is still attached after the daemon exited")
	}
	refusal := ""
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "already attached") {
			refusal = strings.TrimSpace(line)
			break
		}
	}
	t.Logf("killed: mark %s and port kept; next door refused: %s", filepath.Base(mark), refusal)
}
