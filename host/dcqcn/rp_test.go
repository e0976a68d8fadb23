package dcqcn

import (
	"math"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

const usec = time.Microsecond

// mbit returns f Mbit/s as a Rate (f may have a fraction).
func mbit(f float64) units.Rate { return units.Rate(math.Round(f * 1e6)) }

func gbit(f float64) units.Rate { return units.Rate(math.Round(f * 1e9)) }

func mustRP(tb testing.TB, p Params) *RP {
	tb.Helper()
	if err := p.Validate(); err != nil {
		tb.Fatalf("Validate: %v", err)
	}
	return NewRP(p, 0)
}

func checkRates(tb testing.TB, r *RP, step string, rc, rt units.Rate) {
	tb.Helper()
	if r.Rc() != rc || r.Rt() != rt {
		tb.Errorf("%s: Rc, Rt = %v, %v; want %v, %v", step, r.Rc(), r.Rt(), rc, rt)
	}
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// dcqcn.md vector 1: one CNP at 40 G, then timer-driven recovery.
func TestVector1OneCNP(t *testing.T) {
	for _, clampRt := range []bool{false, true} {
		p := PaperParams(40 * units.Gbit)
		p.ClampRtAtMaxRate = clampRt
		r := mustRP(t, p)
		if got := r.NextEvent(); got != Never {
			t.Fatalf("NextEvent before any CNP = %v, want Never", got)
		}
		if !r.OnCNP(0) {
			t.Fatal("first CNP not handled")
		}
		checkRates(t, r, "cut", gbit(20), gbit(40))
		if r.Alpha() != 1 {
			t.Errorf("α after the cut = %v, want exactly 1", r.Alpha())
		}
		steps := []struct {
			at time.Duration
			rc units.Rate
		}{
			{55 * usec, gbit(30)},
			{110 * usec, gbit(35)},
			{165 * usec, gbit(37.5)},
			{220 * usec, gbit(38.75)},
			{275 * usec, gbit(39.375)},
		}
		prev := gbit(20)
		for i, s := range steps {
			r.Advance(s.at - 1)
			checkRates(t, r, "just before step", prev, gbit(40))
			if got := r.NextEvent(); got != s.at {
				t.Errorf("step %d: NextEvent = %v, want %v", i+1, got, s.at)
			}
			r.Advance(s.at)
			checkRates(t, r, "fast recovery step", s.rc, gbit(40))
			prev = s.rc
		}
		if a := r.Alpha(); !near(a, 0.98062, 5e-6) {
			t.Errorf("α at 275 µs = %.6f, want 0.98062", a)
		}
		st := r.Stats()
		if st.FastRecoverySteps != 5 || st.AdditiveSteps != 0 || st.T != 5 || st.AlphaUpdates != 5 {
			t.Errorf("stats at 275 µs = %+v", st)
		}
		r.Advance(330 * usec)
		if clampRt {
			checkRates(t, r, "additive, Rt clamped", gbit(39.6875), gbit(40))
		} else {
			checkRates(t, r, "additive", gbit(39.7075), gbit(40.04))
		}
		if st := r.Stats(); st.AdditiveSteps != 1 || st.T != 6 {
			t.Errorf("stats at 330 µs = %+v", st)
		}
	}
}

// dcqcn.md vector 1 scaled to a 1 G line: the paper profile scales R_AI.
func TestVector1Scaled1G(t *testing.T) {
	r := mustRP(t, PaperParams(units.Gbit))
	r.OnCNP(0)
	want := []units.Rate{mbit(500), mbit(750), mbit(875), mbit(937.5), mbit(968.75), mbit(984.375)}
	for i, w := range want {
		r.Advance(time.Duration(i) * 55 * usec)
		if r.Rc() != w {
			t.Errorf("%d µs: Rc = %v, want %v", i*55, r.Rc(), w)
		}
	}
	r.Advance(330 * usec) // additive: Rt = 1 G + 1 Mbit/s
	checkRates(t, r, "additive at 1 G", mbit((1001+984.375)/2), mbit(1001))
}

// dcqcn.md vector 2: α = (255/256)^n without CNPs, then a ≈25 % cut.
func TestVector2AlphaDecay(t *testing.T) {
	k := 55 * usec
	r := mustRP(t, PaperParams(40*units.Gbit))
	r.OnCNP(0)
	tests := []struct {
		periods int
		want    float64
		tol     float64
	}{
		{1, 255.0 / 256, 0}, // exact
		{100, 0.6761, 5e-5},
		{177, 0.5, 2.5e-4}, // 0.50019 at 9.735 ms
	}
	for _, tc := range tests {
		r.Advance(time.Duration(tc.periods) * k)
		if got := r.Alpha(); !near(got, tc.want, tc.tol) {
			t.Errorf("α after %d periods = %.6f, want %.4f", tc.periods, got, tc.want)
		}
		if got := r.Alpha(); !near(got, math.Pow(255.0/256, float64(tc.periods)), 1e-12) {
			t.Errorf("α after %d periods = %.15f, want (255/256)^%d", tc.periods, got, tc.periods)
		}
	}
	if at := 177 * k; at != 9735*usec {
		t.Fatalf("177 K = %v, want 9.735 ms", at)
	}
	before := float64(r.Rc())
	r.OnCNP(177 * k)
	if cut := 1 - float64(r.Rc())/before; !near(cut, 0.25, 1e-3) {
		t.Errorf("cut after 177 periods = %.4f, want ≈ 0.25", cut)
	}
}

// dcqcn.md vector 3: a CNP every 50 µs < K = 55 µs.
func TestVector3CNPEvery50us(t *testing.T) {
	r := mustRP(t, PaperParams(40*units.Gbit))
	want := []units.Rate{gbit(20), gbit(10), gbit(5), gbit(2.5), gbit(1.25), gbit(0.625),
		gbit(0.3125), gbit(0.15625), mbit(100), mbit(100), mbit(100)}
	for i, w := range want {
		now := time.Duration(i) * 50 * usec
		if !r.OnCNP(now) {
			t.Fatalf("CNP %d ignored", i)
		}
		if r.Rc() != w {
			t.Errorf("CNP %d at %v: Rc = %v, want %v", i, now, r.Rc(), w)
		}
		if r.Alpha() != 1 {
			t.Errorf("CNP %d: α = %v, want 1", i, r.Alpha())
		}
	}
	st := r.Stats()
	if st.AlphaUpdates != 0 || st.FastRecoverySteps != 0 || st.RateCuts != uint64(len(want)) {
		t.Errorf("stats = %+v: α timer and increase timer must never fire", st)
	}
}

// dcqcn.md vector 4: the mlx5 first CNP. The cut is deferred to the end
// of the 4 µs monitor period, α is set to 1 on the first CNP without
// counting it, and four 1 µs α periods decay it to (1−g)^4 first.
func TestVector4MLX5FirstCNP(t *testing.T) {
	tests := []struct {
		name        string
		g, alpha0   int
		want, alpha float64
	}{
		{"g=1/256", 1020, 1024, 0.50777, 0.984466},
		{"g=5/1024", 1019, 1024, 0.50969, 0.980611},
		{"g=5/1024 initial_alpha_value=1023", 1019, 1023, 0.51017, 0.979654},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := MLX5Params(25 * units.Gbit)
			p.DCETCPG, p.InitialAlphaValue = tc.g, tc.alpha0
			r := mustRP(t, p)
			if !r.OnCNP(0) {
				t.Fatal("first CNP not handled")
			}
			checkRates(t, r, "before the deferred cut", gbit(25), gbit(25))
			if got := r.NextEvent(); got != 4*usec {
				t.Fatalf("NextEvent = %v, want 4µs", got)
			}
			r.Advance(4*usec - 1)
			checkRates(t, r, "1 ns before the cut", gbit(25), gbit(25))
			r.Advance(4 * usec)
			if f := float64(r.Rc()) / 25e9; !near(f, tc.want, 5e-6) {
				t.Errorf("Rc factor = %.6f, want %.5f", f, tc.want)
			}
			if !near(r.Alpha(), tc.alpha, 5e-6) {
				t.Errorf("α at the cut = %.6f, want %.5f", r.Alpha(), tc.alpha)
			}
			if r.Rt() != gbit(25) {
				t.Errorf("Rt = %v: clamp_tgt_rate_after_time_inc must not clamp before any timer increase", r.Rt())
			}
			if st := r.Stats(); st.AlphaUpdates != 4 || st.RateCuts != 1 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
	// The other orderings do not give 0.50777: cutting at once (leading
	// edge) uses α = 1 before any decay.
	p := MLX5Params(25 * units.Gbit)
	p.DCETCPG, p.InitialAlphaValue, p.ReduceTiming = 1020, 1024, ReduceLeadingEdge
	r := mustRP(t, p)
	r.OnCNP(0)
	if r.Rc() != gbit(12.5) {
		t.Errorf("leading-edge first cut: Rc = %v, want 12.5gbit", r.Rc())
	}
}

// Byte-counter stages, the additive → hyper transition and the hyper step
// size (min(T, BC) − F)·R_HAI.
func TestByteCounterAndHyperIncrease(t *testing.T) {
	p := PaperParams(40 * units.Gbit) // B = 10 MB, F = 5, R_AI 40 M, R_HAI 200 M
	r := mustRP(t, p)
	r.OnCNP(0)
	r.OnTransmit(1*usec, 10_000_000)
	checkRates(t, r, "BC=1 fast recovery", gbit(30), gbit(40))
	r.OnTransmit(2*usec, 5_000_000)
	if st := r.Stats(); st.BC != 1 || st.ByteCounter != 5_000_000 {
		t.Errorf("stats = %+v, want BC 1, ByteCounter 5e6", st)
	}
	r.OnTransmit(3*usec, 45_000_000) // 50 MB in all: BC 2..5 fast, BC 6 additive
	st := r.Stats()
	if st.BC != 6 || st.ByteCounter != 0 || st.FastRecoverySteps != 5 || st.AdditiveSteps != 1 {
		t.Errorf("after 60 MB: stats = %+v", st)
	}
	if r.Rt() != gbit(40.04) {
		t.Errorf("Rt = %v, want 40.04gbit", r.Rt())
	}
	steps := []struct {
		name   string
		do     func()
		rt     units.Rate
		hyper  uint64
		addSum uint64
	}{
		// T 1..5 with BC 6: max > F, min ≤ F: additive.
		{"T=1..5", func() { r.Advance(275 * usec) }, gbit(40.24), 0, 6},
		// T 6: min(6, 6) − 5 = 1.
		{"T=6", func() { r.Advance(330 * usec) }, gbit(40.44), 1, 6},
		// T 7: min(7, 6) − 5 = 1.
		{"T=7", func() { r.Advance(385 * usec) }, gbit(40.64), 2, 6},
		// BC 7: min(7, 7) − 5 = 2.
		{"BC=7", func() { r.OnTransmit(386*usec, 10_000_000) }, gbit(41.04), 3, 6},
	}
	for _, s := range steps {
		s.do()
		st := r.Stats()
		if r.Rt() != s.rt || st.HyperSteps != s.hyper || st.AdditiveSteps != s.addSum {
			t.Errorf("%s: Rt = %v hyper %d additive %d; want %v, %d, %d", s.name, r.Rt(), st.HyperSteps, st.AdditiveSteps, s.rt, s.hyper, s.addSum)
		}
		if r.Rc() != gbit(40) {
			t.Errorf("%s: Rc = %v, want capped at 40gbit", s.name, r.Rc())
		}
	}
}

// increase_rule=ns3: F−1 fast-recovery steps, hyper (min − F + 1)·R_HAI.
func TestIncreaseRuleNS3(t *testing.T) {
	p := PaperParams(40 * units.Gbit)
	p.IncreaseRule = IncreaseNS3
	p.RPGByteReset = 1000
	r := mustRP(t, p)
	r.OnCNP(0)
	r.OnTransmit(1*usec, 5000) // BC 1..4 fast, BC 5 additive
	if st := r.Stats(); st.FastRecoverySteps != 4 || st.AdditiveSteps != 1 {
		t.Errorf("stats = %+v, want 4 fast + 1 additive", st)
	}
	r.Advance(5 * 55 * usec) // T 1..4 additive, T 5: min(5,5) − 5 + 1 = 1
	rt := float64(r.Rt())
	r.Advance(6 * 55 * usec) // T 6: min(6,5) − 4 = 1 again
	if d := float64(r.Rt()) - rt; d != 200e6 {
		t.Errorf("hyper step = %v, want 200 Mbit/s", d)
	}
	if st := r.Stats(); st.HyperSteps != 2 || st.AdditiveSteps != 5 {
		t.Errorf("stats = %+v, want 2 hyper, 5 additive", st)
	}
}

func TestClampFlags(t *testing.T) {
	tests := []struct {
		name           string
		clamp, after   bool
		byTimer        bool // recover one stage by the timer (else by bytes)
		wantRt, wantRc units.Rate
	}{
		{"clamp_tgt_rate", true, false, true, gbit(30), gbit(15)},
		{"clamp_tgt_rate bytes", true, false, false, gbit(30), gbit(15)},
		{"neither", false, false, true, gbit(40), gbit(15)},
		{"after_time_inc, timer", false, true, true, gbit(30), gbit(15)},
		{"after_time_inc, bytes only", false, true, false, gbit(40), gbit(15)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := PaperParams(40 * units.Gbit)
			p.ClampTgtRate, p.ClampTgtRateAfterTimeInc = tc.clamp, tc.after
			p.RPGTimeReset = 10 * usec // one stage before the first α decay at 55 µs
			r := mustRP(t, p)
			r.OnCNP(0)
			checkRates(t, r, "first cut", gbit(20), gbit(40)) // T = 0: Rt stays at the line rate
			cnpAt := 11 * usec
			if tc.byTimer {
				r.Advance(10 * usec)
			} else {
				r.OnTransmit(5*usec, int(p.RPGByteReset))
				cnpAt = 8 * usec // before the timer's first stage
			}
			checkRates(t, r, "one fast-recovery stage", gbit(30), gbit(40))
			r.OnCNP(cnpAt)
			checkRates(t, r, "second cut", tc.wantRc, tc.wantRt)
		})
	}
}

func TestMinDecFacFloor(t *testing.T) {
	tests := []struct {
		gd, fac int
		want    units.Rate
	}{
		{11, 0, gbit(20)},    // α/2
		{11, 60, gbit(24)},   // floor above α/2
		{10, 0, mbit(100)},   // cut = α·Rc = all of it: Rmin
		{10, 50, gbit(20)},   // kept 50 %
		{10, 75, gbit(30)},   // kept 75 %
		{10, 100, gbit(40)},  // no reduction at all
		{12, 0, gbit(30)},    // α/4
		{1, 25, gbit(10)},    // 1 − 512α < 0: floor
		{1, 0, mbit(100)},    // 1 − 512α < 0: Rmin
		{15, 0, gbit(38.75)}, // α/32
	}
	for _, tc := range tests {
		p := PaperParams(40 * units.Gbit)
		p.RPGGD, p.RPGMinDecFac = tc.gd, tc.fac
		r := mustRP(t, p)
		r.OnCNP(0)
		if r.Rc() != tc.want {
			t.Errorf("rpg_gd %d rpg_min_dec_fac %d: Rc = %v, want %v", tc.gd, tc.fac, r.Rc(), tc.want)
		}
	}
}

func TestRateToSetOnFirstCNP(t *testing.T) {
	p := MLX5Params(25 * units.Gbit)
	p.RateToSetOnFirstCNP = 5 * units.Gbit
	r := mustRP(t, p)
	r.OnCNP(0)
	checkRates(t, r, "first CNP sets both", gbit(5), gbit(5))
	r.Advance(4 * usec)
	alpha := 1023.0 / 1024 * math.Pow(1019.0/1024, 4)
	if got, want := float64(r.Rc()), 5e9*(1-alpha/2); !near(got, want, 1) {
		t.Errorf("Rc after the deferred cut = %v, want %.0f", got, want)
	}
	if r.Rt() != gbit(5) {
		t.Errorf("Rt = %v, want 5gbit", r.Rt())
	}
	// Only the first CNP sets the rate.
	r.Advance(304 * usec) // one timer stage
	r.OnCNP(305 * usec)
	r.Advance(308 * usec)
	if r.Rt() == gbit(5) || r.Rc() >= r.Rt() {
		t.Errorf("second CNP: Rc, Rt = %v, %v: must clamp Rt to Rc and cut", r.Rc(), r.Rt())
	}
	// Off by default: the first cut starts from the line rate.
	r = mustRP(t, MLX5Params(25*units.Gbit))
	r.OnCNP(0)
	checkRates(t, r, "rate_to_set_on_first_cnp 0", gbit(25), gbit(25))
}

func TestRminFloorScaled(t *testing.T) {
	p := MLX5Params(units.Gbit) // Rmin 1 Mbit/s at 25 G = 40 kbit/s at 1 G
	p.ReduceTiming = ReduceLeadingEdge
	r := mustRP(t, p)
	for i := range 40 {
		r.OnCNP(time.Duration(i) * 4 * usec)
	}
	if r.Rc() != 40*units.Kbit {
		t.Errorf("Rc after 40 cuts = %v, want 40kbit", r.Rc())
	}
}

func TestMonitorPeriodIgnore(t *testing.T) {
	type cnp struct {
		at      time.Duration
		handled bool
	}
	tests := []struct {
		timing  ReduceTiming
		cnps    []cnp
		cuts    uint64
		ignored uint64
		next    time.Duration
	}{
		{ReduceDeferred, []cnp{{0, true}, {1 * usec, false}, {2 * usec, false}, {3 * usec, false},
			{4 * usec, true}, {5 * usec, false}, {9500, true}}, 2, 4, 12 * usec},
		{ReduceLeadingEdge, []cnp{{0, true}, {1 * usec, false}, {2 * usec, false}, {3 * usec, false},
			{4 * usec, true}, {5 * usec, false}, {9500, true}}, 3, 4, (9500 + 300*usec)},
	}
	for _, tc := range tests {
		t.Run(tc.timing.String(), func(t *testing.T) {
			p := MLX5Params(25 * units.Gbit)
			p.ReduceTiming = tc.timing
			r := mustRP(t, p)
			for _, c := range tc.cnps {
				if got := r.OnCNP(c.at); got != c.handled {
					t.Errorf("CNP at %v: handled = %v, want %v", c.at, got, c.handled)
				}
			}
			r.Advance(9500)
			st := r.Stats()
			if st.RateCuts != tc.cuts || st.CNPsIgnored != tc.ignored || st.CNPsHandled != uint64(len(tc.cnps))-tc.ignored {
				t.Errorf("stats = %+v, want %d cuts, %d ignored", st, tc.cuts, tc.ignored)
			}
			if got := r.NextEvent(); got != tc.next {
				t.Errorf("NextEvent = %v, want %v", got, tc.next)
			}
		})
	}
}

// Advance over 1 s idle with a 1 µs α period costs O(1) per rate-changing
// increase event, not O(α periods), and does not allocate.
func TestAdvanceCost(t *testing.T) {
	t.Run("mlx5 saturates", func(t *testing.T) {
		r := mustRP(t, MLX5Params(25*units.Gbit))
		r.OnCNP(0)
		r.loops = 0
		r.Advance(time.Second)
		st := r.Stats()
		if st.AlphaUpdates != 1_000_000 {
			t.Errorf("AlphaUpdates = %d, want 1e6", st.AlphaUpdates)
		}
		if st.T != (1_000_000-4)/300 || st.RateCuts != 1 {
			t.Errorf("T = %d, cuts %d; want %d timer stages, 1 cut", st.T, st.RateCuts, (1_000_000-4)/300)
		}
		if r.Rc() != gbit(25) || r.Rt() != gbit(25) {
			t.Errorf("Rc, Rt = %v, %v; want recovered to 25gbit", r.Rc(), r.Rt())
		}
		if r.loops > 100 {
			t.Errorf("Advance looped %d times for 1 s idle; want O(steps to recover)", r.loops)
		}
		if got := r.NextEvent(); got != Never {
			t.Errorf("NextEvent when recovered = %v, want Never", got)
		}
		now := time.Second
		if n := testing.AllocsPerRun(100, func() {
			now += time.Second
			r.Advance(now)
		}); n != 0 {
			t.Errorf("Advance allocates %v times", n)
		}
		if r.loops > 200 {
			t.Errorf("Advance looped %d times for 101 s idle", r.loops)
		}
	})
	t.Run("paper unclamped Rt", func(t *testing.T) {
		r := mustRP(t, PaperParams(40*units.Gbit))
		r.OnCNP(0)
		r.loops = 0
		r.Advance(time.Second)
		events := uint64(time.Second / (55 * usec))
		st := r.Stats()
		if st.T != events || st.AlphaUpdates != events || st.FastRecoverySteps != 5 || st.AdditiveSteps != events-5 {
			t.Errorf("stats = %+v, want T = α updates = %d, 5 fast", st, events)
		}
		// BC stays 0: every step after the 5th is additive, R_AI each.
		if want := gbit(40) + units.Rate(events-5)*40*units.Mbit; r.Rt() != want || r.Rc() != gbit(40) {
			t.Errorf("Rc, Rt = %v, %v; want 40gbit, %v", r.Rc(), r.Rt(), want)
		}
		if r.loops > 100 {
			t.Errorf("Advance looped %d times for %d increase events", r.loops, events)
		}
		if got := r.NextEvent(); got != Never {
			t.Errorf("NextEvent at the cap = %v, want Never", got)
		}
	})
}

// The closed forms (α decay over n periods, saturated increase events)
// agree with stepping one event at a time.
func TestClosedFormMatchesStepping(t *testing.T) {
	for _, name := range []string{"mlx5", "paper"} {
		t.Run(name, func(t *testing.T) {
			p, _ := Profile(name, 25*units.Gbit)
			p.RPGByteReset = 4096
			a, b := mustRP(t, p), mustRP(t, p)
			b.stepwise = true
			script := func(r *RP, fine bool) {
				step := func(to time.Duration) {
					if fine {
						for now := r.now; now < to; now += usec {
							r.Advance(now)
						}
					}
					r.Advance(to)
				}
				r.OnCNP(0)
				step(3 * time.Millisecond)
				if fine {
					for range 256 {
						r.OnTransmit(3*time.Millisecond, 4096)
					}
				} else {
					r.OnTransmit(3*time.Millisecond, 256*4096)
				}
				r.OnCNP(3*time.Millisecond + 2*usec)
				r.OnCNP(3*time.Millisecond + 3*usec)
				step(50 * time.Millisecond)
				r.OnCNP(50 * time.Millisecond)
				step(51 * time.Millisecond)
			}
			script(a, false)
			script(b, true)
			t.Logf("Rc %v Rt %v α %.6g %+v", a.Rc(), a.Rt(), a.Alpha(), a.Stats())
			if a.Stats() != b.Stats() {
				t.Errorf("stats differ:\nclosed %+v\nstep   %+v", a.Stats(), b.Stats())
			}
			if a.Rc() != b.Rc() || a.Rt() != b.Rt() {
				t.Errorf("rates differ: %v/%v vs %v/%v", a.Rc(), a.Rt(), b.Rc(), b.Rt())
			}
			if !near(a.Alpha(), b.Alpha(), 1e-12) {
				t.Errorf("α differs: %v vs %v", a.Alpha(), b.Alpha())
			}
		})
	}
}

func TestTimeNeverRunsBackwards(t *testing.T) {
	r := mustRP(t, PaperParams(40*units.Gbit))
	r.OnCNP(100 * usec)
	r.Advance(200 * usec)
	rc := r.Rc()
	r.Advance(50 * usec) // ignored
	r.OnTransmit(10*usec, 1)
	if r.Rc() != rc || r.now != 200*usec {
		t.Errorf("going back in time changed the state: Rc %v → %v, now %v", rc, r.Rc(), r.now)
	}
}

func TestNewRPPanicsOnInvalidParams(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewRP with LineRate 0 did not panic")
		}
	}()
	NewRP(Params{}, 0)
}

