package perf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

var (
	srvAddr = netip.MustParseAddr("198.18.0.1")
	cliAddr = netip.MustParseAddr("198.18.0.2")
)

// relax gives the QPs more time to recover from a stall: both agents run
// in this process, the VM has two CPUs that other tests may be using, and
// the race detector slows the agents about tenfold (lo is lossless, a
// full socket buffer is not). The defaults give up after 8 × 16 ms.
func relax(c *ClientConfig) {
	c.AckTimeout, c.RetryCount = 64*time.Millisecond, 15
	if raceDetector {
		c.AckTimeout, c.RetryCount = 200*time.Millisecond, 50
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startServer listens on 198.18.0.1 (from the namespace's thread) and
// serves in the background until the test ends.
func startServer(t *testing.T, cfg ServerConfig) (*Server, *syncBuffer) {
	t.Helper()
	out := &syncBuffer{}
	if cfg.Out == nil {
		cfg.Out = out
	}
	if !cfg.Bind.IsValid() {
		cfg.Bind = srvAddr
	}
	s, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return 10 s after its context was cancelled")
		}
		_ = s.Close()
	})
	return s, out
}

func TestNetnsVerifiedRun(t *testing.T) {
	labtest.EnterNetns(t)
	_, srvOut := startServer(t, ServerConfig{})
	var out bytes.Buffer
	var ivs []Interval
	cfg := DefaultClientConfig(srvAddr.String())
	cfg.QPs = 2
	cfg.Duration = 2 * time.Second
	cfg.Interval = 500 * time.Millisecond
	cfg.Verify = true
	cfg.Perftest = true
	cfg.Out = &out
	cfg.OnInterval = func(iv Interval) { ivs = append(ivs, iv) }
	relax(&cfg)
	r, err := RunClient(context.Background(), cfg)
	t.Logf("client:\n%s", out.String())
	t.Logf("server:\n%s", srvOut.String())
	if err != nil {
		t.Fatal(err)
	}
	e := &r.End
	if e.SumSent.Bytes == 0 || e.SumSent.BitsPerSecond <= 0 {
		t.Fatalf("no goodput: %+v", e.SumSent)
	}
	if e.SumReceived.Bytes != e.SumSent.Bytes {
		t.Errorf("sum_received %d bytes, sum_sent %d acknowledged", e.SumReceived.Bytes, e.SumSent.Bytes)
	}
	if got := r.verifyErrors(); got != 0 {
		t.Errorf("verify_errors %d", got)
	}
	sent, rcv := e.totals()
	if n := rcv.NPCNPSent + rcv.NPECNMarkedRoCEPackets + sent.RPCNPHandled + sent.RPCNPIgnored; n != 0 {
		t.Errorf("CNP/ECN counters on an uncongested lo: np %+v rp %+v", rcv, sent)
	}
	if len(r.Intervals) < 3 || len(ivs) != len(r.Intervals) {
		t.Errorf("%d intervals, %d callbacks; want about 4 of each", len(r.Intervals), len(ivs))
	}
	var sum uint64
	for _, iv := range r.Intervals {
		sum += iv.Sum.Bytes
		if len(iv.Streams) != 2 {
			t.Errorf("interval with %d streams", len(iv.Streams))
		}
	}
	if sum != e.SumSent.Bytes {
		t.Errorf("intervals add up to %d bytes, the summary says %d", sum, e.SumSent.Bytes)
	}
	if len(e.Counters.Server) != 2 || len(r.Start.Connected) != 2 {
		t.Errorf("server counters for %d QPs, %d connected", len(e.Counters.Server), len(r.Start.Connected))
	}
	for _, want := range []string{"sender", "receiver", "[SUM]", "np_cnp_sent=0", "local address: LID 0000 QPN", "BW peak[MB/sec]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("client output lacks %q", want)
		}
	}
	// The JSON report has iperf3's shape and round-trips.
	var jb bytes.Buffer
	if err := r.WriteJSON(&jb); err != nil {
		t.Fatal(err)
	}
	checkReportJSON(t, jb.Bytes())
	var back Report
	if err := json.Unmarshal(jb.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.End.SumSent != e.SumSent || len(back.Intervals) != len(r.Intervals) {
		t.Errorf("JSON round trip changed the report")
	}
}

