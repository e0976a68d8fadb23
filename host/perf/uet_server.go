package perf

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/sidechan"
	"github.com/fabriclab/fabriclab/host/uet"
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

// UETServerStats is what a UET server holds now and what it turned away:
// the side channel's counters and the sessions' streams.
type UETServerStats struct {
	sidechan.Stats
	Streams int `json:"streams"` // the sessions' streams
}

// UETServer is a listening roceperf --transport uet server: a pds.Endpoint
// on the bind address's UDP 4793 (pktio.EntropyConn) and the UET side
// channel's TCP listener (18515). ListenUET opens both on the calling
// goroutine; Serve may run anywhere.
type UETServer struct {
	serverBase
	lim  UETLimits
	ep   *pds.Endpoint
	side *sidechan.Server[uetRequest]
	// idle is the endpoint's idle timeout (uetServerIdle, or the RTO of
	// a slowed fabric where that is longer).
	idle time.Duration

	mu struct {
		sync.Mutex
		streams  int
		sessions map[netip.Addr]*uetSession // by the client's UET address
	}
}

// ListenUET opens a UET server's endpoint and TCP listener. The endpoint
// needs a unicast address: cfg.Bind (or cfg.UETConn's).
func ListenUET(cfg ServerConfig) (*UETServer, error) {
	if err := cfg.checkShared(); err != nil {
		return nil, err
	}
	lim := cfg.UETLimits.withDefaults()
	if err := lim.validate(); err != nil {
		return nil, err
	}
	bind := cfg.Bind.Unmap()
	if cfg.UETConn == nil && (!bind.IsValid() || bind.IsUnspecified() || bind.IsMulticast()) {
		return nil, &ConfigError{Field: FieldBind, Value: cfg.Bind.String(), Must: "required with transport uet: a unicast address of this host (UET's UDP 4793 is opened per address)"}
	}
	pc := pds.DefaultConfig()
	// The endpoint checks every payload (pds.Config.Verify); a session
	// without --verify sends zeros, and its verify errors are not reported
	// (totals).
	pc.Logger, pc.IdleTimeout, pc.Verify = cfg.Logger, uetServerIdle, true
	pc.TrimDSCP, pc.TrimLastHopDSCP = cfg.TrimDSCP, cfg.TrimLastHopDSCP
	pc.Held = cfg.Held
	switch cfg.NP {
	case "":
	case NPOff:
		pc.NoECNEcho = true
	default:
		return nil, configErr(FieldNP, cfg.NP, "off (the target echoes no CE) or unset with transport uet: kernel and agent place RoCEv2's NP")
	}
	if cfg.LineRate != 0 {
		pc.LinkRate = cfg.LineRate
	}
	if cfg.BaseRTT != 0 {
		pc.BaseRTT = cfg.BaseRTT
	}
	if err := checkWires(cfg.Wires, cfg.Timescale); err != nil {
		return nil, err
	}
	pc.Wires = cfg.Wires
	if k := cfg.Timescale; k.K() != 1 {
		pc = pc.Slowed(k)
		// The idle timeout is the tool's (how long a finished session's
		// PDCs linger), not a fabric time.
		pc.IdleTimeout = max(uetServerIdle, pc.RTO)
	}
	if err := checkTrimDSCP(pc); err != nil {
		return nil, err
	}
	ep, _, err := openUET(cfg.UETConn, netip.AddrPortFrom(bind, uet.Port), cfg.SendPath, pc)
	if err != nil {
		return nil, err
	}
	if !bind.IsValid() {
		bind = ep.LocalAddr().Addr().Unmap()
	}
	s := &UETServer{lim: lim, ep: ep, idle: pc.IdleTimeout}
	if err := s.listen(cfg, bind); err != nil {
		_ = ep.Close()
		return nil, err
	}
	s.mu.sessions = map[netip.Addr]*uetSession{}
	s.side = sidechan.NewServer[uetRequest](uetHandler{s}, sidechan.Options{
		Limits:   lim.Limits,
		Logger:   cfg.Logger,
		OnRefuse: func(remote net.Addr, _, msg string) { s.reportRefusal(remote, msg) },
	})
	return s, nil
}