func BenchmarkRPOnTransmit(b *testing.B) {
	r := NewRP(MLX5Params(25*units.Gbit), 0)
	var now time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now += 330 // a 1 KB packet at 25 Gbit/s
		if i%1024 == 0 {
			r.OnCNP(now)
		}
		r.OnTransmit(now, 1024)
	}
}

func BenchmarkRPAdvance(b *testing.B) {
	r := NewRP(MLX5Params(25*units.Gbit), 0)
	var now time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now += usec
		if i%100 == 0 {
			r.OnCNP(now)
		}
		r.Advance(now)
	}
}

// rate_validation: vector 1 at 1 G with the QP sending exactly at Rc
// recovers as without validation; a QP that sends nothing, or half of Rc,
// keeps its Rc, Rt and stages; once it sends at Rc again the recovery
// resumes where it stopped (fast recovery, not a hyper jump).
func TestRateValidation(t *testing.T) {
	p := PaperParams(units.Gbit)
	p.RateValidation = 75
	const T = 55 * usec
	sendAtRc := func(r *RP, from, to time.Duration, share float64) {
		// 1 µs sends of share·Rc, as a paced sender would.
		for at := from + usec; at <= to; at += usec {
			r.OnTransmit(at, int(share*float64(r.Rc())/8*1e-6+0.5))
		}
	}

	r := mustRP(t, p)
	r.OnCNP(0)
	sendAtRc(r, 0, 5*T, 1)
	if r.Rc() != mbit(984.375) || r.Stats().ValidationHolds != 0 {
		t.Errorf("sending at Rc: Rc %v after 5 steps, %d holds; want 984.375 Mbit/s, 0 holds", r.Rc(), r.Stats().ValidationHolds)
	}

	r = mustRP(t, p)
	r.OnCNP(0)
	r.Advance(10 * T) // idle: nothing sent
	checkRates(t, r, "idle for 10 periods", mbit(500), gbit(1))
	if st := r.Stats(); st.ValidationHolds != 10 || st.T != 0 || st.FastRecoverySteps != 0 {
		t.Errorf("idle: stats %+v, want 10 holds and no stage", st)
	}
	sendAtRc(r, 10*T, 12*T, 0.5) // window- or CPU-limited at half of Rc
	checkRates(t, r, "at half of Rc", mbit(500), gbit(1))
	sendAtRc(r, 12*T, 13*T, 1)
	checkRates(t, r, "first step after sending at Rc", mbit(750), gbit(1))
	if st := r.Stats(); st.ValidationHolds != 12 || st.T != 1 || st.FastRecoverySteps != 1 {
		t.Errorf("resumed: stats %+v, want 12 holds, T 1, one fast-recovery step", st)
	}

	// Off (0): the same idle QP recovers on the timer alone (vector 1).
	p.RateValidation = 0
	r = mustRP(t, p)
	r.OnCNP(0)
	r.Advance(5 * T)
	checkRates(t, r, "validation off, idle", mbit(984.375), gbit(1))

	// Byte-counter stages are validated too: B bytes sent in a burst far
	// below Rc·period do not count.
	p = PaperParams(units.Gbit)
	p.RateValidation = 75
	p.RPGByteReset = 10_000
	p.RPGTimeReset = 10 * time.Millisecond
	p.DCETCPRTT = 10 * time.Millisecond
	r = mustRP(t, p)
	r.OnCNP(0)
	r.OnTransmit(5*time.Millisecond, 10_000) // 16 Mbit/s against Rc 500
	checkRates(t, r, "slow bytes", mbit(500), gbit(1))
	r.OnTransmit(5*time.Millisecond+100*usec, 10_000) // 800 Mbit/s over 100 µs
	checkRates(t, r, "bytes at Rc", mbit(750), gbit(1))
	if st := r.Stats(); st.BC != 1 || st.ValidationHolds != 1 {
		t.Errorf("byte counter: stats %+v, want BC 1, 1 hold", st)
	}
}

