package netnstests

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/npbpf"
	"github.com/fabriclab/fabriclab/host/npbpf/npprobe"
	"github.com/fabriclab/fabriclab/host/roce"
)

// TestNPBPFGRO runs the kernel NP behind a device that coalesces what it
// receives (GRO, lab.Node.SetReceiveCoalescing; a host without a port in
// front, as the bench's veth pair or a lab server's NIC): UDP GSO sends of
// CE-marked RoCEv2 datagrams cross the veth as datagrams and reach
// np_ingress as runs. Every CE datagram must be counted, each run must
// get its CNP, and a run's datagrams to a second QP of the same flow are
// counted apart and not answered.
//
// Whether veth's NAPI gathers a GSO send's segments into one poll is the
// host's timing: once in a whole-suite run it delivered all 800 alone.
// With no run there is nothing to judge, so the lab is built again, up to
// npGROAttempts times, each such attempt logged.
func TestNPBPFGRO(t *testing.T) {
	for attempt := 1; attempt <= npGROAttempts; attempt++ {
		again := false
		t.Run(fmt.Sprintf("attempt%d", attempt), func(t *testing.T) { again = npGRORun(t, attempt == npGROAttempts) })
		if !again {
			return
		}
	}
}

// npGROAttempts is how many labs TestNPBPFGRO builds while none
// coalesces.
const npGROAttempts = 3

// npGRORun is one attempt of TestNPBPFGRO; it reports whether no run
// reached np_ingress (and, unless last, judged nothing).
func npGRORun(t *testing.T, last bool) (noRuns bool) {
	l := newNPLab(t, npbpf.Options{})
	if err := l.np.SetReceiveCoalescing(npDev, true); err != nil {
		t.Fatal(err)
	}
	c := l.qp(t, 0x111, 0x211, false, 50*time.Microsecond)
	other := l.qp(t, 0x112, 0x212, false, 50*time.Microsecond)
	dst := netip.AddrPortFrom(npLabNP.Addr(), roce.UDPPort)
	tp := l.tap(t)
	const sends, segs = 50, 16
	// The second QP's datagrams ride in the last run only, its second half.
	qpn := func(send, seg int) uint32 {
		if send == sends-1 && seg >= segs/2 {
			return other.QPN
		}
		return c.QPN
	}
	var fd int
	if err := l.rp.Do(func() (err error) {
		fd, err = gsoSocket(netip.AddrPortFrom(npLabRP.Addr(), 0xc0de), dataTOSCE, roce.PacketLen(roce.OpRCWriteMiddle, npDataBytes))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	src := netip.AddrPortFrom(npLabRP.Addr(), 0xc0de)
	pktLen := roce.PacketLen(roce.OpRCWriteMiddle, npDataBytes)
	buf := make([]byte, segs*pktLen)
	to := &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}
	for i := range sends {
		for j := range segs {
			b := buf[j*pktLen : (j+1)*pktLen]
			h := roce.Header{BTH: roce.BTH{Opcode: roce.OpRCWriteMiddle, PKey: roce.DefaultPKey, DestQP: qpn(i, j), PSN: uint32(i*segs + j)}}
			roce.Build(b, &h, make([]byte, npDataBytes))
			roce.SealICRC(src, dst, b)
		}
		if err := unix.Sendto(fd, buf, 0, to); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		spin(200 * time.Microsecond) // more than N: each run may have its CNP
	}
	time.Sleep(50 * time.Millisecond)

	st, err := l.nph.Stats()
	if err != nil {
		t.Fatal(err)
	}
	cc, oc := npCounters(t, l.nph, c.QPN), npCounters(t, l.nph, other.QPN)
	t.Logf("np_ingress: %d packets, %d CE; %d runs of %d datagrams (%.1f per run), %d to another QP than the run's first; %d CNPs",
		st.Packets, st.CE, st.GRORuns, st.GROSegments, float64(st.GROSegments)/max(1, float64(st.GRORuns)), st.GROOtherQP, st.CNPSent)
	t.Logf("QP %#x: %+v; QP %#x: %+v", c.QPN, cc, other.QPN, oc)
	if st.GRORuns == 0 {
		if !last {
			t.Logf("no run reached np_ingress: the device delivered every datagram alone; building the lab again")
			return true
		}
		t.Fatalf("no run reached np_ingress in %d labs: the device did not coalesce, the test shows nothing", npGROAttempts)
	}
	// The other QP's datagrams follow c's in their run: always the run's
	// tail, never its first.
	wantC := uint64(sends*segs - segs/2)
	if cc.NPECNMarkedRoCEPackets != wantC || st.GROOtherQP != segs/2 || oc.NPECNMarkedRoCEPackets != 0 || oc.NPCNPSent != 0 {
		t.Errorf("CE datagrams counted: %d for QP %#x (want %d), %d for the other (want 0, %d as gro_other_qp: got %d)",
			cc.NPECNMarkedRoCEPackets, c.QPN, wantC, oc.NPECNMarkedRoCEPackets, segs/2, st.GROOtherQP)
	}
	// One decision per run: its first CE gets the CNP, the rest coalesce.
	if cc.NPCNPSent < sends/2 || cc.NPCNPSent > sends+1 || cc.NPCNPErrors != 0 ||
		cc.NPCNPCoalesced < wantC-2*cc.NPCNPSent {
		t.Errorf("QP %#x: %d CNPs for %d runs 200 µs apart (N 50 µs), %d coalesced, %d errors", c.QPN, cc.NPCNPSent, sends, cc.NPCNPCoalesced, cc.NPCNPErrors)
	}
	// Every CNP on the wire is right to the byte, though cut from a run.
	var out int
	for _, f := range tp.Take() {
		if p, ok := npprobe.Decode(f); ok && p.Out && p.IsCNP() {
			out++
			if err := npprobe.CheckCNP(p.Frame, l.spec(c)); err != nil {
				t.Fatalf("CNP %d: %v", out, err)
			}
		}
	}
	if out != int(st.CNPSent) {
		t.Errorf("%d CNPs on the wire, np_cnp_sent %d", out, st.CNPSent)
	}
	if st.EgressBuilt != st.CNPSent || st.EgressDropped != 0 || st.RedirectErrors != 0 {
		t.Errorf("stats %+v: every CNP decided must be built, none dropped", st)
	}
	return false
}

// gsoSocket is a UDP socket bound to local that sends with tos, DF and
// UDP GSO in datagrams of seg bytes (UDP_SEGMENT), in the calling thread's
// namespace.
func gsoSocket(local netip.AddrPort, tos uint8, seg int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return -1, err
	}
	for _, o := range [][3]int{
		{unix.IPPROTO_IP, unix.IP_TOS, int(tos)},
		{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO},
		{unix.SOL_UDP, unix.UDP_SEGMENT, seg},
	} {
		if err := unix.SetsockoptInt(fd, o[0], o[1], o[2]); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(local.Port()), Addr: local.Addr().As4()}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
