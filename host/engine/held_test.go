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

// lateConn is a conn whose datagrams arrived age before they are read: a
// receive loop that ran that late.
type lateConn struct {
	*pktio.PipeConn
	age time.Duration
}

func (c lateConn) ReadBatch(msgs []pktio.Message) (int, error) {
	n, err := c.PipeConn.ReadBatch(msgs)
	for i := range n {
		msgs[i].RxTime = time.Now().Add(-c.age)
	}
	return n, err
}

// A batch read late is logged as a feedback wait, from its oldest
// datagram's arrival to its handling, in the held log's companion; a held
// log no Meter made logs none.
func TestLateFeedback(t *testing.T) {
	const age = 3 * time.Millisecond
	m, err := hostlost.NewMeter(hostlost.MeterConfig{Tick: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	a, b := pktio.NewPipe(pktio.PipeOptions{})
	defer b.Close()
	e, err := New(Config{Conn: lateConn{a, age}, Clock: NewMonotonicClock(), MaxPacket: 64, Held: m.Held()}, nopRx{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	e.Start()
	const sends = 5
	for range sends {
		msg := []pktio.Message{{Buffers: [][]byte{make([]byte, 16)}, Addr: pktio.DefaultPipeA}}
		if _, err := b.WriteBatch(msg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	deadline := time.Now().Add(2 * time.Second)
	for a.Stats().DatagramsReceived < sends && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	e.Close()
	r := m.Stop()
	t.Log(r)
	if r.FeedbackBatches < 1 || r.FeedbackBatches > sends {
		t.Fatalf("%d feedback batches, want 1..%d", r.FeedbackBatches, sends)
	}
	// Each wait is the age, and the read's own lateness on top (bounded
	// by the run).
	if r.FeedbackAgeMax < age || r.FeedbackAgeMax > r.Wall || r.FeedbackAgeP99 < age || r.FeedbackAgeP99 > r.FeedbackAgeMax {
		t.Errorf("feedback age p99 %v, max %v; want both at least %v", r.FeedbackAgeP99, r.FeedbackAgeMax, age)
	}
	if r.FeedbackLate < age || r.FeedbackLate > r.Wall {
		t.Errorf("feedback late %v, want %v..%v", r.FeedbackLate, age, r.Wall)
	}
	if hostlost.NewLog().Late() != nil {
		t.Error("a log no meter made has a feedback log")
	}
}