// HoldIncreases (a PPFC alarm): vector 1 at 1 G with the increase events
// of a hold skipped one by one, Rc, Rt and the stages standing still; the
// recovery resumes where it stopped at the first event after the hold. A
// cut in a hold still cuts; an earlier end does not shorten a hold;
// byte-counter stages are held too; a hold set before the first CNP holds
// the recovery from it.
func TestHoldIncreases(t *testing.T) {
	const T = 55 * usec
	r := mustRP(t, PaperParams(units.Gbit))
	r.OnCNP(0)
	r.HoldIncreases(10*usec, 2*T+10*usec) // holds the events at T and 2T
	if got := r.NextEvent(); got != 3*T {
		t.Errorf("NextEvent in the hold = %v, want %v (the first event after it)", got, 3*T)
	}
	r.HoldIncreases(20*usec, T) // earlier: no change
	if r.HeldUntil() != 2*T+10*usec {
		t.Errorf("HeldUntil = %v after an earlier end, want %v", r.HeldUntil(), 2*T+10*usec)
	}
	r.Advance(T)
	checkRates(t, r, "first event held", mbit(500), gbit(1))
	r.Advance(3*T - 1)
	checkRates(t, r, "second event held", mbit(500), gbit(1))
	if st := r.Stats(); st.IncreaseHolds != 2 || st.T != 0 || st.FastRecoverySteps != 0 {
		t.Errorf("in the hold: stats %+v, want 2 holds, T 0, no step", st)
	}
	r.Advance(3 * T)
	checkRates(t, r, "first event after the hold", mbit(750), gbit(1))
	r.Advance(4 * T)
	checkRates(t, r, "second", mbit(875), gbit(1))
	if st := r.Stats(); st.IncreaseHolds != 2 || st.T != 2 || st.FastRecoverySteps != 2 {
		t.Errorf("after the hold: stats %+v, want 2 holds, T 2, 2 fast-recovery steps", st)
	}

	// A CNP in a hold cuts; the timer restarts from the cut and its
	// events stay held until the hold ends.
	r.HoldIncreases(4*T, 4*T+200*usec)
	r.OnCNP(4*T + 10*usec) // α ≈ 1: Rc halves, Rt = Rc before (clamp_tgt_rate)
	rc := r.Rc()
	r.Advance(4*T + 200*usec - 1) // events at +65, +120, +175 µs held
	if r.Rc() != rc || r.Stats().IncreaseHolds != 5 {
		t.Errorf("cut in a hold: Rc %v → %v, %d holds; want unchanged, 5", rc, r.Rc(), r.Stats().IncreaseHolds)
	}
	if got, want := r.NextEvent(), 4*T+10*usec+4*T; got != want {
		t.Errorf("NextEvent = %v, want %v", got, want)
	}
	r.Advance(8*T + 10*usec)
	if r.Rc() <= rc || r.Stats().T != 1 {
		t.Errorf("after the hold: Rc %v (cut to %v), T %d; want a fast-recovery step, T 1", r.Rc(), rc, r.Stats().T)
	}

	// Byte-counter stages in a hold are held too.
	p := PaperParams(units.Gbit)
	p.RPGByteReset = 10_000
	r = mustRP(t, p)
	r.OnCNP(0)
	r.HoldIncreases(0, 50*usec)
	r.OnTransmit(10*usec, 25_000) // two stages
	checkRates(t, r, "bytes in a hold", mbit(500), gbit(1))
	if st := r.Stats(); st.BC != 0 || st.IncreaseHolds != 2 || st.ByteCounter != 5_000 {
		t.Errorf("bytes in a hold: stats %+v, want BC 0, 2 holds, 5000 bytes counted on", st)
	}
	r.OnTransmit(50*usec, 5_000)
	checkRates(t, r, "bytes after the hold", mbit(750), gbit(1))

	// A hold before the first CNP holds the recovery from it.
	r = mustRP(t, PaperParams(units.Gbit))
	r.HoldIncreases(0, 100*usec)
	r.OnCNP(10 * usec)
	r.Advance(10*usec + T) // held
	checkRates(t, r, "held from before the CNP", mbit(500), gbit(1))
	r.Advance(10*usec + 2*T)
	checkRates(t, r, "after", mbit(750), gbit(1))
}

// The hold's closed form (skipHeld) and nextEvent agree with stepping
// through every µs.
func TestHoldClosedFormMatchesStepping(t *testing.T) {
	p, _ := Profile("mlx5", 25*units.Gbit)
	a, b := mustRP(t, p), mustRP(t, p)
	b.stepwise = true
	for _, r := range []*RP{a, b} {
		r.OnCNP(0)
		r.HoldIncreases(100*usec, 5*time.Millisecond)
		r.OnCNP(2 * time.Millisecond)
	}
	for now := time.Duration(0); now <= 8*time.Millisecond; now += usec {
		b.Advance(now)
	}
	a.Advance(8 * time.Millisecond)
	if a.Stats() != b.Stats() || a.Rc() != b.Rc() || a.Rt() != b.Rt() {
		t.Errorf("closed form %v/%v %+v\nstepping    %v/%v %+v", a.Rc(), a.Rt(), a.Stats(), b.Rc(), b.Rt(), b.Stats())
	}
	if a.Stats().IncreaseHolds == 0 {
		t.Error("no event held")
	}
}
