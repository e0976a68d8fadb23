package daemon

import (
	"slices"
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
