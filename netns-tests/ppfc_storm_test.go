package netnstests

import (
	"net/netip"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc"
)

// The PPFC storms' setting: a window of the flow's rate before each storm
// and during it, and the storm's rate (issue 28, fault 5).
const (
	stormWindow = time.Second
	stormRate   = 200_000 // notifications per second
)

// TestRoCEPPFCStorm (issue 28, fault 5): PPFC notifications from the wire
// against a RoCEv2 sender whose agent takes them only from its switch
// (agent.Config.PPFCSources: the switch's two addresses), while a verified
// WRITE stream runs at a quarter of the port's rate, without ECN (no CNP
// moves the rate). Injected from the switch's namespace toward s1's agent:
//   - the same storm to a port of s1 nobody listens on: what receiving it
//     costs s1's kernel, and sending it this VM (logged);
//   - a storm from outside PPFCSources: stops of the longest Pause
//     Duration naming the flow's destination, up to 200 kpps for a second
//     (the injector reaches 86-198 k here): each one dropped by the host's
//     steering before the agent (its ppfc_ignored_source; or at a full
//     per-CPU backlog, counted there), and no pause;
//   - stops from the switch naming a destination no QP talks to, as fast:
//     ppfc_ignored_destination, no pause;
//   - stops from the switch naming the flow's destination, 65,535 µs,
//     every 5 ms for a second (a stuck port): the watchdog ends the pause
//     storm (agent.Config.PPFCWatchdog, 200 ms), no pause lasts longer
//     than it (plus the longest stop it obeyed), and the flow gets back to
//     90 % of its rate in the second after.
//
// The stream ends normally: every byte acknowledged and verified, no QP
// error, no drop at the port. Under the stranger's storm, which the host's
// steering drops before the agent's socket (pktio.RoCEConn.SetPPFCSources),
// the flow keeps at least 90 % of its rate in the second before (issue 28):
// measured 0.89-0.98 in 14 quiet runs (0.89 once, in a run the host
// starved for 49 %: rerun, 0.95) and 0.95-1.01 in 10 beside stress-ng, as
// under the same storm to a closed port (0.86-1.01). Under the switch's stops for an unknown
// destination, which the agent must read to judge, it kept 0.68-0.97:
// logged, not asserted (the storm's sender, s1's kernel and the agent
// share this 2-core VM's CPUs).
func TestRoCEPPFCStorm(t *testing.T) {
	roceSize(t)
	// The rates, which a starving host moves, run again in a host-starved
	// run (retryStarved); the counts never do.
	retryStarved(t, ppfcStorm)
}

