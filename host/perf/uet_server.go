package perf

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
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// uetServerIdle is the server endpoint's idle timeout: a target PDC the
// client stopped talking to is freed after twice as long (1 s). roceperf's
// client closes its endpoint without closing its PDCs, so this is how
// long a client's next session from the same address may have to wait
// (its PDC IDs start again at 1, and a target of the same source PDC ID
// must be gone first).
const uetServerIdle = 500 * time.Millisecond

// uetTrackPeriod is how often a session reads its target PDCs' counters:
// a PDC freed before the finish (a stream that ended early and whose
// client closed it) keeps the last counters read, all of them once it
// has been idle for this long.
const uetTrackPeriod = 100 * time.Millisecond

// UETServerStats is what a UET server holds now and what it turned away.
type UETServerStats struct {
	Conns    int    `json:"conns"`    // side-channel connections open
	Sessions int    `json:"sessions"` // sessions in progress
	Streams  int    `json:"streams"`  // their streams
	Accepted uint64 `json:"accepted"` // sessions set up since the start
	// Refused counts connections that got no session, by cause
	// (UETRefused*); Aborted sessions the server ended, by cause.
	Refused map[string]uint64 `json:"refused"`
	Aborted map[string]uint64 `json:"aborted"`
}

// UETServer is a listening roceperf --transport uet server: a pds.Endpoint
// on the bind address's UDP 4793 (pktio.EntropyConn) and the UET side
// channel's TCP listener (18515). ListenUET opens both on the calling
// goroutine; Serve may run anywhere.
type UETServer struct {
	cfg  ServerConfig
	lim  UETLimits
	bind netip.Addr // the side channel's
	ep   *pds.Endpoint
	ln   *listener
	log  *slog.Logger
	// idle is the endpoint's idle timeout (uetServerIdle, or the RTO of
	// a slowed fabric where that is longer).
	idle time.Duration

	outMu sync.Mutex // one writer of Out at a time

	mu struct {
		sync.Mutex
		stats    UETServerStats
		sessions map[netip.Addr]*uetSession // by the client's UET address
	}

	closeOnce sync.Once
	closeErr  error
}

// ListenUET opens a UET server's endpoint and TCP listener. The endpoint
// needs a unicast address: cfg.Bind (or cfg.UETConn's).
func ListenUET(cfg ServerConfig) (*UETServer, error) {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, configErr(FieldPort, cfg.Port, "1..65535")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Interval > 0 && (cfg.Interval < MinInterval || cfg.Interval > MaxInterval) {
		return nil, configErr(FieldInterval, seconds(cfg.Interval), "0 (no interval reports) or %g..%g seconds", MinInterval.Seconds(), MaxInterval.Seconds())
	}
	lim := cfg.UETLimits.withDefaults()
	if err := lim.validate(); err != nil {
		return nil, err
	}
	if err := cfg.Timescale.Validate(); err != nil {
		return nil, configErr(FieldTimescale, cfg.Timescale, "1..%d", units.MaxTimescale)
	}
	log := cfg.Logger
	if log == nil {
		log = discardLogger()
	}
	bind := cfg.Bind.Unmap()
	conn := cfg.UETConn
	if conn == nil {
		if !bind.IsValid() || bind.IsUnspecified() || bind.IsMulticast() {
			return nil, &ConfigError{Field: FieldBind, Value: cfg.Bind.String(), Must: "required with transport uet: a unicast address of this host (UET's UDP 4793 is opened per address)"}
		}
		ap := netip.AddrPortFrom(bind, uet.Port)
		ec, err := pktio.ListenEntropy(ap, pktio.RoCEOptions{SendPath: cfg.SendPath})
		if err != nil {
			return nil, uetListenErr(ap, err)
		}
		conn = ec
	}
	if !bind.IsValid() {
		bind = conn.LocalAddr().Addr().Unmap()
	}
	network := "tcp4"
	if bind.Is6() {
		network = "tcp6"
	}
	tap := netip.AddrPortFrom(bind, uint16(cfg.Port))
	tl, err := net.Listen(network, tap.String())
	if err != nil {
		_ = conn.Close()
		return nil, listenErr("tcp", FieldPort, tap, err)
	}
	pc := pds.DefaultConfig()
	// The endpoint checks every payload (pds.Config.Verify); a session
	// without --verify sends zeros, and its verify errors are not reported
	// (totals).
	pc.Conn, pc.Logger, pc.IdleTimeout, pc.Verify = conn, log, uetServerIdle, true
	pc.TrimDSCP, pc.TrimLastHopDSCP = cfg.TrimDSCP, cfg.TrimLastHopDSCP
	pc.Held = cfg.Held
	if cfg.LineRate != 0 {
		pc.LinkRate = cfg.LineRate
	}
	if cfg.BaseRTT != 0 {
		pc.BaseRTT = cfg.BaseRTT
	}
	if k := cfg.Timescale; k.K() != 1 {
		pc = pc.Slowed(k)
		// The idle timeout is the tool's (how long a finished session's
		// PDCs linger), not a fabric time.
		pc.IdleTimeout = max(uetServerIdle, pc.RTO)
	}
	if err := checkTrimDSCP(pc); err != nil {
		_ = tl.Close()
		_ = conn.Close()
		return nil, err
	}
	ep, err := pds.New(pc)
	if err != nil {
		_ = tl.Close()
		_ = conn.Close()
		return nil, err
	}
	s := &UETServer{cfg: cfg, lim: lim, bind: bind, ep: ep, log: log, idle: pc.IdleTimeout,
		ln: &listener{Listener: tl, oneOff: cfg.OneOff, conns: map[*trackedConn]struct{}{}}}
	s.mu.stats.Refused = map[string]uint64{}
	s.mu.stats.Aborted = map[string]uint64{}
	s.mu.sessions = map[netip.Addr]*uetSession{}
	return s, nil
}

