package agent

import (
	"bufio"
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

// The side channel's server takes requests from anyone who reaches its TCP
// port, so it bounds what a client can make it hold: the bytes it reads
// before it parses, the QPs and registered memory of one session and of
// all of them, the connections and sessions at once, and how long each
// phase may last. Whatever it refuses, it answers with an error line that
// names the limit, the value asked and what is allowed, then closes.

// Defaults of ServerLimits.
const (
	// DefaultMaxQPs is per session. roceperf's -P and perftest's -q are a
	// handful of QPs in practice (fabricdemo opens at most 16 per sender),
	// and every QP is a flow the agent's one transmit loop serves: 64
	// leaves room for any experiment this lab runs and keeps one request
	// to a quarter of DefaultMaxTotalQPs.
	DefaultMaxQPs = 64
	// DefaultMaxSessions is four times the largest incast the lab runs
	// (8 senders, TestRoCEPPFCIncast).
	DefaultMaxSessions = 32
	// DefaultMaxTotalQPs bounds the QPs of all sessions: 4 sessions of
	// DefaultMaxQPs.
	DefaultMaxTotalQPs = 256
	// DefaultMaxBufferBytes bounds the registered memory of all sessions:
	// 1 GiB, 64 QPs of roceperf's largest message (-l 16M, 4 messages per
	// QP), and a small share of a lab machine.
	DefaultMaxBufferBytes = 1 << 30
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
	maxQPsPerSession   = 4096
	maxTotalQPs        = 1 << 16
	maxSessionsOrConns = 1 << 16
	// minBufferBytes is the least a session QP registers.
	minBufferBytes    = 64 << 10
	maxBufferBudget   = 1 << 40
	maxMessageBytes   = 1 << 30
	minRequestBytes   = 1 << 10
	maxRequestBytes   = 64 << 20
	maxRequestTimeout = time.Hour
	maxSessionTimeout = 30 * 24 * time.Hour
	// endpointJSONBytes is what the default request limit allows per QP:
	// an Endpoint's JSON, IPv6 address and all, is under 200 bytes.
	endpointJSONBytes = 256
	// finishLineBytes bounds the finish line ({"finish":true}).
	finishLineBytes = 4 << 10
	// A refused client may still be sending: the server reads and drops
	// up to lingerBytes for up to lingerTime after its error line, so the
	// close does not reset the connection before the line arrives.
	lingerBytes = 64 << 10
	lingerTime  = 100 * time.Millisecond
)

// SessionBufferBytes is the registered memory of a server QP for messages
// of messageBytes when ServerLimits.BufferBytes is 0: 4 messages, at
// least 64 KiB.
func SessionBufferBytes(messageBytes int) int {
	return max(4*messageBytes, minBufferBytes)
}

// ServerLimits bound what the side channel's clients may make a Server
// hold. Every field is optional: 0 means the default noted.
type ServerLimits struct {
	// MaxQPs is the most QPs one session may ask for (max_qps). 0 means
	// DefaultMaxQPs.
	MaxQPs int
	// MaxMessageBytes is the largest message a session may announce
	// (max_message_bytes). 0 means the largest whose QP buffer fits in
	// MaxBufferBytes (a quarter of it with the default BufferBytes; the
	// BufferBytes when that is set), at most 1 GiB.
	MaxMessageBytes int
	// BufferBytes is each session QP's registered memory. 0 means
	// SessionBufferBytes of the session's message size.
	BufferBytes int
	// MaxSessions is the most sessions at once (max_sessions). 0 means
	// DefaultMaxSessions.
	MaxSessions int
	// MaxTotalQPs is the most QPs of all sessions at once
	// (max_total_qps), at least MaxQPs. 0 means DefaultMaxTotalQPs.
	MaxTotalQPs int
	// MaxBufferBytes is the most registered memory of all sessions' QPs
	// at once (max_buffer_bytes): each QP's buffer times its QPs. 0 means
	// DefaultMaxBufferBytes.
	MaxBufferBytes int64
	// MaxConns is the most side-channel connections at once (max_conns),
	// those in a session and those still to send their request. 0 means
	// twice MaxSessions.
	MaxConns int
	// MaxRequestBytes is the longest request line, newline included
	// (max_request_bytes); the server stops reading a longer one. 0 means
	// 4 KiB plus 256 bytes per QP of MaxQPs (20 KiB by default).
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

// withDefaults fills every 0 with its default.
func (l ServerLimits) withDefaults() ServerLimits {
	if l.MaxQPs == 0 {
		l.MaxQPs = DefaultMaxQPs
	}
	if l.MaxSessions == 0 {
		l.MaxSessions = DefaultMaxSessions
	}
	if l.MaxTotalQPs == 0 {
		l.MaxTotalQPs = max(DefaultMaxTotalQPs, l.MaxQPs)
	}
	if l.MaxBufferBytes == 0 {
		l.MaxBufferBytes = DefaultMaxBufferBytes
	}
	if l.MaxMessageBytes == 0 {
		if l.BufferBytes > 0 {
			l.MaxMessageBytes = min(l.BufferBytes, maxMessageBytes)
		} else {
			l.MaxMessageBytes = int(min(l.MaxBufferBytes/4, maxMessageBytes))
		}
	}
	if l.MaxConns == 0 {
		l.MaxConns = 2 * l.MaxSessions
	}
	if l.MaxRequestBytes == 0 && l.MaxQPs > 0 {
		l.MaxRequestBytes = 4<<10 + l.MaxQPs*endpointJSONBytes
	}
	if l.RequestTimeout == 0 {
		l.RequestTimeout = DefaultRequestTimeout
	}
	if l.MaxSessionDuration == 0 {
		l.MaxSessionDuration = DefaultMaxSessionDuration
	}
	return l
}

// validate checks limits with their defaults filled, naming the first bad
// one.
func (l *ServerLimits) validate() error {
	switch {
	case l.MaxQPs < 1 || l.MaxQPs > maxQPsPerSession:
		return fmt.Errorf("agent: max_qps %d: must be 1..%d", l.MaxQPs, maxQPsPerSession)
	case l.MaxTotalQPs < l.MaxQPs || l.MaxTotalQPs > maxTotalQPs:
		return fmt.Errorf("agent: max_total_qps %d: must be max_qps (%d)..%d", l.MaxTotalQPs, l.MaxQPs, maxTotalQPs)
	case l.MaxSessions < 1 || l.MaxSessions > maxSessionsOrConns:
		return fmt.Errorf("agent: max_sessions %d: must be 1..%d", l.MaxSessions, maxSessionsOrConns)
	case l.MaxConns < 1 || l.MaxConns > maxSessionsOrConns:
		return fmt.Errorf("agent: max_conns %d: must be 1..%d", l.MaxConns, maxSessionsOrConns)
	case l.MaxBufferBytes < minBufferBytes || l.MaxBufferBytes > maxBufferBudget:
		return fmt.Errorf("agent: max_buffer_bytes %d: must be %d..%d", l.MaxBufferBytes, minBufferBytes, int64(maxBufferBudget))
	case l.BufferBytes < 0 || int64(l.BufferBytes) > min(l.MaxBufferBytes, 1<<31):
		return fmt.Errorf("agent: buffer_bytes %d: must be 0 (4 messages) or 1..%d (max_buffer_bytes, at most 2 GiB)", l.BufferBytes, min(l.MaxBufferBytes, 1<<31))
	case l.MaxMessageBytes < 1 || l.MaxMessageBytes > maxMessageBytes:
		return fmt.Errorf("agent: max_message_bytes %d: must be 1..%d", l.MaxMessageBytes, maxMessageBytes)
	case l.BufferBytes > 0 && l.MaxMessageBytes > l.BufferBytes:
		return fmt.Errorf("agent: max_message_bytes %d: must fit in buffer_bytes (%d)", l.MaxMessageBytes, l.BufferBytes)
	case int64(l.bufferFor(l.MaxMessageBytes)) > l.MaxBufferBytes:
		return fmt.Errorf("agent: max_message_bytes %d: its QP buffer (%d bytes, 4 messages) exceeds max_buffer_bytes (%d)",
			l.MaxMessageBytes, l.bufferFor(l.MaxMessageBytes), l.MaxBufferBytes)
	case l.MaxRequestBytes < minRequestBytes || l.MaxRequestBytes > maxRequestBytes:
		return fmt.Errorf("agent: max_request_bytes %d: must be %d..%d", l.MaxRequestBytes, minRequestBytes, maxRequestBytes)
	case l.RequestTimeout < time.Millisecond || l.RequestTimeout > maxRequestTimeout:
		return fmt.Errorf("agent: request_timeout %v: must be 1ms..%v", l.RequestTimeout, maxRequestTimeout)
	case l.MaxSessionDuration < time.Millisecond || l.MaxSessionDuration > maxSessionTimeout:
		return fmt.Errorf("agent: max_session_duration %v: must be 1ms..%v", l.MaxSessionDuration, maxSessionTimeout)
	}
	return nil
}

// bufferFor is a session QP's registered memory for messages of msg bytes.
func (l *ServerLimits) bufferFor(msg int) int {
	if l.BufferBytes > 0 {
		return l.BufferBytes
	}
	return SessionBufferBytes(msg)
}

// ServerOptions configure a Server: its limits and what it tells its
// owner.
type ServerOptions struct {
	ServerLimits
	// OnSession, if set, is called with each session's QPs once they are
	// connected (the server tool prints them).
	OnSession func(remote net.Addr, req SessionRequest, qps []*QP)
	// OnFinish, if set, is called with each session's result.
	OnFinish func(remote net.Addr, res SessionResult)
	// OnRefuse, if set, is called for each connection turned away before
	// a session, with the cause (a Refused* constant) and the error line's
	// text.
	OnRefuse func(remote net.Addr, cause, msg string)
}

// Why a connection got no session (ServerStats.Refused).
const (
	RefusedConns        = "conns"           // max_conns
	RefusedNoRequest    = "no_request"      // closed before a request line
	RefusedTimeout      = "request_timeout" // no request line in time
	RefusedRequestBytes = "request_bytes"   // max_request_bytes
	RefusedMalformed    = "malformed"       // not one JSON request on one line
	RefusedVersion      = "version"
	RefusedQPs          = "qps" // max_qps
	RefusedMessageBytes = "message_bytes"
	RefusedOp           = "op"
	RefusedQPConfig     = "qp_config" // mtu, dscp, cnp_dscp, min_time_between_cnps
	RefusedEndpoint     = "endpoint"  // a client QP the server's cannot connect to
	RefusedSessions     = "sessions"  // max_sessions
	RefusedTotalQPs     = "total_qps" // max_total_qps
	RefusedBufferBytes  = "buffer_bytes"
	RefusedAgent        = "agent" // the agent could not create a QP
)

// Why the server ended a session before its finish (ServerStats.Aborted).
const (
	AbortedDuration = "session_duration" // max_session_duration
	AbortedFinish   = "finish"           // a line other than the finish
)

// ServerStats is what a Server holds now and what it has turned away.
type ServerStats struct {
	Conns       int    `json:"conns"`        // side-channel connections open
	Sessions    int    `json:"sessions"`     // sessions in progress
	QPs         int    `json:"qps"`          // their QPs
	BufferBytes int64  `json:"buffer_bytes"` // their registered memory
	Accepted    uint64 `json:"accepted"`     // sessions set up since the start
	// Refused counts connections that got no session, by cause
	// (Refused*); Aborted sessions the server ended, by cause (Aborted*).
	Refused map[string]uint64 `json:"refused"`
	Aborted map[string]uint64 `json:"aborted"`
}

// Server serves side-channel sessions on one agent, within its limits.
// The totals (sessions, QPs, registered memory) are this Server's: serve
// all of an agent's listeners from one Server to bound the agent.
type Server struct {
	a    *Agent
	opts ServerOptions // limits with defaults filled

	mu struct {
		sync.Mutex
		stats ServerStats
	}
}

// NewServer checks opts and returns a server for this agent's sessions.
func (a *Agent) NewServer(opts ServerOptions) (*Server, error) {
	opts.ServerLimits = opts.ServerLimits.withDefaults()
	if err := opts.ServerLimits.validate(); err != nil {
		return nil, err
	}
	s := &Server{a: a, opts: opts}
	s.mu.stats.Refused = map[string]uint64{}
	s.mu.stats.Aborted = map[string]uint64{}
	return s, nil
}

// Limits returns the server's limits, defaults filled.
func (s *Server) Limits() ServerLimits { return s.opts.ServerLimits }

// Stats returns what the server holds and has refused.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.stats
	st.Refused = maps.Clone(st.Refused)
	st.Aborted = maps.Clone(st.Aborted)
	return st
}

// Serve accepts side-channel sessions on ln until it is closed; each
// session's QPs live on this agent. Closing ln also ends the sessions in
// progress (their side channels are closed, their QPs destroyed). The
// sessions of one Serve share one budget (Agent.NewServer).
func (a *Agent) Serve(ln net.Listener, opts ServerOptions) error {
	s, err := a.NewServer(opts)
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// ServeConn runs one session on an accepted connection and closes it,
// with a budget of its own (a Server's ServeConn shares the server's).
func (a *Agent) ServeConn(c net.Conn, opts ServerOptions) error {
	s, err := a.NewServer(opts)
	if err != nil {
		_ = c.Close()
		return err
	}
	return s.ServeConn(c)
}

// Serve accepts side-channel sessions on ln until it is closed. Closing
// ln ends the sessions in progress.
func (s *Server) Serve(ln net.Listener) error {
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
			return fmt.Errorf("agent: accept: %w", err)
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
			if err := s.serve(c); err != nil {
				level := slog.LevelInfo
				if errors.As(err, new(*refusal)) {
					level = slog.LevelDebug // OnRefuse and Stats have them
				}
				s.a.log.Log(context.Background(), level, "session ended", "remote", c.RemoteAddr(), "err", err)
			}
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}()
	}
}

