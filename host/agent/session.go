package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// The side channel: like perftest, QPs are set up over TCP before any RoCE
// packet flows. The client sends a SessionRequest (one JSON line) with its
// QPs' endpoints and the parameters the server's QPs need; the server
// creates as many QPs, connects them and answers with theirs; at the end
// the client sends "finish" and the server answers with its counters. A
// dropped TCP connection destroys the server's QPs.

// ProtocolVersion is the side-channel version both ends must speak.
const ProtocolVersion = 1

// SessionRequest is the client's opening message.
type SessionRequest struct {
	Version int        `json:"version"`
	QPs     []Endpoint `json:"qps"`
	// What the server's QPs need to know.
	MTU          int           `json:"mtu"`
	DSCP         uint8         `json:"dscp"`
	MessageBytes int           `json:"message_bytes"`
	Op           string        `json:"op"`
	Verify       bool          `json:"verify"`
	NP           bool          `json:"np"`
	CNPPeriod    time.Duration `json:"min_time_between_cnps_ns"`
	CNPDSCP      uint8         `json:"cnp_dscp"`
	AckReqEvery  int           `json:"ackreq_every,omitempty"`
	Duration     time.Duration `json:"duration_ns,omitempty"` // informational
	Bytes        uint64        `json:"bytes,omitempty"`       // informational
}

type sessionReply struct {
	Error string     `json:"error,omitempty"`
	QPs   []Endpoint `json:"qps,omitempty"`
}

type finishMsg struct {
	Finish bool `json:"finish"`
}

// QPReport is one QP's counters.
type QPReport struct {
	QPN      uint32   `json:"qpn"`
	Counters Counters `json:"counters"`
}

// SessionResult is the server's report at the end of a session.
type SessionResult struct {
	Error string     `json:"error,omitempty"`
	QPs   []QPReport `json:"qps"`
}

// ServerOptions bound what one client may ask for.
type ServerOptions struct {
	MaxQPs int // per session. Optional: 0 means 4096.
	// BufferBytes is each server QP's registered memory. Optional: 0 means
	// 4 message sizes, at least 64 KiB.
	BufferBytes int
	// OnSession, if set, is called with each session's QPs once they are
	// connected (the server tool prints them).
	OnSession func(remote net.Addr, req SessionRequest, qps []*QP)
	// OnFinish, if set, is called with each session's result.
	OnFinish func(remote net.Addr, res SessionResult)
}

// Serve accepts side-channel sessions on ln until it is closed; each
// session's QPs live on this agent. Closing ln also ends the sessions in
// progress (their side channels are closed, their QPs destroyed).
func (a *Agent) Serve(ln net.Listener, opts ServerOptions) error {
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
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.ServeConn(c, opts); err != nil {
				a.log.Info("session ended", "remote", c.RemoteAddr(), "err", err)
			}
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}()
	}
}

// ServeConn runs one session on an accepted connection and closes it.
func (a *Agent) ServeConn(c net.Conn, opts ServerOptions) error {
	defer c.Close()
	if opts.MaxQPs == 0 {
		opts.MaxQPs = 4096
	}
	r := bufio.NewReader(c)
	enc := json.NewEncoder(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var req SessionRequest
	if err := readJSON(r, &req); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Time{})
	qps, err := a.acceptSession(c, &req, opts)
	if err != nil {
		_ = enc.Encode(sessionReply{Error: err.Error()})
		return err
	}
	defer func() {
		for _, qp := range qps {
			qp.Destroy()
		}
	}()
	eps := make([]Endpoint, len(qps))
	for i, qp := range qps {
		eps[i] = qp.Endpoint()
		eps[i].Addr = a.localAddr(c)
	}
	if err := enc.Encode(sessionReply{QPs: eps}); err != nil {
		return err
	}
	if opts.OnSession != nil {
		opts.OnSession(c.RemoteAddr(), req, qps)
	}
	// Wait for finish; a closed connection ends the session too.
	var fin finishMsg
	if err := readJSON(r, &fin); err != nil {
		return fmt.Errorf("agent: session from %v: %w", c.RemoteAddr(), err)
	}
	res := SessionResult{QPs: make([]QPReport, len(qps))}
	for i, qp := range qps {
		res.QPs[i] = QPReport{QPN: qp.QPN(), Counters: qp.Counters()}
	}
	if opts.OnFinish != nil {
		opts.OnFinish(c.RemoteAddr(), res)
	}
	return enc.Encode(res)
}

