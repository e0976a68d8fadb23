package perf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/host/lb"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/sidechan"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// uetClientIdle is the client endpoint's idle timeout: a stream that
// finished early (-n) keeps its PDC, and the server's target its
// counters, until long after the server's tracker has read them.
const uetClientIdle = 2 * time.Second

// uetDrainWait bounds the wait for the last ACKs after the stop: pds fails
// a PDC after 50 RTOs of 10 ms, long before.
const uetDrainWait = 5 * time.Second

// maxTraceEvents bounds the CCC transitions a JSON report keeps.
const maxTraceEvents = 1 << 16

// validateUET is Validate for --transport uet.
func (c ClientConfig) validateUET() error {
	c = c.withDefaults()
	if err := c.validateTest(); err != nil {
		return err
	}
	switch {
	case c.QPs < 1 || c.QPs > MaxUETStreams:
		return configErr(FieldQPs, c.QPs, "1..%d (UET streams: PDCs, each of its own job)", MaxUETStreams)
	case c.MTU < MinUETMTU || c.MTU > MaxUETMTU:
		return configErr(FieldMTU, c.MTU, "%d..%d with transport uet (the IP packet size of a full data packet)", MinUETMTU, MaxUETMTU)
	case c.LineRate > MaxLineRate || c.LineRate < units.Kbit:
		return configErr(FieldLineRate, c.LineRate, "1kbit..1tbit, or 0 (1 Gbit/s) with transport uet")
	case c.BaseRTT < MinUETBaseRTT || c.BaseRTT > MaxUETBaseRTT:
		return configErr(FieldBaseRTT, c.BaseRTT, "1us..1s")
	case c.RTO != 0 && (c.RTO < pds.MinRTO || c.RTO > pds.MaxRTO):
		return configErr(FieldRTO, c.RTO, "0 (10ms) or %v..%v", pds.MinRTO, pds.MaxRTO)
	case checkWires(c.Wires, c.Timescale) != nil:
		return checkWires(c.Wires, c.Timescale)
	case !slices.Contains(pds.LossInferenceNames(), c.Loss.String()):
		return configErr(FieldLoss, c.Loss, "%s", strings.Join(pds.LossInferenceNames(), ", "))
	case !c.Loss.Fits(c.UETCC):
		return configErr(FieldLoss, c.Loss, "rack or none with cc %v: SLEEK's threshold is 1.5 congestion windows (cc nscc or both)", c.UETCC)
	case c.LB != 0 && !slices.Contains(lb.Kinds, c.LB):
		return configErr(FieldLB, c.LB, "none, %s", lbKindNames())
	case !slices.Contains(pds.CCModeNames(), c.UETCC.String()):
		return configErr(FieldCC, c.UETCC, "%s with transport uet", ccModeNames())
	case c.Timescale.Validate() != nil:
		return configErr(FieldTimescale, c.Timescale, "1..%d", units.MaxTimescale)
	}
	if err := c.checkMessagesPerFlow("stream"); err != nil {
		return err
	}
	if _, err := c.nsccParams(); err != nil {
		return err
	}
	// What is left is pds's own rule on the endpoint as a whole (NSCC's
	// window at this line rate, base RTT and MTU).
	pc := c.uetConfig(placeholderConn{}, nil)
	if err := pc.Validate(); err != nil {
		with := []Setting{{FieldBaseRTT, c.BaseRTT.String()}, {FieldMTU, strconv.Itoa(c.MTU)}}
		if c.Timescale.K() != 1 {
			with = append(with, Setting{FieldTimescale, c.Timescale.String()})
		}
		return &ConfigError{Field: FieldLineRate, Value: c.LineRate.String(), With: with, Cause: err}
	}
	return nil
}

// nsccParams are the sender CCCs' NSCC parameters: the endpoint's
// default (nscc.LabParams) with NSCCKnobs applied. c has its defaults.
func (c *ClientConfig) nsccParams() (nscc.Params, error) {
	p := nscc.LabParams(c.LineRate, c.BaseRTT, c.MTU)
	for _, k := range c.NSCCKnobs {
		if err := p.Set(k.Name, k.Value); err != nil {
			return p, &ConfigError{Field: FieldNSCCKnobs, Cause: err}
		}
	}
	return p, nil
}

