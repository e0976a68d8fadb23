package agent

import (
	"cmp"
	"fmt"
	"github.com/fabriclab/fabriclab/host/roce"
	"net"
	"net/netip"
	"sync"

	"github.com/fabriclab/fabriclab/host/sidechan"
)

// The side channel's server (host/sidechan) takes requests from anyone
// who reaches its TCP port, so it bounds what a client can make it hold:
// the bytes it reads before it parses, the connections and sessions at
// once, how long each phase may last and, here, the QPs and registered
// memory of one session and of all of them. Whatever it refuses, it
// answers with an error line that names the limit, the value asked and
// what is allowed, then closes.

// Defaults of ServerLimits.
const (
	// DefaultMaxQPs is per session. roceperf's -P and perftest's -q are a
	// handful of QPs in practice, and every QP is a flow the agent's one
	// transmit loop serves: 64 leaves room for any experiment this lab
	// runs and keeps one request to a quarter of DefaultMaxTotalQPs.
	DefaultMaxQPs = 64
	// DefaultMaxTotalQPs bounds the QPs of all sessions: 4 sessions of
	// DefaultMaxQPs.
	DefaultMaxTotalQPs = 256
	// DefaultMaxBufferBytes bounds the registered memory of all sessions:
	// 1 GiB, 64 QPs of roceperf's largest message (-l 16M, 4 messages per
	// QP), and a small share of a lab machine.
	DefaultMaxBufferBytes = 1 << 30
)

// Ranges the limits are checked against.
const (
	maxQPsPerSession = 16384 // host/perf.MaxQPs: what one client may open
	maxTotalQPs      = 1 << 16
	// minBufferBytes is the least a session QP registers.
	minBufferBytes  = 64 << 10
	maxBufferBudget = 1 << 40
	maxMessageBytes = 1 << 30
	// endpointJSONBytes is what the default request limit allows per QP:
	// an Endpoint's JSON, IPv6 address and all, is under 200 bytes.
	endpointJSONBytes = 256
)

// SessionBufferBytes is the registered memory of a server QP for messages
// of messageBytes when ServerLimits.BufferBytes is 0: 4 messages, at
// least 64 KiB.
func SessionBufferBytes(messageBytes int) int {
	return max(4*messageBytes, minBufferBytes)
}

// ServerLimits bound what the side channel's clients may make a Server
// hold: the side channel's limits and RoCEv2's. Every field is optional:
// 0 means the default noted.
type ServerLimits struct {
	// The side channel's: sessions, connections, the request line and the
	// timeouts. MaxRequestBytes 0 means 4 KiB plus 256 bytes per QP of
	// MaxQPs (20 KiB by default).
	sidechan.Limits
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
	// MaxTotalQPs is the most QPs of all sessions at once
	// (max_total_qps), at least MaxQPs. 0 means DefaultMaxTotalQPs.
	MaxTotalQPs int
	// MaxBufferBytes is the most registered memory of all sessions' QPs
	// at once (max_buffer_bytes): each QP's buffer times its QPs. 0 means
	// DefaultMaxBufferBytes.
	MaxBufferBytes int64
}

