package netnstests

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// ppfcCatch is what a source's UDP 4791 socket received: every datagram,
// with when and from where it came.
type ppfcCatch struct {
	mu   sync.Mutex
	got  []ppfcGot
	conn *net.UDPConn
	done chan struct{}
	any  chan struct{} // a token per datagram, dropped when full
}

type ppfcGot struct {
	at      time.Time
	from    netip.AddrPort
	payload []byte
}

// catchPPFC listens on UDP 4791 in n until the test ends.
func catchPPFC(t *testing.T, n *lab.Node) *ppfcCatch {
	t.Helper()
	c := &ppfcCatch{done: make(chan struct{}), any: make(chan struct{}, 1)}
	if err := n.Do(func() (err error) {
		c.conn, err = net.ListenUDP("udp4", &net.UDPAddr{Port: roce.UDPPort})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		buf := make([]byte, 2048)
		for {
			k, from, err := c.conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			c.mu.Lock()
			c.got = append(c.got, ppfcGot{time.Now(), from, append([]byte(nil), buf[:k]...)})
			c.mu.Unlock()
			select {
			case c.any <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { c.conn.Close(); <-c.done })
	return c
}

func (c *ppfcCatch) all() []ppfcGot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ppfcGot(nil), c.got...)
}

// TestPPFCWire: a UDP source overfills a class with xoff/xon. The port
// stops it: each notification 40 bytes of UDP payload to 4791 from
// 0xC0FC, with a valid ICRC, naming the congested destination and the port,
// PSNs in sequence. While the source ignores its stops it gets one stop (or
// hold, where the queue is between xon and xoff as a pause runs out) per
// pause, not one per packet. When it obeys (stops sending at the first
// one), the queue drains to xon before the pause ends, and the next packet
// toward the source (the receiver sends it one every 0.5 ms) carries a
// resume.
func TestPPFCWire(t *testing.T) {
	for _, am := range attachModes {
		t.Run(am.name, func(t *testing.T) {
			retryStarved(t, func(t *testing.T, hc *hostChecks) hostlost.Report { return ppfcWire(t, am.legacy, hc) })
		})
	}
}

// ppfcWire is one run of TestPPFCWire. Part 2's resume is host-sensitive
// (hc): it rides the receiver's next packet toward the source, one each
// 0.5 ms from a Go ticker, in the few ms between the queue's
// drain to xon and the pause's end; a late source or a stolen CPU
// misses it.
func ppfcWire(t *testing.T, legacy bool, hc *hostChecks) (host hostlost.Report) {
	const rate = 100 * units.Mbit
	const limit, xoff, xon = 512 * units.KiB, 300 * units.KiB, 200 * units.KiB
	cfg := qdisc.DefaultConfig(rate)
	cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "roce", LimitBytes: limit, ECN: qdisc.ECNOff,
		XoffBytes: xoff, XonBytes: xon}
	d, port, _, dst := udpPort(t, 1, cfg, legacy)
	catch := catchPPFC(t, d.Senders[0])
	self := netip.AddrPortFrom(d.SenderAddrs[0], roce.UDPPort)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	back := newSink(t, d.Senders[0])
	var backSends sendLog
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// One packet each 0.5 ms tick (2.4 kpps): the resume rides the
		// first in its ~8 ms window, and at one each 1.7 ms a late Go
		// ticker on a busy core missed it once in 16 runs, and once in
		// a whole-suite run with 0 steal.
		f := flow{tos: 0, payload: 64, rate: 4 * 64 * 8 * 1000 * units.Bit, total: 3 * time.Second, sends: &backSends}
		if _, err := f.send(ctx, d.Receiver, netip.AddrPortFrom(d.SenderAddrs[0], uint16(back.port))); err != nil && ctx.Err() == nil {
			t.Error(err)
		}
	}()
	defer wg.Wait()

	// 1. A source that ignores PPFC, at twice the rate for 300 ms.
	src := flow{tos: tosRoCENotECT, payload: 1400, rate: 2 * rate, total: 300 * time.Millisecond}
	sent, err := src.send(ctx, d.Senders[0], dst)
	if err != nil {
		t.Fatal(err)
	}
	st := settle(t, port)
	c := st.Classes[qdisc.ClassRoCE]
	got := catch.all()
	stops, holds, resumes := checkPPFCs(t, got, self, d.ReceiverAddr, port.Info().Ifindex, rate, limit, xon)
	t.Logf("1. ignoring: sent %d datagrams; class 3: max backlog %d B, dropped %d; PPFC stops sent %d, coalesced %d, holds sent %d, resumes sent %d; received %d stops, %d holds, %d resumes; port: PPFC errors %d",
		sent, c.MaxBacklogBytes, c.DroppedLimitPackets, c.PPFCStopsSent, c.PPFCStopsCoalesced, c.PPFCHoldsSent, c.PPFCResumesSent, stops, holds, resumes, st.Port.PPFCErrors())
	if stops == 0 || uint64(stops) != c.PPFCStopsSent || uint64(holds) != c.PPFCHoldsSent {
		t.Errorf("the source received %d stops and %d holds, the port sent %d and %d", stops, holds, c.PPFCStopsSent, c.PPFCHoldsSent)
	}
	// One per pause: the pauses here are 16-33 ms. A hold is a
	// pause too: the sender's bursts (a ticker on a busy core)
	// leave the queue between xon and xoff when a pause runs out.
	if stops+holds > 25 {
		t.Errorf("%d stops and %d holds in 300 ms: not one per pause", stops, holds)
	}
	if c.PPFCStopsCoalesced == 0 {
		t.Errorf("no stop was coalesced, though the source kept sending while paused")
	}

	// 2. A source that obeys: it stops sending at its first stop.
	time.Sleep(70 * time.Millisecond) // every pause of part 1 is over
	// Part 1's signals are drained before the watcher starts: a
	// stale one would stop the source before it sent (seen beside
	// stress-ng: 0 stops in part 2).
	for len(catch.any) > 0 {
		<-catch.any
	}
	before := len(catch.all())
	k0, w0 := readKernel(t), time.Now()
	sctx, scancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-catch.any:
		case <-sctx.Done():
		}
		scancel()
	}()
	src.total = 2 * time.Second
	if _, err := src.send(sctx, d.Senders[0], dst); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	quiet := time.Now()
	scancel()
	st = settle(t, port)
	c2 := st.Classes[qdisc.ClassRoCE]
	got = catch.all()
	stops2, holds2, resumes2 := checkPPFCs(t, got[before:], self, d.ReceiverAddr, port.Info().Ifindex, rate, limit, xon)
	t.Logf("2. obeying: stops sent %d, holds sent %d, resumes sent %d; received %d stops, %d holds, %d resumes",
		c2.PPFCStopsSent-c.PPFCStopsSent, c2.PPFCHoldsSent-c.PPFCHoldsSent, c2.PPFCResumesSent-c.PPFCResumesSent, stops2, holds2, resumes2)
	host = kernelShare(t, k0, time.Since(w0))
	if stops2 != 1 || holds2 != 0 {
		t.Fatalf("an obeying source received %d stops, %d holds and %d resumes, want 1, 0 and 1", stops2, holds2, resumes2)
	}
	// The resume's window: the stop's pause less the drain from xoff
	// to xon. The host spends it where the source sends on after the
	// stop arrived (its goroutines late: the queue drains that much
	// longer) and where the hypervisor steals (kernelShare). Nothing
	// here reads the port's maps or traces the scheduler meanwhile:
	// either makes the kernel skip the port's xmit hook, whose
	// departures then count late and hold the backlog above xon
	// (measured: the resume missed in 1 of 16 runs bare, about 1 in 5
	// with the runqueue tracer and the port's meter running).
	stop := got[before]
	var sf roce.PPFC
	_ = roce.ParsePPFC(stop.payload, &sf)
	drain := time.Duration(float64(xoff-xon) * 8 / float64(rate) * float64(time.Second))
	window := sf.Pause - drain
	overrun := max(quiet.Sub(stop.at), 0)
	t.Logf("host: the source sent on %v after the stop, of the resume's window of about %v",
		overrun.Round(10*time.Microsecond), window.Round(100*time.Microsecond))
	if overrun >= window/2 {
		host.HostStarved = true
	}
	// And the receiver's ticker must have sent toward the source between
	// the drain to xon (at the earliest) and the pause's end: a resume
	// needs a packet to ride.
	from, until := quiet.Add(drain), stop.at.Add(sf.Pause)
	n, gap := backSends.within(from, until), backSends.maxGap(from, until)
	t.Logf("host: the receiver sent %d packets toward the source from the earliest drain to xon to the pause's end (%v), none for %v at the longest",
		n, until.Sub(from).Round(100*time.Microsecond), gap.Round(10*time.Microsecond))
	// Its ticker asleep for a quarter of the window (2 ms, four of its
	// periods; 0.54-0.96 ms in 10 quiet runs, up to 4.2 ms beside
	// stress-ng) can leave the drain's end with no packet to ride: the
	// host's doing, not the port's (seen: 6 packets in 8.2 ms, and the
	// resume missed with no departure late in part 2).
	if until.After(from) && gap > until.Sub(from)/4 {
		host.HostStarved = true
	}
	if resumes2 != 1 {
		hc.Errorf("an obeying source received %d resumes, want 1", resumes2)
		return host
	}
	stop, resume := got[before], got[len(got)-1]
	var f roce.PPFC
	_ = roce.ParsePPFC(stop.payload, &f)
	// Resumed at xon, before the pause (drain to xon/2) ended. In time
	// only if the host let the receiver's ticker run: host-sensitive.
	if wait := resume.at.Sub(stop.at); resume.at.Before(quiet) {
		t.Errorf("resume %v after the stop, %v before the source went quiet", wait, quiet.Sub(resume.at))
	} else if wait >= f.Pause {
		hc.Errorf("resume %v after the stop (pause %v), %v after the source went quiet", wait, f.Pause, resume.at.Sub(quiet))
	} else {
		t.Logf("resumed %v after the stop (its pause: %v)", wait.Round(10*time.Microsecond), f.Pause)
	}
	if e := st.Port.PPFCErrors(); e != 0 {
		t.Errorf("%d PPFC notifications failed: %+v", e, st.Port)
	}
	return host
}