// ServeConn runs one session on an accepted connection and closes it.
func (s *Server) ServeConn(c net.Conn) error {
	if rf := s.acquireConn(); rf != nil {
		s.refuse(c, nil, rf, lingerTime)
		_ = c.Close()
		return rf
	}
	defer s.releaseConn()
	return s.serve(c)
}

// refusal is why a connection gets no session: its cause and the error
// line's text.
type refusal struct{ cause, msg string }

func (r *refusal) Error() string { return "agent: refused: " + r.msg }

func refuse(cause, format string, args ...any) *refusal {
	return &refusal{cause: cause, msg: fmt.Sprintf(format, args...)}
}

// serve runs one session on c (its connection slot taken) and closes c.
func (s *Server) serve(c net.Conn) error {
	defer c.Close()
	lim := &s.opts.ServerLimits
	r := bufio.NewReaderSize(c, readBufferBytes)
	_ = c.SetReadDeadline(time.Now().Add(lim.RequestTimeout))
	req, cfg, rf := s.readRequest(c, r)
	if rf != nil {
		s.refuse(c, r, rf, lingerTime)
		return rf
	}
	n, bufBytes := len(req.QPs), lim.bufferFor(req.MessageBytes)
	if rf := s.reserve(n, bufBytes); rf != nil {
		s.refuse(c, r, rf, lingerTime)
		return rf
	}
	defer s.release(n, bufBytes)
	cfg.BufferBytes = bufBytes
	qps, err := s.a.createSessionQPs(c, req, cfg)
	if err != nil {
		rf := refuse(RefusedAgent, "cannot create the session's QPs: %v", err)
		s.refuse(c, r, rf, lingerTime)
		return rf
	}
	defer func() {
		for _, qp := range qps {
			qp.Destroy()
		}
	}()
	start := time.Now()
	eps := make([]Endpoint, len(qps))
	for i, qp := range qps {
		eps[i] = qp.Endpoint()
		eps[i].Addr = s.a.localAddr(c)
	}
	if err := s.writeLine(c, sessionReply{QPs: eps}); err != nil {
		return err
	}
	s.mu.Lock()
	s.mu.stats.Accepted++
	s.mu.Unlock()
	if s.opts.OnSession != nil {
		s.opts.OnSession(c.RemoteAddr(), *req, qps)
	}
	// The session lasts as long as its transfer: wait for the finish; a
	// closed connection ends the session too.
	_ = c.SetReadDeadline(start.Add(lim.MaxSessionDuration))
	if cause, msg, err := readFinish(r); err != nil {
		if cause == "" {
			return fmt.Errorf("agent: session from %v: %w", c.RemoteAddr(), err)
		}
		if cause == AbortedDuration {
			msg = fmt.Sprintf("session over %v without its finish line (max_session_duration)", lim.MaxSessionDuration)
		}
		s.count(func(st *ServerStats) { st.Aborted[cause]++ })
		_ = s.writeLine(c, SessionResult{Error: msg, Cause: cause})
		linger(c, r, lingerTime)
		return fmt.Errorf("agent: session from %v: %s", c.RemoteAddr(), msg)
	}
	res := SessionResult{QPs: make([]QPReport, len(qps))}
	for i, qp := range qps {
		res.QPs[i] = QPReport{QPN: qp.QPN(), Counters: qp.Counters()}
	}
	if s.opts.OnFinish != nil {
		s.opts.OnFinish(c.RemoteAddr(), res)
	}
	return s.writeLine(c, res)
}