// Addr is the side channel's listening address.
func (s *UETServer) Addr() netip.AddrPort { return s.ln.Addr().(*net.TCPAddr).AddrPort() }

// UETAddr is the endpoint's address and UET port.
func (s *UETServer) UETAddr() netip.AddrPort { return s.ep.LocalAddr() }

// Endpoint is the server's UET endpoint (its PDCs and counters).
func (s *UETServer) Endpoint() *pds.Endpoint { return s.ep }

// Stats returns what the side channel holds and has refused.
func (s *UETServer) Stats() UETServerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.stats
	st.Refused = maps.Clone(st.Refused)
	st.Aborted = maps.Clone(st.Aborted)
	return st
}

// Serve serves UET sessions until ctx is done, or with OneOff until the
// first session ends. A cancelled ctx closes the listener and ends the
// sessions in progress; Serve then returns nil.
func (s *UETServer) Serve(ctx context.Context) error {
	s.printf("%s\nServer listening on %s port %d (UET on UDP %d)\n%s\n", dashLine, s.bind, s.Addr().Port(), s.UETAddr().Port(), dashLine)
	errc := make(chan error, 1)
	go func() { errc <- s.acceptLoop() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		_ = s.ln.Close()
		<-errc
		return nil
	}
}

// Drain stops accepting sessions and lets those in progress run to their
// end: Serve returns once the last one has. Cancelling Serve's context
// ends them at once.
func (s *UETServer) Drain() { s.ln.drain() }

// Close stops listening, ends the sessions and closes the endpoint.
func (s *UETServer) Close() error {
	s.closeOnce.Do(func() {
		_ = s.ln.Close()
		s.closeErr = s.ep.Close()
	})
	return s.closeErr
}

func (s *UETServer) acceptLoop() error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		// Over max_conns: answered here, without a goroutine.
		if rf := s.acquireConn(); rf != nil {
			s.refuse(c, nil, rf, time.Millisecond)
			_ = c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.count(func(st *UETServerStats) { st.Conns-- })
			if err := s.serveConn(c); err != nil {
				s.log.Debug("uet session ended", "remote", c.RemoteAddr(), "err", err)
			}
		}()
	}
}

func (s *UETServer) acquireConn() *refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.mu.stats
	if st.Conns+1 > s.lim.MaxConns {
		return uetRefuse(UETRefusedConns, "connections %d: this server allows 1..%d at once (max_conns)", st.Conns+1, s.lim.MaxConns)
	}
	st.Conns++
	return nil
}

func (s *UETServer) count(f func(*UETServerStats)) {
	s.mu.Lock()
	f(&s.mu.stats)
	s.mu.Unlock()
}

// refusal is why a connection gets no session: its cause and the error
// line's text.
type refusal struct{ cause, msg string }

func (r *refusal) Error() string { return "refused: " + r.msg }

