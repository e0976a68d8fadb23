package hostlost

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func iv(from, to int) Interval { return Interval{time.Duration(from), time.Duration(to)} }

func TestUnion(t *testing.T) {
	got := Union([]Interval{iv(5, 7), iv(1, 3), iv(2, 4), iv(9, 9), iv(7, 8), iv(10, 12)})
	want := []Interval{iv(1, 4), iv(5, 8), iv(10, 12)}
	if !slices.Equal(got, want) {
		t.Errorf("Union = %v, want %v", got, want)
	}
}

func TestIntersect(t *testing.T) {
	a := []Interval{iv(0, 10), iv(20, 30), iv(40, 50)}
	b := []Interval{iv(5, 25), iv(28, 45), iv(60, 70)}
	got := Intersect(nil, a, b)
	want := []Interval{iv(5, 10), iv(20, 25), iv(28, 30), iv(40, 45)}
	if !slices.Equal(got, want) {
		t.Errorf("Intersect = %v, want %v", got, want)
	}
	if s := Sum(got); s != 17 {
		t.Errorf("Sum = %d, want 17", s)
	}
	if d := Between(got, 8, 29); d != 2+5+1 {
		t.Errorf("Between(8, 29) = %d, want 8", d)
	}
}

func TestClip(t *testing.T) {
	in, after := Clip([]Interval{iv(0, 5), iv(8, 12), iv(15, 20), iv(3, 9)}, 4, 10, nil, nil)
	if want := []Interval{iv(4, 5), iv(8, 10), iv(4, 9)}; !slices.Equal(in, want) {
		t.Errorf("in = %v, want %v", in, want)
	}
	if want := []Interval{iv(10, 12), iv(15, 20)}; !slices.Equal(after, want) {
		t.Errorf("after = %v, want %v", after, want)
	}
}

