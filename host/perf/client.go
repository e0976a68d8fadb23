package perf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/pktio"
)

// ecnECT0 is the ECN field of every RoCE packet sent (RFC 3168).
const ecnECT0 = 0x2

// clientBufferBytes is the client QPs' registered memory: nothing is
// written to them, so one page will do.
const clientBufferBytes = 4096

// RunClient runs one test against a server and returns its report.
//
// It opens its RoCEv2 port (pktio.ListenRoCE: UDP 4791, shared with the
// other agents of the host) and an agent, sets up the QPs
// over the side channel (Agent.DialConn: the server's QPs become DCQCN
// notification points with the profile's min_time_between_cnps and the CNP
// DSCP), starts a stream on every QP, takes an interval report every
// Interval, stops the streams at the deadline (or when -n bytes are
// acknowledged), waits for the last ACKs (at most 5 s plus the ACK
// timeout), fetches the server's counters (Session.Finish) and closes
// everything. Text goes to Out as the run goes; with JSON the report goes
// to Out at the end.
//
// Every socket is opened on the calling goroutine, so a caller on a
// thread locked into a network namespace runs the whole test there.
//
// Errors before the test starts (bad config, unreachable server, port in
// use) return a nil report. A cancelled ctx ends the run early: the report
// covers what ran and has Interrupted set, and the error is nil. A QP that
// fails, a stream that does not drain, or --verify mismatches at the
// server return the report and an error.
//
// With Bind set, the RoCE packets and the side channel leave from it and
// the server sends its ACKs and CNPs there; without, the route to the
// server picks the address and the server uses the side channel's source.
//
// With Transport TransportUET it runs UET instead (a pds.Endpoint on UDP
// 4793 of -B or the route's source, a Sender per stream against a UET
// server's endpoint, the UET side channel), with the same timing, reports
// and errors.
func RunClient(ctx context.Context, cfg ClientConfig) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	if c.isUET() {
		return runUET(ctx, c)
	}
	params, err := c.dcqcnParams()
	if err != nil {
		return nil, err
	}
	t, err := c.target(ctx)
	if err != nil {
		return nil, err
	}
	host, port, server, bind, raddr := t.host, t.port, t.server, t.bind, t.server.Addr()
	// The address the server sends RoCE packets to: -B, or the source the
	// route to the server picks (the agent announces its bound address, or
	// the side channel's source when bound to a wildcard).
	local, err := t.local()
	if err != nil {
		return nil, err
	}
	// The RoCE port sends from -B or from the route's address.
	laddr := netip.IPv4Unspecified()
	if raddr.Is6() {
		laddr = netip.IPv6Unspecified()
	}
	if bind.IsValid() {
		laddr = bind
	}
	udpPort := uint16(c.UDPPort)
	if udpPort == 0 {
		udpPort = DefaultUDPPort
	}
	// The line rate is the NIC's: its QPs share it whatever their Rc. The
	// kernel RP takes the CNPs of DCQCN's QPs.
	portRate := c.LineRate
	rp := agent.OffloadAgent
	mode := c.CC
	if mode == agent.CCDCQCN {
		portRate = c.effectiveLineRate()
		rp = agent.Offload(c.RP)
		if c.RP == RPOff {
			// roce_rp/enable 0: no rate limiter, the CNPs counted as ignored.
			mode, rp = agent.CCNone, agent.OffloadAgent
		}
	}
	k := c.Timescale
	rh, err := agent.OpenHost(agent.HostConfig{
		Addr: netip.AddrPortFrom(laddr, udpPort), Port: pktio.RoCEOptions{SendPath: c.SendPath},
		NP: agent.OffloadAgent, RP: rp, Agent: agent.Config{Logger: c.Logger, PortRate: k.Rate(portRate), Held: c.Held, HostQueue: c.HostQueue, PPFCSources: c.PPFCSources,
			PPFCMaxPause: c.PPFCMaxPause, PPFCWatchdog: c.PPFCWatchdog},
	})
	if err != nil {
		return nil, hostErr(err, FieldRP)
	}
	defer rh.Close()
	ag, udp := rh.Agent, rh.Conn
	if c.OnAgent != nil {
		c.OnAgent(ag)
	}

	qc := agent.DefaultQPConfig()
	qc.MTU, qc.DSCP, qc.CC = c.MTU, c.DSCP, mode
	if mode == agent.CCDCQCN {
		qc.DCQCN = params
	} else {
		qc.RateCap = portRate
	}
	qc.NP = false // the client's QPs receive only ACKs and CNPs
	qc.CNPDSCP = params.CNPDSCP
	qc.PKey = c.PKey
	qc.Window, qc.AckReqEvery, qc.MaxBurst = c.Window, c.AckReqEvery, c.MaxBurst
	qc.InflightTime = c.InflightTime
	qc.AckTimeout, qc.RetryCount = c.AckTimeout, c.RetryCount
	qc.BufferBytes = clientBufferBytes
	qc = qc.Slowed(k)
	req := agent.SessionRequest{
		MessageBytes: c.MessageBytes,
		Op:           c.Op.String(),
		Verify:       c.Verify,
		NP:           true,
		// The server's NP runs at the client's slowed period.
		CNPPeriod:   k.Time(params.MinTimeBetweenCNPs),
		CNPDSCP:     params.CNPDSCP,
		AckReqEvery: c.AckReqEvery,
		Bytes:       c.Bytes,
	}
	if c.Bytes == 0 {
		req.Duration = c.Omit + c.Duration
	}
	// The side channel leaves from -B too, so the server sees one address.
	dctx, cancel := context.WithTimeout(ctx, DialTimeout)
	tc, err := dialSide(dctx, server, bind)
	if err != nil {
		cancel()
		return nil, err
	}
	sess, err := ag.DialConn(dctx, tc, c.QPs, qc, req)
	cancel()
	if err != nil {
		return nil, dialErr(ctx, server, err)
	}
	defer sess.Close()

	r := &Report{}
	r.Start = c.startReport(host, port, params, local, udp.LocalAddr().Port(), sess)
	r.Start.TestStart.RawForPorts = rh.RawForPorts
	text := !c.JSON && c.Out != nil
	if text {
		writeStartText(c.Out, r)
		if c.Perftest {
			writePerftestPreamble(c.Out, r)
		}
		if c.Interval > 0 {
			fmt.Fprintln(c.Out, clientHeader)
		}
	}
	if err := c.awaitGate(ctx); err != nil {
		return nil, err
	}
	st, runErr := c.run(ctx, r, sess, text)
	if runErr == nil && c.OnFinished != nil {
		c.OnFinished()
	}

	// The server's counters, then the summary.
	fctx, fcancel := finishContext(ctx)
	res, ferr := sess.Finish(fctx)
	fcancel()
	if ferr != nil && runErr == nil {
		runErr = fmt.Errorf("the server's counters: %w", ferr)
	}
	c.endReport(r, st, sess, res, ag.Counters())
	r.End.Counters.ClientUDP = udpStats(udp.Stats())
	if verr := r.verifyErrors(); c.Verify && verr > 0 && runErr == nil {
		runErr = fmt.Errorf("payload check: %d packet(s) did not match the sender's pattern at the server (verify_errors)", verr)
	}
	return c.writeReport(r, runErr, func(w io.Writer) {
		writeSummaryText(w, r)
		if r.End.Perftest != nil {
			writePerftestSummary(w, r.End.Perftest)
		}
	})
}