// readRequest reads the request line and checks it against the limits,
// before anything is allocated for the session.
func (s *Server) readRequest(c net.Conn, r *bufio.Reader) (*SessionRequest, QPConfig, *refusal) {
	lim := &s.opts.ServerLimits
	var cfg QPConfig
	line, err := readLine(r, lim.MaxRequestBytes)
	switch {
	case errors.Is(err, errLineTooLong):
		return nil, cfg, refuse(RefusedRequestBytes, "request line over %d bytes: this server allows 1..%d (max_request_bytes)", lim.MaxRequestBytes, lim.MaxRequestBytes)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, cfg, refuse(RefusedTimeout, "no request line within %v (request_timeout)", lim.RequestTimeout)
	case errors.Is(err, errNoNewline):
		return nil, cfg, refuse(RefusedMalformed, "request: %v: a request is one JSON object on one line", err)
	case err != nil:
		return nil, cfg, refuse(RefusedNoRequest, "no request line: %v", err)
	}
	req := new(SessionRequest)
	if err := json.Unmarshal(line, req); err != nil {
		return nil, cfg, refuse(RefusedMalformed, "request: %v: a request is one JSON object on one line", err)
	}
	cfg, rf := s.check(c, req)
	return req, cfg, rf
}

// check applies the per-session rules to a request: the QPs it may have
// and the QP configuration it asks for, including its endpoints (what
// Connect will require), and returns the server QPs' configuration.
func (s *Server) check(c net.Conn, req *SessionRequest) (QPConfig, *refusal) {
	lim := &s.opts.ServerLimits
	cfg := DefaultQPConfig()
	switch {
	case req.Version != ProtocolVersion:
		return cfg, refuse(RefusedVersion, "version %d: this server speaks %d", req.Version, ProtocolVersion)
	case len(req.QPs) < 1 || len(req.QPs) > lim.MaxQPs:
		return cfg, refuse(RefusedQPs, "qps %d: this server allows 1..%d per session (max_qps)", len(req.QPs), lim.MaxQPs)
	case req.MessageBytes < 1 || req.MessageBytes > lim.MaxMessageBytes:
		return cfg, refuse(RefusedMessageBytes, "message_bytes %d: this server allows 1..%d (max_message_bytes)", req.MessageBytes, lim.MaxMessageBytes)
	case req.Op != "" && req.Op != OpWrite.String() && req.Op != OpSend.String():
		return cfg, refuse(RefusedOp, "op %q: this server allows write or send", clip(req.Op, 32))
	}
	cfg.MTU = req.MTU
	cfg.DSCP = req.DSCP
	cfg.NP = req.NP
	cfg.CNPPeriod = req.CNPPeriod
	cfg.CNPDSCP = req.CNPDSCP
	cfg.VerifyIncoming = req.Verify
	cfg.BufferBytes = lim.bufferFor(req.MessageBytes)
	if err := cfg.Validate(); err != nil {
		return cfg, refuse(RefusedQPConfig, "%s", detail(err))
	}
	local := s.a.localAddr(c)
	for i, ep := range req.QPs {
		ep.Addr = peerAddr(c, ep.Addr)
		if err := checkPeer(local, cfg.MTU, ep); err != nil {
			return cfg, refuse(RefusedEndpoint, "qps[%d]: %v", i, err)
		}
	}
	return cfg, nil
}

