package sidechan

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"sync"
	"time"
)

// The server takes requests from anyone who reaches its TCP port, so it
// bounds what a client can make it hold: the bytes it reads before it
// parses, the connections and sessions at once, how long each phase may
// last, and whatever the transport holds per session (its Handler's
// limits). Whatever it refuses, it answers with an error line that names
// the limit, the value asked and what is allowed, then closes.

// Why a connection got no session (Stats.Refused): the causes every
// transport shares. A Handler adds its own.
const (
	RefusedConns        = "conns"           // max_conns
	RefusedNoRequest    = "no_request"      // closed before a request line
	RefusedTimeout      = "request_timeout" // no request line in time
	RefusedRequestBytes = "request_bytes"   // max_request_bytes
	RefusedMalformed    = "malformed"       // not one JSON request on one line
	RefusedSessions     = "sessions"        // max_sessions
)

// Why the server ended a session before its finish (Stats.Aborted).
const (
	AbortedDuration = "session_duration" // max_session_duration
	AbortedFinish   = "finish"           // a line other than the finish
)

// A refused client may still be sending: the server reads and drops up
// to lingerBytes for up to lingerTime after its error line, so the close
// does not reset the connection before the line arrives.
const (
	lingerBytes = 64 << 10
	lingerTime  = 100 * time.Millisecond
)

// Limits bound the connections and sessions of a Server, whatever its
// transport. Every field is optional: 0 means the default noted. A
// transport's limits embed them (agent.ServerLimits, perf.UETLimits).
type Limits struct {
	// MaxSessions is the most sessions at once (max_sessions). 0 means
	// DefaultMaxSessions.
	MaxSessions int
	// MaxConns is the most side-channel connections at once (max_conns),
	// those in a session and those still to send their request. 0 means
	// twice MaxSessions.
	MaxConns int
	// MaxRequestBytes is the longest request line, newline included
	// (max_request_bytes); the server stops reading a longer one. 0 means
	// the transport's default, for its largest request.
	MaxRequestBytes int
	// RequestTimeout is how long a new connection may take to send its
	// request line (request_timeout), and how long the server waits to
	// write each reply. 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxSessionDuration is how long a session may wait for its finish
	// line (max_session_duration): a session lasts as long as its
	// transfer, so this only catches a client that never ends it. 0 means
	// DefaultMaxSessionDuration.
	MaxSessionDuration time.Duration
}

// Defaults of Limits.
const (
	// DefaultMaxSessions is four times the largest incast the lab runs
	// (8 senders, TestRoCEPPFCIncast).
	DefaultMaxSessions = 32
	// DefaultRequestTimeout bounds the wait for a request line, and each
	// reply's write.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultMaxSessionDuration is longer than roceperf's longest run
	// (-t 24 h after -O 60 s): a session is cut only when its client has
	// clearly forgotten it.
	DefaultMaxSessionDuration = 25 * time.Hour
)

// Ranges the limits are checked against.
const (
	maxSessionsOrConns = 1 << 16
	minRequestBytes    = 1 << 10
	maxRequestBytes    = 64 << 20
	maxRequestTimeout  = time.Hour
	maxSessionTimeout  = 30 * 24 * time.Hour
)

// WithDefaults fills every 0 but MaxRequestBytes (the transport's) with
// its default.
func (l Limits) WithDefaults() Limits {
	l.MaxSessions = cmp.Or(l.MaxSessions, DefaultMaxSessions)
	l.MaxConns = cmp.Or(l.MaxConns, 2*l.MaxSessions)
	l.RequestTimeout = cmp.Or(l.RequestTimeout, DefaultRequestTimeout)
	l.MaxSessionDuration = cmp.Or(l.MaxSessionDuration, DefaultMaxSessionDuration)
	return l
}

