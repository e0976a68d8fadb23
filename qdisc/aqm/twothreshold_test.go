package aqm

import (
	"strings"
	"testing"
)

// seed001 is a class with T1 100 kB, T2 300 kB, T2max 500 kB, light marks
// up to 1/2 at T2, CE up to 1/5 at T2max.
func seed001() TwoThresholdConfig {
	return TwoThresholdConfig{T1: 100_000, T2: 300_000, T2Max: 500_000, LightMaxP: ProbOne / 2, HeavyMaxP: ProbOne / 5}
}

func TestTwoThresholdValidate(t *testing.T) {
	ok := seed001()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		edit func(*TwoThresholdConfig)
		want string
	}{
		{func(c *TwoThresholdConfig) { c.T1 = c.T2 }, "t2 (300000 bytes) must be greater than t1 (300000 bytes)"},
		{func(c *TwoThresholdConfig) { c.T2Max = c.T2 }, "t2_max (300000 bytes) must be greater than t2 (300000 bytes)"},
		{func(c *TwoThresholdConfig) { c.T2Max = 1<<32 + 1 }, "t2_max (4294967297 bytes) must be at most 2^32"},
		{func(c *TwoThresholdConfig) { c.LightMaxP = ProbOne + 1 }, "light_max_p (4294967297/2^32) must be 0 to 2^32"},
		{func(c *TwoThresholdConfig) { c.HeavyMaxP = ProbOne + 1 }, "heavy_max_p (4294967297/2^32) must be 0 to 2^32"},
	} {
		c := seed001()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", c, err, tc.want)
		}
	}
}

// TestTwoThresholdCurves walks the two curves point by point.
func TestTwoThresholdCurves(t *testing.T) {
	c := seed001()
	for _, p := range []struct {
		backlog      uint64
		light, heavy uint64
		why          string
	}{
		{0, 0, 0, "empty"},
		{99_999, 0, 0, "below T1: nothing"},
		{100_000, 0, 0, "at T1: the light curve starts at 0"},
		{200_000, ProbOne / 4, 0, "halfway to T2: half of LightMaxP"},
		{299_999, (ProbOne / 2) * 199_999 / 200_000, 0, "just below T2"},
		{300_000, ProbOne / 2, 0, "at T2: LightMaxP; the CE curve starts at 0"},
		{400_000, ProbOne / 2, ProbOne / 10, "halfway to T2max: half of HeavyMaxP"},
		{500_000, ProbOne / 2, ProbOne, "at T2max: every packet CE"},
		{1 << 30, ProbOne / 2, ProbOne, "far above"},
	} {
		if got := c.LightP(p.backlog); got != p.light {
			t.Errorf("%s (%d bytes): LightP %d, want %d", p.why, p.backlog, got, p.light)
		}
		if got := c.HeavyP(p.backlog); got != p.heavy {
			t.Errorf("%s (%d bytes): HeavyP %d, want %d", p.why, p.backlog, got, p.heavy)
		}
	}
}

// TestTwoThresholdDecide walks the decision step by step: the draw pinned
// on each side of each probability, every codepoint.
func TestTwoThresholdDecide(t *testing.T) {
	c := seed001()
	const (
		pass  = TwoThresholdPass
		light = TwoThresholdLight
		heavy = TwoThresholdHeavy
		drop  = TwoThresholdDrop
	)
	q := uint32(ProbOne / 4) // LightP at 200 kB
	h := uint32(ProbOne / 10)
	// At 400 kB: CE below h; else ECT(1) while rnd−h < (1/2)·(1−1/10).
	lh := uint32(h) + uint32((uint64(ProbOne/2)*(ProbOne-ProbOne/10))>>32)
	for _, s := range []struct {
		backlog uint64
		ecn     ECN
		rnd     uint32
		drop    bool
		want    TwoThresholdVerdict
		why     string
	}{
		{99_999, ECT0, 0, false, pass, "below T1, the smallest draw"},
		{99_999, NotECT, 0, true, pass, "below T1 nothing drops"},
		{200_000, ECT0, q - 1, false, light, "between: draw just under LightP"},
		{200_000, ECT0, q, false, pass, "between: draw at LightP"},
		{200_000, ECT1, 0, false, pass, "between: ECT(1) is not light-marked again"},
		{200_000, CE, 0, false, pass, "between: CE stays"},
		{200_000, NotECT, 0, true, pass, "between: no CE curve yet, so no drop"},
		{400_000, ECT0, h - 1, false, heavy, "above T2: draw under HeavyP marks CE"},
		{400_000, ECT1, h - 1, false, heavy, "above T2: ECT(1) may be promoted to CE"},
		{400_000, CE, h - 1, false, pass, "above T2: CE stays"},
		{400_000, NotECT, h - 1, false, pass, "above T2: Not-ECT passes"},
		{400_000, NotECT, h - 1, true, drop, "above T2: Not-ECT drops with wred_drop"},
		{400_000, ECT0, h, false, light, "above T2, spared by CE: light with LightMaxP"},
		{400_000, ECT0, lh - 1, false, light, "above T2: the last light draw"},
		{400_000, ECT0, lh, false, pass, "above T2: the first unmarked draw"},
		{400_000, ECT1, h, false, pass, "above T2, spared: ECT(1) stays"},
		{500_000, ECT0, ^uint32(0), false, heavy, "at T2max: every ECT packet CE, the largest draw"},
		{500_000, ECT1, ^uint32(0), false, heavy, "at T2max: ECT(1) too"},
		{500_000, NotECT, ^uint32(0), true, drop, "at T2max: Not-ECT drops with wred_drop"},
	} {
		c.DropNotECT = s.drop
		if got := TwoThresholdDecide(&c, s.backlog, s.ecn, s.rnd); got != s.want {
			t.Errorf("%s: backlog %d %s rnd %d: %s, want %s", s.why, s.backlog, s.ecn, s.rnd, got, s.want)
		}
	}
}

// TestTwoThresholdFractions: over evenly spread draws the fractions are
// the curves' probabilities.
func TestTwoThresholdFractions(t *testing.T) {
	c := seed001()
	const n = 1 << 16
	for _, b := range []uint64{50_000, 150_000, 250_000, 350_000, 450_000, 600_000} {
		var l, h int
		for i := range n {
			switch TwoThresholdDecide(&c, b, ECT0, uint32(i)<<16) {
			case TwoThresholdLight:
				l++
			case TwoThresholdHeavy:
				h++
			}
		}
		ph := float64(c.HeavyP(b)) / ProbOne
		pl := float64(c.LightP(b)) / ProbOne * (1 - ph)
		if d := float64(h)/n - ph; d > 1.0/n || d < -1.0/n {
			t.Errorf("%d bytes: CE fraction %.5f, want %.5f", b, float64(h)/n, ph)
		}
		if d := float64(l)/n - pl; d > 2.0/n || d < -2.0/n {
			t.Errorf("%d bytes: ECT(1) fraction %.5f, want %.5f", b, float64(l)/n, pl)
		}
	}
}