// clip shortens a client's string for an error line.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func uetRefuse(cause, format string, args ...any) *refusal {
	return &refusal{cause: cause, msg: fmt.Sprintf(format, args...)}
}

// refuse counts rf, reports it, answers the client with an error line and
// lets the client read it before the connection closes.
func (s *UETServer) refuse(c net.Conn, r io.Reader, rf *refusal, wait time.Duration) {
	s.count(func(st *UETServerStats) { st.Refused[rf.cause]++ })
	s.reportRefusal(c.RemoteAddr(), rf.msg)
	if writeLine(c, s.lim.RequestTimeout, uetReply{Error: rf.msg, Cause: rf.cause}) != nil || rf.cause == UETRefusedNoRequest {
		return
	}
	if r == nil {
		r = c
	}
	linger(c, r, wait)
}

// linger closes c's sending side, then reads and drops what the client
// still sends (at most uetLingerBytes, for at most wait): closing with
// unread bytes resets the connection, and the reset drops the error line.
func linger(c net.Conn, r io.Reader, wait time.Duration) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, _ = io.CopyN(io.Discard, r, uetLingerBytes)
}

// reportRefusal prints a refused session: a line of text, or a JSON report
// with its error.
func (s *UETServer) reportRefusal(remote net.Addr, msg string) {
	if s.cfg.Out == nil {
		return
	}
	ap := addrPort(remote)
	text := fmt.Sprintf("refused a session from %s port %d: %s", ap.Addr(), ap.Port(), msg)
	s.outMu.Lock()
	defer s.outMu.Unlock()
	if !s.cfg.JSON {
		fmt.Fprintf(s.cfg.Out, "roceperf: %s\n%s\n", text, dashLine)
		return
	}
	now := time.Now()
	r := &Report{Intervals: []Interval{}, Error: text}
	r.Start = Start{Version: "roceperf " + Version, SystemInfo: systemInfo(),
		Timestamp: Timestamp{Time: now.UTC().Format(iperfTime), TimeSecs: now.Unix()},
		TestStart: TestStart{Protocol: protocolUET}}
	r.End.UET = &UETEnd{Server: s.agentReport()}
	if err := r.WriteJSON(s.cfg.Out); err != nil {
		s.log.Warn("writing the report", "err", err)
	}
}

func (s *UETServer) agentReport() *UETServerAgent {
	return &UETServerAgent{Counters: s.ep.Counters(), Pacer: s.ep.PacerStats(), SideChannel: s.Stats()}
}

// rxCCCs are the endpoint's receiver CCCs of the client at addr.
func (s *UETServer) rxCCCs(addr netip.Addr) []pds.RxCCCInfo {
	var out []pds.RxCCCInfo
	for _, c := range s.ep.RxCCCs() {
		if c.Key.Src.Unmap() == addr {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b pds.RxCCCInfo) int { return int(a.TC) - int(b.TC) })
	return out
}

func (s *UETServer) printf(format string, args ...any) {
	if s.cfg.Out == nil || s.cfg.JSON {
		return
	}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	fmt.Fprintf(s.cfg.Out, format, args...)
}

// uetSession is one client's session: its request, the counters of its
// target PDCs as last read, its interval reports.
type uetSession struct {
	remote  netip.AddrPort // the side channel's peer
	local   netip.Addr     // the side channel's local address
	addr    netip.Addr     // the client's UET address
	req     uetRequest
	index   map[uint32]int // job ID → stream
	t0      time.Time
	stop    chan struct{}
	stopped chan struct{}

	mu        sync.Mutex
	seen      map[targetID]pds.TargetStats // every target PDC of the session, as last read
	prev      []UETReceiverStats           // at the last interval
	prevT     time.Duration
	intervals []Interval
	released  bool // guarded by the server's mu
}

// targetID names a target PDC's incarnation: the source's PDC ID and this
// end's (a PDC established again after it expired gets a new one).
type targetID struct{ spdcid, pdc uint16 }

