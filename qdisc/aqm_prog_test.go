package qdisc

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/bpf"
	"github.com/fabriclab/fabriclab/host/lab/labtest"
	"github.com/fabriclab/fabriclab/qdisc/aqm"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The dequeue AQMs are checked decision for decision against the pure-Go
// references in qdisc/aqm: the same sequence of (time, sojourn, backlog,
// random draw) goes through port_dequeue under BPF_PROG_RUN, with the clock
// and the draw set through the test hooks, and through the reference. Every
// packet's mark, and the state after it, must agree.

// dequeueStep is one departing packet.
type dequeueStep struct {
	now          uint64 // dequeue time, ns
	sojourn      uint64 // ns; a multiple of the stamp's 256 ns resolution
	backlogAfter uint64 // bytes still queued when it leaves
	rnd          uint32
	ecn          uint8
}

// aqmRig runs dequeue steps through the programs for one class.
type aqmRig struct {
	tb    testing.TB
	o     *Objects
	class ClassID
	pkt   map[uint8][]byte
}

func newAQMRig(tb testing.TB, cc ClassConfig) *aqmRig {
	tb.Helper()
	cfg := DefaultConfig(units.Gbit)
	cfg.Classes[ClassRoCE] = cc
	return &aqmRig{tb: tb, o: loadTest(tb, cfg, QueueVeth), class: ClassRoCE, pkt: map[uint8][]byte{}}
}

func (r *aqmRig) packet(ecn uint8) []byte {
	if p, ok := r.pkt[ecn]; ok {
		return p
	}
	p := craft(r.tb, pktSpec{dscp: uint8(DSCPRoCE), ecn: ecn, payload: 1000})
	r.pkt[ecn] = p
	return p
}

// dequeue runs one packet through port_dequeue: it was stamped sojourn ns
// ago and leaves backlogAfter bytes behind it.
func (r *aqmRig) dequeue(s dequeueStep) runResult {
	r.tb.Helper()
	pkt := r.packet(s.ecn)
	if s.sojourn%256 != 0 || s.now%256 != 0 || s.sojourn > s.now {
		r.tb.Fatalf("step %+v: now and sojourn must be multiples of 256 ns", s)
	}
	setBacklog(r.tb, r.o, r.class, s.backlogAfter+uint64(len(pkt)))
	if err := r.o.SetClock(s.now); err != nil {
		r.tb.Fatal(err)
	}
	if err := r.o.SetRandom(s.rnd); err != nil {
		r.tb.Fatal(err)
	}
	stamp := (s.now - s.sojourn) | 0xA8 | uint64(r.class)
	return run(r.tb, r.o.PortDequeue, pkt, skbCtx{Tstamp: stamp})
}

func (r *aqmRig) state() bpf.PortAqmState {
	r.tb.Helper()
	var st bpf.PortAqmState
	if err := r.o.ClassAqm.Lookup(uint32(r.class), &st); err != nil {
		r.tb.Fatal(err)
	}
	return st
}

// sojournWalk makes n departing packets in phases of 30 to 400 packets, 0
// to maxGap ns apart: the sojourn stays below lo, sits between lo and mid
// (a standing queue), hovers around lo, bursts between mid and hi, or the
// queue idles and empties. lo and mid are the thresholds under test.
func sojournWalk(seed uint64, n int, lo, mid, hi, maxGap uint64) []dequeueStep {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	steps := make([]dequeueStep, 0, n)
	now := uint64(1_000_000_000)
	between := func(a, b uint64) uint64 { return (a + rng.Uint64N(b-a+1)) / 256 * 256 }
	for len(steps) < n {
		phase, length := rng.IntN(5), 30+rng.IntN(370)
		if phase == 4 { // idle
			now += (1 + rng.Uint64N(20)) * mid / 256 * 256
			continue
		}
		for i := 0; i < length && len(steps) < n; i++ {
			now += rng.Uint64N(maxGap/256+1) * 256
			var soj uint64
			switch phase {
			case 0:
				soj = between(0, lo-1)
			case 1:
				soj = between(lo, mid)
			case 2:
				soj = between(lo-lo/5, lo+lo/5)
			case 3:
				soj = between(mid, hi)
			}
			ecn := uint8(ect0)
			if rng.IntN(10) == 0 {
				ecn = ect1
			}
			steps = append(steps, dequeueStep{now: now, sojourn: soj, backlogAfter: soj / 8, rnd: rng.Uint32(), ecn: ecn})
		}
	}
	return steps
}

