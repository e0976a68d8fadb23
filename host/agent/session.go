package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// The side channel: like perftest, QPs are set up over TCP before any RoCE
// packet flows. The client sends a SessionRequest (one JSON line) with its
// QPs' endpoints and the parameters the server's QPs need; the server
// creates as many QPs, connects them and answers with theirs; at the end
// the client sends "finish" and the server answers with its counters. A
// dropped TCP connection destroys the server's QPs. Every message is one
// JSON line; a refused request is answered with an error line
// (sessionReply.Error) naming the limit or rule (server.go).

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

type finishMsg struct {
	Finish bool `json:"finish"`
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
	s := &Session{conn: c, r: bufio.NewReaderSize(c, readBufferBytes)}
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
	if err := readJSON(s.r, replyLimit(n), &rep); err != nil {
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
	if err := readJSON(s.r, replyLimit(len(s.QPs)), &res); err != nil {
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

// Side-channel lines are read through a bufio.Reader of readBufferBytes:
// with readLine's limit, what one connection holds at most.
const readBufferBytes = 4 << 10

// replyLimit bounds a server's answer for n QPs: an endpoint, or a QP's
// counters, is well under 2 KiB of JSON.
func replyLimit(n int) int { return 64<<10 + n*(4<<10) }

// Line errors.
var (
	errLineTooLong = errors.New("line too long")
	errNoNewline   = errors.New("the connection ended in the middle of a line")
)

// readLine reads one line, newline included, of at most limit bytes. It
// stops reading once a line is longer (errLineTooLong): it never holds
// more than limit bytes besides r's buffer. The line may be r's buffer,
// valid until the next read.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(line)+len(frag) > limit {
			return nil, errLineTooLong
		}
		switch {
		case err == nil && line == nil:
			return frag, nil
		case err == nil || err == bufio.ErrBufferFull:
			if cap(line)-len(line) < len(frag) {
				// Grow by doubling, never past the limit.
				grown := make([]byte, len(line), min(limit, max(2*cap(line), len(line)+len(frag))))
				copy(grown, line)
				line = grown
			}
			line = append(line, frag...)
			if err == nil {
				return line, nil
			}
		case err == io.EOF && len(line)+len(frag) > 0:
			return nil, errNoNewline
		default:
			return nil, err
		}
	}
}

// readJSON reads one line of at most limit bytes into v.
func readJSON(r *bufio.Reader, limit int, v any) error {
	line, err := readLine(r, limit)
	if errors.Is(err, errLineTooLong) {
		return fmt.Errorf("side-channel message over %d bytes", limit)
	}
	if err != nil {
		return err
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
