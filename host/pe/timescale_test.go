package pe

import (
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestConfigSlowed(t *testing.T) {
	c := Config{Mode: RateLimit, LineRate: 150 * units.Mbit, MinRate: 15 * units.Mbit, MinChange: 0.02}
	s := c.Slowed(4)
	want := Config{Mode: RateLimit, LineRate: 37500 * units.Kbit, MinRate: 3750 * units.Kbit, MinChange: 0.02,
		RTT: 40 * time.Millisecond, RerouteHold: 200 * time.Millisecond}
	if s.Mode != want.Mode || s.LineRate != want.LineRate || s.MinRate != want.MinRate || s.MinChange != want.MinChange ||
		s.RTT != want.RTT || s.RerouteHold != want.RerouteHold {
		t.Errorf("Slowed(4) = %+v, want %+v", s, want)
	}
	if got := c.Slowed(1); got.RTT != 0 || got.LineRate != c.LineRate {
		t.Errorf("Slowed(1) changed the config: %+v", got)
	}
}