// reserve takes a session's share of the totals, or says which is short.
func (s *Server) reserve(n, bufBytes int) *refusal {
	lim := &s.opts.ServerLimits
	mem := int64(n) * int64(bufBytes)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.mu.stats
	var rf *refusal
	switch {
	case st.Sessions+1 > lim.MaxSessions:
		rf = refuse(RefusedSessions, "sessions %d: this server allows 1..%d at once (max_sessions)", st.Sessions+1, lim.MaxSessions)
	case st.QPs+n > lim.MaxTotalQPs:
		rf = refuse(RefusedTotalQPs, "qps %d: this server has %d of its %d free (max_total_qps)", n, lim.MaxTotalQPs-st.QPs, lim.MaxTotalQPs)
	case st.BufferBytes+mem > lim.MaxBufferBytes:
		rf = refuse(RefusedBufferBytes, "registered memory %d bytes (%d QPs × %d): this server has %d of its %d free (max_buffer_bytes)",
			mem, n, bufBytes, lim.MaxBufferBytes-st.BufferBytes, lim.MaxBufferBytes)
	default:
		st.Sessions++
		st.QPs += n
		st.BufferBytes += mem
	}
	return rf
}

// release returns what reserve took.
func (s *Server) release(n, bufBytes int) {
	s.count(func(st *ServerStats) {
		st.Sessions--
		st.QPs -= n
		st.BufferBytes -= int64(n) * int64(bufBytes)
	})
}