// TestNetnsExactBytes: -n delivers exactly the bytes asked for, rounded up
// to whole messages, dealt out over the QPs.
func TestNetnsExactBytes(t *testing.T) {
	labtest.EnterNetns(t)
	startServer(t, ServerConfig{})
	for _, tc := range []struct {
		bytes    uint64
		qps, msg int
		op       string
		want     uint64
		perQP    []uint64
	}{
		{10 << 20, 3, 64 << 10, "write", 10 << 20, []uint64{54, 53, 53}},
		{1_000_000, 2, 64 << 10, "send", 16 * 65536, []uint64{8, 8}},
		{123457, 1, 1000, "write", 124000, []uint64{124}}, // messages not a multiple of the MTU
	} {
		cfg := DefaultClientConfig(srvAddr.String())
		cfg.Bytes, cfg.QPs, cfg.MessageBytes = tc.bytes, tc.qps, tc.msg
		cfg.Verify = true
		cfg.Interval = 0
		if tc.op == "send" {
			cfg.Op = agent.OpSend
		}
		relax(&cfg)
		start := time.Now()
		r, err := RunClient(context.Background(), cfg)
		if err != nil {
			t.Fatalf("-n %d: %v", tc.bytes, err)
		}
		e := &r.End
		if e.SumSent.Bytes != tc.want || e.SumReceived.Bytes != tc.want {
			t.Errorf("-n %d -P %d -l %d: sent %d, received %d bytes; want %d", tc.bytes, tc.qps, tc.msg, e.SumSent.Bytes, e.SumReceived.Bytes, tc.want)
		}
		for i, s := range e.Streams {
			if s.Sender.Messages != tc.perQP[i] || s.Receiver.Messages != tc.perQP[i] {
				t.Errorf("-n %d: QP %d sent %d, received %d messages; want %d", tc.bytes, i, s.Sender.Messages, s.Receiver.Messages, tc.perQP[i])
			}
		}
		if r.Start.TestStart.Bytes != tc.bytes || r.Start.TestStart.Duration != 0 {
			t.Errorf("test_start bytes %d duration %v", r.Start.TestStart.Bytes, r.Start.TestStart.Duration)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("-n %d took %v: the run did not end when the bytes were acknowledged", tc.bytes, d)
		}
	}
}

func TestNetnsErrors(t *testing.T) {
	labtest.EnterNetns(t)
	ctx := context.Background()
	run := func(cfg ClientConfig) error {
		t.Helper()
		r, err := RunClient(ctx, cfg)
		if err != nil && r != nil {
			t.Errorf("a setup error came with a report")
		}
		return err
	}
	cfg := DefaultClientConfig("198.18.0.2")
	want := func(err error, msg string) {
		t.Helper()
		if err == nil || err.Error() != msg {
			t.Errorf("got  %v\nwant %s", err, msg)
		}
	}
	want(run(cfg), "cannot reach server 198.18.0.2:18515: connection refused")
	cfg.Server = "198.18.0.9"
	want(run(cfg), "cannot reach server 198.18.0.9:18515: network is unreachable")

	s, _ := startServer(t, ServerConfig{})
	// UDP 4791 is the host's, shared by its agents: the side channel's
	// port is what a second server cannot have.
	_, err := Listen(ServerConfig{Bind: srvAddr})
	want(err, "port 18515: already in use on 198.18.0.1 (tcp)")
	_, err = Listen(ServerConfig{Bind: netip.MustParseAddr("198.18.0.7")})
	want(err, "bind 198.18.0.7: no interface of this host has that address")
	if p := s.UDPAddr().Port(); p != 4791 {
		t.Errorf("server UDP port %d", p)
	}

	cfg = DefaultClientConfig(srvAddr.String())
	cfg.Bind = netip.MustParseAddr("198.18.0.5")
	want(run(cfg), "bind 198.18.0.5: no interface of this host has that address")
	cfg.Bind = netip.MustParseAddr("::1")
	want(run(cfg), "bind ::1: the server 198.18.0.1 is of the other IP family")
}