// placeholderConn stands for the conn when a configuration is validated
// before the port is opened.
type placeholderConn struct{ pktio.Conn }

// uetConfig is the client endpoint's configuration. c has its defaults
// filled.
func (c *ClientConfig) uetConfig(conn pktio.Conn, trace func(pds.CCCTransition)) pds.Config {
	pc := pds.DefaultConfig()
	pc.Conn, pc.Logger = conn, c.Logger
	pc.LinkRate, pc.MTU, pc.BaseRTT, pc.DSCP = c.LineRate, c.MTU, c.BaseRTT, c.DSCP
	if c.RTO != 0 {
		pc.RTO = c.RTO
	}
	pc.Loss = c.Loss
	pc.IdleTimeout = uetClientIdle
	pc.Trace = trace
	pc.CC = c.UETCC
	pc.Held, pc.HostQueue = c.Held, c.HostQueue
	pc.Wires, pc.FirstPDCID = c.Wires, c.FirstPDCID
	k := c.Timescale
	if len(c.NSCCKnobs) > 0 {
		// Validate (validateUET) reports a bad knob; here it is skipped.
		if p, err := c.nsccParams(); err == nil {
			p = p.Slowed(k)
			pc.NewWindow = func(now time.Duration) cc.WindowController { return nscc.New(p, now) }
		}
	}
	if k.K() != 1 {
		pc = pc.Slowed(k)
		// The idle timeout is the tool's: how long a finished stream's
		// counters stay readable, not a fabric time.
		pc.IdleTimeout = max(uetClientIdle, pc.RTO)
	}
	if kind, seed := c.LB, c.LBSeed; kind != 0 {
		// PDC p's balancer draws from PCG(seed, p): a run is reproducible
		// from its seed (test_start.lb_seed). Validate checked kind, and
		// lb.DefaultParams are valid; a nil balancer would mean none.
		pc.NewBalancer = func(pdc uint16) lb.Balancer {
			b, err := lb.New(kind, lb.DefaultParams(), rand.New(rand.NewPCG(seed, uint64(pdc))))
			if err != nil {
				return nil
			}
			return b
		}
	}
	return pc
}

// checkWires refuses a wire that is out of range once slowed by k.
func checkWires(ws map[netip.Addr]pktio.Wire, k units.Timescale) error {
	for a, w := range ws {
		if err := w.Slowed(k.K()).Validate(); err != nil {
			return &ConfigError{Field: FieldWires, Value: a.String(), Cause: err}
		}
	}
	return nil
}

