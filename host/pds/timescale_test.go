package pds

import (
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/host/rccc"
	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestSlowed(t *testing.T) {
	c := DefaultConfig()
	c.LinkRate, c.BaseRTT = 500*units.Mbit, time.Millisecond
	r := rccc.LabParams(c.LinkRate, c.BaseRTT, 4110)
	c.RCCC = &r
	s := c.Slowed(4)
	if s.LinkRate != 125*units.Mbit || s.BaseRTT != 4*time.Millisecond || s.RTO != 4*c.RTO ||
		s.ProbeTimeout != 4*c.ProbeTimeout || s.IdleTimeout != 4*c.IdleTimeout {
		t.Errorf("slowed %+v", s)
	}
	if s.RCCC.LinkRate != 125*units.Mbit || s.RCCC.ConfigBaseRTT != 4*time.Millisecond || s.RCCC.MaxWndBytes() != r.MaxWndBytes() {
		t.Errorf("rccc %+v: want the line over 4, the RTT times 4, MaxWnd %d B", *s.RCCC, r.MaxWndBytes())
	}
	if c.RCCC.LinkRate != 500*units.Mbit {
		t.Error("Slowed changed the caller's RCCC parameters")
	}
	if s.MTU != c.MTU || s.AckBytes != c.AckBytes {
		t.Error("bytes changed")
	}
}
