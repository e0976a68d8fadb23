package nscc

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/cc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

const us = time.Microsecond

// ref is uet.md's quadrant setting: 100 Gbit/s and 12 µs, so a = b = 1,
// tq = 12 µs, MaxWnd 225 000 B, fi 20 480 B, alpha·tq = 4·MTU.
func ref(cwnd int) Params {
	p := DefaultParams(100*units.Gbit, 12*us, 4096)
	p.InitialCwndBytes = cwnd
	return p
}

// lab is the lab's setting: 1 Gbit/s, 80 µs, MTU 4096 (MaxWnd 15 000 B).
func lab() Params { return DefaultParams(units.Gbit, 80*us, 4096) }

func mustNew(tb testing.TB, p Params, now time.Duration) *Controller {
	tb.Helper()
	if err := p.Validate(); err != nil {
		tb.Fatalf("Validate: %v", err)
	}
	return New(p, now)
}

// ackAt sends one ACK of newly bytes whose packet saw queueing delay
// delay over base_rtt (RTT = base_rtt + delay).
func ackAt(c *Controller, now time.Duration, newly int, delay time.Duration, ecn bool, inFlight int) {
	c.OnAck(now, cc.AckSample{NewlyAcked: newly, RTT: c.BaseRTT() + delay, RTTValid: true, ECN: ecn, InFlight: inFlight})
}

func checkWindow(tb testing.TB, c *Controller, step string, want int) {
	tb.Helper()
	if got := c.Window(); got != want {
		tb.Errorf("%s: cwnd = %d, want %d (exact %.4f)", step, got, want, c.cwnd)
	}
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func floor(x float64) int { return int(math.Floor(x)) }

// uet.md "Quadrant check at a = 1, tq = 12 µs": ECN with avg delay 24 µs →
// cwnd × 0.6; 60 µs → × 0.5 (clamped); ECN below tq → unchanged. The
// adjust period is pushed out so that eta stays out of the numbers.
func TestQuadrantVectors(t *testing.T) {
	tests := []struct {
		name       string
		avg, delay time.Duration
		want       int
	}{
		{"ECN, avg 24µs", 24 * us, 24 * us, 60000},                                                      // 1 − 0.8·12/24
		{"ECN, avg 60µs: max_md_jump", 60 * us, 60 * us, 50000},                                         // 1 − 0.8·48/60 = 0.36 < 0.5
		{"ECN below tq", 24 * us, 6 * us, 100000},                                                       // quadrant 3: no change
		{"ECN at tq, avg below tq", 10 * us, 12 * us, 100000},                                           // MD only if avg > tq
		{"ECN at tq exactly, avg 24µs", 24 * us, 12 * us, floor(1e5 * (1 - 0.8*(23850.0-12000)/23850))}, // delay ≥ tq is quadrant 4; the 12 µs sample moves avg to 23.85 µs
		{"ECN just below tq", 24 * us, 12*us - 1, 100000},                                               // quadrant 3
		{"ECN, avg 16µs", 16 * us, 16 * us, 100000 * 4 / 5},                                             // 1 − 0.8·4/16 = 0.8
		{"ECN, avg 13µs", 13 * us, 13 * us, floor(1e5 * (1 - 0.8/13))},                                  // 0.93846…
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := ref(100000)
			p.AdjustPeriodThreshold = time.Millisecond
			c := mustNew(t, p, 0)
			c.avgDelay = float64(tc.avg)
			// Where the sample equals the average the EWMA stays put.
			ackAt(c, 13*us, 4096, tc.delay, true, 100000)
			checkWindow(t, c, "after the ECN ACK", tc.want)
		})
	}
}