// awaitGate holds a set-up run at its StartGate, if it has one, after
// OnReady: ctx's cause if ctx ends first.
func (c *ClientConfig) awaitGate(ctx context.Context) error {
	if c.StartGate == nil {
		return nil
	}
	if c.OnReady != nil {
		c.OnReady()
	}
	select {
	case <-c.StartGate:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// writeReport records runErr in r and writes r to Out: as JSON, or its
// text summary with text.
func (c *ClientConfig) writeReport(r *Report, runErr error, text func(io.Writer)) (*Report, error) {
	if runErr != nil {
		r.Error = runErr.Error()
	}
	switch {
	case c.Out == nil:
	case c.JSON:
		if err := r.WriteJSON(c.Out); err != nil && runErr == nil {
			runErr = fmt.Errorf("writing the report: %w", err)
		}
	default:
		text(c.Out)
	}
	return r, runErr
}

// finishContext bounds the exchange that fetches the server's counters:
// it runs even when ctx ended the run.
func finishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), DialTimeout)
}

// runState is what the run loop hands to the summary.
type runState struct {
	runStreams[*agent.QP]
	cc   agent.CCMode
	prev []agent.Counters // at the last interval report
	base []agent.Counters // at the end of the warm-up
}

var _ streamSet = (*runState)(nil)

