//go:build linux

package pktio

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/roce"
)

// roceFamilies are the address pairs the RoCEConn tests run over: both
// ends on the RoCEv2 port, as every agent of a host is.
var roceFamilies = []struct {
	name string
	a, b string
	any  string // the wildcard address of the family
}{
	{"ipv4", testAddr4A, testAddr4B, "0.0.0.0"},
	{"ipv6", testAddr6A, testAddr6B, "::"},
}

// listenRoCE opens a RoCEConn on addr:4791 inside the namespace, closed at
// cleanup.
func (n *testNetns) listenRoCE(tb testing.TB, addr string, opts RoCEOptions) *RoCEConn {
	tb.Helper()
	var c *RoCEConn
	if err := n.do(func() (err error) {
		c, err = ListenRoCE(netip.AddrPortFrom(netip.MustParseAddr(addr), 0), opts)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		tb.Fatal(err)
	}
	return c
}

// roceSrcPort is the source port tests give datagram i.
func roceSrcPort(i int) uint16 { return 0xC000 | uint16(i*97)&0x3FFF }

// mkRoCEMsgs is mkMsgs with a BTH DestQP in c's QPN block (byte 5 of the
// datagram is the block's slot) and a source port per datagram.
func mkRoCEMsgs(n int, dst netip.AddrPort, size int, to *RoCEConn) []Message {
	msgs := mkMsgs(n, dst, size, tosPattern)
	first, _ := to.QPNBlock()
	for i := range msgs {
		msgs[i].Buffers[0][5] = byte(first >> 16)
		msgs[i].SrcPort = roceSrcPort(i)
	}
	return msgs
}

// TestRoCERoundTrip: datagrams from one conn to another arrive from the
// source port each was given, with their TOS; on the wire every one goes to
// 4791 with IP ID 0 and DF (IPv4) and a UDP checksum of 0 (IPv4) or a
// correct one (IPv6).
func TestRoCERoundTrip(t *testing.T) {
	ns := newTestNetns(t, 0)
	for _, fam := range roceFamilies {
		t.Run(fam.name, func(t *testing.T) {
			capt := ns.capture(t)
			a := ns.listenRoCE(t, fam.a, RoCEOptions{})
			b := ns.listenRoCE(t, fam.any, RoCEOptions{}) // a wildcard: the route picks the source
			if a.LocalAddr() != netip.AddrPortFrom(netip.MustParseAddr(fam.a), 4791) {
				t.Fatalf("LocalAddr %s, want %s port 4791", a.LocalAddr(), fam.a)
			}
			fa, _ := a.QPNBlock()
			fb, lb := b.QPNBlock()
			if fa == fb || lb-fb != 0xFFFF {
				t.Fatalf("QPN blocks %#x and %#x..%#x: want two distinct blocks of 65536", fa, fb, lb)
			}
			toB := netip.AddrPortFrom(netip.MustParseAddr(fam.b), 4791)
			sent := mkRoCEMsgs(100, toB, 1001, b) // odd: the IPv6 checksum spans odd pieces
			if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			got := readN(t, b, len(sent), 2048)
			for i := range sent {
				src := netip.AddrPortFrom(netip.MustParseAddr(fam.a), roceSrcPort(i))
				checkRoundTrip(t, sent[i:i+1], got[i:i+1], src)
			}
			// And back, from b's wildcard: the route's source address,
			// which for an address of this host is that address itself.
			back := mkRoCEMsgs(10, netip.AddrPortFrom(netip.MustParseAddr(fam.a), 4791), 64, a)
			if n, err := b.WriteBatch(back); n != len(back) || err != nil {
				t.Fatalf("WriteBatch back = %d, %v", n, err)
			}
			gotBack := readN(t, a, len(back), 2048)
			for i := range back {
				checkRoundTrip(t, back[i:i+1], gotBack[i:i+1], netip.AddrPortFrom(netip.MustParseAddr(fam.a), roceSrcPort(i)))
			}

			pkts := capt.outgoing(t)
			if len(pkts) != len(sent)+len(back) {
				t.Fatalf("captured %d packets, want %d", len(pkts), len(sent)+len(back))
			}
			for i, p := range pkts {
				h, err := parseIP(p)
				if err != nil {
					t.Fatal(err)
				}
				k, want := i, sent
				if i >= len(sent) {
					k, want = i-len(sent), back
				}
				udp := udpOf(t, p, h.version)
				sport, csum := binary.BigEndian.Uint16(udp[0:2]), binary.BigEndian.Uint16(udp[6:8])
				if h.dstPort != 4791 || sport != roceSrcPort(k) || h.tos != want[k].TOS || h.fragment {
					t.Errorf("packet %d: port %d -> %d TOS %#x fragment %v, want %d -> 4791 TOS %#x unfragmented",
						i, sport, h.dstPort, h.tos, h.fragment, roceSrcPort(k), want[k].TOS)
				}
				switch h.version {
				case 4:
					if h.id != 0 || !h.df || csum != 0 || p[8] != rawTTL {
						t.Errorf("packet %d: IP ID %#x DF %v UDP checksum %#x TTL %d, want ID 0, DF, checksum 0, TTL 64", i, h.id, h.df, csum, p[8])
					}
				case 6:
					src, _ := netip.AddrFromSlice(h.src)
					dst, _ := netip.AddrFromSlice(h.dst)
					if !checkUDP6(src, dst, udp) || csum == 0 {
						t.Errorf("packet %d: bad UDP checksum %#x over IPv6", i, csum)
					}
				}
			}
		})
	}
}

// udpOf returns the UDP header and payload of a captured packet.
func udpOf(tb testing.TB, p []byte, version int) []byte {
	tb.Helper()
	if version == 4 {
		return p[int(p[0]&0x0f)*4:]
	}
	return p[40:]
}

// checkUDP6 verifies the UDP checksum of an IPv6 packet from src to dst
// whose UDP header and payload are udp.
func checkUDP6(src, dst netip.Addr, udp []byte) bool {
	if len(udp) < udpHeaderLen {
		return false
	}
	s16, d16 := src.As16(), dst.As16()
	var s onesSum
	s.add(s16[:])
	s.add(d16[:])
	var pseudo [8]byte
	binary.BigEndian.PutUint32(pseudo[0:4], uint32(len(udp)))
	pseudo[7] = 17
	s.add(pseudo[:])
	s.add(udp)
	return s.fold() == 0xFFFF
}

// TestRoCESteering: three conns of one namespace share UDP 4791; each gets
// exactly the datagrams for its QPN block, whichever source port they come
// from; a datagram for a free block is dropped and counted (unknown_qp), a
// short one too (malformed); a closed conn's block frees up.
func TestRoCESteering(t *testing.T) {
	ns := newTestNetns(t, 0)
	var conns []*RoCEConn
	for range 3 {
		conns = append(conns, ns.listenRoCE(t, "0.0.0.0", RoCEOptions{}))
	}
	slots := map[uint32]bool{}
	for _, c := range conns {
		first, _ := c.QPNBlock()
		slots[first>>QPNSlotShift] = true
	}
	if len(slots) != 3 {
		t.Fatalf("blocks %v: want 3 distinct", slots)
	}
	st0, err := conns[0].SteeringStats()
	if err != nil {
		t.Fatal(err)
	}
	// A plain UDP socket sends: the steering does not care who sends.
	tx := plainSender(t, ns)
	dst := mustAddrPort(testAddr4A + ":4791")
	for range 2 {
		for i, c := range conns {
			msgs := mkRoCEMsgs(20+i, dst, 200, c)
			for k := range msgs {
				msgs[k].SrcPort = 0
			}
			if _, err := tx.WriteBatch(msgs); err != nil {
				t.Fatal(err)
			}
			got := readN(t, c, len(msgs), 2048)
			checkRoundTrip(t, msgs, got, tx.LocalAddr())
		}
	}
	// A free block: unknown_qp. A datagram too short for a BTH: malformed.
	free := uint32(0)
	for slots[free] {
		free++
	}
	unknown := make([]byte, 40)
	unknown[5] = byte(free)
	short := make([]byte, 12)
	if _, err := tx.WriteBatch([]Message{{Buffers: [][]byte{unknown}, Addr: dst}, {Buffers: [][]byte{short}, Addr: dst}}); err != nil {
		t.Fatal(err)
	}
	// Nothing else may arrive anywhere.
	for i, c := range conns {
		if err := c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if n, err := c.ReadBatch(readMsgs(1, 2048)); !errors.Is(err, syscall.EAGAIN) && !isTimeout(err) {
			t.Errorf("conn %d read %d datagrams (%v), want a timeout", i, n, err)
		}
	}
	st, err := conns[2].SteeringStats()
	if err != nil {
		t.Fatal(err)
	}
	want := SteeringStats{Steered: st0.Steered + 2*(20+21+22), UnknownQP: st0.UnknownQP + 1, Malformed: st0.Malformed + 1}
	if st != want {
		t.Errorf("steering stats %+v, want %+v", st, want)
	}

	// Close conn 1: its block frees up, and the next conn takes it.
	first1, _ := conns[1].QPNBlock()
	conns[1].Close()
	msgs := mkRoCEMsgs(1, dst, 64, conns[0])
	msgs[0].Buffers[0][5] = byte(first1 >> QPNSlotShift)
	msgs[0].SrcPort = 0
	if _, err := tx.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		s, _ := conns[0].SteeringStats()
		return s.UnknownQP == want.UnknownQP+1
	})
	c := ns.listenRoCE(t, "0.0.0.0", RoCEOptions{})
	if f, _ := c.QPNBlock(); f != first1 {
		t.Errorf("new conn got block %#x, want the freed %#x", f, first1)
	}
}

