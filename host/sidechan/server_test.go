package sidechan

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// toyRequest is a transport's request in these tests: a count of things
// the session holds.
type toyRequest struct {
	Things int `json:"things"`
}

// toy is a Handler that holds things: at most 3 a session, 4 in all.
type toy struct {
	mu     sync.Mutex
	held   int
	events []string
}

func (h *toy) Check(_ net.Conn, req *toyRequest) *Refusal {
	if req.Things < 1 || req.Things > 3 {
		return Refuse("things", "things %d: this server allows 1..3", req.Things)
	}
	return nil
}

func (h *toy) Open(_ net.Conn, req *toyRequest) (Session, *Refusal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held+req.Things > 4 {
		return nil, Refuse("total_things", "things %d: %d free", req.Things, 4-h.held)
	}
	h.held += req.Things
	return &toySession{h: h, n: req.Things}, nil
}

func (h *toy) log(e string) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

type toySession struct {
	h *toy
	n int
}

func (s *toySession) Reply() any             { return map[string]int{"granted": s.n} }
func (s *toySession) Started()               { s.h.log("started") }
func (s *toySession) Finish() any            { s.h.log("finish"); return map[string]int{"used": s.n} }
func (s *toySession) Fail(cause, msg string) { s.h.log("fail " + cause) }
func (s *toySession) Close() {
	s.h.mu.Lock()
	s.h.held -= s.n
	s.h.events = append(s.h.events, "close")
	s.h.mu.Unlock()
}

func toyLimits() Limits {
	return Limits{MaxSessions: 2, MaxConns: 4, MaxRequestBytes: 1024, RequestTimeout: time.Second, MaxSessionDuration: 300 * time.Millisecond}
}

func serveToy(t *testing.T, h *toy, lim Limits) (*Server[toyRequest], string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	srv := NewServer[toyRequest](h, Options{Limits: lim})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = ln.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return srv, ln.Addr().String()
}

func dialToy(t *testing.T, addr string, things int) (*Client, map[string]int, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var rep map[string]int
	cl, err := Open(ctx, c, toyRequest{Things: things}, &rep, 1024)
	return cl, rep, err
}

// TestServerSession: a session is checked, opened, replied to, finished
// and closed before its result goes out, and the client reads each step.
func TestServerSession(t *testing.T) {
	h := &toy{}
	srv, addr := serveToy(t, h, toyLimits())
	cl, rep, err := dialToy(t, addr, 2)
	if err != nil || rep["granted"] != 2 {
		t.Fatalf("open: %v %v", rep, err)
	}
	var res map[string]int
	if err := cl.Finish(context.Background(), &res, 1024); err != nil || res["used"] != 2 {
		t.Fatalf("finish: %v %v", res, err)
	}
	_ = cl.Close()
	h.mu.Lock()
	ev, held := strings.Join(h.events, ","), h.held
	h.mu.Unlock()
	if ev != "started,finish,close" || held != 0 {
		t.Errorf("events %q, held %d", ev, held)
	}
	if st := srv.Stats(); st.Accepted != 1 || st.Sessions != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestServerRefusals: the transport's rules, the sessions limit and the
// transport's own totals each refuse with their cause, and a client reads
// the refusal as a *ServerError.
func TestServerRefusals(t *testing.T) {
	h := &toy{}
	srv, addr := serveToy(t, h, toyLimits())
	var se *ServerError
	if _, _, err := dialToy(t, addr, 9); !errors.As(err, &se) || se.Cause != "things" || se.Msg != "things 9: this server allows 1..3" {
		t.Errorf("check: %v", err)
	}
	a, _, err := dialToy(t, addr, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, _, err := dialToy(t, addr, 2); !errors.As(err, &se) || se.Cause != "total_things" {
		t.Errorf("total: %v", err)
	}
	b, _, err := dialToy(t, addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, _, err := dialToy(t, addr, 1); !errors.As(err, &se) || se.Cause != RefusedSessions ||
		se.Msg != "sessions 3: this server allows 1..2 at once (max_sessions)" {
		t.Errorf("sessions: %v", err)
	}
	st := srv.Stats()
	if st.Refused["things"] != 1 || st.Refused["total_things"] != 1 || st.Refused[RefusedSessions] != 1 || st.Sessions != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestServerAbort: a session without its finish in time is aborted with
// an error line the client reads as a *ServerError, and closed.
func TestServerAbort(t *testing.T) {
	h := &toy{}
	srv, addr := serveToy(t, h, toyLimits())
	cl, _, err := dialToy(t, addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	line, err := bufio.NewReader(cl.Conn()).ReadBytes('\n')
	var el errorLine
	if err != nil || json.Unmarshal(line, &el) != nil || el.Cause != AbortedDuration {
		t.Fatalf("abort line %q: %v", line, err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for srv.Stats().Sessions != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev := strings.Join(h.events, ","); ev != "started,fail session_duration,close" || h.held != 0 {
		t.Errorf("events %q, held %d", ev, h.held)
	}
	if st := srv.Stats(); st.Aborted[AbortedDuration] != 1 {
		t.Errorf("stats %+v", st)
	}
}

// pipeConn is a connection whose input is a fixed byte string.
type pipeConn struct {
	net.Conn
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *pipeConn) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *pipeConn) Write(p []byte) (int, error) { return c.out.Write(p) }
func (c *pipeConn) Close() error                { return nil }
func (c *pipeConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(198, 18, 0, 2), Port: 40000}
}
func (c *pipeConn) SetDeadline(time.Time) error      { return nil }
func (c *pipeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pipeConn) SetWriteDeadline(time.Time) error { return nil }
func (c *pipeConn) LocalAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(198, 18, 0, 1), Port: 18515}
}
func (c *pipeConn) readLines() []string { return strings.SplitAfter(c.out.String(), "\n") }
func (c *pipeConn) firstLine() string   { return c.readLines()[0] }
func (c *pipeConn) CloseWrite() error   { return nil }

// FuzzServe: whatever a client sends, the server never panics, answers
// with a reply or an error line that has a cause, and holds nothing once
// the input ends.
func FuzzServe(f *testing.F) {
	for _, seed := range []string{
		`{"things":1}` + "\n" + `{"finish":true}` + "\n",
		`{"things":3}` + "\n" + `{"finish":false}` + "\n",
		`{"things":0}` + "\n",
		`{"things":2}`,
		"[]\n", "null\n", "\n", "",
		strings.Repeat("x", 2000) + "\n",
	} {
		f.Add([]byte(seed))
	}
	h := &toy{}
	srv := NewServer[toyRequest](h, Options{Limits: toyLimits()})
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &pipeConn{in: bytes.NewReader(in)}
		_ = srv.ServeConn(c)
		line := c.firstLine()
		var el errorLine
		if err := json.Unmarshal([]byte(line), &el); err != nil {
			t.Fatalf("first line %q: %v", line, err)
		}
		if el.Error != "" && el.Cause == "" {
			t.Fatalf("an error line without a cause: %q", line)
		}
		h.mu.Lock()
		held := h.held
		h.mu.Unlock()
		if st := srv.Stats(); st.Conns != 0 || st.Sessions != 0 || held != 0 {
			t.Fatalf("holds %+v, %d things after the input", st, held)
		}
	})
}
