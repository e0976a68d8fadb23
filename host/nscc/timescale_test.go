package nscc

import (
	"math"
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// TestSlowed: LabParams slowed by k are LabParams at the slowed line rate
// and base RTT, and a knob set before slowing keeps its place against tq.
func TestSlowed(t *testing.T) {
	const k = units.Timescale(4)
	p := LabParams(500*units.Mbit, time.Millisecond, 4096)
	got := p.Slowed(k)
	want := LabParams(125*units.Mbit, 4*time.Millisecond, 4096)
	if math.Abs(got.AlphaBytesPerSecond-want.AlphaBytesPerSecond) > 1e-9*want.AlphaBytesPerSecond {
		t.Errorf("alpha %g, want %g", got.AlphaBytesPerSecond, want.AlphaBytesPerSecond)
	}
	got.AlphaBytesPerSecond = want.AlphaBytesPerSecond
	if got != want {
		t.Errorf("slowed:\n%+v\nwant\n%+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
	if err := p.Set("target_qdelay", "750us"); err != nil {
		t.Fatal(err)
	}
	if s := p.Slowed(k); s.TargetQDelay != 3*time.Millisecond || s.NoDelay != time.Microsecond || s.MTUBytes != 4096 {
		t.Errorf("slowed knob: tq %v, no_delay %v, mtu %d", s.TargetQDelay, s.NoDelay, s.MTUBytes)
	}
	if p.Slowed(1) != p || p.Slowed(0) != p {
		t.Error("k = 1 changed the parameters")
	}
}
