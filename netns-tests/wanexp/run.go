//go:build linux

package main

// One scheme's run: a fresh WAN lab, its ports, PEs and agent, the RoCE
// hosts, the traffic, the sampler; then the counters.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/link"
	"github.com/fabriclab/fabriclab/host/lab/stats"
	"github.com/fabriclab/fabriclab/host/pe"
	"github.com/fabriclab/fabriclab/netns-tests/internal/rocelab"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

const (
	longMsgBytes = 64 << 10 // a long flow's WRITEs
	shortTimeout = 2 * time.Second
	// drainWait bounds the wait for the queues to empty after the traffic.
	drainWait = 2 * time.Second
)

// wanPaths is the reroute agent's Paths: both cores by ECMP, or c1.
type wanPaths struct{ w *lab.WAN }

func (p wanPaths) Spill(spill bool) error {
	if spill {
		return p.w.SetRoute(lab.WANViaBoth)
	}
	return p.w.SetRoute(lab.WANViaCore1)
}

// senderParams is the senders' DCQCN: the lab profile (dcqcn.LabParams,
// the RoCE tests') at the core's rate, its timers (rate increase T, α
// decay K) at -sender-rtt, since a cut takes a WAN RTT to show.
func (o *options) senderParams() dcqcn.Params {
	p := dcqcn.LabParams(o.rate)
	p.RPGTimeReset = o.senderRTT
	p.DCETCPRTT = o.senderRTT
	return p
}

// inflight bounds a QP's unacknowledged bytes to Rc times the WAN RTT
// plus the time t2-max takes to drain (the experiment's rule).
func (o *options) inflight() time.Duration {
	return 2*o.delay + time.Duration(float64(o.t2Max)*8/float64(o.rate)*float64(time.Second))
}

