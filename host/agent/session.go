package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/fabriclab/fabriclab/host/sidechan"
)

// RoCEv2's side of the side channel (host/sidechan): like perftest, QPs
// are set up over TCP before any RoCE packet flows. The client's request
// (SessionRequest) carries its QPs' endpoints and the parameters the
// server's QPs need; the server creates as many QPs, connects them and
// answers with theirs; at the finish it answers with their counters. A
// dropped TCP connection destroys the server's QPs; a refusal is an error
// line naming the limit or rule (server.go).

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
	Op           string        `json:"op"` // write (also "") or send
	Verify       bool          `json:"verify"`
	NP           bool          `json:"np"`
	CNPPeriod    time.Duration `json:"min_time_between_cnps_ns"`
	CNPDSCP      uint8         `json:"cnp_dscp"`
	AckReqEvery  int           `json:"ackreq_every,omitempty"`
	Duration     time.Duration `json:"duration_ns,omitempty"` // informational
	Bytes        uint64        `json:"bytes,omitempty"`       // informational
}

// sessionReply answers a request: the server's QPs, or why not. Cause
// names the limit or rule (Refused* constants) for programs; Error says
// it for people.
type sessionReply struct {
	Error string     `json:"error,omitempty"`
	Cause string     `json:"cause,omitempty"`
	QPs   []Endpoint `json:"qps,omitempty"`
}

// QPReport is one QP's counters.
type QPReport struct {
	QPN      uint32   `json:"qpn"`
	Counters Counters `json:"counters"`
}

// SessionResult is the server's report at the end of a session.
// Error and Cause are set when the server ended the session itself
// (Aborted* constants).
type SessionResult struct {
	Error string     `json:"error,omitempty"`
	Cause string     `json:"cause,omitempty"`
	QPs   []QPReport `json:"qps"`
}

// Session is the client side of one side-channel session.
type Session struct {
	side   *sidechan.Client
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
	s := &Session{}
	ok := false
	defer func() {
		if !ok {
			s.Close()
			if s.side == nil {
				_ = c.Close()
			}
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
	var rep sessionReply
	side, err := sidechan.Open(ctx, c, req, &rep, replyLimit(n))
	if se := (*sidechan.ServerError)(nil); errors.As(err, &se) {
		return nil, fmt.Errorf("agent: server %s refused the session: %s", addr, se.Msg)
	}
	if err != nil {
		return nil, fmt.Errorf("agent: side channel to %s: %w", addr, err)
	}
	s.side = side
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
	err := s.side.Finish(ctx, &res, replyLimit(len(s.QPs)))
	if se := (*sidechan.ServerError)(nil); errors.As(err, &se) {
		return res, fmt.Errorf("agent: server: %s", se.Msg)
	}
	if err != nil {
		return res, fmt.Errorf("agent: finish: %w", err)
	}
	return res, nil
}

// Close destroys the session's QPs and closes the side channel.
func (s *Session) Close() {
	for _, qp := range s.QPs {
		qp.Destroy()
	}
	if s.side != nil {
		_ = s.side.Close()
	}
}

// replyLimit bounds a server's answer for n QPs: an endpoint, or a QP's
// counters, is well under 2 KiB of JSON.
func replyLimit(n int) int { return 64<<10 + n*(4<<10) }

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
