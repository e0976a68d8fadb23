package netnstests

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestSenderBesideThePort is the README's tour: a pinned port at
// 200 Mbit/s on sw's device (class 3 marks on a step at 100 KB), a
// roceperf client in sw itself at line rate 1 Gbit/s, the server across
// the veth. The client shares the port's namespace, so its --send auto
// sends raw (a UDP GSO send would be one packet to the port): the port
// counts every packet, marks, and DCQCN gets CNPs. Before, the tour's
// flow passed the port as GSO super-packets and printed 0 CNPs.
func TestSenderBesideThePort(t *testing.T) {
	labtest.RequireRoot(t)
	l := lab.BuildT(t, lab.Spec{
		Nodes: []lab.NodeSpec{{Name: "sw"}, {Name: "h"}},
		Links: []lab.LinkSpec{{
			A: lab.Endpoint{Node: "sw", Dev: "swp0", Addr: netip.MustParsePrefix("198.18.13.1/24")},
			B: lab.Endpoint{Node: "h", Dev: "eth0", Addr: netip.MustParsePrefix("198.18.13.2/24")},
		}},
	})
	sw, h := l.Node("sw"), l.Node("h")
	// The tour's rps_cpus line: the receiver on one CPU, so that the
	// flow is not reordered between the veth's sending CPUs.
	if _, err := l.SteerRx(context.Background(), nil, [][2]string{{"h", "eth0"}}); err != nil {
		t.Fatal(err)
	}
	const rate = 200 * units.Mbit
	cfg := qdisc.DefaultConfig(rate)
	cfg.Classes[qdisc.ClassRoCE].ECN = qdisc.ECNStep
	cfg.Classes[qdisc.ClassRoCE].MinThBytes = 100 * units.KiB
	port, err := qdisc.Attach(cfg, qdisc.AttachOptions{Dev: "swp0", Netns: sw.NetnsName, Pin: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = port.Close() })

	srvAddr := netip.MustParseAddr("198.18.13.2")
	srv := servePerf(t, h, func() (*perf.Server, error) {
		return perf.Listen(perf.ServerConfig{Bind: srvAddr, Interval: -1, Logger: testLogger(t)})
	})
	c := perf.DefaultClientConfig(srv.Addr().String())
	c.LineRate = units.Gbit
	c.Duration = fabric(3 * time.Second)
	c.Interval = 0
	c.Logger = testLogger(t)
	k0, w0 := readKernel(t), time.Now()
	var r *perf.Report
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := sw.Do(func() (err error) {
		r, err = perf.RunClient(ctx, c)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	host := kernelShare(t, k0, time.Since(w0))
	st, err := port.Stats()
	if err != nil {
		t.Fatal(err)
	}
	roce := st.Classes[qdisc.ClassRoCE]
	e := &r.End
	t.Logf("sender in the port's namespace: raw_for_ports %v, goodput %.1f Mbit/s, CNPs %d, retransmitted %d; port: %d of %d packets marked CE, %d dropped, max backlog %d B, unaccounted %d packets (host-lost %.2f %%)",
		r.Start.TestStart.RawForPorts, e.SumSent.BitsPerSecond/1e6, e.Counters.Client.RPCNPHandled, e.SumSent.Retransmits,
		roce.CEMarked(), roce.EnqueuedPackets, portDrops(st), roce.MaxBacklogBytes, st.Port.UnaccountedPackets, 100*host.Share)

	if !slices.Equal(r.Start.TestStart.RawForPorts, []string{"swp0"}) {
		t.Errorf("test_start.raw_for_ports = %v, want [swp0]: --send auto must send raw beside a port", r.Start.TestStart.RawForPorts)
	}
	// A handful of control packets may pass unstamped; data packets none.
	if n := st.Port.UnaccountedPackets; n > 10 {
		t.Errorf("%d packets passed the port outside its accounting (GSO super-packets?)", n)
	}
	if roce.CEMarked() == 0 || e.Counters.Client.RPCNPHandled == 0 {
		t.Errorf("a 1 Gbit/s flow into a 200 Mbit/s port: %d CE marks, %d CNPs; want both > 0", roce.CEMarked(), e.Counters.Client.RPCNPHandled)
	}
	if d := portDrops(st); d != 0 || e.SumSent.Retransmits != 0 {
		t.Errorf("DCQCN under a 2 MB limit: %d drops, %d retransmitted; want none", d, e.SumSent.Retransmits)
	}
}