// runScheme runs sc once in a lab of its own, closed before it returns.
// sc is the fabric's: the lab runs it slowed by -timescale, and the result
// is the fabric's again. A host-lost meter (host/hostlost) runs from the
// long flows' start to the traffic's end: the ports' idle and held-back
// time (the cores', PE1's limiter's) against the agents' held time.
func (x *experiment) runScheme(ctx context.Context, sc Scheme, run int) (res Result, err error) {
	o := x.o
	k := o.timescale
	res = Result{Scheme: sc.Name, Label: sc.Label, Run: run}
	spec := lab.WANSpec{Senders: o.senders, SecondPath: sc.SecondPath, WANDelay: o.wire(o.delay), CorePort: sc.Core.Slowed(k),
		Tunnel: tunnel.Config{TwoThreshold: sc.TwoThreshold}}
	if sc.SecondPath {
		c2 := sc.Core.Slowed(k)
		spec.SecondCorePort = &c2
	}
	w, err := lab.NewWAN(spec)
	if err != nil {
		return res, err
	}
	defer func() {
		id := w.RunID()
		err = errors.Join(err, w.Close())
		if left, _ := lab.LiveNamespaces(id + "-"); len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("namespaces left behind: %v", left))
		}
	}()

	if _, err := w.SteerRx(ctx); err != nil {
		return res, err
	}

	var limiter *qdisc.Port
	var lim pe.Limiter
	if sc.Limiter != nil {
		u := w.Paths[0].Uplink
		limiter, err = qdisc.Attach(sc.Limiter.Slowed(k), qdisc.AttachOptions{Dev: u.Dev, Netns: u.Node.NetnsName, PeerDev: u.PeerDev, PeerNetns: u.PeerNode.NetnsName})
		if err != nil {
			return res, fmt.Errorf("PE1 limiter on %s:%s: %w", u.Node.Name, u.Dev, err)
		}
		defer func() { err = errors.Join(err, limiter.Close()) }()
		lim = pe.PortLimiter{Port: limiter}
	}
	var paths pe.Paths
	if sc.SecondPath {
		paths = wanPaths{w}
	}
	ag, err := pe.New(sc.Agent.Slowed(k), lim, paths, pe.Monotonic{})
	if err != nil {
		return res, err
	}

	m, err := hostlost.NewMeter(hostlost.MeterConfig{})
	if err != nil {
		return res, err
	}
	ports := []*qdisc.Port{w.CorePort}
	meterPorts := []struct {
		name string
		p    *qdisc.Port
	}{{portC1, w.CorePort}}
	if sc.SecondPath {
		ports = append(ports, w.Paths[1].Port)
		meterPorts = append(meterPorts, struct {
			name string
			p    *qdisc.Port
		}{portC2, w.Paths[1].Port})
	}
	if limiter != nil {
		meterPorts = append(meterPorts, struct {
			name string
			p    *qdisc.Port
		}{portPE1, limiter})
	}
	var feeds []func() error
	stopFeeds := func() error {
		var errs []error
		for _, f := range feeds {
			errs = append(errs, f())
		}
		return errors.Join(errs...)
	}
	// Before the ports and the agents close: the feeds, then the meter.
	defer func() {
		err = errors.Join(err, stopFeeds())
		m.Stop()
	}()
	for _, mp := range meterPorts {
		stop, err := lab.MeterPort(m, mp.name, mp.p, qdisc.ClassRoCE)
		if err != nil {
			return res, err
		}
		feeds = append(feeds, stop)
	}

	// The senders' packets reach the cores a WAN delay after they leave,
	// what the receiver's replies release two (PE1's limiter, before the
	// fiber, sees them a delay earlier: its figures lean late).
	hosts, err := rocelab.New(w.Senders, w.SenderAddrs, w.Receiver, w.ReceiverAddr, o.senderParams(), o.inflight(),
		rocelab.Options{Timescale: k, Held: func(i int) *hostlost.Log {
			if i < 0 {
				return m.HeldVia(2 * o.wire(o.delay))
			}
			return m.HeldVia(o.wire(o.delay))
		}})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, hosts.Close()) }()

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg, shortWG sync.WaitGroup
	var agentErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		agentErr = ag.Run(rctx, w.PE1)
	}()
	defer func() {
		cancel()
		wg.Wait()
		shortWG.Wait() // on an early return: before the hosts close
		if agentErr != nil && !errors.Is(agentErr, context.Canceled) {
			err = errors.Join(err, fmt.Errorf("PE agent: %w", agentErr))
		}
	}()

	// Resolve every neighbour on the way and start each QP's path with
	// a small WRITE per sender, so the onset is the long flows'.
	for i := range w.Senders {
		p, err := hosts.Pair(i)
		if err != nil {
			return res, err
		}
		_, err = p.Message(rctx, 1024, o.wire(shortTimeout))
		p.Destroy()
		if err != nil {
			return res, fmt.Errorf("first WRITE from %s: %w", w.Senders[i].Name, err)
		}
	}
	time.Sleep(50 * time.Millisecond)

	before, err := readPorts(ports, limiter)
	if err != nil {
		return res, err
	}
	var long []*rocelab.Pair
	defer func() {
		for _, p := range long {
			p.Destroy()
		}
	}()
	for i := range w.Senders {
		p, err := hosts.Pair(i)
		if err != nil {
			return res, err
		}
		long = append(long, p)
	}
	acked0 := ackedBytes(long)
	hostDrops0, err := hostDrops(w)
	if err != nil {
		return res, err
	}
	if err := m.Start(); err != nil {
		return res, err
	}
	start, startMono := time.Now(), hostlost.Now()
	for i, p := range long {
		if err := p.S.Start(agent.Stream{Op: agent.OpWrite, MessageBytes: longMsgBytes}); err != nil {
			return res, fmt.Errorf("long flow from %s: %w", w.Senders[i].Name, err)
		}
	}
	end := start.Add(o.wire(o.duration))

	// The short WRITEs, from s1.
	var fcts []time.Duration
	var spans [][2]time.Duration // each WRITE's, on the meter's clock
	var shortFailed atomic.Int64
	if o.shortEvery > 0 {
		shortWG.Add(1)
		go func() {
			defer shortWG.Done()
			t := time.NewTicker(o.wire(o.shortEvery))
			defer t.Stop()
			for {
				select {
				case <-rctx.Done():
					return
				case now := <-t.C:
					if !now.Before(end) {
						return
					}
					p, err := hosts.Pair(0)
					if err != nil {
						shortFailed.Add(1)
						continue
					}
					from := hostlost.Now()
					fct, err := p.Message(rctx, int(o.shortBytes), o.wire(shortTimeout))
					p.Destroy()
					if err != nil {
						if rctx.Err() == nil {
							shortFailed.Add(1)
						}
						continue
					}
					fcts = append(fcts, fct)
					spans = append(spans, [2]time.Duration{from, hostlost.Now()})
				}
			}
		}()
	}

	ss, err := x.sampleUntil(rctx, start, end, ports, limiter, ag, long)
	if err != nil {
		return res, err
	}
	window, endMono := time.Since(start), hostlost.Now()
	after, err := readPorts(ports, limiter)
	if err != nil {
		return res, err
	}
	acked := ackedBytes(long) - acked0
	for i, p := range long {
		if err := p.S.Err(); err != nil {
			return res, fmt.Errorf("long flow from %s: %w", w.Senders[i].Name, err)
		}
	}
	for _, p := range long {
		p.Destroy()
	}
	long = nil
	// The short WRITE in flight ends (its own timeout at most) before
	// the counters are read: the traffic's end.
	shortWG.Wait()
	if err := stopFeeds(); err != nil {
		return res, fmt.Errorf("host-lost meter: %w", err)
	}
	host := m.Stop()
	waitDrain(ctx, ports, limiter)

	hostDrops1, err := hostDrops(w)
	if err != nil {
		return res, err
	}
	res.Drops.Hosts, res.Drops.Backlog = hostDrops1[0]-hostDrops0[0], hostDrops1[1]-hostDrops0[1]
	as := ag.Stats()
	fabricWindow := k.Fabric(window)
	res.WindowS = fabricWindow.Seconds()
	res.fill(o, sc, ss, before, after, fabricWindow)
	res.GoodputMbps = float64(acked) * 8 / fabricWindow.Seconds() / 1e6
	// The host's part: each core's own starved time (a port the flows do
	// not cross, c2 before a spill, loses nothing while it idles), the
	// short WRITEs' on their path (c1 and PE1's limiter).
	starved := make([]time.Duration, len(after.cores))
	for i, n := range []string{portC1, portC2}[:len(after.cores)] {
		starved[i] = host.PortsStarvedBetween(startMono, endMono, n)
	}
	res.hostLost(&host, window, starved)
	shortStarved := make([]time.Duration, len(spans))
	for i, sp := range spans {
		shortStarved[i] = host.PortsStarvedBetween(sp[0], sp[1], portC1, portPE1)
	}
	// The PE's reaction, exactly: from the core's first light CNP (the
	// first light mark, timestamped in BPF) to the agent's first change
	// in place, both on CLOCK_MONOTONIC. The samples' estimate, resolved
	// to their period, stays as the fallback.
	if sc.Agent.Mode != pe.Observe {
		if light, _, err := w.CorePort.FirstWANCNP(qdisc.ClassRoCE); err == nil && light > 0 && as.FirstAction > light {
			res.PEReactionMs = msPtr(k.Fabric(as.FirstAction-light), true)
			res.PEReactionExact = true
		}
	}
	res.AgentLightCNPs, res.AgentActions = as.LightCNPs, uint64(len(as.Reaction))
	res.AgentReactionUs = stats.Summarize(durationsUs(as.Reaction, k))
	if sc.Agent.Mode == pe.RateLimit {
		res.PEMinRateMbps = float64(as.MinRate) * k.K() / float64(units.Mbit)
	}
	res.ShortFCTs = durationsUs(fcts, k)
	res.ShortFCTUs = stats.Summarize(res.ShortFCTs)
	res.ShortFCTNetUs = stats.Summarize(netUs(fcts, shortStarved, k))
	res.ShortFailed = int(shortFailed.Load())

	// Losses along the way.
	for _, p := range w.Paths {
		for _, d := range []*link.Delay{p.ForwardDelay, p.ReverseDelay} {
			if d != nil {
				s := d.Stats()
				res.Drops.Delay += s.Dropped + s.TunDropped + s.KernelDropped
			}
		}
		for _, t := range []*tunnel.PE{p.PE1, p.PE2} {
			st, err := t.Stats()
			if err != nil {
				return res, err
			}
			res.Drops.Other += st.Encap.TooBig + st.Encap.Errors
			if t == w.PE1 {
				res.PE1InnerCE = st.Encap.InnerCE
			}
		}
	}
	for _, h := range append([]*rocelab.Host{hosts.Recv}, hosts.Senders...) {
		c := h.Agent.Counters()
		res.Drops.Retransmits += c.RetransmitPackets
		res.Drops.Agents += c.SendErrors + c.ReplyOverruns
	}
	res.Drops.OutOfSequence = hosts.Recv.Agent.Counters().OutOfSequence
	if err := ag.Err(); err != nil {
		return res, fmt.Errorf("PE agent: %w", err)
	}
	return res, nil
}