// checkPPFCs checks every datagram a source received is a well-formed PPFC
// notification from the port (roce.ParsePPFC, the ICRC, the congested
// destination and port, PSNs in sequence, a stop's or hold's pause at most
// the drain time from the limit to xon/2) and counts stops, holds and
// resumes.
func checkPPFCs(t *testing.T, got []ppfcGot, self netip.AddrPort, dest netip.Addr, ifindex int, rate units.Rate, limit, xon units.ByteSize) (stops, holds, resumes int) {
	t.Helper()
	maxPause := time.Duration(float64(limit-xon/2)*8/float64(rate)*float64(time.Second)) + time.Millisecond
	var lastPSN uint32
	for i, g := range got {
		var f roce.PPFC
		if err := roce.ParsePPFC(g.payload, &f); err != nil {
			t.Errorf("datagram %d from %v: %v (% x)", i, g.from, err, g.payload)
			continue
		}
		if g.from.Port() != 0xC0FC {
			t.Errorf("PPFC %d from %v: want source port 0xC0FC (49404)", i, g.from)
		}
		if !roce.VerifyICRC(g.from, self, g.payload) {
			t.Errorf("PPFC %d: ICRC does not verify", i)
		}
		if len(g.payload) != roce.PPFCLen {
			t.Errorf("PPFC %d: %d bytes", i, len(g.payload))
		}
		if f.Dest != dest {
			t.Errorf("PPFC %d names %v as the congested destination, want %v", i, f.Dest, dest)
		}
		if i > 0 && f.PSN != lastPSN+1 {
			t.Errorf("PPFC %d: PSN %d after %d", i, f.PSN, lastPSN)
		}
		lastPSN = f.PSN
		if int(f.Port) != ifindex&0xFFFF {
			t.Errorf("PPFC %d: congestion port %d, want the port's ifindex %d", i, f.Port, ifindex)
		}
		switch f.Action {
		case roce.PPFCStop, roce.PPFCHold:
			if f.Action == roce.PPFCStop {
				stops++
			} else {
				holds++
			}
			if f.Pause <= 0 || f.Pause > maxPause {
				t.Errorf("%v %d: pause %v, want (0, %v]", f.Action, i, f.Pause, maxPause)
			}
		case roce.PPFCResume:
			resumes++
		default:
			t.Errorf("PPFC %d: %v (no alarm threshold here)", i, f.Action)
		}
	}
	return stops, holds, resumes
}

