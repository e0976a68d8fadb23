package netnstests

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/agent"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/pds"
	"github.com/fabriclab/fabriclab/host/perf"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// flapLab is a roceperf server in s and a client in c over one veth.
type flapLab struct {
	l        *lab.Lab
	s, c     *lab.Node
	srvAddr  netip.Addr
	srv      *perf.Server
	sideAddr string
}

func newFlapLab(t *testing.T) *flapLab {
	labtest.RequireRoot(t)
	l := lab.BuildT(t, lab.Spec{
		Nodes: []lab.NodeSpec{{Name: "s"}, {Name: "c"}},
		Links: []lab.LinkSpec{{
			A:               lab.Endpoint{Node: "s", Dev: "eth0", Addr: netip.MustParsePrefix("198.18.12.1/24")},
			B:               lab.Endpoint{Node: "c", Dev: "eth0", Addr: netip.MustParsePrefix("198.18.12.2/24")},
			DisableOffloads: true,
			MTU:             9000, // UET's full data packet is 4096 bytes
		}},
	})
	f := &flapLab{l: l, s: l.Node("s"), c: l.Node("c"), srvAddr: netip.MustParseAddr("198.18.12.1")}
	f.srv = servePerf(t, f.s, func() (*perf.Server, error) {
		return perf.Listen(perf.ServerConfig{Bind: f.srvAddr, Interval: -1, Logger: testLogger(t)})
	})
	f.sideAddr = f.srv.Addr().String()
	return f
}

// startUET runs a UET roceperf server in s, its side channel on 18516,
// for the test t.
func (f *flapLab) startUET(t *testing.T) *perf.UETServer {
	t.Helper()
	return servePerf(t, f.s, func() (*perf.UETServer, error) {
		return perf.ListenUET(perf.ServerConfig{Transport: perf.TransportUET, Bind: f.srvAddr, Port: 18516, Interval: -1, Logger: testLogger(t)})
	})
}

// setLink brings the client's eth0 down or up.
func (f *flapLab) setLink(t *testing.T, up bool) {
	t.Helper()
	h := f.c.Netlink()
	ln, err := h.LinkByName("eth0")
	if err == nil {
		if up {
			err = h.LinkSetUp(ln)
		} else {
			err = h.LinkSetDown(ln)
		}
	}
	if err != nil {
		t.Errorf("link up=%v: %v", up, err)
	}
}

// arpIgnore sets the server's net.ipv4.conf.eth0.arp_ignore: 8 answers no
// ARP request, 0 every one.
func (f *flapLab) arpIgnore(t *testing.T, v int) {
	t.Helper()
	if err := f.s.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/conf/eth0/arp_ignore", []byte(fmt.Sprint(v)), 0)
	}); err != nil {
		t.Errorf("arp_ignore %d: %v", v, err)
	}
}