// TestNetnsBind: -B puts the client's RoCE socket and side channel on
// 198.18.0.2, not the 198.18.0.1 the route to the server would pick.
func TestNetnsBind(t *testing.T) {
	labtest.EnterNetns(t)
	_, srvOut := startServer(t, ServerConfig{})
	cfg := DefaultClientConfig(srvAddr.String())
	cfg.Bind = cliAddr
	cfg.UDPPort = 4800
	cfg.Bytes = 1 << 20
	cfg.Verify = true
	relax(&cfg)
	r, err := RunClient(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Start.Connected[0]
	if c.LocalHost != "198.18.0.2" || c.LocalPort != 4800 || c.RemoteHost != "198.18.0.1" || c.RemotePort != 4791 {
		t.Errorf("connected %+v", c)
	}
	if r.End.SumReceived.Bytes != 1<<20 {
		t.Errorf("received %d bytes", r.End.SumReceived.Bytes)
	}
	time.Sleep(50 * time.Millisecond) // the server prints after it answered
	if !strings.Contains(srvOut.String(), "Accepted connection from 198.18.0.2") ||
		!strings.Contains(srvOut.String(), "connected to 198.18.0.2 port 4800") {
		t.Errorf("server output:\n%s", srvOut.String())
	}
}

// TestNetnsInterrupt: a cancelled context ends the run early with a
// summary of what ran.
func TestNetnsInterrupt(t *testing.T) {
	labtest.EnterNetns(t)
	startServer(t, ServerConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(700*time.Millisecond, cancel)
	var out bytes.Buffer
	cfg := DefaultClientConfig(srvAddr.String())
	cfg.Duration = 20 * time.Second
	cfg.Interval = 200 * time.Millisecond
	cfg.Out = &out
	relax(&cfg)
	start := time.Now()
	r, err := RunClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the run took %v after a cancel at 0.7 s", d)
	}
	if !r.Interrupted || r.End.SumSent.Bytes == 0 || r.End.SumReceived.Bytes != r.End.SumSent.Bytes {
		t.Errorf("interrupted %v, sent %d, received %d", r.Interrupted, r.End.SumSent.Bytes, r.End.SumReceived.Bytes)
	}
	if s := r.End.SumSent.Seconds; s < 0.6 || s > 1.5 {
		t.Errorf("summary covers %.2f s", s)
	}
	if !strings.Contains(out.String(), "sender") || !strings.Contains(out.String(), "receiver") {
		t.Errorf("no summary after the interrupt:\n%s", out.String())
	}
}

// TestNetnsServerGone: QPs that lose their peer fail the run with the QP's
// error, after the summary.
func TestNetnsServerGone(t *testing.T) {
	labtest.EnterNetns(t)
	s, _ := startServer(t, ServerConfig{})
	time.AfterFunc(500*time.Millisecond, func() { _ = s.Close() })
	cfg := DefaultClientConfig(srvAddr.String())
	cfg.Duration = 10 * time.Second
	cfg.Interval = 0
	var out bytes.Buffer
	cfg.Out = &out
	start := time.Now()
	r, err := RunClient(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "ACK timeouts") {
		t.Fatalf("got %v, want the QP's ACK timeout error", err)
	}
	if r == nil || r.Error != err.Error() || r.End.SumSent.Bytes == 0 {
		t.Fatalf("report %+v", r)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("failing took %v", d)
	}
	if !strings.Contains(out.String(), "no receiver lines") {
		t.Errorf("summary:\n%s", out.String())
	}
}

// TestNetnsOneOff: a one-off server serves one session, then Serve returns
// and later clients are refused.
func TestNetnsOneOff(t *testing.T) {
	labtest.EnterNetns(t)
	var out bytes.Buffer
	s, err := Listen(ServerConfig{Bind: srvAddr, OneOff: true, JSON: true, Out: &syncBuffer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	cfg := DefaultClientConfig(srvAddr.String())
	cfg.Bytes = 1 << 20
	cfg.JSON = true
	cfg.Out = &out
	relax(&cfg)
	if _, err := RunClient(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	checkReportJSON(t, out.Bytes())
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a one-off server did not return after its session")
	}
	if _, err := RunClient(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("second client: %v", err)
	}
}

// TestNetnsCongestionControl: DCQCN paces at the line rate (-b), --cc none
// at its cap, and the omitted warm-up stays out of the summary.
func TestNetnsCongestionControl(t *testing.T) {
	labtest.EnterNetns(t)
	startServer(t, ServerConfig{})
	for _, cc := range []agent.CCMode{agent.CCDCQCN, agent.CCNone} {
		cfg := DefaultClientConfig(srvAddr.String())
		cfg.CC = cc
		cfg.LineRate = 200 * units.Mbit
		cfg.Duration = time.Second
		cfg.Omit = 300 * time.Millisecond
		cfg.Interval = 250 * time.Millisecond
		cfg.Profile = "paper"
		relax(&cfg)
		r, err := RunClient(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		e := &r.End
		// Payload is 1024 of 1106 wire bytes per packet: at most 185 Mbit/s
		// (the pacer's burst allowance adds a little). The floor leaves room
		// for a loaded machine.
		if bps := e.SumSent.BitsPerSecond; (bps < 100e6 && !raceDetector) || bps > 195e6 {
			t.Errorf("--cc %s -b 200mbit: goodput %.0f Mbit/s", cc, bps/1e6)
		}
		if s := e.SumSent.Start; s < 0.29 || s > 0.4 {
			t.Errorf("--cc %s: the summary starts at %.3f s, not after the 0.3 s warm-up", cc, s)
		}
		if !r.Intervals[0].Sum.Omitted || r.Intervals[len(r.Intervals)-1].Sum.Omitted {
			t.Errorf("--cc %s: omitted flags wrong", cc)
		}
		iv := r.Intervals[1].Streams[0]
		if iv.RcBps != uint64(200*units.Mbit) {
			t.Errorf("--cc %s: Rc %d", cc, iv.RcBps)
		}
		if cc == agent.CCDCQCN && iv.Alpha != 1 { // paper: α starts at 1
			t.Errorf("α %v", iv.Alpha)
		}
		if r.Start.TestStart.LineRateBps != uint64(200*units.Mbit) || r.Start.TestStart.DCQCN["rpg_ai_rate"] != "0.2" {
			t.Errorf("test_start line rate %d, rpg_ai_rate %s", r.Start.TestStart.LineRateBps, r.Start.TestStart.DCQCN["rpg_ai_rate"])
		}
	}
}

// TestNetnsThreeClients: three clients and the server, four agents, share
// UDP 4791 in one namespace, as processes share a NIC: each agent holds its
// own block of QPNs, the steering hands every packet to its owner, and all
// three verified runs complete. A packet for a QPN no agent owns is
// dropped and counted.
func TestNetnsThreeClients(t *testing.T) {
	labtest.EnterNetns(t)
	srv, _ := startServer(t, ServerConfig{})
	ns, err := netns.Get() // this test's namespace, for the clients' threads
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	st0, err := srv.udp.SteeringStats()
	if err != nil {
		t.Fatal(err)
	}
	const clients = 3
	reports := make([]*Report, clients)
	errs := make([]error, clients)
	// The runs are held at a gate until all three are set up, so that
	// the three agents hold their blocks at once: a run that ended first
	// would give its block back, and a later one could rightly take it.
	var wg, ready sync.WaitGroup
	gate := make(chan struct{})
	ready.Add(clients)
	go func() { ready.Wait(); close(gate) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range clients {
		wg.Add(1)
		var once sync.Once
		isReady := func() { once.Do(ready.Done) }
		go func() {
			defer wg.Done()
			defer isReady() // a run that fails before its gate opens it
			// A thread of its own in the namespace; it is retired with the
			// goroutine (never unlocked).
			runtime.LockOSThread()
			if errs[i] = netns.Set(ns); errs[i] != nil {
				return
			}
			cfg := DefaultClientConfig(srvAddr.String())
			cfg.QPs = 2
			cfg.Bytes = 8 << 20
			cfg.Verify = true
			cfg.Interval = 0
			cfg.StartGate, cfg.OnReady = gate, isReady
			relax(&cfg)
			reports[i], errs[i] = RunClient(ctx, cfg)
		}()
	}
	wg.Wait()
	blocks := map[uint32]string{}
	claim := func(qpn uint32, who string) {
		b := qpn >> 16
		if prev, ok := blocks[b]; ok && prev != who {
			t.Errorf("QPN block %#x used by %s and %s", b, prev, who)
		}
		blocks[b] = who
	}
	for i, r := range reports {
		if errs[i] != nil {
			t.Fatalf("client %d: %v", i, errs[i])
		}
		if r.End.SumReceived.Bytes != 8<<20 || r.verifyErrors() != 0 {
			t.Errorf("client %d: the server received %d bytes with %d verify errors, want %d and 0", i, r.End.SumReceived.Bytes, r.verifyErrors(), 8<<20)
		}
		for _, c := range r.Start.Connected {
			claim(c.QPN, fmt.Sprintf("client %d", i))
			claim(c.RemoteQPN, "the server")
			if c.LocalPort != 4791 || c.RemotePort != 4791 || c.SourcePort != agent.SourcePort(c.QPN) {
				t.Errorf("client %d: QP %#x receives on %d, sends from %d to %d; want 4791, %d, 4791", i, c.QPN, c.LocalPort, c.SourcePort, c.RemotePort, agent.SourcePort(c.QPN))
			}
		}
	}
	if len(blocks) != clients+1 {
		t.Errorf("QPN blocks %v: want one per agent", blocks)
	}
	if c := srv.Agent().Counters(); c.UnknownQP != 0 || c.WrongPeer != 0 || c.ICRCErrors != 0 {
		t.Errorf("server agent: unknown_qp %d wrong_peer %d icrc_errors %d, want 0", c.UnknownQP, c.WrongPeer, c.ICRCErrors)
	}
	st1, err := srv.udp.SteeringStats()
	if err != nil {
		t.Fatal(err)
	}
	if st1.Steered <= st0.Steered || st1.UnknownQP != st0.UnknownQP {
		t.Errorf("steering %+v after the runs (before %+v): want packets steered, none unknown", st1, st0)
	}

	// A WRITE_ONLY for a QPN in a block no agent holds.
	free := uint32(0)
	for _, ok := blocks[free]; ok; _, ok = blocks[free] {
		free++
	}
	uc, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(srvAddr, 4791)))
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	var h roce.Header
	h.BTH.Opcode = roce.OpRCWriteOnly
	h.BTH.PKey = roce.DefaultPKey
	h.BTH.DestQP = free<<16 | 0x11
	pkt := make([]byte, 128)
	n := roce.Build(pkt, &h, make([]byte, 32))
	if _, err := uc.Write(pkt[:n]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st2, err := srv.udp.SteeringStats()
		if err != nil {
			t.Fatal(err)
		}
		if st2.UnknownQP == st1.UnknownQP+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("steering %+v: want unknown_qp %d", st2, st1.UnknownQP+1)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestNetnsRefused: the server refuses what its limits forbid with an
// error the client prints, and shows every refusal and its agent's drops,
// in text and in JSON.
func TestNetnsRefused(t *testing.T) {
	labtest.EnterNetns(t)
	lim := agent.ServerLimits{MaxQPs: 2}
	s, text := startServer(t, ServerConfig{Limits: lim})
	jsonOut := &syncBuffer{}
	startServer(t, ServerConfig{Limits: lim, Port: 18516, JSON: true, Out: jsonOut})
	if got := s.SideChannel().Limits().MaxQPs; got != 2 {
		t.Fatalf("max_qps %d", got)
	}
	for _, port := range []int{18515, 18516} {
		side := netip.AddrPortFrom(srvAddr, uint16(port)).String()
		cfg := DefaultClientConfig(side)
		cfg.QPs, cfg.Bytes = 3, 1<<20
		relax(&cfg)
		_, err := RunClient(context.Background(), cfg)
		want := fmt.Sprintf("agent: server %s refused the session: qps 3: this server allows 1..2 per session (max_qps)", side)
		if err == nil || err.Error() != want {
			t.Errorf("got  %v\nwant %s", err, want)
		}
		// Not a request at all.
		c, err := net.Dial("tcp4", side)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		line, _ := bufio.NewReader(c).ReadString('\n')
		_ = c.Close()
		if !strings.Contains(line, `"cause":"malformed"`) {
			t.Errorf("an HTTP request got %q", line)
		}
		cfg.QPs = 1
		if _, err := RunClient(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	out := text.String()
	t.Logf("server:\n%s", out)
	for _, want := range []string{
		"qps 3: this server allows 1..2 per session (max_qps)",
		"request: invalid character 'G' looking for beginning of value: a request is one JSON object on one line",
		"server since start: refused_sessions=2 (malformed=1 qps=1)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("server text lacks %q", want)
		}
	}
	if st := s.SideChannel().Stats(); st.Refused[agent.RefusedQPs] != 1 || st.Refused[agent.RefusedMalformed] != 1 || st.Accepted != 1 {
		t.Errorf("side channel %+v", st)
	}
	// The JSON server: a report per refusal, with its error, and the
	// session's report with the agent's counters.
	dec := json.NewDecoder(strings.NewReader(jsonOut.String()))
	var reports []Report
	for dec.More() {
		var r Report
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("server JSON: %v\n%s", err, jsonOut.String())
		}
		reports = append(reports, r)
	}
	if len(reports) != 3 || !strings.Contains(reports[0].Error, "(max_qps)") || !strings.Contains(reports[1].Error, "a request is one JSON object") || reports[2].Error != "" {
		t.Fatalf("%d JSON reports:\n%s", len(reports), jsonOut.String())
	}
	sa := reports[2].End.Counters.ServerAgent
	if sa == nil || sa.SideChannel.Refused[agent.RefusedQPs] != 1 || sa.SideChannel.Refused[agent.RefusedMalformed] != 1 || sa.SideChannel.Accepted != 1 {
		t.Errorf("server_agent %+v", sa)
	}
}

// TestNetnsStartGate: a run with a start gate is set up (OnReady) and
// sends nothing until the gate opens; OnFinished comes once its bytes are
// acknowledged, before RunClient returns; a run whose context ends at the
// gate returns the context's cause.
func TestNetnsStartGate(t *testing.T) {
	labtest.EnterNetns(t)
	startServer(t, ServerConfig{})
	cfg := DefaultClientConfig(srvAddr.String())
	cfg.Bytes, cfg.Verify, cfg.Interval = 1<<20, true, 0
	relax(&cfg)
	gate := make(chan struct{})
	ready := make(chan struct{})
	var finished, returned time.Time
	var acked func() uint64
	cfg.StartGate = gate
	cfg.OnReady = func() { close(ready) }
	cfg.OnData = func(a func() uint64) { acked = a }
	cfg.OnFinished = func() { finished = time.Now() }
	// The gate opens from another goroutine: RunClient stays on this
	// one, the thread in the test's namespace.
	var opened time.Time
	var early bool
	go func() {
		select {
		case <-ready:
		case <-time.After(10 * time.Second):
			close(gate)
			return
		}
		time.Sleep(50 * time.Millisecond)
		early = acked != nil
		opened = time.Now()
		close(gate)
	}()
	r, err := RunClient(context.Background(), cfg)
	returned = time.Now()
	if early {
		t.Errorf("the streams started before the gate opened")
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := r.End.SumSent.Bytes; got != cfg.Bytes {
		t.Errorf("sent %d bytes, want %d", got, cfg.Bytes)
	}
	if finished.IsZero() || finished.Before(opened) || finished.After(returned) {
		t.Errorf("OnFinished at %v, gate opened at %v, RunClient returned at %v", finished, opened, returned)
	}

	ctx, cancel := context.WithCancelCause(context.Background())
	cfg.StartGate, cfg.OnFinished, cfg.OnData = make(chan struct{}), nil, nil
	ready = make(chan struct{})
	cfg.OnReady = func() { close(ready); cancel(errGateTest) }
	if _, err := RunClient(ctx, cfg); err != errGateTest {
		t.Errorf("cancelled at the gate: %v, want %v", err, errGateTest)
	}

}

var errGateTest = fmt.Errorf("the run's end at the gate")
