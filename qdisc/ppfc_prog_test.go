package qdisc

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/host/roce"
	"github.com/fabriclab/fabriclab/qdisc/nsexec"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// PPFC (bpf/port_ppfc.h) under BPF_PROG_RUN. port_enqueue looks the route toward
// a packet's source up and clones the packet to the device toward it, so
// the programs run inside a network namespace of their own where craft's
// source (198.18.1.2, or 2001:db8::1) sits behind a veth (a route and a
// permanent neighbour entry); ppfc_egress is attached at that veth's
// egress and turns the clone into the notification, which a packet socket
// on the veth reads back. The clock and the backlog are set through the
// test hooks.

// ppfcFamily is one address family's addresses: craft's source and
// destination, and the switch's address toward the source.
type ppfcFamily struct {
	name                string
	v6                  bool
	source, dest, local netip.Prefix
}

var (
	ppfcV4 = ppfcFamily{name: "ipv4", source: netip.MustParsePrefix("198.18.1.2/24"), dest: netip.MustParsePrefix("198.19.0.2/24"),
		local: netip.MustParsePrefix("198.18.1.1/24")}
	ppfcV6 = ppfcFamily{name: "ipv6", v6: true, source: netip.MustParsePrefix("2001:db8::1/64"), dest: netip.MustParsePrefix("2001:db8::2/64"),
		local: netip.MustParsePrefix("2001:db8::ff/64")}
	ppfcFamilies = []ppfcFamily{ppfcV4, ppfcV6}
	ppfcMAC      = net.HardwareAddr{2, 0, 0, 0, 0, 1}
)

type ppfcRig struct {
	tb      testing.TB
	o       *Objects
	cc      ClassConfig
	fam     ppfcFamily
	ns      netns.NsHandle
	ifindex int // the veth toward the source
	sock    int // AF_PACKET on it
	pkt     []byte
}

// newPPFCNetns returns a new, empty network namespace; the caller's thread
// stays where it was.
func newPPFCNetns(tb testing.TB) netns.NsHandle {
	tb.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		tb.Fatalf("return from the new netns (thread retired): %v", err) // the thread stays locked
	}
	runtime.UnlockOSThread()
	tb.Cleanup(func() { ns.Close() })
	return ns
}

func newPPFCRig(tb testing.TB, cc ClassConfig, mode QueueMode, fam ppfcFamily) *ppfcRig {
	tb.Helper()
	labtest.RequireRoot(tb)
	cfg := DefaultConfig(units.Gbit)
	cfg.Classes[ClassRoCE] = cc
	r := &ppfcRig{tb: tb, o: loadTest(tb, cfg, mode), cc: cc, fam: fam, ns: newPPFCNetns(tb)}
	r.pkt = craft(tb, pktSpec{v6: fam.v6, dscp: uint8(DSCPRoCE), ecn: ect0, payload: 1000})

	h, err := netlink.NewHandleAt(r.ns)
	if err != nil {
		tb.Fatal(err)
	}
	defer h.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "src0"}, PeerName: "src1"}
	if err := h.LinkAdd(veth); err != nil {
		tb.Fatal(err)
	}
	var up [2]netlink.Link
	for i, name := range []string{"src0", "src1"} {
		if up[i], err = h.LinkByName(name); err == nil {
			err = h.LinkSetUp(up[i])
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	r.ifindex = up[0].Attrs().Index
	// No duplicate address detection: a tentative address is no
	// source for the FIB lookup.
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: fam.local.Addr().AsSlice(), Mask: net.CIDRMask(fam.local.Bits(), fam.local.Addr().BitLen())},
		Flags: unix.IFA_F_NODAD}
	if err := h.AddrAdd(up[0], addr); err != nil {
		tb.Fatal(err)
	}
	family := unix.AF_INET
	if fam.v6 {
		family = unix.AF_INET6
	}
	if err := h.NeighAdd(&netlink.Neigh{LinkIndex: r.ifindex, Family: family, State: netlink.NUD_PERMANENT,
		IP: fam.source.Addr().AsSlice(), HardwareAddr: ppfcMAC}); err != nil {
		tb.Fatal(err)
	}
	err = nsexec.Do(r.ns, func() error {
		// bpf_fib_lookup answers only where the switch forwards.
		for _, sysctl := range []string{"ipv4/ip_forward", "ipv6/conf/all/forwarding"} {
			if err := os.WriteFile("/proc/sys/net/"+sysctl, []byte("1"), 0o644); err != nil {
				return err
			}
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: r.ifindex, Program: r.o.PpfcEgress, Attach: ebpf.AttachTCXEgress})
		if err != nil {
			return err
		}
		tb.Cleanup(func() { l.Close() })
		r.sock, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		tb.Cleanup(func() { unix.Close(r.sock) })
		return unix.Bind(r.sock, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: r.ifindex})
	})
	if err != nil {
		tb.Fatal(err)
	}
	r.notes() // what the veth sent coming up
	return r
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// enqueue runs port_enqueue at now on a packet that finds backlog bytes
// queued, and returns the PPFC notifications it sent.
func (r *ppfcRig) enqueue(now time.Duration, backlog uint64, pkt []byte) []roce.PPFC {
	r.tb.Helper()
	r.at(now, backlog)
	err := nsexec.Do(r.ns, func() error {
		// ingress_ifindex: the FIB lookup needs a device of the namespace.
		res, err := r.o.PortEnqueue.Run(&ebpf.RunOptions{Data: pkt, Context: skbCtx{IngressIfidx: 1}})
		if err == nil && res != tcActOK {
			err = errors.New("port_enqueue did not pass the packet")
		}
		return err
	})
	if err != nil {
		r.tb.Fatal(err)
	}
	return r.notes()
}