// portCounters are the RoCE class counters of the core ports and PE1's
// limiter at one instant.
type portCounters struct {
	cores []qdisc.ClassStats
	pe    *qdisc.ClassStats
	// qdiscDrops are the root qdiscs' drops (HTB's leaves), cores and
	// then the limiter: losses the classes' counters do not see.
	qdiscDrops []uint64
}

func (pc *portCounters) readQdisc(p *qdisc.Port) error {
	q, err := p.Qdisc()
	if err != nil {
		return err
	}
	pc.qdiscDrops = append(pc.qdiscDrops, q.Drops)
	return nil
}

func readPorts(cores []*qdisc.Port, limiter *qdisc.Port) (portCounters, error) {
	var pc portCounters
	for _, p := range cores {
		st, err := p.Stats()
		if err != nil {
			return pc, err
		}
		pc.cores = append(pc.cores, st.Classes[qdisc.ClassRoCE])
		if err := pc.readQdisc(p); err != nil {
			return pc, err
		}
	}
	if limiter != nil {
		st, err := limiter.Stats()
		if err != nil {
			return pc, err
		}
		c := st.Classes[qdisc.ClassRoCE]
		pc.pe = &c
		if err := pc.readQdisc(limiter); err != nil {
			return pc, err
		}
	}
	return pc, nil
}