func (s *Server) acquireConn() *refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.mu.stats
	if st.Conns+1 > s.opts.MaxConns {
		return refuse(RefusedConns, "connections %d: this server allows 1..%d at once (max_conns)", st.Conns+1, s.opts.MaxConns)
	}
	st.Conns++
	return nil
}

func (s *Server) releaseConn() { s.count(func(st *ServerStats) { st.Conns-- }) }

func (s *Server) count(f func(*ServerStats)) {
	s.mu.Lock()
	f(&s.mu.stats)
	s.mu.Unlock()
}

// refuse counts rf, tells the owner and the client, and lets the client
// read the line before the connection closes (linger). r is nil when
// nothing was read.
func (s *Server) refuse(c net.Conn, r *bufio.Reader, rf *refusal, wait time.Duration) {
	s.count(func(st *ServerStats) { st.Refused[rf.cause]++ })
	if s.opts.OnRefuse != nil {
		s.opts.OnRefuse(c.RemoteAddr(), rf.cause, rf.msg)
	}
	if s.writeLine(c, sessionReply{Error: rf.msg, Cause: rf.cause}) != nil {
		return
	}
	if rf.cause == RefusedNoRequest {
		return // nothing more will come
	}
	var src io.Reader = c
	if r != nil {
		src = r
	}
	linger(c, src, wait)
}

