package netnstests

import (
	"context"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/tcpflow"
)

const daemonTCPConfig = `
log: {level: debug}
metrics: {listen: "198.18.10.1:9471"}
drain_timeout: 20s
servers:
  - {transport: tcp, bind: 198.18.10.1}
ports:
  - dev: eth0
    mode: virtual
    rate: 200mbit
    tc: ["0:step:k=30kb"]
flows:
  - name: dctcp-to-c
    transport: tcp
    server: 198.18.10.2:18700
    size: 4MB
    repeat: true
    pause: 100ms
`

// TestDaemonTCP: fabriclabd's tcp server and tcp flow (a lab file's tcp
// nodes deployed): a kernel connection to the daemon's server is counted
// in its metrics byte for byte; the daemon's DCTCP flow (the kernel's, or
// the BPF DCTCP it registers) repeats through its virtual-queue port,
// which marks, and the flow's metrics show ECN negotiated and CE echoed;
// a reload that keeps the flow keeps its runs; SIGTERM drains and exits 0.
func TestDaemonTCP(t *testing.T) {
	dl := newDaemonLab(t)
	for _, n := range []string{"d", "c"} {
		if err := dl.Node(n).Sysctl("net.ipv4.tcp_ecn", "1"); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildDaemon(t)

	// c's tcp server, with DCTCP for the echo, as another lab server's.
	var ccs tcpflow.CCs
	t.Cleanup(func() { _ = ccs.Close() })
	dctcp, _, err := ccs.Resolve(tcpflow.DCTCP)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := tcpflow.Listen(dl.c.Do, netip.MustParseAddrPort("198.18.10.2:18700"), dctcp)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	go srv.Serve(sctx)
	t.Cleanup(func() { scancel(); srv.Close() })

	dl.writeConfig(t, daemonTCPConfig)
	dl.start(t, bin)

	// 1. A connection from c to the daemon's server.
	rep, err := tcpflow.Run(context.Background(), dl.c.Do, tcpflow.Conn{Server: netip.MustParseAddrPort("198.18.10.1:18517"), CC: dctcp, Size: 4 << 20}, nil)
	if err != nil {
		t.Fatalf("tcp to the daemon: %v", err)
	}
	mf := dl.metrics(t)
	srvLabel := map[string]string{"server": "tcp/198.18.10.1:18517"}
	if got, _ := value(mf, "fabriclab_tcp_server_received_bytes_total", srvLabel); uint64(got) != rep.Delivered || rep.Delivered != 4<<20 {
		t.Errorf("fabriclab_tcp_server_received_bytes_total = %v, the connection delivered %d (want %d)", got, rep.Delivered, 4<<20)
	}
	if got, _ := value(mf, "fabriclab_tcp_server_connections_total", srvLabel); got != 1 {
		t.Errorf("fabriclab_tcp_server_connections_total = %v, want 1", got)
	}

	// 2. The daemon's flow repeats, marked by its port, CE echoed.
	flow := map[string]string{"flow": "dctcp-to-c"}
	waitFor(t, 20*time.Second, "three runs of the tcp flow", func() bool {
		v, _ := value(dl.metrics(t), "fabriclab_flow_runs_total", flow)
		return v >= 3
	})
	mf = dl.metrics(t)
	runs, _ := value(mf, "fabriclab_flow_runs_total", flow)
	fails, _ := value(mf, "fabriclab_flow_failures_total", flow)
	bytes, _ := value(mf, "fabriclab_flow_received_bytes_total", flow)
	ce, _ := value(mf, "fabriclab_flow_tcp_delivered_ce_total", flow)
	noECN, _ := value(mf, "fabriclab_flow_tcp_no_ecn_runs_total", flow)
	marks, _ := value(mf, "fabriclab_port_ce_marked_ect0_total", map[string]string{"port": "eth0", "class": "0"})
	t.Logf("%v runs, %v failed, %v bytes, %v CE-echoed segments, %v runs without ECN; the port marked %v", runs, fails, bytes, ce, noECN, marks)
	if fails != 0 || bytes < runs*(4<<20)-1 || bytes > runs*(4<<20)+1 {
		t.Errorf("%v runs (%v failed) delivered %v bytes, want %v each", runs, fails, bytes, 4<<20)
	}
	if noECN != 0 || ce == 0 || marks == 0 {
		t.Errorf("ECN: %v runs without it, %v CE echoed, %v marks at the port", noECN, ce, marks)
	}

	// 3. A reload that keeps the flow keeps it running.
	dl.writeConfig(t, strings.Replace(daemonTCPConfig, "k=30kb", "k=60kb", 1))
	dl.signal(t, syscall.SIGHUP)
	waitFor(t, 5*time.Second, "generation 2", func() bool { h, _ := dl.health(); return h.Generation == 2 })
	if r, _ := value(dl.metrics(t), "fabriclab_flow_runs_total", flow); r < runs {
		t.Errorf("the flow's runs went %v -> %v across the reload (restarted)", runs, r)
	}

	// 4. SIGTERM: drained, exit 0.
	dl.signal(t, syscall.SIGTERM)
	dl.waitExit(t)
	if !strings.Contains(dl.logs.String(), `"msg":"drained"`) {
		t.Errorf("no drained line in the JSON log")
	}
}