// withDefaults fills every 0 with its default.
func (l ServerLimits) withDefaults() ServerLimits {
	l.MaxQPs = cmp.Or(l.MaxQPs, DefaultMaxQPs)
	l.MaxTotalQPs = cmp.Or(l.MaxTotalQPs, max(DefaultMaxTotalQPs, l.MaxQPs))
	l.MaxBufferBytes = cmp.Or(l.MaxBufferBytes, DefaultMaxBufferBytes)
	if l.MaxMessageBytes == 0 {
		if l.BufferBytes > 0 {
			l.MaxMessageBytes = min(l.BufferBytes, maxMessageBytes)
		} else {
			l.MaxMessageBytes = int(min(l.MaxBufferBytes/4, maxMessageBytes))
		}
	}
	if l.MaxRequestBytes == 0 && l.MaxQPs > 0 {
		l.MaxRequestBytes = 4<<10 + l.MaxQPs*endpointJSONBytes
	}
	l.Limits = l.Limits.WithDefaults()
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
	}
	if err := l.Limits.Validate(); err != nil {
		return fmt.Errorf("agent: %w", err)
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
	// PKey is the P_Key of the server's QPs (QPConfig.PKey). Optional: 0
	// means roce.DefaultPKey.
	PKey uint16
	// NPDisabled turns the server's notification point off, as mlx5's
	// roce_np/enable 0 does: its QPs count the CE-marked packets they get
	// (np_ecn_marked_roce_packets) and send no CNPs, whatever the session
	// asks. Seed 000's "NIC ECN disabled" at the receiver.
	NPDisabled bool
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

// Why a connection got no session (ServerStats.Refused): the side
// channel's causes, and RoCEv2's.
const (
	RefusedConns        = sidechan.RefusedConns
	RefusedNoRequest    = sidechan.RefusedNoRequest
	RefusedTimeout      = sidechan.RefusedTimeout
	RefusedRequestBytes = sidechan.RefusedRequestBytes
	RefusedMalformed    = sidechan.RefusedMalformed
	RefusedSessions     = sidechan.RefusedSessions
	RefusedVersion      = "version"
	RefusedQPs          = "qps" // max_qps
	RefusedMessageBytes = "message_bytes"
	RefusedOp           = "op"
	RefusedQPConfig     = "qp_config" // mtu, dscp, cnp_dscp, min_time_between_cnps
	RefusedEndpoint     = "endpoint"  // a client QP the server's cannot connect to
	RefusedTotalQPs     = "total_qps" // max_total_qps
	RefusedBufferBytes  = "buffer_bytes"
	RefusedAgent        = "agent" // the agent could not create a QP
)

// Why the server ended a session before its finish (ServerStats.Aborted).
const (
	AbortedDuration = sidechan.AbortedDuration // max_session_duration
	AbortedFinish   = sidechan.AbortedFinish   // a line other than the finish
)

// ServerStats is what a Server holds now and what it has turned away:
// the side channel's counters and the sessions' QPs and memory.
type ServerStats struct {
	sidechan.Stats
	QPs         int   `json:"qps"`          // the sessions' QPs
	BufferBytes int64 `json:"buffer_bytes"` // their registered memory
}

// Server serves RoCEv2 side-channel sessions (sidechan.Server) on one
// agent, within its limits. The totals (sessions, QPs, registered
// memory) are this Server's: serve all of an agent's listeners from one
// Server to bound the agent.
type Server struct {
	a    *Agent
	opts ServerOptions // limits with defaults filled
	side *sidechan.Server[SessionRequest]

	mu struct {
		sync.Mutex
		qps         int
		bufferBytes int64
	}
}

// NewServer checks opts and returns a server for this agent's sessions.
func (a *Agent) NewServer(opts ServerOptions) (*Server, error) {
	opts.ServerLimits = opts.ServerLimits.withDefaults()
	if err := opts.ServerLimits.validate(); err != nil {
		return nil, err
	}
	if opts.PKey != 0 && !roce.ValidPKey(opts.PKey) {
		return nil, qpErr("pkey", fmt.Sprintf("%#04x", opts.PKey), "must have a base (low 15 bits) of 1..0x7fff")
	}
	s := &Server{a: a, opts: opts}
	lim := &opts.ServerLimits
	s.side = sidechan.NewServer[SessionRequest](roceHandler{s}, sidechan.Options{Limits: lim.Limits, Logger: a.log, OnRefuse: opts.OnRefuse})
	return s, nil
}

// Limits returns the server's limits, defaults filled.
func (s *Server) Limits() ServerLimits { return s.opts.ServerLimits }

// Stats returns what the server holds and has refused.
func (s *Server) Stats() ServerStats {
	st := ServerStats{Stats: s.side.Stats()}
	s.mu.Lock()
	st.QPs, st.BufferBytes = s.mu.qps, s.mu.bufferBytes
	s.mu.Unlock()
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
func (s *Server) Serve(ln net.Listener) error { return s.side.Serve(ln) }

// ServeConn runs one session on an accepted connection and closes it.
func (s *Server) ServeConn(c net.Conn) error { return s.side.ServeConn(c) }

// roceHandler is RoCEv2's side of the side channel: a session is QPs on
// the server's agent, connected to the client's.
type roceHandler struct{ s *Server }

// Check applies the per-session rules to a request: the QPs it may have
// and the QP configuration it asks for, including its endpoints (what
// Connect will require).
func (h roceHandler) Check(c net.Conn, req *SessionRequest) *sidechan.Refusal {
	_, rf := h.s.qpConfig(c, req)
	return rf
}

func (s *Server) qpConfig(c net.Conn, req *SessionRequest) (QPConfig, *sidechan.Refusal) {
	lim := &s.opts.ServerLimits
	cfg := DefaultQPConfig()
	switch {
	case req.Version != ProtocolVersion:
		return cfg, sidechan.Refuse(RefusedVersion, "version %d: this server speaks %d", req.Version, ProtocolVersion)
	case len(req.QPs) < 1 || len(req.QPs) > lim.MaxQPs:
		return cfg, sidechan.Refuse(RefusedQPs, "qps %d: this server allows 1..%d per session (max_qps)", len(req.QPs), lim.MaxQPs)
	case req.MessageBytes < 1 || req.MessageBytes > lim.MaxMessageBytes:
		return cfg, sidechan.Refuse(RefusedMessageBytes, "message_bytes %d: this server allows 1..%d (max_message_bytes)", req.MessageBytes, lim.MaxMessageBytes)
	case req.Op != "" && req.Op != OpWrite.String() && req.Op != OpSend.String():
		return cfg, sidechan.Refuse(RefusedOp, "op %q: this server allows write or send", sidechan.Clip(req.Op, 32))
	}
	cfg.MTU = req.MTU
	cfg.DSCP = req.DSCP
	cfg.NP = req.NP && !s.opts.NPDisabled
	cfg.CNPPeriod = req.CNPPeriod
	cfg.CNPDSCP = req.CNPDSCP
	cfg.VerifyIncoming = req.Verify
	cfg.BufferBytes = lim.bufferFor(req.MessageBytes)
	cfg.PKey = s.opts.PKey
	if err := cfg.Validate(); err != nil {
		return cfg, sidechan.Refuse(RefusedQPConfig, "%s", detail(err))
	}
	local := s.a.localAddr(c)
	for i, ep := range req.QPs {
		ep.Addr = peerAddr(c, ep.Addr)
		if err := checkPeer(local, cfg.MTU, ep); err != nil {
			return cfg, sidechan.Refuse(RefusedEndpoint, "qps[%d]: %v", i, err)
		}
	}
	return cfg, nil
}

// Open reserves the session's QPs and memory, then creates and connects
// its QPs.
func (h roceHandler) Open(c net.Conn, req *SessionRequest) (sidechan.Session, *sidechan.Refusal) {
	s := h.s
	cfg, rf := s.qpConfig(c, req)
	if rf != nil {
		return nil, rf
	}
	n, bufBytes := len(req.QPs), cfg.BufferBytes
	if rf := s.reserve(n, bufBytes); rf != nil {
		return nil, rf
	}
	qps, err := s.a.createSessionQPs(c, req, cfg)
	if err != nil {
		s.release(n, bufBytes)
		return nil, sidechan.Refuse(RefusedAgent, "cannot create the session's QPs: %v", err)
	}
	return &roceSession{s: s, remote: c.RemoteAddr(), req: req, qps: qps, local: s.a.localAddr(c), bufBytes: bufBytes}, nil
}

// reserve takes a session's share of the totals, or says which is short.
func (s *Server) reserve(n, bufBytes int) *sidechan.Refusal {
	lim := &s.opts.ServerLimits
	mem := int64(n) * int64(bufBytes)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.mu.qps+n > lim.MaxTotalQPs:
		return sidechan.Refuse(RefusedTotalQPs, "qps %d: this server has %d of its %d free (max_total_qps)", n, lim.MaxTotalQPs-s.mu.qps, lim.MaxTotalQPs)
	case s.mu.bufferBytes+mem > lim.MaxBufferBytes:
		return sidechan.Refuse(RefusedBufferBytes, "registered memory %d bytes (%d QPs × %d): this server has %d of its %d free (max_buffer_bytes)",
			mem, n, bufBytes, lim.MaxBufferBytes-s.mu.bufferBytes, lim.MaxBufferBytes)
	}
	s.mu.qps += n
	s.mu.bufferBytes += mem
	return nil
}

// release returns what reserve took.
func (s *Server) release(n, bufBytes int) {
	s.mu.Lock()
	s.mu.qps -= n
	s.mu.bufferBytes -= int64(n) * int64(bufBytes)
	s.mu.Unlock()
}

// roceSession is one session's QPs on the server's agent.
type roceSession struct {
	s        *Server
	remote   net.Addr
	local    netip.AddrPort
	req      *SessionRequest
	qps      []*QP
	bufBytes int
}

func (ss *roceSession) Reply() any {
	eps := make([]Endpoint, len(ss.qps))
	for i, qp := range ss.qps {
		eps[i] = qp.Endpoint()
		eps[i].Addr = ss.local
	}
	return sessionReply{QPs: eps}
}

func (ss *roceSession) Started() {
	if ss.s.opts.OnSession != nil {
		ss.s.opts.OnSession(ss.remote, *ss.req, ss.qps)
	}
}

func (ss *roceSession) Finish() any {
	res := SessionResult{QPs: make([]QPReport, len(ss.qps))}
	for i, qp := range ss.qps {
		res.QPs[i] = QPReport{QPN: qp.QPN(), Counters: qp.Counters()}
	}
	if ss.s.opts.OnFinish != nil {
		ss.s.opts.OnFinish(ss.remote, res)
	}
	return res
}

// Fail: the QPs' end (Close) tells the owner, as QP.Done.
func (ss *roceSession) Fail(cause, msg string) {}

func (ss *roceSession) Close() {
	for _, qp := range ss.qps {
		qp.Destroy()
	}
	ss.s.release(len(ss.qps), ss.bufBytes)
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