// §3.6.13.6 multiplicative_decrease: at most once per base_rtt, counted
// from the CCC's creation (last_dec_time = now, Table 3-77), strictly
// more than base_rtt apart.
func TestMDOncePerBaseRTT(t *testing.T) {
	p := ref(100000)
	p.AdjustPeriodThreshold = time.Millisecond
	c := mustNew(t, p, 0)
	c.avgDelay = float64(24 * us)
	steps := []struct {
		at   time.Duration
		want int
	}{
		{12 * us, 100000},  // 12 µs after creation: not > base_rtt
		{12*us + 1, 60000}, // first MD
		{20 * us, 60000},   // 8 µs later
		{24*us + 1, 60000}, // exactly base_rtt later
		{24*us + 2, 36000}, // > base_rtt: second MD
		{36*us + 3, 21600}, // third
		{48*us + 4, 12960}, // fourth
		{60*us + 5, 7776},  // fifth
		{72*us + 6, 4665},  // 4665.6
		{84*us + 7, 4096},  // floor: MTU
	}
	for _, s := range steps {
		ackAt(c, s.at, 4096, 24*us, true, 1000)
		checkWindow(t, c, s.at.String(), s.want)
	}
	if st := c.Stats(); st.Decreases != 7 || st.ECNAboveTargetAcks != uint64(len(steps)) {
		t.Errorf("stats: %d decreases of %d candidates, want 7 of %d", st.Decreases, st.ECNAboveTargetAcks, len(steps))
	}
}

// Fair increase adds fi per window whatever cwnd is (inc_bytes is divided
// by cwnd); proportional increase adds alpha·(tq − delay) per window.
func TestFairAndProportionalIncrease(t *testing.T) {
	for _, w := range []int{50000, 100000, 200000} {
		// One cumulative ACK of a whole window: received > 8 MTU, so the
		// fulfill adjustment runs on it; 1 µs in, no eta.
		c := mustNew(t, ref(w), 0)
		ackAt(c, us, w, 12*us, false, 0) // delay = tq: fair
		checkWindow(t, c, "fair, one window", w+20480)
		if st := c.Stats(); st.FairAcks != 1 || st.Fulfills != 1 || st.EtaAdds != 0 || !near(st.FairIncreaseBytes, 20480, 1e-9) {
			t.Errorf("cwnd %d fair: stats %+v", w, st)
		}

		for _, d := range []time.Duration{3 * us, 9 * us} {
			c := mustNew(t, ref(w), 0)
			ackAt(c, us, w, d, false, 0)
			// alpha·(tq − delay) = 4·4096·(12 − d)/12 bytes per window.
			want := float64(w) + 4*4096*float64(12*us-d)/float64(12*us)
			if !near(c.cwnd, want, 1e-6) {
				t.Errorf("cwnd %d proportional at %v: cwnd %.6f, want %.6f", w, d, c.cwnd, want)
			}
			if st := c.Stats(); st.ProportionalAcks != 1 || !near(st.ProportionalIncreaseBytes, want-float64(w), 1e-6) {
				t.Errorf("cwnd %d proportional at %v: stats %+v", w, d, st)
			}
		}
	}
	// Lab numbers: fi = 1365.33 B and alpha·tq = 7281.78 B per window,
	// eta 40.96 B per 80 µs; 10 000 B acked in one adjust period.
	p := lab()
	p.InitialCwndBytes = 10000
	c := mustNew(t, p, 0)
	ackAt(c, 80*us, 10000, 80*us, false, 0)
	checkWindow(t, c, "lab fair", floor(10000+4096*5/15.0+4096*0.15/15))
	p.InitialCwndBytes = 5000
	c = mustNew(t, p, 0)
	ackAt(c, 80*us, 5000, 2*us, false, 0) // 78/80 of alpha·tq
	checkWindow(t, c, "lab proportional", floor(5000+4*4096/15.0*(80/12.0)*78/80+4096*0.15/15))
}