// at sets the clock and the backlog.
func (r *ppfcRig) at(now time.Duration, backlog uint64) {
	r.tb.Helper()
	if err := r.o.SetClock(uint64(now)); err != nil {
		r.tb.Fatal(err)
	}
	setBacklog(r.tb, r.o, ClassRoCE, backlog)
}

// notes reads the PPFC notifications that left the veth since the last
// call, checking each one's addresses, ports, ICRC and (over IPv6) UDP
// checksum.
func (r *ppfcRig) notes() []roce.PPFC {
	r.tb.Helper()
	var out []roce.PPFC
	buf := make([]byte, 2048)
	for {
		n, _, err := unix.Recvfrom(r.sock, buf, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) {
			return out
		}
		if err != nil {
			r.tb.Fatal(err)
		}
		p := gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default)
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp == nil || udp.DstPort != roce.UDPPort {
			continue // IPv6 neighbour discovery and the like
		}
		var src, dst netip.Addr
		var hops, tos uint8
		if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
			src, _ = netip.AddrFromSlice(ip.SrcIP)
			dst, _ = netip.AddrFromSlice(ip.DstIP)
			hops, tos = ip.TTL, ip.TOS
			if udp.Checksum != 0 {
				r.tb.Errorf("IPv4 notification with UDP checksum %#04x, want 0 (as rxe)", udp.Checksum)
			}
		} else if ip, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
			src, _ = netip.AddrFromSlice(ip.SrcIP)
			dst, _ = netip.AddrFromSlice(ip.DstIP)
			hops, tos = ip.HopLimit, ip.TrafficClass
			if ip.FlowLabel != 0 {
				r.tb.Errorf("IPv6 notification: flow label %#x, want 0", ip.FlowLabel)
			}
			if c := udp6Sum(src, dst, udp.Contents, udp.Payload); udp.Checksum == 0 || c != 0xFFFF {
				r.tb.Errorf("IPv6 notification: UDP checksum %#04x does not verify (sum %#04x)", udp.Checksum, c)
			}
		}
		if want := uint8(DSCPCNP) << 2; tos != want { // the CNPs' DSCP, Not-ECT
			r.tb.Errorf("notification's TOS %#02x, want %#02x", tos, want)
		}
		eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		if src != r.fam.local.Addr() || dst != r.fam.source.Addr() || eth.DstMAC.String() != ppfcMAC.String() || udp.SrcPort != 0xC0FC || hops != 64 {
			r.tb.Errorf("notification %v:%d -> %v:%d to %v, hop limit %d: want %v:49404 -> %v:4791 to %v, 64",
				src, udp.SrcPort, dst, udp.DstPort, eth.DstMAC, hops, r.fam.local.Addr(), r.fam.source.Addr(), ppfcMAC)
		}
		var f roce.PPFC
		if err := roce.ParsePPFC(udp.Payload, &f); err != nil {
			r.tb.Fatal(err)
		}
		if !roce.VerifyICRC(netip.AddrPortFrom(src, 0xC0FC), netip.AddrPortFrom(dst, roce.UDPPort), udp.Payload) {
			r.tb.Errorf("%v: the ICRC does not verify", f.Action)
		}
		if f.Dest != r.fam.dest.Addr() {
			r.tb.Errorf("%v names %v, want %v", f.Action, f.Dest, r.fam.dest.Addr())
		}
		out = append(out, f)
	}
}

