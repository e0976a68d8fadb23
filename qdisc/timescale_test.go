package qdisc

import (
	"testing"
	"time"

	"github.com/fabriclab/fabriclab/qdisc/units"
)

func TestConfigSlowed(t *testing.T) {
	c := DefaultConfig(500 * units.Mbit)
	c.Classes[ClassRoCE].ECN = ECNCoDel
	c.Classes[ClassRoCE].Target, c.Classes[ClassRoCE].Interval = 500*time.Microsecond, 10*time.Millisecond
	s := c.Slowed(4)
	if s.Rate != 125*units.Mbit || s.Classes[ClassRoCE].Target != 2*time.Millisecond || s.Classes[ClassRoCE].Interval != 40*time.Millisecond {
		t.Errorf("slowed: rate %v, target %v, interval %v", s.Rate, s.Classes[ClassRoCE].Target, s.Classes[ClassRoCE].Interval)
	}
	if s.Classes[ClassRoCE].LimitBytes != c.Classes[ClassRoCE].LimitBytes || s.Classes[ClassRoCE].MinThBytes != c.Classes[ClassRoCE].MinThBytes {
		t.Error("bytes changed")
	}
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
}
