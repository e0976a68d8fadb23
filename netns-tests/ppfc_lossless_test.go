package netnstests

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestRoCEPPFCLossless: RoCEv2 through a port that only PPFC keeps
// lossless, over IPv4 and over IPv6 (issue 28, IPv6). Two roceperf
// clients without congestion control, each paced at twice the port's
// rate, so that a starved host still overfills it (roceperf --cc none
// -b 400m -n 6M --verify, --ppfc-sources the switch's address toward
// it), send into one 200 Mbit/s port whose RoCE
// class has no ECN and xoff/xon of 300/200 KiB in 1 MiB. The port stops
// each source (over IPv6 a 102-byte notification with its ICRC and UDP
// checksum) and resumes it; the senders' agents take every notification
// and nothing is lost anywhere: no drop at the port or after it, no
// resend, nothing out of sequence, no socket or per-CPU backlog drop,
// every byte verified.
func TestRoCEPPFCLossless(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "ipv4"
		if v6 {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) { ppfcLossless(t, v6) })
	}
}

func ppfcLossless(t *testing.T, v6 bool) {
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	const senders = 2
	const rate = 200 * units.Mbit
	const limit, xoff, xon = units.MiB, 300 * units.KiB, 200 * units.KiB
	d := lab.NewDumbbellT(t, lab.DumbbellSpec{Senders: senders, IPv6: v6, DisableOffloads: true})
	cfg := qdisc.DefaultConfig(rate)
	cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "roce", LimitBytes: limit, ECN: qdisc.ECNOff,
		XoffBytes: xoff, XonBytes: xon}
	port := attachPort(t, d.Bottleneck, cfg, false)
	// RC is go-back-N: keep each flow in order through the veths.
	if _, err := d.SteerRx(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := servePerf(t, d.Receiver, func() (*perf.Server, error) {
		bind := d.ReceiverAddr
		if v6 {
			bind = d.ReceiverAddr6
		}
		return perf.Listen(perf.ServerConfig{Bind: bind, Interval: -1, Logger: testLogger(t)})
	})
	side := srv.Addr().String()
	if a, err := netip.ParseAddrPort(side); err != nil || a.Addr().Is6() != v6 {
		t.Fatalf("the server's side channel is at %s (%v), want its IPv6 address", side, err)
	}

	drops0, rcvbuf0 := softnetDrops(), udpRcvbufErrors(t, d.Receiver)
	reports := make([]*perf.Report, senders)
	errs := make([]error, senders)
	var wg sync.WaitGroup
	for i := range senders {
		c := perf.DefaultClientConfig(side)
		c.Bytes = 6 << 20
		c.LineRate = 2 * rate
		c.CC = agent.CCNone
		c.Verify = true
		c.Interval = 0
		c.Logger = testLogger(t)
		// The switch's address toward the sender: 2001:db8:<i>::1.
		if v6 {
			sw := d.SenderAddrs6[i].As16()
			sw[15] = 1
			c.PPFCSources = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom16(sw), 128)}
		} else {
			sw := d.SenderAddrs[i].As4()
			sw[3] = 1
			c.PPFCSources = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4(sw), 32)}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs[i] = d.Senders[i].Do(func() (err error) {
				reports[i], err = perf.RunClient(ctx, c)
				return err
			})
		}()
	}
	wg.Wait()
	st := settle(t, port)
	r := st.Classes[qdisc.ClassRoCE]
	backlogDrops, rcvbufDrops := softnetDrops()-drops0, udpRcvbufErrors(t, d.Receiver)-rcvbuf0

	var taken, resumed, held, ignored, malformed, pauses, resent, outOfSeq, sockDrops uint64
	var paused time.Duration
	for i := range senders {
		if errs[i] != nil {
			t.Fatalf("sender %d: %v", i+1, errs[i])
		}
		e := reports[i].End
		cli := e.Counters.Client
		taken += cli.PPFCReceivedStop
		resumed += cli.PPFCReceivedResume
		held += cli.PPFCReceivedHold
		ignored += cli.PPFCIgnoredSource + cli.PPFCIgnoredDestination
		malformed += cli.Malformed + cli.ICRCErrors
		pauses += cli.PPFCPauses
		paused += time.Duration(cli.PPFCPausedNs)
		resent += cli.RetransmitPackets
		sockDrops += e.Counters.ClientUDP.RecvBufferDrops
		for _, q := range e.Counters.Server {
			outOfSeq += q.Counters.OutOfSequence
		}
		if got := e.SumReceived.Bytes; got != 6<<20 {
			t.Errorf("sender %d: the server received %d bytes, want %d", i+1, got, 6<<20)
		}
	}
	t.Logf("port %v, class 3 limit %s, xoff %s, xon %s: max backlog %s, dropped %d, host queue dropped %d; PPFC stops sent %d (coalesced %d), holds %d, resumes %d; errors %d",
		rate, kib(float64(limit)), kib(float64(xoff)), kib(float64(xon)), kib(float64(r.MaxBacklogBytes)), portDrops(st), r.Host.DroppedPackets,
		r.PPFCStopsSent, r.PPFCStopsCoalesced, r.PPFCHoldsSent, r.PPFCResumesSent, st.Port.PPFCErrors())
	t.Logf("senders: took %d stops, %d holds, %d resumes (%d ignored, %d malformed or bad ICRC); QPs paused %d times, %v in all; resent %d, out of sequence %d; socket drops %d at the senders, %d at the receiver; per-CPU backlog drops %d",
		taken, held, resumed, ignored, malformed, pauses, paused.Round(time.Millisecond), resent, outOfSeq, sockDrops, rcvbufDrops, backlogDrops)

	if d := portDrops(st); d != 0 || r.Host.DroppedPackets != 0 {
		t.Errorf("not lossless: the port dropped %d packets, the host queue after it %d", d, r.Host.DroppedPackets)
	}
	if resent != 0 || outOfSeq != 0 || sockDrops != 0 || rcvbufDrops != 0 || backlogDrops != 0 {
		t.Errorf("not lossless: %d resent, %d out of sequence, %d + %d socket drops, %d per-CPU backlog drops",
			resent, outOfSeq, sockDrops, rcvbufDrops, backlogDrops)
	}
	if r.PPFCStopsSent == 0 || pauses == 0 || r.PPFCResumesSent == 0 {
		t.Errorf("PPFC over IPv6 never engaged: %d stops and %d resumes sent, %d pauses", r.PPFCStopsSent, r.PPFCResumesSent, pauses)
	}
	if taken != r.PPFCStopsSent || held != r.PPFCHoldsSent || resumed != r.PPFCResumesSent || ignored != 0 || malformed != 0 || st.Port.PPFCErrors() != 0 {
		t.Errorf("PPFC notifications lost or refused: the port sent %d stops, %d holds and %d resumes (%d failed), the senders took %d, %d and %d (%d ignored, %d malformed)",
			r.PPFCStopsSent, r.PPFCHoldsSent, r.PPFCResumesSent, st.Port.PPFCErrors(), taken, held, resumed, ignored, malformed)
	}
	if v4, v6p := st.Port.IPv4Packets, st.Port.IPv6Packets; v6 && (v6p == 0 || v4 != 0) || !v6 && (v4 == 0 || v6p != 0) {
		t.Errorf("the port saw %d IPv4 and %d IPv6 packets: want the RoCE traffic in one family", v4, v6p)
	}
}
