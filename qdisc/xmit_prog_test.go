package qdisc

import (
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// port_xmit (a tp_btf program) cannot run under BPF_PROG_RUN, so these tests
// play its part by hand: they take the packet out of the port's queue into
// the host queue and write the handoff record it writes, then run
// port_dequeue as the peer's ingress hook. The dequeue AQMs both hooks run
// are the same code (depart, aqm_decide), compared decision for decision
// through port_dequeue in aqm_prog_test.go; netns-tests run port_xmit itself.

// xmitRig is a port with the xmit hook switched on.
type xmitRig struct {
	tb  testing.TB
	o   *Objects
	key uint64 // the next handoff key (the skb address stand-in)
}

func newXmitRig(tb testing.TB, cc ClassConfig) *xmitRig {
	tb.Helper()
	cfg := DefaultConfig(units.Gbit)
	cfg.Classes[ClassRoCE] = cc
	r := &xmitRig{tb: tb, o: loadTest(tb, cfg, QueueVeth), key: 0xffff_8880_0000_0000}
	if err := r.o.enableXmitHook(); err != nil {
		tb.Fatal(err)
	}
	// Configure keeps the flag.
	if err := r.o.writeConfig(cfg, QueueVeth, priorityBase); err != nil {
		tb.Fatal(err)
	}
	return r
}

// enqueue runs port_enqueue at now and returns the stamped packet.
func (r *xmitRig) enqueue(now uint64, ecn uint8) runResult {
	r.tb.Helper()
	if err := r.o.SetClock(now); err != nil {
		r.tb.Fatal(err)
	}
	res := run(r.tb, r.o.PortEnqueue, craft(r.tb, pktSpec{dscp: uint8(DSCPRoCE), ecn: ecn, payload: 500}), skbCtx{})
	if res.ret != tcActOK || res.ctx.Tstamp == 0 {
		r.tb.Fatalf("enqueue: verdict %d, stamp %#x", res.ret, res.ctx.Tstamp)
	}
	return res
}

// xmit does what port_xmit does when the packet leaves HTB at now: the
// packet moves from the class's backlog to its host queue, counted as
// dequeued and as entered, and a handoff record carries the verdict.
func (r *xmitRig) xmit(pkt runResult, now uint64, verdict uint8) uint64 {
	r.tb.Helper()
	class := uint32(ClassRoCE)
	n := uint64(len(pkt.out))
	var cs bpf.PortClassState
	if err := r.o.ClassQueue.Lookup(class, &cs); err != nil {
		r.tb.Fatal(err)
	}
	cs.BacklogBytes -= n
	cs.BacklogPackets--
	cs.HostBacklogBytes += n
	cs.HostBacklogPackets++
	if err := r.o.ClassQueue.Put(class, &cs); err != nil {
		r.tb.Fatal(err)
	}
	var st []bpf.PortClassStats
	if err := r.o.ClassCounters.Lookup(class, &st); err != nil {
		r.tb.Fatal(err)
	}
	st[0].DequeuedPackets++
	st[0].DequeuedBytes += n
	st[0].HostEnteredPackets++
	st[0].HostEnteredBytes += n
	if err := r.o.ClassCounters.Put(class, st); err != nil {
		r.tb.Fatal(err)
	}
	r.key += 0x100 // slab objects 256 bytes apart
	h := bpf.PortXmitHandoff{Skb: r.key, Stamp: pkt.ctx.Tstamp, XmitNs: now, Len: uint32(n), ClassId: uint8(class), Verdict: verdict}
	if err := r.o.Handoff.Put(handoffSlot(r.key), &h); err != nil {
		r.tb.Fatal(err)
	}
	return r.key
}

// peer runs port_dequeue at now on the packet whose handoff key is key.
func (r *xmitRig) peer(pkt runResult, now, key uint64) runResult {
	r.tb.Helper()
	if err := errors.Join(r.o.SetClock(now), r.o.TestSkbKey.Set(key)); err != nil {
		r.tb.Fatal(err)
	}
	return run(r.tb, r.o.PortDequeue, pkt.out, skbCtx{Tstamp: pkt.ctx.Tstamp})
}

// handoffs counts the held slots.
func (r *xmitRig) handoffs() int {
	r.tb.Helper()
	var k uint32
	var h bpf.PortXmitHandoff
	n := 0
	for it := r.o.Handoff.Iterate(); it.Next(&k, &h); {
		if h.Skb != 0 {
			n++
		}
	}
	return n
}

// TestXmitHandoff: the peer's hook takes the departure port_xmit counted,
// measures the host queue's wait and applies the AQM's verdict, without
// counting the departure again.
func TestXmitHandoff(t *testing.T) {
	cc := ClassConfig{Name: "roce", LimitBytes: 4 * units.MiB, ECN: ECNTCN, InsTarget: 100 * time.Microsecond, WREDDrop: true}
	const t0 = 1_000_000_000
	for _, tc := range []struct {
		name    string
		ecn     uint8
		verdict uint8
		ret     uint32
		outECN  uint8
		ins     uint64 // aqm_ins_marks
		pst     uint64
		dropped uint64 // aqm_dropped
	}{
		{"pass", ect0, aqmPass, tcActNext, ect0, 0, 0, 0},
		{"instantaneous mark", ect0, aqmMarkIns, tcActNext, ce, 1, 0, 0},
		{"persistent mark ect1", ect1, aqmMarkPst, tcActNext, ce, 0, 1, 0},
		{"not-ect with the drop profile", notECT, aqmMarkIns, tcActShot, notECT, 0, 0, 1},
		{"ce stays ce", ce, aqmMarkIns, tcActNext, ce, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newXmitRig(t, cc)
			pkt := r.enqueue(t0, tc.ecn)
			// 30 µs in the port's queue, then 70 µs in the host's.
			key := r.xmit(pkt, t0+30_000, tc.verdict)
			before := stats(t, r.o).Classes[ClassRoCE]
			got := r.peer(pkt, t0+100_000, key)
			if got.ret != tc.ret || (tc.ret == tcActNext && got.ecn != tc.outECN) {
				t.Fatalf("verdict %d ecn %d, want %d and ecn %d", got.ret, got.ecn, tc.ret, tc.outECN)
			}
			checkStampReleased(t, got.ctx.Tstamp)
			c := stats(t, r.o).Classes[ClassRoCE]
			h := c.Host
			if h.DeliveredPackets != 1 || h.DeliveredBytes != uint64(len(pkt.out)) || h.BacklogPackets != 0 || h.BacklogBytes != 0 {
				t.Errorf("host queue after delivery: %+v", h)
			}
			if h.WaitSum != 70*time.Microsecond || h.WaitMax != 70*time.Microsecond || h.Wait[16] != 1 { // 70 µs in [2^16, 2^17) ns
				t.Errorf("host wait sum %v max %v hist %v, want 70µs in bucket 16", h.WaitSum, h.WaitMax, h.Wait)
			}
			if c.DequeuedPackets != before.DequeuedPackets || c.SojournSamples != before.SojournSamples || c.BacklogPackets != 0 {
				t.Errorf("the peer counted the departure again: dequeued %d -> %d, sojourn samples %d -> %d, backlog %d",
					before.DequeuedPackets, c.DequeuedPackets, before.SojournSamples, c.SojournSamples, c.BacklogPackets)
			}
			if c.AQMInsMarks != tc.ins || c.AQMPstMarks != tc.pst || c.AQMDroppedPackets != tc.dropped {
				t.Errorf("aqm marks %d ins %d pst, dropped %d; want %d, %d, %d", c.AQMInsMarks, c.AQMPstMarks, c.AQMDroppedPackets, tc.ins, tc.pst, tc.dropped)
			}
			if wantCE := tc.ret == tcActNext && tc.outECN == ce; (c.DequeuedCEPackets == 1) != wantCE || c.CEMarked() != tc.ins+tc.pst {
				t.Errorf("dequeued CE %d, marked %d", c.DequeuedCEPackets, c.CEMarked())
			}
			if n := r.handoffs(); n != 0 {
				t.Errorf("%d handoff records left", n)
			}
			if err := c.CheckInvariant(); err != nil {
				t.Error(err)
			}
			if s := stats(t, r.o).Port; s.LateDeparturePackets != 0 {
				t.Errorf("late departures %d", s.LateDeparturePackets)
			}
		})
	}
}