func TestECNSharpMatchesAlgorithm1(t *testing.T) {
	base := ClassConfig{Name: "roce", LimitBytes: 4 * units.MiB, ECN: ECNSharp,
		InsTarget: 200 * time.Microsecond, PstTarget: 85 * time.Microsecond, PstInterval: 200 * time.Microsecond}
	sqrt := base
	sqrt.SqrtLaw = true
	curve := base
	curve.InsTarget, curve.InsMax, curve.MaxP = 150*time.Microsecond, 400*time.Microsecond, 0.2
	qlen := base
	qlen.QueueSignal = true
	qlen.InsTarget, qlen.PstTarget = 0, 0
	// sojournWalk's backlog is sojourn/8 bytes: these are the same
	// thresholds as base, in bytes (1 byte per 8 ns is 1 Gbit/s).
	qlen.InsTargetBytes, qlen.PstTargetBytes = 25000, 10625

	for _, tc := range []struct {
		name string
		cc   ClassConfig
	}{{"algorithm1", base}, {"sqrt-law", sqrt}, {"probabilistic", curve}, {"queue-length", qlen}} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newAQMRig(t, tc.cc)
			ref := aqm.ECNSharp{Config: aqm.ECNSharpConfig{
				PstInterval: tc.cc.PstInterval, SqrtLaw: tc.cc.SqrtLaw, MaxPFixed: probToFixed(tc.cc.MaxP),
			}}
			signal := func(s dequeueStep) uint64 { return s.sojourn }
			if tc.cc.QueueSignal {
				ref.Config.InsTarget, ref.Config.PstTarget = uint64(tc.cc.InsTargetBytes), uint64(tc.cc.PstTargetBytes)
				signal = func(s dequeueStep) uint64 { return s.backlogAfter }
			} else {
				ref.Config.InsTarget, ref.Config.InsMax, ref.Config.PstTarget = uint64(tc.cc.InsTarget), uint64(tc.cc.InsMax), uint64(tc.cc.PstTarget)
			}
			var ins, pst int
			for seed := uint64(1); seed <= 3; seed++ {
				steps := sojournWalk(seed, 3000, 85_000, 200_000, 400_000, 3000)
				for i, s := range steps {
					want := ref.OnDequeue(aqm.Time(s.now), signal(s), s.rnd)
					got := rig.dequeue(s)
					if got.ret != tcActNext {
						t.Fatalf("seed %d step %d: verdict %d", seed, i, got.ret)
					}
					if (got.ecn == ce) != want.Mark() {
						t.Fatalf("seed %d step %d %+v: marked %v, reference %+v (state %+v)", seed, i, s, got.ecn == ce, want, ref.State())
					}
					if want.Instantaneous {
						ins++
					} else if want.Persistent {
						pst++
					}
					assertSharpState(t, fmt.Sprintf("seed %d step %d", seed, i), rig.state(), ref.State())
				}
			}
			c := stats(t, rig.o).Classes[ClassRoCE]
			if c.AQMInsMarks != uint64(ins) || c.AQMPstMarks != uint64(pst) {
				t.Errorf("counters: %d instantaneous, %d persistent marks; reference %d, %d", c.AQMInsMarks, c.AQMPstMarks, ins, pst)
			}
			// The walk must exercise both conditions, or it proves nothing.
			if ins < 100 || pst < 10 {
				t.Errorf("the walk made %d instantaneous and %d persistent marks: too few to compare", ins, pst)
			}
			t.Logf("%d instantaneous, %d persistent marks, all %d decisions equal", ins, pst, 9000)
		})
	}
}

func assertSharpState(tb testing.TB, at string, got bpf.PortAqmState, want aqm.ECNSharpState) {
	tb.Helper()
	if (got.Marking != 0) != want.MarkingState || got.Count != want.MarkingCount ||
		got.NextNs != uint64(want.MarkingNext) || got.FirstAboveNs != uint64(want.FirstAboveTime) {
		tb.Fatalf("%s: state marking=%d count=%d next=%d first_above=%d; reference %+v",
			at, got.Marking, got.Count, got.NextNs, got.FirstAboveNs, want)
	}
}

func TestCoDelMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name             string
		target, interval time.Duration
	}{{"datacentre", 85 * time.Microsecond, 200 * time.Microsecond}, {"short-interval", 50 * time.Microsecond, 60 * time.Microsecond}} {
		t.Run(tc.name, func(t *testing.T) {
			rig := newAQMRig(t, ClassConfig{Name: "roce", LimitBytes: 4 * units.MiB, ECN: ECNCoDel, Target: tc.target, Interval: tc.interval})
			ref := aqm.CoDel{Config: aqm.CoDelConfig{Target: tc.target, Interval: tc.interval, MTUBytes: DefaultFrameBytes}}
			var marks, reentries int
			for seed := uint64(1); seed <= 3; seed++ {
				// A low backlog now and then exercises the one-MTU rule.
				steps := sojournWalk(seed+10, 3000, uint64(tc.target), uint64(tc.target)*3, uint64(tc.target)*5, 3000)
				for i := range steps {
					if i%997 == 0 {
						steps[i].backlogAfter = 1000
					}
				}
				for i, s := range steps {
					before := ref.State()
					want := ref.OnDequeue(aqm.Time(s.now), time.Duration(s.sojourn), s.backlogAfter)
					if !before.Dropping && ref.State().Dropping && ref.State().Count > 1 {
						reentries++
					}
					got := rig.dequeue(s)
					if (got.ecn == ce) != want {
						t.Fatalf("seed %d step %d %+v: marked %v, reference %v (state %+v)", seed, i, s, got.ecn == ce, want, ref.State())
					}
					if want {
						marks++
					}
					st, w := rig.state(), ref.State()
					if (st.Marking != 0) != w.Dropping || st.Count != w.Count || st.Lastcount != w.LastCount ||
						st.NextNs != uint64(w.DropNext) || st.FirstAboveNs != uint64(w.FirstAboveTime) {
						t.Fatalf("seed %d step %d: state %+v; reference %+v", seed, i, st, w)
					}
				}
			}
			if c := stats(t, rig.o).Classes[ClassRoCE]; c.AQMPstMarks != uint64(marks) || c.AQMInsMarks != 0 {
				t.Errorf("counters: %d persistent, %d instantaneous; reference %d marks", c.AQMPstMarks, c.AQMInsMarks, marks)
			}
			if marks < 50 || reentries == 0 {
				t.Errorf("the walk made %d marks and %d re-entries with a kept count: too few to compare", marks, reentries)
			}
			t.Logf("%d marks (%d re-entries reusing the count), all decisions equal", marks, reentries)
		})
	}
}

func TestTCNMatchesReference(t *testing.T) {
	const threshold = 128 * time.Microsecond
	rig := newAQMRig(t, ClassConfig{Name: "roce", LimitBytes: 4 * units.MiB, ECN: ECNTCN, InsTarget: threshold})
	marks := 0
	for i, s := range sojournWalk(7, 2000, 60_000, 128_000, 250_000, 3000) {
		want := aqm.TCNMark(time.Duration(s.sojourn), threshold)
		if got := rig.dequeue(s); (got.ecn == ce) != want {
			t.Fatalf("step %d %+v: marked %v, reference %v", i, s, got.ecn == ce, want)
		}
		if want {
			marks++
		}
	}
	// At the threshold exactly: no mark (strictly greater).
	if got := rig.dequeue(dequeueStep{now: 2e9, sojourn: uint64(threshold), ecn: ect0}); got.ecn == ce {
		t.Error("sojourn equal to the threshold was marked")
	}
	if c := stats(t, rig.o).Classes[ClassRoCE]; c.AQMInsMarks != uint64(marks) {
		t.Errorf("instantaneous counter %d, reference %d", c.AQMInsMarks, marks)
	}
	if marks < 100 {
		t.Errorf("only %d marks", marks)
	}
}

