package netnstests

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/dcqcn"
	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/npbpf"
	"github.com/fabriclab/fabriclab/host/npbpf/npprobe"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc/dispatch"
)

// The kernel NP lab: a sender ("rp", the reaction point's host) and a
// receiver ("np") on one veth pair; the NP programs on the receiver's eth0.
var (
	npLabRP  = netip.MustParsePrefix("198.18.0.1/30")
	npLabNP  = netip.MustParsePrefix("198.18.0.2/30")
	npLabRP6 = netip.MustParsePrefix("2001:db8::1/64")
	npLabNP6 = netip.MustParsePrefix("2001:db8::2/64")
)

const (
	npDev       = "eth0"
	dataTOS     = 26<<2 | 2 // DSCP 26, ECT(0)
	dataTOSCE   = 26<<2 | 3
	npCNPTOS    = npbpf.DefaultCNPDSCP<<2 | 2
	npDataBytes = 1024
)

type npLab struct {
	rp, np *lab.Node
	nph    *npbpf.NP
	rpMAC  net.HardwareAddr
	npMAC  net.HardwareAddr
	sinks  atomic.Uint64 // datagrams the receiver's socket got: the data passed the NP
}

func newNPLab(t *testing.T, opts npbpf.Options) *npLab {
	t.Helper()
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	built := lab.BuildT(t, lab.Spec{
		Nodes: []lab.NodeSpec{{Name: "rp"}, {Name: "np"}},
		Links: []lab.LinkSpec{{
			A:               lab.Endpoint{Node: "rp", Dev: npDev, Addr: npLabRP, Addr6: npLabRP6},
			B:               lab.Endpoint{Node: "np", Dev: npDev, Addr: npLabNP, Addr6: npLabNP6},
			DisableOffloads: true,
		}},
	})
	l := &npLab{rp: built.Node("rp"), np: built.Node("np")}
	mac := func(n *lab.Node) net.HardwareAddr {
		var hw net.HardwareAddr
		if err := n.Do(func() error {
			ifi, err := net.InterfaceByName(npDev)
			if err == nil {
				hw = ifi.HardwareAddr
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return hw
	}
	l.rpMAC, l.npMAC = mac(l.rp), mac(l.np)
	// A socket on 4791 at the receiver reads the data (which the NP
	// passes on), so no port-unreachable goes back.
	for _, a := range []netip.Prefix{npLabNP, npLabNP6} {
		var c *net.UDPConn
		if err := l.np.Do(func() (err error) {
			c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.Addr(), roce.UDPPort)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if rc, err := c.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
			})
		}
		go func() {
			buf := make([]byte, 9000)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
				l.sinks.Add(1)
			}
		}()
	}
	var err error
	l.nph, err = npbpf.Attach(l.np.NsHandle(), npDev, opts)
	if err != nil {
		t.Fatal(err)
	}
	if l.nph.XmitHookErr != nil && !opts.NoXmitHook {
		t.Fatalf("the transmit hook must attach on this kernel: %v", l.nph.XmitHookErr)
	}
	if !opts.NoXmitHook && !l.nph.XmitDispatched() {
		t.Fatalf("np_xmit is not in the machine's xmit dispatcher")
	}
	t.Cleanup(func() {
		if err := l.nph.Close(); err != nil {
			t.Errorf("close the NP: %v", err)
		}
	})
	return l
}