// flap runs cfg's transfer in c and takes c's link down for down, 0.7 s
// into it; with lateARP the server answers no ARP request until 150 ms
// after the link is back, as the linkwatch race loses one (host/pktio's
// neighbor_linux.go). It returns the report, RunClient's error, and the
// times from the link going down to RunClient's return and to the first
// QP or PDC error (-1: none).
func flap(t *testing.T, f *flapLab, cfg perf.ClientConfig, down time.Duration, lateARP bool) (*perf.Report, error, time.Duration, time.Duration) {
	t.Helper()
	// The host's share of the run, in the log beside the bounds (the
	// 3 s rows allow 300 ms for a transmit loop that runs late).
	k0, w0 := readKernel(t), time.Now()
	defer func() { kernelShare(t, k0, time.Since(w0)) }()
	var r *perf.Report
	var err error
	ended := make(chan struct{})
	var downAt, endedAt time.Time
	// When the client's QP or PDC failed, if one did: RunClient returns
	// later, after it asked the server for its counters over the side
	// channel.
	failedAt := make(chan time.Time, 1)
	watch := func(failed func() bool) {
		go func() {
			for {
				select {
				case <-ended:
					return
				case <-time.After(2 * time.Millisecond):
				}
				if failed() {
					failedAt <- time.Now()
					return
				}
			}
		}()
	}
	cfg.OnAgent = func(a *agent.Agent) {
		watch(func() bool {
			return slices.ContainsFunc(a.QPs(), func(qp *agent.QP) bool { return qp.Err() != nil })
		})
	}
	cfg.OnEndpoint = func(ep *pds.Endpoint) {
		watch(func() bool { return ep.Counters().PDCErrors > 0 })
	}
	go func() {
		defer close(ended)
		defer func() { endedAt = time.Now() }()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err = f.c.Do(func() (e error) {
			r, e = perf.RunClient(ctx, cfg)
			return e
		})
	}()
	select {
	case <-ended:
		t.Fatalf("the transfer ended before the flap: %v", err)
	case <-time.After(700 * time.Millisecond):
	}
	if lateARP {
		f.arpIgnore(t, 8)
	}
	downAt = time.Now()
	f.setLink(t, false)
	time.Sleep(down)
	f.setLink(t, true)
	if lateARP {
		time.Sleep(150 * time.Millisecond)
		f.arpIgnore(t, 0)
	}
	<-ended
	qpErrAfter := time.Duration(-1)
	select {
	case at := <-failedAt:
		qpErrAfter = at.Sub(downAt)
	default:
	}
	return r, err, endedAt.Sub(downAt), qpErrAfter
}

// flapClient is "roceperf -c SIDE --transport T -n 48M -b 200m --verify".
func flapClient(t *testing.T, side, transport string) perf.ClientConfig {
	cfg := perf.DefaultClientConfig(side)
	cfg.Transport = transport
	cfg.Bytes = flapBytes
	cfg.LineRate = 200 * units.Mbit
	cfg.Verify = true
	cfg.Interval = 0
	cfg.Logger = testLogger(t)
	return cfg
}

const flapBytes = 48 << 20

// heldAfter polls what the server still holds of the failed client (its
// QPs, its target PDCs) until none or 5 s: how many were left.
func heldAfter(held func() int) int {
	n := held()
	for deadline := time.Now().Add(5 * time.Second); n != 0 && time.Now().Before(deadline); n = held() {
		time.Sleep(50 * time.Millisecond)
	}
	return n
}

