package daemon

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/labfile"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestSeries: a lab file's series as the daemon runs it: cycle 0 draws
// the sizes the file's first run in namespaces draws, later cycles others;
// every-spaced runs wait for their slot and count as late past it; a
// plain flow is a cycle of one.
func TestSeries(t *testing.T) {
	fl := &labfile.Flow{Size: 10 << 10, SizeMax: 100 << 10, Count: 20, Every: 100 * time.Millisecond}
	s := &series{plan: &labfile.FlowPlan{Flow: fl, Index: 2, Bottleneck: 100 * units.Mbit, BaseRTT: time.Millisecond}, seed: 7}
	if got, want := s.sizes(0), labfile.DrawSizes(fl, 7, 2); !slices.Equal(got, want) || len(got) != 20 {
		t.Errorf("cycle 0 sizes %v, want the file's first run's %v", got, want)
	}
	if slices.Equal(s.sizes(0), s.sizes(1)) {
		t.Error("cycle 1 replays cycle 0's sizes")
	}
	if s.count() != 20 || (*series)(nil).count() != 1 || (*series)(nil).sizes(3) != nil {
		t.Errorf("counts: %d, plain %d", s.count(), (*series)(nil).count())
	}
	t0 := time.Now()
	if gap, late := s.gap(3, t0); late || gap < 250*time.Millisecond || gap > 300*time.Millisecond {
		t.Errorf("run 3 of a cycle started now: wait %v (late %v), want about 300ms", gap, late)
	}
	if gap, late := s.gap(3, t0.Add(-time.Second)); !late || gap != 0 {
		t.Errorf("run 3 of a cycle started 1 s ago: wait %v, late %v; want 0, late", gap, late)
	}
	fl.Every, fl.Pause = 0, 20*time.Millisecond
	if gap, late := s.gap(3, t0.Add(-time.Second)); late || gap != 20*time.Millisecond {
		t.Errorf("pause-spaced: wait %v, late %v", gap, late)
	}
	// 100 KB at 100 Mbit/s is 8.192 ms, plus the base RTT.
	if ideal := s.plan.IdealFCT(100 << 10); ideal != 9192*time.Microsecond {
		t.Errorf("ideal FCT %v", ideal)
	}
}

func TestHistogram(t *testing.T) {
	var h histogram
	for _, v := range []float64{0.9, 1, 1.05, 4, 2000} {
		h.observe(ratioBounds, v)
	}
	c := h.cumulative(ratioBounds)
	if h.n != 5 || h.sum != 2006.95 || c[1] != 2 || c[1.1] != 3 || c[5] != 4 || c[1000] != 4 {
		t.Errorf("n %d sum %v cumulative %v", h.n, h.sum, c)
	}
	var empty histogram
	if c := empty.cumulative(fctBounds); len(c) != len(fctBounds) || c[fctBounds[0]] != 0 {
		t.Errorf("empty: %v", c)
	}
}

// runStarts runs a flow of spec with run until n runs started, and
// returns when each started, from the first.
func runStarts(t *testing.T, spec FlowConfig, n int, fail func(call int) bool) []time.Duration {
	t.Helper()
	d := New(Options{})
	var (
		mu     sync.Mutex
		starts []time.Time
		enough = make(chan struct{})
	)
	fl := &flow{spec: spec}
	d.runFlow(fl, d.log, func(ctx context.Context, size uint64) runResult {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, time.Now())
		call := len(starts)
		if call == n {
			close(enough)
		}
		if fail(call) {
			return runResult{err: errors.New("connection refused")}
		}
		return runResult{reported: true, bytes: size}
	})
	select {
	case <-enough:
	case <-time.After(10 * time.Second):
		t.Fatal("the flow's runs did not start")
	}
	fl.stop()
	out := make([]time.Duration, n)
	for i := range n {
		out[i] = starts[i].Sub(starts[0])
	}
	return out
}

// TestRunFlowGrid: an every series' next cycle starts Pause after the
// slot that follows its last run (the grid kept), not Pause after the run.
func TestRunFlowGrid(t *testing.T) {
	fl := &labfile.Flow{Size: 1 << 10, Count: 3, Every: 20 * time.Millisecond}
	spec := FlowConfig{Name: "g", Repeat: true, Pause: 30 * time.Millisecond,
		series: &series{plan: &labfile.FlowPlan{Flow: fl, Bottleneck: units.Gbit}, seed: 1}}
	s := runStarts(t, spec, 4, func(int) bool { return false })
	// Cycle 1 at 3 × 20 ms + 30 ms.
	// s[0] is taken a little after the cycle's t0: lower bounds with a
	// millisecond or two of slack; the upper one still tells the old
	// behaviour (Pause after the last run: 70 ms) and a double wait (150).
	if s[1] < 18*time.Millisecond || s[2] < 38*time.Millisecond || s[3] < 87*time.Millisecond || s[3] > 130*time.Millisecond {
		t.Errorf("run starts %v: want 0, 20 ms, 40 ms and the next cycle at 90 ms", s)
	}
}

// TestRunFlowStartupBackoff: until a run succeeds, a failed run is
// followed by DefaultFlowPause (the receiver's daemon may start later),
// then the series' own pause again.
func TestRunFlowStartupBackoff(t *testing.T) {
	fl := &labfile.Flow{Size: 1 << 10, Count: 10, Pause: 10 * time.Millisecond}
	spec := FlowConfig{Name: "b", Repeat: true, Pause: time.Second,
		series: &series{plan: &labfile.FlowPlan{Flow: fl, Bottleneck: units.Gbit}, seed: 1}}
	s := runStarts(t, spec, 4, func(call int) bool { return call == 1 })
	if d := s[1] - s[0]; d < DefaultFlowPause {
		t.Errorf("the run after a refused first run started %v later, want %v", d, DefaultFlowPause)
	}
	if d := s[3] - s[2]; d > 500*time.Millisecond {
		t.Errorf("after a success, runs %v apart, want the series' 10 ms", d)
	}
	// An every series after a refused first run: the grid restarts at
	// the retry, so the runs after it keep their slots, counted from the
	// retry: a run that starts late (here 3.2 ms beside stress-ng) does
	// not move the next one, so two runs may be less than a slot apart.
	fl = &labfile.Flow{Size: 1 << 10, Count: 10, Every: 20 * time.Millisecond}
	spec.series = &series{plan: &labfile.FlowPlan{Flow: fl, Bottleneck: units.Gbit}, seed: 1}
	s = runStarts(t, spec, 4, func(call int) bool { return call == 1 })
	if s[1] < DefaultFlowPause || s[2]-s[1] < 18*time.Millisecond || s[3]-s[1] < 38*time.Millisecond {
		t.Errorf("every series after a refused run: starts %v, want the retry after %v and its 20 ms slots after it", s, DefaultFlowPause)
	}
}