func (s *UETServer) serveConn(c net.Conn) error {
	defer c.Close()
	r := bufio.NewReaderSize(c, 4<<10)
	_ = c.SetReadDeadline(time.Now().Add(s.lim.RequestTimeout))
	req, addr, rf := s.readRequest(r)
	if rf != nil {
		s.refuse(c, r, rf, uetLingerTime)
		return rf
	}
	ss := &uetSession{remote: addrPort(c.RemoteAddr()), local: addrPort(c.LocalAddr()).Addr(), addr: addr, req: *req,
		index: make(map[uint32]int, len(req.JobIDs)), seen: map[targetID]pds.TargetStats{},
		stop: make(chan struct{}), stopped: make(chan struct{}), prev: make([]UETReceiverStats, len(req.JobIDs))}
	for i, id := range req.JobIDs {
		ss.index[id] = i
	}
	if rf := s.reserve(ss); rf != nil {
		s.refuse(c, r, rf, uetLingerTime)
		return rf
	}
	defer s.release(ss)
	if rf := s.waitStale(addr); rf != nil {
		s.refuse(c, r, rf, uetLingerTime)
		return rf
	}
	ss.t0 = time.Now()
	if err := writeLine(c, s.lim.RequestTimeout, uetReply{Addr: s.UETAddr().String()}); err != nil {
		return err
	}
	s.count(func(st *UETServerStats) { st.Accepted++ })
	s.printSession(ss)
	go s.sample(ss)

	// The session lasts as long as its transfer: wait for the finish; a
	// closed connection ends it too.
	_ = c.SetReadDeadline(ss.t0.Add(s.lim.MaxSessionDuration))
	cause, msg, err := s.readFinish(r)
	close(ss.stop)
	<-ss.stopped
	if err != nil {
		if cause == "" {
			s.printf("session from %s ended without its summary (the client went away)\n%s\n", ss.remote, dashLine)
			return fmt.Errorf("uet session from %v: %w", ss.remote, err)
		}
		s.count(func(st *UETServerStats) { st.Aborted[cause]++ })
		s.printf("roceperf: session from %s: %s\n%s\n", ss.remote, msg, dashLine)
		_ = writeLine(c, s.lim.RequestTimeout, uetResult{Error: msg, Cause: cause})
		linger(c, r, uetLingerTime)
		return fmt.Errorf("uet session from %v: %s", ss.remote, msg)
	}
	ss.track(s.ep.Targets())
	res := uetResult{Streams: ss.totals()}
	s.finish(ss, res.Streams)
	s.release(ss)
	return writeLine(c, s.lim.RequestTimeout, res)
}

// readRequest reads the request line and checks it, before anything is
// held for the session.
func (s *UETServer) readRequest(r *bufio.Reader) (*uetRequest, netip.Addr, *refusal) {
	lim := &s.lim
	line, err := readLine(r, lim.MaxRequestBytes)
	switch {
	case errors.Is(err, errLineTooLong):
		return nil, netip.Addr{}, uetRefuse(UETRefusedRequestBytes, "request line over %d bytes: this server allows 1..%d (max_request_bytes)", lim.MaxRequestBytes, lim.MaxRequestBytes)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, netip.Addr{}, uetRefuse(UETRefusedTimeout, "no request line within %v (request_timeout)", lim.RequestTimeout)
	case errors.Is(err, errNoNewline):
		return nil, netip.Addr{}, uetRefuse(UETRefusedMalformed, "request: %v: a request is one JSON object on one line", err)
	case err != nil:
		return nil, netip.Addr{}, uetRefuse(UETRefusedNoRequest, "no request line: %v", err)
	}
	req := new(uetRequest)
	if err := json.Unmarshal(line, req); err != nil {
		return nil, netip.Addr{}, uetRefuse(UETRefusedMalformed, "request: %v: a request is one JSON object on one line", err)
	}
	addr, rf := s.check(req)
	return req, addr, rf
}

