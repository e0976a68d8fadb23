package netnstests

import (
	"cmp"
	"context"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/hostlost/runq"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/pe"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// wanCoreClass is the WAN port's two-threshold class with notifications to
// the ingress PE (seed 001).
func wanCoreClass() qdisc.ClassConfig {
	return qdisc.ClassConfig{Name: "wan", LimitBytes: 2 * units.MiB, ECN: qdisc.ECNTwoThreshold,
		TwoThreshold: qdisc.TwoThreshold{T1Bytes: 30 * units.KiB, T2Bytes: 90 * units.KiB, T2MaxBytes: 180 * units.KiB,
			LightMaxP: 0.3, HeavyMaxP: 0.2, NotifyInterval: time.Millisecond}}
}

// TestWANNotify runs seed 001's loop on real packets across a WAN with 5 ms
// each way: UDP at 1.5x the core's rate congests its two-threshold port,
// which marks the outer headers and sends CNPs to PE1; PE1 counts every
// one, its agent cuts the tunnel's rate (a port on PE1's WAN device) well
// within a one-way delay of the CNP's arrival, PE2 keeps the light marks
// out of the inner headers, and every CE the receiver sees is accounted
// for: a heavy mark at the core or one PE1 made inside during a heavy
// hold.
func TestWANNotify(t *testing.T) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	retryStarved(t, wanNotify)
}