// TestDequeueAQMNotECT: a packet the AQM picks but cannot mark passes, or is
// dropped (and counted) with the drop profile; a CE packet stays CE.
func TestDequeueAQMNotECT(t *testing.T) {
	for _, drop := range []bool{false, true} {
		cc := ClassConfig{Name: "roce", LimitBytes: 4 * units.MiB, ECN: ECNTCN, InsTarget: 10 * time.Microsecond, WREDDrop: drop}
		rig := newAQMRig(t, cc)
		got := rig.dequeue(dequeueStep{now: 1e9, sojourn: 51200, ecn: notECT})
		wantRet := uint32(tcActNext)
		if drop {
			wantRet = tcActShot
		}
		if got.ret != wantRet || got.ecn != notECT {
			t.Errorf("drop=%v: verdict %d ecn %d, want verdict %d and Not-ECT", drop, got.ret, got.ecn, wantRet)
		}
		got = rig.dequeue(dequeueStep{now: 2e9, sojourn: 51200, ecn: ce})
		if got.ret != tcActNext || got.ecn != ce {
			t.Errorf("drop=%v: CE packet: verdict %d ecn %d", drop, got.ret, got.ecn)
		}
		c := stats(t, rig.o).Classes[ClassRoCE]
		wantDrops := uint64(0)
		if drop {
			wantDrops = 1
		}
		if c.AQMDroppedPackets != wantDrops || c.AQMInsMarks != 0 || c.DequeuedCEPackets != 1 {
			t.Errorf("drop=%v: aqm drops %d (want %d), marks %d (want 0), dequeued CE %d (want 1)",
				drop, c.AQMDroppedPackets, wantDrops, c.AQMInsMarks, c.DequeuedCEPackets)
		}
	}
}

// TestAQMLiveSwitch: Configure changes the mode without losing counters, and
// a changed AQM starts from a clean state.
func TestAQMLiveSwitch(t *testing.T) {
	cc := ClassConfig{Name: "roce", LimitBytes: 4 * units.MiB, ECN: ECNSharp,
		InsTarget: 200 * time.Microsecond, PstTarget: 50 * time.Microsecond, PstInterval: 100 * time.Microsecond}
	rig := newAQMRig(t, cc)
	now := uint64(1e9)
	for i := 0; i < 50; i++ { // a standing 100 µs queue: persistent marks
		rig.dequeue(dequeueStep{now: now, sojourn: 102400, backlogAfter: 20000, ecn: ect0})
		now += 25600
	}
	before := stats(t, rig.o).Classes[ClassRoCE]
	if before.AQMPstMarks == 0 || rig.state().Marking == 0 {
		t.Fatalf("no persistent marking before the switch: %d marks", before.AQMPstMarks)
	}
	cfg := DefaultConfig(units.Gbit)
	cfg.Classes[ClassRoCE] = ClassConfig{Name: "roce", LimitBytes: 4 * units.MiB, ECN: ECNCoDel, Target: 50 * time.Microsecond, Interval: 100 * time.Microsecond}
	if err := rig.o.writeConfig(cfg, QueueVeth, priorityBase); err != nil {
		t.Fatal(err)
	}
	if st := rig.state(); st != (bpf.PortAqmState{}) {
		t.Errorf("state after switching to codel: %+v, want zero", st)
	}
	after := stats(t, rig.o).Classes[ClassRoCE]
	if after.AQMPstMarks != before.AQMPstMarks || after.DequeuedPackets != before.DequeuedPackets {
		t.Errorf("counters changed across the switch: %d -> %d marks, %d -> %d dequeued",
			before.AQMPstMarks, after.AQMPstMarks, before.DequeuedPackets, after.DequeuedPackets)
	}
	// Rewriting the same settings keeps the state.
	rig.dequeue(dequeueStep{now: now, sojourn: 102400, backlogAfter: 20000, ecn: ect0})
	kept := rig.state()
	if err := rig.o.writeConfig(cfg, QueueVeth, priorityBase); err != nil {
		t.Fatal(err)
	}
	if st := rig.state(); st != kept {
		t.Errorf("unchanged settings reset the state: %+v -> %+v", kept, st)
	}
	got, _, err := readConfig(&rig.o.PortMaps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Classes[ClassRoCE] != cfg.Classes[ClassRoCE] {
		t.Errorf("read back %+v, wrote %+v", got.Classes[ClassRoCE], cfg.Classes[ClassRoCE])
	}
}

func TestDequeueAQMNeedsVeth(t *testing.T) {
	labtest.RequireRoot(t)
	cfg := DefaultConfig(units.Gbit)
	cfg.Classes[ClassRoCE].ECN = ECNTCN
	cfg.Classes[ClassRoCE].InsTarget = 100 * time.Microsecond
	_, err := LoadObjects(cfg, QueueVirtual, 0, LoadOptions{})
	if err == nil {
		t.Fatal("tcn on a virtual-queue port loaded")
	}
	t.Log(err)
}