func (l *npLab) sender(t *testing.T, v6 bool) *npprobe.Sender {
	t.Helper()
	a := npLabRP.Addr()
	if v6 {
		a = npLabRP6.Addr()
	}
	var s *npprobe.Sender
	if err := l.rp.Do(func() (err error) {
		s, err = npprobe.NewSender(netip.AddrPortFrom(a, roce.UDPPort))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (l *npLab) tap(t *testing.T) *npprobe.Tap {
	t.Helper()
	var tp *npprobe.Tap
	if err := l.np.Do(func() (err error) {
		tp, err = npprobe.OpenTap(npDev, npprobe.TapOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	return tp
}

// tapPackets takes what the tap captured until it holds at least cnps
// CNPs leaving the device, or 2 s passed: on a busy machine the tap's
// reader trails the kernel.
func tapPackets(tp *npprobe.Tap, cnps uint64) []npprobe.Packet {
	var pkts []npprobe.Packet
	seen := uint64(0)
	for deadline := time.Now().Add(2 * time.Second); ; {
		for _, p := range tp.Packets() {
			if p.Out && p.IsCNP() {
				seen++
			}
			pkts = append(pkts, p)
		}
		if seen >= cnps || time.Now().After(deadline) {
			return pkts
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// qp adds a QP to the NP: the receiver's qpn, answering the sender's
// peer QPN.
func (l *npLab) qp(t *testing.T, qpn, peer uint32, v6 bool, n time.Duration) npbpf.QPContext {
	t.Helper()
	c := npbpf.QPContext{QPN: qpn, PeerQPN: peer, Local: npLabNP.Addr(), Peer: npLabRP.Addr(),
		SrcPort: 0xc000 | uint16(qpn&0x3fff), MinTimeBetweenCNPs: n}
	if v6 {
		c.Local, c.Peer = npLabNP6.Addr(), npLabRP6.Addr()
	}
	if err := l.nph.AddQP(c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (l *npLab) spec(c npbpf.QPContext) npprobe.CNPSpec {
	return npprobe.CNPSpec{Local: c.Local, Peer: c.Peer, SrcPort: c.SrcPort, PeerQPN: c.PeerQPN,
		PKey: roce.DefaultPKey, DSCP: npbpf.DefaultCNPDSCP, DataSrc: l.rpMAC, DataDst: l.npMAC}
}

func npData(qpn uint32, psn uint32, ce bool) npprobe.Data {
	d := npprobe.Data{Op: roce.OpRCWriteMiddle, DestQP: qpn, PSN: psn, Payload: npDataBytes, TOS: dataTOS}
	if ce {
		d.TOS = dataTOSCE
	}
	return d
}

func npCounters(t *testing.T, np *npbpf.NP, qpn uint32) npbpf.NPCounters {
	t.Helper()
	c, err := np.Counters(qpn)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkReceivedCNPs checks what the sender's socket got: n CNPs from the
// QP's address and port, to the peer QP, DSCP 48 ECT(0), ICRC right.
func checkReceivedCNPs(t *testing.T, got []npprobe.Received, c npbpf.QPContext, n int) {
	t.Helper()
	cnps := 0
	for _, r := range got {
		if r.BTH.Opcode != roce.OpCNP || r.BTH.DestQP != c.PeerQPN {
			continue
		}
		cnps++
		if r.From != netip.AddrPortFrom(c.Local, c.SrcPort) || r.TOS != npCNPTOS || !r.ICRCOK || !r.BTH.BECN || r.Len != 32 {
			t.Errorf("CNP received from %v TOS %#x ICRC ok %v BECN %v length %d", r.From, r.TOS, r.ICRCOK, r.BTH.BECN, r.Len)
		}
	}
	if cnps != n {
		t.Errorf("the sender's socket received %d CNPs for qp %#x, want %d", cnps, c.PeerQPN, n)
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// TestNPBPF runs the kernel NP on a veth pair: CE-marked RoCEv2 data from
// a UDP socket in one namespace, CNPs back to it from the programs on the
// other namespace's device, captured on that device with kernel
// timestamps.
func TestNPBPF(t *testing.T) {
	l := newNPLab(t, npbpf.Options{})
	s := l.sender(t, false)
	dst := netip.AddrPortFrom(npLabNP.Addr(), roce.UDPPort)
	// ARP before anything is measured.
	if err := s.Send(dst, []npprobe.Data{npData(0x999, 0, false)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	var latencyFrames []npprobe.Frame

	// CE packets 100 µs apart, N = 0: every CE gets its own CNP (but for
	// one that finds another CNP of the QP in flight on the other CPU,
	// which becomes pending and leaves with the next packet). The NP's
	// reaction time on the wire, and every CNP byte.
	t.Run("latency", func(t *testing.T) {
		c := l.qp(t, 0x101, 0x201, false, 0)
		tp := l.tap(t)
		const n = 1000
		for i := range n {
			// The ECT packet after each CE gets no CNP.
			if err := s.Send(dst, []npprobe.Data{npData(c.QPN, uint32(2*i), true), npData(c.QPN, uint32(2*i+1), false)}); err != nil {
				t.Fatal(err)
			}
			spin(100 * time.Microsecond)
		}
		got, err := s.Receive(100*time.Millisecond, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		cnt := npCounters(t, l.nph, c.QPN)
		checkReceivedCNPs(t, got, c, int(cnt.NPCNPSent))
		frames := tp.Take()
		latencyFrames = frames
		var pkts []npprobe.Packet
		for _, f := range frames {
			if p, ok := npprobe.Decode(f); ok {
				pkts = append(pkts, p)
			}
		}
		r := npprobe.Analyze(pkts, map[uint32]uint32{c.QPN: c.PeerQPN})
		if r.CEIn != n || r.CNPOut != int(cnt.NPCNPSent) || r.Unmatched != 0 || r.CNPOut < n*99/100 {
			t.Errorf("tap: %d CE in, %d CNPs out, %d unmatched; want %d, %d (np_cnp_sent, at least 99 %%), 0", r.CEIn, r.CNPOut, r.Unmatched, n, cnt.NPCNPSent)
		}
		for _, p := range pkts {
			if p.Out && p.IsCNP() {
				if err := npprobe.CheckCNP(p.Frame, l.spec(c)); err != nil {
					t.Fatal(err)
				}
			}
		}
		p50, p99 := npprobe.Percentile(r.Latency, 0.5), npprobe.Percentile(r.Latency, 0.99)
		t.Logf("CE in -> CNP out on the NP's device (%d CNPs): p50 %.1f µs, p99 %.1f µs, max %.1f µs",
			len(r.Latency), us(p50), us(p99), us(npprobe.Percentile(r.Latency, 1)))
		// Loose bounds a loaded CI machine still meets; the bench reports
		// the numbers against the 20 µs goal.
		if p50 > 100*time.Microsecond || p50 <= 0 {
			t.Errorf("CE -> CNP p50 %v, want within 100 µs", p50)
		}
		if cnt.NPECNMarkedRoCEPackets != n || cnt.NPCNPSent != n-(cnt.NPCNPCoalesced-cnt.NPCNPHeldSent) || cnt.NPCNPErrors != 0 {
			t.Errorf("counters %+v: %d CE sent", cnt, n)
		}
		if st, err := l.nph.Stats(); err != nil || st.EgressBuilt != st.CNPSent || st.EgressDropped != 0 || st.RedirectErrors != 0 {
			t.Errorf("device stats %+v, %v: every clone must become a CNP", st, err)
		}
		checkXmitStamped(t, l.nph, false)
	})

	// Back-to-back CE packets: CNPs of the QP never less than N apart on
	// the wire, about one per N.
	t.Run("spacing", func(t *testing.T) {
		const n = 50 * time.Microsecond
		c := l.qp(t, 0x102, 0x202, false, n)
		tp := l.tap(t)
		sent := blast(t, s, dst, []uint32{c.QPN}, 200*time.Millisecond)
		got, err := s.Receive(100*time.Millisecond, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		cnt := npCounters(t, l.nph, c.QPN)
		pkts := tapPackets(tp, cnt.NPCNPSent)
		r := npprobe.Analyze(pkts, map[uint32]uint32{c.QPN: c.PeerQPN})
		checkReceivedCNPs(t, got, c, int(cnt.NPCNPSent))
		checkSpacing(t, l.nph, r, pkts, c, sent)
		if cnt.NPECNMarkedRoCEPackets != uint64(sent) || cnt.NPCNPSent != uint64(r.CNPOut) ||
			cnt.NPCNPCoalesced != cnt.NPECNMarkedRoCEPackets-(cnt.NPCNPSent-cnt.NPCNPHeldSent) {
			t.Errorf("counters %+v: %d CE sent, %d CNPs on the tap", cnt, sent, r.CNPOut)
		}
	})

	// A CE within N is held back; the QP's next packet after N sends it.
	t.Run("held", func(t *testing.T) {
		// N far above how long the burst takes to reach the NP: with
		// stress-ng on a core, a CE of it arrived 3 ms after the first
		// (and rightly got a CNP of its own) when N was 1 ms.
		const n = 20 * time.Millisecond
		c := l.qp(t, 0x103, 0x203, false, n)
		tp := l.tap(t)
		burst := make([]npprobe.Data, 6)
		for i := range burst {
			burst[i] = npData(c.QPN, uint32(i), true)
		}
		if err := s.Send(dst, burst); err != nil { // CNP for the first, 5 held back
			t.Fatal(err)
		}
		time.Sleep(3 * n)
		if err := s.Send(dst, []npprobe.Data{npData(c.QPN, 6, false)}); err != nil { // sends the held CNP
			t.Fatal(err)
		}
		got, err := s.Receive(100*time.Millisecond, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		checkReceivedCNPs(t, got, c, 2)
		pkts := tp.Packets()
		var ectIn, heldOut time.Time
		for _, p := range pkts {
			if !p.Out && !p.CE() && p.BTH.DestQP == c.QPN {
				ectIn = p.At
			}
			if p.Out && p.IsCNP() && p.BTH.DestQP == c.PeerQPN {
				heldOut = p.At
			}
		}
		if d := heldOut.Sub(ectIn); ectIn.IsZero() || d < 0 || d > 10*time.Millisecond {
			t.Errorf("the held CNP left %v after the ECT packet that sent it", d)
		}
		got2 := npCounters(t, l.nph, c.QPN)
		if want := (npbpf.NPCounters{NPECNMarkedRoCEPackets: 6, NPCNPSent: 2, NPCNPCoalesced: 5, NPCNPHeldSent: 1, MinCNPSpacing: got2.MinCNPSpacing}); got2 != want || got2.MinCNPSpacing < n {
			t.Errorf("counters %+v, want %+v and a spacing of at least N", got2, want)
		}
	})

	// Two QPs interleaved: each coalesces on its own.
	t.Run("two QPs", func(t *testing.T) {
		const n = 20 * time.Microsecond
		a := l.qp(t, 0x104, 0x204, false, n)
		b := l.qp(t, 0x105, 0x205, false, n)
		tp := l.tap(t)
		sent := blast(t, s, dst, []uint32{a.QPN, b.QPN}, 100*time.Millisecond)
		if _, err := s.Receive(100*time.Millisecond, time.Now().Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		pkts := tapPackets(tp, npCounters(t, l.nph, a.QPN).NPCNPSent+npCounters(t, l.nph, b.QPN).NPCNPSent)
		r := npprobe.Analyze(pkts, map[uint32]uint32{a.QPN: a.PeerQPN, b.QPN: b.PeerQPN})
		for _, q := range []npbpf.QPContext{a, b} {
			checkSpacing(t, l.nph, r, pkts, q, sent/2)
		}
		na, nb := len(r.Spacing[a.QPN]), len(r.Spacing[b.QPN])
		if na == 0 || nb == 0 || float64(na)/float64(nb) > 1.25 || float64(nb)/float64(na) > 1.25 {
			t.Errorf("CNPs per QP %d and %d: each QP must get its own", na+1, nb+1)
		}
	})

	t.Run("IPv6", func(t *testing.T) {
		s6 := l.sender(t, true)
		dst6 := netip.AddrPortFrom(npLabNP6.Addr(), roce.UDPPort)
		c := l.qp(t, 0x106, 0x206, true, 0) // as "latency"
		tp := l.tap(t)
		if err := s6.Send(dst6, []npprobe.Data{npData(0x999, 0, false)}); err != nil { // neighbour discovery
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		const n = 200
		for i := range n {
			if err := s6.Send(dst6, []npprobe.Data{npData(c.QPN, uint32(i), true)}); err != nil {
				t.Fatal(err)
			}
			spin(100 * time.Microsecond)
		}
		got, err := s6.Receive(100*time.Millisecond, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		cnt := npCounters(t, l.nph, c.QPN)
		checkReceivedCNPs(t, got, c, int(cnt.NPCNPSent))
		pkts := tp.Packets()
		r := npprobe.Analyze(pkts, map[uint32]uint32{c.QPN: c.PeerQPN})
		if r.CNPOut != int(cnt.NPCNPSent) || r.CNPOut < n*99/100 {
			t.Errorf("tap: %d CNPs, np_cnp_sent %d, want %d", r.CNPOut, cnt.NPCNPSent, n)
		}
		for _, p := range pkts {
			if p.Out && p.IsCNP() {
				if err := npprobe.CheckCNP(p.Frame, l.spec(c)); err != nil {
					t.Fatal(err)
				}
			}
		}
		t.Logf("IPv6 CE in -> CNP out: p50 %.1f µs, p99 %.1f µs", us(npprobe.Percentile(r.Latency, 0.5)), us(npprobe.Percentile(r.Latency, 0.99)))
	})

	// Two decoders that share no code with host/roce or np.c.
	t.Run("tshark and scapy", func(t *testing.T) {
		checkWithDecoders(t, latencyFrames, 0x201)
	})

	if st, err := l.nph.Stats(); err == nil {
		for prev, deadline := uint64(0), time.Now().Add(2*time.Second); time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond) // let the receiver's reader catch up
			if n := l.sinks.Load(); n == prev {
				break
			} else {
				prev = n
			}
		}
		t.Logf("device stats: %+v; the receiver's socket got %d datagrams", st, l.sinks.Load())
		if st.EgressDropped != 0 || st.RedirectErrors != 0 || st.EgressBuilt != st.CNPSent {
			t.Errorf("clones dropped %d, redirect errors %d, built %d of %d", st.EgressDropped, st.RedirectErrors, st.EgressBuilt, st.CNPSent)
		}
		checkXmitStamped(t, l.nph, false)
		if l.sinks.Load() < st.CE+st.NotCE {
			t.Errorf("the receiver's socket got %d datagrams, the NP saw %d: the NP must pass every packet on", l.sinks.Load(), st.CE+st.NotCE)
		}
	}

	// Close detaches the programs: nothing on the device, no link left, the
	// transmit hook out of the dispatcher, no more CNPs.
	t.Run("detach", func(t *testing.T) {
		c := l.qp(t, 0x107, 0x207, false, 0)
		ids, err := l.nph.LinkIDs()
		if err != nil || len(ids) != 2 {
			t.Fatalf("links %v, %v: want egress and ingress (the transmit hook is dispatched)", ids, err)
		}
		d0, err := dispatch.Read()
		if err != nil {
			t.Fatal(err)
		}
		if err := l.nph.Close(); err != nil {
			t.Fatal(err)
		}
		if d1, err := dispatch.Read(); err != nil || d1.NPs != d0.NPs-1 {
			t.Errorf("the dispatcher held %d NPs before Close, %d after (%v): want one less", d0.NPs, d1.NPs, err)
		}
		for _, id := range ids {
			if ln, err := link.NewFromID(id); err == nil {
				ln.Close()
				t.Errorf("link %d still exists after Close", id)
			} else if !errors.Is(err, os.ErrNotExist) {
				t.Errorf("link %d: %v", id, err)
			}
		}
		for _, where := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			var res *link.QueryResult
			err := l.np.Do(func() (err error) {
				res, err = link.QueryPrograms(link.QueryOptions{Target: l.nph.Ifindex, Attach: where})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Programs) != 0 {
				t.Errorf("%v: %d programs still attached", where, len(res.Programs))
			}
		}
		if err := s.Send(dst, []npprobe.Data{npData(c.QPN, 0, true)}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Receive(100*time.Millisecond, time.Now().Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		checkReceivedCNPs(t, got, c, 0)
	})

	// Attached again, first in the ingress chain and with another mark.
	t.Run("attach first, own mark", func(t *testing.T) {
		np2, err := npbpf.Attach(l.np.NsHandle(), npDev, npbpf.Options{IngressFirst: true, Mark: 0x1234})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := np2.Close(); err != nil {
				t.Error(err)
			}
		}()
		c := npbpf.QPContext{QPN: 0x108, PeerQPN: 0x208, Local: npLabNP.Addr(), Peer: npLabRP.Addr(), SrcPort: 0xc108}
		if err := np2.AddQP(c); err != nil {
			t.Fatal(err)
		}
		if err := s.Send(dst, []npprobe.Data{npData(c.QPN, 0, true)}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Receive(100*time.Millisecond, time.Now().Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		checkReceivedCNPs(t, got, c, 1)
		if st, err := np2.Stats(); err != nil || st.EgressBuilt != 1 || st.XmitStamped != 1 {
			t.Errorf("stats %+v, %v", st, err)
		}
	})
}

// TestNPBPFQdisc runs the NP on a device whose qdisc holds CNPs behind
// other traffic for a varying time: a TBF at 100 Mbit/s with a 2 KB bucket,
// and bursts of 8 datagrams of 1000 bytes from the receiver every 1-2 ms
// (a Go sleep of 1 ms; a burst takes ~0.7 ms to drain). A CNP then
// often leaves the qdisc after the clone returned, from the TBF's
// watchdog, on either CPU. With the transmit hook N counts from there, so
// the tap never sees two CNPs of the QP less than N apart; without it N
// counts from np_egress and the queueing difference between two CNPs eats
// into N (logged, not asserted: it shows what the hook is for).
func TestNPBPFQdisc(t *testing.T) {
	const n = 50 * time.Microsecond
	for _, tc := range []struct {
		name string
		opts npbpf.Options
	}{
		// A timeout far above the queueing delay: the guarantee holds
		// for CNPs transmitted within it.
		{"transmit hook", npbpf.Options{XmitTimeout: 100 * time.Millisecond}},
		{"np_egress only", npbpf.Options{NoXmitHook: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newNPLab(t, tc.opts)
			if out, err := l.np.Command(context.Background(), "tc", "qdisc", "replace", "dev", npDev, "root",
				"tbf", "rate", "100mbit", "burst", "2kb", "limit", "200kb").CombinedOutput(); err != nil {
				t.Fatalf("tc qdisc replace: %v: %s", err, out)
			}
			s := l.sender(t, false)
			dst := netip.AddrPortFrom(npLabNP.Addr(), roce.UDPPort)
			if err := s.Send(dst, []npprobe.Data{npData(0x999, 0, false)}); err != nil { // ARP
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			c := l.qp(t, 0x111, 0x211, false, n)
			tp := l.tap(t)
			stop := l.background(t, netip.AddrPortFrom(npLabRP.Addr(), 9), 8, 1000, time.Millisecond)
			sent := blast(t, s, dst, []uint32{c.QPN}, 200*time.Millisecond)
			bg := stop()
			if _, err := s.Receive(100*time.Millisecond, time.Now().Add(5*time.Second)); err != nil {
				t.Fatal(err)
			}
			cnt := npCounters(t, l.nph, c.QPN)
			r := npprobe.Analyze(tapPackets(tp, cnt.NPCNPSent), map[uint32]uint32{c.QPN: c.PeerQPN})
			sp := r.Spacing[c.QPN]
			if len(sp) < 10 {
				t.Fatalf("%d CNPs on the tap", len(sp)+1)
			}
			minSp, below := sp[0], 0
			for _, d := range sp {
				minSp = min(minSp, d)
				if d < n {
					below++
				}
			}
			st, err := l.nph.Stats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d CE, %d background datagrams -> %d CNPs (%d left the qdisc after the clone returned); spacing at the NP min %.2f µs; on the tap min %.2f µs p50 %.1f µs p99 %.1f µs, %d of %d below N = %v",
				sent, bg, len(sp)+1, st.XmitQueued, us(cnt.MinCNPSpacing), us(minSp), us(npprobe.Percentile(sp, 0.5)),
				us(npprobe.Percentile(sp, 0.99)), below, len(sp), n)
			// The TBF may refuse a CNP now and then (seen: up to 28 of
			// 1700 without the hook; none so far with it): the clone
			// fails, the CNP stays pending, and the spacing holds.
			if st.EgressDropped != 0 || cnt.NPCNPSent != uint64(len(sp)+1) || st.RedirectErrors > st.EgressBuilt/20 {
				out, _ := l.np.Command(context.Background(), "tc", "-s", "qdisc", "show", "dev", npDev).CombinedOutput()
				t.Errorf("stats %+v: %d CNPs on the tap; the qdisc: %s", st, len(sp)+1, out)
			}
			// The TBF charged each CNP its own 74 bytes, not the length
			// of the data packet it was cloned from (np_egress sends it
			// through the egress once more): what it sent beyond the
			// background datagrams is the CNPs' bytes.
			q := tbfStats(t, l)
			bgFrame := uint64(14 + 20 + 8 + 1000)
			if q.packets < uint64(bg) {
				t.Fatalf("the TBF sent %d packets, fewer than the %d background datagrams", q.packets, bg)
			}
			other, otherBytes := q.packets-uint64(bg), q.bytes-min(q.bytes, uint64(bg)*bgFrame)
			t.Logf("TBF: sent %d packets, %d bytes, dropped %d; beyond the background: %d packets, %d bytes (%.1f B each; a CNP is %d B)",
				q.packets, q.bytes, q.drops, other, otherBytes, float64(otherBytes)/float64(max(other, 1)), npbpf.CNPLenIPv4)
			if other < cnt.NPCNPSent || otherBytes > cnt.NPCNPSent*npbpf.CNPLenIPv4+uint64(other-cnt.NPCNPSent)*bgFrame {
				t.Errorf("the TBF charged %d bytes for %d packets beyond the background, %d of them CNPs of %d B: a CNP charged more than its length", otherBytes, other, cnt.NPCNPSent, npbpf.CNPLenIPv4)
			}
			if tc.opts.NoXmitHook {
				if st.EgressStamped != st.EgressBuilt || st.XmitStamped != 0 {
					t.Errorf("without the hook: %d CNPs built, %d stamped at np_egress, %d at the hook", st.EgressBuilt, st.EgressStamped, st.XmitStamped)
				}
				return
			}
			checkXmitStamped(t, l.nph, true)
			if cnt.MinCNPSpacing < n || below != 0 {
				t.Errorf("CNPs %v apart at the hook, %d of %d spacings on the tap below N = %v (min %v)", cnt.MinCNPSpacing, below, len(sp), n, minSp)
			}
		})
	}
}

// tbfCounters are a qdisc's totals, as `tc -s -j qdisc show` gives them.
type tbfCounters struct {
	bytes, packets, drops uint64
}

// tbfStats reads the root qdisc's counters on the NP's device.
func tbfStats(t *testing.T, l *npLab) tbfCounters {
	t.Helper()
	out, err := l.np.Command(context.Background(), "tc", "-s", "-j", "qdisc", "show", "dev", npDev, "root").Output()
	if err != nil {
		t.Fatalf("tc -s -j qdisc show: %v", err)
	}
	var qs []struct {
		Kind    string `json:"kind"`
		Bytes   uint64 `json:"bytes"`
		Packets uint64 `json:"packets"`
		Drops   uint64 `json:"drops"`
	}
	if err := json.Unmarshal(out, &qs); err != nil || len(qs) == 0 {
		t.Fatalf("tc -s -j qdisc show: %v: %s", err, out)
	}
	return tbfCounters{qs[0].Bytes, qs[0].Packets, qs[0].Drops}
}

// background sends bursts datagrams of size bytes from the receiver to dst
// every gap until the returned function is called, which returns how many
// it sent.
func (l *npLab) background(t *testing.T, dst netip.AddrPort, burst, size int, gap time.Duration) func() int {
	t.Helper()
	var c *net.UDPConn
	if err := l.np.Do(func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(npLabNP.Addr(), 0)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var stop atomic.Bool
	done := make(chan int)
	go func() {
		buf := make([]byte, size)
		sent := 0
		for !stop.Load() {
			for range burst {
				if _, err := c.WriteToUDPAddrPort(buf, dst); err == nil {
					sent++
				}
			}
			time.Sleep(gap)
		}
		done <- sent
	}()
	return func() int {
		stop.Store(true)
		return <-done
	}
}

// spin waits d without sleeping: Go's timers wake up to a millisecond late
// here.
func spin(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}

// blast sends CE-marked data round robin to the QPs, in batches of 16, for
// d, and returns how many packets it sent.
func blast(t *testing.T, s *npprobe.Sender, dst netip.AddrPort, qpns []uint32, d time.Duration) int {
	t.Helper()
	const batch = 16
	pkts := make([]npprobe.Data, batch)
	sent := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := range pkts {
			pkts[i] = npData(qpns[(sent+i)%len(qpns)], uint32(sent+i), true)
		}
		if err := s.Send(dst, pkts); err != nil {
			t.Fatal(err)
		}
		sent += batch
	}
	return sent
}

// checkXmitStamped: N counted from the transmit hook for every CNP the NP
// built but the rare one the hook did not see go (host/npbpf's package
// comment; at most 1 in 1000 here, against about 1 in 30,000 measured),
// no CNP waited past the timeout but those, and some (queued) or none
// waited in a qdisc after the clone returned.
func checkXmitStamped(t *testing.T, np *npbpf.NP, queued bool) {
	t.Helper()
	st, err := np.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// A CNP a qdisc refused after np_egress built it is a redirect
	// error, and never transmitted.
	var unseen uint64
	if st.XmitStamped+st.RedirectErrors < st.EgressBuilt {
		unseen = st.EgressBuilt - st.XmitStamped - st.RedirectErrors
	}
	if unseen != 0 {
		t.Logf("the transmit hook did not see %d of %d CNPs go (%d transmit timeouts)", unseen, st.EgressBuilt, st.XmitTimeouts)
	}
	if st.XmitStamped > st.EgressBuilt || unseen > 1+st.EgressBuilt/1000 || st.EgressStamped != 0 || st.XmitLate != 0 || st.XmitTimeouts > unseen {
		t.Errorf("%d CNPs built (%d refused): %d stamped at the transmit hook (%d late), %d at np_egress, %d transmit timeouts; want all at the hook but at most %d, in time",
			st.EgressBuilt, st.RedirectErrors, st.XmitStamped, st.XmitLate, st.EgressStamped, st.XmitTimeouts, 1+st.EgressBuilt/1000)
	}
	if (st.XmitQueued != 0) != queued {
		t.Errorf("%d of %d CNPs transmitted after the clone returned; want some: %v", st.XmitQueued, st.EgressBuilt, queued)
	}
}

// checkSpacing: the QP's CNPs were transmitted at least N apart (the
// kernel's minimum, taken at the transmit hook) and never less than N apart
// on the tap, which stamps a CNP before the hook reads the clock for it;
// and there were about as many as host/dcqcn's NP sends for the CE arrivals
// the tap saw.
func checkSpacing(t *testing.T, np *npbpf.NP, r npprobe.Result, pkts []npprobe.Packet, c npbpf.QPContext, sent int) {
	t.Helper()
	n := c.MinTimeBetweenCNPs
	sp := r.Spacing[c.QPN]
	if len(sp) < 10 {
		t.Fatalf("qp %#x: %d CNPs", c.QPN, len(sp)+1)
	}
	ref := dcqcn.NewNP(n)
	var first, last time.Time
	for _, p := range pkts {
		if p.Out || p.BTH.DestQP != c.QPN {
			continue
		}
		if p.CE() {
			if first.IsZero() {
				first = p.At
			}
			last = p.At
			ref.OnCE(time.Duration(p.At.UnixNano()))
		} else {
			ref.Poll(time.Duration(p.At.UnixNano()))
		}
	}
	minSp, below := sp[0], 0
	for _, d := range sp {
		minSp = min(minSp, d)
		if d < n {
			below++
		}
	}
	cnt := npCounters(t, np, c.QPN)
	cnps, refCNPs := len(sp)+1, int(ref.Stats().CNPsSent)
	t.Logf("qp %#x: %d CE over %.1f ms -> %d CNPs (host/dcqcn NP on the same arrivals: %d; N = %v); spacing at the transmit hook min %.2f µs; on the tap min %.2f µs p50 %.1f µs p99 %.1f µs, %d of %d below N",
		c.QPN, sent, float64(last.Sub(first))/1e6, cnps, refCNPs, n, us(cnt.MinCNPSpacing), us(minSp),
		us(npprobe.Percentile(sp, 0.5)), us(npprobe.Percentile(sp, 0.99)), below, len(sp))
	if cnt.MinCNPSpacing < n || cnt.NPCNPXmitTimeouts != 0 {
		t.Errorf("qp %#x: two CNPs transmitted %v apart, below N = %v (%d transmit timeouts)", c.QPN, cnt.MinCNPSpacing, n, cnt.NPCNPXmitTimeouts)
	}
	if below != 0 {
		t.Errorf("qp %#x: %d of %d CNP spacings on the tap below N (min %v, N = %v)", c.QPN, below, len(sp), minSp, n)
	}
	// The reference runs on the arrival stamps, the NP on when the CPU got
	// to each packet (softirq deferral on a busy machine moves that), and
	// counts N from its CNP leaving: close, not equal.
	if float64(cnps) > 1.1*float64(refCNPs)+5 || float64(cnps) < 0.8*float64(refCNPs)-5 {
		t.Errorf("qp %#x: %d CNPs, the reference NP sends %d for the same CE arrivals", c.QPN, cnps, refCNPs)
	}
}

// checkWithDecoders writes the frames to a pcap and decodes it with
// tshark's InfiniBand dissector and scapy's ICRC.
func checkWithDecoders(t *testing.T, frames []npprobe.Frame, peerQPN uint32) {
	tshark, errT := exec.LookPath("tshark")
	requireTool(t, "tshark", "apt-get install tshark", errT == nil)
	errS := exec.Command(systemPython, "-c", "from scapy.contrib.roce import BTH").Run()
	requireTool(t, "python3-scapy", fmt.Sprintf("%s cannot import scapy.contrib.roce (%v)", systemPython, errS), errS == nil)
	if len(frames) == 0 {
		t.Fatal("no frames captured")
	}
	dir := t.TempDir()
	pcap := filepath.Join(dir, "np.pcap")
	if err := writePcap(pcap, frames); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tshark, "-r", pcap, "-n", "-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=\t",
		"-Y", "infiniband.bth.opcode == 0x81",
		"-e", "ip.src", "-e", "ip.dst", "-e", "ip.dsfield.dscp", "-e", "ip.dsfield.ecn", "-e", "ip.id", "-e", "ip.flags.df", "-e", "ip.len",
		"-e", "udp.srcport", "-e", "udp.dstport", "-e", "udp.length",
		"-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn", "-e", "infiniband.bth.p_key", "-e", "infiniband.bth.a").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	// Addresses, then numbers (tshark prints some in hex, some in
	// decimal, booleans as 0/1 or True/False); -1: not checked (the QP's
	// source port).
	num := func(v string) int64 {
		switch strings.ToLower(v) {
		case "true":
			return 1
		case "false":
			return 0
		}
		n, err := strconv.ParseInt(v, 0, 64)
		if err != nil {
			return -2
		}
		return n
	}
	wantNum := []int64{48, 2, 0, 1, 60, -1, 4791, 40, 0x81, int64(peerQPN), 0, 0xffff, 0}
	for _, line := range lines {
		f := strings.Split(line, "\t")
		if len(f) != 2+len(wantNum) {
			t.Fatalf("tshark line %q: %d fields", line, len(f))
		}
		if f[0] != npLabNP.Addr().String() || f[1] != npLabRP.Addr().String() {
			t.Fatalf("tshark: CNP %s -> %s", f[0], f[1])
		}
		for i, w := range wantNum {
			if w >= 0 && num(f[2+i]) != w {
				t.Fatalf("tshark field %d = %q, want %d (line %q)", 2+i, f[2+i], w, line)
			}
		}
	}
	if len(lines) < 10 {
		t.Errorf("tshark decoded %d CNPs", len(lines))
	}
	script := filepath.Join(dir, "icrc.py")
	if err := os.WriteFile(script, []byte(icrcScript), 0o600); err != nil {
		t.Fatal(err)
	}
	pyOut, err := exec.Command(systemPython, script, pcap).Output()
	if err != nil {
		t.Fatalf("scapy: %v", err)
	}
	var res icrcResult
	if err := json.Unmarshal(pyOut, &res); err != nil {
		t.Fatalf("scapy output %q: %v", pyOut, err)
	}
	if !res.SelfTest || res.Bad != 0 || res.CNP != len(lines) || len(res.CNPBad) != 0 || res.OK != res.BTH {
		t.Errorf("scapy: %+v (tshark decoded %d CNPs)", res, len(lines))
	}
	t.Logf("tshark decoded %d CNPs; scapy checked %d ICRCs (%d CNPs): all right", len(lines), res.OK, res.CNP)
}

// writePcap writes Ethernet frames with nanosecond timestamps.
func writePcap(path string, frames []npprobe.Frame) error {
	var b []byte
	le := binary.LittleEndian
	b = le.AppendUint32(b, 0xa1b23c4d) // nanosecond pcap
	b = le.AppendUint16(b, 2)
	b = le.AppendUint16(b, 4)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, 65535)
	b = le.AppendUint32(b, 1) // LINKTYPE_ETHERNET
	for _, f := range frames {
		b = le.AppendUint32(b, uint32(f.At.Unix()))
		b = le.AppendUint32(b, uint32(f.At.Nanosecond()))
		b = le.AppendUint32(b, uint32(len(f.Data)))
		b = le.AppendUint32(b, uint32(len(f.Data)))
		b = append(b, f.Data...)
	}
	return os.WriteFile(path, b, 0o600)
}
