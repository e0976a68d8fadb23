package pds

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/engine"
	"github.com/fabriclab/fabriclab/host/pktio"
	"github.com/fabriclab/fabriclab/host/uet"
)

// ackChecker holds every ACK a target sends against what reached it
// intact (issue 28: an ACK_CC named PSN start+32767, never sent).
type ackChecker struct {
	t       *testing.T
	start   uint32          // the initiator's first PSN
	arrived map[uint32]bool // data PSNs the target got whole
	cack    uint32          // the last cumulative PSN seen
	acks    int
	neg     int // ACKs with a negative ack_psn_offset
}

// psnLE is a <= b in 32-bit serial arithmetic.
func psnLE(a, b uint32) bool { return int32(b-a) >= 0 }

func (c *ackChecker) check(b []byte) {
	c.t.Helper()
	var h uet.Header
	n, err := uet.DecodeHeader(b, &h)
	if err != nil {
		c.t.Fatalf("the target sent a header it cannot decode: %v (%x)", err, b)
	}
	if h.Type != uet.TypeAck && h.Type != uet.TypeAckCC {
		return
	}
	if err := h.Validate(); err != nil {
		c.t.Fatalf("ACK out of its wire ranges: %v: %+v", err, h.Ack)
	}
	if again := make([]byte, n); h.Encode(again) != n || !slices.Equal(again, b[:n]) {
		c.t.Fatalf("ACK does not encode back to its bytes: %x, %x", b[:n], again)
	}
	a := &h.Ack
	c.acks++
	if !psnLE(c.cack, a.CACKPSN) {
		c.t.Fatalf("cumulative PSN moved back: %#x after %#x", a.CACKPSN, c.cack)
	}
	for q := c.cack + 1; psnLE(q, a.CACKPSN) && a.CACKPSN != c.cack; q++ {
		if !c.arrived[q] {
			c.t.Fatalf("cumulative PSN %#x covers %#x, which never arrived", a.CACKPSN, q)
		}
		if q == a.CACKPSN {
			break
		}
	}
	c.cack = a.CACKPSN
	// Offset 0 names the cumulative PSN, which arrived (or is "none").
	if ap := a.AckPSN(); ap != a.CACKPSN && !c.arrived[ap] {
		c.t.Fatalf("ACK names PSN %#x (cumulative %#x, offset %d), which never arrived", ap, a.CACKPSN, a.AckPSNOffset)
	}
	if a.AckPSNOffset < 0 {
		c.neg++
	}
	if h.Type == uet.TypeAckCC && a.CC.CCType == uet.CCNSCC {
		base := a.SACKBase()
		for i := range 64 {
			if a.CC.SACKBitmap&(1<<i) != 0 && !c.arrived[base+uint32(i)] {
				c.t.Fatalf("SACK bit %d names %#x (base %#x), which never arrived", i, base+uint32(i), base)
			}
		}
		// ooo_count is what the target holds above its cumulative PSN
		// (htsim's _out_of_order_count): never more than arrived there.
		above := 0
		for q := a.CACKPSN + 1; q != a.CACKPSN+1+maxPDCWindow; q++ {
			if c.arrived[q] {
				above++
			}
		}
		if int(a.CC.NSCC.OOOCount) > above {
			c.t.Fatalf("ooo_count %d above cumulative PSN %#x, where %d arrived", a.CC.NSCC.OOOCount, a.CACKPSN, above)
		}
	}
}

// TestTargetAcksNameOnlyArrivals runs one PDC through a lossy, reordering,
// trimming channel, with the source's own probes and forged ones, across
// the 32-bit PSN wrap, and holds every ACK the target sends to the
// property: its cumulative PSN, SACK bits and ACK PSN name only PSNs that
// arrived whole, the cumulative PSN never moves back, and every field
// stays inside its wire range.
func TestTargetAcksNameOnlyArrivals(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runAckProperty(t, seed) })
	}
}