// run starts the streams, reports intervals and stops; it fills r's
// intervals and leaves the summary's raw material in r via endReport.
func (c *ClientConfig) run(ctx context.Context, r *Report, sess *agent.Session, text bool) (*runState, error) {
	qps := sess.QPs
	n := len(qps)
	st := &runState{runStreams: runStreams[*agent.QP]{streams: qps}, cc: c.CC, prev: make([]agent.Counters, n), base: make([]agent.Counters, n)}
	t0 := st.start()

	// -n: whole messages, dealt out as evenly as possible.
	msgs := c.messagesPerStream(n)
	for i, qp := range qps {
		s := agent.Stream{Op: c.Op, MessageBytes: c.MessageBytes, Verify: c.Verify}
		if msgs != nil {
			s.Messages = msgs[i]
		}
		if err := qp.Start(s); err != nil {
			for _, q := range qps[:i] {
				q.Stop()
			}
			return st, err
		}
	}
	if c.OnData != nil {
		c.OnData(func() uint64 {
			var b uint64
			for _, qp := range qps {
				b += qp.Counters().AckedBytes
			}
			return b
		})
	}
	var show func(*Interval)
	if text {
		show = func(iv *Interval) { writeIntervalText(c.Out, iv, string(c.CC)) }
	}
	end, runErr := timedLoop(ctx, c, r, st, t0, 5*time.Second+c.Timescale.Time(c.AckTimeout), show)
	st.endT = end
	return st, runErr
}

// messagesPerStream deals -n out over n streams as whole messages, as
// evenly as possible; nil for a timed run.
func (c *ClientConfig) messagesPerStream(n int) []uint64 {
	if c.Bytes == 0 {
		return nil
	}
	total := ceilDiv(c.Bytes, uint64(c.MessageBytes))
	msgs := make([]uint64, n)
	for i := range n {
		msgs[i] = total / uint64(n)
		if uint64(i) < total%uint64(n) {
			msgs[i]++
		}
	}
	return msgs
}

// Err implements streamSet.
func (st *runState) Err(i int) error { return st.streams[i].Err() }

// take builds the interval since the last one and moves the mark.
func (st *runState) take(now time.Duration, omitted bool) Interval {
	cc := st.cc
	iv := newInterval(st.prevT, now)
	iv.Sum.Omitted, iv.Sum.Sender = omitted, true
	for i, qp := range st.streams {
		ctr := qp.Counters()
		p := &st.prev[i]
		s := IntervalStream{
			ID:          qp.QPN(),
			Bytes:       ctr.AckedBytes - p.AckedBytes,
			CNPHandled:  ctr.RPCNPHandled - p.RPCNPHandled,
			CNPIgnored:  ctr.RPCNPIgnored - p.RPCNPIgnored,
			Retransmits: ctr.RetransmitPackets - p.RetransmitPackets,
			TxPackets:   ctr.TxPackets - p.TxPackets,
		}
		if cs, ok := qp.CC(); ok {
			s.RcBps, s.RtBps, s.Alpha = uint64(cs.Rc), uint64(cs.Rt), cs.Alpha
		} else if cc == agent.CCNone {
			s.RcBps = uint64(qp.Config().RateCap)
			s.RtBps = s.RcBps
		}
		*p = ctr
		iv.add(s)
		iv.Sum.RcBps += s.RcBps
		iv.Sum.CNPHandled += s.CNPHandled
		iv.Sum.CNPIgnored += s.CNPIgnored
		iv.Sum.Retransmits += s.Retransmits
		iv.Sum.TxPackets += s.TxPackets
	}
	st.prevT = now
	return iv
}

// peek returns the bytes acknowledged since the last interval.
func (st *runState) peek() uint64 {
	return ackedSince(st.streams, st.prev, func(c agent.Counters) uint64 { return c.AckedBytes })
}

func (st *runState) snapshotBase(now time.Duration) {
	snapshot(st.base, st.streams)
	st.baseT = now
}