// check applies the per-session rules to a request and returns the
// client's UET address.
func (s *UETServer) check(req *uetRequest) (netip.Addr, *refusal) {
	lim := &s.lim
	switch {
	case req.Transport != TransportUET:
		t := req.Transport
		if t == "" {
			t = TransportRoCEv2 // a RoCEv2 client's request has no transport
		}
		return netip.Addr{}, uetRefuse(UETRefusedTransport, "transport %s: this server serves uet (the client must use transport uet)", clip(t, 32))
	case req.UETVersion != uetProtocolVersion:
		return netip.Addr{}, uetRefuse(UETRefusedVersion, "uet_version %d: this server speaks %d", req.UETVersion, uetProtocolVersion)
	case req.Streams < 1 || req.Streams > lim.MaxStreams:
		return netip.Addr{}, uetRefuse(UETRefusedStreams, "streams %d: this server allows 1..%d per session (max_streams)", req.Streams, lim.MaxStreams)
	case len(req.JobIDs) != req.Streams:
		return netip.Addr{}, uetRefuse(UETRefusedJobIDs, "job_ids: %d for %d streams: one per stream", len(req.JobIDs), req.Streams)
	case req.MessageBytes < 1 || req.MessageBytes > lim.MaxMessageBytes:
		return netip.Addr{}, uetRefuse(UETRefusedMessageBytes, "message_bytes %d: this server allows 1..%d (max_message_bytes)", req.MessageBytes, lim.MaxMessageBytes)
	case req.CC != "" && !slices.Contains(pds.CCModeNames(), req.CC):
		return netip.Addr{}, uetRefuse(UETRefusedMalformed, "cc %q: must be %s", clip(req.CC, 32), ccModeNames())
	}
	seen := make(map[uint32]bool, len(req.JobIDs))
	for i, id := range req.JobIDs {
		switch {
		case id > maxJobID:
			return netip.Addr{}, uetRefuse(UETRefusedJobIDs, "job_ids[%d] %d: must be 0..%d (24 bits)", i, id, maxJobID)
		case seen[id]:
			return netip.Addr{}, uetRefuse(UETRefusedJobIDs, "job_ids[%d] %d: given twice: one job per stream", i, id)
		}
		seen[id] = true
	}
	addr, err := netip.ParseAddr(req.Addr)
	addr = addr.Unmap()
	mine := s.UETAddr().Addr().Unmap()
	if err != nil || addr.IsUnspecified() || addr.IsMulticast() || addr.Is4() != mine.Is4() {
		family := "IPv4"
		if mine.Is6() {
			family = "IPv6"
		}
		return netip.Addr{}, uetRefuse(UETRefusedAddr, "uet_addr %q: must be a unicast %s address (this server's family)", clip(req.Addr, 64), family)
	}
	return addr, nil
}

// reserve takes a session slot for ss, or says why not.
func (s *UETServer) reserve(ss *uetSession) *refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.mu.stats
	switch {
	case st.Sessions+1 > s.lim.MaxSessions:
		return uetRefuse(UETRefusedSessions, "sessions %d: this server allows 1..%d at once (max_sessions)", st.Sessions+1, s.lim.MaxSessions)
	case s.mu.sessions[ss.addr] != nil:
		// One endpoint per address: this is another client's, or this
		// client's previous one that has not finished.
		return uetRefuse(UETRefusedBusy, "uet_addr %s: a session from this address is in progress", ss.addr)
	}
	st.Sessions++
	st.Streams += len(ss.req.JobIDs)
	s.mu.sessions[ss.addr] = ss
	return nil
}

// release frees ss's slot, once (the result is written after it, so that
// the client's next session from the same address finds the slot free).
func (s *UETServer) release(ss *uetSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.released {
		return
	}
	ss.released = true
	s.mu.stats.Sessions--
	s.mu.stats.Streams -= len(ss.req.JobIDs)
	delete(s.mu.sessions, ss.addr)
}