// TestRoCEPPFCIncast: eight RoCEv2 senders (DCQCN, one QP each) start at
// once at the line rate. Before their first CNPs take effect they offer
// eight times what the port drains. With xoff at 2 max_th (above the WRED
// curve: PPFC is the backstop, not the control loop), the port stops each
// sender once its packets reach xoff. What arrives after that is the
// headroom a lossless port needs: what the senders had on the way, and what
// the host held upstream of the port. Measured over xoff: 0.1-1 MiB at
// 250-500 Mbit/s (4 ms of 500 Mbit/s is 1/4 of it); the buffer gives 3 MiB
// (limit 8 max_th, the lab's usual). With the alarm halfway between xon and
// xoff, the senders whose packets reach it are warned first (their DCQCN
// increases held for the drain time to xon); a sender whose pause runs out
// while the queue is still above xon is held (paused again).
//
// Two xon: 3/4 of xoff, where a sender is mostly resumed at xon before its
// pause (drain time to xon/2) ends (0-9 holds a run here); and 1/8 of xoff,
// where a pause ends above xon whenever more than xon/2 = xoff/16 arrived
// after the stop, less than the senders still have on the way (the peak
// was 0.15-0.4 xoff over xoff), so holds follow in every run (measured
// 5-69 at 500 Mbit/s, 12-209 at 250; xon 1/4 of xoff left a run without
// one). A low xon lengthens episodes (the WRED loop holds the queue above
// it), which the many holds show.
//
// Each run must be lossless everywhere: no port drop, no drop between the
// hooks, no socket or per-CPU backlog drop, no resend; every stop, hold,
// resume and alarm the port sent was taken by a sender, each hold paused
// its QP, each alarm held its QP's rate; alarms were sent (and holds, at
// xon 1/8); the port stays busy (utilization >= 95 % after the first
// second).
func TestRoCEPPFCIncast(t *testing.T) {
	roceSize(t)
	for _, v := range []struct {
		name      string
		xon       func(xoff units.ByteSize) units.ByteSize
		wantHolds bool
	}{
		{"xon=3/4xoff", func(xoff units.ByteSize) units.ByteSize { return xoff * 3 / 4 }, false},
		{"xon=1/8xoff", func(xoff units.ByteSize) units.ByteSize { return xoff / 8 }, true},
	} {
		t.Run(v.name, func(t *testing.T) {
			cfg := rocePortConfig()
			cc := &cfg.Classes[qdisc.ClassRoCE]
			cc.XoffBytes = 2 * roceMaxTh
			cc.XonBytes = v.xon(cc.XoffBytes)
			cc.AlarmBytes = (cc.XonBytes + cc.XoffBytes) / 2
			ppfcIncast(t, cfg, v.wantHolds)
		})
	}
}

