package agent

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/roce"
)

// TestSourcePort checks rxe's derivation, 0xC000 + hash_32(qpn, 14) with
// hash_32(v, 14) = (v * 0x61C88647) >> 18 on 32 bits, against values
// worked out by hand (Python: 0xC000 + ((q * 0x61C88647) & 0xffffffff) >> 18).
func TestSourcePort(t *testing.T) {
	for _, tc := range []struct {
		qpn  uint32
		port uint16
	}{
		{0x11, 57236},
		{0x12, 63494},
		{0x10011, 49445},
		{0xffffff, 63821},
	} {
		if got := SourcePort(tc.qpn); got != tc.port {
			t.Errorf("SourcePort(%#x) = %d, want %d", tc.qpn, got, tc.port)
		}
	}
	seen := map[uint16]bool{}
	for q := uint32(0x11); q < 0x11+1000; q++ {
		p := SourcePort(q)
		if p < 0xC000 {
			t.Fatalf("SourcePort(%#x) = %#x, below 0xC000", q, p)
		}
		seen[p] = true
	}
	if len(seen) < 950 {
		t.Errorf("1000 consecutive QPNs share %d source ports: want them spread", len(seen))
	}
}

// wireLog records, for every datagram on a pipe, its source port per
// (sender IP, DestQP) and its destination port.
type wireLog struct {
	mu        sync.Mutex
	srcPorts  map[netip.Addr]map[uint32]map[uint16]int // sender IP -> DestQP -> source ports seen
	dstPorts  map[uint16]int
	datagrams int
}

func (w *wireLog) filter(from netip.AddrPort, m *pktio.Message) bool {
	var h roce.Header
	if _, err := roce.Parse(m.Buffers[0][:m.N], &h); err != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.datagrams++
	w.dstPorts[m.Addr.Port()]++
	byQP := w.srcPorts[from.Addr()]
	if byQP == nil {
		byQP = map[uint32]map[uint16]int{}
		w.srcPorts[from.Addr()] = byQP
	}
	if byQP[h.BTH.DestQP] == nil {
		byQP[h.BTH.DestQP] = map[uint16]int{}
	}
	byQP[h.BTH.DestQP][from.Port()]++
	return false
}

// TestPerQPSourcePorts: over a pipe, each QP's packets (data one way, ACKs
// and CNPs the other) leave from that QP's own source port, to 4791, and
// the ICRC, which covers the ports, verifies at the other end.
func TestPerQPSourcePorts(t *testing.T) {
	w := &wireLog{srcPorts: map[netip.Addr]map[uint32]map[uint16]int{}, dstPorts: map[uint16]int{}}
	var mark sync.Mutex
	n := 0
	filter := func(from netip.AddrPort, m *pktio.Message) bool {
		mark.Lock()
		n++
		if n%50 == 0 && m.N > 100 {
			m.TOS |= ecnCE // CNPs too
		}
		mark.Unlock()
		return w.filter(from, m)
	}
	p := newPair(t, filter, nil)
	type pairQP struct{ a, b *QP }
	var qps []pairQP
	for range 3 {
		qa, qb := p.connect(t, DefaultQPConfig(), DefaultQPConfig())
		qps = append(qps, pairQP{qa, qb})
		if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 16 << 10, Messages: 50}); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range qps {
		p.waitDone(t, q.a, 10*time.Second)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.dstPorts) != 1 || w.dstPorts[roce.UDPPort] != w.datagrams {
		t.Errorf("destination ports %v, want %d datagrams all to %d", w.dstPorts, w.datagrams, roce.UDPPort)
	}
	ipA, ipB := p.pa.LocalAddr().Addr(), p.pb.LocalAddr().Addr()
	for _, q := range qps {
		for _, c := range []struct {
			name     string
			from     netip.Addr
			sender   *QP
			receiver *QP
		}{{"data", ipA, q.a, q.b}, {"acks and cnps", ipB, q.b, q.a}} {
			ports := w.srcPorts[c.from][c.receiver.QPN()]
			want := SourcePort(c.sender.QPN())
			if len(ports) != 1 || ports[want] == 0 || c.sender.SourcePort() != want {
				t.Errorf("%s of qp %#x to qp %#x: source ports %v, want only %d (QP.SourcePort %d)",
					c.name, c.sender.QPN(), c.receiver.QPN(), ports, want, c.sender.SourcePort())
			}
		}
	}
	for _, a := range []*Agent{p.a, p.b} {
		if c := a.Counters(); c.ICRCErrors != 0 || c.WrongPeer != 0 || c.UnknownQP != 0 {
			t.Errorf("icrc_errors %d, wrong_peer %d, unknown_qp %d; want 0", c.ICRCErrors, c.WrongPeer, c.UnknownQP)
		}
	}
	if c := qps[0].b.Counters(); c.NPCNPSent == 0 {
		t.Errorf("no CNP sent: the test covers CNPs too")
	}
}

