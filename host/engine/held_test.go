package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/hostlost"
	"github.com/fabriclab/fabriclab/host/pktio"
)

// tickFlow sends one datagram each time it is due, every period, n times,
// and records when it was due (engine clock).
type tickFlow struct {
	mu     sync.Mutex
	period time.Duration
	n      int
	due    []time.Duration
	next   time.Duration
}

func (f *tickFlow) Fill(now time.Duration, out []Packet, _ *PortLimit) (int, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		return 0, Never
	}
	if f.next == 0 {
		f.next = now + f.period
		return 0, f.next
	}
	if now < f.next {
		return 0, f.next
	}
	f.due = append(f.due, f.next)
	f.n--
	out[0].N = 1
	out[0].Addr = pktio.DefaultPipeB
	f.next = now + f.period
	return 1, f.next
}

type nopRx struct{}

func (nopRx) Receive(time.Duration, *pktio.Message, *Replies) {}
func (nopRx) EndBatch(*Replies)                               {}

// A flow sent at its deadline was held from the deadline to the pass that
// sent it: the timer's lateness, logged on CLOCK_MONOTONIC.
func TestHeldFromDeadline(t *testing.T) {
	a, b := pktio.NewPipe(pktio.PipeOptions{})
	defer b.Close()
	held := hostlost.NewLog()
	clock := NewMonotonicClock()
	e, err := New(Config{Conn: a, Clock: clock, MaxPacket: 64, Held: held}, nopRx{})
	if err != nil {
		t.Fatal(err)
	}
	f := &tickFlow{period: 2 * time.Millisecond, n: 5}
	e.AddFlow(f)
	e.Start()
	e.Kick()
	deadline := time.Now().Add(2 * time.Second)
	for {
		f.mu.Lock()
		n := f.n
		f.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	e.Close()
	count, total, lost := held.Totals()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.due) != 5 || count < 5 || lost != 0 {
		t.Fatalf("%d sends, %d held intervals (%d lost); want 5 and at least 5", len(f.due), count, lost)
	}
	// Every send was late by the timer's wake-up at least, never by more
	// than the run.
	if total <= 0 || total > 10*time.Millisecond*5 {
		t.Errorf("held %v in all over 5 sends", total)
	}
	ivs := held.Drain(nil)
	for i, d := range f.due {
		if mono := clock.Monotonic(d); !covered(ivs, mono) {
			t.Errorf("send %d: its deadline %v (monotonic %v) starts no held interval: %v", i, d, mono, ivs)
		}
	}
}

// covered reports whether some interval starts at t.
func covered(ivs []hostlost.Interval, t time.Duration) bool {
	for _, iv := range ivs {
		if iv.From == t {
			return true
		}
	}
	return false
}

// Without a clock on CLOCK_MONOTONIC there is no held time.
func TestHeldNeedsMonotonic(t *testing.T) {
	a, b := pktio.NewPipe(pktio.PipeOptions{})
	defer a.Close()
	defer b.Close()
	if _, err := New(Config{Conn: a, Clock: NewFakeClock(0), MaxPacket: 64, Held: hostlost.NewLog()}, nopRx{}); err == nil {
		t.Error("a fake clock with held time: no error")
	}
}