// waitStale waits until no target PDC from addr is left: an earlier
// session's, whose client closed its endpoint without closing them, so
// that the new session's counters are its own (pds itself replaces a PDC
// whose SYN brings a new start PSN). They expire twice the idle timeout after
// their last packet.
func (s *UETServer) waitStale(addr netip.Addr) *refusal {
	wait := 2*s.idle + 500*time.Millisecond
	deadline := time.Now().Add(wait)
	for {
		n := 0
		for _, t := range s.ep.Targets() {
			if t.Src.Unmap() == addr {
				n++
			}
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return uetRefuse(UETRefusedBusy, "uet_addr %s: %d PDC(s) of an earlier session from this address still open after %v; try again", addr, n, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readFinish reads the finish line. A cause says the server should answer
// (the session ran out of time, or the line is not a finish); without
// one, the connection is gone.
func (s *UETServer) readFinish(r *bufio.Reader) (cause, msg string, err error) {
	line, err := readLine(r, uetFinishBytes)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return UETAbortedDuration, fmt.Sprintf("session over %v without its finish line (max_session_duration)", s.lim.MaxSessionDuration), err
	case errors.Is(err, errLineTooLong):
		return UETAbortedFinish, fmt.Sprintf("finish line over %d bytes: expected {\"finish\":true}", uetFinishBytes), err
	case err != nil:
		return "", "", err
	}
	var fin uetFinish
	if err := json.Unmarshal(line, &fin); err != nil || !fin.Finish {
		msg := "finish: expected {\"finish\":true}"
		if err != nil {
			msg = fmt.Sprintf("finish: %v: expected {\"finish\":true}", err)
		}
		return UETAbortedFinish, msg, errors.New(msg)
	}
	return "", "", nil
}

// track records the session's target PDCs among ts.
func (ss *uetSession) track(ts []pds.TargetStats) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, t := range ts {
		if t.Src.Unmap() != ss.addr {
			continue
		}
		if _, ok := ss.index[t.JobID]; ok {
			ss.seen[targetID{t.SPDCID, t.PDC}] = t
		}
	}
}

// totals sums the session's PDCs per stream, in the request's order.
// Verify errors count only in a verified session: a target checks every
// payload.
func (ss *uetSession) totals() []UETReceiverStats {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]UETReceiverStats, len(ss.req.JobIDs))
	for i, id := range ss.req.JobIDs {
		out[i].JobID = id
	}
	for _, t := range ss.seen {
		out[ss.index[t.JobID]].add(&t)
	}
	if !ss.req.Verify {
		for i := range out {
			out[i].VerifyErrors = 0
		}
	}
	return out
}

// sample reads the session's PDCs every uetTrackPeriod and takes the
// interval reports, until the session ends.
func (s *UETServer) sample(ss *uetSession) {
	defer close(ss.stopped)
	track := time.NewTicker(uetTrackPeriod)
	defer track.Stop()
	var tick <-chan time.Time
	if s.cfg.Interval > 0 {
		tk := time.NewTicker(s.cfg.Interval)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		select {
		case <-ss.stop:
			return
		case <-track.C:
			ss.track(s.ep.Targets())
		case <-tick:
			ss.track(s.ep.Targets())
			iv := ss.take(time.Since(ss.t0))
			if s.cfg.Out != nil && !s.cfg.JSON {
				s.outMu.Lock()
				writeUETServerInterval(s.cfg.Out, &iv)
				s.outMu.Unlock()
			}
		}
	}
}

// take is the receiver's interval: message bytes completed, CE marks and
// duplicates seen.
func (ss *uetSession) take(now time.Duration) Interval {
	tot := ss.totals()
	var iv Interval
	start, end := ss.prevT.Seconds(), now.Seconds()
	secs := end - start
	iv.Sum = IntervalSum{Start: start, End: end, Seconds: secs}
	for i, t := range tot {
		p := &ss.prev[i]
		is := IntervalStream{ID: uint32(i + 1), Start: start, End: end, Seconds: secs,
			Bytes: t.MessageBytes - p.MessageBytes, CEReceived: t.CEReceived - p.CEReceived, Duplicates: t.Duplicates - p.Duplicates}
		is.BitsPerSecond = rate(is.Bytes, secs)
		iv.Streams = append(iv.Streams, is)
		iv.Sum.Bytes += is.Bytes
		iv.Sum.CEReceived += is.CEReceived
		iv.Sum.Duplicates += is.Duplicates
	}
	iv.Sum.BitsPerSecond = rate(iv.Sum.Bytes, secs)
	copy(ss.prev, tot)
	ss.prevT = now
	ss.intervals = append(ss.intervals, iv)
	return iv
}

func writeUETServerInterval(w io.Writer, iv *Interval) {
	for _, st := range iv.Streams {
		fmt.Fprintf(w, "%s  %6d  %6d\n", intervalPrefix(streamID(st.ID), st.Start, st.End, st.Bytes, st.BitsPerSecond), st.CEReceived, st.Duplicates)
	}
	if len(iv.Streams) > 1 {
		fmt.Fprintf(w, "%s  %6d  %6d\n", intervalPrefix("[SUM]", iv.Sum.Start, iv.Sum.End, iv.Sum.Bytes, iv.Sum.BitsPerSecond), iv.Sum.CEReceived, iv.Sum.Duplicates)
		fmt.Fprintln(w, sepLine)
	}
}

