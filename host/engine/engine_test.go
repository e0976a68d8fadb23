package engine

import (
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// arrival turns a datagram's kernel timestamp into the agent's clock,
// bounded by MaxArrivalAge, never later than the read.
func TestArrival(t *testing.T) {
	wall := time.Unix(1_800_000_000, 0)
	now := 5 * time.Second
	for _, c := range []struct {
		rx   time.Time
		want time.Duration
	}{
		{time.Time{}, now}, // no timestamp
		{wall.Add(-300 * time.Microsecond), now - 300*time.Microsecond}, // read 300 µs late
		{wall.Add(time.Millisecond), now},                               // clock stepped back
		{wall.Add(-time.Hour), now - MaxArrivalAge},                     // stepped forward: bounded
	} {
		if got := Arrival(now, wall, c.rx); got != c.want {
			t.Errorf("Arrival(%v, rx %v before the read) = %v, want %v", now, wall.Sub(c.rx), got, c.want)
		}
	}
	if got := Arrival(time.Millisecond, wall, wall.Add(-time.Second)); got != 0 {
		t.Errorf("an arrival before the agent's clock started = %v, want 0", got)
	}
}

// TestDefaultBatchSize: 2 ms of the port's rate in 1500-byte packets,
// 8 to 64; no port limit, 64.
func TestDefaultBatchSize(t *testing.T) {
	for _, c := range []struct {
		rate units.Rate
		want int
	}{
		{0, 64},
		{12500 * units.Kbit, 8},
		{50 * units.Mbit, 8},
		{100 * units.Mbit, 16},
		{200 * units.Mbit, 33},
		{400 * units.Mbit, 64},
		{100 * units.Gbit, 64},
	} {
		if got := DefaultBatchSize(c.rate); got != c.want {
			t.Errorf("DefaultBatchSize(%v) = %d, want %d", c.rate, got, c.want)
		}
	}
}