// The meter counts only the idle time some sender was held, across its
// folds, once for overlapping senders and ports.
func TestMeterIntersects(t *testing.T) {
	m, err := NewMeter(MeterConfig{Tick: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h1, h2 := m.Held(), m.Held()
	pl := m.Port("sw1:r1")
	p := pl.Idle
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t0 := m.start
	at := func(ms float64) time.Duration { return t0 + time.Duration(ms*1e5) } // tenths of ms, all in the past by Stop
	// Idle 1–3 and 5–9 units; sender 1 held 2–6, sender 2 4–8.
	p.Add(at(1), at(3))
	p.Add(at(5), at(9))
	h1.Add(at(2), at(6))
	h2.Add(at(4), at(8))
	// An interval from before the run does not count.
	h1.Add(t0-time.Millisecond, t0)
	// The port held a packet back 10–11 units: lost whoever was held.
	pl.HeldBack.Add(at(10), at(11))
	m.mu.Lock()
	m.fold(at(5.5)) // a fold in the middle of the overlaps
	m.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	r := m.Stop()
	unit := 100 * time.Microsecond
	if want := 5 * unit; r.Starved != want { // 2–3, 5–8 and 10–11
		t.Errorf("starved %v, want %v", r.Starved, want)
	}
	if want := 6 * unit; r.Held != want {
		t.Errorf("held %v, want %v", r.Held, want)
	}
	if len(r.Ports) != 1 || r.Ports[0].Idle != 6*unit || r.Ports[0].HeldBack != unit || r.Ports[0].Starved != 5*unit {
		t.Errorf("ports %+v, want idle %v, holding back %v, starved %v", r.Ports, 6*unit, unit, 5*unit)
	}
	if d := r.StarvedBetween(at(0), at(6)); d != 2*unit {
		t.Errorf("starved before 6 units: %v, want %v", d, 2*unit)
	}
	if d := r.PortsStarvedBetween(at(0), at(9), "sw1:r1", "nowhere"); d != 4*unit {
		t.Errorf("sw1:r1 starved before 9 units: %v, want %v", d, 4*unit)
	}
	if d := r.PortsStarvedBetween(at(0), at(20)); d != 0 {
		t.Errorf("no port named: %v starved, want 0", d)
	}
	if r.Wall <= 0 || r.Share != float64(r.Starved)/float64(r.Wall) {
		t.Errorf("wall %v, share %g", r.Wall, r.Share)
	}
	t.Log(r)
}

// TestMeterHolders: each named held log reports its own held time and the
// idle it overlapped, across folds and behind its delay; they may overlap
// (both count), an unnamed log is in the total only.
func TestMeterHolders(t *testing.T) {
	m, err := NewMeter(MeterConfig{Tick: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	unit := 100 * time.Microsecond
	snd, rcv, relay, anon := m.HeldAs("flow s1", 0), m.HeldAs("server r (uet)", 0), m.HeldAs("relay d:eth1", 2*unit), m.Held()
	pa, pb := m.Port("sw:a"), m.Port("sw:b")
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t0 := m.start
	at := func(units float64) time.Duration { return t0 + time.Duration(units*float64(unit)) }
	// Port a idle 1–3 and 5–9, port b idle 2–4. The sender held 2–6, the
	// receiver 4–8, the relay 0–1 (reaching the ports 2–3), an unnamed
	// loop 8–9.
	pa.Idle.Add(at(1), at(3))
	pa.Idle.Add(at(5), at(9))
	pb.Idle.Add(at(2), at(4))
	snd.Add(at(2), at(6))
	rcv.Add(at(4), at(8))
	relay.Add(at(0), at(1))
	anon.Add(at(8), at(9))
	m.mu.Lock()
	m.fold(at(5.5))
	m.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	r := m.Stop()
	want := []HolderReport{
		{"flow s1", 4 * unit, 4 * unit},        // a: 2–3, 5–6; b: 2–4
		{"server r (uet)", 4 * unit, 3 * unit}, // a: 5–8
		{"relay d:eth1", unit, 2 * unit},       // a: 2–3; b: 2–3
	}
	if !slices.Equal(r.Holders, want) {
		t.Errorf("holders %+v, want %+v", r.Holders, want)
	}
	// a: 2–3, 5–9 (5 units); b: 2–4 (2).
	if want := 5 * unit; r.Ports[0].Starved != want || r.Ports[1].Starved != 2*unit {
		t.Errorf("ports %+v, want a starved %v, b %v", r.Ports, want, 2*unit)
	}
	if s := r.String(); !strings.Contains(s, "idle while held most: flow s1 0.4 ms, server r (uet) 0.3 ms, relay d:eth1 0.2 ms") {
		t.Errorf("String() = %q: want the holders, longest first", s)
	}
}

func TestMeterConfigErrors(t *testing.T) {
	for _, c := range []MeterConfig{{Budget: 2}, {Tick: time.Microsecond}, {Horizon: -1}} {
		if _, err := NewMeter(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func TestReadKernel(t *testing.T) {
	dir := t.TempDir()
	procRoot = dir
	ksoftirqdPIDs = nil
	t.Cleanup(func() { procRoot = "/proc"; ksoftirqdPIDs = nil })
	write := func(name, s string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("42/task/42/schedstat", "1000 250 3\n")
	write("42/task/43/schedstat", "2000 750 9\n")
	write("7/comm", "ksoftirqd/0\n")
	write("7/schedstat", "500 100 2\n")
	write("8/comm", "kworker/0:1\n")
	write("stat", "cpu  15026 0 5264 71668 537 0 181 570 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
	write("net/softnet_stat", "00000015 00000002 00000003 0\n00001634 00000001 0000000a 0\n")
	k, err := ReadKernel(42)
	if err != nil {
		t.Fatal(err)
	}
	want := Kernel{RunDelay: 1000, RunTime: 3000, Threads: 2, SoftirqDelay: 100, SoftirqTime: 500,
		Steal: 5700 * time.Millisecond, Squeezed: 13, BacklogDrops: 3, GoSchedWait: k.GoSchedWait}
	got := k
	got.threads = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadKernel = %+v, want %+v", got, want)
	}

	// Thread 42 ran on, 43 exited, 44 is new: the difference counts 42's
	// part and 44's whole, never 43's life as a negative.
	os.RemoveAll(filepath.Join(dir, "42/task/43"))
	write("42/task/42/schedstat", "1500 300 4\n")
	write("42/task/44/schedstat", "100 20 1\n")
	k2, err := ReadKernel(42)
	if err != nil {
		t.Fatal(err)
	}
	if d := k2.Sub(k); d.RunDelay != 70 || d.RunTime != 600 || d.Threads != 2 {
		t.Errorf("Sub: run delay %v, run time %v, %d threads; want 70ns, 600ns, 2", d.RunDelay, d.RunTime, d.Threads)
	}
}

// PortsStarvedBetween counts the ports named, once where they overlap.
func TestPortsStarvedBetween(t *testing.T) {
	m, err := NewMeter(MeterConfig{Tick: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	a, b := m.Port("c1"), m.Port("c2")
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t0 := m.start
	at := func(ms float64) time.Duration { return t0 + time.Duration(ms*1e5) }
	a.HeldBack.Add(at(1), at(3))
	b.HeldBack.Add(at(2), at(6))
	time.Sleep(time.Millisecond)
	r := m.Stop()
	unit := 100 * time.Microsecond
	for _, tc := range []struct {
		names []string
		want  time.Duration
	}{{[]string{"c1"}, 2 * unit}, {[]string{"c2"}, 4 * unit}, {[]string{"c1", "c2"}, 5 * unit}} {
		if d := r.PortsStarvedBetween(at(0), at(10), tc.names...); d != tc.want {
			t.Errorf("%v: %v starved, want %v", tc.names, d, tc.want)
		}
	}
	if d := r.StarvedBetween(at(0), at(10)); d != 5*unit {
		t.Errorf("all ports: %v, want %v", d, 5*unit)
	}
}

// A sender behind a delay link holds the ports' time that much later:
// HeldVia compares its held intervals with the ports' idle periods then.
func TestMeterHeldVia(t *testing.T) {
	m, err := NewMeter(MeterConfig{Tick: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	near, far := m.Held(), m.HeldVia(3*100*time.Microsecond)
	p := m.Port("bottleneck")
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t0 := m.start
	at := func(units float64) time.Duration { return t0 + time.Duration(units*1e5) }
	// Idle 4–6 units. Held 0–2 (near: the port did not idle then) and,
	// behind 3 units of delay, 1–2 (reaching the port 4–5).
	p.Idle.Add(at(4), at(6))
	near.Add(at(0), at(2))
	far.Add(at(1), at(2))
	time.Sleep(time.Millisecond)
	r := m.Stop()
	unit := 100 * time.Microsecond
	if r.Starved != unit {
		t.Errorf("starved %v, want %v: the far sender's held time, 3 units later", r.Starved, unit)
	}
	if d := r.StarvedBetween(at(4), at(5)); d != unit {
		t.Errorf("starved in 4–5 units: %v, want %v", d, unit)
	}
}

// TestMeterFeedbackLate: the senders' feedback waits (Log.Late) are summed
// as a union over the run, and their ages give the p99 bound and maximum.
func TestMeterFeedbackLate(t *testing.T) {
	m, err := NewMeter(MeterConfig{Tick: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h1, h2 := m.Held(), m.HeldVia(time.Millisecond)
	if h1.Late() == nil || h2.Late() == nil || NewLog().Late() != nil {
		t.Fatal("a meter's held logs have a feedback log; a plain log none")
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t0 := m.start
	unit := 100 * time.Microsecond
	at := func(units float64) time.Duration { return t0 + time.Duration(units*float64(unit)) }
	// Waits 0–2 and 1–3 (overlapping, two senders) and 5–6 units: 4 units
	// in all; ages 2, 2 and 1 unit. The senders' delay to the ports does
	// not move them: feedback is read where it is logged.
	h1.Late().Add(at(0), at(2))
	h2.Late().Add(at(1), at(3))
	h1.Late().Add(at(5), at(6))
	m.mu.Lock()
	m.fold(at(1.5)) // a fold in the middle of a wait
	m.mu.Unlock()
	time.Sleep(time.Millisecond)
	r := m.Stop()
	if r.FeedbackLate != 3*unit+unit || r.FeedbackBatches != 3 {
		t.Errorf("feedback late %v over %d batches, want %v over 3", r.FeedbackLate, r.FeedbackBatches, 4*unit)
	}
	if r.FeedbackAgeMax != 2*unit || r.FeedbackAgeP99 != 2*unit {
		t.Errorf("ages p99 %v, max %v; want %v and %v (the bucket's edge, capped at the maximum)", r.FeedbackAgeP99, r.FeedbackAgeMax, 2*unit, 2*unit)
	}
	if s := r.String(); !strings.Contains(s, "feedback waited 0.4 ms (a batch: p99 ≤ 200 µs, max 200 µs)") {
		t.Errorf("report %q lacks the feedback wait", s)
	}
	if r.Starved != 0 || r.Held != 0 {
		t.Errorf("feedback waits counted as starved %v or held %v", r.Starved, r.Held)
	}
}

func TestAgeHist(t *testing.T) {
	var h ageHist
	if h.quantileBound(0.99) != 0 {
		t.Error("empty: bound not 0")
	}
	for range 99 {
		h.add(10 * time.Microsecond) // bucket [8192, 16384) ns
	}
	h.add(5 * time.Millisecond)
	if got := h.quantileBound(0.99); got != 16384 {
		t.Errorf("p99 bound %v, want 16.384µs", got)
	}
	if got := h.quantileBound(1); got != 5*time.Millisecond {
		t.Errorf("p100 bound %v, want the maximum", got)
	}
	h.add(0)
	if h.n != 101 || h.counts[0] != 1 {
		t.Errorf("a zero wait: n %d, bucket 0 %d", h.n, h.counts[0])
	}
}