// linger closes c's sending side, then reads and drops what the client
// still sends, at most lingerBytes for at most wait:
// closing with unread bytes resets the connection, and the reset drops
// what is still queued to send, the error line included.
func linger(c net.Conn, r io.Reader, wait time.Duration) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, _ = io.CopyN(io.Discard, r, lingerBytes)
}

// writeLine sends one JSON line within the request timeout.
func (s *Server) writeLine(c net.Conn, v any) error {
	_ = c.SetWriteDeadline(time.Now().Add(s.opts.RequestTimeout))
	return json.NewEncoder(c).Encode(v)
}

// readFinish reads the finish line. A cause says the server should answer
// (the session ran out of time, or the line is not a finish); without
// one, the connection is gone.
func readFinish(r *bufio.Reader) (cause, msg string, err error) {
	line, err := readLine(r, finishLineBytes)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return AbortedDuration, "", err
	case errors.Is(err, errLineTooLong):
		return AbortedFinish, fmt.Sprintf("finish line over %d bytes: expected {\"finish\":true}", finishLineBytes), err
	case err != nil:
		return "", "", err
	}
	var fin finishMsg
	if err := json.Unmarshal(line, &fin); err != nil || !fin.Finish {
		msg := "finish: expected {\"finish\":true}"
		if err != nil {
			msg = fmt.Sprintf("finish: %v: expected {\"finish\":true}", err)
		}
		return AbortedFinish, msg, errors.New(msg)
	}
	return "", "", nil
}

// createSessionQPs creates and connects the server's side of a session.
func (a *Agent) createSessionQPs(c net.Conn, req *SessionRequest, cfg QPConfig) ([]*QP, error) {
	local := a.localAddr(c)
	var qps []*QP
	fail := func(err error) ([]*QP, error) {
		for _, qp := range qps {
			qp.Destroy()
		}
		return nil, err
	}
	for _, ep := range req.QPs {
		qp, err := a.CreateQP(cfg)
		if err != nil {
			return fail(err)
		}
		qps = append(qps, qp)
		ep.Addr = peerAddr(c, ep.Addr)
		if err := qp.Connect(local, ep); err != nil {
			return fail(err)
		}
	}
	return qps, nil
}

// detail is err as a client reads it in a refusal: without this
// package's name where the error has a Detail (ConfigError,
// dcqcn.KnobError).
func detail(err error) string {
	if d, ok := err.(interface{ Detail() string }); ok {
		return d.Detail()
	}
	return err.Error()
}

// clip shortens a client's string for an error line.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
