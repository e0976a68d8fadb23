package netnstests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/lab"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/tunnel"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// wanLab is DC1's host a, PE1, a WAN core router, PE2 and DC2's host b, in a
// line. The core knows only the PEs' WAN subnets: a's and b's packets cross
// it only inside the tunnel.
type wanLab struct {
	lab                  *lab.Lab
	a, pe1, core, pe2, b *lab.Node
	aAddr, bAddr         netip.Addr
	pe1WAN, pe2WAN       netip.Addr
	dc1, dc2             netip.Prefix
}

func newWANLab(t *testing.T) *wanLab {
	t.Helper()
	labtest.RequireRoot(t)
	labtest.RequireKernel(t, tcxKernel)
	p := netip.MustParsePrefix
	w := &wanLab{
		aAddr: netip.MustParseAddr("198.18.1.10"), bAddr: netip.MustParseAddr("198.19.2.10"),
		pe1WAN: netip.MustParseAddr("198.18.101.1"), pe2WAN: netip.MustParseAddr("198.18.102.1"),
		dc1: p("198.18.1.0/24"), dc2: p("198.19.2.0/24"),
	}
	fwd := func(name string) lab.NodeSpec { return lab.NodeSpec{Name: name, Forwarding: true} }
	w.lab = lab.BuildT(t, lab.Spec{
		Nodes: []lab.NodeSpec{{Name: "a"}, fwd("pe1"), fwd("core"), fwd("pe2"), {Name: "b"}},
		Links: []lab.LinkSpec{
			// The DC links keep their offloads: a's TCP reaches PE1 as GSO
			// packets, which the tunnel must carry.
			{A: lab.Endpoint{Node: "a", Dev: "eth0", Addr: p("198.18.1.10/24")}, B: lab.Endpoint{Node: "pe1", Dev: "lan", Addr: p("198.18.1.1/24")}},
			{A: lab.Endpoint{Node: "pe1", Dev: "wan", Addr: p("198.18.101.1/24")}, B: lab.Endpoint{Node: "core", Dev: "w1", Addr: p("198.18.101.254/24")}, DisableOffloads: true},
			{A: lab.Endpoint{Node: "core", Dev: "w2", Addr: p("198.18.102.254/24")}, B: lab.Endpoint{Node: "pe2", Dev: "wan", Addr: p("198.18.102.1/24")}, DisableOffloads: true},
			{A: lab.Endpoint{Node: "pe2", Dev: "lan", Addr: p("198.19.2.1/24")}, B: lab.Endpoint{Node: "b", Dev: "eth0", Addr: p("198.19.2.10/24")}},
		},
		Routes: []lab.RouteSpec{
			{Node: "a", Dst: w.dc2, Via: netip.MustParseAddr("198.18.1.1")},
			{Node: "b", Dst: w.dc1, Via: netip.MustParseAddr("198.19.2.1")},
			{Node: "pe1", Dst: p("198.18.102.0/24"), Via: netip.MustParseAddr("198.18.101.254")},
			{Node: "pe1", Dst: w.dc2, Via: netip.MustParseAddr("198.18.101.254")},
			{Node: "pe2", Dst: p("198.18.101.0/24"), Via: netip.MustParseAddr("198.18.102.254")},
			{Node: "pe2", Dst: w.dc1, Via: netip.MustParseAddr("198.18.102.254")},
		},
	})
	w.a, w.pe1, w.core, w.pe2, w.b = w.lab.Node("a"), w.lab.Node("pe1"), w.lab.Node("core"), w.lab.Node("pe2"), w.lab.Node("b")
	return w
}

// attachPEs puts a tunnel PE on each WAN device, each tunnelling the other
// DC's prefix to the other PE.
func (w *wanLab) attachPEs(t *testing.T, twoThreshold bool) (pe1, pe2 *tunnel.PE) {
	t.Helper()
	attach := func(n *lab.Node, local, remote netip.Addr, dst netip.Prefix) *tunnel.PE {
		cfg := tunnel.Config{Local: local, Routes: []tunnel.Route{{Prefix: dst, Remote: remote}}, TwoThreshold: twoThreshold}
		pe, err := tunnel.Attach(n.NetnsName, "wan", cfg, tunnel.AttachOptions{})
		if err != nil {
			t.Fatalf("tunnel PE on %s: %v", n.Name, err)
		}
		t.Cleanup(func() {
			if err := pe.Close(); err != nil {
				t.Errorf("detach tunnel PE on %s: %v", n.Name, err)
			}
		})
		return pe
	}
	return attach(w.pe1, w.pe1WAN, w.pe2WAN, w.dc2), attach(w.pe2, w.pe2WAN, w.pe1WAN, w.dc1)
}

