package main

// The RoCEv2 demo (the default, -traffic roce): one host/agent RoCE agent
// per namespace, all in this process, so the sampler reads each sender's
// DCQCN state (Rc, Rt, α) and each QP's NIC counters directly.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/fabriclab/fabriclab/host/roce"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The demo's choices for a RoCE run; see docs/roce.md and the intro it
// prints.
const (
	defaultProfile = "paper"
	defaultPlot    = "demo-out/dcqcn.png"
	// messageBytes is each RDMA WRITE (perftest's and roceperf's default
	// is 64 KiB).
	messageBytes = 64 << 10
	roceLinkMTU  = 9000
	// receiverBufferBytes is the receiver's UDP receive buffer (the kernel
	// doubles it): 64 MB hold about 250 ms of jumbo frames at 1 Gbit/s
	// (each costs ~9 KB of buffer), the default 8 MB about 30 ms.
	receiverBufferBytes = 32 << 20
	// The plot's zoom: zoomLen of steady state sampled every zoomPeriod,
	// fine enough to show each cut and the fast-recovery steps.
	zoomPeriod = time.Millisecond
	zoomLen    = 500 * time.Millisecond
	// stopTimeout bounds the wait for the last messages' ACKs.
	stopTimeout = 5 * time.Second
)

// roceFlow is one QP pair: a sender's requester and the receiver's
// responder.
type roceFlow struct {
	info     FlowInfo
	offset   time.Duration // join time after the first flow
	sqp, rqp *agent.QP
	started  bool
}