// fill sets the queue, utilization, mark and drop fields from the samples
// and the counters at the window's edges.
func (r *Result) fill(o *options, sc Scheme, ss []sample, before, after portCounters, window time.Duration) {
	r.CoreQueueKB = stats.Summarize(backlogKB(ss, func(s sample) uint64 { return s.Core }))
	util := func(k int) float64 {
		return 100 * float64(after.cores[k].DequeuedBytes-before.cores[k].DequeuedBytes) * 8 / (float64(sc.Core.Rate) * window.Seconds())
	}
	r.CoreUtil = util(0)
	if len(after.cores) > 1 {
		d := stats.Summarize(backlogKB(ss, func(s sample) uint64 { return s.Core2 }))
		r.Core2QueueKB = &d
		u := util(1)
		r.Core2Util = &u
	}
	if after.pe != nil {
		d := stats.Summarize(backlogKB(ss, func(s sample) uint64 { return s.PE }))
		r.PEQueueKB = &d
		r.Drops.PE = after.pe.DroppedPackets() - before.pe.DroppedPackets()
	}
	for k := range after.qdiscDrops {
		r.Drops.Qdisc += after.qdiscDrops[k] - before.qdiscDrops[k]
	}
	twoT := sc.Core.Classes[qdisc.ClassRoCE].ECN == qdisc.ECNTwoThreshold
	for k := range after.cores {
		a, b := &after.cores[k], &before.cores[k]
		drops := a.DroppedPackets() - b.DroppedPackets()
		if k == 0 {
			r.Drops.Core = drops
		} else {
			r.Drops.Core2 = drops
		}
		r.LightMarks += a.LightMarked - b.LightMarked
		if twoT {
			r.HeavyMarks += a.HeavyMarked - b.HeavyMarked
		} else {
			r.HeavyMarks += a.CEMarkedECT0 + a.CEMarkedECT1 - b.CEMarkedECT0 - b.CEMarkedECT1
		}
		r.CNPsToPE += a.WANCNPLightSent - b.WANCNPLightSent + a.WANCNPHeavySent - b.WANCNPHeavySent
	}
	peT, e2e, peOK, e2eOK := reactions(ss, uint64(o.t1), uint64(o.t2))
	if sc.Agent.Mode != pe.Observe {
		r.PEReactionMs = msPtr(peT, peOK)
	}
	r.E2EReactionMs = msPtr(e2e, e2eOK)
	if len(ss) > 0 {
		r.SenderCuts = ss[len(ss)-1].SenderCuts
	}
	r.SeriesEveryMs = float64(seriesEvery) / float64(time.Millisecond)
	r.Series = series(ss, seriesEvery)
}

