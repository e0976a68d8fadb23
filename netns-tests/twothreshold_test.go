package netnstests

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestTwoThresholdUDP sweeps a two-threshold class (seed 001) with ECT(0)
// UDP on real kernel queues: the CE marks follow the RED-like curve from
// T2 bin by bin and none fall below it, and the receiving host sees
// exactly the ECT(1) and CE marks the port counts.
func TestTwoThresholdUDP(t *testing.T) {
	for _, am := range attachModes {
		t.Run(am.name, func(t *testing.T) {
			const rate = 100 * units.Mbit
			cfg := qdisc.DefaultConfig(rate)
			// Bins are 1 MB / 32 = 32 KB: the thresholds fall on bin edges.
			tt := qdisc.TwoThreshold{T1Bytes: 128 * units.KiB, T2Bytes: 384 * units.KiB, T2MaxBytes: 640 * units.KiB, LightMaxP: 0.5, HeavyMaxP: 0.2}
			cfg.Classes[qdisc.ClassRoCE] = qdisc.ClassConfig{Name: "wan", LimitBytes: 1 * units.MiB, ECN: qdisc.ECNTwoThreshold, TwoThreshold: tt}
			d, port, sk, dst := udpPort(t, 1, cfg, am.legacy)

			// As TestWREDCurveUDP: 60 ms at twice the rate fills 750 KB
			// (past T2max), 100 ms off drains it.
			f := flow{tos: tosRoCEECT0, payload: 1400, rate: 2 * rate, on: 60 * time.Millisecond, off: 100 * time.Millisecond, total: 8 * time.Second}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sent, err := f.send(ctx, d.Senders[0], dst)
			if err != nil {
				t.Fatal(err)
			}
			c := settle(t, port).Classes[qdisc.ClassRoCE]
			t.Logf("sent %d, enqueued %d, light (ECT(1)) %d (%.1f%%), heavy (CE) %d (%.1f%%), dropped %d, max backlog %d B",
				sent, c.EnqueuedPackets, c.LightMarked, 100*float64(c.LightMarked)/float64(c.EnqueuedPackets),
				c.HeavyMarked, 100*float64(c.HeavyMarked)/float64(c.EnqueuedPackets), c.DroppedPackets(), c.MaxBacklogBytes)

			// Arrivals dropped at the limit found it full, in the last
			// bin, and got no marking decision: they leave the curve
			// (a sender's burst after a stall reaches the limit).
			curve := c.Curve
			curve.Arrivals[qdisc.CurveBins-1] -= min(c.DroppedLimitPackets, curve.Arrivals[qdisc.CurveBins-1])
			checked := 0
			bin := float64(curve.BinBytes)
			for b := range qdisc.CurveBins {
				n := curve.Arrivals[b]
				if n < 300 {
					continue
				}
				mid := (float64(b) + 0.5) * bin
				want, _ := cfg.Classes[qdisc.ClassRoCE].CEProbability(uint64(mid))
				got := curve.Fraction(b)
				tol := math.Max(4*math.Sqrt(want*(1-want)/float64(n)), 0.02)
				if mid < float64(tt.T2Bytes) {
					tol = 0 // below T2 no CE at all
				}
				t.Logf("bin %2d [%4d, %4d) KB: %5d ECT arrivals, CE %.4f, curve %.4f ± %.4f", b, b*int(bin)/1024, (b+1)*int(bin)/1024, n, got, want, tol)
				if math.Abs(got-want) > tol {
					t.Errorf("bin %d: CE fraction %.4f, curve says %.4f (tolerance %.4f)", b, got, want, tol)
				}
				checked++
			}
			if checked < 15 {
				t.Errorf("only %d bins had enough samples: the queue did not sweep the curves", checked)
			}
			if c.LightMarked == 0 || c.HeavyMarked == 0 || c.HeavyMarked != c.CEMarked() {
				t.Errorf("light %d, heavy %d, CE %d: want both kinds, every CE mark a heavy one", c.LightMarked, c.HeavyMarked, c.CEMarked())
			}
			// The receiver sees the marks the port made: nothing else
			// touches the codepoint on the way.
			if got := sk.received[1].Load(); got < c.LightMarked*99/100 || got > c.LightMarked {
				t.Errorf("receiver socket saw %d ECT(1) datagrams, the port light-marked %d", got, c.LightMarked)
			}
			if got := sk.received[3].Load(); got < c.DequeuedCEPackets*99/100 || got > c.DequeuedCEPackets {
				t.Errorf("receiver socket saw %d CE datagrams, the port dequeued %d", got, c.DequeuedCEPackets)
			}
		})
	}
}