func runAckProperty(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 28))
	clock := engine.NewFakeClock(time.Millisecond)
	pa, _ := pktio.NewPipe(pktio.PipeOptions{A: addrA, B: addrB})
	pb, _ := pktio.NewPipe(pktio.PipeOptions{A: addrB, B: addrA})
	const trimDSCP = 9
	ca, cb := DefaultConfig(), DefaultConfig()
	ca.Conn, ca.Clock, ca.Verify = pa, clock, true
	cb.Conn, cb.Clock, cb.Verify, cb.TrimDSCP = pb, clock, true, trimDSCP
	src, err := newEndpoint(ca)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := newEndpoint(cb)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	s, err := src.Start(addrB.Addr(), Stream{JobID: 1, MessageBytes: 300_000, Messages: 2, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	// Across the wrap: the PDC's first PSN 40 before 2^32.
	if len(src.initiators) != 1 {
		t.Fatalf("%d initiators, want 1", len(src.initiators))
	}
	var p *initiator
	for _, v := range src.initiators {
		p = v
	}
	p.start = 0xFFFFFFFF - 40 + uint32(seed)
	chk := &ackChecker{t: t, start: p.start, arrived: map[uint32]bool{}, cack: p.start - 1}

	slots, _ := engine.NewSlots(64, maxDatagram)
	rs, _ := engine.NewSlots(64, maxDatagram)
	srcRx, dstRx := (*endpointRx)(src), (*endpointRx)(dst)
	type inFlight struct {
		buf     []byte
		tos     uint8
		srcPort uint16
	}
	var toDst []inFlight
	hdr := make([]byte, 64)
	deliver := func(rx *endpointRx, from netip.Addr, pkts []inFlight) []engine.Packet {
		out := engine.NewReplies(rs)
		for _, f := range pkts {
			m := pktio.Message{Buffers: [][]byte{f.buf}, N: len(f.buf), Addr: netip.AddrPortFrom(from, f.srcPort), TOS: f.tos}
			rx.Receive(clock.Now(), &m, out)
		}
		rx.EndBatch(out)
		return out.Packets()
	}
	var trims, losses, probes int
	for step := 0; step < 20_000; step++ {
		select {
		case <-s.Done():
			step = 1 << 30
			continue
		default:
		}
		clock.Advance(time.Duration(5+rng.IntN(60)) * time.Microsecond)
		for _, c := range src.cccs.byKey {
			n, _ := c.Fill(clock.Now(), slots, nil)
			for _, pk := range slots[:n] {
				f := inFlight{buf: slices.Clone(pk.Buf[:pk.N]), tos: pk.TOS, srcPort: pk.SrcPort}
				switch r := rng.Float64(); {
				case r < 0.08:
					losses++
					continue
				case r < 0.14 && pk.N > 1000:
					trims++
					f.buf, f.tos = f.buf[:100], trimDSCP<<2|pk.TOS&ecnMask
				case r < 0.18:
					toDst = append(toDst, f) // a duplicate
				}
				toDst = append(toDst, f)
			}
		}
		// A forged probe now and then: for a PSN around the cumulative
		// one, some before the PDC's first PSN.
		if rng.IntN(20) == 0 && len(dst.targets) > 0 {
			for _, tg := range dst.targets {
				h := uet.Header{Type: uet.TypeCtrl, Ctrl: uet.Ctrl{CtrlType: uet.CtrlAckReq,
					PSN: chk.cack + uint32(rng.IntN(200)) - 120, SPDCID: tg.key.SPDCID, DPDCID: tg.id}}
				toDst = append(toDst, inFlight{buf: slices.Clone(hdr[:h.Encode(hdr)]), tos: ctrlDSCP << 2, srcPort: 0xc001})
				probes++
			}
		}
		// Reorder: deliver a random share, in random order.
		rng.Shuffle(len(toDst), func(i, j int) { toDst[i], toDst[j] = toDst[j], toDst[i] })
		k := rng.IntN(len(toDst) + 1)
		batch := toDst[:k]
		for _, f := range batch {
			var h uet.Header
			if _, err := uet.DecodeHeader(f.buf, &h); err == nil && h.Type == uet.TypeRUDReq && f.tos>>2 != trimDSCP {
				chk.arrived[h.Request.PSN] = true
			}
		}
		replies := deliver(dstRx, addrA.Addr(), batch)
		for _, tg := range dst.targets {
			held := 0
			for i := tg.cack; i < tg.hi; i++ {
				if tg.rcvd[i%maxPDCWindow] {
					held++
				}
			}
			if tg.held != held {
				t.Fatalf("target holds %d packets above its cumulative point, counts %d (ooo_count)", held, tg.held)
			}
		}
		toDst = slices.Clone(toDst[k:])
		back := make([]inFlight, 0, len(replies))
		for _, r := range replies {
			chk.check(r.Buf[:r.N])
			if rng.Float64() < 0.1 {
				continue // ACKs are lost too: the source probes
			}
			back = append(back, inFlight{buf: slices.Clone(r.Buf[:r.N]), tos: r.TOS, srcPort: r.SrcPort})
		}
		deliver(srcRx, addrB.Addr(), back)
	}
	select {
	case <-s.Done():
	default:
		t.Fatalf("the messages did not complete: sender %+v, target %+v", s.Counters(), dst.Counters())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	wrapped := psnLE(0xFFFFFFFF, chk.cack) && chk.cack < 0x80000000
	t.Logf("%d ACKs checked (%d with a negative ack_psn_offset), %d lost, %d trimmed, %d forged probes; cumulative PSN %#x (wrapped %v)",
		chk.acks, chk.neg, losses, trims, probes, chk.cack, wrapped)
	if !wrapped || chk.neg == 0 || trims == 0 {
		t.Errorf("the run did not cover the wrap (%v), a negative offset (%d) and trimming (%d)", wrapped, chk.neg, trims)
	}
}
