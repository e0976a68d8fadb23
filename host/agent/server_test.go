package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/sidechan"
)

// serverAgent is an agent on a pipe, for the side channel's server: its
// QPs never see a packet, the tests look at what it accepts and refuses.
func serverAgent(t testing.TB) *Agent {
	t.Helper()
	pa, _ := pktio.NewPipe(pktio.PipeOptions{})
	a, err := New(Config{Conn: pa})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// serveTCP serves opts on a loopback listener until the test ends.
func serveTCP(t *testing.T, a *Agent, opts ServerOptions) (*Server, string) {
	t.Helper()
	srv, err := a.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = ln.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv, ln.Addr().String()
}

// request is a valid request line for n QPs of msg-byte messages.
func request(n, msg int) string {
	req := SessionRequest{Version: ProtocolVersion, MTU: 1024, DSCP: 26, MessageBytes: msg, Op: "write", NP: true, CNPPeriod: 4 * time.Microsecond, CNPDSCP: 48}
	for i := range n {
		req.QPs = append(req.QPs, Endpoint{Addr: pktio.DefaultPipeB, QPN: uint32(0x100 + i), PSN: 1, MTU: 1024})
	}
	b, _ := json.Marshal(req)
	return string(b) + "\n"
}

// ask sends send on a new connection and returns the server's first line,
// decoded, and the connection (a session lasts while it is open).
func ask(t *testing.T, addr, send string) (sessionReply, net.Conn) {
	t.Helper()
	return askThen(t, addr, send, false)
}

// askThen is ask, and with closeWrite the client's end of the
// connection closes after send.
func askThen(t *testing.T, addr, send string, closeWrite bool) (sessionReply, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		_, _ = c.Write([]byte(send))
		if closeWrite {
			_ = c.(*net.TCPConn).CloseWrite()
		}
	}()
	var rep sessionReply
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatalf("no reply line to %.60q: %v", send, err)
	}
	if err := json.Unmarshal(line, &rep); err != nil {
		t.Fatalf("reply %q: %v", line, err)
	}
	return rep, c
}