// printSession prints an accepted session's streams and parameters.
func (s *UETServer) printSession(ss *uetSession) {
	if s.cfg.Out == nil || s.cfg.JSON {
		return
	}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	w := s.cfg.Out
	fmt.Fprintf(w, "Accepted connection from %s, port %d\n", ss.remote.Addr(), ss.remote.Port())
	for i, id := range ss.req.JobIDs {
		fmt.Fprintf(w, "%s local %s port %d job %#x from %s port %d\n", streamID(uint32(i+1)), s.UETAddr().Addr(), s.UETAddr().Port(), id, ss.addr, s.UETAddr().Port())
	}
	verify := ""
	if ss.req.Verify {
		verify = ", verify"
	}
	fmt.Fprintf(w, "Session: UET, %d streams, %d byte messages, mtu %d, dscp %d, cc %s%s\n", len(ss.req.JobIDs), ss.req.MessageBytes, ss.req.MTU, ss.req.DSCP, ss.req.cc(), verify)
	if s.cfg.Interval > 0 {
		fmt.Fprintln(w, uetServerHeader)
	}
}

// finish prints the receiver's summary (or its JSON report).
func (s *UETServer) finish(ss *uetSession, streams []UETReceiverStats) {
	if s.cfg.Out == nil {
		return
	}
	end := time.Since(ss.t0).Seconds()
	r := &Report{Intervals: ss.intervals}
	if r.Intervals == nil {
		r.Intervals = []Interval{}
	}
	r.Start = Start{
		Version:    "roceperf " + Version,
		SystemInfo: systemInfo(),
		Timestamp:  Timestamp{Time: ss.t0.UTC().Format(iperfTime), TimeSecs: ss.t0.Unix()},
		TestStart: TestStart{Protocol: protocolUET, NumStreams: len(streams), Blksize: ss.req.MessageBytes,
			Duration: ss.req.Duration.Seconds(), Bytes: ss.req.Bytes, MTU: ss.req.MTU,
			TOS: int(ss.req.DSCP)<<2 | ecnECT0, DSCP: int(ss.req.DSCP), Op: "write", CC: ss.req.cc(), Verify: ss.req.Verify},
	}
	e := &r.End
	e.SumReceived = Sum{End: end, Seconds: end}
	for i, t := range streams {
		r.Start.Connected = append(r.Start.Connected, Connected{
			LocalHost: s.UETAddr().Addr().String(), LocalPort: s.UETAddr().Port(),
			RemoteHost: ss.addr.String(), RemotePort: s.UETAddr().Port(), JobID: t.JobID,
		})
		rcv := StreamSummary{ID: uint32(i + 1), JobID: t.JobID, End: end, Seconds: end, Bytes: t.MessageBytes, Messages: t.Messages}
		rcv.RecvBytes, rcv.RecvMessages, rcv.VerifyErrors = t.MessageBytes, t.Messages, t.VerifyErrors
		rcv.BitsPerSecond = rate(rcv.Bytes, end)
		e.Streams = append(e.Streams, EndStream{Receiver: rcv})
		e.SumReceived.Bytes += rcv.Bytes
		e.SumReceived.Messages += rcv.Messages
	}
	e.SumReceived.BitsPerSecond = rate(e.SumReceived.Bytes, end)
	e.Counters.Server = []agent.QPReport{}
	e.UET = &UETEnd{Receiver: streams, Server: s.agentReport(), RxCCCs: s.rxCCCs(ss.addr)}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	w := s.cfg.Out
	if s.cfg.JSON {
		if err := r.WriteJSON(w); err != nil {
			s.log.Warn("writing the report", "err", err)
		}
		return
	}
	fmt.Fprintln(w, sepLine)
	fmt.Fprintln(w, uetServerHeader)
	var ce, dup uint64
	for i, st := range e.Streams {
		t := &streams[i]
		ce += t.CEReceived
		dup += t.Duplicates
		fmt.Fprintf(w, "%s  %6d  %6d  receiver\n", intervalPrefix(streamID(st.Receiver.ID), 0, end, st.Receiver.Bytes, st.Receiver.BitsPerSecond), t.CEReceived, t.Duplicates)
	}
	if len(e.Streams) > 1 {
		fmt.Fprintf(w, "%s  %6d  %6d  receiver\n", intervalPrefix("[SUM]", 0, end, e.SumReceived.Bytes, e.SumReceived.BitsPerSecond), ce, dup)
	}
	// Trimmed packets are counted by the endpoint, not per PDC: since the
	// server started (end.uet.server.trimmed_received in JSON).
	fmt.Fprintf(w, "%s trimmed_received=%d (since start)\n", uetReceiverLine(streams, ss.req.Verify), e.UET.Server.TrimmedReceived)
	for i := range e.UET.RxCCCs {
		fmt.Fprintln(w, rxCCCLine(&e.UET.RxCCCs[i]))
	}
	fmt.Fprintln(w, creditLine(e.UET.Server))
	fmt.Fprintf(w, "%s\n%s\n", uetServerLine(e.UET.Server), dashLine)
}