// Validate checks limits with their defaults filled, naming the first
// bad one by its configuration key.
func (l *Limits) Validate() error {
	switch {
	case l.MaxSessions < 1 || l.MaxSessions > maxSessionsOrConns:
		return fmt.Errorf("max_sessions %d: must be 1..%d", l.MaxSessions, maxSessionsOrConns)
	case l.MaxConns < 1 || l.MaxConns > maxSessionsOrConns:
		return fmt.Errorf("max_conns %d: must be 1..%d", l.MaxConns, maxSessionsOrConns)
	case l.MaxRequestBytes < minRequestBytes || l.MaxRequestBytes > maxRequestBytes:
		return fmt.Errorf("max_request_bytes %d: must be %d..%d", l.MaxRequestBytes, minRequestBytes, maxRequestBytes)
	case l.RequestTimeout < time.Millisecond || l.RequestTimeout > maxRequestTimeout:
		return fmt.Errorf("request_timeout %v: must be 1ms..%v", l.RequestTimeout, maxRequestTimeout)
	case l.MaxSessionDuration < time.Millisecond || l.MaxSessionDuration > maxSessionTimeout:
		return fmt.Errorf("max_session_duration %v: must be 1ms..%v", l.MaxSessionDuration, maxSessionTimeout)
	}
	return nil
}

// Stats is what a Server holds now and what it has turned away.
type Stats struct {
	Conns    int    `json:"conns"`    // side-channel connections open
	Sessions int    `json:"sessions"` // sessions in progress
	Accepted uint64 `json:"accepted"` // sessions set up since the start
	// Refused counts connections that got no session, by cause (Refused*
	// and the transport's); Aborted sessions the server ended, by cause
	// (Aborted*).
	Refused map[string]uint64 `json:"refused"`
	Aborted map[string]uint64 `json:"aborted"`
}

// Refusal is why a connection gets no session: its cause (a Refused*
// constant or the transport's) and the error line's text.
type Refusal struct{ Cause, Msg string }

func (r *Refusal) Error() string { return "refused: " + r.Msg }

// Refuse makes a refusal.
func Refuse(cause, format string, args ...any) *Refusal {
	return &Refusal{Cause: cause, Msg: fmt.Sprintf(format, args...)}
}

// Handler is one transport's side of a server: it checks a request and
// sets a session up. R is the transport's request line.
type Handler[R any] interface {
	// Check applies the per-session rules to a request before anything
	// is held for it.
	Check(c net.Conn, req *R) *Refusal
	// Open holds what the session needs and sets it up; the server has
	// taken the session's slot.
	Open(c net.Conn, req *R) (Session, *Refusal)
}

// Session is one accepted session, as its transport runs it.
type Session interface {
	// Reply is the line that accepts the session.
	Reply() any
	// Started is called once the reply is sent.
	Started()
	// Finish is called on the client's finish line; it returns the
	// result line.
	Finish() any
	// Fail is called when the session ends without its finish: the
	// server aborted it (cause and msg, the error line sent), or the
	// client went away (cause "").
	Fail(cause, msg string)
	// Close frees what the session holds. It is called once, before the
	// result is sent (so the client's next session finds the server's
	// budget free), or when the session ends any other way.
	Close()
}

// Options configure a Server.
type Options struct {
	Limits
	// Logger, if set, logs each session that ended with an error.
	Logger *slog.Logger
	// OnRefuse, if set, is called for each connection turned away before
	// a session, with the cause and the error line's text.
	OnRefuse func(remote net.Addr, cause, msg string)
}

// Server serves one transport's sessions within its limits. The totals
// (connections, sessions) are this Server's: serve all of a host's
// listeners of a transport from one Server to bound them together.
type Server[R any] struct {
	h    Handler[R]
	opts Options

	mu struct {
		sync.Mutex
		stats Stats
	}
}

// NewServer returns a server of h's sessions.
func NewServer[R any](h Handler[R], opts Options) *Server[R] {
	s := &Server[R]{h: h, opts: opts}
	s.mu.stats.Refused = map[string]uint64{}
	s.mu.stats.Aborted = map[string]uint64{}
	return s
}

