//go:build linux

package pktio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriclab/fabriclab/host/roce"
)

// gsoRun is a run of datagrams of one source port in a test batch.
type gsoRun struct {
	n     int
	sport uint16
	tos   uint8
	size  int // UDP payload, ICRC included
	// lastSize, if set, is the size of the run's last datagram.
	lastSize int
	// shortTail: datagram tailAt's last buffer holds 2 bytes, so its
	// ICRC spans two buffers and it cannot follow another in a send.
	tailAt int
}

// buildRoCE returns sealed RoCEv2 datagrams (RDMA WRITE MIDDLE, PSN = their
// index, DestQP in to's block) from src's address to dst for runs, each in
// three buffers: BTH, payload, ICRC (the last 2 bytes alone for a run's
// tailAt datagram).
func buildRoCE(runs []gsoRun, src netip.Addr, dst netip.AddrPort, to *RoCEConn) []Message {
	first, _ := to.QPNBlock()
	var msgs []Message
	for _, r := range runs {
		for i := range r.n {
			size := r.size
			if i == r.n-1 && r.lastSize > 0 {
				size = r.lastSize
			}
			psn := uint32(len(msgs))
			h := roce.Header{BTH: roce.BTH{Opcode: roce.OpRCWriteMiddle, PKey: roce.DefaultPKey, DestQP: first | psn, PSN: psn}}
			payload := make([]byte, size-roce.BTHLen-roce.ICRCLen)
			for j := range payload {
				payload[j] = byte(int(psn)*7 + j)
			}
			b := make([]byte, size)
			n := roce.Build(b, &h, payload)
			roce.SealICRC(netip.AddrPortFrom(src, r.sport), dst, b[:n])
			cut := n - roce.ICRCLen
			if r.tailAt > 0 && i == r.tailAt {
				cut = n - 2
			}
			msgs = append(msgs, Message{Buffers: [][]byte{b[:roce.BTHLen], b[roce.BTHLen:cut], b[cut:n]},
				Addr: dst, SrcPort: r.sport, TOS: r.tos})
		}
	}
	return msgs
}