// TestXmitLateDeparture: a packet port_xmit did not hand over (the
// tracepoint did not run it, its slot was busy) is counted by the peer's
// hook as before, its sojourn including the host queue; a record of an
// earlier packet in the same skb is left for port_xmit to find stale, and
// another skb's record is left alone.
func TestXmitLateDeparture(t *testing.T) {
	r := newXmitRig(t, ClassConfig{Name: "roce", LimitBytes: 4 * units.MiB, ECN: ECNTCN, InsTarget: 100 * time.Microsecond})
	const t0 = 1_000_000_000
	pkt := r.enqueue(t0, ect0)
	// No record at this key.
	got := r.peer(pkt, t0+150_000, 42)
	if got.ret != tcActNext || got.ecn != ce {
		t.Fatalf("late departure: verdict %d ecn %d, want pass and CE (150 µs > 100 µs)", got.ret, got.ecn)
	}
	c := stats(t, r.o).Classes[ClassRoCE]
	if c.DequeuedPackets != 1 || c.BacklogPackets != 0 || c.SojournSamples != 1 || c.AQMInsMarks != 1 || c.Host.DeliveredPackets != 0 {
		t.Errorf("late departure counted as dequeued %d, backlog %d, %d sojourn samples, %d marks, %d host deliveries",
			c.DequeuedPackets, c.BacklogPackets, c.SojournSamples, c.AQMInsMarks, c.Host.DeliveredPackets)
	}
	if err := c.CheckInvariant(); err != nil {
		t.Error(err)
	}
	// A record of this skb whose stamp is another packet's, and a slot
	// another skb holds.
	pkt2 := r.enqueue(t0+200_000, ect0)
	stale := bpf.PortXmitHandoff{Skb: 7, Stamp: pkt.ctx.Tstamp, XmitNs: t0, Len: 100, ClassId: uint8(ClassRoCE)}
	if err := r.o.Handoff.Put(handoffSlot(7), &stale); err != nil {
		t.Fatal(err)
	}
	r.peer(pkt2, t0+210_000, 7)
	pkt3 := r.enqueue(t0+300_000, ect0)
	other := bpf.PortXmitHandoff{Skb: 0xffff_8880_1234_5600, Stamp: pkt3.ctx.Tstamp, XmitNs: t0, Len: 100, ClassId: uint8(ClassRoCE)}
	if err := r.o.Handoff.Put(handoffSlot(9), &other); err != nil {
		t.Fatal(err)
	}
	r.peer(pkt3, t0+310_000, 9)
	s := stats(t, r.o)
	if s.Port.LateDeparturePackets != 3 || s.Classes[ClassRoCE].DequeuedPackets != 3 {
		t.Errorf("late departures %d, dequeued %d; want 3 and 3", s.Port.LateDeparturePackets, s.Classes[ClassRoCE].DequeuedPackets)
	}
	if n := r.handoffs(); n != 2 {
		t.Errorf("%d handoff slots held, want the stale one and the other skb's kept", n)
	}
}