func (st *runState) notDrained(waited time.Duration) error {
	return notDrained(waited, st.streams, func(_ int, qp *agent.QP) string {
		acked, sent := qp.Progress()
		return fmt.Sprintf("qp %#x acked %d of %d packets", qp.QPN(), acked, sent)
	})
}

// ackedSince is the bytes the streams had acknowledged since prev, their
// counters then; acked reads them from the counters.
func ackedSince[S interface{ Counters() C }, C any](streams []S, prev []C, acked func(C) uint64) uint64 {
	var b uint64
	for i, s := range streams {
		b += acked(s.Counters()) - acked(prev[i])
	}
	return b
}

// snapshot sets dst to each stream's counters now.
func snapshot[S interface{ Counters() C }, C any](dst []C, streams []S) {
	for i, s := range streams {
		dst[i] = s.Counters()
	}
}

// notDrained says which streams were not done waited after the stop, and
// what each still owed.
func notDrained[S interface{ Done() <-chan struct{} }](waited time.Duration, streams []S, owed func(i int, s S) string) error {
	var parts []string
	for i, s := range streams {
		select {
		case <-s.Done():
			continue
		default:
		}
		parts = append(parts, owed(i, s))
	}
	return fmt.Errorf("streams not acknowledged %v after the stop: %s", waited, strings.Join(parts, ", "))
}

// newInterval is the interval from prev to now (times since the start),
// its streams and counters to add.
func newInterval(prev, now time.Duration) Interval {
	start, end := prev.Seconds(), now.Seconds()
	return Interval{Sum: IntervalSum{Start: start, End: end, Seconds: end - start}}
}

// add puts a stream's counters in the interval: the sum's span, omitted
// and sender, its rate, and its bytes in the sum's and the sum's rate.
func (iv *Interval) add(s IntervalStream) {
	s.Start, s.End, s.Seconds = iv.Sum.Start, iv.Sum.End, iv.Sum.Seconds
	s.Omitted, s.Sender = iv.Sum.Omitted, iv.Sum.Sender
	s.BitsPerSecond = rate(s.Bytes, s.Seconds)
	iv.Streams = append(iv.Streams, s)
	iv.Sum.Bytes += s.Bytes
	iv.Sum.BitsPerSecond = rate(iv.Sum.Bytes, iv.Sum.Seconds)
}

func rate(bytes uint64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(bytes) * 8 / secs
}

// startReport fills the report's start section.
func (c *ClientConfig) startReport(host string, port int, p dcqcn.Params, local netip.Addr, localPort uint16, sess *agent.Session) Start {
	now := time.Now()
	st := newStart(now)
	st.ConnectingTo = ConnectingTo{Host: host, Port: port}
	for i, qp := range sess.QPs {
		ep, rem := qp.Endpoint(), sess.Remote[i]
		st.Connected = append(st.Connected, Connected{
			LocalHost: local.String(), LocalPort: localPort, SourcePort: qp.SourcePort(),
			RemoteHost: rem.Addr.Addr().String(), RemotePort: rem.Addr.Port(),
			QPN: ep.QPN, RemoteQPN: rem.QPN,
			PSN: ep.PSN, RemotePSN: rem.PSN,
			RKey: ep.RKey, RemoteRKey: rem.RKey,
			VAddr: ep.VA, RemoteVAddr: rem.VA,
		})
	}
	st.TestStart = c.testStart(p)
	return st
}

// testStart is test_start: the parameters, with every DCQCN knob's
// effective value.
func (c *ClientConfig) testStart(p dcqcn.Params) TestStart {
	ts := TestStart{
		Protocol:      "RoCEv2",
		NumStreams:    c.QPs,
		Blksize:       c.MessageBytes,
		Omit:          c.Omit.Seconds(),
		TOS:           int(c.DSCP) << 2,
		DSCP:          int(c.DSCP),
		CNPDSCP:       int(p.CNPDSCP),
		MTU:           c.MTU,
		Op:            c.Op.String(),
		CC:            string(c.CC),
		Profile:       c.Profile,
		DCQCN:         map[string]json.Number{},
		DCQCNVariants: map[string]string{},
		Window:        c.Window,
		AckReqEvery:   c.AckReqEvery,
		MaxBurst:      c.MaxBurst,
		AckTimeoutUs:  float64(c.AckTimeout) / float64(time.Microsecond),
		RetryCount:    c.RetryCount,
		Verify:        c.Verify,
		Interval:      c.Interval.Seconds(),
	}
	ts.setAmount(c.Bytes, c.MessageBytes, c.Duration)
	if c.CC == agent.CCDCQCN {
		ts.LineRateBps = uint64(p.LineRate)
	} else {
		ts.LineRateBps = uint64(c.LineRate)
	}
	for _, n := range dcqcn.KnobNames() {
		v, _ := p.Get(n)
		ts.DCQCN[n] = json.Number(v)
	}
	for _, n := range dcqcn.VariantNames() {
		v, _ := p.Get(n)
		ts.DCQCNVariants[n] = v
	}
	return ts
}