// ppfcIncast runs the incast; its utilization, which a starving host
// moves, runs again in a host-starved run (retryStarved).
func ppfcIncast(t *testing.T, cfg qdisc.Config, wantHolds bool) {
	retryStarved(t, func(t *testing.T, hc *hostChecks) hostlost.Report {
		return ppfcIncastRun(t, hc, cfg, wantHolds)
	})
}

func ppfcIncastRun(t *testing.T, hc *hostChecks, cfg qdisc.Config, wantHolds bool) hostlost.Report {
	const senders = 8
	cc := &cfg.Classes[qdisc.ClassRoCE]
	b := newRoCEBed(t, senders, cfg)
	flows := make([]*roceFlow, senders)
	for i := range flows {
		flows[i] = b.dial(t, i, senderQPConfig(roceParams(t)), false)
	}
	run, skip := fabric(2*time.Second), fabric(500*time.Millisecond)
	drops0, rcvbuf0 := softnetDrops(), udpRcvbufErrors(t, b.d.Receiver)
	var sndbuf0 uint64
	for _, s := range b.d.Senders {
		sndbuf0 += udpRcvbufErrors(t, s)
	}
	b.startMeter(t)
	ss := runFlows(t, b, flows, run)
	host := b.hostLost(t)
	backlogDrops, rcvbufDrops := softnetDrops()-drops0, udpRcvbufErrors(t, b.d.Receiver)-rcvbuf0
	var sndbuf uint64
	for _, s := range b.d.Senders {
		sndbuf += udpRcvbufErrors(t, s)
	}
	sndbufDrops := sndbuf - sndbuf0
	w := between(sampleAt(ss, ss[0].at.Add(skip)), ss[len(ss)-1]).withHostLost(host)
	st := settle(t, b.port)
	r := st.Classes[qdisc.ClassRoCE]

	var resent, outOfSeq, pauses, holds, obeyed, increasesHeld, taken, held, resumed, alarmed, ignored uint64
	var paused time.Duration
	for i, f := range flows {
		cli, srv := f.qp.Counters(), f.peer.Counters()
		resent += cli.RetransmitPackets
		outOfSeq += srv.OutOfSequence
		pauses += cli.PPFCPauses
		holds += cli.PPFCHolds
		obeyed += cli.PPFCAlarmsObeyed
		paused += time.Duration(cli.PPFCPausedNs)
		if s, ok := f.qp.CC(); ok {
			increasesHeld += s.Stats.IncreaseHolds
		}
		ac := b.clients[i].Counters()
		taken += ac.PPFCReceivedStop
		held += ac.PPFCReceivedHold
		resumed += ac.PPFCReceivedResume
		alarmed += ac.PPFCReceivedAlarm
		ignored += ac.PPFCIgnoredSource + ac.PPFCIgnoredDestination
	}
	t.Logf("%d senders at once into %v: class 3 limit %s, xoff %s, alarm %s, xon %s (WRED min_th %s, max_th %s)",
		senders, roceRate, kib(float64(cc.LimitBytes)), kib(float64(cc.XoffBytes)), kib(float64(cc.AlarmBytes)), kib(float64(cc.XonBytes)),
		kib(float64(roceMinTh)), kib(float64(roceMaxTh)))
	t.Logf("port: max backlog %s, dropped %d, host queue dropped %d; PPFC stops sent %d (coalesced %d), holds %d (coalesced %d), resumes %d, alarms %d (coalesced %d); errors %d",
		kib(float64(r.MaxBacklogBytes)), portDrops(st), r.Host.DroppedPackets, r.PPFCStopsSent, r.PPFCStopsCoalesced, r.PPFCHoldsSent, r.PPFCHoldsCoalesced,
		r.PPFCResumesSent, r.PPFCAlarmsSent, r.PPFCAlarmsCoalesced, st.Port.PPFCErrors())
	t.Logf("senders: took %d stops, %d holds, %d resumes, %d alarms (%d ignored); QPs paused %d times and held %d, %v in all; %d alarms obeyed, %d DCQCN increase events held; retransmitted %d, out_of_sequence %d",
		taken, held, resumed, alarmed, ignored, pauses, holds, paused.Round(time.Millisecond), obeyed, increasesHeld, resent, outOfSeq)
	t.Logf("hosts: receive-buffer drops %d at the receiver, %d at the senders; per-CPU backlog drops %d; utilization %.3f over %v after the first quarter; %s: utilization net of it %.3f",
		rcvbufDrops, sndbufDrops, backlogDrops, w.utilization(roceRate), w.dur.Round(time.Millisecond), w.hostNote(), w.utilizationNet(roceRate))

	if d := portDrops(st); d != 0 || r.Host.DroppedPackets != 0 {
		t.Errorf("not lossless: the port dropped %d packets, the host queue after it %d", d, r.Host.DroppedPackets)
	}
	if resent != 0 || outOfSeq != 0 || rcvbufDrops != 0 || sndbufDrops != 0 || backlogDrops != 0 {
		t.Errorf("not lossless: %d resent, %d out of sequence, %d + %d receive-buffer drops, %d per-CPU backlog drops",
			resent, outOfSeq, rcvbufDrops, sndbufDrops, backlogDrops)
	}
	if over := int64(r.MaxBacklogBytes) - int64(cc.XoffBytes); over > int64(cc.LimitBytes-cc.XoffBytes)/2 {
		t.Errorf("the backlog went %s over xoff: more than half the headroom", kib(float64(over)))
	}
	if r.PPFCStopsSent == 0 || pauses == 0 {
		t.Errorf("PPFC never engaged: %d stops sent, %d pauses", r.PPFCStopsSent, pauses)
	}
	if taken != r.PPFCStopsSent || held != r.PPFCHoldsSent || resumed != r.PPFCResumesSent || alarmed != r.PPFCAlarmsSent ||
		ignored != 0 || st.Port.PPFCErrors() != 0 {
		t.Errorf("PPFC notifications lost or refused: the port sent %d stops, %d holds, %d resumes and %d alarms (%d failed), the senders took %d, %d, %d and %d (%d ignored)",
			r.PPFCStopsSent, r.PPFCHoldsSent, r.PPFCResumesSent, r.PPFCAlarmsSent, st.Port.PPFCErrors(), taken, held, resumed, alarmed, ignored)
	}
	// One QP per sender: each hold paused it, each alarm held its rate.
	if holds != held || obeyed != alarmed {
		t.Errorf("the senders took %d holds and %d alarms, their QPs obeyed %d and %d", held, alarmed, holds, obeyed)
	}
	if r.PPFCAlarmsSent == 0 {
		t.Errorf("no alarm sent: the backlog crossed alarm %s on its way to xoff", kib(float64(cc.AlarmBytes)))
	}
	// Holds follow the senders' bursts when a pause runs out. A stop's
	// pause drains the backlog the packet found to xon/2, so the first
	// sender stopped near xoff finds the queue above xon when its pause
	// ends if more than xon/2 arrived after its stop: the backlog's peak
	// over xoff says whether that happened. It did in every quiet run
	// (0.15-0.4 xoff over); beside stress-ng --cpu 2 --cpu-load 50, with
	// the fabric slowed to 125 Mbit/s, one run peaked 47 KiB over xoff
	// against xon/2 = 64 KiB and sent none. TestPPFCHoldAndAlarm (qdisc)
	// checks the rule itself packet by packet. The holds' timing is the
	// host's too (none beside stress-ng in a starved run).
	over := units.ByteSize(max(int64(r.MaxBacklogBytes)-int64(cc.XoffBytes), 0))
	switch {
	case !wantHolds:
	case over > cc.XonBytes/2 && r.PPFCHoldsSent == 0:
		hc.Errorf("no hold sent: the backlog peaked %s over xoff, more than xon/2 %s, yet no pause ran out above xon %s",
			kib(float64(over)), kib(float64(cc.XonBytes/2)), kib(float64(cc.XonBytes)))
	case over <= cc.XonBytes/2:
		t.Logf("holds not asserted: the backlog peaked only %s over xoff, not more than xon/2 %s (%d holds sent)",
			kib(float64(over)), kib(float64(cc.XonBytes/2)), r.PPFCHoldsSent)
	}
	if u := w.utilizationNet(roceRate); u < 0.95 {
		hc.Errorf("utilization %.3f after the first quarter net of the host's %v (raw %.3f), want >= 0.95", u, w.starved, w.utilization(roceRate))
	}
	return host
}
