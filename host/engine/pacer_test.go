package engine

import (
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestPortNextWake: a port refused wakes the loop when it has a burst's
// credit, or maxBurstWait's where a burst takes longer to earn, counted
// from an overdraft of up to a packet; never for the next packet alone.
// At 400 Mbit/s that one-packet wake came every 22 µs with a thousand QPs
// queued, and the timer and the send cost more than the packet.
func TestPortNextWake(t *testing.T) {
	for _, c := range []struct {
		name     string
		rate     units.Rate
		depth    int
		spend    int // after draining the bucket: the overdraft
		wantWait time.Duration
	}{
		// 200 µs of 50 MB/s is 10,000 B, under the 17,600-B burst: that
		// plus the 1,100-B overdraft.
		{"400 Mbit/s, overdrawn a packet", 400 * units.Mbit, DefaultPortBurst, 1100, 222 * time.Microsecond},
		{"400 Mbit/s, at zero", 400 * units.Mbit, DefaultPortBurst, 0, 200 * time.Microsecond},
		// A burst takes 14.08 µs at 10 Gbit/s: the burst's credit.
		{"10 Gbit/s", 10 * units.Gbit, DefaultPortBurst, 1100, 14960 * time.Nanosecond},
		// A packet takes longer than maxBurstWait at 10 Mbit/s: the
		// overdraft and 200 µs (250 B) more, then one packet at a time
		// at the rate.
		{"10 Mbit/s", 10 * units.Mbit, DefaultPortBurst, 1100, 1080 * time.Microsecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Second
			p := NewPortLimit(now, c.rate, c.depth, 0)
			p.Spend(c.depth + c.spend)
			if p.Ready() {
				t.Fatal("a drained port is ready")
			}
			got := p.NextWake(now) - now
			if d := got - c.wantWait; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("wakes after %v, want %v", got, c.wantWait)
			}
			// Asked again before it refills: the same wake.
			if again := p.NextWake(now+time.Microsecond) - now; again != got {
				t.Errorf("asked again: %v, want %v", again, got)
			}
			// At the wake the refill makes it ready.
			p.Refill(now + got)
			if !p.Ready() {
				t.Errorf("not ready at its wake (tokens %.0f)", p.b.Tokens())
			}
		})
	}
}