// TestWrongPeer: a QP takes packets from its peer's IP address only, from
// any source port; another address's packet is counted (wrong_peer) even
// with a valid ICRC.
func TestWrongPeer(t *testing.T) {
	p := newPair(t, nil, nil)
	qb, err := p.b.CreateQP(DefaultQPConfig())
	if err != nil {
		t.Fatal(err)
	}
	other := netip.MustParseAddrPort("198.18.0.9:4791") // not the pipe's other end
	if err := qb.Connect(p.pb.LocalAddr(), Endpoint{Addr: other, QPN: 0x99, PSN: 0, Len: 4096}); err != nil {
		t.Fatal(err)
	}
	var h roce.Header
	h.BTH.Opcode = roce.OpRCSendOnly
	h.BTH.PKey = roce.DefaultPKey
	h.BTH.DestQP = qb.QPN()
	pkt := make([]byte, 64)
	n := roce.Build(pkt, &h, make([]byte, 8))
	const sport = 0xD00D
	roce.SealICRC(netip.AddrPortFrom(p.pa.LocalAddr().Addr(), sport), p.pb.LocalAddr(), pkt[:n])
	msgs := []pktio.Message{{Buffers: [][]byte{pkt[:n]}, Addr: p.pb.LocalAddr(), SrcPort: sport}}
	if _, err := p.pa.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.b.Counters().WrongPeer != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("counters %+v: want wrong_peer 1", p.b.Counters())
		}
		time.Sleep(time.Millisecond)
	}
	if c := p.b.Counters(); c.ICRCErrors != 0 || c.RxPackets != 0 {
		t.Errorf("icrc_errors %d rx_packets %d, want 0 and 0", c.ICRCErrors, c.RxPackets)
	}
}

// steeredPipe is a pipe end that claims a QPN block, as a RoCEConn does.
type steeredPipe struct {
	*pktio.PipeConn
	first, last uint32
}

func (s steeredPipe) QPNBlock() (uint32, uint32) { return s.first, s.last }

// TestSteeredQPNs: on a SteeredConn the agent numbers its QPs from the
// conn's block, and runs out at its end.
func TestSteeredQPNs(t *testing.T) {
	pa, pb := pktio.NewPipe(pktio.PipeOptions{})
	a, err := New(Config{Conn: steeredPipe{pa, 0x30000, 0x30002}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Conn: steeredPipe{pb, 0x70000, 0x7ffff}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	p := &pair{a: a, b: b, pa: pa, pb: pb}
	qa, qb := p.connect(t, DefaultQPConfig(), DefaultQPConfig())
	if qa.QPN() != 0x30000 || qb.QPN() != 0x70000 {
		t.Fatalf("QPNs %#x and %#x, want the blocks' first 0x30000 and 0x70000", qa.QPN(), qb.QPN())
	}
	if err := qa.Start(Stream{Op: OpWrite, MessageBytes: 8192, Messages: 20}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, qa, 10*time.Second)
	for range 2 {
		if _, err := a.CreateQP(DefaultQPConfig()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.CreateQP(DefaultQPConfig()); err == nil {
		t.Errorf("a fourth QP in a block of three: no error")
	}
	if a.QP(0x30000) != qa || a.QP(0x11) != nil || a.QP(0x2ffff) != nil {
		t.Errorf("QP lookup by number outside or at the block's edge")
	}
	// Block 0 starts above QP0 and QP1.
	pc, _ := pktio.NewPipe(pktio.PipeOptions{})
	c, err := New(Config{Conn: steeredPipe{pc, 0, 0xffff}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if q, err := c.CreateQP(DefaultQPConfig()); err != nil || q.QPN() != firstQPN {
		t.Errorf("first QPN of block 0: %v %v, want %#x", q, err, firstQPN)
	}
}