func (d *demo) roceRun(ctx context.Context, rps string) error {
	// o is the run on the wire; the QPs are configured for the fabric
	// (d.o) and slowed.
	o, dumbbell := d.w, d.dumbbell
	p := o.params

	// One agent per namespace, its UDP socket opened inside it.
	// RoCEConn: every packet to 4791, a UDP source port per QP. The
	// kernel NP (-np kernel) and RP (-rp kernel) on its devices, or its
	// agent's receive loop.
	listen := func(n *lab.Node, addr netip.Addr, opts pktio.RoCEOptions, np, rp agent.Offload) (*agent.Agent, *pktio.RoCEConn, error) {
		var h *agent.Host
		err := n.Do(func() (err error) {
			h, err = agent.OpenHost(agent.HostConfig{Addr: netip.AddrPortFrom(addr, roce.UDPPort), Port: opts, NP: np, RP: rp,
				Agent: agent.Config{Held: d.held()}})
			return err
		})
		var oe *agent.OffloadError
		switch {
		case errors.As(err, &oe) && oe.Role == "np":
			return nil, nil, fmt.Errorf("-np kernel: %w (-np agent runs the NP in the receiver's agent)", oe.Err)
		case errors.As(err, &oe):
			return nil, nil, fmt.Errorf("-rp kernel: %w (-rp agent takes the CNPs in each sender's agent)", oe.Err)
		case err != nil:
			return nil, nil, fmt.Errorf("%s: %w", n.Name, err)
		}
		d.closers = append(d.closers, h.Close)
		return h.Agent, h.Conn, nil
	}
	offload := func(mode, kernel string) agent.Offload {
		if mode == kernel {
			return agent.OffloadKernel
		}
		return agent.OffloadAgent
	}
	// The receiver takes the whole port's rate in one agent; a deep socket
	// buffer (a NIC's receive ring) rides out its scheduling hiccups.
	recv, rconn, err := listen(dumbbell.Receiver, dumbbell.ReceiverAddr, pktio.RoCEOptions{RecvBufferBytes: receiverBufferBytes},
		offload(o.np, npKernel), agent.OffloadAgent)
	if err != nil {
		return err
	}
	senders := make([]*agent.Agent, o.senders)
	sconns := make([]*pktio.RoCEConn, o.senders)
	for i := range o.senders {
		if senders[i], sconns[i], err = listen(dumbbell.Senders[i], dumbbell.SenderAddrs[i], pktio.RoCEOptions{}, agent.OffloadAgent, offload(o.rp, rpKernel)); err != nil {
			return err
		}
	}

	if err := warmPaths(dumbbell); err != nil {
		return err
	}

	f := d.o // the fabric's
	scfg := agent.DefaultQPConfig()
	scfg.MTU = o.mtu
	scfg.CC = agent.CCDCQCN
	scfg.DCQCN = f.params
	scfg.CNPDSCP = p.CNPDSCP
	scfg.BufferBytes = 64 << 10 // nothing is written to the senders
	scfg.AckTimeout = ackTimeoutFor(d.cfg.Classes[qdisc.ClassRoCE].LimitBytes, f.rate)
	// In flight at most Rc·(base RTT + max_th/C), as a NIC at Rc through a
	// queue at max_th holds (agent.QPConfig.InflightTime): a sender that
	// fell behind cannot catch up with a whole window at once.
	maxTh := d.cfg.Classes[qdisc.ClassRoCE].MaxThBytes
	scfg.InflightTime = demoBaseRTT + time.Duration(float64(maxTh)*8/float64(f.rate)*1e9)
	rcfg := agent.DefaultQPConfig()
	rcfg.MTU = o.mtu
	rcfg.NP = true
	rcfg.CNPPeriod = f.params.MinTimeBetweenCNPs
	rcfg.CNPDSCP = p.CNPDSCP
	rcfg.BufferBytes = 4 * messageBytes
	scfg, rcfg = scfg.Slowed(f.timescale), rcfg.Slowed(f.timescale)
	rlocal := netip.AddrPortFrom(dumbbell.ReceiverAddr, roce.UDPPort)
	var flows []*roceFlow
	for i := range o.senders {
		slocal := netip.AddrPortFrom(dumbbell.SenderAddrs[i], roce.UDPPort)
		for q := range o.qps {
			sqp, err := senders[i].CreateQP(scfg)
			if err != nil {
				return fmt.Errorf("%s: %w", dumbbell.Senders[i].Name, err)
			}
			rqp, err := recv.CreateQP(rcfg)
			if err != nil {
				return fmt.Errorf("r: %w", err)
			}
			se, re := sqp.Endpoint(), rqp.Endpoint()
			se.Addr, re.Addr = slocal, rlocal
			if err := sqp.Connect(slocal, re); err != nil {
				return err
			}
			if err := rqp.Connect(rlocal, se); err != nil {
				return err
			}
			off := time.Duration(i) * o.stagger
			flows = append(flows, &roceFlow{
				info: FlowInfo{Sender: dumbbell.Senders[i].Name, QP: q + 1, Src: slocal.Addr().String(), Dst: rlocal.Addr().String(),
					SenderQPN: sqp.QPN(), ReceiverQPN: rqp.QPN(), StartS: off.Seconds()},
				offset: off, sqp: sqp, rqp: rqp,
			})
		}
	}
	labels := make([]string, len(flows))
	for i, f := range flows {
		labels[i] = f.info.Label()
	}
	d.roceIntro(rps, flows)

	cc := &d.cfg.Classes[qdisc.ClassRoCE]
	rep := &RoCEReport{
		Senders: o.senders, QPsPerSender: o.qps, Rate: o.rate, DurationS: o.duration.Seconds(), StaggerS: o.stagger.Seconds(),
		MTU: o.mtu, MessageBytes: messageBytes, Profile: o.profile, Stretch: o.stretch, Knobs: knobValues(&p), Overrides: o.knobs,
		Kernel: kernelRelease(), Port: d.port.Info(), ClassConfig: *cc, Scale: d.scale(),
		Series: Series{PeriodS: o.sample.Seconds(), Flows: make([]FlowSeries, len(flows))},
		Zoom:   Series{PeriodS: min(zoomPeriod, o.sample).Seconds(), Flows: make([]FlowSeries, len(flows))},
	}
	for _, f := range flows {
		rep.Flows = append(rep.Flows, RoCEFlow{FlowInfo: f.info})
	}

	base, err := d.port.Stats()
	if err != nil {
		return err
	}
	start := func(f *roceFlow, t time.Duration) error {
		if err := f.sqp.Start(agent.Stream{Op: agent.OpWrite, MessageBytes: messageBytes}); err != nil {
			return fmt.Errorf("flow %s: start: %w", f.info.Label(), err)
		}
		f.started = true
		d.printf("  ---- t=%.0fs  flow %s joins: %s %s QP %#x -> r %s QP %#x, starting at the line rate\n",
			t.Seconds(), f.info.Label(), f.info.Sender, f.info.Src, f.info.SenderQPN, f.info.Dst, f.info.ReceiverQPN)
		return nil
	}
	stopAll := func() {
		for _, f := range flows {
			if f.started {
				f.sqp.Stop()
			}
		}
	}

	d.printf("%s", roceLiveHeader())
	mono0, err := d.startMeter()
	if err != nil {
		return err
	}
	t0 := time.Now()
	var allJoinedMono time.Duration // when the last flow joined, on the meter's clock
	var allJoined *qdisc.Stats      // port counters when the last flow joined
	prevStats := base
	prevLive := livePoint{}
	nextLive := time.Second
	var nextSample time.Duration
	zoomFrom, zoomTo := zoomWindow(o.duration, flows[len(flows)-1].offset)
	inZoom := false
	tick := time.NewTicker(o.sample)
	defer tick.Stop()
	for {
		el := time.Since(t0)
		joined := 0
		for _, f := range flows {
			if !f.started && el >= f.offset {
				if err := start(f, f.offset); err != nil {
					stopAll()
					return err
				}
				if f == flows[len(flows)-1] {
					st, err := d.port.Stats()
					if err != nil {
						stopAll()
						return err
					}
					allJoined = &st
					rep.AllJoinedS, allJoinedMono = el.Seconds(), hostlost.Now()
				}
			}
			if f.started {
				joined++
			}
		}
		if el >= o.duration {
			break
		}
		// The fast samples: the queue and every flow's DCQCN state, every
		// -sample, and every zoomPeriod inside the zoom window.
		bl, _, err := d.port.Backlog(qdisc.ClassRoCE)
		if err != nil {
			stopAll()
			return err
		}
		if z := el >= zoomFrom && el < zoomTo; z != inZoom {
			inZoom = z
			if z {
				tick.Reset(min(zoomPeriod, o.sample))
			} else {
				tick.Reset(o.sample)
			}
		}
		if inZoom {
			rep.Zoom.add(el.Seconds(), bl, flows)
		}
		if el >= nextSample {
			rep.Series.add(el.Seconds(), bl, flows)
			for nextSample <= el {
				nextSample += o.sample
			}
		}
		if el >= nextLive {
			st, err := d.port.Stats()
			if err != nil {
				stopAll()
				return err
			}
			s := interval(&prevStats.Classes[qdisc.ClassRoCE], &st.Classes[qdisc.ClassRoCE], st.Time.Sub(prevStats.Time), o.rate)
			s.T, s.Flows = el.Seconds(), joined
			lp := takeLivePoint(el, flows)
			ls := RoCESample{Sample: s, PerFlow: lp.since(&prevLive), CNPsSent: sub(lp.cnpSent, prevLive.cnpSent)}
			renderRoCESample(d.out, &ls, labels, cc)
			rep.Live = append(rep.Live, ls)
			prevStats, prevLive = st, lp
			nextLive += time.Second
		}
		select {
		case <-ctx.Done():
			stopAll()
			rep.Interrupted = true
			return ctx.Err()
		case <-tick.C:
		}
	}

	// Stop: each QP finishes its message and waits for its ACKs.
	stopAll()
	trafficEnd := time.Since(t0)
	stopCtx, cancelStop := context.WithTimeout(ctx, stopTimeout)
	defer cancelStop()
	for _, f := range flows {
		select {
		case <-f.sqp.Done():
		case <-stopCtx.Done():
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if stopCtx.Err() == nil { // all acknowledged: the traffic ended now
		trafficEnd = time.Since(t0)
	}
	host, err := d.stopMeter()
	if err != nil {
		return err
	}

	// Let the queue drain so the counters are at rest for the invariant,
	// and the last CNPs reach the senders before their counters are read.
	st, err := d.settledStats()
	if err != nil {
		return err
	}
	time.Sleep(50 * time.Millisecond)
	for i, f := range flows {
		r := &rep.Flows[i]
		r.Sender, r.Receiver = f.sqp.Counters(), f.rqp.Counters()
		if cs, ok := f.sqp.CC(); ok {
			r.RateCuts = cs.Stats.RateCuts
		}
		select {
		case <-f.sqp.Done():
			if err := f.sqp.Err(); err != nil {
				r.Error = err.Error()
			}
		default:
			acked, sent := f.sqp.Progress()
			r.Error = fmt.Sprintf("not done %v after the end: %d of %d packets acknowledged", stopTimeout, acked, sent)
		}
	}
	rep.RecvAgent = recv.Counters()
	for _, a := range senders {
		c := a.Counters()
		rep.PPFC.ReceivedStop += c.PPFCReceivedStop
		rep.PPFC.ReceivedResume += c.PPFCReceivedResume
		rep.PPFC.ReceivedHold += c.PPFCReceivedHold
		rep.PPFC.ReceivedAlarm += c.PPFCReceivedAlarm
		rep.PPFC.Ignored += c.PPFCIgnoredSource + c.PPFCIgnoredDestination
	}
	rs := rconn.Stats()
	rep.RecvSocket = SocketCounters{RecvBufferDrops: rs.RecvBufferDrops, SendErrors: rs.SendErrors}
	for _, c := range sconns {
		ss := c.Stats()
		rep.SendSocket.RecvBufferDrops += ss.RecvBufferDrops
		rep.SendSocket.SendErrors += ss.SendErrors
	}
	if q, err := d.port.Qdisc(); err == nil {
		rep.Qdisc = &q
	}
	rep.TrafficS = trafficEnd.Seconds()
	var joined *qdisc.ClassStats
	if allJoined != nil {
		joined = &allJoined.Classes[qdisc.ClassRoCE]
	}
	rep.finish(&st, &base.Classes[qdisc.ClassRoCE], joined)
	rep.hostLost(host, mono0, allJoinedMono)
	renderRoCESummary(d.out, rep)
	d.printf("\n")
	if err := d.writeOutputs(o, func(path string) error { return writeRoCEPlot(path, rep) }, rep); err != nil {
		return err
	}
	return runErrors(rep.FlowsWithErrs, len(flows), rep.Invariant)
}

// demoBaseRTT is the base RTT of the in-flight bound: the agents'
// scheduling on shared cores, not the wire.
const demoBaseRTT = time.Millisecond

// ackTimeoutFor is the requesters' local ACK timeout: the smallest IB
// timeout value (4.096 µs·2^n) from 16 up (268 ms) that
// is at least four times the time a full class buffer takes to drain, so
// a deep queue is never taken for a loss. The agent's default (16 ms) is
// shorter than the 2 MB buffer's 16.8 ms at 1 Gbit/s.
func ackTimeoutFor(limit units.ByteSize, rate units.Rate) time.Duration {
	drain := time.Duration(float64(limit) * 8 / float64(rate) * 1e9)
	n := 16 // 268 ms: an agent starved of CPU for 67 ms must not resend
	for ; n < 23 && 4096*time.Nanosecond<<n < 4*drain; n++ {
	}
	return 4096 * time.Nanosecond << n
}

// zoomWindow places the zoom in the steady state: ending a second before
// the end, or centred between the last join and the end if that is short;
// none (0, 0) if the flows do not all compete for 2·zoomLen.
func zoomWindow(duration, lastJoin time.Duration) (from, to time.Duration) {
	steady := lastJoin + time.Second
	if duration-lastJoin < 2*zoomLen {
		return 0, 0
	}
	from = duration - time.Second - zoomLen
	if from < steady {
		from = lastJoin + (duration-lastJoin-zoomLen)/2
	}
	return from, from + zoomLen
}

// warmPaths resolves the neighbours on every sender's path to the
// receiver and back before any QP starts: a QP starts at the line rate,
// and packets beyond the ~200 KB the kernel holds for an unresolved
// neighbour are dropped, which RC repairs by going back N. Each sender
// sends a datagram to the receiver's discard port and waits for the ICMP
// port unreachable that proves the way back works too.
func warmPaths(dumbbell *lab.Dumbbell) error {
	dst := netip.AddrPortFrom(dumbbell.ReceiverAddr, 9).String()
	for _, s := range dumbbell.Senders {
		err := s.Do(func() error {
			c, err := net.Dial("udp4", dst)
			if err != nil {
				return err
			}
			defer c.Close()
			for range 3 {
				if _, err := c.Write([]byte("fabricdemo")); err != nil {
					return err
				}
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				var b [16]byte
				if _, err = c.Read(b[:]); errors.Is(err, syscall.ECONNREFUSED) {
					return nil
				}
			}
			return fmt.Errorf("no ICMP answer from %s", dst)
		})
		if err != nil {
			return fmt.Errorf("%s: resolve the path to r: %w", s.Name, err)
		}
	}
	return nil
}

// livePoint is what the live view diffs from one second to the next.
type livePoint struct {
	t         time.Duration
	recvBytes []uint64 // per flow, receiver side
	cnps      []uint64 // per flow, rp_cnp_handled
	retr      []uint64 // per flow, retransmitted packets
	cc        []agent.CCState
	active    []bool
	cnpSent   uint64 // np_cnp_sent, all receiver QPs
}

func takeLivePoint(t time.Duration, flows []*roceFlow) livePoint {
	lp := livePoint{t: t}
	for _, f := range flows {
		rc, sc := f.rqp.Counters(), f.sqp.Counters()
		cs, _ := f.sqp.CC()
		lp.recvBytes = append(lp.recvBytes, rc.RecvBytes)
		lp.cnps = append(lp.cnps, sc.RPCNPHandled)
		lp.retr = append(lp.retr, sc.RetransmitPackets)
		lp.cc = append(lp.cc, cs)
		lp.active = append(lp.active, f.started)
		lp.cnpSent += rc.NPCNPSent
	}
	return lp
}

// since turns two live points into per-flow interval values.
func (lp *livePoint) since(prev *livePoint) []FlowInterval {
	out := make([]FlowInterval, len(lp.recvBytes))
	dt := (lp.t - prev.t).Seconds()
	for i := range out {
		var pb, pc, pr uint64
		if i < len(prev.recvBytes) {
			pb, pc, pr = prev.recvBytes[i], prev.cnps[i], prev.retr[i]
		}
		fi := FlowInterval{Active: lp.active[i], RcBps: float64(lp.cc[i].Rc), Alpha: lp.cc[i].Alpha,
			CNPs: sub(lp.cnps[i], pc), Retransmits: sub(lp.retr[i], pr)}
		if dt > 0 {
			fi.GoodputBps = float64(sub(lp.recvBytes[i], pb)) * 8 / dt
		}
		out[i] = fi
	}
	return out
}

// add appends one fast sample.
func (s *Series) add(t float64, backlog uint64, flows []*roceFlow) {
	s.T = append(s.T, t)
	s.BacklogBytes = append(s.BacklogBytes, backlog)
	for i, f := range flows {
		fs := &s.Flows[i]
		cs, _ := f.sqp.CC() // zero before the flow starts
		rc := f.rqp.Counters()
		fs.RcBps = append(fs.RcBps, float64(cs.Rc))
		fs.RtBps = append(fs.RtBps, float64(cs.Rt))
		fs.Alpha = append(fs.Alpha, cs.Alpha)
		fs.RecvBytes = append(fs.RecvBytes, rc.RecvBytes)
	}
}

// knobValues lists every mlx5 knob and variant switch of p as Get prints
// them, for the report.
func knobValues(p *dcqcn.Params) map[string]string {
	m := map[string]string{}
	for _, names := range [][]string{dcqcn.KnobNames(), dcqcn.VariantNames()} {
		for _, n := range names {
			if v, err := p.Get(n); err == nil {
				m[n] = v
			}
		}
	}
	return m
}

// roceIntro describes the lab, the port, the DCQCN settings and the flows.
func (d *demo) roceIntro(rps string, flows []*roceFlow) {
	o, info, cc, p := d.w, d.port.Info(), &d.cfg.Classes[qdisc.ClassRoCE], &d.w.params
	b := d.dumbbell.Bottleneck
	names := make([]string, len(d.dumbbell.Senders))
	for i, s := range d.dumbbell.Senders {
		names[i] = s.Name
	}
	d.printf("\nlab    %s -> sw -> r   (namespaces %s-*)\n", strings.Join(names, ","), d.dumbbell.RunID())
	if o.cpuShare > 0 {
		d.printf("rate   %s: this process gets %.2f of the CPUs (%s from %.2f, else %s; -rate sets it)\n", d.o.rate, o.cpuShare, defaultRate, minShareForDefault, busyRate)
	}
	d.printf("port   sw:%s -> r:%s at %s: HTB queue, eBPF ECN marking (attach %s, dequeue hook on r:%s)\n",
		b.Dev, b.PeerDev, o.rate, info.Attach, info.PeerDev)
	d.scaleIntro()
	d.printf("class  3 %q, DSCP %d: %s, buffer %sKB (the CP)\n", cc.Name, qdisc.DSCPRoCE, wredText(cc), kb(uint64(cc.LimitBytes)))
	if cc.XoffBytes != 0 {
		d.printf("PPFC   class 3: a packet that takes the queue to xoff %sKB stops its sender for the time the queue takes to drain to xon/2;\n"+
			"       the next ACK toward a stopped sender once the queue is down to xon %sKB resumes it, a pause that ends above xon gets a hold\n"+
			"       (paused again) (seed 003; -ppfc off turns it off)\n",
			kb(uint64(cc.XoffBytes)), kb(uint64(cc.XonBytes)))
		if cc.AlarmBytes != 0 {
			d.printf("       alarm %sKB: a packet that takes the queue there warns its sender once per episode: no rate increase for the drain time to xon\n",
				kb(uint64(cc.AlarmBytes)))
		}
	} else {
		d.printf("PPFC   off (-ppfc): a full buffer drops\n")
	}
	d.printf("class  6 %q, DSCP %d: strict priority (CNPs; here they return r -> sw -> s on uncongested links)\n",
		d.cfg.Classes[qdisc.ClassCNP].Name, qdisc.DSCPCNP)
	if rps != "" {
		d.printf("rx     RPS: %s (keeps each flow in order through the veths)\n", rps)
	}
	d.printf("hosts  one RoCE agent per namespace in this process (UDP %d): RC QPs, RDMA WRITE of %d KiB messages, MTU %d, ECT(0)\n",
		roce.UDPPort, messageBytes>>10, o.mtu)
	nGet := func(n string) string { v, _ := p.Get(n); return v }
	d.printf("NP     receiver (%s): a CNP per QP at most every min_time_between_cnps %s us, DSCP %d\n", o.np, nGet("min_time_between_cnps"), p.CNPDSCP)
	inc, dec := knobSummary(p)
	d.printf("RP     senders (CNPs taken by the %s): DCQCN %q profile, rate knobs scaled to %s, %s\n", o.rp, o.profile, o.rate, stretchText(o.stretch))
	d.printf("       climb: %s\n", inc)
	d.printf("       cut:   %s\n", dec)
	if len(o.knobs) > 0 {
		d.printf("       -dcqcn %s\n", strings.Join(o.knobs, ","))
	}
	d.printf("flows  %d sender(s) x %d QP, a new sender every %s, all end at %s\n\n", o.senders, o.qps, o.stagger, o.duration)
	d.printf("Every second, per flow: goodput (payload placed at the receiver), the sender's Rc (wire rate) and α, CNPs it\n")
	d.printf("handled, packets it retransmitted; class 3 of the port: rate, CE marks, CNPs the receiver sent, backlog now,\n")
	d.printf("gauge [#=queue |=min_th, right edge=max_th], sojourn p50/p99 (from log2 bins), drops.\n")
	d.printf("Watch a sender join at the line rate: the queue passes min_th, the port marks CE, the receiver sends CNPs, each\n")
	d.printf("sender cuts Rc by α/2 per CNP and climbs back between them, and the flows settle at 1/%d of the port each.\n\n", len(flows))
}