// TestRoCEGSO: runs of one source port leave in UDP GSO sends (segments of
// one destination, TOS and size, the last one shorter), others raw; every
// datagram arrives intact from its source port with its TOS; on the wire
// segment k of a send has IPv4 ID k and an ICRC that verifies against its
// real header (roce.ICRCFromIP), the caller's buffers untouched.
func TestRoCEGSO(t *testing.T) {
	ns := newTestNetns(t, 0)
	const full = roce.BTHLen + 1024 + roce.ICRCLen
	runs := []gsoRun{
		{n: 70, sport: 0xC001, tos: 0x6A, size: full},               // 62 (65507 bytes at most) + 8
		{n: 4, sport: 0xC001, tos: 0x6B, size: full, lastSize: 300}, // a new TOS; a short last one joins
		{n: 1, sport: 0xC002, tos: 0x6A, size: full},                // alone: raw
		{n: 5, sport: 0xC003, tos: 0x6A, size: full, tailAt: 2},     // 2, then 3 from the split ICRC on
		{n: 4, sport: 4791, tos: 0x6A, size: full},                  // the receive port: raw
	}
	// IPv4 IDs on the wire, in order: segment k of a send has ID k.
	var wantIDs []uint16
	for _, send := range []int{62, 8, 4, 1, 2, 3, 1, 1, 1, 1} {
		for k := range send {
			wantIDs = append(wantIDs, uint16(k))
		}
	}
	const wantGSODatagrams = 62 + 8 + 4 + 5
	for _, fam := range roceFamilies {
		t.Run(fam.name, func(t *testing.T) {
			// IPv6 has no ID, so no ICRC to rewrite: the split one joins.
			wantGSOSends := uint64(5)
			if fam.name == "ipv6" {
				wantGSOSends = 4
			}
			capt := ns.capture(t)
			a := ns.listenRoCE(t, fam.a, RoCEOptions{})
			b := ns.listenRoCE(t, fam.any, RoCEOptions{})
			src := netip.MustParseAddr(fam.a)
			dst := netip.AddrPortFrom(netip.MustParseAddr(fam.b), roce.UDPPort)
			sent := buildRoCE(runs, src, dst, b)
			before := make([][]byte, len(sent))
			for i := range sent {
				before[i] = concat(sent[i].Buffers)
			}
			if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
				t.Fatalf("WriteBatch = %d, %v; want %d", n, err, len(sent))
			}
			for i := range sent {
				if !bytes.Equal(concat(sent[i].Buffers), before[i]) {
					t.Fatalf("datagram %d: WriteBatch changed the caller's buffers", i)
				}
			}
			got := readN(t, b, len(sent), 2048)
			seen := make([]bool, len(sent))
			for _, g := range got {
				d := g.Buffers[0][:g.N]
				var h roce.Header
				if _, err := roce.Parse(d, &h); err != nil {
					t.Fatalf("received %d bytes: %v", g.N, err)
				}
				i := int(h.BTH.PSN)
				if i >= len(sent) || seen[i] {
					t.Fatalf("received PSN %d twice or never sent", i)
				}
				seen[i] = true
				// The ICRC is the one of the datagram's ID: compare the rest.
				g.N -= roce.ICRCLen
				want := sent[i]
				want.Buffers = [][]byte{before[i][:len(before[i])-roce.ICRCLen]}
				checkRoundTrip(t, []Message{want}, []Message{g}, netip.AddrPortFrom(src, sent[i].SrcPort))
				if !roce.VerifyICRC(g.Addr, dst, d) {
					t.Errorf("datagram %d: VerifyICRC fails at the receiver", i)
				}
			}
			st := a.Stats()
			if st.DatagramsSent != uint64(len(sent)) || st.GSODatagrams != wantGSODatagrams || st.GSOSends != wantGSOSends || st.SendErrors != 0 {
				t.Errorf("stats %+v: want %d sent, %d of them in %d GSO sends, no errors", st, len(sent), wantGSODatagrams, wantGSOSends)
			}
			if err := a.GSOOff(); err != nil {
				t.Errorf("GSOOff = %v, want nil", err)
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
				sport := binary.BigEndian.Uint16(udp[0:2])
				if h.dstPort != roce.UDPPort || sport != sent[i].SrcPort || h.tos != sent[i].TOS || h.fragment || len(udp)-udpHeaderLen != len(before[i]) {
					t.Errorf("packet %d: %d -> %d TOS %#x fragment %v %d bytes, want %d -> 4791 TOS %#x unfragmented %d bytes",
						i, sport, h.dstPort, h.tos, h.fragment, len(udp)-udpHeaderLen, sent[i].SrcPort, sent[i].TOS, len(before[i]))
				}
				if h.version == 4 && (h.id != wantIDs[i] || !h.df) {
					t.Errorf("packet %d: IP ID %d DF %v, want ID %d with DF", i, h.id, h.df, wantIDs[i])
				}
				// The project's verifier from the whole IP header, real ID
				// included (IPv6 has none).
				icrc, err := roce.ICRCFromIP(p)
				if err != nil {
					t.Fatalf("packet %d: %v", i, err)
				}
				if wire := binary.LittleEndian.Uint32(p[len(p)-roce.ICRCLen:]); wire != icrc {
					t.Errorf("packet %d (ID %d): ICRC on the wire %#08x, computed from its headers %#08x", i, h.id, wire, icrc)
				}
			}
		})
	}
}

// TestRoCESendRaw: SendRaw sends a run of one source port through the raw
// socket as before GSO: every IPv4 ID 0, UDP checksum 0.
func TestRoCESendRaw(t *testing.T) {
	ns := newTestNetns(t, 0)
	capt := ns.capture(t)
	a := ns.listenRoCE(t, testAddr4A, RoCEOptions{SendPath: SendRaw})
	b := ns.listenRoCE(t, "0.0.0.0", RoCEOptions{})
	dst := netip.AddrPortFrom(netip.MustParseAddr(testAddr4B), roce.UDPPort)
	sent := buildRoCE([]gsoRun{{n: 20, sport: 0xC001, tos: 0x6A, size: 1040}}, netip.MustParseAddr(testAddr4A), dst, b)
	if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	readN(t, b, len(sent), 2048)
	for i, p := range capt.outgoing(t) {
		h, err := parseIP(p)
		if err != nil {
			t.Fatal(err)
		}
		if csum := binary.BigEndian.Uint16(p[20+6:]); h.id != 0 || csum != 0 {
			t.Errorf("packet %d: IP ID %d UDP checksum %#x, want 0 and 0", i, h.id, csum)
		}
	}
	if st := a.Stats(); st.GSOSends != 0 || st.DatagramsSent != uint64(len(sent)) {
		t.Errorf("stats %+v: want %d datagrams, no GSO send", st, len(sent))
	}
	if err := a.GSOOff(); !errors.Is(err, errGSOOff) {
		t.Errorf("GSOOff = %v, want %v", err, errGSOOff)
	}
	var bad *RoCEConn
	if err := ns.do(func() (err error) {
		bad, err = ListenRoCE(netip.AddrPortFrom(netip.MustParseAddr(testAddr4A), 0), RoCEOptions{SendPath: 7})
		return err
	}); err == nil {
		bad.Close()
		t.Error("ListenRoCE took SendPath 7")
	}
}