// source reads the port's state of craft's source.
func (r *ppfcRig) source() bpf.PortPpfcSource {
	r.tb.Helper()
	k := bpf.PortPpfcKey{Addr: r.fam.source.Addr().As16(), Dest: r.fam.dest.Addr().As16(), ClassId: uint32(ClassRoCE)}
	var s bpf.PortPpfcSource
	if err := r.o.PpfcSources.Lookup(&k, &s); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		r.tb.Fatal(err)
	}
	return s
}

// back is a packet from craft's destination to its source, leaving the
// switch toward the source: where ppfc_egress looks for sources to resume.
func (r *ppfcRig) back() []byte {
	b := craft(r.tb, pktSpec{v6: r.fam.v6, dscp: uint8(DSCPRoCE), payload: 20})
	copy(b[0:6], ppfcMAC)
	copy(b[6:12], net.HardwareAddr{2, 0, 0, 0, 0, 2})
	src, dst := 14+12, 14+16 // IPv4 addresses
	if r.fam.v6 {
		src, dst = 14+8, 14+24
	}
	copy(b[src:], r.fam.dest.Addr().AsSlice())
	copy(b[dst:], r.fam.source.Addr().AsSlice())
	return b
}

// udp6Sum is the ones' complement sum of UDP over IPv6 with its
// pseudo-header (RFC 8200 §8.1): 0xFFFF when the checksum verifies.
func udp6Sum(src, dst netip.Addr, hdr, payload []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	n := uint32(len(hdr) + len(payload))
	sum += n>>16 + n&0xFFFF + 17
	add(hdr)
	add(payload)
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	return uint16(sum)
}

// drainUs is the notification's duration for a packet that took the
// backlog to after: the class's drain time to floor at 1 Gbit/s (8 ns a
// byte), whole µs.
func drainUs(after, floor uint64) time.Duration {
	return time.Duration((after-floor)*8/1000) * time.Microsecond
}

// want checks what one enqueue sent.
func (r *ppfcRig) want(step string, got []roce.PPFC, action roce.PPFCAction, pause time.Duration) {
	r.tb.Helper()
	if len(got) != 1 || got[0].Action != action || got[0].Pause != pause {
		r.tb.Fatalf("%s: sent %+v, want one %v with duration %v", step, got, action, pause)
	}
}

func (r *ppfcRig) wantNone(step string, got []roce.PPFC) {
	r.tb.Helper()
	if len(got) != 0 {
		r.tb.Fatalf("%s: sent %+v, want nothing", step, got)
	}
}

func (r *ppfcRig) counters() ClassStats {
	r.tb.Helper()
	return stats(r.tb, r.o).Classes[ClassRoCE]
}

func ppfcClass() ClassConfig {
	return ClassConfig{Name: "roce", LimitBytes: units.MiB, ECN: ECNOff,
		XoffBytes: 400_000, XonBytes: 200_000, AlarmBytes: 300_000}
}

// TestPPFCHoldAndAlarm walks one source through a congestion episode and
// the next: an alarm at alarm_bytes (once per episode), a stop at xoff,
// holds while its pauses run out above xon (hold wins over alarm), none
// once the backlog has been down to xon, and an alarm again in the next
// episode. Every notification's duration is the drain time its rule says.
func TestPPFCHoldAndAlarm(t *testing.T) {
	for _, fam := range ppfcFamilies {
		t.Run(fam.name, func(t *testing.T) { ppfcHoldAndAlarm(t, fam) })
	}
}

