package perf

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
)

// TestNetnsUET: roceperf --transport uet between two namespaces joined by
// a veth pair (MTU 9000): a UET server on 198.18.1.1, a client on
// 198.18.1.2, one verified stream over real sockets (pktio.EntropyConn on
// UDP 4793 at both ends). Goodput is positive, every message reaches the
// server intact, and the -J report parses with iperf3's shape and UET's
// counters; then a second run from the same address, whose PDC IDs the
// server must not take for the first run's.
func TestNetnsUET(t *testing.T) {
	labtest.RequireRoot(t)
	srvUET, cliUET := netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.1.2")
	lab := lab.BuildT(t, lab.Spec{
		Nodes: []lab.NodeSpec{{Name: "srv"}, {Name: "cli"}},
		Links: []lab.LinkSpec{{
			A:   lab.Endpoint{Node: "srv", Dev: "eth0", Addr: netip.PrefixFrom(srvUET, 24)},
			B:   lab.Endpoint{Node: "cli", Dev: "eth0", Addr: netip.PrefixFrom(cliUET, 24)},
			MTU: 9000,
		}},
	})
	srvOut := &syncBuffer{}
	var s *UETServer
	if err := lab.Node("srv").Do(func() (err error) {
		s, err = ListenUET(ServerConfig{Transport: TransportUET, Bind: srvUET, Out: srvOut})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		_ = s.Close()
	})
	if got := s.UETAddr(); got != netip.AddrPortFrom(srvUET, 4793) {
		t.Fatalf("server UET address %v", got)
	}

	run := func(cfg ClientConfig) (*Report, []byte) {
		t.Helper()
		var out bytes.Buffer
		cfg.Out = &out
		var r *Report
		err := lab.Node("cli").Do(func() (err error) {
			r, err = RunClient(context.Background(), cfg)
			return err
		})
		if err != nil {
			t.Fatalf("client: %v\n%s\nserver:\n%s", err, out.String(), srvOut.String())
		}
		return r, out.Bytes()
	}
	cfg := DefaultUETClientConfig(srvUET.String())
	cfg.Duration, cfg.Interval, cfg.Verify, cfg.JSON = time.Second, 250*time.Millisecond, true, true
	r, js := run(cfg)
	e := &r.End
	t.Logf("goodput %.1f Mbit/s, %d messages; %s", e.SumSent.BitsPerSecond/1e6, e.SumSent.Messages, uetLine(e.UET))
	if e.SumSent.Bytes == 0 || e.SumSent.BitsPerSecond <= 0 {
		t.Fatalf("no goodput: %+v", e.SumSent)
	}
	if e.SumReceived.Bytes != e.SumSent.Bytes || e.UET.Receiver[0].Messages != e.SumSent.Messages {
		t.Errorf("the server received %d bytes, %d messages; the client had %d, %d acknowledged",
			e.SumReceived.Bytes, e.UET.Receiver[0].Messages, e.SumSent.Bytes, e.SumSent.Messages)
	}
	if n := e.UET.verifyErrors(); n != 0 {
		t.Errorf("verify_errors %d", n)
	}
	if c := r.Start.Connected[0]; c.LocalHost != cliUET.String() || c.LocalPort != 4793 || c.RemoteHost != srvUET.String() || c.RemotePort != 4793 {
		t.Errorf("connected %+v", c)
	}
	checkUETReportJSON(t, js)
	var back Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.End.SumSent != e.SumSent || len(back.Intervals) != len(r.Intervals) || len(r.Intervals) < 3 {
		t.Errorf("the JSON report: %d intervals (want about 4), sum_sent %+v", len(back.Intervals), back.End.SumSent)
	}

	// Again from the same address, text this time, -n.
	cfg.JSON, cfg.Bytes = false, 4<<20
	r, text := run(cfg)
	if r.End.SumReceived.Bytes != 4<<20 || r.End.UET.verifyErrors() != 0 {
		t.Errorf("second run: received %d bytes, %d verify errors", r.End.SumReceived.Bytes, r.End.UET.verifyErrors())
	}
	for _, want := range []string{"protocol: UET", "sender", "receiver", "uet: retransmits=", "receiver: messages=64 verify_errors=0"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("client output lacks %q:\n%s", want, text)
		}
	}
	waitFor(t, func() bool { return strings.Count(srvOut.String(), "server since start") == 2 })
	t.Logf("server:\n%s", srvOut.String())
	if st := s.Stats(); st.Accepted != 2 || len(st.Refused) != 0 {
		t.Errorf("side channel %+v", st)
	}
}

// TestNetnsUETCrossTransport: a UET client of a RoCEv2 server and a RoCEv2
// client of a UET server each get the other side's refusal, one line that
// says which transport to run.
func TestNetnsUETCrossTransport(t *testing.T) {
	labtest.EnterNetns(t)
	startServer(t, ServerConfig{}) // RoCEv2 on 198.18.0.1, side channel 18515
	u, err := ListenUET(ServerConfig{Transport: TransportUET, Bind: srvAddr, Port: 18516})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- u.Serve(ctx) }()
	defer func() {
		cancel()
		<-served
		_ = u.Close()
	}()

	c := DefaultUETClientConfig(srvAddr.String())
	c.Bind, c.Bytes = cliAddr, 1<<20
	_, err = RunClient(context.Background(), c)
	want := "server 198.18.0.1:18515 refused the session: version 0: this server speaks 1 (a RoCEv2 server? it must serve transport uet)"
	if err == nil || err.Error() != want {
		t.Errorf("UET client of a RoCEv2 server:\ngot  %v\nwant %s", err, want)
	}
	rc := DefaultClientConfig("198.18.0.1:18516")
	rc.Bytes = 1 << 20
	relax(&rc)
	_, err = RunClient(context.Background(), rc)
	want = "agent: server 198.18.0.1:18516 refused the session: transport rocev2: this server serves uet (the client must use transport uet)"
	if err == nil || err.Error() != want {
		t.Errorf("RoCEv2 client of a UET server:\ngot  %v\nwant %s", err, want)
	}
	// Both kinds of server on one address, a client of each.
	c.Server = "198.18.0.1:18516"
	if r, err := RunClient(context.Background(), c); err != nil || r.End.SumReceived.Bytes != 1<<20 {
		t.Errorf("UET run beside a RoCEv2 server: %v", err)
	}
	rc.Server = "198.18.0.1:18515"
	if r, err := RunClient(context.Background(), rc); err != nil || r.End.SumReceived.Bytes != 1<<20 {
		t.Errorf("RoCEv2 run beside a UET server: %v", err)
	}
}
