package engine

import (
	"testing"
	"time"
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