// §3.6.13.6 fast_increase: after more than a cwnd of bytes came back with
// delay < 1 µs, each such ACK adds newly·fi_scale at once; a delay ends it.
func TestFastIncrease(t *testing.T) {
	c := mustNew(t, ref(8192), 0)
	steps := []struct {
		delay time.Duration
		want  int
		fast  bool
	}{
		{0, 8192, false},   // fi_count 4096
		{999, 8192, false}, // 8192: not > cwnd; 999 ns still "no delay"
		{0, 9216, true},    // 12288 > 8192: + 4096·0.25
		{500, 10240, true}, // in increase mode
		{us, 10240, false}, // 1 µs is a delay: mode off, fi_count 0
		{0, 10240, false},  // counting again from 0
		{0, 10240, false},  // 8192
		{0, 11264, true},   // 12288 > 10240
	}
	for i, s := range steps {
		before := c.Stats().FastIncreaseAcks
		ackAt(c, time.Duration(i+1)*us, 4096, s.delay, false, 0)
		checkWindow(t, c, fmt.Sprintf("ACK %d", i+1), s.want)
		if fast := c.Stats().FastIncreaseAcks > before; fast != s.fast {
			t.Errorf("ACK %d: fast increase %v, want %v", i+1, fast, s.fast)
		}
	}
	st := c.Stats()
	if st.FastIncreaseAcks != 3 || st.ProportionalAcks != 5 || st.FastIncreaseBytes != 3072 || st.Fulfills != 0 {
		t.Errorf("stats %+v", st)
	}
	// An MD candidate turns the mode off too.
	c.avgDelay = float64(24 * us)
	ackAt(c, 9*us, 4096, 24*us, true, 0)
	if c.increase || c.fiCount != 0 {
		t.Errorf("after an ECN ACK above tq: increase %v, fi_count %d; want off, 0", c.increase, c.fiCount)
	}
	// Fast increase stops at MaxWnd (no fulfill adjustment here).
	p := ref(224000)
	p.AdjustBytesThreshold, p.AdjustPeriodThreshold = 1<<30, time.Second
	c = mustNew(t, p, 0)
	for i := range 60 {
		ackAt(c, time.Duration(i+1)*100, 4096, 0, false, 0)
	}
	checkWindow(t, c, "fast increase at MaxWnd", 225000)
}

// §3.6.13.5: fulfill when adjust_period_threshold has passed since the
// last eta, or when more than adjust_bytes_threshold was received; eta
// only once per period however many fulfills run in it (htsim PR #129).
func TestFulfillTiming(t *testing.T) {
	c := mustNew(t, ref(100000), 0)
	per := 4096 * 4 * 4096 * 9.0 / 12 // inc_bytes of one ACK at delay 3 µs
	want := 100000.0
	ack := func(at time.Duration) { ackAt(c, at, 4096, 3*us, false, 0) }
	check := func(step string, fulfills, etas uint64) {
		t.Helper()
		st := c.Stats()
		if st.Fulfills != fulfills || st.EtaAdds != etas || !near(c.cwnd, want, 1e-6) {
			t.Errorf("%s: %d fulfills, %d etas, cwnd %.6f; want %d, %d, %.6f",
				step, st.Fulfills, st.EtaAdds, c.cwnd, fulfills, etas, want)
		}
	}
	for i := 1; i <= 8; i++ {
		ack(time.Duration(i) * us) // 8·4096 = 32768: not more than the threshold
	}
	check("8 MTU received", 0, 0)
	ack(9 * us) // 36 864 > 32 768: by bytes, 9 µs < period: no eta
	want += 9 * per / want
	check("9 MTU received", 1, 0)
	ack(12*us - 1)
	check("1 ns before the period", 1, 0)
	ack(12 * us) // the period since creation: fulfill and eta
	want += 2 * per / want
	want += 614.4
	check("period", 2, 1)
	for i := 1; i <= 9; i++ {
		ack(12*us + time.Duration(i)*us) // 9 more MTU: by bytes, no eta
	}
	want += 9 * per / want
	check("by bytes within the second period", 3, 1)
	ack(24*us - 1)
	check("before the second period", 3, 1)
	ack(24 * us)
	want += 2 * per / want
	want += 614.4
	check("second period", 4, 2)
	// Idle for long: one fulfill, one eta, not one per period missed.
	ack(time.Millisecond)
	want += per / want
	want += 614.4
	check("after 1 ms idle", 5, 3)
	if st := c.Stats(); !near(st.EtaBytes, 3*614.4, 1e-9) {
		t.Errorf("EtaBytes = %v, want 1843.2", st.EtaBytes)
	}
}

// MaxWnd bounds every increase; MTU is the floor of every decrease.
func TestWindowBounds(t *testing.T) {
	c := mustNew(t, lab(), 0)
	checkWindow(t, c, "initial = MaxWnd", 15000)
	if c.MaxWnd() != 15000 {
		t.Fatalf("MaxWnd = %d, want 15000", c.MaxWnd())
	}
	for i := range 50 {
		ackAt(c, time.Duration(i)*20*us, 4096, 0, false, 0) // proportional, fast, eta
	}
	checkWindow(t, c, "after increases", 15000)
	ackAt(c, 2*time.Millisecond, 4096, 100*us, false, 0) // fair
	checkWindow(t, c, "after a fair increase", 15000)

	// Decreases, with no fulfill adjustment (eta) in between.
	p := lab()
	p.AdjustPeriodThreshold = time.Second
	c = mustNew(t, p, 0)
	c.avgDelay = float64(time.Millisecond) // factor clamps at max_md_jump 0.5
	for i := range 5 {
		ackAt(c, 3*time.Millisecond+time.Duration(i)*100*us, 4096, time.Millisecond, true, 0)
	}
	checkWindow(t, c, "after 5 MDs", 4096)
	c.OnLoss(4*time.Millisecond, 4096)
	checkWindow(t, c, "after a loss at the floor", 4096)
	c.OnNack(4*time.Millisecond, 4096)
	checkWindow(t, c, "after a NACK at the floor", 4096)
	if !c.CanSend(0, 4096) || c.CanSend(1, 4096) {
		t.Error("at the floor one MTU packet must fit and no more")
	}
}

