package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/perf"
)

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "roceperf")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type result struct {
	code           int
	stdout, stderr string
}

func runBin(t *testing.T, bin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("roceperf %s: %v", strings.Join(args, " "), err)
	}
	return result{code, out.String(), errb.String()}
}

// TestBinary runs the built command inside a namespace: exit codes, the
// one-line errors, a JSON run, a server run by the binary and SIGINT.
func TestBinary(t *testing.T) {
	labtest.RequireRoot(t)
	bin := buildBinary(t) // in the root namespace, where the module cache may need the network
	labtest.EnterNetns(t)

	oneLine := func(r result, code int, want string) {
		t.Helper()
		if r.code != code || r.stderr != want+"\n" {
			t.Errorf("exit %d, stderr %q; want exit %d, stderr %q", r.code, r.stderr, code, want+"\n")
		}
	}
	oneLine(runBin(t, bin), exitUsage, "roceperf: give -s to run a server or -c HOST to run a client (roceperf -h for help)")
	oneLine(runBin(t, bin, "-s", "-c", "198.18.0.1"), exitUsage, "roceperf: -s and -c: run either a server (-s) or a client (-c HOST), not both")
	oneLine(runBin(t, bin, "-c", "198.18.0.1", "-P", "0"), exitUsage, "roceperf: -P 0: must be 1..16384")
	oneLine(runBin(t, bin, "-c", "198.18.0.2", "-t", "1"), exitRuntime, "roceperf: cannot reach server 198.18.0.2:18515: connection refused")
	oneLine(runBin(t, bin, "-c", "198.18.0.9", "-t", "1"), exitRuntime, "roceperf: cannot reach server 198.18.0.9:18515: network is unreachable")

	// An in-process server holds the side channel's port: the binary's
	// server cannot (UDP 4791 is the host's, shared).
	srv, err := perf.Listen(perf.ServerConfig{Bind: netip.MustParseAddr("198.18.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		<-served
		srv.Close()
	}()
	oneLine(runBin(t, bin, "-s", "-B", "198.18.0.1"), exitRuntime, "roceperf: -p 18515: already in use on 198.18.0.1 (tcp)")

	// A JSON run against it.
	// More time to recover from a stall than the defaults' 8 × 16 ms: the
	// server is in this (maybe race-instrumented) process, on a VM with two
	// CPUs other tests may be using.
	args := []string{"-c", "198.18.0.1", "-t", "1", "-P", "2", "-i", "0.5", "-J", "--verify", "--timeout", "64", "--retry", "15"}
	if raceDetector {
		args = append(args, "--timeout", "200", "--retry", "50")
	}
	r := runBin(t, bin, args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("JSON run: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep perf.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("-J output is not a report: %v\n%s", err, r.stdout)
	}
	if rep.End.SumSent.Bytes == 0 || rep.End.SumReceived.Bytes != rep.End.SumSent.Bytes || len(rep.End.Streams) != 2 {
		t.Errorf("JSON run: sent %d, received %d, %d streams", rep.End.SumSent.Bytes, rep.End.SumReceived.Bytes, len(rep.End.Streams))
	}
	var generic map[string]any
	_ = json.Unmarshal([]byte(r.stdout), &generic)
	for _, k := range []string{"start", "intervals", "end"} {
		if _, ok := generic[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}

	// The binary as a one-off server on other ports, the binary as its
	// client, text output.
	server := exec.Command(bin, "-s", "-1", "-B", "198.18.0.1", "-p", "18516", "--udp-port", "4792")
	var sout, serr bytes.Buffer
	server.Stdout, server.Stderr = &sout, &serr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill()
	waitListening(t, "198.18.0.1:18516")
	r = runBin(t, bin, "-c", "198.18.0.1", "-p", "18516", "-n", "4M", "-l", "256K", "--perftest", "--op", "send")
	if r.code != 0 {
		t.Fatalf("client of the binary server: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{"sender", "receiver", "counters: np_cnp_sent=0", " #bytes     #iterations", " 262144     16 "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("client output lacks %q:\n%s", want, r.stdout)
		}
	}
	done := make(chan error, 1)
	go func() { done <- server.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("one-off server: %v, stderr %q", err, serr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the one-off server did not exit after its client")
	}
	if !strings.Contains(sout.String(), "receiver") {
		t.Errorf("server output:\n%s", sout.String())
	}

	// SIGINT ends a run with its summary, as iperf3's does.
	client := exec.Command(bin, "-c", "198.18.0.1", "-t", "30")
	var cout, cerr bytes.Buffer
	client.Stdout, client.Stderr = &cout, &cerr
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	_ = client.Process.Signal(syscall.SIGINT)
	go func() { done <- client.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitRuntime {
			t.Errorf("interrupted client: %v", err)
		}
	case <-time.After(10 * time.Second):
		_ = client.Process.Kill()
		t.Fatal("SIGINT did not end the client")
	}
	if !strings.Contains(cout.String(), "sender") || !strings.Contains(cout.String(), "receiver") {
		t.Errorf("no summary after SIGINT:\n%s", cout.String())
	}
	if cerr.String() != "roceperf: interrupt - the client has terminated\n" {
		t.Errorf("stderr after SIGINT: %q", cerr.String())
	}
}

// waitListening waits until a TCP socket listens on addr in this thread's
// namespace (/proc/thread-self/net/tcp), without connecting: a connection
// would be the one-off server's only session.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	a4 := ap.Addr().As4()
	// /proc/net/tcp prints the address as the hex of its in-memory (little
	// endian) 32-bit value, and the port in host order.
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a4[3], a4[2], a4[1], a4[0], ap.Port())
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/thread-self/net/tcp")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 3 && f[1] == want && f[3] == "0A" { // TCP_LISTEN
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s", addr)
}

// TestBinaryThreeClients: a server and three clients, four processes, share
// UDP 4791 in one namespace. Each process claims its own block of QPNs
// from the namespace's steering (found across processes), each QP sends
// from its own source port, and all three verified runs complete.
func TestBinaryThreeClients(t *testing.T) {
	labtest.RequireRoot(t)
	bin := buildBinary(t)
	labtest.EnterNetns(t)
	server := exec.Command(bin, "-s", "-B", "198.18.0.1", "-p", "18517", "-i", "0")
	var sout, serr bytes.Buffer
	server.Stdout, server.Stderr = &sout, &serr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = server.Process.Signal(syscall.SIGINT)
		_ = server.Wait()
		t.Logf("server:\n%s%s", sout.String(), serr.String())
	}()
	waitListening(t, "198.18.0.1:18517")
	// Paced to 100 Mbit/s, each run lasts 1.3 s, so the three hold their
	// blocks at once: a run that ended before another began would give its
	// block back, and the later one could rightly take it.
	args := []string{"-c", "198.18.0.1", "-p", "18517", "-n", "16M", "-b", "100mbit", "-P", "2", "--verify", "-J", "--timeout", "64", "--retry", "15"}
	if raceDetector {
		args = append(args, "--timeout", "200", "--retry", "50")
	}
	type client struct {
		cmd      *exec.Cmd
		out, err bytes.Buffer
	}
	clients := make([]*client, 3)
	for i := range clients {
		c := &client{cmd: exec.Command(bin, args...)}
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.err
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	blocks := map[uint32]string{}
	for i, c := range clients {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("client %d: %v, stderr %q", i, err, c.err.String())
		}
		var rep perf.Report
		if err := json.Unmarshal(c.out.Bytes(), &rep); err != nil {
			t.Fatalf("client %d: -J output is not a report: %v", i, err)
		}
		if rep.End.SumReceived.Bytes != 16<<20 {
			t.Errorf("client %d: the server received %d bytes, want %d", i, rep.End.SumReceived.Bytes, 16<<20)
		}
		for _, qp := range rep.Start.Connected {
			who := fmt.Sprintf("client %d", i)
			if prev, ok := blocks[qp.QPN>>16]; ok && prev != who {
				t.Errorf("QPN block %#x used by %s and %s", qp.QPN>>16, prev, who)
			}
			blocks[qp.QPN>>16] = who
			if qp.SourcePort != agent.SourcePort(qp.QPN) || qp.LocalPort != 4791 || qp.RemotePort != 4791 {
				t.Errorf("client %d QP %#x: source port %d, receives on %d, sends to %d; want %d, 4791, 4791",
					i, qp.QPN, qp.SourcePort, qp.LocalPort, qp.RemotePort, agent.SourcePort(qp.QPN))
			}
		}
	}
	if len(blocks) != 3 {
		t.Errorf("QPN blocks %v: want one per client process", blocks)
	}
}

// TestBinaryWithoutCapNetRaw: without CAP_NET_RAW (dropped by setpriv) the
// tool fails in one line that says what it needs.
func TestBinaryWithoutCapNetRaw(t *testing.T) {
	labtest.RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	bin := buildBinary(t)
	labtest.EnterNetns(t)
	for _, args := range [][]string{{"-s", "-1"}, {"-c", "198.18.0.1", "-t", "1"}} {
		r := runBin(t, setpriv, append([]string{"--bounding-set=-net_raw", "--inh-caps=-net_raw", bin}, args...)...)
		want := "roceperf: cannot open the RoCEv2 port (UDP 4791): pktio: listen roce 0.0.0.0:4791: the raw send socket needs CAP_NET_RAW"
		if r.code != exitRuntime || !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("roceperf %s without CAP_NET_RAW: exit %d, stderr %q; want exit %d and one line starting %q",
				strings.Join(args, " "), r.code, r.stderr, exitRuntime, want)
		}
	}
}

// TestBinaryUET: the binary as a one-off UET server and as its client, two
// processes on two addresses of one namespace: a verified -J run whose
// report parses, and the errors of the combinations a UET run refuses.
func TestBinaryUET(t *testing.T) {
	labtest.RequireRoot(t)
	bin := buildBinary(t)
	labtest.EnterNetns(t)
	server := exec.Command(bin, "-s", "-1", "--transport", "uet", "-B", "198.18.0.1", "-p", "18521")
	var sout, serr bytes.Buffer
	server.Stdout, server.Stderr = &sout, &serr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill()
	waitListening(t, "198.18.0.1:18521")
	// Without -B the route to 198.18.0.1 picks 198.18.0.1 itself, whose
	// UDP 4793 is the server's.
	r := runBin(t, bin, "-c", "198.18.0.1", "-p", "18521", "--transport", "uet", "-n", "1M")
	if want := "roceperf: -B 198.18.0.1: udp port 4793 is already in use on it (one UET endpoint per address: bind another)\n"; r.code != exitRuntime || r.stderr != want {
		t.Errorf("client on the server's address: exit %d, stderr %q; want %d, %q", r.code, r.stderr, exitRuntime, want)
	}
	r = runBin(t, bin, "-c", "198.18.0.1", "-p", "18521", "--transport", "uet", "-B", "198.18.0.2", "-n", "4M", "-P", "2", "--verify", "-J")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("UET run: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep perf.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("-J output is not a report: %v\n%s", err, r.stdout)
	}
	if rep.Start.TestStart.Protocol != "UET" || rep.End.SumSent.Bytes != 4<<20 || rep.End.SumReceived.Bytes != 4<<20 ||
		rep.End.UET == nil || len(rep.End.UET.Receiver) != 2 || rep.End.UET.Receiver[0].VerifyErrors+rep.End.UET.Receiver[1].VerifyErrors != 0 {
		t.Errorf("UET run: protocol %q, sent %d, received %d, end.uet %+v", rep.Start.TestStart.Protocol, rep.End.SumSent.Bytes, rep.End.SumReceived.Bytes, rep.End.UET)
	}
	done := make(chan error, 1)
	go func() { done <- server.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("one-off server: %v, stderr %q", err, serr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the one-off UET server did not exit after its client")
	}
	for _, want := range []string{"(UET on UDP 4793)", "Session: UET, 2 streams", "receiver: messages=64 verify_errors=0"} {
		if !strings.Contains(sout.String(), want) {
			t.Errorf("server output lacks %q:\n%s", want, sout.String())
		}
	}
	oneLine := func(r result, code int, want string) {
		t.Helper()
		if r.code != code || r.stderr != want+"\n" {
			t.Errorf("exit %d, stderr %q; want exit %d, stderr %q", r.code, r.stderr, code, want+"\n")
		}
	}
	oneLine(runBin(t, bin, "-c", "198.18.0.1", "--transport", "uet", "--op", "send"), exitUsage, "roceperf: --op send: a RoCEv2 option, not for --transport uet")
	oneLine(runBin(t, bin, "-c", "198.18.0.1", "--transport", "uet", "--cc", "dcqcn"), exitUsage,
		"roceperf: --cc dcqcn: must be nscc, rccc, both or none with --transport uet (dcqcn is RoCEv2's)")
	oneLine(runBin(t, bin, "-s", "--transport", "uet"), exitUsage, "roceperf: -s --transport uet: give -B ADDR, a unicast address of this host (UET's UDP 4793 is opened per address)")
	oneLine(runBin(t, bin, "-c", "198.18.0.1", "-p", "18521", "--transport", "uet", "-B", "198.18.0.2", "-t", "1"), exitRuntime,
		"roceperf: cannot reach server 198.18.0.1:18521: connection refused")
}

// TestBinaryUETRCCC: the binary as a one-off UET server (-J) and as a
// client with --cc rccc: a verified 16 MB run (a fraction of a second at
// the default 1 Gbit/s) completes with every byte received and checked,
// the client's CCC runs on the server's credit, and the server's report
// counts the credit it sent, its pacer's grants and the client's source.
func TestBinaryUETRCCC(t *testing.T) {
	labtest.RequireRoot(t)
	bin := buildBinary(t)
	labtest.EnterNetns(t)
	server := exec.Command(bin, "-s", "-1", "--transport", "uet", "-B", "198.18.0.1", "-p", "18522", "-J")
	var sout, serr bytes.Buffer
	server.Stdout, server.Stderr = &sout, &serr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill()
	waitListening(t, "198.18.0.1:18522")
	const n = 16 << 20
	r := runBin(t, bin, "-c", "198.18.0.1", "-p", "18522", "--transport", "uet", "-B", "198.18.0.2", "--cc", "rccc",
		"-n", "16M", "-P", "2", "--verify", "-J")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("UET rccc run: exit %d, stderr %q", r.code, r.stderr)
	}
	var rep perf.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("-J output is not a report: %v\n%s", err, r.stdout)
	}
	e := &rep.End
	if rep.Start.TestStart.CC != "rccc" || e.SumSent.Bytes != n || e.SumReceived.Bytes != n || e.UET == nil || len(e.UET.Receiver) != 2 {
		t.Fatalf("rccc run: cc %q, sent %d, received %d, end.uet %+v; want rccc, %d, %d", rep.Start.TestStart.CC, e.SumSent.Bytes, e.SumReceived.Bytes, e.UET, n, n)
	}
	var msgs, verr uint64
	for _, rs := range e.UET.Receiver {
		msgs += rs.Messages
		verr += rs.VerifyErrors
	}
	if msgs != n/(64<<10) || verr != 0 {
		t.Errorf("the server checked %d messages, %d failed; want %d, 0", msgs, verr, n/(64<<10))
	}
	if len(e.UET.CCCs) != 1 || e.UET.CCCs[0].RCCC == nil || e.UET.CCCs[0].RCCC.CreditBytes == 0 || e.UET.Client.CreditsReceived == 0 {
		t.Errorf("the client's CCC took no credit: %+v, credits_received %d", e.UET.CCCs, e.UET.Client.CreditsReceived)
	}

	done := make(chan error, 1)
	go func() { done <- server.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("one-off server: %v, stderr %q", err, serr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the one-off UET server did not exit after its client")
	}
	var srep perf.Report
	if err := json.Unmarshal(sout.Bytes(), &srep); err != nil {
		t.Fatalf("the server's -J output is not a report: %v\n%s", err, sout.String())
	}
	u := srep.End.UET
	if u == nil || u.Server == nil {
		t.Fatalf("the server's report has no end.uet.server:\n%s", sout.String())
	}
	if srep.Start.TestStart.CC != "rccc" || u.Server.CreditsSent == 0 || u.Server.Pacer.Grants == 0 || u.Server.Pacer.GrantedBytes < n {
		t.Errorf("server: cc %q, credits_sent %d, pacer %+v; want rccc, credits sent, at least %d bytes granted",
			srep.Start.TestStart.CC, u.Server.CreditsSent, u.Server.Pacer, n)
	}
	if len(u.RxCCCs) != 1 || u.RxCCCs[0].Src != "198.18.0.2" || u.RxCCCs[0].Source == nil || u.RxCCCs[0].Source.GrantedBytes == 0 {
		t.Errorf("server: rx_cccs %+v; want the client's, with its source at the pacer", u.RxCCCs)
	}
	if srep.End.SumReceived.Bytes != n {
		t.Errorf("server: received %d bytes; want %d", srep.End.SumReceived.Bytes, n)
	}
}