// endReport fills the summary from the QPs' final counters, the warm-up
// baseline and the server's counters. The receiver's bytes after the
// warm-up are the server's total minus what the client had acknowledged
// when the warm-up ended (packets in flight then count as received after
// it); with no warm-up both sides are exact.
func (c *ClientConfig) endReport(r *Report, st *runState, sess *agent.Session, res agent.SessionResult, client agent.AgentCounters) {
	e := &r.End
	server := map[uint32]agent.QPReport{}
	for _, q := range res.QPs {
		server[q.QPN] = q
	}
	span := st.span()
	secs := span.Seconds
	e.startSums(span)
	for i, qp := range st.streams {
		ctr, base := qp.Counters(), st.base[i]
		snd := StreamSummary{ID: qp.QPN(), QPN: qp.QPN(), Sum: span, Counters: ctr}
		snd.Bytes = ctr.AckedBytes - base.AckedBytes
		snd.Messages = ctr.AckedMessages - base.AckedMessages
		snd.Retransmits = ctr.RetransmitPackets - base.RetransmitPackets
		snd.Sender = true
		rq := server[sess.Remote[i].QPN]
		rcv := StreamSummary{ID: qp.QPN(), QPN: sess.Remote[i].QPN, Sum: span, Counters: rq.Counters}
		rcv.Bytes = sub(rq.Counters.RecvBytes, base.AckedBytes)
		rcv.Messages = sub(rq.Counters.RecvMessages, base.AckedMessages)
		e.addStream(snd, rcv)
		e.SumSent.Retransmits += snd.Retransmits
	}
	e.setSumRates()
	e.Counters = EndCounters{Client: client, Server: res.QPs}
	if e.Counters.Server == nil {
		e.Counters.Server = []agent.QPReport{}
	}
	e.CPU = st.cpu()
	if c.Perftest {
		p := &Perftest{Bytes: c.MessageBytes, Iterations: e.SumSent.Messages}
		const mb = 1 << 20
		if secs > 0 {
			p.BWAvgMBps = float64(e.SumSent.Bytes) / secs / mb
			p.MsgRateMpps = float64(e.SumSent.Messages) / secs / 1e6
		}
		p.BWPeakMBps = p.BWAvgMBps
		for _, iv := range r.Intervals {
			if !iv.Sum.Omitted && iv.Sum.Seconds > 0 {
				p.BWPeakMBps = max(p.BWPeakMBps, float64(iv.Sum.Bytes)/iv.Sum.Seconds/mb)
			}
		}
		e.Perftest = p
	}
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

func (r *Report) verifyErrors() uint64 {
	var n uint64
	for _, q := range r.End.Counters.Server {
		n += q.Counters.VerifyErrors
	}
	return n
}

// cpuSince is this process's CPU time since ru0 as a share of wall time.
func cpuSince(ru0 *unix.Rusage, wall0 time.Time) CPU {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return CPU{}
	}
	wall := time.Since(wall0).Seconds()
	if wall <= 0 {
		return CPU{}
	}
	tv := func(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	user := (tv(ru.Utime) - tv(ru0.Utime)) / wall * 100
	sys := (tv(ru.Stime) - tv(ru0.Stime)) / wall * 100
	return CPU{HostTotal: user + sys, HostUser: user, HostSystem: sys}
}

func systemInfo() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	s := func(b []byte) string { return strings.TrimRight(string(b), "\x00") }
	return strings.Join([]string{s(u.Sysname[:]), s(u.Nodename[:]), s(u.Release[:]), s(u.Version[:]), s(u.Machine[:])}, " ")
}