// §3.6.13.6 quick_adapt: at the end of a window of base_rtt + tq, a trim
// or a delay above qa_threshold with less than MaxWnd >> qa_gate achieved
// sets cwnd to what was achieved.
func TestQuickAdapt(t *testing.T) {
	// ref: qa_threshold 48 µs, MaxWnd >> 3 = 28 125 B, window 24 µs.
	t.Run("fires", func(t *testing.T) {
		c := mustNew(t, ref(0), 0)
		ackAt(c, us, 4096, 0, false, 200000)        // opens the window: ends at 25 µs
		ackAt(c, 10*us, 4096, 60*us, false, 200000) // delay > 48 µs, but mid-window
		checkWindow(t, c, "mid-window", 225000)
		ackAt(c, 25*us, 4096, 60*us, false, 50000) // window over: achieved 8192
		checkWindow(t, c, "quick adapt", 8192)
		st := c.Stats()
		if st.QuickAdapts != 1 || st.QuickAdaptBytes != 225000-8192 || c.bytesToIgnore != 50000 {
			t.Errorf("stats %+v, bytes_to_ignore %d", st, c.bytesToIgnore)
		}
		if c.qaEnd != 49*us {
			t.Errorf("next window ends at %v, want 49µs", c.qaEnd)
		}
	})
	t.Run("not below the gate", func(t *testing.T) {
		c := mustNew(t, ref(0), 0)
		ackAt(c, us, 4096, 0, false, 200000)
		ackAt(c, 10*us, 24576, 60*us, false, 200000)
		ackAt(c, 25*us, 4096, 60*us, false, 200000) // achieved 28 672 ≥ 28 125
		if st := c.Stats(); st.QuickAdapts != 0 {
			t.Errorf("quick adapt with 28672 B achieved: %+v", st)
		}
	})
	t.Run("not without a trigger", func(t *testing.T) {
		c := mustNew(t, ref(0), 0)
		ackAt(c, us, 4096, 0, false, 200000)
		ackAt(c, 25*us, 4096, 48*us, true, 200000) // delay = threshold: not above
		if st := c.Stats(); st.QuickAdapts != 0 {
			t.Errorf("quick adapt at delay = qa_threshold: %+v", st)
		}
	})
	t.Run("one per window", func(t *testing.T) {
		c := mustNew(t, ref(0), 0)
		ackAt(c, us, 4096, 0, false, 0)
		ackAt(c, 25*us, 4096, 60*us, false, 0)
		ackAt(c, 48*us, 4096, 60*us, false, 0) // before 49 µs
		ackAt(c, 49*us, 4096, 60*us, false, 0) // next window: achieved 8192 again
		if st := c.Stats(); st.QuickAdapts != 2 {
			t.Errorf("quick adapts = %d, want 2 (25 and 49 µs)", st.QuickAdapts)
		}
	})
	t.Run("ignores the ECN of what was in flight", func(t *testing.T) {
		p := ref(0)
		p.AdjustPeriodThreshold = time.Millisecond // no eta in the numbers
		c := mustNew(t, p, 0)
		ackAt(c, us, 4096, 0, false, 0)
		ackAt(c, 25*us, 4096, 60*us, false, 50000) // QA: cwnd 4096, ignore 50 000 B
		checkWindow(t, c, "quick adapt", 4096)
		c.cwnd = 10000 // as if it had grown back
		c.avgDelay = float64(24 * us)
		for i := 1; i <= 12; i++ { // 49 152 B < 50 000
			ackAt(c, 25*us+time.Duration(i)*us, 4096, 24*us, true, 0)
		}
		checkWindow(t, c, "12 ECN ACKs ignored", 10000)
		if st := c.Stats(); st.Ignored != 12 || st.Decreases != 0 || st.ECNAboveTargetAcks != 0 {
			t.Errorf("ignore phase stats %+v", st)
		}
		ackAt(c, 38*us, 4096, 24*us, true, 0) // 53 248 ≥ 50 000: MD again
		checkWindow(t, c, "first MD after the ignore phase", 6000)
	})
	t.Run("no ECN is not ignored", func(t *testing.T) {
		c := mustNew(t, ref(0), 0)
		ackAt(c, us, 4096, 0, false, 0)
		ackAt(c, 25*us, 4096, 60*us, false, 50000)
		ackAt(c, 26*us, 8192, 24*us, false, 0) // fair increase; fulfill (period)
		if st := c.Stats(); st.Ignored != 0 || st.FairAcks != 1 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		p := ref(0)
		p.DisableQuickAdapt = true
		c := mustNew(t, p, 0)
		ackAt(c, us, 4096, 0, false, 0)
		ackAt(c, 25*us, 4096, 60*us, false, 0)
		c.OnNack(26*us, 4096)
		if st := c.Stats(); st.QuickAdapts != 0 || st.NackDecreases != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}

// §3.6.13.5 NSCC.OnNACK (htsim updateCwndOnNack_NSCC).
func TestNack(t *testing.T) {
	t.Run("trim mid-window: cwnd loses the packet, quick adapt armed", func(t *testing.T) {
		c := mustNew(t, ref(100000), 0)
		ackAt(c, us, 4096, 0, false, 50000) // window to 25 µs
		avg := c.avgDelay
		c.OnNackSample(2*us, NackSample{Size: 4096, Reason: NackTrimmed, InFlight: 40000})
		checkWindow(t, c, "trim NACK", 95904)
		// The delay EWMA took a sample of config_base_rtt.
		if want := 0.0125*float64(12*us) + 0.9875*avg; !near(c.avgDelay, want, 1e-9) {
			t.Errorf("avg delay %.3f ns, want %.3f", c.avgDelay, want)
		}
		if !c.triggerQA {
			t.Error("trigger_qa not set")
		}
		ackAt(c, 10*us, 4096, 0, false, 40000) // achieved 4096 in this window
		// The next ACK after the window fires quick adapt without delay.
		ackAt(c, 25*us, 4096, 0, false, 30000)
		checkWindow(t, c, "quick adapt on trigger_qa", 8192)
		if st := c.Stats(); st.QuickAdapts != 1 || st.NackDecreases != 1 || st.NackBytes != 4096 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("trim at the window end: quick adapt instead of the cut", func(t *testing.T) {
		c := mustNew(t, ref(100000), 0)
		ackAt(c, us, 4096, 0, false, 50000)
		ackAt(c, 2*us, 4096, 0, false, 50000)
		c.OnNackSample(25*us, NackSample{Size: 4096, Reason: NackTrimmed, InFlight: 45000})
		checkWindow(t, c, "quick adapt", 4096) // achieved 4096 (the first ACK opened the window)
		if st := c.Stats(); st.QuickAdapts != 1 || st.NackDecreases != 0 || c.bytesToIgnore != 45000 {
			t.Errorf("stats %+v, bytes_to_ignore %d", st, c.bytesToIgnore)
		}
		// Trims of what was in flight are ignored too.
		c.cwnd = 20000
		c.OnNackSample(26*us, NackSample{Size: 4096, Reason: NackTrimmed, InFlight: 40000})
		checkWindow(t, c, "trim in the ignore phase", 20000)
	})
	t.Run("last hop with RCCC: left to credits", func(t *testing.T) {
		p := ref(100000)
		p.RCCC = true
		c := mustNew(t, p, 0)
		c.OnNackSample(2*us, NackSample{Size: 4096, Reason: NackTrimmedLastHop, InFlight: 40000})
		checkWindow(t, c, "last-hop trim, RCCC", 100000)
		if c.triggerQA || c.avgDelay == 0 || c.bytesIgnored != 4096 {
			t.Errorf("trigger_qa %v, avg %v, bytes_ignored %d: want false, > 0, 4096", c.triggerQA, c.avgDelay, c.bytesIgnored)
		}
	})
	t.Run("last hop without RCCC: a trim", func(t *testing.T) {
		c := mustNew(t, ref(100000), 0)
		ackAt(c, us, 4096, 0, false, 0)
		c.OnNackSample(2*us, NackSample{Size: 4096, Reason: NackTrimmedLastHop, InFlight: 40000})
		checkWindow(t, c, "last-hop trim", 95904)
	})
	t.Run("other codes: base_rtt only", func(t *testing.T) {
		c := mustNew(t, ref(100000), 0)
		c.OnNackSample(2*us, NackSample{Size: 4096, Reason: NackOther, RTT: 10 * us, RTTValid: true})
		checkWindow(t, c, "NO_PKT_BUFFER-like NACK", 100000)
		if c.avgDelay != 0 || c.triggerQA || c.BaseRTT() != 10*us {
			t.Errorf("avg %v trigger %v base %v: want 0, false, 10µs", c.avgDelay, c.triggerQA, c.BaseRTT())
		}
	})
	t.Run("OnNack is a trim with the last known in-flight", func(t *testing.T) {
		c := mustNew(t, ref(100000), 0)
		ackAt(c, us, 4096, 0, false, 0)
		ackAt(c, 2*us, 4096, 0, false, 40000)
		c.OnNack(25*us, 4096) // window end: quick adapt, ignoring 40 000 − 4096 B
		if st := c.Stats(); st.QuickAdapts != 1 || c.bytesToIgnore != 35904 {
			t.Errorf("stats %+v, bytes_to_ignore %d", st, c.bytesToIgnore)
		}
	})
}

// §3.6.13.5 NSCC.OnInferredLoss: cwnd = max(cwnd − size, MTU), nothing else.
func TestInferredLoss(t *testing.T) {
	c := mustNew(t, ref(100000), 0)
	c.OnLoss(us, 4096)
	checkWindow(t, c, "loss", 95904)
	if st := c.Stats(); st.Losses != 1 || st.LossBytes != 4096 || st.QuickAdapts != 0 || c.triggerQA {
		t.Errorf("stats %+v, trigger_qa %v", st, c.triggerQA)
	}
	if c.bytesIgnored != 4096 {
		t.Errorf("bytes_ignored %d, want 4096", c.bytesIgnored)
	}
	for range 30 {
		c.OnLoss(2*us, 4096)
	}
	checkWindow(t, c, "30 more losses", 4096)
}

// base_rtt is the smallest valid sample (ACK or NACK), and MaxWnd follows
// it (§3.6.13.6 update_base_rtt), never below one MTU.
func TestBaseRTT(t *testing.T) {
	c := mustNew(t, lab(), 0)
	if c.BaseRTT() != 80*us || c.MaxWnd() != 15000 {
		t.Fatalf("start: base %v MaxWnd %d", c.BaseRTT(), c.MaxWnd())
	}
	c.OnAck(us, cc.AckSample{NewlyAcked: 4096, RTT: 90 * us, RTTValid: true})
	if c.BaseRTT() != 80*us {
		t.Errorf("a longer sample moved base_rtt to %v", c.BaseRTT())
	}
	c.OnAck(2*us, cc.AckSample{NewlyAcked: 4096, RTT: 20 * us, RTTValid: false})
	if c.BaseRTT() != 80*us {
		t.Errorf("an invalid sample moved base_rtt to %v", c.BaseRTT())
	}
	c.OnAck(3*us, cc.AckSample{NewlyAcked: 4096, RTT: 60 * us, RTTValid: true})
	if c.BaseRTT() != 60*us || c.MaxWnd() != 11250 {
		t.Errorf("after 60 µs: base %v MaxWnd %d, want 60µs 11250", c.BaseRTT(), c.MaxWnd())
	}
	checkWindow(t, c, "cwnd follows MaxWnd down", 11250)
	c.OnNackSample(4*us, NackSample{Size: 4096, Reason: NackOther, RTT: 50 * us, RTTValid: true})
	if c.BaseRTT() != 50*us || c.MaxWnd() != 9375 {
		t.Errorf("after a 50 µs NACK: base %v MaxWnd %d, want 50µs 9375", c.BaseRTT(), c.MaxWnd())
	}
	c.OnAck(5*us, cc.AckSample{NewlyAcked: 4096, RTT: 10 * us, RTTValid: true})
	if c.BaseRTT() != 10*us || c.MaxWnd() != 4096 {
		t.Errorf("after 10 µs: base %v MaxWnd %d, want 10µs and the MTU floor 4096", c.BaseRTT(), c.MaxWnd())
	}
	if st := c.Stats(); st.BaseRTTDrops != 3 || st.AcksNoRTT != 1 {
		t.Errorf("stats %+v", st)
	}
	// Delays count from the new base: the 60 µs sample had none.
	if st := c.Stats(); st.ProportionalAcks == 0 {
		t.Errorf("no proportional increase: %+v", st)
	}
}

// htsim update_delay: EWMA with gain 0.0125; without ECN a delay above tq
// is fed as 0.25·base_rtt.
func TestAvgDelay(t *testing.T) {
	c := mustNew(t, lab(), 0) // tq = base = 80 µs
	want := 0.0
	steps := []struct {
		delay  time.Duration
		ecn    bool
		sample float64 // ns
	}{
		{40 * us, true, 40000},
		{100 * us, false, 20000},  // 0.25 × 80 µs
		{100 * us, true, 100000},  // ECN: the sample itself
		{50 * us, false, 50000},   // below tq
		{80 * us, false, 80000},   // = tq: not above
		{80*us + 1, false, 20000}, // above
		{0, false, 0},
	}
	for i, s := range steps {
		ackAt(c, time.Duration(i+1)*us, 100, s.delay, s.ecn, 0)
		want = 0.0125*s.sample + 0.9875*want
		if !near(c.avgDelay, want, 1e-9) {
			t.Errorf("step %d (delay %v ECN %v): avg %.6f ns, want %.6f", i, s.delay, s.ecn, c.avgDelay, want)
		}
	}
	if c.AvgDelay() != time.Duration(math.Round(want)) {
		t.Errorf("AvgDelay() = %v, want %v", c.AvgDelay(), time.Duration(math.Round(want)))
	}
	// After base_rtt falls to 60 µs the rule feeds 15 µs.
	c.OnAck(10*us, cc.AckSample{NewlyAcked: 100, RTT: 60 * us, RTTValid: true})
	want = 0.9875 * want // the 60 µs sample: delay 0
	ackAt(c, 11*us, 100, 100*us, false, 0)
	want = 0.0125*15000 + 0.9875*want
	if !near(c.avgDelay, want, 1e-9) {
		t.Errorf("after base 60 µs: avg %.6f, want %.6f", c.avgDelay, want)
	}
	// A long run of one delay converges on it.
	for i := range 2000 {
		ackAt(c, 20*us+time.Duration(i)*us, 100, 70*us, true, 0)
	}
	if !near(float64(c.AvgDelay()), float64(70*us), 1) {
		t.Errorf("avg after 2000 samples of 70 µs = %v", c.AvgDelay())
	}
}

// §3.6.13.6 apply_cwnd_penalty and uet.md's example: pend 64, newly 4096,
// cwnd 100 000, inflight 60 000 → 57 952; rc restores.
func TestReceiverPenalty(t *testing.T) {
	c := mustNew(t, ref(100000), 0)
	s := cc.AckSample{NewlyAcked: 4096, RTT: 15 * us, RTTValid: true, InFlight: 60000} // delay 3 µs
	c.OnAckCC(us, s, AckCCState{RcvCwndPend: 64})
	checkWindow(t, c, "uet.md example", 57952)
	if !c.saved || c.savedCwnd != 100000 {
		t.Errorf("saved cwnd %v (%v), want 100000", c.savedCwnd, c.saved)
	}
	st := c.Stats()
	if st.PenaltyAcks != 1 || st.PenaltyBytes != 42048 || st.ProportionalAcks != 0 || c.incBytes != 0 {
		t.Errorf("no increase while limited: stats %+v inc_bytes %v", st, c.incBytes)
	}
	// Saved once; min(cwnd, inflight) − 127·4096 >> 7.
	s.InFlight = 50000
	c.OnAckCC(2*us, s, AckCCState{RcvCwndPend: 200}) // taken as 127
	checkWindow(t, c, "pend 127", 50000-4064)
	if c.savedCwnd != 100000 {
		t.Errorf("saved cwnd %v, want the first 100000", c.savedCwnd)
	}
	// The penalty applies even without an RTT sample.
	s.RTTValid = false
	s.InFlight = 4000
	c.OnAckCC(3*us, s, AckCCState{RcvCwndPend: 64})
	checkWindow(t, c, "floor", 4096)
	// rc without a penalty restores (the increase of this ACK waits for
	// the fulfill adjustment).
	s.RTTValid = true
	c.OnAckCC(4*us, s, AckCCState{RestoreCwnd: true})
	checkWindow(t, c, "restored", 100000)
	if st := c.Stats(); st.Restores != 1 || c.saved {
		t.Errorf("restore: stats %+v saved %v", st, c.saved)
	}
	// rc with nothing saved does nothing.
	c.OnAckCC(5*us, s, AckCCState{RestoreCwnd: true})
	if st := c.Stats(); st.Restores != 1 {
		t.Errorf("second restore counted: %+v", st)
	}
	// An MD still runs while limited (§3.6.13.5: only increases are gated).
	c.avgDelay = float64(24 * us)
	c.OnAckCC(20*us, cc.AckSample{NewlyAcked: 4096, RTT: 36 * us, RTTValid: true, ECN: true, InFlight: 200000},
		AckCCState{RcvCwndPend: 1})
	if st := c.Stats(); st.Decreases != 1 {
		t.Errorf("no MD under a penalty: %+v", st)
	}
}

// §3.6.13.5: an ACK without a valid RTT sample changes nothing but the
// counters and the penalty.
func TestAckWithoutRTT(t *testing.T) {
	c := mustNew(t, ref(100000), 0)
	c.avgDelay = float64(24 * us)
	for i := range 20 {
		c.OnAck(time.Duration(20+i)*us, cc.AckSample{NewlyAcked: 4096, ECN: true, RTTValid: false})
	}
	checkWindow(t, c, "20 ECN ACKs without RTT", 100000)
	if st := c.Stats(); st.AcksNoRTT != 20 || st.Fulfills != 0 || st.Decreases != 0 {
		t.Errorf("stats %+v", st)
	}
	c.OnAck(50*us, cc.AckSample{NewlyAcked: 4096, RTT: -us, RTTValid: true, ECN: true})
	if st := c.Stats(); st.AcksNoRTT != 21 {
		t.Errorf("a negative RTT was used: %+v", st)
	}
}

func TestInterface(t *testing.T) {
	c := mustNew(t, lab(), 5*us)
	if c.NextEvent() != Never {
		t.Errorf("NextEvent = %v, want Never", c.NextEvent())
	}
	if !c.CanSend(10904, 4096) || c.CanSend(10905, 4096) {
		t.Error("CanSend must allow inflight + size ≤ cwnd (15000) exactly")
	}
	// AckRequest: less than an MTU left, or a window under ACK_Gen_Trigger.
	if c.AckRequest(10904, 0) || !c.AckRequest(10905, 0) || !c.AckRequest(0, 16384) {
		t.Error("AckRequest")
	}
	c.Advance(time.Second)
	checkWindow(t, c, "Advance changes nothing", 15000)
	// Time does not run backwards: an ACK stamped before Advance's now is
	// taken at it, so the MD spacing counts from 1 s.
	c.avgDelay = float64(200 * us)
	ackAt(c, 0, 4096, 200*us, true, 0)
	if c.lastDec != time.Second || c.Stats().Decreases != 1 {
		t.Errorf("last_dec_time %v, decreases %d: want 1s, 1", c.lastDec, c.Stats().Decreases)
	}
}

// A base-RTT floor keeps base_rtt, and with it MaxWnd, from following a
// sample below it.
func TestBaseRTTFloor(t *testing.T) {
	p := DefaultParams(units.Gbit, time.Millisecond, 4096)
	p.BaseRTTFloor = time.Millisecond
	c := New(p, 0)
	c.OnAck(time.Millisecond, cc.AckSample{NewlyAcked: 4096, RTT: 50 * time.Microsecond, RTTValid: true})
	if c.BaseRTT() != time.Millisecond || c.MaxWnd() != p.MaxWndBytes() {
		t.Errorf("base_rtt %v MaxWnd %d after a 50 µs sample with a 1 ms floor: want 1ms, %d", c.BaseRTT(), c.MaxWnd(), p.MaxWndBytes())
	}
	p.BaseRTTFloor = 2 * time.Millisecond
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "base_rtt_floor=2ms: must be 0..config_base_rtt (1ms)") {
		t.Errorf("Validate() = %v", err)
	}
}