func ppfcHoldAndAlarm(t *testing.T, fam ppfcFamily) {
	r := newPPFCRig(t, ppfcClass(), QueueVeth, fam)
	n := uint64(len(r.pkt))
	ms := time.Millisecond

	r.wantNone("below xon", r.enqueue(ms, 100_000, r.pkt))
	r.wantNone("between xon and alarm, never stopped", r.enqueue(ms, 250_000, r.pkt))
	if s := r.source(); s != (bpf.PortPpfcSource{}) {
		t.Fatalf("a source below alarm is in ppfc_sources: %+v", s)
	}
	r.want("at alarm", r.enqueue(ms, 300_000-n, r.pkt), roce.PPFCAlarm, drainUs(300_000, 200_000))
	r.wantNone("alarmed in this episode", r.enqueue(ms, 350_000, r.pkt))

	after := uint64(420_000)
	r.want("at xoff", r.enqueue(2*ms, after-n, r.pkt), roce.PPFCStop, drainUs(after, 100_000))
	until := 2*ms + drainUs(after, 100_000) // 2.64 ms
	r.wantNone("paused, over xoff", r.enqueue(until-1, 500_000, r.pkt))
	r.wantNone("paused, in the band", r.enqueue(until-1, 250_000, r.pkt))

	// The pause ran out while the backlog is above xon: hold.
	after = 250_000
	r.want("pause over, above xon", r.enqueue(until, after-n, r.pkt), roce.PPFCHold, drainUs(after, 100_000))
	until += drainUs(after, 100_000)
	r.wantNone("held", r.enqueue(until-1, 300_000, r.pkt))
	after = 350_000 // above alarm too: the hold wins
	r.want("hold over, above alarm", r.enqueue(until, after-n, r.pkt), roce.PPFCHold, drainUs(after, 100_000))
	until += drainUs(after, 100_000)

	c := r.counters()
	s := r.source()
	if c.PPFCStopsSent != 1 || c.PPFCStopsCoalesced != 1 || c.PPFCHoldsSent != 2 || c.PPFCHoldsCoalesced != 2 ||
		c.PPFCAlarmsSent != 1 || c.PPFCAlarmsCoalesced != 1 {
		t.Errorf("class counters %+v: want 1 stop (1 coalesced), 2 holds (2 coalesced), 1 alarm (1 coalesced)", c)
	}
	if s.Stops != 1 || s.Holds != 2 || s.Alarms != 1 || s.Psn != 4 || s.PausedUntilNs != uint64(until) || s.Episode != 0 || s.Alarmed != 1 {
		t.Errorf("source %+v: want 1 stop, 2 holds, 1 alarm, PSN 4, paused until %d, episode 0, alarmed 1", s, until)
	}

	// A packet leaves and the backlog is down to xon: the episode ends.
	// The pause runs out in the next one: no hold, and an alarm again.
	r.at(until, 200_000+n)
	dq := run(t, r.o.PortDequeue, r.pkt, skbCtx{Tstamp: uint64(until-ms)&^0xFF | 0xA8 | uint64(ClassRoCE)})
	if dq.ret != tcActNext {
		t.Fatalf("port_dequeue: verdict %d", dq.ret)
	}
	var cs bpf.PortClassState
	if err := r.o.ClassQueue.Lookup(uint32(ClassRoCE), &cs); err != nil {
		t.Fatal(err)
	}
	if cs.PpfcEpisode != 1 || cs.PpfcAboveXon != 0 {
		t.Fatalf("after the fall to xon: episode %d, above xon %d; want 1, 0", cs.PpfcEpisode, cs.PpfcAboveXon)
	}
	r.wantNone("next episode, in the band", r.enqueue(until, 250_000, r.pkt))
	r.want("next episode, at alarm", r.enqueue(until, 310_000-n, r.pkt), roce.PPFCAlarm, drainUs(310_000, 200_000))
	if s := r.source(); s.Alarmed != 2 || s.Holds != 2 {
		t.Errorf("source %+v: want alarmed 2 (episode 1), still 2 holds", s)
	}
	if cs := stats(t, r.o).Port; cs.PPFCErrors() != 0 {
		t.Errorf("port counters %+v: want no PPFC error", cs)
	}
}

// TestPPFCResumeEndsEpisode: a source resumed (by a packet toward it once
// the backlog is down to xon) is out of the episode: when the backlog
// rises into the band again it gets no hold.
func TestPPFCResumeEndsEpisode(t *testing.T) {
	for _, fam := range ppfcFamilies {
		t.Run(fam.name, func(t *testing.T) { ppfcResumeEndsEpisode(t, fam) })
	}
}

