package main

// The UET demo (-traffic uet): one host/pds endpoint per namespace, all in
// this process, so the sampler reads each sender's CCC (its NSCC window,
// its RCCC credit, its state) and every endpoint's counters directly. The
// senders start at once, an incast into the bottleneck port, whose class 3
// holds one BDP and trims what it cannot hold (netns-tests'
// TestUETIncastTrim, at the demo's line rate).

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/nscc"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/host/uet"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The demo's choices for a UET run, the UET netns tests' (uet_test.go).
const (
	defaultUETPlot = "demo-out/uet.png"
	// uetBaseRTT is NSCC's and RCCC's configured base RTT and the BDP's
	// time: the lab's round trip is the endpoints' scheduling on two
	// shared cores more than the wire (netns-tests' uetBaseRTT: at 500
	// µs an 8 → 1 incast ended 3-13 % above the ideal, at 1 ms 1-3 %).
	uetBaseRTT = time.Millisecond
	// uetMTU is a full data packet's IP size (pds.Config.MTU), as the
	// RoCE demo's MTU 4096 on the 9000-byte links.
	uetMTU = 4096
	// uetIdle keeps a finished PDC (and its CCC) open long enough to read
	// its counters after the last ACK.
	uetIdle = 2 * time.Second
	// uetRTO is the last-resort retransmission timeout: losses are found
	// by SACK and probes within round trips, and an endpoint starved of
	// CPU for tens of ms must not resend what was never lost.
	uetRTO = 200 * time.Millisecond
	// maxUETBytes bounds -bytes per sender.
	maxUETBytes = 64 * units.GiB
)

// uetClass is class 3 of the UET port: a data queue of one BDP at
// uetBaseRTT, WRED ECN from 0.2 to 0.8 of it (htsim's trimming setting,
// uet.md's caveats), and with trim the packets the full queue would drop
// cut to their headers (ClassConfig.SetTrim: 128 B, DSCP 9, strict class
// 7), as netns-tests' uetTrimPortConfig.
func uetClass(rate units.Rate, trim bool) qdisc.ClassConfig {
	bdp := units.ByteSize(rate.BytesPerSecond() * uetBaseRTT.Seconds())
	cc := qdisc.ClassConfig{Name: "uet", LimitBytes: bdp, ECN: qdisc.ECNWRED, MinThBytes: bdp / 5, MaxThBytes: bdp * 4 / 5, MaxP: 1}
	if trim {
		cc.SetTrim()
	}
	return cc
}

// uetEndpointConfig is an endpoint's configuration, Conn and Logger
// unset. Every endpoint's line rate is the port's; the receiver, behind
// the port, takes a packet with the port's trim DSCP for one trimmed at
// its last hop (the lab's convention, pds.Config.TrimLastHopDSCP).
func uetEndpointConfig(rate units.Rate, mode pds.CCMode, class *qdisc.ClassConfig, receiver bool) pds.Config {
	cfg := pds.DefaultConfig()
	cfg.LinkRate, cfg.MTU, cfg.BaseRTT, cfg.IdleTimeout, cfg.RTO, cfg.Verify = rate, uetMTU, uetBaseRTT, uetIdle, uetRTO, true
	cfg.CC = mode
	if receiver && class.TrimBytes != 0 {
		cfg.TrimLastHopDSCP = uint8(class.TrimDSCP)
	}
	return cfg
}

// uetMessages is how many messages of messageBytes each sender writes for
// -bytes (rounded up), 0 for messages until -duration.
func uetMessages(bytes units.ByteSize) uint64 {
	return (uint64(bytes) + messageBytes - 1) / messageBytes
}

// uetFlow is one sender's stream to the receiver: its endpoint (one per
// namespace, so the endpoint's counters are the flow's) and its Sender.
type uetFlow struct {
	name   string
	ep     *pds.Endpoint
	s      *pds.Sender
	doneAt atomic.Int64 // ns after the start when Done closed; 0 before
}