func ppfcStorm(t *testing.T, hc *hostChecks) hostlost.Report {
	cfg := rocePortConfig()
	cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "roce", LimitBytes: roceLimit, ECN: qdisc.ECNOff}
	swToS1 := netip.MustParseAddr("198.18.1.1")
	swToR := netip.MustParseAddr("198.19.0.1")
	b := newRoCEBedWith(t, 1, cfg, func(c *agent.Config) {
		c.PPFCSources = []netip.Prefix{netip.PrefixFrom(swToS1, 32), netip.PrefixFrom(swToR, 32)}
	})
	p, err := dcqcn.Profile("lab", fabricRate/4)
	if err != nil {
		t.Fatal(err)
	}
	p = p.Slowed(labScale)
	f := b.dial(t, 0, senderQPConfig(p), true)
	inj := newInjector(t, b.d.Switch)
	client := netip.AddrPortFrom(b.d.SenderAddrs[0], roce.UDPPort)
	stranger := netip.AddrPortFrom(netip.MustParseAddr("198.19.0.99"), roce.UDPPort)
	sw := netip.AddrPortFrom(swToS1, roce.UDPPort)
	ppfc := func(from netip.AddrPort, dest netip.Addr, pause time.Duration) []byte {
		buf := make([]byte, roce.PPFCLen)
		if _, err := roce.BuildPPFC(buf, from, client, &roce.PPFC{Dest: dest, Action: roce.PPFCStop, Port: 7, Pause: pause}); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	// acked is the packets acknowledged so far.
	acked := func() uint64 { a, _ := f.qp.Progress(); return a }
	// window returns the flow's rate, packets/s, over d from now.
	window := func(d time.Duration) float64 {
		a0, t0 := acked(), time.Now()
		time.Sleep(d)
		return float64(acked()-a0) / time.Since(t0).Seconds()
	}
	// storm sends pkt from from at rate per second for d (the share due
	// at once, in sendmmsg batches) and returns how many it sent and the
	// flow's rate meanwhile.
	storm := func(pkt []byte, from netip.AddrPort, rate int, d time.Duration) (int, float64) {
		a0, start := acked(), time.Now()
		sent := 0
		for time.Since(start) < d {
			if due := int(time.Since(start).Seconds() * float64(rate)); due > sent {
				inj.sendBatch(t, from, client, 0xC0, pkt, due-sent)
				sent = due
			}
			time.Sleep(200 * time.Microsecond)
		}
		return sent, float64(acked()-a0) / time.Since(start).Seconds()
	}
	counters := func() agent.AgentCounters { return b.clients[0].Counters() }
	rcvbuf0 := udpRcvbufErrors(t, b.d.Senders[0])

	b.startMeter(t)
	f.start(t, 0, true)
	time.Sleep(300 * time.Millisecond)

	// 0. The same storm to a port of s1 nobody listens on: what receiving
	// it costs the host's kernel, and sending it this VM, without the
	// agent (a storm's source is another machine on a real fabric).
	base := window(stormWindow)
	closed := netip.AddrPortFrom(client.Addr(), roce.UDPPort+1)
	pkt := ppfc(stranger, b.d.ReceiverAddr, roce.MaxPPFCPause)
	a0, start := acked(), time.Now()
	sent := 0
	for time.Since(start) < stormWindow {
		if due := int(time.Since(start).Seconds() * stormRate); due > sent {
			inj.sendBatch(t, stranger, closed, 0xC0, pkt, due-sent)
			sent = due
		}
		time.Sleep(200 * time.Microsecond)
	}
	kernelOnly := float64(acked()-a0) / time.Since(start).Seconds()
	t.Logf("storm to a closed port: %d packets in %v; rate %.0f pkt/s before, %.0f during (%.2f)", sent, stormWindow, base, kernelOnly, kernelOnly/base)
	kernelBase := base

	// 1. A stranger's storm: the host's steering drops it before the
	// agent's socket (pktio.RoCEConn.SetPPFCSources).
	steering := func() pktio.SteeringStats {
		st, err := b.conns[0].SteeringStats()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	base = window(stormWindow)
	c0, q0, s0, backlog0 := counters(), f.qp.Counters(), steering(), softnetDrops()
	sent, during := storm(pkt, stranger, stormRate, stormWindow)
	time.Sleep(50 * time.Millisecond)
	c1, q1, s1 := counters(), f.qp.Counters(), steering()
	backlog := softnetDrops() - backlog0
	rcvbuf := udpRcvbufErrors(t, b.d.Senders[0]) - rcvbuf0
	dropped := s1.PPFCIgnoredSource - s0.PPFCIgnoredSource
	ignored := c1.PPFCIgnoredSource - c0.PPFCIgnoredSource
	t.Logf("stranger's storm: %d stops in %v; dropped by the steering (ppfc_ignored_source) +%d, by the agent +%d, per-CPU backlog drops %d, pauses +%d; rate %.0f pkt/s before, %.0f during (%.2f)",
		sent, stormWindow, dropped, ignored, backlog, q1.PPFCPauses-q0.PPFCPauses, base, during, during/base)
	if dropped > uint64(sent) || dropped+backlog < uint64(sent) || ignored != 0 || c1.PPFCReceivedStop != c0.PPFCReceivedStop || q1.PPFCPauses != q0.PPFCPauses {
		t.Errorf("a stranger's %d stops: %d dropped by the steering, %d at per-CPU backlogs, %d reached the agent (%d ignored for their source), %d pauses: want all dropped before the agent, none obeyed",
			sent, dropped, backlog, c1.PPFCReceivedStop-c0.PPFCReceivedStop, ignored, q1.PPFCPauses-q0.PPFCPauses)
	}
	stormKept := [2]float64{during / base}
	// Dropped before the socket, the stranger's storm costs the flow what
	// receiving it costs the kernel (issue 28 asks the flow keep 90 %).
	if during < 0.9*base {
		hc.Errorf("the flow kept %.2f of its rate under a stranger's storm the steering drops: want at least 0.9", during/base)
	}

	// 2. The switch names a destination no QP talks to.
	base = window(stormWindow)
	sent, during = storm(ppfc(sw, netip.MustParseAddr("198.19.7.7"), roce.MaxPPFCPause), sw, stormRate, stormWindow)
	time.Sleep(50 * time.Millisecond)
	c2, q2 := counters(), f.qp.Counters()
	rcvbuf2 := udpRcvbufErrors(t, b.d.Senders[0]) - rcvbuf0 - rcvbuf
	ignored = c2.PPFCIgnoredDestination - c1.PPFCIgnoredDestination
	t.Logf("unknown destination: %d stops; ppfc_ignored_destination +%d, receive-buffer drops %d, pauses +%d; rate %.0f before, %.0f during (%.2f)",
		sent, ignored, rcvbuf2, q2.PPFCPauses-q1.PPFCPauses, base, during, during/base)
	if ignored+rcvbuf2 < uint64(sent) || q2.PPFCPauses != q1.PPFCPauses {
		t.Errorf("%d stops for an unknown destination: %d ignored, %d dropped at the socket, %d pauses: want every one ignored or dropped, none obeyed",
			sent, ignored, rcvbuf2, q2.PPFCPauses-q1.PPFCPauses)
	}
	stormKept[1] = during / base
	// What the agent's handling costs the flow beyond the kernel's and
	// this VM's share: logged, not asserted (see the test's comment).
	t.Logf("the flow kept %.2f under the stranger's storm (dropped by the steering), %.2f under the switch's the agent handled, %.2f under the one to a closed port",
		stormKept[0], stormKept[1], kernelOnly/kernelBase)

	// 3. A stuck port: the switch's stops for the flow's destination,
	// every 5 ms for a second.
	base = window(stormWindow)
	sent, during = storm(ppfc(sw, b.d.ReceiverAddr, roce.MaxPPFCPause), sw, 200, stormWindow)
	after := window(stormWindow)
	q3 := f.qp.Counters()
	trips := q3.PPFCWatchdogTrips - q2.PPFCWatchdogTrips
	paused := time.Duration(q3.PPFCPausedNs - q2.PPFCPausedNs)
	t.Logf("stuck port: %d stops in %v; pauses +%d, paused %v, watchdog trips +%d, stops ignored +%d; rate %.0f before, %.0f during (%.2f), %.0f after (%.2f)",
		sent, stormWindow, q3.PPFCPauses-q2.PPFCPauses, paused.Round(time.Millisecond), trips, q3.PPFCWatchdogIgnored-q2.PPFCWatchdogIgnored,
		base, during, during/base, after, after/base)
	if trips == 0 || paused == 0 || paused > stormWindow*3/4 {
		t.Errorf("a stuck port's stops for %v: paused %v, %d watchdog trips: want the watchdog to end the storm (a trip, paused at most 3/4 of it)", stormWindow, paused, trips)
	}
	if after < 0.9*base {
		hc.Errorf("the flow got back %.2f of its rate after the stuck port's storm: want at least 0.9", after/base)
	}
	host := b.hostLost(t)

	f.stop(t)
	if err := f.qp.Err(); err != nil {
		t.Errorf("qp error: %v", err)
	}
	if d := portDrops(settle(t, b.port)); d != 0 {
		t.Errorf("the port dropped %d packets", d)
	}
	return host
}