func (a *Agent) acceptSession(c net.Conn, req *SessionRequest, opts ServerOptions) ([]*QP, error) {
	switch {
	case req.Version != ProtocolVersion:
		return nil, fmt.Errorf("protocol version %d, this server speaks %d", req.Version, ProtocolVersion)
	case len(req.QPs) < 1 || len(req.QPs) > opts.MaxQPs:
		return nil, fmt.Errorf("%d QPs requested: this server allows 1..%d per session", len(req.QPs), opts.MaxQPs)
	case req.MessageBytes < 1 || req.MessageBytes > 1<<30:
		return nil, fmt.Errorf("message size %d: must be 1..%d", req.MessageBytes, 1<<30)
	}
	cfg := DefaultQPConfig()
	cfg.MTU = req.MTU
	cfg.DSCP = req.DSCP
	cfg.NP = req.NP
	cfg.CNPPeriod = req.CNPPeriod
	cfg.CNPDSCP = req.CNPDSCP
	cfg.VerifyIncoming = req.Verify
	cfg.BufferBytes = opts.BufferBytes
	if cfg.BufferBytes == 0 {
		cfg.BufferBytes = max(4*req.MessageBytes, 64<<10)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
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

// Session is the client side of one side-channel session.
type Session struct {
	conn   net.Conn
	r      *bufio.Reader
	QPs    []*QP      // this agent's QPs, connected
	Remote []Endpoint // the server's QPs, in the same order
}

// Dial opens a session to the server at addr (host:port): n QPs are
// created from cfg on this agent, announced with req, and connected to the
// server's.
func (a *Agent) Dial(ctx context.Context, addr string, n int, cfg QPConfig, req SessionRequest) (*Session, error) {
	if n < 1 {
		return nil, fmt.Errorf("agent: %d QPs: need at least 1", n)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("agent: cannot reach the server's side channel at %s: %w", addr, err)
	}
	return a.DialConn(ctx, c, n, cfg, req)
}

// DialConn is Dial over an established side channel, which it owns from
// now on (Session.Close closes it).
func (a *Agent) DialConn(ctx context.Context, c net.Conn, n int, cfg QPConfig, req SessionRequest) (*Session, error) {
	addr := c.RemoteAddr().String()
	if n < 1 {
		_ = c.Close()
		return nil, fmt.Errorf("agent: %d QPs: need at least 1", n)
	}
	s := &Session{conn: c, r: bufio.NewReader(c)}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	local := a.localAddr(c)
	req.Version = ProtocolVersion
	req.MTU = cfg.MTU
	req.DSCP = cfg.DSCP
	req.QPs = req.QPs[:0]
	for range n {
		qp, err := a.CreateQP(cfg)
		if err != nil {
			return nil, err
		}
		s.QPs = append(s.QPs, qp)
		ep := qp.Endpoint()
		ep.Addr = local
		req.QPs = append(req.QPs, ep)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return nil, fmt.Errorf("agent: side channel to %s: %w", addr, err)
	}
	var rep sessionReply
	if err := readJSON(s.r, &rep); err != nil {
		return nil, fmt.Errorf("agent: side channel to %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	if rep.Error != "" {
		return nil, fmt.Errorf("agent: server %s refused the session: %s", addr, rep.Error)
	}
	if len(rep.QPs) != n {
		return nil, fmt.Errorf("agent: server %s answered with %d QPs for %d", addr, len(rep.QPs), n)
	}
	for i, ep := range rep.QPs {
		ep.Addr = peerAddr(c, ep.Addr)
		if err := s.QPs[i].Connect(local, ep); err != nil {
			return nil, err
		}
		s.Remote = append(s.Remote, ep)
	}
	ok = true
	return s, nil
}

// Finish tells the server the run is over and returns its counters.
func (s *Session) Finish(ctx context.Context) (SessionResult, error) {
	var res SessionResult
	if dl, ok := ctx.Deadline(); ok {
		_ = s.conn.SetDeadline(dl)
	} else {
		_ = s.conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	if err := json.NewEncoder(s.conn).Encode(finishMsg{Finish: true}); err != nil {
		return res, fmt.Errorf("agent: finish: %w", err)
	}
	if err := readJSON(s.r, &res); err != nil {
		return res, fmt.Errorf("agent: finish: %w", err)
	}
	if res.Error != "" {
		return res, fmt.Errorf("agent: server: %s", res.Error)
	}
	return res, nil
}

// Close destroys the session's QPs and closes the side channel.
func (s *Session) Close() {
	for _, qp := range s.QPs {
		qp.Destroy()
	}
	_ = s.conn.Close()
}

func readJSON(r *bufio.Reader, v any) error {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return err
	}
	if len(line) > 1<<20 {
		return errors.New("side-channel message over 1 MiB")
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("bad side-channel message: %w", err)
	}
	return nil
}

// localAddr is where the peer reaches this agent: its bound address, or
// (bound to a wildcard) the address the side channel runs on, which the
// routing table chose for this peer.
func (a *Agent) localAddr(c net.Conn) netip.AddrPort {
	la := a.conn.LocalAddr()
	if ip := la.Addr().Unmap(); ip.IsValid() && !ip.IsUnspecified() {
		return netip.AddrPortFrom(ip, la.Port())
	}
	return netip.AddrPortFrom(tcpAddr(c.LocalAddr()), la.Port())
}

// peerAddr is the address a peer announced, or, if it announced a wildcard,
// the side channel's remote address with the announced port.
func peerAddr(c net.Conn, announced netip.AddrPort) netip.AddrPort {
	if ip := announced.Addr().Unmap(); ip.IsValid() && !ip.IsUnspecified() {
		return netip.AddrPortFrom(ip, announced.Port())
	}
	return netip.AddrPortFrom(tcpAddr(c.RemoteAddr()), announced.Port())
}

func tcpAddr(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(t.IP)
		return ip.Unmap()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}
