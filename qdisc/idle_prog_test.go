package qdisc

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// The idle ledger (bpf/idle.h): a class is idle from the end of the
// departure that emptied it, its serialization at the class's rate
// included, to the next arrival; the period reaches the log while it is
// open and the totals always.
func TestIdlePeriodsVeth(t *testing.T) {
	cfg := testConfig() // 1 Gbit/s: 8 ns per byte
	o := loadTest(t, cfg, QueueVeth)
	log, err := o.OpenIdleLog()
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	pkt := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 958}) // 1000-byte frame
	ser := time.Duration(len(pkt)) * 8 * time.Nanosecond

	step := func(now time.Duration, prog string) runResult {
		t.Helper()
		if err := o.SetClock(uint64(now)); err != nil {
			t.Fatal(err)
		}
		if prog == "enqueue" {
			return run(t, o.PortEnqueue, pkt, skbCtx{})
		}
		return runResult{}
	}
	// The first arrival: the class was never seen busy, no period.
	enq := step(1*time.Millisecond, "enqueue")
	if s := stats(t, o).Classes[ClassRoCE]; s.IdlePeriods != 0 {
		t.Fatalf("first arrival ended %d idle periods, want 0", s.IdlePeriods)
	}
	// It leaves at 2 ms: the class is idle from 2 ms + its serialization.
	if err := o.SetClock(uint64(2 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	run(t, o.PortDequeue, enq.out, skbCtx{Tstamp: enq.ctx.Tstamp})
	// An arrival while the packet is still on the wire ends no period.
	enq = step(2*time.Millisecond+ser/2, "enqueue")
	if s := stats(t, o).Classes[ClassRoCE]; s.IdlePeriods != 0 {
		t.Fatalf("an arrival during the serialization ended %d idle periods, want 0", s.IdlePeriods)
	}
	if err := o.SetClock(uint64(3 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	run(t, o.PortDequeue, enq.out, skbCtx{Tstamp: enq.ctx.Tstamp})
	// Two packets in, one out: still busy, no idle start.
	a := step(4*time.Millisecond, "enqueue")
	b := step(4*time.Millisecond+time.Microsecond, "enqueue")
	if s := stats(t, o).Classes[ClassRoCE]; s.IdlePeriods != 1 || s.Idle != time.Millisecond-ser {
		t.Fatalf("after 3 ms idle from 3 ms + %v: %d periods, %v idle; want 1, %v", ser, s.IdlePeriods, s.Idle, time.Millisecond-ser)
	}
	if err := o.SetClock(uint64(5 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	run(t, o.PortDequeue, a.out, skbCtx{Tstamp: a.ctx.Tstamp})
	step(6*time.Millisecond, "enqueue") // the backlog holds b: not idle
	if err := o.SetClock(uint64(7 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	run(t, o.PortDequeue, b.out, skbCtx{Tstamp: b.ctx.Tstamp})
	if s := stats(t, o).Classes[ClassRoCE]; s.IdlePeriods != 1 {
		t.Fatalf("arrivals into a busy class ended %d idle periods, want 1", s.IdlePeriods)
	}

	if err := log.Flush(); err != nil { // what the ring holds, then ErrIdleLogFlushed
		t.Fatal(err)
	}
	p, err := log.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := IdlePeriod{Class: ClassRoCE, From: 3*time.Millisecond + ser, To: 4 * time.Millisecond}
	if p != want {
		t.Errorf("logged %+v, want %+v", p, want)
	}
	// Closed, the log stops; the totals go on.
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	setBacklog(t, o, ClassRoCE, 0)
	step(8*time.Millisecond, "enqueue")
	s := stats(t, o).Classes[ClassRoCE]
	if s.IdlePeriods != 1 || s.IdleLogLost != 0 {
		t.Errorf("with one packet left queued: %d periods, %d lost; want 1, 0", s.IdlePeriods, s.IdleLogLost)
	}
}

// A virtual queue runs dry when its last byte has drained at the class's
// rate; the next arrival ends the period there.
func TestIdlePeriodsVirtual(t *testing.T) {
	cfg := DefaultConfig(100 * units.Mbit) // 80 ns per byte
	cfg.Classes[ClassRoCE] = ClassConfig{Name: "roce", LimitBytes: units.MiB, ECN: ECNStep, MinThBytes: 100000}
	o := loadTest(t, cfg, QueueVirtual)
	pkt := craft(t, pktSpec{dscp: 26, ecn: ect0, payload: 958})
	drain := time.Duration(len(pkt)) * 80 * time.Nanosecond
	for _, at := range []time.Duration{time.Millisecond, 2 * time.Millisecond} {
		if err := o.SetClock(uint64(at)); err != nil {
			t.Fatal(err)
		}
		run(t, o.PortEnqueue, pkt, skbCtx{})
	}
	s := stats(t, o).Classes[ClassRoCE]
	if want := time.Millisecond - drain; s.IdlePeriods != 1 || s.Idle != want {
		t.Errorf("%d periods, %v idle; want 1, %v (dry at 1 ms + %v)", s.IdlePeriods, s.Idle, want, drain)
	}
}

// The ring's events: both kinds, and what a reader refuses.
func TestDecodeIdleEvent(t *testing.T) {
	ev := func(from, to uint64, class, kind uint32) []byte {
		b := make([]byte, 24)
		binary.NativeEndian.PutUint64(b[0:], from)
		binary.NativeEndian.PutUint64(b[8:], to)
		binary.NativeEndian.PutUint32(b[16:], class)
		binary.NativeEndian.PutUint32(b[20:], kind)
		return b
	}
	if p, ok := decodeIdleEvent(ev(10, 20, 3, idleKindEmpty)); !ok || p != (IdlePeriod{Class: 3, From: 10, To: 20}) {
		t.Errorf("idle: %+v %v", p, ok)
	}
	if p, ok := decodeIdleEvent(ev(10, 20, 3, idleKindHeld)); !ok || !p.Held {
		t.Errorf("held back: %+v %v", p, ok)
	}
	for _, b := range [][]byte{ev(20, 10, 3, 0), ev(1, 2, NumClasses, 0), ev(1, 2, 3, 7), ev(1, 2, 3, 0)[:20]} {
		if p, ok := decodeIdleEvent(b); ok {
			t.Errorf("% x decoded as %+v", b, p)
		}
	}
}