// TestXmitHookOffIgnoresHandoff: without PORT_F_XMIT_HOOK the peer's hook
// counts every departure and never looks at the map.
func TestXmitHookOffIgnoresHandoff(t *testing.T) {
	o := loadTest(t, DefaultConfig(units.Gbit), QueueVeth)
	const t0 = 1_000_000_000
	if err := o.SetClock(t0); err != nil {
		t.Fatal(err)
	}
	enq := run(t, o.PortEnqueue, craft(t, pktSpec{dscp: uint8(DSCPRoCE), ecn: ect0, payload: 100}), skbCtx{})
	h := bpf.PortXmitHandoff{Skb: 1, Stamp: enq.ctx.Tstamp, XmitNs: t0, Len: uint32(len(enq.out)), ClassId: uint8(ClassRoCE), Verdict: aqmMarkIns}
	if err := errors.Join(o.Handoff.Put(handoffSlot(1), &h), o.TestSkbKey.Set(uint64(1)), o.SetClock(t0+1000)); err != nil {
		t.Fatal(err)
	}
	got := run(t, o.PortDequeue, enq.out, skbCtx{Tstamp: enq.ctx.Tstamp})
	c := stats(t, o).Classes[ClassRoCE]
	if got.ecn != ect0 || c.DequeuedPackets != 1 || c.Host.DeliveredPackets != 0 {
		t.Errorf("hook off: ecn %d, dequeued %d, host deliveries %d; want ECT(0), 1, 0", got.ecn, c.DequeuedPackets, c.Host.DeliveredPackets)
	}
	if err := c.CheckInvariant(); err != nil {
		t.Error(err)
	}
	var left bpf.PortXmitHandoff
	if err := o.Handoff.Lookup(handoffSlot(1), &left); err != nil || left.Skb != 1 {
		t.Errorf("the record was taken with the hook off: %+v %v", left, err)
	}
}

// TestHandoffSlotsSpread: skbs are slab objects 256 bytes apart; Fibonacci
// hashing puts a run of them in distinct slots.
func TestHandoffSlotsSpread(t *testing.T) {
	seen := map[uint32]bool{}
	for i := range uint64(4096) {
		seen[handoffSlot(0xffff_8881_0000_0000+i*256)] = true
	}
	if len(seen) < 4096*99/100 {
		t.Errorf("4096 skbs 256 bytes apart fill %d slots", len(seen))
	}
}

// TestXmitProgramsLoad: where the kernel has tp_btf and BTF (this one), the
// xmit hook's programs load, filtered to a device; without a target they
// are not loaded at all.
func TestXmitProgramsLoad(t *testing.T) {
	labtest.RequireRoot(t)
	o, err := LoadObjects(DefaultConfig(units.Gbit), QueueVeth, priorityBase, LoadOptions{Xmit: &XmitTarget{Ifindex: 1, NetnsIno: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.XmitErr() != nil || o.PortXmit == nil || o.PortHostDrop == nil {
		t.Fatalf("xmit hook did not load: %v", o.XmitErr())
	}
	for _, p := range []*ebpf.Program{o.PortXmit, o.PortHostDrop} {
		if p.Type() != ebpf.Tracing {
			t.Errorf("%v: type %s, want tracing", p, p.Type())
		}
	}
	if info, err := o.Handoff.Info(); err != nil || info.MaxEntries != 1<<handoffSlotBits {
		t.Errorf("handoff table: %+v %v, want %d slots", info, err, 1<<handoffSlotBits)
	}
	bare := loadTest(t, DefaultConfig(units.Gbit), QueueVeth)
	if bare.PortXmit != nil || bare.PortHostDrop != nil {
		t.Error("tracing programs loaded without an xmit target")
	}
}