// resolve turns the server's host into an address, without DNS for a
// literal.
func resolve(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, &ConfigError{Field: FieldServer, Value: host, Must: "cannot resolve the host", Cause: err}
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return addrs[0], nil
}

// routeSource is the source address the kernel picks towards dst: a
// connected UDP socket sends nothing, but its local address is the route's.
func routeSource(dst netip.Addr) (netip.Addr, error) {
	uc, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer uc.Close()
	return uc.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// reachErr is the one-line "cannot reach" error: the errno's text when

// target is the server a client runs against: its name and port as
// given, its address, and -B (invalid: none), of the server's family.
type target struct {
	host   string
	port   int
	server netip.AddrPort
	bind   netip.Addr
}

// target resolves the server and checks -B against it.
func (c *ClientConfig) target(ctx context.Context) (target, error) {
	host, port, err := splitServer(c.Server)
	if err != nil {
		return target{}, err
	}
	raddr, err := resolve(ctx, host)
	if err != nil {
		return target{}, err
	}
	t := target{host: host, port: port, server: netip.AddrPortFrom(raddr, uint16(port))}
	if c.Bind.IsValid() {
		t.bind = c.Bind.Unmap()
		if t.bind.Is4() != raddr.Is4() {
			return target{}, &ConfigError{Field: FieldBind, Value: t.bind.String(), Must: fmt.Sprintf("the server %s is of the other IP family", raddr)}
		}
	}
	return t, nil
}

// local is the address the server reaches this client at: -B, or the
// source the route to the server picks.
func (t *target) local() (netip.Addr, error) {
	if t.bind.IsValid() && !t.bind.IsUnspecified() {
		return t.bind, nil
	}
	src, err := routeSource(t.server.Addr())
	if err != nil {
		return netip.Addr{}, reachErr(t.server, err)
	}
	return src, nil
}

// dialSide opens the side channel to server, from bind if it is set.
func dialSide(ctx context.Context, server netip.AddrPort, bind netip.Addr) (net.Conn, error) {
	var d net.Dialer
	if bind.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(bind, 0))
	}
	tc, err := d.DialContext(ctx, "tcp", server.String())
	if err != nil {
		return nil, reachErr(server, err)
	}
	return tc, nil
}

// there is one ("connection refused", "network is unreachable").
func reachErr(server netip.AddrPort, err error) error {
	reason := err.Error()
	var errno syscall.Errno
	var ne net.Error
	switch {
	case errors.As(err, &errno):
		reason = errno.Error()
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		reason = fmt.Sprintf("no answer within %v", DialTimeout)
	case errors.Is(err, context.Canceled):
		reason = "interrupted"
	}
	return fmt.Errorf("cannot reach server %s: %s", server, reason)
}

// dialErr maps Agent.Dial's errors to the tool's one-liners.
func dialErr(ctx context.Context, server netip.AddrPort, err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return reachErr(server, err)
	}
	if e := sideChannelErr(ctx, server, err); e != nil {
		return e
	}
	return err
}

// listenErr maps a listen error to a one-liner; portField is the setting
// that picks the port.
func listenErr(proto string, portField Field, ap netip.AddrPort, err error) error {
	port := strconv.Itoa(int(ap.Port()))
	switch {
	case proto == "udp" && errors.Is(err, syscall.EPERM):
		// pktio says which capability: CAP_NET_RAW for the raw socket, the
		// BPF ones for the steering.
		return fmt.Errorf("cannot open the RoCEv2 port (UDP %s): %w", port, err)
	case errors.Is(err, syscall.EADDRINUSE):
		return &ConfigError{Field: portField, Value: port, Must: fmt.Sprintf("already in use on %s (%s)", ap.Addr(), proto)}
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return &ConfigError{Field: FieldBind, Value: ap.Addr().String(), Must: "no interface of this host has that address"}
	case errors.Is(err, syscall.EACCES):
		return &ConfigError{Field: portField, Value: port, Must: fmt.Sprintf("permission denied on %s (%s)", ap.Addr(), proto)}
	}
	return fmt.Errorf("listen %s %s: %w", proto, ap, err)
}