// lbKindNames is the --lb values: "oblivious, bitmap, reps or mixed".
func lbKindNames() string {
	names := make([]string, len(lb.Kinds))
	for i, k := range lb.Kinds {
		names[i] = k.String()
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// ccModeNames is the --cc values of a UET run: "nscc, rccc, both or none".
func ccModeNames() string {
	names := pds.CCModeNames()
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// runUET is RunClient with --transport uet: a pds endpoint on UDP 4793
// (or c.UETConn), the session over the UET side channel, a Sender per
// stream, the same timing and reports as RoCEv2's.
func runUET(ctx context.Context, c ClientConfig) (*Report, error) {
	t, err := c.target(ctx)
	if err != nil {
		return nil, err
	}
	host, port, server, bind := t.host, t.port, t.server, t.bind
	if c.LB != 0 && c.LBSeed == 0 {
		c.LBSeed = rand.Uint64() | 1 // a seed per run; 0 means "draw one"
	}
	tr := &tracer{}
	if c.TraceCCC {
		tr.ch = make(chan pds.CCCTransition, 4096)
	}
	// UET's port is opened per address: -B, or the route's source.
	var ap netip.AddrPort
	if c.UETConn == nil {
		local, err := t.local()
		if err != nil {
			return nil, err
		}
		ap = netip.AddrPortFrom(local, uet.Port)
	}
	ep, rawFor, err := openUET(c.UETConn, ap, c.SendPath, c.uetConfig(nil, tr.trace))
	if err != nil {
		return nil, err
	}
	local := ep.LocalAddr()
	closeEP := sync.OnceValue(ep.Close)
	defer closeEP()
	if c.OnEndpoint != nil {
		c.OnEndpoint(ep)
	}

	// The side channel, from -B too.
	dctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	tc, err := dialSide(dctx, server, bind)
	if err != nil {
		return nil, err
	}
	jobs := uetJobIDs(c.QPs)
	req := uetRequest{
		Transport: TransportUET, UETVersion: uetProtocolVersion, Addr: local.Addr().String(),
		Streams: c.QPs, JobIDs: jobs, MessageBytes: c.MessageBytes, Verify: c.Verify,
		MTU: c.MTU, DSCP: c.DSCP, Bytes: c.Bytes, CC: c.UETCC.String(),
	}
	if c.Bytes == 0 {
		req.Duration = c.Omit + c.Duration
	}
	var rep uetReply
	side, err := sidechan.Open(dctx, tc, req, &rep, minUETRequest)
	if se := (*sidechan.ServerError)(nil); errors.As(err, &se) {
		hint := ""
		if strings.HasPrefix(se.Msg, "version ") {
			// A RoCEv2 server reads no "version" in a UET request.
			hint = " (a RoCEv2 server? it must serve transport uet)"
		}
		return nil, fmt.Errorf("server %s refused the session: %s%s", server, se.Msg, hint)
	}
	if err != nil {
		return nil, sideErr(ctx, server, err)
	}
	defer side.Close()
	dst, err := netip.ParseAddrPort(rep.Addr)
	if err != nil {
		return nil, fmt.Errorf("server %s answered with UET address %q: %v", server, sidechan.Clip(rep.Addr, 64), err)
	}
	if dst.Port() != local.Port() {
		return nil, fmt.Errorf("server %s: its UET port %d is not ours (%d): both ends use UDP %d", server, dst.Port(), local.Port(), uet.Port)
	}

	if err := c.awaitGate(ctx); err != nil {
		return nil, err
	}

	// The streams.
	n := c.QPs
	st := &uetState{ep: ep, rawFor: rawFor, dst: dst.Addr().Unmap(), jobs: jobs,
		prev: make([]pds.SenderCounters, n), base: make([]pds.SenderCounters, n)}
	t0 := st.start()
	tr.start(ep.Clock().Now())
	msgs := c.messagesPerStream(n)
	for i := range n {
		s := pds.Stream{JobID: jobs[i], MessageBytes: c.MessageBytes, Verify: c.Verify}
		if msgs != nil {
			s.Messages = msgs[i]
		}
		snd, err := ep.Start(st.dst, s)
		if err != nil {
			st.Stop()
			return nil, fmt.Errorf("stream %d (job %#x): %w", i+1, jobs[i], err)
		}
		st.streams = append(st.streams, snd)
	}
	if c.OnSenders != nil {
		c.OnSenders(slices.Clone(st.streams))
	}
	if c.OnData != nil {
		senders := slices.Clone(st.streams)
		c.OnData(func() uint64 {
			var b uint64
			for _, s := range senders {
				b += s.Counters().BytesAcked
			}
			return b
		})
	}

	r := &Report{}
	r.Start = c.uetStartReport(host, port, local, dst, st)
	out := c.Out
	text := !c.JSON && out != nil
	if text && c.TraceCCC {
		out = &lockedWriter{w: out} // trace lines come from another goroutine
	}
	if text {
		writeStartText(out, r)
		if c.Interval > 0 {
			fmt.Fprintln(out, uetClientHeader)
		}
	}
	traced := tr.run(text, out)
	var show func(*Interval)
	if text {
		show = func(iv *Interval) { writeUETIntervalText(out, iv) }
	}
	end, runErr := timedLoop(ctx, &c, r, st, t0, uetDrainWait, show)
	st.endT = end
	if runErr == nil && c.OnFinished != nil {
		c.OnFinished()
	}
	cccs := ep.CCCs()
	epc := ep.Counters()

	// The server's counters, then the summary.
	var res uetResult
	fctx, fcancel := finishContext(ctx)
	ferr := side.Finish(fctx, &res, minUETRequest+n*uetStreamJSONBytes)
	fcancel()
	switch {
	case ferr != nil:
		ferr = fmt.Errorf("the server's counters: %v", ferr)
	case len(res.Streams) != n:
		ferr = fmt.Errorf("the server's counters: %d streams for %d", len(res.Streams), n)
		res.Streams = nil
	}
	if ferr != nil && runErr == nil {
		runErr = ferr
	}
	_ = closeEP() // no more transitions: the trace is complete
	events, dropped := tr.stop(traced)
	c.uetEndReport(r, st, res.Streams, epc, cccs)
	if c.TraceCCC {
		r.End.UET.Trace, r.End.UET.TraceDropped = events, dropped
	}
	if verr := r.End.UET.verifyErrors(); c.Verify && verr > 0 && runErr == nil {
		runErr = fmt.Errorf("payload check: %d message(s) did not match the sender's pattern at the server (verify_errors)", verr)
	}
	return c.writeReport(r, runErr, func(io.Writer) { writeUETSummaryText(out, r) })
}

// uetJobIDs picks a job ID per stream: consecutive from a random base, so
// that a server tells this session's PDCs from an earlier one's.
func uetJobIDs(n int) []uint32 {
	base := 1 + rand.Uint32N(maxJobID-uint32(n))
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = base + uint32(i)
	}
	return ids
}

// sideErr is the one-line error of a failed side-channel exchange.
func sideErr(ctx context.Context, server netip.AddrPort, err error) error {
	if e := sideChannelErr(ctx, server, err); e != nil {
		return e
	}
	return fmt.Errorf("server %s: side channel: %v", server, err)
}

// notServerHint is what a side channel that never answers, closes, or
// answers something else most often means.
const notServerHint = "not a roceperf server or fabriclabd (one serving transport uet, for UET)?"

// sideChannelErr names what went wrong on a side channel the dial reached,
// with its likely cause; nil if err is none of these.
func sideChannelErr(ctx context.Context, server netip.AddrPort, err error) error {
	var ne net.Error
	var syn *json.SyntaxError
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("server %s: interrupted", server)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("server %s closed the side channel without an answer: %s", server, notServerHint)
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("server %s: no answer on the side channel within %v: %s", server, DialTimeout, notServerHint)
	case errors.As(err, &syn):
		return fmt.Errorf("server %s answered something else than roceperf's side channel: %s", server, notServerHint)
	}
	return nil
}

// openUET starts a UET endpoint from pc on conn, or (conn nil) on a port
// of its own at ap. rawFor are the devices with a port attached in this
// namespace that made send auto send raw (agent.SendPathHere).
func openUET(conn pktio.Conn, ap netip.AddrPort, send pktio.SendPath, pc pds.Config) (ep *pds.Endpoint, rawFor []string, err error) {
	if conn != nil {
		pc.Conn = conn
		ep, err = pds.New(pc)
		return ep, nil, err
	}
	if send, rawFor, err = agent.SendPathHere(send); err != nil {
		return nil, nil, uetListenErr(ap, err)
	}
	ep, err = pds.Open(ap, pktio.RoCEOptions{SendPath: send}, pc)
	if pe := (*pds.PortError)(nil); errors.As(err, &pe) {
		return nil, nil, uetListenErr(pe.Addr, pe.Err)
	}
	return ep, rawFor, err
}

// uetListenErr maps ListenEntropy's errors to the tool's one-liners.
func uetListenErr(ap netip.AddrPort, err error) error {
	switch {
	case errors.Is(err, syscall.EPERM):
		return fmt.Errorf("cannot open the UET port (UDP %d): %w", ap.Port(), err)
	case errors.Is(err, syscall.EADDRINUSE):
		return &ConfigError{Field: FieldBind, Value: ap.Addr().String(), Must: fmt.Sprintf("udp port %d is already in use on it (one UET endpoint per address: bind another)", ap.Port())}
	}
	return listenErr("udp", FieldBind, ap, err)
}

// lockedWriter serializes whole writes of several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// tracer takes the endpoint's CCC transitions (pds.Config.Trace, called
// under the endpoint's lock: it must not block) and prints them (text) or
// keeps them (JSON) on a goroutine of its own. A full channel drops and
// counts.
type tracer struct {
	ch      chan pds.CCCTransition // nil: no trace
	mu      sync.Mutex
	closed  bool
	dropped uint64
	clock0  time.Duration // the endpoint clock at the run's start
}

func (t *tracer) trace(tr pds.CCCTransition) {
	if t.ch == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	select {
	case t.ch <- tr:
	default:
		t.dropped++
	}
}

func (t *tracer) start(clock0 time.Duration) {
	t.mu.Lock()
	t.clock0 = clock0
	t.mu.Unlock()
}

// run starts the consumer: lines to w (text), or events kept for the
// report. The channel delivers what it returns.
func (t *tracer) run(text bool, w io.Writer) <-chan []CCCEvent {
	done := make(chan []CCCEvent, 1)
	if t.ch == nil {
		close(done)
		return done
	}
	t.mu.Lock()
	clock0 := t.clock0
	t.mu.Unlock()
	go func() {
		var events []CCCEvent
		for tr := range t.ch {
			ev := CCCEvent{Time: (tr.At - clock0).Seconds(), CCC: tr.CCC, From: tr.From.String(), To: tr.To.String(), PDCs: tr.PDCs,
				Src: tr.Key.Src.String(), Dst: tr.Key.Dst.String(), TC: tr.Key.TC}
			if text {
				fmt.Fprintln(w, traceLine(&ev))
			} else if len(events) < maxTraceEvents {
				events = append(events, ev)
			} else {
				t.mu.Lock()
				t.dropped++
				t.mu.Unlock()
			}
		}
		done <- events
	}()
	return done
}

// stop closes the channel (the endpoint is closed: nothing more comes) and
// waits for the consumer.
func (t *tracer) stop(done <-chan []CCCEvent) ([]CCCEvent, uint64) {
	if t.ch == nil {
		return nil, 0
	}
	t.mu.Lock()
	t.closed = true
	close(t.ch)
	t.mu.Unlock()
	events := <-done
	t.mu.Lock()
	defer t.mu.Unlock()
	return events, t.dropped
}

// uetState is a UET run's streams: a Sender per stream, all on one
// endpoint and one CCC.
type uetState struct {
	runStreams[*pds.Sender]
	ep     *pds.Endpoint
	rawFor []string // openUET's
	dst    netip.Addr
	jobs   []uint32
	prev   []pds.SenderCounters // at the last interval report
	prevEP pds.Counters
	base   []pds.SenderCounters // at the end of the warm-up
	baseEP pds.Counters
}

var _ streamSet = (*uetState)(nil)

// Err implements streamSet.
func (st *uetState) Err(i int) error {
	if err := st.streams[i].Err(); err != nil {
		return fmt.Errorf("stream %d (job %#x): %w", i+1, st.jobs[i], err)
	}
	return nil
}

// ccc is the CCC of the streams' destination (the zero CCCInfo once it
// is freed).
func (st *uetState) ccc() pds.CCCInfo {
	for _, c := range st.ep.CCCs() {
		if c.Key.Dst == st.dst {
			return c
		}
	}
	return pds.CCCInfo{}
}

func (st *uetState) take(now time.Duration, omitted bool) Interval {
	iv := newInterval(st.prevT, now)
	ccc := st.ccc()
	epc := st.ep.Counters()
	retx := epc.Retransmits - st.prevEP.Retransmits
	sum := &iv.Sum
	sum.Omitted, sum.Sender = omitted, true
	sum.CwndBytes, sum.InFlightBytes, sum.CreditBytes = uint64(ccc.Window), uint64(ccc.InFlight), creditBytes(ccc.Credit)
	sum.Retransmits, sum.TxPackets = retx, epc.TxPackets-st.prevEP.TxPackets
	for i, s := range st.streams {
		ctr := s.Counters()
		is := IntervalStream{
			ID:        uint32(i + 1),
			Bytes:     ctr.BytesAcked - st.prev[i].BytesAcked,
			CwndBytes: uint64(ccc.Window), InFlightBytes: uint64(ccc.InFlight),
			CreditBytes: sum.CreditBytes,
		}
		if len(st.streams) == 1 {
			// Retransmissions are the endpoint's: one stream's own only
			// when it is alone.
			is.Retransmits, is.TxPackets = retx, sum.TxPackets
		}
		st.prev[i] = ctr
		iv.add(is)
	}
	st.prevEP = epc
	st.prevT = now
	return iv
}

// creditBytes is an interval's credit: the CCC's RCCC credit, nil when it
// has none (cc nscc or none, or the CCC is gone).
func creditBytes(ci *pds.CreditInfo) *int {
	if ci == nil {
		return nil
	}
	c := ci.Credit
	return &c
}

func (st *uetState) peek() uint64 {
	return ackedSince(st.streams, st.prev, func(c pds.SenderCounters) uint64 { return c.BytesAcked })
}

func (st *uetState) snapshotBase(now time.Duration) {
	snapshot(st.base, st.streams)
	st.baseEP = st.ep.Counters()
	st.baseT = now
}

func (st *uetState) notDrained(waited time.Duration) error {
	return notDrained(waited, st.streams, func(i int, s *pds.Sender) string {
		ctr := s.Counters()
		return fmt.Sprintf("stream %d acked %d of %d messages", i+1, ctr.MessagesAcked, ctr.MessagesQueued)
	})
}

// uetStartReport fills the report's start section.
func (c *ClientConfig) uetStartReport(host string, port int, local, dst netip.AddrPort, st *uetState) Start {
	now := time.Now()
	s := newStart(now)
	s.ConnectingTo = ConnectingTo{Host: host, Port: port}
	for i, snd := range st.streams {
		s.Connected = append(s.Connected, Connected{
			LocalHost: local.Addr().String(), LocalPort: local.Port(),
			RemoteHost: dst.Addr().String(), RemotePort: dst.Port(),
			JobID: st.jobs[i], PDC: snd.PDC(),
		})
	}
	ts := TestStart{
		Protocol:    "UET",
		NumStreams:  c.QPs,
		Blksize:     c.MessageBytes,
		Omit:        c.Omit.Seconds(),
		TOS:         int(c.DSCP)<<2 | ecnECT0,
		DSCP:        int(c.DSCP),
		MTU:         c.MTU,
		Op:          "write",
		CC:          c.UETCC.String(),
		LineRateBps: uint64(c.LineRate),
		BaseRTTUs:   float64(c.BaseRTT) / float64(time.Microsecond),
		Verify:      c.Verify,
		LB:          lbName(c.LB),
		LBSeed:      c.LBSeed,
		Loss:        c.Loss.String(),
		Interval:    c.Interval.Seconds(),
		RawForPorts: st.rawFor,
	}
	ts.setAmount(c.Bytes, c.MessageBytes, c.Duration)
	s.TestStart = ts
	return s
}

// lbName is test_start.lb: the balancer's name, "" for none.
func lbName(k lb.Kind) string {
	if k == 0 {
		return ""
	}
	return k.String()
}

// uetEndReport fills the summary from the Senders' final counters, the
// warm-up baseline and the server's counters (nil: they did not arrive).
// The receiver's bytes after the warm-up are the server's total less what
// the client had acknowledged when it ended, as RoCEv2's.
func (c *ClientConfig) uetEndReport(r *Report, st *uetState, rcvs []UETReceiverStats, epc pds.Counters, cccs []pds.CCCInfo) {
	e := &r.End
	span := st.span()
	e.startSums(span)
	e.SumSent.Retransmits = epc.Retransmits - st.baseEP.Retransmits
	for i, s := range st.streams {
		ctr, base := s.Counters(), st.base[i]
		snd := StreamSummary{ID: uint32(i + 1), JobID: st.jobs[i], Sum: span}
		snd.Bytes = ctr.BytesAcked - base.BytesAcked
		snd.Messages = ctr.MessagesAcked - base.MessagesAcked
		snd.Sender = true
		snd.AckedBytes, snd.AckedMessages = ctr.BytesAcked, ctr.MessagesAcked
		if len(st.streams) == 1 {
			snd.Retransmits = e.SumSent.Retransmits
			snd.RetransmitPackets = epc.Retransmits
		}
		rcv := StreamSummary{ID: uint32(i + 1), JobID: st.jobs[i], Sum: span}
		if rcvs != nil {
			rs := rcvs[i]
			rcv.Bytes = sub(rs.MessageBytes, base.BytesAcked)
			rcv.Messages = sub(rs.Messages, base.MessagesAcked)
			rcv.RecvBytes, rcv.RecvMessages = rs.MessageBytes, rs.Messages
			rcv.VerifyErrors = rs.VerifyErrors
		}
		e.addStream(snd, rcv)
	}
	e.setSumRates()
	e.Counters.Server = []agent.QPReport{} // RoCEv2's; the receiver's counters are in e.UET
	e.UET = &UETEnd{Client: &epc, CCCs: uetCCCs(cccs), Receiver: rcvs}
	e.CPU = st.cpu()
}
