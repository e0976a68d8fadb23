package perf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fabriclab/fabriclab/host/roce"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/pktio"
)

// Server is a listening roceperf server: a RoCE agent on its RoCEv2 port
// (pktio.RoCEConn, UDP 4791 shared with the host's other agents) and the
// side channel's TCP listener. Listen opens both on the calling
// goroutine (so a caller locked into a network namespace opens them
// there); Serve may then run anywhere.
type Server struct {
	serverBase
	udp  *pktio.RoCEConn
	ag   *agent.Agent
	side *agent.Server // the side channel's sessions and their limits
	host *agent.Host   // the port, the kernel NP if any, the agent

	mu   sync.Mutex
	sess map[string]*serverSession // by the client's side-channel address
}

// Serve listens as cfg says and serves sessions until ctx is done (or,
// with OneOff, the first session ends), then closes everything.
//
// With cfg.Transport TransportUET it serves UET sessions (ListenUET).
func Serve(ctx context.Context, cfg ServerConfig) error {
	if cfg.Transport == TransportUET {
		s, err := ListenUET(cfg)
		if err != nil {
			return err
		}
		defer s.Close()
		return s.Serve(ctx)
	}
	s, err := Listen(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Serve(ctx)
}

// Listen opens the server's RoCEv2 port and TCP listener and starts its
// agent. Errors are one line: "port 18515: already in use on 198.18.0.1
// (tcp)".
func Listen(cfg ServerConfig) (*Server, error) {
	switch cfg.Transport {
	case "", TransportRoCEv2:
	case TransportUET:
		return nil, errors.New("perf: Listen serves RoCEv2: a UET server is ListenUET's")
	default:
		return nil, configErr(FieldTransport, cfg.Transport, "rocev2 or uet")
	}
	if err := cfg.checkShared(); err != nil {
		return nil, err
	}
	if cfg.UDPPort == 0 {
		cfg.UDPPort = DefaultUDPPort
	}
	switch {
	case cfg.UDPPort < 1 || cfg.UDPPort > 65535:
		return nil, configErr(FieldUDPPort, cfg.UDPPort, "1..65535")
	case cfg.PKey != 0 && !roce.ValidPKey(cfg.PKey):
		return nil, configErr(FieldPKey, fmt.Sprintf("%#04x", cfg.PKey), "0x0001..0xffff, but not 0x8000 (the invalid P_Key)")
	case CheckPPFC(cfg.PPFCSources, cfg.PPFCMaxPause, cfg.PPFCWatchdog) != nil:
		return nil, CheckPPFC(cfg.PPFCSources, cfg.PPFCMaxPause, cfg.PPFCWatchdog)
	}
	if len(cfg.Wires) > 0 {
		return nil, configErr(FieldWires, len(cfg.Wires), wiresRoCEMust)
	}
	bind := netip.IPv4Unspecified()
	if cfg.Bind.IsValid() {
		bind = cfg.Bind.Unmap()
	}
	np := agent.Offload(cfg.NP)
	switch cfg.NP {
	case "", NPKernel, NPAgent:
	case NPOff:
		np = agent.OffloadAgent
	default:
		return nil, configErr(FieldNP, cfg.NP, "kernel, agent or off")
	}
	host, err := agent.OpenHost(agent.HostConfig{
		Addr: netip.AddrPortFrom(bind, uint16(cfg.UDPPort)), Port: pktio.RoCEOptions{SendPath: cfg.SendPath},
		NP: np, RP: agent.OffloadAgent, Agent: agent.Config{Logger: cfg.Logger, Held: cfg.Held, PPFCSources: cfg.PPFCSources,
			PPFCMaxPause: cfg.PPFCMaxPause, PPFCWatchdog: cfg.PPFCWatchdog},
	})
	if err != nil {
		return nil, hostErr(err, FieldNP)
	}
	s := &Server{
		host: host,
		udp:  host.Conn,
		ag:   host.Agent,
		sess: map[string]*serverSession{},
	}
	if err := s.listen(cfg, bind); err != nil {
		_ = host.Close()
		return nil, err
	}
	s.side, err = s.ag.NewServer(agent.ServerOptions{ServerLimits: cfg.Limits, PKey: cfg.PKey, NPDisabled: cfg.NP == NPOff, OnSession: s.onSession, OnFinish: s.onFinish, OnRefuse: s.onRefuse})
	if err != nil {
		_ = s.Close()
		return nil, &ConfigError{Field: FieldServerLimits, Cause: err}
	}
	return s, nil
}

// hostErr is OpenHost's error as the tool says it: the port's, or the
// kernel role's field (role is FieldNP or FieldRP).
func hostErr(err error, role Field) error {
	var pe *agent.PortError
	var oe *agent.OffloadError
	switch {
	case errors.As(err, &pe):
		return listenErr("udp", FieldUDPPort, pe.Addr, pe.Err)
	case errors.As(err, &oe):
		return &ConfigError{Field: role, Value: NPKernel, Cause: oe.Err}
	}
	return err
}

// NPDevices lists the devices the kernel NP runs on (none: the agent's NP).
func (s *Server) NPDevices() []string { return s.host.NPDevices() }

// Agent is the server's RoCE agent (its QPs and counters).
func (s *Server) Agent() *agent.Agent { return s.ag }

// SideChannel is the server's sessions: their limits, what they hold and
// what was refused.
func (s *Server) SideChannel() *agent.Server { return s.side }

// agentReport is the server's agent since it started: its drops, its
// socket, the host's steering and the side channel's sessions.
func (s *Server) agentReport() *ServerAgent {
	sa := &ServerAgent{AgentCounters: s.ag.Counters(), UDP: udpStats(s.udp.Stats()), SideChannel: s.side.Stats()}
	if st, err := s.udp.SteeringStats(); err == nil {
		sa.Steering = &st
	}
	return sa
}

// onRefuse reports a connection the side channel turned away.
func (s *Server) onRefuse(remote net.Addr, _, msg string) {
	s.out.refused(remote, msg, func(r *Report) { r.End.Counters.ServerAgent = s.agentReport() })
}

// UDPAddr is the RoCE port's address.
func (s *Server) UDPAddr() netip.AddrPort { return s.udp.LocalAddr() }

// Serve serves sessions (agent.Serve) until ctx is done, or with OneOff
// until the first session ends. A cancelled ctx closes the listener and
// ends the sessions in progress; Serve then returns nil.
func (s *Server) Serve(ctx context.Context) error {
	np := "NP in the agent"
	if devs := s.NPDevices(); len(devs) > 0 {
		np = "NP in the kernel on " + strings.Join(devs, ", ")
	}
	return s.serve(ctx, fmt.Sprintf("RoCEv2 on UDP %d, %s", s.udp.LocalAddr().Port(), np), s.side.Serve)
}

// Sessions is the number of sessions in progress.
func (s *Server) Sessions() int { return s.side.Stats().Sessions }

// Close stops listening, ends the sessions and closes the agent.
func (s *Server) Close() error { return s.close(s.host.Close) }

// serverSession is one client's session as the server reports it.
type serverSession struct {
	sessionSampling
	remote netip.AddrPort
	local  netip.Addr
	req    agent.SessionRequest
	qps    []*agent.QP
	prev   []agent.Counters
}

func (s *Server) onSession(remote net.Addr, req agent.SessionRequest, qps []*agent.QP) {
	ss := &serverSession{sessionSampling: newSessionSampling(),
		remote: addrPort(remote), req: req, qps: qps, prev: make([]agent.Counters, len(qps))}
	ss.t0 = time.Now()
	ss.local = s.ln.localFor(remote.String())
	s.mu.Lock()
	s.sess[remote.String()] = ss
	s.mu.Unlock()
	s.out.text(func(w io.Writer) {
		fmt.Fprintf(w, "Accepted connection from %s, port %d\n", ss.remote.Addr(), ss.remote.Port())
		for i, qp := range qps {
			peer := req.QPs[i]
			fmt.Fprintf(w, "%s local %s port %d qpn %#x (source port %d) connected to %s port %d qpn %#x\n",
				streamID(qp.QPN()), ss.local, s.udp.LocalAddr().Port(), qp.QPN(), qp.SourcePort(), ss.remote.Addr(), peer.Addr.Port(), peer.QPN)
		}
		verify := ""
		if req.Verify {
			verify = ", verify"
		}
		fmt.Fprintf(w, "Session: %d QPs, %d byte messages, op %s, mtu %d, dscp %d; NP: min_time_between_cnps %v, cnp_dscp %d%s\n",
			len(qps), req.MessageBytes, req.Op, req.MTU, req.DSCP, req.CNPPeriod, req.CNPDSCP, verify)
		if s.cfg.Interval > 0 {
			fmt.Fprintln(w, serverHeader)
		}
	})
	go s.sample(ss)
}

// sample takes the server's interval reports until the session finishes
// or its QPs go away.
func (s *Server) sample(ss *serverSession) {
	sample(&s.serverBase, &ss.sessionSampling, ss.take, writeServerInterval, ss.qps[0].Done(), func() bool {
		s.out.printf("session from %s ended without its summary (the client went away)\n%s\n", ss.remote, dashLine)
		s.mu.Lock()
		delete(s.sess, ss.remote.String())
		s.mu.Unlock()
		return false
	})
}

// take is the receiver's interval: bytes placed, CE marks seen, CNPs sent.
// In a server interval, CNPHandled counts CE-marked packets and
// CNPIgnored CNPs sent (the server's QPs only receive).
func (ss *serverSession) take(now time.Duration) Interval {
	iv := newInterval(ss.prevT, now)
	for i, qp := range ss.qps {
		ctr := qp.Counters()
		p := &ss.prev[i]
		st := IntervalStream{
			ID:        qp.QPN(),
			Bytes:     ctr.RecvBytes - p.RecvBytes,
			TxPackets: ctr.TxPackets - p.TxPackets,
		}
		ce, cnps := ctr.NPECNMarkedRoCEPackets-p.NPECNMarkedRoCEPackets, ctr.NPCNPSent-p.NPCNPSent
		st.CNPHandled, st.CNPIgnored = ce, cnps
		*p = ctr
		iv.add(st)
		iv.Sum.CNPHandled += ce
		iv.Sum.CNPIgnored += cnps
		iv.Sum.TxPackets += st.TxPackets
	}
	ss.prevT = now
	return iv
}

func writeServerInterval(w io.Writer, iv *Interval) {
	writeServerRows(w, iv, "%s  %6d  %9d\n", iv.Sum.CNPHandled, iv.Sum.CNPIgnored,
		func(st *IntervalStream) (uint64, uint64) { return st.CNPHandled, st.CNPIgnored })
}

// writeServerRows prints a server's interval: a row per stream and, with
// more than one, the [SUM] row (its two counters a and b), each the
// prefix and two counter columns in format.
func writeServerRows(w io.Writer, iv *Interval, format string, a, b uint64, cols func(*IntervalStream) (uint64, uint64)) {
	for i := range iv.Streams {
		st := &iv.Streams[i]
		x, y := cols(st)
		fmt.Fprintf(w, format, intervalPrefix(streamID(st.ID), st.Start, st.End, st.Bytes, st.BitsPerSecond), x, y)
	}
	if len(iv.Streams) > 1 {
		fmt.Fprintf(w, format, intervalPrefix("[SUM]", iv.Sum.Start, iv.Sum.End, iv.Sum.Bytes, iv.Sum.BitsPerSecond), a, b)
		fmt.Fprintln(w, sepLine)
	}
}

// onFinish prints the receiver's summary (or its JSON report).
func (s *Server) onFinish(remote net.Addr, res agent.SessionResult) {
	s.mu.Lock()
	ss := s.sess[remote.String()]
	delete(s.sess, remote.String())
	s.mu.Unlock()
	if ss == nil {
		return
	}
	ss.halt()
	end := time.Since(ss.t0).Seconds()
	r := newServerReport(ss.t0, ss.intervals, TestStart{
		Protocol: "RoCEv2", NumStreams: len(ss.qps), Blksize: ss.req.MessageBytes,
		Duration: ss.req.Duration.Seconds(), Bytes: ss.req.Bytes,
		TOS: int(ss.req.DSCP) << 2, DSCP: int(ss.req.DSCP), CNPDSCP: int(ss.req.CNPDSCP),
		MTU: ss.req.MTU, Op: ss.req.Op, Verify: ss.req.Verify,
		DCQCN:         map[string]json.Number{"min_time_between_cnps": json.Number(microseconds(ss.req.CNPPeriod)), "cnp_dscp": json.Number(fmt.Sprint(ss.req.CNPDSCP))},
		DCQCNVariants: map[string]string{},
	})
	e := &r.End
	span := Sum{End: end, Seconds: end}
	e.SumReceived = span
	for i, q := range res.QPs {
		peer, ep := ss.req.QPs[i], ss.qps[i].Endpoint()
		r.Start.Connected = append(r.Start.Connected, Connected{
			LocalHost: ss.local.String(), LocalPort: s.udp.LocalAddr().Port(), SourcePort: ss.qps[i].SourcePort(),
			RemoteHost: ss.remote.Addr().String(), RemotePort: peer.Addr.Port(),
			QPN: q.QPN, RemoteQPN: peer.QPN,
			PSN: ep.PSN, RemotePSN: peer.PSN,
			RKey: ep.RKey, RemoteRKey: peer.RKey,
			VAddr: ep.VA, RemoteVAddr: peer.VA,
		})
		rcv := StreamSummary{ID: peer.QPN, QPN: q.QPN, Sum: span, Counters: q.Counters}
		rcv.Bytes, rcv.Messages = q.Counters.RecvBytes, q.Counters.RecvMessages
		e.addStream(StreamSummary{}, rcv)
	}
	e.setSumRates()
	e.Counters.Server = res.QPs
	e.Counters.ServerAgent = s.agentReport()
	s.out.report(r, func(w io.Writer) { s.writeSummary(w, ss, e, end) })
}

// writeSummary is the receiver's summary as text.
func (s *Server) writeSummary(w io.Writer, ss *serverSession, e *End, end float64) {
	fmt.Fprintln(w, sepLine)
	fmt.Fprintln(w, "[ ID] Interval           Transfer     Bitrate         ECN-CE   CNPs sent")
	var tot agent.Counters
	for _, st := range e.Streams {
		c := &st.Receiver.Counters
		tot.Add(c)
		fmt.Fprintf(w, "%s  %6d  %9d  receiver\n", intervalPrefix(streamID(st.Receiver.QPN), 0, end, st.Receiver.Bytes, st.Receiver.BitsPerSecond),
			c.NPECNMarkedRoCEPackets, c.NPCNPSent)
	}
	if len(e.Streams) > 1 {
		fmt.Fprintf(w, "%s  %6d  %9d  receiver\n", intervalPrefix("[SUM]", 0, end, e.SumReceived.Bytes, e.SumReceived.BitsPerSecond),
			tot.NPECNMarkedRoCEPackets, tot.NPCNPSent)
	}
	fmt.Fprintf(w, "counters: np_cnp_sent=%d np_ecn_marked_roce_packets=%d out_of_sequence=%d duplicate_request=%d",
		tot.NPCNPSent, tot.NPECNMarkedRoCEPackets, tot.OutOfSequence, tot.DuplicateRequest)
	if ss.req.Verify || tot.VerifyErrors > 0 {
		fmt.Fprintf(w, " verify_errors=%d", tot.VerifyErrors)
	}
	if d := s.udp.Stats().RecvBufferDrops; d > 0 {
		fmt.Fprintf(w, " (server socket: recv_buffer_drops=%d since start)", d)
	}
	if st, err := s.udp.SteeringStats(); err == nil && st.UnknownQP+st.Misdirected+st.Malformed+st.PPFCIgnoredSource > 0 {
		// Host-wide: packets no agent of this namespace took.
		fmt.Fprintf(w, " (host steering since its first agent: unknown_qp=%d misdirected=%d malformed=%d ppfc_ignored_source=%d)",
			st.UnknownQP, st.Misdirected, st.Malformed, st.PPFCIgnoredSource)
	}
	fmt.Fprintf(w, "\n%s\n%s\n", serverAgentLine(e.Counters.ServerAgent), dashLine)
}

func microseconds(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', -1, 64)
}

func addrPort(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// listenSide opens the side channel's TCP listener on bind and
// cfg.Port, RoCEv2's and UET's alike.
func listenSide(bind netip.Addr, cfg ServerConfig) (*listener, error) {
	network := "tcp4"
	if bind.Is6() {
		network = "tcp6"
	}
	tap := netip.AddrPortFrom(bind, uint16(cfg.Port))
	tl, err := net.Listen(network, tap.String())
	if err != nil {
		return nil, listenErr("tcp", FieldPort, tap, err)
	}
	return &listener{Listener: tl, oneOff: cfg.OneOff, conns: map[*trackedConn]struct{}{}}, nil
}

// serveUntil runs serve on l until it returns, or until ctx is done:
// then it closes l, which ends the sessions in progress, and returns nil.
func (l *listener) serveUntil(ctx context.Context, serve func(net.Listener) error) error {
	errc := make(chan error, 1)
	go func() { errc <- serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		_ = l.Close()
		<-errc
		return nil
	}
}

// listener hands agent.Serve its connections and keeps them, so Close
// can end the sessions in progress; with oneOff it accepts one connection,
// then reports itself closed once that session is over.
type listener struct {
	net.Listener
	oneOff bool

	mu       sync.Mutex
	accepted bool
	closed   bool
	draining bool // Drain: no new connections; Accept fails once the last ends
	conns    map[*trackedConn]struct{}
	first    *trackedConn // the one-off session
}

func (l *listener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.closed || (l.oneOff && l.accepted) {
		first := l.first
		l.mu.Unlock()
		_ = l.Listener.Close() // later clients are refused
		if first != nil {
			// agent.Serve ends the sessions in progress once Accept
			// fails: let the one session finish first.
			<-first.done
		}
		return nil, net.ErrClosed
	}
	l.mu.Unlock()
	c, err := l.Listener.Accept()
	if err != nil {
		l.mu.Lock()
		draining := l.draining
		l.mu.Unlock()
		if draining && errors.Is(err, net.ErrClosed) {
			l.waitConns()
		}
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.accepted = true
	tc := &trackedConn{Conn: c, l: l, done: make(chan struct{})}
	if l.first == nil {
		l.first = tc
	}
	l.conns[tc] = struct{}{}
	return tc, nil
}

func (l *listener) Close() error {
	l.mu.Lock()
	l.closed = true
	conns := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return l.Listener.Close()
}

// drain refuses new connections (the socket is closed, so clients get a
// reset); Accept returns net.ErrClosed once every connection has ended.
func (l *listener) drain() {
	l.mu.Lock()
	l.draining = true
	l.mu.Unlock()
	_ = l.Listener.Close()
}

// waitConns waits until no tracked connection is open.
func (l *listener) waitConns() {
	for {
		l.mu.Lock()
		var c *trackedConn
		for c = range l.conns {
			break
		}
		l.mu.Unlock()
		if c == nil {
			return
		}
		<-c.done
	}
}

// localFor is the local address of the connection from remote.
func (l *listener) localFor(remote string) netip.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		if c.RemoteAddr().String() == remote {
			return addrPort(c.LocalAddr()).Addr()
		}
	}
	return netip.Addr{}
}

type trackedConn struct {
	net.Conn
	l    *listener
	once sync.Once
	done chan struct{} // closed by Close
}

// CloseWrite lets the side channel close its sending side after an error
// line (agent's linger), as on the TCP connection itself.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		close(c.done)
	})
	return err
}