// TestGSOPortTaken: a source port another socket holds without
// SO_REUSEPORT cannot be bound; its runs go raw and still arrive.
func TestGSOPortTaken(t *testing.T) {
	ns := newTestNetns(t, 0)
	const taken = 0xC123
	var fd int
	if err := ns.do(func() (err error) {
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrInet4{Port: taken})
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	a := ns.listenRoCE(t, testAddr4A, RoCEOptions{})
	b := ns.listenRoCE(t, "0.0.0.0", RoCEOptions{})
	dst := netip.AddrPortFrom(netip.MustParseAddr(testAddr4B), roce.UDPPort)
	sent := buildRoCE([]gsoRun{{n: 10, sport: taken, tos: 0x6A, size: 1040}, {n: 10, sport: 0xC001, tos: 0x6A, size: 1040}},
		netip.MustParseAddr(testAddr4A), dst, b)
	if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := readN(t, b, len(sent), 2048)
	for _, g := range got {
		if !roce.VerifyICRC(g.Addr, dst, g.Buffers[0][:g.N]) {
			t.Errorf("datagram from %s: ICRC does not verify", g.Addr)
		}
	}
	if st := a.Stats(); st.GSODatagrams != 10 || st.GSOSends != 1 {
		t.Errorf("stats %+v: want the free port's 10 datagrams in 1 GSO send", st)
	}
}

// TestEntropyGSO: an EntropyConn's run of one entropy value leaves as one
// GSO send whose payloads are as given (UET carries no ICRC to rewrite).
func TestEntropyGSO(t *testing.T) {
	ns := newTestNetns(t, 0)
	capt := ns.capture(t)
	a, b := entropyPair(t, ns)
	sent := mkMsgs(20, b.LocalAddr(), 1100, func(int) uint8 { return 0x6A })
	for i := range sent {
		sent[i].SrcPort = 0xD000
	}
	if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := readN(t, b, len(sent), 2048)
	checkRoundTrip(t, sent, got, netip.AddrPortFrom(netip.MustParseAddr(testAddr4A), 0xD000))
	for i, p := range capt.outgoing(t) {
		h, err := parseIP(p)
		if err != nil {
			t.Fatal(err)
		}
		if h.id != uint16(i) {
			t.Errorf("packet %d: IP ID %d, want %d (one GSO send)", i, h.id, i)
		}
	}
	if st := a.Stats(); st.GSOSends != 1 || st.GSODatagrams != 20 {
		t.Errorf("stats %+v: want 20 datagrams in 1 GSO send", st)
	}
}

// TestGSOManyPorts: once the process's socket budget is spent, a run of
// a port without a socket goes raw with its neighbours instead of closing
// one socket and opening another (some eight system calls, paid by nearly
// every run of thousands of flows taking turns); a long run gets the
// socket of a port idle for gsoIdleEvict; sockets unused for gsoIdleClose
// are closed and their budget given back. Every datagram arrives.
func TestGSOManyPorts(t *testing.T) {
	a, b := entropyPair(t, newTestNetns(t, 0))
	g := a.c.gso
	const budget, ports = 64, 64 + 44
	g.budget = &gsoBudget{}
	g.budget.left.Store(budget)
	g.idleEvict, g.idleClose = time.Hour, time.Hour
	send := func(what string, msgs []Message) {
		t.Helper()
		for i := 0; i < len(msgs); i += 64 {
			batch := msgs[i:min(i+64, len(msgs))]
			if n, err := a.WriteBatch(batch); n != len(batch) || err != nil {
				t.Fatalf("%s: WriteBatch = %d, %v", what, n, err)
			}
			// Read as we go: the receive buffer holds a few hundred.
			got := readN(t, b, len(batch), 2048)
			want := map[string]int{}
			for _, m := range batch {
				want[fmt.Sprintf("%d %x", m.SrcPort, concat(m.Buffers))]++
			}
			for _, g := range got {
				want[fmt.Sprintf("%d %x", g.Addr.Port(), g.Buffers[0][:g.N])]--
			}
			for k, n := range want {
				if n != 0 {
					t.Fatalf("%s: datagram (port, payload) %.20s… sent and received %+d times apart", what, k, n)
				}
			}
		}
	}
	// Runs of evictGSORun datagrams, one port after another, twice over:
	// long enough to pay for a socket, but none is idle.
	for round := range 2 {
		msgs := mkMsgs(evictGSORun*ports, b.LocalAddr(), 200, func(int) uint8 { return 0 })
		for i := range msgs {
			msgs[i].SrcPort = uint16(0xC000 + i/evictGSORun)
		}
		send(fmt.Sprintf("round %d", round), msgs)
	}
	st := a.Stats()
	// The first budget ports got sockets, in both rounds; the rest went
	// raw.
	if want := uint64(2 * budget); st.GSOSends != want || st.GSODatagrams != evictGSORun*want {
		t.Errorf("%d GSO sends of %d datagrams, want %d of %d", st.GSOSends, st.GSODatagrams, want, evictGSORun*want)
	}
	if g.nopen != budget || g.budget.left.Load() != 0 {
		t.Errorf("%d sockets open, %d left in the budget: want %d and 0", g.nopen, g.budget.left.Load(), budget)
	}
	// Once a socket has been idle for idleEvict, a long run of a new port
	// takes its place; a short one still goes raw.
	g.idleEvict = 0
	short := mkMsgs(evictGSORun-1, b.LocalAddr(), 200, func(int) uint8 { return 0 })
	for i := range short {
		short[i].SrcPort = 0xE001
	}
	send("short run", short)
	long := mkMsgs(evictGSORun, b.LocalAddr(), 200, func(int) uint8 { return 0 })
	for i := range long {
		long[i].SrcPort = 0xE000
	}
	send("long run", long)
	st2 := a.Stats()
	if st2.GSOSends != st.GSOSends+1 {
		t.Errorf("a short and a long run from new ports: %d GSO sends, want 1", st2.GSOSends-st.GSOSends)
	}
	if _, ok := g.socks[0xC000]; ok || g.socks[0xE000] == nil || g.nopen != budget {
		t.Errorf("the least recently used port's socket should have given way to the long run's (%d open)", g.nopen)
	}
	// Sockets unused for idleClose are closed at the next write, whose
	// short run then finds room in the budget.
	g.idleClose = 0
	send("after idle", short)
	if g.nopen != 1 || g.budget.left.Load() != budget-1 || g.socks[0xE001] == nil || len(g.socks) != 1 {
		t.Errorf("after idleClose: %d open, %d in the budget, %d ports known: want only the short run's socket, %d left", g.nopen, g.budget.left.Load(), len(g.socks), budget-1)
	}
}

// TestGSOOverMTU: a run whose datagrams exceed the path MTU fails as on the
// raw path (EMSGSIZE: DF is set), and GSO stays on for what fits.
func TestGSOOverMTU(t *testing.T) {
	ns := newTestNetns(t, 1300)
	a := ns.listenRoCE(t, testAddr4A, RoCEOptions{})
	b := ns.listenRoCE(t, "0.0.0.0", RoCEOptions{})
	dst := netip.AddrPortFrom(netip.MustParseAddr(testAddr4B), roce.UDPPort)
	big := buildRoCE([]gsoRun{{n: 3, sport: 0xC001, tos: 0x6A, size: 1400}}, netip.MustParseAddr(testAddr4A), dst, b)
	if n, err := a.WriteBatch(big); n != 0 || !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("WriteBatch of 1400-byte datagrams over MTU 1300 = %d, %v; want 0, EMSGSIZE", n, err)
	}
	if err := a.GSOOff(); err != nil {
		t.Fatalf("GSOOff = %v after an oversized send, want nil", err)
	}
	fits := buildRoCE([]gsoRun{{n: 3, sport: 0xC001, tos: 0x6A, size: 1100}}, netip.MustParseAddr(testAddr4A), dst, b)
	if n, err := a.WriteBatch(fits); n != len(fits) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	readN(t, b, len(fits), 2048)
	if st := a.Stats(); st.GSOSends != 1 || st.GSODatagrams != 3 {
		t.Errorf("stats %+v: want the 3 that fit in 1 GSO send", st)
	}
}

// entropyPair opens UET's port 4793 as an EntropyConn at each end of ns,
// closed when the test ends.
func entropyPair(t *testing.T, ns *testNetns) (a, b *EntropyConn) {
	t.Helper()
	if err := ns.do(func() (err error) {
		if a, err = ListenEntropy(netip.AddrPortFrom(netip.MustParseAddr(testAddr4A), 4793), RoCEOptions{}); err != nil {
			return err
		}
		b, err = ListenEntropy(netip.AddrPortFrom(netip.MustParseAddr(testAddr4B), 4793), RoCEOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