// TestLinkFlap: the client's link goes down mid-transfer of 48 MiB at
// 200 Mbit/s (roceperf -n 48M -b 200m --verify; RoCEv2 with mlx5's 67 ms
// ACK timeout and 7 retries, UET with pds's 10 ms RTO and 50 retries) and
// comes back (issue 28).
//   - 200 ms, with the server's first ARP replies after the link returns
//     lost: the QP (the PDC) restarts the resolution on its next timeout
//     instead of waiting for the kernel's ARP retransmit a second later;
//     every byte arrives, verified. RoCEv2 and UET.
//   - 200 ms, the kernel left alone: the same.
//   - 3 s, past the QP's 8 × 67 ms: the client's QP fails with its ACK
//     timeout error within its retries of the link going down, RunClient
//     returns once the side channel has asked the server for its
//     counters, and the server frees the session's QPs.
//   - 3 s, past the PDC's 51 × 10 ms: the same for UET, the PDC failing
//     with its timeout error and the server's endpoint freeing the
//     target PDC.
func TestLinkFlap(t *testing.T) {
	f := newFlapLab(t)
	for _, tc := range []struct {
		name, transport string
		down            time.Duration
		lateARP         bool
	}{
		{"rocev2/200ms-late-arp", perf.TransportRoCEv2, 200 * time.Millisecond, true},
		{"rocev2/200ms", perf.TransportRoCEv2, 200 * time.Millisecond, false},
		{"uet/200ms-late-arp", perf.TransportUET, 200 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			side := f.sideAddr
			if tc.transport == perf.TransportUET {
				side = f.startUET(t).Addr().String()
			}
			r, err, after, _ := flap(t, f, flapClient(t, side, tc.transport), tc.down, tc.lateARP)
			if err != nil {
				t.Fatalf("the transfer did not ride through a %v flap: %v", tc.down, err)
			}
			e := &r.End
			var retx, timeouts, sendErrs, resolves, rcvd, verr uint64
			if u := e.UET; u != nil {
				c := u.Client
				retx, timeouts, resolves = c.Retransmits, c.Timeouts, c.NeighborResolves
				sendErrs = c.SendErrors
				for _, s := range u.Receiver {
					rcvd += s.MessageBytes
					verr += s.VerifyErrors
				}
			} else {
				c := &e.Counters.Client
				sent, rcv := e.Streams[0].Sender, e.Streams[0].Receiver
				retx, timeouts, sendErrs, resolves = sent.RetransmitPackets, sent.LocalAckTimeoutErr, c.SendErrors, c.NeighborResolves
				rcvd, verr = rcv.RecvBytes, rcv.VerifyErrors
			}
			t.Logf("%v down: done %v after it went down; %d retransmitted, %d timeouts, %d send errors, %d neighbour resolutions restarted",
				tc.down, after.Round(time.Millisecond), retx, timeouts, sendErrs, resolves)
			if e.SumSent.Bytes != flapBytes || rcvd != flapBytes || verr != 0 {
				t.Errorf("acknowledged %d B, received %d B, %d verify errors; want %d, %d, 0", e.SumSent.Bytes, rcvd, verr, flapBytes, flapBytes)
			}
			if retx == 0 || sendErrs == 0 {
				t.Errorf("the flap cost nothing (%d retransmitted, %d send errors): was the link down?", retx, sendErrs)
			}
			if tc.lateARP && resolves == 0 {
				t.Errorf("with the first ARP replies lost, no resolution was restarted")
			}
		})
	}
	// 3 s, past the retries: the QP or PDC fails with its timeout error
	// within its retries (and room for its transmit loop to run late on a
	// loaded 2-core machine), and the server frees what it held.
	qp, pc := agent.DefaultQPConfig(), pds.DefaultConfig()
	for _, tc := range []struct {
		name, transport, wantErr, what string
		budget                         time.Duration
		start                          func(t *testing.T) (side string, held func() int)
	}{
		{"rocev2/3s", perf.TransportRoCEv2, "ACK timeouts", "QPs", time.Duration(qp.RetryCount+1) * qp.AckTimeout,
			func(*testing.T) (string, func() int) {
				return f.sideAddr, func() int { return len(f.srv.Agent().QPs()) }
			}},
		{"uet/3s", perf.TransportUET, "timeouts of", "target PDCs", time.Duration(pc.MaxRetries+1) * pc.RTO,
			func(t *testing.T) (string, func() int) {
				srv := f.startUET(t)
				return srv.Addr().String(), func() int { return len(srv.Endpoint().Targets()) }
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			side, held := tc.start(t)
			_, err, after, failedAfter := flap(t, f, flapClient(t, side, tc.transport), 3*time.Second, false)
			budget := tc.budget + 300*time.Millisecond
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("a 3 s outage: %v, want the %q error", err, tc.wantErr)
			}
			left := heldAfter(held)
			t.Logf("3 s down: %v; it failed %v after the link went down (its budget %v), RunClient returned after %v (the side channel waits for the link to ask the server for its counters, at most %v)",
				err, failedAfter.Round(time.Millisecond), budget, after.Round(time.Millisecond), perf.DialTimeout)
			if failedAfter < 0 || failedAfter > budget {
				t.Errorf("failed %v after the link went down, want within its retries' %v", failedAfter, budget)
			}
			if after > 3*time.Second+perf.DialTimeout {
				t.Errorf("RunClient returned %v after the link went down, past the outage and the side channel's %v", after, perf.DialTimeout)
			}
			if left != 0 {
				t.Errorf("%d %s still held by the server 5 s after the client failed", left, tc.what)
			}
		})
	}
}
