package aqm

import (
	"strings"
	"testing"
	"time"
)

// codelStep is one departing packet and what CoDel must answer, with the
// state after it.
type codelStep struct {
	now     Time
	sojourn time.Duration
	backlog uint64
	want    bool
	state   CoDelState
	why     string
}

func runCoDel(t *testing.T, c *CoDel, steps []codelStep) {
	t.Helper()
	for i, s := range steps {
		if got := c.OnDequeue(s.now, s.sojourn, s.backlog); got != s.want {
			t.Errorf("step %d (%s): OnDequeue(%d, %v, %d) = %v, want %v", i, s.why, s.now, s.sojourn, s.backlog, got, s.want)
		}
		if st := c.State(); st != s.state {
			t.Errorf("step %d (%s): state %+v, want %+v", i, s.why, st, s.state)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}

// Seed 002 testbed CoDel (§5.2): target 85 µs, interval 200 µs.
var seedCoDel = CoDelConfig{Target: 85 * time.Microsecond, Interval: 200 * time.Microsecond, MTUBytes: 1500}

// TestCoDelSequence walks Linux codel_should_drop/codel_dequeue by hand.
// Due times: ControlLaw(t, 200 µs, n) = t + 200000, 141422, 115470, 100000
// for n = 1..4.
func TestCoDelSequence(t *testing.T) {
	const us = time.Microsecond
	c := &CoDel{Config: seedCoDel}
	runCoDel(t, c, []codelStep{
		{1_000_000, 100 * us, 10000, false, CoDelState{false, 0, 0, 1_200_000, 0}, "above target: first_above_time = now + interval"},
		{1_100_000, 85 * us, 10000, false, CoDelState{false, 0, 0, 1_200_000, 0}, "sojourn = target is not below it"},
		{1_200_000, 100 * us, 10000, false, CoDelState{false, 0, 0, 1_200_000, 0}, "now = first_above_time: not yet (strict)"},
		{1_200_001, 100 * us, 10000, true, CoDelState{true, 1, 1, 1_200_000, 1_400_001}, "enter: count 1, drop_next = now + interval"},
		{1_300_000, 100 * us, 10000, false, CoDelState{true, 1, 1, 1_200_000, 1_400_001}, "dropping, before drop_next"},
		{1_400_001, 100 * us, 10000, true, CoDelState{true, 2, 1, 1_200_000, 1_541_423}, "now = drop_next signals (after_eq); count 2"},
		{1_600_000, 100 * us, 10000, true, CoDelState{true, 3, 1, 1_200_000, 1_656_893}, "late: count 3, scheduled from drop_next, not now"},
		{1_656_893, 100 * us, 10000, true, CoDelState{true, 4, 1, 1_200_000, 1_756_893}, "count 4: + interval/2"},
		{1_700_000, 50 * us, 10000, false, CoDelState{false, 4, 1, 0, 1_756_893}, "below target: leave, reset first_above_time"},

		{1_800_000, 100 * us, 10000, false, CoDelState{false, 4, 1, 2_000_000, 1_756_893}, "above again"},
		{2_000_001, 100 * us, 10000, true, CoDelState{true, 3, 3, 2_000_000, 2_115_471}, "re-enter 243 µs after drop_next (< 16 intervals): count = delta 4-1 = 3"},
		{2_115_471, 100 * us, 10000, true, CoDelState{true, 4, 3, 2_000_000, 2_215_471}, "count 4"},
		{2_200_000, time.Millisecond, 1500, false, CoDelState{false, 4, 3, 0, 2_215_471}, "backlog = MTU: not a standing queue, leave"},

		{2_300_000, 100 * us, 1501, false, CoDelState{false, 4, 3, 2_500_000, 2_215_471}, "backlog = MTU+1 counts"},
		{2_500_001, 100 * us, 1501, true, CoDelState{true, 1, 1, 2_500_000, 2_700_001}, "re-enter with delta 4-3 = 1: not > 1, count 1"},
		{2_700_001, 100 * us, 10000, true, CoDelState{true, 2, 1, 2_500_000, 2_841_423}, "count 2"},
		{2_841_423, 100 * us, 10000, true, CoDelState{true, 3, 1, 2_500_000, 2_956_893}, "count 3"},
		{2_900_000, 0, 0, false, CoDelState{false, 3, 1, 0, 2_956_893}, "empty: leave"},

		{6_000_000, 100 * us, 10000, false, CoDelState{false, 3, 1, 6_200_000, 2_956_893}, "above again"},
		{6_200_001, 100 * us, 10000, true, CoDelState{true, 1, 1, 6_200_000, 6_400_001}, "re-enter 3.243 ms after drop_next (≥ 16 intervals): count 1"},
	})
}

// TestCoDelReentryWindow checks the 16·interval edge of count reuse, and
// that re-entering before the old drop_next (negative gap) reuses too.
func TestCoDelReentryWindow(t *testing.T) {
	const dropNext = 10_000_000
	for _, c := range []struct {
		now  Time
		want uint64
	}{
		{dropNext + 3_200_000, 1},   // gap = 16·interval: not before it
		{dropNext + 3_199_999, 3},   // just inside: count = delta = 5-2
		{dropNext - 1_000_000, 3},   // before the old drop_next: int64 gap < 0
		{dropNext + 100_000_000, 1}, // long ago
	} {
		cd := &CoDel{Config: seedCoDel, count: 5, lastcount: 2, dropNext: dropNext, firstAboveTime: 1}
		if !cd.OnDequeue(c.now, time.Millisecond, 10000) {
			t.Fatalf("now %d: no signal on entry", c.now)
		}
		want := CoDelState{true, c.want, c.want, 1, ControlLaw(c.now, seedCoDel.Interval, c.want)}
		if st := cd.State(); st != want {
			t.Errorf("now %d (gap %d): state %+v, want %+v", c.now, int64(c.now)-dropNext, st, want)
		}
	}
}

func TestCoDelValidate(t *testing.T) {
	if err := seedCoDel.Validate(); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		cfg  CoDelConfig
		want string
	}{
		{CoDelConfig{Interval: time.Millisecond}, "codel: target (0us) must be greater than 0"},
		{CoDelConfig{Target: time.Millisecond}, "codel: interval (0us) must be 1ns to 2^48-1ns"},
		{CoDelConfig{Target: 1, Interval: MaxInterval + 1}, "interval (281474.976710656s)"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}