// checkTrimDSCP names the field of a trim code point pds would refuse:
// above 63, or the data's own DSCP.
func checkTrimDSCP(pc pds.Config) error {
	for _, t := range []struct {
		field Field
		v     uint8
	}{{FieldTrimDSCP, pc.TrimDSCP}, {FieldTrimLastHop, pc.TrimLastHopDSCP}} {
		if t.v > 63 || t.v != 0 && t.v == pc.DSCP {
			return configErr(t.field, t.v, "0..63 and not the data's DSCP (%d)", pc.DSCP)
		}
	}
	return nil
}

// rxCCCLine is a receiver CCC at the session's finish: its PDCs, and its
// source at the credit pacer when the client asks for credit.
func rxCCCLine(c *pds.RxCCCInfo) string {
	pdcs := "PDCs"
	if c.PDCs == 1 {
		pdcs = "PDC"
	}
	line := fmt.Sprintf("receiver ccc: %s -> %s tc %d, %d %s", c.Src, c.Dst, c.TC, c.PDCs, pdcs)
	src := c.Source
	if src == nil {
		return line + ", no credit asked"
	}
	return line + fmt.Sprintf(", rccc %s target_bytes=%d granted_bytes=%d grants=%d slow_pulls=%d slow_pull_bytes=%d stale_targets=%d",
		src.State, src.TargetBytes, src.GrantedBytes, src.Grants, src.SlowPulls, src.SlowPullBytes, src.StaleTargets)
}

// creditLine is the endpoint's RCCC receiver since it started: the credit
// it sent and was asked for, and its pacer.
func creditLine(sa *UETServerAgent) string {
	c, p := &sa.Counters, &sa.Pacer
	return fmt.Sprintf("rccc since start: credits_sent=%d credits_unsent=%d credit_acks_sent=%d credit_requests_received=%d credit_sources_reset=%d"+
		" pacer: sources=%d active=%d slow_pull=%d grants=%d granted_bytes=%d slow_pulls=%d slow_pull_bytes=%d targets=%d stale_targets=%d removed=%d caught_up=%d lost=%v",
		c.CreditsSent, c.CreditsUnsent, c.CreditAcksSent, c.CreditRequestsReceived, c.CreditSourcesReset,
		p.Sources, p.Active, p.SlowPull, p.Grants, p.GrantedBytes, p.SlowPulls, p.SlowPullBytes, p.Targets, p.StaleTargets, p.Removed, p.CaughtUp, p.Lost)
}

// uetServerLine lists what the server's endpoint dropped or refused and
// the sessions the side channel refused or cut, since it started; only
// non-zero causes.
func uetServerLine(sa *UETServerAgent) string {
	var parts []string
	add := func(name string, v uint64) {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", name, v))
		}
	}
	c := &sa.Counters
	add("malformed", c.Malformed)
	add("unknown_pdc", c.UnknownPDC)
	add("unsupported", c.Unsupported)
	add("out_of_window", c.OutOfWindow)
	add("pdc_refused", c.PDCRefused)
	add("ccc_refused", c.CCCRefused)
	add("send_errors", c.SendErrors)
	add("reply_overruns", c.ReplyOverruns)
	if byName(c.NacksSent) != "none" {
		parts = append(parts, "nacks_sent="+byName(c.NacksSent))
	}
	byCause := func(name string, m map[string]uint64) {
		var n uint64
		var each []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if m[k] > 0 {
				n += m[k]
				each = append(each, fmt.Sprintf("%s=%d", k, m[k]))
			}
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d (%s)", name, n, strings.Join(each, " ")))
		}
	}
	byCause("refused_sessions", sa.SideChannel.Refused)
	byCause("aborted_sessions", sa.SideChannel.Aborted)
	if len(parts) == 0 {
		return "server since start: no drops, no refused sessions"
	}
	return "server since start: " + strings.Join(parts, " ")
}