// Limits returns the server's limits.
func (s *Server[R]) Limits() Limits { return s.opts.Limits }

// Stats returns what the server holds and has refused.
func (s *Server[R]) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.stats
	st.Refused = maps.Clone(st.Refused)
	st.Aborted = maps.Clone(st.Aborted)
	return st
}

// Serve accepts sessions on ln until it is closed. Closing ln ends the
// sessions in progress (their connections are closed).
func (s *Server[R]) Serve(ln net.Listener) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	defer func() {
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		// Over max_conns: answered here, so a flood of connections costs
		// no goroutine each, dropping only what has arrived.
		if rf := s.acquireConn(); rf != nil {
			s.refuse(c, nil, rf, time.Millisecond)
			_ = c.Close()
			continue
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.releaseConn()
			if err := s.serve(c); err != nil && s.opts.Logger != nil {
				level := slog.LevelInfo
				if errors.As(err, new(*Refusal)) {
					level = slog.LevelDebug // OnRefuse and Stats have them
				}
				s.opts.Logger.Log(context.Background(), level, "session ended", "remote", c.RemoteAddr(), "err", err)
			}
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}()
	}
}

// ServeConn runs one session on an accepted connection and closes it.
func (s *Server[R]) ServeConn(c net.Conn) error {
	if rf := s.acquireConn(); rf != nil {
		s.refuse(c, nil, rf, lingerTime)
		_ = c.Close()
		return rf
	}
	defer s.releaseConn()
	return s.serve(c)
}

// serve runs one session on c (its connection slot taken) and closes c.
func (s *Server[R]) serve(c net.Conn) error {
	defer c.Close()
	lim := &s.opts.Limits
	r := bufio.NewReaderSize(c, readBufferBytes)
	_ = c.SetReadDeadline(time.Now().Add(lim.RequestTimeout))
	req, rf := s.readRequest(c, r)
	if rf == nil {
		rf = s.acquireSession()
	}
	if rf != nil {
		s.refuse(c, r, rf, lingerTime)
		return rf
	}
	sess, rf := s.h.Open(c, req)
	if rf != nil {
		s.releaseSession()
		s.refuse(c, r, rf, lingerTime)
		return rf
	}
	closeSession := sync.OnceFunc(func() {
		sess.Close()
		s.releaseSession()
	})
	defer closeSession()
	start := time.Now()
	if err := writeJSON(c, lim.RequestTimeout, sess.Reply()); err != nil {
		return err
	}
	s.count(func(st *Stats) { st.Accepted++ })
	sess.Started()
	// The session lasts as long as its transfer: wait for the finish; a
	// closed connection ends the session too.
	_ = c.SetReadDeadline(start.Add(lim.MaxSessionDuration))
	if cause, msg, err := s.readFinish(r); err != nil {
		if cause == "" {
			sess.Fail("", "")
			return fmt.Errorf("session from %v: %w", c.RemoteAddr(), err)
		}
		s.count(func(st *Stats) { st.Aborted[cause]++ })
		sess.Fail(cause, msg)
		_ = writeJSON(c, lim.RequestTimeout, errorLine{Error: msg, Cause: cause})
		linger(c, r, lingerTime)
		return fmt.Errorf("session from %v: %s", c.RemoteAddr(), msg)
	}
	res := sess.Finish()
	closeSession()
	return writeJSON(c, lim.RequestTimeout, res)
}

