package dcqcn

import (
	"testing"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

// A slowed profile is the same DCQCN k times slower: rates over k, timers
// times k, the rest as it was, and still valid.
func TestSlowed(t *testing.T) {
	p := LabParams(500 * units.Mbit)
	s := p.Slowed(4)
	if s.LineRate != 125*units.Mbit || s.RPGAIRate != p.RPGAIRate/4 || s.RPGHAIRate != p.RPGHAIRate/4 {
		t.Errorf("rates: line %v, ai %v, hai %v from %v, %v, %v", s.LineRate, s.RPGAIRate, s.RPGHAIRate, p.LineRate, p.RPGAIRate, p.RPGHAIRate)
	}
	if s.RPGTimeReset != 4*p.RPGTimeReset || s.DCETCPRTT != 4*p.DCETCPRTT || s.MinTimeBetweenCNPs != 4*p.MinTimeBetweenCNPs {
		t.Errorf("timers: T %v, K %v, N %v from %v, %v, %v", s.RPGTimeReset, s.DCETCPRTT, s.MinTimeBetweenCNPs, p.RPGTimeReset, p.DCETCPRTT, p.MinTimeBetweenCNPs)
	}
	if s.RPGByteReset != p.RPGByteReset || s.DCETCPG != p.DCETCPG || s.RPGThreshold != p.RPGThreshold {
		t.Errorf("byte counter, g or F changed")
	}
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
	if p.Slowed(1) != p {
		t.Error("timescale 1 changed the profile")
	}
}