// waitStats waits until the server's stats satisfy ok.
func waitStats(t *testing.T, srv *Server, ok func(ServerStats) bool) ServerStats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := srv.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("server stats %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func idle(st ServerStats) bool { return st.Conns == 0 && st.Sessions == 0 }

func TestServerLimitsDefaults(t *testing.T) {
	srv, err := serverAgent(t).NewServer(ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := ServerLimits{MaxQPs: 64, MaxMessageBytes: 256 << 20, MaxTotalQPs: 256, MaxBufferBytes: 1 << 30, Limits: sidechan.Limits{MaxSessions: 32, MaxConns: 64, MaxRequestBytes: 20 << 10, RequestTimeout: 10 * time.Second, MaxSessionDuration: 25 * time.Hour}}
	if got := srv.Limits(); got != want {
		t.Errorf("defaults\n got %+v\nwant %+v", got, want)
	}
	// A fixed buffer caps the message at its size.
	srv, err = serverAgent(t).NewServer(ServerOptions{ServerLimits: ServerLimits{BufferBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Limits().MaxMessageBytes; got != 1<<20 {
		t.Errorf("max_message_bytes with a 1 MiB buffer: %d", got)
	}
}

func TestServerLimitsInvalid(t *testing.T) {
	a := serverAgent(t)
	for _, tc := range []struct {
		l    ServerLimits
		want string
	}{
		{ServerLimits{MaxQPs: -1}, "agent: max_qps -1: must be 1..16384"},
		{ServerLimits{MaxQPs: 20000}, "agent: max_qps 20000: must be 1..16384"},
		{ServerLimits{MaxQPs: 64, MaxTotalQPs: 16}, "agent: max_total_qps 16: must be max_qps (64)..65536"},
		{ServerLimits{Limits: sidechan.Limits{MaxSessions: -2}}, "agent: max_sessions -2: must be 1..65536"},
		{ServerLimits{Limits: sidechan.Limits{MaxConns: 1 << 20}}, "agent: max_conns 1048576: must be 1..65536"},
		{ServerLimits{MaxBufferBytes: 4096}, "agent: max_buffer_bytes 4096: must be 65536..1099511627776"},
		{ServerLimits{BufferBytes: 2 << 30}, "agent: buffer_bytes 2147483648: must be 0 (4 messages) or 1..1073741824 (max_buffer_bytes, at most 2 GiB)"},
		{ServerLimits{MaxMessageBytes: 2 << 30}, "agent: max_message_bytes 2147483648: must be 1..1073741824"},
		{ServerLimits{BufferBytes: 1 << 20, MaxMessageBytes: 2 << 20}, "agent: max_message_bytes 2097152: must fit in buffer_bytes (1048576)"},
		{ServerLimits{MaxMessageBytes: 512 << 20}, "agent: max_message_bytes 536870912: its QP buffer (2147483648 bytes, 4 messages) exceeds max_buffer_bytes (1073741824)"},
		{ServerLimits{Limits: sidechan.Limits{MaxRequestBytes: 100}}, "agent: max_request_bytes 100: must be 1024..67108864"},
		{ServerLimits{Limits: sidechan.Limits{RequestTimeout: time.Microsecond}}, "agent: request_timeout 1µs: must be 1ms..1h0m0s"},
		{ServerLimits{Limits: sidechan.Limits{MaxSessionDuration: -time.Second}}, "agent: max_session_duration -1s: must be 1ms..720h0m0s"},
	} {
		if _, err := a.NewServer(ServerOptions{ServerLimits: tc.l}); err == nil || err.Error() != tc.want {
			t.Errorf("%+v:\n got %v\nwant %s", tc.l, err, tc.want)
		}
		// Serve and ServeConn check them too.
		if err := a.Serve(nil, ServerOptions{ServerLimits: tc.l}); err == nil || err.Error() != tc.want {
			t.Errorf("Serve %+v: %v", tc.l, err)
		}
	}
}

// TestServerRefusals: every malformed or excessive request gets an error
// line naming the rule or limit, the value and the range, and is counted.
func TestServerRefusals(t *testing.T) {
	var refusedMu sync.Mutex
	var refused []string
	srv, addr := serveTCP(t, serverAgent(t), ServerOptions{
		ServerLimits: ServerLimits{Limits: sidechan.Limits{RequestTimeout: 200 * time.Millisecond}},
		OnRefuse: func(_ net.Addr, cause, msg string) {
			refusedMu.Lock()
			refused = append(refused, cause)
			refusedMu.Unlock()
		},
	})
	valid := request(1, 4096)
	edit := func(old, new string) string {
		if !strings.Contains(valid, old) {
			t.Fatalf("%q not in %s", old, valid)
		}
		return strings.Replace(valid, old, new, 1)
	}
	for _, tc := range []struct {
		name, send, cause, want string
	}{
		{"not json", "hello\n", RefusedMalformed, "request: invalid character 'h' looking for beginning of value: a request is one JSON object on one line"},
		{"truncated json", `{"version":1,` + "\n", RefusedMalformed, "request: unexpected end of JSON input: a request is one JSON object on one line"},
		{"wrong type", edit(`"mtu":1024`, `"mtu":"big"`), RefusedMalformed, "request: json: cannot unmarshal string into Go struct field Endpoint.qps.mtu of type int: a request is one JSON object on one line"},
		{"two objects", strings.TrimSuffix(valid, "\n") + "{}\n", RefusedMalformed, "request: invalid character '{' after top-level value: a request is one JSON object on one line"},
		{"no newline", strings.TrimSuffix(valid, "\n"), RefusedMalformed, "request: the connection ended in the middle of a line: a request is one JSON object on one line"},
		{"version", edit(`"version":1`, `"version":2`), RefusedVersion, "version 2: this server speaks 1"},
		{"no qps", request(0, 4096), RefusedQPs, "qps 0: this server allows 1..64 per session (max_qps)"},
		{"too many qps", request(65, 4096), RefusedQPs, "qps 65: this server allows 1..64 per session (max_qps)"},
		{"no message", request(1, 0), RefusedMessageBytes, "message_bytes 0: this server allows 1..268435456 (max_message_bytes)"},
		{"huge message", request(1, 512<<20), RefusedMessageBytes, "message_bytes 536870912: this server allows 1..268435456 (max_message_bytes)"},
		{"op", edit(`"op":"write"`, `"op":"read"`), RefusedOp, `op "read": this server allows write or send`},
		{"mtu", edit(`"mtu":1024,"dscp"`, `"mtu":300,"dscp"`), RefusedQPConfig, "mtu 300: must be one of 256, 512, 1024, 2048, 4096"},
		{"dscp", edit(`"dscp":26`, `"dscp":64`), RefusedQPConfig, "dscp 64: must be 0..63"},
		{"cnp period", edit(`"min_time_between_cnps_ns":4000`, `"min_time_between_cnps_ns":-1`), RefusedQPConfig, "min_time_between_cnps -1ns: must be 0..1s"},
		{"peer qpn", edit(`"qpn":256`, `"qpn":0`), RefusedEndpoint, "qps[0]: peer qpn 0x0: must be 1..0xffffff"},
		{"peer psn", edit(`"psn":1`, `"psn":16777216`), RefusedEndpoint, "qps[0]: peer psn 0x1000000: must be 0..0xffffff"},
		{"peer mtu", edit(`"mtu":1024}`, `"mtu":4096}`), RefusedEndpoint, "qps[0]: path mtu 1024 here, 4096 at the peer: both ends must agree"},
		{"peer family", edit(`"198.18.0.2:4791"`, `"[2001:db8::2]:4791"`), RefusedEndpoint, "qps[0]: local 198.18.0.1:4791 and peer [2001:db8::2]:4791 are different IP families"},
		{"long line", strings.Repeat(" ", 20<<10) + valid, RefusedRequestBytes, "request line over 20480 bytes: this server allows 1..20480 (max_request_bytes)"},
		// 4096 QPs are about 400 KB of JSON: refused at 20 KiB.
		{"4096 qps", request(4096, 4096), RefusedRequestBytes, "request line over 20480 bytes: this server allows 1..20480 (max_request_bytes)"},
		{"silence", "", RefusedTimeout, "no request line within 200ms (request_timeout)"},
	} {
		rep, _ := askThen(t, addr, tc.send, tc.name == "no newline")
		if rep.Error != tc.want || rep.Cause != tc.cause || len(rep.QPs) != 0 {
			t.Errorf("%s:\n got %q (%s)\nwant %q (%s)", tc.name, rep.Error, rep.Cause, tc.want, tc.cause)
		}
	}
	st := waitStats(t, srv, idle)
	want := map[string]uint64{RefusedMalformed: 5, RefusedVersion: 1, RefusedQPs: 2, RefusedMessageBytes: 2, RefusedOp: 1,
		RefusedQPConfig: 3, RefusedEndpoint: 4, RefusedRequestBytes: 2, RefusedTimeout: 1}
	if fmt.Sprint(st.Refused) != fmt.Sprint(want) || st.Accepted != 0 || st.QPs != 0 || st.BufferBytes != 0 {
		t.Errorf("stats %+v, want refused %v", st, want)
	}
	refusedMu.Lock()
	if len(refused) != 21 {
		t.Errorf("OnRefuse called %d times, want 21", len(refused))
	}
	refusedMu.Unlock()
	// A client that connects and closes is refused too (no_request).
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	waitStats(t, srv, func(st ServerStats) bool { return st.Refused[RefusedNoRequest] == 1 && idle(st) })
}

// TestServerTotals: the limits over all sessions, and their release when
// a session ends.
func TestServerTotals(t *testing.T) {
	a := serverAgent(t)
	srv, addr := serveTCP(t, a, ServerOptions{ServerLimits: ServerLimits{MaxQPs: 4, MaxTotalQPs: 6, MaxBufferBytes: 1 << 20, Limits: sidechan.Limits{MaxSessions: 3, MaxConns: 4}}})
	// 2 QPs × 256 KiB (4 messages of 64 KiB): half the memory.
	rep, first := ask(t, addr, request(2, 64<<10))
	if rep.Error != "" || len(rep.QPs) != 2 {
		t.Fatalf("first session: %+v", rep)
	}
	// A refused client reads its line and goes; the server then frees its
	// connection.
	refused := func(send string, conns int) sessionReply {
		t.Helper()
		rep, c := ask(t, addr, send)
		_ = c.Close()
		waitStats(t, srv, func(st ServerStats) bool { return st.Conns == conns })
		return rep
	}
	// 2 QPs × 512 KiB do not fit in what is left.
	rep = refused(request(2, 128<<10), 1)
	if want := "registered memory 1048576 bytes (2 QPs × 524288): this server has 524288 of its 1048576 free (max_buffer_bytes)"; rep.Error != want || rep.Cause != RefusedBufferBytes {
		t.Errorf("memory:\n got %q\nwant %q", rep.Error, want)
	}
	rep, second := ask(t, addr, request(1, 4096))
	if rep.Error != "" {
		t.Fatalf("second session: %+v", rep)
	}
	// 4 QPs more than the 3 of 6 left.
	rep = refused(request(4, 4096), 2)
	if want := "qps 4: this server has 3 of its 6 free (max_total_qps)"; rep.Error != want || rep.Cause != RefusedTotalQPs {
		t.Errorf("total qps:\n got %q\nwant %q", rep.Error, want)
	}
	rep, third := ask(t, addr, request(1, 4096))
	if rep.Error != "" {
		t.Fatalf("third session: %+v", rep)
	}
	rep = refused(request(1, 4096), 3)
	if want := "sessions 4: this server allows 1..3 at once (max_sessions)"; rep.Error != want || rep.Cause != RefusedSessions {
		t.Errorf("sessions:\n got %q\nwant %q", rep.Error, want)
	}
	st := waitStats(t, srv, func(st ServerStats) bool { return st.Conns == 3 })
	if st.Sessions != 3 || st.QPs != 4 || st.BufferBytes != 2*256<<10+2*64<<10 || st.Accepted != 3 || len(a.QPs()) != 4 {
		t.Errorf("with three sessions: %+v, agent QPs %d", st, len(a.QPs()))
	}
	// A fourth connection is pending (no request yet): a fifth is one too
	// many.
	pending, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pending.Close()
	waitStats(t, srv, func(st ServerStats) bool { return st.Conns == 4 })
	rep, _ = ask(t, addr, request(1, 4096))
	if want := "connections 5: this server allows 1..4 at once (max_conns)"; rep.Error != want || rep.Cause != RefusedConns {
		t.Errorf("conns:\n got %q\nwant %q", rep.Error, want)
	}
	_ = pending.Close()
	// Ending the sessions gives everything back.
	_ = first.Close()
	_ = second.Close()
	_ = third.Close()
	st = waitStats(t, srv, idle)
	if st.QPs != 0 || st.BufferBytes != 0 || len(a.QPs()) != 0 {
		t.Errorf("after the sessions: %+v, agent QPs %d", st, len(a.QPs()))
	}
	if rep, _ := ask(t, addr, request(2, 128<<10)); rep.Error != "" || len(rep.QPs) != 2 {
		t.Errorf("2 QPs × 512 KiB once the memory is free: %+v", rep)
	}
	want := map[string]uint64{RefusedBufferBytes: 1, RefusedTotalQPs: 1, RefusedSessions: 1, RefusedConns: 1, RefusedNoRequest: 1}
	if st := srv.Stats(); fmt.Sprint(st.Refused) != fmt.Sprint(want) {
		t.Errorf("refused %v, want %v", st.Refused, want)
	}
}

// TestServerMemory: what hostile clients can make the server hold.
// Eight connections each send a 64 MiB line (the old reader held every
// line whole before its 1 MiB check: +515 MiB of heap after GC in this
// setup, and a silent close); then requests that would register 2 GiB.
// Bound: the server reads at most max_request_bytes (20 KiB) + bufio's
// 4 KiB per connection, so with everything the test's clients allocate
// the heap grows by less than 4 MiB, and by less than 1 MiB after GC;
// every connection gets its error line.
func TestServerMemory(t *testing.T) {
	a := serverAgent(t)
	srv, addr := serveTCP(t, a, ServerOptions{})
	const conns, lineBytes = 8, 64 << 20
	line := make([]byte, lineBytes)
	for i := range line {
		line[i] = 'x'
	}
	line[lineBytes-1] = '\n'
	heap := func() (live, total uint64) {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc, m.TotalAlloc
	}
	run := func(name string, send []byte, want string) {
		t.Helper()
		live0, total0 := heap()
		var wg sync.WaitGroup
		replies := make([]string, conns)
		written := make([]int, conns)
		for i := range conns {
			c, err := net.Dial("tcp4", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			wg.Add(2)
			go func() {
				defer wg.Done()
				written[i], _ = c.Write(send) // fails once the server has closed
			}()
			go func() {
				defer wg.Done()
				r := bufio.NewReaderSize(c, 512)
				l, err := r.ReadSlice('\n')
				replies[i] = string(l)
				if err != nil {
					replies[i] = err.Error()
				}
			}()
		}
		wg.Wait()
		live1, total1 := heap()
		grew, allocated := float64(int64(live1-live0))/(1<<20), float64(total1-total0)/(1<<20)
		t.Logf("%s: heap %+.2f MiB after GC, %.2f MiB allocated; clients wrote %d of %d bytes", name, grew, allocated, written, len(send))
		if grew > 1 || allocated > 4 {
			t.Errorf("%s: the heap grew by %.2f MiB (after GC), %.2f MiB allocated: want under 1 and 4", name, grew, allocated)
		}
		for i, r := range replies {
			var rep sessionReply
			if err := json.Unmarshal([]byte(r), &rep); err != nil || rep.Error != want {
				t.Errorf("%s, connection %d: reply %q, want error %q", name, i, r, want)
			}
		}
		waitStats(t, srv, idle)
	}
	run("8 × 64 MiB lines", line, "request line over 20480 bytes: this server allows 1..20480 (max_request_bytes)")
	runtime.KeepAlive(line)
	// Each asks for 2 GiB: refused before anything is allocated.
	run("8 × 2 QPs × 256 MiB messages", []byte(request(2, 256<<20)),
		"registered memory 2147483648 bytes (2 QPs × 1073741824): this server has 1073741824 of its 1073741824 free (max_buffer_bytes)")
	if st := srv.Stats(); st.Refused[RefusedRequestBytes] != conns || st.Refused[RefusedBufferBytes] != conns {
		t.Errorf("refused %v", st.Refused)
	}
}

// TestServerTimeouts: a connection that sends no request, a session that
// never finishes, a finish line that is not one.
func TestServerTimeouts(t *testing.T) {
	a := serverAgent(t)
	srv, addr := serveTCP(t, a, ServerOptions{ServerLimits: ServerLimits{Limits: sidechan.Limits{RequestTimeout: 50 * time.Millisecond, MaxSessionDuration: 300 * time.Millisecond}}})
	start := time.Now()
	rep, _ := ask(t, addr, "")
	if d := time.Since(start); rep.Cause != RefusedTimeout || rep.Error != "no request line within 50ms (request_timeout)" || d > 2*time.Second {
		t.Errorf("after %v: %+v", d, rep)
	}
	// Half a request, then nothing: the timeout covers the whole line.
	rep, _ = ask(t, addr, `{"version":1,`)
	if rep.Cause != RefusedTimeout {
		t.Errorf("half a line: %+v", rep)
	}

	// A session whose client never sends its finish.
	start = time.Now()
	rep, c := ask(t, addr, request(2, 4096))
	if rep.Error != "" {
		t.Fatal(rep.Error)
	}
	r := bufio.NewReader(c)
	line, err := r.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var res SessionResult
	_ = json.Unmarshal(line, &res)
	d := time.Since(start)
	if res.Cause != AbortedDuration || res.Error != "session over 300ms without its finish line (max_session_duration)" || d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("after %v: %s", d, line)
	}
	// A session that sends something else than the finish.
	rep, c = ask(t, addr, request(1, 4096))
	if rep.Error != "" {
		t.Fatal(rep.Error)
	}
	if _, err := c.Write([]byte(`{"finish":false}` + "\n")); err != nil {
		t.Fatal(err)
	}
	line, _ = bufio.NewReader(c).ReadBytes('\n')
	res = SessionResult{}
	_ = json.Unmarshal(line, &res)
	if res.Cause != AbortedFinish || res.Error != `finish: expected {"finish":true}` {
		t.Errorf("bad finish: %s", line)
	}
	st := waitStats(t, srv, idle)
	if st.Refused[RefusedTimeout] != 2 || st.Aborted[AbortedDuration] != 1 || st.Aborted[AbortedFinish] != 1 || st.QPs != 0 || len(a.QPs()) != 0 {
		t.Errorf("stats %+v, agent QPs %d", st, len(a.QPs()))
	}
}