// sampleUntil reads the queues, the agent and the senders' rate cuts
// every -sample from start until end.
func (x *experiment) sampleUntil(ctx context.Context, start, end time.Time, cores []*qdisc.Port, limiter *qdisc.Port, ag *pe.Agent, long []*rocelab.Pair) ([]sample, error) {
	every := x.o.wire(x.o.sampleEvery)
	out := make([]sample, 0, int(end.Sub(start)/every)+1)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case now := <-t.C:
			if now.After(end) {
				return out, nil
			}
			s := sample{At: x.o.timescale.Fabric(now.Sub(start))}
			var err error
			if s.Core, _, err = cores[0].Backlog(qdisc.ClassRoCE); err != nil {
				return out, err
			}
			if len(cores) > 1 {
				if s.Core2, _, err = cores[1].Backlog(qdisc.ClassRoCE); err != nil {
					return out, err
				}
			}
			if limiter != nil {
				if s.PE, _, err = limiter.Backlog(qdisc.ClassRoCE); err != nil {
					return out, err
				}
			}
			s.PEActions = uint64(len(ag.Stats().Reaction))
			for _, p := range long {
				if cc, ok := p.S.CC(); ok {
					s.SenderCuts += cc.Stats.RateCuts
				}
			}
			out = append(out, s)
		}
	}
}

// waitDrain waits (at most drainWait) for the queues to empty.
func waitDrain(ctx context.Context, cores []*qdisc.Port, limiter *qdisc.Port) {
	ports := cores
	if limiter != nil {
		ports = append(ports[:len(ports):len(ports)], limiter)
	}
	deadline := time.Now().Add(drainWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		busy := false
		for _, p := range ports {
			if b, _, err := p.Backlog(qdisc.ClassRoCE); err == nil && b > 0 {
				busy = true
			}
		}
		if !busy {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ackedBytes is the payload the long flows have had acknowledged.
func ackedBytes(long []*rocelab.Pair) uint64 {
	var n uint64
	for _, p := range long {
		acked, _ := p.S.Progress()
		n += acked * rocelab.MTU
	}
	return n
}

// hostDrops is the hosts' UDP RcvbufErrors (receiver and senders) and the
// machine's softnet backlog drops.
func hostDrops(w *lab.WAN) ([2]uint64, error) {
	var d [2]uint64
	for _, n := range append([]*lab.Node{w.Receiver}, w.Senders...) {
		v, err := n.UDPCounter("RcvbufErrors")
		if err != nil {
			return d, fmt.Errorf("%s: %w", n.Name, err)
		}
		d[0] += v
	}
	var err error
	d[1], err = lab.SoftnetDrops()
	return d, err
}