// UETAddr is the endpoint's address and UET port.
func (s *UETServer) UETAddr() netip.AddrPort { return s.ep.LocalAddr() }

// Endpoint is the server's UET endpoint (its PDCs and counters).
func (s *UETServer) Endpoint() *pds.Endpoint { return s.ep }

// Stats returns what the side channel holds and has refused.
func (s *UETServer) Stats() UETServerStats {
	st := UETServerStats{Stats: s.side.Stats()}
	s.mu.Lock()
	st.Streams = s.mu.streams
	s.mu.Unlock()
	return st
}

// Serve serves UET sessions until ctx is done, or with OneOff until the
// first session ends. A cancelled ctx closes the listener and ends the
// sessions in progress; Serve then returns nil.
func (s *UETServer) Serve(ctx context.Context) error {
	return s.serve(ctx, fmt.Sprintf("UET on UDP %d", s.UETAddr().Port()), s.side.Serve)
}

// Close stops listening, ends the sessions and closes the endpoint.
func (s *UETServer) Close() error { return s.close(s.ep.Close) }

// reportRefusal reports a connection the side channel turned away.
func (s *UETServer) reportRefusal(remote net.Addr, msg string) {
	s.out.refused(remote, msg, func(r *Report) {
		r.Start.TestStart = TestStart{Protocol: protocolUET}
		r.End.UET = &UETEnd{Server: s.agentReport()}
	})
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

// uetSession is one client's session: its request, the counters of its
// target PDCs as last read, its interval reports.
type uetSession struct {
	sessionSampling
	s      *UETServer
	remote netip.AddrPort // the side channel's peer
	local  netip.Addr     // the side channel's local address
	addr   netip.Addr     // the client's UET address
	req    uetRequest
	index  map[uint32]int // job ID → stream

	mu   sync.Mutex
	seen map[targetID]pds.TargetStats // every target PDC of the session, as last read
	prev []UETReceiverStats           // at the last interval
}

// targetID names a target PDC's incarnation: the source's PDC ID and this
// end's (a PDC established again after it expired gets a new one).
type targetID struct{ spdcid, pdc uint16 }

// uetHandler is UET's side of the side channel (host/sidechan): a
// session is the client's streams, which it opens itself (a target PDC
// is established by its first packet), and the counters the server
// keeps of them.
type uetHandler struct{ s *UETServer }

func (h uetHandler) Check(_ net.Conn, req *uetRequest) *sidechan.Refusal {
	_, rf := h.s.check(req)
	return rf
}

// Open takes the client's address for the session, and waits for an
// earlier session's PDCs from it to expire.
func (h uetHandler) Open(c net.Conn, req *uetRequest) (sidechan.Session, *sidechan.Refusal) {
	s := h.s
	addr, rf := s.check(req)
	if rf != nil {
		return nil, rf
	}
	ss := &uetSession{sessionSampling: newSessionSampling(),
		s: s, remote: addrPort(c.RemoteAddr()), local: addrPort(c.LocalAddr()).Addr(), addr: addr, req: *req,
		index: make(map[uint32]int, len(req.JobIDs)), seen: map[targetID]pds.TargetStats{}, prev: make([]UETReceiverStats, len(req.JobIDs))}
	for i, id := range req.JobIDs {
		ss.index[id] = i
	}
	if rf := s.reserve(ss); rf != nil {
		return nil, rf
	}
	if rf := s.waitStale(addr); rf != nil {
		s.release(ss)
		return nil, rf
	}
	ss.t0 = time.Now()
	return ss, nil
}

func (ss *uetSession) Reply() any { return uetReply{Addr: ss.s.UETAddr().String()} }

func (ss *uetSession) Started() {
	ss.s.printSession(ss)
	go ss.s.sample(ss)
}

func (ss *uetSession) Finish() any {
	ss.halt()
	ss.track(ss.s.ep.Targets())
	res := uetResult{Streams: ss.totals()}
	ss.s.finish(ss, res.Streams)
	return res
}

func (ss *uetSession) Fail(cause, msg string) {
	ss.halt()
	if cause == "" {
		ss.s.out.printf("session from %s ended without its summary (the client went away)\n%s\n", ss.remote, dashLine)
		return
	}
	ss.s.out.printf("roceperf: session from %s: %s\n%s\n", ss.remote, msg, dashLine)
}

func (ss *uetSession) Close() { ss.s.release(ss) }

// check applies the per-session rules to a request and returns the
// client's UET address.
func (s *UETServer) check(req *uetRequest) (netip.Addr, *sidechan.Refusal) {
	lim := &s.lim
	switch {
	case req.Transport != TransportUET:
		t := req.Transport
		if t == "" {
			t = TransportRoCEv2 // a RoCEv2 client's request has no transport
		}
		return netip.Addr{}, sidechan.Refuse(UETRefusedTransport, "transport %s: this server serves uet (the client must use transport uet)", sidechan.Clip(t, 32))
	case req.UETVersion != uetProtocolVersion:
		return netip.Addr{}, sidechan.Refuse(UETRefusedVersion, "uet_version %d: this server speaks %d", req.UETVersion, uetProtocolVersion)
	case req.Streams < 1 || req.Streams > lim.MaxStreams:
		return netip.Addr{}, sidechan.Refuse(UETRefusedStreams, "streams %d: this server allows 1..%d per session (max_streams)", req.Streams, lim.MaxStreams)
	case len(req.JobIDs) != req.Streams:
		return netip.Addr{}, sidechan.Refuse(UETRefusedJobIDs, "job_ids: %d for %d streams: one per stream", len(req.JobIDs), req.Streams)
	case req.MessageBytes < 1 || req.MessageBytes > lim.MaxMessageBytes:
		return netip.Addr{}, sidechan.Refuse(UETRefusedMessageBytes, "message_bytes %d: this server allows 1..%d (max_message_bytes)", req.MessageBytes, lim.MaxMessageBytes)
	case req.CC != "" && !slices.Contains(pds.CCModeNames(), req.CC):
		return netip.Addr{}, sidechan.Refuse(UETRefusedMalformed, "cc %q: must be %s", sidechan.Clip(req.CC, 32), ccModeNames())
	}
	seen := make(map[uint32]bool, len(req.JobIDs))
	for i, id := range req.JobIDs {
		switch {
		case id > maxJobID:
			return netip.Addr{}, sidechan.Refuse(UETRefusedJobIDs, "job_ids[%d] %d: must be 0..%d (24 bits)", i, id, maxJobID)
		case seen[id]:
			return netip.Addr{}, sidechan.Refuse(UETRefusedJobIDs, "job_ids[%d] %d: given twice: one job per stream", i, id)
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
		return netip.Addr{}, sidechan.Refuse(UETRefusedAddr, "uet_addr %q: must be a unicast %s address (this server's family)", sidechan.Clip(req.Addr, 64), family)
	}
	return addr, nil
}

// reserve takes the client's address for ss, or says why not.
func (s *UETServer) reserve(ss *uetSession) *sidechan.Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.sessions[ss.addr] != nil {
		// One endpoint per address: this is another client's, or this
		// client's previous one that has not finished.
		return sidechan.Refuse(UETRefusedBusy, "uet_addr %s: a session from this address is in progress", ss.addr)
	}
	s.mu.streams += len(ss.req.JobIDs)
	s.mu.sessions[ss.addr] = ss
	return nil
}

// release frees what reserve took; the side channel frees the session
// before it writes the result, so that the client's next session from
// the same address finds the address free.
func (s *UETServer) release(ss *uetSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.streams -= len(ss.req.JobIDs)
	delete(s.mu.sessions, ss.addr)
}

// waitStale waits until no target PDC from addr is left: an earlier
// session's, whose client closed its endpoint without closing them, so
// that the new session's counters are its own (pds itself replaces a PDC
// whose SYN brings a new start PSN). They expire twice the idle timeout after
// their last packet.
func (s *UETServer) waitStale(addr netip.Addr) *sidechan.Refusal {
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
			return sidechan.Refuse(UETRefusedBusy, "uet_addr %s: %d PDC(s) of an earlier session from this address still open after %v; try again", addr, n, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	track := time.NewTicker(uetTrackPeriod)
	defer track.Stop()
	sample(&s.serverBase, &ss.sessionSampling, ss.take, writeUETServerInterval, track.C, func() bool {
		ss.track(s.ep.Targets())
		return true
	})
}

// take reads the session's PDCs and returns the receiver's interval:
// message bytes completed, CE marks and duplicates seen.
func (ss *uetSession) take(now time.Duration) Interval {
	ss.track(ss.s.ep.Targets())
	tot := ss.totals()
	iv := newInterval(ss.prevT, now)
	for i, t := range tot {
		p := &ss.prev[i]
		is := IntervalStream{ID: uint32(i + 1),
			Bytes: t.MessageBytes - p.MessageBytes, CEReceived: t.CEReceived - p.CEReceived, Duplicates: t.Duplicates - p.Duplicates}
		iv.add(is)
		iv.Sum.CEReceived += is.CEReceived
		iv.Sum.Duplicates += is.Duplicates
	}
	copy(ss.prev, tot)
	ss.prevT = now
	return iv
}

func writeUETServerInterval(w io.Writer, iv *Interval) {
	writeServerRows(w, iv, "%s  %6d  %6d\n", iv.Sum.CEReceived, iv.Sum.Duplicates,
		func(st *IntervalStream) (uint64, uint64) { return st.CEReceived, st.Duplicates })
}

// printSession prints an accepted session's streams and parameters.
func (s *UETServer) printSession(ss *uetSession) {
	s.out.text(func(w io.Writer) { s.writeSession(w, ss) })
}

func (s *UETServer) writeSession(w io.Writer, ss *uetSession) {
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
	r := newServerReport(ss.t0, ss.intervals, TestStart{Protocol: protocolUET, NumStreams: len(streams), Blksize: ss.req.MessageBytes,
		Duration: ss.req.Duration.Seconds(), Bytes: ss.req.Bytes, MTU: ss.req.MTU,
		TOS: int(ss.req.DSCP)<<2 | ecnECT0, DSCP: int(ss.req.DSCP), Op: "write", CC: ss.req.cc(), Verify: ss.req.Verify})
	e := &r.End
	span := Sum{End: end, Seconds: end}
	e.SumReceived = span
	for i, t := range streams {
		r.Start.Connected = append(r.Start.Connected, Connected{
			LocalHost: s.UETAddr().Addr().String(), LocalPort: s.UETAddr().Port(),
			RemoteHost: ss.addr.String(), RemotePort: s.UETAddr().Port(), JobID: t.JobID,
		})
		rcv := StreamSummary{ID: uint32(i + 1), JobID: t.JobID, Sum: span}
		rcv.Bytes, rcv.Messages = t.MessageBytes, t.Messages
		rcv.RecvBytes, rcv.RecvMessages, rcv.VerifyErrors = t.MessageBytes, t.Messages, t.VerifyErrors
		e.addStream(StreamSummary{}, rcv)
	}
	e.setSumRates()
	e.Counters.Server = []agent.QPReport{}
	e.UET = &UETEnd{Receiver: streams, Server: s.agentReport(), RxCCCs: s.rxCCCs(ss.addr)}
	s.out.report(r, func(w io.Writer) { writeUETSummary(w, e, streams, end, ss.req.Verify) })
}

// writeUETSummary is the receiver's summary as text.
func writeUETSummary(w io.Writer, e *End, streams []UETReceiverStats, end float64, verify bool) {
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
	fmt.Fprintf(w, "%s trimmed_received=%d (since start)\n", uetReceiverLine(streams, verify), e.UET.Server.TrimmedReceived)
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
	var l serverLine
	c := &sa.Counters
	l.add("malformed", c.Malformed)
	l.add("unknown_pdc", c.UnknownPDC)
	l.add("unsupported", c.Unsupported)
	l.add("out_of_window", c.OutOfWindow)
	l.add("pdc_refused", c.PDCRefused)
	l.add("ccc_refused", c.CCCRefused)
	l.add("send_errors", c.SendErrors)
	l.add("reply_overruns", c.ReplyOverruns)
	if byName(c.NacksSent) != "none" {
		l.addText("nacks_sent=" + byName(c.NacksSent))
	}
	return l.String(&sa.SideChannel.Stats)
}
