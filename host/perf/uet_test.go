package perf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The UET client and server in one process, over an in-memory pipe
// (pktio.NewPipe) for UET and TCP on 127.0.0.1 for the side channel: no
// root, no namespace.

var (
	uetPipeServer = netip.AddrPortFrom(netip.MustParseAddr("198.18.0.1"), uet.Port)
	uetPipeClient = netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), uet.Port)
)

// freePort is a TCP port of 127.0.0.1 nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// uetPipe is a UET server serving on one end of a pipe; clients lease the
// other end, one after the other (it is one address).
type uetPipe struct {
	srv    *UETServer
	out    *syncBuffer
	client *pipeLeases
	side   string // the side channel, 127.0.0.1:port
}

// pipeLeases hands one pipe end to one client after another: each lease
// is a Conn whose Close (RunClient closes its conn) ends the lease, not
// the pipe; what arrives between leases is lost, as datagrams to a closed
// port.
type pipeLeases struct {
	end *pktio.PipeConn
	mu  sync.Mutex
	cur *pipeLease
}

type pipeLease struct {
	l      *pipeLeases
	from   chan pktio.Message
	closed chan struct{}
	once   sync.Once
}

func newPipeLeases(t *testing.T, end *pktio.PipeConn) *pipeLeases {
	l := &pipeLeases{end: end}
	done := make(chan struct{})
	go func() {
		defer close(done)
		msgs := []pktio.Message{{Buffers: [][]byte{make([]byte, 9000)}}}
		for {
			if _, err := end.ReadBatch(msgs); err != nil {
				return
			}
			m := msgs[0]
			l.mu.Lock()
			if cur := l.cur; cur != nil {
				select {
				case cur.from <- pktio.Message{Buffers: [][]byte{bytes.Clone(m.Buffers[0][:m.N])}, N: m.N, Addr: m.Addr, TOS: m.TOS}:
				default:
				}
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = end.Close()
		<-done
	})
	return l
}

func (l *pipeLeases) lease() *pipeLease {
	le := &pipeLease{l: l, from: make(chan pktio.Message, 1<<14), closed: make(chan struct{})}
	l.mu.Lock()
	l.cur = le
	l.mu.Unlock()
	return le
}

var _ pktio.Conn = (*pipeLease)(nil)

func (le *pipeLease) ReadBatch(msgs []pktio.Message) (int, error) {
	var m pktio.Message
	select {
	case m = <-le.from:
	case <-le.closed:
		return 0, net.ErrClosed
	}
	n := 0
	for {
		d := &msgs[n]
		d.N = copy(d.Buffers[0], m.Buffers[0])
		d.Truncated, d.Addr, d.TOS = d.N < m.N, m.Addr, m.TOS
		n++
		if n == len(msgs) {
			return n, nil
		}
		select {
		case m = <-le.from:
		default:
			return n, nil
		}
	}
}

func (le *pipeLease) WriteBatch(msgs []pktio.Message) (int, error) {
	select {
	case <-le.closed:
		return 0, net.ErrClosed
	default:
	}
	return le.l.end.WriteBatch(msgs)
}

func (le *pipeLease) LocalAddr() netip.AddrPort { return le.l.end.LocalAddr() }

func (le *pipeLease) Close() error {
	le.once.Do(func() {
		close(le.closed)
		le.l.mu.Lock()
		if le.l.cur == le {
			le.l.cur = nil
		}
		le.l.mu.Unlock()
	})
	return nil
}

func startUETPipe(t *testing.T, cfg ServerConfig, filter func(netip.AddrPort, *pktio.Message) bool) *uetPipe {
	t.Helper()
	ca, sb := pktio.NewPipe(pktio.PipeOptions{A: uetPipeClient, B: uetPipeServer, Filter: filter, Depth: 1 << 14})
	out := &syncBuffer{}
	if cfg.Out == nil {
		cfg.Out = out
	}
	cfg.Transport = TransportUET
	cfg.UETConn = sb
	cfg.Bind = netip.MustParseAddr("127.0.0.1")
	cfg.Port = freePort(t)
	s, err := ListenUET(cfg)
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
	return &uetPipe{srv: s, out: out, client: newPipeLeases(t, ca), side: s.Addr().String()}
}

// clientConfig is a UET client of p on its pipe end.
func (p *uetPipe) clientConfig() ClientConfig {
	c := DefaultUETClientConfig(p.side)
	c.UETConn = p.client.lease()
	c.Interval = 0
	return c
}

// TestUETPipeVerified: -P 2 -n 4M --verify: every byte acknowledged and
// received, none failing the check, both streams' PDCs on one CCC; the
// report's intervals add up, and its JSON has iperf3's shape and UET's
// counters.
func TestUETPipeVerified(t *testing.T) {
	p := startUETPipe(t, ServerConfig{}, nil)
	var out bytes.Buffer
	c := p.clientConfig()
	c.QPs, c.Bytes, c.Verify = 2, 4<<20, true
	c.Interval = 20 * time.Millisecond
	c.Out = &out
	r, err := RunClient(context.Background(), c)
	t.Logf("client:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	e := &r.End
	if e.SumSent.Bytes != 4<<20 || e.SumReceived.Bytes != 4<<20 {
		t.Errorf("sent %d, received %d bytes; want %d", e.SumSent.Bytes, e.SumReceived.Bytes, 4<<20)
	}
	if e.UET == nil || len(e.UET.Receiver) != 2 {
		t.Fatalf("end.uet %+v", e.UET)
	}
	for i, rs := range e.UET.Receiver {
		if rs.Messages != 32 || rs.MessageBytes != 32*64<<10 || rs.VerifyErrors != 0 || rs.PDCs != 1 || rs.JobID != r.Start.Connected[i].JobID {
			t.Errorf("stream %d at the server: %+v", i+1, rs)
		}
	}
	if len(e.UET.CCCs) != 1 || e.UET.CCCs[0].Dst != "198.18.0.1" || e.UET.CCCs[0].CwndBytes <= 0 {
		t.Errorf("CCCs %+v: want one to 198.18.0.1", e.UET.CCCs)
	}
	if c := e.UET.Client; c.PDCsOpened != 2 || c.CCCsCreated != 1 {
		t.Errorf("client endpoint: %d PDCs, %d CCCs; want 2 and 1", c.PDCsOpened, c.CCCsCreated)
	}
	var sum uint64
	for _, iv := range r.Intervals {
		sum += iv.Sum.Bytes
		if len(iv.Streams) != 2 {
			t.Errorf("interval with %d streams", len(iv.Streams))
		}
	}
	if len(r.Intervals) == 0 || sum != e.SumSent.Bytes {
		t.Errorf("%d intervals add up to %d bytes, the summary says %d", len(r.Intervals), sum, e.SumSent.Bytes)
	}
	text := out.String()
	for _, want := range []string{
		"[  1] local 198.18.0.2 port 4793 pdc ",
		"Starting Test: protocol: UET, 2 streams, 65536 byte messages, omitting 0 seconds, 4194304 bytes to send, mtu 4096, dscp 26, cc nscc (line rate 1.00 Gbits/sec, base_rtt 100µs), verify",
		uetClientHeader, "[SUM]", "sender", "receiver", "uet: retransmits=", " cwnd=",
		"receiver: messages=64 verify_errors=0 duplicates=",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("client output lacks %q", want)
		}
	}
	// JSON: iperf3's shape, and UET's own.
	var jb bytes.Buffer
	if err := r.WriteJSON(&jb); err != nil {
		t.Fatal(err)
	}
	m := checkUETReportJSON(t, jb.Bytes())
	if ts := m["start"].(map[string]any)["test_start"].(map[string]any); ts["protocol"] != "UET" || ts["cc"] != "nscc" || ts["base_rtt_us"] != 100.0 {
		t.Errorf("test_start %v", ts)
	}
	var back Report
	if err := json.Unmarshal(jb.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.End.SumSent != e.SumSent || len(back.End.UET.Receiver) != 2 {
		t.Errorf("the JSON report does not round-trip")
	}
	// The server saw it too.
	waitFor(t, func() bool { return strings.Contains(p.out.String(), "server since start") })
	srv := p.out.String()
	t.Logf("server:\n%s", srv)
	for _, want := range []string{
		"Server listening on 127.0.0.1 port", "(UET on UDP 4793)",
		"Session: UET, 2 streams, 65536 byte messages, mtu 4096, dscp 26, cc nscc, verify",
		"receiver\n", "receiver: messages=64 verify_errors=0",
		"server since start: no drops, no refused sessions",
	} {
		if !strings.Contains(srv, want) {
			t.Errorf("server output lacks %q", want)
		}
	}
}

// checkUETReportJSON decodes a UET report and checks iperf3's keys and
// UET's.
func checkUETReportJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, b)
	}
	has := func(v any, path string, keys ...string) map[string]any {
		t.Helper()
		o, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s is %T, want an object", path, v)
		}
		for _, k := range keys {
			if _, ok := o[k]; !ok {
				t.Errorf("%s lacks %q", path, k)
			}
		}
		return o
	}
	first := func(v any, path string) any {
		t.Helper()
		a, ok := v.([]any)
		if !ok || len(a) == 0 {
			t.Fatalf("%s is %T (%v), want a non-empty array", path, v, v)
		}
		return a[0]
	}
	has(m, "report", "start", "intervals", "end")
	start := has(m["start"], "start", "connected", "version", "timestamp", "test_start")
	has(first(start["connected"], "start.connected"), "start.connected[0]", "local_host", "local_port", "remote_host", "remote_port", "job_id", "pdc")
	has(start["test_start"], "start.test_start", "protocol", "num_streams", "blksize", "omit", "duration", "bytes", "tos", "mtu", "cc", "line_rate_bps", "base_rtt_us", "verify")
	iv := has(first(m["intervals"], "intervals"), "intervals[0]", "streams", "sum")
	has(first(iv["streams"], "intervals[0].streams"), "intervals[0].streams[0]", "id", "start", "end", "seconds", "bytes", "bits_per_second", "cwnd", "retransmits")
	end := has(m["end"], "end", "streams", "sum_sent", "sum_received", "counters", "cpu_utilization_percent", "uet")
	s := has(first(end["streams"], "end.streams"), "end.streams[0]", "sender", "receiver")
	for _, side := range []string{"sender", "receiver"} {
		has(s[side], "end.streams[0]."+side, "id", "job_id", "start", "end", "seconds", "bytes", "bits_per_second", "messages")
	}
	u := has(end["uet"], "end.uet", "client", "cccs", "receiver")
	has(u["client"], "end.uet.client", "retransmits", "timeouts", "probes_sent", "nacks_received", "ccc_transitions", "verify_errors")
	has(first(u["cccs"], "end.uet.cccs"), "end.uet.cccs[0]", "src", "dst", "state", "cwnd", "in_flight", "nscc")
	has(first(u["receiver"], "end.uet.receiver"), "end.uet.receiver[0]", "job_id", "messages", "message_bytes", "verify_errors", "duplicates", "ce_received")
	return m
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestUETPipeTimedTrace: a timed run with --trace-ccc prints the CCC's
// transitions with their times between the interval lines, each
// interval shows the CCC's window, and -J keeps the trace in the report.
func TestUETPipeTimedTrace(t *testing.T) {
	p := startUETPipe(t, ServerConfig{Interval: -1}, nil)
	var out bytes.Buffer
	c := p.clientConfig()
	c.Duration, c.Interval, c.TraceCCC = 300*time.Millisecond, 100*time.Millisecond, true
	c.Out = &out
	r, err := RunClient(context.Background(), c)
	t.Logf("client:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if s := r.End.SumSent.Seconds; s < 0.29 || s > 1 {
		t.Errorf("the summary covers %.3f s of a 0.3 s run", s)
	}
	if r.End.SumSent.Bytes == 0 || r.End.SumReceived.Bytes != r.End.SumSent.Bytes {
		t.Errorf("sent %d, received %d", r.End.SumSent.Bytes, r.End.SumReceived.Bytes)
	}
	if len(r.Intervals) < 2 || r.Intervals[0].Streams[0].CwndBytes == 0 {
		t.Errorf("intervals %+v: want the CCC's window", r.Intervals)
	}
	lines := strings.Split(out.String(), "\n")
	hdr := strings.Index(uetClientHeader, "cwnd")
	var ivLine, trace string
	for _, l := range lines {
		if strings.HasPrefix(l, "[  1]   0.00-") && ivLine == "" {
			ivLine = l
		}
		if strings.HasPrefix(l, "[ccc 1]") && strings.Contains(l, "IDLE -> ACTIVE") {
			trace = l
		}
	}
	if ivLine == "" || len(ivLine) <= hdr || !strings.HasSuffix(strings.Fields(ivLine[hdr:])[1], "Bytes") {
		t.Errorf("the window is not under its header:\n%s\n%s", uetClientHeader, ivLine)
	}
	if trace == "" || !strings.Contains(trace, "(198.18.0.2 -> 198.18.0.1 tc 26, 1 PDC)") {
		t.Errorf("no IDLE -> ACTIVE trace line: %q", trace)
	}
	// -J: the transitions are in the report, in time order.
	c.JSON, c.Duration = true, 200*time.Millisecond
	c.UETConn = p.client.lease() // RunClient closed the last one
	out.Reset()
	r, err = RunClient(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	m := checkUETReportJSON(t, out.Bytes())
	tr := r.End.UET.Trace
	if len(tr) < 2 || tr[0].From != "FREED" || tr[0].To != "IDLE" || !slices.IsSortedFunc(tr, func(a, b CCCEvent) int { return cmpFloat(a.Time, b.Time) }) {
		t.Errorf("ccc_trace %+v", tr)
	}
	if _, ok := m["end"].(map[string]any)["uet"].(map[string]any)["ccc_trace"]; !ok {
		t.Errorf("end.uet lacks ccc_trace")
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestUETPipeLoss: 1 % of the packets each way are lost; the streams
// recover (retransmissions, probes), every byte arrives intact, and the
// summary's uet line shows what it took.
func TestUETPipeLoss(t *testing.T) {
	loss := pktio.NewRandomLoss(0.01, 3, 4)
	p := startUETPipe(t, ServerConfig{Interval: -1}, loss.Filter)
	var out bytes.Buffer
	c := p.clientConfig()
	c.Bytes, c.Verify, c.MessageBytes = 8<<20, true, 100_000
	c.Out = &out
	r, err := RunClient(context.Background(), c)
	t.Logf("client (%d packets dropped):\n%s", loss.Dropped(), out.String())
	if err != nil {
		t.Fatal(err)
	}
	want := ceilDiv(8<<20, 100_000) * 100_000
	if r.End.SumReceived.Bytes != want || r.End.UET.verifyErrors() != 0 {
		t.Errorf("received %d bytes with %d verify errors; want %d and 0", r.End.SumReceived.Bytes, r.End.UET.verifyErrors(), want)
	}
	if loss.Dropped() == 0 || r.End.UET.Client.Retransmits == 0 || r.End.SumSent.Retransmits != r.End.UET.Client.Retransmits {
		t.Errorf("%d dropped, retransmits %d (summary %d)", loss.Dropped(), r.End.UET.Client.Retransmits, r.End.SumSent.Retransmits)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("uet: retransmits=%d ", r.End.UET.Client.Retransmits)) {
		t.Errorf("no uet line with the retransmissions")
	}
}

// TestUETPipeSessions: the server's side channel: one client after the
// other from the same address (the second waits for the first one's PDCs
// to expire at the server), an unverified run whose zeros are not counted
// as verify errors, and the refusals, each naming the field, the value
// and the range, in the client's error and the server's counters.
func TestUETPipeSessions(t *testing.T) {
	p := startUETPipe(t, ServerConfig{UETLimits: UETLimits{MaxStreams: 4}}, nil)
	for i := range 2 {
		c := p.clientConfig()
		c.Bytes = 1 << 20
		start := time.Now()
		r, err := RunClient(context.Background(), c)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if r.End.SumReceived.Bytes != 1<<20 || r.End.UET.Receiver[0].VerifyErrors != 0 {
			t.Errorf("run %d: received %d bytes, verify errors %d", i, r.End.SumReceived.Bytes, r.End.UET.Receiver[0].VerifyErrors)
		}
		t.Logf("run %d took %v", i, time.Since(start))
	}
	c := p.clientConfig()
	c.QPs = 5
	_, err := RunClient(context.Background(), c)
	want := fmt.Sprintf("server %s refused the session: streams 5: this server allows 1..4 per session (max_streams)", p.side)
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	// A RoCEv2 request (agent's side channel) and bad UET ones.
	for _, tc := range []struct{ line, want string }{
		{`{"version":1,"qps":[{"qpn":17}],"mtu":1024,"message_bytes":65536}`, `"transport rocev2: this server serves uet (the client must use transport uet)"`},
		{`{"transport":"uet","uet_version":9}`, `"uet_version 9: this server speaks 1"`},
		{`{"transport":"uet","uet_version":1,"streams":2,"job_ids":[1],"message_bytes":1}`, `"job_ids: 1 for 2 streams: one per stream"`},
		{`{"transport":"uet","uet_version":1,"streams":2,"job_ids":[7,7],"message_bytes":1}`, `"job_ids[1] 7: given twice: one job per stream"`},
		{`{"transport":"uet","uet_version":1,"streams":1,"job_ids":[16777216],"message_bytes":1}`, `"job_ids[0] 16777216: must be 0..16777215 (24 bits)"`},
		{`{"transport":"uet","uet_version":1,"streams":1,"job_ids":[1],"message_bytes":0}`, `"message_bytes 0: this server allows 1..16777216 (max_message_bytes)"`},
		{`{"transport":"uet","uet_version":1,"streams":1,"job_ids":[1],"message_bytes":1,"uet_addr":"::1"}`, `"uet_addr \"::1\": must be a unicast IPv4 address (this server's family)"`},
		{`GET / HTTP/1.0`, `a request is one JSON object on one line`},
		{strings.Repeat("x", 3000), `request line over 1088 bytes: this server allows 1..1088 (max_request_bytes)`},
	} {
		conn, err := net.Dial("tcp4", p.side)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write([]byte(tc.line + "\n"))
		line, _ := bufio.NewReader(conn).ReadString('\n')
		_ = conn.Close()
		if !strings.Contains(line, tc.want) {
			t.Errorf("%.40s…: got %q, want %s", tc.line, line, tc.want)
		}
	}
	st := p.srv.Stats()
	if st.Accepted != 2 || st.Refused[UETRefusedStreams] != 1 || st.Refused[UETRefusedTransport] != 1 || st.Refused[UETRefusedJobIDs] != 3 ||
		st.Refused[UETRefusedMalformed] != 1 || st.Refused[UETRefusedRequestBytes] != 1 || st.Sessions != 0 || st.Streams != 0 {
		t.Errorf("side channel %+v", st)
	}
	t.Logf("server:\n%s", p.out.String())
}

// TestUETValidate: the UET settings' errors name the flag, the value and
// the range.
func TestUETValidate(t *testing.T) {
	if err := DefaultUETClientConfig("198.18.0.1").Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := (ClientConfig{Server: "h", Transport: TransportUET}).Validate(); err != nil {
		t.Fatalf("zero values mean the defaults: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*ClientConfig)
		want string
	}{
		{"transport", func(c *ClientConfig) { c.Transport = "tcp" }, "transport tcp: must be rocev2 or uet"},
		{"mtu", func(c *ClientConfig) { c.MTU = 256 }, "mtu 256: must be 512..9000 with transport uet"},
		{"base rtt", func(c *ClientConfig) { c.BaseRTT = 2 * time.Second }, "base_rtt 2s: must be 1us..1s"},
		{"streams", func(c *ClientConfig) { c.QPs = 5000 }, "qps 5000: must be 1..4096"},
		{"bytes per stream", func(c *ClientConfig) { c.Bytes, c.QPs = 1000, 2 }, "size 1000 with message_size 65536 qps 2: 1 message(s) cannot keep every stream busy"},
		{"lb", func(c *ClientConfig) { c.LB = lb.Kind(9) }, "lb Kind(9): must be none, oblivious, bitmap, reps or mixed"},
		{"max wnd", func(c *ClientConfig) { c.LineRate = 2000 }, "line_rate 2kbit with base_rtt 100µs mtu 4096: pds: rccc: max_wnd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultUETClientConfig("198.18.0.1")
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got  %v\nwant %q…", err, tc.want)
			}
		})
	}
}

// TestUETPipeLBTrim: a client with --lb reps and a server with
// --trim-dscp/--trim-lasthop-dscp: every byte arrives, the setup line and
// test_start name the balancer and its seed, and the server's report has
// trimmed_received (text and JSON); a trim DSCP pds refuses names its flag.
func TestUETPipeLBTrim(t *testing.T) {
	p := startUETPipe(t, ServerConfig{TrimDSCP: 9, TrimLastHopDSCP: 10}, nil)
	var out bytes.Buffer
	c := p.clientConfig()
	c.QPs, c.Bytes, c.LB, c.Out = 2, 1<<20, lb.KindREPS, &out
	r, err := RunClient(context.Background(), c)
	t.Logf("client:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if r.End.SumReceived.Bytes != 1<<20 {
		t.Errorf("received %d bytes; want %d", r.End.SumReceived.Bytes, 1<<20)
	}
	if ts := r.Start.TestStart; ts.LB != "reps" || ts.LBSeed == 0 {
		t.Errorf("test_start lb %q seed %d", ts.LB, ts.LBSeed)
	}
	if !strings.Contains(out.String(), "base_rtt 100µs), lb reps") {
		t.Errorf("setup line lacks the balancer")
	}
	var jb bytes.Buffer
	if err := r.WriteJSON(&jb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(jb.String(), `"lb": "reps"`) && !strings.Contains(jb.String(), `"lb":"reps"`) {
		t.Errorf("JSON lacks test_start.lb")
	}
	// Without --lb, no lb in the setup line or test_start.
	c = p.clientConfig()
	out.Reset()
	c.Bytes, c.Out = 256<<10, &out
	if r, err = RunClient(context.Background(), c); err != nil || r.Start.TestStart.LB != "" || r.Start.TestStart.LBSeed != 0 || strings.Contains(out.String(), ", lb ") {
		t.Errorf("no --lb: %v, test_start %+v", err, r.Start.TestStart)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.out.String(), "trimmed_received=0 (since start)") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("server:\n%s", p.out.String())
	if !strings.Contains(p.out.String(), "ce_received=0 trimmed_received=0 (since start)") {
		t.Errorf("server report lacks trimmed_received")
	}
	sb, err := json.Marshal(UETEnd{Server: p.srv.agentReport()})
	if err != nil || !strings.Contains(string(sb), `"trimmed_received":0`) {
		t.Errorf("server JSON %s %v", sb, err)
	}
	for _, tc := range []struct {
		cfg  ServerConfig
		want string
	}{
		{ServerConfig{TrimDSCP: 26}, "trim_dscp 26: must be 0..63 and not the data's DSCP (26)"},
		{ServerConfig{TrimLastHopDSCP: 64}, "trim_lasthop_dscp 64: must be 0..63"},
	} {
		ca, sb := pktio.NewPipe(pktio.PipeOptions{A: uetPipeClient, B: uetPipeServer})
		tc.cfg.Transport, tc.cfg.UETConn, tc.cfg.Bind, tc.cfg.Port = TransportUET, sb, netip.MustParseAddr("127.0.0.1"), freePort(t)
		s, err := ListenUET(tc.cfg)
		if err == nil {
			_ = s.Close()
		}
		_ = ca.Close()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("got  %v\nwant %q…", err, tc.want)
		}
	}
}

// TestUETPipeRCCC: a client with --cc rccc: every byte arrives verified,
// the setup line, test_start and the server's session line name the mode,
// the client's CCC reports its credit (text and JSON, intervals too) and
// the server its receiver CCC, its pacer and the credit it sent; a mode
// pds does not have names the flag and the values.
func TestUETPipeRCCC(t *testing.T) {
	p := startUETPipe(t, ServerConfig{}, nil)
	var out bytes.Buffer
	c := p.clientConfig()
	c.QPs, c.Bytes, c.Verify, c.UETCC, c.Out = 2, 4<<20, true, pds.CCRCCC, &out
	c.Interval = 20 * time.Millisecond
	r, err := RunClient(context.Background(), c)
	t.Logf("client:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	e := &r.End
	if e.SumSent.Bytes != 4<<20 || e.SumReceived.Bytes != 4<<20 || e.UET.verifyErrors() != 0 {
		t.Errorf("sent %d, received %d bytes, %d verify errors; want %d, %d, 0", e.SumSent.Bytes, e.SumReceived.Bytes, e.UET.verifyErrors(), 4<<20, 4<<20)
	}
	if r.Start.TestStart.CC != "rccc" {
		t.Errorf("test_start.cc %q; want rccc", r.Start.TestStart.CC)
	}
	if len(e.UET.CCCs) != 1 || e.UET.CCCs[0].RCCC == nil || e.UET.CCCs[0].NSCC != nil || e.UET.CCCs[0].RCCC.CreditBytes == 0 {
		t.Errorf("CCCs %+v: want one with RCCC's credit and no NSCC", e.UET.CCCs)
	}
	if e.UET.Client.CreditsReceived == 0 {
		t.Errorf("client credits_received 0")
	}
	credited := false
	for _, iv := range r.Intervals {
		credited = credited || iv.Sum.CreditBytes != nil
	}
	if !credited {
		t.Errorf("no interval has the CCC's credit")
	}
	text := out.String()
	for _, want := range []string{"cc rccc (line rate", "  credit ", " credit_requests_sent=", " credit=", "(rccc: speculating="} {
		if !strings.Contains(text, want) {
			t.Errorf("client output lacks %q", want)
		}
	}
	var jb bytes.Buffer
	if err := r.WriteJSON(&jb); err != nil {
		t.Fatal(err)
	}
	var m map[string]any // rccc has no window: no cwnd, no nscc
	if err := json.Unmarshal(jb.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	ccc := m["end"].(map[string]any)["uet"].(map[string]any)["cccs"].([]any)[0].(map[string]any)
	if rc, ok := ccc["rccc"].(map[string]any); !ok || rc["credit_bytes"] == nil || rc["speculating"] == nil || rc["credit_requests"] == nil {
		t.Errorf("end.uet.cccs[0].rccc %v", ccc["rccc"])
	}
	if ts := m["start"].(map[string]any)["test_start"].(map[string]any); ts["cc"] != "rccc" {
		t.Errorf("test_start.cc %v", ts["cc"])
	}
	iv := m["intervals"].([]any)[0].(map[string]any)["sum"].(map[string]any)
	if _, ok := iv["credit"]; !ok {
		t.Errorf("intervals[0].sum lacks credit: %v", iv)
	}

	// The server's report: its session line, the receiver CCC's source at
	// the pacer, the pacer, the credit it sent.
	waitFor(t, func() bool { return strings.Contains(p.out.String(), "server since start") })
	srv := p.out.String()
	t.Logf("server:\n%s", srv)
	for _, want := range []string{
		"Session: UET, 2 streams, 65536 byte messages, mtu 4096, dscp 26, cc rccc, verify",
		"receiver ccc: 198.18.0.2 -> 198.18.0.1 tc 26, 2 PDCs, rccc ", " target_bytes=", " granted_bytes=",
		"rccc since start: credits_sent=", " pacer: sources=",
	} {
		if !strings.Contains(srv, want) {
			t.Errorf("server output lacks %q", want)
		}
	}
	if strings.Contains(srv, "credits_sent=0 ") {
		t.Errorf("the server sent no credit")
	}
	if sa := p.srv.agentReport(); sa.CreditsSent == 0 || sa.Pacer.Grants == 0 || sa.Pacer.GrantedBytes == 0 {
		t.Errorf("server: credits_sent %d, pacer %+v", sa.CreditsSent, sa.Pacer)
	}

	// The server's JSON has them too.
	pj := startUETPipe(t, ServerConfig{JSON: true}, nil)
	c = pj.clientConfig()
	c.Bytes, c.UETCC = 1<<20, pds.CCBoth
	if _, err := RunClient(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(pj.out.String(), `"side_channel"`) })
	var sr Report
	if err := json.Unmarshal([]byte(pj.out.String()), &sr); err != nil {
		t.Fatalf("server JSON: %v\n%s", err, pj.out.String())
	}
	u := sr.End.UET
	if sr.Start.TestStart.CC != "both" || u == nil || u.Server == nil || u.Server.CreditsSent == 0 || u.Server.Pacer.Grants == 0 ||
		len(u.RxCCCs) != 1 || u.RxCCCs[0].Source == nil || u.RxCCCs[0].Source.GrantedBytes == 0 {
		t.Errorf("server JSON: cc %q, end.uet %+v", sr.Start.TestStart.CC, u)
	}
	for _, key := range []string{`"credits_sent"`, `"credit_acks_sent"`, `"credit_requests_received"`, `"pacer"`, `"rx_cccs"`, `"target_bytes"`, `"state"`} {
		if !strings.Contains(pj.out.String(), key) {
			t.Errorf("server JSON lacks %s", key)
		}
	}

	c = p.clientConfig()
	c.UETCC = pds.CCMode(9)
	if err := c.Validate(); err == nil || err.Error() != "cc CCMode(9): must be nscc, rccc, both or none with transport uet" {
		t.Errorf("bad mode: %v", err)
	}
}

// TestUETTimescale: with Timescale 4 on both ends the client's endpoint
// runs at a quarter of its line rate with NSCC's base RTT and the
// timers four times as long, the server's credit pacer grants at 0.99 of
// a quarter of its own line (an RCCC flow from a faster client gets the
// server's slowed line), and both ends log their held time.
func TestUETTimescale(t *testing.T) {
	c := DefaultUETClientConfig("198.18.0.1")
	c.LineRate, c.BaseRTT, c.Timescale, c.Held = 500*units.Mbit, time.Millisecond, 4, hostlost.NewLog()
	pc := c.uetConfig(placeholderConn{}, nil)
	d := pds.DefaultConfig()
	if pc.LinkRate != 125*units.Mbit || pc.BaseRTT != 4*time.Millisecond || pc.RTO != 4*d.RTO || pc.ProbeTimeout != 4*d.ProbeTimeout ||
		pc.IdleTimeout != uetClientIdle || pc.Held != c.Held {
		t.Errorf("slowed endpoint: rate %v, base RTT %v, RTO %v, probe %v, idle %v, held %p", pc.LinkRate, pc.BaseRTT, pc.RTO, pc.ProbeTimeout, pc.IdleTimeout, pc.Held)
	}
	// An RTO of the client's own, slowed as the default is.
	c.RTO = 30 * time.Millisecond
	if pc := c.uetConfig(placeholderConn{}, nil); pc.RTO != 120*time.Millisecond {
		t.Errorf("slowed rto %v, want 4 × 30ms", pc.RTO)
	}
	c.RTO = 20 * time.Second
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "rto ") {
		t.Errorf("rto 20s: %v", err)
	}
	c.RTO = 0
	for _, k := range []units.Timescale{0.5, 1001} {
		c.Timescale = k
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "timescale ") {
			t.Errorf("timescale %v: %v", k, err)
		}
	}

	srvHeld, cliHeld := hostlost.NewLog(), hostlost.NewLog()
	p := startUETPipe(t, ServerConfig{LineRate: 40 * units.Mbit, BaseRTT: time.Millisecond, Timescale: 4, Held: srvHeld}, nil)
	c = p.clientConfig()
	c.Bytes, c.UETCC, c.LineRate, c.BaseRTT, c.Timescale, c.Held = 1<<20, pds.CCRCCC, 80*units.Mbit, time.Millisecond, 4, cliHeld
	r, err := RunClient(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	bps := r.End.SumSent.BitsPerSecond
	if bps < 0.75*10e6 || bps > 1.05*10e6 {
		t.Errorf("goodput %.1f Mbit/s: want the server's 40 Mbit/s slowed by 4 (10 Mbit/s, less the headers)", bps/1e6)
	}
	n, _, _ := cliHeld.Totals()
	m, _, _ := srvHeld.Totals()
	if n == 0 || m == 0 {
		t.Errorf("held intervals: client %d, server %d; want some at both ends", n, m)
	}
}