func ppfcResumeEndsEpisode(t *testing.T, fam ppfcFamily) {
	r := newPPFCRig(t, ppfcClass(), QueueVeth, fam)
	n := uint64(len(r.pkt))
	ms := time.Millisecond
	r.want("at xoff", r.enqueue(ms, 400_000-n, r.pkt), roce.PPFCStop, drainUs(400_000, 100_000))
	back := r.back()
	r.at(ms+100*time.Microsecond, 250_000)
	err := nsexec.Do(r.ns, func() error {
		_, err := r.o.PpfcEgress.Run(&ebpf.RunOptions{Data: back, Context: skbCtx{Ifindex: uint32(r.ifindex)}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	r.wantNone("above xon: no resume", r.notes())
	r.at(ms+200*time.Microsecond, 200_000)
	if err := nsexec.Do(r.ns, func() error {
		_, err := r.o.PpfcEgress.Run(&ebpf.RunOptions{Data: back, Context: skbCtx{Ifindex: uint32(r.ifindex)}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r.want("down to xon", r.notes(), roce.PPFCResume, 0)
	// No packet left through the hooks, so the class's episode goes on;
	// the source is out of it all the same.
	r.wantNone("resumed, in the band", r.enqueue(5*ms, 250_000, r.pkt))
	if c := r.counters(); c.PPFCStopsSent != 1 || c.PPFCResumesSent != 1 || c.PPFCHoldsSent != 0 || c.PPFCHoldsCoalesced != 0 {
		t.Errorf("class counters %+v: want 1 stop, 1 resume, no hold", c)
	}
}

// TestPPFCVirtualEpisodes: in virtual-queue mode the queue drains on the
// clock, and the episode ends when it has drained to xon: the source whose
// stop ran out in the band is held in the same episode, not after it.
func TestPPFCVirtualEpisodes(t *testing.T) {
	cc := ppfcClass()
	r := newPPFCRig(t, cc, QueueVirtual, ppfcV4)
	n := uint64(len(r.pkt))
	vq := func(now time.Duration, backlog uint64) []roce.PPFC {
		t.Helper()
		var cs bpf.PortClassState
		if err := r.o.ClassQueue.Lookup(uint32(ClassRoCE), &cs); err != nil {
			t.Fatal(err)
		}
		cs.BacklogBytes, cs.VqLastNs = backlog, uint64(now)
		if err := r.o.ClassQueue.Put(uint32(ClassRoCE), &cs); err != nil {
			t.Fatal(err)
		}
		if err := r.o.SetClock(uint64(now)); err != nil {
			t.Fatal(err)
		}
		err := nsexec.Do(r.ns, func() error {
			_, err := r.o.PortEnqueue.Run(&ebpf.RunOptions{Data: r.pkt, Context: skbCtx{IngressIfidx: 1}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return r.notes()
	}
	ms := time.Millisecond
	r.want("at xoff", vq(ms, 400_000-n), roce.PPFCStop, drainUs(400_000, 100_000))
	until := ms + drainUs(400_000, 100_000)
	// Set at the pause's end, the backlog is still in the band: hold.
	r.want("pause over in the band", vq(until, 300_000-n), roce.PPFCHold, drainUs(300_000, 100_000))
	until += drainUs(300_000, 100_000)
	// Now let the queue drain on the clock: from 300 KB at `until`,
	// 1 Gbit/s takes 800 µs to 200 KB. A packet then sees ≤ xon and
	// ends the episode; one at 250 KB after it is not held.
	if err := r.o.SetClock(uint64(until + 900*time.Microsecond)); err != nil {
		t.Fatal(err)
	}
	var cs bpf.PortClassState
	if err := r.o.ClassQueue.Lookup(uint32(ClassRoCE), &cs); err != nil {
		t.Fatal(err)
	}
	cs.BacklogBytes, cs.VqLastNs = 300_000, uint64(until)
	if err := r.o.ClassQueue.Put(uint32(ClassRoCE), &cs); err != nil {
		t.Fatal(err)
	}
	if err := nsexec.Do(r.ns, func() error {
		_, err := r.o.PortEnqueue.Run(&ebpf.RunOptions{Data: r.pkt, Context: skbCtx{IngressIfidx: 1}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r.wantNone("drained below xon", r.notes())
	if err := r.o.ClassQueue.Lookup(uint32(ClassRoCE), &cs); err != nil {
		t.Fatal(err)
	}
	if cs.PpfcEpisode != 1 {
		t.Fatalf("episode %d after the drain to xon, want 1", cs.PpfcEpisode)
	}
	r.wantNone("next episode, band", vq(until+2*ms, 250_000))
	if c := r.counters(); c.PPFCStopsSent != 1 || c.PPFCHoldsSent != 1 {
		t.Errorf("class counters %+v: want 1 stop, 1 hold", c)
	}
}