func (d *demo) uetRun(ctx context.Context, rps string) error {
	// o is the run on the wire; the endpoints are configured for the
	// fabric (d.o) and slowed.
	o, dumbbell := d.w, d.dumbbell
	cc := &d.cfg.Classes[qdisc.ClassRoCE]
	// The endpoints log only what goes wrong, beside the live view.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// One endpoint per namespace, its UDP 4793 socket opened inside it;
	// the receiver's with a deep receive buffer (a NIC's ring), as the
	// RoCE demo's.
	var rconn *pktio.EntropyConn
	var sconns []*pktio.EntropyConn
	open := func(n *lab.Node, addr netip.Addr, receiver bool) (*pds.Endpoint, error) {
		opts := pktio.RoCEOptions{}
		if receiver {
			opts.RecvBufferBytes = receiverBufferBytes
		}
		var conn *pktio.EntropyConn
		if err := n.Do(func() (err error) {
			conn, err = pktio.ListenEntropy(netip.AddrPortFrom(addr, uet.Port), opts)
			return err
		}); err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
		cfg := uetEndpointConfig(d.o.rate, o.cc, cc, receiver).Slowed(o.timescale)
		cfg.Conn, cfg.Logger, cfg.Held = conn, logger.With("host", n.Name), d.held()
		ep, err := pds.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
		d.closers = append(d.closers, ep.Close)
		if receiver {
			rconn = conn
		} else {
			sconns = append(sconns, conn)
		}
		return ep, nil
	}
	recv, err := open(dumbbell.Receiver, dumbbell.ReceiverAddr, true)
	if err != nil {
		return err
	}
	flows := make([]*uetFlow, o.senders)
	for i, n := range dumbbell.Senders {
		ep, err := open(n, dumbbell.SenderAddrs[i], false)
		if err != nil {
			return err
		}
		flows[i] = &uetFlow{name: n.Name, ep: ep}
	}
	if err := warmPaths(dumbbell); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	msgs := uetMessages(o.bytes)
	rep := &UETReport{
		Senders: o.senders, Rate: o.rate, DurationS: o.duration.Seconds(), BytesPerSender: msgs * messageBytes,
		MessageBytes: messageBytes, MTU: uetMTU, CC: o.cc, Trim: cc.TrimBytes != 0, BaseRTT: uetBaseRTT,
		Kernel: kernelRelease(), Port: d.port.Info(), ClassConfig: *cc, Scale: d.scale(),
		Series: UETSeries{PeriodS: o.sample.Seconds(), Flows: make([]UETFlowSeries, len(flows))},
	}
	labels := make([]string, len(flows))
	for i, f := range flows {
		labels[i] = f.name
	}
	d.uetIntro(rps, rep)

	base, err := d.port.Stats()
	if err != nil {
		return err
	}
	mono0, err := d.startMeter()
	if err != nil {
		return err
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	stopAll := func() {
		for _, f := range flows {
			if f.s != nil {
				f.s.Stop()
			}
		}
	}
	for i, f := range flows {
		s, err := f.ep.Start(dumbbell.ReceiverAddr, pds.Stream{JobID: uint32(i + 1), MessageBytes: messageBytes, Messages: msgs, Verify: true})
		if err != nil {
			stopAll()
			return fmt.Errorf("%s: start: %w", f.name, err)
		}
		f.s = s
		// The FCT to the ns, not to the sampling period.
		wg.Go(func() {
			<-s.Done()
			f.doneAt.Store(int64(time.Since(t0)))
		})
		rep.Flows = append(rep.Flows, UETFlow{Sender: f.name, Src: dumbbell.SenderAddrs[i].String(), Dst: dumbbell.ReceiverAddr.String(), JobID: uint32(i + 1), PDC: s.PDC()})
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()

	d.printf("%s", uetLiveHeader())
	prevStats := base
	prev := takeUETPoint(0, flows, recv, dumbbell.ReceiverAddr, o.cc)
	nextLive := time.Second
	stopping, stoppedAt := false, time.Duration(0)
	tick := time.NewTicker(o.sample)
	defer tick.Stop()
	live := func(el time.Duration, final bool) error {
		st, err := d.port.Stats()
		if err != nil {
			return err
		}
		c0, c1 := &prevStats.Classes[qdisc.ClassRoCE], &st.Classes[qdisc.ClassRoCE]
		s := interval(c0, c1, st.Time.Sub(prevStats.Time), o.rate)
		s.T, s.Flows = el.Seconds(), len(flows)
		p := takeUETPoint(el, flows, recv, dumbbell.ReceiverAddr, o.cc)
		ls := UETSample{Sample: s, Trims: sub(c1.TrimmedPackets, c0.TrimmedPackets), PerFlow: p.since(&prev), Final: final}
		renderUETSample(d.out, &ls, labels, cc)
		rep.Live = append(rep.Live, ls)
		prevStats, prev = st, p
		return nil
	}
	done := false
	for !done {
		el := time.Since(t0)
		bl, _, err := d.port.Backlog(qdisc.ClassRoCE)
		if err != nil {
			stopAll()
			return err
		}
		rep.Series.add(el.Seconds(), bl, flows, dumbbell.ReceiverAddr, o.cc)
		select {
		case <-allDone:
			done = true
		default:
		}
		if el >= nextLive || done {
			if err := live(el, done); err != nil {
				stopAll()
				return err
			}
			for nextLive <= el {
				nextLive += time.Second
			}
		}
		switch {
		case done:
		case !stopping && el >= o.duration:
			// Each sender finishes the message it is on and waits for
			// its ACKs (with -bytes: the run took too long).
			stopAll()
			stopping, stoppedAt = true, el
		case stopping && el-stoppedAt >= stopTimeout:
			done = true
		}
		if done {
			break
		}
		select {
		case <-ctx.Done():
			stopAll()
			rep.Interrupted = true
			return ctx.Err()
		case <-tick.C:
		case <-allDone:
		}
	}

	host, err := d.stopMeter()
	if err != nil {
		return err
	}
	// Let the queue drain so the counters are at rest for the invariant.
	st, err := d.settledStats()
	if err != nil {
		return err
	}
	targets := recv.Targets()
	for i, f := range flows {
		r := &rep.Flows[i]
		sc := f.s.Counters()
		r.Messages, r.BytesAcked = sc.MessagesAcked, sc.BytesAcked
		r.Counters = f.ep.Counters()
		if ci, ok := senderCCC(f.ep, dumbbell.ReceiverAddr); ok {
			r.NSCC, r.Credit = ci.NSCC, ci.Credit
		}
		for _, rx := range recv.RxCCCs() {
			if rx.Src == r.Src {
				r.Pull = rx.Source
			}
		}
		for _, t := range targets {
			if t.Src.String() == r.Src && t.JobID == r.JobID {
				r.Received.add(&t)
			}
		}
		select {
		case <-f.s.Done():
			r.FCTS = time.Duration(f.doneAt.Load()).Seconds()
			if err := f.s.Err(); err != nil {
				r.Error = err.Error()
			} else if o.bytes > 0 && stopping {
				r.Error = fmt.Sprintf("not done within -duration %s: %d of %d messages", o.duration, sc.MessagesAcked, msgs)
			}
		default:
			r.Error = fmt.Sprintf("not done %v after -duration: %d messages acknowledged, %d queued", stopTimeout, sc.MessagesAcked, sc.MessagesQueued)
		}
	}
	rep.Receiver = recv.Counters()
	rs := rconn.Stats()
	rep.RecvSocket = SocketCounters{RecvBufferDrops: rs.RecvBufferDrops, SendErrors: rs.SendErrors}
	for _, c := range sconns {
		ss := c.Stats()
		rep.SendSocket.RecvBufferDrops += ss.RecvBufferDrops
		rep.SendSocket.SendErrors += ss.SendErrors
	}
	if o.cc == pds.CCRCCC || o.cc == pds.CCBoth {
		ps := recv.PacerStats()
		rep.Pacer = &ps
	}
	if q, err := d.port.Qdisc(); err == nil {
		rep.Qdisc = &q
	}
	rep.finish(&st, &base)
	rep.hostLost(host, mono0)
	renderUETSummary(d.out, rep)
	d.printf("\n")
	if err := d.writeOutputs(o, func(path string) error { return writeUETPlot(path, rep) }, rep); err != nil {
		return err
	}
	return runErrors(rep.FlowsWithErrs, len(flows), rep.Invariant)
}

// senderCCC is the endpoint's CCC toward dst (one per destination and
// traffic class; the demo's senders have one).
func senderCCC(ep *pds.Endpoint, dst netip.Addr) (pds.CCCInfo, bool) {
	for _, ci := range ep.CCCs() {
		if ci.Key.Dst == dst {
			return ci, true
		}
	}
	return pds.CCCInfo{}, false
}

// uetPoint is what the live view and the series read at one instant.
type uetPoint struct {
	t     time.Duration
	flows []uetFlowPoint
}

type uetFlowPoint struct {
	acked    uint64 // payload bytes acknowledged
	done     bool
	ccc      cccView
	retx     uint64
	timeouts uint64
	trimNACK uint64 // TRIMMED and TRIMMED_LASTHOP NACKs received
}

// cccView is a flow's CCCs as the demo shows them: the sender's and the
// receiver's.
type cccView struct {
	ok       bool // the sender CCC exists
	state    string
	cwnd     int // bytes; noWindow without NSCC
	inFlight int
	credit   int  // RCCC credit, bytes
	hasCred  bool // the CCC runs RCCC
	rxState  string
}

// noWindow is the cwnd of a CCC that runs no window (CC rccc or none).
const noWindow = -1

// viewCCC is a sender CCC as the demo shows it in mode m.
func viewCCC(ci pds.CCCInfo, m pds.CCMode) cccView {
	v := cccView{ok: true, state: ci.State.String(), cwnd: ci.Window, inFlight: ci.InFlight}
	if m != pds.CCNSCC && m != pds.CCBoth {
		v.cwnd = noWindow
	}
	if c := ci.Credit; c != nil {
		v.credit, v.hasCred = c.Credit, true
	}
	return v
}

// rxStates are the receiver CCCs' states by source address: the credit
// pacer's state of the source (satisfied, active, slow_pull) when it
// asks for credit, "open" for a CCC without (the receiver's CCC of an
// NSCC or uncontrolled sender).
func rxStates(recv *pds.Endpoint) map[string]string {
	m := map[string]string{}
	for _, rx := range recv.RxCCCs() {
		m[rx.Src] = "open"
		if rx.Source != nil {
			m[rx.Src] = rx.Source.State.String()
		}
	}
	return m
}

// flowCCC is the view of flow f's CCCs toward dst.
func flowCCC(f *uetFlow, dst netip.Addr, m pds.CCMode, rx map[string]string) cccView {
	v := cccView{cwnd: noWindow}
	if ci, ok := senderCCC(f.ep, dst); ok {
		v = viewCCC(ci, m)
	}
	v.rxState = rx[f.ep.LocalAddr().Addr().String()]
	return v
}

func takeUETPoint(t time.Duration, flows []*uetFlow, recv *pds.Endpoint, dst netip.Addr, m pds.CCMode) uetPoint {
	p := uetPoint{t: t}
	rx := rxStates(recv)
	for _, f := range flows {
		var fp uetFlowPoint
		if f.s != nil {
			fp.acked = f.s.Counters().BytesAcked
			select {
			case <-f.s.Done():
				fp.done = true
			default:
			}
		}
		fp.ccc = flowCCC(f, dst, m, rx)
		c := f.ep.Counters()
		fp.retx, fp.timeouts = c.Retransmits, c.Timeouts
		fp.trimNACK = c.NacksReceived[uet.NackTrimmed.String()] + c.NacksReceived[uet.NackTrimmedLastHop.String()]
		p.flows = append(p.flows, fp)
	}
	return p
}

// since turns two points into the flows' lines of one live sample.
func (p *uetPoint) since(prev *uetPoint) []UETFlowInterval {
	out := make([]UETFlowInterval, len(p.flows))
	dt := (p.t - prev.t).Seconds()
	for i, f := range p.flows {
		var pf uetFlowPoint
		if i < len(prev.flows) {
			pf = prev.flows[i]
		}
		fi := UETFlowInterval{Done: f.done && pf.done, State: f.ccc.state, RxState: f.ccc.rxState,
			CwndBytes: f.ccc.cwnd, InFlightBytes: f.ccc.inFlight,
			Retransmits: sub(f.retx, pf.retx), Timeouts: sub(f.timeouts, pf.timeouts), TrimNACKs: sub(f.trimNACK, pf.trimNACK)}
		if !f.ccc.ok {
			fi.State, fi.CwndBytes = "-", 0
		}
		if f.ccc.hasCred {
			c := f.ccc.credit
			fi.CreditBytes = &c
		}
		if dt > 0 {
			fi.GoodputBps = float64(sub(f.acked, pf.acked)) * 8 / dt
		}
		out[i] = fi
	}
	return out
}

// add appends one fast sample.
func (s *UETSeries) add(t float64, backlog uint64, flows []*uetFlow, dst netip.Addr, m pds.CCMode) {
	s.T = append(s.T, t)
	s.BacklogBytes = append(s.BacklogBytes, backlog)
	for i, f := range flows {
		fs := &s.Flows[i]
		var acked uint64
		if f.s != nil {
			acked = f.s.Counters().BytesAcked
		}
		v := flowCCC(f, dst, m, nil)
		fs.AckedBytes = append(fs.AckedBytes, acked)
		fs.CwndBytes = append(fs.CwndBytes, v.cwnd)
		fs.InFlightBytes = append(fs.InFlightBytes, v.inFlight)
		if m == pds.CCRCCC || m == pds.CCBoth {
			// 0 before the CCC exists and after it is gone.
			fs.CreditBytes = append(fs.CreditBytes, v.credit)
		}
	}
}

// uetIntro describes the lab, the port, the endpoints and their
// congestion control.
func (d *demo) uetIntro(rps string, r *UETReport) {
	o, info, cc := d.w, d.port.Info(), &r.ClassConfig
	b := d.dumbbell.Bottleneck
	d.printf("\nlab    %d senders -> sw -> r   (namespaces %s-*)\n", len(d.dumbbell.Senders), d.dumbbell.RunID())
	if o.cpuShare > 0 {
		d.printf("rate   %s: this process gets %.2f of the CPUs (%s from %.2f, else %s; -rate sets it)\n", d.o.rate, o.cpuShare, defaultRate, minShareForDefault, busyRate)
	}
	baseRTT := o.timescale.Time(uetBaseRTT)
	bdp := o.rate.BytesPerSecond() * baseRTT.Seconds()
	d.printf("port   sw:%s -> r:%s at %s: HTB queue, eBPF ECN marking and trimming (attach %s)\n", b.Dev, b.PeerDev, o.rate, info.Attach)
	d.scaleIntro()
	d.printf("class  3 %q, DSCP %d: buffer %sKB = %.2f BDP (BDP %s x %s = %sKB), %s\n",
		cc.Name, qdisc.DSCPRoCE, kb(uint64(cc.LimitBytes)), float64(cc.LimitBytes)/bdp, o.rate, baseRTT, kb(uint64(bdp)), wredText(cc))
	if cc.TrimBytes != 0 {
		d.printf("trim   a packet the full buffer would drop leaves as its first %d B with DSCP %d through class %d (strict):\n"+
			"       the receiver NACKs it TRIMMED_LASTHOP at once and the sender resends it (-trim=false: dropped)\n",
			cc.TrimBytes, cc.TrimDSCP, cc.TrimClass)
	} else {
		d.printf("trim   off (-trim=false): a full buffer drops; the senders find the loss by SACK and probes, the RTO last\n")
	}
	if rps != "" {
		d.printf("rx     RPS: %s\n", rps)
	}
	d.printf("hosts  one UET endpoint per namespace in this process (host/pds, UDP %d, RUD): %d KiB WRITE messages,\n"+
		"       payload verified at the receiver, MTU %d, data DSCP %d ECT(0), ACKs DSCP %d; base RTT %s, RTO %s\n",
		uet.Port, messageBytes>>10, uetMTU, qdisc.DSCPRoCE, qdisc.DSCPCNP, baseRTT, o.timescale.Time(uetRTO))
	np := nscc.LabParams(o.rate, baseRTT, uetMTU)
	rp := rccc.LabParams(o.rate, baseRTT, uetMTU+14)
	nsccText := fmt.Sprintf("NSCC   the sender's window: MaxWnd %sKB (%.1f BDP), target queueing delay %s; ECN and delay cut it, quick adapt on trims and losses",
		kb(uint64(np.MaxWndBytes())), np.MaxWndBDPs, np.TargetQDelay)
	rcccText := fmt.Sprintf("RCCC   the receiver's credit: its pacer grants %d B at a time, round robin, at %.2f x the line (%s); a sender starts with\n"+
		"       %sKB of speculative credit and then sends only on credit",
		rp.GrantBytes, rp.PacerRateFactor, rp.PacerRate(), kb(uint64(rp.SpeculativeBytes)))
	switch o.cc {
	case pds.CCNSCC:
		d.printf("cc     nscc (-cc)\n%s\n", nsccText)
	case pds.CCRCCC:
		d.printf("cc     rccc (-cc)\n%s\n", rcccText)
	case pds.CCBoth:
		d.printf("cc     both (-cc): a packet leaves when NSCC's window and RCCC's credit both allow it\n%s\n%s\n", nsccText, rcccText)
	default:
		d.printf("cc     none (-cc): every sender at its line rate, held back only by its PDC's window\n")
	}
	if r.BytesPerSender > 0 {
		d.printf("flows  %d senders start at once, %d messages (%s) each; the run ends with the last ACK (at most -duration %s)\n\n",
			r.Senders, r.BytesPerSender/messageBytes, units.ByteSize(r.BytesPerSender), o.duration)
	} else {
		d.printf("flows  %d senders start at once and write messages for %s, then finish the one they are on\n\n", r.Senders, o.duration)
	}
	d.printf("Every second, per flow: goodput (payload acknowledged), NSCC's cwnd and the bytes in flight, RCCC's credit,\n")
	d.printf("the CCC's state at the sender and the receiver, retransmissions and trim NACKs; class 3 of the port: rate,\n")
	d.printf("CE marks, trims, drops, backlog now, gauge [#=queue |=min_th, right edge=max_th, >: above], sojourn p50/p99.\n\n")
}