// readRequest reads the request line and checks it, before anything is
// held for the session.
func (s *Server[R]) readRequest(c net.Conn, r *bufio.Reader) (*R, *Refusal) {
	lim := &s.opts.Limits
	line, err := readLine(r, lim.MaxRequestBytes)
	switch {
	case errors.Is(err, errLineTooLong):
		return nil, Refuse(RefusedRequestBytes, "request line over %d bytes: this server allows 1..%d (max_request_bytes)", lim.MaxRequestBytes, lim.MaxRequestBytes)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, Refuse(RefusedTimeout, "no request line within %v (request_timeout)", lim.RequestTimeout)
	case errors.Is(err, errNoNewline):
		return nil, Refuse(RefusedMalformed, "request: %v: a request is one JSON object on one line", err)
	case err != nil:
		return nil, Refuse(RefusedNoRequest, "no request line: %v", err)
	}
	req := new(R)
	if err := json.Unmarshal(line, req); err != nil {
		return nil, Refuse(RefusedMalformed, "request: %v: a request is one JSON object on one line", err)
	}
	if rf := s.h.Check(c, req); rf != nil {
		return nil, rf
	}
	return req, nil
}

// readFinish reads the finish line. A cause says the server should answer
// (the session ran out of time, or the line is not a finish); without
// one, the connection is gone.
func (s *Server[R]) readFinish(r *bufio.Reader) (cause, msg string, err error) {
	line, err := readLine(r, finishLineBytes)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return AbortedDuration, fmt.Sprintf("session over %v without its finish line (max_session_duration)", s.opts.MaxSessionDuration), err
	case errors.Is(err, errLineTooLong):
		return AbortedFinish, fmt.Sprintf("finish line over %d bytes: expected {\"finish\":true}", finishLineBytes), err
	case err != nil:
		return "", "", err
	}
	var fin finishLine
	if err := json.Unmarshal(line, &fin); err != nil || !fin.Finish {
		msg := "finish: expected {\"finish\":true}"
		if err != nil {
			msg = fmt.Sprintf("finish: %v: expected {\"finish\":true}", err)
		}
		return AbortedFinish, msg, errors.New(msg)
	}
	return "", "", nil
}

func (s *Server[R]) acquireConn() *Refusal {
	return s.acquire(func(st *Stats) *int { return &st.Conns }, s.opts.MaxConns, RefusedConns, "connections", "max_conns")
}

func (s *Server[R]) releaseConn() { s.count(func(st *Stats) { st.Conns-- }) }

func (s *Server[R]) acquireSession() *Refusal {
	return s.acquire(func(st *Stats) *int { return &st.Sessions }, s.opts.MaxSessions, RefusedSessions, "sessions", "max_sessions")
}

// acquire takes one more of what held counts, or refuses with cause
// when that would pass most: the limit of that name (what, at once).
func (s *Server[R]) acquire(held func(*Stats) *int, most int, cause, what, name string) *Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := held(&s.mu.stats)
	if *n+1 > most {
		return Refuse(cause, "%s %d: this server allows 1..%d at once (%s)", what, *n+1, most, name)
	}
	*n++
	return nil
}

func (s *Server[R]) releaseSession() { s.count(func(st *Stats) { st.Sessions-- }) }

func (s *Server[R]) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.mu.stats)
	s.mu.Unlock()
}

// refuse counts rf, tells the owner and the client, and lets the client
// read the line before the connection closes (linger). r is nil when
// nothing was read.
func (s *Server[R]) refuse(c net.Conn, r *bufio.Reader, rf *Refusal, wait time.Duration) {
	s.count(func(st *Stats) { st.Refused[rf.Cause]++ })
	if s.opts.OnRefuse != nil {
		s.opts.OnRefuse(c.RemoteAddr(), rf.Cause, rf.Msg)
	}
	if writeJSON(c, s.opts.RequestTimeout, errorLine{Error: rf.Msg, Cause: rf.Cause}) != nil {
		return
	}
	if rf.Cause == RefusedNoRequest {
		return // nothing more will come
	}
	var src io.Reader = c
	if r != nil {
		src = r
	}
	linger(c, src, wait)
}

// linger closes c's sending side, then reads and drops what the client
// still sends, at most lingerBytes for at most wait: closing with unread
// bytes resets the connection, and the reset drops what is still queued
// to send, the error line included.
func linger(c net.Conn, r io.Reader, wait time.Duration) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, _ = io.CopyN(io.Discard, r, lingerBytes)
}

// Clip shortens a client's string for an error line.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