// wanNotify is one run of TestWANNotify. The agent's reaction is host
// time no port shows: the machine's steal over the run (kernelShare) and
// the longest runqueue wait of this process's threads, where the agent
// runs (host/hostlost/runq), say whether the host starved it.
func wanNotify(t *testing.T, hc *hostChecks) hostlost.Report {
	// The agent runs on a thread of its own (agentTID): its runqueue
	// waits are the host's part of its reactions.
	// Its uninterruptible sleeps too: a kernel lock its rate change
	// waited on (rtnl_lock, held by another namespace's teardown).
	var (
		agentTID     atomic.Int64
		waitsMu      sync.Mutex
		agentWaits   []hostlost.Interval
		agentBlocked []hostlost.Interval
	)
	waits := hostlost.NewLog()
	rq, err := runq.Start(runq.Config{PIDs: []int{os.Getpid()}, Sink: waits, Blocked: true, Each: func(w runq.Wait) {
		if int64(w.TID) == agentTID.Load() {
			waitsMu.Lock()
			if w.Blocked {
				agentBlocked = append(agentBlocked, hostlost.Interval{From: w.From, To: w.To})
			} else {
				agentWaits = append(agentWaits, hostlost.Interval{From: w.From, To: w.To})
			}
			waitsMu.Unlock()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rq.Close() })
	k0, w0 := readKernel(t), time.Now()
	const coreRate = 100 * units.Mbit
	core := qdisc.DefaultConfig(coreRate)
	core.Classes[qdisc.ClassRoCE] = wanCoreClass()
	const oneWay = 5 * time.Millisecond
	w := lab.NewWANT(t, lab.WANSpec{Senders: 1, WANDelay: oneWay, CorePort: core,
		Tunnel: tunnel.Config{TwoThreshold: true}})

	// The tunnel's rate limiter on PE1's WAN device, at twice the core's
	// rate to begin with: the core is the bottleneck until the agent acts.
	limCfg := qdisc.DefaultConfig(2 * coreRate)
	limCfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "tunnel", LimitBytes: 8 * units.MiB, ECN: qdisc.ECNOff}
	limiter := attachPort(t, w.Paths[0].Uplink, limCfg, false)
	// Each reaction with the time it ended (CLOCK_MONOTONIC, as the
	// runqueue waits): which waits fell inside it.
	var (
		reactMu   sync.Mutex
		reactions []hostlost.Interval
	)
	onReaction := func(r time.Duration) {
		now := pe.Monotonic{}.Now()
		reactMu.Lock()
		reactions = append(reactions, hostlost.Interval{From: now - r, To: now})
		reactMu.Unlock()
	}
	agent, err := pe.New(pe.Config{Mode: pe.RateLimit, LineRate: 2 * coreRate, RTT: 10 * time.Millisecond, OnReaction: onReaction},
		pe.PortLimiter{Port: limiter}, nil, pe.Monotonic{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	actx, stopAgent := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		agentTID.Store(int64(unix.Gettid()))
		if err := agent.Run(actx, w.PE1); err != nil {
			t.Errorf("agent: %v", err)
		}
	}()

	sk := newSink(t, w.Receiver)
	dst := netip.AddrPortFrom(w.ReceiverAddr, uint16(sk.port))
	f := flow{tos: tosRoCEECT0, payload: 1000, rate: coreRate * 3 / 2, total: 400 * time.Millisecond}
	sent, err := f.send(ctx, w.Senders[0], dst)
	if err != nil {
		t.Fatal(err)
	}
	// Settle: PE1's queue, the fiber's 5 ms, the core's queue, then the
	// last CNPs' way back.
	waitIdle(t, limiter)
	time.Sleep(2*oneWay + 10*time.Millisecond)
	waitIdle(t, w.CorePort)
	time.Sleep(2*oneWay + 10*time.Millisecond)
	stopAgent()
	wg.Wait()
	ps := portStats(t, w.CorePort)

	c := ps.Classes[qdisc.ClassRoCE]
	s1, s2 := tunnelStats(t, w.PE1), tunnelStats(t, w.PE2)
	as := agent.Stats()
	reactMu.Lock()
	for _, r := range reactions {
		as.Reaction = append(as.Reaction, r.Len())
	}
	reactMu.Unlock()
	var got uint64
	for i := range sk.received {
		got += sk.received[i].Load()
	}
	t.Logf("sent %d, received %d (Not-ECT %d, ECT(1) %d, ECT(0) %d, CE %d)", sent, got,
		sk.received[0].Load(), sk.received[1].Load(), sk.received[2].Load(), sk.received[3].Load())
	t.Logf("core: light marks %d, heavy %d, CNPs light %d heavy %d coalesced %d failed %d, dropped %d",
		c.LightMarked, c.HeavyMarked, c.WANCNPLightSent, c.WANCNPHeavySent, c.WANCNPCoalesced, ps.Port.WANCNPFailed, c.DroppedPackets())
	t.Logf("PE1: CNPs light %d heavy %d, inner CE %d; PE2: outer ECT(1) kept out %d; agent: %d rate updates, min rate %v, reactions %v",
		s1.Decap.CNPLight, s1.Decap.CNPHeavy, s1.Encap.InnerCE, s2.Decap.Light, as.RateUpdates, as.MinRate, as.Reaction)

	if c.LightMarked == 0 || c.WANCNPLightSent == 0 {
		t.Fatalf("the core's queue never passed T1: %d light marks, %d CNPs", c.LightMarked, c.WANCNPLightSent)
	}
	// Every CNP the core sent reached PE1, and nothing else did.
	if s1.Decap.CNPLight != c.WANCNPLightSent || s1.Decap.CNPHeavy != c.WANCNPHeavySent || ps.Port.WANCNPFailed != 0 {
		t.Errorf("PE1 got %d light and %d heavy CNPs, the core sent %d and %d (%d failed)",
			s1.Decap.CNPLight, s1.Decap.CNPHeavy, c.WANCNPLightSent, c.WANCNPHeavySent, ps.Port.WANCNPFailed)
	}
	// Light marks stay in the WAN: PE2 kept every one out.
	if n := sk.received[tunnel.ECT1].Load(); n != 0 || s2.Decap.Light != c.LightMarked {
		t.Errorf("the receiver saw %d ECT(1); PE2 kept %d outer ECT(1) out of %d light marks", n, s2.Decap.Light, c.LightMarked)
	}
	// Every CE accounted for.
	if ce := sk.received[tunnel.CE].Load(); ce != c.HeavyMarked+s1.Encap.InnerCE {
		t.Errorf("the receiver saw %d CE: the core marked %d, PE1 %d inside", ce, c.HeavyMarked, s1.Encap.InnerCE)
	}
	if got != uint64(sent) || c.DroppedPackets() != 0 {
		t.Errorf("sent %d, received %d, the core dropped %d: want no loss", sent, got, c.DroppedPackets())
	}
	// The agent cut the tunnel's rate. The CNP crossed one one-way delay;
	// for the PE to act before a round trip could, its own part must stay
	// under another: the median under it, none past the round trip (2.2
	// ms median here, 7.4 ms at the 99th percentile over 30 quiet runs:
	// the agent thread's wake and the HTB change; a busy CPU adds).
	if as.MinRate >= 2*coreRate || len(as.Reaction) == 0 {
		t.Fatalf("the agent never cut the tunnel's rate: min %v, reactions %v", as.MinRate, as.Reaction)
	}
	host := kernelShare(t, k0, time.Since(w0))
	if err := rq.Close(); err != nil {
		t.Error(err)
	}
	ws := waits.Drain(nil)
	var longest time.Duration
	for _, w := range ws {
		longest = max(longest, w.Len())
	}
	// One wait as long as the one-way delay can alone push a reaction
	// past the round trip the check allows.
	t.Logf("host: the longest runqueue wait of this process's threads %v", longest.Round(10*time.Microsecond))
	if longest >= oneWay {
		host.HostStarved = true
	}
	// Shorter waits add up: the agent's thread waits to be woken by the
	// CNP, then may be preempted on its way to the netlink change, or
	// sleep on a kernel lock the change needs. Each reaction's time with
	// that thread waiting for a CPU or a lock is the host's part of it.
	reactMu.Lock()
	waitsMu.Lock()
	held := make([]time.Duration, len(reactions))
	var blocked []time.Duration
	for i, r := range reactions {
		held[i] = unionWithin(slices.Concat(agentWaits, agentBlocked), r)
		if b := unionWithin(agentBlocked, r); b > 0 {
			blocked = append(blocked, b)
		}
	}
	waitsMu.Unlock()
	reactMu.Unlock()
	t.Logf("host: the agent thread's runqueue waits and kernel-lock sleeps within each reaction %v (sleeps alone, where any: %v)", held, blocked)
	check := func(rs []time.Duration) (med, worst time.Duration) {
		sorted := slices.Sorted(slices.Values(rs))
		return sorted[len(sorted)/2], sorted[len(sorted)-1]
	}
	med, worst := check(as.Reaction)
	if med >= oneWay || worst >= 2*oneWay {
		net := make([]time.Duration, len(as.Reaction))
		for i, r := range as.Reaction {
			net[i] = r - held[i]
		}
		if nm, nw := check(net); nm < oneWay && nw < 2*oneWay {
			// Within the bounds once the host's waits are taken out: the
			// host, not the PE, made the reaction late.
			t.Logf("host: the reactions without those waits %v are within the bounds", net)
			host.HostStarved = true
		}
	}
	if med >= oneWay {
		hc.Errorf("median reaction %v after the CNP arrived, want under %v (reactions %v)", med, oneWay, as.Reaction)
	}
	if worst >= 2*oneWay {
		hc.Errorf("a reaction took %v after the CNP arrived, a round trip or more (reactions %v)", worst, as.Reaction)
	}
	if err := agent.Err(); err != nil {
		t.Errorf("agent: %v", err)
	}
	return host
}

// unionWithin is how much of in at least one of ws covers: the time in
// which some thread of the process waited for a CPU.
func unionWithin(ws []hostlost.Interval, in hostlost.Interval) time.Duration {
	var clipped []hostlost.Interval
	for _, w := range ws {
		if f, t := max(w.From, in.From), min(w.To, in.To); f < t {
			clipped = append(clipped, hostlost.Interval{From: f, To: t})
		}
	}
	slices.SortFunc(clipped, func(a, b hostlost.Interval) int { return cmp.Compare(a.From, b.From) })
	var sum, end time.Duration
	for _, c := range clipped {
		if c.From > end {
			end = c.From
		}
		if c.To > end {
			sum += c.To - end
			end = c.To
		}
	}
	return sum
}