func tunnelStats(t *testing.T, pe *tunnel.PE) tunnel.Stats {
	t.Helper()
	s, err := pe.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTunnelPE runs real packets through two eBPF PEs across a core that has
// no route to either DC:
//   - every ECN codepoint arrives as sent, DSCP kept (RFC 6040 normal mode,
//     no congestion), and the PEs' counters agree packet for packet;
//   - CE marked on the outer header by the core's port (a step queue) reaches
//     the receiver on the inner header: every mark, none lost, none invented;
//   - a DF datagram past the inner MTU (1480) is answered with ICMP
//     Fragmentation Needed, and the sender's path MTU becomes 1480;
//   - TCP with TSO on at the sender (GSO packets at PE1) crosses intact.
func TestTunnelPE(t *testing.T) {
	w := newWANLab(t)
	// The core's WAN port toward PE2 first: the decapsulation at PE2's
	// ingress goes after its departure hook.
	const rate = 50 * units.Mbit
	cfg := qdisc.DefaultConfig(rate)
	cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "roce", LimitBytes: 4 * units.MiB, ECN: qdisc.ECNStep, MinThBytes: 30 * units.KiB}
	port := attachPort(t, lab.Port{Node: w.core, Dev: "w2", PeerNode: w.pe2, PeerDev: "wan"}, cfg, false)
	pe1, pe2 := w.attachPEs(t, false)

	sk := newSink(t, w.b)
	dst := netip.AddrPortFrom(w.bAddr, uint16(sk.port))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// (1) Each codepoint at a tenth of the port rate: no queue, no mark.
	const each = 300
	for _, ecn := range []tunnel.ECN{tunnel.NotECT, tunnel.ECT1, tunnel.ECT0, tunnel.CE} {
		f := flow{tos: 26<<2 | int(ecn), payload: 1000, rate: rate / 10, total: time.Duration(each) * 1042 * 8 * time.Second / time.Duration(rate/10)}
		sent, err := f.send(ctx, w.a, dst)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Second)
		for sk.received[ecn].Load() < uint64(sent) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := sk.received[ecn].Load(); got != uint64(sent) || sent < each*9/10 {
			t.Errorf("%v: sent %d, received %d as %v", ecn, sent, got, ecn)
		}
	}
	s1, s2 := tunnelStats(t, pe1), tunnelStats(t, pe2)
	t.Logf("PE1 encap %+v", s1.Encap)
	t.Logf("PE2 decap %+v", s2.Decap)
	var want [4]uint64
	for i := range want {
		want[i] = sk.received[i].Load()
	}
	if s1.Encap.OuterECN != want {
		t.Errorf("PE1 wrote outer codepoints %v, the receiver got %v (normal mode copies)", s1.Encap.OuterECN, want)
	}
	for e := range 4 {
		if s2.Decap.Cells[e][e] != want[e] {
			t.Errorf("PE2 decapsulated %d packets inner %v outer %v, the receiver got %d", s2.Decap.Cells[e][e], tunnel.ECN(e), tunnel.ECN(e), want[e])
		}
	}
	if s2.Decap.Alarm+s2.Decap.Warn+s2.Decap.Dropped+s2.Decap.Spoofed+s2.Decap.Malformed+s2.Decap.GSO+s2.Decap.Errors != 0 {
		t.Errorf("PE2: unexpected decap counters %+v", s2.Decap)
	}

	// (2) ECT(0) at 1.5x the port rate for 150 ms: the core's queue passes
	// K and marks the outer header; each mark must reach b.
	var base [4]uint64
	for i := range base {
		base[i] = sk.received[i].Load()
	}
	prevCells := s2.Decap.Cells
	burst := flow{tos: tosRoCEECT0, payload: 1000, rate: rate * 3 / 2, total: 150 * time.Millisecond}
	sent, err := burst.send(ctx, w.a, dst)
	if err != nil {
		t.Fatal(err)
	}
	ps := waitIdle(t, port)
	deadline := time.Now().Add(3 * time.Second)
	got := func() uint64 {
		return sk.received[tunnel.ECT0].Load() - base[tunnel.ECT0] + sk.received[tunnel.CE].Load() - base[tunnel.CE]
	}
	for got() < uint64(sent) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ce := sk.received[tunnel.CE].Load() - base[tunnel.CE]
	c := ps.Classes[qdisc.ClassRoCE]
	s2 = tunnelStats(t, pe2)
	decapCE := s2.Decap.Cells[tunnel.ECT0][tunnel.CE] - prevCells[tunnel.ECT0][tunnel.CE]
	t.Logf("burst: sent %d, received %d, %d CE at b; the core's port marked %d and dropped %d; PE2 decapsulated %d under outer CE",
		sent, got(), ce, c.CEMarked(), c.DroppedPackets(), decapCE)
	if got() != uint64(sent) || c.DroppedPackets() != 0 {
		t.Errorf("lost packets: sent %d, received %d, port dropped %d", sent, got(), c.DroppedPackets())
	}
	if ce == 0 || ce != c.CEMarked() || ce != decapCE {
		t.Errorf("b saw %d CE, the core marked %d, PE2 decapsulated %d under outer CE: want them equal and above 0", ce, c.CEMarked(), decapCE)
	}
	if ce*5 < uint64(sent) {
		t.Errorf("only %d of %d marked: the queue should stand above K for most of the burst", ce, sent)
	}

	// (3) A DF datagram of 1490 bytes (IP) fits a's 1500 MTU, not the
	// tunnel's 1480: PE1 answers ICMP Fragmentation Needed.
	var conn *net.UDPConn
	if err := w.a.Do(func() (err error) {
		conn, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	sockopt := func(f func(fd int) error) error {
		var ferr error
		if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
			return err
		}
		return ferr
	}
	if err := sockopt(func(fd int) error {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}); err != nil {
		t.Fatal(err)
	}
	mtu := 0
	for i := 0; i < 20 && mtu != 1480; i++ {
		if _, err := conn.Write(make([]byte, 1490-28)); err != nil && !errors.Is(err, syscall.EMSGSIZE) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		if err := sockopt(func(fd int) (err error) {
			mtu, err = unix.GetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	s1 = tunnelStats(t, pe1)
	t.Logf("path MTU from a to b: %d; PE1 too big %d, ICMP sent %d, failed %d", mtu, s1.Encap.TooBig, s1.Encap.ICMPSent, s1.Encap.ICMPFailed)
	if mtu != 1480 || s1.Encap.ICMPSent == 0 || s1.Encap.ICMPFailed != 0 {
		t.Errorf("path MTU %d after DF datagrams past the tunnel's MTU, PE1 sent %d ICMP (%d failed): want 1480 and at least one",
			mtu, s1.Encap.ICMPSent, s1.Encap.ICMPFailed)
	}

	// (4) 8 MB of TCP from a to b, a's TSO on.
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	var ln net.Listener
	if err := w.b.Do(func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(w.bAddr.String(), "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sum := make(chan [32]byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			sum <- [32]byte{}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		h := sha256.New()
		io.Copy(h, c)
		var s [32]byte
		copy(s[:], h.Sum(nil))
		sum <- s
	}()
	var tc net.Conn
	if err := w.a.Do(func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		tc, err = d.Dial("tcp4", ln.Addr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tc.SetDeadline(time.Now().Add(30 * time.Second))
	before1 := tunnelStats(t, pe1).Encap
	if _, err := io.Copy(tc, bytes.NewReader(data)); err != nil {
		t.Fatalf("TCP through the tunnel: %v; PE1 %+v; PE2 %+v", err, tunnelStats(t, pe1).Encap, tunnelStats(t, pe2).Decap)
	}
	tc.Close()
	if got := <-sum; got != sha256.Sum256(data) {
		t.Errorf("TCP through the tunnel: 8 MB arrived altered or short")
	}
	after1 := tunnelStats(t, pe1).Encap
	s2 = tunnelStats(t, pe2)
	t.Logf("TCP: PE1 encapsulated %d packets (%d bytes), errors %d, GSO kept %d; PE2 GSO refused %d",
		after1.Packets-before1.Packets, after1.Bytes-before1.Bytes, after1.Errors, after1.GSOFixed, s2.Decap.GSO)
	if after1.Errors != 0 || s2.Decap.GSO != 0 || s2.Decap.Errors != 0 {
		t.Errorf("TCP: PE1 errors %d, PE2 GSO %d, errors %d: want none", after1.Errors, s2.Decap.GSO, s2.Decap.Errors)
	}
	// TSO at a: fewer tunnel packets than wire segments would be.
	if n := after1.Packets - before1.Packets; n*1448 > uint64(len(data))*11/10 {
		t.Logf("PE1 saw %d packets for 8 MB: a's GSO packets were segmented before PE1", n)
	}
}