// TestRoCESteeringPPFC: a PPFC notification (opcode 0x81, P set) names no
// QP; whatever its DestQP says, it goes to the conn in the lowest occupied
// slot of its family's group (an IPv6 conn in a lower slot is skipped),
// and only to that one; when that conn closes, to the next. A CNP (P
// clear) is steered by its DestQP as before.
func TestRoCESteeringPPFC(t *testing.T) {
	ns := newTestNetns(t, 0)
	v6 := ns.listenRoCE(t, "::", RoCEOptions{}) // slot 0, the other group
	var conns []*RoCEConn
	for range 3 {
		conns = append(conns, ns.listenRoCE(t, "0.0.0.0", RoCEOptions{}))
	}
	slotOf := func(c *RoCEConn) uint32 { f, _ := c.QPNBlock(); return f >> QPNSlotShift }
	if slotOf(v6) != 0 || slotOf(conns[0]) != 1 || slotOf(conns[1]) != 2 || slotOf(conns[2]) != 3 {
		t.Fatalf("slots %d (ipv6), %d, %d, %d: want 0, 1, 2, 3", slotOf(v6), slotOf(conns[0]), slotOf(conns[1]), slotOf(conns[2]))
	}
	tx := plainSender(t, ns)
	dst := mustAddrPort(testAddr4A + ":4791")
	ppfc := make([]byte, roce.PPFCLen)
	p := roce.PPFC{Dest: netip.MustParseAddr(testAddr4B), Action: roce.PPFCStop, Pause: time.Millisecond}
	if _, err := roce.BuildPPFC(ppfc, tx.LocalAddr(), dst, &p); err != nil {
		t.Fatal(err)
	}
	ppfc[5] = byte(slotOf(conns[2])) // a DestQP in another slot: ignored
	cnp := make([]byte, roce.PacketLen(roce.OpCNP, 0))
	h := roce.CNPHeader(slotOf(conns[2])<<QPNSlotShift|1, roce.DefaultPKey)
	roce.Build(cnp, &h, nil)
	st0, err := conns[0].SteeringStats()
	if err != nil {
		t.Fatal(err)
	}
	send := func(b []byte) {
		t.Helper()
		if _, err := tx.WriteBatch([]Message{{Buffers: [][]byte{b}, Addr: dst}}); err != nil {
			t.Fatal(err)
		}
	}
	nothing := func(cs ...*RoCEConn) {
		t.Helper()
		for _, c := range cs {
			if err := c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if n, err := c.ReadBatch(readMsgs(1, 2048)); !errors.Is(err, syscall.EAGAIN) && !isTimeout(err) {
				t.Errorf("conn of slot %d read %d datagrams (%v), want a timeout", slotOf(c), n, err)
			}
			if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(ppfc)
	send(cnp)
	if got := readN(t, conns[0], 1, 2048); got[0].N != roce.PPFCLen {
		t.Errorf("lowest slot got %d bytes, want the %d-byte PPFC", got[0].N, roce.PPFCLen)
	}
	if got := readN(t, conns[2], 1, 2048); got[0].N != len(cnp) {
		t.Errorf("the CNP's slot got %d bytes, want the %d-byte CNP", got[0].N, len(cnp))
	}
	nothing(conns[0], conns[1], conns[2])

	conns[0].Close()
	send(ppfc)
	readN(t, conns[1], 1, 2048)
	nothing(conns[1], conns[2])

	st, err := conns[1].SteeringStats()
	if err != nil {
		t.Fatal(err)
	}
	want := st0
	want.PPFC += 2
	want.Steered++ // the CNP
	if st != want {
		t.Errorf("steering stats %+v, want %+v", st, want)
	}
}

// TestRoCESteeringPPFCSources: a conn that takes PPFC notifications only
// from some prefixes has the steering drop the others before its socket
// (ppfc_ignored_source), IPv4 and IPv6 alike; a notification from a source
// it allows arrives; another conn's prefixes are its own; a conn that
// takes the slot after a closed one starts from any source again.
func TestRoCESteeringPPFCSources(t *testing.T) {
	ns := newTestNetns(t, 0)
	for _, f := range []struct {
		name, any, from, other string
	}{
		{"ipv4", "0.0.0.0", testAddr4B, testAddr4A},
		{"ipv6", "::", testAddr6B, testAddr6A},
	} {
		t.Run(f.name, func(t *testing.T) {
			c := ns.listenRoCE(t, f.any, RoCEOptions{})
			from, other := netip.MustParseAddr(f.from), netip.MustParseAddr(f.other)
			var tx, tx2 *UDPConn
			if err := ns.do(func() (err error) {
				if tx, err = ListenUDP(netip.AddrPortFrom(from, 0), UDPOptions{}); err != nil {
					return err
				}
				tx2, err = ListenUDP(netip.AddrPortFrom(other, 0), UDPOptions{})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer tx.Close()
			defer tx2.Close()
			dst := netip.AddrPortFrom(other, 4791)
			send := func(u *UDPConn) {
				t.Helper()
				b := make([]byte, roce.PPFCLen)
				p := roce.PPFC{Dest: from, Action: roce.PPFCStop, Pause: time.Millisecond}
				if _, err := roce.BuildPPFC(b, u.LocalAddr(), dst, &p); err != nil {
					t.Fatal(err)
				}
				if _, err := u.WriteBatch([]Message{{Buffers: [][]byte{b}, Addr: dst}}); err != nil {
					t.Fatal(err)
				}
			}
			expectNone := func() {
				t.Helper()
				if err := c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
					t.Fatal(err)
				}
				if n, err := c.ReadBatch(readMsgs(1, 2048)); !errors.Is(err, syscall.EAGAIN) && !isTimeout(err) {
					t.Errorf("read %d datagrams (%v), want a timeout", n, err)
				}
				if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			st0, err := c.SteeringStats()
			if err != nil {
				t.Fatal(err)
			}
			// Only other's prefix: from is refused, other arrives.
			if err := c.SetPPFCSources([]netip.Prefix{netip.PrefixFrom(other, other.BitLen())}); err != nil {
				t.Fatal(err)
			}
			send(tx)
			expectNone()
			send(tx2)
			if got := readN(t, c, 1, 2048); got[0].Addr.Addr() != other {
				t.Errorf("got a PPFC from %v, want %v", got[0].Addr, other)
			}
			// A wider prefix holding both; then none: both arrive.
			for _, ps := range [][]netip.Prefix{{netip.PrefixFrom(other, other.BitLen()-8).Masked()}, nil} {
				if err := c.SetPPFCSources(ps); err != nil {
					t.Fatal(err)
				}
				send(tx)
				readN(t, c, 1, 2048)
			}
			st, err := c.SteeringStats()
			if err != nil {
				t.Fatal(err)
			}
			if d := st.PPFCIgnoredSource - st0.PPFCIgnoredSource; d != 1 || st.PPFC-st0.PPFC != 3 {
				t.Errorf("steering: %d ignored, %d handed over; want 1, 3", d, st.PPFC-st0.PPFC)
			}
			// A conn that takes the slot of one that filtered starts
			// from any source.
			if err := c.SetPPFCSources([]netip.Prefix{netip.PrefixFrom(other, other.BitLen())}); err != nil {
				t.Fatal(err)
			}
			c.Close()
			c = ns.listenRoCE(t, f.any, RoCEOptions{})
			send(tx)
			readN(t, c, 1, 2048)
		})
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRoCEMessageTooBig: DF is set, so a datagram over lo's MTU fails with
// EMSGSIZE and nothing after it is tried.
func TestRoCEMessageTooBig(t *testing.T) {
	ns := newTestNetns(t, 1500)
	a := ns.listenRoCE(t, testAddr4A, RoCEOptions{})
	dst := mustAddrPort(testAddr4B + ":4791")
	msgs := mkRoCEMsgs(3, dst, 1000, a)
	msgs[1] = mkRoCEMsgs(1, dst, 1473, a)[0] // 20 + 8 + 1473 > 1500
	n, err := a.WriteBatch(msgs)
	if n != 1 || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("WriteBatch = %d, %v; want 1, EMSGSIZE", n, err)
	}
	if s := a.Stats(); s.DatagramsSent != 1 || s.SendErrors != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestRoCEAddressErrors: a source address the host does not have, and a
// destination of the other family.
func TestRoCEAddressErrors(t *testing.T) {
	ns := newTestNetns(t, 0)
	err := ns.do(func() error {
		_, err := ListenRoCE(mustAddrPort("198.18.0.77:0"), RoCEOptions{})
		return err
	})
	if !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("ListenRoCE on a foreign address: %v, want EADDRNOTAVAIL", err)
	}
	a := ns.listenRoCE(t, testAddr4A, RoCEOptions{})
	msgs := mkRoCEMsgs(1, mustAddrPort("["+testAddr6B+"]:4791"), 64, a)
	if n, err := a.WriteBatch(msgs); n != 0 || !errors.Is(err, errIPv6ToIPv4Socket) {
		t.Errorf("IPv6 destination from an IPv4 conn: %d, %v", n, err)
	}
}

// TestRoCENeedsCapNetRaw: without CAP_NET_RAW the error says what is
// needed.
func TestRoCENeedsCapNetRaw(t *testing.T) {
	ns := newTestNetns(t, 0)
	errc := make(chan error, 1)
	go func() {
		// This thread drops its capabilities for good: it stays locked and
		// exits with the goroutine.
		runtime.LockOSThread()
		err := ns.enterForever()
		if err == nil {
			err = dropCapNetRaw()
		}
		if err != nil {
			errc <- err
			return
		}
		_, err = ListenRoCE(mustAddrPort(testAddr4A+":0"), RoCEOptions{})
		if err == nil {
			err = errors.New("ListenRoCE succeeded without CAP_NET_RAW")
		} else if !strings.Contains(err.Error(), "CAP_NET_RAW") || !errors.Is(err, syscall.EPERM) {
			err = errors.New("error does not name CAP_NET_RAW: " + err.Error())
		} else {
			t.Log(err)
			err = nil
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// enterForever moves the calling (locked) thread into the namespace.
func (n *testNetns) enterForever() error {
	return unix.Setns(int(n.h), unix.CLONE_NEWNET)
}

// dropCapNetRaw removes CAP_NET_RAW from the calling thread's effective
// set.
func dropCapNetRaw() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[unix.CAP_NET_RAW/32].Effective &^= 1 << (unix.CAP_NET_RAW % 32)
	return unix.Capset(&hdr, &data[0])
}

// TestRoCEAllocs: the steady state allocates nothing.
func TestRoCEAllocs(t *testing.T) {
	ns := newTestNetns(t, 0)
	for _, fam := range roceFamilies {
		t.Run(fam.name, func(t *testing.T) {
			a := ns.listenRoCE(t, fam.a, RoCEOptions{})
			b := ns.listenRoCE(t, fam.any, RoCEOptions{})
			sent := mkRoCEMsgs(64, netip.AddrPortFrom(netip.MustParseAddr(fam.b), 4791), 1024, b)
			back := mkRoCEMsgs(64, netip.AddrPortFrom(netip.MustParseAddr(fam.a), 4791), 64, a)
			// One source port and TOS: GSO sends (the socket opened by
			// AllocsPerRun's warm-up run).
			gso := mkRoCEMsgs(64, netip.AddrPortFrom(netip.MustParseAddr(fam.b), 4791), 1024, b)
			for i := range gso {
				gso[i].SrcPort, gso[i].TOS = 0xC0DE, 0x6A
			}
			got := readMsgs(64, 2048)
			read := func(c *RoCEConn) {
				for n := 0; n < 64; {
					k, err := c.ReadBatch(got[n:])
					if err != nil {
						t.Fatal(err)
					}
					n += k
				}
			}
			allocs := testing.AllocsPerRun(200, func() {
				if _, err := a.WriteBatch(sent); err != nil {
					t.Fatal(err)
				}
				read(b)
				if _, err := b.WriteBatch(back); err != nil { // from a wildcard
					t.Fatal(err)
				}
				read(a)
				if _, err := a.WriteBatch(gso); err != nil {
					t.Fatal(err)
				}
				read(b)
			})
			if st := a.Stats(); st.GSOSends == 0 {
				t.Errorf("stats %+v: the one-port batch sent no GSO send", st)
			}
			t.Logf("%s: %.3f allocs per 3 × 64 datagrams", fam.name, allocs)
			if allocs > 0.5 && !raceEnabled {
				t.Errorf("%.2f allocs per batch, want 0", allocs)
			}
		})
	}
}

// BenchmarkSendCost compares what one 1024-byte datagram costs the sender:
// an unconnected UDP socket (one source port, TOS per datagram in a cmsg),
// RoCEConn's raw socket (IP and UDP headers built here, source port per
// datagram) and RoCEConn's GSO sends (64 datagrams of one QP's source port:
// one send; lo segments them as it transmits, as a lab's veths do).
// Batches of 64 to a receiver in the same namespace, which reads in a
// goroutine; ns/op is per datagram.
func BenchmarkSendCost(b *testing.B) {
	for _, fam := range roceFamilies {
		b.Run(fam.name+"/udp", func(b *testing.B) {
			ns := newTestNetns(b, 0)
			srv := ns.listen(b, netip.AddrPortFrom(netip.MustParseAddr(fam.b), 4791).String(), UDPOptions{})
			cli := ns.listen(b, netip.AddrPortFrom(netip.MustParseAddr(fam.a), 0).String(), UDPOptions{})
			msgs := mkMsgs(64, srv.LocalAddr(), 1024, func(int) uint8 { return 0x6A })
			benchmarkSend(b, cli, srv, msgs)
		})
		b.Run(fam.name+"/raw", func(b *testing.B) {
			ns := newTestNetns(b, 0)
			srv := ns.listenRoCE(b, fam.b, RoCEOptions{})
			cli := ns.listenRoCE(b, fam.a, RoCEOptions{SendPath: SendRaw})
			msgs := mkRoCEMsgs(64, netip.AddrPortFrom(netip.MustParseAddr(fam.b), 4791), 1024, srv)
			for i := range msgs {
				msgs[i].TOS = 0x6A
			}
			benchmarkSend(b, cli, srv, msgs)
		})
		b.Run(fam.name+"/gso", func(b *testing.B) {
			ns := newTestNetns(b, 0)
			srv := ns.listenRoCE(b, fam.b, RoCEOptions{})
			cli := ns.listenRoCE(b, fam.a, RoCEOptions{})
			msgs := mkRoCEMsgs(64, netip.AddrPortFrom(netip.MustParseAddr(fam.b), 4791), 1024, srv)
			for i := range msgs {
				msgs[i].SrcPort, msgs[i].TOS = 0xC0DE, 0x6A
			}
			benchmarkSend(b, cli, srv, msgs)
		})
	}
}

func benchmarkSend(b *testing.B, cli, srv Conn, msgs []Message) {
	got := readMsgs(len(msgs), 2048)
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := srv.ReadBatch(got)
			if err != nil {
				return
			}
			received.Add(int64(n))
		}
	}()
	b.SetBytes(1024)
	b.ReportAllocs()
	// The sender's own CPU time (RUSAGE_THREAD on its locked thread): what
	// the datagrams cost it, less exposed than ns/op to other load on the
	// machine. On lo the receive softirq runs inside sendmmsg and counts
	// too, for both kinds alike.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ru0, ru1 unix.Rusage
	b.ResetTimer()
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru0)
	for n := 0; n < b.N; {
		k := min(len(msgs), b.N-n)
		if _, err := cli.WriteBatch(msgs[:k]); err != nil {
			b.Fatal(err)
		}
		n += k
	}
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru1)
	b.StopTimer()
	cpu := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/pkt")
	time.Sleep(20 * time.Millisecond)
	srv.Close()
	<-done
	b.ReportMetric(100*float64(int64(b.N)-received.Load())/float64(b.N), "loss-%")
}

// TestEntropyRoundTrip: an EntropyConn on port 4793 (UET's) sends each
// datagram from its own source port (the entropy value), to the peer's
// port, and receives alone on its own address; it refuses a wildcard
// address and port 0.
func TestEntropyRoundTrip(t *testing.T) {
	const port = 4793
	ns := newTestNetns(t, 0)
	for _, fam := range roceFamilies {
		t.Run(fam.name, func(t *testing.T) {
			capt := ns.capture(t)
			var a, b *EntropyConn
			if err := ns.do(func() (err error) {
				if a, err = ListenEntropy(netip.AddrPortFrom(netip.MustParseAddr(fam.a), port), RoCEOptions{}); err != nil {
					return err
				}
				b, err = ListenEntropy(netip.AddrPortFrom(netip.MustParseAddr(fam.b), port), RoCEOptions{})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close(); b.Close() })
			for _, c := range []*EntropyConn{a, b} {
				if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			sent := mkMsgs(50, b.LocalAddr(), 999, tosPattern)
			for i := range sent {
				sent[i].SrcPort = roceSrcPort(i)
			}
			if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			got := readN(t, b, len(sent), 2048)
			for i := range sent {
				checkRoundTrip(t, sent[i:i+1], got[i:i+1], netip.AddrPortFrom(netip.MustParseAddr(fam.a), roceSrcPort(i)))
			}
			pkts := capt.outgoing(t)
			if len(pkts) != len(sent) {
				t.Fatalf("captured %d packets, want %d", len(pkts), len(sent))
			}
			for i, p := range pkts {
				h, err := parseIP(p)
				if err != nil {
					t.Fatal(err)
				}
				udp := udpOf(t, p, h.version)
				if sport := binary.BigEndian.Uint16(udp[0:2]); h.dstPort != port || sport != roceSrcPort(i) {
					t.Errorf("packet %d: port %d -> %d, want %d -> %d", i, sport, h.dstPort, roceSrcPort(i), port)
				}
			}
			if err := ns.do(func() error {
				for _, ap := range []netip.AddrPort{
					netip.AddrPortFrom(netip.MustParseAddr(fam.any), port), // wildcard
					netip.AddrPortFrom(netip.MustParseAddr(fam.a), 0),      // no port
				} {
					if c, err := ListenEntropy(ap, RoCEOptions{}); err == nil {
						c.Close()
						t.Errorf("ListenEntropy(%v) accepted", ap)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRoCESteeringRemembered: a second conn of a namespace joins the maps
// and the program the first one made, by the IDs the process remembers
// (no walk over the kernel's maps, no second load); once every conn is
// closed those IDs are stale, and the next conn makes the steering anew
// and is steered its datagrams.
func TestRoCESteeringRemembered(t *testing.T) {
	ns := newTestNetns(t, 0)
	a := ns.listenRoCE(t, "0.0.0.0", RoCEOptions{})
	b := ns.listenRoCE(t, "0.0.0.0", RoCEOptions{})
	ida, err1 := mapID(a.steer.owner)
	idb, err2 := mapID(b.steer.owner)
	pa, _ := a.steer.prog.Info()
	pb, _ := b.steer.prog.Info()
	pida, _ := pa.ID()
	pidb, _ := pb.ID()
	if err1 != nil || err2 != nil || ida != idb || pida != pidb {
		t.Fatalf("owner maps %d, %d (%v, %v), programs %d, %d: want one of each", ida, idb, err1, err2, pida, pidb)
	}
	a.Close()
	b.Close()
	c := ns.listenRoCE(t, "0.0.0.0", RoCEOptions{})
	idc, err := mapID(c.steer.owner)
	if err != nil || idc == ida {
		t.Fatalf("after every conn closed: owner map %d (%v), want a new one (not %d)", idc, err, ida)
	}
	tx := plainSender(t, ns)
	msgs := mkRoCEMsgs(5, mustAddrPort(testAddr4A+":4791"), 200, c)
	for k := range msgs {
		msgs[k].SrcPort = 0
	}
	if _, err := tx.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	checkRoundTrip(t, msgs, readN(t, c, len(msgs), 2048), tx.LocalAddr())
}

// plainSender is a plain UDP socket on testAddr4B in ns, closed at the
// test's end: the steering does not care who sends.
func plainSender(t *testing.T, ns *testNetns) *UDPConn {
	t.Helper()
	var tx *UDPConn
	if err := ns.do(func() (err error) {
		tx, err = ListenUDP(mustAddrPort(testAddr4B+":0"), UDPOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })
	return tx
}
